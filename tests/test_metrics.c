// metrics.jsonl's writer and reader (train/metrics.h): a 1,024-rank record is
// one valid JSON line of any length with a per-rank summary that matches a
// brute-force computation and a per-rank file holding every value; small
// worlds keep their inline lists; NaN/Inf are written as null; a torn last
// line is reported and dropped, a complete bad line is an error.
#include "testutil.h"
#include "train/metrics.h"
#include "util/common.h"
#include "util/fileio.h"

#include <cjson/cJSON.h>
#include <math.h>


static pt_metrics_step record(long step, int world, const double *rss) {
    pt_metrics_step r;
    memset(&r, 0, sizeof r);
    r.step = step, r.loss = 2.5, r.grad_norm = 0.75, r.lr = 1e-3, r.epoch = 0.5, r.tokens = 128;
    r.step_time_s = 0.25, r.flops_per_token = 1e6, r.batch_fingerprint = 0x0123456789abcdefULL;
    r.parallel = true, r.world = world, r.peak_rss_mib_per_rank = rss, r.state_bytes_per_rank = 4096;
    r.restore_time_s = -1;
    return r;
}

// Brute force: the value and lowest rank of the k-th smallest (by value, then rank).
static void kth(const double *v, int n, int k, double *val, int *rank) {
    for (int i = 0; i < n; i++) {
        int below = 0;
        for (int j = 0; j < n; j++) below += v[j] < v[i] || (v[j] == v[i] && j < i);
        if (below == k) *val = v[i], *rank = i;
    }
}

static void check_summary(const cJSON *s, const double *rss, int W) {
    double mn = NAN, md = NAN, mx = NAN;
    int rmn = -1, rmd = -1, rmx = -1;
    kth(rss, W, 0, &mn, &rmn);
    kth(rss, W, (W - 1) / 2, &md, &rmd);
    kth(rss, W, W - 1, &mx, &rmx);
    for (int i = 0; i < W; i++)  // the max's lowest rank
        if (rss[i] == mx) { rmx = i; break; }
    const char *k[] = {"min", "median", "max"}, *kr[] = {"min_rank", "median_rank", "max_rank"};
    const double want[] = {mn, md, mx};
    const int want_r[] = {rmn, rmd, rmx};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItem(s, k[i]), *r = cJSON_GetObjectItem(s, kr[i]);
        CHECK(cJSON_IsNumber(v) && fabs(v->valuedouble - want[i]) < 0.05, "%s: %g, want %.1f", k[i],
              v ? v->valuedouble : NAN, want[i]);
        CHECK(cJSON_IsNumber(r) && r->valueint == want_r[i], "%s: %d, want %d", kr[i], r ? r->valueint : -1, want_r[i]);
    }
    CHECK(cJSON_GetObjectItem(s, "ranks") && cJSON_GetObjectItem(s, "ranks")->valueint == W, "ranks");
}

static void test_large_world(const char *dir) {
    enum { W = 1024, STEPS = 3 };
    double rss[W];
    for (int i = 0; i < W; i++) rss[i] = 1000.0 + (double)((i * 7919) % 1021) / 10.0;  // ties, unordered
    pt_metrics_writer *w = pt_metrics_open(dir, 0, NULL);
    CHECK(w != NULL, "open: %s", pt_last_error());
    if (!w) return;
    for (long s = 1; s <= STEPS; s++) {
        pt_metrics_step r = record(s, W, rss);
        r.saved = s == 2, r.save_time_s = 0.5, r.save_bytes = 1u << 20, r.save_gb_per_s = 0.002;
        CHECK(pt_metrics_write(w, &r) == 0, "write: %s", pt_last_error());
    }
    pt_metrics_close(w);
    char *p = pt_path_join(dir, "metrics.jsonl");
    pt_metrics_log log;
    CHECK(pt_metrics_read(p, 0, &log) == 0 && log.n == STEPS, "read back %d records", log.n);
    for (int i = 0; i < log.n; i++) {
        CHECK(log.recs[i].step == i + 1, "step %ld", log.recs[i].step);
        CHECK(!cJSON_GetObjectItem(log.recs[i].json, "peak_rss_mib_per_rank"), "an inline list above the threshold");
        check_summary(cJSON_GetObjectItem(log.recs[i].json, "peak_rss_mib_per_rank_summary"), rss, W);
    }
    CHECK(log.n == STEPS && log.recs[1].save_time_s == 0.5 && isnan(log.recs[0].save_time_s), "save fields");
    pt_metrics_log_free(&log);
    free(p);
    // the per-rank file: one line per step with all 1,024 values, longer than the old 2,048-byte line
    p = pt_path_join(dir, PT_METRICS_RANKS_FILE);
    CHECK(pt_metrics_read(p, 0, &log) == 0 && log.n == STEPS, "%s: %d lines", p, log.n);
    for (int i = 0; i < log.n; i++) {
        const cJSON *a = cJSON_GetObjectItem(log.recs[i].json, "peak_rss_mib_per_rank");
        CHECK(cJSON_GetArraySize(a) == W, "%d values", cJSON_GetArraySize(a));
        CHECK(strlen(log.recs[i].text) > 2048, "line of %zu bytes", strlen(log.recs[i].text));
        int same = 0;
        for (int q = 0; q < W; q++) same += fabs(cJSON_GetArrayItem(a, q)->valuedouble - rss[q]) < 0.05;
        CHECK(same == W, "%d of %d per-rank values match", same, W);
    }
    pt_metrics_log_free(&log);
    free(p);
}

// Up to the threshold the list stays inline (what readers of small jobs use), whatever its length.
static void test_inline_world(void) {
    enum { W = PT_METRICS_INLINE_RANKS };
    double rss[W];
    for (int i = 0; i < W; i++) rss[i] = 100000.5 + i;
    pt_metrics_step r = record(7, W, rss);
    pt_strbuf b = {0};
    pt_metrics_format(&b, &r);
    cJSON *j = cJSON_Parse(b.p);
    const cJSON *a = cJSON_GetObjectItem(j, "peak_rss_mib_per_rank");
    CHECK(cJSON_GetArraySize(a) == W, "inline list of %d", cJSON_GetArraySize(a));
    CHECK(cJSON_GetArraySize(a) == W && cJSON_GetArrayItem(a, W - 1)->valuedouble == 100000.5 + W - 1, "last value");
    CHECK(!pt_metrics_format_ranks(&b, &r), "a per-rank line for a small world");
    cJSON_Delete(j);
    pt_strbuf_free(&b);
}

// The single-process record: today's exact text, NaN/Inf as null.
static void test_nonfinite(void) {
    pt_metrics_step r = record(3, 1, NULL);
    r.parallel = false, r.loss = NAN, r.grad_norm = INFINITY, r.peak_rss_mib = 12.25;
    r.skip_reason = "nonfinite_loss";
    pt_strbuf b = {0};
    pt_metrics_format(&b, &r);
    const char *want = "{\"step\": 3, \"loss\": null, \"grad_norm\": null, \"lr\": 0.001, \"epoch\": 0.500000, "
                       "\"tokens\": 128, \"step_time_s\": 0.250000, \"tokens_per_s\": 512.000, \"mfu_flops_per_s\": "
                       "5.12e+08, \"batch_fingerprint\": \"0123456789abcdef\", \"activation_bytes\": 0, "
                       "\"peak_rss_mib\": 12.2, \"skipped\": true, \"reason\": \"nonfinite_loss\"}";
    CHECK(!strcmp(b.p, want), "\n got  %s\n want %s", b.p, want);
    cJSON *j = cJSON_Parse(b.p);
    CHECK(j && cJSON_IsNull(cJSON_GetObjectItem(j, "loss")) && cJSON_IsNull(cJSON_GetObjectItem(j, "grad_norm")),
          "NaN/Inf not null");
    cJSON_Delete(j);
    pt_strbuf_free(&b);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

// A torn last line (a kill mid-write) is reported and dropped; a bad complete line is an error naming it.
static void test_reader(const char *dir) {
    char *p = pt_path_join(dir, "torn.jsonl");
    write_text(p, "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": 1.5, \"step_time_s\": 0.1}\n{\"step\": 3, \"lo");
    pt_metrics_log log;
    CHECK(pt_metrics_read(p, 0, &log) == 0, "torn: %s", pt_last_error());
    CHECK(log.n == 2 && log.tail == PT_METRICS_TAIL_TORN && log.torn_lineno == 3, "n %d tail %d line %d", log.n,
          log.tail, log.torn_lineno);
    CHECK(log.n == 2 && log.recs[1].loss == 1.5 && log.recs[1].step_time_s == 0.1 && isnan(log.recs[0].grad_norm),
          "fields");
    pt_metrics_log_free(&log);
    CHECK(pt_metrics_last_step(p) == 2, "last step %ld", pt_metrics_last_step(p));
    write_text(p, "{\"step\": 1}\n{\"step\": 2}");  // complete JSON, no newline: kept, flagged
    CHECK(pt_metrics_read(p, 0, &log) == 0 && log.n == 2 && log.tail == PT_METRICS_TAIL_UNTERMINATED, "unterminated");
    pt_metrics_log_free(&log);
    CHECK(pt_metrics_last_step(p) == 1, "last complete step %ld", pt_metrics_last_step(p));
    write_text(p, "{\"step\": 1}\nnot json\n{\"step\": 3}\n");
    CHECK(pt_metrics_read(p, 0, &log) == -1 && strstr(pt_last_error(), "torn.jsonl:2"), "bad line: %s",
          pt_last_error());
    CHECK(pt_metrics_read(p, PT_METRICS_LENIENT, &log) == 0 && log.n == 2 && log.skipped == 1, "lenient");
    pt_metrics_log_free(&log);
    write_text(p, "{\"loss\": 1}\n{\"eval_loss\": 2}\n");  // another trainer's log: records without a step
    CHECK(pt_metrics_read(p, 0, &log) == -1, "a record without a step accepted");
    CHECK(pt_metrics_read(p, PT_METRICS_GENERIC, &log) == 0 && log.n == 2 && log.recs[0].loss == 1, "generic");
    pt_metrics_log_free(&log);
    CHECK(pt_metrics_last_step("/nonexistent/metrics.jsonl") == -1, "missing file");
    free(p);
}

// Re-opening for a resume keeps the lines up to the checkpoint and restores its record when missing.
static void test_resume_truncation(const char *dir) {
    char *p = pt_path_join(dir, "metrics.jsonl");
    write_text(p, "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n{\"step\": 4, \"lo");
    pt_metrics_writer *w = pt_metrics_open(dir, 2, "{\"step\": 2, \"x\": 1}");
    pt_metrics_close(w);
    size_t n;
    char *text = pt_read_file(p, &n);
    CHECK(text && !strcmp(text, "{\"step\": 1}\n{\"step\": 2}\n"), "kept %s", text);
    free(text);
    write_text(p, "{\"step\": 1}\n");
    pt_metrics_close(pt_metrics_open(dir, 2, "{\"step\": 2, \"x\": 1}"));
    text = pt_read_file(p, &n);
    CHECK(text && !strcmp(text, "{\"step\": 1}\n{\"step\": 2, \"x\": 1}\n"), "restored %s", text);
    free(text);
    free(p);
}

int main(void) {
    char *dir = test_tmpdir("metrics");
    test_large_world(dir);
    test_inline_world();
    test_nonfinite();
    test_reader(dir);
    test_resume_truncation(dir);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) {}
    free(dir);
    return test_summary("test_metrics");
}
