// portatrain accept, its inputs: platform SPECs, the options' defaults, a run's metrics.jsonl and the
// training recipe every run trains with (accept_internal.h names the suite's other files).
#define _GNU_SOURCE
#include "harness/accept.h"
#include "harness/accept_internal.h"

#include "backend/backend.h"
#include "dist/comm.h"
#include "harness/compare.h"
#include "harness/report.h"
#include "train/schedule.h"
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
int pt_platform_parse(const char *spec, pt_platform *p) {
    memset(p, 0, sizeof *p);
    p->tp = p->dp = p->fsdp = 1;
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
        const char *v = dim ? strchr(tok, '=') + 1 : NULL;
        char *end;
        long n = v ? strtol(v, &end, 10) : 0;
        if (!dim || end == v || *end || n < 1 || n > 4096) {
            pt_set_error("platform SPEC '%s': unknown part '%s' (expected fp32, bf16, tf32, tp=N, dp=N or fsdp=N)", spec, tok);
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
        pt_set_error("platform SPEC '%s': backend '%s' is not built into this binary (available: %s)", spec,
                     p->backend, pt_backend_list());
        return -1;
    }
    // A built cuda backend may still find no device here: say so now too
    // (a probe: this process must not hold a GPU context its runs need).
    if (pt_backend_probe(p->backend) != 0) {
        pt_prefix_error("platform SPEC '%s': ", spec);
        return -1;
    }
    if ((long)p->tp * p->dp * p->fsdp > 4096) {
        pt_set_error("platform SPEC '%s': tp x dp x fsdp = %ld ranks, more than 4096", spec, (long)p->tp * p->dp * p->fsdp);
        return -1;
    }
    if (pt_platform_ranks(p) > 1 && !pt_comm_has_mpi()) {
        pt_set_error("platform SPEC '%s': a parallel layout runs its ranks under MPI, and this build has no MPI "
                     "(scripts/deps.sh installs Open MPI)", spec);
        return -1;
    }
    return 0;
}

int pt_platform_ranks(const pt_platform *p) { return p->tp * p->dp * p->fsdp; }

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
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) { free(path); return -1; }
    int cap = 0, lineno = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        if (!*line) continue;
        cJSON *j = cJSON_Parse(line);
        if (!j && !next) {  // no newline after it: the run was killed while writing its last record
            pt_warn("%s:%d: ignoring a torn last line (the run was stopped while writing it)", path, lineno);
            break;
        }
        if (!j || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "step"))) {
            pt_set_error("%s:%d: not a metrics record", path, lineno);
            cJSON_Delete(j);
            free(text); free(path); free(m->rows);
            m->rows = NULL;
            return -1;
        }
        if (m->n == cap) { cap = cap ? 2 * cap : 128; m->rows = pt_realloc(m->rows, sizeof *m->rows * (size_t)cap); }
        metric_row *r = &m->rows[m->n++];
        r->step = (long)jnum(j, "step");
        r->loss = jnum(j, "loss");
        r->grad_norm = jnum(j, "grad_norm");
        r->step_time_s = jnum(j, "step_time_s");
        r->tokens_per_s = jnum(j, "tokens_per_s");
        r->save_time_s = jnum(j, "save_time_s");
        r->restore_time_s = jnum(j, "restore_time_s");
        double t = jnum(j, "tokens"), b = jnum(j, "save_bytes");
        r->tokens = isnan(t) ? 0 : (long)t;
        r->save_bytes = isnan(b) ? 0 : (long)b;
        cJSON_Delete(j);
    }
    free(text);
    free(path);
    return 0;
}

// ---------------------------------------------------------------- children

static long last_step_in(const char *metrics_path) {
    FILE *f = fopen(metrics_path, "r");
    if (!f) return -1;
    char line[4096];
    long step = -1;
    while (fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\": ");
        if (s && strchr(line, '\n')) step = strtol(s + 8, NULL, 10);
    }
    fclose(f);
    return step;
}

// ---------------------------------------------------------------- the recipe

// The training recipe beyond accept's fixed flags (acc_ctx.recipe). A recorded baseline's values come from its
// train_args.json (every value it ran with), else manifest.json's frozen hyperparameters; absent loader fields
// are what runs before those options read: wrap, no drop_last, unshuffled, packed (as compare reads them). A
// candidate that read other rows, or trained with another schedule or optimizer setting, would be refused by
// compare as "frozen inputs differ" (was, before the suite inherited them: a baseline recorded with
// --epoch-boundary wrap whose data ends within the run, or with another schedule, always REFUSED).
const pt_recipe_key pt_accept_recipe_keys[] = {
    {"epoch_boundary", cJSON_String},          {"dataloader_drop_last", cJSON_True}, {"shuffle", cJSON_True},
    {"data_mode", cJSON_String},               {"lr_scheduler_type", cJSON_String},  {"lr_scheduler_kwargs", cJSON_Object},
    {"gradient_accumulation_steps", cJSON_Number}, {"adam_beta1", cJSON_Number},      {"adam_beta2", cJSON_Number},
    {"adam_epsilon", cJSON_Number},
};
const int pt_accept_recipe_nkeys = (int)PT_ARRAY_LEN(pt_accept_recipe_keys);

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
        cJSON_AddStringToObject(r, "epoch_boundary", "wrap");  // the pre-option defaults
        cJSON_AddBoolToObject(r, "dataloader_drop_last", false);
        cJSON_AddBoolToObject(r, "shuffle", false);
        cJSON_AddStringToObject(r, "data_mode", "packed");
        for (int i = 0; i < pt_accept_recipe_nkeys; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, pt_accept_recipe_keys[i].key);
            if (!v) continue;
            if (!has_type(v, pt_accept_recipe_keys[i].type)) {
                pt_set_error("--baseline-run %s: %s: %s is not a %s", dir, p, pt_accept_recipe_keys[i].key,
                             type_name(pt_accept_recipe_keys[i].type));
                cJSON_Delete(r);
                r = NULL;
                break;
            }
            set_item(r, pt_accept_recipe_keys[i].key, v);
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

// The recipe's values as train would check them, now rather than in a child after the baseline has trained.
static int check_recipe(const pt_accept_opts *o, const cJSON *r) {
    const cJSON *v;
    cJSON_ArrayForEach(v, r) {
        const char *k = v->string;
        char *flag = recipe_flag(k), *text = recipe_value_text(v);
        const double x = cJSON_IsNumber(v) ? v->valuedouble : 0;
        const char *why = NULL;
        if (!strcmp(k, "gradient_accumulation_steps") && !(x >= 1 && x <= INT_MAX && x == floor(x)))
            why = "must be a whole number >= 1";
        else if ((!strcmp(k, "adam_beta1") || !strcmp(k, "adam_beta2")) && !(x >= 0 && x < 1))
            why = "must be in [0, 1)";
        else if (!strcmp(k, "adam_epsilon") && !(x > 0 && isfinite(x)))
            why = "must be > 0";
        else if (!strcmp(k, "epoch_boundary") && strcmp(v->valuestring, "hf") && strcmp(v->valuestring, "wrap"))
            why = "must be hf or wrap";
        else if (!strcmp(k, "data_mode") && strcmp(v->valuestring, "packed") && strcmp(v->valuestring, "padded"))
            why = "must be packed or padded";
        if (why) pt_set_error("accept: %s %s: %s", flag, text, why);
        free(flag);
        free(text);
        if (why) return -1;
    }
    const cJSON *eb = cJSON_GetObjectItemCaseSensitive(r, "epoch_boundary");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "dataloader_drop_last")) && cJSON_IsString(eb) &&
        !strcmp(eb->valuestring, "wrap")) {
        pt_set_error("accept: --dataloader-drop-last needs --epoch-boundary hf (wrap has no epoch ends to drop)");
        return -1;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(r, "lr_scheduler_type");
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(r, "lr_scheduler_kwargs");
    char *kwargs = kw ? cJSON_PrintUnformatted(kw) : NULL;
    pt_lr_schedule sched;
    int rc = pt_lr_schedule_parse(&sched, type ? type->valuestring : "linear", kwargs, o->learning_rate);
    if (rc == 0) rc = pt_lr_schedule_check(&sched, o->learning_rate, o->warmup_steps, o->steps);
    if (rc != 0) pt_prefix_error("accept: ");
    free(kwargs);
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
        for (int i = 0; i < pt_accept_recipe_nkeys; i++)
            if (!strcmp(pt_accept_recipe_keys[i].key, u->string)) known = has_type(u, pt_accept_recipe_keys[i].type);
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
