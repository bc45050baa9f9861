// What the files of the acceptance suite share (not part of its API, accept.h):
//   accept.c           platform SPECs, options' defaults, metrics.jsonl reading, the training recipe
//   accept_opts.c      checks of the options before anything runs
//   accept_child.c     the suite's messages and phases, its child runs and their train flags
//   accept_files.c     checkpoint transfer, fault injection, input hashes
//   accept_phases.c    training, eval, convergence and portability
//   accept_recovery.c  the supervised run with a killed worker
//   accept_seeds.c     --seeds K: the other seeds' runs, steps to target and per-step envelopes
//   accept_noise.c     the candidate's run-to-run noise and the recovery's rule (accept_noise.h)
//   accept_audit.c     the step-1 audit: per-tensor gradients and updates of both platforms
//   accept_cost.c      the price table and the cost section
//   accept_report.c    report.json's sections and the verdict line
//   accept_suite.c     pt_accept: the phases in order
//   accept_evidence*.c platforms portatrain does not run, judged from what their trainers left (accept_evidence.h)
#pragma once
#include "harness/accept.h"
#include "util/common.h"
#include "util/json.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    long step;
    double loss, grad_norm, step_time_s, tokens_per_s, save_time_s, restore_time_s;
    long tokens, save_bytes;
} metric_row;

typedef struct {
    metric_row *rows;
    int n;
} metrics_t;

typedef struct {
    const pt_platform *pl;
    const char *role;   // "baseline" / "candidate"
    char *dir;
    metrics_t m;
    double eval_loss;
    bool ok;            // trained and evaluated
} run_t;

typedef struct {
    const pt_accept_opts *o;
    char exe_path[4096];  // the binary's path, for a launcher that starts it on every rank
    char *out;          // report dir
    char *logs;         // OUT/logs
    char *model;        // initial model dir
    bool tty;
    cJSON *phases;      // [{run, phase, seconds, platform}]
    cJSON *reasons;     // verdict reasons
    long tokens;        // tokens trained over the whole experiment
    // The training recipe beyond accept's fixed flags (the data loader's semantics, the LR schedule, gradient
    // accumulation, AdamW's betas and epsilon): the user's --gradient-accumulation-steps etc., else a recorded
    // --baseline-run's values, else train's defaults with a cosine schedule. Every run of the suite trains
    // with it, as train's flags (recipe_argv), and report.json's settings name it.
    cJSON *recipe;
    char *recipe_argv[24];
    int recipe_argc;
    // The suite's results, filled phase by phase.
    cJSON *prices;      // the price table
    char cpu[256];      // the host CPU's model name
    double t_start;
    run_t base, cand;
    cJSON *cmp;         // compare's result of baseline vs candidate
    cJSON *port;        // [portability both ways]
    cJSON *rec;         // recovery
    cJSON *seeds;       // --seeds K >= 2: report.json's seeds section
    cJSON *audit;       // the step-1 audit
    cJSON *evidence;    // evidence platforms (accept_evidence.h): report.json's "evidence"; NULL for runs
    cJSON *ev_cost;     // and their cost section, priced from the evidence's platform records
    const char *refused;
} acc_ctx;

static inline double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

// accept.c
int acc_metrics_load(const char *run_dir, metrics_t *m);  // RUN/metrics.jsonl; -1 naming file and line
long acc_last_step_in(const char *metrics_path);          // its newest complete step, -1: none
int acc_build_recipe(acc_ctx *c, const char *base_dir);
void acc_free_recipe(acc_ctx *c);

// accept_opts.c
int acc_check_opts(const pt_accept_opts *o);
// What the suite empties under OUT before a run.
extern const char *const acc_rewritten[];
extern const size_t acc_n_rewritten;
extern const char *const acc_old_files[];
extern const size_t acc_n_old_files;

// accept_child.c
char *acc_xprintf(const char *fmt, ...) PT_PRINTF(1, 2);
void acc_say(acc_ctx *c, const char *fmt, ...) PT_PRINTF(2, 3);
void acc_add_reason(acc_ctx *c, const char *fmt, ...) PT_PRINTF(2, 3);
void acc_add_phase(acc_ctx *c, const char *run, const pt_platform *pl, const char *phase, double seconds);
void acc_fmt_duration(double s, char *out, size_t n);
// The shortest text (of %.15g, %.17g) that reads back as the same double: a flag's value as typed.
void acc_exact_double(char *buf, size_t n, double x);

typedef struct {
    const char *metrics;  // progress source (NULL: none)
    long from, to;        // steps
} progress_src;
// Runs `portatrain ARGS...` (ranks > 1: `LAUNCHER -np RANKS portatrain ARGS...`) with stdout to stdout_path
// (or the log) and stderr to OUT/logs/LOG_NAME.log. Returns the exit status (or 128+signal), -1 if it could
// not start; *wall = seconds it ran.
int acc_run_child(acc_ctx *c, const char *label, const char *log_name, const char *stdout_path,
                  const progress_src *prog, double *wall, int ranks, char **args);

// Arguments of one training run; every run of the suite differs only in
// backend, output directory, checkpointing and resume/supervision.
typedef struct {
    char *v[96];  // ~60 at most: the fixed flags, a baseline's inherited ones, resume or supervision
    int n;
    char num[24][32];
    int nn;
} argbuf;
void acc_ab_add(argbuf *a, const char *s);
void acc_train_args(acc_ctx *c, argbuf *a, const pt_platform *pl, const char *out_dir, long save_steps);

// accept_files.c
int acc_copy_file(const char *src, const char *dst);
int acc_copy_dir(const char *src, const char *dst);
int acc_corrupt_checkpoint(const char *ckpt_dir, char *what, size_t n);
int acc_sha256_path(const char *path, char hex[65]);
int acc_files_equal(const char *a, const char *b);

// accept_phases.c
const metric_row *acc_metrics_at(const metrics_t *m, long step);
void acc_metrics_phases(const metrics_t *m, long from_step, double *train_s, double *save_s, long *tokens);
int acc_run_threads(const char *run_dir);
int acc_train_run(acc_ctx *c, run_t *r, long save_steps);
int acc_eval_run(acc_ctx *c, run_t *r, const char *model_dir, const char *phase_run);
const char *acc_pair_profile(acc_ctx *c, const pt_platform *a, const pt_platform *b);
int acc_convergence(acc_ctx *c);
cJSON *acc_portability(acc_ctx *c, run_t *writer, const pt_platform *reader, const char *name);

// accept_recovery.c
cJSON *acc_recovery(acc_ctx *c, run_t *cand);

// accept_seeds.c
int acc_seeds_check_opts(const pt_accept_opts *o);
void acc_seeds(acc_ctx *c);  // K >= 2: trains seeds 1..K-1 of both sides and judges all K (reasons added)
// accept_audit.c: trains both platforms' audit runs, compares their dumps into c->audit and adds a reason for
// a tensor outside tolerance or a dump not shown.
void acc_audit(acc_ctx *c);

// accept_cost.c
int acc_check_prices(const pt_accept_opts *o, const cJSON *prices);
cJSON *acc_cost_section(acc_ctx *c, const cJSON *table, const pt_platform *base, const pt_platform *cand,
                        int threads_base, int threads_cand, bool accepted, const char *cpu);

// accept_report.c
// Writes OUT/report.json, .html and .md for the verdict (0, 1, 2) and prints it; the verdict, 2 when the
// report could not be written.
int acc_report(acc_ctx *c, int verdict);
