// Chunked parallel tokenization of a corpus into a dataset (see data/tokenize_corpus.h).
#include "data/tokenize_corpus.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_BYTES_PER_THREAD (2u << 20)
#define CHUNK_MAX_DOCS 65536

typedef struct {
    char *arena;
    size_t arena_len, arena_cap;
    size_t *off, *len;
    size_t n, cap;
    pt_token_buf *out;  // one per document slot, reused across chunks
    size_t out_slots;
    const uint8_t *special;  // per id: 1 for a special added token (NULL: not counted)
    uint64_t special_docs;   // documents whose text produced a special token
    int64_t special_example; // the first such id
    uint64_t eos_docs;       // documents whose text produced the end-of-document id
} chunk;

static void chunk_add(chunk *c, const char *text, size_t len) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 1024;
        c->off = pt_realloc(c->off, c->cap * sizeof *c->off);
        c->len = pt_realloc(c->len, c->cap * sizeof *c->len);
    }
    if (c->arena_len + len > c->arena_cap) {
        size_t cap = c->arena_cap ? c->arena_cap : (1u << 20);
        while (cap < c->arena_len + len) cap *= 2;
        c->arena = pt_realloc(c->arena, cap);
        c->arena_cap = cap;
    }
    memcpy(c->arena + c->arena_len, text, len);
    c->off[c->n] = c->arena_len;
    c->len[c->n] = len;
    c->arena_len += len;
    c->n++;
}

static void chunk_free(chunk *c) {
    for (size_t i = 0; i < c->out_slots; i++) free(c->out[i].ids);
    free(c->out);
    free(c->arena);
    free(c->off);
    free(c->len);
}

void pt_tokenize_progress_show(pt_tokenize_progress *p, uint64_t done, uint64_t tokens, bool final) {
    if (!p->on) return;
    double now = pt_now_s();
    if (!final && now - p->last < 0.1) return;
    p->last = now;
    double frac = p->total ? (double)done / (double)p->total : 1.0;
    if (frac > 1) frac = 1;
    char bar[31];
    int fill = (int)(frac * 30 + 0.5);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '-';
    bar[30] = 0;
    double dt = now - p->t0;
    fprintf(stderr, "\rtokenize [%s] %5.1f%%  %.1f/%.1f MB  %.1f MB/s  %.2fM tokens ", bar, 100 * frac, done / 1e6,
            p->total / 1e6, dt > 0 ? done / 1e6 / dt : 0.0, tokens / 1e6);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

// Tokenizes the chunk's documents in parallel and appends them (with EOS) in order.
static int flush_chunk(chunk *c, pt_tokenizer *tok, int threads, uint32_t eos, pt_dataset_writer *w) {
    if (c->n == 0) return 0;
    if (c->out_slots < c->n) {
        c->out = pt_realloc(c->out, c->n * sizeof *c->out);
        memset(c->out + c->out_slots, 0, (c->n - c->out_slots) * sizeof *c->out);
        c->out_slots = c->n;
    }
    int failed = 0;
    char err[1024] = "";
    const long n = (long)c->n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (long i = 0; i < n; i++) {
        pt_token_buf *b = &c->out[i];
        b->len = 0;
        int bad;
#pragma omp atomic read
        bad = failed;
        if (bad) continue;
        if (tokenizer_encode_append(tok, c->arena + c->off[i], c->len[i], b) != 0) {
#pragma omp critical(tokenize_err)
            {
                if (!failed) snprintf(err, sizeof err, "%s", pt_last_error());
#pragma omp atomic write
                failed = 1;
            }
        }
    }
    if (failed) {
        pt_set_error("%s", err);
        return -1;
    }
    for (size_t i = 0; i < c->n; i++) {
        pt_token_buf *b = &c->out[i];
        if (b->len == b->cap) {
            b->cap = b->cap ? 2 * b->cap : 16;
            b->ids = pt_realloc(b->ids, b->cap * sizeof *b->ids);
        }
        if (c->special) {
            bool sp = false, e = false;
            for (size_t k = 0; k < b->len; k++)
                if (c->special[b->ids[k]]) {
                    if (!sp && c->special_docs == 0) c->special_example = b->ids[k];
                    sp = true;
                    e = e || b->ids[k] == eos;
                }
            c->special_docs += sp;
            c->eos_docs += e;
        }
        b->ids[b->len++] = eos;
        if (pt_dataset_writer_add(w, b->ids, b->len) != 0) return -1;
        // Keep the memory bounded: drop unusually large buffers.
        if (b->cap > (1u << 20)) {
            free(b->ids);
            b->ids = NULL;
            b->cap = 0;
        }
        b->len = 0;
    }
    c->n = 0;
    c->arena_len = 0;
    return 0;
}

// The eos_token of tokenizer_config.json beside `tok_path`, or NULL.
static char *config_eos(const char *tok_path) {
    const char *slash = strrchr(tok_path, '/');
    char *dir = slash ? strndup(tok_path, (size_t)(slash - tok_path)) : pt_strdup(".");
    char *cfg = pt_path_join(dir, "tokenizer_config.json");
    free(dir);
    char *res = NULL;
    if (pt_file_exists(cfg)) {
        cJSON *root = pt_json_parse_file(cfg);
        const cJSON *e = root ? cJSON_GetObjectItemCaseSensitive(root, "eos_token") : NULL;
        if (cJSON_IsObject(e)) e = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (cJSON_IsString(e) && e->valuestring) res = pt_strdup(e->valuestring);
        cJSON_Delete(root);
    }
    free(cfg);
    pt_clear_error();
    return res;
}

int64_t pt_tokenize_eos_id(const pt_tokenizer *tok, const char *tok_path, const char *eos_name) {
    if (eos_name) {
        int64_t eos = tokenizer_token_id(tok, eos_name);
        if (eos < 0) pt_set_error("%s: the tokenizer has no token '%s' (--eos)", tok_path, eos_name);
        return eos;
    }
    int64_t eos = tokenizer_token_id(tok, "<|endoftext|>");
    char *eos_cfg = NULL;
    if (eos < 0 && (eos_cfg = config_eos(tok_path))) eos = tokenizer_token_id(tok, eos_cfg);
    free(eos_cfg);
    if (eos < 0)
        pt_set_error("%s: no <|endoftext|> token and no usable eos_token in tokenizer_config.json; "
                     "name the end-of-document token with --eos",
                     tok_path);
    return eos;
}

// The same regular file named twice (overlapping globs, a symlink) is tokenized twice: allowed
// (deliberate upsampling), but said.
static void warn_same_file(const pt_tokenize_opts *o, const struct stat *sts, int i) {
    for (int j = 0; j < i && S_ISREG(sts[i].st_mode); j++)
        if (S_ISREG(sts[j].st_mode) && sts[j].st_dev == sts[i].st_dev && sts[j].st_ino == sts[i].st_ino) {
            pt_warn("input %d (%s) is the same file as input %d (%s): its documents are tokenized again", i + 1,
                    o->inputs[i], j + 1, o->inputs[j]);
            return;
        }
}

int pt_tokenize_check_inputs(const pt_tokenize_opts *o, uint64_t *total_bytes) {
    *total_bytes = 0;
    struct stat *sts = pt_calloc((size_t)o->ninputs, sizeof *sts);
    int rc = 0;
    for (int i = 0; i < o->ninputs && !rc; i++) {
        const char *in = o->inputs[i];
        // A named pipe (mkfifo) is not opened here: opening and closing it would end its writer (SIGPIPE)
        // and the real read would then wait forever for another.
        if (stat(in, &sts[i]) == 0 && !S_ISREG(sts[i].st_mode) && !S_ISDIR(sts[i].st_mode)) {
            if (access(in, R_OK) != 0) {
                pt_set_error("%s: cannot open input: %s", in, strerror(errno));
                rc = -1;
            }
            continue;
        }
        pt_corpus_reader *r = pt_corpus_open_as(in, o->format, o->lines, o->text_field);
        if (!r) {
            rc = -1;
            break;
        }
        pt_corpus_close(r);
        if (stat(in, &sts[i]) == 0) {
            *total_bytes += (uint64_t)sts[i].st_size;
            warn_same_file(o, sts, i);
        }
    }
    free(sts);
    return rc;
}

// Reads one input into chunks, flushing each full chunk and the rest at the end, and records the input.
static int tokenize_input(chunk *c, pt_tokenizer *tok, uint32_t eos, const pt_tokenize_opts *o, int i,
                          pt_dataset_writer *w, pt_tokenize_progress *prog, uint64_t *done_bytes) {
    const size_t chunk_bytes = (size_t)o->threads * CHUNK_BYTES_PER_THREAD;
    pt_corpus_reader *r = pt_corpus_open_as(o->inputs[i], o->format, o->lines, o->text_field);
    if (!r) return -1;
    const char *text;
    size_t len;
    int got, err = 0;
    uint64_t docs_before = pt_dataset_writer_documents(w);
    while ((got = pt_corpus_next(r, &text, &len)) == 1) {
        chunk_add(c, text, len);
        if (c->arena_len >= chunk_bytes || c->n >= CHUNK_MAX_DOCS) {
            if (flush_chunk(c, tok, o->threads, eos, w) != 0) {
                err = 1;
                break;
            }
            if (prog) pt_tokenize_progress_show(prog, *done_bytes + pt_corpus_bytes(r), pt_dataset_writer_tokens(w), false);
        }
    }
    if (got < 0) err = 1;
    // Documents still in the chunk belong to this file: count them once flushed.
    if (!err && flush_chunk(c, tok, o->threads, eos, w) != 0) err = 1;
    if (!err) {
        char sha[65];
        pt_corpus_sha256(r, sha);
        pt_dataset_writer_add_input(w, o->inputs[i], pt_corpus_bytes(r), pt_dataset_writer_documents(w) - docs_before,
                                    sha);
        *done_bytes += pt_corpus_bytes(r);
        if (prog) pt_tokenize_progress_show(prog, *done_bytes, pt_dataset_writer_tokens(w), false);
    }
    pt_corpus_close(r);
    return err ? -1 : 0;
}

int pt_tokenize_corpus(pt_tokenizer *tok, uint32_t eos, const pt_tokenize_opts *o, pt_dataset_writer *w,
                       pt_tokenize_progress *progress, pt_tokenize_stats *stats) {
    chunk c;
    memset(&c, 0, sizeof c);
    uint8_t *special = NULL;
    if (o->special_as_text) tokenizer_set_encode_special_tokens(tok, true);
    else {  // count the documents in which special-token text became special ids
        const uint32_t V = tokenizer_vocab_size(tok);
        special = pt_calloc(V, 1);
        for (uint32_t id = 0; id < V; id++) special[id] = tokenizer_is_added(tok, id) && tokenizer_is_special(tok, id);
        c.special = special;
    }
    uint64_t done_bytes = 0;
    int rc = 0;
    for (int i = 0; i < o->ninputs && !rc; i++) rc = tokenize_input(&c, tok, eos, o, i, w, progress, &done_bytes);
    *stats = (pt_tokenize_stats){.bytes = done_bytes, .special_docs = c.special_docs,
                                 .special_example = c.special_example, .eos_docs = c.eos_docs};
    chunk_free(&c);
    free(special);
    return rc;
}
