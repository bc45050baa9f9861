// A platform's run-to-run noise and the rule its recovery is judged by (accept_noise.c, docs/ACCEPT.md,
// "Determinism"). Used by the recovery phase (accept_recovery.c).
#pragma once
#include "harness/accept_internal.h"

// How two runs of the same recipe differ.
typedef struct {
    double loss_rel, gnorm_rel;  // max per-step |a - b| / max(|a|, |b|) of the loss and of the grad norm
    long loss_step, gnorm_step;  // where each maximum is (0: none differs)
    double weights_rel_l2;       // ||a - b|| / ||a|| over every tensor of model.safetensors
    bool identical;              // every step's loss and grad norm and the weights file bitwise equal
} acc_spread;

// The rule for one platform: measured (two same-seed runs), then chosen by --determinism.
typedef struct {
    acc_spread noise;   // the candidate's run against its same-seed rerun
    bool envelope;      // judged within the envelope, else bitwise
    bool declared_bitwise_but_not;  // --determinism bitwise on a platform whose reruns differ
    double tol_loss, tol_gnorm, tol_weights;  // the envelope: margin x spread, at least the fp32 floor
    char why[1024];     // the rule and the measurement in words
} acc_rule;

// 0, or -1 naming the flag: --determinism must be auto, bitwise or envelope (NULL: auto).
int acc_check_determinism(const pt_accept_opts *o);
// Trains the candidate a second time with the same seed (OUT/noise, billed as run "noise"), measures the
// spread against its first run and picks the rule; r's "determinism" object says which and why. -1 (error
// set) when the rerun did not train or could not be compared.
int acc_determinism(acc_ctx *c, const run_t *cand, acc_rule *rule, cJSON *r);
// Runs a and b (metrics.jsonl and model.safetensors) -> s; -1 with the error set when unreadable.
int acc_run_spread(const char *dir_a, const char *dir_b, acc_spread *s);
// The recovered run (dir) against the uninterrupted one under the envelope: true when every step and the
// final weights lie within it; detail names the measured differences and the tolerances.
bool acc_within_envelope(const acc_rule *rule, const char *uninterrupted, const char *dir, cJSON *r, char *detail,
                         size_t dn);
