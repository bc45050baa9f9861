// bf16 GEMMs of the fast CPU backend on oneDNN (Debian's libdnnl): AMX or
// AVX512-BF16 where the processor has them, oneDNN's own fallback elsewhere.
// Operands are packed bf16 (uint16 bits), accumulation and C are fp32.
#pragma once
#include <stdbool.h>
#include <stdint.h>

typedef struct pt_dnnl pt_dnnl;

// NULL (with a warning naming why) when oneDNN is not built in or cannot run
// bf16 matmuls on this CPU: the backend then has no packed-bf16 fast path.
pt_dnnl *pt_dnnl_create(void);
void pt_dnnl_destroy(pt_dnnl *d);
// Row-major C[M,N] (= or +=) op(A)[M,K] op(B)[K,N]. ta: A is stored [K,M]
// (lda >= M); tb: B is stored [N,K] (ldb >= K). Called outside any OpenMP
// parallel region: oneDNN threads it itself (bitwise reproducible at a fixed
// thread count). Primitives are created once per shape and cached.
void pt_dnnl_gemm_bf16(pt_dnnl *d, bool ta, bool tb, int M, int N, int K, const uint16_t *A, int lda,
                       const uint16_t *B, int ldb, bool accumulate, float *C, int ldc);
// oneDNN's name of the implementation of the most recent primitive ("brg:avx512_core_amx_bf16").
const char *pt_dnnl_impl(const pt_dnnl *d);
// "oneDNN MAJOR.MINOR.PATCH (hash)" of the library linked in, or NULL when oneDNN is not built in.
const char *pt_dnnl_version(void);
