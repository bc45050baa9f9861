#include "train/trainer.h"
#include "train/trainer_ctx.h"
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


// The layout of a distributed run (NULL on a single process), for train_args.json.
static const pt_parallel *g_par;
static int g_error_elsewhere, g_usage_error;
int pt_train_error_reported_elsewhere(void) { return g_error_elsewhere; }
int pt_train_usage_error(void) { return g_usage_error; }

// The training state recorded in a checkpoint after `step` optimizer steps.
static cJSON *state_json(const pt_train_args *a, const qwen3_config *cfg, const pt_adamw *opt, long step,
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
    cJSON_AddItemToObject(s, "run_config", pt_trainer_args_json(a));
    cJSON_AddItemToObject(s, "model_config", qwen3_config_to_json(cfg, "float32"));  // the global one
    return s;
}

static int json_num(const cJSON *o, const char *path1, const char *path2, double *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, path1);
    if (path2) x = cJSON_GetObjectItemCaseSensitive(x, path2);
    if (!cJSON_IsNumber(x)) return -1;
    *out = x->valuedouble;
    return 0;
}

// The epoch boundaries a checkpoint's state records (absent: the legacy loader, PT_EPOCHS_LEGACY).
static void checkpoint_epochs(const cJSON *st, int *eb, int *drop_last) {
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(st, "data_loader");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(dl, "epoch_boundary");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(dl, "dataloader_drop_last");
    *eb = cJSON_IsString(e) && !strcmp(e->valuestring, "hf") ? PT_EPOCHS_HF : PT_EPOCHS_LEGACY;
    *drop_last = cJSON_IsTrue(d) ? 1 : 0;
}

// Resolves --epoch-boundary and --dataloader-drop-last: a resume takes the checkpoint's where not given (and a
// given one that differs is refused), a fresh run defaults to hf without drop_last. A resume's checkpoint is
// opened here, once, and verified unless `verify` is 0 (a job of several ranks: verify_resume_shared):
// *resume_ckpt (NULL if there is none; then *open_error says why).
static int resolve_epochs(pt_train_args *a, ckpt **resume_ckpt, char *open_error, size_t open_error_size,
                          int verify) {
    *resume_ckpt = NULL;
    if (a->resume_from_checkpoint) {
        ckpt *c = ckpt_open_resume_opts(a->output_dir, a->resume_from_checkpoint, verify);
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
    // documents mode is one endless stream (TorchTitan's): its steps straddle epochs as "wrap" says
    if (a->epoch_boundary == PT_EPOCHS_UNSET) a->epoch_boundary = a->documents ? PT_EPOCHS_WRAP : PT_EPOCHS_HF;
    if (a->dataloader_drop_last < 0) a->dataloader_drop_last = 0;
    if (a->dataloader_drop_last && a->epoch_boundary != PT_EPOCHS_HF) {
        pt_set_error("--dataloader-drop-last needs --epoch-boundary hf (wrap has no last batch to drop)");
        return -1;
    }
    return 0;
}

// Restores model + optimizer from a checkpoint and checks that the frozen
// parts of the run match; returns the step to continue from, or -1.
long pt_trainer_resume(pt_trainer *t, ckpt *c) {
    const pt_train_args *a = &t->a;
    pt_run_hashes *h = &t->hashes;
    const int rows_per_step = t->rows_per_step;
    const pt_loader *loader = t->loader;
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
        pt_set_error("%s: the checkpoint's model config differs from %s%s", ckpt_dir(c),
                     a->model_config ? a->model_config : a->model_dir, a->model_config ? "" : "/config.json");
        return -1;
    }
    if (cJSON_IsString(iw)) snprintf(h->initial_weights_sha256, 65, "%s", iw->valuestring);
    if (t->ops->load_ckpt(t, c) != 0) return -1;
    t->opt.t = (int)ostep;
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

double pt_trainer_rss_peak_mib(void) {
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

// ---------------------------------------------------------------- shared with the runtimes and the loop

cJSON *pt_trainer_args_json(const pt_train_args *a) {
    return pt_train_args_json(a, g_par ? pt_parallel_mesh(g_par) : NULL, g_par ? pt_parallel_world(g_par) : 0);
}
void pt_trainer_set_layout(const pt_parallel *P) { g_par = P; }
void pt_trainer_set_usage_error(int usage) { g_usage_error = usage; }
int pt_trainer_usage_error_now(void) { return g_usage_error; }

cJSON *pt_trainer_state_json(pt_trainer *t, long step) {
    return state_json(&t->a, t->gcfg, &t->opt, step, &t->hashes, t->rows_per_step, t->loader);
}

void pt_trainer_heartbeat(pt_trainer *t, long step, const char *phase) {
    heartbeat(t->a.output_dir, t->rank, step, phase);
}

int pt_trainer_check_model(pt_trainer *t) {
    if (t->model.cfg.attention_dropout != 0) {  // transformers would drop attention weights; we have no dropout
        const pt_train_args *a = &t->a;
        pt_set_error("%s%s: attention_dropout %g: training with attention dropout is not supported (set it to 0.0, "
                     "as Qwen3 releases do)", a->model_config ? a->model_config : a->model_dir,
                     a->model_config ? "" : "/config.json", t->model.cfg.attention_dropout);
        return -1;
    }
    return 0;
}

// A layout that cannot fit this job or this model is a usage error (exit 2): --supervise must not restart a
// job that cannot start.
int pt_trainer_mesh(pt_trainer *t, pt_mesh *mesh) {
    const int W = pt_comm_size(t->world);
    if (pt_mesh_resolve(W, t->a.tp, t->a.fsdp, t->a.dp, t->a.mesh_order, mesh) != 0 ||
        (mesh->ep = t->a.ep > 0 ? t->a.ep : 1, pt_mesh_validate(mesh, W, &t->model.cfg) != 0)) {
        g_usage_error = 1;
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------- set-up

static void trainer_init(pt_trainer *t, const pt_train_args *args) {
    memset(t, 0, sizeof *t);
    t->args = args;
    t->a = *args;  // max_steps filled in from --num-train-epochs once the data is open
    const bool distributed = args->tp > 1 || args->fsdp > 1 || args->dp > 1 || pt_comm_launched();
    t->ops = distributed ? &pt_runtime_parallel : &pt_runtime_single;
    t->collective_error = true;  // set-up errors are the same on every rank (or agreed on)
    t->restore_time = -1;
    t->nf.rb_first = -1;
}

// The arguments alone (usage errors); a resume's checkpoint is opened here (resolve_epochs).
static int setup_args(pt_trainer *t) {
    if (pt_train_args_validate(&t->a, &t->sched) != 0) {
        g_usage_error = 1;
        return -1;
    }
    t->resume_open_s = pt_now_s();
    if (resolve_epochs(&t->a, &t->resume_ckpt, t->resume_open_error, sizeof t->resume_open_error,
                       !t->world || pt_comm_size(t->world) == 1) != 0) {
        g_usage_error = 1;
        return -1;
    }
    t->resume_open_s = pt_now_s() - t->resume_open_s;
    return 0;
}

// The data: the loader over this rank's rows, and what it resolves (--num-train-epochs, save per epoch,
// --warmup-ratio).
static int open_loader(pt_trainer *t) {
    pt_train_args *a = &t->a;
    const int B = a->per_device_train_batch_size, accum = a->gradient_accumulation_steps;
    t->rows_per_step = B * accum * t->data_world;
    pt_loader_config lc = {.data_path = a->data_path, .seq_len = a->seq_len, .rows_per_step = t->rows_per_step,
                           .dp_rank = t->data_rank, .dp_world = t->data_world,
                           .mode = a->padded ? PT_LOADER_PADDED : a->documents ? PT_LOADER_DOCUMENTS : PT_LOADER_PACKED,
                           .doc_shards = a->document_parts, .shuffle = a->shuffle,
                           .seed = a->seed, .model_vocab = (uint32_t)t->gcfg->vocab_size,
                           // the global micro-batch: every data rank's per-device batch (docs/DATA.md)
                           .epochs = a->epoch_boundary == PT_EPOCHS_WRAP ? PT_LOADER_EPOCHS_WRAP : PT_LOADER_EPOCHS_HF,
                           .micro_rows = B * t->data_world, .drop_last = a->dataloader_drop_last > 0};
    t->loader = pt_loader_open(&lc);
    if (!t->loader) {
        // The data, or the settings it is read with, are wrong (a restart fails the same way: exit 2, which
        // --supervise does not retry), unless the file system failed (EIO, ESTALE, ...: exit 1, retried).
        g_usage_error = !pt_last_error_transient();
        return -1;
    }
    if (a->max_steps <= 0) {
        // HF: ceil(epochs x update steps per epoch). "hf" epochs: HF's num_update_steps_per_epoch (the last
        // step of an epoch may be short); "wrap": ceil(rows / rows per step) (a step may straddle epochs).
        const double steps = ceil(a->num_train_epochs * (double)pt_loader_steps_per_epoch(t->loader));
        if (!(steps >= 1 && steps <= 1e15)) {
            pt_set_error("--num-train-epochs %g over %llu steps per epoch is %g steps", a->num_train_epochs,
                         (unsigned long long)pt_loader_steps_per_epoch(t->loader), steps);
            g_usage_error = 1;
            return -1;
        }
        a->max_steps = (long)steps;
    }
    if (a->save_each_epoch) a->save_steps = (long)pt_loader_steps_per_epoch(t->loader);
    // HF's get_warmup_steps: a ratio of the (resolved) total when no step count is given
    if (a->warmup_steps == 0 && a->warmup_ratio > 0) a->warmup_steps = (long)ceil((double)a->max_steps * a->warmup_ratio);
    return 0;
}

// --activation-checkpointing, --precision and the activations.
static int setup_model_options(pt_trainer *t) {
    const pt_train_args *a = &t->a;
    int acp, ace;
    if (qwen3_parse_activation_checkpointing(a->activation_checkpointing, &acp, &ace) != 0) {
        g_usage_error = 1;
        return -1;
    }
    if (qwen3_set_activation_checkpointing(t->mdl, acp, ace) != 0) return -1;
    if (a->precision && strcmp(a->precision, "fp32")) {
        if (!t->ops->mixed_precision) {
            pt_set_error("--precision %s runs on a single process in this build (not under --tp/--fsdp/--dp)",
                         a->precision);
            g_usage_error = 1;  // cannot succeed on a restart either
            return -1;
        }
        if (qwen3_set_precision(t->mdl, a->precision) != 0) return -1;
    }
    return qwen3_alloc_activations(t->mdl, a->per_device_train_batch_size, a->seq_len);
}

// This rank's share of the run: backend, model, data, optimizer state; then rank 0 makes the output dir.
static int setup_run(pt_trainer *t) {
    const pt_train_args *a = &t->a;
    t->be = pt_backend_create(a->backend);
    if (!t->be) return -1;
    t->be->tf32 = a->tf32;  // before the first kernel
    if (t->ops->load_model(t) != 0) {
        // a model directory that is not there will not be there on a restart either (exit 2: not retried);
        // the runtime may have named a usage error of its own (a layout the world cannot hold)
        if (!pt_is_dir(a->model_dir)) g_usage_error = 1;
        return -1;
    }
    if (a->seq_len > t->mdl->cfg.max_position_embeddings) {
        pt_set_error("--seq-len %d exceeds the model's max_position_embeddings %d", a->seq_len,
                     t->mdl->cfg.max_position_embeddings);
        g_usage_error = 1;
        return -1;
    }
    if (open_loader(t) != 0) return -1;
    if (pt_lr_schedule_check(&t->sched, a->learning_rate, a->warmup_steps, a->max_steps) != 0) {
        g_usage_error = 1;
        return -1;
    }
    if (t->ops->init_train_state(t) != 0 || setup_model_options(t) != 0) return -1;
    snprintf(t->hashes.dataset_sha256, 65, "%s", pt_loader_data_sha256(t->loader));
    // Created only now: a run refused during set-up leaves no empty output directory behind.
    if (t->rank == 0) {
        t->made_output_dir = !pt_is_dir(a->output_dir);
        if (pt_mkdir_p(a->output_dir) != 0) return -1;
    }
    return 0;
}

// Every rank sets up and all agree on the outcome (and on the arguments and inputs). 0, or -1 with the same
// error on every rank.
static int setup(pt_trainer *t) {
    if (t->ops->start(t) != 0) return -1;
    int ok = setup_args(t) == 0;
    // Rank 0 alone looks at the output dir; the others must learn of a refusal now, before the collectives of
    // the set-up below would wait for rank 0 until the start-up timeout.
    if (ok && t->ops->agree(t, t->rank != 0 || prepare_output_dir(&t->a) == 0, NULL) != 0) {
        pt_startup_end_alarm();
        return -1;
    }
    ok = ok && setup_run(t) == 0;
    pt_startup_end_alarm();
    if (t->ops->agree(t, ok, ok ? &t->hashes : NULL) != 0 || t->ops->output_dir_shared(t) != 0) {
        // another rank's set-up failed after rank 0 made the directory: remove it again (if still empty)
        if (t->made_output_dir) rmdir(t->a.output_dir);
        return -1;
    }
    return 0;
}

// A job of several ranks opened its checkpoint without the checksums (resolve_epochs): were every rank to check
// every file, each would read the whole checkpoint and N ranks would open N files each. Each rank checks its
// share of the files and the ranks agree; only when a file fails does every rank check them all, as a single
// process does, so that all fall back to the same older checkpoint (or fail alike).
static int verify_resume_shared(pt_trainer *t) {
    if (!t->world || pt_comm_size(t->world) == 1) return 0;
    ckpt *c = t->resume_ckpt;
    const int ok = !c || ckpt_verify_share(c, t->rank, pt_comm_size(t->world)) == 0;
    if (t->ops->agree(t, ok, NULL) == 0) return 0;
    pt_clear_error();
    pt_trainer_set_usage_error(0);
    ckpt_close(c);
    c = t->resume_ckpt = ckpt_open_resume(t->a.output_dir, t->a.resume_from_checkpoint);
    if (!c) {
        snprintf(t->resume_open_error, sizeof t->resume_open_error, "%s", pt_last_error());
        return 0;
    }
    int eb, dl;  // the loader was opened with the first choice's epoch settings
    checkpoint_epochs(ckpt_state(c), &eb, &dl);
    if (eb == t->a.epoch_boundary && dl == t->a.dataloader_drop_last) return 0;
    pt_set_error("%s: the checkpoint a resume falls back to has other epoch settings than %s's", ckpt_dir(c),
                 t->a.resume_from_checkpoint);
    return -1;
}

// --resume-from-checkpoint: the checkpoint resolve_epochs opened, restored on every rank.
static int setup_resume(pt_trainer *t) {
    if (!t->a.resume_from_checkpoint) return 0;
    const double tr = pt_now_s();
    if (verify_resume_shared(t) != 0) return -1;
    ckpt *c = t->resume_ckpt;
    t->resume_ckpt = NULL;
    // no valid checkpoint there: another attempt cannot succeed (exit 2, so --supervise does not retry it)
    if (!c) {
        g_usage_error = 1;
        pt_set_error("%s", t->resume_open_error);
    }
    t->start_step = c ? pt_trainer_resume(t, c) : -1;
    // every rank must have restored its shards; rank 0 names the one that did not
    if (t->ops->agree(t, t->start_step >= 0, NULL) != 0) {
        if (c) ckpt_close(c);
        return -1;
    }
    t->restore_time = pt_now_s() - tr + t->resume_open_s;
    const cJSON *mr = cJSON_GetObjectItemCaseSensitive(ckpt_state(c), "metrics_record");
    if (cJSON_IsString(mr)) t->ckpt_record = pt_strdup(mr->valuestring);
    if (!t->a.quiet && t->rank == 0)
        pt_info("resumed from %s at step %ld (restore %.3f s)", ckpt_dir(c), t->start_step, t->restore_time);
    ckpt_close(c);
    return 0;
}

// Rank 0's run files: train_args.json, manifest.json (train/manifest.h), metrics.jsonl.
static int write_run_files(pt_trainer *t) {
    const pt_train_args *a = &t->a;
    cJSON *aj = pt_trainer_args_json(a);
    char *p = pt_path_join(a->output_dir, "train_args.json");
    const int wrc = pt_json_write_file(p, aj);
    free(p);
    cJSON_Delete(aj);
    if (wrc) return -1;
    const pt_mesh *mm = g_par ? pt_parallel_mesh(g_par) : NULL;
    const int layout[3] = {mm ? mm->tp : 1, mm ? mm->fsdp : 1, mm ? mm->dp : 1};
    if (pt_manifest_write(a, t->be->name, t->be->device, pt_loader_epochs_change_rows(t->loader, (uint64_t)a->max_steps),
                          layout) != 0)
        return -1;
    t->metrics = pt_metrics_open(a->output_dir, t->start_step, t->ckpt_record);
    return t->metrics ? 0 : -1;
}

// From here on, an error on one rank alone ends the job (pt_comm_abort).
static int setup_outputs(pt_trainer *t) {
    const pt_train_args *a = &t->a;
    t->collective_error = false;
    char *hd = pt_path_join(a->output_dir, "heartbeats");
    mkdir(hd, 0755);
    free(hd);
    heartbeat(a->output_dir, t->rank, t->start_step, "done");
    if (t->rank == 0 && write_run_files(t) != 0) return -1;
    free(t->ckpt_record);
    t->ckpt_record = NULL;
    const size_t rows = (size_t)a->per_device_train_batch_size * a->gradient_accumulation_steps;
    t->ids = pt_malloc(sizeof(int32_t) * rows * a->seq_len);
    t->labels = pt_malloc(sizeof(int32_t) * rows * a->seq_len);
    t->flops_tok = qwen3_train_flops_per_token(t->gcfg, a->seq_len);
    if (a->quiet || t->rank != 0) return 0;
    t->ops->banner(t);
    if (t->args->max_steps <= 0)
        pt_info("--num-train-epochs %g: %ld steps (%llu per epoch of %llu rows)", a->num_train_epochs, a->max_steps,
                (unsigned long long)pt_loader_steps_per_epoch(t->loader),
                (unsigned long long)pt_loader_rows_per_epoch(t->loader));
    return 0;
}

// ---------------------------------------------------------------- finish

// The final model (never with non-finite weights: the checkpoint save has the same guard) and the files
// that go with it.
static int finish_run(pt_trainer *t, int *rc) {
    const pt_train_args *a = &t->a;
    heartbeat(a->output_dir, t->rank, a->max_steps, "save");  // the final model: I/O, not a hang
    if (!t->ops->final_weights_finite(t)) {
        pt_set_error("the final weights hold non-finite values (NaN/Inf); %s/model.safetensors not written",
                     a->output_dir);
        *rc = PT_TRAIN_NONFINITE;
        t->collective_error = true;
        return -1;
    }
    if (t->rank == 0 && t->be->ops->compile_stats && pt_manifest_add_compile(a->output_dir, t->be) != 0)
        return -1;  // platform.compile
    if (t->ops->save_final(t) != 0) return -1;
    heartbeat(a->output_dir, t->rank, a->max_steps, "done");
    // The tokenizer and generation files of --model, as `export` copies them: transformers' own save
    // writes generation_config.json, and without it the saved model generates with different defaults.
    if (t->rank == 0 && hf_copy_sidecars(a->model_dir, a->output_dir, NULL) != 0) return -1;
    if (!a->quiet && t->rank == 0)
        pt_info("done: loss %.4f -> %.4f (min %.4f) in %.1f s; model saved to %s", t->loss_first, t->loss_last,
                t->loss_min, pt_now_s() - t->t_start, a->output_dir);
    return 0;
}

static void report_error(pt_trainer *t, int rc) {
    if (rc == 0 || !t->world || pt_comm_size(t->world) <= 1) return;
    if (!t->collective_error) {
        // An error on this rank alone: the others would wait for it in the
        // next collective. Report it and end the whole job.
        fprintf(stderr, "portatrain: error: rank %d: %s\n", t->rank, pt_last_error());
        pt_comm_abort(1);
    }
    // The same error on every rank: rank 0 reports it before anyone exits
    // (a rank's non-zero exit makes mpirun end the job at once).
    if (t->rank == 0) {
        fprintf(stderr, "portatrain: error: %s\n", pt_last_error());
        fflush(stderr);
    }
    pt_comm_barrier(t->world);
    g_error_elsewhere = 1;
}

static void cleanup(pt_trainer *t) {
    if (t->resume_ckpt) ckpt_close(t->resume_ckpt);
    free(t->ckpt_record);
    pt_metrics_close(t->metrics);
    free(t->ids);
    free(t->labels);
    pt_loader_free(t->loader);
    pt_adamw_free(&t->opt);
    qwen3_free(&t->model);
    t->ops->free(t);
    if (t->be) pt_backend_destroy(t->be);
    t->ops->stop(t);
}

// ---------------------------------------------------------------- the run

int pt_train(const pt_train_args *args) {
    pt_trainer t;
    trainer_init(&t, args);
    int rc = -1;
    if (setup(&t) == 0 && setup_resume(&t) == 0 && setup_outputs(&t) == 0 && pt_train_loop(&t, &rc) == 0 &&
        finish_run(&t, &rc) == 0)
        rc = 0;
    report_error(&t, rc);
    cleanup(&t);
    return rc;
}
