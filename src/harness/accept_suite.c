// pt_accept: the acceptance suite as a list of phases (accept_internal.h names the files of each).
#define _GNU_SOURCE
#include "harness/accept_internal.h"
#include "util/fileio.h"
#include "util/proc.h"
#include "util/sysinfo.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int prepare_model(acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    if (o->model_dir) {
        c->model = pt_strdup(o->model_dir);
        return 0;
    }
    c->model = acc_xprintf("%s/init", c->out);
    pt_remove_tree(c->model);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->init_seed);
    char *args[] = {"init", "--config", (char *)o->config_path, "--seed", seed, "--output-dir", c->model, NULL};
    progress_src pr = {NULL, 0, 0};
    double wall;
    static const pt_platform shared = {.text = "shared"};
    if (acc_run_child(c, "init (seeded weights)", "init", NULL, &pr, &wall, 1, args) != 0) return -1;
    acc_add_phase(c, "init", &shared, "start-up", wall);
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < PT_ARRAY_LEN(files); i++) {
        char *s = pt_path_join(o->tokenizer_dir, files[i]), *d = pt_path_join(c->model, files[i]);
        int rc = 0;
        if (pt_file_exists(s)) rc = acc_copy_file(s, d);
        else if (i == 0) { pt_set_error("%s: missing (--tokenizer-dir)", s); rc = -1; }
        free(s); free(d);
        if (rc) return -1;
    }
    return 0;
}

// A recorded baseline run: linked into OUT/baseline so compare and the
// report read it; eval.json is produced when it has none.
static int adopt_baseline(acc_ctx *c, run_t *b) {
    const char *src = c->o->baseline_run;
    char *mp = pt_path_join(src, "metrics.jsonl");
    if (!pt_file_exists(mp)) {
        pt_set_error("--baseline-run %s: no metrics.jsonl (not a portatrain run directory)", src);
        free(mp);
        return -1;
    }
    free(mp);
    char *abs = realpath(src, NULL);
    if (!abs) { pt_set_error("--baseline-run %s: %s", src, strerror(errno)); return -1; }
    pt_remove_tree(b->dir);
    pt_mkdir_p(b->dir);
    DIR *d = opendir(abs);
    int rc = d ? 0 : -1;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "eval.json")) continue;
        char *s = pt_path_join(abs, e->d_name), *t = pt_path_join(b->dir, e->d_name);
        if (symlink(s, t) != 0) { pt_set_error("%s: %s", t, strerror(errno)); rc = -1; }
        free(s); free(t);
    }
    if (d) closedir(d);
    char *ev = pt_path_join(abs, "eval.json"), *evd = pt_path_join(b->dir, "eval.json");
    if (rc == 0 && pt_file_exists(ev)) rc = acc_copy_file(ev, evd);
    free(ev); free(evd); free(abs);
    if (rc != 0) return -1;
    return acc_metrics_load(b->dir, &b->m);
}

// The baseline: a recorded run adopted (and evaluated when it has no eval.json), else trained and evaluated.
static int baseline(acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    if (!o->baseline_run) {
        if (acc_train_run(c, &c->base, o->checkpoint_step) != 0) return -1;
        return acc_eval_run(c, &c->base, c->base.dir, "baseline");
    }
    if (adopt_baseline(c, &c->base) != 0) return -1;
    char *ev = pt_path_join(c->base.dir, "eval.json");
    const bool have = pt_file_exists(ev);
    free(ev);
    if (have) return 0;
    char *model = realpath(o->baseline_run, NULL);
    const int erc = acc_eval_run(c, &c->base, model ? model : o->baseline_run, "baseline");
    free(model);
    return erc;
}

// The candidate's phases after the baseline: 0 ACCEPTED, 1 REJECTED, 2 REFUSED.
static int judge(acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    // A candidate that cannot train is a rejected candidate, not bad input.
    if (acc_train_run(c, &c->cand, o->checkpoint_step) != 0) {
        acc_add_reason(c, "candidate %s did not train: %s", o->candidate.text, pt_last_error());
        return 1;
    }
    if (acc_eval_run(c, &c->cand, c->cand.dir, "candidate") != 0) {
        acc_add_reason(c, "candidate eval: %s", pt_last_error());
        return 1;
    }
    const int conv = acc_convergence(c);
    if (conv == 2) return 2;
    acc_audit(c);
    cJSON_AddItemToArray(c->port, acc_portability(c, &c->base, &o->candidate, "candidate_from_baseline"));
    cJSON_AddItemToArray(c->port, acc_portability(c, &c->cand, &o->baseline, "baseline_from_candidate"));
    c->rec = acc_recovery(c, &c->cand);
    acc_seeds(c);
    return cJSON_GetArraySize(c->reasons) > 0 ? 1 : conv;
}

// What every phase needs: the price table (checked now, not after the runs), this binary, the recipe, and OUT
// emptied of the suite's earlier runs and report.
static int setup(acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    c->prices = pt_json_parse_file(o->price_table);
    if (!c->prices || acc_check_prices(o, c->prices) != 0) return -1;
    // The running image itself, even if the file was rebuilt meanwhile.
    if (access("/proc/self/exe", X_OK) != 0) {
        pt_set_error("accept: cannot re-execute portatrain (/proc/self/exe): %s", strerror(errno));
        return -1;
    }
    pt_self_exe_path(c->exe_path, sizeof c->exe_path);
    // The recipe is checked before anything under OUT is emptied: a flag the recorded baseline contradicts
    // loses no earlier report.
    if (acc_build_recipe(c, o->baseline_run) != 0 || pt_mkdir_p(o->output_dir) != 0) return -1;
    c->out = realpath(o->output_dir, NULL);
    for (size_t i = 0; i < acc_n_old_files; i++) {
        char *f = pt_path_join(c->out, acc_old_files[i]);
        unlink(f);
        free(f);
    }
    for (size_t i = 0; i < acc_n_rewritten; i++) {
        if (!strcmp(acc_rewritten[i], "init") && o->model_dir) continue;
        char *d = pt_path_join(c->out, acc_rewritten[i]);
        pt_remove_tree(d);
        free(d);
    }
    c->logs = acc_xprintf("%s/logs", c->out);
    pt_mkdir_p(c->logs);
    c->phases = cJSON_CreateArray();
    c->reasons = cJSON_CreateArray();
    c->port = cJSON_CreateArray();
    c->t_start = pt_now_s();
    pt_cpu_model(c->cpu, sizeof c->cpu);
    c->base = (run_t){.pl = &o->baseline, .role = "baseline", .dir = acc_xprintf("%s/baseline", c->out), .eval_loss = NAN};
    c->cand = (run_t){.pl = &o->candidate, .role = "candidate", .dir = acc_xprintf("%s/candidate", c->out), .eval_loss = NAN};
    return 0;
}

static void teardown(acc_ctx *c) {
    cJSON_Delete(c->cmp);
    cJSON_Delete(c->port);
    cJSON_Delete(c->rec);
    cJSON_Delete(c->seeds);
    cJSON_Delete(c->audit);
    cJSON_Delete(c->prices);
    cJSON_Delete(c->phases);
    cJSON_Delete(c->reasons);
    free(c->base.m.rows);
    free(c->cand.m.rows);
    free(c->base.dir);
    free(c->cand.dir);
    free(c->model);
    free(c->logs);
    acc_free_recipe(c);
    free(c->out);
}

int pt_accept(const pt_accept_opts *o) {
    pt_clear_error();
    if (acc_check_opts(o) != 0) return 2;
    acc_ctx c = {.o = o, .tty = isatty(2) && !o->quiet};
    int verdict = 2;  // unusable input until both frozen inputs and the baseline exist
    if (setup(&c) == 0) {
        acc_say(&c, "portatrain accept: baseline %s, candidate %s, %ld steps -> %s", o->baseline.text,
                o->candidate.text, o->steps, c.out);
        // 1. frozen inputs and the baseline, 2. the candidate: convergence, portability, recovery, 3. cost and report
        if (prepare_model(&c) == 0 && baseline(&c) == 0) verdict = acc_report(&c, judge(&c));
    }
    teardown(&c);
    return verdict;
}
