// The machine's bf16 matmul ceiling: oneDNN bf16 matmul (bf16 operands, fp32
// accumulation and output; AMX / AVX512-BF16 where the CPU has them) GFLOP/s
// on large square matrices, median of repetitions. The denominator of the bf16
// MFU figures in bench/bench_train.py, as bench/sgemm_ceiling.c is for fp32.
//
//   cc -O2 bench/bf16_ceiling.c -o bf16_ceiling -ldnnl
//   OMP_NUM_THREADS=2 ./bf16_ceiling [reps] [sizes...]    (defaults: 7 2048 3072 4096)
//
// Prints one line per size (with oneDNN's implementation name) and a final
// "ceiling_gflops <best median>" line.
#include <dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "bench_timing.h"

#define CK(x)                                                              \
    do {                                                                   \
        if ((x) != dnnl_success) {                                         \
            fprintf(stderr, "bf16_ceiling: %s failed (no bf16 matmul on this CPU?)\n", #x); \
            return 1;                                                      \
        }                                                                  \
    } while (0)

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 7;
    int sizes[16] = {2048, 3072, 4096}, ns = 3;
    if (argc > 2) {
        ns = 0;
        for (int i = 2; i < argc && ns < 16; i++) sizes[ns++] = atoi(argv[i]);
    }
    dnnl_engine_t eng;
    dnnl_stream_t st;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    double best = 0;
    for (int si = 0; si < ns; si++) {
        const int n = sizes[si];
        uint16_t *a = malloc(2ull * n * n), *b = malloc(2ull * n * n);
        float *c = malloc(4ull * n * n);
        for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = 0x3f80;  // 1.0
        dnnl_dims_t d = {n, n};
        dnnl_memory_desc_t ad, bd, cd;
        CK(dnnl_memory_desc_init_by_tag(&ad, 2, d, dnnl_bf16, dnnl_ab));
        CK(dnnl_memory_desc_init_by_tag(&bd, 2, d, dnnl_bf16, dnnl_ba));
        CK(dnnl_memory_desc_init_by_tag(&cd, 2, d, dnnl_f32, dnnl_ab));
        dnnl_matmul_desc_t md;
        CK(dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd));
        dnnl_primitive_desc_t pd;
        CK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
        const char *impl = "?";
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        dnnl_primitive_t p;
        CK(dnnl_primitive_create(&p, pd));
        dnnl_memory_t am, bm, cm;
        CK(dnnl_memory_create(&am, &ad, eng, a));
        CK(dnnl_memory_create(&bm, &bd, eng, b));
        CK(dnnl_memory_create(&cm, &cd, eng, c));
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        CK(dnnl_primitive_execute(p, st, 3, args));  // warm-up
        CK(dnnl_stream_wait(st));
        double g[64];
        const int r = reps < 64 ? reps : 64;
        for (int k = 0; k < r; k++) {
            const double t = bench_now();
            CK(dnnl_primitive_execute(p, st, 3, args));
            CK(dnnl_stream_wait(st));
            g[k] = 2.0 * n * n * (double)n / (bench_now() - t) / 1e9;
        }
        qsort(g, r, sizeof g[0], bench_cmp_double);
        printf("n=%d: median %.1f GFLOP/s (min %.1f, max %.1f), %s, c[0]=%g\n", n, g[r / 2], g[0], g[r - 1], impl,
               c[0]);
        if (g[r / 2] > best) best = g[r / 2];
        dnnl_memory_destroy(am);
        dnnl_memory_destroy(bm);
        dnnl_memory_destroy(cm);
        dnnl_primitive_destroy(p);
        dnnl_primitive_desc_destroy(pd);
        free(a);
        free(b);
        free(c);
    }
    printf("ceiling_gflops %.1f\n", best);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    return 0;
}
