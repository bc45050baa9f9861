// The machine's fp32 matmul ceiling: the best of OpenBLAS cblas_sgemm and,
// when built with -DWITH_DNNL, oneDNN's dnnl_sgemm, GFLOP/s on large square
// matrices, median of repetitions. It is the denominator of every fp32 MFU
// figure in bench/bench_train.py and docs/PERF_NOTES.md. Both libraries are
// timed because the cpu backend may use either (PT_CPU_SGEMM): an MFU against
// the slower one would overstate how close to the machine a run is.
//
//   cc -O2 bench/sgemm_ceiling.c -o sgemm_ceiling -lopenblas [-DWITH_DNNL -ldnnl]
//   ./sgemm_ceiling [threads] [reps] [sizes...]    (defaults: 2 7 2048 3072 4096)
//
// Prints one line per library and size and a final "ceiling_gflops <best median>" line.
#include <cblas.h>
#ifdef WITH_DNNL
#include <dnnl.h>
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_timing.h"

extern void openblas_set_num_threads(int);
extern char *openblas_get_corename(void);
extern char *openblas_get_config(void);

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    int sizes[16] = {2048, 3072, 4096};
    int ns = 3;
    if (argc > 3) {
        ns = 0;
        for (int i = 3; i < argc && ns < 16; i++) sizes[ns++] = atoi(argv[i]);
    }
    openblas_set_num_threads(threads);
#ifdef WITH_DNNL
    omp_set_num_threads(threads);
    const int nlib = 2;
#else
    const int nlib = 1;
#endif
    printf("openblas %s core %s, %d threads\n", openblas_get_config(), openblas_get_corename(), threads);
    double best = 0;
    for (int lib = 0; lib < nlib; lib++)
        for (int s = 0; s < ns; s++) {
            const int n = sizes[s];
            float *a = aligned_alloc(64, sizeof(float) * n * n), *b = aligned_alloc(64, sizeof(float) * n * n),
                  *c = aligned_alloc(64, sizeof(float) * n * n);
            for (size_t i = 0; i < (size_t)n * n; i++) {
                a[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
                b[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
                c[i] = 0;
            }
            // one warm-up, then reps timed runs of C = A @ B^T (the layout the trainer uses)
            double g[64];
            if (reps > 64) reps = 64;
            for (int r = -1; r < reps; r++) {
                double t0 = bench_now();
                if (lib == 0)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
#ifdef WITH_DNNL
                else if (dnnl_sgemm('N', 'T', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n) != dnnl_success) {
                    fprintf(stderr, "sgemm_ceiling: dnnl_sgemm failed\n");
                    return 1;
                }
#endif
                if (r >= 0) g[r] = 2.0 * n * n * (double)n / (bench_now() - t0) / 1e9;
            }
            qsort(g, reps, sizeof(double), bench_cmp_double);
            double med = g[reps / 2];
            printf("%-8s sgemm %d x %d x %d: median %.1f GFLOP/s (min %.1f, max %.1f) over %d reps\n",
                   lib ? "onednn" : "openblas", n, n, n, med, g[0], g[reps - 1], reps);
            if (med > best) best = med;
            free(a);
            free(b);
            free(c);
        }
    printf("ceiling_gflops %.1f\n", best);
    return 0;
}
