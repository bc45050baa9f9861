#define _POSIX_C_SOURCE 200809L
#include "train/faults.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static long env_step(const char *name) {
    const char *v = getenv(name);
    return v ? atol(v) : -1;
}

void pt_fault_before_save(long step) {
    // Reuses the checkpoint writer's own crash switch: dies after the tensors
    // are written but before the manifest, the nastiest moment of a save.
    if (env_step("PT_FAULT_KILL_IN_SAVE_STEP") == step) setenv("PT_CKPT_CRASH_AT", "tensors-written", 1);
}

void pt_fault_after_step(long step) {
    if (env_step("PT_FAULT_KILL_AFTER_STEP") == step) raise(SIGKILL);
    if (env_step("PT_FAULT_HANG_AFTER_STEP") == step)
        for (;;) pause();  // a hung rank: alive, no progress
}
