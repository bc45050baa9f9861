// Golden parity of Qwen3-MoE against Hugging Face transformers (fixtures written by tools/hf_moe_golden.py):
// logits, the loss with the load-balancing term, and every parameter gradient, for norm_topk_prob true and
// false, within test_golden.c's bounds, on every backend of the build (routing, gather and combine are
// backend ops); bitwise reproducibility; the config and weights written back and read again; one-line errors
// for bad MoE fields.
#include "backend/backend.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "model/qwen3_moe.h"
#include "util/common.h"
#include "util/fileio.h"
#include "testutil.h"
#include "fixture_tensor.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// max |a-b| / max |b|
static double rel_to_max(const float *a, const float *b, size_t n, double *max_abs_err) {
    double mx = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs(b[i]));
        err = fmax(err, fabs((double)a[i] - b[i]));
    }
    if (max_abs_err) *max_abs_err = err;
    return mx > 0 ? err / mx : err;
}

static void check_forward(const char *variant, qwen3_model *m, st_file *ex, const int32_t *ids,
                          const int32_t *labels) {
    const int B = 2, T = 16, V = m->cfg.vocab_size;
    uint64_t n;
    float *want_logits = fixture_tensor(ex, "logits", &n);
    float *logits = malloc(sizeof(float) * B * T * V);
    double loss_sum;
    int ntok;
    CHECK(qwen3_forward(m, ids, labels, B, T, &loss_sum, &ntok, logits) == 0, "%s", pt_last_error());
    double abs_err;
    rel_to_max(logits, want_logits, n, &abs_err);
    printf("[%s] logits max abs error %.3e\n", variant, abs_err);
    CHECK(abs_err <= 1e-4, "[%s] logits max abs error %.3e > 1e-4", variant, abs_err);
    float *want_ce = fixture_tensor(ex, "ce", NULL), *want_aux = fixture_tensor(ex, "aux", NULL);
    float *want_loss = fixture_tensor(ex, "loss", NULL);
    CHECK(ntok == 28, "[%s] expected 28 labels, got %d", variant, ntok);
    const double ce = loss_sum / ntok, aux = qwen3_moe_aux_loss(m);
    const double loss = ce + m->cfg.router_aux_loss_coef * aux;
    printf("[%s] ce %.8f (HF %.8f) aux %.8f (HF %.8f) loss %.8f (HF %.8f)\n", variant, ce, want_ce[0], aux,
           want_aux[0], loss, want_loss[0]);
    CHECK(fabs(ce - want_ce[0]) <= 1e-5 * fabs(want_ce[0]), "[%s] ce %.8f vs HF %.8f", variant, ce, want_ce[0]);
    CHECK(fabs(aux - want_aux[0]) <= 1e-5 * fabs(want_aux[0]), "[%s] aux %.8f vs HF %.8f", variant, aux,
          want_aux[0]);
    CHECK(fabs(loss - want_loss[0]) <= 1e-5 * fabs(want_loss[0]), "[%s] loss %.8f vs HF %.8f", variant, loss,
          want_loss[0]);
    free(want_logits); free(logits); free(want_ce); free(want_aux); free(want_loss);
}

// Gradients of ce + coef * aux; a second run must give the same bits.
static void check_grads(const char *variant, qwen3_model *m, st_file *ex, const int32_t *ids,
                        const int32_t *labels) {
    pt_backend *be = m->be;
    double loss_sum;
    int ntok;
    qwen3_alloc_grads(m);
    be->ops->zero(be, m->grads, sizeof(real_t) * m->num_params);
    CHECK(qwen3_forward_backward(m, ids, labels, 2, 16, 1.0f / 28, &loss_sum, &ntok) == 0, "%s", pt_last_error());
    real_t *grads = malloc(sizeof(real_t) * m->num_params);
    be->ops->download(be, grads, m->grads, sizeof(real_t) * m->num_params);
    double worst = 0;
    int moe_tensors = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *t = &m->tensors[i];
        char name[160];
        snprintf(name, sizeof name, "grad.%s", t->name);
        uint64_t n;
        float *want = fixture_tensor(ex, name, &n);
        CHECK(n == t->numel, "[%s] %s numel", variant, name);
        const double r = rel_to_max(grads + t->offset, want, t->numel, NULL);
        worst = fmax(worst, r);
        moe_tensors += t->kind >= P_LAYER_COUNT;
        CHECK(r <= 1e-3, "[%s] %s relative error %.3e > 1e-3", variant, name, r);
        free(want);
    }
    CHECK(moe_tensors == 2 * (1 + 3 * 8), "[%s] %d MoE tensors, want 50", variant, moe_tensors);
    printf("[%s] %d gradient tensors (%d MoE), worst relative-to-max error %.3e\n", variant, m->num_tensors,
           moe_tensors, worst);
    be->ops->zero(be, m->grads, sizeof(real_t) * m->num_params);
    CHECK(qwen3_forward_backward(m, ids, labels, 2, 16, 1.0f / 28, &loss_sum, &ntok) == 0, "%s", pt_last_error());
    real_t *again = malloc(sizeof(real_t) * m->num_params);
    be->ops->download(be, again, m->grads, sizeof(real_t) * m->num_params);
    CHECK(memcmp(grads, again, sizeof(real_t) * m->num_params) == 0, "[%s] a second run differs", variant);
    free(grads);
    free(again);
}

// Written back (config.json + per-expert weights) and read again: the same model, bit for bit.
static void check_roundtrip(const char *variant, const qwen3_model *m) {
    char *tmp = test_tmpdir("golden_moe");
    CHECK(hf_model_save(m, tmp, "float32", 0) == 0, "%s", pt_last_error());
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model r;
    CHECK(hf_model_load(&r, tmp, be) == 0, "%s", pt_last_error());
    CHECK(r.cfg.moe && r.cfg.num_experts == 8 && r.cfg.num_experts_per_tok == 2 && r.cfg.moe_intermediate_size == 16 &&
              r.cfg.num_mlp_only_layers == 1 && r.cfg.mlp_only_layers[0] == 0 &&
              r.cfg.norm_topk_prob == m->cfg.norm_topk_prob && r.cfg.output_router_logits &&
              r.cfg.router_aux_loss_coef == m->cfg.router_aux_loss_coef,
          "[%s] MoE config fields changed on the way back", variant);
    CHECK(r.num_params == m->num_params && memcmp(r.params, m->params, sizeof(real_t) * m->num_params) == 0,
          "[%s] weights changed on the way back", variant);
    qwen3_free(&r);
    pt_backend_destroy(be);
    char rm[4200];
    snprintf(rm, sizeof rm, "rm -rf %s", tmp);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    free(tmp);
}

static void check_variant(const char *norm_variant, const char *backend) {
    pt_backend *be = pt_backend_create(backend);
    if (!be) {
        printf("skip %s: %s\n", backend, pt_last_error());
        pt_clear_error();
        return;
    }
    char variant[128];
    snprintf(variant, sizeof variant, "%s %s", norm_variant, backend);
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/golden_moe/%s", norm_variant);
    char *dir = test_source_path(rel);
    char *exp_path = pt_path_join(dir, "expected.safetensors");
    st_file ex;
    CHECK(st_open(&ex, exp_path) == 0, "%s", pt_last_error());
    qwen3_model m;
    CHECK(hf_model_load(&m, dir, be) == 0, "%s", pt_last_error());
    CHECK(m.cfg.moe && qwen3_layer_is_sparse(&m.cfg, 1) && !qwen3_layer_is_sparse(&m.cfg, 0),
          "[%s] layer 0 dense (mlp_only_layers), layers 1-2 sparse", variant);
    int32_t ids[32], labels[32];
    CHECK(st_read_i32(&ex, st_find(&ex, "input_ids"), ids, 32) == 0, "input_ids");
    CHECK(st_read_i32(&ex, st_find(&ex, "labels"), labels, 32) == 0, "labels");
    check_forward(variant, &m, &ex, ids, labels);
    int counts[8], total = 0;
    CHECK(qwen3_moe_expert_load(&m, 2, counts) == 0, "expert load of layer 2");
    for (int e = 0; e < 8; e++) total += counts[e];
    CHECK(total == 32 * 2, "[%s] %d routed slots, want 64", variant, total);
    check_grads(variant, &m, &ex, ids, labels);
    if (be->host_memory) check_roundtrip(variant, &m);  // file I/O, the same on every backend
    qwen3_free(&m);
    pt_backend_destroy(be);
    st_close(&ex);
    free(exp_path);
    free(dir);
}

// A bad MoE field: refused in one line naming it.
static void check_bad_config(const char *patch_key, const char *value, const char *want) {
    char *path = test_source_path("tests/fixtures/golden_moe/norm/config.json");
    size_t len;
    char *text = pt_read_file(path, &len);
    cJSON *root = cJSON_Parse(text);
    cJSON_DeleteItemFromObject(root, patch_key);
    cJSON_AddItemToObject(root, patch_key, cJSON_Parse(value));
    char *out = cJSON_PrintUnformatted(root);
    qwen3_config c;
    const int rc = qwen3_config_parse(&c, out, strlen(out), "config.json");
    CHECK(rc != 0 && strstr(pt_last_error(), want) && !strchr(pt_last_error(), '\n'),
          "%s = %s: want an error naming %s, got rc %d \"%s\"", patch_key, value, want, rc, rc ? pt_last_error() : "");
    free(out);
    cJSON_Delete(root);
    free(text);
    free(path);
}

int main(void) {
    pt_set_quiet(true);
    const char *backends[] = {"cpu-ref", "cpu", "opencl", "cuda-sim", "cuda"};
    for (size_t i = 0; i < PT_ARRAY_LEN(backends); i++) {
        check_variant("norm", backends[i]);
        check_variant("nonorm", backends[i]);
    }
    check_bad_config("num_experts_per_tok", "9", "num_experts_per_tok");
    check_bad_config("num_local_experts", "\"8\"", "num_local_experts");
    check_bad_config("norm_topk_prob", "3", "norm_topk_prob");
    check_bad_config("moe_intermediate_size", "0", "moe_intermediate_size");
    check_bad_config("mlp_only_layers", "[0, -1]", "mlp_only_layers");
    check_bad_config("router_aux_loss_coef", "null", "router_aux_loss_coef");
    return test_summary("test_golden_moe");
}
