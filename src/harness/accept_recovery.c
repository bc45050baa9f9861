// The recovery phase: the candidate trains again under the supervisor with one worker killed at a seeded
// step, and must end bit-identical to its uninterrupted run (a deterministic platform) or within its own
// run-to-run envelope (a non-deterministic one, accept_noise.c).
#define _GNU_SOURCE
#include "harness/accept_noise.h"
#include "harness/compare.h"
#include "util/fileio.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The kill step: seeded, uniform over [R+1, steps-1] minus the checkpoint
// steps themselves, so a recovery always recomputes at least one step.
static long kill_step(const pt_accept_opts *o) {
    const long R = o->recovery_save_steps;
    long span = 0;
    for (long k = R + 1; k < o->steps; k++) span += k % R != 0;
    long pick = span ? (long)(splitmix64(o->seed ^ 0x6b696c6cull) % (uint64_t)span) : 0, S = R + 1;
    for (long k = R + 1; k < o->steps; k++)
        if (k % R != 0 && pick-- == 0) { S = k; break; }
    return S;
}

// `portatrain train --supervise --inject kill:...` into dir; the exit status (error set when not 0).
static int supervised_run(acc_ctx *c, const run_t *cand, const char *dir, long S, cJSON *r, double *wall) {
    const pt_accept_opts *o = c->o;
    argbuf a;
    acc_train_args(c, &a, cand->pl, dir, o->recovery_save_steps);
    char inject[64];
    const int world = pt_platform_ranks(cand->pl);
    if (world > 1) {  // one worker fails: a rank drawn from the seed, as the step is
        const int R = (int)(splitmix64(o->seed ^ 0x72616e6bull) % (uint64_t)world);
        snprintf(inject, sizeof inject, "kill:rank=%d:step=%ld", R, S);
        cJSON_AddNumberToObject(r, "fault_rank", R);
    } else snprintf(inject, sizeof inject, "kill:step=%ld", S);
    // test-only: the restarted worker skips the batch after the kill (an injected non-finite gradient under
    // --nan-policy skip), a recovered run that differs from the uninterrupted one
    if (o->test_fault && !strcmp(o->test_fault, "recovery-skip-batch")) {
        snprintf(inject + strlen(inject), sizeof inject - strlen(inject), ",nan:step=%ld:target=grad", S + 1);
        acc_ab_add(&a, "--nan-policy"); acc_ab_add(&a, "skip");
    }
    acc_ab_add(&a, "--supervise");
    acc_ab_add(&a, "--inject"); acc_ab_add(&a, inject);
    // a layout: the supervisor runs the MPI job, which ends when its killed rank dies; -np tells it the world size
    char *launch = world > 1 ? acc_xprintf("%s -np %d", o->launcher, world) : NULL;
    if (launch) { acc_ab_add(&a, "--launcher"); acc_ab_add(&a, launch); }
    acc_ab_add(&a, "--max-restarts"); acc_ab_add(&a, "3");
    char label[128];
    snprintf(label, sizeof label, "recovery %s (kill at step %ld)", cand->pl->text, S);
    char *mp = pt_path_join(dir, "metrics.jsonl");
    progress_src pr = {mp, 0, o->steps};
    const int rc = acc_run_child(c, label, "recovery", NULL, &pr, wall, 1, a.v);
    free(mp);
    free(launch);
    return rc;
}

// Tokens the supervised run trained: every logged step, and the replayed ones twice.
static void count_tokens(acc_ctx *c, const char *dir, const cJSON *r0) {
    metrics_t rm = {0};
    if (acc_metrics_load(dir, &rm) == 0) {
        double tr, sv;
        long tok;
        acc_metrics_phases(&rm, 0, &tr, &sv, &tok);
        c->tokens += tok;
        const double rec = jnum(r0, "steps_recomputed");
        if (isfinite(rec) && rm.n) c->tokens += (long)rec * rm.rows[0].tokens;
    }
    free(rm.rows);
}

// The recovered run (dir) against the candidate's uninterrupted one within the platform's run-to-run envelope.
static bool within_envelope(const acc_rule *rule, const run_t *cand, const char *dir, long S, const cJSON *r0,
                            double ttr, cJSON *r, char *detail, size_t dn) {
    char part[768];
    const bool ok = acc_within_envelope(rule, cand->dir, dir, r, part, sizeof part);
    if (ok) snprintf(detail, dn, "killed at step %ld, restored step %ld, recovered in %.2f s; loss curve and final "
                     "weights %s (envelope rule: %s %s)", S, (long)jnum(r0, "restored_step"), ttr, part,
                     cand->pl->text, rule->noise.identical ? "is deterministic, but --determinism envelope" :
                                                             "is not bitwise deterministic");
    else snprintf(detail, dn, "%s", part);
    return ok;
}

// The recovered run (dir) against the candidate's uninterrupted one: curves and final weights, bitwise.
static bool same_as_uninterrupted(const acc_rule *rule, const run_t *cand, const char *dir, long S, const cJSON *r0,
                                  double ttr, cJSON *r, char *detail, size_t dn) {
    if (rule->envelope) return within_envelope(rule, cand, dir, S, r0, ttr, r, detail, dn);
    pt_compare_opts co = {.profile = "exact"};
    cJSON *res = NULL;
    const int crc = pt_compare_runs(cand->dir, dir, &co, &res);
    cJSON_AddStringToObject(r, "final_compare", crc == 0 ? "ACCEPTED" : crc == 1 ? "REJECTED" : "REFUSED");
    char *wa = pt_path_join(cand->dir, "model.safetensors"), *wb = pt_path_join(dir, "model.safetensors");
    const int eq = acc_files_equal(wa, wb);
    cJSON_AddBoolToObject(r, "final_weights_identical", eq == 1);
    const bool ok = crc == 0 && eq == 1 && !rule->declared_bitwise_but_not;
    if (ok) {
        snprintf(detail, dn, "killed at step %ld, restored step %ld, recovered in %.2f s; loss curve and final "
                 "weights bit-identical to the uninterrupted run (bitwise rule: %s is deterministic)", S,
                 (long)jnum(r0, "restored_step"), ttr, cand->pl->text);
    } else if (rule->declared_bitwise_but_not) {
        snprintf(detail, dn, "%s", rule->why);
    } else {
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(res, "reasons");
        const cJSON *x = cJSON_IsArray(rs) ? cJSON_GetArrayItem(rs, 0) : NULL;
        snprintf(detail, dn, "the recovered run differs from the uninterrupted run: %s",
                 eq != 1 ? "final weights differ" : cJSON_IsString(x) ? x->valuestring : "curves differ");
    }
    free(wa); free(wb);
    cJSON_Delete(res);
    return ok;
}

// recovery.json of the supervised run -> r's timings, the phases, and whether it recovered exactly.
static bool judge_recovery(acc_ctx *c, const acc_rule *rule, const run_t *cand, const char *dir, long S,
                           const cJSON *rj, double wall, cJSON *r, char *detail, size_t dn) {
    const cJSON *recs = cJSON_GetObjectItemCaseSensitive(rj, "recoveries");
    const cJSON *r0 = cJSON_IsArray(recs) ? cJSON_GetArrayItem(recs, 0) : NULL;
    const char *keys[] = {"detect_s", "teardown_s", "restart_s", "restore_s", "replay_s", "total_s",
                          "restored_step", "steps_recomputed"};
    for (size_t i = 0; i < PT_ARRAY_LEN(keys); i++) {
        const double v = jnum(r0, keys[i]);
        if (isfinite(v)) cJSON_AddNumberToObject(r, keys[i], v);
    }
    const double gp = jnum(rj, "goodput"), ttr = jnum(r0, "total_s");
    if (isfinite(gp)) cJSON_AddNumberToObject(r, "goodput", gp);
    cJSON_AddNumberToObject(r, "restarts", jnum(rj, "restarts"));
    // The phases: time lost to recovery vs the rest of the supervised run.
    acc_add_phase(c, "recovery", cand->pl, "recovery", isfinite(ttr) ? ttr : 0);
    acc_add_phase(c, "recovery", cand->pl, "training", wall - (isfinite(ttr) ? ttr : 0));
    count_tokens(c, dir, r0);
    if (!r0) {
        snprintf(detail, dn, "the injected kill at step %ld was never observed (no recovery recorded)", S);
        return false;
    }
    return same_as_uninterrupted(rule, cand, dir, S, r0, ttr, r, detail, dn);
}

// The candidate trains again under the supervisor; its worker is killed at a
// seeded random step and restarted from the newest checkpoint.
cJSON *acc_recovery(acc_ctx *c, run_t *cand) {
    const long S = kill_step(c->o);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "platform", cand->pl->text);
    cJSON_AddStringToObject(r, "fault", "kill");
    cJSON_AddNumberToObject(r, "fault_step", (double)S);
    cJSON_AddNumberToObject(r, "save_steps", (double)c->o->recovery_save_steps);
    bool ok = false;
    char detail[2048] = "";
    // Which rule judges the recovery: the platform's own run-to-run noise, measured first.
    acc_rule rule;
    if (acc_determinism(c, cand, &rule, r) != 0) {
        snprintf(detail, sizeof detail, "the same-seed rerun of %s (its run-to-run noise) failed: %s", cand->pl->text,
                 pt_last_error());
        cJSON_AddBoolToObject(r, "ok", false);
        cJSON_AddStringToObject(r, "detail", detail);
        acc_add_reason(c, "recovery: %s", detail);
        acc_say(c, "  recovery: %s", detail);
        return r;
    }
    acc_say(c, "  determinism: %s", rule.why);
    char *dir = acc_xprintf("%s/recovery", c->out);
    pt_remove_tree(dir);
    double wall;
    const int rc = supervised_run(c, cand, dir, S, r, &wall);
    cJSON *rj = NULL;
    char *rpath = pt_path_join(dir, "recovery.json");
    if (rc != 0 || !(rj = pt_json_parse_file(rpath))) {
        if (rc != 0) snprintf(detail, sizeof detail, "the supervised run did not complete: %s", pt_last_error());
        else snprintf(detail, sizeof detail, "%s", pt_last_error());
        acc_add_phase(c, "recovery", cand->pl, "recovery", wall);
    } else ok = judge_recovery(c, &rule, cand, dir, S, rj, wall, r, detail, sizeof detail);
    cJSON_Delete(rj);
    free(rpath);
    cJSON_AddBoolToObject(r, "ok", ok);
    cJSON_AddStringToObject(r, "detail", detail);
    if (!ok) acc_add_reason(c, "recovery: %s", detail);
    acc_say(c, "  recovery: %s", detail);
    free(dir);
    return r;
}
