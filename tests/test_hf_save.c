// The streamed HF save (hf_model_save_streamed; the final model of a distributed run is written through it,
// dist/parallel.c, each fetch a gather every rank takes part in):
// - every tensor is fetched exactly once, in the layout's order, on a sharded save as on a single file,
//   and the files are bitwise hf_model_save's of the same weights;
// - a save that fails partway (a fetch error, a weight float16 cannot hold) still fetches every remaining
//   tensor once, in order (a rank waiting in a gather would hang otherwise), keeps the first error, leaves
//   no staging directory, leaves an earlier save in the directory bitwise as it was, and creates no
//   directory that did not exist.
#include "io/hf_model.h"
#include "util/common.h"
#include "util/fileio.h"
#include "testutil.h"

#include <dirent.h>
#include <sys/stat.h>

typedef struct {
    const qwen3_model *m;  // the weights, host memory (cpu-ref)
    int calls, in_order;   // fetches; whether call k asked for tensor k with its own layout entry
    int fail_at;           // a fetch error at this tensor (-1: none)
    int big_at;            // tensor whose first value is set to 70000 (float16 overflow; -1: none)
} fetch_log;

static int fetch(void *ctx, int i, const qwen3_param_info *t, real_t *out) {
    fetch_log *f = ctx;
    if (i != f->calls || t != &f->m->tensors[i]) f->in_order = 0;
    f->calls++;
    if (i == f->fail_at) {
        pt_set_error("fetch of %s failed", t->name);
        return -1;
    }
    memcpy(out, f->m->params + t->offset, sizeof(real_t) * t->numel);
    if (i == f->big_at) out[0] = 70000;
    return 0;
}

static char *slurp(const char *dir, const char *name, size_t *n) {
    char *p = pt_path_join(dir, name);
    *n = 0;
    char *d = pt_read_file(p, n);
    free(p);
    return d;
}

static int is_dot(const char *name) { return !strcmp(name, ".") || !strcmp(name, ".."); }

// Whether every file of `a` is in `b` with the same bytes, and `b` holds nothing else (a staging dir).
static int same_dir(const char *a, const char *b) {
    int same = 1, na = 0, nb = 0;
    DIR *d = opendir(a);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (is_dot(e->d_name)) continue;
        na++;
        size_t sa, sb;
        char *x = slurp(a, e->d_name, &sa), *y = slurp(b, e->d_name, &sb);
        same &= x && y && sa == sb && !memcmp(x, y, sa);
        free(x);
        free(y);
    }
    closedir(d);
    if ((d = opendir(b))) {
        while ((e = readdir(d))) nb += !is_dot(e->d_name);
        closedir(d);
    }
    return same && na == nb;
}

int main(void) {
    pt_set_quiet(true);
    qwen3_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 300;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000;
    c.initializer_range = 0.02;
    c.tie_word_embeddings = false;
    c.bos_token_id = c.eos_token_id = -1;
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    CHECK(qwen3_create(&m, &c, be) == 0, "%s", pt_last_error());
    qwen3_init_weights(&m, 3);
    char *tmp = test_tmpdir("hfsave");
    char *want = pt_path_join(tmp, "want"), *got = pt_path_join(tmp, "got");

    // 1. a sharded bfloat16 save (~6 KB shards) and a single fp32 file: each tensor once, in order; the
    //    files are hf_model_save's
    const struct { const char *dtype; uint64_t shard; } cases[] = {{"bfloat16", 6000}, {"float32", 0}};
    for (int k = 0; k < 2; k++) {
        CHECK(hf_model_save(&m, want, cases[k].dtype, cases[k].shard) == 0, "%s", pt_last_error());
        fetch_log f = {.m = &m, .in_order = 1, .fail_at = -1, .big_at = -1};
        CHECK(hf_model_save_streamed(&m, got, cases[k].dtype, cases[k].shard, fetch, &f) == 0, "%s", pt_last_error());
        CHECK(f.calls == m.num_tensors && f.in_order, "%s: %d fetches of %d tensors, in order %d", cases[k].dtype,
              f.calls, m.num_tensors, f.in_order);
        CHECK(same_dir(want, got), "%s: the streamed save's files differ from hf_model_save's", cases[k].dtype);
        if (k == 0) {
            size_t n;
            char *idx = slurp(got, "model.safetensors.index.json", &n);
            CHECK(idx != NULL, "the 6 KB bfloat16 save is sharded");
            free(idx);
        }
    }

    // 2. failures partway, into the directory holding the fp32 save: every tensor still fetched once, in
    //    order; the first error kept; the earlier save untouched; no staging directory left
    const int mid = m.num_tensors / 2;
    for (int k = 0; k < 2; k++) {
        fetch_log f = {.m = &m, .in_order = 1, .fail_at = k == 0 ? mid : -1, .big_at = k == 1 ? mid : -1};
        const int rc = hf_model_save_streamed(&m, got, k == 0 ? "float32" : "float16", 6000, fetch, &f);
        char expect[160];
        if (k == 0) snprintf(expect, sizeof expect, "fetch of %s failed", m.tensors[mid].name);
        else snprintf(expect, sizeof expect, "weight %s[0] = 70000 is beyond float16's range", m.tensors[mid].name);
        CHECK(rc != 0 && strstr(pt_last_error(), expect), "case %d: rc %d, error \"%s\", want \"%s\"", k, rc,
              pt_last_error(), expect);
        CHECK(f.calls == m.num_tensors && f.in_order, "case %d: %d fetches of %d tensors after the failure, in "
              "order %d", k, f.calls, m.num_tensors, f.in_order);
        CHECK(same_dir(want, got), "case %d: the failed save changed the earlier save (or left a staging dir)", k);
    }

    // 3. a failed save into a new directory leaves none behind
    char *fresh = pt_path_join(tmp, "fresh");
    fetch_log f = {.m = &m, .in_order = 1, .fail_at = 0, .big_at = -1};
    CHECK(hf_model_save_streamed(&m, fresh, "float32", 0, fetch, &f) != 0, "a failing fetch fails the save");
    CHECK(f.calls == m.num_tensors, "%d fetches", f.calls);
    struct stat st;
    CHECK(stat(fresh, &st) != 0, "the failed save left %s behind", fresh);
    // and an unknown dtype is refused with every tensor still fetched (a rank waits in each gather)
    fetch_log u = {.m = &m, .in_order = 1, .fail_at = -1, .big_at = -1};
    CHECK(hf_model_save_streamed(&m, fresh, "fp8", 0, fetch, &u) != 0 && strstr(pt_last_error(), "unsupported export "
          "dtype \"fp8\""), "%s", pt_last_error());
    CHECK(u.calls == m.num_tensors && u.in_order, "%d fetches", u.calls);

    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "rm");
    free(fresh);
    free(want);
    free(got);
    free(tmp);
    qwen3_free(&m);
    pt_backend_destroy(be);
    return test_summary("test_hf_save");
}
