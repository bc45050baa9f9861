// The report's decision sections: the scorecard (each measure side by side), the reproduction block, the
// convergence evidence with every tolerance, and the cost (report_internal.h).
#include "harness/report_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define get rpt_get
#define num rpt_num

// ---- a table of text cells, in both outputs ----
// One row's cells in both outputs: <TAG>text</TAG> in HTML, "| text |" in Markdown (no line ends).
static void t_cells(out_t *o, const char *tag, const char *const *cells, int n) {
    for (int i = 0; i < n; i++) {
        fprintf(o->h, "<%s>", tag); rpt_esc(o->h, cells[i]); fprintf(o->h, "</%s>", tag);
        fprintf(o->m, " "); rpt_mesc(o->m, cells[i]); fprintf(o->m, " |");
    }
}
static void t_start(out_t *o, const char *cls, const char *const *hdr, int n) {
    fprintf(o->h, "<table%s%s%s><tr>", cls ? " class='" : "", cls ? cls : "", cls ? "'" : "");
    fprintf(o->m, "\n|");
    t_cells(o, "th", hdr, n);
    fprintf(o->h, "</tr>\n");
    fprintf(o->m, "\n|");
    for (int i = 0; i < n; i++) fprintf(o->m, "---|");
    fprintf(o->m, "\n");
}
static void t_row(out_t *o, const char *const *cells, int n) {
    fprintf(o->h, "<tr>");
    fprintf(o->m, "|");
    t_cells(o, "td", cells, n);
    fprintf(o->h, "</tr>\n");
    fprintf(o->m, "\n");
}
static void t_end(out_t *o) { fprintf(o->h, "</table>\n"); }
static void heading(out_t *o, const char *t) {
    fprintf(o->h, "<h2>"); rpt_esc(o->h, t); fprintf(o->h, "</h2>\n");
    fprintf(o->m, "\n## "); rpt_mesc(o->m, t); fprintf(o->m, "\n");
}
static void note(out_t *o, const char *t) {
    fprintf(o->h, "<p class='note'>"); rpt_esc(o->h, t); fprintf(o->h, "</p>\n");
    fprintf(o->m, "\n"); rpt_mesc(o->m, t); fprintf(o->m, "\n");
}
static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static double numv(const cJSON *o, const char *k) {
    double v;
    return num(o, k, &v) ? v : NAN;
}
static void cell(char *b, size_t n, double v, const char *unit) {
    if (!isfinite(v)) snprintf(b, n, "n/a");
    else snprintf(b, n, "%.4g%s%s", v, unit && *unit ? " " : "", unit ? unit : "");
}

// ---- scorecard ----
typedef struct {
    const char *measure, *unit;
    double v[2];
    const char *text[2];  // instead of a number (why there is none)
} measure_t;

// The portability row a side wrote (save) or read (restore): by SPEC, else by the suite's order
// (0: the baseline writes, the candidate reads; 1: the reverse).
static const cJSON *port_row(const cJSON *r, const char *role_key, const char *spec, int fallback) {
    const cJSON *po = get(r, "portability"), *e;
    int same = 0;
    cJSON_ArrayForEach(e, po) {
        const char *s = str(e, role_key);
        if (s && spec && !strcmp(s, spec)) same++;
    }
    if (same == 1) cJSON_ArrayForEach(e, po) {
            const char *s = str(e, role_key);
            if (s && !strcmp(s, spec)) return e;
        }
    return cJSON_IsArray(po) ? cJSON_GetArrayItem(po, fallback) : NULL;
}

static bool cpu_backend(const cJSON *side) {
    const char *b = str(side, "backend");
    return b && (!strcmp(b, "cpu") || !strcmp(b, "cpu-ref"));
}

static void fill_measures(const cJSON *r, measure_t *m, char currency[16]) {
    const char *role[2] = {"baseline", "candidate"};
    const cJSON *tp = get(r, "throughput"), *co = get(r, "cost"), *rc = get(r, "recovery");
    snprintf(currency, 16, "%s", str(co, "currency") ? str(co, "currency") : "USD");
    for (int s = 0; s < 2; s++) {
        const cJSON *side = get(r, role[s]), *t = get(tp, role[s]), *by = get(get(co, "by_side"), role[s]);
        const char *spec = str(side, "spec");
        m[0].v[s] = numv(t, "median_tokens_per_s");
        m[1].v[s] = numv(t, "mfu") * 100;
        if (!isfinite(m[1].v[s])) m[1].text[s] = str(t, "peak_note") ? "n/a (peak not known)" : NULL;
        m[2].v[s] = numv(get(side, "compile"), "compile_s");
        if (!isfinite(m[2].v[s]) && cpu_backend(side)) m[2].text[s] = "none (compiled ahead of time)";
        m[3].v[s] = numv(t, "median_step_time_s");
        m[4].v[s] = numv(port_row(r, "writer", spec, s), "save_time_s");
        m[5].v[s] = numv(port_row(r, "reader", spec, 1 - s), "restore_time_s");
        // the suite kills and recovers the candidate only
        m[6].v[s] = s == 1 ? numv(rc, "total_s") : NAN;
        if (s == 0) m[6].text[s] = "not run (the candidate is recovered)";
        m[7].v[s] = numv(by, "cost") + (s == 0 && isfinite(numv(get(by, "recorded"), "cost")) ? numv(get(by, "recorded"), "cost") : 0);
        m[8].v[s] = s == 1 ? numv(by, "cost_per_accepted_outcome") : NAN;
        if (s == 0) m[8].text[s] = "- (the reference)";
        else if (cJSON_IsNull(get(by, "cost_per_accepted_outcome"))) m[8].text[s] = "no accepted outcome";
        const double ph = numv(get(get(co, "prices"), role[s]), "per_hour");
        m[9].v[s] = isfinite(ph) && ph > 0 ? m[0].v[s] * 3600 / ph : NAN;
    }
}

void rpt_scorecard(out_t *o, const cJSON *r) {
    char cur[16], tpd[64];
    static const char *const names[10][2] = {
        {"throughput", "tokens/s"}, {"MFU (model FLOP/s / peak)", "%"}, {"compile time (run time)", "s"},
        {"step time (median)", "s"}, {"checkpoint save", "s"}, {"checkpoint restore", "s"}, {"time to recover", "s"},
        {"total cost", NULL}, {"cost per accepted outcome", NULL}, {"tokens per dollar (training)", NULL}};
    measure_t m[10];
    for (int i = 0; i < 10; i++) m[i] = (measure_t){.measure = names[i][0], .unit = names[i][1]};
    fill_measures(r, m, cur);
    m[7].unit = m[8].unit = cur;
    snprintf(tpd, sizeof tpd, "tokens/%s", cur);
    m[9].unit = tpd;
    fprintf(o->h, "<table class='sc'><caption><b>Scorecard</b></caption><tr><th>measure</th><th>baseline</th>"
                  "<th>candidate</th><th>candidate / baseline</th></tr>\n");
    fprintf(o->m, "## Scorecard\n\n| measure | baseline | candidate | candidate / baseline |\n|---|---|---|---|\n");
    for (int i = 0; i < 10; i++) {
        char c[2][64], ratio[32] = "n/a";
        for (int s = 0; s < 2; s++) {
            if (!isfinite(m[i].v[s]) && m[i].text[s]) snprintf(c[s], sizeof c[s], "%s", m[i].text[s]);
            else cell(c[s], sizeof c[s], m[i].v[s], m[i].unit);
        }
        if (isfinite(m[i].v[0]) && isfinite(m[i].v[1]) && m[i].v[0] > 0) snprintf(ratio, sizeof ratio, "%.3gx", m[i].v[1] / m[i].v[0]);
        const char *cells[] = {m[i].measure, c[0], c[1], ratio};
        fprintf(o->h, "<tr>");
        fprintf(o->m, "|");
        for (int k = 0; k < 4; k++) {
            fprintf(o->h, "<td>"); rpt_esc(o->h, cells[k]); fprintf(o->h, "</td>");
            fprintf(o->m, " "); rpt_mesc(o->m, cells[k]); fprintf(o->m, " |");
        }
        fprintf(o->h, "</tr>\n");
        fprintf(o->m, "\n");
    }
    fprintf(o->h, "</table>\n");
    fprintf(o->m, "\n");
}

// What the scorecard's numbers are, below it: MFU's peaks, the cost basis, a carried baseline cost.
void rpt_scorecard_notes(out_t *o, const cJSON *r) {
    const char *role[2] = {"baseline", "candidate"};
    char b[1400];
    const cJSON *co = get(r, "cost");
    for (int s = 0; s < 2; s++) {
        const cJSON *t = get(get(r, "throughput"), role[s]);
        const char *how = str(t, "peak_source") ? str(t, "peak_source") : str(t, "peak_note");
        if (!how) continue;
        snprintf(b, sizeof b, "MFU, %s: %.4g model GFLOP/s (%.4g FLOP per token, training) over a peak of %s.", role[s],
                 numv(t, "model_flops_per_s") / 1e9, numv(t, "flops_per_token"), how);
        note(o, b);
    }
    if (str(co, "basis")) {
        snprintf(b, sizeof b, "Cost: %s; tokens per dollar is the median tokens/s over the side's hourly price. "
                              "Time to recover and the step times are in seconds.", str(co, "basis"));
        note(o, b);
    }
    const cJSON *rec = get(get(get(co, "by_side"), "baseline"), "recorded");
    if (rec) {
        snprintf(b, sizeof b, "The baseline's total cost includes %.4g %s carried from its own record (%s): %s.",
                 numv(rec, "cost"), str(rec, "currency") ? str(rec, "currency") : "", str(rec, "record") ? str(rec, "record") : "?",
                 str(rec, "note") ? str(rec, "note") : "");
        note(o, b);
    } else if (str(get(get(co, "by_side"), "baseline"), "recorded_note"))
        note(o, str(get(get(co, "by_side"), "baseline"), "recorded_note"));
}

// ---- reproduction ----
static void settings_line(out_t *o, const cJSON *set) {
    char b[1024];
    snprintf(b, sizeof b, "Recipe: lr %s, %s schedule (warm-up %s steps), batch %s x %s tokens, %s steps, weight decay %s, "
             "clip %s; the full recipe is in the table.",
             rpt_fmt(set, "learning_rate", (char[32]){0}, 32), str(set, "lr_scheduler_type") ? str(set, "lr_scheduler_type") : "cosine",
             rpt_fmt(set, "warmup_steps", (char[32]){0}, 32), rpt_fmt(set, "per_device_train_batch_size", (char[32]){0}, 32),
             rpt_fmt(set, "seq_len", (char[32]){0}, 32), rpt_fmt(set, "steps", (char[32]){0}, 32),
             rpt_fmt(set, "weight_decay", (char[32]){0}, 32), rpt_fmt(set, "max_grad_norm", (char[32]){0}, 32));
    note(o, b);
}

static void obj_table(out_t *o, const cJSON *obj, const char *k0, const char *k1) {
    const char *hdr[] = {k0, k1};
    t_start(o, NULL, hdr, 2);
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        char b[64];
        char *pr = cJSON_IsObject(it) || cJSON_IsArray(it) ? cJSON_PrintUnformatted(it) : NULL;
        const char *cells[] = {it->string, pr ? pr : rpt_fmt(obj, it->string, b, sizeof b)};
        t_row(o, cells, 2);
        free(pr);
    }
    t_end(o);
}

void rpt_reproduction(out_t *o, const cJSON *r) {
    const cJSON *rp = get(r, "reproduction");
    heading(o, "Reproduction");
    if (!cJSON_IsObject(rp)) {
        fprintf(o->h, "<p class=na>not recorded</p>\n");
        fprintf(o->m, "not recorded\n");
        return;
    }
    const char *cwd = str(rp, "cwd"), *cmd = str(rp, "command");
    fprintf(o->h, "<pre id='command'>cd "); rpt_esc(o->h, cwd ? cwd : "."); fprintf(o->h, " &amp;&amp; ");
    rpt_esc(o->h, cmd ? cmd : "?"); fprintf(o->h, "</pre>\n");
    fprintf(o->m, "\n```\ncd %s && %s\n```\n", cwd ? cwd : ".", cmd ? cmd : "?");
    obj_table(o, get(rp, "software"), "software", "version");
    obj_table(o, get(rp, "devices"), "side", "device");
    settings_line(o, get(r, "settings"));
    obj_table(o, get(r, "settings"), "setting", "value");
    const cJSON *logs = get(rp, "logs"), *it;
    const char *lh[] = {"per-run log (first line: its command)"};
    t_start(o, NULL, lh, 1);
    cJSON_ArrayForEach(it, logs) if (cJSON_IsString(it)) t_row(o, (const char *[]){it->valuestring}, 1);
    t_end(o);
    const char *ph[] = {"run", "phase", "seconds", "machine load (1-min average at the phase's end)"};
    t_start(o, NULL, ph, 4);
    cJSON_ArrayForEach(it, get(r, "phases")) {
        char a[32], b[32];
        const char *cells[] = {str(it, "run") ? str(it, "run") : "?", str(it, "phase") ? str(it, "phase") : "?",
                               rpt_fmt(it, "seconds", a, sizeof a), rpt_fmt(it, "load_1m", b, sizeof b)};
        t_row(o, cells, 4);
    }
    t_end(o);
}

// Under the throughput chart: the machine's load during each side's training, and whether it changed (other
// jobs on the same cores explain dips a platform did not cause).
void rpt_load_note(out_t *o, const cJSON *r) {
    const cJSON *it;
    double lo = INFINITY, hi = -INFINITY, side[2] = {NAN, NAN};
    cJSON_ArrayForEach(it, get(r, "phases")) {
        const char *run = str(it, "run"), *ph = str(it, "phase");
        double l;
        if (!run || !ph || !num(it, "load_1m", &l)) continue;
        if (l < lo) lo = l;
        if (l > hi) hi = l;
        if (!strcmp(ph, "training") && (!strcmp(run, "baseline") || !strcmp(run, "candidate")))
            side[strcmp(run, "baseline") != 0] = l;
    }
    if (!(lo <= hi)) return;
    char b[512];
    if (hi - lo >= 0.5)
        snprintf(b, sizeof b, "Machine load changed during the experiment: 1-min load average %.2f..%.2f over the phases "
                 "(baseline training %.2f, candidate training %.2f; Reproduction lists each phase). Where it rose, other "
                 "jobs shared the cores: throughput dips there are theirs, not the platform's.", lo, hi, side[0], side[1]);
    else snprintf(b, sizeof b, "Machine load steady: 1-min load average %.2f..%.2f over the phases.", lo, hi);
    note(o, b);
}

// ---- convergence evidence ----
static void tol_row(out_t *o, const char *check, const cJSON *tol, const char *key, const char *what) {
    char b[64];
    const char *cells[] = {check, rpt_fmt(tol, key, b, sizeof b), what};
    t_row(o, cells, 3);
}

static void calibration(out_t *o, const cJSON *cv) {
    const char *prof = str(cv, "profile") ? str(cv, "profile") : "?";
    fprintf(o->h, "<p class='note'>Calibration: how each tolerance of the %s profile was set, from measured pairs of "
                  "correct platforms and wrong kernels: <a href='", prof);
    const char *docs = str(cv, "docs");  // the docs beside the binary that wrote the report, when found
    if (docs) { fprintf(o->h, "file://"); rpt_esc(o->h, docs); fprintf(o->h, "/"); }
    fprintf(o->h, "COMPARE.md#calibration'>docs/COMPARE.md, Calibration</a> (bf16: docs/PRECISION.md).</p>\n");
    fprintf(o->m, "\nCalibration: how each tolerance of the %s profile was set: [docs/COMPARE.md, Calibration](", prof);
    if (docs) fprintf(o->m, "file://%s/", docs);
    fprintf(o->m, "COMPARE.md#calibration) (bf16: docs/PRECISION.md).\n");
}

void rpt_convergence(out_t *o, const cJSON *cv) {
    const cJSON *tol = get(cv, "tolerances"), *it;
    char b[6][64];
    heading(o, "Convergence");
    if (!cJSON_IsObject(cv)) {
        fprintf(o->h, "<p class=na>not measured</p>\n");
        fprintf(o->m, "not measured\n");
        return;
    }
    snprintf(b[0], 64, "%s", str(cv, "profile") ? str(cv, "profile") : "n/a");
    snprintf(b[1], 64, "%s", str(cv, "verdict") ? str(cv, "verdict") : "n/a");
    const char *vh[] = {"profile", "verdict"};
    t_start(o, NULL, vh, 2);
    t_row(o, (const char *[]){b[0], b[1]}, 2);
    t_end(o);
    cJSON_ArrayForEach(it, get(cv, "reasons")) if (cJSON_IsString(it)) {
        fprintf(o->h, "<p>"); rpt_esc(o->h, it->valuestring); fprintf(o->h, "</p>\n");
        fprintf(o->m, "\n- "); rpt_mesc(o->m, it->valuestring); fprintf(o->m, "\n");
    }
    heading(o, "Tolerances");
    const char *th[] = {"check", "tolerance (relative)", "bounds"};
    t_start(o, NULL, th, 3);
    char early[96];
    snprintf(early, sizeof early, "the loss at each of the first %s steps", rpt_fmt(tol, "early_steps", b[2], 64));
    tol_row(o, "step 1 loss", tol, "step0_loss", "the first step's loss, before any drift");
    tol_row(o, "step 1 grad norm", tol, "step0_grad_norm", "the first step's gradient norm");
    tol_row(o, "early steps", tol, "early_loss", early);
    tol_row(o, "per step", tol, "per_step_loss", "the loss at every common step");
    tol_row(o, "final window", tol, "final_window_loss", "the mean loss of the last steps");
    tol_row(o, "eval", tol, "eval_loss", "the held-out loss of the final models");
    t_end(o);
    calibration(o, cv);
    const cJSON *s0 = get(cv, "step0");
    heading(o, "Step 1");
    const char *sh[] = {"quantity", "baseline", "candidate", "relative difference", "tolerance"};
    t_start(o, NULL, sh, 5);
    t_row(o, (const char *[]){"loss", rpt_fmt(s0, "loss_a", b[0], 64), rpt_fmt(s0, "loss_b", b[1], 64),
                              rpt_fmt(s0, "rel_diff", b[2], 64), rpt_fmt(tol, "step0_loss", b[3], 64)}, 5);
    t_row(o, (const char *[]){"grad norm", rpt_fmt(s0, "grad_norm_a", b[0], 64), rpt_fmt(s0, "grad_norm_b", b[1], 64),
                              rpt_fmt(s0, "grad_norm_rel_diff", b[2], 64), rpt_fmt(tol, "step0_grad_norm", b[3], 64)}, 5);
    t_end(o);
    const cJSON *es = get(cv, "early");
    heading(o, "Early steps");
    const char *eh[] = {"steps", "max relative difference", "tolerance"};
    t_start(o, NULL, eh, 3);
    t_row(o, (const char *[]){rpt_fmt(es, "steps", b[0], 64), rpt_fmt(es, "max_rel_diff", b[1], 64),
                              rpt_fmt(tol, "early_loss", b[2], 64)}, 3);
    t_end(o);
    const cJSON *ps = get(cv, "per_step");
    heading(o, "Per-step relative difference");
    const char *ph[] = {"steps compared", "max", "median", "first step over tolerance", "tolerance"};
    t_start(o, NULL, ph, 5);
    t_row(o, (const char *[]){rpt_fmt(ps, "n", b[0], 64), rpt_fmt(ps, "max_rel_diff", b[1], 64),
                              rpt_fmt(ps, "median_rel_diff", b[2], 64), rpt_fmt(ps, "first_exceed_step", b[3], 64),
                              rpt_fmt(tol, "per_step_loss", b[4], 64)}, 5);
    t_end(o);
    const cJSON *fw = get(cv, "final_window");
    heading(o, "Final window");
    const char *fh[] = {"steps", "baseline mean loss", "candidate mean loss", "relative difference", "tolerance"};
    t_start(o, NULL, fh, 5);
    t_row(o, (const char *[]){rpt_fmt(fw, "steps", b[0], 64), rpt_fmt(fw, "mean_a", b[1], 64), rpt_fmt(fw, "mean_b", b[2], 64),
                              rpt_fmt(fw, "rel_diff", b[3], 64), rpt_fmt(fw, "tolerance", b[4], 64)}, 5);
    t_end(o);
    const cJSON *ev = get(cv, "eval");
    heading(o, "Eval");
    const char *vh2[] = {"baseline loss", "candidate loss", "relative difference", "tolerance"};
    t_start(o, NULL, vh2, 4);
    t_row(o, (const char *[]){rpt_fmt(ev, "loss_a", b[0], 64), rpt_fmt(ev, "loss_b", b[1], 64),
                              rpt_fmt(ev, "rel_diff", b[2], 64), rpt_fmt(tol, "eval_loss", b[3], 64)}, 4);
    t_end(o);
}

// ---- cost ----
static void prices(out_t *o, const cJSON *co) {
    const cJSON *pr = get(co, "prices");
    const char *d0 = str(get(pr, "baseline"), "derivation"), *d1 = str(get(pr, "candidate"), "derivation");
    char b[1200];
    if (d0 && d1 && !strcmp(d0, d1)) snprintf(b, sizeof b, "Price, both sides: %s.", d0);
    else if (d0 || d1) snprintf(b, sizeof b, "Price, baseline: %s. Candidate: %s.", d0 ? d0 : "n/a", d1 ? d1 : "n/a");
    else {
        const cJSON *r0 = cJSON_GetArrayItem(get(co, "rows"), 0);
        if (!r0) return;
        snprintf(b, sizeof b, "Price source: %s (%s).", str(r0, "source") ? str(r0, "source") : "n/a",
                 str(r0, "date") ? str(r0, "date") : "n/a");
    }
    note(o, b);
}

static void by_side(out_t *o, const cJSON *co) {
    const cJSON *bs = get(co, "by_side");
    if (!cJSON_IsObject(bs)) return;
    const char *hdr[] = {"side", "cost of its phases here", "recorded run (carried, not in the total)", "cost per accepted outcome"};
    t_start(o, NULL, hdr, 4);
    const char *role[] = {"baseline", "candidate"};
    for (int s = 0; s < 2; s++) {
        const cJSON *x = get(bs, role[s]);
        char a[64], c[64], d[64];
        const char *carried = get(x, "recorded") ? rpt_fmt(get(x, "recorded"), "cost", c, sizeof c)
                              : str(x, "recorded_note") ? "not known" : "-";
        const char *per = s == 0 ? "-" : cJSON_IsNull(get(x, "cost_per_accepted_outcome")) ? "no accepted outcome"
                                                                                         : rpt_fmt(x, "cost_per_accepted_outcome", d, sizeof d);
        t_row(o, (const char *[]){role[s], rpt_fmt(x, "cost", a, sizeof a), carried, per}, 4);
    }
    t_end(o);
}

static void engineering(out_t *o, const cJSON *co) {
    const cJSON *eng = get(co, "engineering");
    if (!cJSON_IsArray(eng)) return;
    const char *ek[] = {"side", "platform", "what", "hours", "rate_per_hour", "cost", "source", "date"};
    rpt_arr_table(o, "Engineering effort (apart from machine cost)", eng, ek, 8);
    note(o, "People's time to port, profile and deploy, from the price table's engineering entries: not in "
            "total_cost, which is machine time only.");
}

void rpt_cost(out_t *o, const cJSON *r) {
    char b[64];
    const cJSON *co = get(r, "cost");
    const char *cok[] = {"item", "device", "phase", "hours", "price_per_hour", "cost"};
    rpt_arr_table(o, "Cost", get(co, "rows"), cok, 6);
    prices(o, co);
    const char *ctk[] = {"price_table", "currency", "total_cost", "accepted_outcomes", "cost_per_accepted_outcome", "tokens", "tokens_per_dollar", "basis"};
    heading(o, "Cost totals");
    if (!cJSON_IsObject(co)) {
        fprintf(o->h, "<p class=na>not measured</p>\n");
        fprintf(o->m, "not measured\n");
        return;
    }
    fprintf(o->h, "<table>");
    fprintf(o->m, "\n| field | value |\n|---|---|\n");
    for (int k = 0; k < 8; k++) {
        const char *s = rpt_fmt(co, ctk[k], b, sizeof b);
        if (k == 4 && cJSON_IsNull(get(co, ctk[k]))) s = "no accepted outcome";
        if (k == 7 && !get(co, ctk[k])) continue;
        fprintf(o->h, "<tr><td>%s</td><td>", ctk[k]); rpt_esc(o->h, s); fprintf(o->h, "</td></tr>\n");
        fprintf(o->m, "| %s | ", ctk[k]); rpt_mesc(o->m, s); fprintf(o->m, " |\n");
    }
    fprintf(o->h, "</table>\n");
    by_side(o, co);
    engineering(o, co);
}
