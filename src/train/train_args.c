#include "train/train_args.h"
#include "util/common.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *pt_data_mode_name(const pt_train_args *a) {
    return a->padded ? "padded" : a->documents ? "documents" : "packed";
}
const char *pt_epoch_boundary_name(int e) { return e == PT_EPOCHS_WRAP ? "wrap" : "hf"; }

void pt_train_legacy_loader_json(cJSON *o, bool all_fields) {
    if (!cJSON_IsObject(o)) return;
    if (!cJSON_GetObjectItemCaseSensitive(o, "epoch_boundary"))
        cJSON_AddStringToObject(o, "epoch_boundary", pt_epoch_boundary_name(PT_EPOCHS_LEGACY));
    if (!cJSON_GetObjectItemCaseSensitive(o, "dataloader_drop_last")) cJSON_AddFalseToObject(o, "dataloader_drop_last");
    if (!all_fields) return;
    if (!cJSON_GetObjectItemCaseSensitive(o, "shuffle")) cJSON_AddFalseToObject(o, "shuffle");
    if (!cJSON_GetObjectItemCaseSensitive(o, "data_mode")) cJSON_AddStringToObject(o, "data_mode", "packed");
    if (!cJSON_GetObjectItemCaseSensitive(o, "document_parts")) cJSON_AddNumberToObject(o, "document_parts", 1);
}

// ---------------------------------------------------------------- values

#define FIELD(a, f, T) ((T *)((char *)(a) + (f)->offset))
#define CFIELD(a, f, T) ((const T *)((const char *)(a) + (f)->offset))
#define NO_MIN (-HUGE_VAL)

static int parse_int(const pt_train_flag *f, const char *v, long long *out) {
    char *end;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end) {
        pt_set_error("option %s expects an integer, got '%s'", f->name, v);
        return -1;
    }
    // checked before any narrowing: 2^32+16 must not become 16
    if (f->kind != PT_FLAG_U64 && ((double)x < f->min || (double)x > f->max)) {
        pt_set_error("option %s must be in [%lld, %lld], got '%s'", f->name, (long long)f->min,
                     f->max >= (double)LLONG_MAX ? LLONG_MAX : (long long)f->max, v);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_double(const pt_train_flag *f, const char *v, double *out) {
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        pt_set_error("option %s expects a number, got '%s'", f->name, v);
        return -1;
    }
    if (x < f->min) {
        pt_set_error("option %s must be >= %g, got '%s'", f->name, f->min, v);
        return -1;
    }
    *out = x;
    return 0;
}

// As Hugging Face's parser: no value is true, else true/false/1/0/yes/no in any case.
static int parse_bool(const pt_train_flag *f, const char *v, bool *out) {
    static const char *const yes[] = {"true", "1", "yes"}, *const no[] = {"false", "0", "no"};
    if (!v) { *out = true; return 0; }
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(v, yes[i])) { *out = true; return 0; }
        if (!strcasecmp(v, no[i])) { *out = false; return 0; }
    }
    pt_set_error("option %s takes no value or one of true/false/1/0/yes/no, got '%s'", f->name, v);
    return -1;
}

// The index of v in "a|b|c", or -1.
static int choice_index(const char *choices, const char *v) {
    const size_t n = strlen(v);
    int i = 0;
    for (const char *c = choices; c; c = strchr(c, '|'), c = c ? c + 1 : NULL, i++)
        if (!strncmp(c, v, n) && (c[n] == '|' || !c[n])) return i;
    return -1;
}

// "--nan-policy must be stop, skip or rollback"
static void choice_error(const pt_train_flag *f) {
    char list[256] = "";
    size_t len = 0;
    int count = 1;
    for (const char *c = f->choices; *c; c++) count += *c == '|';
    int i = 0;
    for (const char *c = f->choices; c && len < sizeof list; i++) {
        const char *bar = strchr(c, '|');
        const int w = bar ? (int)(bar - c) : (int)strlen(c);
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%.*s", i == 0 ? "" : i == count - 1 ? " or " : ", ",
                                w, c);
        c = bar ? bar + 1 : NULL;
    }
    pt_set_error("%s must be %s", f->name, list);
}

// The choice at index i of "a|b|c" into buf.
static const char *choice_name(const char *choices, int i, char *buf, size_t n) {
    const char *c = choices;
    for (; i > 0 && c; i--) c = strchr(c, '|'), c = c ? c + 1 : NULL;
    if (!c) return "";
    const char *bar = strchr(c, '|');
    snprintf(buf, n, "%.*s", bar ? (int)(bar - c) : (int)strlen(c), c);
    return buf;
}

// ---------------------------------------------------------------- flags whose value is more than a field

static int set_num_train_epochs(const pt_train_flag *f, const char *v, pt_train_args *a) {
    if (parse_double(f, v, &a->num_train_epochs) != 0) return -1;
    if (a->num_train_epochs <= 0) { pt_set_error("--num-train-epochs must be > 0"); return -1; }
    return 0;
}

// transformers 5: a --warmup-steps below 1 is a ratio of the total steps
static int set_warmup_steps(const pt_train_flag *f, const char *v, pt_train_args *a) {
    double w;
    if (parse_double(f, v, &w) != 0) return -1;
    if (w >= 1e15) { pt_set_error("--warmup-steps %g is too large", w); return -1; }
    a->warmup_steps = w < 1 ? 0 : (long)w;  // HF: int(warmup_steps)
    if (w > 0 && w < 1) a->warmup_ratio = w;
    return 0;
}

// transformers 4's name (a --warmup-steps >= 1 wins, as there)
static int set_warmup_ratio(const pt_train_flag *f, const char *v, pt_train_args *a) {
    if (parse_double(f, v, &a->warmup_ratio) != 0) return -1;
    if (a->warmup_ratio > 1) { pt_set_error("--warmup-ratio must be in [0, 1], got %g", a->warmup_ratio); return -1; }
    return 0;
}

// A JSON object's text ("": none, as unset)
static int set_json_object(const pt_train_flag *f, const char *v, pt_train_args *a) {
    cJSON *j = *v ? cJSON_Parse(v) : NULL;
    const bool ok = !*v || cJSON_IsObject(j);
    cJSON_Delete(j);
    if (!ok) {
        pt_set_error("%s: not a JSON object: %s", f->name, v);
        return -1;
    }
    *FIELD(a, f, const char *) = v;
    return 0;
}

static int set_epoch_boundary(const pt_train_flag *f, const char *v, pt_train_args *a) {
    (void)f;
    if (!strcmp(v, "hf")) a->epoch_boundary = PT_EPOCHS_HF;
    else if (!strcmp(v, "wrap")) a->epoch_boundary = PT_EPOCHS_WRAP;
    else { pt_set_error("--epoch-boundary must be hf or wrap"); return -1; }
    return 0;
}

static int set_data_mode(const pt_train_flag *f, const char *v, pt_train_args *a) {
    (void)f;
    if (strcmp(v, "packed") && strcmp(v, "padded") && strcmp(v, "documents")) {
        pt_set_error("--data-mode must be packed, padded or documents");
        return -1;
    }
    a->padded = !strcmp(v, "padded");
    a->documents = !strcmp(v, "documents");
    return 0;
}

static int set_drop_last(const pt_train_flag *f, const char *v, pt_train_args *a) {
    bool b;
    if (parse_bool(f, v, &b) != 0) return -1;
    a->dataloader_drop_last = b ? 1 : 0;
    return 0;
}

static int set_save_steps(const pt_train_flag *f, const char *v, pt_train_args *a) {
    (void)f;
    char *end;
    a->save_steps_given = true;
    if (!strcmp(v, "auto")) a->save_steps = PT_SAVE_STEPS_AUTO;
    else if ((a->save_steps = strtol(v, &end, 10)) < 0 || *end || end == v) {
        pt_set_error("--save-steps must be a number >= 0 or auto (got '%s')", v);
        return -1;
    }
    return 0;
}

static int set_save_strategy(const pt_train_flag *f, const char *v, pt_train_args *a) {
    if (choice_index(f->choices, v) < 0) {
        pt_set_error("--save-strategy must be no, steps or epoch (got '%s'%s)", v,
                     !strcmp(v, "best") ? ": best needs evaluation during training" : "");
        return -1;
    }
    a->save_strategy = v;
    return 0;
}

// HF's optimizer names for torch.optim.AdamW: the AdamW here
static int set_optim(const pt_train_flag *f, const char *v, pt_train_args *a) {
    (void)a;
    if (choice_index(f->choices, v) >= 0) return 0;
    pt_set_error("--optim %s: only AdamW is implemented (adamw_torch, adamw_torch_fused)", v);
    return -1;
}

// HF's experiment trackers: metrics go to OUTPUT/metrics.jsonl only
static int set_report_to(const pt_train_flag *f, const char *v, pt_train_args *a) {
    (void)f, (void)a;
    if (!strcmp(v, "none")) return 0;
    pt_set_error("--report-to %s: no trackers here; metrics go to OUTPUT/metrics.jsonl (--report-to none is "
                 "accepted)", v);
    return -1;
}

// HF TrainingArguments' name: every layer recomputed
static int set_gradient_checkpointing(const pt_train_flag *f, const char *v, pt_train_args *a) {
    bool b;
    if (parse_bool(f, v, &b) != 0) return -1;
    a->activation_checkpointing = b ? "full" : "none";
    return 0;
}

static int set_bf16(const pt_train_flag *f, const char *v, pt_train_args *a) {
    bool b;
    if (parse_bool(f, v, &b) != 0) return -1;
    a->precision = b ? "bf16" : "fp32";
    return 0;
}

// ---------------------------------------------------------------- what train_args.json records

static void record_model(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    // Absolute, so `export` and reports run from another directory find the model (and its tokenizer).
    char *abs_model = a->model_dir ? realpath(a->model_dir, NULL) : NULL;
    cJSON_AddStringToObject(o, f->key, abs_model ? abs_model : a->model_dir);
    free(abs_model);
}

static void record_config(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    if (!a->model_config) return;  // MODEL/config.json, as runs without the flag record it
    char *abs_config = realpath(a->model_config, NULL);
    cJSON_AddStringToObject(o, f->key, abs_config ? abs_config : a->model_config);
    free(abs_config);
}

static void record_if_positive(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    const double x = *CFIELD(a, f, double);
    if (x > 0) cJSON_AddNumberToObject(o, f->key, x);
}

static void record_json_text(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    const char *text = *CFIELD(a, f, const char *);
    if (text && *text) cJSON_AddItemToObject(o, f->key, cJSON_Parse(text));  // validated: a JSON object
}

static void record_data_mode(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    cJSON_AddStringToObject(o, f->key, pt_data_mode_name(a));
}

static void record_epoch_boundary(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    cJSON_AddStringToObject(o, f->key, pt_epoch_boundary_name(a->epoch_boundary));
}

static void record_drop_last(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    cJSON_AddBoolToObject(o, f->key, a->dataloader_drop_last > 0);
}

static void record_save_steps(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    if (a->save_steps == PT_SAVE_STEPS_AUTO) cJSON_AddStringToObject(o, f->key, "auto");
    else cJSON_AddNumberToObject(o, f->key, (double)a->save_steps);
}

static void record_save_strategy(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    if (a->save_each_epoch) cJSON_AddStringToObject(o, f->key, "epoch");
}

static void record_precision(const pt_train_flag *f, const pt_train_args *a, cJSON *o) {
    cJSON_AddStringToObject(o, f->key, a->precision ? a->precision : "fp32");
}

// ---------------------------------------------------------------- the table

#define OFF(field) offsetof(pt_train_args, field)
#define NONE 0  // not recorded

const pt_train_flag pt_train_flags[] = {
    {"--model", "model", PT_FLAG_STRING, OFF(model_dir), .json = cJSON_String, .record = record_model},
    {"--config", "config", PT_FLAG_STRING, OFF(model_config), .json = cJSON_String, .usage = "--config FILE",
     .help = "the model's config.json when --model has none (TorchTitan's HF\n"
             "export; its run's hf_assets_path has it), as eval's --config",
     .record = record_config},
    {"--model-name-or-path", "model_name_or_path", PT_FLAG_STRING, OFF(model_dir), .json = NONE},  // HF's name of --model
    {"--data", "data", PT_FLAG_STRING, OFF(data_path), .json = cJSON_String},
    {"--output-dir", "output_dir", PT_FLAG_STRING, OFF(output_dir), .json = cJSON_String},
    {"--backend", "backend", PT_FLAG_STRING, OFF(backend), .def = "cpu-ref", .json = cJSON_String,
     .usage = "--backend NAME", .help = "{} (default), cpu, opencl[:PLATFORM[:DEVICE]], cuda[:DEVICE],\n"
                                       "cuda-sim (portatrain devices)"},
    {"--learning-rate", "learning_rate", PT_FLAG_DOUBLE, OFF(learning_rate), .min = 0, .def = "5e-5",
     .json = cJSON_Number, .usage = "--learning-rate F", .help = "{}"},
    {"--per-device-train-batch-size", "per_device_train_batch_size", PT_FLAG_INT, OFF(per_device_train_batch_size),
     .min = 1, .max = INT_MAX, .def = "8", .json = cJSON_Number, .usage = "--per-device-train-batch-size N",
     .help = "{}"},
    {"--gradient-accumulation-steps", "gradient_accumulation_steps", PT_FLAG_INT, OFF(gradient_accumulation_steps),
     .min = 1, .max = INT_MAX, .def = "1", .json = cJSON_Number, .recipe = true,
     .usage = "--gradient-accumulation-steps N", .help = "{}"},
    {"--max-steps", "max_steps", PT_FLAG_LONG, OFF(max_steps), .min = 1, .max = (double)LONG_MAX,
     .json = cJSON_Number},
    {"--num-train-epochs", "num_train_epochs", PT_FLAG_DOUBLE, OFF(num_train_epochs), .min = 0, .json = cJSON_Number,
     .usage = "--num-train-epochs E", .help = "train E passes over the data (a float; ceil(E x steps per\n"
                                              "epoch) steps) when --max-steps is not given",
     .set = set_num_train_epochs, .record = record_if_positive},
    {"--warmup-steps", "warmup_steps", PT_FLAG_LONG, OFF(warmup_steps), .min = 0, .def = "0", .json = cJSON_Number,
     .usage = "--warmup-steps N", .help = "{}; a float below 1 is a ratio of the total steps, ceil(N x\n"
                                          "steps) (transformers 5; --warmup-ratio R: transformers 4's name)",
     .set = set_warmup_steps},
    {"--warmup-ratio", "warmup_ratio", PT_FLAG_DOUBLE, OFF(warmup_ratio), .min = 0, .json = cJSON_Number,
     .set = set_warmup_ratio, .record = record_if_positive},
    {"--lr-scheduler-type", "lr_scheduler_type", PT_FLAG_STRING, OFF(lr_scheduler_type), .def = "linear",
     .json = cJSON_String, .recipe = true, .usage = "--lr-scheduler-type S",
     .help = "{} | cosine | constant | constant_with_warmup |\n"
             "cosine_with_restarts | polynomial | inverse_sqrt |\n"
             "cosine_with_min_lr | cosine_warmup_with_min_lr |\n"
             "warmup_stable_decay (HF's formulas) | torchtitan (TorchTitan's\n"
             "warmup-stable-decay: its lr_scheduler fields as kwargs)"},
    {"--lr-scheduler-kwargs", "lr_scheduler_kwargs", PT_FLAG_STRING, OFF(lr_scheduler_kwargs), .json = cJSON_Object,
     .recipe = true, .usage = "--lr-scheduler-kwargs JSON",
     .help = "HF's lr_scheduler_kwargs, e.g. '{\"min_lr_rate\": 0.1}',\n"
             "'{\"num_decay_steps\": 100, \"decay_type\": \"linear\"}'; torchtitan:\n"
             "decay_type, min_lr_factor, decay_ratio, total_steps",
     .set = set_json_object, .record = record_json_text},
    {"--weight-decay", "weight_decay", PT_FLAG_DOUBLE, OFF(weight_decay), .min = NO_MIN, .def = "0",
     .json = cJSON_Number, .usage = "--weight-decay F", .help = "{} (not on norm weights unless --weight-decay-params all)"},
    {"--weight-decay-params", "weight_decay_params", PT_FLAG_CHOICE, OFF(weight_decay_params), .choices = "hf|all",
     .def = "hf", .json = cJSON_String, .recipe = true, .usage = "--weight-decay-params hf|all",
     .help = "which parameters --weight-decay shrinks: {} (HF's Trainer: all\n"
             "but norm weights and biases) | all (TorchTitan's default AdamW)"},
    {"--adam-beta1", "adam_beta1", PT_FLAG_DOUBLE, OFF(adam_beta1), .min = NO_MIN, .def = "0.9", .json = cJSON_Number,
     .recipe = true, .usage = "--adam-beta1 F", .help = "{}"},
    {"--adam-beta2", "adam_beta2", PT_FLAG_DOUBLE, OFF(adam_beta2), .min = NO_MIN, .def = "0.999",
     .json = cJSON_Number, .recipe = true, .usage = "--adam-beta2 F", .help = "{}"},
    {"--adam-epsilon", "adam_epsilon", PT_FLAG_DOUBLE, OFF(adam_epsilon), .min = NO_MIN, .def = "1e-8",
     .json = cJSON_Number, .recipe = true, .usage = "--adam-epsilon F", .help = "{}"},
    {"--max-grad-norm", "max_grad_norm", PT_FLAG_DOUBLE, OFF(max_grad_norm), .min = NO_MIN, .def = "1.0",
     .json = cJSON_Number, .usage = "--max-grad-norm F", .help = "{} (0 disables clipping)"},
    {"--seed", "seed", PT_FLAG_U64, OFF(seed), .def = "42", .json = cJSON_Number, .usage = "--seed N", .help = "{}"},
    {"--optim", "optim", PT_FLAG_STRING, 0, .choices = "adamw_torch|adamw_torch_fused", .usage = "--optim adamw_torch",
     .help = "the optimizer (AdamW; adamw_torch_fused is the same math)", .set = set_optim},
    {"--report-to", "report_to", PT_FLAG_STRING, 0, .usage = "--report-to none",
     .help = "metrics go to OUTPUT/metrics.jsonl (no other trackers)", .set = set_report_to},
    {"--logging-steps", "logging_steps", PT_FLAG_LONG, OFF(logging_steps), .min = 0, .max = (double)LONG_MAX,
     .def = "10", .json = cJSON_Number, .usage = "--logging-steps N",
     .help = "progress line every N steps ({}), its loss the mean since the\n"
             "previous line, as HF logs it (metrics.jsonl: every step's)"},
    {"--seq-len", "seq_len", PT_FLAG_INT, OFF(seq_len), .min = 1, .max = INT_MAX, .json = cJSON_Number},
    {"--shuffle", "shuffle", PT_FLAG_BOOL, OFF(shuffle), .json = cJSON_True, .recipe = true, .usage = "--shuffle",
     .help = "shuffle rows with a seeded permutation per epoch"},
    {"--data-mode", "data_mode", PT_FLAG_STRING, 0, .json = cJSON_String, .recipe = true,
     .usage = "--data-mode packed|padded|documents",
     .help = "packed windows (default), one document per row, or TorchTitan's\n"
             "packing: EOS per document, attention masked per document,\n"
             "positions restarting at each document",
     .set = set_data_mode, .record = record_data_mode},
    {"--document-parts", "document_parts", PT_FLAG_INT, OFF(document_parts), .min = 1, .max = 1 << 20,
     .json = cJSON_Number, .recipe = true, .def = "1", .usage = "--document-parts N",
     .help = "documents mode: split the documents into N contiguous parts\n"
             "read side by side, as TorchTitan's N data-parallel ranks do ({})"},
    {"--epoch-boundary", "epoch_boundary", PT_FLAG_STRING, 0, .json = cJSON_String, .recipe = true,
     .usage = "--epoch-boundary hf|wrap",
     .help = "hf (default): as HF's Trainer, each epoch starts at its first\n"
             "row and ends with a short last step; wrap: full steps that may\n"
             "straddle epochs (runs before this option). A resume takes the\n"
             "checkpoint's unless given",
     .set = set_epoch_boundary, .record = record_epoch_boundary},
    {"--dataloader-drop-last", "dataloader_drop_last", PT_FLAG_BOOL, 0, .json = cJSON_True, .recipe = true,
     .usage = "--dataloader-drop-last", .help = "HF's: drop each epoch's incomplete last micro-batch (needs hf)",
     .set = set_drop_last, .record = record_drop_last},
    {"--save-steps", "save_steps", PT_FLAG_STRING, 0, .json = cJSON_Number, .usage = "--save-steps N|auto",
     .help = "checkpoint every N steps (0: never); auto: a probe save after\n"
             "5 steps, then Daly's optimum interval for --mtbf-hours",
     .set = set_save_steps, .record = record_save_steps},
    {"--save-strategy", "save_strategy", PT_FLAG_STRING, 0, .choices = "no|steps|epoch", .json = cJSON_String,
     .usage = "--save-strategy S",
     .help = "HF's: no (never) | steps (every --save-steps; 500 unless\n"
             "given) | epoch (at the end of each pass over the data)",
     .set = set_save_strategy, .record = record_save_strategy},
    {"--mtbf-hours", "mtbf_hours", PT_FLAG_DOUBLE, OFF(mtbf_hours), .min = 0, .json = cJSON_Number,
     .usage = "--mtbf-hours H", .help = "mean time between failures for --save-steps auto",
     .record = record_if_positive},
    {"--save-total-limit", "save_total_limit", PT_FLAG_INT, OFF(save_total_limit), .min = 0, .max = INT_MAX,
     .json = cJSON_Number, .usage = "--save-total-limit K", .help = "keep the newest K checkpoints (0: all)"},
    {"--resume-from-checkpoint", "resume_from_checkpoint", PT_FLAG_STRING, OFF(resume_from_checkpoint),
     .usage = "--resume-from-checkpoint DIR|latest", .help = "continue bit-exactly from a checkpoint"},
    {"--overwrite-output-dir", "overwrite_output_dir", PT_FLAG_BOOL, OFF(overwrite_output_dir),
     .usage = "--overwrite-output-dir",
     .help = "replace a previous run in --output-dir (its metrics, checkpoints,\n"
             "latest, model and run files; other files are kept). Without it\n"
             "(or --resume-from-checkpoint), such a directory is refused (exit 2)"},
    {"--quiet", "quiet", PT_FLAG_BOOL, OFF(quiet), .usage = "--quiet", .help = "no progress output"},
    {"--nan-policy", "nan_policy", PT_FLAG_CHOICE, OFF(nan_policy), .choices = "stop|skip|rollback", .def = "stop",
     .json = cJSON_String, .usage = "--nan-policy stop|skip|rollback",
     .help = "on a non-finite loss or grad norm (checked every step before\n"
             "the update): stop with exit 3 (default), skip the batch (no\n"
             "update, logged \"skipped\": true), or restore the newest valid\n"
             "checkpoint and replay, skipping that batch if it fails again"},
    {"--nan-max-count", "nan_max_count", PT_FLAG_INT, OFF(nan_max_count), .min = 0, .max = INT_MAX, .def = "3",
     .json = cJSON_Number, .usage = "--nan-max-count N",
     .help = "skip/rollback handle at most N non-finite steps, then stop (3)"},
    {"--tp", "tp", PT_FLAG_INT, OFF(tp), .min = 1, .max = 65536, .usage = "--tp N --fsdp N --dp N",
     .help = "distributed layout under mpirun (docs/DISTRIBUTED.md): tensor\n"
             "parallel, fully sharded and plain data parallel degrees; their\n"
             "product is the world size (unset ones take what is left; with\n"
             "none given, data parallel over all ranks). The batch flag stays\n"
             "per device: the global batch is batch x accumulation x fsdp x dp"},
    {"--fsdp", "fsdp", PT_FLAG_INT, OFF(fsdp), .min = 1, .max = 65536},
    {"--dp", "dp", PT_FLAG_INT, OFF(dp), .min = 1, .max = 65536},
    {"--ep", "ep", PT_FLAG_INT, OFF(ep), .min = 1, .max = 65536, .usage = "--ep N",
     .help = "Qwen3-MoE expert parallel degree, borrowed from the data ranks\n"
             "(fsdp x dp, same tp coordinate): each of N ranks owns\n"
             "num_experts/N experts, tokens travel by all-to-all"},
    {"--mesh-order", "mesh_order", PT_FLAG_STRING, OFF(mesh_order), .usage = "--mesh-order LIST",
     .help = "rank placement, innermost dimension first (tp,fsdp,dp)"},
    {"--activation-checkpointing", "activation_checkpointing", PT_FLAG_STRING, OFF(activation_checkpointing),
     .json = cJSON_String, .usage = "--activation-checkpointing P",
     .help = "none (default) | full (each layer recomputed in backward) |\n"
             "selective[:every=N] (every Nth layer, 2) | op (keep matmul and\n"
             "attention outputs, recompute norms, RoPE, SwiGLU); same results.\n"
             "--gradient-checkpointing (HF's flag): full"},
    {"--gradient-checkpointing", "gradient_checkpointing", PT_FLAG_BOOL, 0, .set = set_gradient_checkpointing},
    {"--precision", "precision", PT_FLAG_STRING, OFF(precision), .json = cJSON_String, .usage = "--precision fp32|bf16",
     .help = "bf16: bf16 weights and activations where HF's bf16 Qwen3 has\n"
             "them; fp32 accumulation, norm statistics, softmax, loss, master\n"
             "weights and AdamW state (docs/PRECISION.md). --bf16: the same",
     .record = record_precision},
    {"--bf16", "bf16", PT_FLAG_BOOL, 0, .set = set_bf16},
    {"--tf32", "tf32", PT_FLAG_BOOL, OFF(tf32), .usage = "--tf32",
     .help = "fp32 matmuls on TF32 tensor cores (cuda; other backends ignore\n"
             "it): faster, ~1e-3 relative per product (docs/CUDA.md)"},
    {"--audit-dump", "audit_dump", PT_FLAG_STRING, OFF(audit_dump), .usage = "--audit-dump DIR",
     .help = "write step 1's per-tensor gradients, forward statistics and the\n"
             "first updates into DIR for accept's audit (docs/ACCEPT.md)"},
    {"--supervise", "supervise", PT_FLAG_CLI, 0, .usage = "--supervise",
     .help = "run as a supervised worker; restart after a failure\n"
             "(SIGINT/SIGTERM/SIGHUP stop the worker, then the supervisor)"},
    {"--max-restarts", "max_restarts", PT_FLAG_CLI, 0, .usage = "--max-restarts N",
     .help = "supervisor retries before giving up (3)"},
    {"--restart-backoff", "restart_backoff", PT_FLAG_CLI, 0, .usage = "--restart-backoff S",
     .help = "first restart delay in seconds, doubled each retry (0.1)"},
    {"--launcher", "launcher", PT_FLAG_CLI, 0, .usage = "--launcher \"mpirun -np N ...\"",
     .help = "supervise an MPI job: the worker is this command + portatrain train"},
    {"--hang-timeout", "hang_timeout", PT_FLAG_CLI, 0, .usage = "--hang-timeout S",
     .help = "no step progress for S seconds = hung worker (60)"},
    {"--startup-timeout", "startup_timeout", PT_FLAG_CLI, 0, .usage = "--startup-timeout S",
     .help = "an attempt's load + restore before its first step, and each\n"
             "checkpoint or final-model save (600)"},
    {"--elastic", "elastic", PT_FLAG_CLI, 0, .usage = "--elastic",
     .help = "with --supervise --launcher: when a node's ranks are lost for good,\n"
             "restart on the largest layout of the ranks left (same TP, fewer\n"
             "FSDP/DP ranks, more accumulation: the same global batch)"},
    {"--min-world", "min_world", PT_FLAG_CLI, 0, .usage = "--min-world N",
     .help = "--elastic: never continue on fewer than N ranks (1)"},
    {"--nproc-per-node", "nproc_per_node", PT_FLAG_CLI, 0, .usage = "--nproc-per-node K",
     .help = "--elastic: ranks per node, the unit that is lost (without --hostfile)"},
    {"--hostfile", "hostfile", PT_FLAG_CLI, 0, .usage = "--hostfile FILE",
     .help = "--elastic: the nodes (OpenMPI hostfile), re-read before each\n"
             "restart: a node missing from it is lost"},
    {"--rejoin-timeout", "rejoin_timeout", PT_FLAG_CLI, 0, .usage = "--rejoin-timeout S",
     .help = "--elastic: how long lost ranks may take to come back before the\n"
             "job shrinks (30)"},
    {"--inject", "inject", PT_FLAG_CLI, 0, .usage = "--inject SPEC[,SPEC...]",
     .help = "test-only faults, each fires once (docs/RECOVERY.md):\n"
             "kill:step=S[:phase=save][:rank=R], hang:step=S[:rank=R], nan:step=S[:target=grad\n"
             "|weights], corrupt-checkpoint:step=S, enospc:step=S; S may be\n"
             "random (PT_INJECT_SEED); hang needs --supervise"},
};
const int pt_train_nflags = (int)PT_ARRAY_LEN(pt_train_flags);

const pt_train_flag *pt_train_flag_find(const char *name) {
    for (int i = 0; i < pt_train_nflags; i++)
        if (!strcmp(pt_train_flags[i].name, name)) return &pt_train_flags[i];
    return NULL;
}

const pt_train_flag *pt_train_flag_find_key(const char *key) {
    for (int i = 0; i < pt_train_nflags; i++)
        if (!strcmp(pt_train_flags[i].key, key)) return &pt_train_flags[i];
    return NULL;
}

const pt_train_flag *pt_train_recipe_flag(int i) {
    for (int k = 0; k < pt_train_nflags; k++)
        if (pt_train_flags[k].recipe && i-- == 0) return &pt_train_flags[k];
    return NULL;
}

int pt_train_flag_set(const pt_train_flag *f, const char *v, pt_train_args *a) {
    if (f->set) return f->set(f, v, a);
    long long x;
    switch (f->kind) {
    case PT_FLAG_STRING: *FIELD(a, f, const char *) = v; return 0;
    case PT_FLAG_INT:
        if (parse_int(f, v, &x) != 0) return -1;
        *FIELD(a, f, int) = (int)x;
        return 0;
    case PT_FLAG_LONG:
        if (parse_int(f, v, &x) != 0) return -1;
        *FIELD(a, f, long) = (long)x;
        return 0;
    case PT_FLAG_U64:
        if (parse_int(f, v, &x) != 0) return -1;
        *FIELD(a, f, uint64_t) = (uint64_t)x;
        return 0;
    case PT_FLAG_DOUBLE: return parse_double(f, v, FIELD(a, f, double));
    case PT_FLAG_BOOL: return parse_bool(f, v, FIELD(a, f, bool));
    case PT_FLAG_CHOICE: {
        const int i = choice_index(f->choices, v);
        if (i < 0) { choice_error(f); return -1; }
        *FIELD(a, f, int) = i;
        return 0;
    }
    case PT_FLAG_CLI: break;
    }
    pt_set_error("%s: not a flag of the training arguments", f->name);
    return -1;
}

cJSON *pt_train_flag_json(const pt_train_flag *f, const pt_train_args *a) {
    if (!f->json) return NULL;
    cJSON *o = cJSON_CreateObject();
    if (f->record) {
        f->record(f, a, o);
    } else {
        char buf[64];
        switch (f->kind) {
        case PT_FLAG_STRING: {
            const char *s = *CFIELD(a, f, const char *);
            if (s) cJSON_AddStringToObject(o, f->key, s);
            break;
        }
        case PT_FLAG_INT: cJSON_AddNumberToObject(o, f->key, *CFIELD(a, f, int)); break;
        case PT_FLAG_LONG: cJSON_AddNumberToObject(o, f->key, (double)*CFIELD(a, f, long)); break;
        case PT_FLAG_U64: cJSON_AddNumberToObject(o, f->key, (double)*CFIELD(a, f, uint64_t)); break;
        case PT_FLAG_DOUBLE: cJSON_AddNumberToObject(o, f->key, *CFIELD(a, f, double)); break;
        case PT_FLAG_BOOL: cJSON_AddBoolToObject(o, f->key, *CFIELD(a, f, bool)); break;
        case PT_FLAG_CHOICE:
            cJSON_AddStringToObject(o, f->key, choice_name(f->choices, *CFIELD(a, f, int), buf, sizeof buf));
            break;
        case PT_FLAG_CLI: break;
        }
    }
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(o, f->key);
    cJSON_Delete(o);
    return v;
}

void pt_train_flags_help(void) {
    for (int i = 0; i < pt_train_nflags; i++) {
        const pt_train_flag *f = &pt_train_flags[i];
        if (!f->usage) continue;
        // the left column is 34 wide; a longer usage pushes its text two spaces after it
        printf(strlen(f->usage) > 34 ? "  %s  " : "  %-34s ", f->usage);
        for (const char *h = f->help; *h; h++) {
            if (h[0] == '{' && h[1] == '}') { fputs(f->def, stdout); h++; }
            else if (*h == '\n') printf("\n%37s", "");
            else putchar(*h);
        }
        putchar('\n');
    }
}

// ---------------------------------------------------------------- defaults, checks, the record

void pt_train_args_defaults(pt_train_args *a) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < pt_train_nflags; i++)
        if (pt_train_flags[i].def && pt_train_flag_set(&pt_train_flags[i], pt_train_flags[i].def, a) != 0) {
            fprintf(stderr, "portatrain: train flag table: %s's default: %s\n", pt_train_flags[i].name, pt_last_error());
            abort();  // a bug in the table, caught by any run
        }
    a->epoch_boundary = PT_EPOCHS_UNSET;
    a->dataloader_drop_last = -1;
}

int pt_train_args_finish(pt_train_args *a) {
    const char *s = a->save_strategy;
    if (s && !strcmp(s, "no")) a->save_steps = 0;
    else if (s && !strcmp(s, "epoch")) a->save_each_epoch = true;
    else if (s && !a->save_steps_given) a->save_steps = 500;  // "steps": HF's default save_steps
    if (a->precision && strcmp(a->precision, "fp32") && strcmp(a->precision, "bf16")) {
        pt_set_error("--precision must be fp32 or bf16 (got '%s')", a->precision);
        return -1;
    }
    return 0;
}

#define PT_MAX_ROWS_PER_STEP (1 << 20)
int pt_train_args_check(const pt_train_args *a, pt_lr_schedule *sched) {
    if (a->max_steps <= 0 && !(a->num_train_epochs > 0)) {
        pt_set_error("--max-steps must be positive (or give --num-train-epochs)");
        return -1;
    }
    if (a->seq_len <= 0) { pt_set_error("--seq-len must be positive"); return -1; }
    if (a->per_device_train_batch_size <= 0 || a->gradient_accumulation_steps <= 0) {
        pt_set_error("--per-device-train-batch-size and --gradient-accumulation-steps must be positive");
        return -1;
    }
    // Rows per step (B x accumulation, then x the data ranks) are ints in the loader and the
    // checkpoint: bound the product before it can overflow.
    if ((int64_t)a->per_device_train_batch_size * a->gradient_accumulation_steps > PT_MAX_ROWS_PER_STEP) {
        pt_set_error("--per-device-train-batch-size x --gradient-accumulation-steps = %lld rows per step, more than "
                     "%d", (long long)a->per_device_train_batch_size * a->gradient_accumulation_steps,
                     PT_MAX_ROWS_PER_STEP);
        return -1;
    }
    if (a->warmup_steps < 0 || a->max_grad_norm < 0 || a->learning_rate < 0 || a->weight_decay < 0 ||
        !(a->adam_epsilon > 0) || !(a->adam_beta1 >= 0 && a->adam_beta1 < 1) ||
        !(a->adam_beta2 >= 0 && a->adam_beta2 < 1)) {
        pt_set_error("invalid optimizer hyperparameters (need lr, wd, warmup, max_grad_norm >= 0, eps > 0, betas in [0,1))");
        return -1;
    }
    if (pt_lr_schedule_parse(sched, a->lr_scheduler_type, a->lr_scheduler_kwargs, a->learning_rate) != 0) {
        return -1;
    }
    if ((a->save_steps < 0 && a->save_steps != PT_SAVE_STEPS_AUTO) || a->save_total_limit < 0) {
        pt_set_error("--save-steps and --save-total-limit must be >= 0 (or --save-steps auto)");
        return -1;
    }
    if (a->save_steps == PT_SAVE_STEPS_AUTO && !(a->mtbf_hours > 0)) {
        pt_set_error("--save-steps auto needs --mtbf-hours H (the mean time between failures it optimises for)");
        return -1;
    }
    if (a->documents && (a->epoch_boundary == PT_EPOCHS_HF || a->dataloader_drop_last > 0 || a->shuffle)) {
        pt_set_error("--data-mode documents reads one endless stream in order, as TorchTitan: it takes no "
                     "--epoch-boundary hf, --dataloader-drop-last or --shuffle");
        return -1;
    }
    if (a->document_parts > 1 && !a->documents) {
        pt_set_error("--document-parts needs --data-mode documents");
        return -1;
    }
    if (a->dataloader_drop_last > 0 && a->epoch_boundary == PT_EPOCHS_WRAP) {
        pt_set_error("--dataloader-drop-last needs --epoch-boundary hf (wrap has no last batch to drop)");
        return -1;
    }
    return 0;
}

int pt_train_args_validate(const pt_train_args *a, pt_lr_schedule *sched) {
    if (!a->model_dir) { pt_set_error("--model is required"); return -1; }
    if (!a->data_path) { pt_set_error("--data is required"); return -1; }
    if (!a->output_dir) { pt_set_error("--output-dir is required"); return -1; }
    if (pt_train_args_check(a, sched) != 0) return -1;
    if (!pt_lr_schedule_warms_up(sched) && (a->warmup_steps > 0 || a->warmup_ratio > 0))
        pt_warn("--lr-scheduler-type constant ignores --warmup-steps (as in Hugging Face); use constant_with_warmup");
    return 0;
}

cJSON *pt_train_args_json(const pt_train_args *a, const pt_mesh *mesh, int world) {
    cJSON *r = cJSON_CreateObject();
    for (int i = 0; i < pt_train_nflags; i++) {
        cJSON *v = pt_train_flag_json(&pt_train_flags[i], a);
        if (v) cJSON_AddItemToObject(r, pt_train_flags[i].key, v);
    }
    cJSON_AddNumberToObject(r, "omp_threads", omp_get_max_threads());
    if (mesh) {
        char order[32];
        pt_mesh_order_str(mesh, order, sizeof order);
        cJSON *pj = cJSON_AddObjectToObject(r, "parallel");
        cJSON_AddNumberToObject(pj, "world_size", world);
        cJSON_AddNumberToObject(pj, "tp", mesh->tp);
        cJSON_AddNumberToObject(pj, "fsdp", mesh->fsdp);
        cJSON_AddNumberToObject(pj, "dp", mesh->dp);
        cJSON_AddStringToObject(pj, "mesh_order", order);
    }
    return r;
}
