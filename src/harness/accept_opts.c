// The checks of accept's options that need no run: each a one-line error naming the flag.
#define _GNU_SOURCE
#include "harness/accept_internal.h"
#include "harness/accept_noise.h"
#include "util/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Whether path (an existing file or dir) lies inside dir (or is it). A dir
// that does not exist yet holds nothing.
static bool path_inside(const char *path, const char *dir) {
    char *src = realpath(path, NULL), *d = realpath(dir, NULL);
    bool inside = false;
    if (src && d) {
        const size_t n = strlen(d);
        inside = strncmp(src, d, n) == 0 && (src[n] == 0 || src[n] == '/' || (n == 1 && d[0] == '/'));
    }
    free(src);
    free(d);
    return inside;
}

// What the suite empties under OUT before a run (init only when it makes the
// initial model itself); the stale report goes too, so that an interrupted
// or failed rerun never leaves an old verdict next to new runs.
const char *const acc_rewritten[] = {"baseline", "candidate", "portability", "recovery", "rerun", "audit", "init",
                                     "seeds"};
const char *const acc_old_files[] = {"report.json", "report.html", "report.md", "logs/init.log", "logs/baseline.log",
    "logs/eval_baseline.log", "logs/candidate.log", "logs/eval_candidate.log", "logs/candidate_from_baseline.log",
    "logs/baseline_from_candidate.log", "logs/recovery.log", "logs/rerun.log", "logs/audit_baseline.log",
    "logs/audit_candidate.log"};
const size_t acc_n_rewritten = PT_ARRAY_LEN(acc_rewritten);
const size_t acc_n_old_files = PT_ARRAY_LEN(acc_old_files);

// The suite empties OUT/baseline (and the other run directories under OUT)
// before it reads --baseline-run: a source there would be deleted first.
static int baseline_inside_output(const pt_accept_opts *o) {
    if (o->baseline_run && path_inside(o->baseline_run, o->output_dir)) {
        pt_set_error("accept: --baseline-run %s: lies inside --output-dir %s, which the suite rewrites "
                     "(copy the run elsewhere first)",
                     o->baseline_run, o->output_dir);
        return -1;
    }
    return 0;
}

// Any other input in a directory the suite empties would vanish under it.
static int input_inside_output(const pt_accept_opts *o) {
    const char *in[][2] = {{o->model_dir, "--model"}, {o->model_dir ? NULL : o->config_path, "--config"},
                           {o->model_dir ? NULL : o->tokenizer_dir, "--tokenizer-dir"}, {o->train_data, "--train-data"},
                           {o->eval_data, "--eval-data"}, {o->price_table, "--price-table"}};
    for (size_t k = 0; k < PT_ARRAY_LEN(acc_rewritten); k++) {
        if (!strcmp(acc_rewritten[k], "init") && o->model_dir) continue;
        char *d = pt_path_join(o->output_dir, acc_rewritten[k]);
        for (size_t i = 0; i < PT_ARRAY_LEN(in); i++)
            if (in[i][0] && path_inside(in[i][0], d)) {
                pt_set_error("accept: %s %s: lies inside %s, which the suite empties before it runs "
                             "(copy it elsewhere first)", in[i][1], in[i][0], d);
                free(d);
                return -1;
            }
        free(d);
    }
    return 0;
}

// Whether the launcher's first word is an executable (a path, or a name on PATH).
static bool launcher_found(const char *launcher) {
    char prog[512];
    if (!launcher || sscanf(launcher, " %511s", prog) != 1) return false;
    if (strchr(prog, '/')) return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    char *dirs = pt_strdup(path ? path : "/usr/bin:/bin");
    bool found = false;
    for (char *sv = NULL, *d = strtok_r(dirs, ":", &sv); d && !found; d = strtok_r(NULL, ":", &sv)) {
        char *f = pt_path_join(d, prog);
        found = access(f, X_OK) == 0;
        free(f);
    }
    free(dirs);
    return found;
}

int acc_check_opts(const pt_accept_opts *o) {
    if (!o->output_dir || !*o->output_dir) { pt_set_error("accept: --output-dir is empty"); return -1; }
    if (baseline_inside_output(o) != 0) return -1;
    if (o->steps < 8) { pt_set_error("accept: --steps %ld: at least 8 (checkpoint, kill and final window need room)", o->steps); return -1; }
    if (o->checkpoint_step < 1 || o->checkpoint_step >= o->steps) {
        pt_set_error("accept: --checkpoint-step %ld: must be in [1, %ld)", o->checkpoint_step, o->steps);
        return -1;
    }
    if (o->recovery_save_steps < 1 || o->recovery_save_steps >= o->steps - 1) {
        pt_set_error("accept: --recovery-save-steps %ld: must be in [1, %ld)", o->recovery_save_steps, o->steps - 1);
        return -1;
    }
    const char *need[][2] = {{o->train_data, "--train-data"}, {o->eval_data, "--eval-data"}, {o->price_table, "--price-table"}};
    for (size_t i = 0; i < PT_ARRAY_LEN(need); i++)
        if (!need[i][0] || !pt_file_exists(need[i][0])) {
            pt_set_error("accept: %s %s: not found%s", need[i][1], need[i][0] ? need[i][0] : "(none)",
                         i < 2 ? " (scripts/fetch_demo_data.sh fetches the demo data)" : "");
            return -1;
        }
    if (!o->model_dir && !pt_file_exists(o->config_path)) { pt_set_error("accept: --config %s: not found", o->config_path); return -1; }
    if (o->model_dir && !pt_is_dir(o->model_dir)) { pt_set_error("accept: --model %s: not a directory", o->model_dir); return -1; }
    const pt_platform *pls[] = {&o->baseline, &o->candidate};
    for (int i = 0; i < 2; i++) {
        const int data = pls[i]->fsdp * pls[i]->dp;
        if (o->batch % data != 0) {
            pt_set_error("accept: --per-device-train-batch-size %d: platform %s splits each batch over %d data ranks "
                         "(fsdp x dp), which do not divide it (every platform trains on the same global batch)",
                         o->batch, pls[i]->text, data);
            return -1;
        }
        if (pt_platform_ranks(pls[i]) > 1 && !launcher_found(o->launcher)) {
            pt_set_error("accept: --launcher '%s': not found on PATH (platform %s runs %d ranks with it; "
                         "scripts/deps.sh installs Open MPI's mpirun)", o->launcher ? o->launcher : "",
                         pls[i]->text, pt_platform_ranks(pls[i]));
            return -1;
        }
    }
    if (o->test_fault && strcmp(o->test_fault, "corrupt-checkpoint") && strcmp(o->test_fault, "recovery-skip-batch")) {
        pt_set_error("accept: --test-fault %s: the test faults are corrupt-checkpoint and recovery-skip-batch",
                     o->test_fault);
        return -1;
    }
    if (acc_seeds_check_opts(o) != 0) return -1;
    if (acc_check_determinism(o) != 0) return -1;
    return input_inside_output(o);
}
