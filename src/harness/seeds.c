#include "harness/seeds.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/runlog.h"
#include "util/common.h"

// Regularised incomplete beta I_x(a, b) by its continued fraction (modified
// Lentz); the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) keeps x in the fast range.
static double betacf(double a, double b, double x) {
    const double tiny = 1e-300, eps = 1e-15;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    if (fabs(d) < tiny) d = tiny;
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= 500; m++) {
        const double m2 = 2.0 * m;
        double aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 + aa * d; if (fabs(d) < tiny) d = tiny;
        c = 1.0 + aa / c; if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        h *= d * c;
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 + aa * d; if (fabs(d) < tiny) d = tiny;
        c = 1.0 + aa / c; if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < eps) break;
    }
    return h;
}

static double inc_beta(double a, double b, double x) {
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    const double lbt = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    if (x < (a + 1.0) / (a + b + 2.0)) return exp(lbt) * betacf(a, b, x) / a;
    return 1.0 - exp(lbt) * betacf(b, a, 1.0 - x) / b;
}

double pt_student_t_sf(double t, double df) {
    if (isnan(t) || !(df > 0)) return NAN;
    if (isinf(t)) return t > 0 ? 0.0 : 1.0;
    const double tail = 0.5 * inc_beta(0.5 * df, 0.5, df / (df + t * t));  // P(T > |t|)
    return t >= 0 ? tail : 1.0 - tail;
}

// First step at which the trailing mean of `w` losses is <= target; -1 if never.
static long steps_to_target(const pt_runlog *r, double target, int w) {
    double sum = 0;
    for (int i = 0; i < r->n; i++) {
        sum += r->pts[i].loss;
        if (i >= w) sum -= r->pts[i - w].loss;
        const int k = i + 1 < w ? i + 1 : w;
        if (i + 1 >= w && sum / k <= target) return r->pts[i].step;
    }
    return -1;
}

// Trailing mean of the `w` losses ending two thirds into the run: the default
// target, reached by every baseline seed with a third of the run to spare, so
// a candidate that is somewhat slower still reaches it and is measured.
static double two_thirds_mean(const pt_runlog *r, int w) {
    int end = (2 * r->n) / 3;
    if (end < w) end = w < r->n ? w : r->n;
    double s = 0;
    for (int i = end - w; i < end; i++) s += r->pts[i].loss;
    return s / w;
}

static double final_mean(const pt_runlog *r, int w) {
    const int k = r->n < w ? r->n : w;
    double s = 0;
    for (int i = r->n - k; i < r->n; i++) s += r->pts[i].loss;
    return k ? s / k : NAN;
}

static void mean_var(const double *x, int n, double *m, double *v) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *m = s / n;
    double q = 0;
    for (int i = 0; i < n; i++) q += (x[i] - *m) * (x[i] - *m);
    *v = n > 1 ? q / (n - 1) : 0;
}

int pt_compare_seeds(const char *const *runs_a, int na, const char *const *runs_b, int nb, const pt_seeds_opts *o,
                     cJSON **out) {
    *out = NULL;
    if (na < 2 || nb < 2) {
        pt_set_error("compare --seeds: needs at least 2 runs per side (got %d baseline, %d candidate)", na, nb);
        return 2;
    }
    const int w = o->window > 0 ? o->window : 10;
    const double alpha = o->alpha > 0 && o->alpha < 1 ? o->alpha : 0.05;
    const int n = na + nb;
    pt_runlog *logs = pt_calloc((size_t)n, sizeof *logs);
    int rc = 2;
    for (int i = 0; i < n; i++) {
        const char *p = i < na ? runs_a[i] : runs_b[i - na];
        if (pt_runlog_load(p, NULL, &logs[i]) != 0) goto done;
        if (logs[i].n < w) {
            pt_set_error("%s: %d steps, fewer than the window of %d", p, logs[i].n, w);
            goto done;
        }
    }
    double target = o->target_loss;
    const char *target_src = "given";
    if (isnan(target)) {  // every baseline seed reaches its own worst final loss
        target = -INFINITY;
        for (int i = 0; i < na; i++) target = fmax(target, two_thirds_mean(&logs[i], w));
        target_src = "worst baseline seed's trailing-mean loss two thirds into its run";
    }
    cJSON *res = cJSON_CreateObject(), *reasons = cJSON_CreateArray();
    cJSON_AddNumberToObject(res, "target_loss", target);
    cJSON_AddStringToObject(res, "target_source", target_src);
    cJSON_AddNumberToObject(res, "window", w);
    cJSON_AddNumberToObject(res, "alpha", alpha);
    double *sa = pt_malloc(sizeof(double) * (size_t)na), *sb = pt_malloc(sizeof(double) * (size_t)nb);
    int never = 0;
    cJSON *sides[2] = {cJSON_AddArrayToObject(res, "baseline"), cJSON_AddArrayToObject(res, "candidate")};
    for (int i = 0; i < n; i++) {
        const long s = steps_to_target(&logs[i], target, w);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "run", logs[i].path);
        if (s >= 0) cJSON_AddNumberToObject(e, "steps_to_target", (double)s);
        else cJSON_AddNullToObject(e, "steps_to_target");
        cJSON_AddNumberToObject(e, "final_window_loss", final_mean(&logs[i], w));
        cJSON_AddItemToArray(sides[i >= na], e);
        if (s < 0) {
            never++;
            char buf[600];
            snprintf(buf, sizeof buf, "%s run %s never reached the target loss %.4g", i < na ? "baseline" : "candidate",
                     logs[i].path, target);
            cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
        }
        if (i < na) sa[i] = (double)s;
        else sb[i - na] = (double)s;
    }
    if (!never) {
        double ma, va, mb, vb;
        mean_var(sa, na, &ma, &va);
        mean_var(sb, nb, &mb, &vb);
        const double se2 = va / na + vb / nb;
        double t, df, p;
        if (se2 > 0) {
            t = (mb - ma) / sqrt(se2);
            df = se2 * se2 / ((va / na) * (va / na) / (na - 1) + (vb / nb) * (vb / nb) / (nb - 1));
            p = pt_student_t_sf(t, df);
        } else {  // no spread on either side: the difference is exact
            t = mb > ma ? INFINITY : mb < ma ? -INFINITY : 0;
            df = na + nb - 2;
            p = mb > ma ? 0.0 : 1.0;
        }
        cJSON *tt = cJSON_AddObjectToObject(res, "welch_t_test");
        cJSON_AddStringToObject(tt, "h1", "the candidate needs more steps to reach the target than the baseline");
        cJSON_AddNumberToObject(tt, "mean_steps_baseline", ma);
        cJSON_AddNumberToObject(tt, "mean_steps_candidate", mb);
        cJSON_AddNumberToObject(tt, "var_baseline", va);
        cJSON_AddNumberToObject(tt, "var_candidate", vb);
        if (isfinite(t)) cJSON_AddNumberToObject(tt, "t", t);
        else cJSON_AddStringToObject(tt, "t", t > 0 ? "inf" : "-inf");
        cJSON_AddNumberToObject(tt, "df", df);
        cJSON_AddNumberToObject(tt, "p_value", p);
        if (p < alpha) {
            char buf[300];
            snprintf(buf, sizeof buf, "candidate is slower to converge: %.1f vs %.1f mean steps to loss %.4g (one-sided Welch p=%.3g < %.3g)",
                     mb, ma, target, p, alpha);
            cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
        }
    }
    rc = cJSON_GetArraySize(reasons) ? 1 : 0;
    cJSON_AddStringToObject(res, "verdict", rc ? "REJECTED" : "ACCEPTED");
    cJSON_AddItemToObject(res, "reasons", reasons);
    free(sa);
    free(sb);
    *out = res;
done:
    for (int i = 0; i < n; i++) pt_runlog_free(&logs[i]);
    free(logs);
    return rc;
}
