// Importers of run logs (src/harness/runlog.c) on hand-written real-format samples.
// The harness sources are not yet a CMake module (src/harness has no pt_module line),
// so they are compiled into this test directly; with a pt_harness library linked,
// the archive's copies are simply not pulled in.
#include <math.h>
#include <string.h>

#include "harness/compare.h"
#include "harness/runlog.h"
#include "testtrain.h"
#include "testutil.h"
#include "util/common.h"

static void load(const char *rel, const char *fmt, pt_runlog *r, int expect_rc) {
    char *p = test_source_path(rel);
    int rc = pt_runlog_load(p, fmt, r);
    CHECK(rc == expect_rc, "%s: rc %d (%s)", rel, rc, pt_last_error());
    free(p);
}

// HF logging_steps > 1: the importer records each loss's window, and compare averages a per-step log's
// losses over the same steps (docs/COMPARE.md, "Windowed losses").
static void windowed(void) {
    pt_runlog r;
    load("tests/fixtures/compare/hf_trainer_windowed/trainer_state.json", "hf", &r, 0);
    static const long steps[5] = {1, 3, 6, 9, 12};
    static const int win[5] = {1, 2, 3, 3, 3};
    CHECK(r.n == 5, "windowed hf: 5 entries, got %d", r.n);
    for (int i = 0; i < r.n && i < 5; i++)
        CHECK(r.pts[i].step == steps[i] && (r.pts[i].window ? r.pts[i].window : 1) == win[i],
              "entry %d: step %ld window %d", i, r.pts[i].step, r.pts[i].window);
    // A per-step log whose losses average to HF's over each window but differ step by step (+-0.3).
    char *dir = test_tmpdir("cmpwin"), path[4200];
    for (int drop = 0; drop < 2; drop++) {
        snprintf(path, sizeof path, "%s/pt%d.jsonl", dir, drop);
        FILE *f = fopen(path, "w");
        long s = 1;
        for (int i = 0; i < r.n && f; i++)
            for (int k = win[i] - 1; k >= 0; k--, s++) {
                double d = win[i] == 1 ? 0 : k == 0 ? -0.3 * (win[i] - 1) : 0.3;
                if (drop && s == 8) continue;  // a hole in the window (6, 9]: that point is compared as it is
                fprintf(f, "{\"step\": %ld, \"loss\": %.17g}\n", s, r.pts[i].loss + d);
            }
        if (f) fclose(f);
        char *hf = test_source_path("tests/fixtures/compare/hf_trainer_windowed/trainer_state.json");
        pt_compare_opts o = {.format_a = "hf", .format_b = "jsonl"};
        cJSON *res = NULL;
        int rc = pt_compare_runs(hf, path, &o, &res);
        const cJSON *ps = cJSON_GetObjectItem(res, "per_step");
        const double mx = cJSON_GetObjectItem(ps, "max_rel_diff") ? cJSON_GetObjectItem(ps, "max_rel_diff")->valuedouble : -1;
        const int wa = cJSON_GetObjectItem(ps, "windowed_a") ? cJSON_GetObjectItem(ps, "windowed_a")->valueint : -1;
        if (!drop) CHECK(rc == 0 && wa == 4 && mx >= 0 && mx < 1e-12, "windows averaged: rc %d windowed %d max %g", rc, wa, mx);
        else CHECK(rc == 1 && wa == 3 && mx > 0.01, "incomplete window not averaged: rc %d windowed %d max %g", rc, wa, mx);
        cJSON_Delete(res);
        free(hf);
    }
    test_rmdir(dir);
    pt_runlog_free(&r);
}

static char *write_tmp(const char *dir, const char *name, const char *text) {
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
    return path;
}

// Logs as other tools and restarted runs write them: repeated and unordered steps, every rank's lines,
// steps that are not whole numbers, blank lines before an error, a long number in a TorchTitan field.
static void messy_logs(void) {
    char *dir = test_tmpdir("cmpmessy");
    pt_runlog r;
    // A run restarted from its step-3 checkpoint after step 5: steps 4 and 5 logged twice; the replay wins.
    char *p = write_tmp(dir, "restarted.jsonl",
                        "{\"step\": 1, \"loss\": 5.0}\n{\"step\": 2, \"loss\": 4.0}\n{\"step\": 3, \"loss\": 3.0}\n"
                        "{\"step\": 4, \"loss\": 9.0}\n{\"step\": 5, \"loss\": 9.0}\n"
                        "{\"step\": 4, \"loss\": 2.5}\n{\"step\": 5, \"loss\": 2.0}\n{\"step\": 6, \"loss\": 1.5}\n");
    CHECK(pt_runlog_load(p, NULL, &r) == 0 && r.n == 6 && r.repeated == 2, "replayed steps: n %d repeated %d", r.n, r.repeated);
    for (int i = 0; i < r.n; i++) CHECK(r.pts[i].step == i + 1, "sorted: point %d is step %ld", i, r.pts[i].step);
    if (r.n == 6) CHECK(r.pts[3].loss == 2.5 && r.pts[4].loss == 2.0, "the replay's lines kept: %g %g", r.pts[3].loss, r.pts[4].loss);
    pt_runlog_free(&r);
    // The same run logged without a restart compares ACCEPTED at exact (was matched against the first attempt).
    char *q = write_tmp(dir, "straight.jsonl",
                        "{\"step\": 1, \"loss\": 5.0}\n{\"step\": 2, \"loss\": 4.0}\n{\"step\": 3, \"loss\": 3.0}\n"
                        "{\"step\": 4, \"loss\": 2.5}\n{\"step\": 5, \"loss\": 2.0}\n{\"step\": 6, \"loss\": 1.5}\n");
    pt_compare_opts o = {.profile = "exact"};
    cJSON *res = NULL;
    int rc = pt_compare_runs(p, q, &o, &res);
    const cJSON *ps = cJSON_GetObjectItem(res, "per_step");
    CHECK(rc == 0 && cJSON_GetObjectItem(ps, "repeated_a") && cJSON_GetObjectItem(ps, "repeated_a")->valueint == 2,
          "restarted vs straight: rc %d", rc);
    cJSON_Delete(res);
    free(p);
    free(q);

    // torchrun without a rank filter: every rank prints the step lines; rank 0's are the run's.
    p = write_tmp(dir, "ranks.log",
                  "[rank1]:[titan] x - root - INFO - step:  1  loss: 7.0000  grad_norm: 1.0\n"
                  "[rank0]:[titan] x - root - INFO - step:  1  loss: 7.0000  grad_norm: 1.0\n"
                  "[rank0]:[titan] x - root - INFO - step:  2  loss: 6.5000  grad_norm: 0.9\n"
                  "[rank1]:[titan] x - root - INFO - step:  2  loss: 6.5000  grad_norm: 0.9\n");
    CHECK(pt_runlog_load(p, NULL, &r) == 0 && r.n == 2 && r.repeated == 0, "ranks: n %d repeated %d", r.n, r.repeated);
    pt_runlog_free(&r);
    free(p);
    // A field longer than the number buffer (with nan at its end) is refused, not overrun.
    p = write_tmp(dir, "long.log",
                  "step: 1  loss: 1111111111111111111111111111111111111111111111111111111111111nan\n");
    CHECK(pt_runlog_load(p, "torchtitan", &r) == -1, "overlong loss field refused");
    pt_runlog_free(&r);
    free(p);

    // Steps that are not whole numbers >= 0, in each format, are refused naming the line.
    static const struct { const char *name, *fmt, *text, *where; } bad[] = {
        {"s1.jsonl", "jsonl", "{\"step\": 1, \"loss\": 2}\n\n{\"step\": 1e300, \"loss\": 2}\n", "s1.jsonl:3: step 1"},
        {"s2.jsonl", "jsonl", "{\"step\": 2.5, \"loss\": 2}\n", "s2.jsonl:1: step 2.5"},
        {"s3.jsonl", "jsonl", "{\"step\": -1, \"loss\": 2, \"skipped\": true}\n", "s3.jsonl:1: step -1"},
        {"s4.csv", "csv", "step,loss\n\n1,2\n2.5,3\n", "s4.csv:4: step 2.5"},
        {"s5.log", "torchtitan", "step: 1 loss: 2\n\nstep: 99999999999999999999 loss: 2\n", "s5.log:3: step 1e+20"},
        {"s6.json", "hf", "{\"log_history\": [{\"step\": 1, \"loss\": 2}, {\"step\": -3, \"loss\": 2}]}",
         "log_history[1]: step -3"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        p = write_tmp(dir, bad[i].name, bad[i].text);
        CHECK(pt_runlog_load(p, bad[i].fmt, &r) == -1 && strstr(pt_last_error(), bad[i].where),
              "%s: %s", bad[i].name, pt_last_error());
        pt_runlog_free(&r);
        free(p);
    }
    test_rmdir(dir);
}

int main(void) {
    windowed();
    messy_logs();
    pt_runlog r;
    load("tests/fixtures/compare/trainer_state.json", NULL, &r, 0);
    CHECK(!strcmp(r.format, "hf"), "hf detected: %s", r.format);
    CHECK(r.n == 6, "hf: 6 training entries (eval/summary skipped), got %d", r.n);
    if (r.n == 6) {
        CHECK(r.pts[0].step == 1 && fabs(r.pts[0].loss - 11.9431) < 1e-12, "hf first");
        CHECK(fabs(r.pts[0].grad_norm - 3.4210) < 1e-12, "hf grad_norm");
        CHECK(isnan(r.pts[4].grad_norm), "hf: entry without grad_norm is NAN");
        CHECK(r.pts[5].step == 6 && fabs(r.pts[5].loss - 10.3020) < 1e-12, "hf last");
    }
    pt_runlog_free(&r);

    load("tests/fixtures/compare/torchtitan.log", NULL, &r, 0);
    CHECK(!strcmp(r.format, "torchtitan"), "torchtitan detected: %s", r.format);
    // 4 training steps (older yellow-memory and newer turquoise-memory lines); the
    // "validate step: 3" line is not a training step.
    CHECK(r.n == 4, "torchtitan: 4 steps, got %d", r.n);
    if (r.n == 4) {
        CHECK(r.pts[0].step == 1 && fabs(r.pts[0].loss - 12.0011) < 1e-12, "tt first %ld %g", r.pts[0].step, r.pts[0].loss);
        CHECK(fabs(r.pts[2].grad_norm - 3.5004) < 1e-12, "tt grad_norm %g", r.pts[2].grad_norm);
        CHECK(r.pts[2].step == 3 && fabs(r.pts[2].loss - 11.3105) < 1e-12, "validation loss not taken as step 3: %g", r.pts[2].loss);
        CHECK(r.pts[3].step == 4 && fabs(r.pts[3].loss - 10.9876) < 1e-12 && fabs(r.pts[3].grad_norm - 3.2001) < 1e-12,
              "tt newer-format line");
    }
    pt_runlog_free(&r);

    load("tests/fixtures/compare/curve.csv", NULL, &r, 0);
    CHECK(!strcmp(r.format, "csv") && r.n == 4, "csv: %s %d", r.format, r.n);
    if (r.n == 4) CHECK(isnan(r.pts[2].grad_norm) && fabs(r.pts[3].loss - 9.55) < 1e-12, "csv values");
    pt_runlog_free(&r);

    load("tests/fixtures/compare/curve.jsonl", NULL, &r, 0);
    CHECK(!strcmp(r.format, "jsonl") && r.n == 3, "jsonl: %s %d", r.format, r.n);
    pt_runlog_free(&r);

    load("tests/fixtures/compare/bad.csv", NULL, &r, -1);
    CHECK(strstr(pt_last_error(), "bad.csv:3") != NULL, "error names file:line: %s", pt_last_error());
    pt_runlog_free(&r);
    load("tests/fixtures/compare/curve.csv", "hf", &r, -1);
    pt_runlog_free(&r);
    return test_summary("test_compare");
}
