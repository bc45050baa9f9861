// The three GEMMs of the cpu backend's lm_head + cross-entropy alone, single
// threaded, on one chunk of rows against the whole vocabulary in tiles, as
// cpu.c issues them: logits L_j = X W_j^T (NT), dW_j += L_j^T X (TN), and
// dX partial Q = L_j W_j (NN). With a small hidden size (the tiny config's 64)
// their rate bounds what the fused kernel can reach (docs/PERF_NOTES.md).
//
//   cc -O2 bench/lm_head_gemm.c -o lm_head_gemm -lopenblas   (-I the cblas.h directory if needed)
//   ./lm_head_gemm [rows] [vocab tile] [hidden] [vocab] [reps]    defaults: 512 2048 64 151936 3
//
// Prints GFLOP/s per product, best of reps (the first repetition pays page faults).
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include "bench_timing.h"

extern void openblas_set_num_threads(int);

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
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < reps; r++) {
        double t[3];
        double t0 = bench_now();
        for (int v0 = 0; v0 < V; v0 += TV) {
            const int tv = V - v0 < TV ? V - v0 : TV;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, tv, C, 1.0f, X, C, W + (size_t)v0 * C, C, 0.0f,
                        L + (size_t)R * v0, tv);
        }
        t[0] = bench_now() - t0;
        t0 = bench_now();
        for (int v0 = 0; v0 < V; v0 += TV) {
            const int tv = V - v0 < TV ? V - v0 : TV;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, tv, C, R, 1.0f, L + (size_t)R * v0, tv, X, C, 1.0f,
                        dW + (size_t)v0 * C, C);
        }
        t[1] = bench_now() - t0;
        t0 = bench_now();
        for (int v0 = 0; v0 < V; v0 += TV) {
            const int tv = V - v0 < TV ? V - v0 : TV;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, C, tv, 1.0f, L + (size_t)R * v0, tv,
                        W + (size_t)v0 * C, C, 0.0f, Q, C);
        }
        t[2] = bench_now() - t0;
        for (int k = 0; k < 3; k++)
            if (t[k] < best[k]) best[k] = t[k];
    }
    printf("rows %d, vocabulary tiles of %d, hidden %d, vocab %d, 1 thread, best of %d: logits (NT) %.1f, "
           "dW (TN) %.1f, dX (NN) %.1f GFLOP/s\n",
           R, TV, C, V, reps, flops / best[0] / 1e9, flops / best[1] / 1e9, flops / best[2] / 1e9);
    free(X), free(W), free(L), free(dW), free(Q);
    return 0;
}
