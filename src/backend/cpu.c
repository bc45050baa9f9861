// cpu: the fast CPU backend, selected with `--backend cpu`.
//
// Design (details and measurements in docs/PERF_NOTES.md):
// - Matmuls through oneDNN's sgemm (OpenBLAS's where the build has no oneDNN),
//   always SINGLE-threaded inside our own OpenMP tasks (one thread pool for
//   the whole step, no library worker threads spinning against ours). A
//   matmul is split into fixed output blocks of its shape alone, each computed
//   with the full K by one sgemm call, so no sum depends on the thread count
//   (see gemm()). PT_CPU_GEMM=split: OpenBLAS, one block per thread;
//   PT_CPU_GEMM=openblas: OpenBLAS's own threads (for comparison only).
// - The fixed-shape tile products of the lm_head and attention run on
//   oneDNN's sgemm where the build has it (faster there; see sgemm_tile()).
// - lm_head + cross-entropy in chunks of rows x vocabulary tiles: the [N x V]
//   logits never exist; a chunk of R rows (PT_CPU_XENT_ROWS, default 512)
//   is computed tile by tile (PT_CPU_XENT_TILE vocabulary columns, default
//   2048; a tile is stored transposed, vocabulary x rows, so that the dW
//   product is NN), each tile's max / sum-exp taken while it is in the last-level
//   cache and exp() stored in place; the per-row logsumexp then combines the
//   tiles in a fixed order, and a second pass over the tiles turns them into
//   gradients and feeds dW (+= G^T X) and a per-group partial of dX (G W)
//   while they are in cache. Partials are reduced in a fixed order.
// - Attention flash-style: query tiles of ATT_BQ rows against key blocks of
//   ATT_BK keys, online softmax across blocks, saved = logsumexp per
//   (b, h, t); the tile products are single-threaded sgemm calls on strided
//   views of q/k/v. Backward per (b, kv-head) task: it owns dK/dV of its KV
//   head and dQ of the query heads it serves, so there are no atomics and no
//   per-head K/V copies (GQA by indexing).
// - Elementwise and row kernels are written as plain C loops that GCC
//   vectorises, compiled three times with target_clones (x86-64-v4 = AVX-512,
//   x86-64-v3 = AVX2+FMA, baseline SSE2) and picked at load time by the CPU,
//   so one binary runs on any x86-64. This file is built with
//   -ffp-contract=fast (CMakeLists.txt): FMA inside the AVX2/AVX-512 clones.
// - Every reduction has a fixed order that depends only on the shapes (fixed
//   row blocks, tiles and groups), never on the thread count or schedule:
//   results are bitwise identical across runs and across OMP_NUM_THREADS.
// - Scratch buffers are grown once on first use; our code allocates nothing
//   inside a training step after the first. oneDNN's sgemm (the tile
//   products) takes its packing buffers from malloc on every call, served from
//   glibc's reused heap (~31 page faults a tiny step; PERF_NOTES.md);
//   PT_CPU_TILE_SGEMM=openblas avoids even that.
#ifndef PT_NO_CPU_BACKEND
#include "backend/backend.h"
#include "backend/cpu_dnnl.h"
#include "backend/moe_ref.h"
#include "backend/cpu_faults.h"
#include "util/bf16.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef PT_HAVE_DNNL
#include <dnnl.h>
#endif

#ifdef PT_REAL_DOUBLE
#error "the cpu backend is fp32 only; the double gradcheck build compiles cpu_ref.c alone"
#endif

// OpenBLAS extensions (also declared by OpenBLAS's cblas.h; repeated for netlib-style headers).
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
char *openblas_get_config(void);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(PT_CPU_NO_CLONES)
#define PT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PT_CLONES
#endif

enum { ATT_BQ = 64, ATT_BK = 64, EW_BLOCK = 1 << 14, XENT_GROUPS = 16, RMS_RB = 32, SS_BLK = 4096 };

typedef struct {
    void *p;
    size_t cap;  // bytes
} scratch;

// PT_CPU_PROFILE=1: wall time per kernel, printed to stderr by destroy().
enum {
    K_EMB_F, K_EMB_B, K_MM_F, K_MM_B, K_RMS_F, K_RMS_B, K_ROPE_F, K_ROPE_B, K_ATT_F, K_ATT_B, K_SWIGLU_F,
    K_SWIGLU_B, K_ADD, K_XENT, K_XENT_P1, K_XENT_P2, K_SUMSQ, K_SCALE, K_ADAMW, K_ZERO, K_COPY, K_COUNT
};
static const char *const kernel_names[K_COUNT] = {
    "embedding_forward", "embedding_backward", "matmul_forward", "matmul_backward", "rmsnorm_forward",
    "rmsnorm_backward", "rope_forward", "rope_backward", "attention_forward", "attention_backward",
    "swiglu_forward", "swiglu_backward", "add", "lm_head_xent", " xent pass 1 (logits)", " xent pass 2 (grads)", "sum_squares", "scale", "adamw", "zero",
    "copy/upload/download"};

typedef struct {
    int profile;
    double prof_s[K_COUNT], prof_flops[K_COUNT];
    long prof_calls[K_COUNT];
    scratch xent, xstat, xpart, att, rms, ss;
    int gemm_openblas;  // PT_CPU_GEMM=openblas: OpenBLAS threads instead of our split
    int tile_onednn;    // tile products on oneDNN's sgemm (PT_CPU_TILE_SGEMM=openblas: 0)
    int gemm_onednn;    // gemm() in fixed blocks of oneDNN's sgemm (default with oneDNN; PT_CPU_GEMM=split: 0)
    int gemm_bm, gemm_bn;  // those blocks: rows x columns of the output (PT_CPU_GEMM_BLOCK, 256x512)
    int xent_rows, xent_tile;
    pt_dnnl *dnnl;                  // bf16 matmuls (NULL: none on this CPU/build; bf16 runs on sgemm)
    scratch b16a, b16b, xg16;       // packed bf16 operands of the current matmul / xent chunk
} cpu_impl;

// ---------------------------------------------------------------- memory

static void *big_alloc(size_t bytes) {
    if (!bytes) bytes = 64;
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;
    size_t align = bytes >= 2 * huge ? huge : 64;
    if (posix_memalign(&p, align, bytes) != 0) {
        fprintf(stderr, "portatrain: error: out of memory allocating %zu bytes (cpu backend)\n", bytes);
        exit(1);
    }
#ifdef MADV_HUGEPAGE
    if (align == huge) madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE);
#endif
    return p;
}

static void par_zero(void *dst, size_t bytes) {
    const size_t blk = (size_t)1 << 20;
    if (bytes <= blk) {
        if (bytes) memset(dst, 0, bytes);
        return;
    }
    const long nb = (long)((bytes + blk - 1) / blk);
#pragma omp parallel for schedule(static)
    for (long b = 0; b < nb; b++) {
        size_t o = (size_t)b * blk;
        memset((char *)dst + o, 0, PT_MIN(blk, bytes - o));
    }
}

static void par_copy(void *dst, const void *src, size_t bytes) {
    const size_t blk = (size_t)1 << 20;
    if (dst == src || !bytes) return;
    const char *s = src;
    char *d = dst;
    if (bytes <= blk || (d < s + bytes && s < d + bytes)) {  // small or overlapping: one memmove
        memmove(dst, src, bytes);
        return;
    }
    const long nb = (long)((bytes + blk - 1) / blk);
#pragma omp parallel for schedule(static)
    for (long b = 0; b < nb; b++) {
        size_t o = (size_t)b * blk;
        memcpy(d + o, s + o, PT_MIN(blk, bytes - o));
    }
}

static void *scratch_get(scratch *s, size_t bytes) {
    if (bytes > s->cap) {
        free(s->p);
        s->p = big_alloc(bytes);
        s->cap = bytes;
    }
    return s->p;
}

#define PROF_BEGIN(be_) \
    cpu_impl *prof_im_ = (be_)->impl; \
    const double prof_t0_ = prof_im_->profile ? pt_now_s() : 0
#define PROF_END(k, flops) \
    do { \
        if (prof_im_->profile) { \
            prof_im_->prof_s[k] += pt_now_s() - prof_t0_; \
            prof_im_->prof_flops[k] += (flops); \
            prof_im_->prof_calls[k]++; \
        } \
    } while (0)

static void *cpu_alloc(pt_backend *be, size_t bytes) {
    void *p = big_alloc(bytes);
    par_zero(p, bytes);
    return p;
}
static void cpu_free(pt_backend *be, void *p) { free(p); }
static void cpu_copy(pt_backend *be, void *dst, const void *src, size_t bytes) {
    PROF_BEGIN(be);
    par_copy(dst, src, bytes);
    PROF_END(K_COPY, 0);
}
static void cpu_zero(pt_backend *be, void *dst, size_t bytes) {
    PROF_BEGIN(be);
    par_zero(dst, bytes);
    PROF_END(K_ZERO, 0);
}
static void cpu_sync(pt_backend *be) {}
static void cpu_destroy(pt_backend *be) {
    cpu_impl *im = be->impl;
    if (im->profile) {
        double tot = 0;
        for (int k = 0; k < K_COUNT; k++) tot += k == K_XENT_P1 || k == K_XENT_P2 ? 0 : im->prof_s[k];
        fprintf(stderr, "cpu backend profile (%d threads): %.3f s in kernels\n", omp_get_max_threads(), tot);
        for (int k = 0; k < K_COUNT; k++)
            if (im->prof_calls[k])
                fprintf(stderr, "  %-22s %8ld calls %9.3f s %5.1f%%  %8.1f GFLOP/s\n", kernel_names[k],
                        im->prof_calls[k], im->prof_s[k], 100 * im->prof_s[k] / (tot > 0 ? tot : 1),
                        im->prof_flops[k] / (im->prof_s[k] > 0 ? im->prof_s[k] : 1) / 1e9);
    }
    scratch *all[] = {&im->xent, &im->xstat, &im->xpart, &im->att, &im->rms, &im->ss, &im->b16a, &im->b16b, &im->xg16};
    pt_dnnl_destroy(im->dnnl);
    for (size_t i = 0; i < PT_ARRAY_LEN(all); i++) free(all[i]->p);
    free(im);
    free(be);
}

// ---------------------------------------------------------------- vector math

// exp(x) for float, Cephes polynomial (max relative error ~1e-7 on [-87, 88]);
// branch-free so GCC vectorises every loop it appears in.
static inline float vexp(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = x * 1.44269504088896341f + 12582912.0f;  // round to nearest via 1.5 * 2^23
    n -= 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    const float r2 = r * r;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r2 + r + 1.0f;
    union {
        int32_t i;
        float f;
    } u;
    u.i = ((int32_t)n + 127) << 23;
    return p * u.f;
}

// 16 fixed partial sums, combined as a tree: vectorisable, order fixed by n.
static inline float sum16(const float *a) {
    float s8[8];
    for (int k = 0; k < 8; k++) s8[k] = a[k] + a[k + 8];
    return ((s8[0] + s8[4]) + (s8[2] + s8[6])) + ((s8[1] + s8[5]) + (s8[3] + s8[7]));
}

static inline float dot16(const float *restrict x, const float *restrict y, int n) {
    float a[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) a[k] += x[i + k] * y[i + k];
    float s = sum16(a);
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

// ---------------------------------------------------------------- matmul

static inline void sgemm1(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                          float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // C = beta * C
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A,
                lda, B, ldb, beta, C, ldc);
}

// The fixed-shape products inside the lm_head + cross-entropy chunks and the
// attention tiles: their shapes come from the problem and the tile constants,
// never from the thread count, and each runs single-threaded inside one of our
// OpenMP tasks, so any deterministic sgemm keeps results thread-count
// independent. oneDNN's dnnl_sgemm is the faster one there on AVX-512
// (bench/lm_head_gemm.c: K = 64 logits 100 vs 77 GFLOP/s a core), but unlike
// OpenBLAS its summation order can change when a matrix is split in blocks
// (its K blocking depends on M and N), so gemm()'s thread-count-dependent
// blocks stay on OpenBLAS. PT_CPU_TILE_SGEMM=openblas uses OpenBLAS here too.
static inline void sgemm_tile(const cpu_impl *im, int ta, int tb, int M, int N, int K, const float *A, int lda,
                              const float *B, int ldb, float beta, float *C, int ldc) {
#ifdef PT_HAVE_DNNL
    // inside an active OpenMP region oneDNN runs single-threaded; with one
    // thread there is no region, and OMP_NUM_THREADS=1 makes it one thread too
    if (im->tile_onednn && M > 0 && N > 0 && K > 0) {
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc) != dnnl_success) {
            fprintf(stderr, "cpu backend: dnnl_sgemm(%c%c, %d x %d x %d) failed\n", ta ? 'T' : 'N', tb ? 'T' : 'N', M,
                    N, K);
            abort();
        }
        return;
    }
#endif
    sgemm1(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] + beta C.
// Default (oneDNN built in, x86-64): output blocks of a fixed 256 x 512 (PT_CPU_GEMM_BLOCK), set by the shape
// alone, each one single-threaded dnnl_sgemm call with the full K, spread over our OpenMP threads. oneDNN's
// summation order depends on a block's shape, and the blocks never depend on the thread count, so results
// stay bitwise identical across OMP_NUM_THREADS. Why not OpenBLAS: its kernel is picked at load time by CPU
// detection or OPENBLAS_CORETYPE, so a machine whose environment pins an older kernel runs at half of
// oneDNN's JIT; 256 x 512 was the fastest block measured (docs/PERF_NOTES.md has the numbers).
// PT_CPU_GEMM=split (or a build without oneDNN): split in output blocks
// over our OpenMP threads (single-threaded OpenBLAS inside), one block per
// thread: rows first (pm blocks of >= 64 rows), then columns when there are
// more threads than row blocks. Every output element is computed by one
// sgemm call with the full K, so no sum depends on the split. The blocks are
// kept >= 16 MFLOP (M*N*K >= 8e6): above the sizes where OpenBLAS takes
// other kernels with another summation order (its small-matrix kernels up to
// M*N*K = 1e6, its "direct" sgemm for row-major NN, beta 0, up to 28*512*512
// = 7.3e6 when single-threaded), so a block computes the same bits as the
// whole matrix would and results do not depend on the thread count either
// (tests/test_backend_parity.c, SPEC cpu, checks 1 vs 2 threads).
// One block per thread beats a shape-only split into up to 8 blocks on a 0.6b-4l layer's matmuls
// (bench/gemm_split.c, docs/PERF_NOTES.md).
static void gemm(const cpu_impl *im, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    const int nth = omp_get_max_threads();
    const double flops = 2.0 * M * N * (double)K;
    if (im->gemm_openblas) {
        openblas_set_num_threads(nth);
        sgemm1(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        openblas_set_num_threads(1);
        return;
    }
    if (im->gemm_onednn) {  // fixed blocks of the shape alone, one oneDNN call each
        const int bm = im->gemm_bm, bn = im->gemm_bn;
        const int pm = (M + bm - 1) / bm, pn = (N + bn - 1) / bn;
#pragma omp parallel for schedule(dynamic, 1)
        for (int t = 0; t < pm * pn; t++) {
            const int m0 = (t / pn) * bm, m1 = PT_MIN(M, m0 + bm), n0 = (t % pn) * bn, n1 = PT_MIN(N, n0 + bn);
            const float *Ab = ta ? A + m0 : A + (size_t)m0 * lda;
            const float *Bb = tb ? B + (size_t)n0 * ldb : B + n0;
            sgemm_tile(im, ta, tb, m1 - m0, n1 - n0, K, Ab, lda, Bb, ldb, beta, C + (size_t)m0 * ldc + n0, ldc);
        }
        return;
    }
    int nb = (int)PT_MIN((double)nth, flops / 16e6);
    int pm = PT_MAX(1, PT_MIN(nb, M / 64));
    int pn = PT_MAX(1, PT_MIN(nb / pm, N / 64));
    int bm = (M + pm - 1) / pm, bn = (N + pn - 1) / pn;
    bm = (bm + 15) & ~15;
    bn = (bn + 15) & ~15;
    pm = (M + bm - 1) / bm;
    pn = (N + bn - 1) / bn;
    if (pm * pn <= 1) {
        sgemm1(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel for schedule(static, 1)
    for (int t = 0; t < pm * pn; t++) {
        const int m0 = (t / pn) * bm, m1 = PT_MIN(M, m0 + bm), n0 = (t % pn) * bn, n1 = PT_MIN(N, n0 + bn);
        const float *Ab = ta ? A + m0 : A + (size_t)m0 * lda;
        const float *Bb = tb ? B + (size_t)n0 * ldb : B + n0;
        sgemm1(ta, tb, m1 - m0, n1 - n0, K, Ab, lda, Bb, ldb, beta, C + (size_t)m0 * ldc + n0, ldc);
    }
}

static void cpu_matmul_forward(pt_backend *be, float *out, const float *inp, const float *w, int N, int C, int OC) {
    PROF_BEGIN(be);
    gemm(be->impl, 0, 1, N, OC, C, inp, C, w, C, 0.0f, out, OC);
    PROF_END(K_MM_F, 2.0 * N * C * (double)OC);
}

static void cpu_matmul_backward(pt_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                const float *w, int N, int C, int OC) {
    PROF_BEGIN(be);
    if (dinp) gemm(be->impl, 0, 0, N, C, OC, dout, OC, w, C, 1.0f, dinp, C);  // dinp += dout @ w
    gemm(be->impl, 1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dw, C);          // dw += dout^T @ inp
    PROF_END(K_MM_B, (dinp ? 4.0 : 2.0) * N * C * (double)OC);
}

// ---------------------------------------------------------------- embedding

static void cpu_embedding_forward(pt_backend *be, float *out, const int32_t *ids, const float *wte, int N, int C) {
    PROF_BEGIN(be);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        if (ids[n] < 0) memset(out + (size_t)n * C, 0, sizeof(float) * C);
        else memcpy(out + (size_t)n * C, wte + (size_t)ids[n] * C, sizeof(float) * C);
    }
    PROF_END(K_EMB_F, 0);
}

PT_CLONES static void emb_bwd_cols(float *dwte, const float *dout, const int32_t *ids, int N, int C, int c0, int c1) {
    for (int n = 0; n < N; n++) {
        if (ids[n] < 0) continue;
        float *d = dwte + (size_t)ids[n] * C;
        const float *g = dout + (size_t)n * C;
        for (int c = c0; c < c1; c++) d[c] += g[c];
    }
}

static void cpu_embedding_backward(pt_backend *be, float *dwte, const float *dout, const int32_t *ids, int N,
                                   int C) {
    PROF_BEGIN(be);
    // Threads own column slices and walk the rows in order: repeated ids
    // accumulate in row order exactly as cpu-ref does.
    const int cs = 16, ns = (C + cs - 1) / cs;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < ns; s++) emb_bwd_cols(dwte, dout, ids, N, C, s * cs, PT_MIN(C, (s + 1) * cs));
    PROF_END(K_EMB_B, 0);
}

// ---------------------------------------------------------------- RMSNorm

// bf16 variants (precision bf16), defined in the bf16 section below.
static void rms_fwd_rows_bf16(float *out, float *rstd, const float *inp, const float *w, int n0, int n1, int C,
                              float eps);
static inline float rb(float f);
static void swiglu_fwd_blk_bf16(float *restrict out, const float *restrict gate, const float *restrict up, size_t n);

// 1/sqrt(mean(x^2) + eps) of one row, the same for the fp32 and bf16 variants.
static inline float rms_rstd(const float *x, int C, float eps) {
    const float ss = dot16(x, x, C);
    return (float)(1.0 / sqrt((double)(ss / C + eps)));
}

PT_CLONES static void rms_fwd_rows(float *out, float *rstd, const float *inp, const float *w, int n0, int n1, int C,
                                   float eps) {
    for (int n = n0; n < n1; n++) {
        const float *x = inp + (size_t)n * C;
        const float r = rms_rstd(x, C, eps);
        rstd[n] = r;
        float *y = out + (size_t)n * C;
        for (int c = 0; c < C; c++) y[c] = w[c] * (x[c] * r);
    }
}

static void cpu_rmsnorm_forward(pt_backend *be, float *out, float *rstd, const float *inp, const float *w, int N,
                                int C, float eps) {
    PROF_BEGIN(be);
    const int rb = PT_MAX(1, 8192 / PT_MAX(C, 1)), nb = (N + rb - 1) / rb;
    const bool bf16 = be->bf16_casts;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++) {
        if (bf16) rms_fwd_rows_bf16(out, rstd, inp, w, b * rb, PT_MIN(N, (b + 1) * rb), C, eps);
        else rms_fwd_rows(out, rstd, inp, w, b * rb, PT_MIN(N, (b + 1) * rb), C, eps);
    }
    PROF_END(K_RMS_F, 0);
}

// One block of rows: dinp rows (+=) and this block's partial dw.
PT_CLONES static void rms_bwd_rows(float *dinp, float *part, const float *dout, const float *inp, const float *w,
                                   const float *rstd, int n0, int n1, int C) {
    for (int c = 0; c < C; c++) part[c] = 0;
    for (int n = n0; n < n1; n++) {
        const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        const float r = rstd[n];
        float a[16] = {0};
        int c = 0;
        for (; c + 16 <= C; c += 16)
            for (int k = 0; k < 16; k++) a[k] += g[c + k] * w[c + k] * (x[c + k] * r);
        float dot = sum16(a);
        for (; c < C; c++) dot += g[c] * w[c] * (x[c] * r);
        const float m = dot / C;
        float *dx = dinp + (size_t)n * C;
        for (c = 0; c < C; c++) {
            const float xh = x[c] * r;
            dx[c] += r * (g[c] * w[c] - xh * m);
            part[c] += g[c] * xh;
        }
    }
}

PT_CLONES static void col_reduce(float *dst, const float *part, int nb, int stride, int c0, int c1) {
    for (int b = 0; b < nb; b++) {
        const float *p = part + (size_t)b * stride;
        for (int c = c0; c < c1; c++) dst[c] += p[c];
    }
}

static void cpu_rmsnorm_backward(pt_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const float *rstd, int N, int C) {
    PROF_BEGIN(be);
    cpu_impl *im = be->impl;
    const int nb = (N + RMS_RB - 1) / RMS_RB;
    float *part = scratch_get(&im->rms, sizeof(float) * (size_t)nb * C);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++)
        rms_bwd_rows(dinp, part + (size_t)b * C, dout, inp, w, rstd, b * RMS_RB, PT_MIN(N, (b + 1) * RMS_RB), C);
    // dw += partials, block order fixed; threads own column slices
    const int cs = 64, ncs = (C + cs - 1) / cs;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < ncs; s++) col_reduce(dw, part, nb, C, s * cs, PT_MIN(C, (s + 1) * cs));
    PROF_END(K_RMS_B, 0);
}

// ---------------------------------------------------------------- RoPE

// rows [r0, r1) of the [B*T, NH, D] tensor; position = row % T. In place
// when out == inp (each pair (i, i+h) is read before it is written).
enum { ROPE_FORWARD, ROPE_BACKWARD, ROPE_FORWARD_BF16 };
PT_CLONES static void rope_rows(float *out, const float *inp, const float *cos, const float *sin, int r0, int r1,
                                int T, int NH, int D, int mode) {
    const int h = D / 2;
    for (int r = r0; r < r1; r++) {
        const float *cs = cos + (size_t)(r % T) * D, *sn = sin + (size_t)(r % T) * D;
        for (int hd = 0; hd < NH; hd++) {
            const float *x = inp + ((size_t)r * NH + hd) * D;
            float *o = out + ((size_t)r * NH + hd) * D;
            float lo[h > 0 ? h : 1], hi[h > 0 ? h : 1];
            if (mode == ROPE_FORWARD) {
                // o[i] = x[i] c[i] - x[i+h] s[i]; o[i+h] = x[i+h] c[i+h] + x[i] s[i+h]
                for (int i = 0; i < h; i++) {
                    lo[i] = x[i] * cs[i] - x[i + h] * sn[i];
                    hi[i] = x[i + h] * cs[i + h] + x[i] * sn[i + h];
                }
            } else if (mode == ROPE_FORWARD_BF16) {
                // out = bf16(bf16(x * cos) + bf16(rot(x) * sin))
                for (int i = 0; i < h; i++) {
                    lo[i] = rb(rb(x[i] * cs[i]) + rb(-x[i + h] * sn[i]));
                    hi[i] = rb(rb(x[i + h] * cs[i + h]) + rb(x[i] * sn[i + h]));
                }
            } else {
                // transpose: d[i] = g[i] c[i] + g[i+h] s[i+h]; d[i+h] = g[i+h] c[i+h] - g[i] s[i]
                for (int i = 0; i < h; i++) {
                    lo[i] = x[i] * cs[i] + x[i + h] * sn[i + h];
                    hi[i] = x[i + h] * cs[i + h] - x[i] * sn[i];
                }
            }
            memcpy(o, lo, sizeof(float) * h);
            memcpy(o + h, hi, sizeof(float) * h);
        }
    }
}

static void rope(float *out, const float *inp, const float *cos, const float *sin, int B, int T, int NH, int D,
                 int mode) {
    const int rows = B * T, rb = PT_MAX(1, 4096 / PT_MAX(1, NH * D)), nb = (rows + rb - 1) / rb;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++) {
        rope_rows(out, inp, cos, sin, b * rb, PT_MIN(rows, (b + 1) * rb), T, NH, D, mode);
    }
}

static void cpu_rope_forward(pt_backend *be, float *out, const float *inp, const float *cos, const float *sin, int B,
                             int T, int NH, int D) {
    PROF_BEGIN(be);
    rope(out, inp, cos, sin, B, T, NH, D, be->bf16_casts ? ROPE_FORWARD_BF16 : ROPE_FORWARD);
    PROF_END(K_ROPE_F, 0);
}
static void cpu_rope_backward(pt_backend *be, float *dinp, const float *dout, const float *cos, const float *sin,
                              int B, int T, int NH, int D) {
    PROF_BEGIN(be);
    rope(dinp, dout, cos, sin, B, T, NH, D, ROPE_BACKWARD);
    PROF_END(K_ROPE_B, 0);
}

// ---------------------------------------------------------------- attention

static size_t cpu_attention_saved_floats(pt_backend *be, int B, int T, int H, int D) { return (size_t)B * H * T; }

// Attention is blocked into query tiles of ATT_BQ rows and key blocks of
// ATT_BK keys; the four products of a tile (Q K^T, P V, and in the backward
// dO V^T, P^T dO, dS^T Q, dS K) are single-threaded sgemm calls on strided
// views of q/k/v (no copies, GQA by indexing), and only the row-wise softmax
// is our own loop. ATT_BK is a multiple of ATT_BQ, so every query row of a
// tile sees at least one unmasked key in each block it visits.
_Static_assert(ATT_BK % ATT_BQ == 0, "key blocks must be whole query tiles");

// Per-thread attention scratch, in floats (64-byte aligned regions).
static size_t att_scratch_floats(int T, int D, int G) {
    size_t n = (size_t)2 * ATT_BQ * ATT_BK + (size_t)ATT_BQ * D + (size_t)2 * ATT_BK * D + (size_t)G * T +
               4 * ATT_BQ + 64;
    return (n + 15) & ~(size_t)15;
}

// First key row t sees: its document's start (pq = pos of row t, NULL: 0).
static inline int att_lo(const int32_t *pq, int t) { return pq ? t - *pq : 0; }

// Smallest first key over the query rows t0 .. t0+nq-1 (pq = pos of row t0).
static int att_lo_min(const int32_t *pq, int t0, int nq) {
    int lo = t0 + nq;
    for (int i = 0; i < nq; i++) lo = PT_MIN(lo, att_lo(pq ? pq + i : NULL, t0 + i));
    return lo;
}

// Online-softmax update of nq rows against one key block (forward). S holds
// the raw scores Q K^T [nq, ATT_BK]; row i (position t0+i, first key lo_i)
// sees keys max(s0, lo_i) .. min(s0+nk, t0+i+1)-1. S becomes P = exp(scale*S
// - m_new) (0 where masked), m/l are updated and acc rows [nq, D] rescaled by
// exp(m_old - m_new). A row with no key in the block keeps m = -FLT_MAX (its
// keys lo_i .. t0+i are contiguous, so they all lie in later blocks): corr 0.
PT_CLONES static void att_fwd_softmax(float *restrict S, float *restrict acc, float *restrict m, float *restrict l,
                                      const int32_t *pq, int nq, int nk, int t0, int s0, int D, float scale) {
    for (int i = 0; i < nq; i++) {
        float *sr = S + (size_t)i * ATT_BK;
        const int j0 = PT_MAX(0, att_lo(pq ? pq + i : NULL, t0 + i) - s0), ns = PT_MIN(nk, t0 + i - s0 + 1);
        for (int j = 0; j < PT_MIN(j0, nk); j++) sr[j] = 0.0f;
        float mx = -FLT_MAX;
        for (int j = j0; j < ns; j++) {
            sr[j] *= scale;
            mx = sr[j] > mx ? sr[j] : mx;
        }
        const float mold = m[i], mnew = mx > mold ? mx : mold;
        const float corr = mold == -FLT_MAX ? 0.0f : vexp(mold - mnew);
        float a[16] = {0};
        int j = j0;
        for (; j + 16 <= ns; j += 16)
            for (int k = 0; k < 16; k++) {
                const float e = vexp(sr[j + k] - mnew);
                sr[j + k] = e;
                a[k] += e;
            }
        float ps = sum16(a);
        for (; j < ns; j++) {
            sr[j] = vexp(sr[j] - mnew);
            ps += sr[j];
        }
        for (; j < nk; j++) sr[j] = 0.0f;
        l[i] = l[i] * corr + ps;
        m[i] = mnew;
        if (corr != 1.0f) {
            float *ar = acc + (size_t)i * D;
            for (int d = 0; d < D; d++) ar[d] *= corr;
        }
    }
}

// One (b, h, query tile [t0, t1)) of the forward.
static void att_fwd_task(const cpu_impl *im, float *out, float *lse, const float *q, const float *k, const float *v,
                         const int32_t *pos, int b, int hh, int t0, int t1, int T, int H, int KV, int D, float *ws) {
    const int kvh = hh / (H / KV);
    const float scale = 1.0f / sqrtf((float)D);
    const size_t qld = (size_t)H * D, kld = (size_t)KV * D;
    float *S = ws, *acc = S + (size_t)ATT_BQ * ATT_BK, *m = acc + (size_t)ATT_BQ * D, *l = m + ATT_BQ;
    const int nq = t1 - t0;
    for (int i = 0; i < nq * D; i++) acc[i] = 0;
    for (int i = 0; i < nq; i++) {
        m[i] = -FLT_MAX;
        l[i] = 0;
    }
    const float *qt = q + ((size_t)b * T + t0) * qld + (size_t)hh * D;
    const float *kb = k + (size_t)b * T * kld + (size_t)kvh * D, *vb = v + (size_t)b * T * kld + (size_t)kvh * D;
    const int32_t *pq = pos ? pos + (size_t)b * T + t0 : NULL;
    // key blocks before every row's document start are skipped (none without pos)
    for (int s0 = att_lo_min(pq, t0, nq) / ATT_BK * ATT_BK; s0 < t1; s0 += ATT_BK) {
        const int nk = PT_MIN(ATT_BK, t1 - s0);
        sgemm_tile(im, 0, 1, nq, nk, D, qt, (int)qld, kb + (size_t)s0 * kld, (int)kld, 0.0f, S, ATT_BK);  // S = Q K^T
        att_fwd_softmax(S, acc, m, l, pq, nq, nk, t0, s0, D, scale);
        sgemm_tile(im, 0, 0, nq, D, nk, S, ATT_BK, vb + (size_t)s0 * kld, (int)kld, 1.0f, acc, D);  // acc += P V
    }
    for (int i = 0; i < nq; i++) {
        float *o = out + ((size_t)b * T + t0 + i) * qld + (size_t)hh * D;
        const float inv = 1.0f / l[i];
        for (int d = 0; d < D; d++) o[d] = acc[(size_t)i * D + d] * inv;
        lse[((size_t)b * H + hh) * T + t0 + i] = m[i] + logf(l[i]);
    }
}

static void cpu_attention_forward(pt_backend *be, float *out, float *saved, const float *q, const float *k,
                                  const float *v, const int32_t *pos, int B, int T, int H, int KV, int D) {
    PROF_BEGIN(be);
    cpu_impl *im = be->impl;
    const size_t per = att_scratch_floats(T, D, H / KV);
    float *ws = scratch_get(&im->att, sizeof(float) * per * omp_get_max_threads());
    const int nqt = (T + ATT_BQ - 1) / ATT_BQ, ntask = B * H * nqt;
#pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < ntask; task++) {
        // largest query tiles (most keys) first
        const int qt = nqt - 1 - task / (B * H), bh = task % (B * H);
        att_fwd_task(im, out, saved, q, k, v, pos, bh / H, bh % H, qt * ATT_BQ, PT_MIN(T, (qt + 1) * ATT_BQ), T, H,
                     KV, D, ws + per * omp_get_thread_num());
    }
    PROF_END(K_ATT_F, 2.0 * B * H * (double)T * (T + 1) * D);
}

// Backward softmax of one (query tile, key block): S = Q K^T and dP = dO V^T
// in, P (in S) and dS = P * (dP - Drow) * scale (in dP) out; masked entries 0.
PT_CLONES static void att_bwd_softmax(float *restrict S, float *restrict dP, const float *restrict lse,
                                      const float *restrict Drow, const int32_t *pq, int nq, int nk, int t0, int s0,
                                      float scale) {
    for (int i = 0; i < nq; i++) {
        float *sr = S + (size_t)i * ATT_BK, *dr = dP + (size_t)i * ATT_BK;
        const int j0 = PT_MIN(nk, PT_MAX(0, att_lo(pq ? pq + i : NULL, t0 + i) - s0));
        const int ns = PT_MIN(nk, t0 + i - s0 + 1);
        const float L = lse[i], Dt = Drow[i];
        int j = 0;
        for (; j < j0; j++) sr[j] = dr[j] = 0.0f;
        for (; j < ns; j++) {
            const float p = vexp(sr[j] * scale - L);
            sr[j] = p;
            dr[j] = p * (dr[j] - Dt) * scale;
        }
        for (; j < nk; j++) sr[j] = dr[j] = 0.0f;
    }
}

// One (b, kv head) of the backward: dK, dV of that head, dQ of its query
// heads, key block by key block (FlashAttention-2 order: dK/dV of a block
// complete before the next; dQ accumulated over blocks in ascending order).
static void att_bwd_task(const cpu_impl *im, float *dq, float *dk, float *dv, const float *dout, const float *q,
                         const float *k, const float *v, const float *out, const float *lse, const int32_t *pos, int b,
                         int kvh, int T, int H, int KV, int D, float *ws) {
    const int g = H / KV;
    const float scale = 1.0f / sqrtf((float)D);
    const size_t qld = (size_t)H * D, kld = (size_t)KV * D;
    float *S = ws, *dP = S + (size_t)ATT_BQ * ATT_BK, *dK = dP + (size_t)ATT_BQ * ATT_BK,
          *dV = dK + (size_t)ATT_BK * D, *Drow = dV + (size_t)ATT_BK * D;
    for (int hi = 0; hi < g; hi++) {  // Drow[h][t] = dO_t . O_t; dq rows of this group zeroed
        const int hh = kvh * g + hi;
        for (int t = 0; t < T; t++) {
            const size_t o = ((size_t)b * T + t) * qld + (size_t)hh * D;
            Drow[(size_t)hi * T + t] = dot16(dout + o, out + o, D);
            memset(dq + o, 0, sizeof(float) * D);
        }
    }
    const float *kb = k + (size_t)b * T * kld + (size_t)kvh * D, *vb = v + (size_t)b * T * kld + (size_t)kvh * D;
    for (int s0 = 0; s0 < T; s0 += ATT_BK) {
        const int nk = PT_MIN(ATT_BK, T - s0);
        const float *kblk = kb + (size_t)s0 * kld, *vblk = vb + (size_t)s0 * kld;
        memset(dK, 0, sizeof(float) * (size_t)ATT_BK * D);
        memset(dV, 0, sizeof(float) * (size_t)ATT_BK * D);
        for (int hi = 0; hi < g; hi++) {
            const int hh = kvh * g + hi;
            const float *lr = lse + ((size_t)b * H + hh) * T;
            for (int t0 = s0; t0 < T; t0 += ATT_BQ) {
                const int nq = PT_MIN(ATT_BQ, T - t0);
                const int32_t *pq = pos ? pos + (size_t)b * T + t0 : NULL;
                if (pq && att_lo_min(pq, t0, nq) >= s0 + nk) continue;  // no row of the tile sees the block
                const size_t o = ((size_t)b * T + t0) * qld + (size_t)hh * D;
                const float *qt = q + o, *gt = dout + o;
                sgemm_tile(im, 0, 1, nq, nk, D, qt, (int)qld, kblk, (int)kld, 0.0f, S, ATT_BK);   // S = Q K^T
                sgemm_tile(im, 0, 1, nq, nk, D, gt, (int)qld, vblk, (int)kld, 0.0f, dP, ATT_BK);  // dP = dO V^T
                att_bwd_softmax(S, dP, lr + t0, Drow + (size_t)hi * T + t0, pq, nq, nk, t0, s0, scale);
                sgemm_tile(im, 1, 0, nk, D, nq, S, ATT_BK, gt, (int)qld, 1.0f, dV, D);        // dV += P^T dO
                sgemm_tile(im, 1, 0, nk, D, nq, dP, ATT_BK, qt, (int)qld, 1.0f, dK, D);       // dK += dS^T Q
                sgemm_tile(im, 0, 0, nq, D, nk, dP, ATT_BK, kblk, (int)kld, 1.0f, dq + o, (int)qld);  // dQ += dS K
            }
        }
        for (int j = 0; j < nk; j++) {
            const size_t o = ((size_t)b * T + s0 + j) * kld + (size_t)kvh * D;
            memcpy(dk + o, dK + (size_t)j * D, sizeof(float) * D);
            memcpy(dv + o, dV + (size_t)j * D, sizeof(float) * D);
        }
    }
}

static void cpu_attention_backward(pt_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                                   const float *k, const float *v, const float *out, const float *saved,
                                   const int32_t *pos, int B, int T, int H, int KV, int D) {
    PROF_BEGIN(be);
    cpu_impl *im = be->impl;
    const size_t per = att_scratch_floats(T, D, H / KV);
    float *ws = scratch_get(&im->att, sizeof(float) * per * omp_get_max_threads());
#pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < B * KV; task++)
        att_bwd_task(im, dq, dk, dv, dout, q, k, v, out, saved, pos, task / KV, task % KV, T, H, KV, D,
                     ws + per * omp_get_thread_num());
    PROF_END(K_ATT_B, 4.0 * B * H * (double)T * (T + 1) * D);
}

// ---------------------------------------------------------------- elementwise

PT_CLONES static void swiglu_fwd_blk(float *restrict out, const float *restrict gate, const float *restrict up,
                                     size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float x = gate[i];
        out[i] = x / (1.0f + vexp(-x)) * up[i];
    }
}

PT_CLONES static void swiglu_bwd_blk(float *restrict dgate, float *restrict dup, const float *restrict dout,
                                     const float *restrict gate, const float *restrict up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float x = gate[i];
        const float sg = 1.0f / (1.0f + vexp(-x));
        dup[i] = dout[i] * (x * sg);
        dgate[i] = dout[i] * up[i] * (sg * (1.0f + x * (1.0f - sg)));
    }
}

PT_CLONES static void add_blk(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

PT_CLONES static void scale_blk(float *x, float s, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

PT_CLONES static double sumsq_blk(const float *g, size_t n) {
    double a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += (double)g[i + k] * (double)g[i + k];
    double s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
    for (; i < n; i++) s += (double)g[i] * (double)g[i];
    return s;
}

PT_CLONES static void adamw_blk(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                                size_t n, float decay, float w1, float b2, float w2, float step_size, float bc2_sqrt,
                                float eps) {
    // Same operation order as cpu-ref / torch.optim.AdamW (single-tensor path).
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i];
        float pi = p[i] * decay;
        const float mi = m[i] + w1 * (gi - m[i]);
        const float vi = v[i] * b2 + w2 * (gi * gi);
        const float denom = (float)(sqrt((double)vi) / bc2_sqrt + eps);
        pi += -step_size * (mi / denom);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

#define EW_LOOP(n, CALL)                                                   \
    do {                                                                   \
        const size_t n_ = (n);                                             \
        const long nb_ = (long)((n_ + EW_BLOCK - 1) / EW_BLOCK);           \
        _Pragma("omp parallel for schedule(static)") for (long b_ = 0; b_ < nb_; b_++) { \
            const size_t o = (size_t)b_ * EW_BLOCK, len = PT_MIN((size_t)EW_BLOCK, n_ - o); \
            CALL;                                                          \
        }                                                                  \
    } while (0)

static void cpu_swiglu_forward(pt_backend *be, float *out, const float *gate, const float *up, size_t n) {
    PROF_BEGIN(be);
    if (be->bf16_casts) EW_LOOP(n, swiglu_fwd_blk_bf16(out + o, gate + o, up + o, len));
    else EW_LOOP(n, swiglu_fwd_blk(out + o, gate + o, up + o, len));
    PROF_END(K_SWIGLU_F, 0);
}
static void cpu_swiglu_backward(pt_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                                const float *up, size_t n) {
    PROF_BEGIN(be);
    EW_LOOP(n, swiglu_bwd_blk(dgate + o, dup + o, dout + o, gate + o, up + o, len));
    PROF_END(K_SWIGLU_B, 0);
}
static void cpu_add(pt_backend *be, float *out, const float *a, const float *b, size_t n) {
    PROF_BEGIN(be);
    EW_LOOP(n, add_blk(out + o, a + o, b + o, len));
    PROF_END(K_ADD, 0);
}
static void cpu_scale(pt_backend *be, float *x, float s, size_t n) {
    PROF_BEGIN(be);
    EW_LOOP(n, scale_blk(x + o, s, len));
    PROF_END(K_SCALE, 0);
}

static void cpu_sum_squares(pt_backend *be, double *out, const float *g, size_t n) {
    PROF_BEGIN(be);
    cpu_impl *im = be->impl;
    const size_t nb = (n + SS_BLK - 1) / SS_BLK;
    double *part = scratch_get(&im->ss, sizeof(double) * (nb ? nb : 1));
#pragma omp parallel for schedule(static)
    for (long b = 0; b < (long)nb; b++) part[b] = sumsq_blk(g + (size_t)b * SS_BLK, PT_MIN(SS_BLK, n - (size_t)b * SS_BLK));
    double s = 0;
    for (size_t b = 0; b < nb; b++) s += part[b];
    *out = s;
    PROF_END(K_SUMSQ, 0);
}

static void cpu_adamw(pt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, int t) {
    PROF_BEGIN(be);
    const float decay = (float)(1.0 - (double)lr * weight_decay);
    const float w1 = (float)(1.0 - beta1), b2 = beta2, w2 = (float)(1.0 - beta2);
    const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    const float step_size = (float)(lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    EW_LOOP(n, adamw_blk(p + o, g + o, m + o, v + o, len, decay, w1, b2, w2, step_size, bc2_sqrt, eps));
    PROF_END(K_ADAMW, 0);
}

// ---------------------------------------------------------------- lm_head + cross-entropy

// sum_i exp(x[i] - m), storing the exponentials in place when store
PT_CLONES static double row_expsum(float *x, int n, float m, int store) {
    float a[16] = {0};
    int i = 0;
    if (store) {
        for (; i + 16 <= n; i += 16)
            for (int k = 0; k < 16; k++) {
                const float e = vexp(x[i + k] - m);
                x[i + k] = e;
                a[k] += e;
            }
    } else {
        for (; i + 16 <= n; i += 16)
            for (int k = 0; k < 16; k++) a[k] += vexp(x[i + k] - m);
    }
    double s = sum16(a);
    for (; i < n; i++) {
        const float e = vexp(x[i] - m);
        if (store) x[i] = e;
        s += e;
    }
    return s;
}

// Stats of one logits tile stored transposed, L[tv][rc]: vocabulary entry v0 + v
// in row v, token r of the chunk in column r (row stride rc). Per token r: the
// tile's max, its sum of exp(logit - max) (exps stored in place when store),
// and its target's logit when the target falls in the tile. Columns go in
// blocks of XS_RB, so the max pass and the exp pass vectorise across tokens
// and the second pass reads the block (tv x XS_RB floats, 512 KiB) from L2;
// each sum is float over XS_VB entries, then double across them, in v order.
enum { XS_RB = 64, XS_VB = 128 };
PT_CLONES static void xent_tile_stats(float *L, int rc, int tv, int v0, const int32_t *tg, float *tm, double *ts,
                                      float *tl, int ntiles, int j, int store) {
    for (int r0 = 0; r0 < rc; r0 += XS_RB) {
        const int nr = PT_MIN(XS_RB, rc - r0);
        float m[XS_RB], a[XS_RB];
        double s[XS_RB];
        for (int k = 0; k < nr; k++) {
            const int t = tg[r0 + k];
            if (t >= v0 && t < v0 + tv) tl[r0 + k] = L[(size_t)(t - v0) * rc + r0 + k];
            m[k] = -FLT_MAX;
            s[k] = 0;
        }
        for (int v = 0; v < tv; v++) {
            const float *x = L + (size_t)v * rc + r0;
            for (int k = 0; k < nr; k++) m[k] = x[k] > m[k] ? x[k] : m[k];
        }
        for (int vb = 0; vb < tv; vb += XS_VB) {
            const int ve = PT_MIN(tv, vb + XS_VB);
            for (int k = 0; k < nr; k++) a[k] = 0;
            for (int v = vb; v < ve; v++) {
                float *x = L + (size_t)v * rc + r0;
                if (store)
                    for (int k = 0; k < nr; k++) {
                        const float e = vexp(x[k] - m[k]);
                        x[k] = e;
                        a[k] += e;
                    }
                else
                    for (int k = 0; k < nr; k++) a[k] += vexp(x[k] - m[k]);
            }
            for (int k = 0; k < nr; k++) s[k] += a[k];
        }
        for (int k = 0; k < nr; k++) {
            tm[(size_t)(r0 + k) * ntiles + j] = m[k];
            ts[(size_t)(r0 + k) * ntiles + j] = s[k];
        }
    }
}

// Xs[r] = f[r][j] * X[r] (f = 0 for ignored rows)
PT_CLONES static void xent_scale_rows(float *restrict Xs, const float *restrict X, int rc, int C, const float *f,
                                      int ntiles, int j) {
    for (int r = 0; r < rc; r++) {
        const float fr = f[(size_t)r * ntiles + j];
        for (int c = 0; c < C; c++) Xs[(size_t)r * C + c] = fr * X[(size_t)r * C + c];
    }
}

// P[r] (=|+=) f[r][j] * Q[r]
PT_CLONES static void xent_acc_rows(float *restrict P, const float *restrict Q, int rc, int C, const float *f,
                                    int ntiles, int j, int first) {
    for (int r = 0; r < rc; r++) {
        const float fr = f[(size_t)r * ntiles + j];
        float *pr = P + (size_t)r * C;
        const float *qr = Q + (size_t)r * C;
        if (first)
            for (int c = 0; c < C; c++) pr[c] = fr * qr[c];
        else
            for (int c = 0; c < C; c++) pr[c] += fr * qr[c];
    }
}

// dst[idx[n]][c0..c1) += alpha * src[n][c0..c1) for idx[n] >= 0, rows in order
PT_CLONES static void scatter_rows_cols(float *dst, const float *src, const int32_t *idx, int N, int C, int c0,
                                        int c1, float alpha) {
    for (int n = 0; n < N; n++) {
        if (idx[n] < 0) continue;
        float *d = dst + (size_t)idx[n] * C;
        const float *g = src + (size_t)n * C;
        for (int c = c0; c < c1; c++) d[c] += alpha * g[c];
    }
}

// dX[r] = sum_g P_g[r] (group order) - scale * W[target_r]
PT_CLONES static void xent_dx_rows(float *dx, const float *part, int rc, int NG, int C, const float *w,
                                   const int32_t *tg, int r0, int r1, float scale) {
    for (int r = r0; r < r1; r++) {
        float *d = dx + (size_t)r * C;
        for (int c = 0; c < C; c++) d[c] = part[(size_t)r * C + c];
        for (int g = 1; g < NG; g++) {
            const float *p = part + ((size_t)g * rc + r) * C;
            for (int c = 0; c < C; c++) d[c] += p[c];
        }
        if (tg[r] >= 0) {
            const float *wr = w + (size_t)tg[r] * C;
            for (int c = 0; c < C; c++) d[c] -= scale * wr[c];
        }
    }
}

static void xent_bf16(pt_backend *be, double *loss_sum, float *dinp, float *dw, const float *inp, const float *w,
                      const uint16_t *w16, const int32_t *targets, int N, int C, int V, float scale);

static void cpu_lm_head_xent(pt_backend *be, double *loss_sum, float *dinp, float *dw, const float *inp,
                             const float *w, const int32_t *targets, int N, int C, int V, float scale) {
    if (be->bf16_casts) {  // bf16 logits and logit gradients (backend.h), here on sgemm
        xent_bf16(be, loss_sum, dinp, dw, inp, w, NULL, targets, N, C, V, scale);
        return;
    }
    PROF_BEGIN(be);
    cpu_impl *im = be->impl;
    const int nth = omp_get_max_threads();
    const int R = PT_MAX(1, PT_MIN(N, im->xent_rows));
    const int TV = PT_MAX(16, PT_MIN(V, im->xent_tile));
    const int ntiles = (V + TV - 1) / TV;
    const int NG = PT_MIN(ntiles, XENT_GROUPS);
    const int train = dinp != NULL;
    // logits chunk: tile j of a chunk of rc rows lives at rc * j * TV, stored transposed [tv][rc]
    float *lg = scratch_get(&im->xent, sizeof(float) * (train ? (size_t)R * V : (size_t)nth * R * TV));
    // per-row stats: tile max (then gradient factor), tile sum-exp, target logit, row loss
    const size_t st_bytes = sizeof(float) * (size_t)R * ntiles + sizeof(double) * (size_t)R * ntiles +
                            sizeof(float) * R + sizeof(double) * R + 256;
    char *st = scratch_get(&im->xstat, st_bytes);
    double *ts = (double *)st, *rloss = ts + (size_t)R * ntiles;
    float *tm = (float *)(rloss + R), *tl = tm + (size_t)R * ntiles;
    float *part = train ? scratch_get(&im->xpart, sizeof(float) * ((size_t)NG * R * C + (size_t)nth * 2 * R * C)) : NULL;
    double total = 0;
    for (int n0 = 0; n0 < N; n0 += R) {
        const int rc = PT_MIN(R, N - n0);
        const float *X = inp + (size_t)n0 * C;
        const int32_t *tg = targets + n0;
        for (int r = 0; r < rc; r++) tl[r] = 0;
        double tp = im->profile ? pt_now_s() : 0;
        // pass 1: logits tiles, per-tile max and sum-exp (exp stored when training)
#pragma omp parallel for schedule(dynamic, 1)
        for (int j = 0; j < ntiles; j++) {
            const int v0 = j * TV, tv = PT_MIN(TV, V - v0);
            float *L = train ? lg + (size_t)rc * v0 : lg + (size_t)omp_get_thread_num() * R * TV;
            sgemm_tile(im, 0, 1, tv, rc, C, w + (size_t)v0 * C, C, X, C, 0.0f, L, rc);  // L^T = W_j X^T
            xent_tile_stats(L, rc, tv, v0, tg, tm, ts, tl, ntiles, j, train);
        }
        if (im->profile) {
            im->prof_s[K_XENT_P1] += pt_now_s() - tp;
            im->prof_flops[K_XENT_P1] += 2.0 * rc * C * (double)V;
            im->prof_calls[K_XENT_P1]++;
            tp = pt_now_s();
        }
        // per row: logsumexp over tiles in tile order, loss, gradient factors
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rc; r++) {
            float *tmr = tm + (size_t)r * ntiles;
            const double *tsr = ts + (size_t)r * ntiles;
            if (tg[r] < 0) {
                rloss[r] = 0;
                for (int j = 0; j < ntiles; j++) tmr[j] = 0;
                continue;
            }
            float M = -FLT_MAX;
            for (int j = 0; j < ntiles; j++) M = tmr[j] > M ? tmr[j] : M;
            double S = 0;
            for (int j = 0; j < ntiles; j++) S += tsr[j] * exp((double)tmr[j] - (double)M);
            const double lse = (double)M + log(S);
            rloss[r] = lse - (double)tl[r];
            if (train)
                for (int j = 0; j < ntiles; j++) tmr[j] = (float)(exp((double)tmr[j] - lse) * scale);
        }
        for (int r = 0; r < rc; r++) total += rloss[r];
        if (!train) continue;
        // pass 2: G = E * f - scale * onehot(target), tile by tile, without
        // rewriting E: the per-(row, tile) factor f moves onto the small
        // operands (dW_j += E_j^T (f X); P_g += f (E_j W_j)) and the one-hot
        // part is applied once per row below.
#pragma omp parallel for schedule(dynamic, 1)
        for (int gi = 0; gi < NG; gi++) {
            const int j0 = (int)((long)ntiles * gi / NG), j1 = (int)((long)ntiles * (gi + 1) / NG);
            float *P = part + (size_t)gi * rc * C;
            float *Xs = part + (size_t)NG * R * C + (size_t)omp_get_thread_num() * 2 * R * C, *Q = Xs + (size_t)R * C;
            for (int j = j0; j < j1; j++) {
                const int v0 = j * TV, tv = PT_MIN(TV, V - v0);
                const float *L = lg + (size_t)rc * v0;
                xent_scale_rows(Xs, X, rc, C, tm, ntiles, j);
                sgemm_tile(im, 0, 0, tv, C, rc, L, rc, Xs, C, 1.0f, dw + (size_t)v0 * C, C);  // dW_j += E_j (f X)
                sgemm_tile(im, 1, 0, rc, C, tv, L, rc, w + (size_t)v0 * C, C, 0.0f, Q, C);   // Q = E_j^T W_j
                xent_acc_rows(P, Q, rc, C, tm, ntiles, j, j == j0);
            }
        }
        // one-hot part of dW: dW[target_r] -= scale * X_r, rows in order
        {
            const int cs = 16, ncs = (C + cs - 1) / cs;
#pragma omp parallel for schedule(static)
            for (int sl = 0; sl < ncs; sl++) scatter_rows_cols(dw, X, tg, rc, C, sl * cs, PT_MIN(C, (sl + 1) * cs), -scale);
        }
        if (im->profile) {
            im->prof_s[K_XENT_P2] += pt_now_s() - tp;
            im->prof_flops[K_XENT_P2] += 4.0 * rc * C * (double)V;
            im->prof_calls[K_XENT_P2]++;
        }
        // dX rows = sum of group partials in group order - scale * W[target] (overwrite)
        {
            const int rb = 16, nrb = (rc + rb - 1) / rb;
#pragma omp parallel for schedule(static)
            for (int b = 0; b < nrb; b++)
                xent_dx_rows(dinp + (size_t)n0 * C, part, rc, NG, C, w, tg, b * rb, PT_MIN(rc, (b + 1) * rb), scale);
        }
    }
    *loss_sum = total;
    PROF_END(K_XENT, (dinp ? 6.0 : 2.0) * N * C * (double)V);
}

// ---------------------------------------------------------------- bf16 (precision bf16, backend.h)
//
// Values are fp32 holding bf16-exact numbers; the casts below are where
// PyTorch's bf16 ops round. Matmuls: packed bf16 operands on oneDNN (AMX /
// AVX512-BF16) when im->dnnl, else the fp32 sgemm path on the same exact
// values (same products, fp32 sums in another order).

// bf16 round to nearest even on fp32 bits; NaN stays NaN (quiet). Branch-free
// so the loops vectorise.
static inline uint32_t bf16_bits_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t nan = (u | 0x00400000u) & 0xffff0000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}
static inline float rb(float f) {
    const uint32_t u = bf16_bits_rne(f);
    float r;
    memcpy(&r, &u, 4);
    return r;
}

PT_CLONES static void round_bf16_blk(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = rb(src[i]);
}
static void cpu_round_bf16(pt_backend *be, float *dst, const float *src, size_t n) {
    PROF_BEGIN(be);
    EW_LOOP(n, round_bf16_blk(dst + o, src + o, len));
    PROF_END(K_ADD, 0);
}

PT_CLONES static void pack_bf16_blk(uint16_t *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (uint16_t)(bf16_bits_rne(src[i]) >> 16);
}
static void cpu_pack_bf16(pt_backend *be, uint16_t *dst, const float *src, size_t n) {
    EW_LOOP(n, pack_bf16_blk(dst + o, src + o, len));
}
// A packed copy of an activation operand in scratch s.
static const uint16_t *pack_scratch(pt_backend *be, scratch *s, const float *src, size_t n) {
    uint16_t *p = scratch_get(s, sizeof(uint16_t) * (n ? n : 1));
    cpu_pack_bf16(be, p, src, n);
    return p;
}

// out = bf16(w * bf16(x * rstd)), rstd from fp32 statistics as rms_fwd_rows
PT_CLONES static void rms_fwd_rows_bf16(float *out, float *rstd, const float *inp, const float *w, int n0, int n1,
                                        int C, float eps) {
    for (int n = n0; n < n1; n++) {
        const float *x = inp + (size_t)n * C;
        const float r = rms_rstd(x, C, eps);
        rstd[n] = r;
        float *y = out + (size_t)n * C;
        for (int c = 0; c < C; c++) y[c] = rb(w[c] * rb(x[c] * r));
    }
}

// out = bf16(bf16(silu(gate)) * up)
PT_CLONES static void swiglu_fwd_blk_bf16(float *restrict out, const float *restrict gate, const float *restrict up,
                                          size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float x = gate[i];
        out[i] = rb(rb(x / (1.0f + vexp(-x))) * up[i]);
    }
}

static void cpu_matmul_forward_bf16(pt_backend *be, float *out, const float *inp, const float *w, const uint16_t *w16,
                                    int N, int C, int OC) {
    cpu_impl *im = be->impl;
    PROF_BEGIN(be);
    const uint16_t *x16 = pack_scratch(be, &im->b16a, inp, (size_t)N * C);
    pt_dnnl_gemm_bf16(im->dnnl, false, true, N, OC, C, x16, C, w16, C, false, out, OC);
    PROF_END(K_MM_F, 2.0 * N * C * (double)OC);
}

static void cpu_matmul_backward_bf16(pt_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                                     const float *w, const uint16_t *w16, int N, int C, int OC) {
    cpu_impl *im = be->impl;
    PROF_BEGIN(be);
    const uint16_t *g16 = pack_scratch(be, &im->b16a, dout, (size_t)N * OC);
    if (dinp) pt_dnnl_gemm_bf16(im->dnnl, false, false, N, C, OC, g16, OC, w16, C, true, dinp, C);  // += dout @ w
    const uint16_t *x16 = pack_scratch(be, &im->b16b, inp, (size_t)N * C);
    pt_dnnl_gemm_bf16(im->dnnl, true, false, OC, C, N, g16, OC, x16, C, true, dw, C);  // dw += dout^T @ inp
    PROF_END(K_MM_B, (dinp ? 4.0 : 2.0) * N * C * (double)OC);
}

// One row of logits l[V] (target t >= 0): rounded to bf16 in place (the bf16
// logits) and their max in one pass; the loss of HF's logits.float(); with
// `grad` the logit gradient bf16((softmax - onehot) * scale), into g16 as
// packed bf16 when given, else in place.
PT_CLONES static double xent_row_bf16(float *l, int V, int t, float scale, int grad, uint16_t *g16) {
    float mx[16];
    for (int k = 0; k < 16; k++) mx[k] = -FLT_MAX;
    int v = 0;
    for (; v + 16 <= V; v += 16)
        for (int k = 0; k < 16; k++) {
            const float x = rb(l[v + k]);
            l[v + k] = x;
            mx[k] = x > mx[k] ? x : mx[k];
        }
    float m = -FLT_MAX;
    for (int k = 0; k < 16; k++) m = mx[k] > m ? mx[k] : m;
    for (; v < V; v++) {
        l[v] = rb(l[v]);
        m = l[v] > m ? l[v] : m;
    }
    const double lse = (double)m + log(row_expsum(l, V, m, 0));
    const double loss = lse - (double)l[t];
    if (!grad) return loss;
    const float lsef = (float)lse, lt = l[t];
    if (g16) {
        for (v = 0; v < V; v++) g16[v] = (uint16_t)(bf16_bits_rne(vexp(l[v] - lsef) * scale) >> 16);
        g16[t] = (uint16_t)(bf16_bits_rne(vexp(lt - lsef) * scale - scale) >> 16);
    } else {
        for (v = 0; v < V; v++) l[v] = rb(vexp(l[v] - lsef) * scale);
        l[t] = rb(vexp(lt - lsef) * scale - scale);
    }
    return loss;
}

// The rows of a chunk L[rc, V]: summed loss; gradients as xent_row_bf16
// (ignored rows: zero gradient).
static double xent_rows_bf16(float *L, int rc, int V, const int32_t *tg, float scale, int grad, uint16_t *g16,
                             double *rl /* [rc] scratch: row losses, summed in row order */) {
    double total = 0;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rc; r++) {
        rl[r] = 0;
        if (tg[r] >= 0) {
            rl[r] = xent_row_bf16(L + (size_t)r * V, V, tg[r], scale, grad, g16 ? g16 + (size_t)r * V : NULL);
        } else if (grad) {
            if (g16) memset(g16 + (size_t)r * V, 0, sizeof(uint16_t) * V);
            else memset(L + (size_t)r * V, 0, sizeof(float) * V);
        }
    }
    for (int r = 0; r < rc; r++) total += rl[r];
    return total;
}

// lm_head + cross-entropy with bf16 logits (backend.h), in chunks of rows: the
// chunk's full logits row (V floats per row) is the largest buffer, never [N, V].
// w16 == NULL: sgemm on the fp32 operands (bf16-exact), else oneDNN bf16.
static void xent_bf16(pt_backend *be, double *loss_sum, float *dinp, float *dw, const float *inp, const float *w,
                      const uint16_t *w16, const int32_t *targets, int N, int C, int V, float scale) {
    PROF_BEGIN(be);
    cpu_impl *im = be->impl;
    const bool fast = w16 && im->dnnl;
    const int R = PT_MAX(1, PT_MIN(N, im->xent_rows));
    float *L = scratch_get(&im->xent, sizeof(float) * (size_t)R * V);
    double total = 0;
    for (int n0 = 0; n0 < N; n0 += R) {
        const int rc = PT_MIN(R, N - n0);
        const float *X = inp + (size_t)n0 * C;
        const uint16_t *x16 = fast ? pack_scratch(be, &im->b16a, X, (size_t)rc * C) : NULL;
        if (fast) pt_dnnl_gemm_bf16(im->dnnl, false, true, rc, V, C, x16, C, w16, C, false, L, V);
        else gemm(im, 0, 1, rc, V, C, X, C, w, C, 0.0f, L, V);
        uint16_t *g16 = fast && dinp ? scratch_get(&im->xg16, sizeof(uint16_t) * (size_t)rc * V) : NULL;
        total += xent_rows_bf16(L, rc, V, targets + n0, scale, dinp != NULL, g16,
                                scratch_get(&im->xstat, sizeof(double) * R));
        if (!dinp) continue;
        if (fast) {
            pt_dnnl_gemm_bf16(im->dnnl, true, false, V, C, rc, g16, V, x16, C, true, dw, C);          // dW += G^T X
            pt_dnnl_gemm_bf16(im->dnnl, false, false, rc, C, V, g16, V, w16, C, false, dinp + (size_t)n0 * C, C);  // dX = G W
        } else {
            gemm(im, 1, 0, V, C, rc, L, V, X, C, 1.0f, dw, C);
            gemm(im, 0, 0, rc, C, V, L, V, w, C, 0.0f, dinp + (size_t)n0 * C, C);
        }
    }
    *loss_sum = total;
    PROF_END(K_XENT, (dinp ? 6.0 : 2.0) * N * C * (double)V);
}

static void cpu_lm_head_xent_bf16(pt_backend *be, double *loss_sum, float *dinp, float *dw, const float *inp,
                                  const float *w, const uint16_t *w16, const int32_t *targets, int N, int C, int V,
                                  float scale) {
    xent_bf16(be, loss_sum, dinp, dw, inp, w, w16, targets, N, C, V, scale);
}

// ---------------------------------------------------------------- create

static int env_int(const char *name, int def, int lo, int hi) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) {
        pt_warn("%s=%s ignored (want an integer in [%d, %d])", name, s, lo, hi);
        return def;
    }
    return (int)v;
}

static const char *simd_level(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq"))
        return "AVX-512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "AVX2+FMA";
    return "SSE2";
#else
    return "portable C";
#endif
}

// The kernels of both tables below.
#define CPU_FP32_OPS \
    .alloc = cpu_alloc, \
    .free = cpu_free, \
    .upload = cpu_copy, \
    .download = cpu_copy, \
    .copy = cpu_copy, \
    .zero = cpu_zero, \
    .synchronize = cpu_sync, \
    .destroy = cpu_destroy, \
    .embedding_forward = cpu_embedding_forward, \
    .embedding_backward = cpu_embedding_backward, \
    .matmul_forward = cpu_matmul_forward, \
    .matmul_backward = cpu_matmul_backward, \
    .rmsnorm_forward = cpu_rmsnorm_forward, \
    .rmsnorm_backward = cpu_rmsnorm_backward, \
    .rope_forward = cpu_rope_forward, \
    .rope_backward = cpu_rope_backward, \
    .attention_saved_floats = cpu_attention_saved_floats, \
    .attention_forward = cpu_attention_forward, \
    .attention_backward = cpu_attention_backward, \
    .swiglu_forward = cpu_swiglu_forward, \
    .swiglu_backward = cpu_swiglu_backward, \
    .add = cpu_add, \
    .lm_head_xent = cpu_lm_head_xent, \
    .sum_squares = cpu_sum_squares, \
    .scale = cpu_scale, \
    .adamw = cpu_adamw, \
    .round_bf16 = cpu_round_bf16, \
    PT_REF_MOE_OPS

// Without oneDNN's bf16 matmuls the model runs bf16 on the fp32 kernels.
static const pt_backend_ops cpu_ops = {CPU_FP32_OPS};
// With them, the packed bf16 matmuls too.
static const pt_backend_ops cpu_ops_dnnl = {
    CPU_FP32_OPS
    .pack_bf16 = cpu_pack_bf16,
    .matmul_forward_bf16 = cpu_matmul_forward_bf16,
    .matmul_backward_bf16 = cpu_matmul_backward_bf16,
    .lm_head_xent_bf16 = cpu_lm_head_xent_bf16,
};

// `--backend cpu` (no suffix: the registry, backend.c, accepts none).
pt_backend *pt_backend_cpu_create(const char *suffix) {
    pt_backend *be = pt_calloc(1, sizeof *be);
    cpu_impl *im = pt_calloc(1, sizeof *im);
    be->impl = im;
    be->name = "cpu";
    be->host_memory = true;  // plain host allocations: checkpoints and collectives use them in place
    const char *gm = getenv("PT_CPU_GEMM");
    im->gemm_openblas = gm && !strcmp(gm, "openblas");
    // oneDNN's sgemm JIT-compiles for x86-64 only; elsewhere it would take its reference code
    const char *tg = getenv("PT_CPU_TILE_SGEMM");
#if defined(PT_HAVE_DNNL) && defined(__x86_64__)
    im->tile_onednn = !(tg && !strcmp(tg, "openblas"));
#else
    (void)tg;
#endif
    im->profile = env_int("PT_CPU_PROFILE", 0, 0, 1);
    im->gemm_onednn = im->tile_onednn && !(gm && (!strcmp(gm, "split") || !strcmp(gm, "openblas")));
    im->gemm_bm = 256;
    im->gemm_bn = 512;
    const char *gb = getenv("PT_CPU_GEMM_BLOCK");
    if (gb && *gb && (sscanf(gb, "%dx%d", &im->gemm_bm, &im->gemm_bn) != 2 || im->gemm_bm < 16 || im->gemm_bn < 16)) {
        fprintf(stderr, "warning: PT_CPU_GEMM_BLOCK=%s: expected ROWSxCOLS, both >= 16; using 256x512\n", gb);
        im->gemm_bm = 256;
        im->gemm_bn = 512;
    }
    im->xent_rows = env_int("PT_CPU_XENT_ROWS", 512, 1, 1 << 20);
    im->xent_tile = env_int("PT_CPU_XENT_TILE", 2048, 16, 1 << 24);
    openblas_set_num_threads(1);  // our OpenMP threads call single-threaded sgemm
    // PT_CPU_BF16_GEMM=sgemm: bf16 matmuls on the fp32 sgemm path (the fallback of CPUs without bf16 units).
    const char *bg = getenv("PT_CPU_BF16_GEMM");
    im->dnnl = bg && !strcmp(bg, "sgemm") ? NULL : pt_dnnl_create();
    char gemm_desc[64];
    if (im->gemm_onednn) snprintf(gemm_desc, sizeof gemm_desc, "oneDNN in %dx%d blocks", im->gemm_bm, im->gemm_bn);
    else snprintf(gemm_desc, sizeof gemm_desc, "%s", im->gemm_openblas ? "OpenBLAS threads" : "OpenBLAS per thread");
    snprintf(be->device, sizeof be->device,
             "host CPU (fast kernels: %s, OpenBLAS %s, %d OpenMP threads, matmuls: %s, tile sgemm: %s, bf16 "
             "matmuls: %s)",
             simd_level(), openblas_get_corename(), omp_get_max_threads(), gemm_desc,
             im->tile_onednn ? "oneDNN" : "OpenBLAS",
             im->dnnl ? pt_dnnl_impl(im->dnnl) : "sgemm");
    be->ops = im->dnnl ? &cpu_ops_dnnl : &cpu_ops;
    pt_cpu_fault_kernels(be);  // test-only wrong kernels (PT_FAULT_KERNEL), cpu_faults.c
    return be;
}

// `portatrain devices`: the backend's own line (SIMD level, OpenBLAS kernels,
// threads, tile sgemm and bf16 matmul libraries) and OpenBLAS's build.
int pt_cpu_print_devices(FILE *f) {
    pt_backend *cpu = pt_backend_cpu_create("");
    fprintf(f, "cpu          %s; %s\n", cpu->device, openblas_get_config());
    pt_backend_destroy(cpu);
    return 1;
}

const char *pt_cpu_blas_config(void) { return openblas_get_config(); }
#endif  // PT_NO_CPU_BACKEND
