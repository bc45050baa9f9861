// The acceptance of two evidence directories (accept_evidence.h): frozen inputs and recipe, convergence of the
// two logs (compare), the referee (portatrain re-evaluates both platforms' checkpoints), portability from a
// continuation, recovery from a restart's time stamps, cost from the logs' wall time; the report through
// accept_report.c. docs/ACCEPT.md, "Platforms portatrain does not run".
#define _GNU_SOURCE
#include "harness/accept_evidence.h"
#include "harness/compare.h"
#include "util/fileio.h"
#include "util/proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Sections a verdict needs; one without its evidence is "not shown" and blocks ACCEPTED unless waived.
static const char *const SECTIONS[] = {"referee", "portability", "recovery", "cost"};

// fp32 evaluation of the same weights by two correct implementations differs by about 1e-7 relative (summation
// order); 1e-5 leaves two orders of magnitude for other kernels while staying far below what one training step
// moves the held-out loss (about 1e-2 relative at these steps). Added to the claim's print precision.
#define EV_EVAL_NOISE 1e-5

typedef struct {
    acc_ctx *c;
    acc_ev_side s[2];      // baseline, candidate
    pt_platform pl[2];
    const char *profile;
    cJSON *sec;            // report.json's "evidence"
    cJSON *not_shown;      // [{section, why, waived}]
    bool waived[PT_ARRAY_LEN(SECTIONS)];
} ev_judge;

static int parse_waive(ev_judge *j, const char *waive) {
    if (!waive) return 0;
    char *w = pt_strdup(waive), *save = NULL;
    int rc = 0;
    for (char *t = strtok_r(w, ",", &save); t && !rc; t = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < PT_ARRAY_LEN(SECTIONS) && strcmp(t, SECTIONS[i])) i++;
        if (i == PT_ARRAY_LEN(SECTIONS)) {
            pt_set_error("--waive %s: unknown section '%s' (referee, portability, recovery, cost)", waive, t);
            rc = -1;
        } else j->waived[i] = true;
    }
    free(w);
    return rc;
}

static void not_shown(ev_judge *j, const char *section, const char *why) {
    size_t i = 0;
    while (i < PT_ARRAY_LEN(SECTIONS) && strcmp(section, SECTIONS[i])) i++;
    const bool w = i < PT_ARRAY_LEN(SECTIONS) && j->waived[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "section", section);
    cJSON_AddStringToObject(e, "why", why);
    cJSON_AddBoolToObject(e, "waived", w);
    cJSON_AddItemToArray(j->not_shown, e);
    if (!w) acc_add_reason(j->c, "%s: not shown (%s); waive it with --waive %s", section, why, section);
}

// The log's curve as the suite's metric rows (the report's curves and identity).
static void metrics_of(const pt_runlog *l, metrics_t *m) {
    m->rows = pt_malloc(sizeof *m->rows * (size_t)(l->n + 1));
    m->n = 0;
    for (int i = 0; i < l->n; i++)
        m->rows[m->n++] = (metric_row){.step = l->pts[i].step, .loss = l->pts[i].loss, .grad_norm = l->pts[i].grad_norm,
                                       .step_time_s = l->pts[i].step_time, .tokens_per_s = NAN, .save_time_s = NAN,
                                       .restore_time_s = NAN};
}

static const pt_runpoint *point_at(const pt_runpoint *p, int n, long step) {
    for (int i = 0; i < n; i++) if (p[i].step == step) return &p[i];
    return NULL;
}

// 1. Frozen inputs: the files' sha256 and the recipe; a recipe difference REFUSES, as differing frozen inputs do.
static int frozen(ev_judge *j) {
    cJSON *f = cJSON_AddObjectToObject(j->sec, "frozen_inputs");
    cJSON_AddItemToObject(f, "baseline_sha256", acc_ev_hashes(&j->s[0]));
    cJSON_AddItemToObject(f, "candidate_sha256", acc_ev_hashes(&j->s[1]));
    int nd;
    cJSON *r = acc_ev_recipe_compare(&j->s[0], &j->s[1], &nd);
    cJSON_AddItemToObject(j->sec, "recipe", r);
    if (!nd) return 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(r, "differences"))
        acc_add_reason(j->c, "recipe %s differs: %s vs %s", cJSON_GetObjectItemCaseSensitive(d, "field")->valuestring,
                       cJSON_GetObjectItemCaseSensitive(d, "baseline")->valuestring,
                       cJSON_GetObjectItemCaseSensitive(d, "candidate")->valuestring);
    j->c->refused = "the recipes differ";
    return 2;
}

// 2. Convergence: compare's importers and checks on the two logs (print precision, unfinished runs).
static int convergence(ev_judge *j) {
    pt_compare_opts co = {.profile = j->profile, .format_a = j->s[0].log_format, .format_b = j->s[1].log_format};
    const int rc = pt_compare_runs(j->s[0].log_path, j->s[1].log_path, &co, &j->c->cmp);
    if (rc == 2 && !j->c->cmp) return 2;
    if (rc == 0) return 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j->c->cmp, "reasons"))
        if (cJSON_IsString(it)) acc_add_reason(j->c, "convergence: %s", it->valuestring);
    return 1;
}

// portatrain eval (cpu-ref, HF-exact) of one checkpoint on the held-out data: its loss, NAN with the error.
static double referee_eval(ev_judge *j, int side, int k, int seq_len) {
    acc_ctx *c = j->c;
    const acc_ev_side *s = &j->s[side];
    char *cfg = pt_path_join(s->ck_dir[k], "config.json");
    const char *config = pt_file_exists(cfg) ? NULL : s->model_config;
    free(cfg);
    char sl[32], mb[32], logn[64], label[160];
    snprintf(sl, sizeof sl, "%d", seq_len);
    snprintf(mb, sizeof mb, "%d", c->o->eval_batches);
    snprintf(logn, sizeof logn, "referee_%s_%ld", side ? "candidate" : "baseline", s->ck_step[k]);
    snprintf(label, sizeof label, "referee: %s step %ld", side ? "candidate" : "baseline", s->ck_step[k]);
    char *out = acc_xprintf("%s/%s.json", c->logs, logn);
    char *args[] = {"eval", "--model", s->ck_dir[k], "--data", (char *)c->o->eval_data, "--seq-len", sl,
                    "--per-device-eval-batch-size", "8", "--max-batches", mb, "--backend", "cpu-ref",
                    config ? "--config" : NULL, (char *)config, NULL};
    progress_src pr = {NULL, 0, 0};
    double wall, loss = NAN;
    if (acc_run_child(c, label, logn, out, &pr, &wall, 1, args) == 0) {
        cJSON *r = pt_json_parse_file(out);
        loss = jnum(r, "loss");
        cJSON_Delete(r);
    }
    if (!isfinite(loss)) pt_set_error("portatrain eval of %s gave no finite loss (%s/logs/%s.log)", s->ck_dir[k], c->out, logn);
    acc_add_phase(c, "referee", &j->pl[side], "eval", wall);
    free(out);
    return loss;
}

typedef struct {
    double claim, tol;     // the loss the log claims for that step's weights and the relative tolerance
    const char *kind;      // "validation" / "training"
} ev_claim;

// What side's log claims for its step-N weights: its validation loss at N (the weights after step N on held-out
// windows) within the print precision plus EV_EVAL_NOISE; else its training loss at N, which is another batch's
// loss (step N's, before its update), so the tolerance adds the train/held-out difference measured on the other
// platform at the same step (twice it: one platform's gap is one draw of it). claim NAN: nothing claimed.
static ev_claim claim_of(const acc_ev_side *s, const acc_ev_side *o, long step, double e_other) {
    ev_claim r = {NAN, NAN, "validation"};
    const pt_runpoint *v = point_at(s->log.val, s->log.n_val, step);
    if (v && isfinite(v->loss)) {
        r.claim = v->loss;
        r.tol = v->loss_res / fabs(v->loss) + EV_EVAL_NOISE;
        return r;
    }
    const pt_runpoint *t = point_at(s->log.pts, s->log.n, step), *ot = point_at(o->log.pts, o->log.n, step);
    if (!t || !ot || !isfinite(t->loss) || !isfinite(e_other)) return r;
    r.kind = "training";
    r.claim = t->loss;
    r.tol = t->loss_res / fabs(t->loss) + 2.0 * fabs(ot->loss - e_other) / fabs(e_other) + EV_EVAL_NOISE;
    return r;
}

static void claim_row(ev_judge *j, cJSON *row, int side, int k_ck, double e, double e_other, bool *ok) {
    const long step = j->s[side].ck_step[k_ck];
    const char *role = side ? "candidate" : "baseline";
    const ev_claim cl = claim_of(&j->s[side], &j->s[!side], step, e_other);
    char k[64];
    if (!isfinite(cl.claim)) {
        snprintf(k, sizeof k, "claim_%s", role);
        cJSON_AddStringToObject(row, k, "(no loss logged at this step)");
        return;
    }
    const double rel = fabs(e - cl.claim) / fabs(cl.claim);
    snprintf(k, sizeof k, "claim_%s", role); cJSON_AddNumberToObject(row, k, cl.claim);
    snprintf(k, sizeof k, "claim_%s_kind", role); cJSON_AddStringToObject(row, k, cl.kind);
    snprintf(k, sizeof k, "claim_%s_rel_diff", role); cJSON_AddNumberToObject(row, k, rel);
    snprintf(k, sizeof k, "claim_%s_tolerance", role); cJSON_AddNumberToObject(row, k, cl.tol);
    if (rel <= cl.tol) return;
    *ok = false;
    acc_add_reason(j->c, "referee: the %s %s's checkpoint at step %ld (%s) evaluates to %.6g on the held-out data, "
                   "its log claims %.6g (%s loss): %.3g relative, tolerance %.3g; the checkpoint is not that step's "
                   "weights", role, j->s[side].name, step, j->s[side].ck_dir[k_ck], e, cl.claim,
                   cl.kind, rel, cl.tol);
}

static int ck_index(const acc_ev_side *s, long step) {
    for (int i = 0; i < s->nck; i++) if (s->ck_step[i] == step) return i;
    return -1;
}

// 3. The referee: each checkpoint step both platforms have, evaluated by portatrain on the same held-out data;
// the two agree within the profile's eval tolerance, and each agrees with what its own log claims.
static void referee(ev_judge *j) {
    acc_ctx *c = j->c;
    cJSON *rows = cJSON_AddArrayToObject(j->sec, "referee");
    if (!c->o->eval_data || !pt_file_exists(c->o->eval_data)) { not_shown(j, "referee", "no held-out data (--eval-data)"); return; }
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(j->s[0].recipe, "seq_len");
    const int seq = cJSON_IsNumber(sl) ? (int)sl->valuedouble : c->o->seq_len;
    const double tol = jnum(cJSON_GetObjectItemCaseSensitive(c->cmp, "profile"), "eval_loss");
    int common = 0;
    for (int a = 0; a < j->s[0].nck; a++) {
        const int b = ck_index(&j->s[1], j->s[0].ck_step[a]);
        if (b < 0) continue;
        common++;
        const double ea = referee_eval(j, 0, a, seq), eb = isfinite(ea) ? referee_eval(j, 1, b, seq) : NAN;
        cJSON *row = cJSON_CreateObject();
        cJSON_AddNumberToObject(row, "step", (double)j->s[0].ck_step[a]);
        if (!isfinite(ea) || !isfinite(eb)) {
            acc_add_reason(c, "referee: step %ld: %s", j->s[0].ck_step[a], pt_last_error());
            cJSON_AddBoolToObject(row, "ok", false);
            cJSON_AddItemToArray(rows, row);
            continue;
        }
        bool ok = true;
        const double rel = fabs(ea - eb) / fabs(ea), t = isfinite(tol) ? tol : 5e-3;
        cJSON_AddNumberToObject(row, "eval_baseline", ea);
        cJSON_AddNumberToObject(row, "eval_candidate", eb);
        cJSON_AddNumberToObject(row, "rel_diff", rel);
        cJSON_AddNumberToObject(row, "tolerance", t);
        if (rel > t) {
            ok = false;
            acc_add_reason(c, "referee: at step %ld the platforms' checkpoints evaluate to %.6g and %.6g on the held-out "
                           "data: %.3g relative, tolerance %.3g (%s profile)", j->s[0].ck_step[a], ea, eb, rel, t, j->profile);
        }
        claim_row(j, row, 0, a, ea, eb, &ok);
        claim_row(j, row, 1, b, eb, ea, &ok);
        cJSON_AddBoolToObject(row, "ok", ok);
        cJSON_AddItemToArray(rows, row);
    }
    if (!common) not_shown(j, "referee", "no checkpoint step both platforms have");
}

// One continuation: side r's log of training from side w's step-M checkpoint, against w's own curve after M. The
// first step's loss is a function of the checkpoint and the batch alone (before any update): the profile's step-0
// tolerance; later steps also carry the reader's optimizer, restarted or converted: the per-step tolerance. Each
// widened to the two logs' print precision, as compare does.
static cJSON *continuation(ev_judge *j, int r, bool *ok) {
    const acc_ev_side *rd = &j->s[r], *wr = &j->s[!r];
    const cJSON *pf = cJSON_GetObjectItemCaseSensitive(j->c->cmp, "profile");
    const double t0 = jnum(pf, "step0_loss"), tps = jnum(pf, "per_step_loss");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "writer", wr->name);
    cJSON_AddStringToObject(e, "reader", rd->name);
    cJSON_AddNumberToObject(e, "checkpoint_step", (double)rd->cont_from);
    pt_runlog l;
    *ok = false;
    if (pt_runlog_load(rd->cont_log, NULL, &l) != 0) {
        cJSON_AddStringToObject(e, "detail", pt_last_error());
        return e;
    }
    const long off = l.pts[0].step <= rd->cont_from ? rd->cont_from : 0;
    double worst = 0, worst_tol = t0, ratio = -1;  // the step nearest its tolerance (or furthest past it)
    long worst_step = -1, last = -1, n = 0;
    for (int i = 0; i < l.n; i++) {
        const pt_runpoint *a = &l.pts[i], *b = point_at(wr->log.pts, wr->log.n, a->step + off);
        if (!b) continue;
        const double rel = fabs(a->loss - b->loss) / fabs(b->loss);
        const double tol = fmax(n ? tps : t0, (a->loss_res + b->loss_res) / fabs(b->loss));
        if (!(rel / tol <= ratio)) ratio = rel / tol, worst = rel, worst_tol = tol, worst_step = a->step + off;
        last = a->step + off;
        n++;
    }
    const long wlast = wr->log.n ? wr->log.pts[wr->log.n - 1].step : -1;
    char d[256];
    if (!n) snprintf(d, sizeof d, "no step of the continuation is in the writer's log (steps %ld.. after step %ld)", l.pts[0].step + off, rd->cont_from);
    else if (!(ratio <= 1)) snprintf(d, sizeof d, "diverges at step %ld: loss %.3g relative, tolerance %.3g", worst_step, worst, worst_tol);
    else if (last < wlast) snprintf(d, sizeof d, "stopped at step %ld, the writer's run goes on to %ld", last, wlast);
    else { snprintf(d, sizeof d, "continues the writer's curve over %ld steps within tolerance", n); *ok = true; }
    cJSON_AddBoolToObject(e, "ok", *ok);
    cJSON_AddNumberToObject(e, "max_rel_diff", worst);
    cJSON_AddNumberToObject(e, "tolerance", worst_tol);
    cJSON_AddStringToObject(e, "detail", d);
    pt_runlog_free(&l);
    return e;
}

// 4. Portability: every continuation the evidence holds (either direction).
static void portability(ev_judge *j) {
    int shown = 0;
    for (int r = 0; r < 2; r++) {
        if (!j->s[r].cont_log) continue;
        bool ok;
        cJSON *e = continuation(j, r, &ok);
        if (!ok)
            acc_add_reason(j->c, "portability: %s from %s's step-%ld checkpoint: %s", j->s[r].name, j->s[!r].name,
                           j->s[r].cont_from, cJSON_GetObjectItemCaseSensitive(e, "detail")->valuestring);
        cJSON_AddItemToArray(j->c->port, e);
        shown++;
    }
    if (!shown) not_shown(j, "portability", "neither evidence holds a continuation of the other platform's checkpoint");
}

// 5. Recovery: the candidate's run with a failure and its restart. From the restart log's time stamps: the time
// from the failed attempt's last line to the restarted process's checkpoint load (detection, teardown and the new
// process's start: a log cannot tell them apart), the restore (load to training), the replay of the steps after
// the checkpoint; the restarted run must give the uninterrupted run's curve (compare, exact as printed).
static cJSON *recovery_of(ev_judge *j, const acc_ev_side *s, bool *ok) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "platform", s->name);
    *ok = false;
    pt_runlog l;
    if (pt_runlog_load(s->restart_log, s->log_format, &l) != 0) { cJSON_AddStringToObject(r, "detail", pt_last_error()); return r; }
    if (l.n_att < 2) {
        cJSON_AddStringToObject(r, "detail", "the restart log holds no failed attempt and restart with time stamps");
        pt_runlog_free(&l);
        return r;
    }
    const pt_attempt *a = &l.att[l.n_att - 2], *b = &l.att[l.n_att - 1];
    const pt_runpoint *again = point_at(l.pts, l.n, a->last_step);
    cJSON_AddStringToObject(r, "fault", "the attempt ended without its trainer's end line (killed)");
    cJSON_AddNumberToObject(r, "fault_step", (double)a->last_step);
    cJSON_AddNumberToObject(r, "restored_step", (double)(b->first_step - 1));
    cJSON_AddNumberToObject(r, "steps_recomputed", (double)(a->last_step - (b->first_step - 1)));
    const double t_load = isfinite(b->t_load) ? b->t_load : b->t_start;
    cJSON_AddNumberToObject(r, "restart_s", t_load - a->t_end);
    cJSON_AddNumberToObject(r, "restore_s", b->t_start - t_load);
    if (again && isfinite(again->wall_time)) {
        cJSON_AddNumberToObject(r, "replay_s", again->wall_time - b->t_start);
        cJSON_AddNumberToObject(r, "total_s", again->wall_time - a->t_last_step);
    }
    cJSON *cmp = NULL;
    pt_compare_opts co = {.profile = "exact", .format_a = s->log_format, .format_b = s->log_format};
    const int crc = pt_compare_runs(s->log_path, s->restart_log, &co, &cmp);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cmp, "verdict");
    cJSON_AddStringToObject(r, "final_compare", cJSON_IsString(v) ? v->valuestring : "not compared");
    *ok = crc == 0 && b->first_step - 1 <= a->last_step;
    char d[300];
    const cJSON *rs = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cmp, "reasons"), 0);
    snprintf(d, sizeof d, "killed after step %ld, restored step %ld, %ld steps replayed; %s", a->last_step,
             b->first_step - 1, a->last_step - (b->first_step - 1),
             *ok ? "the restarted run equals the uninterrupted one as printed"
                 : cJSON_IsString(rs) ? rs->valuestring : "the restarted run differs from the uninterrupted one");
    cJSON_AddStringToObject(r, "detail", d);
    cJSON_AddBoolToObject(r, "ok", *ok);
    cJSON_Delete(cmp);
    pt_runlog_free(&l);
    return r;
}

static void recovery(ev_judge *j) {
    const acc_ev_side *s = &j->s[1];
    if (!s->restart_log) { not_shown(j, "recovery", "the candidate's evidence holds no run with a failure and restart"); return; }
    bool ok;
    j->c->rec = recovery_of(j, s, &ok);
    if (!ok) acc_add_reason(j->c, "recovery: %s", cJSON_GetObjectItemCaseSensitive(j->c->rec, "detail")->valuestring);
}

// A log's training wall time: HF's train_runtime, else the stamps from the log's first line to its last step,
// else the sum of logged step times. NAN: the log has no times.
static double wall_of(const pt_runlog *l) {
    if (isfinite(l->runtime_s)) return l->runtime_s;
    if (l->n && isfinite(l->pts[l->n - 1].wall_time)) return l->pts[l->n - 1].wall_time;
    double s = 0;
    for (int i = 0; i < l->n; i++) {
        if (!isfinite(l->pts[i].step_time)) return NAN;
        s += l->pts[i].step_time * (l->pts[i].step > (i ? l->pts[i - 1].step : 0) ? l->pts[i].step - (i ? l->pts[i - 1].step : 0) : 1);
    }
    return l->n ? s : NAN;
}

static cJSON *cost_row(const acc_ev_side *s, const char *phase, double wall, double *total) {
    const cJSON *p = s->platform;
    const double price = jnum(p, "price_per_hour"), count = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(p, "count")) ? jnum(p, "count") : 1;
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(p, "device"), *src = cJSON_GetObjectItemCaseSensitive(p, "price_source");
    const cJSON *date = cJSON_GetObjectItemCaseSensitive(p, "price_date");
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "item", s->name);
    cJSON_AddStringToObject(r, "device", cJSON_IsString(dev) ? dev->valuestring : "?");
    cJSON_AddStringToObject(r, "phase", phase);
    cJSON_AddNumberToObject(r, "seconds", wall);
    cJSON_AddNumberToObject(r, "devices", count);
    cJSON_AddNumberToObject(r, "hours", wall * count / 3600.0);
    cJSON_AddNumberToObject(r, "price_per_hour", price);
    cJSON_AddStringToObject(r, "source", cJSON_IsString(src) ? src->valuestring : "?");
    cJSON_AddStringToObject(r, "date", cJSON_IsString(date) ? date->valuestring : "?");
    cJSON_AddNumberToObject(r, "cost", wall * count / 3600.0 * price);
    *total += wall * count / 3600.0 * price;
    return r;
}

// Why a side cannot be priced (NULL: it can).
static const char *unpriced(const acc_ev_side *s, double wall) {
    const cJSON *p = s->platform;
    if (!p) return "no platform record (evidence.json \"platform\")";
    if (!(jnum(p, "price_per_hour") >= 0)) return "its platform record has no price_per_hour";
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "price_source"))) return "its platform record has no price_source";
    if (!isfinite(wall)) return "its log has no time stamps or step times";
    return NULL;
}

// 6. Cost: each side's training (and the candidate's restarted run) at its device count and price per hour.
static void cost(ev_judge *j) {
    cJSON *co = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(co, "rows");
    double total = 0, tokens = 0;
    for (int i = 0; i < 2; i++) {
        const double w = wall_of(&j->s[i].log);
        const char *why = unpriced(&j->s[i], w);
        if (why) {
            char b[300];
            snprintf(b, sizeof b, "the %s %s: %s", i ? "candidate" : "baseline", j->s[i].name, why);
            not_shown(j, "cost", b);
            cJSON_Delete(co);
            return;
        }
        cJSON_AddItemToArray(rows, cost_row(&j->s[i], "training", w, &total));
        const double gb = jnum(j->s[i].recipe, "global_batch_size"), sl = jnum(j->s[i].recipe, "seq_len");
        if (isfinite(gb * sl) && j->s[i].log.n) tokens += gb * sl * (double)j->s[i].log.pts[j->s[i].log.n - 1].step;
    }
    pt_runlog rl;
    if (j->s[1].restart_log && pt_runlog_load(j->s[1].restart_log, j->s[1].log_format, &rl) == 0) {
        const double w = wall_of(&rl);
        if (isfinite(w)) cJSON_AddItemToArray(rows, cost_row(&j->s[1], "recovery run", w, &total));
        pt_runlog_free(&rl);
    }
    pt_clear_error();
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(j->s[1].platform, "currency");
    cJSON_AddStringToObject(co, "price_table", "the evidence's platform records");
    cJSON_AddStringToObject(co, "currency", cJSON_IsString(cur) ? cur->valuestring : "USD");
    cJSON_AddNumberToObject(co, "total_cost", total);
    cJSON_AddNumberToObject(co, "tokens", tokens);
    if (total > 0) cJSON_AddNumberToObject(co, "tokens_per_dollar", tokens / total);
    j->c->ev_cost = co;
}

// The verdict's reasons for what passed and what was waived (an ACCEPTED report says what it did not see).
static void accepted_reasons(ev_judge *j) {
    acc_add_reason(j->c, "convergence within the %s profile (%s vs %s)", j->profile, j->s[0].name, j->s[1].name);
    const cJSON *e;
    cJSON_ArrayForEach(e, j->not_shown)
        acc_add_reason(j->c, "%s: not shown (%s), waived by --waive",
                       cJSON_GetObjectItemCaseSensitive(e, "section")->valuestring,
                       cJSON_GetObjectItemCaseSensitive(e, "why")->valuestring);
}

static void platform_of(pt_platform *p, const acc_ev_side *s, const char *spec) {
    memset(p, 0, sizeof *p);
    snprintf(p->text, sizeof p->text, "%s", spec);
    snprintf(p->backend, sizeof p->backend, "evidence");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(s->recipe, "precision");
    snprintf(p->precision, sizeof p->precision, "%s", cJSON_IsString(pr) ? pr->valuestring : "fp32");
    p->tp = p->dp = p->fsdp = 1;
}

// The phases in order: 0 ACCEPTED, 1 REJECTED, 2 REFUSED (the recipes differ).
static int judge(ev_judge *j) {
    if (frozen(j) == 2) return 2;
    const int conv = convergence(j);
    if (conv == 2) return 2;
    referee(j);
    portability(j);
    recovery(j);
    cost(j);
    return cJSON_GetArraySize(j->c->reasons) > 0 ? 1 : 0;
}

static int setup(ev_judge *j, acc_ctx *c, pt_accept_opts *oo, const char *const spec[2]) {
    for (int i = 0; i < 2; i++) {
        if (acc_ev_load(&j->s[i], acc_ev_dir_of(spec[i])) != 0) return -1;
        platform_of(&j->pl[i], &j->s[i], spec[i]);
    }
    oo->baseline = j->pl[0];
    oo->candidate = j->pl[1];
    // two trainers' platforms are never "the same platform": by precision, as compare judges imported logs
    const bool bf16 = !strcmp(j->pl[0].precision, "bf16") || !strcmp(j->pl[1].precision, "bf16");
    j->profile = oo->profile ? oo->profile : bf16 ? "bf16" : "fp32";
    if (pt_mkdir_p(oo->output_dir) != 0 || !(c->out = realpath(oo->output_dir, NULL))) {
        pt_set_error("%s: cannot create the report directory", oo->output_dir);
        return -1;
    }
    c->logs = acc_xprintf("%s/logs", c->out);
    pt_mkdir_p(c->logs);
    pt_self_exe_path(c->exe_path, sizeof c->exe_path);
    c->phases = cJSON_CreateArray();
    c->reasons = cJSON_CreateArray();
    c->port = cJSON_CreateArray();
    c->t_start = pt_now_s();
    snprintf(c->cpu, sizeof c->cpu, "%s", "(evidence)");
    for (int i = 0; i < 2; i++) {
        run_t *r = i ? &c->cand : &c->base;
        *r = (run_t){.pl = i ? &oo->candidate : &oo->baseline, .role = i ? "candidate" : "baseline",
                     .dir = pt_strdup(j->s[i].dir), .eval_loss = NAN, .ok = true};
        metrics_of(&j->s[i].log, &r->m);
    }
    j->sec = c->evidence = cJSON_CreateObject();
    j->not_shown = cJSON_AddArrayToObject(j->sec, "not_shown");
    return 0;
}

int pt_accept_evidence(const pt_accept_opts *o, const char *base_spec, const char *cand_spec, const char *waive) {
    pt_clear_error();
    pt_accept_opts oo = *o;
    acc_ctx c = {.o = &oo, .tty = false};
    ev_judge j = {.c = &c};
    const char *spec[2] = {base_spec, cand_spec};
    int verdict = 2;
    if (parse_waive(&j, waive) == 0 && setup(&j, &c, &oo, spec) == 0) {
        acc_say(&c, "portatrain accept: evidence %s vs %s -> %s", j.s[0].name, j.s[1].name, c.out);
        verdict = judge(&j);
        if (verdict == 0) accepted_reasons(&j);
        cJSON_AddItemToObject(c.evidence, "waived", cJSON_CreateString(waive ? waive : ""));
        verdict = acc_report(&c, verdict);
    }
    for (int i = 0; i < 2; i++) acc_ev_free(&j.s[i]);
    cJSON_Delete(c.cmp); cJSON_Delete(c.port); cJSON_Delete(c.rec); cJSON_Delete(c.evidence); cJSON_Delete(c.ev_cost);
    cJSON_Delete(c.phases); cJSON_Delete(c.reasons);
    free(c.base.m.rows); free(c.cand.m.rows); free(c.base.dir); free(c.cand.dir); free(c.logs); free(c.out);
    return verdict;
}
