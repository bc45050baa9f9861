// Test-only fault hooks. `train --inject SPEC[,SPEC...]` arms them through
// environment variables (the supervisor arms them per worker attempt and never
// re-arms one that fired; without --supervise they are armed in-process).
// Each variable holds a comma-separated list of 1-based steps, "S" (every
// rank) or "S@R" (world rank R only: kill:rank=R:step=S):
//   PT_FAULT_KILL_AFTER_STEP     kill:step=S               SIGKILL right after step S is logged
//   PT_FAULT_KILL_IN_SAVE_STEP   kill:step=S:phase=save    SIGKILL inside the checkpoint save of step S
//   PT_FAULT_HANG_AFTER_STEP     hang:step=S               stop making progress after step S (sleeps)
//   PT_FAULT_NAN_STEP            nan:step=S                after backward of step S: one gradient value and
//                                                          the loss become NaN (every time step S is computed
//                                                          in the process: a "bad batch", so replays see it too)
//   PT_FAULT_NAN_GRAD_STEP       nan:step=S:target=grad    only a gradient value (loss stays finite)
//   PT_FAULT_NAN_WEIGHTS_STEP    nan:step=S:target=weights one master weight becomes NaN after the update of
//                                                          step S, bypassing detection (tests the save guard)
//   PT_FAULT_CORRUPT_CKPT_STEP   corrupt-checkpoint:step=S after checkpoint S is committed, flip bytes in its
//                                                          tensor file (resume must detect it and fall back)
//   PT_FAULT_ENOSPC_STEP         enospc:step=S             the save of step S fails with ENOSPC partway
// PT_FAULT_SLOW_SAVE_S=X (no --inject spec): every checkpoint save starts X seconds late, a slow disk.
// step=random picks a step in [1, --max-steps] from PT_INJECT_SEED (or the
// clock); the choice is printed.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "model/qwen3.h"

typedef enum {
    PT_FAULT_KILL,
    PT_FAULT_KILL_SAVE,
    PT_FAULT_HANG,
    PT_FAULT_NAN,
    PT_FAULT_NAN_GRAD,
    PT_FAULT_NAN_WEIGHTS,
    PT_FAULT_CORRUPT_CKPT,
    PT_FAULT_ENOSPC,
    PT_FAULT_NKINDS
} pt_fault_kind;

typedef struct {
    int kind;   // pt_fault_kind
    long step;  // 1-based; -1 = random until pt_fault_resolve_random
    int rank;   // world rank it fires on (rank=R); -1 = every rank; -2 = random until resolved
} pt_fault;

// This process's world rank under an MPI launcher (0 otherwise).
int pt_fault_my_rank(void);

// Orders faults by step (stable), so the supervisor arms them in the order a
// run meets them whatever order --inject listed them in.
void pt_fault_sort(pt_fault *f, int n);
const char *pt_fault_env_var(int kind);
const char *pt_fault_name(int kind);  // kill, kill-save, hang, nan, ...
// Faults that end the worker attempt by themselves (kill, hang, enospc); the
// others (nan, corrupt-checkpoint) are armed together with the next one.
bool pt_fault_ends_attempt(int kind);
// Faults that model bad data (nan and nan:target=grad: a bad batch): every computation of their step meets
// them, a restarted worker's replay too, so a supervisor arms them on every attempt.
bool pt_fault_recurs(int kind);
// Parses "kill:step=S,hang:step=S,nan:step=S:target=grad,..." (appends to f).
int pt_fault_parse(const char *spec, pt_fault *f, int max, int *n);
// Replaces step=random with a step in [1, max_steps] and rank=random with a
// rank in [0, world). -1 (pt_set_error) for a random step without max_steps
// (--num-train-epochs alone: the step count is known only once the data is open).
int pt_fault_resolve_random(pt_fault *f, int n, long max_steps, int world);
// Appends the fault's step to its environment variable.
void pt_fault_arm(const pt_fault *f);
void pt_fault_disarm_all(void);

// Hooks (1-based step).
void pt_fault_before_save(long step);
void pt_fault_after_save(long step, const char *checkpoint_dir);
// After the backward pass, before the non-finite check; may poison *loss and a gradient.
void pt_fault_after_backward(long step, qwen3_model *m, double *loss);
// After the optimizer update.
void pt_fault_after_update(long step, qwen3_model *m);
// After step `step` is fully logged.
void pt_fault_after_step(long step);
// PT_FAULT_LR_SCALE=F[@BACKEND] (no --inject spec): the run trains with its learning rate times F (only on
// backend BACKEND when given), while its flags and manifest still name the unscaled rate: a platform that
// silently converges slower. Tests use it on one side of `accept --seeds`. 1 when unset or not this backend.
double pt_fault_lr_scale(const char *backend);
