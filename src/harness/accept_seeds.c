// accept --seeds K: K seeds per side, judged as MLPerf judges several runs (steps to a target loss, one-sided
// Welch t-test: seeds.c) and, step by step, each candidate seed against the spread of the baseline seeds.
//
// Seed i (0 .. K-1) trains with `--seed SEED+i` (the data order, when the recipe shuffles) from the weights of
// `init --seed INIT_SEED+i` (when the suite makes the initial model; a --model is the same for every seed).
// Seed 0 is the suite's own baseline and candidate (OUT/baseline, OUT/candidate, with their eval, portability
// and recovery); seeds 1 .. K-1 are plain trainings of both platforms under OUT/seeds/seed-I (init, baseline,
// candidate) with their logs in OUT/seeds/logs. Baseline seed i and candidate seed i share their frozen inputs.
#define _GNU_SOURCE
#include "harness/accept_internal.h"
#include "harness/seeds.h"
#include "util/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEEDS_WINDOW 10       // trailing-mean window of the steps-to-target test and of the envelope
#define ENVELOPE_LEVEL 0.99   // two-sided prediction level of the per-step envelope
#define ENVELOPE_MAX_OUT 0.1  // a candidate seed may lie outside it at this fraction of the judged steps

static bool recipe_shuffles(const pt_accept_opts *o) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o->recipe, "shuffle"));
}

int acc_seeds_check_opts(const pt_accept_opts *o) {
    if (o->seeds <= 1) return 0;
    if (o->baseline_run) {
        pt_set_error("accept: --seeds %d with --baseline-run: a recorded baseline is one seed; train the baseline "
                     "seeds in this suite (drop --baseline-run)", o->seeds);
        return -1;
    }
    if (o->model_dir && !recipe_shuffles(o)) {
        pt_set_error("accept: --seeds %d with --model and without --shuffle: every seed would train the same run "
                     "(the seed picks the initial weights of the suite's own init and the shuffled data order)",
                     o->seeds);
        return -1;
    }
    if (o->steps < 2 * SEEDS_WINDOW) {
        pt_set_error("accept: --seeds %d needs --steps of at least %d (twice the trailing-mean window of %d), got %ld",
                     o->seeds, 2 * SEEDS_WINDOW, SEEDS_WINDOW, o->steps);
        return -1;
    }
    return 0;
}

typedef struct {
    char *dir[2];      // baseline, candidate run dirs
    metrics_t m[2];    // their curves
    bool trained[2];
} seed_runs;

// Seed i's initial model: `init --seed INIT_SEED+i` with seed 0's tokenizer, or the shared --model.
static char *seed_model(acc_ctx *c, int i, const char *sdir) {
    if (c->o->model_dir) return pt_strdup(c->model);
    char *model = acc_xprintf("%s/init", sdir), seed[32], log[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)(c->o->init_seed + (uint64_t)i));
    snprintf(log, sizeof log, "init-seed%d", i);
    char *args[] = {"init", "--config", (char *)c->o->config_path, "--seed", seed, "--output-dir", model, NULL};
    progress_src pr = {NULL, 0, 0};
    double wall;
    static const pt_platform shared = {.text = "shared"};
    int rc = acc_run_child(c, log, log, NULL, &pr, &wall, 1, args);
    acc_add_phase(c, log, &shared, "start-up", wall);
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (size_t k = 0; k < PT_ARRAY_LEN(files) && rc == 0; k++) {
        char *s = pt_path_join(c->model, files[k]), *d = pt_path_join(model, files[k]);
        if (pt_file_exists(s)) rc = acc_copy_file(s, d);
        free(s); free(d);
    }
    if (rc != 0) { free(model); return NULL; }
    return model;
}

// Both platforms' trainings of seed i (>= 1). acc_train_run trains from c->model with c->o's seed and logs to
// c->logs: they are pointed at this seed's model, a copy of the options with its seed, and OUT/seeds/logs for
// the two runs, so the trainings are the suite's own (same flags, phases and billing) and nothing else differs.
static void train_seed(acc_ctx *c, int i, seed_runs *sr) {
    char *sdir = acc_xprintf("%s/seeds/seed-%d", c->out, i), *logs = acc_xprintf("%s/seeds/logs", c->out);
    pt_mkdir_p(sdir);
    pt_mkdir_p(logs);
    char *keep_logs = c->logs, *keep_model = c->model;
    const pt_accept_opts *keep_o = c->o;
    c->logs = logs;
    char *model = seed_model(c, i, sdir);
    if (!model) acc_add_reason(c, "seeds: the initial model of seed %d: %s", i, pt_last_error());
    pt_accept_opts oi = *keep_o;
    oi.seed = keep_o->seed + (uint64_t)i;
    const pt_platform *pls[2] = {&oi.baseline, &oi.candidate};
    const char *roles[2] = {"baseline", "candidate"};
    for (int s = 0; s < 2 && model; s++) {
        char role[48];
        snprintf(role, sizeof role, "%s-seed%d", roles[s], i);
        run_t r = {.pl = pls[s], .role = role, .dir = acc_xprintf("%s/%s", sdir, roles[s]), .eval_loss = NAN};
        c->o = &oi;  // billed by platform pointer: oi's platforms are the suite's baseline and candidate
        c->model = model;
        sr->trained[s] = acc_train_run(c, &r, 0) == 0;
        c->o = keep_o;
        c->model = keep_model;
        if (!sr->trained[s])
            acc_add_reason(c, "seeds: %s seed %d (--seed %llu) did not train: %s", roles[s], i,
                           (unsigned long long)oi.seed, pt_last_error());
        sr->dir[s] = r.dir;
        sr->m[s] = r.m;
    }
    c->logs = keep_logs;
    free(model); free(sdir); free(logs);
}

// The upper-tail quantile t with P(T > t) = p of Student's t (df), by bisection on pt_student_t_sf.
static double t_quantile(double p, double df) {
    double lo = 0, hi = 1e6;
    for (int it = 0; it < 200; it++) {
        const double mid = 0.5 * (lo + hi);
        if (pt_student_t_sf(mid, df) > p) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

// Trailing mean of the w losses ending at `step` in m (NAN when m lacks one of them).
static double trailing_at(const metrics_t *m, long step, int w) {
    int end = -1;
    for (int i = 0; i < m->n; i++)
        if (m->rows[i].step == step) { end = i; break; }
    if (end < w - 1) return NAN;
    double s = 0;
    for (int i = end - w + 1; i <= end; i++) s += m->rows[i].loss;
    return s / w;
}

static cJSON *curve_json(const metrics_t *m, int w) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < m->n; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "step", (double)m->rows[i].step);
        if (isfinite(m->rows[i].loss)) cJSON_AddNumberToObject(p, "loss", m->rows[i].loss);
        const double t = trailing_at(m, m->rows[i].step, w);
        if (isfinite(t)) cJSON_AddNumberToObject(p, "trailing_loss", t);
        cJSON_AddItemToArray(a, p);
    }
    return a;
}

// Per step (trailing means of SEEDS_WINDOW losses, from the first full window): the baseline seeds' mean m and
// sample std sd; the envelope is m +- t(1-(1-level)/2, K-1) sqrt(1+1/K) sd, the prediction interval of one more
// seed drawn from the baseline's distribution. Each candidate seed is judged on the fraction of steps it lies
// outside (two-sided: a curve far below the baseline's is not the same training either).
static cJSON *envelope(acc_ctx *c, const metrics_t *const *bm, const metrics_t *const *cm, int k) {
    const int w = SEEDS_WINDOW;
    const double q = t_quantile((1 - ENVELOPE_LEVEL) / 2, k - 1), mult = q * sqrt(1.0 + 1.0 / k);
    cJSON *env = cJSON_CreateObject();
    cJSON_AddNumberToObject(env, "window", w);
    cJSON_AddNumberToObject(env, "level", ENVELOPE_LEVEL);
    cJSON_AddNumberToObject(env, "t_quantile", q);
    cJSON_AddNumberToObject(env, "std_multiple", mult);
    cJSON_AddNumberToObject(env, "max_outside_fraction", ENVELOPE_MAX_OUT);
    cJSON_AddStringToObject(env, "justification",
        "per step, the two-sided 99% prediction interval of one more seed from the baseline seeds' distribution "
        "(mean +- t(0.995, K-1) * sqrt(1+1/K) * sample std of the baseline seeds' trailing-mean losses; normal "
        "seeds assumed): a correct candidate seed lies outside it at about 1% of the steps, so a candidate "
        "seed outside at more than 10% of the steps does not train like the baseline");
    cJSON *bounds = cJSON_AddArrayToObject(env, "bounds"), *cands = cJSON_AddArrayToObject(env, "candidates");
    int *out = pt_calloc((size_t)k, sizeof *out), *judged = pt_calloc((size_t)k, sizeof *judged);
    long *first = pt_malloc(sizeof(long) * (size_t)k);
    for (int j = 0; j < k; j++) first[j] = -1;
    double *v = pt_malloc(sizeof(double) * (size_t)k);
    for (int r = 0; r < bm[0]->n; r++) {
        const long step = bm[0]->rows[r].step;
        double mean = 0, var = 0;
        bool all = true;
        for (int i = 0; i < k && all; i++) all = isfinite(v[i] = trailing_at(bm[i], step, w));
        if (!all) continue;
        for (int i = 0; i < k; i++) mean += v[i] / k;
        for (int i = 0; i < k; i++) var += (v[i] - mean) * (v[i] - mean) / (k - 1);
        const double hw = mult * sqrt(var);
        cJSON *b = cJSON_CreateObject();
        cJSON_AddNumberToObject(b, "step", (double)step);
        cJSON_AddNumberToObject(b, "mean", mean);
        cJSON_AddNumberToObject(b, "lo", mean - hw);
        cJSON_AddNumberToObject(b, "hi", mean + hw);
        cJSON_AddItemToArray(bounds, b);
        for (int j = 0; j < k; j++) {
            const double x = trailing_at(cm[j], step, w);
            judged[j]++;
            if (isfinite(x) && fabs(x - mean) <= hw) continue;
            if (out[j]++ == 0) first[j] = step;  // a missing or non-finite step lies outside
        }
    }
    for (int j = 0; j < k; j++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "seed_index", j);
        cJSON_AddNumberToObject(e, "judged_steps", judged[j]);
        cJSON_AddNumberToObject(e, "outside_steps", out[j]);
        if (first[j] >= 0) cJSON_AddNumberToObject(e, "first_outside_step", (double)first[j]);
        const bool ok = judged[j] > 0 && out[j] <= ENVELOPE_MAX_OUT * judged[j];
        cJSON_AddBoolToObject(e, "ok", ok);
        cJSON_AddItemToArray(cands, e);
        if (!ok)
            acc_add_reason(c, "seeds: candidate seed %d (--seed %llu) lies outside the baseline seeds' %g%% envelope "
                           "at %d of %d steps (first at step %ld; at most %g%% allowed)", j,
                           (unsigned long long)(c->o->seed + (uint64_t)j), 100 * ENVELOPE_LEVEL, out[j], judged[j],
                           first[j], 100 * ENVELOPE_MAX_OUT);
    }
    free(out); free(judged); free(first); free(v);
    return env;
}

// seeds[i]: {seed_index, train_seed, init_seed, run_dir, curve} for one side.
static cJSON *side_json(acc_ctx *c, char *const *dirs, const metrics_t *const *ms, int k) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < k; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "seed_index", i);
        cJSON_AddNumberToObject(e, "train_seed", (double)(c->o->seed + (uint64_t)i));
        if (c->o->model_dir) cJSON_AddNullToObject(e, "init_seed");
        else cJSON_AddNumberToObject(e, "init_seed", (double)(c->o->init_seed + (uint64_t)i));
        cJSON_AddStringToObject(e, "run_dir", dirs[i]);
        cJSON_AddItemToObject(e, "curve", curve_json(ms[i], SEEDS_WINDOW));
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

// The t-test and the envelopes over all K seeds (their reasons added); c->seeds is the report's section.
static void judge_seeds(acc_ctx *c, char **dirs[2], const metrics_t **ms[2], int k) {
    cJSON *sec = cJSON_CreateObject();
    cJSON_AddNumberToObject(sec, "k", k);
    cJSON_AddStringToObject(sec, "derivation",
        "seed i (0..K-1) trains with --seed SEED+i (the data order when the recipe shuffles) from the weights of "
        "init --seed INIT_SEED+i (a --model is shared); baseline and candidate seed i share their frozen inputs");
    pt_seeds_opts so = {.target_loss = NAN, .window = SEEDS_WINDOW, .alpha = 0.05};
    cJSON *tt = NULL;
    const int rc = pt_compare_seeds((const char *const *)dirs[0], k, (const char *const *)dirs[1], k, &so, &tt);
    if (rc == 2) acc_add_reason(c, "seeds: steps to target: %s", pt_last_error());
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(tt, "reasons"), *it;
    if (rc == 1) cJSON_ArrayForEach(it, rs) if (cJSON_IsString(it)) acc_add_reason(c, "seeds: %s", it->valuestring);
    if (tt) cJSON_AddItemToObject(sec, "steps_to_target", tt);
    const int before = cJSON_GetArraySize(c->reasons);
    cJSON_AddItemToObject(sec, "envelope", envelope(c, ms[0], ms[1], k));
    cJSON_AddItemToObject(sec, "baseline", side_json(c, dirs[0], ms[0], k));
    cJSON_AddItemToObject(sec, "candidate", side_json(c, dirs[1], ms[1], k));
    const bool ok = rc == 0 && cJSON_GetArraySize(c->reasons) == before;
    cJSON_AddStringToObject(sec, "verdict", ok ? "ACCEPTED" : "REJECTED");
    acc_say(c, "  seeds (%d per side): steps to target %s, envelope %s", k,
            rc == 0 ? "ACCEPTED" : "REJECTED", cJSON_GetArraySize(c->reasons) == before ? "ok" : "FAILED");
    c->seeds = sec;
}

void acc_seeds(acc_ctx *c) {
    const int k = c->o->seeds;
    if (k <= 1) return;
    seed_runs *sr = pt_calloc((size_t)k, sizeof *sr);
    bool all = true;
    for (int i = 1; i < k && all; i++) {
        train_seed(c, i, &sr[i]);
        all = sr[i].trained[0] && sr[i].trained[1];
    }
    char **dirs[2] = {pt_calloc((size_t)k, sizeof(char *)), pt_calloc((size_t)k, sizeof(char *))};
    const metrics_t **ms[2] = {pt_calloc((size_t)k, sizeof(metrics_t *)), pt_calloc((size_t)k, sizeof(metrics_t *))};
    const run_t *seed0[2] = {&c->base, &c->cand};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < k; i++) {
            dirs[s][i] = i ? sr[i].dir[s] : seed0[s]->dir;
            ms[s][i] = i ? &sr[i].m[s] : &seed0[s]->m;
        }
    if (all) judge_seeds(c, dirs, ms, k);  // a seed that did not train is its reason already
    for (int i = 1; i < k; i++)
        for (int s = 0; s < 2; s++) { free(sr[i].dir[s]); free(sr[i].m[s].rows); }
    for (int s = 0; s < 2; s++) { free(dirs[s]); free(ms[s]); }
    free(sr);
}
