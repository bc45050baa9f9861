// accept of platforms portatrain does not run: each side is an evidence directory, what a foreign trainer
// (TorchTitan, HF Trainer, or portatrain itself) left behind, named by evidence.json (docs/ACCEPT.md,
// "Platforms portatrain does not run"):
//   accept_evidence.c        evidence.json and the recipe its trainer's configuration names
//   accept_evidence_judge.c  the referee, the continuation, the restart, the cost and the verdict
#pragma once
#include "harness/accept_internal.h"
#include "harness/runlog.h"

#define ACC_EV_PREFIX "evidence:"
enum { ACC_EV_MAX_CKPT = 64 };

typedef struct {
    char *dir;            // the evidence directory
    char *manifest;       // DIR/evidence.json
    cJSON *man;           // its contents
    char name[96];        // platform.name, else the trainer and the directory
    char *log_path;       // the trainer's console or metrics log (compare's importers read it)
    const char *log_format;  // NULL: compare's detection
    pt_runlog log;
    char *config_path;    // the trainer's configuration
    char *model_config;   // config.json for checkpoints without one (TorchTitan's HF export)
    cJSON *recipe;        // {learning_rate, global_batch_size, seq_len, steps, warmup_steps, weight_decay, seed,
                          //  precision, max_grad_norm}: the fields the configuration has
    long ck_step[ACC_EV_MAX_CKPT];
    char *ck_dir[ACC_EV_MAX_CKPT];
    int nck;
    char *cont_log;       // a continuation of the other platform's checkpoint (NULL: none)
    long cont_from;       // the step of that checkpoint
    char *restart_log;    // a run with a failure and its restart (NULL: none)
    const cJSON *platform;  // the platform record (in man; NULL: none)
} acc_ev_side;

// "evidence:DIR" -> DIR, else NULL.
const char *acc_ev_dir_of(const char *spec);
// Reads DIR/evidence.json and every file it names. 0, or -1 with one line naming the file and field.
int acc_ev_load(acc_ev_side *s, const char *dir);
void acc_ev_free(acc_ev_side *s);
// The recipe fields of both sides: {fields[{field, baseline, candidate, match}], differences}; *ndiff receives
// how many differ.
cJSON *acc_ev_recipe_compare(const acc_ev_side *a, const acc_ev_side *b, int *ndiff);
// sha256 of every file the evidence names: {relative name: sha256}.
cJSON *acc_ev_hashes(const acc_ev_side *s);

// accept_evidence_judge.c: the acceptance of two evidence directories; waive: sections named by --waive
// (comma-separated: referee, portability, recovery, cost). 0 ACCEPTED, 1 REJECTED, 2 REFUSED or bad input.
int pt_accept_evidence(const pt_accept_opts *o, const char *base_spec, const char *cand_spec, const char *waive);
