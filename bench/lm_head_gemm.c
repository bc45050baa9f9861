// The three GEMMs of the cpu backend's lm_head + cross-entropy alone, single
// threaded, on one chunk of rows against the whole vocabulary in tiles, in
// both tile layouts and with both sgemm libraries the backend can use:
//   rows (before 2026-12-05): L_j [rows x tile] = X W_j^T (NT), dW_j += L_j^T X (TN), Q = L_j W_j (NN)
//   transposed (cpu.c now):   L_j^T [tile x rows] = W_j X^T (NT), dW_j += L_j^T X (NN), Q = (L_j^T)^T W_j (TN)
// With a small hidden size (the tiny config's 64) their rate bounds what the
// fused kernel can reach (docs/PERF_NOTES.md).
//
//   cc -O2 bench/lm_head_gemm.c -o lm_head_gemm -lopenblas [-DWITH_DNNL -ldnnl]   (-I the cblas.h directory if needed)
//   OMP_NUM_THREADS=1 ./lm_head_gemm [rows] [vocab tile] [hidden] [vocab] [reps]    defaults: 512 2048 64 151936 3
//
// Prints GFLOP/s per product, best of reps (the first repetition pays page faults).
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include "bench_timing.h"
#ifdef WITH_DNNL
#include <dnnl.h>
#endif

extern void openblas_set_num_threads(int);

static int use_onednn;

static void sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc) {
#ifdef WITH_DNNL
    if (use_onednn) {
        if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc) != dnnl_success) {
            fprintf(stderr, "lm_head_gemm: dnnl_sgemm failed\n");
            exit(1);
        }
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda,
                B, ldb, beta, C, ldc);
}

int main(int argc, char **argv) {
    const int R = argc > 1 ? atoi(argv[1]) : 512, TV = argc > 2 ? atoi(argv[2]) : 2048;
    const int C = argc > 3 ? atoi(argv[3]) : 64, V = argc > 4 ? atoi(argv[4]) : 151936;
    const int reps = argc > 5 ? atoi(argv[5]) : 3;
    openblas_set_num_threads(1);
    float *X = malloc(sizeof(float) * (size_t)R * C), *W = malloc(sizeof(float) * (size_t)V * C);
    float *L = malloc(sizeof(float) * (size_t)R * V), *dW = calloc((size_t)V * C, sizeof(float));
    float *Q = malloc(sizeof(float) * (size_t)R * C);
    if (!X || !W || !L || !dW || !Q) return 1;
    for (size_t i = 0; i < (size_t)V * C; i++) W[i] = (float)(i % 17) * 0.01f;
    for (size_t i = 0; i < (size_t)R * C; i++) X[i] = (float)(i % 7) * 0.1f;
    const double flops = 2.0 * R * C * (double)V;
#ifdef WITH_DNNL
    const int nlib = 2;
#else
    const int nlib = 1;
#endif
    printf("rows %d, vocabulary tiles of %d, hidden %d, vocab %d, 1 thread, best of %d, GFLOP/s:\n", R, TV, C, V, reps);
    for (int lib = 0; lib < nlib; lib++)
        for (int tr = 0; tr < 2; tr++) {
            use_onednn = lib;
            double best[3] = {1e30, 1e30, 1e30};
            for (int r = 0; r < reps; r++) {
                double t[3];
                for (int k = 0; k < 3; k++) {
                    const double t0 = bench_now();
                    for (int v0 = 0; v0 < V; v0 += TV) {
                        const int tv = V - v0 < TV ? V - v0 : TV;
                        float *Lj = L + (size_t)R * v0, *Wj = W + (size_t)v0 * C;
                        if (k == 0 && !tr) sgemm(0, 1, R, tv, C, X, C, Wj, C, 0.0f, Lj, tv);
                        if (k == 0 && tr) sgemm(0, 1, tv, R, C, Wj, C, X, C, 0.0f, Lj, R);
                        if (k == 1 && !tr) sgemm(1, 0, tv, C, R, Lj, tv, X, C, 1.0f, dW + (size_t)v0 * C, C);
                        if (k == 1 && tr) sgemm(0, 0, tv, C, R, Lj, R, X, C, 1.0f, dW + (size_t)v0 * C, C);
                        if (k == 2 && !tr) sgemm(0, 0, R, C, tv, Lj, tv, Wj, C, 0.0f, Q, C);
                        if (k == 2 && tr) sgemm(1, 0, R, C, tv, Lj, R, Wj, C, 0.0f, Q, C);
                    }
                    t[k] = bench_now() - t0;
                }
                for (int k = 0; k < 3; k++)
                    if (t[k] < best[k]) best[k] = t[k];
            }
            printf("  %-8s %-10s logits %6.1f   dW %6.1f   dX %6.1f\n", lib ? "oneDNN" : "OpenBLAS",
                   tr ? "transposed" : "rows", flops / best[0] / 1e9, flops / best[1] / 1e9, flops / best[2] / 1e9);
        }
    free(X), free(W), free(L), free(dW), free(Q);
    return 0;
}
