#include "harness/runlog.h"
#include "train/metrics.h"

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
// One JSONL record (portatrain's metrics.jsonl or another trainer's log in the same shape): a point of the
// curve, or a skipped step (--nan-policy skip: no update), kept apart so compare can reject it instead of
// not seeing the step.
static int jsonl_record(const char *path, const pt_metrics_rec *m, pt_runlog *r, int *cap) {
    const cJSON *o = m->json;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(o, "loss");
    long step;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "skipped"))) {
        if (!cJSON_IsNumber(s)) return 0;
        if (step_value(s->valuedouble, path, m->lineno, "step", &step)) return -1;
        r->skipped = pt_realloc(r->skipped, sizeof(long) * (size_t)(r->n_skipped + 1));
        r->skipped[r->n_skipped++] = step;
        return 0;
    }
    if (!cJSON_IsNumber(s) || !cJSON_IsNumber(lo)) {
        pt_set_error("%s:%d: needs numeric \"step\" and \"loss\"", path, m->lineno);
        return -1;
    }
    if (step_value(s->valuedouble, path, m->lineno, "step", &step)) return -1;
    double st = num_or_nan(o, "step_time_s");
    if (isnan(st)) st = num_or_nan(o, "step_time");
    pt_runpoint p = {step, lo->valuedouble, num_or_nan(o, "grad_norm"),
                     num_or_nan(o, "tokens"), st, false, 1, 0, 0, NAN};
    p.nonfinite = !isfinite(p.loss) || isinf(p.grad_norm);  // 1e999 parses as inf
    push(r, cap, p);
    return 0;
}

// JSON Lines through the one metrics.jsonl reader (train/metrics.h), in its generic mode: any JSON
// object is a record, so other trainers' JSONL logs read too.
static int load_jsonl(const char *path, pt_runlog *r) {
    pt_metrics_log log;
    if (pt_metrics_read(path, PT_METRICS_GENERIC, &log) != 0) return -1;
    if (log.tail == PT_METRICS_TAIL_TORN)
        pt_warn("%s:%d: ignoring a torn last line (the run was stopped while writing it)", path, log.torn_lineno);
    int cap = 0, rc = 0;
    for (int i = 0; i < log.n && rc == 0; i++) rc = jsonl_record(path, &log.recs[i], r, &cap);
    pt_metrics_log_free(&log);
    return rc;
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
            pt_runpoint p = {step, lo->valuedouble, num_or_nan(e, "grad_norm"), NAN, NAN, false, 1, 0, 0, NAN};
            p.nonfinite = !isfinite(p.loss) || isinf(p.grad_norm);
            if (p.step > prev + 1) p.window = (int)PT_MIN(p.step - prev, 1L << 30);
            prev = p.step;
            push(r, &cap, p);
        }
        // eval entries: validation points (HF evaluates the weights after that step); the summary: its runtime
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(e, "eval_loss");
        if (cJSON_IsNumber(ev) && cJSON_IsNumber(s) && s->valuedouble >= 0 && s->valuedouble < 9e15) {
            r->val = pt_realloc(r->val, sizeof *r->val * (size_t)(r->n_val + 1));
            r->val[r->n_val++] = (pt_runpoint){(long)s->valuedouble, ev->valuedouble, NAN, NAN, NAN,
                                               !isfinite(ev->valuedouble), 1, 0, 0, NAN};
        }
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(e, "train_runtime");
        if (cJSON_IsNumber(rt) && rt->valuedouble >= 0) r->runtime_s = rt->valuedouble;
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

// Half a unit of the last digit of a printed number ("7.12345" -> 5e-6, "1.5e-3" -> 5e-5, "12" -> 0.5): what
// the print alone may have rounded away.
static double print_resolution(const char *num) {
    const char *dot = strchr(num, '.'), *e = strpbrk(num, "eE");
    long frac = 0;
    if (dot && (!e || dot < e)) frac = (long)((e ? e : dot + strlen(dot)) - dot - 1);
    const long ex = e ? strtol(e + 1, NULL, 10) : 0;
    const long digits = frac - PT_MAX(PT_MIN(ex, 400L), -400L);
    return 0.5 * pow(10.0, (double)-digits);
}

// After "key:" a number (commas allowed as thousands separators). 1 found, 0 not.
static bool number_char(const char *p) {
    return isdigit((unsigned char)*p) || (*p && strchr("+-.,eE", *p)) || !strncmp(p, "nan", 3) || !strncmp(p, "inf", 3);
}

static int field_res(const char *l, const char *key, double *out, double *res) {
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
    if (res) *res = print_resolution(buf);
    return n > 0 && *end == 0;
}

static int field(const char *l, const char *key, double *out) { return field_res(l, key, out, NULL); }

// A TorchTitan console line taken apart: torchrun's "[rankN]:" prefix, the logger's
// "[titan] YYYY-MM-DD HH:MM:SS,mmm - root - LEVEL - " stamp, and the message after them (colours stripped).
typedef struct {
    int rank;     // -1: no prefix
    double time;  // seconds since 1970 of the stamp; NAN: no stamp
    bool stamped;
    const char *msg;
} tt_line;

static long days_from_civil(long y, long m, long d) {  // proleptic Gregorian, 1970-01-01 = 0
    y -= m <= 2;
    const long era = (y >= 0 ? y : y - 399) / 400, yoe = y - era * 400;
    const long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1, doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static double parse_stamp(const char *p) {
    int Y, M, D, h, mi, sec, ms, used = 0;
    if (sscanf(p, "%4d-%2d-%2d %2d:%2d:%2d,%3d%n", &Y, &M, &D, &h, &mi, &sec, &ms, &used) != 7 || used < 23) return NAN;
    return (double)days_from_civil(Y, M, D) * 86400.0 + h * 3600.0 + mi * 60.0 + sec + ms / 1000.0;
}

// The line must have its colours stripped already.
static tt_line tt_split(const char *l) {
    tt_line t = {-1, NAN, false, l};
    // torchrun --tee prefixes each line, and a rank's own error report prefixes it again ("[rank0]:[rank0]: ...")
    while (!strncmp(l, "[rank", 5) && isdigit((unsigned char)l[5])) {
        char *e;
        const long v = strtol(l + 5, &e, 10);
        if (e[0] != ']' || e[1] != ':' || v >= (1L << 30)) break;
        if (t.rank < 0) t.rank = (int)v;
        l = e + 2;
        while (*l == ' ') l++;
    }
    if (!strncmp(l, "[titan] ", 8)) {
        t.stamped = true;
        t.time = parse_stamp(l + 8);
        // "... - root - INFO - message": the message follows the third " - "
        const char *m = l + 8;
        for (int k = 0; k < 3 && m; k++) { m = strstr(m, " - "); if (m) m += 3; }
        l = m ? m : l + 8;
    }
    while (*l == ' ') l++;
    t.msg = l;
    return t;
}

static bool tt_step_line(const char *msg, const char *whole) {
    if (!strncmp(msg, "step:", 5)) return strstr(msg, "loss:") != NULL;
    return strstr(whole, "step:") && strstr(whole, "loss:") && !strstr(whole, "validate step:");
}

// A Python exception line ("RuntimeError: ...", "torch.distributed...ChildFailedError:"), the last line of a
// traceback.
static bool exception_line(const char *m) {
    const char *p = m;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '.') p++;
    if (*p != ':' || p == m) return false;
    return (p - m >= 5 && !strncmp(p - 5, "Error", 5)) || (p - m >= 9 && !strncmp(p - 9, "Exception", 9)) ||
           (p - m >= 9 && !strncmp(p - 9, "Interrupt", 9));
}

// State of one TorchTitan log while its lines are read (one attempt after another).
typedef struct {
    const char *path;
    int cap, vcap, line, min_rank, others;
    double t0, last_t;  // first stamp of the log; stamp of the previous step line of this attempt
    double t_proc, t_load;  // the newest process start and checkpoint load stamps, for the next attempt
    long last_step;     // -1: no step line yet in this attempt
    bool finished, nonfinite, error;
    bool att_open;    // lines belong to the newest attempt until the next process starts
    long stop_step;
    char reason[160];
} tt_state;

static void tt_new_attempt(tt_state *st, pt_runlog *r, long first_step, double t) {
    r->att = pt_realloc(r->att, sizeof *r->att * (size_t)(r->n_att + 1));
    const double rel = t - st->t0;
    r->att[r->n_att++] = (pt_attempt){first_step, -1, isfinite(st->t_proc) ? st->t_proc - st->t0 : rel,
                                      st->t_load - st->t0, rel, NAN, NAN, rel};
    st->t_proc = st->t_load = NAN;
    r->attempts++;
    r->resumed_from = first_step > 1 ? first_step - 1 : -1;
    st->finished = st->nonfinite = st->error = false;
    st->reason[0] = 0;
    st->last_step = -1;
    st->last_t = NAN;
}

static int tt_step(tt_state *st, pt_runlog *r, const char *l, const tt_line *t) {
    double s, lo, g = NAN, lres = 0, gres = 0;
    if (!field(l, "step:", &s) || !field_res(l, "loss:", &lo, &lres)) {
        pt_set_error("%s:%d: a step line without a numeric step/loss", st->path, st->line);
        return -1;
    }
    long step;
    if (step_value(s, st->path, st->line, "", &step)) return -1;
    const bool has_g = field_res(l, "grad_norm:", &g, &gres);
    if (!has_g) { g = NAN; gres = 0; }
    pt_runpoint p = {step, lo, g, NAN, NAN, !isfinite(lo) || (has_g && !isfinite(g)), 1, lres, gres, NAN};
    if (r->n_att && isfinite(t->time)) {
        pt_attempt *a = &r->att[r->n_att - 1];
        a->last_step = step;
        a->t_last_step = t->time - st->t0;
        if (!isfinite(a->t_first_step)) a->t_first_step = a->t_last_step;
    }
    if (isfinite(t->time)) {
        p.wall_time = t->time - st->t0;
        // A step line closes log_freq steps: their mean time. The first of an attempt includes the start-up.
        if (st->last_step >= 0 && step > st->last_step && isfinite(st->last_t))
            p.step_time = (t->time - st->last_t) / (double)(step - st->last_step);
        st->last_t = t->time;
    }
    st->last_step = step;
    push(r, &st->cap, p);
    return 0;
}

static int tt_validation(tt_state *st, pt_runlog *r, const char *l) {
    double s, lo, res = 0;
    long step;
    if (!field(l, "validate step:", &s) || !field_res(l, "loss:", &lo, &res)) return 0;  // not ours to refuse
    if (step_value(s, st->path, st->line, "", &step)) return -1;
    if (r->n_val == st->vcap) {
        st->vcap = st->vcap ? 2 * st->vcap : 16;
        r->val = pt_realloc(r->val, sizeof *r->val * (size_t)st->vcap);
    }
    r->val[r->n_val++] = (pt_runpoint){step, lo, NAN, NAN, NAN, !isfinite(lo), 1, res, 0, NAN};
    return 0;
}

// "Loss is not finite (global_avg_loss=nan) at step 2. Stopping training." (Trainer.train_step): the loss of
// that step is never printed as a step line; it becomes a non-finite point, and the run's end.
static void tt_nonfinite_stop(tt_state *st, pt_runlog *r, const char *m) {
    if (st->nonfinite) return;  // torchrun repeats the error in its summary
    const char *at = strstr(m, " at step ");
    char *e = NULL;
    const long step = at ? strtol(at + 9, &e, 10) : -1;
    if (step < 0 || e == at + 9) return;
    const char *open = strstr(m, "(global_avg_loss=");
    snprintf(st->reason, sizeof st->reason, "loss is not finite%s%.*s", open ? " " : "",
             open ? (int)(strcspn(open, ")") + 1) : 0, open ? open : "");
    st->nonfinite = true;
    st->stop_step = step;
    push(r, &st->cap, (pt_runpoint){step, NAN, NAN, NAN, NAN, true, 1, 0, 0, NAN});
}

static void tt_event(tt_state *st, pt_runlog *r, const char *m, double t) {
    long v;
    if (!strncmp(m, "torchtitan version", 18)) st->t_proc = t;
    if (!strncmp(m, "Loading the checkpoint from ", 28) && strstr(m, "step-")) st->t_load = t;
    if (sscanf(m, "Training starts at step %ld", &v) == 1) tt_new_attempt(st, r, v, t);
    else if (!strncmp(m, "Training completed", 18)) st->finished = true;
    else if (!strncmp(m, "Saving the checkpoint", 21) || !strncmp(m, "Staging the checkpoint", 22)) r->ckpt_saves++;
    else if (!strncmp(m, "Loading the checkpoint from ", 28) && strstr(m, "step-")) r->ckpt_loads++;
    else if (strstr(m, "Loss is not finite") && strstr(m, "Stopping training")) tt_nonfinite_stop(st, r, m);
    else if (exception_line(m) && !st->error && !st->nonfinite) {
        st->error = true;
        snprintf(st->reason, sizeof st->reason, "%.150s", m);
    }
}

// torchrun without --local-ranks-filter prints every rank's lines ("[rank0]:", "[rank1]:", ...); the logged loss
// is the same global mean on each rank, so one rank's lines are the run's: the lowest rank's.
static int tt_min_rank(const char *text) {
    int min_rank = -1;
    for (const char *p = text; (p = strstr(p, "[rank")); p += 5) {
        if (p != text && p[-1] != '\n' && p[-1] != 'm') continue;  // line start, or after a colour code
        char *e;
        const long v = strtol(p + 5, &e, 10);
        if (e != p + 5 && e[0] == ']' && e[1] == ':' && v < (1L << 30) && (min_rank < 0 || v < min_rank)) min_rank = (int)v;
    }
    return min_rank;
}

static void tt_finish(tt_state *st, pt_runlog *r) {
    if (st->others)
        pt_warn("%s: %d step lines of ranks other than rank %d ignored (rank %d's are the run's)", st->path,
                st->others, st->min_rank, st->min_rank);
    long last = -1;
    for (int i = 0; i < r->n; i++) last = PT_MAX(last, r->pts[i].step);
    r->end = st->nonfinite ? PT_END_NONFINITE : st->error ? PT_END_ERROR : st->finished ? PT_END_FINISHED : PT_END_TRUNCATED;
    r->stop_step = st->nonfinite ? st->stop_step : r->end == PT_END_FINISHED ? -1 : last;
    if (r->end == PT_END_TRUNCATED)
        snprintf(r->stop_reason, sizeof r->stop_reason, "the log ends without TorchTitan's \"Training completed\" "
                 "(killed, still running or cut)");
    else snprintf(r->stop_reason, sizeof r->stop_reason, "%s", st->reason);
}

// TorchTitan (torchtitan/components/metrics.py, MetricsProcessor.log) logs step 1 and every log_freq-th step:
//   [rank0]:[titan] YYYY-MM-DD HH:MM:SS,mmm - root - INFO - \033[31mstep:  1  \033[32mloss: 12.02394
//   \033[38;2;180;60;0mgrad_norm:  2.1053  \033[38;2;54;234;195mmemory: ...GiB(...%)  \033[34mtps: 1,257 ...
// ("[rankN]:" from torchrun --tee, colours unless --metrics.disable-color-printing), validation lines
// "validate step: N  loss: ...", and the run's events: "Training starts at step N" (an attempt; N > 1 after a
// checkpoint load), checkpoint saves and loads, "Training completed" at a normal end, the non-finite stop, and
// an exception's last traceback line when it crashes.
static int load_torchtitan(const char *path, pt_runlog *r) {
    char *text = read_all(path);
    if (!text) return -1;
    tt_state st = {.path = path, .min_rank = tt_min_rank(text), .t0 = NAN, .last_t = NAN, .last_step = -1,
                   .stop_step = -1, .t_proc = NAN, .t_load = NAN};
    r->resumed_from = -1;
    char *cur = text;
    int rc = 0;
    for (char *l; rc == 0 && (l = next_line(&cur));) {
        st.line++;
        strip_ansi(l);
        const tt_line t = tt_split(l);
        const bool step_line = tt_step_line(t.msg, l);
        if (t.rank >= 0 && st.min_rank >= 0 && t.rank != st.min_rank) { st.others += step_line; continue; }
        if (isfinite(t.time) && !isfinite(st.t0)) st.t0 = t.time;
        // an attempt ends where the next process starts
        const bool proc_start = !strncmp(t.msg, "torchtitan version", 18);
        if (proc_start) st.att_open = false;
        else if (isfinite(t.time) && st.att_open && r->n_att > 0) r->att[r->n_att - 1].t_end = t.time - st.t0;
        if (strstr(t.msg, "validate step:")) rc = tt_validation(&st, r, t.msg);
        else if (step_line) rc = tt_step(&st, r, t.msg, &t);
        else {
            tt_event(&st, r, t.msg, t.time);
            // (a line that names no step opens no attempt)
            if (!strncmp(t.msg, "Training starts at step", 23)) st.att_open = r->n_att > 0;
        }
    }
    free(text);
    if (rc) return -1;
    if (r->n == 0) { pt_set_error("%s: no TorchTitan \"step: ... loss: ...\" lines", path); return -1; }
    tt_finish(&st, r);
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
        double v[5], res[5] = {0};
        for (int k = 0; k < 5; k++) {
            v[k] = NAN;
            if (col[k] < 0 || !*cells[col[k]]) continue;
            res[k] = print_resolution(cells[col[k]]);
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
        pt_runpoint p = {step, v[1], v[2], v[3], v[4], !isfinite(v[1]) || gn_bad, 1, res[1], res[2], NAN};
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

// A TorchTitan console log: a step line, or a line with the logger's "[titan] " stamp, anywhere in the file
// (the first step line follows 30-80 start-up lines).
static bool looks_torchtitan(char *text) {
    char *cur = text;
    for (char *l; (l = next_line(&cur));) {
        strip_ansi(l);
        const tt_line t = tt_split(l);
        if (t.stamped || tt_step_line(t.msg, l)) return true;
    }
    return false;
}

// A CSV header: the first non-empty line has cells "step" and "loss".
static bool looks_csv(const char *buf) {
    while (isspace((unsigned char)*buf)) buf++;
    const size_t L = strcspn(buf, "\r\n");
    bool step = false, loss = false;
    for (size_t i = 0; i < L;) {
        size_t k = strcspn(buf + i, ",\r\n");
        size_t a = i, b = i + k;
        while (a < b && isspace((unsigned char)buf[a])) a++;
        while (b > a && isspace((unsigned char)buf[b - 1])) b--;
        step |= b - a == 4 && !strncmp(buf + a, "step", 4);
        loss |= b - a == 4 && !strncmp(buf + a, "loss", 4);
        i += k + 1;
    }
    return step && loss;
}

static const char *detect(const char *path) {
    char *text = read_all(path);
    if (!text) return NULL;
    const char *p = text, *fmt = NULL;
    while (isspace((unsigned char)*p)) p++;
    if (*p == '{') {
        char head[4096];
        snprintf(head, sizeof head, "%s", p);
        if (strstr(head, "\"log_history\"") || strstr(head, "\"global_step\"")) fmt = "hf";
        else {  // a pretty-printed single object is HF; one object per line is JSONL
            const char *nl = strchr(p, '\n');
            fmt = nl && nl[-1] != '}' && !(nl - 1 > p && nl[-1] == '\r' && nl[-2] == '}') ? "hf" : "jsonl";
        }
    } else if (looks_csv(p)) fmt = "csv";
    else if (looks_torchtitan(text)) fmt = "torchtitan";
    free(text);
    if (!fmt)
        pt_set_error("%s: not a run log compare recognises (tried: portatrain run dir, HF trainer_state.json, "
                     "TorchTitan console log, CSV with a step,loss header, JSON Lines); name its format with "
                     "--format-a/--format-b", path);
    return fmt;
}

int pt_runlog_load(const char *path, const char *format, pt_runlog *out) {
    memset(out, 0, sizeof *out);
    out->eval_loss = out->runtime_s = NAN;
    out->stop_step = out->resumed_from = -1;
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
        if (!format) { free(file); return -1; }
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
    free(r->val);
    free(r->att);
    memset(r, 0, sizeof *r);
}
