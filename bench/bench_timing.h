// Timing helpers shared by the standalone ceiling benchmarks (sgemm_ceiling.c, bf16_ceiling.c).
#pragma once
#include <time.h>

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// qsort comparator for doubles (medians over repetitions)
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
