// `portatrain eval` on a model directory written by Hugging Face transformers
// (save_pretrained, tests/fixtures/golden): it restores, and its eval loss on the
// frozen shard equals the cross-entropy of transformers' own logits for the same
// windows (expected.safetensors, from tools/hf_golden.py).
#include <math.h>
#include <string.h>

#include "io/safetensors.h"
#include "testutil.h"
#include "util/common.h"
#include "util/fileio.h"

static void check_variant(const char *variant) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/fixtures/golden/%s", variant);
    char *dir = test_source_path(rel);
    char *expf = pt_path_join(dir, "expected.safetensors"), *data = pt_path_join(dir, "data.bin");
    st_file f;
    if (st_open(&f, expf) != 0) { CHECK(0, "%s", pt_last_error()); return; }
    const st_tensor *tl = st_find(&f, "logits");
    CHECK(tl && tl->ndim == 3 && tl->shape[0] == 2 && tl->shape[1] == 16, "%s: logits [2,16,V]", variant);
    if (!tl) { st_close(&f); return; }
    const uint64_t B = tl->shape[0], T = tl->shape[1], V = tl->shape[2];
    float *logits = pt_malloc(sizeof(float) * B * T * V);
    CHECK(st_read_float(&f, tl, logits, B * T * V) == 0, "%s", pt_last_error());
    size_t n;
    char *shard = pt_read_file(data, &n);
    const uint32_t *tok = (const uint32_t *)(shard + 1024);  // v1 header: 256 int32
    // Reference: mean cross-entropy over every position of windows 0 and 1
    // (labels = the next token; eval masks nothing), in double.
    double sum = 0;
    for (uint64_t b = 0; b < B; b++)
        for (uint64_t t = 0; t < T; t++) {
            const float *z = logits + (b * T + t) * V;
            double mx = -INFINITY, se = 0;
            for (uint64_t v = 0; v < V; v++) mx = fmax(mx, z[v]);
            for (uint64_t v = 0; v < V; v++) se += exp(z[v] - mx);
            const uint32_t y = tok[b * T + t + 1];
            sum += mx + log(se) - z[y];
        }
    const double want = sum / (double)(B * T);
    char cmd[8192], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "'%s' eval --model '%s' --data '%s' --seq-len 16 --per-device-eval-batch-size 2 --max-batches 1",
             getenv("PORTATRAIN"), dir, data);
    const int rc = test_run(cmd, &out, &err);
    CHECK(rc == 0, "%s: eval exit %d: %s", variant, rc, err ? err : "");
    const char *lp = out ? strstr(out, "\"loss\":") : NULL;
    const double got = lp ? strtod(lp + 7, NULL) : NAN;
    CHECK(fabs(got - want) / want < 1e-6, "%s: eval loss %.9g vs transformers' logits %.9g", variant, got, want);
    const char *tp = out ? strstr(out, "\"tokens\":") : NULL;
    CHECK(tp && strtol(tp + 9, NULL, 10) == (long)(B * T), "%s: %llu tokens scored", variant, (unsigned long long)(B * T));
    free(out); free(err); free(shard); free(logits);
    st_close(&f);
    free(expf); free(data); free(dir);
}

int main(void) {
    check_variant("tied");
    check_variant("untied");
    return test_summary("test_eval_hf");
}
