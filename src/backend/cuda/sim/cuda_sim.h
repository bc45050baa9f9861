// CUDA emulator: the subset of CUDA that cuda_compat.h lists, for a .cu file
// compiled as C++17 by the host compiler (PT_CUDA_SIM, the `cuda-sim`
// backend). Include cuda_compat.h, not this file.
//
// Kernels are plain functions. A launch runs every block in order (blockIdx.x
// fastest, then y, z) on the calling host thread:
//   PT_LAUNCH       every thread of a block is a plain call, one after another
//                   (fast; a __syncthreads/__syncwarp/shuffle there aborts);
//   PT_LAUNCH_SYNC  every thread of a block is a fiber; each runs until it
//                   waits at a barrier or warp operation or exits, so
//                   barriers and warp shuffles have CUDA's semantics, and
//                   divergent barriers and deadlocks abort naming the kernel.
// __shared__ is `static`: blocks run one after another, so one copy is
// exactly the block's shared memory. Launch limits are an H100/H200's and
// are checked (a violation aborts, naming the kernel, instead of failing
// quietly as on a GPU); cudaGetLastError reports what CUDA reports as an
// error code (an empty grid or block: cudaErrorInvalidConfiguration).
// Work on streams runs synchronously; memory is host memory. Uninitialised
// memory is made visible: fresh device allocations, dynamic shared memory
// and (PT_LAUNCH_SYNC blocks) static shared arrays start as 0xff bytes (NaN);
// a write past a device buffer or the dynamic shared buffer aborts naming the
// kernel (ASan builds: ASan reports it). PT_CUDA_SIM_REVERSE=1 runs blocks and
// threads in reverse order, to expose results that depend on the order.
//
// Launches are serialised by a lock (one emulated device); the runtime
// calls may come from any host thread.
#pragma once

#if defined(__CUDACC__)
#error "sim/cuda_sim.h is the host emulator: nvcc builds get CUDA from cuda_compat.h"
#endif
#if !defined(__cplusplus) || __cplusplus < 201703L
#error "the CUDA emulator needs C++17"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define PT_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PT_SIM_ASAN 1
#endif
#endif

#include <math.h>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- types and enums (values as in CUDA's driver_types.h) ----

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

struct CUstream_st;  // opaque, as in CUDA; the emulator's streams are tokens
typedef struct CUstream_st *cudaStream_t;

// The fields of CUDA's cudaDeviceProp that the emulator fills (a subset).
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;          // the host's physical memory
    size_t sharedMemPerBlock;       // 48 KiB: above it a kernel needs the attribute
    size_t sharedMemPerBlockOptin;  // 227 KiB, as an H100/H200
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int major, minor;               // 9.0
    int multiProcessorCount;        // 132
};

inline constexpr int warpSize = 32;

// ---- runtime API ----

cudaError_t cudaMalloc(void **ptr, size_t bytes);
template <class T>
inline cudaError_t cudaMalloc(T **ptr, size_t bytes) { return cudaMalloc(reinterpret_cast<void **>(ptr), bytes); }
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = 0);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream = 0);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaGetLastError(void);   // the last error, then cudaSuccess again
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);

// ---- internals used by the macros below (cuda_sim.cc) ----

namespace pt_sim {

// The current emulated thread's indices: set by the scheduler before it runs
// (or resumes) a thread; kernels read them through the macros below.
extern uint3 g_thread_idx;
extern uint3 g_block_idx;
extern dim3 g_block_dim;
extern dim3 g_grid_dim;
// Blocks and threads run in reverse order (pt_sim_set_reverse_order).
extern bool g_reverse_order;

// Checks the launch configuration and takes the launch lock; false (and the
// lock not taken) when the launch must not run: the error is then recorded
// for cudaGetLastError. Bugs a GPU would only report as an error code abort.
bool begin_launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t smem_bytes,
                  cudaStream_t stream, bool sync);
void begin_block(unsigned int x, unsigned int y, unsigned int z);  // blockIdx, poisons shared memory
void end_block(void);                                              // checks the dynamic smem canary
void end_launch(void);                                             // releases the lock
// Runs every block of the launch begun with sync = true, its threads as fibers.
void run_fibers(void (*thread_body)(void *), void *ctx);
unsigned char *dyn_smem(void);
enum warp_op { WARP_SYNC, WARP_SHFL, WARP_SHFL_XOR, WARP_SHFL_DOWN };
uint64_t warp_exchange(warp_op op, unsigned int mask, uint64_t value, int arg, int width);
cudaError_t func_set_attribute(const void *kernel, cudaFuncAttribute attr, int value);

template <class F>
void call_body(void *f) { (*static_cast<F *>(f))(); }

template <bool Sync, class... P, class... A>
inline void launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes,
                   cudaStream_t stream, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    // Converted to the parameter types once, as a CUDA launch does.
    std::tuple<std::decay_t<P>...> params(std::forward<A>(args)...);
    auto body = [&] { std::apply(kernel, params); };
    if (!begin_launch(name, reinterpret_cast<const void *>(kernel), grid, block, smem_bytes, stream, Sync))
        return;
    if constexpr (Sync) {
        run_fibers(&call_body<decltype(body)>, &body);
    } else if (!g_reverse_order) {
        for (unsigned int bz = 0; bz < grid.z; bz++)
            for (unsigned int by = 0; by < grid.y; by++)
                for (unsigned int bx = 0; bx < grid.x; bx++) {
                    begin_block(bx, by, bz);
                    for (unsigned int tz = 0; tz < block.z; tz++)
                        for (unsigned int ty = 0; ty < block.y; ty++)
                            for (unsigned int tx = 0; tx < block.x; tx++) {
                                g_thread_idx = uint3{tx, ty, tz};
                                body();
                            }
                    end_block();
                }
    } else {
        for (unsigned int bz = grid.z; bz-- > 0;)
            for (unsigned int by = grid.y; by-- > 0;)
                for (unsigned int bx = grid.x; bx-- > 0;) {
                    begin_block(bx, by, bz);
                    for (unsigned int tz = block.z; tz-- > 0;)
                        for (unsigned int ty = block.y; ty-- > 0;)
                            for (unsigned int tx = block.x; tx-- > 0;) {
                                g_thread_idx = uint3{tx, ty, tz};
                                body();
                            }
                    end_block();
                }
    }
    end_launch();
}

template <class T>
inline T shuffle(warp_op op, unsigned int mask, T var, int arg, int width) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move values of up to 8 bytes");
    uint64_t bits = 0;
    std::memcpy(&bits, &var, sizeof var);
    bits = warp_exchange(op, mask, bits, arg, width);
    T out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
}

}  // namespace pt_sim

template <class T>
inline cudaError_t cudaFuncSetAttribute(T *kernel, cudaFuncAttribute attr, int value) {
    return pt_sim::func_set_attribute(reinterpret_cast<const void *>(kernel), attr, value);
}

// ---- the kernel language ----

#define PT_KERNEL static
#define PT_DEVICE static inline
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
// Static shared arrays live in one section, so the emulator can poison them
// (0xff bytes) at the start of every PT_LAUNCH_SYNC block, as it does the
// dynamic buffer: a read before the block wrote shows up as NaN. (g++ keeps
// template functions' statics out of the section: those are not poisoned.)
// Under ASan they are plain statics, which ASan bounds-checks instead.
#ifdef PT_SIM_ASAN
#define __shared__ static
#else
#define __shared__ static __attribute__((section("pt_sim_shared"), aligned(16)))
#endif

#define threadIdx (static_cast<const uint3 &>(::pt_sim::g_thread_idx))
#define blockIdx (static_cast<const uint3 &>(::pt_sim::g_block_idx))
#define blockDim (static_cast<const dim3 &>(::pt_sim::g_block_dim))
#define gridDim (static_cast<const dim3 &>(::pt_sim::g_grid_dim))

// The launch's dynamic shared memory (smem_bytes, 16-byte aligned, poisoned
// with 0xff bytes, a NaN as float, at each block's start).
#define PT_DYN_SMEM(T, name)                                                        \
    static_assert(alignof(T) <= 16, "dynamic shared memory is 16-byte aligned");   \
    T *name = reinterpret_cast<T *>(::pt_sim::dyn_smem())

#define PT_LAUNCH(k, grid, block, smem, stream, ...) \
    ::pt_sim::launch<false>(#k, k, dim3(grid), dim3(block), (smem), (stream), ##__VA_ARGS__)
#define PT_LAUNCH_SYNC(k, grid, block, smem, stream, ...) \
    ::pt_sim::launch<true>(#k, k, dim3(grid), dim3(block), (smem), (stream), ##__VA_ARGS__)

void __syncthreads(void);
inline void __syncwarp(unsigned int mask = 0xffffffffu) {
    pt_sim::warp_exchange(pt_sim::WARP_SYNC, mask, 0, 0, warpSize);
}

// Full-warp masks only (others abort). A lane that reads a lane which does
// not exist (the partial last warp of a block) gets all-ones bits: a NaN as
// float, the "undefined" of CUDA made visible.
template <class T>
inline T __shfl_sync(unsigned int mask, T var, int src_lane, int width = warpSize) {
    return pt_sim::shuffle(pt_sim::WARP_SHFL, mask, var, src_lane, width);
}
template <class T>
inline T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = warpSize) {
    return pt_sim::shuffle(pt_sim::WARP_SHFL_XOR, mask, var, lane_mask, width);
}
template <class T>
inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = warpSize) {
    return pt_sim::shuffle(pt_sim::WARP_SHFL_DOWN, mask, var, (int)delta, width);
}

// Fiber switches so far (PT_LAUNCH_SYNC launches), for timing.
unsigned long long pt_sim_context_switches(void);
// Run blocks and threads (and fibers' round-robin) in reverse order from now
// on, as the environment variable PT_CUDA_SIM_REVERSE=1 does from the start:
// a race-free kernel gives bitwise the same result either way, so a test that
// runs both catches races between threads that the fixed order hides.
void pt_sim_set_reverse_order(bool reverse);
// GEMMs sum each element in four split-K partials of fused multiply-adds
// instead of one ascending sum (also PT_CUDA_SIM_GEMM=splitk): a summation
// order unlike cpu-ref's, as cuBLAS's is, for the tolerance tests.
void pt_sim_set_gemm_splitk(bool splitk);

// ---- math: the host's libm; the fast intrinsics are the exact functions ----

// glibc's math.h declares __expf and __logf (its internal names for the same
// functions), so these two are macros.
#define __expf(x) expf(x)
#define __logf(x) logf(x)
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline unsigned int __float_as_uint(float x) {
    unsigned int u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}
static inline float __uint_as_float(unsigned int u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}
static inline int __float_as_int(float x) { return (int)__float_as_uint(x); }
static inline float __int_as_float(int i) { return __uint_as_float((unsigned int)i); }

// ---- host GEMMs standing in for cuBLAS (same column-major arguments) ----
// C (m x n, ldc) = alpha * op(A) * op(B) + beta * C, op(X) = trans ? X^T : X,
// op(A) m x k, op(B) k x n. beta == 0: C is not read (NaN there is
// overwritten). Each element is one fp32 sum over k in ascending order: the
// result does not depend on threads, blocking or the CPU's vector width.
// tf32: A and B are rounded to tf32 (10 mantissa bits, nearest even) first,
// as tensor cores do under CUBLAS_COMPUTE_32F_FAST_TF32. Bad sizes abort.
void pt_sim_gemm_f32(bool transa, bool transb, int m, int n, int k, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc, bool tf32);
// A and B are bf16 bit patterns; fp32 accumulation and output.
void pt_sim_gemm_bf16(bool transa, bool transb, int m, int n, int k, float alpha, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, float beta, float *C, int ldc);
// batch independent GEMMs, matrix b at A + b*strideA, B + b*strideB, C + b*strideC.
void pt_sim_gemm_strided_batched_f32(bool transa, bool transb, int m, int n, int k, float alpha, const float *A,
                                     int lda, const float *B, int ldb, float beta, float *C, int ldc, bool tf32,
                                     long long strideA, long long strideB, long long strideC, int batch);
