#include "train/trainer.h"
#include "train/ckpt_interval.h"
#include "backend/backend.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/parallel.h"
#include "io/hf_model.h"
#include "train/faults.h"
#include "train/manifest.h"
#include "train/optim.h"
#include "train/outdir.h"
#include "train/schedule.h"
#include "train/train_state.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/hash.h"
#include "util/json.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack
#include <xxhash.h>

void pt_train_args_defaults(pt_train_args *a) {
    memset(a, 0, sizeof *a);
    a->backend = "cpu-ref";
    a->learning_rate = 5e-5;
    a->adam_beta1 = 0.9;
    a->adam_beta2 = 0.999;
    a->adam_epsilon = 1e-8;
    a->max_grad_norm = 1.0;
    a->per_device_train_batch_size = 8;
    a->gradient_accumulation_steps = 1;
    a->lr_scheduler_type = "linear";
    a->logging_steps = 10;
    a->seed = 42;
    a->nan_policy = PT_NAN_STOP;
    a->nan_max_count = 3;
    a->epoch_boundary = PT_EPOCHS_UNSET;
    a->dataloader_drop_last = -1;
}

const char *pt_epoch_boundary_name(int e) { return e == PT_EPOCHS_WRAP ? "wrap" : "hf"; }

// The layout of a distributed run (NULL on a single process), for args_json.
static const pt_parallel *g_par;
static int g_error_elsewhere, g_usage_error;
int pt_train_error_reported_elsewhere(void) { return g_error_elsewhere; }
int pt_train_usage_error(void) { return g_usage_error; }

static cJSON *args_json(const pt_train_args *a) {
    cJSON *r = cJSON_CreateObject();
    // Absolute, so `export` and reports run from another directory find the model (and its tokenizer).
    char *abs_model = a->model_dir ? realpath(a->model_dir, NULL) : NULL;
    cJSON_AddStringToObject(r, "model", abs_model ? abs_model : a->model_dir);
    free(abs_model);
    cJSON_AddStringToObject(r, "data", a->data_path);
    cJSON_AddStringToObject(r, "output_dir", a->output_dir);
    cJSON_AddStringToObject(r, "backend", a->backend);
    cJSON_AddNumberToObject(r, "learning_rate", a->learning_rate);
    cJSON_AddNumberToObject(r, "weight_decay", a->weight_decay);
    cJSON_AddNumberToObject(r, "adam_beta1", a->adam_beta1);
    cJSON_AddNumberToObject(r, "adam_beta2", a->adam_beta2);
    cJSON_AddNumberToObject(r, "adam_epsilon", a->adam_epsilon);
    cJSON_AddNumberToObject(r, "max_grad_norm", a->max_grad_norm);
    cJSON_AddNumberToObject(r, "per_device_train_batch_size", a->per_device_train_batch_size);
    cJSON_AddNumberToObject(r, "gradient_accumulation_steps", a->gradient_accumulation_steps);
    cJSON_AddNumberToObject(r, "max_steps", (double)a->max_steps);
    if (a->num_train_epochs > 0) cJSON_AddNumberToObject(r, "num_train_epochs", a->num_train_epochs);
    cJSON_AddNumberToObject(r, "warmup_steps", (double)a->warmup_steps);
    if (a->warmup_ratio > 0) cJSON_AddNumberToObject(r, "warmup_ratio", a->warmup_ratio);
    cJSON_AddStringToObject(r, "lr_scheduler_type", a->lr_scheduler_type);
    if (a->lr_scheduler_kwargs && *a->lr_scheduler_kwargs)  // validated: a JSON object
        cJSON_AddItemToObject(r, "lr_scheduler_kwargs", cJSON_Parse(a->lr_scheduler_kwargs));
    cJSON_AddNumberToObject(r, "logging_steps", (double)a->logging_steps);
    cJSON_AddNumberToObject(r, "seed", (double)a->seed);
    cJSON_AddNumberToObject(r, "seq_len", a->seq_len);
    cJSON_AddBoolToObject(r, "shuffle", a->shuffle);
    cJSON_AddStringToObject(r, "data_mode", a->padded ? "padded" : "packed");
    cJSON_AddStringToObject(r, "epoch_boundary", pt_epoch_boundary_name(a->epoch_boundary));
    cJSON_AddBoolToObject(r, "dataloader_drop_last", a->dataloader_drop_last > 0);
    if (a->save_steps == PT_SAVE_STEPS_AUTO) cJSON_AddStringToObject(r, "save_steps", "auto");
    else cJSON_AddNumberToObject(r, "save_steps", (double)a->save_steps);
    if (a->save_each_epoch) cJSON_AddStringToObject(r, "save_strategy", "epoch");
    if (a->mtbf_hours > 0) cJSON_AddNumberToObject(r, "mtbf_hours", a->mtbf_hours);
    if (a->activation_checkpointing)
        cJSON_AddStringToObject(r, "activation_checkpointing", a->activation_checkpointing);
    cJSON_AddStringToObject(r, "precision", a->precision ? a->precision : "fp32");
    cJSON_AddNumberToObject(r, "save_total_limit", a->save_total_limit);
    cJSON_AddNumberToObject(r, "omp_threads", omp_get_max_threads());
    static const char *const pol[] = {"stop", "skip", "rollback"};
    cJSON_AddStringToObject(r, "nan_policy", pol[a->nan_policy]);
    cJSON_AddNumberToObject(r, "nan_max_count", a->nan_max_count);
    if (g_par) {
        const pt_mesh *mm = pt_parallel_mesh(g_par);
        char order[32];
        pt_mesh_order_str(mm, order, sizeof order);
        cJSON *pj = cJSON_AddObjectToObject(r, "parallel");
        cJSON_AddNumberToObject(pj, "world_size", pt_parallel_world(g_par));
        cJSON_AddNumberToObject(pj, "tp", mm->tp);
        cJSON_AddNumberToObject(pj, "fsdp", mm->fsdp);
        cJSON_AddNumberToObject(pj, "dp", mm->dp);
        cJSON_AddStringToObject(pj, "mesh_order", order);
    }
    return r;
}

#define PT_MAX_ROWS_PER_STEP (1 << 20)
static int validate(const pt_train_args *a, pt_lr_schedule *sched) {
    if (!a->model_dir) { pt_set_error("--model is required"); return -1; }
    if (!a->data_path) { pt_set_error("--data is required"); return -1; }
    if (!a->output_dir) { pt_set_error("--output-dir is required"); return -1; }
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
        a->adam_epsilon <= 0 || a->adam_beta1 < 0 || a->adam_beta1 >= 1 || a->adam_beta2 < 0 || a->adam_beta2 >= 1) {
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
    if (!pt_lr_schedule_warms_up(sched) && (a->warmup_steps > 0 || a->warmup_ratio > 0))
        pt_warn("--lr-scheduler-type constant ignores --warmup-steps (as in Hugging Face); use constant_with_warmup");
    return 0;
}

// --activation-checkpointing none|full|selective[:every=N]|op
static void fmt_eta(double s, char *buf, size_t n) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

// The training state recorded in a checkpoint after `step` optimizer steps.
static cJSON *state_json(const pt_train_args *a, const qwen3_model *m, const pt_adamw *opt, long step,
                         const pt_run_hashes *h, int rows_per_step, const pt_loader *loader) {
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "step", (double)step);
    cJSON_AddNumberToObject(s, "optimizer_step", opt->t);
    cJSON *lr = cJSON_AddObjectToObject(s, "lr_scheduler");
    cJSON_AddStringToObject(lr, "type", a->lr_scheduler_type);
    if (a->lr_scheduler_kwargs && *a->lr_scheduler_kwargs)
        cJSON_AddItemToObject(lr, "kwargs", cJSON_Parse(a->lr_scheduler_kwargs));
    cJSON_AddNumberToObject(lr, "base_lr", a->learning_rate);
    cJSON_AddNumberToObject(lr, "warmup_steps", (double)a->warmup_steps);
    cJSON_AddNumberToObject(lr, "total_steps", (double)a->max_steps);
    cJSON_AddNumberToObject(lr, "last_step", (double)step);
    cJSON *dl = cJSON_AddObjectToObject(s, "data_loader");
    cJSON_AddNumberToObject(dl, "next_step", (double)step);
    cJSON_AddNumberToObject(dl, "rows_per_step", rows_per_step);
    cJSON_AddNumberToObject(dl, "seq_len", a->seq_len);
    cJSON_AddBoolToObject(dl, "shuffle", a->shuffle);
    cJSON_AddNumberToObject(dl, "seed", (double)a->seed);
    cJSON_AddStringToObject(dl, "data_sha256", h->dataset_sha256);
    cJSON_AddStringToObject(dl, "state_key", pt_loader_state_key(loader));
    cJSON_AddNumberToObject(dl, "epoch", (double)pt_loader_epoch_of_step(loader, (uint64_t)step));
    // absent in checkpoints written before epoch boundaries were configurable: "wrap", no drop_last
    cJSON_AddStringToObject(dl, "epoch_boundary", pt_epoch_boundary_name(a->epoch_boundary));
    cJSON_AddBoolToObject(dl, "dataloader_drop_last", a->dataloader_drop_last > 0);
    // No stateful RNG is used in training: batches (and the shuffle) are a
    // pure function of (seed, step), so the counter is the whole RNG state.
    cJSON *rng = cJSON_AddObjectToObject(s, "rng");
    cJSON_AddStringToObject(rng, "kind", "philox4x32-10, counter-based");
    cJSON_AddNumberToObject(rng, "seed", (double)a->seed);
    cJSON_AddNumberToObject(rng, "counter", (double)step);
    cJSON *mh = cJSON_AddObjectToObject(s, "manifest");
    cJSON_AddStringToObject(mh, "config_sha256", h->config_sha256);
    cJSON_AddStringToObject(mh, "initial_weights_sha256", h->initial_weights_sha256);
    cJSON_AddStringToObject(mh, "dataset_sha256", h->dataset_sha256);
    cJSON_AddItemToObject(s, "run_config", args_json(a));
    cJSON_AddItemToObject(s, "model_config", qwen3_config_to_json(&m->cfg, "float32"));
    return s;
}

static int json_num(const cJSON *o, const char *path1, const char *path2, double *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, path1);
    if (path2) x = cJSON_GetObjectItemCaseSensitive(x, path2);
    if (!cJSON_IsNumber(x)) return -1;
    *out = x->valuedouble;
    return 0;
}

// The epoch boundaries a checkpoint's state records (absent: written before they were configurable, "wrap").
static void checkpoint_epochs(const cJSON *st, int *eb, int *drop_last) {
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(st, "data_loader");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(dl, "epoch_boundary");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(dl, "dataloader_drop_last");
    *eb = cJSON_IsString(e) && !strcmp(e->valuestring, "hf") ? PT_EPOCHS_HF : PT_EPOCHS_WRAP;
    *drop_last = cJSON_IsTrue(d) ? 1 : 0;
}

// Resolves --epoch-boundary and --dataloader-drop-last: a resume takes the checkpoint's where not given (and a
// given one that differs is refused), a fresh run defaults to hf without drop_last. A resume's checkpoint is
// opened (and verified) here, once: *resume_ckpt (NULL if there is none; then *open_error says why).
static int resolve_epochs(pt_train_args *a, ckpt **resume_ckpt, char *open_error, size_t open_error_size) {
    *resume_ckpt = NULL;
    if (a->resume_from_checkpoint) {
        ckpt *c = ckpt_open_resume(a->output_dir, a->resume_from_checkpoint);
        *resume_ckpt = c;
        if (!c) snprintf(open_error, open_error_size, "%s", pt_last_error());
        if (c) {
            int eb, dl;
            checkpoint_epochs(ckpt_state(c), &eb, &dl);
            const int given_eb = a->epoch_boundary, given_dl = a->dataloader_drop_last;
            if (given_eb == PT_EPOCHS_UNSET) a->epoch_boundary = eb;
            if (given_dl < 0) a->dataloader_drop_last = dl;
            if (a->epoch_boundary != eb || a->dataloader_drop_last != dl) {
                pt_set_error("%s: the checkpoint was trained with --epoch-boundary %s%s, this run asks for %s%s: "
                             "resuming would read other batches (leave the flags out to resume with the "
                             "checkpoint's)", ckpt_dir(c), pt_epoch_boundary_name(eb),
                             dl ? " --dataloader-drop-last" : "", pt_epoch_boundary_name(a->epoch_boundary),
                             a->dataloader_drop_last > 0 ? " --dataloader-drop-last" : "");
                return -1;
            }
        }
        pt_clear_error();  // no checkpoint: the resume below reports it
    }
    if (a->epoch_boundary == PT_EPOCHS_UNSET) a->epoch_boundary = PT_EPOCHS_HF;
    if (a->dataloader_drop_last < 0) a->dataloader_drop_last = 0;
    if (a->dataloader_drop_last && a->epoch_boundary != PT_EPOCHS_HF) {
        pt_set_error("--dataloader-drop-last needs --epoch-boundary hf (wrap has no last batch to drop)");
        return -1;
    }
    return 0;
}

// Restores model + optimizer from a checkpoint and checks that the frozen
// parts of the run match; returns the step to continue from, or -1.
static long resume(ckpt *c, const pt_train_args *a, qwen3_model *m, pt_adamw *opt, pt_parallel *P,
                   pt_run_hashes *h, int rows_per_step, const pt_loader *loader) {
    const cJSON *st = ckpt_state(c);
    double step, ostep, rows, T;
    const cJSON *mh = cJSON_GetObjectItemCaseSensitive(st, "manifest");
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "data_loader"),
                                                       "data_sha256");
    if (json_num(st, "step", NULL, &step) || json_num(st, "optimizer_step", NULL, &ostep) ||
        json_num(st, "data_loader", "rows_per_step", &rows) || json_num(st, "data_loader", "seq_len", &T) ||
        !cJSON_IsString(ds) || !cJSON_IsObject(mh)) {
        pt_set_error("%s: checkpoint.json lacks the training state (step, optimizer_step, data_loader)",
                     ckpt_dir(c));
        return -1;
    }
    if (strcmp(ds->valuestring, h->dataset_sha256) != 0) {
        pt_set_error("%s: the checkpoint was trained on other data (sha256 %.12s..., --data has %.12s...)",
                     ckpt_dir(c), ds->valuestring, h->dataset_sha256);
        return -1;
    }
    if ((int)rows != rows_per_step || (int)T != a->seq_len) {
        pt_set_error("%s: the checkpoint's batch is %d rows x %d tokens, this run's %d x %d: resuming would change "
                     "the data order", ckpt_dir(c), (int)rows, (int)T, rows_per_step, a->seq_len);
        return -1;
    }
    // (its epoch boundaries were matched, or refused, by resolve_epochs, which opened this checkpoint)
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "data_loader"),
                                                        "state_key");
    if (cJSON_IsString(key) && strcmp(key->valuestring, pt_loader_state_key(loader)) != 0) {
        pt_set_error("%s: the data loader settings differ from the checkpoint's (shuffle, seed, mode or buckets): "
                     "resuming would read other batches", ckpt_dir(c));
        return -1;
    }
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(mh, "config_sha256");
    const cJSON *iw = cJSON_GetObjectItemCaseSensitive(mh, "initial_weights_sha256");
    if (!cJSON_IsString(ch) || strcmp(ch->valuestring, h->config_sha256) != 0) {
        pt_set_error("%s: the checkpoint's model config differs from %s/config.json", ckpt_dir(c), a->model_dir);
        return -1;
    }
    if (cJSON_IsString(iw)) snprintf(h->initial_weights_sha256, 65, "%s", iw->valuestring);
    if (P ? pt_parallel_load_ckpt(P, c) : pt_load_train_state(c, m, opt)) return -1;
    opt->t = (int)ostep;
    // Continuing to an earlier --max-steps would rewrite metrics.jsonl and the final model with an
    // older state, silently dropping the newer results.
    if ((long)step > a->max_steps) {
        pt_set_error("%s: the checkpoint is at step %ld, past --max-steps %ld (resuming would replace newer "
                     "results with older ones)", ckpt_dir(c), (long)step, a->max_steps);
        g_usage_error = 1;
        return -1;
    }
    if ((long)step == a->max_steps)
        pt_warn("checkpoint step %ld is already at --max-steps %ld", (long)step, a->max_steps);
    return (long)step;
}

// Keeps the metrics.jsonl lines of steps <= keep_steps (a resumed run
// rewrites what came after its checkpoint). Returns an append handle.
static FILE *open_metrics(const char *path, long keep_steps, const char *ckpt_record) {
    if (keep_steps <= 0) return fopen(path, "w");
    size_t n;
    char *old = pt_file_exists(path) ? pt_read_file(path, &n) : NULL;
    size_t cap = (old ? n : 0) + (ckpt_record ? strlen(ckpt_record) : 0) + 2, len = 0;
    char *kept = pt_malloc(cap);
    long last = 0;
    for (char *line = old, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (!next) break;  // a partial last line (killed mid-write) is dropped
        *next++ = 0;
        const char *sp = strstr(line, "\"step\": ");
        long st = sp ? strtol(sp + 8, NULL, 10) : 0;
        if (sp && st <= keep_steps) {
            len += (size_t)sprintf(kept + len, "%s\n", line);
            last = st;
        }
    }
    if (last < keep_steps && ckpt_record) len += (size_t)sprintf(kept + len, "%s\n", ckpt_record);
    free(old);
    // Replace atomically: a kill during the rewrite must not lose lines.
    int rc = pt_write_file_atomic(path, kept, len);
    free(kept);
    return rc ? NULL : fopen(path, "a");
}

// A metrics value: %.17g, or null for NaN/Inf (not JSON numbers).
static const char *jnum(char buf[32], double v) {
    if (!isfinite(v)) return "null";
    snprintf(buf, 32, "%.17g", v);
    return buf;
}

// --nan-policy rollback: restores the newest valid checkpoint in-process and
// truncates metrics.jsonl to it. Returns the restored step, 0 when there is
// no checkpoint to go back to (nothing changed), -1 on error (the model may be
// partly restored: the caller must stop).
static long rollback(const pt_train_args *a, long fault_step, qwen3_model *m, pt_adamw *opt, pt_parallel *P,
                     pt_run_hashes *h, int rows_per_step, const pt_loader *loader, const char *mpath, FILE **metrics) {
    char *lp = pt_path_join(a->output_dir, "latest");
    const bool any = pt_file_exists(lp);
    free(lp);
    if (!any) return 0;
    ckpt *c = ckpt_open_resume(a->output_dir, "latest");
    if (!c) return 0;
    if (ckpt_step(c) >= fault_step) {  // a stale checkpoint of another run in this output dir
        pt_warn("%s is not older than step %ld; not rolling back to it", ckpt_dir(c), fault_step);
        ckpt_close(c);
        return 0;
    }
    const long back = resume(c, a, m, opt, P, h, rows_per_step, loader);
    if (back < 0) {
        ckpt_close(c);
        return -1;
    }
    const cJSON *mr = cJSON_GetObjectItemCaseSensitive(ckpt_state(c), "metrics_record");
    if (*metrics) {
        fclose(*metrics);
        *metrics = open_metrics(mpath, back, cJSON_IsString(mr) ? mr->valuestring : NULL);
    }
    if (!a->quiet) pt_info("rolled back to %s", ckpt_dir(c));
    ckpt_close(c);
    if (!*metrics && (!P || pt_parallel_rank(P) == 0)) {
        pt_set_error("%s: cannot reopen after the rollback: %s", mpath, strerror(errno));
        return -1;
    }
    return back;
}

// ---------------------------------------------------------------- distribution

// Test-only: PT_TEST_DIST_STALL_RANK=R makes world rank R stall before it
// joins the job (a missing rank at start-up).
static void test_stall_rank(void) {
    const char *s = getenv("PT_TEST_DIST_STALL_RANK"), *r = getenv("OMPI_COMM_WORLD_RANK");
    if (s && r && atoi(s) == atoi(r))
        for (;;) pause();
}

static double g_startup_timeout;
static void startup_alarm(int sig) {
    (void)sig;
    char msg[256];
    int n = snprintf(msg, sizeof msg,
                     "portatrain: error: distributed start-up: not every rank joined within %.0f s (a rank is missing "
                     "or stuck; PT_DIST_STARTUP_TIMEOUT sets the limit)\n", g_startup_timeout);
    if (write(2, msg, (size_t)n) < 0) {}
    _exit(1);
}

// Why rank r's resolved --model differs from rank 0's, when the command was not what differed: the directory is
// missing on one of them, or the same relative path was resolved in other working directories. true with the
// message in out; false: the --model given differs (the caller says the ranks were started differently).
static bool model_mismatch(const cJSON *rep0, const cJSON *rep, const cJSON *a0, const cJSON *a, int r, char *out,
                           size_t n) {
    const cJSON *g0 = cJSON_GetObjectItemCaseSensitive(rep0, "model_given"), *g = cJSON_GetObjectItemCaseSensitive(rep, "model_given");
    const cJSON *c0 = cJSON_GetObjectItemCaseSensitive(rep0, "cwd"), *c = cJSON_GetObjectItemCaseSensitive(rep, "cwd");
    const bool f0 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep0, "model_found"));
    const bool f = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep, "model_found"));
    if (!cJSON_IsString(g0) || !cJSON_IsString(g) || !cJSON_IsString(c0) || !cJSON_IsString(c)) return false;
    if (f0 != f) {
        const int miss = f ? 0 : r;
        snprintf(out, n, "--model %s: not found on rank %d (working directory %s there), found on rank %d; every rank "
                 "must reach the same --model (a shared filesystem or identical copies at the same path)",
                 miss ? g->valuestring : g0->valuestring, miss, miss ? c->valuestring : c0->valuestring, miss ? 0 : r);
        return true;
    }
    if (strcmp(g0->valuestring, g->valuestring)) return false;
    snprintf(out, n, "--model %s is %s on rank %d (working directory %s) but %s on rank 0 (working directory %s): the "
             "ranks started in other directories; give --model as an absolute path", g0->valuestring,
             cJSON_IsString(a) ? a->valuestring : "?", r, c->valuestring, cJSON_IsString(a0) ? a0->valuestring : "?",
             c0->valuestring);
    return true;
}

// Every rank reports whether its set-up succeeded and its resolved arguments
// (and, with `inputs`, the sha256 of the model and data it read); rank 0 checks
// that all succeeded and agree, and every rank gets the verdict.
// Returns 0, or -1 with the same error on every rank.
static int startup_agree(pt_comm *world, int ok, const pt_train_args *a, const pt_run_hashes *inputs) {
    cJSON *rep = cJSON_CreateObject();
    cJSON_AddBoolToObject(rep, "ok", ok);
    if (!ok) cJSON_AddStringToObject(rep, "error", pt_last_error());
    if (!ok) cJSON_AddBoolToObject(rep, "usage", g_usage_error);
    cJSON *aj = args_json(a);
    cJSON_DeleteItemFromObject(aj, "omp_threads");  // may differ per rank
    cJSON_AddItemToObject(rep, "args", aj);
    // "model" in args is the resolved path: where it differs, these say why (missing here, another cwd)
    char cwd[4096];
    cJSON_AddStringToObject(rep, "model_given", a->model_dir ? a->model_dir : "");
    cJSON_AddBoolToObject(rep, "model_found", a->model_dir && pt_is_dir(a->model_dir));
    cJSON_AddStringToObject(rep, "cwd", getcwd(cwd, sizeof cwd) ? cwd : "?");
    // --output-dir as this rank resolves it (lexically: it may not exist yet): every rank writes its checkpoint
    // shards and heartbeat there, so a relative one must not land in other directories
    if (a->output_dir && a->output_dir[0] != '/') {
        char *od = pt_path_join(cJSON_GetObjectItemCaseSensitive(rep, "cwd")->valuestring, a->output_dir);
        cJSON_AddStringToObject(rep, "output_dir_abs", od);
        free(od);
    }
    if (ok && inputs) {  // the same paths can hold other files on another node (no shared filesystem)
        cJSON *in = cJSON_AddObjectToObject(rep, "inputs");
        cJSON_AddStringToObject(in, "model config", inputs->config_sha256);
        cJSON_AddStringToObject(in, "model weights", inputs->initial_weights_sha256);
        cJSON_AddStringToObject(in, "data", inputs->dataset_sha256);
    }
    char *text = cJSON_PrintUnformatted(rep);
    cJSON_Delete(rep);
    const int W = pt_comm_size(world), me = pt_comm_rank(world);
    size_t *counts = pt_calloc(W, sizeof(size_t));
    char *all = NULL;
    pt_comm_gather_bytes(world, text, strlen(text), 0, &all, counts);
    free(text);
    struct { int ok, usage; char text[2040]; } verdict;  // usage: every rank exits 2 (a usage error)
    memset(&verdict, 0, sizeof verdict);
    verdict.ok = 1;
    if (me == 0) {
        size_t off = 0;
        cJSON *args0 = NULL, *inputs0 = NULL, *rep0 = NULL;
        for (int r = 0; r < W && verdict.ok; r++) {
            cJSON *rj = cJSON_ParseWithLength(all + off, counts[r]);
            off += counts[r];
            if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rj, "ok"))) {
                const cJSON *e = cJSON_GetObjectItemCaseSensitive(rj, "error");
                if (r == 0) snprintf(verdict.text, sizeof verdict.text, "%s", cJSON_IsString(e) ? e->valuestring : "?");
                else snprintf(verdict.text, sizeof verdict.text, "rank %d: %s", r, cJSON_IsString(e) ? e->valuestring : "?");
                verdict.ok = 0;
                verdict.usage = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rj, "usage"));
            } else if (r == 0) {
                args0 = cJSON_DetachItemFromObject(rj, "args");
                inputs0 = cJSON_DetachItemFromObject(rj, "inputs");
                rep0 = rj;
                rj = NULL;
            } else {
                const cJSON *ar = cJSON_GetObjectItemCaseSensitive(rj, "args"), *x;
                cJSON_ArrayForEach(x, args0) {
                    const cJSON *y = cJSON_GetObjectItemCaseSensitive(ar, x->string);
                    if (y && cJSON_Compare(x, y, 1)) continue;
                    verdict.ok = 0;
                    if (!strcmp(x->string, "model") && model_mismatch(rep0, rj, x, y, r, verdict.text, sizeof verdict.text))
                        break;
                    char *xs = cJSON_PrintUnformatted(x), *ys = y ? cJSON_PrintUnformatted(y) : pt_strdup("(absent)");
                    snprintf(verdict.text, sizeof verdict.text,
                             "rank %d was started with other arguments than rank 0: %s is %s there, %s on rank 0 "
                             "(every rank must run the same command)", r, x->string, ys, xs);
                    free(xs);
                    free(ys);
                    break;
                }
                const cJSON *o0 = cJSON_GetObjectItemCaseSensitive(rep0, "output_dir_abs");
                const cJSON *o = cJSON_GetObjectItemCaseSensitive(rj, "output_dir_abs");
                if (verdict.ok && cJSON_IsString(o0) && cJSON_IsString(o) && strcmp(o0->valuestring, o->valuestring)) {
                    snprintf(verdict.text, sizeof verdict.text,
                             "--output-dir %s is %s on rank %d but %s on rank 0: the ranks started in other "
                             "directories, and every rank writes its checkpoint shards there; give --output-dir as "
                             "an absolute path", a->output_dir, o->valuestring, r, o0->valuestring);
                    verdict.ok = 0;
                    verdict.usage = 1;
                }
                const cJSON *in = cJSON_GetObjectItemCaseSensitive(rj, "inputs");
                cJSON_ArrayForEach(x, inputs0) {
                    if (!verdict.ok) break;
                    const cJSON *y = cJSON_GetObjectItemCaseSensitive(in, x->string);
                    if (!cJSON_IsString(x) || !cJSON_IsString(y) || !strcmp(x->valuestring, y->valuestring)) continue;
                    snprintf(verdict.text, sizeof verdict.text,
                             "rank %d read other files than rank 0: the %s differs (sha256 %.12s... there, %.12s... on "
                             "rank 0); every rank must read the same --model and --data (a shared filesystem or "
                             "identical copies)", r, x->string, y->valuestring, x->valuestring);
                    verdict.ok = 0;
                }
            }
            cJSON_Delete(rj);
        }
        cJSON_Delete(args0);
        cJSON_Delete(inputs0);
        cJSON_Delete(rep0);
    }
    free(all);
    free(counts);
    pt_comm_broadcast(world, &verdict, sizeof verdict, 0);
    if (verdict.ok) return 0;
    g_usage_error = verdict.usage;
    pt_set_error("%s", verdict.text);
    return -1;
}

// Once rank 0 has made --output-dir (and every rank has agreed): whether every rank sees it. Each rank writes
// its checkpoint shards next to rank 0's checkpoint.json there, so ranks on nodes without a shared filesystem
// would leave checkpoints no rank can restore. 0, or -1 with the same error on every rank.
static int output_dir_shared(pt_comm *world, const pt_train_args *a) {
    const int W = pt_comm_size(world);
    double mine = pt_is_dir(a->output_dir), *all = pt_calloc(W, sizeof(double));
    pt_comm_allgather_f64(world, &mine, all, 1, PT_COLL_CONTROL);
    int missing = -1;
    for (int r = 0; r < W && missing < 0; r++)
        if (all[r] == 0) missing = r;
    free(all);
    if (missing < 0) return 0;
    g_usage_error = 1;
    pt_set_error("--output-dir %s: rank %d does not see the directory rank 0 created; every rank writes its "
                 "checkpoint shards there: put it on a filesystem every rank shares", a->output_dir, missing);
    return -1;
}

// The layout from the flags: unspecified dimensions take what the world leaves.
static int resolve_mesh(const pt_train_args *a, int world, pt_mesh *mesh) {
    memset(mesh, 0, sizeof *mesh);
    mesh->tp = a->tp > 0 ? a->tp : 1;
    mesh->fsdp = a->fsdp > 0 ? a->fsdp : 1;
    if (a->dp > 0) mesh->dp = a->dp;
    else if (a->fsdp > 0 || a->tp > 0) mesh->dp = world % (mesh->tp * mesh->fsdp) == 0 ? world / (mesh->tp * mesh->fsdp) : 1;
    else mesh->dp = world;  // plain data parallel
    if (a->fsdp <= 0 && a->dp > 0 && a->tp > 0 && world % (mesh->tp * mesh->dp) == 0)
        mesh->fsdp = world / (mesh->tp * mesh->dp);
    mesh->order[0] = PT_DIM_TP, mesh->order[1] = PT_DIM_FSDP, mesh->order[2] = PT_DIM_DP;
    if (a->mesh_order && pt_mesh_parse_order(a->mesh_order, mesh->order) != 0) return -1;
    return 0;
}

static double rss_peak_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atof(line + 6);
    fclose(f);
    return kb / 1024.0;
}

// OUTPUT/heartbeats/rank-NNNNN.json: this rank's progress for a supervisor
// (harness/supervisor.h). Replaced by rename, never fsync'd: it only has to
// be current, not durable.
static void heartbeat(const char *output_dir, int rank, long step, const char *phase) {
    char fin[4200], tmp[4300], text[256];
    snprintf(fin, sizeof fin, "%s/heartbeats/rank-%05d.json", output_dir, rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", fin);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const int n = snprintf(text, sizeof text, "{\"rank\": %d, \"pid\": %d, \"step\": %ld, \"phase\": \"%s\", "
                           "\"time\": %.6f}\n", rank, (int)getpid(), step, phase, ts.tv_sec + ts.tv_nsec * 1e-9);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    const int ok = fwrite(text, 1, (size_t)n, f) == (size_t)n;
    if (fclose(f) == 0 && ok) rename(tmp, fin);
}

// A fresh run (not resuming) into a directory holding another run's metrics
// or checkpoints would truncate its metrics and leave its checkpoints and
// `latest` for a later resume to mix in: refused (as Hugging Face's example
// scripts do) unless --overwrite-output-dir, which removes that run's files.
static int prepare_output_dir(const pt_train_args *a) {
    if (a->resume_from_checkpoint || !pt_outdir_has_run(a->output_dir)) return 0;
    if (!a->overwrite_output_dir) {
        pt_set_error("%s: holds a previous run (metrics.jsonl, checkpoint-* or latest); pass "
                     "--resume-from-checkpoint latest to continue it or --overwrite-output-dir to replace it",
                     a->output_dir);
        g_usage_error = 1;
        return -1;
    }
    // Training a model in place (--model DIR = --output-dir DIR): its weights are the input, kept.
    char *od = realpath(a->output_dir, NULL), *md = realpath(a->model_dir, NULL);
    const bool same = od && md && !strcmp(od, md);
    free(od);
    free(md);
    // Under --supervise the supervisor's events.jsonl is the current one (harness/supervisor.c).
    return pt_outdir_clear(a->output_dir, same, !getenv("PT_SUPERVISED_WORKER"));
}

// Start-up under a mesh: a block of rows of one HF tensor, hashed in layout order and kept in this rank's shards.
typedef struct {
    pt_parallel *P;
    pt_sha256 *h;
} stream_ctx;

static int stream_block(void *ctx, const qwen3_param_info *t, int64_t row0, int64_t nrows, const real_t *data) {
    stream_ctx *c = ctx;
    pt_sha256_update(c->h, data, sizeof(real_t) * (size_t)nrows * (size_t)t->shape[1]);
    return pt_parallel_load_tensor(c->P, t->name, row0, nrows, data);
}

// ---------------------------------------------------------------- the loop

int pt_train(const pt_train_args *args) {
    pt_train_args resolved = *args;  // max_steps filled in from --num-train-epochs once the data is open
    const pt_train_args *a = &resolved;
    pt_lr_schedule sched;
    pt_comm *world = NULL;
    pt_parallel *P = NULL;
    const bool distributed = a->tp > 1 || a->fsdp > 1 || a->dp > 1 || pt_comm_launched();
    bool collective_error = true;  // set-up errors are the same on every rank (or agreed on)
    if (distributed) {
        test_stall_rank();
        const char *to = getenv("PT_DIST_STARTUP_TIMEOUT");
        g_startup_timeout = to && atof(to) > 0 ? atof(to) : 120;
        signal(SIGALRM, startup_alarm);
        alarm((unsigned)(g_startup_timeout + 0.5));
        world = pt_comm_init(1);
        if (!world) return -1;
    }
    const int rank = world ? pt_comm_rank(world) : 0;
    pt_backend *be = NULL;
    int rc = -1;
    qwen3_model model;
    memset(&model, 0, sizeof model);
    qwen3_model *mdl = &model;
    pt_adamw opt;
    memset(&opt, 0, sizeof opt);
    pt_loader *loader = NULL;
    FILE *metrics = NULL;
    int32_t *ids = NULL, *labels = NULL;
    char *mpath = NULL;
    char *ckpt_record = NULL;
    ckpt *resume_ckpt = NULL;  // the checkpoint a resume starts from (resolve_epochs)
    char resume_open_error[1024] = "";
    double resume_open_s = 0;
    pt_run_hashes hashes;
    memset(&hashes, 0, sizeof hashes);
    int setup_ok = 0;
    bool made_output_dir = false;  // rank 0 created --output-dir in this set-up
    const int B = a->per_device_train_batch_size, T = a->seq_len, accum = a->gradient_accumulation_steps;
    int data_world = 1, data_rank = 0;

    if (validate(a, &sched) != 0) {
        g_usage_error = 1;
        goto setup_done;
    }
    resume_open_s = pt_now_s();
    if (resolve_epochs(&resolved, &resume_ckpt, resume_open_error, sizeof resume_open_error) != 0) {
        g_usage_error = 1;
        goto setup_done;
    }
    resume_open_s = pt_now_s() - resume_open_s;
    if (world) {
        // Rank 0 alone looks at the output dir; the others must learn of a refusal now, before the
        // collectives of the set-up below would wait for rank 0 until the start-up timeout.
        if (startup_agree(world, rank != 0 || prepare_output_dir(a) == 0, a, NULL) != 0) {
            alarm(0);
            goto done;
        }
    } else if (prepare_output_dir(a) != 0) {
        goto setup_done;
    }
    be = pt_backend_create(a->backend);
    if (!be) goto setup_done;
    be->tf32 = a->tf32;  // before the first kernel
    if (world) {
        // Distributed: the config and the parameter layout only (no parameters); the weights stream into
        // this rank's shards below, a block of rows at a time, never the whole model per rank.
        qwen3_config cfg;
        if (hf_model_load_config(&cfg, a->model_dir) != 0 || qwen3_create_layout(&model, &cfg, be) != 0 ||
            hf_model_check_weights(&model, a->model_dir) != 0)
            goto setup_done;
    } else if (hf_model_load(&model, a->model_dir, be) != 0) {
        goto setup_done;
    }
    if (model.cfg.attention_dropout != 0) {  // transformers would drop attention weights; we have no dropout
        pt_set_error("%s/config.json: attention_dropout %g: training with attention dropout is not supported "
                     "(set it to 0.0, as Qwen3 releases do)", a->model_dir, model.cfg.attention_dropout);
        goto setup_done;
    }
    if (!world) pt_hash_model(&model, hashes.config_sha256, hashes.initial_weights_sha256);
    if (world) {
        pt_mesh mesh;
        // A layout that cannot fit this job or this model is a usage error (exit 2): --supervise must not
        // restart a job that cannot start.
        if (resolve_mesh(a, pt_comm_size(world), &mesh) != 0 ||
            pt_mesh_validate(&mesh, pt_comm_size(world), &model.cfg) != 0) {
            g_usage_error = 1;
            goto setup_done;
        }
        P = pt_parallel_create(world, &mesh, &model.cfg, be);
        if (!P) goto setup_done;
        g_par = P;
        // Each tensor is read once, a block of rows at a time, hashed (the digest pt_hash_model gives) and
        // this rank's part of it kept.
        pt_hash_config(&model.cfg, hashes.config_sha256);
        stream_ctx sc = {.P = P, .h = pt_sha256_new()};
        const int lrc = hf_model_stream_weights(&model, a->model_dir, stream_block, &sc);
        pt_sha256_final_hex(sc.h, hashes.initial_weights_sha256);
        qwen3_free(&model);  // the layout
        if (lrc != 0) goto setup_done;
        pt_parallel_load_done(P);
        mdl = pt_parallel_model(P);
        data_world = pt_parallel_data_world(P);
        data_rank = pt_parallel_data_rank(P);
    }
    if (T > mdl->cfg.max_position_embeddings) {
        pt_set_error("--seq-len %d exceeds the model's max_position_embeddings %d", T, mdl->cfg.max_position_embeddings);
        g_usage_error = 1;
        goto setup_done;
    }
    {
        pt_loader_config lc = {.data_path = a->data_path, .seq_len = T, .rows_per_step = B * accum * data_world,
                               .dp_rank = data_rank, .dp_world = data_world,
                               .mode = a->padded ? PT_LOADER_PADDED : PT_LOADER_PACKED, .shuffle = a->shuffle,
                               .seed = a->seed, .model_vocab = (uint32_t)(P ? pt_parallel_plan(P)->global.vocab_size
                                                                            : mdl->cfg.vocab_size),
                               // the global micro-batch: every data rank's per-device batch (docs/DATA.md)
                               .epochs = a->epoch_boundary == PT_EPOCHS_WRAP ? PT_LOADER_EPOCHS_WRAP
                                                                              : PT_LOADER_EPOCHS_HF,
                               .micro_rows = B * data_world, .drop_last = a->dataloader_drop_last > 0};
        loader = pt_loader_open(&lc);
        if (!loader) {
            // The data, or the settings it is read with, are wrong (a restart fails the same way: exit 2, which
            // --supervise does not retry), unless the file system failed (EIO, ESTALE, ...: exit 1, retried).
            g_usage_error = !pt_last_error_transient();
            goto setup_done;
        }
        if (resolved.max_steps <= 0) {
            // HF: ceil(epochs x update steps per epoch). "hf" epochs: HF's num_update_steps_per_epoch (the last
            // step of an epoch may be short); "wrap": ceil(rows / rows per step) (a step may straddle epochs).
            const double steps = ceil(resolved.num_train_epochs * (double)pt_loader_steps_per_epoch(loader));
            if (!(steps >= 1 && steps <= 1e15)) {
                pt_set_error("--num-train-epochs %g over %llu steps per epoch is %g steps", resolved.num_train_epochs,
                             (unsigned long long)pt_loader_steps_per_epoch(loader), steps);
                g_usage_error = 1;
                goto setup_done;
            }
            resolved.max_steps = (long)steps;
        }
        if (resolved.save_each_epoch) resolved.save_steps = (long)pt_loader_steps_per_epoch(loader);
        // HF's get_warmup_steps: a ratio of the (resolved) total when no step count is given
        if (resolved.warmup_steps == 0 && resolved.warmup_ratio > 0)
            resolved.warmup_steps = (long)ceil((double)resolved.max_steps * resolved.warmup_ratio);
    }
    if (pt_lr_schedule_check(&sched, a->learning_rate, a->warmup_steps, a->max_steps) != 0) {
        g_usage_error = 1;
        goto setup_done;
    }
    if (!P) {
        qwen3_alloc_grads(mdl);
        pt_adamw_init(&opt, mdl);
    }
    {
        int acp, ace;
        if (qwen3_parse_activation_checkpointing(a->activation_checkpointing, &acp, &ace) != 0) {
            g_usage_error = 1;
            goto setup_done;
        }
        if (qwen3_set_activation_checkpointing(mdl, acp, ace) != 0) goto setup_done;
    }
    if (a->precision && strcmp(a->precision, "fp32")) {
        if (P) {
            pt_set_error("--precision %s runs on a single process in this build (not under --tp/--fsdp/--dp)",
                         a->precision);
            g_usage_error = 1;  // cannot succeed on a restart either
            goto setup_done;
        }
        if (qwen3_set_precision(mdl, a->precision) != 0) goto setup_done;
    }
    if (qwen3_alloc_activations(mdl, B, T) != 0) goto setup_done;
    snprintf(hashes.dataset_sha256, 65, "%s", pt_loader_data_sha256(loader));
    // Created only now: a run refused during set-up leaves no empty output directory behind.
    if (rank == 0) {
        made_output_dir = !pt_is_dir(a->output_dir);
        if (pt_mkdir_p(a->output_dir) != 0) goto setup_done;
    }
    setup_ok = 1;
setup_done:
    if (world) {
        alarm(0);
        if (startup_agree(world, setup_ok, a, setup_ok ? &hashes : NULL) != 0 || output_dir_shared(world, a) != 0) {
            // another rank's set-up failed after rank 0 made the directory: remove it again (if still empty)
            if (made_output_dir) rmdir(a->output_dir);
            goto done;
        }
    } else if (!setup_ok) {
        goto done;
    }
    const int rows_per_step = B * accum * data_world;
    long start_step = 0;
    double restore_time = -1;
    if (a->resume_from_checkpoint) {
        const double tr = pt_now_s();
        ckpt *c = resume_ckpt;  // opened and verified by resolve_epochs
        resume_ckpt = NULL;
        // no valid checkpoint there: another attempt cannot succeed (exit 2, so --supervise does not retry it)
        if (!c) {
            g_usage_error = 1;
            pt_set_error("%s", resume_open_error);
        }
        start_step = c ? resume(c, a, mdl, &opt, P, &hashes, rows_per_step, loader) : -1;
        if (world) {  // every rank must have restored its shards; rank 0 names the one that did not
            if (startup_agree(world, start_step >= 0, a, NULL) != 0) {
                if (c) ckpt_close(c);
                goto done;
            }
        } else if (start_step < 0) {
            if (c) ckpt_close(c);
            goto done;
        }
        restore_time = pt_now_s() - tr + resume_open_s;
        const cJSON *mr = cJSON_GetObjectItemCaseSensitive(ckpt_state(c), "metrics_record");
        if (cJSON_IsString(mr)) ckpt_record = pt_strdup(mr->valuestring);
        if (!a->quiet && rank == 0)
            pt_info("resumed from %s at step %ld (restore %.3f s)", ckpt_dir(c), start_step, restore_time);
        ckpt_close(c);
    }
    collective_error = false;  // from here on, an error on one rank alone ends the job (pt_comm_abort)
    {
        char *hd = pt_path_join(a->output_dir, "heartbeats");
        mkdir(hd, 0755);
        free(hd);
        heartbeat(a->output_dir, rank, start_step, "done");
    }

    if (rank == 0) {
        cJSON *aj = args_json(a);
        char *p = pt_path_join(a->output_dir, "train_args.json");
        int wrc = pt_json_write_file(p, aj);
        free(p);
        cJSON_Delete(aj);
        if (wrc) goto done;
        const pt_mesh *mm = g_par ? pt_parallel_mesh(g_par) : NULL;
        const int layout[3] = {mm ? mm->tp : 1, mm ? mm->fsdp : 1, mm ? mm->dp : 1};
        if (pt_manifest_write(a, be->name, be->device, pt_loader_epochs_change_rows(loader, (uint64_t)a->max_steps),
                              layout) != 0)
            goto done;  // OUTPUT/manifest.json (train/manifest.h)
        mpath = pt_path_join(a->output_dir, "metrics.jsonl");
        metrics = open_metrics(mpath, start_step, ckpt_record);
        if (!metrics) {
            pt_set_error("%s: cannot open for writing: %s", mpath, strerror(errno));
            goto done;
        }
    }
    free(ckpt_record);
    ckpt_record = NULL;
    const size_t rows = (size_t)B * accum;
    ids = pt_malloc(sizeof(int32_t) * rows * T);
    labels = pt_malloc(sizeof(int32_t) * rows * T);
    const bool quiet = a->quiet || rank != 0;
    const bool tty = isatty(2) && !quiet;
    const qwen3_config *gcfg = P ? &pt_parallel_plan(P)->global : &mdl->cfg;
    const double flops_tok = qwen3_train_flops_per_token(gcfg, T);
    if (!quiet) {
        if (P) {
            const pt_mesh *mm = pt_parallel_mesh(P);
            char order[32];
            pt_mesh_order_str(mm, order, sizeof order);
            pt_info("training %s: %zu parameters per tensor-parallel rank, backend %s, %d ranks (tp %d x fsdp %d x dp %d, innermost first %s), "
                    "%d threads/rank, batch %d x %d accumulation x %d data ranks x %d tokens, %ld steps", a->model_dir,
                    pt_parallel_plan(P)->local_numel, be->name, pt_parallel_world(P), mm->tp, mm->fsdp, mm->dp,
                    order, omp_get_max_threads(), B, accum, data_world, T, a->max_steps);
        } else {
            pt_info("training %s: %zu parameters, backend %s, %d threads, batch %d x %d accumulation x %d tokens, "
                    "%ld steps", a->model_dir, mdl->num_params, be->name, omp_get_max_threads(), B, accum, T,
                    a->max_steps);
        }
    }
    if (!quiet && args->max_steps <= 0)
        pt_info("--num-train-epochs %g: %ld steps (%llu per epoch of %llu rows)", a->num_train_epochs, a->max_steps,
                (unsigned long long)pt_loader_steps_per_epoch(loader),
                (unsigned long long)pt_loader_rows_per_epoch(loader));
    const double t_start = pt_now_s();
    double loss_first = NAN, loss_last = NAN, loss_min = INFINITY;
    // Non-finite steps (--nan-policy, docs/RECOVERY.md): how many were
    // handled, and the steps that caused a rollback (skipped if they fail again).
    static const char *const policy_name[] = {"stop", "skip", "rollback"};
    int nan_handled = 0, n_rolled = 0;
    long rolled[64], rb_first = -1, rb_from = 0;
    double rb_time = 0;
    // --save-steps auto: the probe save, then Daly's interval (re-estimated per save)
    long auto_next = start_step + PT_SAVE_AUTO_PROBE, step_time_n = 0, log_loss_n = 0;
    double log_loss_sum = 0;  // the progress line's loss: the mean since the previous line
    double step_time_sum = 0;
    for (long step = start_step; step < a->max_steps; step++) {
        heartbeat(a->output_dir, rank, step + 1, "compute");
        const double t0 = pt_now_s();
        pt_comm_stats cs0;
        pt_comm_get_stats(&cs0);
        int row_len = T;
        if (pt_loader_batch(loader, (uint64_t)step, ids, labels, &row_len) != 0) goto done;
        long step_targets = 0;
        for (size_t i = 0; i < rows * (size_t)row_len; i++) step_targets += labels[i] != -100;
        // A fingerprint of the GLOBAL batch, the same whatever the layout: the
        // sum (mod 2^64) over global rows of XXH64(inputs, labels; seed = row index).
        uint64_t batch_fp;
        {
            double half[2] = {0, 0};  // exact: < 2^21 rows x 2^32
            for (size_t r = 0; r < rows; r++) {
                const uint64_t g = (uint64_t)data_rank * rows + r;
                XXH64_state_t hs;  // on the stack: no allocation per row
                XXH64_reset(&hs, g);
                XXH64_update(&hs, ids + r * row_len, sizeof(int32_t) * (size_t)row_len);
                XXH64_update(&hs, labels + r * row_len, sizeof(int32_t) * (size_t)row_len);
                const uint64_t h = XXH64_digest(&hs);
                half[0] += (double)(h & 0xffffffffu);
                half[1] += (double)(h >> 32);
            }
            if (P) {
                double tot[2];
                pt_comm_sum_f64(pt_parallel_data_comm(P), half, tot, 2);
                half[0] = tot[0], half[1] = tot[1];
            }
            batch_fp = (uint64_t)half[0] + ((uint64_t)half[1] << 32);
        }
        if (P) step_targets = (long)pt_parallel_data_sum(P, (double)step_targets);  // the global batch's
        if (P) pt_parallel_zero_grads(P);
        else be->ops->zero(be, mdl->grads, sizeof(real_t) * mdl->num_params);
        double loss_sum = 0;
        const float scale = step_targets > 0 ? (float)(1.0 / (double)step_targets) : 0.0f;
        for (int mb = 0; mb < accum; mb++) {
            double ls = 0;
            int nt = 0;
            size_t off = (size_t)mb * B * row_len;
            if (qwen3_forward_backward(mdl, ids + off, labels + off, B, row_len, scale, &ls, &nt) != 0)
                goto done;
            loss_sum += ls;
        }
        if (P) {
            pt_parallel_finish_grads(P);
            loss_sum = pt_parallel_data_sum(P, loss_sum);
        }
        double loss = step_targets > 0 ? loss_sum / (double)step_targets : 0.0;
        if (!P) pt_fault_after_backward(step + 1, mdl, &loss);  // test-only nan:step=S
        const double gnorm = P ? pt_parallel_grad_norm(P) : pt_grad_global_norm(mdl);
        // Checked before the update, so the weights never become non-finite.
        const char *skip_reason = NULL;
        if (!isfinite(loss) || !isfinite(gnorm)) {
            const char *what = !isfinite(loss) ? "loss" : "gradient norm";
            skip_reason = !isfinite(loss) ? "nonfinite_loss" : "nonfinite_grad_norm";
            bool again = false;  // this step already caused a rollback: skip it now
            for (int i = 0; i < n_rolled; i++) again |= rolled[i] == step + 1;
            if (a->nan_policy == PT_NAN_STOP || (!again && nan_handled >= a->nan_max_count)) {
                if (a->nan_policy == PT_NAN_STOP)
                    pt_set_error("step %ld: non-finite %s (loss %g, grad norm %g) before the optimizer step; stopped "
                                 "(--nan-policy stop): no update and no checkpoint after step %ld", step + 1, what,
                                 loss, gnorm, step);
                else
                    pt_set_error("step %ld: non-finite %s (loss %g, grad norm %g); --nan-max-count %d non-finite "
                                 "steps already handled (--nan-policy %s), stopped before the update", step + 1,
                                 what, loss, gnorm, a->nan_max_count, policy_name[a->nan_policy]);
                rc = PT_TRAIN_NONFINITE;
                collective_error = true;  // loss and norm are global: every rank stops here
                goto done;
            }
            if (!again) nan_handled++;
            if (a->nan_policy == PT_NAN_ROLLBACK && !again) {
                const double tr = pt_now_s();
                if (n_rolled < 64) rolled[n_rolled++] = step + 1;
                const long back = rollback(a, step + 1, mdl, &opt, P, &hashes, rows_per_step, loader, mpath, &metrics);
                if (back < 0) {
                    pt_prefix_error("step %ld: rollback after a non-finite %s failed: ", step + 1, what);
                    goto done;
                }
                if (back > 0) {
                    if (rank == 0)
                        pt_warn("step %ld: non-finite %s (loss %g, grad norm %g); rolled back to step %ld (%d of "
                                "--nan-max-count %d); the batch of step %ld is skipped if it fails again",
                                step + 1, what, loss, gnorm, back, nan_handled, a->nan_max_count, step + 1);
                    rb_first = back;
                    rb_from = step + 1;
                    rb_time = pt_now_s() - tr;
                    step = back - 1;  // the loop's step++ continues at checkpoint step + 1
                    continue;
                }
                if (rank == 0)
                    pt_warn("step %ld: non-finite %s and no checkpoint to roll back to; skipping the batch instead "
                            "(the weights are those of step %ld either way)", step + 1, what, step);
            } else if (again) {
                if (rank == 0) pt_warn("step %ld: non-finite %s again after the rollback; batch skipped, no update", step + 1, what);
            } else if (rank == 0) {
                pt_warn("step %ld: non-finite %s (loss %g, grad norm %g); batch skipped, no update (--nan-policy "
                        "%s, %d of --nan-max-count %d)", step + 1, what, loss, gnorm, policy_name[a->nan_policy],
                        nan_handled, a->nan_max_count);
            }
        }
        const double lr = a->learning_rate * pt_lr_multiplier(&sched, step, a->warmup_steps, a->max_steps);
        if (!skip_reason) {
            if (P) {
                pt_parallel_clip(P, gnorm, a->max_grad_norm);
                opt.t++;
                pt_parallel_adamw(P, (float)lr, (float)a->adam_beta1, (float)a->adam_beta2, (float)a->adam_epsilon,
                                  (float)a->weight_decay, opt.t);
            } else {
                pt_clip_grads(mdl, gnorm, a->max_grad_norm);
                pt_adamw_hparams h = {(float)lr, (float)a->adam_beta1, (float)a->adam_beta2, (float)a->adam_epsilon,
                                      (float)a->weight_decay};
                pt_adamw_step(&opt, &h);
                pt_fault_after_update(step + 1, mdl);  // test-only nan:step=S:target=weights
            }
        }
        be->ops->synchronize(be);
        const double dt = pt_now_s() - t0;
        // the global batch's rows that hold data ("hf" epochs: an epoch's last step may have empty rows)
        const long tokens = (long)pt_loader_last_real_rows(loader) * row_len;
        // The step's record is written only after its checkpoint (if any) is
        // safe; the record also travels in the checkpoint so a crash between the
        // save and this write loses no line (open_metrics restores it).
        char rec[2048], lb[32], gb[32];
        int rl = snprintf(rec, sizeof rec,
                          "{\"step\": %ld, \"loss\": %s, \"grad_norm\": %s, \"lr\": %.17g, \"epoch\": %.6f, "
                          "\"tokens\": %ld, \"step_time_s\": %.6f, \"tokens_per_s\": %.3f, \"mfu_flops_per_s\": %.6g",
                          step + 1, jnum(lb, loss), jnum(gb, gnorm), lr,
                          // as HF logs it: passes over the data so far (pt_loader_epochs_done)
                          pt_loader_epochs_done(loader, (uint64_t)(step + 1)), tokens, dt,
                          tokens / dt, flops_tok * tokens / dt);
        rl += snprintf(rec + rl, sizeof rec - rl, ", \"batch_fingerprint\": \"%016llx\", \"activation_bytes\": %zu",
                       (unsigned long long)batch_fp, mdl->act_bytes);
        if (!P) rl += snprintf(rec + rl, sizeof rec - rl, ", \"peak_rss_mib\": %.1f", rss_peak_mib());
        if (P) {  // communication of this rank (rank 0's; the layout is symmetric) and memory of every rank
            pt_comm_stats cs1;
            pt_comm_get_stats(&cs1);
            double comm_s = 0;
            for (int k = 0; k < PT_COLL_KINDS; k++) comm_s += cs1.seconds[k] - cs0.seconds[k];
            rl += snprintf(rec + rl, sizeof rec - rl, ", \"compute_time_s\": %.6f, \"comm_time_s\": %.6f, \"comm_bytes\": {",
                           dt - comm_s, comm_s);
            for (int k = 0; k < PT_COLL_KINDS; k++)
                rl += snprintf(rec + rl, sizeof rec - rl, "%s\"%s\": %llu", k ? ", " : "", pt_coll_kind_name[k],
                               (unsigned long long)(cs1.bytes[k] - cs0.bytes[k]));
            rl += snprintf(rec + rl, sizeof rec - rl, "}, \"comm_time_by_kind_s\": {");
            for (int k = 0; k < PT_COLL_KINDS; k++)
                rl += snprintf(rec + rl, sizeof rec - rl, "%s\"%s\": %.6f", k ? ", " : "", pt_coll_kind_name[k],
                               cs1.seconds[k] - cs0.seconds[k]);
            const int W = pt_parallel_world(P);
            double mine = rss_peak_mib(), *all = pt_malloc(sizeof(double) * W);
            pt_comm_allgather_f64(world, &mine, all, 1, PT_COLL_CONTROL);
            double rss_max = 0;  // the single-process field: here the largest rank's
            for (int r = 0; r < W; r++) rss_max = all[r] > rss_max ? all[r] : rss_max;
            rl += snprintf(rec + rl, sizeof rec - rl, "}, \"peak_rss_mib\": %.1f, \"state_bytes_per_rank\": %zu, "
                           "\"peak_rss_mib_per_rank\": [", rss_max, pt_parallel_state_bytes(P));
            for (int r = 0; r < W && rl < (int)sizeof rec - 64; r++)
                rl += snprintf(rec + rl, sizeof rec - rl, "%s%.1f", r ? ", " : "", all[r]);
            rl += snprintf(rec + rl, sizeof rec - rl, "]");
            free(all);
        }
        if (skip_reason)
            rl += snprintf(rec + rl, sizeof rec - rl, ", \"skipped\": true, \"reason\": \"%s\"", skip_reason);
        if (step == rb_first)
            rl += snprintf(rec + rl, sizeof rec - rl, ", \"rolled_back_from\": %ld, \"rollback_restore_time_s\": %.6f",
                           rb_from, rb_time);
        if (a->padded)
            rl += snprintf(rec + rl, sizeof rec - rl, ", \"padding_fraction\": %.6f, \"row_len\": %d",
                           pt_loader_last_padding_fraction(loader), row_len);
        if (be->ops->compile_stats) {  // run-time kernel compilation so far (opencl): build time, cache, recompilations
            pt_compile_stats cs;
            be->ops->compile_stats(be, &cs);
            rl += snprintf(rec + rl, sizeof rec - rl, ", \"compile_s\": %.6f, \"cache_hits\": %d, \"cache_misses\": %d, "
                           "\"recompilations\": %d", cs.compile_seconds, cs.cache_hits, cs.cache_misses, cs.recompilations);
        }
        if (restore_time >= 0 && step == start_step)
            rl += snprintf(rec + rl, sizeof rec - rl, ", \"restore_time_s\": %.6f", restore_time);
        const bool save_now = a->save_steps > 0 ? (step + 1) % a->save_steps == 0
                              : a->save_steps == PT_SAVE_STEPS_AUTO && step + 1 == auto_next && step + 1 < a->max_steps;
        if (!skip_reason && step > start_step) { step_time_sum += dt; step_time_n++; }  // the first step warms up
        if (save_now) {
            heartbeat(a->output_dir, rank, step + 1, "save");  // a supervisor gives a save the start-up timeout
            pt_fault_before_save(step + 1);  // test-only kill:phase=save / enospc (rank-aware)
            cJSON *st = state_json(a, mdl, &opt, step + 1, &hashes, rows_per_step, loader);
            if (P) {  // the run's model config is the global one, not this rank's shard
                cJSON_ReplaceItemInObject(st, "model_config", qwen3_config_to_json(gcfg, "float32"));
            }
            char closed[2100];
            snprintf(closed, sizeof closed, "%s}", rec);
            cJSON_AddStringToObject(st, "metrics_record", closed);
            ckpt_save_stats ss;
            int src = P ? pt_parallel_save(P, a->output_dir, step + 1, st, a->save_total_limit, &ss)
                        : pt_save_train_state(a->output_dir, step + 1, mdl, &opt, st, a->save_total_limit, &ss);
            cJSON_Delete(st);
            if (src != 0) {
                if (metrics) fprintf(metrics, "%s}\n", rec);
                pt_prefix_error("step %ld: the previous checkpoint is kept; ", step + 1);
                if (src == PT_SAVE_NONFINITE) rc = PT_TRAIN_NONFINITE;
                collective_error = true;  // every rank got the save's verdict
                goto done;
            }
            if (!P) pt_fault_after_save(step + 1, ss.path);  // test-only corrupt-checkpoint:step=S
            rl += snprintf(rec + rl, sizeof rec - rl, ", \"save_time_s\": %.6f, \"save_bytes\": %llu, \"save_gb_per_s\": %.4f",
                           ss.seconds, (unsigned long long)ss.bytes, ss.gb_per_s);
            if (a->save_steps == PT_SAVE_STEPS_AUTO) {
                // Daly's interval from this save's cost and the mean step time so far
                // (re-estimated at every save: disks and step times drift).
                const double mtbf_s = a->mtbf_hours * 3600.0, st_mean = step_time_sum / (step_time_n ? step_time_n : 1);
                long every = pt_daly_interval_steps(ss.seconds, mtbf_s, st_mean);
                if (P) {  // rank 0's estimate for everyone: the ranks must save together
                    double e = (double)every;
                    pt_comm_broadcast(world, &e, sizeof e, 0);
                    every = (long)e;
                }
                auto_next = step + 1 + (every > 0 ? every : 1);
                rl += snprintf(rec + rl, sizeof rec - rl, ", \"save_interval_steps\": %ld", every);
                if (rank == 0)
                    pt_info("checkpoint interval: %ld steps (Daly: save %.3f s, MTBF %g h, step %.3f s; Young %.0f s); "
                            "next at step %ld", every, ss.seconds, a->mtbf_hours, st_mean,
                            pt_young_interval_s(ss.seconds, mtbf_s), auto_next);
            }
        }
        if (metrics) {
            fprintf(metrics, "%s}\n", rec);
            fflush(metrics);
        }
        heartbeat(a->output_dir, rank, step + 1, "done");
        pt_fault_after_step(step + 1);  // test-only kill/hang faults (train/faults.h), rank-aware
        if (!skip_reason) {
            if (isnan(loss_first)) loss_first = loss;
            loss_last = loss;
            if (loss < loss_min) loss_min = loss;
            log_loss_sum += loss;
            log_loss_n++;
        }
        const double elapsed = pt_now_s() - t_start;
        const double eta = elapsed / (step + 1 - start_step) * (a->max_steps - step - 1);
        char etab[32];
        fmt_eta(eta, etab, sizeof etab);
        bool log_line = !quiet && (a->logging_steps > 0 && ((step + 1) % a->logging_steps == 0 ||
                                                            step + 1 == a->max_steps || step == start_step));
        if (log_line) {
            // as HF logs it: the mean loss of the steps since the previous line (metrics.jsonl has each step's)
            fprintf(stderr, "%sstep %ld/%ld  loss %.4f  grad_norm %.3f  lr %.3e  %.0f tok/s  ETA %s\n",
                    tty ? "\r\033[K" : "", step + 1, a->max_steps, log_loss_n ? log_loss_sum / log_loss_n : loss,
                    gnorm, lr, tokens / dt, etab);
            log_loss_sum = 0;
            log_loss_n = 0;
        } else if (tty) {
            fprintf(stderr, "\r\033[Kstep %ld/%ld  loss %.4f  %.0f tok/s  ETA %s", step + 1, a->max_steps, loss,
                    tokens / dt, etab);
        }
    }
    if (tty) fprintf(stderr, "\r\033[K");
    heartbeat(a->output_dir, rank, a->max_steps, "save");  // the final model: I/O, not a hang
    // never publish non-finite final weights (the checkpoint save has the same guard)
    if (P ? !pt_parallel_all_finite(P, 0) : 0) {
        pt_set_error("the final weights hold non-finite values (NaN/Inf); %s/model.safetensors not written",
                     a->output_dir);
        rc = PT_TRAIN_NONFINITE;
        collective_error = true;
        goto done;
    }
    if (!P) {
        double ss = 0;
        be->ops->sum_squares(be, &ss, mdl->params, mdl->num_params);
        if (!isfinite(ss)) {
            pt_set_error("the final weights hold non-finite values (NaN/Inf); %s/model.safetensors not written",
                         a->output_dir);
            rc = PT_TRAIN_NONFINITE;
            goto done;
        }
    }
    if (rank == 0 && be->ops->compile_stats && pt_manifest_add_compile(a->output_dir, be) != 0) goto done;  // platform.compile
    if (P ? pt_parallel_save_hf(P, a->output_dir) : hf_model_save(mdl, a->output_dir, "float32", 0)) {
        collective_error = P != NULL;
        goto done;
    }
    heartbeat(a->output_dir, rank, a->max_steps, "done");
    // The tokenizer and generation files of --model, as `export` copies them: transformers' own save
    // writes generation_config.json, and without it the saved model generates with different defaults.
    if (rank == 0 && hf_copy_sidecars(a->model_dir, a->output_dir, NULL) != 0) goto done;
    if (!quiet)
        pt_info("done: loss %.4f -> %.4f (min %.4f) in %.1f s; model saved to %s", loss_first, loss_last, loss_min,
                pt_now_s() - t_start, a->output_dir);
    rc = 0;
done:
    if (rc != 0 && world && pt_comm_size(world) > 1 && !collective_error) {
        // An error on this rank alone: the others would wait for it in the
        // next collective. Report it and end the whole job.
        fprintf(stderr, "portatrain: error: rank %d: %s\n", rank, pt_last_error());
        pt_comm_abort(1);
    }
    if (rc != 0 && world && pt_comm_size(world) > 1) {
        // The same error on every rank: rank 0 reports it before anyone exits
        // (a rank's non-zero exit makes mpirun end the job at once).
        if (rank == 0) {
            fprintf(stderr, "portatrain: error: %s\n", pt_last_error());
            fflush(stderr);
        }
        pt_comm_barrier(world);
        g_error_elsewhere = 1;
    }
    if (resume_ckpt) ckpt_close(resume_ckpt);
    free(ckpt_record);
    if (metrics) fclose(metrics);
    free(mpath);
    free(ids);
    free(labels);
    pt_loader_free(loader);
    if (!P) {
        pt_adamw_free(&opt);
        qwen3_free(&model);
    }
    pt_parallel_free(P);
    g_par = NULL;
    if (be) pt_backend_destroy(be);
    if (world) {
        pt_comm_free(world);
        pt_comm_finalize();
    }
    return rc;
}
