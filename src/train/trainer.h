// The training loop: batches -> forward/backward (with gradient
// accumulation) -> clip -> schedule -> AdamW, metrics as JSONL.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "model/qwen3.h"

// Flags follow Hugging Face TrainingArguments names (defaults too, except
// where noted).
typedef struct {
    const char *model_dir;    // HF model directory to start from
    const char *data_path;    // token shard
    const char *output_dir;
    const char *backend;      // "cpu-ref"
    double learning_rate;     // 5e-5
    double weight_decay;      // 0
    double adam_beta1, adam_beta2, adam_epsilon;  // 0.9, 0.999, 1e-8
    double max_grad_norm;     // 1.0; 0 disables clipping
    int per_device_train_batch_size;  // 8
    int gradient_accumulation_steps;  // 1
    long max_steps;           // > 0; or 0 with num_train_epochs > 0 (then resolved from the data)
    double num_train_epochs;  // 0 = unset; used only when max_steps is 0 (as HF: max_steps > 0 overrides it)
    long warmup_steps;        // 0
    double warmup_ratio;      // 0 = unset; with warmup_steps 0: ceil(ratio x max_steps) warmup steps (as HF)
    const char *lr_scheduler_type;    // "linear"
    const char *lr_scheduler_kwargs;  // HF's lr_scheduler_kwargs as a JSON object text, or NULL
    long logging_steps;       // progress line every N steps (metrics.jsonl gets every step)
    uint64_t seed;            // 42
    int seq_len;              // required
    bool shuffle;             // false (core issue semantics: sequential windows)
    bool padded;              // one document per row, bucketed lengths (else packed windows)
    // Epoch boundaries (data/loader.h): PT_EPOCHS_HF (default: as HF's Trainer, a short last step per epoch)
    // or PT_EPOCHS_WRAP (before: full steps straddling epochs). PT_EPOCHS_UNSET: a resume takes the
    // checkpoint's (absent there: wrap), a fresh run hf. Resolved by pt_train.
    int epoch_boundary;
    int dataloader_drop_last;  // -1 unset (resume: the checkpoint's; else false), 0, 1 (needs hf)
    bool quiet;
    long save_steps;          // checkpoint every N optimizer steps (0: never; PT_SAVE_STEPS_AUTO: Young/Daly)
    double mtbf_hours;        // mean time between failures for --save-steps auto
    int save_total_limit;     // keep the newest K checkpoints (0: all)
    bool save_each_epoch;     // HF's save_strategy "epoch": save_steps = the steps of one epoch, once known
    const char *resume_from_checkpoint;  // NULL, "latest" or a checkpoint dir
    bool overwrite_output_dir;  // remove a previous run's files first (else a fresh run there is refused)
    int nan_policy;           // PT_NAN_STOP (default), PT_NAN_SKIP, PT_NAN_ROLLBACK (docs/RECOVERY.md)
    int nan_max_count;        // skip/rollback handle at most this many non-finite steps (3); then stop
    // Distribution (docs/DISTRIBUTED.md): 0 = derived. Under an MPI launcher
    // with none given, plain data parallel over the world.
    int tp, fsdp, dp;
    const char *mesh_order;   // "tp,fsdp,dp" (innermost first, the default)
    const char *activation_checkpointing;  // none (default) | full | selective[:every=N] | op
    const char *precision;    // "fp32" (default) | "bf16" (qwen3_set_precision)
    bool tf32;                // fp32 GEMMs on TF32 tensor cores where the backend has them (cuda)
} pt_train_args;

enum { PT_EPOCHS_UNSET = -1, PT_EPOCHS_WRAP = 0, PT_EPOCHS_HF = 1 };
enum { PT_NAN_STOP = 0, PT_NAN_SKIP = 1, PT_NAN_ROLLBACK = 2 };
// --save-steps auto: a probe checkpoint PT_SAVE_AUTO_PROBE steps into the run
// measures the save cost; then Daly's optimum interval for --mtbf-hours.
#define PT_SAVE_STEPS_AUTO (-1L)
#define PT_SAVE_AUTO_PROBE 5
// pt_train's return value when it stopped on a non-finite loss or gradient
// norm (the CLI exits 3, which the supervisor does not retry).
#define PT_TRAIN_NONFINITE (-3)

void pt_train_args_defaults(pt_train_args *a);
// "hf" or "wrap" (train_args.json, manifest, checkpoint state).
const char *pt_epoch_boundary_name(int epoch_boundary);
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
