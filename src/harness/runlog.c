#include "harness/runlog.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/common.h"
#include "util/json.h"

static void push(pt_runlog *r, int *cap, pt_runpoint p) {
    if (r->n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        r->pts = pt_realloc(r->pts, (size_t)*cap * sizeof *r->pts);
    }
    r->pts[r->n++] = p;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { pt_set_error("%s: cannot open", path); return NULL; }
    size_t cap = 4096, n = 0;
    char *b = pt_malloc(cap);
    size_t k;
    while ((k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n < 2) { cap *= 2; b = pt_realloc(b, cap); }
    }
    fclose(f);
    b[n] = 0;
    return b;
}

static double num_or_nan(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

// One JSON object per line: {step, loss[, grad_norm, tokens, step_time_s]}.
static int load_jsonl(const char *path, pt_runlog *r) {
    char *text = read_all(path);
    if (!text) return -1;
    const char *end = text + strlen(text);
    int cap = 0, line = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        line++;
        while (isspace((unsigned char)*l)) l++;
        if (!*l) continue;
        cJSON *o = cJSON_Parse(l);
        if (!o && l + strlen(l) == end) {  // no newline after it: a run killed while writing its last record
            pt_warn("%s:%d: ignoring a torn last line (the run was stopped while writing it)", path, line);
            break;
        }
        if (!cJSON_IsObject(o)) {
            pt_set_error("%s:%d: not a JSON object", path, line);
            cJSON_Delete(o); free(text); return -1;
        }
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(o, "loss");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "skipped"))) {  // --nan-policy skip: no update
            // Kept apart from the curve, so compare can reject it instead of not seeing the step.
            if (cJSON_IsNumber(s)) {
                r->skipped = pt_realloc(r->skipped, sizeof(long) * (size_t)(r->n_skipped + 1));
                r->skipped[r->n_skipped++] = (long)s->valuedouble;
            }
            cJSON_Delete(o);
            continue;
        }
        if (!cJSON_IsNumber(s) || !cJSON_IsNumber(lo)) {
            pt_set_error("%s:%d: needs numeric \"step\" and \"loss\"", path, line);
            cJSON_Delete(o); free(text); return -1;
        }
        double st = num_or_nan(o, "step_time_s");
        if (isnan(st)) st = num_or_nan(o, "step_time");
        pt_runpoint p = {(long)s->valuedouble, lo->valuedouble, num_or_nan(o, "grad_norm"),
                         num_or_nan(o, "tokens"), st, false, 1};
        p.nonfinite = !isfinite(p.loss) || isinf(p.grad_norm);  // 1e999 parses as inf
        push(r, &cap, p);
        cJSON_Delete(o);
    }
    free(text);
    return 0;
}

// Hugging Face Trainer: trainer_state.json "log_history"; training entries have
// "loss" (eval entries "eval_loss", the summary "train_loss"), which are skipped.
// HF's "loss" at step S is the mean of the step losses since its previous loss
// entry (Trainer._maybe_log_save_evaluate: tr_loss / (global_step -
// _globalstep_last_logged)), so each point records that window; "grad_norm" and
// "learning_rate" are step S's own.
static int load_hf(const char *path, pt_runlog *r) {
    cJSON *root = pt_json_parse_file(path);
    if (!root) return -1;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "log_history");
    if (!cJSON_IsArray(h)) {
        pt_set_error("%s: no \"log_history\" array (not a trainer_state.json)", path);
        cJSON_Delete(root); return -1;
    }
    int cap = 0, i = 0;
    long prev = 0;  // the step of the previous loss entry (0: none yet)
    const cJSON *e;
    cJSON_ArrayForEach(e, h) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(e, "step");
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(e, "loss");
        if (lo && !cJSON_IsNumber(lo)) {
            pt_set_error("%s: log_history[%d]: \"loss\" is not a number", path, i);
            cJSON_Delete(root); return -1;
        }
        if (lo && !cJSON_IsNumber(s)) {
            pt_set_error("%s: log_history[%d]: \"loss\" without a numeric \"step\"", path, i);
            cJSON_Delete(root); return -1;
        }
        if (lo) {
            pt_runpoint p = {(long)s->valuedouble, lo->valuedouble, num_or_nan(e, "grad_norm"), NAN, NAN, false, 1};
            p.nonfinite = !isfinite(p.loss) || isinf(p.grad_norm);
            if (p.step - prev > 1) p.window = (int)PT_MIN(p.step - prev, 1L << 30);
            prev = p.step;
            push(r, &cap, p);
        }
        i++;
    }
    cJSON_Delete(root);
    return 0;
}

// Removes ANSI escape sequences (ESC [ ... letter) in place.
static void strip_ansi(char *s) {
    char *w = s;
    for (char *p = s; *p;) {
        if (*p == 0x1b && p[1] == '[') {
            p += 2;
            while (*p && !isalpha((unsigned char)*p)) p++;
            if (*p) p++;
        } else *w++ = *p++;
    }
    *w = 0;
}

// After "key:" a number (commas allowed as thousands separators). 1 found, 0 not.
static int field(const char *l, const char *key, double *out) {
    const char *p = strstr(l, key);
    while (p && p != l && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) p = strstr(p + 1, key);
    if (!p) return 0;
    p += strlen(key);
    while (*p == ' ') p++;
    char buf[64];
    int n = 0;
    while (*p && n < 63 && (isdigit((unsigned char)*p) || strchr("+-.,eE", *p) || !strncmp(p, "nan", 3) || !strncmp(p, "inf", 3))) {
        if (!strncmp(p, "nan", 3) || !strncmp(p, "inf", 3)) { memcpy(buf + n, p, 3); n += 3; p += 3; break; }
        if (*p != ',') buf[n++] = *p;
        p++;
    }
    buf[n] = 0;
    char *end;
    *out = strtod(buf, &end);
    return n > 0 && *end == 0;
}

// TorchTitan (torchtitan/components/metrics.py, MetricsProcessor.log) logs per step, coloured
// (torchtitan/tools/utils.py Color; older releases coloured memory yellow, newer turquoise):
//   [rank0]:[titan] 2025-01-01 12:00:00,000 - root - INFO - \033[31mstep:  1  \033[32mloss:  7.9850
//   \033[38;2;180;60;0mgrad_norm:  2.1053  \033[38;2;54;234;195mmemory: 14.63GiB(15.40%)  \033[34mtps: 1,257 ...
// log_validation prints "validate step: N  loss: ..." lines: not training steps, skipped.
static int load_torchtitan(const char *path, pt_runlog *r) {
    char *text = read_all(path);
    if (!text) return -1;
    int cap = 0, line = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        line++;
        strip_ansi(l);
        if (!strstr(l, "step:") || !strstr(l, "loss:") || strstr(l, "validate step:")) continue;
        double s, lo, g = NAN, tps = NAN;
        if (!field(l, "step:", &s) || !field(l, "loss:", &lo)) {
            pt_set_error("%s:%d: a step line without a numeric step/loss", path, line);
            free(text); return -1;
        }
        const bool has_g = field(l, "grad_norm:", &g);
        if (!has_g) g = NAN;
        if (!field(l, "tps:", &tps)) tps = NAN;
        pt_runpoint p = {(long)s, lo, g, NAN, NAN, !isfinite(lo) || (has_g && !isfinite(g)), 1};
        push(r, &cap, p);
    }
    free(text);
    if (r->n == 0) { pt_set_error("%s: no TorchTitan \"step: ... loss: ...\" lines", path); return -1; }
    return 0;
}

// CSV with a header naming step, loss and optionally grad_norm, tokens, step_time[_s].
static int load_csv(const char *path, pt_runlog *r) {
    char *text = read_all(path);
    if (!text) return -1;
    int cap = 0, line = 0, col[5] = {-1, -1, -1, -1, -1}, ncol = 0;
    static const char *names[5] = {"step", "loss", "grad_norm", "tokens", "step_time"};
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        line++;
        size_t L = strlen(l);
        if (L && l[L - 1] == '\r') l[--L] = 0;
        if (!L) continue;
        char *cells[64];
        int nc = 0;
        for (char *c = l; nc < 64;) {
            cells[nc++] = c;
            char *comma = strchr(c, ',');
            if (!comma) break;
            *comma = 0; c = comma + 1;
        }
        for (int i = 0; i < nc; i++) {
            while (isspace((unsigned char)*cells[i])) cells[i]++;
            char *e = cells[i] + strlen(cells[i]);
            while (e > cells[i] && isspace((unsigned char)e[-1])) *--e = 0;
        }
        if (ncol == 0) {
            ncol = nc;
            for (int i = 0; i < nc; i++)
                for (int k = 0; k < 5; k++)
                    if (!strcmp(cells[i], names[k]) || (k == 4 && !strcmp(cells[i], "step_time_s"))) col[k] = i;
            if (col[0] < 0 || col[1] < 0) {
                pt_set_error("%s:%d: CSV header must name \"step\" and \"loss\"", path, line);
                free(text); return -1;
            }
            continue;
        }
        if (nc != ncol) {
            pt_set_error("%s:%d: %d cells, the header has %d", path, line, nc, ncol);
            free(text); return -1;
        }
        double v[5];
        for (int k = 0; k < 5; k++) {
            v[k] = NAN;
            if (col[k] < 0 || !*cells[col[k]]) continue;
            char *end;
            v[k] = strtod(cells[col[k]], &end);
            if (*end) {
                pt_set_error("%s:%d: %s \"%s\" is not a number", path, line, names[k], cells[col[k]]);
                free(text); return -1;
            }
        }
        if (!*cells[col[0]] || !*cells[col[1]]) {
            pt_set_error("%s:%d: empty step or loss", path, line);
            free(text); return -1;
        }
        // An empty grad_norm cell is "not logged"; "nan"/"inf" written there is a non-finite value.
        bool gn_bad = col[2] >= 0 && *cells[col[2]] && !isfinite(v[2]);
        pt_runpoint p = {(long)v[0], v[1], v[2], v[3], v[4], !isfinite(v[1]) || gn_bad, 1};
        push(r, &cap, p);
    }
    free(text);
    if (ncol == 0) { pt_set_error("%s: empty CSV", path); return -1; }
    return 0;
}

static bool is_dir(const char *p) { struct stat st; return !stat(p, &st) && S_ISDIR(st.st_mode); }
static bool is_file(const char *p) { struct stat st; return !stat(p, &st) && S_ISREG(st.st_mode); }

static const char *detect(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = buf;
    while (isspace((unsigned char)*p)) p++;
    if (*p == '{') {
        if (strstr(buf, "\"log_history\"") || strstr(buf, "\"global_step\"")) return "hf";
        // a pretty-printed single object is HF; one object per line is JSONL
        char *nl = strchr(p, '\n');
        if (nl && nl[-1] != '}' && !(nl - 1 > p && nl[-1] == '\r' && nl[-2] == '}')) return "hf";
        return "jsonl";
    }
    char tmp[4096];
    memcpy(tmp, buf, n + 1);
    strip_ansi(tmp);
    if (strstr(tmp, "step:") && strstr(tmp, "loss:")) return "torchtitan";
    return "csv";
}

int pt_runlog_load(const char *path, const char *format, pt_runlog *out) {
    memset(out, 0, sizeof *out);
    out->eval_loss = NAN;
    out->path = pt_strdup(path);
    char *file = NULL;
    if (is_dir(path)) {
        size_t L = strlen(path) + 64;
        file = pt_malloc(L);
        snprintf(file, L, "%s/metrics.jsonl", path);
        if (is_file(file)) {
            out->is_run_dir = true;
            if (!format || !strcmp(format, "auto")) format = "portatrain";
            char *ev = pt_malloc(L);
            snprintf(ev, L, "%s/eval.json", path);
            if (is_file(ev)) {
                cJSON *e = pt_json_parse_file(ev);
                if (!e) { free(ev); free(file); return -1; }
                out->eval_loss = num_or_nan(e, "loss");
                cJSON_Delete(e);
                if (isnan(out->eval_loss)) {
                    pt_set_error("%s: no numeric \"loss\"", ev);
                    free(ev); free(file); return -1;
                }
            }
            free(ev);
        } else {
            snprintf(file, L, "%s/trainer_state.json", path);
            if (!is_file(file)) {
                pt_set_error("%s: a directory with neither metrics.jsonl nor trainer_state.json", path);
                free(file); return -1;
            }
            if (!format || !strcmp(format, "auto")) format = "hf";
        }
    } else {
        if (!is_file(path)) { pt_set_error("%s: no such file or directory", path); return -1; }
        file = pt_strdup(path);
        if (!format || !strcmp(format, "auto")) format = detect(path);
    }
    int rc;
    if (!strcmp(format, "portatrain") || !strcmp(format, "jsonl")) rc = load_jsonl(file, out);
    else if (!strcmp(format, "hf")) rc = load_hf(file, out);
    else if (!strcmp(format, "torchtitan")) rc = load_torchtitan(file, out);
    else if (!strcmp(format, "csv")) rc = load_csv(file, out);
    else { pt_set_error("--format %s: expected auto, portatrain, hf, torchtitan, csv or jsonl", format); rc = -1; }
    out->format = !strcmp(format, "portatrain") ? "portatrain" : !strcmp(format, "hf") ? "hf"
                : !strcmp(format, "torchtitan") ? "torchtitan" : !strcmp(format, "csv") ? "csv" : "jsonl";
    if (rc == 0 && out->n == 0) { pt_set_error("%s: no loss entries", file); rc = -1; }
    free(file);
    return rc;
}

void pt_runlog_free(pt_runlog *r) {
    free(r->path);
    free(r->skipped);
    free(r->pts);
    memset(r, 0, sizeof *r);
}
