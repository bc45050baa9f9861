// portatrain tokenize: raw text (.txt / .jsonl) -> v1 token shards + dataset.json. The argument handling;
// the chunked parallel tokenization is data/tokenize_corpus.c.
#include "cli/cli.h"
#include "data/tokenize_corpus.h"
#include "util/common.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_SHARD_TOKENS 100000000ull

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
    const char *tok_path, *out_dir, *eos_name, *format_name;
    bool quiet;
    int64_t shard_tokens, threads;
    pt_tokenize_opts o;
} tokenize_args;

// 0 to go on, -1 for --help (usage printed), else the exit code of a usage error.
static int parse_args(int argc, char **argv, tokenize_args *a, const char **inputs) {
    pt_argparse p;
    argp_init(&p, argc, argv);
    a->o.text_field = "text";
    a->o.format = PT_CORPUS_AUTO;
    a->shard_tokens = (int64_t)DEFAULT_SHARD_TOKENS;
    const char *opt;
    while ((opt = argp_next(&p))) {
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(opt, "--tokenizer")) a->tok_path = argp_value(&p);
        else if (!strcmp(opt, "--output-dir")) a->out_dir = argp_value(&p);
        else if (!strcmp(opt, "--text-field")) a->o.text_field = argp_value(&p);
        else if (!strcmp(opt, "--eos")) a->eos_name = argp_value(&p);
        else if (!strcmp(opt, "--format")) a->format_name = argp_value(&p);
        else if (!strcmp(opt, "--lines")) a->o.lines = argp_flag(&p);
        else if (!strcmp(opt, "--quiet")) a->quiet = argp_flag(&p);
        else if (!strcmp(opt, "--special-tokens-as-text")) a->o.special_as_text = argp_flag(&p);
        else if (!strcmp(opt, "--shard-tokens")) a->shard_tokens = argp_int(&p);
        else if (!strcmp(opt, "--threads")) a->threads = argp_int(&p);
        else if (strncmp(opt, "--", 2) == 0) return argp_unknown(&p, opt);
        else inputs[a->o.ninputs++] = opt;
    }
    a->o.inputs = inputs;
    return 0;
}

// The checks of the arguments; 0 or the exit code of a usage error.
static int check_args(tokenize_args *a) {
    if (!a->tok_path || !a->out_dir)
        return cli_usage_error("tokenize", "--tokenizer and --output-dir are required (see --help)");
    if (a->o.ninputs == 0) return cli_usage_error("tokenize", "no input files (see --help)");
    if (a->shard_tokens < 1 || a->shard_tokens > INT32_MAX)
        return cli_usage_error("tokenize", "--shard-tokens must be 1..2147483647");
    if (a->threads < 0 || a->threads > 1024) return cli_usage_error("tokenize", "--threads must be 1..1024");
    if (a->threads == 0) a->threads = omp_get_max_threads();
    a->o.threads = (int)a->threads;
    if (a->format_name) {
        if (!strcmp(a->format_name, "auto")) a->o.format = PT_CORPUS_AUTO;
        else if (!strcmp(a->format_name, "text")) a->o.format = PT_CORPUS_FORMAT_TEXT;
        else if (!strcmp(a->format_name, "jsonl")) a->o.format = PT_CORPUS_FORMAT_JSONL;
        else return cli_usage_error("tokenize", "--format must be auto, text or jsonl");
    }
    if (!*a->o.text_field) return cli_usage_error("tokenize", "--text-field must not be empty");
    return 0;
}

static void print_summary(const tokenize_args *a, const pt_dataset *ds, const pt_tokenize_stats *st, double t0,
                          uint64_t ndocs, uint64_t ntok, const pt_tokenizer *tok) {
    double dt = pt_now_s() - t0;
    if (!a->quiet)
        fprintf(stderr,
                "tokenize: %llu document%s, %llu tokens in %d shard%s -> %s (%.2f MB of text in %.2f s, "
                "%.2f MB/s, %lld threads)\n",
                (unsigned long long)ndocs, ndocs == 1 ? "" : "s", (unsigned long long)ntok, ds->num_shards, ds->num_shards == 1 ? "" : "s",
                ds->index_path, st->bytes / 1e6, dt, dt > 0 ? st->bytes / 1e6 / dt : 0.0, (long long)a->threads);
    if (st->special_docs) {
        const char *ex = tokenizer_id_to_token(tok, (uint32_t)st->special_example, NULL);
        fprintf(stderr,
                "tokenize: warning: %llu document%s contain%s special-token text (e.g. %s) that became "
                "special ids, %llu of them the end-of-document id (false document ends); use "
                "--special-tokens-as-text to tokenize it as text\n",
                (unsigned long long)st->special_docs, st->special_docs == 1 ? "" : "s",
                st->special_docs == 1 ? "s" : "", ex ? ex : "?", (unsigned long long)st->eos_docs);
    }
}

// Tokenizes into a new dataset writer and finishes it; the exit code.
static int run(const tokenize_args *a, pt_tokenizer *tok, int64_t eos, uint64_t total_bytes) {
    pt_dataset_writer *w = pt_dataset_writer_open(a->out_dir, "shard", (uint64_t)a->shard_tokens,
                                                  tokenizer_vocab_size(tok), tokenizer_sha256(tok), eos);
    if (!w) return cli_fail();
    pt_tokenize_progress prog = {.on = !a->quiet && isatty(2), .total = total_bytes, .t0 = pt_now_s()};
    pt_tokenize_stats st;
    int err = pt_tokenize_corpus(tok, (uint32_t)eos, &a->o, w, &prog, &st);
    uint64_t ndocs = pt_dataset_writer_documents(w), ntok = pt_dataset_writer_tokens(w);
    if (err) {
        pt_dataset_writer_abort(w);
        if (prog.on) fputc('\n', stderr);
        return cli_fail();
    }
    pt_dataset ds;
    if (pt_dataset_writer_finish(w, &ds) != 0) {
        if (prog.on) fputc('\n', stderr);
        return cli_fail();
    }
    pt_tokenize_progress_show(&prog, st.bytes, ntok, true);
    print_summary(a, &ds, &st, prog.t0, ndocs, ntok, tok);
    pt_dataset_free(&ds);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    tokenize_args a = {0};
    const char **inputs = pt_calloc((size_t)argc + 1, sizeof *inputs);
    int rc = parse_args(argc, argv, &a, inputs);
    if (rc == -1) rc = 0;
    else if (rc == 0 && (rc = check_args(&a)) == 0) {
        uint64_t total_bytes = 0;
        pt_tokenizer *tok = NULL;
        int64_t eos = -1;
        if (pt_tokenize_check_inputs(&a.o, &total_bytes) != 0 || !(tok = tokenizer_load(a.tok_path)) ||
            (eos = pt_tokenize_eos_id(tok, a.tok_path, a.eos_name)) < 0)
            rc = cli_fail();
        else rc = run(&a, tok, eos, total_bytes);
        tokenizer_free(tok);
    }
    free(inputs);
    return rc;
}
