// The training loop: batches -> forward/backward (with gradient
// accumulation) -> clip -> schedule -> AdamW, metrics as JSONL.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "model/qwen3.h"
#include "train/train_args.h"

// pt_train's return value when it stopped on a non-finite loss or gradient
// norm (the CLI exits 3, which the supervisor does not retry).
#define PT_TRAIN_NONFINITE (-3)

// After pt_train failed on a rank other than 0 of a distributed job with an
// error every rank shares (layout, configuration, a collective verdict): rank
// 0 reports it, so the caller stays silent.
int pt_train_error_reported_elsewhere(void);
// After pt_train failed: the error was in the arguments (missing or invalid
// flags, an output dir holding another run), so the CLI exits 2.
int pt_train_usage_error(void);
// Runs training; writes OUTPUT/metrics.jsonl, OUTPUT/train_args.json and the
// final HF model into OUTPUT. Returns 0, -1 (error set) or PT_TRAIN_NONFINITE
// (error set).
int pt_train(const pt_train_args *a);

// Per-step record (also used by tests in-process).
typedef struct {
    long step;
    double loss, grad_norm, lr;
    long tokens;
    double step_time_s;
} pt_step_record;
