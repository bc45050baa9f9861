// The acceptance suite: baseline vs candidate platform from the same
// frozen inputs, convergence, checkpoint portability both ways, recovery from
// a killed worker, cost per accepted outcome, and report.json/html/md.
// See docs/ACCEPT.md.
#pragma once
#include <stdbool.h>
#include <stdint.h>

// SPEC = backend[:precision][:tp=N][:dp=N][:fsdp=N], e.g. "cpu-ref:fp32".
typedef struct {
    char text[96];
    char backend[32];
    char precision[16];
    bool tf32;             // ":tf32": train --tf32 (fp32 GEMMs on TF32 tensor cores, cuda)
    int tp, dp, fsdp;
} pt_platform;

// 0, or -1 with an error naming the SPEC (unknown backend, precision or
// layout this build cannot run).
int pt_platform_parse(const char *spec, pt_platform *out);
// tp x dp x fsdp: the ranks its runs start (1: a single process).
int pt_platform_ranks(const pt_platform *p);
// The tolerance profile a run on b is judged with against one on a when none is named (accept and compare):
// "exact" for the same platform (backend, precision, TF32 and layout), "bf16" when either side computes in
// bf16 or with TF32 GEMMs, else "fp32". *why (may be NULL) receives the reason, a static string.
const char *pt_platform_pair_profile(const pt_platform *a, const pt_platform *b, const char **why);


typedef struct {
    pt_platform baseline, candidate;
    const char *output_dir;      // the report directory
    const char *model_dir;       // initial HF model dir; NULL: init from config_path
    const char *config_path;     // HF Qwen3 config.json for the init
    uint64_t init_seed;
    const char *tokenizer_dir;   // tokenizer.json (+ tokenizer_config.json) copied into the init dir
    const char *train_data, *eval_data;
    const char *baseline_run;    // reuse a recorded baseline run (its frozen inputs must match)
    const char *price_table;     // configs/prices.json
    const char *launcher;        // starts a layout's ranks: LAUNCHER -np N portatrain train ... ("mpirun")
    const char *profile;         // NULL: exact for the same platform, else by precision
    long steps;                  // training steps per run
    long checkpoint_step;        // the mid-run checkpoint used for portability
    long recovery_save_steps;    // checkpoint interval of the recovery run
    int seq_len, batch, eval_batches;  // batch: per step and micro-batch, over all data ranks (fsdp x dp)
    double learning_rate, weight_decay, max_grad_norm;
    long warmup_steps;
    uint64_t seed;               // training seed; also picks the kill step
    // The training recipe beyond the flags above, as train's flags with HF's names for keys (e.g.
    // "gradient_accumulation_steps": 2, "lr_scheduler_type": "linear", "shuffle": true): every run of the
    // suite trains with it. NULL or absent keys: a --baseline-run's recorded values, else train's defaults
    // with a cosine schedule. A key that differs from the recorded baseline's is refused (exit 2).
    struct cJSON *recipe;
    int seeds;                   // seeds per side (0, 1: one; accept_seeds.c)
    const char *test_fault;      // test-only: "corrupt-checkpoint", "recovery-skip-batch"
    const char *determinism;     // recovery rule: "auto" (NULL), "bitwise" or "envelope" (accept_noise.h)
    bool quiet;
} pt_accept_opts;

void pt_accept_defaults(pt_accept_opts *o);
// 0 ACCEPTED, 1 REJECTED, 2 REFUSED or unusable input (pt_last_error set).
// Writes OUTPUT/report.json, report.html, report.md whenever it got far
// enough to judge anything.
int pt_accept(const pt_accept_opts *o);
