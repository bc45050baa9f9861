// portatrain compare RUN_A RUN_B: convergence verdict (library: src/harness/compare.c).
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "harness/compare.h"
#include "harness/seeds.h"
#include <math.h>
#include "util/common.h"

// --help prints to stdout (exit 0); a usage error prints to stderr (exit 2).
static void usage(FILE *to) {
    fprintf(to,
            "usage: portatrain compare RUN_A RUN_B [--profile exact|fp32|bf16|custom] [--tolerances FILE]\n"
            "                          [--json OUT] [--format-a F] [--format-b F]\n"
            "       portatrain compare --seeds A1,A2,... B1,B2,... [--target-loss L] [--window W] [--alpha P] [--json OUT]\n"
            "RUN_A is the baseline, RUN_B the candidate: portatrain run dirs or imported logs (hf, torchtitan,\n"
            "csv, jsonl). Exit 0 ACCEPTED, 1 REJECTED, 2 REFUSED / cannot compare.\n"
            "--profile: default as accept picks it from the two runs' manifest.json: exact for the same platform,\n"
            "bf16 when either side ran bf16 or TF32, else fp32; fp32 when a side has no manifest (an imported\n"
            "log). A --profile given wins; the output says which profile was used and why.\n"
            "--seeds: one run per seed on each side; steps to reach the target loss (trailing mean of W steps;\n"
            "default target: the worst baseline seed's trailing-mean loss two thirds into its run) and a one-sided Welch t-test\n"
            "that the candidate is not slower (REJECTED when p < alpha, default 0.05).\n");
}

static int split_runs(char *list, const char **out, int max) {
    int n = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) out[n++] = t;
    return n;
}

static int write_json(const char *path, const cJSON *res) {
    char *s = cJSON_Print(res);
    FILE *f = fopen(path, "wb");
    const int ok = f && fputs(s, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) { free(s); return -1; }
    free(s);
    return ok ? 0 : -1;
}

static int compare_seeds(const char *la, const char *lb, const pt_seeds_opts *so, const char *json_out) {
    char *ca = strdup(la), *cb = strdup(lb);
    const char *ra[64], *rb[64];
    const int na = split_runs(ca, ra, 64), nb = split_runs(cb, rb, 64);
    cJSON *res = NULL;
    int rc = pt_compare_seeds(ra, na, rb, nb, so, &res);
    if (!res) { fprintf(stderr, "portatrain: error: %s\n", pt_last_error()); free(ca); free(cb); return 2; }
    printf("target loss: %.4g (%s), window %d\n", cJSON_GetObjectItem(res, "target_loss")->valuedouble,
           cJSON_GetObjectItem(res, "target_source")->valuestring, so->window);
    const char *side[] = {"baseline", "candidate"};
    cJSON *it;
    for (int k = 0; k < 2; k++) cJSON_ArrayForEach(it, cJSON_GetObjectItem(res, side[k])) {
        const cJSON *s = cJSON_GetObjectItem(it, "steps_to_target");
        if (cJSON_IsNumber(s)) printf("  %-9s %s: %d steps to target\n", side[k], cJSON_GetObjectItem(it, "run")->valuestring, s->valueint);
        else printf("  %-9s %s: never reached the target\n", side[k], cJSON_GetObjectItem(it, "run")->valuestring);
    }
    const cJSON *tt = cJSON_GetObjectItem(res, "welch_t_test");
    if (tt) printf("mean steps: baseline %.2f, candidate %.2f; one-sided Welch t-test p = %.4g (alpha %.3g)\n",
                   cJSON_GetObjectItem(tt, "mean_steps_baseline")->valuedouble,
                   cJSON_GetObjectItem(tt, "mean_steps_candidate")->valuedouble,
                   cJSON_GetObjectItem(tt, "p_value")->valuedouble, so->alpha);
    if (json_out && write_json(json_out, res) != 0) { fprintf(stderr, "portatrain: error: %s: cannot write\n", json_out); rc = 2; }
    printf("verdict: %s", cJSON_GetObjectItem(res, "verdict")->valuestring);
    int k = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(res, "reasons")) printf("%s%s", k++ ? "; " : " (", it->valuestring);
    printf("%s\n", k ? ")" : "");
    cJSON_Delete(res);
    free(ca);
    free(cb);
    return rc;
}

int cmd_compare(int argc, char **argv) {
    pt_compare_opts o = {0};
    const char *json_out = NULL, *pos[2] = {0};
    int np = 0, seeds = 0;
    pt_seeds_opts so = {.target_loss = NAN, .window = 10, .alpha = 0.05};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--profile") && has) o.profile = argv[++i];
        else if (!strcmp(a, "--tolerances") && has) { o.tolerances_path = argv[++i]; if (!o.profile) o.profile = "custom"; }
        else if (!strcmp(a, "--json") && has) json_out = argv[++i];
        else if (!strcmp(a, "--seeds")) seeds = 1;
        else if (!strcmp(a, "--target-loss") && has) so.target_loss = argp_parse_double("compare", a, argv[++i], -DBL_MAX);
        else if (!strcmp(a, "--window") && has) so.window = (int)argp_parse_int("compare", a, argv[++i], 1, 1000000000);
        else if (!strcmp(a, "--alpha") && has) so.alpha = argp_parse_double("compare", a, argv[++i], 0);
        else if (!strcmp(a, "--format-a") && has) o.format_a = argv[++i];
        else if (!strcmp(a, "--format-b") && has) o.format_b = argv[++i];
        else if (a[0] == '-' && a[1] == '-') { fprintf(stderr, "portatrain: error: %s: unknown or incomplete option\n", a); usage(stderr); return 2; }
        else if (np < 2) pos[np++] = a;
        else { fprintf(stderr, "portatrain: error: %s: too many arguments\n", a); return 2; }
    }
    if (np != 2) { usage(stderr); return 2; }
    if (seeds) return compare_seeds(pos[0], pos[1], &so, json_out);
    cJSON *res = NULL;
    int rc = pt_compare_runs(pos[0], pos[1], &o, &res);
    if (!res) { fprintf(stderr, "portatrain: error: %s\n", pt_last_error()); return 2; }
    cJSON *fi = cJSON_GetObjectItem(res, "frozen_inputs"), *it;
    const cJSON *pj = cJSON_GetObjectItem(res, "profile");
    printf("baseline:  %s\ncandidate: %s\nprofile:   %s (%s)\n", pos[0], pos[1],
           cJSON_GetObjectItem(pj, "name")->valuestring, cJSON_GetObjectItem(pj, "why")->valuestring);
    const cJSON *src = cJSON_GetObjectItem(fi, "source");
    const char *match = cJSON_IsTrue(cJSON_GetObjectItem(fi, "match")) ? "match" : "DIFFER";
    if (cJSON_IsTrue(cJSON_GetObjectItem(fi, "verified")))
        printf("frozen inputs: %s (manifest.json)\n", match);
    else if (cJSON_IsString(src) && !strcmp(src->valuestring, "train_args.json"))
        printf("frozen inputs: %s (train_args.json only, unverified: %s)\n", match,
               cJSON_GetObjectItem(fi, "note")->valuestring);
    else printf("frozen inputs: unverified (imported log: no train_args.json); curves only\n");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(fi, "allowed_differences"))
        printf("  allowed difference: %s: %s vs %s\n", cJSON_GetObjectItem(it, "field")->valuestring,
               cJSON_GetObjectItem(it, "a")->valuestring, cJSON_GetObjectItem(it, "b")->valuestring);
    cJSON *ps = cJSON_GetObjectItem(res, "per_step");
    if (cJSON_GetObjectItem(ps, "n"))
        printf("steps compared: %d (missing %d), per-step loss rel diff max %.3g median %.3g\n",
               cJSON_GetObjectItem(ps, "n")->valueint, cJSON_GetObjectItem(ps, "missing")->valueint,
               cJSON_GetObjectItem(ps, "max_rel_diff")->valuedouble, cJSON_GetObjectItem(ps, "median_rel_diff")->valuedouble);
    if (cJSON_GetObjectItem(ps, "windowed_a") &&
        cJSON_GetObjectItem(ps, "windowed_a")->valueint + cJSON_GetObjectItem(ps, "windowed_b")->valueint > 0)
        printf("  windowed losses: %d of A's and %d of B's logged steps are means over the steps since the log's "
               "previous line (HF logging_steps); the other run's per-step losses were averaged over the same steps\n",
               cJSON_GetObjectItem(ps, "windowed_a")->valueint, cJSON_GetObjectItem(ps, "windowed_b")->valueint);
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(res, "rounding_notes")) printf("  rounding: %s\n", it->valuestring);
    const char *sides[2] = {"a", "b"};
    for (int k = 0; k < 2; k++) {
        const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(res, "completion"), sides[k]);
        if (cJSON_IsTrue(cJSON_GetObjectItem(c, "stopped_early")))
            printf("run %s stopped early at step %d: %s\n", k ? "B" : "A", cJSON_GetObjectItem(c, "stopped_at")->valueint,
                   cJSON_GetObjectItem(c, "reason")->valuestring);
    }
    if (json_out) {
        char *s = cJSON_Print(res);
        FILE *f = fopen(json_out, "wb");
        if (!f || fputs(s, f) < 0) { fprintf(stderr, "portatrain: error: %s: cannot write\n", json_out); if (f) fclose(f); free(s); cJSON_Delete(res); return 2; }
        fputc('\n', f);
        fclose(f);
        free(s);
    }
    printf("verdict: %s", cJSON_GetObjectItem(res, "verdict")->valuestring);
    int k = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(res, "reasons")) printf("%s%s", k++ ? "; " : " (", it->valuestring);
    printf("%s\n", k ? ")" : "");
    cJSON_Delete(res);
    return rc;
}
