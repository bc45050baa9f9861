// Finite-difference gradient check of Qwen3-MoE in double precision (real_t = double, tests/tests.cmake):
// every element of every tensor, the routers and experts of both sparse layers included, by central
// differences of ce + coef * aux (the load-balancing loss), with norm_topk_prob true and false. A dense
// layer (mlp_only_layers) sits below the sparse ones.
#include "backend/backend.h"
#include "model/qwen3_moe.h"
#include "util/philox.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(real_t) == 8, "gradcheck_moe must be built with PT_REAL_DOUBLE");

// scale x (mean cross-entropy) + coef x aux of one forward
static double loss_of(qwen3_model *m, const int32_t *ids, const int32_t *labels, double ce_scale) {
    double ls;
    int nt;
    if (qwen3_forward(m, ids, labels, 2, 8, &ls, &nt, NULL) != 0) {
        fprintf(stderr, "%s\n", pt_last_error());
        exit(1);
    }
    return ls / nt * ce_scale + m->cfg.router_aux_loss_coef * qwen3_moe_aux_loss(m);
}

static void check(bool norm) {
    qwen3_config c = {.vocab_size = 11, .hidden_size = 8, .intermediate_size = 12, .num_hidden_layers = 3,
                      .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 6,
                      .max_position_embeddings = 16, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
                      .initializer_range = 0.5, .bos_token_id = -1, .eos_token_id = -1, .moe = true,
                      .num_experts = 4, .num_experts_per_tok = 2, .moe_intermediate_size = 6,
                      .decoder_sparse_step = 1, .num_mlp_only_layers = 1, .mlp_only_layers = {0},
                      .norm_topk_prob = norm, .output_router_logits = true, .router_aux_loss_coef = 0.3};
    const char *tag = norm ? "norm" : "nonorm";
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    CHECK(qwen3_create(&m, &c, be) == 0, "%s", pt_last_error());
    qwen3_init_weights(&m, 7);  // a seed under which every expert of both layers gets tokens
    for (int i = 0; i < m.num_tensors; i++)
        if (m.tensors[i].ndim == 1)
            for (size_t j = 0; j < m.tensors[i].numel; j++)
                m.params[m.tensors[i].offset + j] = 1.0 + 0.3 * pt_philox_normal(3, i, j);
    int32_t ids[16] = {1, 5, 7, 2, 9, 3, 6, 8, 3, 10, 0, 4, 2, 2, 7, 1};
    int32_t labels[16] = {5, 7, -100, 9, 6, 3, 8, 1, 10, 0, 4, 8, 2, 7, 1, -100};
    qwen3_alloc_grads(&m);
    be->ops->zero(be, m.grads, sizeof(real_t) * m.num_params);
    double ls;
    int nt;
    CHECK(qwen3_forward_backward(&m, ids, labels, 2, 8, 1.0f / 14, &ls, &nt) == 0, "%s", pt_last_error());
    CHECK(nt == 14, "targets %d", nt);
    const double ce_scale = (double)(1.0f / 14) * 14;  // the float loss_scale, exactly
    const double h = 1e-5;
    double worst = 0;
    int moe = 0;
    for (int i = 0; i < m.num_tensors; i++) {
        const qwen3_param_info *t = &m.tensors[i];
        double gmax = 0, err = 0;
        for (size_t j = 0; j < t->numel; j++) gmax = fmax(gmax, fabs(m.grads[t->offset + j]));
        for (size_t j = 0; j < t->numel; j++) {
            double *p = &m.params[t->offset + j];
            const double orig = *p;
            *p = orig + h;
            const double lp = loss_of(&m, ids, labels, ce_scale);
            *p = orig - h;
            const double lm = loss_of(&m, ids, labels, ce_scale);
            *p = orig;
            err = fmax(err, fabs((lp - lm) / (2 * h) - m.grads[t->offset + j]));
        }
        const double rel = gmax > 0 ? err / gmax : err;
        if (getenv("PT_GRADCHECK_VERBOSE")) printf("  %-48s %.3e\n", t->name, rel);
        worst = fmax(worst, rel);
        moe += t->kind >= P_LAYER_COUNT;
        CHECK(gmax > 0, "[%s] %s has an all-zero gradient", tag, t->name);
        CHECK(rel < 1e-7, "[%s] %s: max |fd - analytic| / max|g| = %.3e", tag, t->name, rel);
    }
    CHECK(moe == 2 * (1 + 3 * 4), "[%s] %d MoE tensors, want 26", tag, moe);
    printf("[%s] %d tensors (%d MoE), %zu parameters: worst relative error %.3e\n", tag, m.num_tensors, moe,
           m.num_params, worst);
    qwen3_free(&m);
    pt_backend_destroy(be);
}

int main(void) {
    check(true);
    check(false);
    return test_summary("gradcheck_moe_double");
}
