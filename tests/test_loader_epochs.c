// Data loader epoch boundaries (data/loader.h): "hf" (HF Trainer's DataLoader: short last batch, fewer
// micro-batches in an epoch's last step, the next epoch at its row 0, drop_last) against "wrap" (full steps
// straddling epochs, the behaviour before "hf" existed, kept bitwise: rows and the checkpoint state key).
#include "data/loader.h"
#include "data/shard.h"
#include "testutil.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/hash.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *g_dir;

static pt_loader_config cfg_of(const char *path, int T, int B, pt_loader_epochs ep, int micro) {
    pt_loader_config c;
    memset(&c, 0, sizeof c);
    c.data_path = path;
    c.seq_len = T;
    c.rows_per_step = B;
    c.dp_world = 1;
    c.model_vocab = 1000000;
    c.epochs = ep;
    c.micro_rows = micro;
    return c;
}

#define NO PT_LOADER_NO_ROW

static void check_rows(pt_loader *l, uint64_t step, const uint64_t *want, int B, const char *what) {
    for (int j = 0; j < B; j++) {
        uint64_t got = pt_loader_row_of(l, step, j);
        CHECK(got == want[j], "%s: step %llu row %d: got %lld, want %lld", what, (unsigned long long)step, j,
              got == NO ? -1LL : (long long)got, want[j] == NO ? -1LL : (long long)want[j]);
    }
}

// 41 tokens, T 4: R = 10 windows.
static void test_packed(const char *path) {
    const int T = 4;
    // hf, batch 2 x accumulation 2: 5 micro-batches per epoch, 3 steps, the last holds one micro-batch.
    pt_loader_config c = cfg_of(path, T, 4, PT_LOADER_EPOCHS_HF, 2);
    pt_loader *l = pt_loader_open(&c);
    CHECK(l != NULL, "open hf: %s", pt_last_error());
    if (!l) return;
    CHECK(pt_loader_num_rows(l) == 10, "rows %llu", (unsigned long long)pt_loader_num_rows(l));
    CHECK(pt_loader_steps_per_epoch(l) == 3, "hf steps per epoch %llu", (unsigned long long)pt_loader_steps_per_epoch(l));
    CHECK(pt_loader_rows_per_epoch(l) == 10, "hf rows per epoch");
    const uint64_t s0[] = {0, 1, 2, 3}, s2[] = {8, 9, NO, NO}, s3[] = {0, 1, 2, 3}, s5[] = {8, 9, NO, NO};
    check_rows(l, 0, s0, 4, "hf");
    check_rows(l, 2, s2, 4, "hf short last step");
    check_rows(l, 3, s3, 4, "hf epoch 1 starts at row 0");
    check_rows(l, 5, s5, 4, "hf epoch 1 short last step");
    CHECK(pt_loader_epoch_of_step(l, 2) == 0 && pt_loader_epoch_of_step(l, 3) == 1 && pt_loader_epoch_of_step(l, 6) == 2,
          "hf epoch of step");
    // HF's logged epoch: epoch + micro-batches done / 5
    CHECK(pt_loader_epochs_done(l, 1) == 0.4 && pt_loader_epochs_done(l, 2) == 0.8 && pt_loader_epochs_done(l, 3) == 1.0 &&
              fabs(pt_loader_epochs_done(l, 4) - 1.4) < 1e-12,
          "hf epochs done %g %g %g %g", pt_loader_epochs_done(l, 1), pt_loader_epochs_done(l, 2),
          pt_loader_epochs_done(l, 3), pt_loader_epochs_done(l, 4));
    int32_t in[16], lab[16];
    int len = 0;
    CHECK(pt_loader_batch(l, 2, in, lab, &len) == 0 && len == T, "hf batch");
    CHECK(pt_loader_last_real_rows(l) == 2, "hf real rows %d", pt_loader_last_real_rows(l));
    int empty_ok = 1;
    for (int i = 2 * T; i < 4 * T; i++) empty_ok &= lab[i] == -100 && in[i] == 0;
    CHECK(empty_ok, "hf empty rows: labels -100, inputs 0");
    // rows 8, 9 are windows 8 and 9: tokens 32..36, 36..40
    CHECK(in[0] == 32 && lab[0] == 33 && in[T] == 36 && lab[2 * T - 1] == 40, "hf real rows' tokens");
    CHECK(pt_loader_batch(l, 1, in, lab, &len) == 0 && pt_loader_last_real_rows(l) == 4, "hf full step real rows");
    // the state key carries the semantics
    char hf_key[65];
    snprintf(hf_key, sizeof hf_key, "%s", pt_loader_state_key(l));
    pt_loader_free(l);
    // without drop_last the micro-batch size changes no row, nor the key (a checkpoint moves between layouts)
    pt_loader_config c4 = c;
    c4.micro_rows = 4;
    l = pt_loader_open(&c4);
    CHECK(l && strcmp(pt_loader_state_key(l), hf_key) == 0, "hf key independent of the micro-batch without drop_last");
    if (l) {
        const uint64_t s2b[] = {8, 9, NO, NO};
        check_rows(l, 2, s2b, 4, "hf, one micro-batch of 4");
    }
    pt_loader_free(l);

    // Data-parallel: 2 ranks, each with its slice of each global micro-batch of 2 rows (as HF's Trainer shards
    // them): step 2's first micro-batch holds rows 8 (rank 0) and 9 (rank 1), the second is empty.
    for (int r = 0; r < 2; r++) {
        pt_loader_config cr = c;
        cr.dp_rank = r;
        cr.dp_world = 2;
        pt_loader *lr = pt_loader_open(&cr);
        CHECK(lr != NULL, "open dp rank %d", r);
        if (!lr) continue;
        int32_t bi[8], bl[8];
        CHECK(pt_loader_batch(lr, 2, bi, bl, &len) == 0 && pt_loader_last_real_rows(lr) == 2, "dp real rows");
        CHECK(bi[0] == 32 + 4 * r && bl[T - 1] == 36 + 4 * r, "dp rank %d holds row %d first", r, 8 + r);
        CHECK(bl[T] == -100 && bl[2 * T - 1] == -100, "dp rank %d: its slice of the second micro-batch is empty", r);
        pt_loader_free(lr);
    }

    // drop_last, batch 3 x accumulation 2: 3 complete micro-batches (9 rows), 2 steps, row 9 never read.
    pt_loader_config d = cfg_of(path, T, 6, PT_LOADER_EPOCHS_HF, 3);
    d.drop_last = true;
    l = pt_loader_open(&d);
    CHECK(l != NULL, "open drop_last: %s", pt_last_error());
    if (l) {
        CHECK(pt_loader_steps_per_epoch(l) == 2 && pt_loader_rows_per_epoch(l) == 9, "drop_last: steps %llu rows %llu",
              (unsigned long long)pt_loader_steps_per_epoch(l), (unsigned long long)pt_loader_rows_per_epoch(l));
        const uint64_t d1[] = {6, 7, 8, NO, NO, NO}, d2[] = {0, 1, 2, 3, 4, 5};
        check_rows(l, 1, d1, 6, "drop_last last step");
        check_rows(l, 2, d2, 6, "drop_last epoch 1");
        CHECK(pt_loader_epochs_done(l, 1) == 2.0 / 3.0 && pt_loader_epochs_done(l, 2) == 1.0, "drop_last epochs done");
        CHECK(strcmp(pt_loader_state_key(l), hf_key) != 0, "drop_last changes the state key");
        pt_loader_free(l);
    }
    // Same without drop_last: 4 micro-batches (3+3+3+1), 2 steps, row 9 alone in the last micro-batch.
    d.drop_last = false;
    l = pt_loader_open(&d);
    if (l) {
        const uint64_t n1[] = {6, 7, 8, 9, NO, NO};
        check_rows(l, 1, n1, 6, "no drop_last last step");
        CHECK(pt_loader_epochs_done(l, 1) == 0.5, "no drop_last epochs done %g", pt_loader_epochs_done(l, 1));
        pt_loader_free(l);
    }
    // Refusals: drop_last leaving no micro-batch; drop_last with wrap; micro-batches not dividing the step.
    pt_loader_config e = cfg_of(path, T, 12, PT_LOADER_EPOCHS_HF, 12);
    e.drop_last = true;
    l = pt_loader_open(&e);
    CHECK(l == NULL && strstr(pt_last_error(), "no complete micro-batch"), "drop_last with R < micro refused: %s",
          pt_last_error());
    pt_loader_free(l);
    e = cfg_of(path, T, 4, PT_LOADER_EPOCHS_WRAP, 2);
    e.drop_last = true;
    l = pt_loader_open(&e);
    CHECK(l == NULL, "drop_last with wrap refused");
    pt_loader_free(l);
    e = cfg_of(path, T, 4, PT_LOADER_EPOCHS_HF, 3);
    l = pt_loader_open(&e);
    CHECK(l == NULL, "micro-batch not dividing the step refused");
    pt_loader_free(l);

    // wrap: unchanged (global row g = s*B + j is window g mod 10), and its state key is the pre-"hf" one.
    pt_loader_config w = cfg_of(path, T, 4, PT_LOADER_EPOCHS_WRAP, 0);
    l = pt_loader_open(&w);
    CHECK(l != NULL, "open wrap");
    if (!l) return;
    const uint64_t w2[] = {8, 9, 0, 1}, w3[] = {2, 3, 4, 5};
    check_rows(l, 2, w2, 4, "wrap straddles");
    check_rows(l, 3, w3, 4, "wrap");
    CHECK(pt_loader_steps_per_epoch(l) == 3 && pt_loader_epochs_done(l, 3) == 1.2, "wrap steps/epochs");
    CHECK(pt_loader_batch(l, 2, in, lab, &len) == 0 && pt_loader_last_real_rows(l) == 4, "wrap rows all real");
    char sha[65], buf[256], key[65];
    pt_sha256_file_hex(path, sha);
    int n = snprintf(buf, sizeof buf, "portatrain-loader-v1 data=%s mode=packed T=4 B=4 shuffle=0 seed=0", sha);
    pt_sha256_hex(buf, (size_t)n, key);
    CHECK(strcmp(key, pt_loader_state_key(l)) == 0, "wrap state key is the one of checkpoints before hf existed");
    CHECK(strcmp(hf_key, pt_loader_state_key(l)) != 0, "hf state key differs from wrap's");
    pt_loader_free(l);
}

// Shuffled: each hf epoch is one permutation of the rows cut into steps (short last one); epoch 0 is the
// same permutation as wrap's; epoch 1 starts at its position 0.
static void test_shuffled(const char *path) {
    pt_loader_config h = cfg_of(path, 4, 4, PT_LOADER_EPOCHS_HF, 2), w = cfg_of(path, 4, 4, PT_LOADER_EPOCHS_WRAP, 0);
    h.shuffle = w.shuffle = true;
    h.seed = w.seed = 7;
    pt_loader *lh = pt_loader_open(&h), *lw = pt_loader_open(&w);
    CHECK(lh && lw, "open shuffled");
    if (!lh || !lw) goto out;
    for (int e = 0; e < 3; e++) {
        int seen[10] = {0}, empty = 0;
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 4; j++) {
                uint64_t r = pt_loader_row_of(lh, (uint64_t)(e * 3 + k), j);
                if (r == NO) {
                    empty++;
                    CHECK(k == 2 && j >= 2, "empty rows only at the epoch's end");
                } else if (r < 10) {
                    seen[r]++;
                }
                // the epoch's position p = 4k + j reads wrap's order of epoch e at p
                if (r != NO) {
                    uint64_t g = (uint64_t)e * 10 + (uint64_t)(4 * k + j);
                    CHECK(r == pt_loader_row_of(lw, g / 4, (int)(g % 4)), "hf epoch %d position %d is wrap's", e,
                          4 * k + j);
                }
            }
        int once = empty == 2;
        for (int i = 0; i < 10; i++) once &= seen[i] == 1;
        CHECK(once, "shuffled hf epoch %d: every row once, 2 empty", e);
    }
out:
    pt_loader_free(lh);
    pt_loader_free(lw);
}

// Padded, group_by_bucket: hf does not complete the last batch; every row once per epoch, empty rows padded.
static void test_padded(const char *path) {
    for (int shuffle = 0; shuffle < 2; shuffle++)
        for (int drop = 0; drop < 2; drop++) {
            pt_loader_config c = cfg_of(path, 8, 6, PT_LOADER_EPOCHS_HF, 3);
            c.mode = PT_LOADER_PADDED;
            c.eos_id = 999;
            c.group_by_bucket = true;
            c.shuffle = shuffle;
            c.seed = 3;
            c.drop_last = drop;
            pt_loader *l = pt_loader_open(&c);
            CHECK(l != NULL, "open padded: %s", pt_last_error());
            if (!l) continue;
            const uint64_t R = pt_loader_num_rows(l), U = drop ? R / 3 * 3 : R, S = (U + 5) / 6;
            CHECK(pt_loader_steps_per_epoch(l) == S, "padded steps per epoch");
            for (int e = 0; e < 2; e++) {
                int *seen = calloc(R, sizeof *seen);
                uint64_t empty = 0;
                for (uint64_t k = 0; k < S; k++) {
                    int32_t in[48], lab[48];
                    int len = 0, real = 0;
                    pt_loader_batch(l, e * S + k, in, lab, &len);
                    for (int j = 0; j < 6; j++) {
                        uint64_t r = pt_loader_row_of(l, e * S + k, j);
                        if (r == NO) {
                            empty++;
                            int ok = 1;
                            for (int t = 0; t < len; t++) ok &= lab[j * len + t] == -100 && in[j * len + t] == 999;
                            CHECK(ok, "padded empty row: EOS inputs, labels -100");
                        } else {
                            seen[r]++;
                            real++;
                        }
                    }
                    CHECK(real == pt_loader_last_real_rows(l), "padded real rows");
                }
                int once = empty == S * 6 - U;
                uint64_t total = 0;
                for (uint64_t i = 0; i < R; i++) {
                    once &= seen[i] <= 1;
                    total += (uint64_t)seen[i];
                }
                CHECK(once && total == U, "padded grouped hf (shuffle %d, drop_last %d) epoch %d: %llu rows once, "
                      "%llu empty", shuffle, drop, e, (unsigned long long)total, (unsigned long long)empty);
                free(seen);
            }
            pt_loader_free(l);
        }
}

int main(void) {
    pt_set_quiet(true);
    g_dir = test_tmpdir("loader_epochs");
    uint32_t tok[41];
    for (int i = 0; i < 41; i++) tok[i] = (uint32_t)i;
    char *path = pt_path_join(g_dir, "seq.bin");
    CHECK(pt_shard_write(path, tok, 41, 1000, NULL) == 0, "%s", pt_last_error());
    test_packed(path);
    test_shuffled(path);
    // 23 documents of 2..12 tokens, EOS 999
    uint32_t docs[400];
    int n = 0;
    for (int d = 0; d < 23; d++) {
        int len = 2 + (d * 7) % 11;
        for (int i = 0; i < len - 1; i++) docs[n++] = (uint32_t)((d * 31 + i * 17) % 900);
        docs[n++] = 999;
    }
    char *dpath = pt_path_join(g_dir, "docs.bin");
    CHECK(pt_shard_write(dpath, docs, (uint64_t)n, 1000, NULL) == 0, "%s", pt_last_error());
    test_padded(dpath);
    free(path);
    free(dpath);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    free(g_dir);
    return test_summary("test_loader_epochs");
}
