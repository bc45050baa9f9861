// portatrain tokenizer: encode / decode / info / bench with an HF tokenizer.json.
#include "cli/cli.h"
#include "data/tokenizer.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: portatrain tokenizer encode --tokenizer PATH [--json] [--batch] [--special-tokens-as-text] < text\n"
            "       portatrain tokenizer decode --tokenizer PATH [--raw] [--batch]    < ids\n"
            "       portatrain tokenizer info   --tokenizer PATH\n"
            "       portatrain tokenizer bench  --tokenizer PATH [--threads N] [--repeat R] RECORDS\n"
            "\n"
            "encode  reads stdin as bytes and prints the token ids on one line separated by spaces\n"
            "        (--json: a JSON array). Invalid UTF-8 is replaced by U+FFFD (Python errors=\"replace\").\n"
            "        --special-tokens-as-text: special tokens in the text are ordinary text (HF\n"
            "        encode_special_tokens = True).\n"
            "decode  reads ids (whitespace separated, or a JSON array) and writes the decoded text; invalid\n"
            "        UTF-8 in the decoded bytes is replaced by U+FFFD like HF; --raw writes the exact bytes.\n"
            "--batch encode: stdin is a sequence of records (uint32 little-endian length, then the bytes);\n"
            "        one line of ids per record. decode: one line of ids per record in, records out.\n"
            "info    prints the vocabulary size, sha256 and added tokens as JSON.\n"
            "bench   encodes every record of RECORDS (the --batch format) on N threads (default 1) R times\n"
            "        (default 3) and prints one JSON line per pass with MB/s.\n");
}

static char *read_stream(FILE *f, size_t *len) {
    char *b = pt_read_all(f, len);
    if (!b) pt_set_error("cannot read standard input: %s", strerror(errno));
    return b;
}

typedef struct {
    const char *p;
    size_t n;
} record;

static int parse_records(const char *buf, size_t len, record **out, size_t *count, const char *what) {
    size_t cap = 64, n = 0, i = 0;
    record *r = pt_malloc(cap * sizeof *r);
    while (i < len) {
        if (len - i < 4) {
            pt_set_error("%s: truncated record header at byte %zu", what, i);
            free(r);
            return -1;
        }
        const uint8_t *h = (const uint8_t *)buf + i;
        size_t l = (size_t)h[0] | ((size_t)h[1] << 8) | ((size_t)h[2] << 16) | ((size_t)h[3] << 24);
        i += 4;
        if (l > len - i) {
            pt_set_error("%s: record %zu claims %zu bytes but only %zu remain", what, n, l, len - i);
            free(r);
            return -1;
        }
        if (n == cap) r = pt_realloc(r, (cap *= 2) * sizeof *r);
        r[n++] = (record){buf + i, l};
        i += l;
    }
    *out = r;
    *count = n;
    return 0;
}

static void print_ids(FILE *f, const uint32_t *ids, size_t n, bool json) {
    if (json) fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        if (i) fputs(json ? ", " : " ", f);
        fprintf(f, "%u", ids[i]);
    }
    if (json) fputc(']', f);
    fputc('\n', f);
}

// Parses ids: a JSON array of integers, or whitespace-separated decimal integers.
static int parse_ids(const char *s, size_t len, pt_token_buf *out) {
    size_t i = 0;
    while (i < len && isspace((unsigned char)s[i])) i++;
    if (i < len && s[i] == '[') {
        cJSON *arr = pt_json_parse(s, len, "decode input");
        if (!arr) return -1;
        if (!cJSON_IsArray(arr)) {
            cJSON_Delete(arr);
            pt_set_error("decode input: expected a JSON array of token ids");
            return -1;
        }
        size_t k = 0;
        for (const cJSON *e = arr->child; e; e = e->next, k++) {
            double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
            if (v < 0 || v > 4294967295.0 || v != (double)(uint32_t)v) {
                cJSON_Delete(arr);
                pt_set_error("decode input: element %zu is not a token id (a non-negative integer)", k);
                return -1;
            }
            if (out->len == out->cap) out->ids = pt_realloc(out->ids, (out->cap = out->cap ? out->cap * 2 : 256) * 4);
            out->ids[out->len++] = (uint32_t)v;
        }
        cJSON_Delete(arr);
        return 0;
    }
    while (i < len) {
        size_t a = i;
        uint64_t v = 0;
        while (i < len && !isspace((unsigned char)s[i])) {
            if (!isdigit((unsigned char)s[i]) || v > 0xFFFFFFFFull) {
                while (i < len && !isspace((unsigned char)s[i])) i++;
                pt_set_error("decode input: '%.*s' is not a token id (a non-negative integer)", (int)PT_MIN(i - a, 40),
                             s + a);
                return -1;
            }
            v = v * 10 + (uint64_t)(s[i] - '0');
            i++;
        }
        if (v > 0xFFFFFFFFull) {
            pt_set_error("decode input: '%.*s' is out of range for a token id", (int)PT_MIN(i - a, 40), s + a);
            return -1;
        }
        if (out->len == out->cap) out->ids = pt_realloc(out->ids, (out->cap = out->cap ? out->cap * 2 : 256) * 4);
        out->ids[out->len++] = (uint32_t)v;
        while (i < len && isspace((unsigned char)s[i])) i++;
    }
    return 0;
}

// An encode or decode pass over the whole of standard input into b (opt: --json or --raw).
typedef int (*stdin_pass)(pt_tokenizer *tok, const char *in, size_t len, bool opt, bool batch, pt_token_buf *b);

// Reads standard input, runs the pass, frees its buffers; a failed write of standard output fails a pass
// that had not failed.
static int on_stdin(pt_tokenizer *tok, bool opt, bool batch, stdin_pass pass) {
    size_t len;
    char *in = read_stream(stdin, &len);
    if (!in) return cli_fail();
    pt_token_buf b = {0};
    int rc = pass(tok, in, len, opt, batch, &b);
    free(b.ids);
    free(in);
    if (fflush(stdout) && !rc) {
        pt_set_error("cannot write standard output: %s", strerror(errno));
        rc = cli_fail();
    }
    return rc;
}

static int encode_pass(pt_tokenizer *tok, const char *in, size_t len, bool json, bool batch, pt_token_buf *b) {
    int rc = 0;
    if (!batch) {
        if (tokenizer_encode_append(tok, in, len, b)) rc = cli_fail();
        else print_ids(stdout, b->ids, b->len, json);
    } else {
        record *r;
        size_t n;
        if (parse_records(in, len, &r, &n, "standard input")) return cli_fail();
        for (size_t i = 0; i < n && !rc; i++) {
            b->len = 0;
            if (tokenizer_encode_append(tok, r[i].p, r[i].n, b)) {
                pt_prefix_error("record %zu: ", i);
                rc = cli_fail();
            } else {
                print_ids(stdout, b->ids, b->len, json);
            }
        }
        free(r);
    }
    return rc;
}

static void write_record(const char *p, size_t n) {
    uint8_t h[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    fwrite(h, 1, 4, stdout);
    fwrite(p, 1, n, stdout);
}

static int decode_pass(pt_tokenizer *tok, const char *in, size_t len, bool raw, bool batch, pt_token_buf *b) {
    int rc = 0;
    size_t line = 0;
    for (size_t i = 0; i <= len && !rc;) {
        size_t end = len;
        if (batch) {
            if (i == len) break;
            const char *nl = memchr(in + i, '\n', len - i);
            end = nl ? (size_t)(nl - in) : len;
        }
        b->len = 0;
        char *out = NULL;
        size_t on = 0;
        if (parse_ids(in + i, end - i, b) ||
            (raw ? tokenizer_decode_bytes(tok, b->ids, b->len, &out, &on) : tokenizer_decode(tok, b->ids, b->len, &out, &on))) {
            if (batch) pt_prefix_error("line %zu: ", line + 1);
            rc = cli_fail();
        } else if (batch) {
            write_record(out, on);
        } else {
            fwrite(out, 1, on, stdout);
        }
        free(out);
        line++;
        if (!batch) break;
        i = end + 1;
    }
    return rc;
}

static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static int do_info(pt_tokenizer *tok) {
    uint32_t V = tokenizer_vocab_size(tok);
    printf("{\"vocab_size\": %u, \"sha256\": \"%s\", \"added_tokens\": [", V, tokenizer_sha256_hex(tok));
    bool first = true;
    for (uint32_t id = 0; id < V; id++) {
        if (!tokenizer_is_added(tok, id)) continue;
        size_t l;
        const char *s = tokenizer_id_to_token(tok, id, &l);
        printf("%s{\"id\": %u, \"content\": ", first ? "" : ", ", id);
        json_str(stdout, s, l);
        printf(", \"special\": %s}", tokenizer_is_special(tok, id) ? "true" : "false");
        first = false;
    }
    printf("]}\n");
    return 0;
}

typedef struct {
    pt_tokenizer *tok;
    record *r;
    size_t n;
    atomic_size_t next;
    atomic_size_t tokens;
    atomic_int failed;
} bench_job;

static void *bench_worker(void *arg) {
    bench_job *j = arg;
    pt_token_buf b = {0};
    size_t tokens = 0;
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n) break;
        b.len = 0;
        if (tokenizer_encode_append(j->tok, j->r[i].p, j->r[i].n, &b)) {
            atomic_store(&j->failed, 1);
            break;
        }
        tokens += b.len;
    }
    atomic_fetch_add(&j->tokens, tokens);
    free(b.ids);
    return NULL;
}

static int do_bench(pt_tokenizer *tok, const char *file, int threads, int repeat) {
    size_t len;
    char *buf = pt_read_file(file, &len);
    if (!buf) return cli_fail();
    record *r;
    size_t n;
    if (parse_records(buf, len, &r, &n, file)) {
        free(buf);
        return cli_fail();
    }
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += r[i].n;
    int rc = 0;
    for (int pass = 0; pass < repeat && !rc; pass++) {
        bench_job j = {.tok = tok, .r = r, .n = n};
        atomic_init(&j.next, 0);
        atomic_init(&j.tokens, 0);
        atomic_init(&j.failed, 0);
        pthread_t *th = pt_malloc((size_t)threads * sizeof(pthread_t));
        double t0 = pt_now_s();
        for (int k = 0; k < threads; k++) pthread_create(&th[k], NULL, bench_worker, &j);
        for (int k = 0; k < threads; k++) pthread_join(th[k], NULL);
        double dt = pt_now_s() - t0;
        free(th);
        if (atomic_load(&j.failed)) {
            rc = cli_fail();
            break;
        }
        printf("{\"pass\": %d, \"threads\": %d, \"docs\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, "
               "\"mb_per_s\": %.3f}\n",
               pass, threads, n, bytes, (size_t)atomic_load(&j.tokens), dt, bytes / 1e6 / dt);
        fflush(stdout);
    }
    free(r);
    free(buf);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *action = argv[1];
    if (strcmp(action, "encode") && strcmp(action, "decode") && strcmp(action, "info") && strcmp(action, "bench"))
        return cli_usage_error("tokenizer", "unknown action '%s' (expected encode, decode, info or bench)", action);
    pt_argparse p;
    argp_init(&p, argc - 1, argv + 1);
    p.cmd = "tokenizer";
    const char *path = NULL, *file = NULL;
    bool json = false, raw = false, batch = false, special_as_text = false;
    int threads = 1, repeat = 3;
    const char *opt;
    while ((opt = argp_next(&p))) {
        if (!strcmp(opt, "--tokenizer")) path = argp_value(&p);
        else if (!strcmp(opt, "--json") && !strcmp(action, "encode")) json = argp_flag(&p);
        else if (!strcmp(opt, "--raw") && !strcmp(action, "decode")) raw = argp_flag(&p);
        else if (!strcmp(opt, "--special-tokens-as-text") && !strcmp(action, "encode")) special_as_text = argp_flag(&p);
        else if (!strcmp(opt, "--batch") && (!strcmp(action, "encode") || !strcmp(action, "decode"))) batch = argp_flag(&p);
        else if (!strcmp(opt, "--threads") && !strcmp(action, "bench")) {
            int64_t v = argp_int(&p);
            if (v < 1 || v > 1024) return cli_usage_error("tokenizer", "--threads must be in [1, 1024]");
            threads = (int)v;
        } else if (!strcmp(opt, "--repeat") && !strcmp(action, "bench")) {
            int64_t v = argp_int(&p);
            if (v < 1 || v > 1000) return cli_usage_error("tokenizer", "--repeat must be in [1, 1000]");
            repeat = (int)v;
        } else if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return 0;
        } else if (strncmp(opt, "--", 2) && !strcmp(action, "bench") && !file) {
            file = opt;
        } else {
            return argp_unknown(&p, opt);
        }
    }
    if (!path) return cli_usage_error("tokenizer", "%s needs --tokenizer PATH (an HF tokenizer.json)", action);
    if (!strcmp(action, "bench") && !file) return cli_usage_error("tokenizer", "bench needs a RECORDS file");
    pt_tokenizer *tok = tokenizer_load(path);
    if (!tok) return cli_fail();
    tokenizer_set_encode_special_tokens(tok, special_as_text);
    int rc;
    if (!strcmp(action, "encode")) rc = on_stdin(tok, json, batch, encode_pass);
    else if (!strcmp(action, "decode")) rc = on_stdin(tok, raw, batch, decode_pass);
    else if (!strcmp(action, "info")) rc = do_info(tok);
    else rc = do_bench(tok, file, threads, repeat);
    tokenizer_free(tok);
    return rc;
}
