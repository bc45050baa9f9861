// The suite's training phases: a platform's run and its eval, the convergence of the candidate against the
// baseline, and checkpoint portability between them.
#define _GNU_SOURCE
#include "harness/accept_internal.h"
#include "harness/compare.h"
#include "util/fileio.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const metric_row *acc_metrics_at(const metrics_t *m, long step) {
    for (int i = 0; i < m->n; i++)
        if (m->rows[i].step == step) return &m->rows[i];
    return NULL;
}

// Training, checkpoint and start-up seconds of one train process.
void acc_metrics_phases(const metrics_t *m, long from_step, double *train_s, double *save_s, long *tokens) {
    *train_s = *save_s = 0;
    *tokens = 0;
    for (int i = 0; i < m->n; i++) {
        if (m->rows[i].step <= from_step) continue;  // lines carried over from a checkpoint
        if (isfinite(m->rows[i].step_time_s)) *train_s += m->rows[i].step_time_s;
        if (isfinite(m->rows[i].save_time_s)) *save_s += m->rows[i].save_time_s;
        *tokens += m->rows[i].tokens;
    }
}

int acc_run_threads(const char *run_dir) {
    char *p = pt_path_join(run_dir, "train_args.json");
    cJSON *j = pt_file_exists(p) ? pt_json_parse_file(p) : NULL;
    free(p);
    const double t = jnum(j, "omp_threads");
    cJSON_Delete(j);
    if (isfinite(t) && t >= 1) return (int)t;
    return omp_get_max_threads();  // what a child started now uses (it inherits OMP_NUM_THREADS)
}

// platform.compile.compile_s of a run's manifest.json (0 when absent: a
// backend that compiles nothing at run time).
static double compile_seconds(const char *dir) {
    char *mp = pt_path_join(dir, "manifest.json");
    cJSON *man = pt_file_exists(mp) ? pt_json_parse_file(mp) : NULL;
    pt_clear_error();
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "platform"), "compile"), "compile_s");
    const double s = cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0;
    cJSON_Delete(man);
    free(mp);
    return s;
}

// One training run; records start-up, (compilation,) training and checkpoint phases.
int acc_train_run(acc_ctx *c, run_t *r, long save_steps) {
    argbuf a;
    acc_train_args(c, &a, r->pl, r->dir, save_steps);
    char label[96];
    snprintf(label, sizeof label, "%s %s", r->role, r->pl->text);
    progress_src pr = {NULL, 0, c->o->steps};
    char *mp = pt_path_join(r->dir, "metrics.jsonl");
    pr.metrics = mp;
    pt_remove_tree(r->dir);
    double wall;
    const int rc = acc_run_child(c, label, r->role, NULL, &pr, &wall, pt_platform_ranks(r->pl), a.v);
    free(mp);
    // A run that failed part-way was still paid for: its steps are billed and
    // its curve kept (a candidate that crashed at step 90 of 100 cost 90 steps).
    char *err = rc != 0 ? pt_strdup(pt_last_error()) : NULL;
    if (acc_metrics_load(r->dir, &r->m) != 0) {
        if (!err) return -1;
        memset(&r->m, 0, sizeof r->m);  // none (or unreadable): the whole wall is start-up
    }
    double tr, sv;
    long tok;
    acc_metrics_phases(&r->m, 0, &tr, &sv, &tok);
    c->tokens += tok;
    // Run-time kernel compilation (opencl) is its own phase: the base program
    // is built during start-up, shape-specialised ones in the first step.
    const double cs = compile_seconds(r->dir);
    double su = wall - tr - sv;
    const double from_su = PT_MIN(cs, PT_MAX(su, 0.0));
    su -= from_su;
    tr -= PT_MIN(cs - from_su, tr);
    if (cs > 0) acc_add_phase(c, r->role, r->pl, "compilation", cs);
    acc_add_phase(c, r->role, r->pl, "start-up", su);
    acc_add_phase(c, r->role, r->pl, "training", tr);
    acc_add_phase(c, r->role, r->pl, "checkpoint", sv);
    if (err) {
        pt_set_error("%s", err);
        free(err);
        return -1;
    }
    return 0;
}

// `portatrain eval` of a run's final model -> RUN/eval.json (what compare reads).
int acc_eval_run(acc_ctx *c, run_t *r, const char *model_dir, const char *phase_run) {
    char *out = pt_path_join(r->dir, "eval.json");
    char mb[32], sl[32];
    snprintf(mb, sizeof mb, "%d", c->o->eval_batches);
    snprintf(sl, sizeof sl, "%d", c->o->seq_len);
    char *args[] = {"eval", "--model", (char *)model_dir, "--data", (char *)c->o->eval_data, "--seq-len", sl,
                    "--per-device-eval-batch-size", "8", "--max-batches", mb, "--backend", (char *)r->pl->backend,
                    "--precision", (char *)r->pl->precision, NULL};
    char label[96], logn[64];
    snprintf(label, sizeof label, "eval %s %s", r->role, r->pl->text);
    snprintf(logn, sizeof logn, "eval_%s", r->role);
    progress_src pr = {NULL, 0, 0};
    double wall;
    int rc = acc_run_child(c, label, logn, out, &pr, &wall, 1, args);
    acc_add_phase(c, phase_run, r->pl, "eval", wall);
    if (rc == 0) {
        cJSON *j = pt_json_parse_file(out);
        r->eval_loss = jnum(j, "loss");
        cJSON_Delete(j);
        if (!isfinite(r->eval_loss)) { pt_set_error("%s: no finite \"loss\"", out); rc = -1; }
    }
    if (rc != 0) unlink(out);
    free(out);
    return rc;
}

const char *acc_pair_profile(acc_ctx *c, const pt_platform *a, const pt_platform *b) {
    return c->o->profile ? c->o->profile : pt_platform_pair_profile(a, b, NULL);
}

// Baseline vs candidate: 0 accepted, 1 rejected (its reasons added), 2 refused (frozen inputs differ).
int acc_convergence(acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    pt_compare_opts co = {.profile = acc_pair_profile(c, &o->baseline, &o->candidate)};
    const int crc = pt_compare_runs(c->base.dir, c->cand.dir, &co, &c->cmp);
    if (crc == 2) {
        // Only the frozen-input differences: the curves of runs from
        // different inputs say nothing about the platform.
        c->refused = "frozen inputs differ";
        const cJSON *fi = cJSON_GetObjectItemCaseSensitive(c->cmp, "frozen_inputs");
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(fi, "differences"), *it;
        cJSON_ArrayForEach(it, ds) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(it, "field");
            const cJSON *va = cJSON_GetObjectItemCaseSensitive(it, "a"), *vb = cJSON_GetObjectItemCaseSensitive(it, "b");
            acc_add_reason(c, "frozen input %s differs: baseline %s, candidate %s", cJSON_IsString(f) ? f->valuestring : "?",
                           cJSON_IsString(va) ? va->valuestring : "?", cJSON_IsString(vb) ? vb->valuestring : "?");
        }
        if (cJSON_GetArraySize(c->reasons) == 0) acc_add_reason(c, "cannot compare the runs: %s", pt_last_error());
        acc_say(c, "  convergence: REFUSED (frozen inputs differ)");
        return 2;
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c->cmp, "reasons"), *it;
    if (crc == 1) cJSON_ArrayForEach(it, rs) if (cJSON_IsString(it)) acc_add_reason(c, "convergence: %s", it->valuestring);
    acc_say(c, "  convergence (%s profile): %s", co.profile, crc == 0 ? "ACCEPTED" : "REJECTED");
    return crc;
}

// The reader's continuation (cont, from step M) against the writer's uninterrupted run: true when it
// reached the last step within the pair's tolerance; detail says how it went either way.
static bool continuation_matches(acc_ctx *c, const run_t *writer, const pt_platform *reader, const char *cont,
                                 const metrics_t *cm, cJSON *p, char *detail, size_t dn) {
    const long M = c->o->checkpoint_step;
    double tr, sv;
    long tok;
    acc_metrics_phases(cm, M, &tr, &sv, &tok);
    c->tokens += tok;
    for (int i = 0; i < cm->n; i++)
        if (cm->rows[i].step == M + 1 && isfinite(cm->rows[i].restore_time_s))
            cJSON_AddNumberToObject(p, "restore_time_s", cm->rows[i].restore_time_s);
    const char *prof = acc_pair_profile(c, writer->pl, reader);
    pt_compare_opts co = {.profile = prof};
    cJSON *res = NULL;
    const int crc = pt_compare_runs(writer->dir, cont, &co, &res);
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(res, "per_step");
    const cJSON *pf = cJSON_GetObjectItemCaseSensitive(res, "profile");
    const double mx = jnum(ps, "max_rel_diff"), tol = jnum(pf, "per_step_loss");
    if (isfinite(mx)) cJSON_AddNumberToObject(p, "max_rel_diff", mx);
    if (isfinite(tol)) cJSON_AddNumberToObject(p, "tolerance", tol);
    const long last = cm->n ? cm->rows[cm->n - 1].step : 0;
    const bool ok = crc == 0 && last == c->o->steps;
    if (ok) {
        if (mx == 0) snprintf(detail, dn, "steps %ld-%ld bitwise identical to the writer's run", M + 1, last);
        else snprintf(detail, dn, "steps %ld-%ld within %s tolerance of the writer's run (max rel diff %.3g)",
                      M + 1, last, prof, mx);
    } else {
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(res, "reasons");
        const cJSON *r0 = cJSON_IsArray(rs) ? cJSON_GetArrayItem(rs, 0) : NULL;
        snprintf(detail, dn, "continuation of steps %ld-%ld differs from the writer's run: %s", M + 1,
                 last, cJSON_IsString(r0) ? r0->valuestring : crc == 2 ? pt_last_error() : "run incomplete");
    }
    cJSON_Delete(res);
    return ok;
}

// The reader trains from the transferred checkpoint ckpt to the end, into cont.
static bool resume_from(acc_ctx *c, const run_t *writer, const pt_platform *reader, const char *name, const char *ckpt,
                        const char *cont, cJSON *p, char *detail, size_t dn) {
    const long M = c->o->checkpoint_step;
    char fault[600] = "";
    if (c->o->test_fault && !strcmp(c->o->test_fault, "corrupt-checkpoint")) {
        if (acc_corrupt_checkpoint(ckpt, fault, sizeof fault) != 0) snprintf(fault, sizeof fault, "(%s)", pt_last_error());
        acc_say(c, "  test fault: corrupted %s", fault);
    }
    argbuf a;
    acc_train_args(c, &a, reader, cont, 0);
    acc_ab_add(&a, "--resume-from-checkpoint");
    acc_ab_add(&a, ckpt);
    char label[128];
    snprintf(label, sizeof label, "%s resumes %s", reader->text, writer->pl->text);
    char *mp = pt_path_join(cont, "metrics.jsonl");
    progress_src pr = {mp, M, c->o->steps};
    double wall;
    const int rc = acc_run_child(c, label, name, NULL, &pr, &wall, pt_platform_ranks(reader), a.v);
    free(mp);
    acc_add_phase(c, name, reader, "portability", wall);
    metrics_t cm = {0};
    bool ok = false;
    if (rc != 0)
        snprintf(detail, dn, "%s could not restore %s's checkpoint-%ld: %s", reader->text, writer->pl->text, M,
                 pt_last_error());
    else if (acc_metrics_load(cont, &cm) != 0) snprintf(detail, dn, "%s", pt_last_error());
    else ok = continuation_matches(c, writer, reader, cont, &cm, p, detail, dn);
    free(cm.rows);
    return ok;
}

// Reader resumes from writer's mid-run checkpoint (copied, as a transfer
// between platforms would), continues to the end; compared with the writer's
// uninterrupted run.
cJSON *acc_portability(acc_ctx *c, run_t *writer, const pt_platform *reader, const char *name) {
    const long M = c->o->checkpoint_step;
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "writer", writer->pl->text);
    cJSON_AddStringToObject(p, "reader", reader->text);
    cJSON_AddNumberToObject(p, "checkpoint_step", (double)M);
    const metric_row *sr = acc_metrics_at(&writer->m, M);
    if (sr && isfinite(sr->save_time_s)) cJSON_AddNumberToObject(p, "save_time_s", sr->save_time_s);
    if (sr && sr->save_bytes) cJSON_AddNumberToObject(p, "bytes", (double)sr->save_bytes);
    char *base = acc_xprintf("%s/portability/%s", c->out, name);
    char *ckpt = acc_xprintf("%s/checkpoint-%ld", base, M);
    char *cont = acc_xprintf("%s/run", base);
    char *src = acc_xprintf("%s/checkpoint-%ld", writer->dir, M);
    pt_remove_tree(base);
    pt_mkdir_p(base);
    bool ok = false;
    char detail[1024] = "";
    if (!pt_is_dir(src)) snprintf(detail, sizeof detail, "the writer's run has no checkpoint-%ld (%s)", M, src);
    else if (acc_copy_dir(src, ckpt) != 0) snprintf(detail, sizeof detail, "copying the checkpoint failed: %s", pt_last_error());
    else ok = resume_from(c, writer, reader, name, ckpt, cont, p, detail, sizeof detail);
    cJSON_AddBoolToObject(p, "ok", ok);
    cJSON_AddStringToObject(p, "detail", detail);
    if (!ok) acc_add_reason(c, "portability: %s", detail);
    acc_say(c, "  portability %s -> %s: %s", writer->pl->text, reader->text, ok ? "ok" : "FAILED");
    free(base); free(ckpt); free(cont); free(src);
    return p;
}
