// The trainer's parts (train/trainer.h has the interface): the run's context,
// the runtime a process trains under, start-up agreement, the non-finite
// policy and the loop. One process is a world of one: the loop calls the
// runtime's operations and never asks which runtime it has.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/parallel.h"
#include "io/checkpoint.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/train_state.h"
#include "train/trainer.h"

typedef struct pt_trainer pt_trainer;
typedef struct pt_runtime_ops pt_runtime_ops;

// Non-finite steps (--nan-policy, docs/RECOVERY.md).
typedef struct {
    int handled;      // non-finite steps handled so far
    int n_rolled;     // steps that caused a rollback (skipped if they fail again)
    long rolled[64];
    long rb_first, rb_from;  // the step the last rollback restored (-1: none), and the step that caused it
    double rb_time;
} pt_nonfinite;

struct pt_trainer {
    const pt_train_args *args;  // the caller's
    pt_train_args a;            // resolved (max_steps from --num-train-epochs, ...)
    const pt_runtime_ops *ops;
    pt_lr_schedule sched;
    pt_comm *world;  // NULL on a single process
    pt_parallel *P;  // the parallel runtime's state (NULL on a single process)
    int rank;
    pt_backend *be;
    qwen3_model model;   // a single process's model (a parallel job: the layout while loading)
    qwen3_model *mdl;    // the model the step runs
    const qwen3_config *gcfg;  // the global model config
    pt_adamw opt;
    pt_loader *loader;
    pt_metrics_writer *metrics;  // rank 0
    int32_t *ids, *labels;
    pt_run_hashes hashes;
    ckpt *resume_ckpt;  // the checkpoint a resume starts from (resolve_epochs)
    char resume_open_error[1024];
    double resume_open_s, restore_time;
    char *ckpt_record;  // the resumed checkpoint's metrics line
    bool made_output_dir;
    int data_world, data_rank, rows_per_step;
    long start_step;
    bool collective_error;  // the error is the same on every rank (or agreed on)
    double flops_tok;
    pt_nonfinite nf;
    double t_start, loss_first, loss_last, loss_min;  // the loop's, for the summary line
    double *rank_rss;  // a parallel step's peak RSS of every rank
};

// What a process trains under: the single process (runtime_single.c) or a
// rank of the parallel runtime (runtime_parallel.c, over dist/parallel.h).
struct pt_runtime_ops {
    // Start-up, before anything else: a distributed job joins its world here.
    int (*start)(pt_trainer *t);
    // Whether every rank is ready: ok is this rank's verdict (its error set when not); inputs (optional) are
    // compared across ranks. 0, or -1 with the same error on every rank.
    int (*agree)(pt_trainer *t, int ok, const pt_run_hashes *inputs);
    // After the set-up's agreement: whether every rank sees the output dir rank 0 made.
    int (*output_dir_shared)(pt_trainer *t);
    // --model into the runtime (t->mdl, t->gcfg) and the run's config and initial-weights hashes.
    int (*load_model)(pt_trainer *t);
    // Gradients and optimizer state; refuses what the runtime cannot run (a precision).
    int (*init_train_state)(pt_trainer *t);
    // The start-of-training line (rank 0, unless --quiet).
    void (*banner)(pt_trainer *t);
    bool mixed_precision;  // runs --precision other than fp32
    // The sums over data-parallel ranks, in rank order (n values, in place; identical on every rank).
    void (*data_sum)(pt_trainer *t, double *v, int n);
    void (*zero_grads)(pt_trainer *t);
    // After the step's micro-batches: the gradients and *loss_sum become the global batch's.
    void (*finish_grads)(pt_trainer *t, double *loss_sum);
    // The test-only fault hooks around the update (train/faults.h), where the runtime has them.
    void (*fault_after_backward)(pt_trainer *t, long step, double *loss);
    double (*grad_norm)(pt_trainer *t);
    // Clip to --max-grad-norm, then one AdamW update at lr (opt.t counts it).
    void (*update)(pt_trainer *t, long step, double gnorm, double lr);
    // The record's memory (and communication) fields for the step that began at `at_start`.
    void (*record_step)(pt_trainer *t, const pt_comm_stats *at_start, pt_metrics_step *r);
    // A checkpoint of `step` (PT_SAVE_NONFINITE: refused, nothing written).
    int (*save)(pt_trainer *t, long step, const cJSON *state, ckpt_save_stats *ss);
    int (*load_ckpt)(pt_trainer *t, ckpt *c);
    // rank 0's value on every rank
    long (*broadcast_long)(pt_trainer *t, long v);
    // Whether the final weights are all finite (on every rank); the error is collective when not.
    int (*final_weights_finite)(pt_trainer *t);
    // The final HF model into --output-dir; sets t->collective_error as fits the runtime.
    int (*save_final)(pt_trainer *t);
    // Releases the runtime's model state (before the backend goes), then leaves the world (after it).
    void (*free)(pt_trainer *t);
    void (*stop)(pt_trainer *t);
};

extern const pt_runtime_ops pt_runtime_single, pt_runtime_parallel;

// trainer.c: the pieces of the set-up the runtimes and the loop share.
cJSON *pt_trainer_args_json(const pt_train_args *a);
void pt_trainer_set_layout(const pt_parallel *P);  // what train_args.json records of a distributed run
void pt_trainer_set_usage_error(int usage);
int pt_trainer_usage_error_now(void);
// The checks of a loaded model (its config) every runtime makes.
int pt_trainer_check_model(pt_trainer *t);
// The mesh of a distributed run from the flags, validated against the world and the model (usage errors).
int pt_trainer_mesh(pt_trainer *t, pt_mesh *mesh);
double pt_trainer_rss_peak_mib(void);
long pt_trainer_resume(pt_trainer *t, ckpt *c);
cJSON *pt_trainer_state_json(pt_trainer *t, long step);
void pt_trainer_heartbeat(pt_trainer *t, long step, const char *phase);

// startup.c: a distributed job's start-up agreement.
int pt_startup_begin(pt_comm **world);
void pt_startup_end_alarm(void);
int pt_startup_agree(pt_comm *world, int ok, const pt_train_args *a, const pt_run_hashes *inputs);
int pt_startup_output_dir_shared(pt_comm *world, const pt_train_args *a);

// nonfinite.c: --nan-policy for a step whose loss or gradient norm is not finite.
enum { PT_NF_SKIP, PT_NF_ROLLED_BACK, PT_NF_FAIL };
// PT_NF_SKIP: skip the batch (*skip_reason set); PT_NF_ROLLED_BACK: continue after step *back; PT_NF_FAIL:
// stop (error set; rc PT_TRAIN_NONFINITE or -1).
int pt_nonfinite_step(pt_trainer *t, long step, double loss, double gnorm, const char **skip_reason, long *back,
                      int *rc);

// train_loop.c: the steps from t->start_step to --max-steps. 0, or an error with rc.
int pt_train_loop(pt_trainer *t, int *rc);
