// report.json of the suite: its sections from the runs and phases, written with its renderings
// (report.c), and the verdict line on stdout.
#define _GNU_SOURCE
#include "harness/accept_internal.h"
#include "harness/accept_repro.h"
#include "harness/report.h"
#include "util/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void layout_text(const pt_platform *p, char *out, size_t n) {
    snprintf(out, n, "tp=%d dp=%d fsdp=%d", p->tp, p->dp, p->fsdp);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(const metrics_t *m, size_t field_off) {
    double *v = pt_malloc(sizeof(double) * (size_t)(m->n + 1));
    int k = 0;
    for (int i = 0; i < m->n; i++) {
        const double x = *(const double *)((const char *)&m->rows[i] + field_off);
        if (isfinite(x)) v[k++] = x;
    }
    double med = NAN;
    if (k) { qsort(v, (size_t)k, sizeof *v, cmp_double); med = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]); }
    free(v);
    return med;
}

static cJSON *run_identity(const run_t *r, const char *cpu, int threads) {
    cJSON *j = cJSON_CreateObject();
    char lay[64], dev[512];
    layout_text(r->pl, lay, sizeof lay);
    const int ranks = pt_platform_ranks(r->pl);
    acc_run_device(r, cpu, threads, dev, sizeof dev);
    cJSON_AddStringToObject(j, "spec", r->pl->text);
    cJSON_AddStringToObject(j, "run_dir", r->dir);
    cJSON_AddStringToObject(j, "backend", r->pl->backend);
    cJSON_AddStringToObject(j, "device", dev);
    cJSON_AddStringToObject(j, "precision", r->pl->precision);
    cJSON_AddStringToObject(j, "layout", lay);
    cJSON_AddNumberToObject(j, "ranks", ranks);
    cJSON_AddNumberToObject(j, "steps", r->m.n ? (double)r->m.rows[r->m.n - 1].step : 0);
    // run-time kernel compilation (device backends: manifest platform.compile)
    char *mp = pt_path_join(r->dir, "manifest.json");
    cJSON *man = pt_file_exists(mp) ? pt_json_parse_file(mp) : NULL;
    pt_clear_error();
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "platform"), "compile");
    if (cJSON_IsObject(comp)) cJSON_AddItemToObject(j, "compile", cJSON_Duplicate(comp, 1));
    cJSON_Delete(man);
    free(mp);
    return j;
}

static cJSON *curve_of(const metrics_t *m) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < m->n; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "step", (double)m->rows[i].step);
        const char *k[] = {"loss", "grad_norm", "step_time_s", "tokens_per_s"};
        const double v[] = {m->rows[i].loss, m->rows[i].grad_norm, m->rows[i].step_time_s, m->rows[i].tokens_per_s};
        for (int j = 0; j < 4; j++)
            if (isfinite(v[j])) cJSON_AddNumberToObject(p, k[j], v[j]);
        cJSON_AddItemToArray(a, p);
    }
    return a;
}

static void copy_num(cJSON *dst, const char *dk, const cJSON *src, const char *sk) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, sk);
    if (cJSON_IsNumber(v)) cJSON_AddNumberToObject(dst, dk, v->valuedouble);
    else if (cJSON_IsNull(v)) cJSON_AddNullToObject(dst, dk);
}

// compare's result -> the report's convergence section (report.c's keys).
static cJSON *convergence_section(const cJSON *cmp, const run_t *a, const run_t *b) {
    cJSON *cv = cJSON_CreateObject();
    const cJSON *pf = cJSON_GetObjectItemCaseSensitive(cmp, "profile");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(pf, "name");
    cJSON_AddStringToObject(cv, "profile", cJSON_IsString(pn) ? pn->valuestring : "?");
    const cJSON *vd = cJSON_GetObjectItemCaseSensitive(cmp, "verdict");
    cJSON_AddStringToObject(cv, "verdict", cJSON_IsString(vd) ? vd->valuestring : "?");
    cJSON_AddItemToObject(cv, "reasons", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cmp, "reasons"), 1));
    copy_num(cv, "tolerance_rel", pf, "per_step_loss");
    cJSON_AddItemToObject(cv, "tolerances", cJSON_Duplicate(pf, 1));
    const cJSON *s0 = cJSON_GetObjectItemCaseSensitive(cmp, "step0");
    cJSON *o0 = cJSON_AddObjectToObject(cv, "step0");
    copy_num(o0, "step", s0, "step");
    copy_num(o0, "loss_a", s0, "loss_a");
    copy_num(o0, "loss_b", s0, "loss_b");
    copy_num(o0, "rel_diff", s0, "loss_rel_diff");
    const metric_row *ra = a->m.n ? &a->m.rows[0] : NULL, *rb = b->m.n ? &b->m.rows[0] : NULL;
    if (ra && isfinite(ra->grad_norm)) cJSON_AddNumberToObject(o0, "grad_norm_a", ra->grad_norm);
    if (rb && isfinite(rb->grad_norm)) cJSON_AddNumberToObject(o0, "grad_norm_b", rb->grad_norm);
    copy_num(o0, "grad_norm_rel_diff", s0, "grad_norm_rel_diff");
    cJSON_AddItemToObject(cv, "per_step", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cmp, "per_step"), 1));
    const cJSON *fw = cJSON_GetObjectItemCaseSensitive(cmp, "final_window");
    cJSON *ow = cJSON_AddObjectToObject(cv, "final_window");
    copy_num(ow, "steps", fw, "window");
    copy_num(ow, "mean_a", fw, "mean_loss_a");
    copy_num(ow, "mean_b", fw, "mean_loss_b");
    copy_num(ow, "rel_diff", fw, "rel_diff");
    copy_num(ow, "tolerance", pf, "final_window_loss");
    cJSON_AddItemToObject(cv, "early", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cmp, "early"), 1));
    cJSON_AddItemToObject(cv, "eval", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cmp, "eval"), 1));
    char *docs = acc_docs_dir();
    if (docs) cJSON_AddStringToObject(cv, "docs", docs);
    free(docs);
    cJSON_AddItemToObject(cv, "frozen_inputs", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cmp, "frozen_inputs"), 1));
    return cv;
}

static cJSON *frozen_section(acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    cJSON *f = cJSON_CreateObject();
    char hex[65];
    char *cfg = pt_path_join(c->model, "config.json"), *w = pt_path_join(c->model, "model.safetensors");
    char *tok = pt_path_join(c->model, "tokenizer.json");
    struct { const char *key, *path; } items[] = {{"config_sha256", cfg}, {"initial_weights_sha256", w},
                                                  {"tokenizer_sha256", tok}, {"dataset_sha256", o->train_data},
                                                  {"eval_dataset_sha256", o->eval_data}};
    for (size_t i = 0; i < PT_ARRAY_LEN(items); i++) {
        if (pt_file_exists(items[i].path) && acc_sha256_path(items[i].path, hex) == 0) cJSON_AddStringToObject(f, items[i].key, hex);
        else cJSON_AddNullToObject(f, items[i].key);
    }
    cJSON_AddNumberToObject(f, "seed", (double)o->seed);
    free(cfg); free(w); free(tok);
    return f;
}

static void iso_now(char *out, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static cJSON *settings_section(const acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    cJSON *set = cJSON_CreateObject();
    cJSON_AddNumberToObject(set, "steps", (double)o->steps);
    cJSON_AddNumberToObject(set, "seq_len", o->seq_len);
    cJSON_AddNumberToObject(set, "per_device_train_batch_size", o->batch);
    cJSON_AddNumberToObject(set, "learning_rate", o->learning_rate);
    cJSON_AddNumberToObject(set, "warmup_steps", (double)o->warmup_steps);
    cJSON_AddNumberToObject(set, "weight_decay", o->weight_decay);
    cJSON_AddNumberToObject(set, "max_grad_norm", o->max_grad_norm);
    cJSON_AddNumberToObject(set, "checkpoint_step", (double)o->checkpoint_step);
    cJSON_AddNumberToObject(set, "recovery_save_steps", (double)o->recovery_save_steps);
    cJSON_AddStringToObject(set, "model", c->model ? c->model : "");
    cJSON_AddStringToObject(set, "train_data", o->train_data);
    cJSON_AddStringToObject(set, "eval_data", o->eval_data);
    const cJSON *iv;  // the recipe every run trained with
    cJSON_ArrayForEach(iv, c->recipe) cJSON_AddItemToObject(set, iv->string, cJSON_Duplicate(iv, 1));
    return set;
}

static cJSON *throughput_section(const acc_ctx *c) {
    cJSON *tp = cJSON_CreateObject();
    const run_t *rs[] = {&c->base, &c->cand};
    for (int i = 0; i < 2; i++) {
        cJSON *t = cJSON_AddObjectToObject(tp, rs[i]->role);
        const double mt = median_of(&rs[i]->m, offsetof(metric_row, tokens_per_s));
        const double ms = median_of(&rs[i]->m, offsetof(metric_row, step_time_s));
        if (isfinite(mt)) cJSON_AddNumberToObject(t, "median_tokens_per_s", mt);
        if (isfinite(ms)) cJSON_AddNumberToObject(t, "median_step_time_s", ms);
        acc_throughput_flops(c, rs[i], t);
    }
    return tp;
}

// The cost section (NULL with its error as a reason: no cost, and no ACCEPTED without one).
static cJSON *cost_of(acc_ctx *c, int *verdict) {
    const pt_accept_opts *o = c->o;
    if (c->evidence) {  // priced from the evidence's platform records (accept_evidence_judge.c), or not shown
        cJSON *co = c->ev_cost;
        c->ev_cost = NULL;
        if (co) cJSON_AddNumberToObject(co, "accepted_outcomes", *verdict == 0);
        if (co && *verdict == 0) cJSON_AddNumberToObject(co, "cost_per_accepted_outcome", jnum(co, "total_cost"));
        else if (co) cJSON_AddNullToObject(co, "cost_per_accepted_outcome");
        return co;
    }
    // Every billed phase ran in this suite at its thread count; a recorded --baseline-run's training was
    // paid for when it was recorded (not billed here), so its own thread count prices nothing.
    const int threads_now = acc_run_threads(c->cand.dir);
    cJSON *cost = acc_cost_section(c, c->prices, &o->baseline, &o->candidate,
                                   o->baseline_run ? threads_now : acc_run_threads(c->base.dir), threads_now,
                                   *verdict == 0, c->cpu);
    if (!cost) {
        acc_add_reason(c, "cost: %s", pt_last_error());
        if (*verdict == 0) *verdict = 2;
    }
    return cost;
}

// What an accepted candidate passed, as its reasons.
static void accepted_reasons(acc_ctx *c) {
    const pt_accept_opts *o = c->o;
    if (c->evidence) return;  // the evidence judge gave its own
    acc_add_reason(c, "convergence within the %s profile", acc_pair_profile(c, &o->baseline, &o->candidate));
    acc_add_reason(c, "checkpoints restore both ways (%s <-> %s)", o->baseline.text, o->candidate.text);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(c->rec, "detail");
    if (cJSON_IsString(d)) acc_add_reason(c, "recovery: %s", d->valuestring);
    if (c->seeds) acc_add_reason(c, "seeds: %d per side, steps to target and envelopes pass", c->o->seeds);
}

static cJSON *report_json(acc_ctx *c, const char *vs, cJSON *cost) {
    const pt_accept_opts *o = c->o;
    cJSON *rep = cJSON_CreateObject();
    char now[32], title[256];
    iso_now(now, sizeof now);
    snprintf(title, sizeof title, "portatrain acceptance: %s -> %s", o->baseline.text, o->candidate.text);
    cJSON_AddNumberToObject(rep, "version", 1);
    cJSON_AddStringToObject(rep, "created_utc", now);
    cJSON_AddStringToObject(rep, "title", title);
    cJSON_AddStringToObject(rep, "verdict", vs);
    if (c->refused) cJSON_AddStringToObject(rep, "refused", c->refused);
    cJSON_AddItemToObject(rep, "reasons", cJSON_Duplicate(c->reasons, 1));
    cJSON_AddItemToObject(rep, "baseline", run_identity(&c->base, c->cpu, acc_run_threads(c->base.dir)));
    cJSON_AddItemToObject(rep, "candidate", run_identity(&c->cand, c->cpu, acc_run_threads(c->cand.dir)));
    cJSON_AddItemToObject(rep, "frozen_inputs", c->evidence ? cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(
                                                  c->evidence, "frozen_inputs"), 1) : frozen_section(c));
    cJSON_AddItemToObject(rep, "settings", settings_section(c));
    if (c->cmp) cJSON_AddItemToObject(rep, "convergence", convergence_section(c->cmp, &c->base, &c->cand));
    cJSON *curves = cJSON_AddObjectToObject(rep, "curves");
    cJSON_AddItemToObject(curves, "baseline", curve_of(&c->base.m));
    cJSON_AddItemToObject(curves, "candidate", curve_of(&c->cand.m));
    cJSON_AddItemToObject(rep, "throughput", throughput_section(c));
    cJSON_AddItemToObject(rep, "portability", c->port);
    c->port = NULL;
    if (c->rec) {
        // the fault is injected by the worker itself right after a step, so the supervisor sees the exit at once
        cJSON_AddStringToObject(c->rec, "injection", "the worker was killed by an injected fault (train --inject "
                                "kill) right after the step named, so its exit was seen at once: detect_s is the "
                                "supervisor's reaction time, not a failure detector's timeout");
        cJSON_AddItemToObject(rep, "recovery", c->rec);
        c->rec = NULL;
    }
    if (c->seeds) { cJSON_AddItemToObject(rep, "seeds", c->seeds); c->seeds = NULL; }
    if (c->audit) { cJSON_AddItemToObject(rep, "audit", c->audit); c->audit = NULL; }
    if (c->evidence) { cJSON_AddItemToObject(rep, "evidence", c->evidence); c->evidence = NULL; }
    cJSON_AddItemToObject(rep, "phases", cJSON_Duplicate(c->phases, 1));
    cJSON_AddItemToObject(rep, "reproduction", acc_reproduction(c));
    if (cost) cJSON_AddItemToObject(rep, "cost", cost);
    cJSON_AddNumberToObject(rep, "wall_s", pt_now_s() - c->t_start);
    return rep;
}

static void print_verdict(const acc_ctx *c, const char *vs) {
    char wall[32];
    acc_fmt_duration(pt_now_s() - c->t_start, wall, sizeof wall);
    printf("\nverdict: %s", vs);
    const cJSON *it;
    int k = 0;
    cJSON_ArrayForEach(it, c->reasons) printf("%s%s", k++ ? "; " : " (", it->valuestring);
    printf("%s\n", k ? ")" : "");
    printf("report: %s/report.html (also report.md, report.json; %s)\n", c->out, wall);
    fflush(stdout);
}

int acc_report(acc_ctx *c, int verdict) {
    cJSON *cost = cost_of(c, &verdict);
    const char *vs = verdict == 0 ? "ACCEPTED" : verdict == 1 ? "REJECTED" : "REFUSED";
    if (verdict == 0) accepted_reasons(c);
    cJSON *rep = report_json(c, vs, cost);
    char *rj = pt_path_join(c->out, "report.json");
    int wrc = pt_json_write_file(rj, rep);
    if (wrc == 0) wrc = pt_report_render(rep, c->out);
    cJSON_Delete(rep);
    free(rj);
    if (wrc != 0) return 2;
    print_verdict(c, vs);
    pt_clear_error();  // judged: any error is in the report, not for the CLI to print
    return verdict;
}
