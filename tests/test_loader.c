// Data loader: packed/padded semantics, shuffling, the data-parallel split,
// cursor restore, data sets of several shards, and bad shards.
#include "data/dataset.h"
#include "data/loader.h"
#include "data/shard.h"
#include "testutil.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *g_dir;

static char *tmp_path(const char *name) { return pt_path_join(g_dir, name); }

static pt_loader_config base_cfg(const char *path, int T, int B) {
    pt_loader_config c;
    memset(&c, 0, sizeof c);
    c.data_path = path;
    c.seq_len = T;
    c.rows_per_step = B;
    c.dp_rank = 0;
    c.dp_world = 1;
    c.model_vocab = 1000000;
    return c;
}

// Global batch of `step`, concatenated over `world` ranks (each its own loader).
static int global_batch(const pt_loader_config *cfg, int world, uint64_t step, int32_t *in, int32_t *lab, int *row_len) {
    int B = cfg->rows_per_step, T = cfg->seq_len, local = B / world;
    int32_t *bi = malloc(sizeof(int32_t) * local * T), *bl = malloc(sizeof(int32_t) * local * T);
    int len0 = -1;
    for (int r = 0; r < world; r++) {
        pt_loader_config c = *cfg;
        c.dp_rank = r;
        c.dp_world = world;
        pt_loader *l = pt_loader_open(&c);
        if (!l) {
            fprintf(stderr, "open failed: %s\n", pt_last_error());
            free(bi);
            free(bl);
            return -1;
        }
        int len = 0;
        pt_loader_batch(l, step, bi, bl, &len);
        if (len0 >= 0 && len != len0) len0 = -2;
        else if (len0 == -1) len0 = len;
        // Write this rank's rows into the global layout with stride len.
        memcpy(in + (size_t)r * local * len, bi, sizeof(int32_t) * local * len);
        memcpy(lab + (size_t)r * local * len, bl, sizeof(int32_t) * local * len);
        pt_loader_free(l);
    }
    *row_len = len0;
    free(bi);
    free(bl);
    return 0;
}

static void test_packed_unshuffled(void) {
    const uint64_t N = 100;
    uint32_t tok[100];
    for (uint64_t i = 0; i < N; i++) tok[i] = (uint32_t)(i * 7 % 1000);
    char *path = tmp_path("seq.bin");
    CHECK(pt_shard_write(path, tok, N, 1000, NULL) == 0, "%s", pt_last_error());
    const int T = 8, B = 4;
    pt_loader_config c = base_cfg(path, T, B);
    pt_loader *l = pt_loader_open(&c);
    CHECK(l != NULL, "%s", pt_last_error());
    if (!l) return;
    CHECK(pt_loader_num_rows(l) == 12, "windows %llu", (unsigned long long)pt_loader_num_rows(l));
    CHECK(pt_loader_local_rows(l) == 4, "local rows");
    char sha[65];
    pt_sha256_file_hex(path, sha);
    CHECK(strcmp(sha, pt_loader_data_sha256(l)) == 0, "single shard data sha is the file's sha256");
    int32_t in[32], lab[32];
    int bad = 0;
    for (uint64_t s = 0; s < 9; s++) {  // 9 steps x 4 rows = 3 epochs of 12 windows
        int len = 0;
        pt_loader_batch(l, s, in, lab, &len);
        if (len != T) bad++;
        for (int j = 0; j < B; j++) {
            uint64_t w = (s * B + j) % 12;
            for (int t = 0; t < T; t++) {
                if (in[j * T + t] != (int32_t)tok[w * T + t]) bad++;
                if (lab[j * T + t] != (int32_t)tok[w * T + t + 1]) bad++;
            }
        }
    }
    CHECK(bad == 0, "unshuffled packed: step s row j is window (s*B+j) mod W (%d mismatches)", bad);
    CHECK(pt_loader_epoch_of_step(l, 2) == 0 && pt_loader_epoch_of_step(l, 3) == 1, "epoch of step");
    CHECK(pt_loader_padding_fraction(l) == 0.0, "packed mode has no padding");
    pt_loader_free(l);
    // dp split: rank r of 2 gets rows r*2, r*2+1.
    c.dp_world = 2;
    c.dp_rank = 1;
    l = pt_loader_open(&c);
    CHECK(l && pt_loader_local_rows(l) == 2, "local rows for rank 1 of 2");
    if (l) {
        int len;
        pt_loader_batch(l, 5, in, lab, &len);
        bad = 0;
        for (int j = 0; j < 2; j++) {
            uint64_t w = (5 * B + 2 + j) % 12;
            for (int t = 0; t < T; t++) bad += in[j * T + t] != (int32_t)tok[w * T + t];
        }
        CHECK(bad == 0, "rank 1 of 2 reads global rows 2,3");
        pt_loader_free(l);
    }
    free(path);
}

static uint32_t *make_stream(uint64_t n, uint32_t vocab, uint64_t salt) {
    uint32_t *t = malloc(n * sizeof *t);
    uint64_t x = 0x9E3779B97F4A7C15ull ^ salt;
    for (uint64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t[i] = (uint32_t)(x % vocab);
    }
    return t;
}

static void test_shuffled_dp_and_cursor(pt_loader_config c, const char *what) {
    const int B = c.rows_per_step, T = c.seq_len;
    pt_loader *l = pt_loader_open(&c);
    CHECK(l != NULL, "%s: %s", what, pt_last_error());
    if (!l) return;
    const uint64_t steps = pt_loader_steps_per_epoch(l) * 3 + 1;
    size_t cap = (size_t)B * T;
    int32_t *ref_in = malloc(sizeof(int32_t) * cap * steps), *ref_lab = malloc(sizeof(int32_t) * cap * steps);
    int *ref_len = malloc(sizeof(int) * steps);
    for (uint64_t s = 0; s < steps; s++) pt_loader_batch(l, s, ref_in + s * cap, ref_lab + s * cap, &ref_len[s]);
    // dp world 2 and 4: concatenation equals world 1.
    int32_t *in = malloc(sizeof(int32_t) * cap), *lab = malloc(sizeof(int32_t) * cap);
    for (int world = 2; world <= 4; world *= 2) {
        int bad = 0;
        for (uint64_t s = 0; s < steps; s++) {
            int len = 0;
            if (global_batch(&c, world, s, in, lab, &len) != 0) {
                bad++;
                break;
            }
            if (len != ref_len[s]) bad++;
            else if (memcmp(in, ref_in + s * cap, sizeof(int32_t) * B * len) ||
                     memcmp(lab, ref_lab + s * cap, sizeof(int32_t) * B * len))
                bad++;
        }
        CHECK(bad == 0, "%s: batches for dp world %d concatenated equal dp world 1 (%d steps differ)", what, world, bad);
    }
    // Cursor restore: a fresh loader asked for step k directly (out of order).
    pt_loader *l2 = pt_loader_open(&c);
    int bad = 0;
    const uint64_t ks[] = {steps - 1, 3, 0, steps / 2, 1, steps - 2, 3};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        uint64_t k = ks[i];
        int len = 0;
        pt_loader_batch(l2, k, in, lab, &len);
        if (len != ref_len[k] || memcmp(in, ref_in + k * cap, sizeof(int32_t) * B * len) ||
            memcmp(lab, ref_lab + k * cap, sizeof(int32_t) * B * len))
            bad++;
    }
    CHECK(bad == 0, "%s: step k read directly by a new loader equals the iterated step k (%d differ)", what, bad);
    CHECK(strcmp(pt_loader_state_key(l), pt_loader_state_key(l2)) == 0, "%s: same state key", what);
    pt_loader_free(l2);
    // Each epoch visits every row (exactly once when not grouped).
    uint64_t rows = pt_loader_num_rows(l), R = pt_loader_rows_per_epoch(l);
    int *seen = calloc(rows, sizeof *seen);
    int dup = 0, missing = 0;
    for (uint64_t e = 0; e < 2; e++) {
        memset(seen, 0, rows * sizeof *seen);
        for (uint64_t g = e * R; g < (e + 1) * R; g++) seen[pt_loader_row_of(l, g / B, (int)(g % B))]++;
        for (uint64_t r = 0; r < rows; r++) {
            if (!seen[r]) missing++;
            if (seen[r] > 1 && R == rows) dup++;
        }
    }
    CHECK(missing == 0 && dup == 0, "%s: every row once per epoch (missing %d, duplicated %d)", what, missing, dup);
    if (c.shuffle) {
        // The order changes between epochs and is not the identity.
        int same01 = 1, ident = 1;
        for (uint64_t p = 0; p < R && p < 64; p++) {
            uint64_t a = pt_loader_row_of(l, p / B, (int)(p % B));
            uint64_t b = pt_loader_row_of(l, (R + p) / B, (int)((R + p) % B));
            if (a != b) same01 = 0;
            if (a != p) ident = 0;
        }
        CHECK(!same01 && !ident, "%s: shuffled order differs by epoch and from the identity", what);
        pt_loader_config c2 = c;
        c2.seed = c.seed + 1;
        pt_loader *l3 = pt_loader_open(&c2);
        int same = 1;
        for (int j = 0; j < B; j++) same &= pt_loader_row_of(l3, 0, j) == pt_loader_row_of(l, 0, j);
        CHECK(!same, "%s: another seed gives another first batch", what);
        CHECK(strcmp(pt_loader_state_key(l), pt_loader_state_key(l3)) != 0, "%s: the state key covers the seed", what);
        pt_loader_free(l3);
    }
    free(seen);
    free(in);
    free(lab);
    free(ref_in);
    free(ref_lab);
    free(ref_len);
    pt_loader_free(l);
}

static void test_shuffled(void) {
    const uint64_t N = 4001;
    uint32_t *tok = make_stream(N, 5000, 1);
    char *path = tmp_path("rand.bin");
    CHECK(pt_shard_write(path, tok, N, 5000, NULL) == 0, "%s", pt_last_error());
    pt_loader_config c = base_cfg(path, 16, 8);  // 250 windows, 31.25 steps/epoch: steps straddle epochs
    c.shuffle = true;
    c.seed = 1234;
    test_shuffled_dp_and_cursor(c, "packed shuffled");
    c.shuffle = false;
    test_shuffled_dp_and_cursor(c, "packed unshuffled");
    // The shuffled rows are the windows themselves.
    c.shuffle = true;
    pt_loader *l = pt_loader_open(&c);
    int32_t in[8 * 16], lab[8 * 16];
    int len, bad = 0;
    pt_loader_batch(l, 40, in, lab, &len);
    for (int j = 0; j < 8; j++) {
        uint64_t w = pt_loader_row_of(l, 40, j);
        for (int t = 0; t < 16; t++) bad += in[j * 16 + t] != (int32_t)tok[w * 16 + t] || lab[j * 16 + t] != (int32_t)tok[w * 16 + t + 1];
    }
    CHECK(bad == 0, "shuffled rows are the windows named by row_of");
    pt_loader_free(l);
    free(tok);
    free(path);
}

// Documents of the given lengths (including their EOS), EOS = 999, other ids < 900.
static uint32_t *make_docs(const int *lens, int ndocs, uint64_t *n_out) {
    uint64_t n = 0;
    for (int i = 0; i < ndocs; i++) n += (uint64_t)lens[i];
    uint32_t *t = malloc(n * sizeof *t);
    uint64_t k = 0;
    for (int i = 0; i < ndocs; i++) {
        for (int j = 0; j < lens[i] - 1; j++) t[k++] = (uint32_t)((i * 31 + j * 17) % 900);
        t[k++] = 999;
    }
    *n_out = n;
    return t;
}

static void test_padded(void) {
    // 40 documents, lengths 1..45 (some longer than the largest bucket 16).
    int lens[40];
    for (int i = 0; i < 40; i++) lens[i] = 1 + (i * 13) % 45;
    uint64_t N;
    uint32_t *tok = make_docs(lens, 40, &N);
    char *path = tmp_path("docs.bin");
    CHECK(pt_shard_write(path, tok, N, 1000, NULL) == 0, "%s", pt_last_error());
    pt_loader_config c = base_cfg(path, 16, 4);
    c.mode = PT_LOADER_PADDED;
    c.num_buckets = 3;
    c.buckets[0] = 4;
    c.buckets[1] = 8;
    c.buckets[2] = 16;
    pt_loader *l = pt_loader_open(&c);
    CHECK(l == NULL && strstr(pt_last_error(), "end-of-document"), "padded mode without eos: %s", pt_last_error());
    c.eos_id = 999;
    l = pt_loader_open(&c);
    CHECK(l != NULL, "%s", pt_last_error());
    if (!l) return;
    // Expected pieces (split): doc of n tokens -> ceil((n-1)/16) pieces.
    uint64_t want = 0;
    for (int i = 0; i < 40; i++) want += lens[i] > 1 ? (uint64_t)(lens[i] - 1 + 15) / 16 : 0;
    CHECK(pt_loader_num_documents(l) == 40, "documents %llu", (unsigned long long)pt_loader_num_documents(l));
    CHECK(pt_loader_num_rows(l) == want, "pieces %llu, want %llu", (unsigned long long)pt_loader_num_rows(l),
          (unsigned long long)want);
    int32_t in[4 * 16], lab[4 * 16];
    int bad_len = 0, bad_pad = 0, bad_fit = 0, bad_content = 0;
    uint64_t pad = 0, all = 0;
    for (uint64_t s = 0; s < 2 * pt_loader_steps_per_epoch(l); s++) {
        int L = 0;
        pt_loader_batch(l, s, in, lab, &L);
        if (L != 4 && L != 8 && L != 16) bad_len++;
        int maxcontent = 0;
        for (int j = 0; j < 4; j++) {
            int content = 0;
            for (int t = 0; t < L; t++) {
                if (lab[j * L + t] == -100) {
                    if (in[j * L + t] != 999) bad_pad++;
                    for (int u = t; u < L; u++) bad_pad += lab[j * L + u] != -100;  // padding only at the end
                    break;
                }
                content++;
            }
            pad += (uint64_t)(L - content);
            all += (uint64_t)L;
            if (content > maxcontent) maxcontent = content;
            // Content: inputs then labels shifted by one, no EOS inside a row except as the last label.
            for (int t = 0; t < content; t++) {
                if (t + 1 < content && in[j * L + t + 1] != lab[j * L + t]) bad_content++;
                if (in[j * L + t] == 999 || (lab[j * L + t] == 999 && t != content - 1)) bad_content++;
            }
        }
        // L is the smallest bucket holding the longest row.
        int fit = maxcontent <= 4 ? 4 : maxcontent <= 8 ? 8 : 16;
        if (L != fit) bad_fit++;
    }
    CHECK(bad_len == 0, "row lengths are buckets only (%d not)", bad_len);
    CHECK(bad_pad == 0, "padding: inputs EOS, labels -100, at the end (%d bad)", bad_pad);
    CHECK(bad_fit == 0, "row length is the smallest bucket >= the longest row (%d bad)", bad_fit);
    CHECK(bad_content == 0, "row content is a document piece (%d bad)", bad_content);
    double pf = pt_loader_padding_fraction(l);
    CHECK(all > 0 && pf > 0.0 && pf < 1.0 && (pf - (double)pad / (double)all) < 1e-12 &&
              ((double)pad / (double)all - pf) < 1e-12,
          "padding fraction %g reported, counted %g", pf, (double)pad / (double)all);
    // The first piece of document 5 (length lens[5]) sits at row 5's position when unshuffled? Check
    // one row exactly: step 0 row 0 is doc 0 (length 1 gives no row), so it is doc 1's first piece.
    int L;
    pt_loader_batch(l, 0, in, lab, &L);
    uint64_t off = (uint64_t)lens[0];
    int n1 = lens[1] - 1 < 16 ? lens[1] - 1 : 16, ok = 1;
    for (int t = 0; t < n1; t++) ok &= in[t] == (int32_t)tok[off + t] && lab[t] == (int32_t)tok[off + t + 1];
    CHECK(ok, "unshuffled padded step 0 row 0 is document 1's first piece");
    pt_loader_free(l);

    // Truncate: one piece per document of >= 2 tokens.
    c.long_docs = PT_LOADER_TRUNCATE_LONG;
    l = pt_loader_open(&c);
    want = 0;
    for (int i = 0; i < 40; i++) want += lens[i] > 1;
    CHECK(l && pt_loader_num_rows(l) == want, "truncate: one row per document");
    pt_loader_free(l);
    c.long_docs = PT_LOADER_SPLIT_LONG;

    // Shuffled padded, and grouped by bucket: dp 1/2/4 and cursor restore.
    c.shuffle = true;
    c.seed = 7;
    test_shuffled_dp_and_cursor(c, "padded shuffled");
    c.group_by_bucket = true;
    test_shuffled_dp_and_cursor(c, "padded grouped shuffled");
    c.shuffle = false;
    test_shuffled_dp_and_cursor(c, "padded grouped");
    // Grouping reduces padding.
    c.shuffle = true;
    double pf_group, pf_plain;
    {
        l = pt_loader_open(&c);
        for (uint64_t s = 0; s < pt_loader_steps_per_epoch(l); s++) pt_loader_batch(l, s, in, lab, &L);
        pf_group = pt_loader_padding_fraction(l);
        CHECK(pt_loader_rows_per_epoch(l) % 4 == 0, "grouped: rows per epoch is a multiple of the batch");
        pt_loader_free(l);
        c.group_by_bucket = false;
        l = pt_loader_open(&c);
        for (uint64_t s = 0; s < pt_loader_steps_per_epoch(l); s++) pt_loader_batch(l, s, in, lab, &L);
        pf_plain = pt_loader_padding_fraction(l);
        pt_loader_free(l);
    }
    CHECK(pf_group < pf_plain, "grouping by bucket lowers padding (%.3f vs %.3f)", pf_group, pf_plain);
    // Bad buckets.
    c.buckets[2] = 32;
    l = pt_loader_open(&c);
    CHECK(l == NULL && strstr(pt_last_error(), "buckets"), "bucket > seq_len rejected: %s", pt_last_error());
    c.buckets[2] = 16;
    c.buckets[1] = 2;
    l = pt_loader_open(&c);
    CHECK(l == NULL && strstr(pt_last_error(), "ascending"), "unsorted buckets rejected: %s", pt_last_error());
    // Default buckets: T/8, T/4, T/2, T.
    c.num_buckets = 0;
    l = pt_loader_open(&c);
    const int *bk;
    int nb = l ? pt_loader_buckets(l, &bk) : 0;
    CHECK(nb == 4 && bk[0] == 2 && bk[1] == 4 && bk[2] == 8 && bk[3] == 16, "default buckets");
    pt_loader_free(l);
    free(tok);
    free(path);
}

static void test_dataset(void) {
    // The same stream as one shard and as a data set of shards of 333 tokens.
    int lens[60];
    for (int i = 0; i < 60; i++) lens[i] = 2 + (i * 7) % 40;
    uint64_t N;
    uint32_t *tok = make_docs(lens, 60, &N);
    char *one = tmp_path("one.bin");
    CHECK(pt_shard_write(one, tok, N, 1000, NULL) == 0, "%s", pt_last_error());
    char *dir = tmp_path("ds");
    uint8_t toksha[32];
    for (int i = 0; i < 32; i++) toksha[i] = (uint8_t)(i * 3 + 1);
    pt_dataset_writer *w = pt_dataset_writer_open(dir, "shard", 333, 1000, toksha, 999);
    CHECK(w != NULL, "%s", pt_last_error());
    uint64_t k = 0;
    for (int i = 0; i < 60; i++) {
        pt_dataset_writer_add(w, tok + k, (size_t)lens[i]);
        k += (uint64_t)lens[i];
    }
    pt_dataset ds;
    CHECK(pt_dataset_writer_finish(w, &ds) == 0, "%s", pt_last_error());
    CHECK(ds.num_shards == (int)((N + 332) / 333) && ds.num_tokens == N && ds.num_documents == 60 && ds.eos_id == 999,
          "index: %d shards, %llu tokens, %llu docs", ds.num_shards, (unsigned long long)ds.num_tokens,
          (unsigned long long)ds.num_documents);
    pt_dataset_free(&ds);
    pt_dataset rd;
    char *index = pt_path_join(dir, "dataset.json");
    CHECK(pt_dataset_load(&rd, index) == 0, "%s", pt_last_error());
    CHECK(rd.num_shards == (int)((N + 332) / 333) && rd.vocab_size == 1000 && rd.shards[0].num_tokens == 333, "reload");
    char hex[65];
    pt_hex_from_bytes(toksha, hex);
    CHECK(strcmp(rd.tokenizer_sha256, hex) == 0, "tokenizer sha in the index");
    pt_shard s0;
    CHECK(pt_shard_open(&s0, rd.shards[0].path) == 0, "%s", pt_last_error());
    CHECK(memcmp(&s0.header[PT_SHARD_TOKENIZER_SHA_SLOT], toksha, 32) == 0, "tokenizer sha in the header slot");
    char body[65], slot[65];
    pt_sha256_hex(s0.tokens, s0.num_tokens * 4, body);
    pt_hex_from_bytes((const uint8_t *)&s0.header[PT_SHARD_CONTENT_SHA_SLOT], slot);
    CHECK(strcmp(body, slot) == 0 && strcmp(body, rd.shards[0].sha256) == 0, "content sha in header and index");
    pt_shard_close(&s0);
    pt_dataset_free(&rd);
    // Loader over the data set (dir, index file) == loader over the single shard.
    for (int mode = 0; mode < 2; mode++) {
        pt_loader_config a = base_cfg(one, 32, 4), b = a;
        a.mode = b.mode = mode ? PT_LOADER_PADDED : PT_LOADER_PACKED;
        a.shuffle = b.shuffle = true;
        a.seed = b.seed = 99;
        a.eos_id = 999;  // b takes it from dataset.json
        b.data_path = mode ? dir : index;
        pt_loader *la = pt_loader_open(&a), *lb = pt_loader_open(&b);
        CHECK(la && lb, "open: %s", pt_last_error());
        if (!la || !lb) continue;
        CHECK(pt_loader_num_rows(la) == pt_loader_num_rows(lb), "same rows");
        int32_t ia[4 * 32], la_[4 * 32], ib[4 * 32], lb_[4 * 32];
        int bad = 0;
        for (uint64_t s = 0; s < 30; s++) {
            int na, nb;
            pt_loader_batch(la, s, ia, la_, &na);
            pt_loader_batch(lb, s, ib, lb_, &nb);
            bad += na != nb || memcmp(ia, ib, sizeof(int32_t) * 4 * na) || memcmp(la_, lb_, sizeof(int32_t) * 4 * na);
        }
        CHECK(bad == 0, "%s: a data set of shards reads like the one shard of the same stream (%d differ)",
              mode ? "padded" : "packed", bad);
        char stream_sha[65];
        pt_sha256_hex(tok, N * 4, stream_sha);
        CHECK(strcmp(pt_loader_data_sha256(lb), stream_sha) == 0, "data set sha256 = sha256 of the token stream");
        pt_loader_free(la);
        pt_loader_free(lb);
    }
    // A bare directory of shards (no index) also works.
    char *bare = tmp_path("bare");
    pt_mkdir_p(bare);
    char *b0 = pt_path_join(bare, "a.bin"), *b1 = pt_path_join(bare, "b.bin");
    pt_shard_write(b0, tok, 500, 1000, NULL);
    pt_shard_write(b1, tok + 500, N - 500, 1000, NULL);
    pt_loader_config cb = base_cfg(bare, 32, 4);
    pt_loader *lb = pt_loader_open(&cb);
    CHECK(lb && pt_loader_num_tokens(lb) == N, "bare directory of shards: %s", lb ? "" : pt_last_error());
    pt_loader_free(lb);
    // A tampered index: shard sha differs.
    size_t len;
    char *text = pt_read_file(index, &len);
    char *p = strstr(text, "\"sha256\":");
    if (p) {
        p = strchr(p + 9, '"') + 1;
        *p = *p == 'a' ? 'b' : 'a';
    }
    char *bad_index = pt_path_join(dir, "tampered.json");
    pt_write_file_atomic(bad_index, text, len);
    free(text);
    pt_loader_config ct = base_cfg(bad_index, 32, 4);
    pt_loader *lt = pt_loader_open(&ct);
    CHECK(lt == NULL && strstr(pt_last_error(), "sha256"), "tampered index rejected: %s", pt_last_error());
    pt_loader_free(lt);
    // Malformed index.
    char *junk = pt_path_join(dir, "junk.json");
    pt_write_file_atomic(junk, "{\"format\": \"nope\"}", 18);
    ct.data_path = junk;
    lt = pt_loader_open(&ct);
    CHECK(lt == NULL && strstr(pt_last_error(), "format"), "wrong format rejected: %s", pt_last_error());
    // Empty corpus.
    char *edir = tmp_path("empty");
    w = pt_dataset_writer_open(edir, "shard", 100, 1000, NULL, 999);
    CHECK(pt_dataset_writer_finish(w, NULL) != 0 && strstr(pt_last_error(), "empty corpus"), "empty corpus: %s",
          pt_last_error());
    free(edir);
    free(junk);
    free(bad_index);
    free(b0);
    free(b1);
    free(bare);
    free(index);
    free(dir);
    free(one);
    free(tok);
}

static void write_raw(const char *path, const int32_t *header, const void *body, size_t body_bytes) {
    size_t n = PT_SHARD_HEADER_BYTES + body_bytes;
    char *buf = calloc(1, n);
    memcpy(buf, header, PT_SHARD_HEADER_BYTES);
    memcpy(buf + PT_SHARD_HEADER_BYTES, body, body_bytes);
    pt_write_file_atomic(path, buf, n);
    free(buf);
}

static void expect_reject(const char *path, uint32_t model_vocab, const char *needle, const char *what) {
    pt_loader_config c = base_cfg(path, 4, 2);
    c.model_vocab = model_vocab;
    pt_loader *l = pt_loader_open(&c);
    CHECK(l == NULL, "%s: loader must refuse", what);
    CHECK(strstr(pt_last_error(), needle) && strstr(pt_last_error(), path), "%s: error '%s' names the file and says '%s'",
          what, pt_last_error(), needle);
    pt_loader_free(l);
}

static void test_bad_shards(void) {
    uint32_t body[64];
    for (int i = 0; i < 64; i++) body[i] = (uint32_t)i;
    int32_t h[PT_SHARD_HEADER_INTS] = {0};
    h[0] = PT_SHARD_MAGIC;
    h[1] = 1;
    h[2] = 64;
    h[3] = 4;
    h[4] = 100;
    char *p = tmp_path("ok.bin");
    write_raw(p, h, body, sizeof body);
    pt_loader_config c = base_cfg(p, 4, 2);
    pt_loader *l = pt_loader_open(&c);
    CHECK(l != NULL, "a valid hand-made shard opens (zero sha slots are not checked): %s", l ? "" : pt_last_error());
    pt_loader_free(l);
    expect_reject(p, 50, "vocab", "ids >= the model's vocab");

    char *q = tmp_path("magic.bin");
    h[0] = 12345;
    write_raw(q, h, body, sizeof body);
    expect_reject(q, 1000, "magic", "wrong magic");
    h[0] = PT_SHARD_MAGIC;
    free(q);

    q = tmp_path("trunc.bin");
    write_raw(q, h, body, sizeof body - 12);
    expect_reject(q, 1000, "truncated", "truncated body");
    free(q);

    q = tmp_path("short.bin");
    pt_write_file_atomic(q, h, 100);
    expect_reject(q, 1000, "truncated", "truncated header");
    free(q);

    q = tmp_path("vocab.bin");
    h[4] = 60;  // ids up to 63
    write_raw(q, h, body, sizeof body);
    expect_reject(q, 1000, ">= the shard's vocab", "id >= header vocab");
    h[4] = 100;
    free(q);

    q = tmp_path("corrupt.bin");
    CHECK(pt_shard_write(q, body, 64, 100, NULL) == 0, "write");
    size_t len;
    char *data = pt_read_file(q, &len);
    data[PT_SHARD_HEADER_BYTES + 8] ^= 1;  // flip a bit of token 2, keep it < vocab
    pt_write_file_atomic(q, data, len);
    free(data);
    expect_reject(q, 1000, "corrupt", "body differs from the content sha256");
    free(q);

    q = tmp_path("missing.bin");
    expect_reject(q, 1000, "cannot open", "missing shard");
    free(q);

    q = tmp_path("tiny.bin");
    pt_shard_write(q, body, 3, 100, NULL);
    expect_reject(q, 1000, "too few", "fewer tokens than one window");
    free(q);
    free(p);
}

int main(void) {
    pt_set_quiet(true);
    g_dir = test_tmpdir("loader");
    test_packed_unshuffled();
    test_shuffled();
    test_padded();
    test_dataset();
    test_bad_shards();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return test_summary("test_loader");
}
