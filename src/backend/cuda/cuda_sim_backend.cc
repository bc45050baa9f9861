// cuda-sim: the cuda backend's very source (cuda_backend.cu) compiled as C++
// by the host compiler against the CUDA emulator (sim/cuda_sim.h), so every
// kernel runs, and is tested, on the CPU where there is no GPU.
#define PT_CUDA_SIM 1
#include "cuda_backend.cu"
