// Golden parity against Hugging Face transformers (fixtures written by
// tools/hf_golden.py): logits, masked loss, every parameter gradient, and 10
// AdamW steps with warmup, cosine decay, clipping and gradient accumulation.
#include "backend/backend.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "train/trainer.h"
#include "util/common.h"
#include "util/fileio.h"
#include "testutil.h"
#include "fixture_tensor.h"

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

static void check_variant(const char *variant) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/golden/%s", variant);
    char *dir = test_source_path(rel);
    char *exp_path = pt_path_join(dir, "expected.safetensors");
    st_file ex;
    CHECK(st_open(&ex, exp_path) == 0, "%s", pt_last_error());

    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    CHECK(hf_model_load(&m, dir, be) == 0, "%s", pt_last_error());
    const int B = 2, T = 16, V = m.cfg.vocab_size;
    int32_t ids[32], labels[32];
    CHECK(st_read_i32(&ex, st_find(&ex, "input_ids"), ids, 32) == 0, "input_ids");
    CHECK(st_read_i32(&ex, st_find(&ex, "labels"), labels, 32) == 0, "labels");

    // logits and loss
    uint64_t n;
    float *want_logits = fixture_tensor(&ex, "logits", &n);
    float *logits = malloc(sizeof(float) * B * T * V);
    double loss_sum;
    int ntok;
    CHECK(qwen3_forward(&m, ids, labels, B, T, &loss_sum, &ntok, logits) == 0, "%s", pt_last_error());
    double abs_err;
    rel_to_max(logits, want_logits, n, &abs_err);
    printf("[%s] logits max abs error %.3e\n", variant, abs_err);
    CHECK(abs_err <= 1e-4, "[%s] logits max abs error %.3e > 1e-4", variant, abs_err);
    float *want_loss = fixture_tensor(&ex, "loss", &n);
    double loss = loss_sum / ntok;
    printf("[%s] loss %.8f (HF %.8f), %d targets\n", variant, loss, want_loss[0], ntok);
    CHECK(ntok == 28, "[%s] expected 28 non-ignored labels, got %d", variant, ntok);
    CHECK(fabs(loss - want_loss[0]) <= 1e-5 * fabs(want_loss[0]), "[%s] loss %.8f vs HF %.8f", variant, loss,
          want_loss[0]);

    // gradients of the mean loss
    qwen3_alloc_grads(&m);
    be->ops->zero(be, m.grads, sizeof(real_t) * m.num_params);
    CHECK(qwen3_forward_backward(&m, ids, labels, B, T, 1.0f / ntok, &loss_sum, &ntok) == 0, "%s", pt_last_error());
    double worst = 0;
    for (int i = 0; i < m.num_tensors; i++) {
        const qwen3_param_info *t = &m.tensors[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", t->name);
        float *want = fixture_tensor(&ex, name, &n);
        CHECK(n == t->numel, "[%s] %s numel", variant, name);
        double r = rel_to_max(m.grads + t->offset, want, t->numel, NULL);
        worst = fmax(worst, r);
        CHECK(r <= 1e-3, "[%s] %s relative error %.3e > 1e-3", variant, name, r);
        free(want);
    }
    printf("[%s] %d gradient tensors, worst relative-to-max error %.3e\n", variant, m.num_tensors, worst);
    qwen3_free(&m);
    pt_backend_destroy(be);

    // 10 training steps through the real trainer
    char *tmp = test_tmpdir("golden");
    pt_train_args a;
    pt_train_args_defaults(&a);
    a.model_dir = dir;
    char *data = pt_path_join(dir, "data.bin");
    a.data_path = data;
    a.output_dir = tmp;
    a.learning_rate = 1e-2;
    a.weight_decay = 0.1;
    a.adam_beta1 = 0.9;
    a.adam_beta2 = 0.95;
    a.adam_epsilon = 1e-8;
    a.max_grad_norm = 0.5;
    a.per_device_train_batch_size = 2;
    a.gradient_accumulation_steps = 2;
    a.max_steps = 10;
    a.warmup_steps = 3;
    a.lr_scheduler_type = "cosine";
    a.seq_len = 16;
    a.quiet = true;
    CHECK(pt_train(&a) == 0, "%s", pt_last_error());
    float *want_losses = fixture_tensor(&ex, "train_loss", &n);
    float *want_norms = fixture_tensor(&ex, "train_grad_norm", &n);
    float *want_lrs = fixture_tensor(&ex, "train_lr", &n);
    char *mpath = pt_path_join(tmp, "metrics.jsonl");
    FILE *f = fopen(mpath, "r");
    CHECK(f != NULL, "metrics.jsonl missing");
    char line[1024];
    int steps = 0;
    double worst_loss = 0;
    while (f && fgets(line, sizeof line, f) && steps < 10) {
        double l = strtod(strstr(line, "\"loss\": ") + 8, NULL);
        double g = strtod(strstr(line, "\"grad_norm\": ") + 13, NULL);
        double lr = strtod(strstr(line, "\"lr\": ") + 6, NULL);
        double rl = fabs(l - want_losses[steps]) / fabs(want_losses[steps]);
        worst_loss = fmax(worst_loss, rl);
        CHECK(rl <= 1e-5, "[%s] step %d loss %.8f vs HF %.8f", variant, steps, l, want_losses[steps]);
        CHECK(fabs(g - want_norms[steps]) <= 1e-4 * want_norms[steps], "[%s] step %d grad_norm %.7f vs HF %.7f",
              variant, steps, g, want_norms[steps]);
        CHECK(fabs(lr - want_lrs[steps]) <= 1e-7, "[%s] step %d lr %.9f vs HF %.9f", variant, steps, lr,
              want_lrs[steps]);
        steps++;
    }
    if (f) fclose(f);
    CHECK(steps == 10, "[%s] %d steps in metrics.jsonl", variant, steps);
    printf("[%s] 10 training losses: worst relative error %.3e\n", variant, worst_loss);
    // final weights
    pt_backend *be2 = pt_backend_create("cpu-ref");
    qwen3_model fm;
    CHECK(hf_model_load(&fm, tmp, be2) == 0, "%s", pt_last_error());
    double worst_w = 0;
    for (int i = 0; i < fm.num_tensors; i++) {
        const qwen3_param_info *t = &fm.tensors[i];
        char name[128];
        snprintf(name, sizeof name, "final.%s", t->name);
        float *want = fixture_tensor(&ex, name, &n);
        double r = rel_to_max(fm.params + t->offset, want, t->numel, NULL);
        worst_w = fmax(worst_w, r);
        CHECK(r <= 1e-4, "[%s] %s after 10 steps: relative error %.3e", variant, name, r);
        free(want);
    }
    printf("[%s] weights after 10 steps: worst relative-to-max error %.3e\n", variant, worst_w);
    qwen3_free(&fm);
    pt_backend_destroy(be2);
    st_close(&ex);
    char rm[4200];
    snprintf(rm, sizeof rm, "rm -rf %s", tmp);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    free(want_logits); free(logits); free(want_loss); free(want_losses); free(want_norms); free(want_lrs);
    free(mpath); free(tmp); free(data); free(exp_path); free(dir);
}

int main(void) {
    pt_set_quiet(true);
    check_variant("tied");
    check_variant("untied");
    return test_summary("test_golden");
}
