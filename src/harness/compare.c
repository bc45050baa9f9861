#include "harness/compare.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/accept.h"
#include "harness/runlog.h"
#include "util/common.h"

typedef struct {
    double step0_loss, step0_grad_norm;  // relative, first common step
    int early_steps;                     // the first common steps, before rounding differences compound
    double early_loss;                   // relative, each of those steps
    double per_step_loss;                // relative, every common step
    int window;                          // final-window length in steps
    double final_window_loss;            // relative, mean loss of the last `window` common steps
    double eval_loss;                    // relative
} tolerances;

// fp32: calibrated on cpu vs cpu-ref, tiny, 100 steps (docs/COMPARE.md): the
// early steps agree to ~1e-7 and carry the tight checks that catch a wrong
// kernel; later, two correct fp32 trajectories drift apart chaotically (2.6e-3
// per-step at step 100), so the whole-run bounds are ~4x above that drift.
// bf16 (a bf16 run against an fp32 one): calibrated on cpu bf16 and cpu-ref bf16
// against cpu-ref fp32, tiny, 100 steps (docs/PRECISION.md): correct bf16 runs
// measured step-0 loss <= 1.2e-5, step-0 grad norm <= 1.2e-4, early <= 3.7e-5;
// the whole-run numbers are chaotic drift (per-step <= 2.2e-2, final window
// <= 8.0e-3, eval <= 5.5e-3) and only bound it. A broken cast
// (PT_FAULT_KERNEL=bf16_cast) measured 1.6e-4, 1.1e-1, 1.0e-3: the step-0 and
// early checks carry the detection, as in fp32.
static int profile_tol(const char *p, const char *path, tolerances *t) {
    if (!strcmp(p, "exact")) { *t = (tolerances){0, 0, 10, 0, 0, 10, 0, 0}; return 0; }
    if (!strcmp(p, "fp32")) { *t = (tolerances){1e-5, 1e-3, 10, 1e-4, 1e-2, 10, 5e-3, 5e-3}; return 0; }
    if (!strcmp(p, "bf16")) { *t = (tolerances){1e-4, 1e-2, 10, 5e-4, 8e-2, 10, 2e-2, 2e-2}; return 0; }
    if (strcmp(p, "custom")) { pt_set_error("--profile: unknown profile \"%s\" (exact, fp32, bf16, custom)", p); return -1; }
    if (!path) { pt_set_error("--profile custom: needs --tolerances FILE"); return -1; }
    FILE *f = fopen(path, "rb");
    if (!f) { pt_set_error("%s: cannot open tolerances file", path); return -1; }
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    if (!cJSON_IsObject(j)) { cJSON_Delete(j); pt_set_error("%s: not a JSON object", path); return -1; }
    profile_tol("fp32", NULL, t);  // keys not given keep the fp32 values
    const struct { const char *k; double *v; } keys[] = {
        {"step0_loss", &t->step0_loss}, {"step0_grad_norm", &t->step0_grad_norm}, {"early_loss", &t->early_loss},
        {"per_step_loss", &t->per_step_loss}, {"final_window_loss", &t->final_window_loss},
        {"eval_loss", &t->eval_loss}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        cJSON *v = cJSON_GetObjectItem(j, keys[i].k);
        if (v && !cJSON_IsNumber(v)) { cJSON_Delete(j); pt_set_error("%s: \"%s\" is not a number", path, keys[i].k); return -1; }
        if (v) *keys[i].v = v->valuedouble;
    }
    cJSON *w = cJSON_GetObjectItem(j, "window");
    if (cJSON_IsNumber(w) && w->valuedouble >= 1) t->window = (int)w->valuedouble;
    cJSON *es = cJSON_GetObjectItem(j, "early_steps");
    if (cJSON_IsNumber(es) && es->valuedouble >= 0) t->early_steps = (int)es->valuedouble;
    cJSON_Delete(j);
    return 0;
}

static double rel(double a, double b) {
    if (a == b) return 0.0;  // also exact-profile bitwise check
    return fabs(a - b) / fmax(fabs(a), 1e-30);
}

static int cmp_d(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static cJSON *load_json_in(const char *dir, const char *name) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) { fclose(f); return NULL; }
    char *b = malloc((size_t)n + 1);
    size_t r = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[r] = 0;
    cJSON *j = cJSON_Parse(b);
    free(b);
    return j;
}
// Runs written before epoch boundaries were configurable record none: they used "wrap", no drop_last. Filled
// in so such a run compares equal to a "wrap" run and differs from an "hf" one.
static void default_epochs(cJSON *o) {
    if (!cJSON_IsObject(o)) return;
    if (!cJSON_GetObjectItemCaseSensitive(o, "epoch_boundary")) cJSON_AddStringToObject(o, "epoch_boundary", "wrap");
    if (!cJSON_GetObjectItemCaseSensitive(o, "dataloader_drop_last")) cJSON_AddFalseToObject(o, "dataloader_drop_last");
}
// A manifest's per_device_train_batch_size, replaced by global_micro_batch_size = it x fsdp x dp of the
// run's layout (platform.parallel; absent: one process): a single process with 4 rows a micro-step and FSDP2
// with 2 a rank read the same rows, so they are the same experiment on two platforms (docs/COMPARE.md). Returns
// the per-rank value (to list as an allowed difference), or NULL when there is none.
static cJSON *global_micro_batch(cJSON *hyper, const cJSON *platform) {
    cJSON *b = cJSON_DetachItemFromObjectCaseSensitive(hyper, "per_device_train_batch_size");
    if (!b) return NULL;
    if (!cJSON_IsNumber(b)) {  // not ours to judge: diffed as it stands
        cJSON_AddItemToObject(hyper, "per_device_train_batch_size", b);
        return NULL;
    }
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(platform, "parallel");
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(par, "fsdp"), *dp = cJSON_GetObjectItemCaseSensitive(par, "dp");
    const double ranks = (cJSON_IsNumber(fs) && fs->valuedouble >= 1 ? fs->valuedouble : 1) *
                         (cJSON_IsNumber(dp) && dp->valuedouble >= 1 ? dp->valuedouble : 1);
    cJSON_AddNumberToObject(hyper, "global_micro_batch_size", b->valuedouble * ranks);
    return b;
}

static cJSON *load_args(const char *dir) {
    cJSON *j = load_json_in(dir, "train_args.json");
    default_epochs(j);
    return j;
}

// Keys of train_args.json that do not change the math (allowed to differ).
static int allowed_key(const char *k) {
    static const char *ok[] = {"output_dir", "backend", "logging_steps", "save_steps", "save_total_limit", "omp_threads", "model", "data",
                               "resume_from_checkpoint", "mtbf_hours", "nan_max_count",
                               "num_train_epochs", "warmup_ratio"};  // these resolve max_steps and
                                                                     // warmup_steps, which are compared
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) if (!strcmp(k, ok[i])) return 1;
    return 0;
}

static void add_reason(cJSON *reasons, const char *fmt, ...) PT_PRINTF(2, 3);
static void add_reason(cJSON *reasons, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
}

static void add_diff(cJSON *list, const char *field, const cJSON *a, const cJSON *b) {
    char *sa = a ? cJSON_PrintUnformatted(a) : NULL, *sb = b ? cJSON_PrintUnformatted(b) : NULL;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "field", field);
    cJSON_AddStringToObject(d, "a", sa ? sa : "(missing)");
    cJSON_AddStringToObject(d, "b", sb ? sb : "(missing)");
    cJSON_AddItemToArray(list, d);
    free(sa);
    free(sb);
}

// Every leaf where a and b differ, as {field: "frozen.data[0].sha256", a, b}
// (a or b NULL: missing on that side). Objects by key, arrays by index.
static void json_diff(const cJSON *a, const cJSON *b, const char *path, cJSON *out) {
    char sub[1024];
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, a) {
            snprintf(sub, sizeof sub, "%s.%s", path, it->string);
            json_diff(it, cJSON_GetObjectItemCaseSensitive(b, it->string), sub, out);
        }
        cJSON_ArrayForEach(it, b) if (!cJSON_GetObjectItemCaseSensitive(a, it->string)) {
            snprintf(sub, sizeof sub, "%s.%s", path, it->string);
            json_diff(NULL, it, sub, out);
        }
        return;
    }
    if (cJSON_IsArray(a) && cJSON_IsArray(b)) {
        int na = cJSON_GetArraySize(a), nb = cJSON_GetArraySize(b);
        for (int i = 0; i < PT_MAX(na, nb); i++) {
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
            json_diff(i < na ? cJSON_GetArrayItem(a, i) : NULL, i < nb ? cJSON_GetArrayItem(b, i) : NULL, sub, out);
        }
        return;
    }
    if (!a || !b) { add_diff(out, path, a, b); return; }
    char *sa = cJSON_PrintUnformatted(a), *sb = cJSON_PrintUnformatted(b);
    if (strcmp(sa, sb)) add_diff(out, path, a, b);
    free(sa);
    free(sb);
}

// Frozen inputs. Both sides portatrain run dirs with manifest.json: "frozen" is
// compared field by field (any difference refuses), "platform", "software" and
// "run" are listed as allowed differences. Otherwise train_args.json (no file
// hashes: verified false), else nothing (imported logs).
static cJSON *frozen_inputs(const pt_runlog *A, const pt_runlog *B, int *refuse) {
    cJSON *fi = cJSON_CreateObject(), *diff = cJSON_CreateArray(), *allowed = cJSON_CreateArray();
    cJSON *ma = A->is_run_dir ? load_json_in(A->path, "manifest.json") : NULL,
          *mb = B->is_run_dir ? load_json_in(B->path, "manifest.json") : NULL;
    cJSON *fa = cJSON_GetObjectItemCaseSensitive(ma, "frozen"), *fb = cJSON_GetObjectItemCaseSensitive(mb, "frozen");
    *refuse = 0;
    if (cJSON_IsObject(fa) && cJSON_IsObject(fb)) {
        cJSON_AddBoolToObject(fi, "verified", 1);
        cJSON_AddStringToObject(fi, "source", "manifest.json");
        cJSON *ha = cJSON_GetObjectItemCaseSensitive(fa, "hyperparameters"),
              *hb = cJSON_GetObjectItemCaseSensitive(fb, "hyperparameters");
        default_epochs(ha);
        default_epochs(hb);
        // the per-rank batch is the layout's; the rows a micro-step reads over all ranks are the experiment's
        cJSON *pa = global_micro_batch(ha, cJSON_GetObjectItemCaseSensitive(ma, "platform")),
              *pb = global_micro_batch(hb, cJSON_GetObjectItemCaseSensitive(mb, "platform"));
        if (pa && pb && pa->valuedouble != pb->valuedouble)
            add_diff(allowed, "frozen.hyperparameters.per_device_train_batch_size", pa, pb);
        cJSON_Delete(pa);
        cJSON_Delete(pb);
        json_diff(fa, fb, "frozen", diff);
        *refuse = cJSON_GetArraySize(diff) > 0;
        static const char *free_parts[] = {"format", "version", "platform", "software", "run"};
        for (size_t i = 0; i < sizeof free_parts / sizeof free_parts[0]; i++)
            json_diff(cJSON_GetObjectItemCaseSensitive(ma, free_parts[i]),
                      cJSON_GetObjectItemCaseSensitive(mb, free_parts[i]), free_parts[i], allowed);
        cJSON_Delete(ma);
        cJSON_Delete(mb);
    } else {
        const char *missing = !cJSON_IsObject(fa) ? A->path : B->path;
        cJSON_Delete(ma);
        cJSON_Delete(mb);
        cJSON *ja = A->is_run_dir ? load_args(A->path) : NULL, *jb = B->is_run_dir ? load_args(B->path) : NULL;
        cJSON_AddBoolToObject(fi, "verified", 0);
        if (!ja || !jb) {
            cJSON_AddStringToObject(fi, "source", "none");
            cJSON_AddStringToObject(fi, "note", "frozen inputs unverified: at least one side is an imported log without train_args.json");
        } else {
            char note[4200];
            snprintf(note, sizeof note, "frozen inputs partly verified: %s has no manifest.json; train_args.json compared "
                     "(flags only, no hashes of weights, tokenizer or data)", missing);
            cJSON_AddStringToObject(fi, "source", "train_args.json");
            cJSON_AddStringToObject(fi, "note", note);
            cJSON *it;
            cJSON_ArrayForEach(it, ja) {
                cJSON *o = cJSON_GetObjectItem(jb, it->string);
                char *sa = cJSON_PrintUnformatted(it), *sb = o ? cJSON_PrintUnformatted(o) : NULL;
                if (!sb || strcmp(sa, sb)) {
                    if (allowed_key(it->string)) add_diff(allowed, it->string, it, o);
                    else { add_diff(diff, it->string, it, o); *refuse = 1; }
                }
                free(sa);
                free(sb);
            }
            cJSON_ArrayForEach(it, jb) if (!cJSON_GetObjectItem(ja, it->string)) {
                if (allowed_key(it->string)) add_diff(allowed, it->string, NULL, it);
                else { add_diff(diff, it->string, NULL, it); *refuse = 1; }
            }
        }
        cJSON_Delete(ja);
        cJSON_Delete(jb);
    }
    cJSON_AddBoolToObject(fi, "match", !*refuse);
    cJSON_AddItemToObject(fi, "differences", diff);
    cJSON_AddItemToObject(fi, "allowed_differences", allowed);
    return fi;
}

static int cmp_l(const void *x, const void *y) {
    long a = *(const long *)x, b = *(const long *)y;
    return (a > b) - (a < b);
}

// Non-finite values fail the comparison under every profile (each tolerance
// test "rel > tol" is false for NaN): listed under nonfinite.KEY, one reason.
static int nonfinite_steps(const pt_runlog *R, const char *key, cJSON *nf, cJSON *reasons) {
    cJSON *arr = cJSON_AddArrayToObject(nf, key);
    int n = 0;
    long first = 0;
    for (int i = 0; i < R->n; i++)
        if (R->pts[i].nonfinite) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)R->pts[i].step));
            if (n++ == 0 || R->pts[i].step < first) first = R->pts[i].step;
        }
    for (int i = 0; i < R->n_skipped; i++) {
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)R->skipped[i]));
        if (n++ == 0 || R->skipped[i] < first) first = R->skipped[i];
    }
    char sk[64] = "";
    if (R->n_skipped > 0) snprintf(sk, sizeof sk, " (%d logged as skipped)", R->n_skipped);
    if (n > 0)
        add_reason(reasons, "%s: non-finite loss or grad norm at %d step%s, first at step %ld%s", R->path, n,
                   n == 1 ? "" : "s", first, sk);
    return n > 0;
}

// Every step R has a line for (curve points and skipped steps), sorted, no repeats.
static long *logged_steps(const pt_runlog *R, int *n) {
    long *s = pt_malloc(sizeof(long) * (size_t)(R->n + R->n_skipped + 1));
    int k = 0;
    for (int i = 0; i < R->n; i++) s[k++] = R->pts[i].step;
    for (int i = 0; i < R->n_skipped; i++) s[k++] = R->skipped[i];
    qsort(s, (size_t)k, sizeof(long), cmp_l);
    int m = 0;
    for (int i = 0; i < k; i++)
        if (m == 0 || s[i] != s[m - 1]) s[m++] = s[i];
    *n = m;
    return s;
}

// How often a log writes a step: its most common interval (1 for a per-step
// log, logging_steps for HF, log_freq for TorchTitan); 0 with fewer than 2 steps.
static long usual_interval(const long *s, int n) {
    if (n < 2) return 0;
    long *d = pt_malloc(sizeof(long) * (size_t)(n - 1));
    for (int i = 0; i + 1 < n; i++) d[i] = s[i + 1] - s[i];
    qsort(d, (size_t)(n - 1), sizeof(long), cmp_l);
    long best = d[0];
    int run = 0, best_run = 0;
    for (int i = 0; i < n - 1; i++) {
        run = i > 0 && d[i] == d[i - 1] ? run + 1 : 1;
        if (run > best_run) { best_run = run; best = d[i]; }
    }
    free(d);
    return best;
}

// Whether a log (steps s[0..n), usual interval u) should have a line for step
// x that it lacks: x lies in a longer-than-usual gap of it, on its grid.
static bool should_have(const long *s, int n, long u, long x) {
    if (u <= 0 || n < 2 || x <= s[0] || x >= s[n - 1]) return false;
    int lo = 0, hi = n - 1;  // s[lo] < x < s[hi]
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (s[mid] == x) return false;
        if (s[mid] < x) lo = mid; else hi = mid;
    }
    return s[hi] - s[lo] > u && (x - s[lo]) % u == 0;
}

// Steps the other log has that this one should have logged too: logs with
// different intervals are compared on their common steps, but a hole in a
// log's own rhythm (a lost line, a resumed run that did not log) is a reason.
static int gap_steps(const pt_runlog *X, const long *xs, int xn, const long *ys, int yn, const char *key, cJSON *gaps,
                     cJSON *reasons) {
    const long u = usual_interval(xs, xn);
    int n = 0;
    long first = 0;
    for (int i = 0; i < yn; i++)
        if (should_have(xs, xn, u, ys[i]) && n++ == 0) first = ys[i];
    cJSON *g = cJSON_AddObjectToObject(gaps, key);
    cJSON_AddNumberToObject(g, "interval", (double)u);
    cJSON_AddNumberToObject(g, "missing_steps", n);
    if (n > 0) {
        cJSON_AddNumberToObject(g, "first", (double)first);
        add_reason(reasons, "%s has no line for step %ld (%d such step%s) although it logs every %ld step%s and the other run has it",
                   X->path, first, n, n == 1 ? "" : "s", u, u == 1 ? "" : "s");
    } else cJSON_AddNullToObject(g, "first");
    return n > 0;
}

// A log whose loss at step S is a mean over a window of steps (HF Trainer with
// logging_steps > 1: the steps since its previous log) is compared with the mean
// of the other log's per-step losses over the same steps, when that log has
// every one of them, each its own step's loss and finite; otherwise the point
// is left as it is. Y's loss at S is replaced (Y's other points are unchanged).
// Returns the number of points of X so matched.
static int match_windows(const pt_runlog *X, pt_runlog *Y) {
    int matched = 0, iy = 0;
    for (int i = 0; i < X->n; i++) {
        const pt_runpoint *x = &X->pts[i];
        if (x->window <= 1 || x->nonfinite) continue;
        while (iy < Y->n && Y->pts[iy].step < x->step) iy++;
        if (iy >= Y->n || Y->pts[iy].step != x->step || Y->pts[iy].window > 1 || iy + 1 < x->window) continue;
        // Y is sorted by step with distinct steps: the window is Y's points iy-w+1 .. iy when they are consecutive.
        const int lo = iy - x->window + 1;
        if (Y->pts[lo].step != x->step - x->window + 1) continue;
        double sum = 0, res = 0;
        bool ok = true;
        for (int k = lo; k <= iy && ok; k++) {
            ok = Y->pts[k].window <= 1 && !Y->pts[k].nonfinite;
            sum += Y->pts[k].loss;
            res += Y->pts[k].loss_res;
        }
        if (!ok) continue;
        Y->pts[iy].loss = sum / x->window;
        Y->pts[iy].loss_res = res / x->window;
        Y->pts[iy].window = x->window;
        matched++;
    }
    return matched;
}

// The relative difference two printed values may show although the values they were rounded from are equal:
// each carries half a unit of its last printed digit (0 for full-precision logs).
static double rounding_floor(double a, double res_a, double res_b) {
    return (res_a + res_b) / fmax(fabs(a), 1e-30);
}

// A check's tolerance is never below what the logs' printing alone can produce; when the print is what sets
// it, the check is stated as limited by rounding, not by the platform.
static double effective_tol(double tol, double floor_, bool *limited) {
    *limited = floor_ > tol;
    return fmax(tol, floor_);
}

static void add_note(cJSON *notes, const char *check, double tol, double floor_, const char *what) {
    add_reason(notes, "%s: the logs' print precision (%s), not the platform, limits this check: "
               "effective tolerance %.3g instead of %.3g", check, what, floor_, tol);
}

static const char *side_name(int k) { return k ? "B" : "A"; }

static const char *end_name(pt_run_end e) {
    static const char *n[] = {"unknown", "finished", "nonfinite", "error", "truncated"};
    return n[e];
}

// Whether run X (side k) stopped before the end: its log says so (a non-finite stop, an error, no end-of-training
// line where its trainer prints one), or it ends a logging interval or more before the other run's log. A run
// that stopped early is never ACCEPTED: its remaining steps were never compared.
static int check_completion(const pt_runlog *X, const long *xs, int xn, const long *ys, int yn, int k, cJSON *comp,
                            cJSON *reasons) {
    const long last = xn ? xs[xn - 1] : -1, other = yn ? ys[yn - 1] : -1, u = PT_MAX(usual_interval(xs, xn), 1L);
    cJSON *c = cJSON_AddObjectToObject(comp, k ? "b" : "a");
    cJSON_AddNumberToObject(c, "last_step", (double)last);
    cJSON_AddStringToObject(c, "end", end_name(X->end));
    cJSON_AddNumberToObject(c, "attempts", X->attempts);
    cJSON_AddNumberToObject(c, "checkpoint_saves", X->ckpt_saves);
    cJSON_AddNumberToObject(c, "checkpoint_loads", X->ckpt_loads);
    if (X->resumed_from >= 0) cJSON_AddNumberToObject(c, "resumed_from", (double)X->resumed_from);
    char why[256] = "";
    long at = X->stop_step >= 0 ? X->stop_step : last;
    if (X->end == PT_END_NONFINITE || X->end == PT_END_ERROR || X->end == PT_END_TRUNCATED)
        snprintf(why, sizeof why, "%s", X->stop_reason);
    else if (last < other && other >= last + u)
        snprintf(why, sizeof why, "its log ends there and run %s's goes on to step %ld", side_name(!k), other);
    cJSON_AddBoolToObject(c, "stopped_early", why[0] != 0);
    if (!why[0]) { cJSON_AddNullToObject(c, "stopped_at"); return 0; }
    cJSON_AddNumberToObject(c, "stopped_at", (double)at);
    cJSON_AddStringToObject(c, "reason", why);
    add_reason(reasons, "run %s (%s) stopped at step %ld: %s", side_name(k), X->path, at, why);
    return 1;
}

// The finite points both runs logged, matched by step, with what each printed value may be off by.
typedef struct {
    int n, missing;
    long *st;
    double *la, *lb, *ra, *rb, *rd;  // losses, their print resolutions, relative differences
    double g0a, g0b, g0ra, g0rb;     // first common step's grad norms and resolutions
} pairs;

static void pairs_build(const pt_runlog *A, const pt_runlog *B, pairs *p) {
    const size_t cap = (size_t)A->n + 1;
    *p = (pairs){0, 0, pt_malloc(sizeof(long) * cap), pt_malloc(sizeof(double) * cap), pt_malloc(sizeof(double) * cap),
                 pt_malloc(sizeof(double) * cap), pt_malloc(sizeof(double) * cap), pt_malloc(sizeof(double) * cap),
                 NAN, NAN, 0, 0};
    int ib = 0, b_finite = 0;
    for (int i = 0; i < B->n; i++) b_finite += !B->pts[i].nonfinite;
    for (int i = 0; i < A->n; i++) {
        const pt_runpoint *a = &A->pts[i];
        if (a->nonfinite) continue;
        while (ib < B->n && B->pts[ib].step < a->step) ib++;
        if (ib >= B->n || B->pts[ib].step != a->step) { p->missing++; continue; }
        const pt_runpoint *b = &B->pts[ib];
        if (b->nonfinite) continue;  // not a common step, not a missing one either
        if (p->n == 0) { p->g0a = a->grad_norm; p->g0b = b->grad_norm; p->g0ra = a->grad_norm_res; p->g0rb = b->grad_norm_res; }
        const int k = p->n++;
        p->st[k] = a->step; p->la[k] = a->loss; p->lb[k] = b->loss; p->ra[k] = a->loss_res; p->rb[k] = b->loss_res;
        p->rd[k] = rel(a->loss, b->loss);
    }
    p->missing += b_finite - p->n;
}

static void pairs_free(pairs *p) { free(p->st); free(p->la); free(p->lb); free(p->ra); free(p->rb); free(p->rd); }

static int check_step0(const pairs *p, const tolerances *t, cJSON *s0, cJSON *notes, cJSON *reasons) {
    int rejected = 0;
    bool lim_l, lim_g = false;
    const double r0 = p->rd[0], tl = effective_tol(t->step0_loss, rounding_floor(p->la[0], p->ra[0], p->rb[0]), &lim_l);
    const double g0 = (isnan(p->g0a) || isnan(p->g0b)) ? NAN : rel(p->g0a, p->g0b);
    const double tg = isnan(g0) ? t->step0_grad_norm
                                : effective_tol(t->step0_grad_norm, rounding_floor(p->g0a, p->g0ra, p->g0rb), &lim_g);
    cJSON_AddNumberToObject(s0, "step", (double)p->st[0]);
    cJSON_AddNumberToObject(s0, "loss_a", p->la[0]);
    cJSON_AddNumberToObject(s0, "loss_b", p->lb[0]);
    cJSON_AddNumberToObject(s0, "loss_rel_diff", r0);
    cJSON_AddNumberToObject(s0, "loss_tolerance", tl);
    cJSON_AddBoolToObject(s0, "loss_limited_by_rounding", lim_l);
    if (!isnan(g0)) cJSON_AddNumberToObject(s0, "grad_norm_rel_diff", g0);
    else cJSON_AddNullToObject(s0, "grad_norm_rel_diff");
    cJSON_AddNumberToObject(s0, "grad_norm_tolerance", tg);
    cJSON_AddBoolToObject(s0, "grad_norm_limited_by_rounding", lim_g);
    if (lim_l) add_note(notes, "step-0 loss", t->step0_loss, tl, "+-half a unit of the last printed digit");
    if (lim_g) add_note(notes, "step-0 grad norm", t->step0_grad_norm, tg, "+-half a unit of the last printed digit");
    if (r0 > tl) { rejected = 1; add_reason(reasons, "step-0 (step %ld) loss rel diff %.3g > tolerance %.3g", p->st[0], r0, tl); }
    if (!isnan(g0) && g0 > tg) {
        rejected = 1;
        add_reason(reasons, "step-0 (step %ld) grad-norm rel diff %.3g > tolerance %.3g", p->st[0], g0, tg);
    }
    return rejected;
}

// Steps [0, ne) of the pairs against tol, each step's tolerance raised to its rounding floor. Returns the first
// step over its tolerance (-1: none); *mx the largest difference, *limited the steps whose floor set it.
static long scan_steps(const pairs *p, int ne, double tol, double *mx, int *limited) {
    long first = -1;
    *mx = 0;
    *limited = 0;
    for (int i = 0; i < ne; i++) {
        bool lim;
        const double te = effective_tol(tol, rounding_floor(p->la[i], p->ra[i], p->rb[i]), &lim);
        *limited += lim;
        if (p->rd[i] > *mx) *mx = p->rd[i];
        if (first < 0 && p->rd[i] > te) first = p->st[i];
    }
    return first;
}

static int check_early(const pairs *p, const tolerances *t, cJSON *res, cJSON *notes, cJSON *reasons) {
    const int ne = PT_MIN(t->early_steps, p->n);
    double mx;
    int lim;
    const long first = scan_steps(p, ne, t->early_loss, &mx, &lim);
    cJSON *es = cJSON_AddObjectToObject(res, "early");
    cJSON_AddNumberToObject(es, "steps", ne);
    cJSON_AddNumberToObject(es, "max_rel_diff", mx);
    cJSON_AddNumberToObject(es, "tolerance", t->early_loss);
    cJSON_AddNumberToObject(es, "limited_by_rounding_steps", lim);
    if (lim) add_reason(notes, "early-step loss: the logs' print precision, not the platform, limits %d of %d steps", lim, ne);
    if (first < 0) return 0;
    add_reason(reasons, "early-step (first %d) loss rel diff max %.3g > tolerance %.3g, first at step %ld", ne, mx,
               t->early_loss, first);
    return 1;
}

static double median_of(const double *v, int n) {
    double *s = pt_malloc(sizeof(double) * (size_t)n);
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_d);
    const double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static int check_per_step(const pairs *p, const pt_runlog *A, const pt_runlog *B, const int windowed[2],
                          const tolerances *t, cJSON *ps, cJSON *notes, cJSON *reasons) {
    double mx;
    int lim;
    const long first = scan_steps(p, p->n, t->per_step_loss, &mx, &lim);
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < p->n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "step", (double)p->st[i]);
        cJSON_AddNumberToObject(e, "rel", p->rd[i]);
        cJSON_AddItemToArray(arr, e);
    }
    cJSON_AddNumberToObject(ps, "n", p->n);
    cJSON_AddNumberToObject(ps, "missing", p->missing);
    // steps where one log's loss is a mean over several steps (HF logging_steps) and the other's per-step
    // losses were averaged over the same steps to compare them
    cJSON_AddNumberToObject(ps, "windowed_a", windowed[0]);
    cJSON_AddNumberToObject(ps, "windowed_b", windowed[1]);
    // lines of a step logged again later (a restarted run's replay): the last one was compared
    cJSON_AddNumberToObject(ps, "repeated_a", A->repeated);
    cJSON_AddNumberToObject(ps, "repeated_b", B->repeated);
    cJSON_AddNumberToObject(ps, "max_rel_diff", mx);
    cJSON_AddNumberToObject(ps, "median_rel_diff", median_of(p->rd, p->n));
    cJSON_AddNumberToObject(ps, "limited_by_rounding_steps", lim);
    if (first >= 0) cJSON_AddNumberToObject(ps, "first_exceed_step", (double)first);
    else cJSON_AddNullToObject(ps, "first_exceed_step");
    cJSON_AddItemToObject(ps, "rel_diff", arr);
    if (lim) add_reason(notes, "per-step loss: the logs' print precision, not the platform, limits %d of %d steps", lim, p->n);
    if (first < 0) return 0;
    add_reason(reasons, "per-step loss rel diff max %.3g > tolerance %.3g, first at step %ld", mx, t->per_step_loss, first);
    return 1;
}

static int check_final_window(const pairs *p, const tolerances *t, cJSON *fw, cJSON *notes, cJSON *reasons) {
    const int w = PT_MIN(t->window, p->n);
    double ma = 0, mb = 0, res_a = 0, res_b = 0;
    for (int i = p->n - w; i < p->n; i++) { ma += p->la[i]; mb += p->lb[i]; res_a += p->ra[i]; res_b += p->rb[i]; }
    ma /= w; mb /= w;
    const double fr = rel(ma, mb);
    bool lim;
    const double te = effective_tol(t->final_window_loss, rounding_floor(ma, res_a / w, res_b / w), &lim);
    cJSON_AddNumberToObject(fw, "window", w);
    cJSON_AddNumberToObject(fw, "mean_loss_a", ma);
    cJSON_AddNumberToObject(fw, "mean_loss_b", mb);
    cJSON_AddNumberToObject(fw, "rel_diff", fr);
    cJSON_AddNumberToObject(fw, "tolerance", te);
    cJSON_AddBoolToObject(fw, "limited_by_rounding", lim);
    if (lim) add_note(notes, "final-window loss", t->final_window_loss, te, "the mean of the printed losses");
    if (fr <= te) return 0;
    add_reason(reasons, "final-window (last %d steps) mean loss rel diff %.3g > tolerance %.3g", w, fr, te);
    return 1;
}

static int check_eval(const pt_runlog *A, const pt_runlog *B, const tolerances *t, cJSON *ev, cJSON *reasons) {
    if (isnan(A->eval_loss) || isnan(B->eval_loss)) {
        cJSON_AddStringToObject(ev, "note", "not compared: eval.json missing on at least one side");
        return 0;
    }
    const double er = rel(A->eval_loss, B->eval_loss);
    cJSON_AddNumberToObject(ev, "loss_a", A->eval_loss);
    cJSON_AddNumberToObject(ev, "loss_b", B->eval_loss);
    cJSON_AddNumberToObject(ev, "rel_diff", er);
    if (er <= t->eval_loss) return 0;
    add_reason(reasons, "eval loss rel diff %.3g > tolerance %.3g", er, t->eval_loss);
    return 1;
}

// A run dir's platform from its manifest.json, as accept's SPEC names it; -1 without one (an imported log).
static int manifest_platform(const pt_runlog *R, pt_platform *p) {
    memset(p, 0, sizeof *p);
    cJSON *m = R->is_run_dir ? load_json_in(R->path, "manifest.json") : NULL;
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(m, "platform"),
                *par = cJSON_GetObjectItemCaseSensitive(pl, "parallel"),
                *be = cJSON_GetObjectItemCaseSensitive(pl, "backend"), *pr = cJSON_GetObjectItemCaseSensitive(pl, "precision");
    const int ok = cJSON_IsString(be) && cJSON_IsString(pr);
    if (ok) {
        snprintf(p->backend, sizeof p->backend, "%s", be->valuestring);
        snprintf(p->precision, sizeof p->precision, "%s", pr->valuestring);
        p->tf32 = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pl, "tf32"));
        const char *dims[] = {"tp", "dp", "fsdp"};
        int *dst[] = {&p->tp, &p->dp, &p->fsdp};
        for (int k = 0; k < 3; k++) {
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(par, dims[k]);
            *dst[k] = cJSON_IsNumber(d) ? d->valueint : 1;
        }
        snprintf(p->text, sizeof p->text, "%s:%s%s", p->backend, p->precision, p->tf32 ? ":tf32" : "");
    }
    cJSON_Delete(m);
    return ok ? 0 : -1;
}

// The profile when --profile names none: the one accept judges the two platforms with (read from both runs'
// manifest.json), so that compare and accept give one pair one verdict; fp32 where a side has no manifest.
static const char *pick_profile(const pt_runlog *A, const pt_runlog *B, char *why, size_t n) {
    pt_platform pa, pb;
    if (manifest_platform(A, &pa) != 0 || manifest_platform(B, &pb) != 0) {
        snprintf(why, n, "the default: a side has no manifest.json to pick it from");
        return "fp32";
    }
    const char *reason;
    const char *prof = pt_platform_pair_profile(&pa, &pb, &reason);
    snprintf(why, n, "from the manifests: %s vs %s, %s", pa.text, pb.text, reason);
    return prof;
}

static cJSON *profile_json(const char *prof, const char *why, const tolerances *t) {
    cJSON *pj = cJSON_CreateObject();
    cJSON_AddStringToObject(pj, "name", prof);
    cJSON_AddStringToObject(pj, "why", why);
    cJSON_AddNumberToObject(pj, "step0_loss", t->step0_loss);
    cJSON_AddNumberToObject(pj, "step0_grad_norm", t->step0_grad_norm);
    cJSON_AddNumberToObject(pj, "early_steps", t->early_steps);
    cJSON_AddNumberToObject(pj, "early_loss", t->early_loss);
    cJSON_AddNumberToObject(pj, "per_step_loss", t->per_step_loss);
    cJSON_AddNumberToObject(pj, "window", t->window);
    cJSON_AddNumberToObject(pj, "final_window_loss", t->final_window_loss);
    cJSON_AddNumberToObject(pj, "eval_loss", t->eval_loss);
    return pj;
}

// The coarsest print resolution of a log's losses and grad norms (0: full precision).
static void precision_json(const pt_runlog *R, cJSON *prec, const char *key) {
    double l = 0, g = 0;
    for (int i = 0; i < R->n; i++) { l = fmax(l, R->pts[i].loss_res); g = fmax(g, R->pts[i].grad_norm_res); }
    cJSON *o = cJSON_AddObjectToObject(prec, key);
    cJSON_AddNumberToObject(o, "loss_resolution", l);
    cJSON_AddNumberToObject(o, "grad_norm_resolution", g);
}

static void frozen_reasons(cJSON *fi, cJSON *reasons) {
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(fi, "differences"))
        add_reason(reasons, "frozen input %s differs: %s vs %s", cJSON_GetObjectItem(it, "field")->valuestring,
                   cJSON_GetObjectItem(it, "a")->valuestring, cJSON_GetObjectItem(it, "b")->valuestring);
}

// Checks that hold before any tolerance: non-finite values, lost lines, runs that stopped early.
static int check_logs(const pt_runlog *A, const pt_runlog *B, cJSON *res, cJSON *reasons) {
    int rejected = 0, na, nb;
    cJSON *nf = cJSON_AddObjectToObject(res, "nonfinite"), *gaps = cJSON_AddObjectToObject(res, "gaps"),
          *comp = cJSON_AddObjectToObject(res, "completion");
    rejected |= nonfinite_steps(A, "a", nf, reasons);
    rejected |= nonfinite_steps(B, "b", nf, reasons);
    long *sa = logged_steps(A, &na), *sb = logged_steps(B, &nb);
    rejected |= gap_steps(A, sa, na, sb, nb, "a", gaps, reasons);
    rejected |= gap_steps(B, sb, nb, sa, na, "b", gaps, reasons);
    rejected |= check_completion(A, sa, na, sb, nb, 0, comp, reasons);
    rejected |= check_completion(B, sb, nb, sa, na, 1, comp, reasons);
    free(sa);
    free(sb);
    return rejected;
}

static int check_curves(const pt_runlog *A, const pt_runlog *B, const int windowed[2], const tolerances *t,
                        cJSON *res, cJSON *notes, cJSON *reasons) {
    cJSON *s0 = cJSON_AddObjectToObject(res, "step0"), *ps = cJSON_AddObjectToObject(res, "per_step"),
          *fw = cJSON_AddObjectToObject(res, "final_window");
    pairs p;
    pairs_build(A, B, &p);
    int rejected = 0;
    if (p.n == 0) {
        add_reason(reasons, "no common steps between %s (%d steps) and %s (%d steps)", A->path, A->n, B->path, B->n);
        rejected = 1;
    } else {
        rejected |= check_step0(&p, t, s0, notes, reasons);
        rejected |= check_early(&p, t, res, notes, reasons);
        rejected |= check_per_step(&p, A, B, windowed, t, ps, notes, reasons);
        rejected |= check_final_window(&p, t, fw, notes, reasons);
    }
    pairs_free(&p);
    return rejected;
}

int pt_compare_runs(const char *run_a, const char *run_b, const pt_compare_opts *o, cJSON **out) {
    pt_compare_opts d = {0};
    if (!o) o = &d;
    if (out) *out = NULL;
    const char *prof = o->profile;
    tolerances t;
    if (prof && profile_tol(prof, o->tolerances_path, &t)) return 2;
    pt_runlog A = {0}, B = {0};
    if (pt_runlog_load(run_a, o->format_a, &A)) { pt_runlog_free(&A); return 2; }  // frees a partial load
    if (pt_runlog_load(run_b, o->format_b, &B)) { pt_runlog_free(&A); pt_runlog_free(&B); return 2; }
    char why[320] = "named on the command line";
    if (!prof) profile_tol(prof = pick_profile(&A, &B, why, sizeof why), NULL, &t);  // a built-in profile
    const int windowed[2] = {match_windows(&A, &B), match_windows(&B, &A)};
    cJSON *res = cJSON_CreateObject(), *reasons = cJSON_CreateArray(), *notes = cJSON_CreateArray();
    int refuse = 0;
    cJSON *fi = frozen_inputs(&A, &B, &refuse);
    if (refuse) frozen_reasons(fi, reasons);
    int rejected = check_logs(&A, &B, res, reasons);
    rejected |= check_curves(&A, &B, windowed, &t, res, notes, reasons);
    rejected |= check_eval(&A, &B, &t, cJSON_AddObjectToObject(res, "eval"), reasons);
    cJSON *prec = cJSON_AddObjectToObject(res, "precision");
    precision_json(&A, prec, "a");
    precision_json(&B, prec, "b");
    const int rc = refuse ? 2 : rejected ? 1 : 0;
    cJSON_AddStringToObject(res, "verdict", rc == 0 ? "ACCEPTED" : rc == 1 ? "REJECTED" : "REFUSED");
    cJSON_AddItemToObject(res, "reasons", reasons);
    cJSON_AddItemToObject(res, "rounding_notes", notes);
    cJSON_AddItemToObject(res, "profile", profile_json(prof, why, &t));
    cJSON_AddItemToObject(res, "frozen_inputs", fi);
    pt_runlog_free(&A);
    pt_runlog_free(&B);
    if (out) *out = res;
    else cJSON_Delete(res);
    return rc;
}
