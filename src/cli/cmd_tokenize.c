// portatrain tokenize: raw text (.txt / .jsonl) -> v1 token shards + dataset.json.
//
// Streaming: documents are read in chunks of bounded size, each chunk is
// tokenized by a team of threads (one document per task), and the results are
// appended in input order, so the output is byte-identical for any --threads.
// Memory is bounded by the chunk size (plus the largest single document).
#include "cli/cli.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
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

#define DEFAULT_SHARD_TOKENS 100000000ull
#define CHUNK_BYTES_PER_THREAD (2u << 20)
#define CHUNK_MAX_DOCS 65536

static void usage(FILE *f) {
    fprintf(f,
            "usage: portatrain tokenize --tokenizer PATH --output-dir DIR [options] INPUT...\n"
            "\n"
            "Tokenizes text files (one document per file, or per line with --lines) and .jsonl/.ndjson/.json\n"
            "files (JSON Lines: one JSON object per line, the document in --text-field), appends the end-of-document\n"
            "token after each document, and writes DIR/shard-NNNNN.bin (v1 shards) and DIR/dataset.json.\n"
            "\n"
            "options:\n"
            "  --tokenizer PATH     HF tokenizer.json (required)\n"
            "  --output-dir DIR     output directory, created if needed (required)\n"
            "  --lines              .txt inputs: one document per line (empty lines skipped)\n"
            "  --text-field NAME    .jsonl/.ndjson/.json inputs: the field holding the text (default: text)\n"
            "  --format F           auto (default: JSON Lines for .jsonl/.ndjson/.json names, else text),\n"
            "                       text or jsonl for every input (e.g. JSON Lines from a pipe or /dev/stdin)\n"
            "  --eos TOKEN          end-of-document token (default: <|endoftext|>, else the eos_token of\n"
            "                       tokenizer_config.json beside the tokenizer)\n"
            "  --special-tokens-as-text\n"
            "                       special tokens written in the text (e.g. <|endoftext|>) are tokenized as\n"
            "                       ordinary text, not as their ids (HF: encode_special_tokens = True); by\n"
            "                       default they become their ids, as HF encode does, and a warning counts them\n"
            "  --shard-tokens N     tokens per shard (default %llu; at most 2147483647)\n"
            "  --threads N          tokenizer threads (default: OMP_NUM_THREADS or all cores)\n"
            "  --quiet              no progress bar or summary\n",
            DEFAULT_SHARD_TOKENS);
}

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

typedef struct {
    bool on;
    uint64_t total;
    double t0, last;
} progress;

static void progress_show(progress *p, uint64_t done, uint64_t tokens, bool final) {
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

int cmd_tokenize(int argc, char **argv) {
    pt_argparse p;
    argp_init(&p, argc, argv);
    const char *tok_path = NULL, *out_dir = NULL, *text_field = "text", *eos_name = NULL;
    bool lines = false, quiet = false, special_as_text = false;
    pt_corpus_format format = PT_CORPUS_AUTO;
    const char *format_name = NULL;
    int64_t shard_tokens = (int64_t)DEFAULT_SHARD_TOKENS, threads = 0;
    const char **inputs = pt_calloc((size_t)argc + 1, sizeof *inputs);
    int ninputs = 0;
    const char *opt;
    while ((opt = argp_next(&p))) {
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            free(inputs);
            return 0;
        } else if (!strcmp(opt, "--tokenizer")) tok_path = argp_value(&p);
        else if (!strcmp(opt, "--output-dir")) out_dir = argp_value(&p);
        else if (!strcmp(opt, "--text-field")) text_field = argp_value(&p);
        else if (!strcmp(opt, "--eos")) eos_name = argp_value(&p);
        else if (!strcmp(opt, "--format")) format_name = argp_value(&p);
        else if (!strcmp(opt, "--lines")) lines = argp_flag(&p);
        else if (!strcmp(opt, "--quiet")) quiet = argp_flag(&p);
        else if (!strcmp(opt, "--special-tokens-as-text")) special_as_text = argp_flag(&p);
        else if (!strcmp(opt, "--shard-tokens")) shard_tokens = argp_int(&p);
        else if (!strcmp(opt, "--threads")) threads = argp_int(&p);
        else if (strncmp(opt, "--", 2) == 0) {
            free(inputs);
            return argp_unknown(&p, opt);
        } else inputs[ninputs++] = opt;
    }
    int rc = 2;
    if (!tok_path || !out_dir) {
        rc = cli_usage_error("tokenize", "--tokenizer and --output-dir are required (see --help)");
        goto out_inputs;
    }
    if (ninputs == 0) {
        rc = cli_usage_error("tokenize", "no input files (see --help)");
        goto out_inputs;
    }
    if (shard_tokens < 1 || shard_tokens > INT32_MAX) {
        rc = cli_usage_error("tokenize", "--shard-tokens must be 1..2147483647");
        goto out_inputs;
    }
    if (threads < 0 || threads > 1024) {
        rc = cli_usage_error("tokenize", "--threads must be 1..1024");
        goto out_inputs;
    }
    if (threads == 0) threads = omp_get_max_threads();
    if (format_name) {
        if (!strcmp(format_name, "auto")) format = PT_CORPUS_AUTO;
        else if (!strcmp(format_name, "text")) format = PT_CORPUS_FORMAT_TEXT;
        else if (!strcmp(format_name, "jsonl")) format = PT_CORPUS_FORMAT_JSONL;
        else {
            rc = cli_usage_error("tokenize", "--format must be auto, text or jsonl");
            goto out_inputs;
        }
    }
    if (!*text_field) {
        rc = cli_usage_error("tokenize", "--text-field must not be empty");
        goto out_inputs;
    }

    // Every input must be readable before anything is written.
    // The same regular file named twice (overlapping globs, a symlink) is tokenized twice: allowed
    // (deliberate upsampling), but said.
    uint64_t total_bytes = 0;
    struct stat *sts = pt_calloc((size_t)ninputs, sizeof *sts);
    for (int i = 0; i < ninputs; i++) {
        // A named pipe (mkfifo) is not opened here: opening and closing it would end its writer (SIGPIPE)
        // and the real read would then wait forever for another.
        if (stat(inputs[i], &sts[i]) == 0 && !S_ISREG(sts[i].st_mode) && !S_ISDIR(sts[i].st_mode)) {
            if (access(inputs[i], R_OK) != 0) {
                pt_set_error("%s: cannot open input: %s", inputs[i], strerror(errno));
                free(sts);
                rc = cli_fail();
                goto out_inputs;
            }
            continue;
        }
        pt_corpus_reader *r = pt_corpus_open_as(inputs[i], format, lines, text_field);
        if (!r) {
            free(sts);
            rc = cli_fail();
            goto out_inputs;
        }
        pt_corpus_close(r);
        if (stat(inputs[i], &sts[i]) == 0) {
            total_bytes += (uint64_t)sts[i].st_size;
            for (int j = 0; j < i && S_ISREG(sts[i].st_mode); j++)
                if (S_ISREG(sts[j].st_mode) && sts[j].st_dev == sts[i].st_dev && sts[j].st_ino == sts[i].st_ino) {
                    pt_warn("input %d (%s) is the same file as input %d (%s): its documents are tokenized again",
                            i + 1, inputs[i], j + 1, inputs[j]);
                    break;
                }
        }
    }
    free(sts);

    pt_tokenizer *tok = tokenizer_load(tok_path);
    if (!tok) {
        rc = cli_fail();
        goto out_inputs;
    }
    char *eos_cfg = NULL;
    int64_t eos = -1;
    if (eos_name) {
        eos = tokenizer_token_id(tok, eos_name);
        if (eos < 0) pt_set_error("%s: the tokenizer has no token '%s' (--eos)", tok_path, eos_name);
    } else {
        eos = tokenizer_token_id(tok, "<|endoftext|>");
        if (eos < 0 && (eos_cfg = config_eos(tok_path))) eos = tokenizer_token_id(tok, eos_cfg);
        if (eos < 0)
            pt_set_error("%s: no <|endoftext|> token and no usable eos_token in tokenizer_config.json; "
                         "name the end-of-document token with --eos",
                         tok_path);
    }
    free(eos_cfg);
    if (eos < 0) {
        rc = cli_fail();
        tokenizer_free(tok);
        goto out_inputs;
    }

    pt_dataset_writer *w = pt_dataset_writer_open(out_dir, "shard", (uint64_t)shard_tokens, tokenizer_vocab_size(tok),
                                                  tokenizer_sha256(tok), eos);
    if (!w) {
        rc = cli_fail();
        tokenizer_free(tok);
        goto out_inputs;
    }
    progress prog = {.on = !quiet && isatty(2), .total = total_bytes, .t0 = pt_now_s()};
    const size_t chunk_bytes = (size_t)threads * CHUNK_BYTES_PER_THREAD;
    chunk c;
    memset(&c, 0, sizeof c);
    uint8_t *special = NULL;
    if (special_as_text) tokenizer_set_encode_special_tokens(tok, true);
    else {  // count the documents in which special-token text became special ids
        const uint32_t V = tokenizer_vocab_size(tok);
        special = pt_calloc(V, 1);
        for (uint32_t id = 0; id < V; id++)
            special[id] = tokenizer_is_added(tok, id) && tokenizer_is_special(tok, id);
        c.special = special;
    }
    uint64_t done_bytes = 0;
    int err = 0;
    for (int i = 0; i < ninputs && !err; i++) {
        pt_corpus_reader *r = pt_corpus_open_as(inputs[i], format, lines, text_field);
        if (!r) {
            err = 1;
            break;
        }
        const char *text;
        size_t len;
        int got;
        uint64_t docs_before = pt_dataset_writer_documents(w);
        while ((got = pt_corpus_next(r, &text, &len)) == 1) {
            chunk_add(&c, text, len);
            if (c.arena_len >= chunk_bytes || c.n >= CHUNK_MAX_DOCS) {
                if (flush_chunk(&c, tok, (int)threads, (uint32_t)eos, w) != 0) {
                    err = 1;
                    break;
                }
                progress_show(&prog, done_bytes + pt_corpus_bytes(r), pt_dataset_writer_tokens(w), false);
            }
        }
        if (got < 0) err = 1;
        // Documents still in the chunk belong to this file: count them once flushed.
        if (!err && flush_chunk(&c, tok, (int)threads, (uint32_t)eos, w) != 0) err = 1;
        if (!err) {
            char sha[65];
            pt_corpus_sha256(r, sha);
            pt_dataset_writer_add_input(w, inputs[i], pt_corpus_bytes(r), pt_dataset_writer_documents(w) - docs_before,
                                        sha);
            done_bytes += pt_corpus_bytes(r);
            progress_show(&prog, done_bytes, pt_dataset_writer_tokens(w), false);
        }
        pt_corpus_close(r);
    }
    chunk_free(&c);
    free(special);
    uint64_t ndocs = pt_dataset_writer_documents(w), ntok = pt_dataset_writer_tokens(w);
    if (err) {
        pt_dataset_writer_abort(w);
        if (prog.on) fputc('\n', stderr);
        rc = cli_fail();
    } else {
        pt_dataset ds;
        if (pt_dataset_writer_finish(w, &ds) != 0) {
            if (prog.on) fputc('\n', stderr);
            rc = cli_fail();
        } else {
            progress_show(&prog, done_bytes, ntok, true);
            double dt = pt_now_s() - prog.t0;
            if (!quiet)
                fprintf(stderr,
                        "tokenize: %llu document%s, %llu tokens in %d shard%s -> %s (%.2f MB of text in %.2f s, "
                        "%.2f MB/s, %lld threads)\n",
                        (unsigned long long)ndocs, ndocs == 1 ? "" : "s", (unsigned long long)ntok, ds.num_shards,
                        ds.num_shards == 1 ? "" : "s", ds.index_path, done_bytes / 1e6, dt,
                        dt > 0 ? done_bytes / 1e6 / dt : 0.0, (long long)threads);
            pt_dataset_free(&ds);
            if (c.special_docs) {
                const char *ex = tokenizer_id_to_token(tok, (uint32_t)c.special_example, NULL);
                fprintf(stderr,
                        "tokenize: warning: %llu document%s contain%s special-token text (e.g. %s) that became "
                        "special ids, %llu of them the end-of-document id (false document ends); use "
                        "--special-tokens-as-text to tokenize it as text\n",
                        (unsigned long long)c.special_docs, c.special_docs == 1 ? "" : "s",
                        c.special_docs == 1 ? "s" : "", ex ? ex : "?", (unsigned long long)c.eos_docs);
            }
            rc = 0;
        }
    }
    tokenizer_free(tok);
out_inputs:
    free(inputs);
    return rc;
}
