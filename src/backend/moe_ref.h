// cpu-ref's mixture-of-experts kernels (cpu_ref.c), shared by the cpu backend: routing, gather and combine
// are index bookkeeping and a few flops per element, so the fast backend gains nothing from its own copy and
// keeps cpu-ref's bits. Contracts: backend.h, "mixture of experts".
#pragma once
#include "backend/backend.h"

void pt_ref_moe_route(pt_backend *be, real_t *probs, int32_t *sel, real_t *topw, const real_t *logits, int N, int E,
                      int K, bool norm);
void pt_ref_moe_route_backward(pt_backend *be, real_t *dlogits, const double *dtopw, const double *dprob,
                               const real_t *probs, const int32_t *sel, const real_t *topw, int N, int E, int K,
                               bool norm);
void pt_ref_moe_gather(pt_backend *be, real_t *out, const real_t *inp, const int32_t *idx, int R, int C);
void pt_ref_moe_gather_backward(pt_backend *be, real_t *dinp, const real_t *drows, const int32_t *tok_rows, int N,
                                int K, int C);
void pt_ref_moe_combine(pt_backend *be, real_t *out, const real_t *rows, const real_t *topw, const int32_t *row_w,
                        const int32_t *tok_rows, int N, int K, int C);
void pt_ref_moe_combine_backward(pt_backend *be, real_t *drows, double *dtopw, const real_t *dout, const real_t *rows,
                                 const real_t *topw, const int32_t *row_w, int R, int K, int C);

// The ops-table entries of these kernels.
#define PT_REF_MOE_OPS \
    .moe_route = pt_ref_moe_route, \
    .moe_route_backward = pt_ref_moe_route_backward, \
    .moe_gather = pt_ref_moe_gather, \
    .moe_gather_backward = pt_ref_moe_gather_backward, \
    .moe_combine = pt_ref_moe_combine, \
    .moe_combine_backward = pt_ref_moe_combine_backward,
