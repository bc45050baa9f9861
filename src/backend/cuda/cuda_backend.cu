// cuda: the backend interface on an NVIDIA GPU, and, compiled as
// C++ with PT_CUDA_SIM (cuda_sim_backend.cc), the same kernels on the host
// CPU through the emulator in sim/ (the `cuda-sim` backend).
//
// Memory. Backend pointers are device pointers from cudaMalloc, so the model's
// pointer arithmetic works on them directly. Every transfer and kernel runs on
// the backend's one stream (be->stream, also the stream NCCL collectives are
// ordered on); upload/download/synchronize wait for it.
//
// GEMMs go through gemm() below: cuBLAS under nvcc (fp32 compute, TF32 only
// when be->tf32 is set; bf16 inputs with fp32 accumulation for the packed
// bf16 path), the emulator's host GEMM under PT_CUDA_SIM. Everything else is
// our kernels.
//
// Determinism: one stream, a fixed cuBLAS workspace (cublasSetWorkspace) and
// cuBLAS's default atomics-free mode; no atomics in our kernels: every
// reduction is a fixed tree or a fixed-order loop (embedding and RMSNorm
// weight gradients per column in row order, sums of squares in fixed blocks
// of double partials added in index order). Runs on the same GPU are bitwise
// identical. docs/CUDA.md says what this costs.
//
// Numerics follow cpu-ref (src/backend/cpu_ref.c) operation for operation
// where it is cheap: rstd, silu and the AdamW denominator in double as there,
// the loss in double; the source is compiled without FMA contraction
// (nvcc --fmad=false, the host build's -ffp-contract=off), so elementwise
// kernels give cpu-ref's bits.
#include "backend/cuda/cuda_compat.h"
#ifndef PT_CUDA_SIM
#include <cublas_v2.h>
#include <dlfcn.h>
#endif

extern "C" {
#include "backend/backend.h"
}

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PT_CUDA_SIM
#define PT_CUDA_NAME "cuda-sim"
#define PT_CUDA_CREATE pt_backend_cuda_sim_create
#define PT_CUDA_PRINT_DEVICES pt_cuda_sim_print_devices
#define PT_CUDA_PROBE pt_cuda_sim_probe
#else
#define PT_CUDA_NAME "cuda"
#define PT_CUDA_CREATE pt_backend_cuda_create
#define PT_CUDA_PRINT_DEVICES pt_cuda_print_devices
#define PT_CUDA_PROBE pt_cuda_probe
#endif

extern "C" pt_backend *PT_CUDA_CREATE(const char *suffix);
extern "C" int PT_CUDA_PRINT_DEVICES(FILE *f);
extern "C" int PT_CUDA_PROBE(const char *suffix);

// loop unrolling for nvcc (the host compiler has no `#pragma unroll`)
#if defined(__CUDACC__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

namespace {

constexpr int EW = 256;                        // elementwise block
constexpr int RED = 256;                       // reduction block (power of two)
constexpr int RMS_ROWS = 256;                  // rows per RMSNorm dw partial
constexpr int SS_BLOCK = RED * 16;             // elements per sum-of-squares partial
constexpr int AT = 32;                         // attention tile: query rows and key rows
constexpr int AT_THREADS = 256;                // 8 warps; thread = (rows tid/16 + {0,16}, cols/dims tid%16 + 16k)
constexpr int AT_MAX_D = 256;                  // largest head_dim
constexpr int AT_VARIANTS = 6;                 // attention kernels per op: head_dim 16..256, generic
constexpr size_t XENT_SCRATCH = 256u << 20;    // bytes of one lm_head chunk's logits
constexpr size_t BLAS_WORKSPACE = 32u << 20;   // cuBLAS workspace (fixed: determinism)

// ------------------------------------------------------------ state

struct scratch {
    void *p;
    size_t bytes;
};

struct cuda_state {
    int device;
    cudaStream_t stream;
#ifndef PT_CUDA_SIM
    cublasHandle_t blas;
    void *blas_ws;
#endif
    size_t smem_optin;        // largest dynamic shared memory a block may opt into
    size_t smem_set[3][AT_VARIANTS];  // dynamic smem limit set per attention kernel (fwd, dq, dkv) and variant
    int xent_rows;            // 0: chunk rows from XENT_SCRATCH; else PT_CUDA_XENT_ROWS
    scratch x16, g16, logits, row_loss, partial, total, rowdot, rms_part, bounce, emb_rows;
    double *host_loss;        // the per-row losses, downloaded (host)
    size_t host_loss_n;
    int32_t *host_ids;        // embedding backward (host): the ids [N],
    uint64_t *host_keys;      // their (id << 32 | n) sort keys [N],
    int32_t *host_rows;       // and rows | seg | tok [3N + 1] for the upload
    size_t host_ids_n;        // N the three have room for
};

cuda_state *S(pt_backend *be) { return (cuda_state *)be->impl; }

#ifndef PT_CUDA_SIM
// cuBLAS is opened when a cuda backend starts (dlopen), not linked: a process that merely links libcublas
// (and so libcublasLt, 540 MB) is resident at ~216 MiB before main (measured: an empty program linked with
// -lcublas peaks at 217 MiB RSS, 1 MiB without), and every portatrain process (the CLI, the supervisor,
// each CPU rank) paid that whether it used a GPU or not. The entry points used, by their exported names
// (cublas_v2.h maps cublasCreate to cublasCreate_v2 and so on; cublasGemmEx is also a C++ overload there).
static struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*set_atomics_mode)(cublasHandle_t, cublasAtomicsMode_t);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    const char *(*status_string)(cublasStatus_t);
    cublasStatus_t (*get_property)(libraryPropertyType, int *);
} blas;
static char blas_path[512], blas_error[512];

#define PT_STR2(x) #x
#define PT_STR(x) PT_STR2(x)
// 1 when every entry point resolved (once per process); else 0 with the reason in blas_error. The library:
// $PT_CUBLAS_LIBRARY, else the soname of the cuBLAS major version this was built against (the loader's
// search path), else the library CMake found at build time.
static int blas_load(void) {
    static int state = -1;
    if (state >= 0) return state;
    const char *want = getenv("PT_CUBLAS_LIBRARY");
    const char *soname = "libcublas.so." PT_STR(CUBLAS_VER_MAJOR);
    snprintf(blas_path, sizeof blas_path, "%s", want && *want ? want : soname);
    void *h = dlopen(blas_path, RTLD_NOW | RTLD_LOCAL);
#ifdef PT_CUBLAS_BUILD_LIBRARY
    if (!h && !(want && *want)) {
        snprintf(blas_path, sizeof blas_path, "%s", PT_CUBLAS_BUILD_LIBRARY);
        h = dlopen(blas_path, RTLD_NOW | RTLD_LOCAL);
    }
#endif
    if (!h) {
        snprintf(blas_error, sizeof blas_error, "cannot open cuBLAS (%s): %s; install cuBLAS %d or set "
                 "PT_CUBLAS_LIBRARY to its path", want && *want ? want : soname, dlerror(), CUBLAS_VER_MAJOR);
        return state = 0;
    }
    const struct { void **fn; const char *name; } entry[] = {
        {(void **)&blas.create, "cublasCreate_v2"},
        {(void **)&blas.destroy, "cublasDestroy_v2"},
        {(void **)&blas.set_stream, "cublasSetStream_v2"},
        {(void **)&blas.set_workspace, "cublasSetWorkspace_v2"},
        {(void **)&blas.set_atomics_mode, "cublasSetAtomicsMode"},
        {(void **)&blas.gemm_ex, "cublasGemmEx"},
        {(void **)&blas.status_string, "cublasGetStatusString"},
        {(void **)&blas.get_property, "cublasGetProperty"},
    };
    for (size_t i = 0; i < PT_ARRAY_LEN(entry); i++)
        if (!(*entry[i].fn = dlsym(h, entry[i].name))) {
            snprintf(blas_error, sizeof blas_error, "%s lacks %s (not cuBLAS %d?)", blas_path, entry[i].name,
                     CUBLAS_VER_MAJOR);
            return state = 0;
        }
    return state = 1;
}
#endif

// A failing CUDA call inside a kernel wrapper (which returns void) cannot be
// reported to the caller: one line naming the call, and exit.
void fail(const char *what, const char *why) {
    fprintf(stderr, "portatrain: error: %s: %s failed: %s\n", PT_CUDA_NAME, what, why);
    exit(1);
}
#define CK(call)                                                   \
    do {                                                           \
        cudaError_t err_ = (call);                                 \
        if (err_ != cudaSuccess) fail(#call, cudaGetErrorString(err_)); \
    } while (0)
// after a launch: a bad configuration is reported here, naming the op
void check_launch(const char *name) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) fail(name, cudaGetErrorString(e));
}

// Grows a scratch buffer to at least `bytes` (kept for the backend's life, so
// the training step allocates nothing after its first pass).
void *grow(cuda_state *s, scratch *sc, size_t bytes) {
    if (sc->p && sc->bytes >= bytes) return sc->p;
    if (sc->p) {
        CK(cudaStreamSynchronize(s->stream));  // a queued kernel may still read it
        CK(cudaFree(sc->p));
    }
    sc->p = NULL;
    const size_t n = bytes > 16 ? bytes : 16;
    CK(cudaMalloc(&sc->p, n));
    sc->bytes = n;
    return sc->p;
}

unsigned ew_grid(size_t n) {
    size_t g = (n + EW - 1) / EW;
    return (unsigned)(g < (size_t)1 << 20 ? g : (size_t)1 << 20);  // grid-stride beyond
}
#define EW_LOOP(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// ------------------------------------------------------------ bf16 (bit for bit util/bf16.h)

// Round to nearest even on the bit pattern (no float arithmetic, so no
// flush-to-zero can change it); a NaN stays a quiet NaN.
PT_DEVICE uint32_t bf16_round_bits(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u & 0xffff0000u) | 0x00400000u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u & 0xffff0000u;
}
PT_DEVICE float rb(float f) { return __uint_as_float(bf16_round_bits(__float_as_uint(f))); }

PT_KERNEL void round_bf16_k(float *dst, const float *src, size_t n) {
    EW_LOOP(i, n) dst[i] = rb(src[i]);
}
PT_KERNEL void pack_bf16_k(uint16_t *dst, const float *src, size_t n) {
    EW_LOOP(i, n) dst[i] = (uint16_t)(bf16_round_bits(__float_as_uint(src[i])) >> 16);
}

// ------------------------------------------------------------ block reductions (fixed trees)

// Sum / max over the block (blockDim.x a multiple of 32); every thread gets
// the result. `sh` holds >= 32 floats. Warp butterflies, then the warp
// totals in warp order: the same tree on every run.
PT_DEVICE float block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();  // sh may still be read by a previous reduction
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
PT_DEVICE float block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Double sum over a RED-thread block through shared memory (no double shuffles).
PT_DEVICE double block_sum_d(double v, double *sh) {
    const int t = threadIdx.x;
    __syncthreads();
    sh[t] = v;
    __syncthreads();
    for (int s = RED / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    return sh[0];
}

// ------------------------------------------------------------ embedding

PT_KERNEL void embedding_fwd_k(float *out, const int32_t *ids, const float *wte, int N, int C) {
    EW_LOOP(i, (size_t)N * C) {
        const int32_t id = ids[i / C];
        out[i] = id < 0 ? 0.0f : wte[(size_t)id * C + i % C];
    }
}
// One block per (distinct token u, 128-column chunk), one thread per column:
// the rows of token u (rows[seg[u] .. seg[u+1]), ascending n, from a stable
// sort on the host) add into dwte[tok[u]] one after another, in cpu-ref's
// order and rounding (a float accumulator starting at dwte's value), without
// atomics: distinct tokens write distinct rows.
PT_KERNEL void embedding_bwd_k(float *dwte, const float *dout, const int32_t *rows, const int32_t *seg,
                               const int32_t *tok, int C) {
    const int u = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float *w = dwte + (size_t)tok[u] * C + c;
    float a = *w;
    for (int r = seg[u]; r < seg[u + 1]; r++) a += dout[(size_t)rows[r] * C + c];
    *w = a;
}

// ------------------------------------------------------------ RMSNorm

// One block per row.
PT_KERNEL void rmsnorm_fwd_k(float *out, float *rstd, const float *inp, const float *w, int C, float eps,
                             int bf16) {
    __shared__ float sh[32];
    const size_t row = blockIdx.x;
    const float *x = inp + row * C;
    float ss = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
    ss = block_sum(ss, sh);
    const float r = (float)(1.0 / sqrt((double)(ss / C + eps)));  // as cpu-ref: sqrt and 1/ in double
    if (threadIdx.x == 0) rstd[row] = r;
    float *y = out + row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        y[c] = bf16 ? rb(w[c] * rb(x[c] * r)) : w[c] * (x[c] * r);  // bf16: HF weight * hidden.to(bf16)
}

// dx = r * (g*w - xhat * mean(g*w*xhat)), xhat = x*r; one block per row.
PT_KERNEL void rmsnorm_bwd_dinp_k(float *dinp, const float *dout, const float *inp, const float *w,
                                  const float *rstd, int C) {
    __shared__ float sh[32];
    const size_t row = blockIdx.x;
    const float *x = inp + row * C, *g = dout + row * C;
    const float r = rstd[row];
    float dot = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dot += g[c] * w[c] * (x[c] * r);
    dot = block_sum(dot, sh);
    const float m = dot / C;
    float *dx = dinp + row * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dx[c] += r * (g[c] * w[c] - (x[c] * r) * m);
}
// dw partials: part[p, c] = sum over rows p*RMS_ROWS.. of g * xhat, in row order.
PT_KERNEL void rmsnorm_bwd_dw_part_k(float *part, const float *dout, const float *inp, const float *rstd, int N,
                                     int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, p = blockIdx.y;
    if (c >= C) return;
    const int n1 = PT_MIN(N, (p + 1) * RMS_ROWS);
    float s = 0;
    for (int n = p * RMS_ROWS; n < n1; n++) s += dout[(size_t)n * C + c] * (inp[(size_t)n * C + c] * rstd[n]);
    part[(size_t)p * C + c] = s;
}
PT_KERNEL void rmsnorm_bwd_dw_sum_k(float *dw, const float *part, int P, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0;
    for (int p = 0; p < P; p++) s += part[(size_t)p * C + c];
    dw[c] += s;
}

// ------------------------------------------------------------ RoPE

// One thread per rotation pair (i, i + D/2) of a row of x[B,T,NH,D]: it reads
// both before writing both, so out may alias inp.
PT_KERNEL void rope_k(float *out, const float *inp, const float *cos, const float *sin, int T, int NH, int D,
                      size_t pairs, int backward, int bf16) {
    const int h = D / 2;
    EW_LOOP(p, pairs) {
        const int i = (int)(p % h);
        const size_t row = p / h;
        const int t = (int)((row / NH) % T);
        const float *cs = cos + (size_t)t * D, *sn = sin + (size_t)t * D;
        const size_t base = row * D;
        const float x1 = inp[base + i], x2 = inp[base + i + h];
        float y1, y2;
        if (backward) {  // R^T: dx1 = g1 cos + g2 sin', dx2 = g2 cos' - g1 sin
            y1 = x1 * cs[i] + x2 * sn[i + h];
            y2 = x2 * cs[i + h] - x1 * sn[i];
        } else if (bf16) {  // HF: each product a bf16 tensor, then their bf16 sum
            y1 = rb(rb(x1 * cs[i]) + rb((-x2) * sn[i]));
            y2 = rb(rb(x2 * cs[i + h]) + rb(x1 * sn[i + h]));
        } else {
            y1 = x1 * cs[i] + (-x2) * sn[i];
            y2 = x2 * cs[i + h] + x1 * sn[i + h];
        }
        out[base + i] = y1;
        out[base + i + h] = y2;
    }
}

// ------------------------------------------------------------ attention (flash style)
//
// Tiles of AT query rows x AT key rows in shared memory, rows padded to D+1
// floats (conflict-free column reads). The forward keeps the output rows in
// registers with an online softmax and saves logsumexp per row; the backward
// recomputes probabilities from it: one kernel for dq (per query tile), one
// for dk/dv (per key tile, looping over the query heads of its KV head, so
// GQA needs no K/V copies and no atomics).
//
// Register tiling: thread (tr = tid/16, tc = tid%16) owns rows tr and tr+16
// of every 32x32 tile product. Scores S = Q K^T (and dP = dO V^T): the 2x2
// block (tr, tr+16) x (tc, tc+16), two Q and two K values loaded per d for
// four FMAs. Row products (P V, dS K, dS^T Q, P^T dO): rows tr, tr+16 and
// dims tc + 16k, k < D/16: per j two P values and D/16 V values for D/8 FMAs.
// Every sum runs over its index in ascending order with fmaf (fused whether
// or not the build has --fmad=false; the emulator's std::fmaf gives the same
// bits), so results do not depend on the thread mapping.
// The kernels are templated on the head dim DT (16, 32, 64, 128, 256: sized
// accumulators, no predicates, unrolled loops); DT = 0 is the generic kernel
// for any other D <= AT_MAX_D (runtime D, predicated).
//
// Document masking (backend.h): pos != NULL gives each query row t a first
// key lo_t = t - pos[b,t], kept per tile in shared memory (lo_s); keys before
// it are masked like keys after t, and key tiles that no row of the query
// tile sees are skipped. Without pos lo_t = 0 and nothing is skipped.

constexpr int AT_HALF = AT / 2;   // the row/column stride of a thread's 2x2 score block
constexpr int AT_NPER = AT_MAX_D / AT_HALF;  // dims per thread per row, generic kernel

template <int DT>
struct att_dims {
    static constexpr int NPER = DT ? (DT + AT_HALF - 1) / AT_HALF : AT_NPER;
    static constexpr bool EXACT = DT > 0 && DT % AT_HALF == 0;  // every d = tc + 16k < D
};

// (the last AT slots of each hold lo_s: int32, the size of a float)
size_t att_fwd_smem(int D) { return sizeof(float) * (3 * AT * (D + 1) + AT * (AT + 1) + 4 * AT); }
size_t att_dq_smem(int D) { return sizeof(float) * (4 * AT * (D + 1) + AT * (AT + 1) + 3 * AT); }
size_t att_dkv_smem(int D) { return sizeof(float) * (4 * AT * (D + 1) + 2 * AT * (AT + 1) + 3 * AT); }

// lo_s[i] = first key of query row t0+i (rows past T: T, so they never lower
// a minimum); called by threads tid < AT.
PT_DEVICE void load_lo(int *lo_s, const int *pos, int b, int t0, int T, int tid) {
    const int t = t0 + tid;
    lo_s[tid] = t >= T ? T : pos ? t - pos[(size_t)b * T + t] : 0;
}

// The smallest first key over a query tile's rows (lo_s filled and synced).
PT_DEVICE int tile_lo_min(const int *lo_s) {
    int lo = lo_s[0];
    for (int i = 1; i < AT; i++) lo = PT_MIN(lo, lo_s[i]);
    return lo;
}

// rows [r0, r0+AT) of x[B,T,NH,D] for (b, head) into tile[AT][D+1], zeros past T
template <int DT>
PT_DEVICE void load_tile(float *tile, const float *x, int b, int r0, int T, int NH, int head, int Drt) {
    const int D = DT ? DT : Drt, LD = D + 1;
    for (int e = threadIdx.x; e < AT * D; e += blockDim.x) {
        const int i = e / D, d = e % D, t = r0 + i;
        tile[i * LD + d] = t < T ? x[(((size_t)b * T + t) * NH + head) * D + d] : 0.0f;
    }
}

// The 2x2 block of A B^T for rows (tr, tr+16) of A and (tc, tc+16) of B, both
// [AT][LD] tiles: s[a][c] = sum over d ascending of A[tr+16a][d] * B[tc+16c][d].
template <int DT>
PT_DEVICE void dot_2x2(float s[2][2], const float *A, const float *B, int tr, int tc, int Drt) {
    const int D = DT ? DT : Drt, LD = D + 1;
    const float *a0 = A + tr * LD, *a1 = a0 + AT_HALF * LD, *b0 = B + tc * LD, *b1 = b0 + AT_HALF * LD;
    float s00 = 0, s01 = 0, s10 = 0, s11 = 0;
#if defined(__CUDACC__)
#pragma unroll 8
#endif
    for (int d = 0; d < D; d++) {
        const float x0 = a0[d], x1 = a1[d], y0 = b0[d], y1 = b1[d];
        s00 = fmaf(x0, y0, s00);
        s01 = fmaf(x0, y1, s01);
        s10 = fmaf(x1, y0, s10);
        s11 = fmaf(x1, y1, s11);
    }
    s[0][0] = s00;
    s[0][1] = s01;
    s[1][0] = s10;
    s[1][1] = s11;
}

// acc[a][k] += sum over j ascending of P[tr+16a][j] * V[j][tc+16k] (P: [AT][SL]
// with row stride ps_r and column stride ps_c, so a transposed P reads P^T).
template <int DT>
PT_DEVICE void rows_times_tile(float acc[2][att_dims<DT>::NPER], const float *P, int ps_r, int ps_c, const float *V,
                               int tr, int tc, int Drt) {
    constexpr int NPER = att_dims<DT>::NPER;
    const int D = DT ? DT : Drt, LD = D + 1;
    const float *p0 = P + tr * ps_r, *p1 = P + (tr + AT_HALF) * ps_r;
    for (int j = 0; j < AT; j++) {
        const float w0 = p0[j * ps_c], w1 = p1[j * ps_c];
        const float *vr = V + j * LD + tc;
UNROLL
        for (int k = 0; k < NPER; k++) {
            if (att_dims<DT>::EXACT || tc + AT_HALF * k < D) {
                const float x = vr[AT_HALF * k];
                acc[0][k] = fmaf(w0, x, acc[0][k]);
                acc[1][k] = fmaf(w1, x, acc[1][k]);
            }
        }
    }
}

template <int DT>
PT_KERNEL void __launch_bounds__(AT_THREADS)
    attn_fwd_k(float *out, float *lse, const float *q, const float *k, const float *v, const int *pos, int T, int H,
               int KV, int Drt, float scale) {
    constexpr int NPER = att_dims<DT>::NPER;
    PT_DYN_SMEM(float, smem);
    const int D = DT ? DT : Drt, LD = D + 1, SL = AT + 1;
    float *Qs = smem, *Ks = Qs + AT * LD, *Vs = Ks + AT * LD, *Ss = Vs + AT * LD;
    float *mrow = Ss + AT * SL, *lrow = mrow + AT, *arow = lrow + AT;
    int *lo_s = (int *)(arow + AT);
    const int ntiles = (T + AT - 1) / AT;
    const int tile = blockIdx.x % ntiles, bh = blockIdx.x / ntiles, b = bh / H, h = bh % H;
    const int kvh = h / (H / KV), t0 = tile * AT, tid = threadIdx.x;
    const int lane = tid % 32, warp = tid / 32, tr = tid / AT_HALF, tc = tid % AT_HALF;
    load_tile<DT>(Qs, q, b, t0, T, H, h, D);
    if (tid < AT) {
        mrow[tid] = -INFINITY;
        lrow[tid] = 0;
        load_lo(lo_s, pos, b, t0, T, tid);
    }
    __syncthreads();
    float acc[2][NPER];
UNROLL
    for (int kk = 0; kk < NPER; kk++) acc[0][kk] = acc[1][kk] = 0;
    const int kend = PT_MIN(T, t0 + AT);  // causal: keys 0 .. kend-1
    for (int s0 = tile_lo_min(lo_s) / AT * AT; s0 < kend; s0 += AT) {
        __syncthreads();  // the previous tile is consumed
        load_tile<DT>(Ks, k, b, s0, T, KV, kvh, D);
        load_tile<DT>(Vs, v, b, s0, T, KV, kvh, D);
        __syncthreads();
        float sc[2][2];
        dot_2x2<DT>(sc, Qs, Ks, tr, tc, D);
UNROLL
        for (int a = 0; a < 2; a++)
UNROLL
            for (int c = 0; c < 2; c++) {
                const int i = tr + AT_HALF * a, j = tc + AT_HALF * c, t = t0 + i, s = s0 + j;
                Ss[i * SL + j] = (t < T && s <= t && s >= lo_s[i]) ? sc[a][c] * scale : -INFINITY;
            }
        __syncthreads();
        // online softmax: warp w owns rows 4w..4w+3, lanes are the tile's keys
        for (int rr = 0; rr < AT / 8; rr++) {
            const int i = warp * (AT / 8) + rr;
            const float sv = Ss[i * SL + lane];
            float mx = sv;
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float m_old = mrow[i], m_new = fmaxf(m_old, mx);
            const float p = sv == -INFINITY ? 0.0f : expf(sv - m_new);
            float ps = p;
            for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
            Ss[i * SL + lane] = p;
            __syncwarp(0xffffffffu);  // every lane has read mrow[i] before lane 0 updates it
            if (lane == 0) {
                const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
                lrow[i] = lrow[i] * alpha + ps;
                mrow[i] = m_new;
                arow[i] = alpha;
            }
        }
        __syncthreads();
        const float al0 = arow[tr], al1 = arow[tr + AT_HALF];
UNROLL
        for (int kk = 0; kk < NPER; kk++) {
            acc[0][kk] *= al0;
            acc[1][kk] *= al1;
        }
        rows_times_tile<DT>(acc, Ss, SL, 1, Vs, tr, tc, D);
    }
    __syncthreads();
UNROLL
    for (int a = 0; a < 2; a++) {
        const int i = tr + AT_HALF * a, t = t0 + i;
        if (t < T) {
            const float l = lrow[i];
            float *o = out + (((size_t)b * T + t) * H + h) * D;
UNROLL
            for (int kk = 0; kk < NPER; kk++) {
                const int d = tc + AT_HALF * kk;
                if (att_dims<DT>::EXACT || d < D) o[d] = acc[a][kk] / l;
            }
        }
    }
    if (tid < AT && t0 + tid < T) lse[(size_t)bh * T + t0 + tid] = mrow[tid] + logf(lrow[tid]);
}

// rowdot[b,h,t] = dout . out over the row (the softmax backward's sum p*dp):
// one warp per row, lanes over d (coalesced), then a fixed xor tree.
PT_KERNEL void attn_rowdot_k(float *rowdot, const float *dout, const float *out, int B, int T, int H, int D) {
    const size_t rows = (size_t)B * H * T, nwarps = (size_t)gridDim.x * (blockDim.x / 32);
    const int lane = threadIdx.x % 32;
    for (size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += nwarps) {
        const int t = (int)(r % T), h = (int)((r / T) % H), b = (int)(r / ((size_t)T * H));
        const size_t base = (((size_t)b * T + t) * H + h) * D;
        float s = 0;
        for (int d = lane; d < D; d += 32) s += dout[base + d] * out[base + d];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) rowdot[r] = s;
    }
}

// dS[i][j] = p (dp - rowdot_i) * scale for the tile pair; p = exp(s - lse_i).
// Qs/dOs hold query rows t0.., Ks/Vs key rows s0..; returns via the arrays.
template <int DT>
PT_DEVICE void attn_tile_grads(float *Ps, float *dSs, const float *Qs, const float *dOs, const float *Ks,
                               const float *Vs, const float *lse_s, const float *rd_s, const int *lo_s, int t0,
                               int s0, int T, int D, float scale) {
    const int SL = AT + 1, tr = threadIdx.x / AT_HALF, tc = threadIdx.x % AT_HALF;
    float sc[2][2], dp[2][2];
    dot_2x2<DT>(sc, Qs, Ks, tr, tc, D);
    dot_2x2<DT>(dp, dOs, Vs, tr, tc, D);
UNROLL
    for (int a = 0; a < 2; a++)
UNROLL
        for (int c = 0; c < 2; c++) {
            const int i = tr + AT_HALF * a, j = tc + AT_HALF * c, t = t0 + i, s = s0 + j;
            float p = 0, ds = 0;
            if (t < T && s <= t && s >= lo_s[i]) {
                p = expf(sc[a][c] * scale - lse_s[i]);
                ds = p * (dp[a][c] - rd_s[i]) * scale;
            }
            if (Ps) Ps[i * SL + j] = p;
            dSs[i * SL + j] = ds;
        }
}

template <int DT>
PT_KERNEL void __launch_bounds__(AT_THREADS)
    attn_bwd_dq_k(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse,
                  const float *rowdot, const int *pos, int T, int H, int KV, int Drt, float scale) {
    constexpr int NPER = att_dims<DT>::NPER;
    PT_DYN_SMEM(float, smem);
    const int D = DT ? DT : Drt, LD = D + 1, SL = AT + 1;
    float *Qs = smem, *dOs = Qs + AT * LD, *Ks = dOs + AT * LD, *Vs = Ks + AT * LD, *dSs = Vs + AT * LD;
    float *lse_s = dSs + AT * SL, *rd_s = lse_s + AT;
    int *lo_s = (int *)(rd_s + AT);
    const int ntiles = (T + AT - 1) / AT;
    const int tile = blockIdx.x % ntiles, bh = blockIdx.x / ntiles, b = bh / H, h = bh % H;
    const int kvh = h / (H / KV), t0 = tile * AT, tid = threadIdx.x, tr = tid / AT_HALF, tc = tid % AT_HALF;
    load_tile<DT>(Qs, q, b, t0, T, H, h, D);
    load_tile<DT>(dOs, dout, b, t0, T, H, h, D);
    if (tid < AT) {
        const int t = t0 + tid;
        lse_s[tid] = t < T ? lse[(size_t)bh * T + t] : 0.0f;
        rd_s[tid] = t < T ? rowdot[(size_t)bh * T + t] : 0.0f;
        load_lo(lo_s, pos, b, t0, T, tid);
    }
    __syncthreads();
    float acc[2][NPER];
UNROLL
    for (int kk = 0; kk < NPER; kk++) acc[0][kk] = acc[1][kk] = 0;
    const int kend = PT_MIN(T, t0 + AT);
    for (int s0 = tile_lo_min(lo_s) / AT * AT; s0 < kend; s0 += AT) {
        __syncthreads();
        load_tile<DT>(Ks, k, b, s0, T, KV, kvh, D);
        load_tile<DT>(Vs, v, b, s0, T, KV, kvh, D);
        __syncthreads();
        attn_tile_grads<DT>(NULL, dSs, Qs, dOs, Ks, Vs, lse_s, rd_s, lo_s, t0, s0, T, D, scale);
        __syncthreads();
        rows_times_tile<DT>(acc, dSs, SL, 1, Ks, tr, tc, D);
    }
UNROLL
    for (int a = 0; a < 2; a++) {
        const int t = t0 + tr + AT_HALF * a;
        if (t < T) {
            float *o = dq + (((size_t)b * T + t) * H + h) * D;
UNROLL
            for (int kk = 0; kk < NPER; kk++) {
                const int d = tc + AT_HALF * kk;
                if (att_dims<DT>::EXACT || d < D) o[d] = acc[a][kk];
            }
        }
    }
}

// One block per (b, KV head, key tile): the query heads of the group in
// order, each over the query tiles at or after the key tile (causal).
template <int DT>
PT_KERNEL void __launch_bounds__(AT_THREADS)
    attn_bwd_dkv_k(float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
                   const float *lse, const float *rowdot, const int *pos, int T, int H, int KV, int Drt,
                   float scale) {
    constexpr int NPER = att_dims<DT>::NPER;
    PT_DYN_SMEM(float, smem);
    const int D = DT ? DT : Drt, LD = D + 1, SL = AT + 1;
    float *Ks = smem, *Vs = Ks + AT * LD, *Qs = Vs + AT * LD, *dOs = Qs + AT * LD, *Ps = dOs + AT * LD;
    float *dSs = Ps + AT * SL, *lse_s = dSs + AT * SL, *rd_s = lse_s + AT;
    int *lo_s = (int *)(rd_s + AT);
    const int ntiles = (T + AT - 1) / AT;
    const int tile = blockIdx.x % ntiles, bkv = blockIdx.x / ntiles, b = bkv / KV, kvh = bkv % KV;
    const int g = H / KV, s0 = tile * AT, tid = threadIdx.x, tr = tid / AT_HALF, tc = tid % AT_HALF;
    load_tile<DT>(Ks, k, b, s0, T, KV, kvh, D);
    load_tile<DT>(Vs, v, b, s0, T, KV, kvh, D);
    float ak[2][NPER], av[2][NPER];
UNROLL
    for (int kk = 0; kk < NPER; kk++) ak[0][kk] = ak[1][kk] = av[0][kk] = av[1][kk] = 0;
    for (int h = kvh * g; h < (kvh + 1) * g; h++) {
        const size_t bh = (size_t)b * H + h;
        for (int t0 = s0; t0 < T; t0 += AT) {
            __syncthreads();
            load_tile<DT>(Qs, q, b, t0, T, H, h, D);
            load_tile<DT>(dOs, dout, b, t0, T, H, h, D);
            if (tid < AT) {
                const int t = t0 + tid;
                lse_s[tid] = t < T ? lse[bh * T + t] : 0.0f;
                rd_s[tid] = t < T ? rowdot[bh * T + t] : 0.0f;
                load_lo(lo_s, pos, b, t0, T, tid);
            }
            __syncthreads();
            if (pos && tile_lo_min(lo_s) >= s0 + AT) continue;  // no row of the query tile sees this key tile
            attn_tile_grads<DT>(Ps, dSs, Qs, dOs, Ks, Vs, lse_s, rd_s, lo_s, t0, s0, T, D, scale);
            __syncthreads();
            // key rows tr, tr+16: dk += dS^T Q, dv += P^T dO (column tr of dS / P)
            rows_times_tile<DT>(ak, dSs, 1, SL, Qs, tr, tc, D);
            rows_times_tile<DT>(av, Ps, 1, SL, dOs, tr, tc, D);
        }
    }
UNROLL
    for (int a = 0; a < 2; a++) {
        const int s = s0 + tr + AT_HALF * a;
        if (s < T) {
            const size_t base = (((size_t)b * T + s) * KV + kvh) * D;
UNROLL
            for (int kk = 0; kk < NPER; kk++) {
                const int d = tc + AT_HALF * kk;
                if (att_dims<DT>::EXACT || d < D) {
                    dk[base + d] = ak[a][kk];
                    dv[base + d] = av[a][kk];
                }
            }
        }
    }
}

// ------------------------------------------------------------ mixture of experts
// backend.h's "mixture of experts" contracts, one thread per token (route, its backward) or per element
// (gather, combine and their backwards), each output in cpu-ref's order: no atomics, so the results do not
// depend on the launch shape.

PT_KERNEL void moe_route_k(float *probs, int32_t *sel, float *topw, const float *logits, int N, int E, int K,
                           int norm) {
    EW_LOOP(n, (size_t)N) {
        const float *z = logits + n * E;
        float *p = probs + n * E, *w = topw + n * K;
        int32_t *s = sel + n * K;
        float mx = z[0], sum = 0.0f, tot = 0.0f;
        for (int e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
        for (int e = 0; e < E; e++) sum += p[e] = (float)exp((double)(z[e] - mx));
        for (int e = 0; e < E; e++) p[e] /= sum;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= s[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;  // strict: a tie keeps the lower index
            }
            s[j] = best;
            w[j] = p[best];
            tot += w[j];
        }
        if (norm)
            for (int j = 0; j < K; j++) w[j] /= tot;
    }
}

PT_KERNEL void moe_route_bwd_k(float *dlogits, const double *dtopw, const double *dprob, const float *probs,
                               const int32_t *sel, const float *topw, int N, int E, int K, int norm) {
    EW_LOOP(n, (size_t)N) {
        const float *p = probs + n * E, *w = topw + n * K;
        const int32_t *s = sel + n * K;
        const double *dw = dtopw + n * K;
        double tot = 0, wdw = 0, pdp = 0;
        for (int j = 0; j < K; j++) tot += p[s[j]];
        for (int j = 0; j < K; j++) wdw += dw[j] * (double)w[j];
        for (int pass = 0; pass < 2; pass++)
            for (int e = 0; e < E; e++) {
                double dp = dprob ? dprob[e] : 0.0;
                for (int j = 0; j < K; j++)
                    if (s[j] == e) dp += norm ? (dw[j] - wdw) / tot : dw[j];
                if (pass == 0) pdp += (double)p[e] * dp;
                else dlogits[n * E + e] = (float)((double)p[e] * (dp - pdp));
            }
    }
}

PT_KERNEL void moe_gather_k(float *out, const float *inp, const int32_t *idx, int R, int C) {
    EW_LOOP(i, (size_t)R * C) out[i] = inp[(size_t)idx[i / C] * C + i % C];
}

PT_KERNEL void moe_gather_bwd_k(float *dinp, const float *drows, const int32_t *tok_rows, int N, int K, int C,
                                int bf16) {
    EW_LOOP(i, (size_t)N * C) {
        const size_t n = i / C, c = i % C;
        float d = 0.0f;
        if (bf16)  // autograd's bf16 sum, the highest expert first
            for (int k = K - 1; k >= 0; k--) d = rb(d + drows[(size_t)tok_rows[n * K + k] * C + c]);
        else
            for (int k = 0; k < K; k++) d += drows[(size_t)tok_rows[n * K + k] * C + c];
        dinp[i] = d;
    }
}

PT_KERNEL void moe_combine_k(float *out, const float *rows, const float *topw, const int32_t *row_w,
                             const int32_t *tok_rows, int N, int K, int C, int bf16) {
    EW_LOOP(i, (size_t)N * C) {
        const size_t n = i / C, c = i % C;
        float o = 0.0f;
        for (int k = 0; k < K; k++) {
            const int r = tok_rows[n * K + k];
            const float scaled = rows[(size_t)r * C + c] * topw[row_w[r]];
            o = bf16 ? rb(o + rb(scaled)) : o + scaled;  // bf16: HF's index_add_ into a bf16 tensor
        }
        out[i] = o;
    }
}

PT_KERNEL void moe_combine_bwd_k(float *drows, double *dtopw, const float *dout, const float *rows,
                                 const float *topw, const int32_t *row_w, int R, int K, int C, int bf16) {
    EW_LOOP(r, (size_t)R) {
        const int wi = row_w[r];
        const float w = topw[wi], *g = dout + (size_t)(wi / K) * C, *v = rows + r * C;
        float *d = drows + r * C;
        double acc = 0;
        for (int i = 0; i < C; i++) {
            d[i] = bf16 ? rb(g[i] * w) : g[i] * w;
            acc += bf16 ? (double)rb(g[i] * v[i]) : (double)g[i] * v[i];
        }
        dtopw[wi] = bf16 ? (double)rb((float)acc) : acc;
    }
}

// ------------------------------------------------------------ SwiGLU, add, scale

// silu as cpu-ref computes it: x / (1 + exp(-x)) in double, rounded once.
PT_DEVICE float silu(float x) { return (float)(x / (1.0 + exp(-(double)x))); }

PT_KERNEL void swiglu_fwd_k(float *out, const float *gate, const float *up, size_t n, int bf16) {
    EW_LOOP(i, n) out[i] = bf16 ? rb(rb(silu(gate[i])) * up[i]) : silu(gate[i]) * up[i];
}
PT_KERNEL void swiglu_bwd_k(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                            size_t n) {
    EW_LOOP(i, n) {
        const float x = gate[i];
        const float sg = (float)(1.0 / (1.0 + exp(-(double)x)));
        const float s = x * sg;
        const float g = dout[i], u = up[i];  // read before writing: dgate/dup may alias dout
        dup[i] = g * s;
        dgate[i] = g * u * (sg * (1 + x * (1 - sg)));
    }
}
PT_KERNEL void add_k(float *out, const float *a, const float *b, size_t n) {
    EW_LOOP(i, n) out[i] = a[i] + b[i];
}
PT_KERNEL void scale_k(float *x, float s, size_t n) {
    EW_LOOP(i, n) x[i] *= s;
}

// ------------------------------------------------------------ cross-entropy rows

// One block per row of a chunk's logits l[V] (row n of the batch): bf16
// rounding under casts, the loss in double (row_loss[n]) and, with grad, the
// row's d(loss)*scale in place of the logits. As cpu-ref row for row.
PT_KERNEL void xent_rows_k(float *logits, int V, const int32_t *targets, double *row_loss, int n0, float scale,
                           int grad, int bf16) {
    __shared__ float shf[32];
    __shared__ double shd[RED];
    const int r = blockIdx.x, n = n0 + r, tid = threadIdx.x;
    float *l = logits + (size_t)r * V;
    const int32_t tg = targets[n];
    if (bf16) {  // bf16 logits, then HF's logits.float() loss
        for (int j = tid; j < V; j += blockDim.x) l[j] = rb(l[j]);
        __syncthreads();
    }
    if (tg < 0) {  // ignored row (-100): no loss, no gradient
        for (int j = tid; j < V; j += blockDim.x) l[j] = 0;
        if (tid == 0) row_loss[n] = 0;
        return;
    }
    const float lt = l[tg];
    float mx = -INFINITY;
    for (int j = tid; j < V; j += blockDim.x) mx = fmaxf(mx, l[j]);
    mx = block_max(mx, shf);
    double se = 0;
    for (int j = tid; j < V; j += blockDim.x) se += exp((double)(l[j] - mx));
    se = block_sum_d(se, shd);
    const double lse = (double)mx + log(se);
    if (tid == 0) row_loss[n] = lse - (double)lt;
    if (!grad) return;
    for (int j = tid; j < V; j += blockDim.x) {
        float gj = (float)exp((double)l[j] - lse) * scale;
        if (j == tg) gj -= scale;
        l[j] = bf16 ? rb(gj) : gj;  // bf16: the gradient flows back through .float()
    }
}

// ------------------------------------------------------------ optimizer

// partial[b] = sum of squares of g[b*SS_BLOCK ..) in double, a fixed tree
PT_KERNEL void sumsq_part_k(double *partial, const float *g, size_t n) {
    __shared__ double sh[RED];
    const size_t base = (size_t)blockIdx.x * SS_BLOCK;
    double s = 0;
    for (int k = 0; k < SS_BLOCK / RED; k++) {
        const size_t i = base + threadIdx.x + (size_t)k * RED;
        if (i < n) s += (double)g[i] * (double)g[i];
    }
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
// out[0] = sum of partial[0..np), one block: strided per-thread sums, then the tree
PT_KERNEL void sum_doubles_k(double *out, const double *partial, size_t np) {
    __shared__ double sh[RED];
    double s = 0;
    for (size_t i = threadIdx.x; i < np; i += RED) s += partial[i];
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) out[0] = s;
}

// PyTorch AdamW, the operation order and types of cpu-ref (sqrt and the
// denominator in double there, since sqrt() takes a double).
PT_KERNEL void adamw_k(float *p, const float *g, float *m, float *v, size_t n, float decay, float w1, float b2,
                       float w2, float step_size, float bc2_sqrt, float eps) {
    EW_LOOP(i, n) {
        const float gi = g[i];
        float pi = p[i] * decay;
        const float mi = m[i] + w1 * (gi - m[i]);
        const float vi = v[i] * b2 + w2 * (gi * gi);
        const float denom = (float)(sqrt((double)vi) / (double)bc2_sqrt + (double)eps);
        pi += -step_size * (mi / denom);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

// ------------------------------------------------------------ GEMM

// C[m,n] = alpha * op(A) op(B) + beta * C in cuBLAS's column-major terms
// (beta == 0: C not read). bf16: A and B are bf16 bit patterns (uint16_t),
// fp32 accumulation; else fp32, on TF32 tensor cores when be->tf32.
void gemm(pt_backend *be, bool ta, bool tb, int m, int n, int k, const void *A, int lda, const void *B, int ldb,
          float beta, float *C, int ldc, bool bf16) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {  // empty sum: C = beta * C; our callers have contiguous C (ldc == m)
        if (beta == 0.0f) CK(cudaMemsetAsync(C, 0, sizeof(float) * (size_t)m * n, S(be)->stream));
        return;
    }
    const float alpha = 1.0f;
#ifdef PT_CUDA_SIM
    if (bf16)
        pt_sim_gemm_bf16(ta, tb, m, n, k, alpha, (const uint16_t *)A, lda, (const uint16_t *)B, ldb, beta, C, ldc);
    else
        pt_sim_gemm_f32(ta, tb, m, n, k, alpha, (const float *)A, lda, (const float *)B, ldb, beta, C, ldc, be->tf32);
#else
    const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t ct = !bf16 && be->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t st = blas.gemm_ex(S(be)->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m,
                                     n, k, &alpha, A, in, lda, B, in, ldb, &beta, C, CUDA_R_32F, ldc, ct,
                                     CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) fail("cublasGemmEx", blas.status_string(st));
#endif
}

// Row-major products of the backend contract, as column-major GEMMs.
// out[N,OC] = inp[N,C] @ w[OC,C]^T
void mm_fwd(pt_backend *be, float *out, const void *inp, const void *w, int N, int C, int OC, bool bf16) {
    gemm(be, true, false, OC, N, C, w, C, inp, C, 0.0f, out, OC, bf16);
}
// dinp[N,C] (+)= dout[N,OC] @ w[OC,C]
void mm_dinp(pt_backend *be, float *dinp, const void *dout, const void *w, int N, int C, int OC, float beta,
             bool bf16) {
    gemm(be, false, false, C, N, OC, w, C, dout, OC, beta, dinp, C, bf16);
}
// dw[OC,C] += dout[N,OC]^T @ inp[N,C]
void mm_dw(pt_backend *be, float *dw, const void *dout, const void *inp, int N, int C, int OC, bool bf16) {
    gemm(be, false, true, C, OC, N, inp, C, dout, OC, 1.0f, dw, C, bf16);
}

// ------------------------------------------------------------ memory

// The memory entry points make the backend's device current first, so a
// backend may be used from a host thread other than the one that created it
// (the CUDA current device is per host thread). Kernel wrappers do not: a
// step's ops run on the thread that allocated its tensors.
void set_dev(pt_backend *be) { CK(cudaSetDevice(S(be)->device)); }

void *cu_alloc(pt_backend *be, size_t bytes) {
    set_dev(be);
    void *p = NULL;
    const size_t n = bytes ? bytes : 16;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        fprintf(stderr, "portatrain: error: %s: cannot allocate %zu bytes of device memory: %s\n", PT_CUDA_NAME, n,
                cudaGetErrorString(e));
        exit(1);
    }
    CK(cudaMemsetAsync(p, 0, n, S(be)->stream));
    return p;
}
void cu_free(pt_backend *be, void *p) {
    if (!p) return;
    set_dev(be);
    CK(cudaStreamSynchronize(S(be)->stream));
    CK(cudaFree(p));
}
void cu_upload(pt_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    set_dev(be);
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, S(be)->stream));
    CK(cudaStreamSynchronize(S(be)->stream));  // the host buffer may be reused on return
}
void cu_download(pt_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    set_dev(be);
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S(be)->stream));
    CK(cudaStreamSynchronize(S(be)->stream));
}
void cu_copy(pt_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    set_dev(be);
    cuda_state *s = S(be);
    const char *d = (const char *)dst, *sr = (const char *)src;
    if (d < sr + bytes && sr < d + bytes) {  // overlap (memmove semantics): through a scratch buffer
        void *tmp = grow(s, &s->bounce, bytes);
        CK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, s->stream));
        src = tmp;
    }
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s->stream));
}
void cu_zero(pt_backend *be, void *dst, size_t bytes) {
    if (!bytes) return;
    set_dev(be);
    CK(cudaMemsetAsync(dst, 0, bytes, S(be)->stream));
}
void cu_sync(pt_backend *be) {
    set_dev(be);
    CK(cudaStreamSynchronize(S(be)->stream));
}

// ------------------------------------------------------------ kernel wrappers

void cu_embedding_forward(pt_backend *be, float *out, const int32_t *ids, const float *wte, int N, int C) {
    const size_t n = (size_t)N * C;
    if (!n) return;
    PT_LAUNCH(embedding_fwd_k, ew_grid(n), EW, 0, S(be)->stream, out, ids, wte, N, C);
    check_launch("embedding_forward");
}
// The ids are downloaded (N int32s; the stream is synchronised there, at the
// end of the backward pass) and the rows sorted stably by id on the host:
// rows[] (ids < 0 left out), seg[] (U + 1 offsets into rows) and tok[] (the
// U distinct ids, ascending) go up in one upload for embedding_bwd_k.
void cu_embedding_backward(pt_backend *be, float *dwte, const float *dout, const int32_t *ids, int N, int C) {
    if (N <= 0 || C <= 0) return;
    cuda_state *s = S(be);
    if (s->host_ids_n < (size_t)N) {
        s->host_ids = (int32_t *)pt_realloc(s->host_ids, sizeof(int32_t) * (size_t)N);
        s->host_keys = (uint64_t *)pt_realloc(s->host_keys, sizeof(uint64_t) * (size_t)N);
        s->host_rows = (int32_t *)pt_realloc(s->host_rows, sizeof(int32_t) * (3 * (size_t)N + 1));
        s->host_ids_n = N;
    }
    int32_t *hid = s->host_ids;
    uint64_t *key = s->host_keys;
    cu_download(be, hid, ids, sizeof(int32_t) * (size_t)N);
    size_t cnt = 0;
    for (int n = 0; n < N; n++)
        if (hid[n] >= 0) key[cnt++] = (uint64_t)(uint32_t)hid[n] << 32 | (uint32_t)n;
    if (!cnt) return;
    std::sort(key, key + cnt);  // (id, n) ascending: rows of one id in ascending n
    int32_t *rows = s->host_rows;
    size_t U = 0;
    for (size_t r = 0; r < cnt; r++) {
        rows[r] = (int32_t)(key[r] & 0xffffffffu);
        if (r == 0 || key[r] >> 32 != key[r - 1] >> 32) U++;
    }
    int32_t *seg = rows + cnt, *tok = seg + U + 1;
    size_t u = 0;
    for (size_t r = 0; r < cnt; r++)
        if (r == 0 || key[r] >> 32 != key[r - 1] >> 32) {
            seg[u] = (int32_t)r;
            tok[u++] = (int32_t)(key[r] >> 32);
        }
    seg[U] = (int32_t)cnt;
    const size_t words = cnt + 2 * U + 1;
    int32_t *d = (int32_t *)grow(s, &s->emb_rows, sizeof(int32_t) * words);
    cu_upload(be, d, rows, sizeof(int32_t) * words);
    PT_LAUNCH(embedding_bwd_k, dim3((unsigned)U, (C + 127) / 128), 128, 0, s->stream, dwte, dout, d, d + cnt,
              d + cnt + U + 1, C);
    check_launch("embedding_backward");
}

void cu_matmul_forward(pt_backend *be, float *out, const float *inp, const float *w, int N, int C, int OC) {
    mm_fwd(be, out, inp, w, N, C, OC, false);
}
void cu_matmul_backward(pt_backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                        int N, int C, int OC) {
    if (dinp) mm_dinp(be, dinp, dout, w, N, C, OC, 1.0f, false);
    mm_dw(be, dw, dout, inp, N, C, OC, false);
}

void cu_rmsnorm_forward(pt_backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps) {
    if (N <= 0) return;
    PT_LAUNCH_SYNC(rmsnorm_fwd_k, N, RED, 0, S(be)->stream, out, rstd, inp, w, C, eps, (int)be->bf16_casts);
    check_launch("rmsnorm_forward");
}
void cu_rmsnorm_backward(pt_backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C) {
    if (N <= 0) return;
    cuda_state *s = S(be);
    PT_LAUNCH_SYNC(rmsnorm_bwd_dinp_k, N, RED, 0, s->stream, dinp, dout, inp, w, rstd, C);
    check_launch("rmsnorm_backward (dinp)");
    const int P = (N + RMS_ROWS - 1) / RMS_ROWS;
    float *part = (float *)grow(s, &s->rms_part, sizeof(float) * (size_t)P * C);
    PT_LAUNCH(rmsnorm_bwd_dw_part_k, dim3((C + 127) / 128, P), 128, 0, s->stream, part, dout, inp, rstd, N, C);
    check_launch("rmsnorm_backward (dw partials)");
    PT_LAUNCH(rmsnorm_bwd_dw_sum_k, (C + 127) / 128, 128, 0, s->stream, dw, part, P, C);
    check_launch("rmsnorm_backward (dw)");
}

void rope(pt_backend *be, float *out, const float *inp, const float *cos, const float *sin, int B, int T, int NH,
          int D, int backward) {
    const size_t pairs = (size_t)B * T * NH * (D / 2);
    if (!pairs) return;
    PT_LAUNCH(rope_k, ew_grid(pairs), EW, 0, S(be)->stream, out, inp, cos, sin, T, NH, D, pairs, backward,
              (int)(be->bf16_casts && !backward));
    check_launch(backward ? "rope_backward" : "rope_forward");
}
void cu_rope_forward(pt_backend *be, float *out, const float *inp, const float *cos, const float *sin, int B, int T,
                     int NH, int D) {
    rope(be, out, inp, cos, sin, B, T, NH, D, 0);
}
void cu_rope_backward(pt_backend *be, float *dinp, const float *dout, const float *cos, const float *sin, int B,
                      int T, int NH, int D) {
    rope(be, dinp, dout, cos, sin, B, T, NH, D, 1);
}

// saved = logsumexp per (b, h, t)
size_t cu_attention_saved_floats(pt_backend *be, int B, int T, int H, int D) { return (size_t)B * H * T; }

// Checks the head dim and the GQA ratio, and opts the kernel into `bytes` of
// dynamic shared memory where that is above the default 48 KiB.
template <typename K>
void attn_prepare(pt_backend *be, K kernel, int which, int variant, size_t bytes, int H, int KV, int D) {
    cuda_state *s = S(be);
    if (D < 1 || D > AT_MAX_D || KV < 1 || H % KV) {
        fprintf(stderr, "portatrain: error: %s: attention needs 1 <= head_dim <= %d and heads (%d) a multiple of "
                        "KV heads (%d); head_dim is %d\n", PT_CUDA_NAME, AT_MAX_D, H, KV, D);
        exit(1);
    }
    if (bytes > s->smem_optin) {
        fprintf(stderr, "portatrain: error: %s: attention with head_dim %d needs %zu KiB of shared memory per block; "
                        "the device allows %zu KiB\n", PT_CUDA_NAME, D, bytes >> 10, s->smem_optin >> 10);
        exit(1);
    }
    if (bytes > (48u << 10) && bytes > s->smem_set[which][variant]) {
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        s->smem_set[which][variant] = bytes;
    }
}

// The attention kernels' head-dim variant: 16, 32, 64, 128, 256 have their
// own instantiation (DT = D), any other D the generic one (DT = 0).
int attn_variant(int D) {
    switch (D) {
    case 16: return 0;
    case 32: return 1;
    case 64: return 2;
    case 128: return 3;
    case 256: return 4;
    default: return 5;
    }
}
#define PT_ATT_DISPATCH(D, CALL)            \
    switch (attn_variant(D)) {              \
    case 0: CALL(16); break;                \
    case 1: CALL(32); break;                \
    case 2: CALL(64); break;                \
    case 3: CALL(128); break;               \
    case 4: CALL(256); break;               \
    default: CALL(0); break;                \
    }

template <int DT>
void attn_fwd_launch(pt_backend *be, float *out, float *saved, const float *q, const float *k, const float *v,
                     const int *pos, int B, int T, int H, int KV, int D) {
    const size_t smem = att_fwd_smem(D);
    attn_prepare(be, attn_fwd_k<DT>, 0, attn_variant(D), smem, H, KV, D);
    const unsigned blocks = (unsigned)((size_t)B * H * ((T + AT - 1) / AT));
    const float scale = (float)(1.0 / sqrt((double)D));
    PT_LAUNCH_SYNC(attn_fwd_k<DT>, blocks, AT_THREADS, smem, S(be)->stream, out, saved, q, k, v, pos, T, H, KV,
                   D, scale);
    check_launch("attention_forward");
}

template <int DT>
void attn_bwd_launch(pt_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                     const float *k, const float *v, const float *saved, const float *rd, const int *pos, int B, int T,
                     int H, int KV, int D) {
    cuda_state *s = S(be);
    const float scale = (float)(1.0 / sqrt((double)D));
    const int ntiles = (T + AT - 1) / AT;
    const size_t smem_dq = att_dq_smem(D), smem_dkv = att_dkv_smem(D);
    attn_prepare(be, attn_bwd_dq_k<DT>, 1, attn_variant(D), smem_dq, H, KV, D);
    attn_prepare(be, attn_bwd_dkv_k<DT>, 2, attn_variant(D), smem_dkv, H, KV, D);
    PT_LAUNCH_SYNC(attn_bwd_dq_k<DT>, (unsigned)((size_t)B * H * ntiles), AT_THREADS, smem_dq, s->stream, dq, dout, q,
                   k, v, saved, rd, pos, T, H, KV, D, scale);
    check_launch("attention_backward (dq)");
    PT_LAUNCH_SYNC(attn_bwd_dkv_k<DT>, (unsigned)((size_t)B * KV * ntiles), AT_THREADS, smem_dkv, s->stream, dk, dv,
                   dout, q, k, v, saved, rd, pos, T, H, KV, D, scale);
    check_launch("attention_backward (dk, dv)");
}

void cu_attention_forward(pt_backend *be, float *out, float *saved, const float *q, const float *k, const float *v,
                          const int32_t *pos, int B, int T, int H, int KV, int D) {
    if (B <= 0 || T <= 0 || H <= 0) return;
#define PT_ATT_FWD(DT) attn_fwd_launch<DT>(be, out, saved, q, k, v, (const int *)pos, B, T, H, KV, D)
    PT_ATT_DISPATCH(D, PT_ATT_FWD)
#undef PT_ATT_FWD
}

void cu_attention_backward(pt_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *out, const float *saved, const int32_t *pos,
                           int B, int T, int H, int KV, int D) {
    if (B <= 0 || T <= 0 || H <= 0) return;
    cuda_state *s = S(be);
    const size_t rows = (size_t)B * H * T;
    float *rd = (float *)grow(s, &s->rowdot, sizeof(float) * rows);
    const size_t warps_per_block = EW / 32, rd_blocks = PT_MIN((rows + warps_per_block - 1) / warps_per_block,
                                                                (size_t)1 << 20);
    PT_LAUNCH_SYNC(attn_rowdot_k, (unsigned)rd_blocks, EW, 0, s->stream, rd, dout, out, B, T, H, D);
    check_launch("attention_backward (rowdot)");
#define PT_ATT_BWD(DT) attn_bwd_launch<DT>(be, dq, dk, dv, dout, q, k, v, saved, rd, (const int *)pos, B, T, H, KV, D)
    PT_ATT_DISPATCH(D, PT_ATT_BWD)
#undef PT_ATT_BWD
}

void cu_swiglu_forward(pt_backend *be, float *out, const float *gate, const float *up, size_t n) {
    if (!n) return;
    PT_LAUNCH(swiglu_fwd_k, ew_grid(n), EW, 0, S(be)->stream, out, gate, up, n, (int)be->bf16_casts);
    check_launch("swiglu_forward");
}
void cu_swiglu_backward(pt_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                        const float *up, size_t n) {
    if (!n) return;
    PT_LAUNCH(swiglu_bwd_k, ew_grid(n), EW, 0, S(be)->stream, dgate, dup, dout, gate, up, n);
    check_launch("swiglu_backward");
}
void cu_moe_route(pt_backend *be, float *probs, int32_t *sel, float *topw, const float *logits, int N, int E, int K,
                  bool norm) {
    if (N <= 0) return;
    PT_LAUNCH(moe_route_k, ew_grid(N), EW, 0, S(be)->stream, probs, sel, topw, logits, N, E, K, (int)norm);
    check_launch("moe_route");
}
void cu_moe_route_backward(pt_backend *be, float *dlogits, const double *dtopw, const double *dprob,
                           const float *probs, const int32_t *sel, const float *topw, int N, int E, int K, bool norm) {
    if (N <= 0) return;
    PT_LAUNCH(moe_route_bwd_k, ew_grid(N), EW, 0, S(be)->stream, dlogits, dtopw, dprob, probs, sel, topw, N, E, K,
              (int)norm);
    check_launch("moe_route_backward");
}
void cu_moe_gather(pt_backend *be, float *out, const float *inp, const int32_t *idx, int R, int C) {
    if (R <= 0) return;
    PT_LAUNCH(moe_gather_k, ew_grid((size_t)R * C), EW, 0, S(be)->stream, out, inp, idx, R, C);
    check_launch("moe_gather");
}
void cu_moe_gather_backward(pt_backend *be, float *dinp, const float *drows, const int32_t *tok_rows, int N, int K,
                            int C) {
    if (N <= 0) return;
    PT_LAUNCH(moe_gather_bwd_k, ew_grid((size_t)N * C), EW, 0, S(be)->stream, dinp, drows, tok_rows, N, K, C,
              (int)be->bf16_casts);
    check_launch("moe_gather_backward");
}
void cu_moe_combine(pt_backend *be, float *out, const float *rows, const float *topw, const int32_t *row_w,
                    const int32_t *tok_rows, int N, int K, int C) {
    if (N <= 0) return;
    PT_LAUNCH(moe_combine_k, ew_grid((size_t)N * C), EW, 0, S(be)->stream, out, rows, topw, row_w, tok_rows, N, K,
              C, (int)be->bf16_casts);
    check_launch("moe_combine");
}
void cu_moe_combine_backward(pt_backend *be, float *drows, double *dtopw, const float *dout, const float *rows,
                             const float *topw, const int32_t *row_w, int R, int K, int C) {
    if (R <= 0) return;
    PT_LAUNCH(moe_combine_bwd_k, ew_grid(R), EW, 0, S(be)->stream, drows, dtopw, dout, rows, topw, row_w, R, K, C,
              (int)be->bf16_casts);
    check_launch("moe_combine_backward");
}
void cu_add(pt_backend *be, float *out, const float *a, const float *b, size_t n) {
    if (!n) return;
    PT_LAUNCH(add_k, ew_grid(n), EW, 0, S(be)->stream, out, a, b, n);
    check_launch("add");
}
void cu_scale(pt_backend *be, float *x, float sc, size_t n) {
    if (!n) return;
    PT_LAUNCH(scale_k, ew_grid(n), EW, 0, S(be)->stream, x, sc, n);
    check_launch("scale");
}
void cu_round_bf16(pt_backend *be, float *dst, const float *src, size_t n) {
    if (!n) return;
    PT_LAUNCH(round_bf16_k, ew_grid(n), EW, 0, S(be)->stream, dst, src, n);
    check_launch("round_bf16");
}
void cu_pack_bf16(pt_backend *be, uint16_t *dst, const float *src, size_t n) {
    if (!n) return;
    PT_LAUNCH(pack_bf16_k, ew_grid(n), EW, 0, S(be)->stream, dst, src, n);
    check_launch("pack_bf16");
}
// src (bf16-exact) packed into a scratch buffer
uint16_t *pack_scratch(pt_backend *be, scratch *sc, const float *src, size_t n) {
    uint16_t *p = (uint16_t *)grow(S(be), sc, sizeof(uint16_t) * n);
    cu_pack_bf16(be, p, src, n);
    return p;
}

void cu_matmul_forward_bf16(pt_backend *be, float *out, const float *inp, const float *w, const uint16_t *w16, int N,
                            int C, int OC) {
    cuda_state *s = S(be);
    const uint16_t *x16 = pack_scratch(be, &s->x16, inp, (size_t)N * C);
    mm_fwd(be, out, x16, w16, N, C, OC, true);
}
void cu_matmul_backward_bf16(pt_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const uint16_t *w16, int N, int C, int OC) {
    cuda_state *s = S(be);
    const uint16_t *g16 = pack_scratch(be, &s->g16, dout, (size_t)N * OC);
    if (dinp) mm_dinp(be, dinp, g16, w16, N, C, OC, 1.0f, true);
    const uint16_t *x16 = pack_scratch(be, &s->x16, inp, (size_t)N * C);
    mm_dw(be, dw, g16, x16, N, C, OC, true);
}

// Rows of the lm_head in chunks of R: logits[R,V] (cuBLAS) into one scratch,
// xent_rows_k turns them into loss and gradient in place, then dinp[chunk] =
// g @ w (overwrite) and dw += g^T @ inp[chunk]. The full [N,V] logits never
// exist. w16 != NULL: the bf16 GEMMs on packed operands (the casts make the
// gradient bf16-exact, so packing it is lossless).
void xent(pt_backend *be, double *loss_sum, float *dinp, float *dw, const float *inp, const float *w,
          const uint16_t *w16, const int32_t *targets, int N, int C, int V, float scale) {
    cuda_state *s = S(be);
    *loss_sum = 0;
    if (N <= 0) return;
    int R = s->xent_rows ? s->xent_rows : (int)PT_MAX((size_t)1, XENT_SCRATCH / (sizeof(float) * (size_t)V));
    R = PT_MIN(R, N);
    float *lg = (float *)grow(s, &s->logits, sizeof(float) * (size_t)R * V);
    double *rl = (double *)grow(s, &s->row_loss, sizeof(double) * (size_t)N);
    const bool bf16 = w16 != NULL, grad = dinp != NULL;
    for (int n0 = 0; n0 < N; n0 += R) {
        const int nc = PT_MIN(R, N - n0);
        const float *x = inp + (size_t)n0 * C;
        const void *xa = x, *wa = w;
        if (bf16) {
            xa = pack_scratch(be, &s->x16, x, (size_t)nc * C);
            wa = w16;
        }
        mm_fwd(be, lg, xa, wa, nc, C, V, bf16);
        PT_LAUNCH_SYNC(xent_rows_k, nc, RED, 0, s->stream, lg, V, targets, rl, n0, scale, (int)grad,
                       (int)be->bf16_casts);
        check_launch("lm_head_xent (rows)");
        if (!grad) continue;
        const void *ga = lg;
        if (bf16) ga = pack_scratch(be, &s->g16, lg, (size_t)nc * V);
        mm_dinp(be, dinp + (size_t)n0 * C, ga, wa, nc, C, V, 0.0f, bf16);
        mm_dw(be, dw, ga, xa, nc, C, V, bf16);
    }
    if (s->host_loss_n < (size_t)N) {
        s->host_loss = (double *)pt_realloc(s->host_loss, sizeof(double) * N);
        s->host_loss_n = N;
    }
    cu_download(be, s->host_loss, rl, sizeof(double) * N);
    double total = 0;
    for (int n = 0; n < N; n++) total += s->host_loss[n];  // row order, as cpu-ref
    *loss_sum = total;
}
void cu_lm_head_xent(pt_backend *be, double *loss_sum, float *dinp, float *dw, const float *inp, const float *w,
                     const int32_t *targets, int N, int C, int V, float scale) {
    xent(be, loss_sum, dinp, dw, inp, w, NULL, targets, N, C, V, scale);
}
void cu_lm_head_xent_bf16(pt_backend *be, double *loss_sum, float *dinp, float *dw, const float *inp, const float *w,
                          const uint16_t *w16, const int32_t *targets, int N, int C, int V, float scale) {
    xent(be, loss_sum, dinp, dw, inp, w, w16, targets, N, C, V, scale);
}

void cu_sum_squares(pt_backend *be, double *out, const float *g, size_t n) {
    cuda_state *s = S(be);
    *out = 0;
    if (!n) return;
    const size_t nb = (n + SS_BLOCK - 1) / SS_BLOCK;
    double *part = (double *)grow(s, &s->partial, sizeof(double) * nb);
    double *tot = (double *)grow(s, &s->total, sizeof(double));
    PT_LAUNCH_SYNC(sumsq_part_k, (unsigned)nb, RED, 0, s->stream, part, g, n);
    check_launch("sum_squares (partials)");
    PT_LAUNCH_SYNC(sum_doubles_k, 1, RED, 0, s->stream, tot, part, nb);
    check_launch("sum_squares (total)");
    cu_download(be, out, tot, sizeof(double));
}

void cu_adamw(pt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
              float beta2, float eps, float weight_decay, int t) {
    if (!n) return;
    // the scalars exactly as cpu-ref computes them
    const float decay = (float)(1.0 - (double)lr * weight_decay);
    const float w1 = (float)(1.0 - beta1), b2 = beta2, w2 = (float)(1.0 - beta2);
    const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    PT_LAUNCH(adamw_k, ew_grid(n), EW, 0, S(be)->stream, p, g, m, v, n, decay, w1, b2, w2, step_size, bc2_sqrt, eps);
    check_launch("adamw");
}

// ------------------------------------------------------------ create / destroy

void free_scratch(scratch *sc) {
    if (sc->p) cudaFree(sc->p);
    sc->p = NULL;
    sc->bytes = 0;
}

void cu_destroy(pt_backend *be) {
    cuda_state *s = S(be);
    if (s) {
        if (s->stream) cudaStreamSynchronize(s->stream);
        scratch *sc[] = {&s->x16, &s->g16, &s->logits, &s->row_loss, &s->partial,
                         &s->total, &s->rowdot, &s->rms_part, &s->bounce, &s->emb_rows};
        for (size_t i = 0; i < PT_ARRAY_LEN(sc); i++) free_scratch(sc[i]);
#ifndef PT_CUDA_SIM
        if (s->blas) blas.destroy(s->blas);
        if (s->blas_ws) cudaFree(s->blas_ws);
#endif
        if (s->stream) cudaStreamDestroy(s->stream);
        free(s->host_loss);
        free(s->host_ids);
        free(s->host_keys);
        free(s->host_rows);
        free(s);
    }
    free(be);
}

// The local rank of a multi-process launch (mpirun, srun, torchrun), else 0.
int local_rank(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < PT_ARRAY_LEN(vars); i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v) > 0 ? atoi(v) : 0;
    }
    return 0;
}

void describe(char *buf, size_t n, const cudaDeviceProp &p) {
    snprintf(buf, n, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
             (double)p.totalGlobalMem / 1073741824.0);
}

// Why cudaGetDeviceCount found no device, in a user's words: without the kernel driver the runtime says the
// driver version is insufficient, which reads as "upgrade" when there is nothing to upgrade.
static const char *no_device_why(cudaError_t e) {
    if (e == cudaSuccess) return "the driver reports none";
#ifndef PT_CUDA_SIM
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f) fclose(f);
    else if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) return "no NVIDIA driver";
#endif
    return cudaGetErrorString(e);
}

}  // namespace

static const pt_backend_ops cuda_ops = {
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .zero = cu_zero,
    .synchronize = cu_sync,
    .destroy = cu_destroy,
    .embedding_forward = cu_embedding_forward,
    .embedding_backward = cu_embedding_backward,
    .matmul_forward = cu_matmul_forward,
    .matmul_backward = cu_matmul_backward,
    .rmsnorm_forward = cu_rmsnorm_forward,
    .rmsnorm_backward = cu_rmsnorm_backward,
    .rope_forward = cu_rope_forward,
    .rope_backward = cu_rope_backward,
    .attention_saved_floats = cu_attention_saved_floats,
    .attention_forward = cu_attention_forward,
    .attention_backward = cu_attention_backward,
    .swiglu_forward = cu_swiglu_forward,
    .swiglu_backward = cu_swiglu_backward,
    .add = cu_add,
    .lm_head_xent = cu_lm_head_xent,
    .moe_route = cu_moe_route,
    .moe_route_backward = cu_moe_route_backward,
    .moe_gather = cu_moe_gather,
    .moe_gather_backward = cu_moe_gather_backward,
    .moe_combine = cu_moe_combine,
    .moe_combine_backward = cu_moe_combine_backward,
    .sum_squares = cu_sum_squares,
    .scale = cu_scale,
    .adamw = cu_adamw,
    .round_bf16 = cu_round_bf16,
    .pack_bf16 = cu_pack_bf16,
    .matmul_forward_bf16 = cu_matmul_forward_bf16,
    .matmul_backward_bf16 = cu_matmul_backward_bf16,
    .lm_head_xent_bf16 = cu_lm_head_xent_bf16,
    .compile_stats = NULL,  // C++ (-Wextra) wants every member named
};

// The device a suffix names: "" (the local rank modulo the device count) or
// ":N". -1 + error when there is none.
static int pick_device(const char *suffix) {
    long want = -1;
    if (suffix && *suffix) {
        char *end;
        want = suffix[0] == ':' ? strtol(suffix + 1, &end, 10) : -1;
        if (suffix[0] != ':' || end == suffix + 1 || *end || want < 0) {
            pt_set_error("backend '%s%s': expected %s or %s:DEVICE with an index from `portatrain devices`",
                         PT_CUDA_NAME, suffix, PT_CUDA_NAME, PT_CUDA_NAME);
            return -1;
        }
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        pt_set_error("backend '%s': no CUDA device (%s)", PT_CUDA_NAME,
                     no_device_why(e));
        return -1;
    }
    if (want >= count) {
        pt_set_error("backend '%s%s': no CUDA device %ld (%d found; see `portatrain devices`)", PT_CUDA_NAME, suffix,
                     want, count);
        return -1;
    }
    return want >= 0 ? (int)want : local_rank() % count;
}

// The device's checks after pick_device: PT_CUDA_XENT_ROWS (into *xent_rows,
// 0 when unset), the device made current, its properties, its architecture.
static int open_device(int dev, int *xent_rows, cudaDeviceProp *prop) {
    *xent_rows = 0;
    const char *xr = getenv("PT_CUDA_XENT_ROWS");
    if (xr && *xr) {
        char *end;
        long r = strtol(xr, &end, 10);
        if (*end || r < 1 || r > (1 << 24)) {
            pt_set_error("PT_CUDA_XENT_ROWS '%s': expected a positive number of rows", xr);
            return -1;
        }
        *xent_rows = (int)r;
    }
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(prop, dev);
    if (e != cudaSuccess) {
        pt_set_error("backend '%s': device %d: %s", PT_CUDA_NAME, dev, cudaGetErrorString(e));
        return -1;
    }
    if (prop->major < 8) {  // the build has SASS/PTX for sm_80 and sm_90 only; bf16 GemmEx needs sm_80+
        pt_set_error("backend '%s': device %d (%s) is sm_%d%d; the cuda backend needs compute capability 8.0 "
                     "(sm_80, Ampere) or newer", PT_CUDA_NAME, dev, prop->name, prop->major, prop->minor);
        return -1;
    }
    return 0;
}

// The backend's stream and, under nvcc, its cuBLAS handle on it (fixed
// workspace, no atomics: deterministic GEMMs). -1 + error on failure.
static int open_stream(cuda_state *s) {
    cudaError_t e = cudaStreamCreate(&s->stream);
    if (e != cudaSuccess) {
        pt_set_error("backend '%s': device %d: cannot create a stream: %s", PT_CUDA_NAME, s->device,
                     cudaGetErrorString(e));
        return -1;
    }
#ifndef PT_CUDA_SIM
    if (!blas_load()) {
        pt_set_error("backend '%s': %s", PT_CUDA_NAME, blas_error);
        return -1;
    }
    cublasStatus_t st = blas.create(&s->blas);
    if (st == CUBLAS_STATUS_SUCCESS) st = blas.set_stream(s->blas, s->stream);
    if (st == CUBLAS_STATUS_SUCCESS && cudaMalloc(&s->blas_ws, BLAS_WORKSPACE) != cudaSuccess)
        st = CUBLAS_STATUS_ALLOC_FAILED;
    if (st == CUBLAS_STATUS_SUCCESS) st = blas.set_workspace(s->blas, s->blas_ws, BLAS_WORKSPACE);
    if (st == CUBLAS_STATUS_SUCCESS) st = blas.set_atomics_mode(s->blas, CUBLAS_ATOMICS_NOT_ALLOWED);
    if (st != CUBLAS_STATUS_SUCCESS) {
        pt_set_error("backend '%s': device %d: cuBLAS: %s", PT_CUDA_NAME, s->device, blas.status_string(st));
        return -1;
    }
#endif
    return 0;
}

// "cuda" (device = local rank modulo the device count) or "cuda:N".
extern "C" pt_backend *PT_CUDA_CREATE(const char *suffix) {
    cudaDeviceProp prop;
    int xent_rows;
    const int dev = pick_device(suffix);
    if (dev < 0 || open_device(dev, &xent_rows, &prop) != 0) return NULL;
    cuda_state *s = (cuda_state *)pt_calloc(1, sizeof *s);
    pt_backend *be = (pt_backend *)pt_calloc(1, sizeof *be);
    be->impl = s;
    s->device = dev;
    s->xent_rows = xent_rows;
    s->smem_optin = prop.sharedMemPerBlockOptin;
    if (open_stream(s) != 0) {
        cu_destroy(be);
        return NULL;
    }
    char desc[320];
    describe(desc, sizeof desc, prop);
    snprintf(be->device, sizeof be->device, "%s %d: %s", PT_CUDA_NAME, dev, desc);
    be->name = PT_CUDA_NAME;
    be->host_memory = false;
    be->stream = (void *)s->stream;
    be->ops = &cuda_ops;
    return be;
}

// 0 when there is a device, else -1 with create's no-device error (the suffix
// is create's to check). Only counts devices: no context is created (a probing
// parent process, e.g. accept, must not hold one on a GPU that its children
// train on).
extern "C" int PT_CUDA_PROBE(const char *suffix) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0) return 0;
    pt_set_error("backend '%s': no CUDA device (%s)", PT_CUDA_NAME,
                 no_device_why(e));
    return -1;
}

// `portatrain devices`' cuBLAS line (the cuda backend's): the library a cuda backend opens, its version, or
// why it cannot be opened. Opening it here costs this listing cuBLAS's resident memory; nothing else does.
static void print_blas(FILE *f) {
#ifndef PT_CUDA_SIM
    int v[3] = {0, 0, 0};
    if (!blas_load()) {
        fprintf(f, "%-12s %s\n", "cublas", blas_error);
        return;
    }
    const libraryPropertyType k[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
    for (int i = 0; i < 3; i++) blas.get_property(k[i], &v[i]);
    fprintf(f, "%-12s cuBLAS %d.%d.%d from %s (opened when a cuda backend starts)\n", "cublas", v[0], v[1], v[2],
            blas_path);
#else
    (void)f;
#endif
}

// `portatrain devices`: one line per device, or why there is none; then cuBLAS's.
extern "C" int PT_CUDA_PRINT_DEVICES(FILE *f) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        fprintf(f, "%-12s no CUDA device: %s\n", PT_CUDA_NAME,
                no_device_why(e));
        print_blas(f);
        return 0;
    }
    for (int d = 0; d < count; d++) {
        cudaDeviceProp prop;
        char name[32], desc[320];
        snprintf(name, sizeof name, "%s:%d", PT_CUDA_NAME, d);
        if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
            fprintf(f, "%-12s (properties unavailable)\n", name);
            continue;
        }
        describe(desc, sizeof desc, prop);
        fprintf(f, "%-12s %s\n", name, desc);
    }
    print_blas(f);
    return count;
}
