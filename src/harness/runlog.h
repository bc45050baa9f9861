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
    // Half a unit of the last printed digit (a loss printed as 7.12345 is 7.12345 +- 5e-6): the absolute
    // error the print alone carries. 0 for full-precision values (portatrain, HF's JSON, JSONL).
    double loss_res, grad_norm_res;
    double wall_time;  // seconds since the log's first time stamp; NAN when the log has no stamps
} pt_runpoint;

// One attempt of a TorchTitan log (a process that started training), its times in seconds since the log's
// first stamp (NAN: no such line): what a restart's cost is measured from.
typedef struct {
    long first_step, last_step;  // its "Training starts at step N" and its last step line (-1: none)
    double t_begin;              // the process's first line ("torchtitan version ...")
    double t_load;               // "Loading the checkpoint from .../step-N" (a resume), NAN otherwise
    double t_start;              // "Training starts at step N"
    double t_first_step, t_last_step;  // its first and last step lines
    double t_end;                // its last stamped line
} pt_attempt;

// Why a run ended, as far as its log can tell.
typedef enum {
    PT_END_UNKNOWN = 0,  // the format has no end-of-training line (CSV, JSONL, HF, portatrain dirs)
    PT_END_FINISHED,     // the log has its trainer's end-of-training line
    PT_END_NONFINITE,    // the trainer stopped on a non-finite loss (stop_step is that step)
    PT_END_ERROR,        // an exception / error line and no end-of-training line
    PT_END_TRUNCATED,    // the format has an end-of-training line and this log lacks it (killed, cut, running)
} pt_run_end;

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
    pt_run_end end;
    long stop_step;      // PT_END_NONFINITE / PT_END_ERROR: the step it stopped at (the last step logged when the
                         // error names none); -1 otherwise
    char stop_reason[160];  // one line: "loss is not finite (global_avg_loss=nan)", the error line, ...
    pt_runpoint *val;    // validation losses (TorchTitan "validate step: N  loss: ...", HF "eval_loss"), by step;
                         // not curve points
    int n_val;
    double runtime_s;    // HF: the summary's train_runtime (seconds of training); NAN when absent
    int attempts;        // training starts in the log (a resumed run pasted after its first attempt: 2); 0 if unknown
    int ckpt_saves, ckpt_loads;
    long resumed_from;   // the step the last attempt loaded a checkpoint of (its first step - 1); -1 when none
    pt_attempt *att;     // TorchTitan: each attempt's steps and times (n_att of them); NULL for other formats
    int n_att;
} pt_runlog;

// format: NULL or "auto" to detect. 0 or -1 with an error naming file:line; a file no importer recognises
// gets one line naming the formats tried and --format-a/--format-b.
int pt_runlog_load(const char *path, const char *format, pt_runlog *out);
void pt_runlog_free(pt_runlog *r);
