// Tokenizer: golden ids from HF tokenizers (tests/fixtures/tokenizer, written by tools/tokenizer_parity.py
// --write-fixtures) on the real Qwen3 tokenizer and on small feature variants, thread safety, the heap BPE,
// invalid UTF-8, decode, errors, and the CLI.
#include "data/tokenizer.h"
#include "testutil.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char **p;
    size_t *n;
    size_t count;
} docs_t;

static int read_records(const char *path, docs_t *d) {
    size_t len;
    char *b = pt_read_file(path, &len);
    if (!b) return -1;
    size_t cap = 64, i = 0;
    d->p = malloc(cap * sizeof(char *));
    d->n = malloc(cap * sizeof(size_t));
    d->count = 0;
    while (i + 4 <= len) {
        uint32_t l;
        memcpy(&l, b + i, 4);
        i += 4;
        if (l > len - i) break;
        if (d->count == cap) {
            cap *= 2;
            d->p = realloc(d->p, cap * sizeof(char *));
            d->n = realloc(d->n, cap * sizeof(size_t));
        }
        d->p[d->count] = malloc(l + 1);
        memcpy(d->p[d->count], b + i, l);
        d->p[d->count][l] = 0;
        d->n[d->count++] = l;
        i += l;
    }
    free(b);
    return 0;
}

static void free_docs(docs_t *d) {
    for (size_t i = 0; i < d->count; i++) free(d->p[i]);
    free(d->p);
    free(d->n);
}

// ids files: per document a uint32 count then the ids
typedef struct {
    uint32_t **ids;
    size_t *n;
    size_t count;
} ids_t;

static int read_ids(const char *path, ids_t *r) {
    size_t len;
    char *b = pt_read_file(path, &len);
    if (!b) return -1;
    size_t cap = 64, i = 0;
    r->ids = malloc(cap * sizeof(uint32_t *));
    r->n = malloc(cap * sizeof(size_t));
    r->count = 0;
    while (i + 4 <= len) {
        uint32_t n;
        memcpy(&n, b + i, 4);
        i += 4;
        if ((size_t)n * 4 > len - i) break;
        if (r->count == cap) {
            cap *= 2;
            r->ids = realloc(r->ids, cap * sizeof(uint32_t *));
            r->n = realloc(r->n, cap * sizeof(size_t));
        }
        r->ids[r->count] = malloc((size_t)n * 4 + 4);
        memcpy(r->ids[r->count], b + i, (size_t)n * 4);
        r->n[r->count++] = n;
        i += (size_t)n * 4;
    }
    free(b);
    return 0;
}

static void free_ids(ids_t *r) {
    for (size_t i = 0; i < r->count; i++) free(r->ids[i]);
    free(r->ids);
    free(r->n);
}

static bool same_ids(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * 4) == 0);
}

static size_t check_golden(pt_tokenizer *tok, const docs_t *d, const ids_t *want, const char *what) {
    size_t bad = 0;
    for (size_t k = 0; k < d->count && k < want->count; k++) {
        uint32_t *ids;
        size_t n;
        int rc = tokenizer_encode(tok, d->p[k], d->n[k], &ids, &n);
        if (rc || !same_ids(ids, n, want->ids[k], want->n[k])) {
            if (bad < 3) fprintf(stderr, "  %s: document %zu differs (%zu ids, expected %zu)\n", what, k, n, want->n[k]);
            bad++;
        }
        free(ids);
    }
    return bad;
}

typedef struct {
    pt_tokenizer *tok;
    const docs_t *d;
    const ids_t *want;
    size_t bad;
    int offset;
} thread_job;

static void *worker(void *arg) {
    thread_job *j = arg;
    pt_token_buf b = {0};
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < j->d->count; i++) {
            size_t k = (i + (size_t)j->offset * 7) % j->d->count;
            b.len = 0;
            if (tokenizer_encode_append(j->tok, j->d->p[k], j->d->n[k], &b) ||
                !same_ids(b.ids, b.len, j->want->ids[k], j->want->n[k]))
                j->bad++;
        }
    free(b.ids);
    return NULL;
}

static char *fixture(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/tokenizer/%s", name);
    return test_source_path(rel);
}

static void test_qwen3(void) {
    char *path = test_shared_path("assets/qwen3-tokenizer/tokenizer.json");
    double t0 = pt_now_s();
    pt_tokenizer *tok = tokenizer_load(path);
    double dt = pt_now_s() - t0;
    CHECK(tok != NULL, "load %s: %s", path, pt_last_error());
    free(path);
    if (!tok) return;
    printf("qwen3 tokenizer loaded in %.3f s\n", dt);
    CHECK(dt < 2.0, "loading took %.2f s", dt);
    CHECK(tokenizer_vocab_size(tok) == 151669, "vocab size %u", tokenizer_vocab_size(tok));
    CHECK(tokenizer_token_id(tok, "<|endoftext|>") == 151643, "eos id");
    CHECK(tokenizer_token_id(tok, "<|im_start|>") == 151644, "im_start id");
    CHECK(tokenizer_token_id(tok, "</think>") == 151668, "</think> id");
    CHECK(tokenizer_token_id(tok, "Ġthe") == 279, "Ġthe id %lld", (long long)tokenizer_token_id(tok, "Ġthe"));
    CHECK(tokenizer_token_id(tok, "no such token!") == -1, "absent token");
    CHECK(tokenizer_is_special(tok, 151643) && !tokenizer_is_special(tok, 151667) && !tokenizer_is_special(tok, 279),
          "special flags");
    CHECK(tokenizer_is_added(tok, 151667) && !tokenizer_is_added(tok, 279), "added flags");
    CHECK(!strcmp(tokenizer_sha256_hex(tok), "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"),
          "sha256 %s", tokenizer_sha256_hex(tok));
    CHECK(tokenizer_sha256(tok)[0] == 0xae && tokenizer_sha256(tok)[31] == 0xe4, "raw sha256");
    size_t l;
    const char *s = tokenizer_id_to_token(tok, 279, &l);
    CHECK(s && l == 5 && !memcmp(s, "Ġthe", 5), "id_to_token 279");
    s = tokenizer_id_to_token(tok, 151643, &l);
    CHECK(s && !strcmp(s, "<|endoftext|>"), "id_to_token eos");
    CHECK(tokenizer_id_to_token(tok, 151669, NULL) == NULL && tokenizer_id_to_token(tok, 151650 + 100, NULL) == NULL,
          "id_to_token out of range");

    // golden documents
    docs_t d = {0}, dec = {0};
    ids_t want = {0};
    char *p1 = fixture("qwen3_docs.bin"), *p2 = fixture("qwen3_ids.bin"), *p3 = fixture("qwen3_decoded.bin");
    CHECK(read_records(p1, &d) == 0 && read_ids(p2, &want) == 0 && read_records(p3, &dec) == 0, "fixtures: %s",
          pt_last_error());
    free(p1);
    free(p2);
    free(p3);
    CHECK(d.count > 40 && d.count == want.count && d.count == dec.count, "fixture counts %zu %zu %zu", d.count,
          want.count, dec.count);
    size_t bad = check_golden(tok, &d, &want, "qwen3");
    CHECK(bad == 0, "%zu of %zu Qwen3 documents differ from HF tokenizers", bad, d.count);
    // decode == HF decode (an empty record means: the document with invalid UTF-8 replaced)
    size_t dbad = 0;
    for (size_t k = 0; k < d.count && k < want.count && k < dec.count; k++) {
        char *out;
        size_t on;
        if (tokenizer_decode(tok, want.ids[k], want.n[k], &out, &on)) {
            dbad++;
            continue;
        }
        char *exp = dec.p[k];
        size_t en = dec.n[k];
        char *tmp = NULL;
        if (en == 0) {
            tmp = malloc(3 * d.n[k] + 1);
            en = tokenizer_utf8_replace(d.p[k], d.n[k], tmp);
            exp = tmp;
        }
        if (on != en || memcmp(out, exp, on)) dbad++;
        free(tmp);
        free(out);
    }
    CHECK(dbad == 0, "%zu documents decode differently from HF", dbad);

    // the heap BPE gives the same result as the quadratic scan
    // (a second tokenizer, so that no BPE cache entry of the first run is reused)
    tokenizer_set_bpe_heap_threshold(0);
    char *hp = test_shared_path("assets/qwen3-tokenizer/tokenizer.json");
    pt_tokenizer *tokh = tokenizer_load(hp);
    free(hp);
    bad = tokh ? check_golden(tokh, &d, &want, "qwen3 heap BPE") : 1;
    CHECK(bad == 0, "heap BPE: %zu documents differ", bad);
    tokenizer_set_bpe_heap_threshold(64);

    // concurrent encoders on one tokenizer
    pthread_t th[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){tok, &d, &want, 0, i};
        pthread_create(&th[i], NULL, worker, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) CHECK(jobs[i].bad == 0, "thread %d: %zu mismatches", i, jobs[i].bad);

    // edge cases
    uint32_t *ids;
    size_t n;
    CHECK(tokenizer_encode(tok, "", 0, &ids, &n) == 0 && n == 0, "empty input");
    free(ids);
    CHECK(tokenizer_encode(tok, "<|endoftext|>", 13, &ids, &n) == 0 && n == 1 && ids[0] == 151643, "eos alone");
    free(ids);
    CHECK(tokenizer_encode(tok, "Hello world", 11, &ids, &n) == 0 && n == 2 && ids[0] == 9707 && ids[1] == 1879,
          "Hello world");
    free(ids);
    const char nul[] = "a\0b\0\0";
    CHECK(tokenizer_encode(tok, nul, 5, &ids, &n) == 0 && n >= 3, "NUL bytes");
    char *out;
    size_t on;
    CHECK(tokenizer_decode(tok, ids, n, &out, &on) == 0 && on == 5 && !memcmp(out, nul, 5), "NUL round trip");
    free(out);
    free(ids);
    // long whitespace runs and long words (regex JIT stack, heap BPE)
    size_t big = 1 << 20;
    char *sp = malloc(big + 2);
    memset(sp, ' ', big);
    sp[big] = 'x';
    for (int variant = 0; variant < 3; variant++) {
        char fill = variant == 0 ? ' ' : variant == 1 ? 'a' : '\n';
        memset(sp, fill, big);
        double t1 = pt_now_s();
        int rc = tokenizer_encode(tok, sp, big + 1, &ids, &n);
        CHECK(rc == 0, "1 MiB of '%c': %s", fill, pt_last_error());
        if (rc == 0) {
            CHECK(tokenizer_decode_bytes(tok, ids, n, &out, &on) == 0 && on == big + 1 && !memcmp(out, sp, big + 1),
                  "1 MiB of '%c' round trip", fill);
            free(out);
        }
        free(ids);
        CHECK(pt_now_s() - t1 < 10, "1 MiB of '%c' took %.1f s", fill, pt_now_s() - t1);
    }
    free(sp);
    // invalid UTF-8 is replaced like Python's errors="replace"
    static const struct {
        const char *in, *out;
    } inv[] = {
        {"a\x80" "b", "a\xEF\xBF\xBD" "b"},
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xE0\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xF0\x9F\x98", "\xEF\xBF\xBD"},
        {"\xF0\x9F\x98x", "\xEF\xBF\xBDx"},
        {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xE2\x82", "\xEF\xBF\xBD"},
        {"\xFF\xFE", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xC3\xA9\xC3", "\xC3\xA9\xEF\xBF\xBD"},
    };
    for (size_t i = 0; i < PT_ARRAY_LEN(inv); i++) {
        char buf[64];
        size_t il = strlen(inv[i].in);
        size_t ol = tokenizer_utf8_replace(inv[i].in, il, buf);
        CHECK(ol == strlen(inv[i].out) && !memcmp(buf, inv[i].out, ol), "utf8 replace case %zu", i);
        CHECK(tokenizer_utf8_valid(inv[i].in, il) == (ol == il && !memcmp(buf, inv[i].in, il)), "utf8 valid case %zu", i);
        uint32_t *a, *b;
        size_t na, nb;
        tokenizer_encode(tok, inv[i].in, il, &a, &na);
        tokenizer_encode(tok, buf, ol, &b, &nb);
        CHECK(same_ids(a, na, b, nb), "encode(invalid) == encode(replaced) case %zu", i);
        free(a);
        free(b);
    }
    // decode errors
    uint32_t oob[] = {9707, 151669};
    CHECK(tokenizer_decode(tok, oob, 2, &out, &on) == -1 && strstr(pt_last_error(), "151669") &&
              strstr(pt_last_error(), "out of range"),
          "decode out of range: %s", pt_last_error());
    uint32_t raw_ids[] = {9707, 151643, 220};
    CHECK(tokenizer_decode(tok, raw_ids, 3, &out, &on) == 0 && !strcmp(out, "Hello<|endoftext|> "), "decode specials");
    free(out);
    uint32_t half[1] = {0};  // find a token that is an incomplete UTF-8 sequence on its own
    bool invalid = false;
    for (uint32_t id = 0; id < 151643 && !invalid; id++) {
        half[0] = id;
        if (tokenizer_decode_bytes(tok, half, 1, &out, &on) == 0) {
            invalid = !tokenizer_utf8_valid(out, on);
            free(out);
        }
    }
    CHECK(invalid, "no token is invalid UTF-8 on its own?");
    if (invalid) {
        CHECK(tokenizer_decode(tok, half, 1, &out, &on) == 0 && tokenizer_utf8_valid(out, on) &&
                  strstr(out, "\xEF\xBF\xBD"),
              "decode replaces invalid UTF-8");
        free(out);
    }
    free_docs(&d);
    free_docs(&dec);
    free_ids(&want);
    tokenizer_free(tokh);
    tokenizer_free(tok);
}

static void test_variants(void) {
    static const char *names[] = {"mini_added", "mini_gpt2_legacy", "mini_behaviours", "mini_ignore_merges",
                                  "mini_fallback", "mini_unk", "mini_nounk"};
    docs_t d = {0};
    char *dp = fixture("variant_docs.bin");
    CHECK(read_records(dp, &d) == 0 && d.count > 50, "variant docs");
    free(dp);
    for (size_t i = 0; i < PT_ARRAY_LEN(names); i++) {
        char f[128];
        snprintf(f, sizeof f, "%s.json", names[i]);
        char *jp = fixture(f);
        snprintf(f, sizeof f, "%s_ids.bin", names[i]);
        char *ip = fixture(f);
        pt_tokenizer *tok = tokenizer_load(jp);
        CHECK(tok != NULL, "%s: %s", names[i], pt_last_error());
        ids_t want = {0};
        CHECK(read_ids(ip, &want) == 0 && want.count == d.count, "%s ids", names[i]);
        if (tok && want.count == d.count) {
            size_t bad = check_golden(tok, &d, &want, names[i]);
            CHECK(bad == 0, "%s: %zu of %zu documents differ from HF tokenizers", names[i], bad, d.count);
            for (size_t k = 0; k < want.count; k++) {
                char *out;
                size_t on;
                if (tokenizer_decode(tok, want.ids[k], want.n[k], &out, &on)) {
                    CHECK(0, "%s: decode doc %zu: %s", names[i], k, pt_last_error());
                    break;
                }
                free(out);
            }
        }
        free_ids(&want);
        tokenizer_free(tok);
        free(jp);
        free(ip);
    }
    free_docs(&d);
}

// Loads mini_gpt2_legacy.json, applies `edit` (a JSON object merged into the named sub-object, or replacing
// the top-level key when sub is NULL) and expects a load error containing `expect`.
static void expect_error(const char *key, const char *json_value, const char *expect) {
    char *jp = fixture("mini_gpt2_legacy.json");
    cJSON *root = pt_json_parse_file(jp);
    free(jp);
    CHECK(root != NULL, "base fixture");
    if (!root) return;
    cJSON *val = cJSON_Parse(json_value);
    CHECK(val != NULL, "bad test JSON %s", json_value);
    const char *dot = strchr(key, '.');
    if (dot) {
        char top[64];
        snprintf(top, sizeof top, "%.*s", (int)(dot - key), key);
        cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, top);
        cJSON_DeleteItemFromObjectCaseSensitive(obj, dot + 1);
        cJSON_AddItemToObject(obj, dot + 1, val);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(root, key);
        cJSON_AddItemToObject(root, key, val);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    pt_clear_error();
    pt_tokenizer *t = tokenizer_load_json(text, strlen(text), "bad.json");
    CHECK(t == NULL && strstr(pt_last_error(), expect) && strstr(pt_last_error(), "bad.json"),
          "%s = %s: expected an error with '%s', got '%s'", key, json_value, expect, t ? "(loaded)" : pt_last_error());
    tokenizer_free(t);
    free(text);
}

static void test_errors(void) {
    pt_clear_error();
    CHECK(tokenizer_load("/nonexistent/tokenizer.json") == NULL && strstr(pt_last_error(), "/nonexistent"),
          "missing file: %s", pt_last_error());
    CHECK(tokenizer_load_json("{\"model\": ", 10, "trunc.json") == NULL && strstr(pt_last_error(), "trunc.json"),
          "malformed: %s", pt_last_error());
    CHECK(tokenizer_load_json("[1,2]", 5, "arr.json") == NULL && strstr(pt_last_error(), "object"), "array top");
    {  // a vocabulary token cut inside a UTF-8 sequence (ASan: read past the token string; found by fuzzing)
        size_t n;
        char *path = test_source_path("tests/fixtures/tokenizer/mini_added.json");
        char *text = pt_read_file(path, &n);
        char *v = text ? strstr(text, "\"vocab\"") : NULL;
        char *brace = v ? strchr(v, '{') : NULL;
        CHECK(brace != NULL, "mini_added.json has a vocab object");
        if (brace) {
            static const char bad[] = "\"\xe4\xbd\": 99999, ";
            const size_t at = (size_t)(brace + 1 - text);
            char *cut = malloc(n + sizeof bad);
            memcpy(cut, text, at);
            memcpy(cut + at, bad, sizeof bad - 1);
            memcpy(cut + at + sizeof bad - 1, text + at, n - at);
            pt_tokenizer *t = tokenizer_load_json(cut, n + sizeof bad - 1, "cut.json");
            CHECK(t == NULL && strstr(pt_last_error(), "cut.json: not valid UTF-8 at byte"), "truncated UTF-8 token: %s",
                  t ? "(loaded)" : pt_last_error());
            tokenizer_free(t);
            free(cut);
        }
        free(text);
        free(path);
    }
    CHECK(tokenizer_load_json("{}", 2, "empty.json") == NULL && strstr(pt_last_error(), "model"), "no model: %s",
          pt_last_error());
    expect_error("model.type", "\"WordPiece\"", "WordPiece");
    expect_error("model.dropout", "0.1", "dropout");
    expect_error("model.continuing_subword_prefix", "\"##\"", "continuing_subword_prefix");
    expect_error("model.merges", "[\"a b c\"]", "merges[0]");
    expect_error("model.merges", "[[\"a\", \"zzzz\"]]", "zzzz");
    expect_error("model.merges", "[7]", "merges[0]");
    expect_error("model.vocab", "{\"a\": -1}", "vocab");
    expect_error("model.vocab", "[]", "vocab");
    expect_error("pre_tokenizer", "{\"type\": \"Metaspace\", \"replacement\": \"_\"}", "Metaspace");
    expect_error("pre_tokenizer", "null", "ByteLevel");
    expect_error("pre_tokenizer", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Isolated\", "
                                  "\"invert\": false}",
                 "ByteLevel");
    expect_error("pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                                  "{\"Regex\": \"(a\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
                                  "\"ByteLevel\"}]}",
                 "regex");
    expect_error("pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                                  "{\"Regex\": \"a\"}, \"behavior\": \"Sideways\", \"invert\": false}, {\"type\": "
                                  "\"ByteLevel\"}]}",
                 "Sideways");
    expect_error("normalizer", "{\"type\": \"Lowercase\"}", "Lowercase");
    expect_error("decoder", "{\"type\": \"WordPiece\"}", "WordPiece");
    expect_error("added_tokens", "[{\"id\": 5}]", "content");
    expect_error("added_tokens", "{}", "added_tokens");
    expect_error("version", "\"2.0\"", "version");

    // a token id that is a hole in the vocabulary
    const char *holes = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 5}, \"merges\": []}, "
                        "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}}";
    pt_tokenizer *t = tokenizer_load_json(holes, strlen(holes), "holes.json");
    CHECK(t != NULL, "holes: %s", pt_last_error());
    if (t) {
        uint32_t ids[] = {0, 3};
        char *out;
        size_t on;
        CHECK(tokenizer_decode(t, ids, 2, &out, &on) == -1 && strstr(pt_last_error(), "not in the vocabulary"),
              "hole: %s", pt_last_error());
        CHECK(tokenizer_vocab_size(t) == 6, "holes vocab size");
        // bytes without a token and no unk: dropped, like HF
        uint32_t *e;
        size_t n;
        CHECK(tokenizer_encode(t, "abc", 3, &e, &n) == 0 && n == 2 && e[0] == 0 && e[1] == 5, "dropped chars");
        free(e);
        tokenizer_free(t);
    }
    // unk token missing from the vocabulary fails at encode time, as in HF
    const char *unk = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": \"<unk>\"}, "
                      "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, \"decoder\": null}";
    t = tokenizer_load_json(unk, strlen(unk), "unk.json");
    CHECK(t != NULL, "unk: %s", pt_last_error());
    if (t) {
        uint32_t *e;
        size_t n;
        CHECK(tokenizer_encode(t, "ab", 2, &e, &n) == -1 && strstr(pt_last_error(), "<unk>"), "missing unk: %s",
              pt_last_error());
        free(e);
        CHECK(tokenizer_encode(t, "a", 1, &e, &n) == 0 && n == 1, "no unk needed");
        free(e);
        uint32_t ids[] = {0, 0};
        char *out;
        size_t on;
        CHECK(tokenizer_decode(t, ids, 2, &out, &on) == 0 && !strcmp(out, "a a"), "no decoder joins with spaces");
        free(out);
        tokenizer_free(t);
    }
}

static void test_cli(void) {
    const char *exe = getenv("PORTATRAIN");
    if (!exe || !pt_file_exists(exe)) {
        printf("PORTATRAIN not set: CLI checks skipped\n");
        return;
    }
    char *tp = test_shared_path("assets/qwen3-tokenizer/tokenizer.json");
    char cmd[4096];
    char *out, *err;
    snprintf(cmd, sizeof cmd, "printf 'Hello world' | %s tokenizer encode --tokenizer %s", exe, tp);
    CHECK(test_run(cmd, &out, &err) == 0 && !strcmp(out, "9707 1879\n"), "cli encode: '%s' %s", out, err);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "printf 'Hello world' | %s tokenizer encode --json --tokenizer %s", exe, tp);
    CHECK(test_run(cmd, &out, &err) == 0 && !strcmp(out, "[9707, 1879]\n"), "cli encode --json: '%s'", out);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "printf '9707 1879\\n151643' | %s tokenizer decode --tokenizer %s", exe, tp);
    CHECK(test_run(cmd, &out, &err) == 0 && !strcmp(out, "Hello world<|endoftext|>"), "cli decode: '%s' %s", out, err);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "printf '[9707, 1879]' | %s tokenizer decode --tokenizer %s", exe, tp);
    CHECK(test_run(cmd, &out, &err) == 0 && !strcmp(out, "Hello world"), "cli decode json: '%s'", out);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "printf '9707 99999999' | %s tokenizer decode --tokenizer %s", exe, tp);
    CHECK(test_run(cmd, &out, &err) == 1 && strstr(err, "portatrain: error:") && strstr(err, "out of range"),
          "cli decode out of range: %s", err);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "printf '12 abc' | %s tokenizer decode --tokenizer %s", exe, tp);
    CHECK(test_run(cmd, &out, &err) == 1 && strstr(err, "abc"), "cli decode garbage: %s", err);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "printf 'x' | %s tokenizer encode --tokenizer /nonexistent.json", exe);
    CHECK(test_run(cmd, &out, &err) == 1 && strstr(err, "portatrain: error:") && strstr(err, "/nonexistent.json"),
          "cli missing tokenizer: %s", err);
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "printf 'x' | %s tokenizer encode", exe);
    CHECK(test_run(cmd, &out, &err) == 2, "cli usage error");
    free(out);
    free(err);
    free(tp);
}

int main(void) {
    pt_set_quiet(true);
    test_qwen3();
    test_variants();
    test_errors();
    test_cli();
    return test_summary("test_tokenizer");
}
