// Test-only wrong kernels of the cpu backend (cpu_faults.c).
#pragma once
#include "backend/backend.h"

// PT_FAULT_KERNEL=NAME (cpu_faults.c lists them): points be->ops at a copy of its
// table with that one kernel wrong, and warns. Unset or empty: nothing; any
// other value: a warning, nothing else.
void pt_cpu_fault_kernels(pt_backend *be);
