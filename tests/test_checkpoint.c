// Checkpoint format: slices assembled from any split, corruption detected
// with the tensor and file named, `latest` falling back to the newest valid
// checkpoint, and a failing (ENOSPC) save that keeps the previous one.
#include "io/checkpoint.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/philox.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { R = 37, C = 23 };  // a 2-D tensor [37, 23]
static float full[R * C];
static float vec[29];

// Splits [R,C] by row cuts and column cuts into a grid of slices.
static int grid(ckpt_slice *out, const int *rc, int nr, const int *cc, int nc, float *bufs) {
    int n = 0;
    for (int i = 0; i + 1 < nr; i++)
        for (int j = 0; j + 1 < nc; j++) {
            ckpt_slice *s = &out[n++];
            s->name = "w";
            s->ndim = 2;
            s->global_shape[0] = R;
            s->global_shape[1] = C;
            s->offset[0] = rc[i];
            s->offset[1] = cc[j];
            s->shape[0] = rc[i + 1] - rc[i];
            s->shape[1] = cc[j + 1] - cc[j];
            float *b = bufs;
            bufs += s->shape[0] * s->shape[1];
            for (int r = 0; r < s->shape[0]; r++)
                for (int c = 0; c < s->shape[1]; c++) b[r * s->shape[1] + c] = full[(rc[i] + r) * C + cc[j] + c];
            s->data = b;
        }
    return n;
}

static void add_vec(ckpt_slice *out, int *n, int cut) {
    // the 1-D tensor "v" in two pieces
    for (int k = 0; k < 2; k++) {
        ckpt_slice *s = &out[(*n)++];
        s->name = "v";
        s->ndim = 1;
        s->global_shape[0] = 29;
        s->offset[0] = k ? cut : 0;
        s->shape[0] = k ? 29 - cut : cut;
        s->data = vec + s->offset[0];
    }
}

static void check_reads(ckpt *c, const char *layout) {
    float got[R * C];
    // whole tensor, then 200 random boxes
    int64_t o[2] = {0, 0}, sh[2] = {R, C};
    CHECK(ckpt_read(c, "w", 2, o, sh, got) == 0, "%s: %s", layout, pt_last_error());
    CHECK(memcmp(got, full, sizeof full) == 0, "%s: full read differs", layout);
    int bad = 0;
    for (int k = 0; k < 200; k++) {
        int r0 = (int)(pt_philox_uniform(k, 1, 0) * R), c0 = (int)(pt_philox_uniform(k, 1, 1) * C);
        int r1 = r0 + 1 + (int)(pt_philox_uniform(k, 1, 2) * (R - r0)), c1 = c0 + 1 + (int)(pt_philox_uniform(k, 1, 3) * (C - c0));
        if (r1 > R) r1 = R;
        if (c1 > C) c1 = C;
        int64_t bo[2] = {r0, c0}, bs[2] = {r1 - r0, c1 - c0};
        if (ckpt_read(c, "w", 2, bo, bs, got) != 0) { bad++; continue; }
        for (int r = 0; r < bs[0]; r++)
            for (int cc = 0; cc < bs[1]; cc++)
                if (got[r * bs[1] + cc] != full[(r0 + r) * C + c0 + cc]) bad++;
    }
    CHECK(bad == 0, "%s: %d wrong elements in random box reads", layout, bad);
    float v[29];
    int64_t vo = 3, vs = 20;
    CHECK(ckpt_read(c, "v", 1, &vo, &vs, v) == 0 && memcmp(v, vec + 3, 20 * 4) == 0, "%s: vector slice", layout);
}

static char *ckdir(const char *out, long step) {
    char nm[64];
    snprintf(nm, sizeof nm, "checkpoint-%ld", step);
    return pt_path_join(out, nm);
}

static void flip_byte(const char *path, long pos) {
    FILE *f = fopen(path, "r+b");
    fseek(f, pos, SEEK_END);
    int ch = fgetc(f);
    fseek(f, pos, SEEK_END);
    fputc(ch ^ 0x5a, f);
    fclose(f);
}

int main(void) {
    pt_set_quiet(true);
    for (int i = 0; i < R * C; i++) full[i] = (float)pt_philox_normal(5, 0, i);
    for (int i = 0; i < 29; i++) vec[i] = (float)i * 0.5f;
    char *tmp = test_tmpdir("ckpt");
    static float bufs[R * C];
    ckpt_slice sl[64];
    struct { const char *name; int rc[8], nr, cc[8], nc; } layouts[] = {
        {"one slice", {0, R}, 2, {0, C}, 2},
        {"3 uneven row blocks", {0, 5, 30, R}, 4, {0, C}, 2},
        {"2 column blocks", {0, R}, 2, {0, 11, C}, 3},
        {"3x3 grid", {0, 1, 20, R}, 4, {0, 7, 8, C}, 4},
    };
    for (size_t L = 0; L < PT_ARRAY_LEN(layouts); L++) {
        int n = grid(sl, layouts[L].rc, layouts[L].nr, layouts[L].cc, layouts[L].nc, bufs);
        add_vec(sl, &n, 1 + (int)L * 7);
        char *out = pt_path_join(tmp, layouts[L].name);
        ckpt_save_stats st;
        CHECK(ckpt_save(out, 1, sl, n, NULL, 0, &st) == 0, "%s: save: %s", layouts[L].name, pt_last_error());
        ckpt *c = ckpt_open(st.path);
        CHECK(c != NULL, "%s: open: %s", layouts[L].name, pt_last_error());
        if (c) {
            CHECK(ckpt_verify(c) == 0, "%s: verify: %s", layouts[L].name, pt_last_error());
            check_reads(c, layouts[L].name);
            ckpt_close(c);
        }
        free(out);
    }
    // A missing slice is reported as incomplete coverage.
    {
        int rc[] = {0, 10, R}, cc[] = {0, C};
        int n = grid(sl, rc, 3, cc, 2, bufs);
        char *out = pt_path_join(tmp, "gap");
        ckpt_save_stats st;
        CHECK(ckpt_save(out, 1, sl + 1, n - 1, NULL, 0, &st) == 0, "gap save");
        ckpt *c = ckpt_open(st.path);
        float got[R * C];
        int64_t o[2] = {0, 0}, sh[2] = {R, C};
        CHECK(c && ckpt_verify(c) != 0 && strstr(pt_last_error(), "cover"), "gap not detected: %s", pt_last_error());
        CHECK(c && ckpt_read(c, "w", 2, o, sh, got) != 0 && strstr(pt_last_error(), "cover only"),
              "gap read: %s", pt_last_error());
        ckpt_close(c);
        free(out);
    }
    // Corruption: each broken checkpoint is refused naming what is wrong, and
    // `latest` falls back to the newest valid one.
    const char *cases[] = {"flip", "truncate", "delete", "manifest-checksum", "manifest-json", "no-manifest"};
    for (size_t k = 0; k < PT_ARRAY_LEN(cases); k++) {
        char *out = pt_path_join(tmp, cases[k]);
        int n = grid(sl, layouts[3].rc, layouts[3].nr, layouts[3].cc, layouts[3].nc, bufs);
        for (long step = 1; step <= 2; step++) CHECK(ckpt_save(out, step, sl, n, NULL, 0, NULL) == 0, "save");
        char *d2 = ckdir(out, 2), *file = pt_path_join(d2, "rank00000.safetensors");
        char *man = pt_path_join(d2, "checkpoint.json");
        const char *want = "";
        if (!strcmp(cases[k], "flip")) { flip_byte(file, -100); want = "fails its checksum"; }
        else if (!strcmp(cases[k], "truncate")) { CHECK(truncate(file, 500) == 0, "truncate"); want = "truncated"; }
        else if (!strcmp(cases[k], "delete")) { unlink(file); want = "missing"; }
        else if (!strcmp(cases[k], "no-manifest")) { unlink(man); want = "incomplete checkpoint"; }
        else {
            size_t len;
            char *t = pt_read_file(man, &len);
            if (!strcmp(cases[k], "manifest-json")) { t[len / 2] = 0; len = strlen(t); want = "malformed JSON"; }
            else { char *x = strstr(t, "xxh3-128:"); x[12] ^= 1; want = "fails its checksum"; }
            FILE *f = fopen(man, "wb");
            fwrite(t, 1, len, f);
            fclose(f);
            free(t);
        }
        ckpt *c = ckpt_open(d2);
        int detected = !c || ckpt_verify(c) != 0;
        CHECK(detected, "%s: corruption not detected", cases[k]);
        CHECK(strstr(pt_last_error(), want) != NULL, "%s: message '%s' lacks '%s'", cases[k], pt_last_error(), want);
        if (!strcmp(cases[k], "flip") || !strcmp(cases[k], "manifest-checksum"))
            CHECK(strstr(pt_last_error(), "rank00000.safetensors") && strstr(pt_last_error(), "\"w\""),
                  "%s: message does not name file and tensor: %s", cases[k], pt_last_error());
        printf("ok  %-18s %s\n", cases[k], pt_last_error());
        ckpt_close(c);
        ckpt *r = ckpt_open_resume(out, "latest");
        CHECK(r && ckpt_step(r) == 1, "%s: latest did not fall back to checkpoint-1", cases[k]);
        ckpt_close(r);
        free(d2); free(file); free(man); free(out);
    }
    // ENOSPC: the save fails cleanly, no temporary is left, the previous
    // checkpoint and `latest` are untouched.
    {
        char *out = pt_path_join(tmp, "enospc");
        int n = grid(sl, layouts[0].rc, 2, layouts[0].cc, 2, bufs);
        CHECK(ckpt_save(out, 1, sl, n, NULL, 0, NULL) == 0, "save 1");
        setenv("PT_FAULT_ENOSPC_AFTER", "1000", 1);
        int rc = ckpt_save(out, 2, sl, n, NULL, 0, NULL);
        unsetenv("PT_FAULT_ENOSPC_AFTER");
        CHECK(rc != 0 && strstr(pt_last_error(), "No space left on device"), "ENOSPC not reported: %s",
              pt_last_error());
        printf("ok  %-18s %s\n", "enospc", pt_last_error());
        char *d2 = ckdir(out, 2);
        CHECK(!pt_file_exists(d2), "a failed save left checkpoint-2 behind");
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "ls -a %s | grep -q tmp-checkpoint", out);
        CHECK(system(cmd) != 0, "a failed save left a temporary directory");
        ckpt *r = ckpt_open_resume(out, "latest");
        CHECK(r && ckpt_step(r) == 1, "latest moved after a failed save");
        ckpt_close(r);
        free(d2);
        free(out);
    }
    // save_total_limit prunes
    {
        char *out = pt_path_join(tmp, "prune");
        int n = grid(sl, layouts[0].rc, 2, layouts[0].cc, 2, bufs);
        for (long s = 1; s <= 5; s++) ckpt_save(out, s, sl, n, NULL, 2, NULL);
        char *d3 = ckdir(out, 3), *d4 = ckdir(out, 4), *d5 = ckdir(out, 5);
        CHECK(!pt_file_exists(d3) && pt_file_exists(d4) && pt_file_exists(d5), "save_total_limit 2 not honoured");
        free(d3); free(d4); free(d5); free(out);
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    free(tmp);
    return test_summary("test_checkpoint");
}
