// Loading a run's per-step loss curve from portatrain run dirs and from other
// trainers' logs (Hugging Face trainer_state.json, TorchTitan console logs,
// generic CSV / JSONL). See docs/COMPARE.md.
#pragma once
#include <stdbool.h>

typedef struct {
    long step;
    double loss;
    double grad_norm;  // NAN when the log has none
    double tokens;     // NAN when absent
    double step_time;  // seconds; NAN when absent
    bool nonfinite;    // the loss, or a grad_norm the log has, is NaN or inf (grad_norm NAN alone = not logged)
    int window;        // the loss is the mean over steps step-window+1 .. step (HF logging_steps > 1); 0 or 1:
                       // this step's own loss. grad_norm is always this step's.
} pt_runpoint;

typedef struct {
    char *path;
    const char *format;  // "portatrain", "hf", "torchtitan", "csv", "jsonl"
    bool is_run_dir;     // a portatrain OUTPUT dir
    pt_runpoint *pts;
    int n;
    double eval_loss;    // OUTPUT/eval.json "loss"; NAN when absent
    long *skipped;       // steps logged as skipped (--nan-policy skip: non-finite, no update), not in pts
    int n_skipped;
    int repeated;        // lines dropped because a later line logged the same step (a restarted run's replay);
                         // pts is sorted by step, one point per step
} pt_runlog;

// format: NULL or "auto" to detect. 0 or -1 with an error naming file:line.
int pt_runlog_load(const char *path, const char *format, pt_runlog *out);
void pt_runlog_free(pt_runlog *r);
