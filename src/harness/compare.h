// Compare two runs (or imported run logs) and give a convergence verdict. See docs/COMPARE.md.
#pragma once
#include "cJSON.h"

typedef struct {
    const char *profile;          // "exact", "fp32" (default), "bf16", "custom"
    const char *tolerances_path;  // custom: JSON object with the tolerance keys
    const char *format_a, *format_b;  // NULL = auto
} pt_compare_opts;

// 0 ACCEPTED, 1 REJECTED, 2 REFUSED/cannot compare (pt_last_error set when input is bad).
// *out (may be NULL) receives the full JSON result, caller frees.
int pt_compare_runs(const char *run_a, const char *run_b, const pt_compare_opts *o, cJSON **out);
