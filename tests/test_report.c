// Renders the report fixtures and checks the HTML/Markdown facts.
#include "harness/report.h"
#include "testtrain.h"
#include "testutil.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <string.h>

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++) n++;
    return n;
}

// Well-formed UTF-8 (no stray continuation byte, no truncated sequence).
static int utf8_valid(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int len = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
        if (!len) return 0;
        for (int i = 1; i < len; i++)
            if ((p[i] & 0xC0) != 0x80) return 0;
        p += len;
    }
    return 1;
}

static void render(const char *fixture, char **html, char **md) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/fixtures/report/%s", fixture);
    char *path = test_source_path(rel);
    cJSON *r = pt_json_parse_file(path);
    CHECK(r != NULL, "%s: %s", path, pt_last_error());
    char *dir = test_tmpdir("report");
    CHECK(pt_report_render(r, dir) == 0, "%s", pt_last_error());
    char *hp = pt_path_join(dir, "report.html"), *mp = pt_path_join(dir, "report.md");
    size_t n;
    *html = pt_read_file(hp, &n);
    *md = pt_read_file(mp, &n);
    CHECK(*html && *md, "outputs missing");
    free(hp); free(mp); test_rmdir(dir); free(path);
    cJSON_Delete(r);
}

int main(void) {
    char *h, *m;
    render("accepted.json", &h, &m);
    if (h && m) {
        CHECK(strstr(h, "class='banner ok'"), "green banner");
        CHECK(strstr(h, "all convergence, portability and recovery checks passed"), "reason");
        CHECK(count(h, "<svg") == 6, "6 charts, got %d", count(h, "<svg"));
        CHECK(count(h, "<polyline") >= 5, "curves drawn");
        CHECK(strstr(h, "class='band'"), "tolerance band");
        CHECK(!strstr(h, "http"), "no external references");
        CHECK(!strstr(h, "<script"), "no script");
        CHECK(strstr(m, "| field | baseline | candidate |"), "identity table in md");
        CHECK(strstr(m, "## Portability") && strstr(m, "| cpu-ref:fp32 | cpu:fp32 | 50 | yes |"), "portability md");
        CHECK(strstr(m, "| cost_per_accepted_outcome | 0.0049 |"), "cost md");
        CHECK(strstr(m, "### Loss (sampled)"), "loss sample table");
    }
    free(h); free(m);
    render("rejected.json", &h, &m);
    if (h && m) {
        CHECK(strstr(h, "class='banner bad'"), "red banner");
        CHECK(strstr(h, "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more"), "escaped reason");
        CHECK(strstr(h, "checkpoint cpu:fp32 -&gt; cpu-ref:fp32 restore mismatch"), "second reason");
        CHECK(!strstr(h, "<script"), "script escaped");
        CHECK(strstr(h, "no accepted outcome") && strstr(m, "no accepted outcome"), "null cost per outcome");
        CHECK(!strstr(h, "http"), "no external references");
    }
    free(h); free(m);
    render("partial.json", &h, &m);
    if (h && m) {
        CHECK(strstr(h, "no data") && strstr(h, "not measured"), "partial");
        CHECK(count(h, "<svg") == 6, "charts present as placeholders");
    }
    free(h); free(m);
    render("empty.json", &h, &m);
    if (h && m) {
        CHECK(strstr(h, "banner unk") && strstr(h, "not measured"), "empty report");
        CHECK(strstr(m, "not measured"), "empty md");
    }
    free(h); free(m);
    // Every phase accept writes is in the stacked per-run bar (compilation was left out: an OpenCL run's
    // bar was short of its table), a backslash before a pipe does not end a Markdown cell, and the eval
    // shard set's hash (a frozen input accept checks) is shown.
    {
        cJSON *r = cJSON_Parse("{\"baseline\": {\"run_dir\": \"/tmp/a\\\\|b\"}, "
                               "\"frozen_inputs\": {\"eval_dataset_sha256\": \"e5a1\"}, \"phases\": ["
                               "{\"run\": \"candidate\", \"phase\": \"compilation\", \"seconds\": 3},"
                               "{\"run\": \"candidate\", \"phase\": \"training\", \"seconds\": 2}]}");
        char *dir = test_tmpdir("report"), *hp = pt_path_join(dir, "report.html"), *mp = pt_path_join(dir, "report.md");
        CHECK(r && pt_report_render(r, dir) == 0, "render: %s", pt_last_error());
        size_t n;
        char *hh = pt_read_file(hp, &n), *mm = pt_read_file(mp, &n);
        CHECK(hh && strstr(hh, "class='lg'>compilation</text>") && strstr(hh, "class='lg'>5</text>"),
              "compilation stacked into the candidate's 5 s bar");
        CHECK(mm && strstr(mm, "| run_dir | /tmp/a\\\\\\|b | n/a |"), "backslash-pipe stays in its cell");
        CHECK(hh && mm && strstr(hh, "<td>eval_dataset_sha256</td><td>e5a1</td>") && strstr(mm, "| eval_dataset_sha256 | e5a1 |"),
              "the eval shard set's hash is shown with the other frozen inputs");
        free(hh); free(mm); free(hp); free(mp); test_rmdir(dir);
        cJSON_Delete(r);
    }
    // User text in report.md renders as the text it is: a reason with link, emphasis, code, strikethrough and
    // heading syntax, a "> " quote and "_x_" emphasis are escaped; an underscore inside a word is kept.
    {
        cJSON *r = cJSON_Parse("{\"verdict\": \"REJECTED\", \"reasons\": [\"# see [here](http://x.example) *now* `rm` ~~a~~ "
                               "> q _em_ run_dir\"]}");
        char *dir = test_tmpdir("report"), *mp = pt_path_join(dir, "report.md");
        CHECK(r && pt_report_render(r, dir) == 0, "render: %s", pt_last_error());
        size_t n;
        char *mm = pt_read_file(mp, &n);
        CHECK(mm && strstr(mm, "- \\# see \\[here\\](http://x.example) \\*now\\* \\`rm\\` \\~\\~a\\~\\~ \\> q \\_em\\_ run_dir\n"),
              "markdown syntax in a reason is escaped: %s", mm ? strstr(mm, "see") : "");
        free(mm); free(mp); test_rmdir(dir);
        cJSON_Delete(r);
    }
    // A portability label cut at 40 bytes keeps whole UTF-8 characters (an "é" across the cut was split,
    // leaving an invalid byte in the HTML).
    {
        cJSON *r = cJSON_Parse("{\"version\": 1, \"verdict\": \"ACCEPTED\", \"reasons\": [], \"portability\": ["
                               "{\"writer\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\u00e9zz\", \"reader\": \"cpu\","
                               " \"save_time_s\": 1, \"restore_time_s\": 2}]}");
        char *dir = test_tmpdir("report"), *hp = pt_path_join(dir, "report.html");
        CHECK(r && pt_report_render(r, dir) == 0, "render: %s", pt_last_error());
        size_t n;
        char *hh = pt_read_file(hp, &n);
        CHECK(hh && utf8_valid(hh), "report.html is valid UTF-8 with a label cut inside a character");
        CHECK(hh && strstr(hh, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa -&gt; cpu"), "the label is cut before the character");
        free(hh); free(hp); test_rmdir(dir);
        cJSON_Delete(r);
    }
    // `portatrain report` refuses a file that is not an accept report (the renderer alone takes any object).
    const char *bad[][2] = {{"{}", "no \"version\" field"},
                            {"[1,2]", "not a JSON object"},
                            {"{\"version\": 2, \"verdict\": \"ACCEPTED\", \"reasons\": []}", "only version 1"},
                            {"{\"version\": 1, \"reasons\": []}", "\"verdict\": missing"},
                            {"{\"version\": 1, \"verdict\": \"ACCEPTED\"}", "\"reasons\": missing"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = cJSON_Parse(bad[i][0]);
        CHECK(j && pt_report_check(j, "x/report.json") != 0 && strstr(pt_last_error(), "x/report.json: ") &&
                  strstr(pt_last_error(), bad[i][1]),
              "%s refused naming '%s' (got '%s')", bad[i][0], bad[i][1], pt_last_error());
        cJSON_Delete(j);
    }
    const char *good[] = {"accepted.json", "rejected.json"};
    for (size_t i = 0; i < 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/fixtures/report/%s", good[i]);
        char *path = test_source_path(rel);
        cJSON *r = pt_json_parse_file(path);
        CHECK(r && pt_report_check(r, path) == 0, "%s passes the check: %s", good[i], pt_last_error());
        cJSON_Delete(r);
        free(path);
    }
    return test_summary("test_report");
}
