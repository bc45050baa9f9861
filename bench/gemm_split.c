// How to split a training matmul over threads: the matmuls of one Qwen3 layer
// (forward out = x w^T, backward dx += dout w and dw += dout^T x) at a given
// token count, each split into output blocks of single-threaded OpenBLAS
// sgemm calls over OpenMP threads, for several pm x pn block grids (pm row
// blocks, pn column blocks). The cpu backend's gemm() uses one block per
// thread, rows first (docs/PERF_NOTES.md has the measurements).
//
//   cc -O2 -fopenmp bench/gemm_split.c -o gemm_split -lopenblas   (-I the cblas.h directory if needed)
//   OMP_NUM_THREADS=2 ./gemm_split [tokens] [hidden] [intermediate] [q_dim] [kv_dim] [reps]
//       defaults: 512 1024 3072 2048 1024 5 (Qwen3-0.6B widths)
//
// Prints GFLOP/s of the forward, dx and dw products per grid (best of reps)
// and the layer's total time, and checks that every grid's forward output is
// bitwise that of the unsplit call (a split must not change results).
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_timing.h"

extern void openblas_set_num_threads(int);

static void sgemm1(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                   float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A,
                lda, B, ldb, beta, C, ldc);
}

static void gemm_grid(int pm, int pn, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                      int ldb, float beta, float *C, int ldc) {
    int bm = ((M + pm - 1) / pm + 15) & ~15, bn = ((N + pn - 1) / pn + 15) & ~15;
    int nm = (M + bm - 1) / bm, nn = (N + bn - 1) / bn;
#pragma omp parallel for schedule(static, 1)
    for (int t = 0; t < nm * nn; t++) {
        int m0 = t / nn * bm, n0 = t % nn * bn;
        int m1 = m0 + bm < M ? m0 + bm : M, n1 = n0 + bn < N ? n0 + bn : N;
        const float *Ab = ta ? A + m0 : A + (size_t)m0 * lda;
        const float *Bb = tb ? B + (size_t)n0 * ldb : B + n0;
        sgemm1(ta, tb, m1 - m0, n1 - n0, K, Ab, lda, Bb, ldb, beta, C + (size_t)m0 * ldc + n0, ldc);
    }
}

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 512, C = argc > 2 ? atoi(argv[2]) : 1024;
    const int INTER = argc > 3 ? atoi(argv[3]) : 3072, QD = argc > 4 ? atoi(argv[4]) : 2048;
    const int KD = argc > 5 ? atoi(argv[5]) : 1024, reps = argc > 6 ? atoi(argv[6]) : 5;
    const int nth = omp_get_max_threads();
    openblas_set_num_threads(1);
    // (in, out) of q, k, v, o, gate, up, down
    const int shapes[7][2] = {{C, QD}, {C, KD}, {C, KD}, {QD, C}, {C, INTER}, {C, INTER}, {INTER, C}};
    int big = C;
    if (INTER > big) big = INTER;
    if (QD > big) big = QD;
    float *X = malloc(sizeof(float) * (size_t)T * big), *Y = malloc(sizeof(float) * (size_t)T * big);
    float *Y1 = malloc(sizeof(float) * (size_t)T * big), *dX = malloc(sizeof(float) * (size_t)T * big);
    float *W = malloc(sizeof(float) * (size_t)big * big), *dW = malloc(sizeof(float) * (size_t)big * big);
    if (!X || !Y || !Y1 || !dX || !W || !dW) return 1;
    srand(1);
    for (size_t i = 0; i < (size_t)big * big; i++) W[i] = rand() / (float)RAND_MAX - 0.5f, dW[i] = 0;
    for (size_t i = 0; i < (size_t)T * big; i++) X[i] = rand() / (float)RAND_MAX - 0.5f, Y[i] = 0.1f, dX[i] = 0;
    const int grids[][2] = {{1, 1}, {nth, 1}, {1, nth}, {2 * nth, 1}, {nth, 2}, {8, 1}};
    printf("tokens %d hidden %d intermediate %d q %d kv %d, %d threads, best of %d\n", T, C, INTER, QD, KD, nth, reps);
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        const int pm = grids[g][0], pn = grids[g][1];
        double best[3] = {1e30, 1e30, 1e30}, flops = 0;
        int same = 1;
        for (int r = 0; r < reps; r++) {
            double t[3] = {0, 0, 0};
            flops = 0;
            for (int s = 0; s < 7; s++) {
                const int in = shapes[s][0], out = shapes[s][1];
                double t0 = bench_now();
                gemm_grid(pm, pn, 0, 1, T, out, in, X, in, W, in, 0.0f, Y, out);
                t[0] += bench_now() - t0;
                t0 = bench_now();
                gemm_grid(pm, pn, 0, 0, T, in, out, Y, out, W, in, 1.0f, dX, in);
                t[1] += bench_now() - t0;
                t0 = bench_now();
                gemm_grid(pm, pn, 1, 0, out, in, T, Y, out, X, in, 1.0f, dW, in);
                t[2] += bench_now() - t0;
                flops += 2.0 * T * in * out;
                if (r == 0) {
                    sgemm1(0, 1, T, out, in, X, in, W, in, 0.0f, Y1, out);
                    gemm_grid(pm, pn, 0, 1, T, out, in, X, in, W, in, 0.0f, Y, out);
                    same &= !memcmp(Y, Y1, sizeof(float) * (size_t)T * out);
                }
            }
            for (int k = 0; k < 3; k++)
                if (t[k] < best[k]) best[k] = t[k];
        }
        printf("grid %2d x %-2d  forward %6.1f  dx %6.1f  dw %6.1f GFLOP/s  layer %7.1f ms  %s\n", pm, pn,
               flops / best[0] / 1e9, flops / best[1] / 1e9, flops / best[2] / 1e9,
               (best[0] + best[1] + best[2]) * 1e3, same ? "bitwise = unsplit" : "DIFFERS from unsplit");
    }
    free(X), free(Y), free(Y1), free(dX), free(W), free(dW);
    return 0;
}
