// The streamed HF save (hf_model_save_streamed; the final model of a distributed run is written through it,
// dist/parallel.c, each fetch a gather every rank takes part in):
// - every block of rows of every tensor is fetched exactly once, in the layout's order (blocks of 100 bytes:
//   1-3 rows; and 64 MiB: whole tensors), on a sharded save as on a single file, and the files are bitwise
//   hf_model_save's of the same weights;
// - a save that fails partway (a fetch error, a weight float16 cannot hold) still fetches every remaining
//   block once, in order (a rank waiting in a gather would hang otherwise), keeps the first error, leaves
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
    size_t block_bytes;    // the save's blocks
    int calls, in_order;   // fetches; whether each asked for the block after the previous one
    int next;              // the block expected next: tensor `next`, from row `next_row`
    int64_t next_row;
    int fail_at;           // a fetch error at this tensor's last block (-1: none)
    int big_at;            // tensor whose last value is set to 70000 (float16 overflow; -1: none)
} fetch_log;

static int fetch(void *ctx, int i, const qwen3_param_info *t, int64_t row0, int64_t nrows, real_t *out) {
    fetch_log *f = ctx;
    const int64_t per = hf_block_rows(t, f->block_bytes);
    if (i != f->next || row0 != f->next_row || t != &f->m->tensors[i] || nrows != PT_MIN(per, t->shape[0] - row0))
        f->in_order = 0;
    f->calls++;
    f->next_row = row0 + nrows;
    if (f->next_row >= t->shape[0]) f->next++, f->next_row = 0;
    const int last = row0 + nrows == t->shape[0];
    if (i == f->fail_at && last) {
        pt_set_error("fetch of %s failed", t->name);
        return -1;
    }
    const size_t cols = (size_t)t->shape[1];
    memcpy(out, f->m->params + t->offset + (size_t)row0 * cols, sizeof(real_t) * (size_t)nrows * cols);
    if (i == f->big_at && last) out[(size_t)nrows * cols - 1] = 70000;
    return 0;
}

// The blocks a save of blocks of bb bytes fetches.
static int count_blocks(const qwen3_model *m, size_t bb) {
    int n = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const int64_t per = hf_block_rows(&m->tensors[i], bb);
        n += (int)((m->tensors[i].shape[0] + per - 1) / per);
    }
    return n;
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

    // 1. a sharded bfloat16 save (~6 KB shards) and a single fp32 file, in 100-byte and 64 MiB blocks: each
    //    block once, in order; the files are hf_model_save's
    const struct { const char *dtype; uint64_t shard; size_t block; } cases[] = {
        {"bfloat16", 6000, 100}, {"float32", 0, 100}, {"float32", 0, (size_t)64 << 20}, {"float16", 6000, 64 << 20}};
    for (int k = 0; k < 4; k++) {
        CHECK(hf_model_save(&m, want, cases[k].dtype, cases[k].shard) == 0, "%s", pt_last_error());
        fetch_log f = {.m = &m, .block_bytes = cases[k].block, .in_order = 1, .fail_at = -1, .big_at = -1};
        CHECK(hf_model_save_streamed(&m, got, cases[k].dtype, cases[k].shard, cases[k].block, fetch, &f) == 0, "%s",
              pt_last_error());
        const int nb = count_blocks(&m, cases[k].block);
        CHECK(f.calls == nb && f.in_order, "%s, %zu-byte blocks: %d fetches of %d blocks, in order %d", cases[k].dtype,
              cases[k].block, f.calls, nb, f.in_order);
        CHECK(nb > (cases[k].block == 100 ? 2 * m.num_tensors : m.num_tensors - 1), "%d blocks", nb);
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
    const int mid = m.num_tensors / 2, nb = count_blocks(&m, 100);
    for (int k = 0; k < 2; k++) {
        fetch_log f = {.m = &m, .block_bytes = 100, .in_order = 1, .fail_at = k == 0 ? mid : -1, .big_at = k == 1 ? mid : -1};
        const int rc = hf_model_save_streamed(&m, got, k == 0 ? "float32" : "float16", 6000, 100, fetch, &f);
        char expect[160];
        if (k == 0) snprintf(expect, sizeof expect, "fetch of %s failed", m.tensors[mid].name);
        else snprintf(expect, sizeof expect, "weight %s[%zu] = 70000 is beyond float16's range", m.tensors[mid].name,
                      m.tensors[mid].numel - 1);
        CHECK(rc != 0 && strstr(pt_last_error(), expect), "case %d: rc %d, error \"%s\", want \"%s\"", k, rc,
              pt_last_error(), expect);
        CHECK(f.calls == nb && f.in_order, "case %d: %d fetches of %d blocks after the failure, in order %d", k,
              f.calls, nb, f.in_order);
        CHECK(same_dir(want, got), "case %d: the failed save changed the earlier save (or left a staging dir)", k);
    }

    // 3. a failed save into a new directory leaves none behind
    char *fresh = pt_path_join(tmp, "fresh");
    fetch_log f = {.m = &m, .block_bytes = 100, .in_order = 1, .fail_at = 0, .big_at = -1};
    CHECK(hf_model_save_streamed(&m, fresh, "float32", 0, 100, fetch, &f) != 0, "a failing fetch fails the save");
    CHECK(f.calls == nb && f.in_order, "%d fetches of %d blocks", f.calls, nb);
    struct stat st;
    CHECK(stat(fresh, &st) != 0, "the failed save left %s behind", fresh);
    // and an unknown dtype is refused with every tensor still fetched (a rank waits in each gather)
    fetch_log u = {.m = &m, .block_bytes = 100, .in_order = 1, .fail_at = -1, .big_at = -1};
    CHECK(hf_model_save_streamed(&m, fresh, "fp8", 0, 100, fetch, &u) != 0 && strstr(pt_last_error(), "unsupported "
          "export dtype \"fp8\""), "%s", pt_last_error());
    CHECK(u.calls == nb && u.in_order, "%d fetches of %d blocks", u.calls, nb);

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
