// The flags of `portatrain train` as one table (train_args.c): each flag's name, Hugging Face's spelling of
// it, type, default, range or choices, help text and whether it is part of the training recipe. The parser,
// --help, the defaults, OUTPUT/train_args.json, the validation and accept's recipe flags all read it.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/mesh.h"
#include "train/schedule.h"

struct cJSON;

// Flags follow Hugging Face TrainingArguments names (defaults too, except
// where noted).
typedef struct {
    const char *model_dir;    // HF model directory to start from
    const char *model_config; // --config: the model's config file instead of MODEL/config.json (NULL: that one)
    const char *data_path;    // token shard
    const char *output_dir;
    const char *backend;      // "cpu-ref"
    double learning_rate;     // 5e-5
    double weight_decay;      // 0
    int weight_decay_params;  // PT_WD_HF (default: HF's groups, norm weights excluded) or PT_WD_ALL (TorchTitan's)
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
    bool documents;           // TorchTitan's packing: documents masked apart, positions per document
    int document_parts;       // documents mode: contiguous parts of the documents, one stream each (1)
    // Epoch boundaries (data/loader.h): PT_EPOCHS_HF (default: as HF's Trainer, a short last step per epoch)
    // or PT_EPOCHS_WRAP (full steps straddling epochs). PT_EPOCHS_UNSET: a resume takes the
    // checkpoint's (absent there: PT_EPOCHS_LEGACY), a fresh run hf. Resolved by pt_train.
    int epoch_boundary;
    int dataloader_drop_last;  // -1 unset (resume: the checkpoint's; else false), 0, 1 (needs hf)
    bool quiet;
    long save_steps;          // checkpoint every N optimizer steps (0: never; PT_SAVE_STEPS_AUTO: Young/Daly)
    double mtbf_hours;        // mean time between failures for --save-steps auto
    int save_total_limit;     // keep the newest K checkpoints (0: all)
    bool save_each_epoch;     // HF's save_strategy "epoch": save_steps = the steps of one epoch, once known
    // HF's save_strategy as given (NULL: unset) and whether --save-steps was: pt_train_args_finish resolves
    // them into save_steps and save_each_epoch, whatever their order on the command line.
    const char *save_strategy;
    bool save_steps_given;
    const char *resume_from_checkpoint;  // NULL, "latest" or a checkpoint dir
    bool overwrite_output_dir;  // remove a previous run's files first (else a fresh run there is refused)
    int nan_policy;           // PT_NAN_STOP (default), PT_NAN_SKIP, PT_NAN_ROLLBACK (docs/RECOVERY.md)
    int nan_max_count;        // skip/rollback handle at most this many non-finite steps (3); then stop
    // Distribution (docs/DISTRIBUTED.md): 0 = derived (pt_mesh_resolve). Under an MPI launcher
    // with none given, plain data parallel over the world.
    int tp, fsdp, dp;
    int ep;                   // Qwen3-MoE expert parallel degree, carved from the data ranks (0/1: none)
    const char *mesh_order;   // "tp,fsdp,dp" (innermost first, the default)
    const char *activation_checkpointing;  // none (default) | full | selective[:every=N] | op
    const char *precision;    // "fp32" (default) | "bf16" (qwen3_set_precision)
    bool tf32;                // fp32 GEMMs on TF32 tensor cores where the backend has them (cuda)
    const char *audit_dump;   // --audit-dump DIR: step-1 gradients and first updates for accept (train/audit.h)
} pt_train_args;

enum { PT_EPOCHS_UNSET = -1, PT_EPOCHS_WRAP = 0, PT_EPOCHS_HF = 1 };
enum { PT_NAN_STOP = 0, PT_NAN_SKIP = 1, PT_NAN_ROLLBACK = 2 };
enum { PT_WD_HF = 0, PT_WD_ALL = 1 };  // --weight-decay-params, in its choices' order
// --save-steps auto: a probe checkpoint PT_SAVE_AUTO_PROBE steps into the run
// measures the save cost; then Daly's optimum interval for --mtbf-hours.
#define PT_SAVE_STEPS_AUTO (-1L)
#define PT_SAVE_AUTO_PROBE 5

// How runs and checkpoints written before the loader's options existed read their rows: epochs wrap, no
// drop_last, unshuffled, packed windows. A record without these fields means these values.
#define PT_EPOCHS_LEGACY PT_EPOCHS_WRAP
// Adds the legacy value of each loader field absent from obj (a train_args.json, a manifest's
// hyperparameters, a checkpoint's data_loader): epoch_boundary, dataloader_drop_last, and with all_fields
// also shuffle and data_mode.
void pt_train_legacy_loader_json(struct cJSON *obj, bool all_fields);

typedef enum {
    PT_FLAG_STRING,    // const char *
    PT_FLAG_INT,       // int in [min, max]
    PT_FLAG_LONG,      // long in [min, max]
    PT_FLAG_U64,       // uint64_t, any integer (a seed)
    PT_FLAG_DOUBLE,    // a finite double >= min
    PT_FLAG_BOOL,      // bool: no value, or one of true/false/1/0/yes/no
    PT_FLAG_CHOICE,    // int: the index of the value in choices
    PT_FLAG_CLI,       // taken by the CLI itself (--supervise and the supervisor's options, --inject)
} pt_flag_kind;

typedef struct pt_train_flag {
    const char *name;     // "--learning-rate" (also taken as "--learning_rate")
    const char *key;      // HF's spelling, "learning_rate": its key in train_args.json and accept's recipe
    pt_flag_kind kind;
    size_t offset;        // of its field in pt_train_args
    double min, max;      // INT, LONG: the accepted range; DOUBLE: min
    const char *choices;  // CHOICE: "stop|skip|rollback"
    const char *def;      // the default, as typed on the command line (NULL: zero)
    int json;             // its value's cJSON type in train_args.json and the recipe (cJSON_True: a boolean); 0: none
    bool recipe;          // accept passes it to every run and holds every run to its baseline's value
    const char *usage;    // the --help line's left column ("--learning-rate F"); NULL: not listed
    const char *help;     // "{}" stands for the default
    // Flags whose value is more than its field: parse, and write train_args.json (may write nothing).
    int (*set)(const struct pt_train_flag *f, const char *value, pt_train_args *a);
    void (*record)(const struct pt_train_flag *f, const pt_train_args *a, struct cJSON *obj);
} pt_train_flag;

extern const pt_train_flag pt_train_flags[];
extern const int pt_train_nflags;

// The flag named "--name" (canonical: dashes), or NULL.
const pt_train_flag *pt_train_flag_find(const char *name);
// The flag whose key (HF's spelling) is key, or NULL.
const pt_train_flag *pt_train_flag_find_key(const char *key);
// The i-th recipe flag (table order), NULL past the last.
const pt_train_flag *pt_train_recipe_flag(int i);
// Sets a's field from the flag's value text (a BOOL flag: NULL for the bare flag). 0, or -1 with an error
// naming the flag and the value, the message train gives.
int pt_train_flag_set(const pt_train_flag *f, const char *value, pt_train_args *a);
// The flag's value in a, as train_args.json records it (a new item), or NULL where nothing is recorded.
struct cJSON *pt_train_flag_json(const pt_train_flag *f, const pt_train_args *a);
// The --help lines of the flags.
void pt_train_flags_help(void);

void pt_train_args_defaults(pt_train_args *a);
// After the flags are set: resolves those that depend on one another (--save-strategy and --save-steps) and
// checks --precision. 0 or -1 with an error.
int pt_train_args_finish(pt_train_args *a);
// The checks train makes before it starts: required flags, then pt_train_args_check.
int pt_train_args_validate(const pt_train_args *a, pt_lr_schedule *sched);
// The values' checks alone (what accept holds its recipe and hyperparameters to): optimizer hyperparameters,
// the schedule (into sched), checkpointing, the loader's options.
int pt_train_args_check(const pt_train_args *a, pt_lr_schedule *sched);
// OUTPUT/train_args.json: every recorded flag, the OpenMP threads and, with mesh, the layout of `world` ranks.
struct cJSON *pt_train_args_json(const pt_train_args *a, const pt_mesh *mesh, int world);
// "hf" or "wrap" (train_args.json, manifest, checkpoint state).
const char *pt_epoch_boundary_name(int epoch_boundary);
// "packed", "padded" or "documents".
const char *pt_data_mode_name(const pt_train_args *a);
