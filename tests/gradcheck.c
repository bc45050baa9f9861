// Finite-difference gradient check in double precision: the model and the
// reference kernels are compiled with real_t = double (tests/tests.cmake), and
// every element of every parameter tensor is checked by central differences,
// for tied and untied heads, GQA (4 query heads on 2 KV heads) and
// head_dim != hidden/heads.
#include "backend/backend.h"
#include "model/qwen3.h"
#include "util/philox.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

_Static_assert(sizeof(real_t) == 8, "gradcheck must be built with PT_REAL_DOUBLE");

static double loss_of(qwen3_model *m, const int32_t *ids, const int32_t *labels, int B, int T) {
    double ls;
    int nt;
    if (qwen3_forward(m, ids, labels, B, T, &ls, &nt, NULL) != 0) {
        fprintf(stderr, "%s\n", pt_last_error());
        exit(1);
    }
    return ls / nt;
}

static void check(bool tied) {
    qwen3_config c = {.vocab_size = 11, .hidden_size = 8, .intermediate_size = 12, .num_hidden_layers = 2,
                      .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 6,
                      .max_position_embeddings = 16, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
                      .initializer_range = 0.5, .tie_word_embeddings = tied, .bos_token_id = -1,
                      .eos_token_id = -1};
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    CHECK(qwen3_create(&m, &c, be) == 0, "%s", pt_last_error());
    qwen3_init_weights(&m, 7);
    // non-trivial norm weights
    for (int i = 0; i < m.num_tensors; i++)
        if (m.tensors[i].ndim == 1)
            for (size_t j = 0; j < m.tensors[i].numel; j++)
                m.params[m.tensors[i].offset + j] = 1.0 + 0.3 * pt_philox_normal(3, i, j);
    const int B = 2, T = 5;
    int32_t ids[10] = {1, 5, 7, 2, 9, 3, 3, 10, 0, 4};
    int32_t labels[10] = {5, 7, -100, 9, 6, 3, 10, 0, 4, 8};
    qwen3_alloc_grads(&m);
    be->ops->zero(be, m.grads, sizeof(real_t) * m.num_params);
    double ls;
    int nt;
    CHECK(qwen3_forward_backward(&m, ids, labels, B, T, 1.0f / 9, &ls, &nt) == 0, "%s", pt_last_error());
    CHECK(nt == 9, "targets %d", nt);
    // loss_scale is a float: use exactly the same scale in the finite differences
    const double scale = (double)(1.0f / 9) * 9;
    const double h = 1e-5;
    double worst = 0;
    for (int i = 0; i < m.num_tensors; i++) {
        const qwen3_param_info *t = &m.tensors[i];
        double gmax = 0, err = 0;
        for (size_t j = 0; j < t->numel; j++) gmax = fmax(gmax, fabs(m.grads[t->offset + j]));
        for (size_t j = 0; j < t->numel; j++) {
            double *p = &m.params[t->offset + j];
            double orig = *p;
            *p = orig + h;
            double lp = loss_of(&m, ids, labels, B, T);
            *p = orig - h;
            double lm = loss_of(&m, ids, labels, B, T);
            *p = orig;
            double fd = (lp - lm) / (2 * h) * scale;
            err = fmax(err, fabs(fd - m.grads[t->offset + j]));
        }
        double rel = gmax > 0 ? err / gmax : err;
        worst = fmax(worst, rel);
        CHECK(gmax > 0, "[%s] %s has an all-zero gradient", tied ? "tied" : "untied", t->name);
        CHECK(rel < 1e-7, "[%s] %s: max |fd - analytic| / max|g| = %.3e", tied ? "tied" : "untied", t->name, rel);
    }
    printf("[%s] %d tensors, %zu parameters: worst relative error %.3e\n", tied ? "tied" : "untied", m.num_tensors,
           m.num_params, worst);
    qwen3_free(&m);
    pt_backend_destroy(be);
}

int main(void) {
    check(true);
    check(false);
    return test_summary("gradcheck_double");
}
