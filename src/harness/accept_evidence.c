// An evidence directory: evidence.json, the files it names, and the training recipe its trainer's
// configuration records (TorchTitan's job config as TOML or as its command-line flags, HF TrainingArguments
// JSON or portatrain's train_args.json). docs/ACCEPT.md, "Platforms portatrain does not run".
#define _GNU_SOURCE
#include "harness/accept_evidence.h"
#include "util/fileio.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *acc_ev_dir_of(const char *spec) {
    const size_t n = strlen(ACC_EV_PREFIX);
    return spec && !strncmp(spec, ACC_EV_PREFIX, n) ? spec + n : NULL;
}

// A path evidence.json names, relative to its directory; it must exist. NULL with the error naming the field.
static char *ev_path(const acc_ev_side *s, const cJSON *v, const char *field, bool dir_ok) {
    if (!cJSON_IsString(v) || !v->valuestring[0]) {
        pt_set_error("%s: \"%s\": missing or not a non-empty string (a path relative to the directory)", s->manifest,
                     field);
        return NULL;
    }
    char *p = v->valuestring[0] == '/' ? pt_strdup(v->valuestring) : pt_path_join(s->dir, v->valuestring);
    if (!pt_file_exists(p) && !(dir_ok && pt_is_dir(p))) {
        pt_set_error("%s: \"%s\": %s: no such file", s->manifest, field, p);
        free(p);
        return NULL;
    }
    return p;
}

// The configuration as flat "section.key" -> text pairs ('-' read as '_'), whichever form it has.
static void flat_add(cJSON *flat, const char *key, const char *val) {
    char k[256];
    snprintf(k, sizeof k, "%s", key);
    for (char *p = k; *p; p++) if (*p == '-') *p = '_';
    cJSON_DeleteItemFromObjectCaseSensitive(flat, k);
    cJSON_AddStringToObject(flat, k, val);
}

static void trim(char *s) {
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    if (e > s + 1 && (*s == '"' || *s == '\'') && e[-1] == *s) { e[-1] = 0; memmove(s, s + 1, strlen(s)); }
}

// TOML's subset a job config uses: [section] headers and `key = value` lines, '#' comments.
static void flat_toml(cJSON *flat, char *text) {
    char sec[128] = "";
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        while (isspace((unsigned char)*l)) l++;
        char *hash = strchr(l, '#');
        if (hash && !memchr(l, '"', (size_t)(hash - l))) *hash = 0;
        if (*l == '[') { snprintf(sec, sizeof sec, "%.*s", (int)strcspn(l + 1, "]"), l + 1); continue; }
        char *eq = strchr(l, '=');
        if (!eq) continue;
        *eq = 0;
        char key[256], *val = eq + 1;
        trim(l);
        while (isspace((unsigned char)*val)) val++;
        trim(val);
        snprintf(key, sizeof key, "%s%s%s", sec, sec[0] ? "." : "", l);
        flat_add(flat, key, val);
    }
}

// Command-line flags (`--training.steps 6 --checkpoint.enable ...`): a flag without a value is "true".
static void flat_args(cJSON *flat, char *text) {
    char *tok[4096];
    int n = 0;
    for (char *t = strtok(text, " \t\r\n"); t && n < 4096; t = strtok(NULL, " \t\r\n")) tok[n++] = t;
    for (int i = 0; i < n; i++) {
        if (strncmp(tok[i], "--", 2)) continue;
        char *eq = strchr(tok[i], '=');
        if (eq) { *eq = 0; flat_add(flat, tok[i] + 2, eq + 1); }
        else if (i + 1 < n && strncmp(tok[i + 1], "--", 2)) { flat_add(flat, tok[i] + 2, tok[i + 1]); i++; }
        else flat_add(flat, tok[i] + 2, "true");
    }
}

static void flat_json(cJSON *flat, const cJSON *o) {
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        char b[64];
        if (cJSON_IsString(v)) flat_add(flat, v->string, v->valuestring);
        else if (cJSON_IsNumber(v)) { acc_exact_double(b, sizeof b, v->valuedouble); flat_add(flat, v->string, b); }
        else if (cJSON_IsBool(v)) flat_add(flat, v->string, cJSON_IsTrue(v) ? "true" : "false");
    }
}

static cJSON *config_flat(const char *path) {
    char *text = pt_read_file(path, NULL);
    if (!text) return NULL;
    cJSON *flat = cJSON_CreateObject();
    const char *ext = strrchr(path, '.');
    if (ext && !strcmp(ext, ".json")) {
        cJSON *o = cJSON_Parse(text);
        if (!cJSON_IsObject(o)) {
            pt_set_error("%s: not a JSON object (HF TrainingArguments or train_args.json)", path);
            cJSON_Delete(o); cJSON_Delete(flat); free(text);
            return NULL;
        }
        flat_json(flat, o);
        cJSON_Delete(o);
    } else if (ext && !strcmp(ext, ".toml")) flat_toml(flat, text);
    else flat_args(flat, text);
    free(text);
    return flat;
}

// The first of the keys the configuration has, as a number (NAN: none; -1 with the error: not a number).
static int flat_num(const cJSON *flat, const char *path, const char *const *keys, double *out) {
    *out = NAN;
    for (int i = 0; keys[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(flat, keys[i]);
        if (!cJSON_IsString(v)) continue;
        char *e;
        *out = strtod(v->valuestring, &e);
        if (e == v->valuestring || *e) { pt_set_error("%s: %s: \"%s\" is not a number", path, keys[i], v->valuestring); return -1; }
        return 0;
    }
    return 0;
}

static const char *flat_str(const cJSON *flat, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(flat, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *precision_of(const cJSON *flat) {
    const char *mp = flat_str(flat, "training.mixed_precision_param");  // TorchTitan
    if (mp) return !strcmp(mp, "float32") ? "fp32" : !strcmp(mp, "bfloat16") ? "bf16" : mp;
    const char *bf = flat_str(flat, "bf16"), *fp = flat_str(flat, "fp16"), *pr = flat_str(flat, "precision");
    if (pr) return pr;  // portatrain's train_args.json
    if (bf || fp) return bf && !strcmp(bf, "true") ? "bf16" : fp && !strcmp(fp, "true") ? "fp16" : "fp32";
    return NULL;
}

// The recipe's fields, each from the names TorchTitan's flags/TOML, HF's TrainingArguments and portatrain's
// train_args.json give it; evidence.json's "recipe" object adds what a configuration does not record (HF's
// TrainingArguments have no sequence length).
static int build_recipe(acc_ev_side *s, const cJSON *flat, const cJSON *extra) {
    static const char *const lr[] = {"optimizer.lr", "optimizer.param_groups.0.optimizer_kwargs.lr", "learning_rate", NULL};
    static const char *const wd[] = {"optimizer.weight_decay", "optimizer.param_groups.0.optimizer_kwargs.weight_decay",
                                     "weight_decay", NULL};
    static const char *const st[] = {"training.steps", "max_steps", NULL};
    static const char *const sl[] = {"training.seq_len", "seq_len", NULL};
    static const char *const wu[] = {"lr_scheduler.warmup_steps", "warmup_steps", NULL};
    static const char *const sd[] = {"debug.seed", "training.seed", "seed", NULL};
    static const char *const gn[] = {"training.max_norm", "max_grad_norm", NULL};
    static const char *const gb[] = {"training.global_batch_size", NULL};
    static const char *const lb[] = {"training.local_batch_size", "per_device_train_batch_size", NULL};
    static const char *const ga[] = {"gradient_accumulation_steps", NULL};
    struct { const char *name; const char *const *keys; } f[] = {
        {"learning_rate", lr}, {"seq_len", sl}, {"steps", st}, {"warmup_steps", wu}, {"weight_decay", wd},
        {"seed", sd}, {"max_grad_norm", gn}};
    s->recipe = cJSON_CreateObject();
    double v, g, l, a;
    for (size_t i = 0; i < PT_ARRAY_LEN(f); i++) {
        if (flat_num(flat, s->config_path, f[i].keys, &v) != 0) return -1;
        if (isfinite(v)) cJSON_AddNumberToObject(s->recipe, f[i].name, v);
    }
    if (flat_num(flat, s->config_path, gb, &g) || flat_num(flat, s->config_path, lb, &l) ||
        flat_num(flat, s->config_path, ga, &a))
        return -1;
    // TorchTitan's global_batch_size <= 0 means local x data-parallel degree; one rank's local batch here
    if (isfinite(l)) cJSON_AddNumberToObject(s->recipe, "global_batch_size", isfinite(g) && g > 0 ? g : l * (isfinite(a) ? a : 1));
    const char *p = precision_of(flat);
    if (p) cJSON_AddStringToObject(s->recipe, "precision", p);
    const cJSON *x;
    cJSON_ArrayForEach(x, extra) {
        cJSON_DeleteItemFromObjectCaseSensitive(s->recipe, x->string);
        cJSON_AddItemToObject(s->recipe, x->string, cJSON_Duplicate(x, 1));
    }
    return 0;
}

static int load_checkpoints(acc_ev_side *s, const cJSON *arr) {
    if (!arr) return 0;
    if (!cJSON_IsArray(arr)) { pt_set_error("%s: \"checkpoints\": not an array", s->manifest); return -1; }
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        char field[64];
        snprintf(field, sizeof field, "checkpoints[%d].step", s->nck);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "step");
        if (!cJSON_IsNumber(st) || st->valuedouble < 0 || st->valuedouble != (double)(long)st->valuedouble) {
            pt_set_error("%s: \"%s\": missing or not a whole number >= 0", s->manifest, field);
            return -1;
        }
        if (s->nck == ACC_EV_MAX_CKPT) { pt_set_error("%s: \"checkpoints\": more than %d", s->manifest, ACC_EV_MAX_CKPT); return -1; }
        snprintf(field, sizeof field, "checkpoints[%d].path", s->nck);
        char *d = ev_path(s, cJSON_GetObjectItemCaseSensitive(e, "path"), field, true);
        if (!d) return -1;
        char *w = pt_path_join(d, "model.safetensors");
        const bool ok = pt_file_exists(w);
        free(w);
        if (!ok) { pt_set_error("%s: \"%s\": %s has no model.safetensors (an HF-format checkpoint)", s->manifest, field, d); free(d); return -1; }
        s->ck_step[s->nck] = (long)st->valuedouble;
        s->ck_dir[s->nck++] = d;
    }
    return 0;
}

// The optional parts: the continuation, the restart, the platform record.
static int load_optional(acc_ev_side *s, const cJSON *man) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(man, "continuation");
    if (c) {
        const cJSON *fs = cJSON_GetObjectItemCaseSensitive(c, "from_step");
        if (!cJSON_IsNumber(fs) || fs->valuedouble < 0 || fs->valuedouble != (double)(long)fs->valuedouble) {
            pt_set_error("%s: \"continuation.from_step\": missing or not a whole number >= 0", s->manifest);
            return -1;
        }
        s->cont_from = (long)fs->valuedouble;
        if (!(s->cont_log = ev_path(s, cJSON_GetObjectItemCaseSensitive(c, "log"), "continuation.log", true))) return -1;
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(man, "restart");
    if (r && !(s->restart_log = ev_path(s, cJSON_GetObjectItemCaseSensitive(r, "log"), "restart.log", true))) return -1;
    s->platform = cJSON_GetObjectItemCaseSensitive(man, "platform");
    if (s->platform && !cJSON_IsObject(s->platform)) { pt_set_error("%s: \"platform\": not an object", s->manifest); return -1; }
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(s->platform, "name");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(man, "trainer");
    if (cJSON_IsString(pn)) snprintf(s->name, sizeof s->name, "%s", pn->valuestring);
    else snprintf(s->name, sizeof s->name, "%s (%s)", cJSON_IsString(tr) ? tr->valuestring : "evidence", s->dir);
    return 0;
}

static int load_parts(acc_ev_side *s, const cJSON *man) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(man, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "portatrain-evidence")) {
        pt_set_error("%s: \"format\": must be \"portatrain-evidence\"", s->manifest);
        return -1;
    }
    if (!(s->log_path = ev_path(s, cJSON_GetObjectItemCaseSensitive(man, "log"), "log", true))) return -1;
    const cJSON *lf = cJSON_GetObjectItemCaseSensitive(man, "log_format");
    if (lf && !cJSON_IsString(lf)) { pt_set_error("%s: \"log_format\": not a string", s->manifest); return -1; }
    s->log_format = lf ? lf->valuestring : NULL;
    if (pt_runlog_load(s->log_path, s->log_format, &s->log) != 0) return -1;
    if (!(s->config_path = ev_path(s, cJSON_GetObjectItemCaseSensitive(man, "config"), "config", false))) return -1;
    const cJSON *mc = cJSON_GetObjectItemCaseSensitive(man, "model_config");
    if (mc && !(s->model_config = ev_path(s, mc, "model_config", false))) return -1;
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(man, "recipe");
    if (extra && !cJSON_IsObject(extra)) { pt_set_error("%s: \"recipe\": not an object", s->manifest); return -1; }
    cJSON *flat = config_flat(s->config_path);
    if (!flat) return -1;
    const int rc = build_recipe(s, flat, extra);
    cJSON_Delete(flat);
    if (rc) return -1;
    if (load_checkpoints(s, cJSON_GetObjectItemCaseSensitive(man, "checkpoints")) != 0) return -1;
    return load_optional(s, man);
}

int acc_ev_load(acc_ev_side *s, const char *dir) {
    memset(s, 0, sizeof *s);
    s->dir = pt_strdup(dir);
    s->manifest = pt_path_join(dir, "evidence.json");
    if (!pt_is_dir(dir)) { pt_set_error("%s: not a directory (an evidence directory)", dir); return -1; }
    if (!pt_file_exists(s->manifest)) { pt_set_error("%s: missing (an evidence directory's manifest)", s->manifest); return -1; }
    cJSON *man = pt_json_parse_file(s->manifest);
    if (!cJSON_IsObject(man)) {
        if (man) pt_set_error("%s: not a JSON object", s->manifest);
        cJSON_Delete(man);
        return -1;
    }
    s->man = man;
    return load_parts(s, man);
}

void acc_ev_free(acc_ev_side *s) {
    cJSON_Delete(s->man);
    pt_runlog_free(&s->log);
    cJSON_Delete(s->recipe);
    for (int i = 0; i < s->nck; i++) free(s->ck_dir[i]);
    free(s->dir); free(s->manifest); free(s->log_path); free(s->config_path); free(s->model_config);
    free(s->cont_log); free(s->restart_log);
    memset(s, 0, sizeof *s);
}

static bool same_value(const cJSON *a, const cJSON *b) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        return a->valuedouble == b->valuedouble ||
               fabs(a->valuedouble - b->valuedouble) <= 1e-12 * fmax(fabs(a->valuedouble), fabs(b->valuedouble));
    return cJSON_IsString(a) && cJSON_IsString(b) && !strcmp(a->valuestring, b->valuestring);
}

cJSON *acc_ev_recipe_compare(const acc_ev_side *a, const acc_ev_side *b, int *ndiff) {
    static const char *const names[] = {"learning_rate", "global_batch_size", "seq_len", "steps", "warmup_steps",
                                        "weight_decay", "seed", "precision", "max_grad_norm"};
    cJSON *out = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(out, "fields");
    cJSON *diffs = cJSON_AddArrayToObject(out, "differences"), *unrec = cJSON_AddArrayToObject(out, "not_recorded");
    *ndiff = 0;
    for (size_t i = 0; i < PT_ARRAY_LEN(names); i++) {
        const cJSON *va = cJSON_GetObjectItemCaseSensitive(a->recipe, names[i]);
        const cJSON *vb = cJSON_GetObjectItemCaseSensitive(b->recipe, names[i]);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "field", names[i]);
        cJSON_AddItemToObject(r, "baseline", va ? cJSON_Duplicate(va, 1) : cJSON_CreateString("(not recorded)"));
        cJSON_AddItemToObject(r, "candidate", vb ? cJSON_Duplicate(vb, 1) : cJSON_CreateString("(not recorded)"));
        const bool known = va && vb, match = known && same_value(va, vb);
        if (known) cJSON_AddBoolToObject(r, "match", match);
        else cJSON_AddItemToArray(unrec, cJSON_CreateString(names[i]));
        if (known && !match) {
            char *ta = cJSON_PrintUnformatted(va), *tb = cJSON_PrintUnformatted(vb);
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "field", names[i]);
            cJSON_AddStringToObject(d, "baseline", ta);
            cJSON_AddStringToObject(d, "candidate", tb);
            cJSON_AddItemToArray(diffs, d);
            free(ta); free(tb);
            (*ndiff)++;
        }
        cJSON_AddItemToArray(rows, r);
    }
    return out;
}

static void hash_into(cJSON *o, const acc_ev_side *s, const char *path) {
    char hex[65];
    const size_t n = strlen(s->dir);
    const char *rel = !strncmp(path, s->dir, n) && path[n] == '/' ? path + n + 1 : path;
    if (acc_sha256_path(path, hex) == 0) cJSON_AddStringToObject(o, rel, hex);
    else cJSON_AddNullToObject(o, rel);
}

cJSON *acc_ev_hashes(const acc_ev_side *s) {
    cJSON *o = cJSON_CreateObject();
    hash_into(o, s, s->manifest);
    hash_into(o, s, s->log_path);
    hash_into(o, s, s->config_path);
    if (s->model_config) hash_into(o, s, s->model_config);
    for (int i = 0; i < s->nck; i++) hash_into(o, s, s->ck_dir[i]);
    if (s->cont_log) hash_into(o, s, s->cont_log);
    if (s->restart_log) hash_into(o, s, s->restart_log);
    return o;
}
