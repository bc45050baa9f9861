// accept's step-1 audit (docs/ACCEPT.md, "The step-1 audit"): both platforms train a few steps from the same
// init and batch at a constant learning rate, dump step 1's gradients, forward statistics and the first
// updates (train --audit-dump, train/audit.h), and the dumps are compared tensor by tensor with tolerances
// set over the measured noise of correct backends. Curves judge whether a candidate drifts too far; the
// audit finds defects too small to leave the curves' bounds and names the first layer and tensor that differ.
#include "harness/accept_internal.h"
#include "io/safetensors.h"
#include "train/audit.h"
#include "util/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Relative differences, each 8-17x the worst measured noise between correct fp32 platforms (cpu, cpu at one
// thread and opencl against cpu-ref, at 2 x 16 and 4 x 64 tokens; docs/ACCEPT.md, "The step-1 audit"). The
// updates' projections are looser: Adam's first steps turn a near-zero gradient element whose sign the noise
// flips into a full-size opposite update, about 2/sqrt(numel) of a projection.
static const struct {
    double loss, forward, grad_full, grad_proj, update_l2, update_proj;
} TOL = {1e-7, 5e-6, 2e-4, 5e-4, 1e-3, 5e-2};

typedef struct {
    cJSON *j;       // audit.json
    st_file grads;  // grads.safetensors
    bool have_grads;
} dump_t;

// The audit's training flags: the run's, at a constant learning rate (the recipe's peak, no warm-up) for K
// steps, no checkpoints, and the dump.
static void audit_args(acc_ctx *c, argbuf *a, const pt_platform *pl, const char *run_dir, const char *dump_dir,
                       char *ksteps) {
    argbuf full;
    acc_train_args(c, &full, pl, run_dir, 0);
    static const char *const dropped[] = {"--max-steps", "--warmup-steps", "--warmup-ratio", "--save-steps",
                                          "--lr-scheduler-type", "--lr-scheduler-kwargs"};
    memset(a, 0, sizeof *a);
    for (int i = 0; i < full.n; i++) {
        bool drop = false;
        for (size_t d = 0; d < PT_ARRAY_LEN(dropped); d++) drop |= !strcmp(full.v[i], dropped[d]);
        if (drop) i++;  // and its value
        else acc_ab_add(a, full.v[i]);
    }
    // acc_train_args' number texts live in `full`, which dies here: keep them in a's own storage
    for (int i = 0; i < a->n; i++)
        for (int k = 0; k < full.nn; k++)
            if (a->v[i] == full.num[k] && a->nn < (int)PT_ARRAY_LEN(a->num)) {
                snprintf(a->num[a->nn], sizeof a->num[0], "%s", full.num[k]);
                a->v[i] = a->num[a->nn++];
            }
    const char *extra[] = {"--max-steps", ksteps, "--warmup-steps", "0", "--save-steps", "0",
                           "--lr-scheduler-type", "constant", "--audit-dump", dump_dir};
    for (size_t i = 0; i < PT_ARRAY_LEN(extra); i++) acc_ab_add(a, extra[i]);
}

// Trains one platform's audit run into OUT/audit/ROLE. 0, or -1 with the error set.
static int audit_run(acc_ctx *c, const pt_platform *pl, const char *role, long k) {
    char *run = acc_xprintf("%s/audit/%s/run", c->out, role), *dump = acc_xprintf("%s/audit/%s/dump", c->out, role);
    char *log = acc_xprintf("audit_%s", role), *label = acc_xprintf("audit %s %s", role, pl->text);
    char ks[24];
    snprintf(ks, sizeof ks, "%ld", k);
    argbuf a;
    audit_args(c, &a, pl, run, dump, ks);
    progress_src pr = {NULL, 0, k};
    double wall = 0;
    const int rc = acc_run_child(c, label, log, NULL, &pr, &wall, 1, a.v);
    acc_add_phase(c, log, pl, "training", wall);
    metrics_t m = {0};
    if (acc_metrics_load(run, &m) == 0)
        for (int i = 0; i < m.n; i++) c->tokens += m.rows[i].tokens;
    free(m.rows);
    free(run); free(dump); free(log); free(label);
    return rc == 0 ? 0 : -1;
}

// Why a parsed audit.json cannot be compared, or NULL.
static const char *unusable(const cJSON *j, char *buf, size_t n) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(j, "reason");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, PT_AUDIT_FORMAT)) return "not a " PT_AUDIT_FORMAT " dump";
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "covered"))) {
        snprintf(buf, n, "covers nothing (%s)", cJSON_IsString(why) ? why->valuestring : "no reason given");
        return buf;
    }
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "grads")) ||
        !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "forward")) || !isfinite(jnum(j, "loss")))
        return "no step-1 loss, forward statistics or gradients";
    return NULL;
}

// A platform's dump: 0, or -1 with the reason it is not shown.
static int load_dump(acc_ctx *c, const char *role, dump_t *d) {
    char *dir = acc_xprintf("%s/audit/%s/dump", c->out, role), *jp = pt_path_join(dir, "audit.json"),
         *gp = pt_path_join(dir, "grads.safetensors");
    char buf[512];
    const char *why = NULL;
    int rc = -1;
    memset(d, 0, sizeof *d);
    if (!pt_file_exists(jp)) pt_set_error("%s: missing", jp);
    else if ((d->j = pt_json_parse_file(jp)) && (why = unusable(d->j, buf, sizeof buf)))
        pt_set_error("%s: %s", jp, why);
    else if (d->j && st_open(&d->grads, gp) == 0) d->have_grads = true, rc = 0;
    free(dir); free(jp); free(gp);
    return rc;
}

static void free_dump(dump_t *d) {
    cJSON_Delete(d->j);
    if (d->have_grads) st_close(&d->grads);
}

static const cJSON *find_named(const cJSON *arr, const char *name) {
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return e;
    }
    return NULL;
}

static double rel(double a, double b, double scale) {
    if (a == b) return 0;
    return scale > 0 ? fabs(a - b) / scale : INFINITY;
}

// The largest relative difference of two {l2, proj[]} records, relative to the baseline's L2 norm.
static double proj_diff(const cJSON *a, const cJSON *b) {
    const double l2 = jnum(a, "l2");
    double d = rel(l2, jnum(b, "l2"), l2);
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "proj"), *pb = cJSON_GetObjectItemCaseSensitive(b, "proj");
    if (cJSON_GetArraySize(pa) != PT_AUDIT_PROJ || cJSON_GetArraySize(pb) != PT_AUDIT_PROJ) return INFINITY;
    for (int k = 0; k < PT_AUDIT_PROJ; k++)
        d = PT_MAX(d, rel(cJSON_GetArrayItem(pa, k)->valuedouble, cJSON_GetArrayItem(pb, k)->valuedouble, l2));
    return isnan(d) ? INFINITY : d;
}

// ||ga - gb|| / ||ga|| of a tensor both dumps hold in full; -1 when either does not.
static double full_diff(const dump_t *a, const dump_t *b, const char *name) {
    const st_tensor *ta = st_find(&a->grads, name), *tb = st_find(&b->grads, name);
    if (!ta || !tb || ta->numel != tb->numel) return -1;
    float *x = pt_malloc(sizeof(float) * ta->numel), *y = pt_malloc(sizeof(float) * ta->numel);
    double dd = 0, aa = 0;
    if (st_read_float(&a->grads, ta, x, ta->numel) == 0 && st_read_float(&b->grads, tb, y, tb->numel) == 0)
        for (uint64_t i = 0; i < ta->numel; i++) {
            const double e = (double)x[i] - y[i];
            dd += e * e, aa += (double)x[i] * x[i];
        }
    else dd = INFINITY;
    free(x); free(y);
    return dd == 0 ? 0 : aa > 0 ? sqrt(dd / aa) : INFINITY;
}

// The update records of tensor `name` at every audited step: the largest difference of their L2 norms (relative)
// and of their projections (relative to the L2 norm), and the steps they occur at.
typedef struct {
    double l2, proj;
    long l2_step, proj_step;
} upd_diff;

static upd_diff update_diff(const cJSON *ua, const cJSON *ub, const char *name) {
    upd_diff u = {0, 0, 0, 0};
    for (int s = 0; s < cJSON_GetArraySize(ua); s++) {
        const cJSON *sa = cJSON_GetArrayItem(ua, s), *sb = cJSON_GetArrayItem(ub, s);
        const cJSON *ta = find_named(cJSON_GetObjectItemCaseSensitive(sa, "tensors"), name);
        const cJSON *tb = find_named(cJSON_GetObjectItemCaseSensitive(sb, "tensors"), name);
        const double l2 = jnum(ta, "l2"), dl = ta && tb ? rel(l2, jnum(tb, "l2"), l2) : INFINITY;
        const double dp = ta && tb ? proj_diff(ta, tb) : INFINITY;
        const long step = (long)jnum(sa, "step");
        if (!(dl <= u.l2)) u.l2 = isnan(dl) ? INFINITY : dl, u.l2_step = step;
        if (!(dp <= u.proj)) u.proj = dp, u.proj_step = step;
    }
    return u;
}

// An MoE layer's expert load (audit.c: "load", tokens per expert): the fraction of its routed slots that
// another expert took, exact (a slot is 1/(N*K), far above the forward tolerance: any moved token fails). -1
// when a has no load.
static double load_diff(const cJSON *a, const cJSON *b) {
    const cJSON *la = cJSON_GetObjectItemCaseSensitive(a, "load"), *lb = cJSON_GetObjectItemCaseSensitive(b, "load");
    if (!cJSON_IsArray(la)) return -1;
    const int E = cJSON_GetArraySize(la);
    if (!cJSON_IsArray(lb) || cJSON_GetArraySize(lb) != E) return INFINITY;
    double moved = 0, total = 0;
    for (int e = 0; e < E; e++) {
        const double x = cJSON_GetArrayItem(la, e)->valuedouble, y = cJSON_GetArrayItem(lb, e)->valuedouble;
        moved += fabs(x - y) / 2, total += x;
    }
    return total > 0 ? moved / total : moved > 0 ? INFINITY : 0;
}

// " 12 4 9 ..." of a load array: a report cell.
static char *load_text(const cJSON *load) {
    size_t n = 0, cap = 16 + 12 * (size_t)cJSON_GetArraySize(load);
    char *t = pt_malloc(cap);
    t[0] = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, load) n += (size_t)snprintf(t + n, cap - n, "%s%d", n ? " " : "", (int)e->valuedouble);
    return t;
}

// Per MoE layer, tokens per expert at step 1 on both platforms side by side (the report's expert-load table;
// a routing difference shows there first). NULL for a dense model.
static cJSON *expert_load_rows(const dump_t *a, const dump_t *b) {
    cJSON *rows = NULL;
    const cJSON *e, *fb = cJSON_GetObjectItemCaseSensitive(b->j, "forward");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(a->j, "forward")) {
        const cJSON *la = cJSON_GetObjectItemCaseSensitive(e, "load");
        if (!cJSON_IsArray(la)) continue;
        const cJSON *o = find_named(fb, cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring);
        const cJSON *lb = o ? cJSON_GetObjectItemCaseSensitive(o, "load") : NULL;
        if (!rows) rows = cJSON_CreateArray();
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "layer", jnum(e, "layer"));
        char *ta = load_text(la), *tb = cJSON_IsArray(lb) ? load_text(lb) : pt_strdup("missing");
        cJSON_AddStringToObject(r, "baseline", ta);
        cJSON_AddStringToObject(r, "candidate", tb);
        free(ta);
        free(tb);
        const double d = o ? load_diff(e, o) : INFINITY;
        cJSON_AddNumberToObject(r, "moved_fraction", isfinite(d) ? d : 1e308);
        cJSON_AddBoolToObject(r, "ok", d == 0);
        cJSON_AddItemToArray(rows, r);
    }
    return rows;
}

// RMS, max-abs and mean of one activation, relative to the baseline's RMS (max-abs: to its own); an expert
// load: load_diff.
static double forward_diff(const cJSON *a, const cJSON *b) {
    if (!b) return INFINITY;
    const double ld = load_diff(a, b);
    if (ld >= 0) return ld;
    const double r = jnum(a, "rms"), mx = jnum(a, "max_abs");
    double d = PT_MAX(rel(r, jnum(b, "rms"), r), rel(mx, jnum(b, "max_abs"), mx));
    d = PT_MAX(d, rel(jnum(a, "mean"), jnum(b, "mean"), r));
    return isnan(d) ? INFINITY : d;
}

typedef struct {
    const char *name;  // NULL: none differs
    double diff, tol;
    const char *how;
    long step;
    const char *after;  // forward: the statistic before it, the last identical one (NULL: it is the first)
} first_t;

static void note_first(first_t *f, const char *name, double diff, double tol, const char *how, long step) {
    if (f->name || diff <= tol) return;
    *f = (first_t){name, diff, tol, how, step, f->after};
}

// The forward statistics and the step-1 loss, in forward order: the table's rows, and the first that differs.
static cJSON *forward_rows(const dump_t *a, const dump_t *b, first_t *ff) {
    cJSON *rows = cJSON_CreateArray();
    const cJSON *e, *fb = cJSON_GetObjectItemCaseSensitive(b->j, "forward");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(a->j, "forward")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
        const double d = forward_diff(e, find_named(fb, name));
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "name", name);
        cJSON_AddNumberToObject(r, "rms_baseline", jnum(e, "rms"));
        cJSON_AddNumberToObject(r, "rel_diff", isfinite(d) ? d : 1e308);
        cJSON_AddNumberToObject(r, "tolerance", TOL.forward);
        cJSON_AddBoolToObject(r, "ok", d <= TOL.forward);
        cJSON_AddItemToArray(rows, r);
        note_first(ff, cJSON_GetObjectItemCaseSensitive(r, "name")->valuestring, d, TOL.forward, "forward", 0);
        if (!ff->name) ff->after = cJSON_GetObjectItemCaseSensitive(r, "name")->valuestring;
    }
    const double la = jnum(a->j, "loss"), dl = rel(la, jnum(b->j, "loss"), fabs(la));
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "name", "loss (step 1)");
    cJSON_AddNumberToObject(r, "rms_baseline", la);
    cJSON_AddNumberToObject(r, "rel_diff", isfinite(dl) ? dl : 1e308);
    cJSON_AddNumberToObject(r, "tolerance", TOL.loss);
    cJSON_AddBoolToObject(r, "ok", dl <= TOL.loss);
    cJSON_AddItemToArray(rows, r);
    note_first(ff, "the step-1 loss", dl, TOL.loss, "forward", 0);
    return rows;
}

// Per parameter tensor, in forward (state-dict) order: the step-1 gradient (full relative L2 where both dumps
// hold it, else L2 norm and projections) and the first updates. A gradient error spreads to every tensor the
// backward reaches after it, so the one that locates it is the first to differ in BACKWARD order: the state-dict
// order reversed (lm_head, the final norm, the last layer's down/up/gate, ..., the embedding last, where its
// lookup's gradient lands). An update error is elementwise: the first in forward order.
static cJSON *tensor_rows(const dump_t *a, const dump_t *b, first_t *fg, first_t *fu) {
    cJSON *rows = cJSON_CreateArray();
    const cJSON *e, *gb = cJSON_GetObjectItemCaseSensitive(b->j, "grads");
    const cJSON *ua = cJSON_GetObjectItemCaseSensitive(a->j, "updates");
    const cJSON *ub = cJSON_GetObjectItemCaseSensitive(b->j, "updates");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(a->j, "grads")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
        const cJSON *o = find_named(gb, name);
        double gd = full_diff(a, b, name), gt = TOL.grad_full;
        if (gd < 0) gd = o ? proj_diff(e, o) : INFINITY, gt = TOL.grad_proj;
        const upd_diff ud = update_diff(ua, ub, name);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "name", name);
        cJSON_AddNumberToObject(r, "grad_l2", jnum(e, "l2"));
        cJSON_AddNumberToObject(r, "grad_diff", isfinite(gd) ? gd : 1e308);
        cJSON_AddStringToObject(r, "grad_metric", gt == TOL.grad_full ? "full" : "projections");
        cJSON_AddNumberToObject(r, "grad_tolerance", gt);
        cJSON_AddNumberToObject(r, "update_l2_diff", isfinite(ud.l2) ? ud.l2 : 1e308);
        cJSON_AddNumberToObject(r, "update_proj_diff", isfinite(ud.proj) ? ud.proj : 1e308);
        cJSON_AddBoolToObject(r, "ok", gd <= gt && ud.l2 <= TOL.update_l2 && ud.proj <= TOL.update_proj);
        cJSON_AddItemToArray(rows, r);
        const char *kept = cJSON_GetObjectItemCaseSensitive(r, "name")->valuestring;
        note_first(fu, kept, ud.l2, TOL.update_l2, "L2 norm, relative", ud.l2_step);
        note_first(fu, kept, ud.proj, TOL.update_proj, "projections, relative to the L2 norm", ud.proj_step);
    }
    for (int i = cJSON_GetArraySize(rows) - 1; i >= 0; i--) {
        const cJSON *r = cJSON_GetArrayItem(rows, i);
        const bool full = !strcmp(cJSON_GetObjectItemCaseSensitive(r, "grad_metric")->valuestring, "full");
        note_first(fg, cJSON_GetObjectItemCaseSensitive(r, "name")->valuestring, jnum(r, "grad_diff"),
                   jnum(r, "grad_tolerance"), full ? "relative L2" : "norm and projections, relative", 0);
    }
    return rows;
}

// The verdict's one reason: the first forward statistic that differs (forward order), else the gradient where
// the error enters the backward, else the first update.
static void audit_reason(acc_ctx *c, const first_t *ff, const first_t *fg, const first_t *fu) {
    if (ff->name)
        acc_add_reason(c, "audit: forward statistics differ first at %s by %.2g (relative; tolerance %g), identical "
                       "up to %s%s%s%s", ff->name, ff->diff, ff->tol, ff->after ? ff->after : "the input",
                       fg->name ? "; the step-1 gradients differ from " : "",
                       fg->name ? fg->name : "", fg->name ? " on (backward order)" : "");
    else if (fg->name)
        acc_add_reason(c, "audit: %s gradient differs by %.2g (%s; tolerance %g) at step 1, the first to differ in "
                       "backward order; forward statistics identical within tolerance through the step-1 loss",
                       fg->name, fg->diff, fg->how, fg->tol);
    else if (fu->name)
        acc_add_reason(c, "audit: %s update at step %ld differs by %.2g (%s; tolerance %g); step-1 forward and "
                       "gradients identical within tolerance", fu->name, fu->step, fu->diff, fu->how, fu->tol);
}

static cJSON *tolerances(void) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "loss", TOL.loss);
    cJSON_AddNumberToObject(t, "forward", TOL.forward);
    cJSON_AddNumberToObject(t, "grad_full", TOL.grad_full);
    cJSON_AddNumberToObject(t, "grad_projections", TOL.grad_proj);
    cJSON_AddNumberToObject(t, "update_l2", TOL.update_l2);
    cJSON_AddNumberToObject(t, "update_projections", TOL.update_proj);
    return t;
}

// Why a pair is not audited, or NULL: the tolerances are fp32's, a layout's dump holds no gathered gradients.
static const char *skip_reason(acc_ctx *c, char *buf, size_t n) {
    const pt_platform *pls[2] = {&c->o->baseline, &c->o->candidate};
    for (int i = 0; i < 2; i++) {
        if (strcmp(pls[i]->precision, "fp32") || pls[i]->tf32)
            snprintf(buf, n, "platform %s: the audit's tolerances are set over fp32 noise (about 1e-5); bf16 and TF32 "
                     "rounding is orders of magnitude above them, so the curves judge this pair alone", pls[i]->text);
        else if (pt_platform_ranks(pls[i]) > 1)
            snprintf(buf, n, "platform %s runs a layout: the audit dump covers single processes only (a rank holds "
                     "its shard's gradients, not gathered ones)", pls[i]->text);
        else continue;
        return buf;
    }
    return NULL;
}

void acc_audit(acc_ctx *c) {
    cJSON *s = c->audit = cJSON_CreateObject();
    char why[512], sched[256];
    if (skip_reason(c, why, sizeof why)) {
        cJSON_AddStringToObject(s, "status", "skipped");
        cJSON_AddStringToObject(s, "reason", why);
        acc_say(c, "audit: skipped: %s", why);
        return;
    }
    const long k = PT_MIN((long)PT_AUDIT_STEPS, c->o->steps);
    snprintf(sched, sizeof sched, "%ld steps at a constant learning rate %g (the recipe's peak, no warm-up), so the "
             "updates compared are at full rate", k, c->o->learning_rate);
    cJSON_AddStringToObject(s, "schedule", sched);
    cJSON_AddNumberToObject(s, "steps", (double)k);
    cJSON_AddItemToObject(s, "tolerances", tolerances());
    const run_t *runs[2] = {&c->base, &c->cand};
    dump_t d[2];
    int bad = -1;
    for (int i = 0; i < 2; i++) {
        const int trc = audit_run(c, runs[i]->pl, runs[i]->role, k);
        char *err = trc ? pt_strdup(pt_last_error()) : NULL;
        if (load_dump(c, runs[i]->role, &d[i]) != 0 && bad < 0) {
            bad = i;
            snprintf(why, sizeof why, "%s%s%s", pt_last_error(), err ? "; its run: " : "", err ? err : "");
        }
        free(err);
    }
    if (bad >= 0) {
        cJSON_AddStringToObject(s, "status", "not shown");
        cJSON_AddStringToObject(s, "reason", why);
        acc_add_reason(c, "audit: the %s %s's dump is not shown: %s", runs[bad]->role, runs[bad]->pl->text, why);
    } else {
        first_t ff = {0}, fg = {0}, fu = {0};
        cJSON_AddStringToObject(s, "status", "compared");
        cJSON_AddItemToObject(s, "forward", forward_rows(&d[0], &d[1], &ff));
        cJSON_AddItemToObject(s, "tensors", tensor_rows(&d[0], &d[1], &fg, &fu));
        cJSON *load = expert_load_rows(&d[0], &d[1]);
        if (load) cJSON_AddItemToObject(s, "expert_load", load);
        const bool ok = !ff.name && !fg.name && !fu.name;
        cJSON_AddStringToObject(s, "verdict", ok ? "pass" : "fail");
        if (ff.name) cJSON_AddStringToObject(s, "first_forward", ff.name);
        if (fg.name) cJSON_AddStringToObject(s, "first_gradient", fg.name);
        if (fu.name) cJSON_AddStringToObject(s, "first_update", fu.name);
        audit_reason(c, &ff, &fg, &fu);
        acc_say(c, "audit: %s", ok ? "every tensor within tolerance" : "a tensor differs (see the verdict)");
    }
    for (int i = 0; i < 2; i++) free_dump(&d[i]);
}
