// Finite-difference gradient check in double precision: the model and the reference kernels are compiled with
// real_t = double (tests/tests.cmake), and every element of every parameter tensor is checked by central
// differences of the loss the backward differentiates: mean cross-entropy, plus router_aux_loss_coef x the
// load-balancing loss for Qwen3-MoE.
//   gradcheck_double dense: tied and untied heads, GQA (4 query heads on 2 KV heads), head_dim != hidden/heads.
//   gradcheck_double moe:   Qwen3-MoE with norm_topk_prob true and false; a dense layer (mlp_only_layers) below
//                           two sparse ones, whose routers and experts are all checked.
#include "backend/backend.h"
#include "model/qwen3_moe.h"
#include "util/philox.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(real_t) == 8, "gradcheck must be built with PT_REAL_DOUBLE");

typedef struct {
    const int32_t *ids, *labels;
    int B, T, targets;
} batch;

// ce_scale x (mean cross-entropy) + coef x aux of one forward (aux is 0 for a dense model)
static double loss_of(qwen3_model *m, const batch *b, double ce_scale) {
    double ls;
    int nt;
    if (qwen3_forward(m, b->ids, b->labels, b->B, b->T, &ls, &nt, NULL) != 0) {
        fprintf(stderr, "%s\n", pt_last_error());
        exit(1);
    }
    return ls / nt * ce_scale + m->cfg.router_aux_loss_coef * qwen3_moe_aux_loss(m);
}

// Every element of every tensor of a model built from c (seed 7, non-trivial norm weights). Returns the number
// of MoE tensors checked.
static int check_model(const qwen3_config *c, const batch *b, const char *tag) {
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    CHECK(qwen3_create(&m, c, be) == 0, "%s", pt_last_error());
    qwen3_init_weights(&m, 7);  // for MoE, a seed under which every expert of both sparse layers gets tokens
    for (int i = 0; i < m.num_tensors; i++)
        if (m.tensors[i].ndim == 1)
            for (size_t j = 0; j < m.tensors[i].numel; j++)
                m.params[m.tensors[i].offset + j] = 1.0 + 0.3 * pt_philox_normal(3, i, j);
    qwen3_alloc_grads(&m);
    be->ops->zero(be, m.grads, sizeof(real_t) * m.num_params);
    const float loss_scale = 1.0f / b->targets;
    double ls;
    int nt;
    CHECK(qwen3_forward_backward(&m, b->ids, b->labels, b->B, b->T, loss_scale, &ls, &nt) == 0, "%s", pt_last_error());
    CHECK(nt == b->targets, "[%s] targets %d, want %d", tag, nt, b->targets);
    const double ce_scale = (double)loss_scale * nt;  // loss_scale is a float: the same scale, exactly
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
            const double lp = loss_of(&m, b, ce_scale);
            *p = orig - h;
            const double lm = loss_of(&m, b, ce_scale);
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
    printf("[%s] %d tensors (%d MoE), %zu parameters: worst relative error %.3e\n", tag, m.num_tensors, moe,
           m.num_params, worst);
    qwen3_free(&m);
    pt_backend_destroy(be);
    return moe;
}

static qwen3_config base_config(int layers) {
    return (qwen3_config){.vocab_size = 11, .hidden_size = 8, .intermediate_size = 12, .num_hidden_layers = layers,
                          .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 6,
                          .max_position_embeddings = 16, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
                          .initializer_range = 0.5, .bos_token_id = -1, .eos_token_id = -1};
}

static void check_dense(void) {
    static const int32_t ids[10] = {1, 5, 7, 2, 9, 3, 3, 10, 0, 4};
    static const int32_t labels[10] = {5, 7, -100, 9, 6, 3, 10, 0, 4, 8};
    const batch b = {ids, labels, 2, 5, 9};
    for (int tied = 1; tied >= 0; tied--) {
        qwen3_config c = base_config(2);
        c.tie_word_embeddings = tied;
        check_model(&c, &b, tied ? "tied" : "untied");
    }
}

static void check_moe(void) {
    static const int32_t ids[16] = {1, 5, 7, 2, 9, 3, 6, 8, 3, 10, 0, 4, 2, 2, 7, 1};
    static const int32_t labels[16] = {5, 7, -100, 9, 6, 3, 8, 1, 10, 0, 4, 8, 2, 7, 1, -100};
    const batch b = {ids, labels, 2, 8, 14};
    for (int norm = 1; norm >= 0; norm--) {
        qwen3_config c = base_config(3);
        c.moe = true;
        c.num_experts = 4;
        c.num_experts_per_tok = 2;
        c.moe_intermediate_size = 6;
        c.decoder_sparse_step = 1;
        c.num_mlp_only_layers = 1;
        c.mlp_only_layers[0] = 0;
        c.norm_topk_prob = norm;
        c.output_router_logits = true;
        c.router_aux_loss_coef = 0.3;
        const int moe = check_model(&c, &b, norm ? "moe norm" : "moe nonorm");
        CHECK(moe == 2 * (1 + 3 * 4), "%d MoE tensors, want 26", moe);
    }
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    if (strcmp(which, "moe")) check_dense();
    if (strcmp(which, "dense")) check_moe();
    return test_summary(argc > 1 ? argv[1] : "gradcheck_double");
}
