// What the report needs to be reproduced and judged side by side beyond the runs' own sections: the exact
// command, the software and devices, the logs (the reproduction block) and each side's model FLOP/s and MFU.
#pragma once
#include "harness/accept_internal.h"

// report.json's "reproduction": command (shell-quoted, as this process was started), cwd, software
// (portatrain version and commit, compiler, OpenBLAS, oneDNN), each side's device and the per-run log paths.
cJSON *acc_reproduction(const acc_ctx *c);
// Adds to a throughput side: flops_per_token, model_flops_per_s (median tokens/s x flops per token),
// peak_flops_per_s with peak_source, and mfu; a platform whose peak is not known gets peak_note instead.
void acc_throughput_flops(const acc_ctx *c, const run_t *r, cJSON *side);
// The device a run trained on, as its manifest names it (a device backend: OpenCL or CUDA device and driver),
// else the host CPU, with the threads and ranks it ran.
void acc_run_device(const run_t *r, const char *cpu, int threads, char *out, size_t n);
// The docs directory of the source tree this binary was built in (BINARY_DIR/../docs, found by
// docs/COMPARE.md), malloc'd, or NULL: the report's calibration links point into it.
char *acc_docs_dir(void);
