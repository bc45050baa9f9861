// compare --seeds: Student-t tail against published table values, steps to target,
// and the one-sided Welch verdict on synthetic multi-seed curves (JSONL run logs).
#include <math.h>
#include <string.h>

#include "harness/seeds.h"
#include "testutil.h"
#include "util/common.h"

// A loss curve 10 -> 2 that crosses `cross` at step ~s0, with per-seed jitter.
static char *write_curve(const char *dir, const char *name, double s0, double jitter_phase) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    for (int s = 1; s <= 120; s++) {
        const double loss = 2.0 + 8.0 * exp(-(double)s / s0) + 0.01 * sin(s * 1.7 + jitter_phase);
        fprintf(f, "{\"step\": %d, \"loss\": %.9f}\n", s, loss);
    }
    fclose(f);
    return p;
}

int main(void) {
    // Critical values from standard t tables: P(T > t) for the given df.
    const struct { double t, df, p; } tab[] = {
        {1.0, 1, 0.25}, {6.313752, 1, 0.05}, {2.919986, 2, 0.05}, {1.812461, 10, 0.05},
        {2.763769, 10, 0.01}, {2.457262, 30, 0.01}, {1.644854, 1e7, 0.05}, {0.0, 5, 0.5}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        const double p = pt_student_t_sf(tab[i].t, tab[i].df);
        CHECK(fabs(p - tab[i].p) < 2e-6, "t=%g df=%g: p %.8f, table %.8f", tab[i].t, tab[i].df, p, tab[i].p);
        const double q = pt_student_t_sf(-tab[i].t, tab[i].df);
        CHECK(fabs(p + q - 1.0) < 1e-12, "symmetry at t=%g", tab[i].t);
    }
    CHECK(pt_student_t_sf(INFINITY, 3) == 0.0 && pt_student_t_sf(-INFINITY, 3) == 1.0, "infinite t");
    CHECK(isnan(pt_student_t_sf(1.0, 0)), "df 0 is not a distribution");

    char *d = test_tmpdir("seeds");
    char *a[3], *same[3], *slow[3], *never[2];
    for (int i = 0; i < 3; i++) {
        char n[32];
        sprintf(n, "a%d.jsonl", i); a[i] = write_curve(d, n, 20.0 + i, i);
        sprintf(n, "s%d.jsonl", i); same[i] = write_curve(d, n, 20.5 + i * 0.8, 3 + i);
        sprintf(n, "w%d.jsonl", i); slow[i] = write_curve(d, n, 26.0 + i, 6 + i);
    }
    for (int i = 0; i < 2; i++) {  // never gets below ~3
        char n[32], *p;
        sprintf(n, "n%d.jsonl", i);
        p = malloc(strlen(d) + 16);
        sprintf(p, "%s/%s", d, n);
        FILE *f = fopen(p, "w");
        for (int s = 1; s <= 120; s++) fprintf(f, "{\"step\": %d, \"loss\": %.6f}\n", s, 3.0 + 7.0 * exp(-s / 20.0));
        fclose(f);
        never[i] = p;
    }
    pt_seeds_opts o = {.target_loss = NAN, .window = 10, .alpha = 0.05};
    cJSON *res = NULL;
    int rc = pt_compare_seeds((const char *const *)a, 3, (const char *const *)same, 3, &o, &res);
    CHECK(rc == 0, "same speed accepted: rc %d", rc);
    const cJSON *tt = cJSON_GetObjectItem(res, "welch_t_test");
    CHECK(tt && cJSON_GetObjectItem(tt, "p_value")->valuedouble > 0.05, "same speed: p > alpha");
    cJSON_Delete(res);

    rc = pt_compare_seeds((const char *const *)a, 3, (const char *const *)slow, 3, &o, &res);
    CHECK(rc == 1, "slower candidate rejected: rc %d", rc);
    const cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "reasons"), 0);
    CHECK(r0 && strstr(r0->valuestring, "slower to converge"), "reason names the slowdown: %s", r0 ? r0->valuestring : "-");
    tt = cJSON_GetObjectItem(res, "welch_t_test");
    CHECK(tt && cJSON_GetObjectItem(tt, "mean_steps_candidate")->valuedouble > cJSON_GetObjectItem(tt, "mean_steps_baseline")->valuedouble,
          "candidate needs more steps");
    cJSON_Delete(res);

    // A faster candidate is never rejected by a one-sided test.
    rc = pt_compare_seeds((const char *const *)slow, 3, (const char *const *)a, 3, &o, &res);
    CHECK(rc == 0, "faster candidate accepted: rc %d", rc);
    cJSON_Delete(res);

    rc = pt_compare_seeds((const char *const *)a, 3, (const char *const *)never, 2, &o, &res);
    CHECK(rc == 1, "a candidate seed that never reaches the target is rejected: rc %d", rc);
    r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "reasons"), 0);
    CHECK(r0 && strstr(r0->valuestring, "never reached the target"), "reason: %s", r0 ? r0->valuestring : "-");
    cJSON_Delete(res);

    o.target_loss = 2.5;  // explicit target
    rc = pt_compare_seeds((const char *const *)a, 3, (const char *const *)same, 3, &o, &res);
    CHECK(rc == 0 && fabs(cJSON_GetObjectItem(res, "target_loss")->valuedouble - 2.5) < 1e-15, "explicit target used");
    cJSON_Delete(res);

    rc = pt_compare_seeds((const char *const *)a, 1, (const char *const *)same, 3, &o, &res);
    CHECK(rc == 2 && !res && strstr(pt_last_error(), "at least 2 runs"), "one seed is unusable: %s", pt_last_error());
    const char *bad[2] = {a[0], "/nonexistent/run"};
    rc = pt_compare_seeds((const char *const *)a, 2, bad, 2, &o, &res);
    CHECK(rc == 2 && strstr(pt_last_error(), "/nonexistent/run"), "missing run named: %s", pt_last_error());
    for (int i = 0; i < 3; i++) { free(a[i]); free(same[i]); free(slow[i]); }
    for (int i = 0; i < 2; i++) free(never[i]);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    test_run(cmd, NULL, NULL);
    free(d);
    return test_summary("test_seeds");
}
