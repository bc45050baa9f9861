// libFuzzer target: a checkpoint's checkpoint.json on arbitrary bytes, beside a real tensor file. The slice
// lists (files, offsets, shapes, checksums) decide where ckpt_read reads: a bad manifest must be refused by
// ckpt_open or by the read, never read out of bounds. Run with FUZZ_CHECKPOINT_SEED=PATH once to write the
// valid manifest the corpus starts from.
#include <stdlib.h>
#include <string.h>

#include "fuzz_tmp.h"
#include "io/checkpoint.h"
#include "util/common.h"

static char g_dir[256];  // OUT/checkpoint-1: rank00000.safetensors from ckpt_save, checkpoint.json per input

static void setup(void) {
    const char *p = fuzz_write_tmp("x", NULL, 0);
    char out[200];
    snprintf(out, sizeof out, "%.*s/out", (int)(strrchr(p, '/') - p), p);
    static const float a[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, b[5] = {-1, -2, -3, -4, -5};
    ckpt_slice s[2] = {{.name = "model/a", .ndim = 2, .global_shape = {4, 3}, .shape = {4, 3}, .data = a},
                       {.name = "optim/exp_avg/a", .ndim = 1, .global_shape = {5}, .shape = {5}, .data = b}};
    cJSON *state = cJSON_CreateObject();
    cJSON_AddNumberToObject(state, "step", 1);
    ckpt_save_stats st;
    if (ckpt_save(out, 1, s, 2, state, 0, &st) != 0) abort();
    cJSON_Delete(state);
    snprintf(g_dir, sizeof g_dir, "%s", st.path);
    const char *seed = getenv("FUZZ_CHECKPOINT_SEED");
    if (seed) {
        char src[300], cmd[700];
        snprintf(src, sizeof src, "%s/checkpoint.json", g_dir);
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, seed);
        if (system(cmd) != 0) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    char path[300];
    snprintf(path, sizeof path, "%s/checkpoint.json", g_dir);
    fuzz_write_file(path, data, size);
    ckpt *c = ckpt_open(g_dir);
    if (!c) return 0;
    cJSON *d = ckpt_describe(c);
    cJSON_Delete(d);
    ckpt_verify(c);
    static const char *names[] = {"model/a", "optim/exp_avg/a"};
    for (int t = 0; t < 2; t++) {
        int64_t shape[CKPT_MAX_DIMS], off[CKPT_MAX_DIMS] = {0};
        const int nd = ckpt_tensor_shape(c, names[t], shape);
        if (nd < 0) continue;
        if (nd > CKPT_MAX_DIMS) abort();
        int64_t n = 1;
        for (int i = 0; i < nd; i++) {
            if (shape[i] < 0) abort();
            n *= shape[i];
            if (n > (1 << 20)) break;  // a huge claimed shape: not allocated here
        }
        if (n > (1 << 20)) continue;
        float *buf = malloc(sizeof(float) * (size_t)(n ? n : 1));
        ckpt_read(c, names[t], nd, off, shape, buf);
        free(buf);
    }
    ckpt_close(c);
    return 0;
}
