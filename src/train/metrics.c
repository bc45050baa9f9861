#include "train/metrics.h"
#include "util/common.h"
#include "util/fileio.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- text buffer

void pt_strbuf_printf(pt_strbuf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {  // an encoding error: nothing our formats can produce
        va_end(ap2);
        return;
    }
    const size_t need = b->len + (size_t)n + 1;
    if (need > b->cap) {
        b->cap = need > 2 * b->cap ? need : 2 * b->cap;
        b->p = pt_realloc(b->p, b->cap);
    }
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

void pt_strbuf_free(pt_strbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

// ---------------------------------------------------------------- writing

// A metrics value: %.17g, or null for NaN/Inf (not JSON numbers).
static void put_num(pt_strbuf *b, const char *key, double v) {
    if (isfinite(v)) pt_strbuf_printf(b, ", \"%s\": %.17g", key, v);
    else pt_strbuf_printf(b, ", \"%s\": null", key);
}

typedef struct {
    double v;
    int rank;
} ranked;

static int cmp_ranked(const void *x, const void *y) {
    const ranked *a = x, *b = y;
    if (a->v != b->v) return a->v < b->v ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

void pt_rank_summarize(const double *v, int n, pt_rank_summary *s) {
    memset(s, 0, sizeof *s);
    if (n <= 0) return;
    ranked *r = pt_malloc(sizeof *r * (size_t)n);
    for (int i = 0; i < n; i++) r[i] = (ranked){v[i], i};
    qsort(r, (size_t)n, sizeof *r, cmp_ranked);
    const ranked *md = &r[(n - 1) / 2];
    *s = (pt_rank_summary){r[0].v, md->v, r[n - 1].v, r[0].rank, md->rank, r[n - 1].rank};
    // the lowest rank holding the max (the sort puts ties in rank order, so walk back over them)
    for (int i = n - 1; i > 0 && r[i - 1].v == r[n - 1].v; i--) s->max_rank = r[i - 1].rank;
    free(r);
}

static void put_rank_list(pt_strbuf *b, const double *v, int n) {
    pt_strbuf_printf(b, "[");
    for (int r = 0; r < n; r++) pt_strbuf_printf(b, "%s%.1f", r ? ", " : "", v[r]);
    pt_strbuf_printf(b, "]");
}

// Communication of rank 0 (the layout is symmetric) and memory of every rank.
static void put_parallel(pt_strbuf *b, const pt_metrics_step *r) {
    double comm_s = 0;
    for (int k = 0; k < PT_COLL_KINDS; k++) comm_s += r->comm_time_by_kind_s[k];
    pt_strbuf_printf(b, ", \"compute_time_s\": %.6f, \"comm_time_s\": %.6f, \"comm_bytes\": {", r->step_time_s - comm_s,
                     comm_s);
    for (int k = 0; k < PT_COLL_KINDS; k++)
        pt_strbuf_printf(b, "%s\"%s\": %llu", k ? ", " : "", pt_coll_kind_name[k], r->comm_bytes[k]);
    pt_strbuf_printf(b, "}, \"comm_time_by_kind_s\": {");
    for (int k = 0; k < PT_COLL_KINDS; k++)
        pt_strbuf_printf(b, "%s\"%s\": %.6f", k ? ", " : "", pt_coll_kind_name[k], r->comm_time_by_kind_s[k]);
    pt_strbuf_printf(b, "}, \"peak_rss_mib\": %.1f, \"state_bytes_per_rank\": %zu", r->peak_rss_mib,
                     r->state_bytes_per_rank);
    if (r->world <= PT_METRICS_INLINE_RANKS) {
        pt_strbuf_printf(b, ", \"peak_rss_mib_per_rank\": ");
        put_rank_list(b, r->peak_rss_mib_per_rank, r->world);
        return;
    }
    pt_rank_summary s;
    pt_rank_summarize(r->peak_rss_mib_per_rank, r->world, &s);
    pt_strbuf_printf(b, ", \"peak_rss_mib_per_rank_summary\": {\"ranks\": %d, \"min\": %.1f, \"min_rank\": %d, "
                     "\"median\": %.1f, \"median_rank\": %d, \"max\": %.1f, \"max_rank\": %d, \"file\": \"%s\"}",
                     r->world, s.min, s.min_rank, s.median, s.median_rank, s.max, s.max_rank, PT_METRICS_RANKS_FILE);
}

// The optional fields, each present only where it applies.
static void put_events(pt_strbuf *b, const pt_metrics_step *r) {
    if (r->skip_reason) pt_strbuf_printf(b, ", \"skipped\": true, \"reason\": \"%s\"", r->skip_reason);
    if (r->rolled_back_from > 0)
        pt_strbuf_printf(b, ", \"rolled_back_from\": %ld, \"rollback_restore_time_s\": %.6f", r->rolled_back_from,
                         r->rollback_restore_time_s);
    if (r->padded)
        pt_strbuf_printf(b, ", \"padding_fraction\": %.6f, \"row_len\": %d", r->padding_fraction, r->row_len);
    if (r->has_compile)
        pt_strbuf_printf(b, ", \"compile_s\": %.6f, \"cache_hits\": %d, \"cache_misses\": %d, \"recompilations\": %d",
                         r->compile_s, r->cache_hits, r->cache_misses, r->recompilations);
    if (r->restore_time_s >= 0) pt_strbuf_printf(b, ", \"restore_time_s\": %.6f", r->restore_time_s);
    if (r->saved)
        pt_strbuf_printf(b, ", \"save_time_s\": %.6f, \"save_bytes\": %llu, \"save_gb_per_s\": %.4f", r->save_time_s,
                         r->save_bytes, r->save_gb_per_s);
    if (r->saved && r->has_save_interval)
        pt_strbuf_printf(b, ", \"save_interval_steps\": %ld", r->save_interval_steps);
}

void pt_metrics_format(pt_strbuf *b, const pt_metrics_step *r) {
    b->len = 0;
    pt_strbuf_printf(b, "{\"step\": %ld", r->step);
    put_num(b, "loss", r->loss);
    put_num(b, "grad_norm", r->grad_norm);
    if (r->has_aux_loss) put_num(b, "aux_loss", r->aux_loss);
    // as HF logs it: epoch = passes over the data so far
    pt_strbuf_printf(b, ", \"lr\": %.17g, \"epoch\": %.6f, \"tokens\": %ld, \"step_time_s\": %.6f, \"tokens_per_s\": %.3f, "
                     "\"mfu_flops_per_s\": %.6g", r->lr, r->epoch, r->tokens, r->step_time_s,
                     r->tokens / r->step_time_s, r->flops_per_token * r->tokens / r->step_time_s);
    pt_strbuf_printf(b, ", \"batch_fingerprint\": \"%016llx\", \"activation_bytes\": %zu",
                     (unsigned long long)r->batch_fingerprint, r->activation_bytes);
    if (r->parallel) put_parallel(b, r);
    else pt_strbuf_printf(b, ", \"peak_rss_mib\": %.1f", r->peak_rss_mib);
    put_events(b, r);
    pt_strbuf_printf(b, "}");
}

bool pt_metrics_format_ranks(pt_strbuf *b, const pt_metrics_step *r) {
    b->len = 0;
    if (!r->parallel || r->world <= PT_METRICS_INLINE_RANKS) return false;
    pt_strbuf_printf(b, "{\"step\": %ld, \"peak_rss_mib_per_rank\": ", r->step);
    put_rank_list(b, r->peak_rss_mib_per_rank, r->world);
    pt_strbuf_printf(b, "}");
    return true;
}

struct pt_metrics_writer {
    char *path, *ranks_path;
    FILE *f, *ranks;  // ranks: opened with the first record that has per-rank lines
    long keep_steps;
    pt_strbuf line;
};

// Rewrites `path` keeping the lines of steps <= keep_steps (+ extra when the
// kept lines stop short of it). Replaced atomically: a kill during the
// rewrite must not lose lines.
static int truncate_log(const char *path, long keep_steps, const char *extra) {
    pt_metrics_log log;
    memset(&log, 0, sizeof log);
    if (pt_file_exists(path) && pt_metrics_read(path, PT_METRICS_LENIENT, &log) != 0) pt_clear_error();
    pt_strbuf kept = {0};
    long last = 0;
    for (int i = 0; i < log.n; i++) {
        if (i == log.n - 1 && log.tail == PT_METRICS_TAIL_UNTERMINATED) break;  // a partial last line
        if (log.recs[i].step > keep_steps) continue;
        pt_strbuf_printf(&kept, "%s\n", log.recs[i].text);
        last = log.recs[i].step;
    }
    if (last < keep_steps && extra) pt_strbuf_printf(&kept, "%s\n", extra);
    pt_metrics_log_free(&log);
    const int rc = pt_write_file_atomic(path, kept.p ? kept.p : "", kept.len);
    pt_strbuf_free(&kept);
    return rc;
}

static FILE *open_log(const char *path, long keep_steps, const char *extra) {
    FILE *f = keep_steps <= 0 ? fopen(path, "w") : truncate_log(path, keep_steps, extra) == 0 ? fopen(path, "a") : NULL;
    if (!f) pt_set_error("%s: cannot open for writing: %s", path, strerror(errno));
    return f;
}

pt_metrics_writer *pt_metrics_open(const char *output_dir, long keep_steps, const char *ckpt_record) {
    pt_metrics_writer *w = pt_calloc(1, sizeof *w);
    w->path = pt_path_join(output_dir, "metrics.jsonl");
    w->ranks_path = pt_path_join(output_dir, PT_METRICS_RANKS_FILE);
    w->keep_steps = keep_steps;
    w->f = open_log(w->path, keep_steps, ckpt_record);
    if (!w->f) {
        pt_metrics_close(w);
        return NULL;
    }
    return w;
}

static int write_ranks(pt_metrics_writer *w, const pt_metrics_step *r) {
    if (!pt_metrics_format_ranks(&w->line, r)) return 0;
    // the per-rank lines of steps after the checkpoint go, as in metrics.jsonl (a checkpoint does not carry
    // its step's per-rank line: after a crash right after a save that one line is missing here)
    if (!w->ranks && !(w->ranks = open_log(w->ranks_path, w->keep_steps, NULL))) return -1;
    if (fprintf(w->ranks, "%s\n", w->line.p) < 0 || fflush(w->ranks) != 0) {
        pt_set_error("%s: write failed: %s", w->ranks_path, strerror(errno));
        return -1;
    }
    return 0;
}

int pt_metrics_write(pt_metrics_writer *w, const pt_metrics_step *r) {
    // the per-rank line first: a reader that sees a step in metrics.jsonl finds its per-rank lists
    if (write_ranks(w, r) != 0) return -1;
    pt_metrics_format(&w->line, r);
    if (fprintf(w->f, "%s\n", w->line.p) < 0 || fflush(w->f) != 0) {
        pt_set_error("%s: write failed: %s", w->path, strerror(errno));
        return -1;
    }
    return 0;
}

const char *pt_metrics_path(const pt_metrics_writer *w) { return w->path; }

void pt_metrics_close(pt_metrics_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->ranks) fclose(w->ranks);
    pt_strbuf_free(&w->line);
    free(w->path);
    free(w->ranks_path);
    free(w);
}

// ---------------------------------------------------------------- reading

static double num_or_nan(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static long num_or_zero(const cJSON *o, const char *k) {
    const double v = num_or_nan(o, k);
    return isfinite(v) ? (long)v : 0;
}

static void fill_rec(pt_metrics_rec *r, cJSON *j, const char *text, int lineno) {
    r->json = j;
    r->text = text;
    r->lineno = lineno;
    r->step = num_or_zero(j, "step");
    r->loss = num_or_nan(j, "loss");
    r->grad_norm = num_or_nan(j, "grad_norm");
    r->lr = num_or_nan(j, "lr");
    r->epoch = num_or_nan(j, "epoch");
    r->step_time_s = num_or_nan(j, "step_time_s");
    r->tokens_per_s = num_or_nan(j, "tokens_per_s");
    r->save_time_s = num_or_nan(j, "save_time_s");
    r->restore_time_s = num_or_nan(j, "restore_time_s");
    r->tokens = num_or_zero(j, "tokens");
    r->save_bytes = num_or_zero(j, "save_bytes");
}

// One line: 1 a record (added), 0 not one (torn or skipped), -1 a bad line (error set).
static int read_line(pt_metrics_log *log, const char *path, char *line, int lineno, bool last_unterminated, int flags) {
    cJSON *j = cJSON_Parse(line);
    const bool ok = cJSON_IsObject(j) &&
                    ((flags & PT_METRICS_GENERIC) || cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "step")));
    if (!j && last_unterminated) {
        log->tail = PT_METRICS_TAIL_TORN;
        log->torn_lineno = lineno;
        return 0;
    }
    if (!ok) {
        if (flags & PT_METRICS_LENIENT) {
            cJSON_Delete(j);
            log->skipped++;
            return 0;
        }
        pt_set_error("%s:%d: %s", path, lineno,
                     cJSON_IsObject(j) ? "not a metrics record (no numeric \"step\")" : "not a JSON object");
        cJSON_Delete(j);
        return -1;
    }
    if (last_unterminated) log->tail = PT_METRICS_TAIL_UNTERMINATED;
    log->recs = pt_realloc(log->recs, sizeof *log->recs * (size_t)(log->n + 1));
    fill_rec(&log->recs[log->n++], j, line, lineno);
    return 1;
}

int pt_metrics_read(const char *path, int flags, pt_metrics_log *log) {
    memset(log, 0, sizeof *log);
    size_t len;
    log->buf_ = pt_read_file(path, &len);
    if (!log->buf_) return -1;
    int lineno = 0;
    for (char *line = log->buf_, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        if (!*line) continue;
        if (read_line(log, path, line, lineno, !next, flags) < 0) {
            pt_metrics_log_free(log);
            return -1;
        }
    }
    return 0;
}

void pt_metrics_log_free(pt_metrics_log *log) {
    for (int i = 0; i < log->n; i++) cJSON_Delete(log->recs[i].json);
    free(log->recs);
    free(log->buf_);
    memset(log, 0, sizeof *log);
}

// The last complete line of f (size bytes) into a malloc'd string, reading a
// growing window from the end; NULL when there is none.
static char *last_complete_line(FILE *f, long size) {
    for (long win = 4096;; win *= 2) {
        const long off = size > win ? size - win : 0, n = size - off;
        char *buf = pt_malloc((size_t)n + 1);
        if (fseek(f, off, SEEK_SET) != 0 || fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            return NULL;
        }
        buf[n] = 0;
        char *end = strrchr(buf, '\n');  // what follows the last newline is a line still being written
        if (end) {
            *end = 0;
            char *start = strrchr(buf, '\n');
            if (start || off == 0) {
                char *line = pt_strdup(start ? start + 1 : buf);
                free(buf);
                return line;
            }
        }
        free(buf);
        if (off == 0) return NULL;
    }
}

long pt_metrics_last_step(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    long step = 0;
    if (fseek(f, 0, SEEK_END) == 0) {
        char *line = last_complete_line(f, ftell(f));
        cJSON *j = line ? cJSON_Parse(line) : NULL;
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
        if (cJSON_IsNumber(s)) step = (long)s->valuedouble;
        cJSON_Delete(j);
        free(line);
    }
    fclose(f);
    return step;
}
