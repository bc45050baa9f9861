// OUTPUT/metrics.jsonl: one JSON object per optimizer step. This file owns
// the format: the trainer writes it (and stores each checkpoint step's line in
// the checkpoint) through the writer, and every reader parses it through
// pt_metrics_read.
#pragma once
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"

// A growable text buffer: a line of any length, no fixed-size arithmetic.
typedef struct {
    char *p;
    size_t len, cap;
} pt_strbuf;
void pt_strbuf_printf(pt_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pt_strbuf_free(pt_strbuf *b);

// Up to this many ranks, a record carries its per-rank lists inline (what
// readers of small jobs use). Above it each list becomes a summary (min,
// median, max and the rank of each) and the full lists go to
// OUTPUT/metrics_ranks.jsonl, one line per step: inline, 64 values keep a
// line near 1.5 KB, while 1,024 would make every line ~10 KB of numbers that
// no reader of a step's record needs.
#define PT_METRICS_INLINE_RANKS 64
#define PT_METRICS_RANKS_FILE "metrics_ranks.jsonl"

// One step's record, the fields in the order they are written.
typedef struct {
    long step;
    double loss, grad_norm, lr, epoch;  // loss, grad_norm: null when not finite
    bool has_aux_loss;  // Qwen3-MoE with output_router_logits: aux_loss, its load-balancing loss
    double aux_loss;
    long tokens;
    double step_time_s, flops_per_token;  // tokens_per_s, mfu_flops_per_s derive from them
    uint64_t batch_fingerprint;
    size_t activation_bytes;
    double peak_rss_mib;
    // a distributed step: rank 0's communication, every rank's peak RSS (world entries)
    bool parallel;
    double comm_time_s, comm_time_by_kind_s[PT_COLL_KINDS];
    unsigned long long comm_bytes[PT_COLL_KINDS];
    size_t state_bytes_per_rank;
    const double *peak_rss_mib_per_rank;
    int world;
    const char *skip_reason;  // NULL: the step updated the weights
    long rolled_back_from;    // > 0: this step follows a rollback from that step
    double rollback_restore_time_s;
    bool padded;
    double padding_fraction;
    int row_len;
    bool has_compile;  // run-time kernel compilation so far (opencl)
    double compile_s;
    int cache_hits, cache_misses, recompilations;
    double restore_time_s;  // < 0: not the first step after a resume
    bool saved;             // a checkpoint was written after this step
    double save_time_s, save_gb_per_s;
    unsigned long long save_bytes;
    bool has_save_interval;  // --save-steps auto: the interval to the next save
    long save_interval_steps;
} pt_metrics_step;

// The record as one line (no newline) into b (reset first).
void pt_metrics_format(pt_strbuf *b, const pt_metrics_step *r);
// The per-rank lists of a record too large to carry them inline (false: none).
bool pt_metrics_format_ranks(pt_strbuf *b, const pt_metrics_step *r);

// The min, median (the lower middle value for an even count) and max of v[0..n) with the rank holding
// each (the lowest rank on ties).
typedef struct {
    double min, median, max;
    int min_rank, median_rank, max_rank;
} pt_rank_summary;
void pt_rank_summarize(const double *v, int n, pt_rank_summary *s);

// The writer (rank 0). Opening keeps the lines of steps <= keep_steps (a
// resumed run rewrites what came after its checkpoint) and, when the last kept
// step is short of keep_steps, appends ckpt_record (the checkpoint's own copy
// of its step's line). keep_steps <= 0 starts empty. NULL + error.
typedef struct pt_metrics_writer pt_metrics_writer;
pt_metrics_writer *pt_metrics_open(const char *output_dir, long keep_steps, const char *ckpt_record);
// Writes the record's line (and its per-rank line, when it has one) and flushes; -1 + error.
int pt_metrics_write(pt_metrics_writer *w, const pt_metrics_step *r);
const char *pt_metrics_path(const pt_metrics_writer *w);
void pt_metrics_close(pt_metrics_writer *w);

// ---------------------------------------------------------------- reading

typedef struct {
    long step;  // 0 when absent (generic mode)
    double loss, grad_norm, lr, epoch, step_time_s, tokens_per_s, save_time_s, restore_time_s;  // NaN: absent/null
    long tokens, save_bytes;  // 0: absent
    int lineno;               // 1-based line in the file
    const char *text;         // the line as written (no newline)
    cJSON *json;              // the parsed line
} pt_metrics_rec;

enum {
    PT_METRICS_TAIL_OK = 0,         // the file ends with a complete line
    PT_METRICS_TAIL_UNTERMINATED,  // the last line has no newline but parses: kept as the last record
    PT_METRICS_TAIL_TORN,          // the last line has no newline and does not parse (a kill mid-write): dropped
};
typedef struct {
    pt_metrics_rec *recs;
    int n;
    int tail;         // PT_METRICS_TAIL_*
    int torn_lineno;  // the dropped line's number (PT_METRICS_TAIL_TORN)
    int skipped;      // lines that were not records (PT_METRICS_LENIENT)
    char *buf_;       // the file's text (the records' text points into it)
} pt_metrics_log;

// Flags of pt_metrics_read.
#define PT_METRICS_LENIENT 1  // skip lines that are not records instead of failing
#define PT_METRICS_GENERIC 2  // any JSON object is a record ("step" optional: other trainers' JSONL logs)

// Reads a metrics.jsonl (blank lines ignored). A line that is not a JSON
// object with a numeric "step" (any object under PT_METRICS_GENERIC) is an
// error naming the file and line, unless PT_METRICS_LENIENT; a torn last line
// is never an error (log->tail says so). -1 + error (file unreadable or a bad line).
int pt_metrics_read(const char *path, int flags, pt_metrics_log *log);
void pt_metrics_log_free(pt_metrics_log *log);
// The step of the file's last complete line, reading only the file's tail (a
// supervisor polls it): 0 when there is none, -1 when the file cannot be read.
long pt_metrics_last_step(const char *path);
