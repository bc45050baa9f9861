// Test-only wrong kernels of the cpu backend, switched on by PT_FAULT_KERNEL.
// Each makes a candidate that is subtly wrong but still trains, which the
// judges must reject (tests/test_compare_cli.sh, test_accept*.sh):
//   rmsnorm_eps  rmsnorm_forward with eps x 10 (docs/COMPARE.md)
//   bf16_cast    round_bf16 keeps 3 mantissa bits, truncated: an
//                fp8-e4m3-sized mantissa instead of bf16's 7 (docs/PRECISION.md)
// They live apart from cpu.c so that the production kernels carry no test
// switch: a fault is a copy of the backend's const ops table with one entry
// replaced, and the backend itself never knows.
#ifndef PT_NO_CPU_BACKEND
#include "backend/cpu_faults.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A faulty table and the table it copies (ops first: be->ops points at it).
typedef struct {
    pt_backend_ops ops;
    const pt_backend_ops *base;
    bool wrong_eps;  // rmsnorm_eps, else bf16_cast
} fault_table;

static const pt_backend_ops *base_ops(const pt_backend *be) { return ((const fault_table *)be->ops)->base; }

// 1e-6 -> 1e-5: ~1% on rstd at init activations. rstd is saved, so the
// backward stays consistent with the wrong forward.
static void rmsnorm_forward_wrong_eps(pt_backend *be, real_t *out, real_t *rstd, const real_t *inp, const real_t *w,
                                      int N, int C, float eps) {
    base_ops(be)->rmsnorm_forward(be, out, rstd, inp, w, N, C, eps * 10.0f);
}

static void round_bf16_broken(pt_backend *be, real_t *dst, const real_t *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        if ((u & 0x7f800000u) != 0x7f800000u) u &= 0xfff00000u;  // keep sign, exponent, 3 mantissa bits
        memcpy(&dst[i], &u, 4);
    }
}

// The faulty copy of `base`, made on first use and kept for the process (the
// cpu backend has two tables; every backend created with one shares its copy).
static const pt_backend_ops *faulty(const pt_backend_ops *base, bool wrong_eps) {
    static fault_table tables[4];
    static int n;
    for (int i = 0; i < n; i++)
        if (tables[i].base == base && tables[i].wrong_eps == wrong_eps) return &tables[i].ops;
    if (n == (int)PT_ARRAY_LEN(tables)) {
        fprintf(stderr, "portatrain: error: PT_FAULT_KERNEL: more than %d ops tables\n", n);
        exit(1);
    }
    fault_table *t = &tables[n++];
    t->ops = *base;
    t->base = base;
    t->wrong_eps = wrong_eps;
    if (wrong_eps) t->ops.rmsnorm_forward = rmsnorm_forward_wrong_eps;
    else t->ops.round_bf16 = round_bf16_broken;
    return &t->ops;
}

void pt_cpu_fault_kernels(pt_backend *be) {
    const char *fault = getenv("PT_FAULT_KERNEL");
    if (fault && strcmp(fault, "rmsnorm_eps") == 0) {
        be->ops = faulty(be->ops, true);
        fprintf(stderr, "warning: PT_FAULT_KERNEL=rmsnorm_eps: cpu backend uses a WRONG rmsnorm eps (test only)\n");
    } else if (fault && strcmp(fault, "bf16_cast") == 0) {
        be->ops = faulty(be->ops, false);
        fprintf(stderr, "warning: PT_FAULT_KERNEL=bf16_cast: cpu backend casts to bf16 WRONGLY (test only)\n");
    } else if (fault && *fault) {
        fprintf(stderr, "warning: PT_FAULT_KERNEL=%s is unknown to the cpu backend; ignored\n", fault);
    }
}
#endif  // PT_NO_CPU_BACKEND
