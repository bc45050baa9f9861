// Test-only fault hooks the supervisor arms through the environment
// (each variable names one step; the supervisor never re-arms a fired fault):
//   PT_FAULT_KILL_AFTER_STEP=S     SIGKILL right after step S is logged
//   PT_FAULT_HANG_AFTER_STEP=S     stop making progress after step S (sleeps)
//   PT_FAULT_KILL_IN_SAVE_STEP=S   SIGKILL inside the checkpoint save of step S
#pragma once

// Before the checkpoint save of 1-based step `step`.
void pt_fault_before_save(long step);
// After step `step` is fully logged.
void pt_fault_after_step(long step);
