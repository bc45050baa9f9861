// The one header the CUDA backend's source (cuda_backend.cu) includes for
// CUDA itself. Under nvcc it is CUDA; compiled as C++ by the host compiler
// (PT_CUDA_SIM, the `cuda-sim` backend) the same source runs on the CPU
// through the emulator in sim/cuda_sim.h, so every kernel is tested here,
// where there is no GPU.
//
// The source may use, and the emulator provides, exactly this subset:
//   kernels     PT_KERNEL void k(...) { ... }                 (__global__; may be templates,
//               PT_KERNEL void __launch_bounds__(n) k(...)     launched as k<N>; the emulator
//                                                              ignores __launch_bounds__)
//               PT_DEVICE T f(...)                             (__device__ inline helpers)
//   launch      PT_LAUNCH(k, grid, block, smem_bytes, stream, args...)
//                 for kernels WITHOUT __syncthreads/__syncwarp/shuffles
//               PT_LAUNCH_SYNC(k, grid, block, smem_bytes, stream, args...)
//                 for kernels that synchronise (the emulator runs their
//                 threads as fibers; a sync inside a PT_LAUNCH kernel aborts
//                 with the kernel's name)
//   indices     threadIdx, blockIdx, blockDim, gridDim (.x .y .z), warpSize (32), dim3
//   memory      __shared__ (static, fixed size), PT_DYN_SMEM(T, name) (dynamic, smem_bytes)
//   sync        __syncthreads(), __syncwarp(mask)
//   warp        __shfl_sync, __shfl_xor_sync, __shfl_down_sync (float, int; full-warp mask)
//   math        expf logf sqrtf rsqrtf fabsf fmaxf fminf powf tanhf fmaf, __expf, __logf,
//               __fdividef, __float_as_uint, __uint_as_float, __restrict__
//   runtime     cudaMalloc cudaFree cudaMemcpy cudaMemcpyAsync cudaMemsetAsync
//               cudaStreamCreate cudaStreamDestroy cudaStreamSynchronize
//               cudaDeviceSynchronize cudaGetDeviceCount cudaSetDevice
//               cudaGetDeviceProperties (name, major, minor, multiProcessorCount,
//               totalGlobalMem, sharedMemPerBlockOptin) cudaGetLastError
//               cudaGetErrorString cudaFuncSetAttribute(k,
//               cudaFuncAttributeMaxDynamicSharedMemorySize, n)
//               cudaMemcpyHostToDevice/DeviceToHost/DeviceToDevice, cudaSuccess,
//               cudaError_t, cudaStream_t, cudaDeviceProp
// No atomics in reductions (determinism); no cuda_bf16.h types: bf16 values
// are uint16_t bit patterns converted by the backend's own PT_DEVICE helpers.
// GEMMs are not kernels of ours: the backend calls cuBLAS under nvcc and the
// emulator's host GEMM (pt_sim_gemm*, sim/cuda_sim.h) under PT_CUDA_SIM.
#pragma once

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#define PT_KERNEL __global__
#define PT_DEVICE __device__ __forceinline__
#define PT_LAUNCH(k, grid, block, smem, stream, ...) k<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define PT_LAUNCH_SYNC(k, grid, block, smem, stream, ...) k<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define PT_DYN_SMEM(T, name)                                \
    extern __shared__ __align__(16) unsigned char pt_dyn_smem_[]; \
    T *name = (T *)pt_dyn_smem_
#else
#include "backend/cuda/sim/cuda_sim.h"
#endif
