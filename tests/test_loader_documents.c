// Data loader, documents mode (TorchTitan's packing): checked against a
// literal re-implementation of TorchTitan's text data set loop (token
// buffers extended per document, rows cut from their front, leading
// positions normalised), for one and two document parts, over enough steps
// to wrap around the data, on one and two data-parallel ranks.
#include "data/loader.h"
#include "data/shard.h"
#include "testutil.h"
#include "util/common.h"
#include "util/fileio.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EOS 999

static char *g_dir;

// One part's stream as TorchTitan builds it: docs [d0, d1) of `doc` (each
// ending in EOS), in order and again from d0 when they run out.
typedef struct {
    const uint32_t *tok;
    const uint64_t *start;  // [ndocs+1]
    uint64_t d0, d1, next;
    int32_t *in, *lab, *pos;  // buffers
    size_t n, cap;
} tt_stream;

static void tt_push(tt_stream *s, int32_t in, int32_t lab, int32_t pos) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->in = realloc(s->in, s->cap * sizeof *s->in);
        s->lab = realloc(s->lab, s->cap * sizeof *s->lab);
        s->pos = realloc(s->pos, s->cap * sizeof *s->pos);
    }
    s->in[s->n] = in, s->lab[s->n] = lab, s->pos[s->n] = pos;
    s->n++;
}

// The next row of T: extend the buffers a document at a time until they hold T.
static void tt_row(tt_stream *s, int T, int32_t *in, int32_t *lab, int32_t *pos) {
    while (s->n < (size_t)T) {
        const uint64_t a = s->start[s->next], b = s->start[s->next + 1];
        for (uint64_t i = a; i + 1 < b; i++) tt_push(s, (int32_t)s->tok[i], (int32_t)s->tok[i + 1], (int32_t)(i - a));
        if (++s->next == s->d1) s->next = s->d0;
    }
    memcpy(in, s->in, sizeof(int32_t) * T);
    memcpy(lab, s->lab, sizeof(int32_t) * T);
    memcpy(pos, s->pos, sizeof(int32_t) * T);
    const int32_t off = pos[0];
    if (off > 0)
        for (int t = 0; t < T && pos[t] != 0; t++) pos[t] -= off;
    s->n -= (size_t)T;
    memmove(s->in, s->in + T, s->n * sizeof *s->in);
    memmove(s->lab, s->lab + T, s->n * sizeof *s->lab);
    memmove(s->pos, s->pos + T, s->n * sizeof *s->pos);
}

static void check_against_reference(const char *path, const uint32_t *tok, const uint64_t *start, uint64_t ndocs,
                                    int T, int B, int parts, int world, int steps) {
    tt_stream st[4];
    memset(st, 0, sizeof st);
    const uint64_t div = ndocs / (uint64_t)parts, mod = ndocs % (uint64_t)parts;
    for (int p = 0; p < parts; p++) {  // Hugging Face's contiguous Dataset.shard
        st[p].tok = tok, st[p].start = start;
        st[p].d0 = div * (uint64_t)p + ((uint64_t)p < mod ? (uint64_t)p : mod);
        st[p].d1 = st[p].d0 + div + ((uint64_t)p < mod ? 1 : 0);
        st[p].next = st[p].d0;
    }
    pt_loader *l[4] = {0};
    const int local = B / world, b = B / parts;
    for (int r = 0; r < world; r++) {
        pt_loader_config c = {.data_path = path, .seq_len = T, .rows_per_step = B, .dp_rank = r, .dp_world = world,
                              .mode = PT_LOADER_DOCUMENTS, .doc_shards = parts, .eos_id = EOS,
                              .model_vocab = 1000};
        l[r] = pt_loader_open(&c);
        CHECK(l[r] != NULL, "open (parts %d, world %d): %s", parts, world, pt_last_error());
        if (!l[r]) return;
    }
    int32_t *in = malloc(sizeof(int32_t) * B * T), *lab = malloc(sizeof(int32_t) * B * T);
    int32_t *pos = malloc(sizeof(int32_t) * B * T);
    int32_t *gin = malloc(sizeof(int32_t) * B * T), *glab = malloc(sizeof(int32_t) * B * T);
    int32_t *gpos = malloc(sizeof(int32_t) * B * T);
    int bad = 0, boundaries = 0;
    for (int step = 0; step < steps; step++) {
        for (int j = 0; j < B; j++)  // the reference's global batch: part j / b serves row j
            tt_row(&st[j / b], T, gin + (size_t)j * T, glab + (size_t)j * T, gpos + (size_t)j * T);
        for (int r = 0; r < world; r++) {
            int len = 0;
            CHECK(pt_loader_batch(l[r], (uint64_t)step, in, lab, &len) == 0 && len == T, "batch");
            const int32_t *lp = pt_loader_last_positions(l[r]);
            const size_t o = (size_t)r * local * T, n = (size_t)local * T;
            if (memcmp(in, gin + o, n * 4) || memcmp(lab, glab + o, n * 4) || !lp || memcmp(lp, gpos + o, n * 4))
                bad++;
            for (size_t i = 0; i < n; i++) boundaries += (i % (size_t)T) > 0 && lp && lp[i] == 0;
        }
    }
    CHECK(bad == 0, "parts %d world %d: %d rank-steps differ from TorchTitan's rows", parts, world, bad);
    CHECK(boundaries > 0, "parts %d world %d: no document starts inside a row (the test would not see masking)",
          parts, world);
    for (int r = 0; r < world; r++) pt_loader_free(l[r]);
    for (int p = 0; p < parts; p++) free(st[p].in), free(st[p].lab), free(st[p].pos);
    free(in), free(lab), free(pos), free(gin), free(glab), free(gpos);
}

static void test_documents(void) {
    // 23 documents of 1..40 tokens (EOS included): one of a single token (no triple), several longer than a row.
    enum { NDOCS = 23 };
    uint64_t start[NDOCS + 1], n = 0;
    int lens[NDOCS];
    for (int i = 0; i < NDOCS; i++) lens[i] = i == 5 ? 1 : 2 + (i * 17) % 39, n += (uint64_t)lens[i];
    uint32_t *tok = malloc(n * sizeof *tok);
    uint64_t k = 0;
    for (int i = 0; i < NDOCS; i++) {
        start[i] = k;
        for (int j = 0; j < lens[i] - 1; j++) tok[k++] = (uint32_t)((i * 31 + j * 7) % 900);
        tok[k++] = EOS;
    }
    start[NDOCS] = k;
    char *path = pt_path_join(g_dir, "docs.bin");
    CHECK(pt_shard_write(path, tok, n, 1000, NULL) == 0, "%s", pt_last_error());
    const int T = 16, B = 4, steps = 3 * (int)(n / (uint64_t)(T * B)) + 2;  // three passes and more
    check_against_reference(path, tok, start, NDOCS, T, B, 1, 1, steps);
    check_against_reference(path, tok, start, NDOCS, T, B, 1, 2, steps);
    check_against_reference(path, tok, start, NDOCS, T, B, 2, 1, steps);
    check_against_reference(path, tok, start, NDOCS, T, B, 2, 2, steps);
    check_against_reference(path, tok, start, NDOCS, T, B, 2, 4, steps);

    pt_loader_config c = {.data_path = path, .seq_len = T, .rows_per_step = B, .dp_world = 1,
                          .mode = PT_LOADER_DOCUMENTS, .model_vocab = 1000};
    CHECK(!pt_loader_open(&c) && strstr(pt_last_error(), "end-of-document"), "no EOS: %s", pt_last_error());
    c.eos_id = EOS;
    c.shuffle = true;
    CHECK(!pt_loader_open(&c) && strstr(pt_last_error(), "cannot shuffle"), "shuffle: %s", pt_last_error());
    c.shuffle = false;
    c.doc_shards = 3;
    CHECK(!pt_loader_open(&c) && strstr(pt_last_error(), "3 document parts"), "parts: %s", pt_last_error());
    c.doc_shards = 1;
    c.seq_len = (int)n;
    CHECK(!pt_loader_open(&c) && strstr(pt_last_error(), "too few"), "short: %s", pt_last_error());
    c.seq_len = T;
    pt_loader *l = pt_loader_open(&c);
    CHECK(l && pt_loader_num_documents(l) == NDOCS, "documents counted");
    // A loader in another mode has no positions.
    c.mode = PT_LOADER_PACKED;
    pt_loader *p = pt_loader_open(&c);
    CHECK(p && !pt_loader_last_positions(p), "packed mode has no positions");
    pt_loader_free(p);
    pt_loader_free(l);
    free(path);
    free(tok);
}

int main(void) {
    pt_set_quiet(true);
    g_dir = test_tmpdir("loader_docs");
    test_documents();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return test_summary("test_loader_documents");
}
