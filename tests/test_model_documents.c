// Documents mode in the model (qwen3_set_positions): a row that packs several
// documents, with positions restarting per document and attention masked per
// document, computes for each document exactly what that document computes
// alone in a row of its own (plain causal, positions 0..n-1). Checked on the
// logits (bitwise on cpu-ref, whose kernels compute each row and each
// query's keys in the same order either way; to fp32 rounding elsewhere) and
// on every gradient (the sum over the documents run alone), on each backend
// of the build; and, as the control that shows the mask is on, the same row
// without positions differs.
#include "backend/backend.h"
#include "io/hf_model.h"
#include "testutil.h"
#include "util/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 24 };

// Documents as (row, first token, length); together they tile both rows.
static const int SEG[][3] = {{0, 0, 7}, {0, 7, 10}, {0, 17, 7}, {1, 0, 5}, {1, 5, 19}};
enum { NSEG = sizeof SEG / sizeof SEG[0] };

static double max_rel(const float *a, const float *b, size_t n) {
    double m = 0, scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return scale > 0 ? m / scale : m;
}

static float *grads_of(qwen3_model *m) {
    real_t *r = malloc(sizeof(real_t) * m->num_params);
    float *g = malloc(sizeof(float) * m->num_params);
    m->be->ops->download(m->be, r, m->grads, sizeof(real_t) * m->num_params);
    for (size_t i = 0; i < m->num_params; i++) g[i] = (float)r[i];
    free(r);
    return g;
}

static void check_backend(const char *name) {
    pt_backend *be = pt_backend_create(name);
    if (!be) {
        printf("skip %s: %s\n", name, pt_last_error());
        pt_clear_error();
        return;
    }
    char *dir = test_source_path("tests/fixtures/golden/tied");
    qwen3_model m;
    CHECK(hf_model_load(&m, dir, be) == 0, "%s", pt_last_error());
    const int V = m.cfg.vocab_size;
    int32_t ids[B * T], labels[B * T], pos[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 37 + 11) % V, labels[i] = (i * 53 + 5) % V;
    for (int s = 0; s < NSEG; s++)
        for (int t = 0; t < SEG[s][2]; t++) pos[SEG[s][0] * T + SEG[s][1] + t] = t;

    // Logits: the packed rows against each document alone.
    float *packed = malloc(sizeof(float) * B * T * V), *plain = malloc(sizeof(float) * B * T * V);
    float *alone = malloc(sizeof(float) * T * V);
    double ls;
    int nt;
    qwen3_set_positions(&m, pos);
    CHECK(qwen3_forward(&m, ids, labels, B, T, &ls, &nt, packed) == 0, "%s", pt_last_error());
    CHECK(qwen3_forward(&m, ids, labels, B, T, &ls, &nt, plain) == 0, "%s", pt_last_error());  // positions used once
    double worst = 0;
    int bitwise = 1;
    for (int s = 0; s < NSEG; s++) {
        const int o = SEG[s][0] * T + SEG[s][1], n = SEG[s][2];
        CHECK(qwen3_forward(&m, ids + o, labels + o, 1, n, &ls, &nt, alone) == 0, "%s", pt_last_error());
        worst = fmax(worst, max_rel(packed + (size_t)o * V, alone, (size_t)n * V));
        bitwise &= !memcmp(packed + (size_t)o * V, alone, sizeof(float) * n * V);
    }
    if (!strcmp(name, "cpu-ref")) CHECK(bitwise, "cpu-ref: packed logits not bitwise those of the documents alone");
    CHECK(worst < 1e-5, "%s: packed logits differ from the documents alone by %.3g (relative)", name, worst);
    // Control: without positions the later documents see the earlier ones.
    CHECK(max_rel(plain, packed, (size_t)B * T * V) > 1e-3, "%s: the mask changes nothing", name);

    // Gradients: the packed rows against the sum over the documents alone.
    qwen3_alloc_grads(&m);
    const size_t P = m.num_params;
    be->ops->zero(be, m.grads, sizeof(real_t) * P);
    qwen3_set_positions(&m, pos);
    CHECK(qwen3_forward_backward(&m, ids, labels, B, T, 1.0f, &ls, &nt) == 0, "%s", pt_last_error());
    float *g_packed = grads_of(&m);
    be->ops->zero(be, m.grads, sizeof(real_t) * P);
    for (int s = 0; s < NSEG; s++) {
        const int o = SEG[s][0] * T + SEG[s][1];
        CHECK(qwen3_forward_backward(&m, ids + o, labels + o, 1, SEG[s][2], 1.0f, &ls, &nt) == 0, "%s",
              pt_last_error());
    }
    float *g_alone = grads_of(&m);
    const double gerr = max_rel(g_packed, g_alone, P);
    // fp32 sums of 5 documents' contributions in another order: a few ulps of the largest gradient
    CHECK(gerr < 1e-5, "%s: packed gradients differ from the documents alone by %.3g (relative)", name, gerr);
    printf("%s: logits %s (max rel %.2g), gradients max rel %.2g\n", name, bitwise ? "bitwise" : "within fp32",
           worst, gerr);

    // A position that does not count up within its document is refused, naming the token.
    pos[3] = 5;
    qwen3_set_positions(&m, pos);
    CHECK(qwen3_forward(&m, ids, labels, B, T, &ls, &nt, NULL) != 0 && strstr(pt_last_error(), "row 0 token 3"),
          "bad positions: %s", pt_last_error());
    pt_clear_error();
    free(g_packed), free(g_alone), free(packed), free(plain), free(alone), free(dir);
    qwen3_free(&m);
    pt_backend_destroy(be);
}

int main(void) {
    pt_set_quiet(true);
    check_backend("cpu-ref");
    check_backend("cpu");
    check_backend("opencl");
    check_backend("cuda-sim");
    return test_summary("test_model_documents");
}
