// portatrain accept, its inputs: platform SPECs, the options' defaults, a run's metrics.jsonl and the
// training recipe every run trains with (accept_internal.h names the suite's other files).
#define _GNU_SOURCE
#include "harness/accept.h"
#include "harness/accept_internal.h"

#include "backend/backend.h"
#include "dist/comm.h"
#include "harness/compare.h"
#include "harness/report.h"
#include "train/metrics.h"
#include "train/schedule.h"
#include "train/train_args.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/hash.h"
#include "util/json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// ---------------------------------------------------------------- platforms
// A SPEC part that is none of the known ones: -1, the error suggesting the nearest.
static int unknown_part(const char *spec, const char *tok) {
    static const char *const parts[] = {"fp32", "bf16", "tf32", "tp", "dp", "fsdp"};
    const char *eq = strchr(tok, '=');
    const int n = eq ? (int)(eq - tok) : (int)strlen(tok);
    const char *near = pt_nearest_name(tok, n, parts, (int)PT_ARRAY_LEN(parts), 1 + n / 4);
    const bool dim = near && (!strcmp(near, "tp") || !strcmp(near, "dp") || !strcmp(near, "fsdp"));
    char hint[96] = "";
    if (near) snprintf(hint, sizeof hint, "; did you mean %s%s%s?", near, dim ? "=" : "", dim ? (eq ? eq + 1 : "N") : "");
    pt_set_error("platform SPEC '%s': unknown part '%s'%s (expected fp32, bf16, tf32, tp=N, dp=N or fsdp=N)", spec, tok, hint);
    return -1;
}

int pt_platform_parse(const char *spec, pt_platform *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->precision, sizeof p->precision, "fp32");
    if (!spec || !*spec || strlen(spec) >= sizeof p->text) {
        pt_set_error("platform SPEC '%s': expected backend[:fp32][:tp=N][:dp=N][:fsdp=N]", spec ? spec : "");
        return -1;
    }
    snprintf(p->text, sizeof p->text, "%s", spec);
    char buf[96];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
        if (!p->backend[0]) {
            snprintf(p->backend, sizeof p->backend, "%s", tok);
            continue;
        }
        if (!strcmp(tok, "fp32") || !strcmp(tok, "bf16")) {
            snprintf(p->precision, sizeof p->precision, "%s", tok);
            continue;
        }
        if (!strcmp(tok, "tf32")) {
            p->tf32 = true;
            continue;
        }
        int *dim = !strncmp(tok, "tp=", 3) ? &p->tp : !strncmp(tok, "dp=", 3) ? &p->dp
                   : !strncmp(tok, "fsdp=", 5) ? &p->fsdp : NULL;
        if (!dim) return unknown_part(spec, tok);
        const char *v = strchr(tok, '=') + 1;
        char *end;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 1 || n > 4096) {
            pt_set_error("platform SPEC '%s': %.*s must be a positive integer up to 4096 (got '%s')", spec,
                         (int)(v - 1 - tok), tok, v);
            return -1;
        }
        *dim = (int)n;
    }
    // What this build can run: check now, not after an hour of baseline.
    char avail[128];
    snprintf(avail, sizeof avail, "%s", pt_backend_list());
    bool found = false;
    for (char *s2 = NULL, *b = strtok_r(avail, ",", &s2); b; b = strtok_r(NULL, ",", &s2))
        if (!strcmp(b, p->backend)) found = true;
    if (!found) {
        pt_backend_unknown(p->backend);
        if (strcmp(spec, p->backend)) pt_prefix_error("platform SPEC '%s': ", spec);  // else the error names it
        return -1;
    }
    // A built cuda backend may still find no device here: say so now too
    // (a probe: this process must not hold a GPU context its runs need).
    if (pt_backend_probe(p->backend) != 0) {
        pt_prefix_error("platform SPEC '%s': ", spec);
        return -1;
    }
    // unset dimensions (0) resolved as train resolves them for a job of the given ones' ranks
    const long ranks = (long)(p->tp ? p->tp : 1) * (p->dp ? p->dp : 1) * (p->fsdp ? p->fsdp : 1);
    if (ranks > 4096) {
        pt_set_error("platform SPEC '%s': tp x dp x fsdp = %ld ranks, more than 4096", spec, ranks);
        return -1;
    }
    pt_mesh m;
    pt_mesh_resolve((int)ranks, p->tp, p->fsdp, p->dp, NULL, &m);
    p->tp = m.tp, p->fsdp = m.fsdp, p->dp = m.dp;
    if (pt_platform_ranks(p) > 1 && !pt_comm_has_mpi()) {
        pt_set_error("platform SPEC '%s': a parallel layout runs its ranks under MPI, and this build has no MPI "
                     "(scripts/deps.sh installs Open MPI)", spec);
        return -1;
    }
    return 0;
}

int pt_platform_ranks(const pt_platform *p) { return p->tp * p->dp * p->fsdp; }

const char *pt_platform_pair_profile(const pt_platform *a, const pt_platform *b, const char **why) {
    const char *w, *prof;
    if (!strcmp(a->backend, b->backend) && !strcmp(a->precision, b->precision) && a->tf32 == b->tf32 &&
        a->tp == b->tp && a->dp == b->dp && a->fsdp == b->fsdp)
        w = "the same platform on both sides", prof = "exact";
    else if (!strcmp(a->precision, "bf16") || !strcmp(b->precision, "bf16"))
        w = "bf16 on at least one side", prof = "bf16";
    else if (a->tf32 || b->tf32)  // TF32 GEMMs (10-bit mantissa operands): the reduced-precision profile too
        w = "TF32 GEMMs on at least one side", prof = "bf16";
    else
        w = "two fp32 platforms", prof = "fp32";
    if (why) *why = w;
    return prof;
}

void pt_accept_defaults(pt_accept_opts *o) {
    memset(o, 0, sizeof *o);
    o->output_dir = "out/accept";
    o->config_path = "configs/tiny.json";
    o->init_seed = 42;
    o->tokenizer_dir = "data/demo/qwen3-tokenizer";
    o->train_data = "data/demo/shards/train";
    o->eval_data = "data/demo/shards/eval";
    o->price_table = "configs/prices.json";
    o->launcher = "mpirun";
    o->steps = 100;
    o->seq_len = 64;
    o->batch = 4;
    o->eval_batches = 16;
    o->learning_rate = 3e-3;
    o->weight_decay = 0.1;
    o->max_grad_norm = 1.0;
    o->warmup_steps = 20;
    o->seed = 42;
}

// ---------------------------------------------------------------- metrics

// Reads RUN/metrics.jsonl; -1 with an error naming the file and line.
static int metrics_load(const char *run_dir, metrics_t *m) {
    memset(m, 0, sizeof *m);
    char *path = pt_path_join(run_dir, "metrics.jsonl");
    pt_metrics_log log;
    const int rc = pt_metrics_read(path, 0, &log);
    if (rc == 0 && log.tail == PT_METRICS_TAIL_TORN)  // the run was killed while writing its last record
        pt_warn("%s:%d: ignoring a torn last line (the run was stopped while writing it)", path, log.torn_lineno);
    free(path);
    if (rc != 0) return -1;
    m->rows = pt_calloc((size_t)log.n + 1, sizeof *m->rows);
    for (int i = 0; i < log.n; i++) {
        const pt_metrics_rec *x = &log.recs[i];
        m->rows[i] = (metric_row){.step = x->step, .loss = x->loss, .grad_norm = x->grad_norm,
                                  .step_time_s = x->step_time_s, .tokens_per_s = x->tokens_per_s,
                                  .save_time_s = x->save_time_s, .restore_time_s = x->restore_time_s,
                                  .tokens = x->tokens, .save_bytes = x->save_bytes};
    }
    m->n = log.n;
    pt_metrics_log_free(&log);
    return 0;
}

// ---------------------------------------------------------------- children

// The step of the last complete line (-1: no file).
static long last_step_in(const char *metrics_path) {
    const long step = pt_metrics_last_step(metrics_path);
    return step > 0 ? step : -1;
}

// ---------------------------------------------------------------- the recipe

// The training recipe beyond accept's fixed flags (acc_ctx.recipe). A recorded baseline's values come from its
// train_args.json (every value it ran with), else manifest.json's frozen hyperparameters; absent loader fields
// are what runs before those options read: wrap, no drop_last, unshuffled, packed (as compare reads them). A
// candidate that read other rows, or trained with another schedule or optimizer setting, would be refused by
// compare as "frozen inputs differ": so a baseline recorded with --epoch-boundary wrap, or with another
// schedule, is judged with its own settings instead of being REFUSED.
// The recipe's settings are the train flags its table marks recipe (train/train_args.c: pt_train_recipe_flag).

static const char *type_name(int t) {
    return t == cJSON_True ? "boolean" : t == cJSON_Number ? "number" : t == cJSON_String ? "string" : "JSON object";
}

static bool has_type(const cJSON *v, int t) {
    return t == cJSON_True ? cJSON_IsBool(v) : t == cJSON_Number ? cJSON_IsNumber(v)
           : t == cJSON_String ? cJSON_IsString(v) : cJSON_IsObject(v);
}

// A recipe value as its train flag's value is typed: "linear", 0.95, {"min_lr_rate":0.1}, true.
static char *recipe_value_text(const cJSON *v) {
    char num[32];
    if (cJSON_IsString(v)) return pt_strdup(v->valuestring);
    if (cJSON_IsNumber(v)) { acc_exact_double(num, sizeof num, v->valuedouble); return pt_strdup(num); }
    if (cJSON_IsBool(v)) return pt_strdup(cJSON_IsTrue(v) ? "true" : "false");
    return cJSON_PrintUnformatted(v);
}

// "gradient_accumulation_steps" -> "--gradient-accumulation-steps"
static char *recipe_flag(const char *key) {
    char *flag = acc_xprintf("--%s", key);
    for (char *q = flag + 2; *q; q++)
        if (*q == '_') *q = '-';
    return flag;
}

// Numbers exactly (a beta of 0.95 is not 0.9500000001), the rest structurally.
static bool same_value(const cJSON *a, const cJSON *b) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
    return cJSON_Compare(a, b, true);
}

// obj[key] = a copy of v, replacing any value there.
static void set_item(cJSON *obj, const char *key, const cJSON *v) {
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddItemToObject(obj, key, cJSON_Duplicate(v, 1));
}

// What a recorded --baseline-run trained with: a new object (NULL, no error: it records none of it).
static cJSON *baseline_recipe(const char *dir) {
    char *p = pt_path_join(dir, "train_args.json");
    cJSON *j = pt_file_exists(p) ? pt_json_parse_file(p) : NULL;
    const cJSON *h = j;
    if (!j) {
        free(p);
        p = pt_path_join(dir, "manifest.json");
        j = pt_file_exists(p) ? pt_json_parse_file(p) : NULL;
        h = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "frozen"), "hyperparameters");
    }
    cJSON *r = NULL;
    if (cJSON_IsObject(h)) {
        r = cJSON_CreateObject();
        pt_train_legacy_loader_json(r, true);  // the loader's values before its options existed
        const pt_train_flag *f;
        for (int i = 0; (f = pt_train_recipe_flag(i)); i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, f->key);
            if (!v) continue;
            if (!has_type(v, f->json)) {
                pt_set_error("--baseline-run %s: %s: %s is not a %s", dir, p, f->key, type_name(f->json));
                cJSON_Delete(r);
                r = NULL;
                break;
            }
            set_item(r, f->key, v);
        }
    }
    cJSON_Delete(j);
    free(p);
    return r;
}

void acc_free_recipe(acc_ctx *c) {
    cJSON_Delete(c->recipe);
    for (int i = 0; i < c->recipe_argc; i++) free(c->recipe_argv[i]);
    c->recipe = NULL;
    c->recipe_argc = 0;
}

// The recipe's values and accept's training flags as train checks them (its flag table's parsers, then
// pt_train_args_check), now rather than in a child after the baseline has trained.
static int check_recipe(const pt_accept_opts *o, const cJSON *r) {
    pt_train_args t;
    pt_train_args_defaults(&t);
    t.learning_rate = o->learning_rate, t.warmup_steps = o->warmup_steps, t.weight_decay = o->weight_decay;
    t.max_grad_norm = o->max_grad_norm, t.seed = o->seed, t.seq_len = o->seq_len, t.max_steps = o->steps;
    t.per_device_train_batch_size = o->batch;
    char *text[64];  // the values as typed, which t's strings point into until the checks are done
    int n = 0, rc = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, r) {
        const pt_train_flag *f = pt_train_flag_find_key(v->string);
        if (!f || n == (int)PT_ARRAY_LEN(text)) {
            pt_set_error("recipe key '%s' is not a train flag", v->string);
            rc = -1;
            break;
        }
        text[n] = recipe_value_text(v);
        if ((rc = pt_train_flag_set(f, text[n++], &t)) != 0) break;
    }
    pt_lr_schedule sched;
    if (rc == 0) rc = pt_train_args_check(&t, &sched);
    if (rc == 0) rc = pt_lr_schedule_check(&sched, o->learning_rate, o->warmup_steps, o->steps);
    if (rc != 0) pt_prefix_error("accept: ");
    for (int i = 0; i < n; i++) free(text[i]);
    return rc;
}

// c->recipe and its train flags: the user's recipe flags over the recorded baseline's (base_dir; which they
// must not contradict) or over accept's default (a cosine schedule; train's defaults for the rest).
int acc_build_recipe(acc_ctx *c, const char *base_dir) {
    const cJSON *user = c->o->recipe;
    cJSON *r = NULL;
    if (base_dir) {
        pt_clear_error();
        r = baseline_recipe(base_dir);
        if (!r && pt_has_error()) return -1;
    }
    const bool recorded = r != NULL;  // else (no baseline, or one that records none of it) accept's default
    if (!r) {
        r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "lr_scheduler_type", "cosine");
    }
    const cJSON *u;
    cJSON_ArrayForEach(u, user) {
        bool known = false;
        const pt_train_flag *f;
        for (int i = 0; (f = pt_train_recipe_flag(i)); i++)
            if (!strcmp(f->key, u->string)) known = has_type(u, f->json);
        if (!known) {  // a caller's bug (the CLI only sets these keys), not the user's
            pt_set_error("accept: recipe key '%s' is not a training recipe setting of its type", u->string);
            cJSON_Delete(r);
            return -1;
        }
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(r, u->string);
        if (recorded && rec && !same_value(rec, u)) {
            char *flag = recipe_flag(u->string), *given = recipe_value_text(u), *had = recipe_value_text(rec);
            pt_set_error("accept: %s %s: the --baseline-run %s trained with %s; every run of the suite must train as "
                         "the baseline did (drop the flag to inherit it, or record a new baseline)",
                         flag, given, base_dir, had);
            free(flag); free(given); free(had);
            cJSON_Delete(r);
            return -1;
        }
        set_item(r, u->string, u);
    }
    c->recipe = r;
    if (check_recipe(c->o, r) != 0) return -1;
    // as train's flags: --epoch-boundary wrap, --shuffle (true only), --adam-beta1 0.9, ...
    const cJSON *v;
    cJSON_ArrayForEach(v, c->recipe) {
        if (cJSON_IsFalse(v)) continue;  // train's default for both of its boolean flags
        if (c->recipe_argc + 2 > (int)PT_ARRAY_LEN(c->recipe_argv)) {
            pt_set_error("accept: too many training recipe settings");
            return -1;
        }
        c->recipe_argv[c->recipe_argc++] = recipe_flag(v->string);
        if (!cJSON_IsTrue(v)) c->recipe_argv[c->recipe_argc++] = recipe_value_text(v);
    }
    return 0;
}

// ---------------------------------------------------------------- for the suite's other files

int acc_metrics_load(const char *run_dir, metrics_t *m) { return metrics_load(run_dir, m); }
long acc_last_step_in(const char *metrics_path) { return last_step_in(metrics_path); }
