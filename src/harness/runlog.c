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

// The next line of a NUL-terminated text, cut in place; NULL at the end. Unlike strtok, empty lines are
// returned too, so the line numbers in error messages are the file's.
static char *next_line(char **cursor) {
    char *l = *cursor;
    if (!l || !*l) return NULL;
    char *nl = strchr(l, '\n');
    if (nl) {
        *nl = 0;
        *cursor = nl + 1;
    } else *cursor = l + strlen(l);
    return l;
}

// A step must be a whole number 0..2^53 (a JSON double holds it exactly); anything else is refused rather than
// cast (a cast of 1e300 or NaN to long is undefined, and 2.5 would silently become step 2).
static int step_value(double v, const char *path, int line, const char *where, long *out) {
    if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) {
        if (line > 0) pt_set_error("%s:%d: step %.17g is not a whole number >= 0", path, line, v);
        else pt_set_error("%s: %s: step %.17g is not a whole number >= 0", path, where, v);
        return -1;
    }
    *out = (long)v;
    return 0;
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
    char *cur = text;
    for (char *l; (l = next_line(&cur));) {
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
            long step;
            if (cJSON_IsNumber(s)) {
                if (step_value(s->valuedouble, path, line, NULL, &step)) {
                    cJSON_Delete(o); free(text); return -1;
                }
                r->skipped = pt_realloc(r->skipped, sizeof(long) * (size_t)(r->n_skipped + 1));
                r->skipped[r->n_skipped++] = step;
            }
            cJSON_Delete(o);
            continue;
        }
        if (!cJSON_IsNumber(s) || !cJSON_IsNumber(lo)) {
            pt_set_error("%s:%d: needs numeric \"step\" and \"loss\"", path, line);
            cJSON_Delete(o); free(text); return -1;
        }
        long step;
        if (step_value(s->valuedouble, path, line, NULL, &step)) {
            cJSON_Delete(o); free(text); return -1;
        }
        double st = num_or_nan(o, "step_time_s");
        if (isnan(st)) st = num_or_nan(o, "step_time");
        pt_runpoint p = {step, lo->valuedouble, num_or_nan(o, "grad_norm"),
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
            char where[48];
            snprintf(where, sizeof where, "log_history[%d]", i);
            long step;
            if (step_value(s->valuedouble, path, 0, where, &step)) { cJSON_Delete(root); return -1; }
            pt_runpoint p = {step, lo->valuedouble, num_or_nan(e, "grad_norm"), NAN, NAN, false, 1};
            p.nonfinite = !isfinite(p.loss) || isinf(p.grad_norm);
            if (p.step > prev + 1) p.window = (int)PT_MIN(p.step - prev, 1L << 30);
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
static bool number_char(const char *p) {
    return isdigit((unsigned char)*p) || (*p && strchr("+-.,eE", *p)) || !strncmp(p, "nan", 3) || !strncmp(p, "inf", 3);
}

static int field(const char *l, const char *key, double *out) {
    const char *p = strstr(l, key);
    while (p && p != l && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) p = strstr(p + 1, key);
    if (!p) return 0;
    p += strlen(key);
    while (*p == ' ') p++;
    char buf[64];
    int n = 0;
    for (; number_char(p); p++) {
        if (!strncmp(p, "nan", 3) || !strncmp(p, "inf", 3)) {
            if (n + 3 > 63) return 0;  // longer than any number: refused, not cut
            memcpy(buf + n, p, 3); n += 3;
            break;
        }
        if (*p == ',') continue;
        if (n == 63) return 0;
        buf[n++] = *p;
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
    int cap = 0, line = 0, nrank = 0, min_rank = -1;
    int *rank = NULL;  // each point's "[rankN]:" prefix (torchrun), -1 when none
    char *cur = text;
    for (char *l; (l = next_line(&cur));) {
        line++;
        strip_ansi(l);
        if (!strstr(l, "step:") || !strstr(l, "loss:") || strstr(l, "validate step:")) continue;
        double s, lo, g = NAN, tps = NAN;
        if (!field(l, "step:", &s) || !field(l, "loss:", &lo)) {
            pt_set_error("%s:%d: a step line without a numeric step/loss", path, line);
            free(rank); free(text); return -1;
        }
        long step;
        if (step_value(s, path, line, NULL, &step)) { free(rank); free(text); return -1; }
        const bool has_g = field(l, "grad_norm:", &g);
        if (!has_g) g = NAN;
        if (!field(l, "tps:", &tps)) tps = NAN;
        int rk = -1;
        if (!strncmp(l, "[rank", 5) && isdigit((unsigned char)l[5])) {
            char *e;
            const long v = strtol(l + 5, &e, 10);
            if (*e == ']' && v < (1L << 30)) rk = (int)v;
        }
        if (rk >= 0 && (min_rank < 0 || rk < min_rank)) min_rank = rk;
        pt_runpoint p = {step, lo, g, NAN, NAN, !isfinite(lo) || (has_g && !isfinite(g)), 1};
        push(r, &cap, p);
        if (nrank < r->n) {
            nrank = cap;
            rank = pt_realloc(rank, sizeof *rank * (size_t)nrank);
        }
        rank[r->n - 1] = rk;
    }
    free(text);
    // torchrun without --local-ranks-filter prints every rank's line ("[rank0]:", "[rank1]:", ...); the logged
    // loss is the same global mean on each, so one rank's lines are the run's: the lowest rank's.
    if (min_rank >= 0) {
        int k = 0, others = 0;
        for (int i = 0; i < r->n; i++) {
            if (rank[i] == min_rank || rank[i] < 0) r->pts[k++] = r->pts[i];
            else others++;
        }
        r->n = k;
        if (others) pt_warn("%s: %d step lines of ranks other than rank %d ignored (rank %d's are the run's)", path,
                            others, min_rank, min_rank);
    }
    free(rank);
    if (r->n == 0) { pt_set_error("%s: no TorchTitan \"step: ... loss: ...\" lines", path); return -1; }
    return 0;
}

// CSV with a header naming step, loss and optionally grad_norm, tokens, step_time[_s].
static int load_csv(const char *path, pt_runlog *r) {
    char *text = read_all(path);
    if (!text) return -1;
    int cap = 0, line = 0, col[5] = {-1, -1, -1, -1, -1}, ncol = 0;
    static const char *names[5] = {"step", "loss", "grad_norm", "tokens", "step_time"};
    char *cur = text;
    for (char *l; (l = next_line(&cur));) {
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
        long step;
        if (step_value(v[0], path, line, NULL, &step)) { free(text); return -1; }
        pt_runpoint p = {step, v[1], v[2], v[3], v[4], !isfinite(v[1]) || gn_bad, 1};
        push(r, &cap, p);
    }
    free(text);
    if (ncol == 0) { pt_set_error("%s: empty CSV", path); return -1; }
    return 0;
}

typedef struct {
    pt_runpoint p;
    int order;  // position in the file
} ordered_point;

static int cmp_ordered(const void *x, const void *y) {
    const ordered_point *a = x, *b = y;
    if (a->p.step != b->p.step) return a->p.step < b->p.step ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

// Compare walks both curves in step order. A log written by a run that was restarted from a checkpoint (or
// pasted together from several attempts) repeats the steps it replayed, and its lines need not be in step
// order: sort by step, and of a step logged more than once keep the last line, the one the run went on from.
static void sort_and_dedupe(pt_runlog *r) {
    bool sorted = true;
    for (int i = 1; i < r->n && sorted; i++) sorted = r->pts[i].step > r->pts[i - 1].step;
    if (sorted) return;
    ordered_point *o = pt_malloc(sizeof *o * (size_t)r->n);
    for (int i = 0; i < r->n; i++) o[i] = (ordered_point){r->pts[i], i};
    qsort(o, (size_t)r->n, sizeof *o, cmp_ordered);
    int k = 0;
    for (int i = 0; i < r->n; i++) {
        if (i + 1 < r->n && o[i + 1].p.step == o[i].p.step) continue;  // a later line of this step follows
        r->pts[k++] = o[i].p;
    }
    free(o);
    r->repeated = r->n - k;
    r->n = k;
    if (r->repeated)
        pt_warn("%s: %d line%s repeat an earlier step (a restarted run's replay?): the last line of each step is used",
                r->path, r->repeated, r->repeated == 1 ? "" : "s");
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
    if (rc == 0) sort_and_dedupe(out);
    free(file);
    return rc;
}

void pt_runlog_free(pt_runlog *r) {
    free(r->path);
    free(r->skipped);
    free(r->pts);
    memset(r, 0, sizeof *r);
}
