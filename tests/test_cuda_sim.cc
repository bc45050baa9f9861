// The CUDA emulator (src/backend/cuda/sim): kernels written against
// cuda_compat.h only, checked against plain loops; the host GEMMs against
// naive loops; the launch checks as death tests (fork, expect SIGABRT and the
// message).
#include "backend/cuda/cuda_compat.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

static int g_failures = 0;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
            g_failures++;                                                  \
        }                                                                  \
    } while (0)

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        cudaError_t err_ = (call);                                                             \
        CHECK(err_ == cudaSuccess, "%s returned %s", #call, cudaGetErrorString(err_));         \
    } while (0)

static uint32_t g_rng = 12345;
static float rand_uniform(void) {  // [-1, 1)
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)(g_rng >> 8) / (float)(1u << 23) - 1.0f;
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

template <class T>
static T *to_device(const std::vector<T> &host) {
    T *d = nullptr;
    CUDA_OK(cudaMalloc(&d, host.size() * sizeof(T)));
    CUDA_OK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <class T>
static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> host(n);
    CUDA_OK(cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}

// ---- kernels ----

// out[y][x] = 2 a[y][x] + 1 on a 2-D grid.
PT_KERNEL void affine_2d(float *__restrict__ out, const float *__restrict__ a, int width, int height) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) out[y * width + x] = 2.0f * a[y * width + x] + 1.0f;
}

// Every thread of a 3-D grid writes its linear id and a visit count.
PT_KERNEL void ids_3d(int *ids, int *visits, int nx, int ny, int nz) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x >= nx || y >= ny || z >= nz) return;
    int i = (z * ny + y) * nx + x;
    ids[i] = (int)(((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * 1000 +
                   (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
    visits[i]++;
}

// sums[b] = tree sum of x[b*256 .. b*256+255] (shared memory + __syncthreads).
PT_KERNEL void block_sum_256(float *sums, const float *x, int n) {
    __shared__ float partial[256];
    int i = blockIdx.x * 256 + threadIdx.x;
    partial[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = 128; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = partial[0];
}

// Per warp: an xor butterfly all-reduce (every lane gets the sum) and a
// shfl_down reduction (lane 0 gets it); also a broadcast with __shfl_sync.
PT_KERNEL void warp_sums(float *xor_out, float *down_out, float *bcast_out, const float *x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i], d = x[i];
    for (int mask = 16; mask > 0; mask /= 2) v += __shfl_xor_sync(0xffffffffu, v, mask);
    for (int delta = 16; delta > 0; delta /= 2) d += __shfl_down_sync(0xffffffffu, d, delta);
    xor_out[i] = v;
    down_out[i] = d;
    bcast_out[i] = __shfl_sync(0xffffffffu, x[i], 5 + (int)threadIdx.x);  // srcLane beyond 31 wraps (mod 32)
}

// A block of 100 threads: warp 3 has 4 lanes. Each warp sums its lanes with
// shfl_down, guarded by the lane count; raw[i] is an unguarded shfl_down by 4.
PT_KERNEL void partial_warp(float *sums, float *raw, const float *x) {
    int t = threadIdx.x, lane = t % 32;
    int lanes = (int)blockDim.x - (t / 32) * 32 < 32 ? (int)blockDim.x - (t / 32) * 32 : 32;
    float v = x[t];
    raw[t] = __shfl_down_sync(0xffffffffu, v, 4);
    for (int delta = 16; delta > 0; delta /= 2) {
        float other = __shfl_down_sync(0xffffffffu, v, delta);
        if (lane + delta < lanes) v += other;
    }
    if (lane == 0) sums[t / 32] = v;
    __syncwarp();
}

// Reverses n floats through dynamic shared memory (one block).
PT_KERNEL void reverse_dyn(float *out, const float *in, int n, unsigned int *first_read) {
    PT_DYN_SMEM(float, buf);
    if (threadIdx.x == 0) *first_read = __float_as_uint(buf[0]);  // before anyone wrote: the poison
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}

// out (cols x rows) = in (rows x cols)^T through a padded 32x33 tile, 32x8 threads.
PT_KERNEL void transpose_tiled(float *out, const float *in, int rows, int cols) {
    __shared__ float tile[32][33];
    int x = blockIdx.x * 32 + threadIdx.x, y0 = blockIdx.y * 32;
    for (int j = threadIdx.y; j < 32; j += 8)
        if (x < cols && y0 + j < rows) tile[j][threadIdx.x] = in[(size_t)(y0 + j) * cols + x];
    __syncthreads();
    int ox = blockIdx.y * 32 + threadIdx.x, oy0 = blockIdx.x * 32;
    for (int j = threadIdx.y; j < 32; j += 8)
        if (ox < rows && oy0 + j < cols) out[(size_t)(oy0 + j) * rows + ox] = tile[threadIdx.x][j];
}

// Thread 0 reads s[5] before anyone in its block wrote it: block 1 must not
// see what block 0 left there.
PT_KERNEL void reads_unwritten_shared(unsigned int *out) {
    __shared__ float s[64];
    if (threadIdx.x == 0) out[blockIdx.x] = __float_as_uint(s[5]);
    __syncthreads();
    s[threadIdx.x] = 1.0f;
}

// A race: every thread writes the same element; the last one to run wins.
PT_KERNEL void racy_last_writer(int *out) { out[0] = (int)(blockIdx.x * blockDim.x + threadIdx.x); }

PT_KERNEL void writes_past_end(float *x, int n) {
    if (threadIdx.x == 0) x[n] = 1.0f;
}

// Many warp all-reduces, for the shuffle timing.
PT_KERNEL void shuffle_loop(float *out, int iters) {
    float v = (float)threadIdx.x;
    for (int i = 0; i < iters; i++)
        for (int mask = 16; mask > 0; mask /= 2) v += __shfl_xor_sync(0xffffffffu, v, mask) * 0.5f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

// Many barriers, for the context-switch timing.
PT_KERNEL void barrier_loop(int *out, int iters) {
    __shared__ int counter[256];
    counter[threadIdx.x] = 0;
    for (int i = 0; i < iters; i++) {
        __syncthreads();
        counter[threadIdx.x] += counter[(threadIdx.x + 1) % blockDim.x] & 1;
    }
    __syncthreads();
    out[threadIdx.x] = counter[threadIdx.x];
}

PT_KERNEL void math_ops(float *out, float x) {
    out[0] = rsqrtf(x);
    out[1] = __expf(x);
    out[2] = __logf(x);
    out[3] = __fdividef(x, 3.0f);
    out[4] = __uint_as_float(__float_as_uint(x));
    out[5] = fmaxf(x, 2.0f) + fminf(x, 2.0f) + tanhf(x) + powf(x, 1.5f) + fabsf(-x) + sqrtf(x);
}

// ---- death-test kernels ----

PT_KERNEL void syncs_unannounced(float *x) {
    __syncthreads();
    x[threadIdx.x] = 0.0f;
}

PT_KERNEL void shuffles_unannounced(float *x) { x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1); }

PT_KERNEL void divergent_sync(float *x) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    x[threadIdx.x] = 1.0f;
}

PT_KERNEL void plain(float *x) { x[threadIdx.x] = 1.0f; }

PT_KERNEL void launches_nested(float *x) { PT_LAUNCH(plain, 1, 1, 0, 0, x); }

PT_KERNEL void uses_dyn_smem(float *x) {
    PT_DYN_SMEM(float, buf);
    buf[threadIdx.x] = x[threadIdx.x];
}

PT_KERNEL void overruns_dyn_smem(int n) {
    PT_DYN_SMEM(unsigned char, buf);
    if (threadIdx.x == 0) buf[n] = 1;  // one byte past the end
}

PT_KERNEL void deadlocks(float *x) {
    // Half of warp 0 waits for the other half at the shuffle, which waits
    // with warp 1 at the barrier.
    if (threadIdx.x < 16)
        x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
    else
        __syncthreads();
}

PT_KERNEL void partial_mask(float *x) { x[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, x[threadIdx.x], 1); }

// ---- tests ----

static void test_elementwise(void) {
    const int W = 37, H = 23;
    std::vector<float> a(W * H);
    for (float &v : a) v = rand_uniform();
    float *da = to_device(a), *dout = nullptr;
    CUDA_OK(cudaMalloc(&dout, a.size() * sizeof(float)));
    dim3 block(16, 8), grid((W + 15) / 16, (H + 7) / 8);
    PT_LAUNCH(affine_2d, grid, block, 0, 0, dout, da, W, H);
    CUDA_OK(cudaGetLastError());
    std::vector<float> out = to_host(dout, a.size());
    int bad = 0;
    for (int i = 0; i < W * H; i++) bad += !same_bits(out[i], 2.0f * a[i] + 1.0f);
    CHECK(bad == 0, "affine_2d: %d of %d wrong", bad, W * H);
    CUDA_OK(cudaFree(da));
    CUDA_OK(cudaFree(dout));

    const int nx = 9, ny = 7, nz = 10;
    dim3 b3(4, 3, 2), g3((nx + 3) / 4, (ny + 2) / 3, (nz + 1) / 2);
    int *ids = nullptr, *visits = nullptr;
    CUDA_OK(cudaMalloc(&ids, nx * ny * nz * sizeof(int)));
    CUDA_OK(cudaMalloc(&visits, nx * ny * nz * sizeof(int)));
    CUDA_OK(cudaMemsetAsync(visits, 0, nx * ny * nz * sizeof(int), 0));
    PT_LAUNCH(ids_3d, g3, b3, 0, 0, ids, visits, nx, ny, nz);
    std::vector<int> hid = to_host(ids, nx * ny * nz), hv = to_host(visits, nx * ny * nz);
    bad = 0;
    for (int z = 0; z < nz; z++)
        for (int y = 0; y < ny; y++)
            for (int x = 0; x < nx; x++) {
                int i = (z * ny + y) * nx + x;
                int block_lin = ((z / 2) * (int)g3.y + y / 3) * (int)g3.x + x / 4;
                int thread_lin = ((z % 2) * 3 + y % 3) * 4 + x % 4;
                bad += hid[i] != block_lin * 1000 + thread_lin || hv[i] != 1;
            }
    CHECK(bad == 0, "ids_3d: %d of %d wrong", bad, nx * ny * nz);
    CUDA_OK(cudaFree(ids));
    CUDA_OK(cudaFree(visits));
}

static std::vector<float> run_block_sum(const std::vector<float> &x) {
    int blocks = ((int)x.size() + 255) / 256;
    float *dx = to_device(x), *dsums = nullptr;
    CUDA_OK(cudaMalloc(&dsums, blocks * sizeof(float)));
    PT_LAUNCH_SYNC(block_sum_256, blocks, 256, 0, 0, dsums, dx, (int)x.size());
    CUDA_OK(cudaGetLastError());
    std::vector<float> sums = to_host(dsums, blocks);
    CUDA_OK(cudaFree(dx));
    CUDA_OK(cudaFree(dsums));
    return sums;
}

static void test_block_reduction(void) {
    std::vector<float> x(1000);
    for (float &v : x) v = rand_uniform();
    std::vector<float> sums = run_block_sum(x);
    int bad = 0;
    for (size_t b = 0; b < sums.size(); b++) {
        float p[256];
        for (int t = 0; t < 256; t++) p[t] = b * 256 + t < x.size() ? x[b * 256 + t] : 0.0f;
        for (int stride = 128; stride > 0; stride /= 2)
            for (int t = 0; t < stride; t++) p[t] += p[t + stride];
        bad += !same_bits(sums[b], p[0]);
    }
    CHECK(bad == 0, "block_sum_256: %d of %zu blocks wrong", bad, sums.size());
    std::vector<float> again = run_block_sum(x);
    CHECK(memcmp(again.data(), sums.data(), sums.size() * sizeof(float)) == 0, "block_sum_256 not deterministic");
}

static void test_warp_reduction(void) {
    const int n = 128;  // two blocks of 64: four warps
    std::vector<float> x(n);
    for (float &v : x) v = rand_uniform();
    float *dx = to_device(x), *dxor, *ddown, *dbc;
    CUDA_OK(cudaMalloc(&dxor, n * sizeof(float)));
    CUDA_OK(cudaMalloc(&ddown, n * sizeof(float)));
    CUDA_OK(cudaMalloc(&dbc, n * sizeof(float)));
    PT_LAUNCH_SYNC(warp_sums, 2, 64, 0, 0, dxor, ddown, dbc, dx);
    std::vector<float> hxor = to_host(dxor, n), hdown = to_host(ddown, n), hbc = to_host(dbc, n);
    int bad_xor = 0, bad_down = 0, bad_bc = 0;
    for (int w = 0; w < n / 32; w++) {
        float v[32], d[32];
        for (int l = 0; l < 32; l++) v[l] = d[l] = x[w * 32 + l];
        for (int mask = 16; mask > 0; mask /= 2) {
            float nv[32];
            for (int l = 0; l < 32; l++) nv[l] = v[l] + v[l ^ mask];
            memcpy(v, nv, sizeof v);
        }
        for (int delta = 16; delta > 0; delta /= 2) {
            float nd[32];
            for (int l = 0; l < 32; l++) nd[l] = d[l] + (l + delta < 32 ? d[l + delta] : d[l]);
            memcpy(d, nd, sizeof d);
        }
        for (int l = 0; l < 32; l++) {
            int t = (w * 32 + l) % 64;  // threadIdx.x
            bad_xor += !same_bits(hxor[w * 32 + l], v[l]);
            bad_down += !same_bits(hdown[w * 32 + l], d[l]);
            bad_bc += !same_bits(hbc[w * 32 + l], x[w * 32 + (5 + t) % 32]);
        }
    }
    CHECK(bad_xor == 0, "__shfl_xor_sync butterfly: %d lanes wrong", bad_xor);
    CHECK(bad_down == 0, "__shfl_down_sync reduction: %d lanes wrong", bad_down);
    CHECK(bad_bc == 0, "__shfl_sync: %d lanes wrong", bad_bc);
    CUDA_OK(cudaFree(dx));
    CUDA_OK(cudaFree(dxor));
    CUDA_OK(cudaFree(ddown));
    CUDA_OK(cudaFree(dbc));
}

static void test_partial_warp(void) {
    const int n = 100;
    std::vector<float> x(n);
    for (int i = 0; i < n; i++) x[i] = (float)(i + 1);  // exact sums
    float *dx = to_device(x), *dsums, *draw;
    CUDA_OK(cudaMalloc(&dsums, 4 * sizeof(float)));
    CUDA_OK(cudaMalloc(&draw, n * sizeof(float)));
    PT_LAUNCH_SYNC(partial_warp, 1, n, 0, 0, dsums, draw, dx);
    std::vector<float> sums = to_host(dsums, 4), raw = to_host(draw, n);
    for (int w = 0; w < 4; w++) {
        float want = 0;
        for (int t = w * 32; t < n && t < w * 32 + 32; t++) want += x[t];
        CHECK(sums[w] == want, "partial_warp: warp %d sum %g, want %g", w, sums[w], want);
    }
    CHECK(raw[5] == x[9], "shfl_down by 4 in a full warp: %g, want %g", raw[5], x[9]);
    CHECK(raw[30] == x[30], "shfl_down past lane 31 keeps the own value: %g, want %g", raw[30], x[30]);
    CHECK(std::isnan(raw[97]), "lane 1 of the 4-lane warp reads lane 5, which does not exist: %g, want NaN", raw[97]);
    CUDA_OK(cudaFree(dx));
    CUDA_OK(cudaFree(dsums));
    CUDA_OK(cudaFree(draw));
}

static void test_dynamic_smem(void) {
    const int n = 16384;  // 64 KiB: above the default 48 KiB
    const size_t bytes = n * sizeof(float);
    std::vector<float> x(n);
    for (float &v : x) v = rand_uniform();
    float *dx = to_device(x), *dout;
    unsigned int *dfirst;
    CUDA_OK(cudaMalloc(&dout, bytes));
    CUDA_OK(cudaMalloc(&dfirst, sizeof(unsigned int)));
    CUDA_OK(cudaFuncSetAttribute(reverse_dyn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    PT_LAUNCH_SYNC(reverse_dyn, 1, 256, bytes, 0, dout, dx, n, dfirst);
    CUDA_OK(cudaGetLastError());
    std::vector<float> out = to_host(dout, n);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += !same_bits(out[i], x[n - 1 - i]);
    CHECK(bad == 0, "reverse_dyn: %d of %d wrong", bad, n);
    unsigned int first = to_host(dfirst, 1)[0];
    CHECK(first == 0xffffffffu, "dynamic shared memory starts poisoned: 0x%08x", first);
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CHECK(cudaFuncSetAttribute(reverse_dyn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)prop.sharedMemPerBlockOptin + 1) == cudaErrorInvalidValue,
          "an attribute above sharedMemPerBlockOptin is refused");
    cudaGetLastError();
    CUDA_OK(cudaFree(dx));
    CUDA_OK(cudaFree(dout));
    CUDA_OK(cudaFree(dfirst));
}

static void test_static_smem_poison(void) {
    unsigned int *d;
    CUDA_OK(cudaMalloc(&d, 2 * sizeof(unsigned int)));
    PT_LAUNCH_SYNC(reads_unwritten_shared, 2, 64, 0, 0, d);
    std::vector<unsigned int> h = to_host(d, 2);
#ifdef PT_SIM_ASAN
    printf("static __shared__ poisoning: off under ASan (block 1 read 0x%08x)\n", h[1]);
#else
    CHECK(h[0] == 0xffffffffu && h[1] == 0xffffffffu, "static shared memory poisoned per block: 0x%08x 0x%08x", h[0],
          h[1]);
#endif
    CUDA_OK(cudaFree(d));
}

// Race-free kernels give bitwise the same results with blocks and threads in
// reverse order; a racy one does not (what PT_CUDA_SIM_REVERSE=1 is for).
static void test_reverse_order(void) {
    std::vector<float> x(777);
    for (float &v : x) v = rand_uniform();
    pt_sim_set_reverse_order(false);
    std::vector<float> fwd = run_block_sum(x);
    int *d;
    CUDA_OK(cudaMalloc(&d, sizeof(int)));
    PT_LAUNCH(racy_last_writer, 3, 64, 0, 0, d);
    int last_fwd = to_host(d, 1)[0];
    pt_sim_set_reverse_order(true);
    std::vector<float> rev = run_block_sum(x);
    PT_LAUNCH(racy_last_writer, 3, 64, 0, 0, d);
    int last_rev = to_host(d, 1)[0];
    pt_sim_set_reverse_order(false);
    CHECK(memcmp(fwd.data(), rev.data(), fwd.size() * sizeof(float)) == 0, "block_sum_256 depends on the order");
    CHECK(last_fwd == 191 && last_rev == 0, "the racy kernel's winner: %d forward, %d reversed", last_fwd, last_rev);
    CUDA_OK(cudaFree(d));
}

static void test_transpose(void) {
    const int rows = 100, cols = 77;
    std::vector<float> in(rows * cols);
    for (float &v : in) v = rand_uniform();
    float *din = to_device(in), *dout;
    CUDA_OK(cudaMalloc(&dout, in.size() * sizeof(float)));
    PT_LAUNCH_SYNC(transpose_tiled, dim3((cols + 31) / 32, (rows + 31) / 32), dim3(32, 8), 0, 0, dout, din, rows,
                   cols);
    std::vector<float> out = to_host(dout, in.size());
    int bad = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) bad += !same_bits(out[c * rows + r], in[r * cols + c]);
    CHECK(bad == 0, "transpose_tiled: %d of %d wrong", bad, rows * cols);
    CUDA_OK(cudaFree(din));
    CUDA_OK(cudaFree(dout));
}

static void test_math(void) {
    float *d;
    CUDA_OK(cudaMalloc(&d, 6 * sizeof(float)));
    PT_LAUNCH(math_ops, 1, 1, 0, 0, d, 2.5f);
    std::vector<float> h = to_host(d, 6);
    CHECK(same_bits(h[0], 1.0f / sqrtf(2.5f)), "rsqrtf");
    CHECK(same_bits(h[1], expf(2.5f)), "__expf");
    CHECK(same_bits(h[2], logf(2.5f)), "__logf");
    CHECK(same_bits(h[3], 2.5f / 3.0f), "__fdividef");
    CHECK(same_bits(h[4], 2.5f), "__float_as_uint/__uint_as_float");
    CHECK(fabsf(h[5] - (2.5f + 2.0f + tanhf(2.5f) + powf(2.5f, 1.5f) + 2.5f + sqrtf(2.5f))) < 1e-5f, "libm");
    CUDA_OK(cudaFree(d));
}

static void test_runtime(void) {
    int count = 0, dev = -1;
    CUDA_OK(cudaGetDeviceCount(&count));
    CHECK(count == 1, "device count %d", count);
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaGetDevice(&dev));
    CHECK(dev == 0, "device %d", dev);
    CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice, "cudaSetDevice(1)");
    CHECK(cudaGetLastError() == cudaErrorInvalidDevice, "the error is recorded");
    CHECK(cudaGetLastError() == cudaSuccess, "and reset when read");
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    CHECK(strcmp(prop.name, "portatrain CUDA emulator (host CPU)") == 0, "name '%s'", prop.name);
    CHECK(prop.major == 9 && prop.minor == 0 && prop.multiProcessorCount == 132, "sm %d.%d x%d", prop.major,
          prop.minor, prop.multiProcessorCount);
    CHECK(prop.sharedMemPerBlockOptin == 227 * 1024 && prop.totalGlobalMem > (1u << 20), "memory sizes");
    CHECK(prop.warpSize == warpSize && warpSize == 32, "warpSize");

    float host[4] = {1, 2, 3, 4};
    float *d = nullptr;
    CUDA_OK(cudaMalloc(&d, sizeof host));
    CHECK(((uintptr_t)d & 255) == 0, "cudaMalloc is 256-byte aligned");
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    CUDA_OK(cudaMemcpyAsync(d, host, sizeof host, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemsetAsync(d + 2, 0, 2 * sizeof(float), s));
    float back[4];
    CUDA_OK(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK(back[0] == 1 && back[1] == 2 && back[2] == 0 && back[3] == 0, "memcpy/memset");
    CHECK(cudaMemcpy(d, host, sizeof host + 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
          "a copy past the allocation is refused");
    CHECK(cudaMemcpy(back, host, sizeof host, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
          "a host pointer as the device source is refused");
    CHECK(cudaFree(host) == cudaErrorInvalidValue, "cudaFree of an unknown pointer");
    cudaGetLastError();
    PT_LAUNCH(plain, 0, 32, 0, s, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "an empty grid is an invalid configuration");
    PT_LAUNCH(plain, 1, dim3(4, 0), 0, s, d);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "an empty block is an invalid configuration");
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaStreamDestroy(s));
    CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle, "a destroyed stream");
    cudaGetLastError();
    CUDA_OK(cudaFree(d));
    CUDA_OK(cudaFree(nullptr));
    CHECK(strcmp(cudaGetErrorString(cudaErrorInvalidConfiguration), "invalid configuration argument") == 0,
          "error string");
}

// ---- GEMMs ----

static float tf32(float x) {  // the test's own rounding, by arithmetic on the bits
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lower = u & 0x1fffu, keep = u & ~0x1fffu;
    if (lower > 0x1000u || (lower == 0x1000u && (keep & 0x2000u))) keep += 0x2000u;
    memcpy(&x, &keep, 4);
    return x;
}

static float bf16f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// The same fp32 operations in the same order, one element at a time.
static void naive_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const std::function<float(long long)> &A,
                       int lda, const std::function<float(long long)> &B, int ldb, float beta, float *C, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float acc = 0.0f;
            for (int p = 0; p < k; p++) {
                float a = ta ? A(p + (long long)i * lda) : A(i + (long long)p * lda);
                float b = tb ? B(j + (long long)p * ldb) : B(p + (long long)j * ldb);
                acc += a * b;
            }
            float &c = C[i + (size_t)j * ldc];
            c = beta == 0.0f ? alpha * acc : alpha * acc + beta * c;
        }
}

static void test_gemm_f32(void) {
    const int m = 37, n = 29, k = 51;
    for (int combo = 0; combo < 4; combo++)
        for (int pass = 0; pass < 2; pass++) {  // beta 0 over NaN, then beta 1 accumulation
            bool ta = combo & 1, tb = combo & 2;
            int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 2, ldc = m + 5;
            std::vector<float> A((size_t)lda * (ta ? m : k)), B((size_t)ldb * (tb ? k : n));
            for (float &v : A) v = rand_uniform();
            for (float &v : B) v = rand_uniform();
            std::vector<float> C((size_t)ldc * n), want;
            float beta = pass == 0 ? 0.0f : 1.0f;
            for (float &v : C) v = pass == 0 ? NAN : rand_uniform();
            want = C;
            const std::vector<float> C0 = C;
            pt_sim_gemm_f32(ta, tb, m, n, k, 0.75f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, false);
            naive_gemm(ta, tb, m, n, k, 0.75f, [&](long long i) { return A[i]; }, lda,
                       [&](long long i) { return B[i]; }, ldb, beta, want.data(), ldc);
            int bad = 0, nans = 0;
            double max_err = 0;
            for (int j = 0; j < n; j++)
                for (int i = 0; i < ldc; i++) {
                    size_t idx = i + (size_t)j * ldc;
                    if (i >= m) {  // the rows between m and ldc are not touched
                        bad += !(same_bits(C[idx], want[idx]) || (std::isnan(C[idx]) && std::isnan(want[idx])));
                        continue;
                    }
                    bad += !same_bits(C[idx], want[idx]);
                    nans += std::isnan(C[idx]);
                    double exact = 0;
                    for (int p = 0; p < k; p++)
                        exact += (double)(ta ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda]) *
                                 (tb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb]);
                    double e = fabs((double)C[idx] - (0.75 * exact + (pass ? (double)C0[idx] : 0.0)));
                    max_err = e > max_err ? e : max_err;
                }
            CHECK(bad == 0 && nans == 0, "gemm_f32 ta=%d tb=%d beta=%g: %d elements differ from the naive loop, %d NaN",
                  ta, tb, beta, bad, nans);
            CHECK(max_err < 1e-4, "gemm_f32 ta=%d tb=%d: max error %g against fp64", ta, tb, max_err);
        }
}

// split-K order (PT_CUDA_SIM_GEMM=splitk): other bits than the ascending sum,
// as accurate against fp64, and deterministic.
static void test_gemm_splitk(void) {
    const int m = 19, n = 7, k = 1001;
    std::vector<float> A((size_t)m * k), B((size_t)k * n), asc((size_t)m * n), sk1(asc.size()), sk2(asc.size());
    for (float &v : A) v = rand_uniform();
    for (float &v : B) v = rand_uniform();
    pt_sim_gemm_f32(false, false, m, n, k, 1.0f, A.data(), m, B.data(), k, 0.0f, asc.data(), m, false);
    pt_sim_set_gemm_splitk(true);
    pt_sim_gemm_f32(false, false, m, n, k, 1.0f, A.data(), m, B.data(), k, 0.0f, sk1.data(), m, false);
    pt_sim_gemm_f32(false, false, m, n, k, 1.0f, A.data(), m, B.data(), k, 0.0f, sk2.data(), m, false);
    pt_sim_set_gemm_splitk(false);
    int differ = 0;
    double e_asc = 0, e_sk = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double exact = 0;
            for (int p = 0; p < k; p++) exact += (double)A[i + (size_t)p * m] * B[p + (size_t)j * k];
            const size_t x = i + (size_t)j * m;
            differ += !same_bits(asc[x], sk1[x]);
            e_asc = fmax(e_asc, fabs(asc[x] - exact));
            e_sk = fmax(e_sk, fabs(sk1[x] - exact));
        }
    CHECK(differ > m * n / 4, "splitk gemm: only %d of %d elements differ from the ascending sum", differ, m * n);
    CHECK(e_sk < 1e-3 && e_asc < 1e-3, "splitk gemm: max error %g (ascending %g) against fp64", e_sk, e_asc);
    CHECK(memcmp(sk1.data(), sk2.data(), sk1.size() * sizeof(float)) == 0, "splitk gemm not deterministic");
}

static void test_gemm_tf32(void) {
    // Rounding at the tf32 boundary (10 mantissa bits, nearest even): C = A * 1.
    const float ulp = 1.0f / 1024;  // tf32 spacing at 1
    float a[4] = {1.0f + ulp / 2, 1.0f + 3 * ulp / 2, 1.0f + ulp / 2 + ulp / 64, -(1.0f + ulp / 4)};
    float want[4] = {1.0f, 1.0f + 2 * ulp, 1.0f + ulp, -1.0f};
    float one = 1.0f, c[4];
    pt_sim_gemm_f32(false, false, 4, 1, 1, 1.0f, a, 4, &one, 1, 0.0f, c, 4, true);
    for (int i = 0; i < 4; i++) CHECK(c[i] == want[i], "tf32(%.9g) = %.9g, want %.9g", a[i], c[i], want[i]);

    // A sum of k products of (1 + 2^-12): fp32 keeps the 2^-12, tf32 drops it.
    const int k = 64;
    std::vector<float> A(k, 1.0f + 1.0f / 4096), B(k, 1.0f);
    float c32, ctf;
    pt_sim_gemm_f32(false, false, 1, 1, k, 1.0f, A.data(), 1, B.data(), k, 0.0f, &c32, 1, false);
    pt_sim_gemm_f32(false, false, 1, 1, k, 1.0f, A.data(), 1, B.data(), k, 0.0f, &ctf, 1, true);
    CHECK(ctf == (float)k, "tf32 sum %.9g, want %d", ctf, k);
    CHECK(fabsf(c32 - ctf - k / 4096.0f) < 1e-6f, "fp32 - tf32 = %.9g, want %.9g", c32 - ctf, k / 4096.0f);

    // Random matrices: equal to the naive loop over rounded inputs, not to the fp32 one.
    const int m = 19, n = 13, kk = 40;
    std::vector<float> X(m * kk), Y(kk * n), C(m * n), W(m * n), F(m * n);
    for (float &v : X) v = rand_uniform();
    for (float &v : Y) v = rand_uniform();
    pt_sim_gemm_f32(true, false, m, n, kk, 1.0f, X.data(), kk, Y.data(), kk, 0.0f, C.data(), m, true);
    pt_sim_gemm_f32(true, false, m, n, kk, 1.0f, X.data(), kk, Y.data(), kk, 0.0f, F.data(), m, false);
    naive_gemm(true, false, m, n, kk, 1.0f, [&](long long i) { return tf32(X[i]); }, kk,
               [&](long long i) { return tf32(Y[i]); }, kk, 0.0f, W.data(), m);
    int bad = 0, differ = 0;
    for (int i = 0; i < m * n; i++) {
        bad += !same_bits(C[i], W[i]);
        differ += !same_bits(C[i], F[i]);
    }
    CHECK(bad == 0, "tf32 gemm: %d elements differ from the naive loop over tf32 inputs", bad);
    CHECK(differ > m * n / 2, "tf32 rounding visible: only %d of %d elements differ from fp32", differ, m * n);
}

static void test_gemm_bf16_batched(void) {
    const int m = 21, n = 17, k = 33;
    for (int combo = 0; combo < 4; combo++) {
        bool ta = combo & 1, tb = combo & 2;
        int lda = (ta ? k : m) + 1, ldb = (tb ? n : k), ldc = m;
        std::vector<uint16_t> A((size_t)lda * (ta ? m : k)), B((size_t)ldb * (tb ? k : n));
        for (uint16_t &v : A) {
            float f = rand_uniform();
            uint32_t u;
            memcpy(&u, &f, 4);
            v = (uint16_t)(u >> 16);
        }
        for (uint16_t &v : B) {
            float f = rand_uniform();
            uint32_t u;
            memcpy(&u, &f, 4);
            v = (uint16_t)(u >> 16);
        }
        std::vector<float> C(ldc * n, NAN), W(ldc * n);
        pt_sim_gemm_bf16(ta, tb, m, n, k, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), ldc);
        naive_gemm(ta, tb, m, n, k, 1.0f, [&](long long i) { return bf16f(A[i]); }, lda,
                   [&](long long i) { return bf16f(B[i]); }, ldb, 0.0f, W.data(), ldc);
        int bad = 0;
        for (size_t i = 0; i < C.size(); i++) bad += !same_bits(C[i], W[i]);
        CHECK(bad == 0, "gemm_bf16 ta=%d tb=%d: %d elements differ", ta, tb, bad);
    }

    // Strided batched: 3 GEMMs (A^T B, as attention scores), beta 1.
    const int batch = 3, bm = 9, bn = 11, bk = 7;
    const long long sa = bk * bm + 4, sb = bk * bn + 2, sc = bm * bn + 3;
    std::vector<float> A(sa * batch), B(sb * batch), C(sc * batch), W;
    for (float &v : A) v = rand_uniform();
    for (float &v : B) v = rand_uniform();
    for (float &v : C) v = rand_uniform();
    W = C;
    pt_sim_gemm_strided_batched_f32(true, false, bm, bn, bk, 0.5f, A.data(), bk, B.data(), bk, 1.0f, C.data(), bm,
                                    false, sa, sb, sc, batch);
    for (int b = 0; b < batch; b++)
        naive_gemm(true, false, bm, bn, bk, 0.5f, [&](long long i) { return A[b * sa + i]; }, bk,
                   [&](long long i) { return B[b * sb + i]; }, bk, 1.0f, W.data() + b * sc, bm);
    int bad = 0;
    for (size_t i = 0; i < C.size(); i++) bad += !same_bits(C[i], W[i]);
    CHECK(bad == 0, "strided batched gemm: %d elements differ", bad);
}

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static void test_gemm_large_and_timing(bool sanitized) {
    const int m = sanitized ? 256 : 2048, n = sanitized ? 128 : 1024, k = sanitized ? 128 : 1024;
    std::vector<float> A((size_t)m * k), B((size_t)k * n), C1((size_t)m * n), C2((size_t)m * n);
    for (float &v : A) v = rand_uniform();
    for (float &v : B) v = rand_uniform();
    auto t0 = std::chrono::steady_clock::now();
    pt_sim_gemm_f32(false, false, m, n, k, 1.0f, A.data(), m, B.data(), k, 0.0f, C1.data(), m, false);
    double dt = seconds_since(t0);
    printf("timing: gemm %dx%dx%d fp32 in %.3f s (%.2f GFLOP/s)\n", m, n, k, dt, 2.0 * m * n * k / dt / 1e9);
    pt_sim_gemm_f32(false, false, m, n, k, 1.0f, A.data(), m, B.data(), k, 0.0f, C2.data(), m, false);
    CHECK(memcmp(C1.data(), C2.data(), C1.size() * sizeof(float)) == 0, "gemm not deterministic");
    // Spot-check some elements against the naive order.
    int bad = 0;
    for (int s = 0; s < 64; s++) {
        int i = (s * 977) % m, j = (s * 613) % n;
        float acc = 0;
        for (int p = 0; p < k; p++) acc += A[i + (size_t)p * m] * B[p + (size_t)j * k];
        bad += !same_bits(C1[i + (size_t)j * m], acc);
    }
    CHECK(bad == 0, "large gemm: %d of 64 sampled elements differ from the naive loop", bad);
}

static void timing_plain_launch(bool sanitized) {
    const int n = sanitized ? 1 << 18 : 1 << 22, width = 1024;
    float *da, *dout;
    CUDA_OK(cudaMalloc(&da, n * sizeof(float)));
    CUDA_OK(cudaMalloc(&dout, n * sizeof(float)));
    CUDA_OK(cudaMemsetAsync(da, 0, n * sizeof(float), 0));
    auto t0 = std::chrono::steady_clock::now();
    PT_LAUNCH(affine_2d, dim3(width / 256, n / width), 256, 0, 0, dout, da, width, n / width);
    double dt = seconds_since(t0);
    printf("timing: PT_LAUNCH elementwise, %d threads in %.3f s: %.0f M threads/s\n", n, dt, n / dt / 1e6);
    CUDA_OK(cudaFree(da));
    CUDA_OK(cudaFree(dout));
}

static void timing_context_switches(bool sanitized) {
    int *d;
    CUDA_OK(cudaMalloc(&d, 256 * sizeof(int)));
    const int iters = sanitized ? 20 : 200;
    unsigned long long s0 = pt_sim_context_switches();
    auto t0 = std::chrono::steady_clock::now();
    PT_LAUNCH_SYNC(barrier_loop, 4, 256, 0, 0, d, iters);
    double dt = seconds_since(t0);
    unsigned long long switches = pt_sim_context_switches() - s0;
    printf("timing: __syncthreads: %llu fiber switches in %.3f s: %.1f M switches/s\n", switches, dt,
           switches / dt / 1e6);
    CUDA_OK(cudaFree(d));
    float *f;
    CUDA_OK(cudaMalloc(&f, 4 * 256 * sizeof(float)));
    s0 = pt_sim_context_switches();
    t0 = std::chrono::steady_clock::now();
    PT_LAUNCH_SYNC(shuffle_loop, 4, 256, 0, 0, f, iters / 4);
    dt = seconds_since(t0);
    switches = pt_sim_context_switches() - s0;
    printf("timing: __shfl_xor_sync: %llu fiber switches in %.3f s: %.1f M switches/s\n", switches, dt,
           switches / dt / 1e6);
    CUDA_OK(cudaFree(f));
}

// ---- death tests ----

// Runs fn in a child; it must abort (SIGABRT) with `message` on stderr.
static void expect_death(const char *what, const std::function<void()> &fn, const char *message,
                         bool asan_ok = false) {
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        perror("pipe");
        exit(1);
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        fn();
        _exit(0);  // no abort: the parent reports it
    }
    close(pipefd[1]);
    std::string err;
    char buf[512];
    ssize_t got;
    while ((got = read(pipefd[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)got);
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    // ASan reports its own findings and exits non-zero (or aborts).
    bool aborted = (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) ||
                   (asan_ok && WIFEXITED(status) && WEXITSTATUS(status) != 0);
    CHECK(aborted, "%s: the child did not abort (status 0x%x), stderr: %s", what, status, err.c_str());
    CHECK(err.find(message) != std::string::npos, "%s: stderr lacks '%s': %s", what, message, err.c_str());
}

static void test_deaths(void) {
    static float buf[2048];
    float *d = buf;  // death-test kernels write nowhere dangerous
    expect_death("__syncthreads in a PT_LAUNCH kernel", [&] { PT_LAUNCH(syncs_unannounced, 1, 32, 0, 0, d); },
                 "kernel 'syncs_unannounced' synchronises: launch it with PT_LAUNCH_SYNC (it called __syncthreads)");
    expect_death("a shuffle in a PT_LAUNCH kernel", [&] { PT_LAUNCH(shuffles_unannounced, 1, 32, 0, 0, d); },
                 "kernel 'shuffles_unannounced' synchronises: launch it with PT_LAUNCH_SYNC (it called "
                 "__shfl_xor_sync)");
    expect_death("divergent __syncthreads", [&] { PT_LAUNCH_SYNC(divergent_sync, 1, 64, 0, 0, d); },
                 "kernel 'divergent_sync': __syncthreads not reached by every thread");
    expect_death("more than 1024 threads", [&] { PT_LAUNCH(plain, 1, dim3(64, 32), 0, 0, d); },
                 "kernel 'plain': block (64, 32, 1) has 2048 threads, more than 1024");
    expect_death("blockDim.z > 64", [&] { PT_LAUNCH(plain, 1, dim3(1, 1, 128), 0, 0, d); },
                 "kernel 'plain': blockDim.z 128 > 64");
    expect_death("grid.y > 65535", [&] { PT_LAUNCH(plain, dim3(1, 70000), 32, 0, 0, d); },
                 "kernel 'plain': grid (1, 70000, 1) exceeds");
    expect_death("> 48 KiB dynamic smem without the attribute",
                 [&] { PT_LAUNCH(uses_dyn_smem, 1, 32, 49 * 1024, 0, d); },
                 "kernel 'uses_dyn_smem': 50176 bytes of dynamic shared memory need cudaFuncSetAttribute");
    expect_death("PT_DYN_SMEM with 0 bytes", [&] { PT_LAUNCH(uses_dyn_smem, 1, 32, 0, 0, d); },
                 "kernel 'uses_dyn_smem' uses PT_DYN_SMEM but was launched with 0 bytes");
    expect_death("a write past the dynamic smem", [&] { PT_LAUNCH(overruns_dyn_smem, 1, 1, 100, 0, 100); },
                 "kernel 'overruns_dyn_smem', block (0, 0, 0): a write past its 100 bytes");
    {
        float *dev;
        CUDA_OK(cudaMalloc(&dev, 100 * sizeof(float)));
#ifdef PT_SIM_ASAN
        const char *past_end = "heap-buffer-overflow";
#else
        const char *past_end = "kernel 'writes_past_end' wrote past the end of the 400-byte device buffer";
#endif
        expect_death("a write past a device buffer", [&] { PT_LAUNCH(writes_past_end, 1, 32, 0, 0, dev, 100); },
                     past_end, true);
        CUDA_OK(cudaFree(dev));
    }
    expect_death("deadlock", [&] { PT_LAUNCH_SYNC(deadlocks, 1, 64, 0, 0, d); },
                 "kernel 'deadlocks', block (0, 0, 0): deadlock");
    expect_death("a launch inside a kernel", [&] { PT_LAUNCH(launches_nested, 1, 1, 0, 0, d); },
                 "kernel 'plain' launched from inside kernel 'launches_nested'");
    expect_death("__syncthreads outside a kernel", [&] { __syncthreads(); }, "__syncthreads called outside a kernel");
    expect_death("a partial mask", [&] { PT_LAUNCH_SYNC(partial_mask, 1, 32, 0, 0, d); },
                 "kernel 'partial_mask': __shfl_xor_sync with mask 0x0000ffff");
    expect_death("a bad lda", [&] {
        float x[4] = {0};
        pt_sim_gemm_f32(false, false, 4, 1, 1, 1.0f, x, 2, x, 1, 0.0f, x, 4, false);
    }, "pt_sim_gemm_f32: lda 2 < 4");
}

int main(void) {
    const char *san = getenv("PT_SANITIZED");
    bool sanitized = san && *san && strcmp(san, "0") != 0;
    test_runtime();
    test_elementwise();
    test_block_reduction();
    test_warp_reduction();
    test_partial_warp();
    test_dynamic_smem();
    test_transpose();
    test_static_smem_poison();
    test_reverse_order();
    test_math();
    test_gemm_f32();
    test_gemm_splitk();
    test_gemm_tf32();
    test_gemm_bf16_batched();
    test_gemm_large_and_timing(sanitized);
    timing_plain_launch(sanitized);
    timing_context_switches(sanitized);
    test_deaths();
    if (g_failures) {
        fprintf(stderr, "test_cuda_sim: %d failures\n", g_failures);
        return 1;
    }
    printf("test_cuda_sim: ok\n");
    return 0;
}
