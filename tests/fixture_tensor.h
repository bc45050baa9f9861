// A float tensor of a safetensors fixture, widened to fp32 (any stored float
// dtype); exits naming the tensor when it is missing. For the tests that read
// Hugging Face golden fixtures (test_golden.c, test_bf16.c).
#pragma once
#include "io/safetensors.h"
#include "util/common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static inline float *fixture_tensor(const st_file *f, const char *name, uint64_t *n) {
    const st_tensor *t = st_find(f, name);
    if (!t) {
        fprintf(stderr, "fixture tensor %s missing (regenerate with tools/hf_golden.py / tools/hf_bf16_golden.py)\n",
                name);
        exit(1);
    }
    float *out = malloc(sizeof(float) * (t->numel ? t->numel : 1));
    if (st_read_float(f, t, out, t->numel) != 0) {
        fprintf(stderr, "%s\n", pt_last_error());
        exit(1);
    }
    if (n) *n = t->numel;
    return out;
}
