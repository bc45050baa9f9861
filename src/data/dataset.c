#include "data/dataset.h"
#include "data/shard.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/hash.h"
#include "util/json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ---------------------------------------------------------------- helpers

void pt_hex_from_bytes(const uint8_t b[32], char hex[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[b[i] >> 4];
        hex[2 * i + 1] = digits[b[i] & 15];
    }
    hex[64] = 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int pt_bytes_from_hex(const char *hex, uint8_t b[32]) {
    if (!hex || strlen(hex) != 64) return -1;
    for (int i = 0; i < 32; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static bool is_hex64(const char *s) {
    uint8_t tmp[32];
    return pt_bytes_from_hex(s, tmp) == 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

bool pt_dataset_path_is_index(const char *path) { return pt_is_dir(path) || ends_with(path, ".json"); }

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return pt_strdup(".");
    if (slash == path) return pt_strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = pt_malloc(n + 1);
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

void pt_dataset_free(pt_dataset *d) {
    if (!d) return;
    for (int i = 0; i < d->num_shards; i++) {
        free(d->shards[i].file);
        free(d->shards[i].path);
    }
    for (int i = 0; i < d->num_inputs; i++) free(d->inputs[i].path);
    free(d->shards);
    free(d->inputs);
    free(d->dir);
    free(d->index_path);
    memset(d, 0, sizeof *d);
}

// ---------------------------------------------------------------- reading

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int load_bare_dir(pt_dataset *d, const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp) {
        pt_set_error("%s: cannot open directory: %s", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".bin")) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            names = pt_realloc(names, (size_t)cap * sizeof *names);
        }
        names[n++] = pt_strdup(e->d_name);
    }
    closedir(dp);
    if (n == 0) {
        free(names);
        pt_set_error("%s: no %s and no *.bin shards in this directory", dir, PT_DATASET_INDEX);
        return -1;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    d->dir = pt_strdup(dir);
    d->eos_id = -1;
    d->num_shards = n;
    d->shards = pt_calloc((size_t)n, sizeof *d->shards);
    for (int i = 0; i < n; i++) {
        d->shards[i].file = names[i];
        d->shards[i].path = pt_path_join(dir, names[i]);
    }
    free(names);
    return 0;
}

static int get_u64(const cJSON *o, const char *key, uint64_t *out, const char *what, bool required) {
    int64_t v = 0;
    int rc = pt_json_get_int(o, key, &v, what);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (required) {
            pt_set_error("%s: missing \"%s\"", what, key);
            return -1;
        }
        return 0;
    }
    if (v < 0) {
        pt_set_error("%s: \"%s\" must be >= 0 (got %lld)", what, key, (long long)v);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static int get_sha(const cJSON *o, const char *key, char out[65], const char *what) {
    const char *s = NULL;
    int rc = pt_json_get_string(o, key, &s, what);
    if (rc < 0) return -1;
    out[0] = 0;
    if (rc == 1 || !*s) return 0;
    if (!is_hex64(s)) {
        pt_set_error("%s: \"%s\" is not a 64-digit hex sha256: '%s'", what, key, s);
        return -1;
    }
    for (int i = 0; i < 65; i++) out[i] = (char)(s[i] >= 'A' && s[i] <= 'F' ? s[i] - 'A' + 'a' : s[i]);
    return 0;
}

static int load_index(pt_dataset *d, const char *index_path) {
    cJSON *root = pt_json_parse_file(index_path);
    if (!root) return -1;
    char what[4200];
    snprintf(what, sizeof what, "%s", index_path);
    int rc = -1;
    const char *fmt = NULL;
    int64_t ver = 0, vocab = 0, eos = -1;
    if (!cJSON_IsObject(root)) {
        pt_set_error("%s: not a JSON object", index_path);
        goto done;
    }
    if (pt_json_get_string(root, "format", &fmt, what) != 0 || strcmp(fmt, PT_DATASET_FORMAT) != 0) {
        pt_set_error("%s: \"format\" must be \"%s\"", index_path, PT_DATASET_FORMAT);
        goto done;
    }
    if (pt_json_get_int(root, "version", &ver, what) != 0 || ver != PT_DATASET_VERSION) {
        pt_set_error("%s: unsupported dataset version (this build reads version %d)", index_path,
                     PT_DATASET_VERSION);
        goto done;
    }
    if (pt_json_get_int(root, "vocab_size", &vocab, what) != 0 || vocab <= 0 || vocab > INT32_MAX) {
        pt_set_error("%s: \"vocab_size\" must be a positive integer", index_path);
        goto done;
    }
    if (pt_json_get_int(root, "eos_id", &eos, what) < 0 || eos < -1 || eos >= vocab) {
        pt_set_error("%s: \"eos_id\" must be -1 or an id below vocab_size %lld", index_path, (long long)vocab);
        goto done;
    }
    d->dir = dir_of(index_path);
    d->index_path = pt_strdup(index_path);
    d->vocab_size = (uint32_t)vocab;
    d->eos_id = eos;
    if (get_sha(root, "tokenizer_sha256", d->tokenizer_sha256, what) != 0) goto done;
    if (get_u64(root, "num_tokens", &d->num_tokens, what, true) != 0) goto done;
    if (get_u64(root, "num_documents", &d->num_documents, what, false) != 0) goto done;
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(root, "shards");
    if (!cJSON_IsArray(shards) || cJSON_GetArraySize(shards) == 0) {
        pt_set_error("%s: \"shards\" must be a non-empty array", index_path);
        goto done;
    }
    d->num_shards = cJSON_GetArraySize(shards);
    d->shards = pt_calloc((size_t)d->num_shards, sizeof *d->shards);
    uint64_t total = 0;
    for (int i = 0; i < d->num_shards; i++) {
        const cJSON *s = cJSON_GetArrayItem(shards, i);
        char w[4300];
        snprintf(w, sizeof w, "%s: shards[%d]", index_path, i);
        const char *file = NULL;
        if (!cJSON_IsObject(s) || pt_json_get_string(s, "file", &file, w) != 0 || !*file) {
            pt_set_error("%s: needs a \"file\" string", w);
            goto done;
        }
        if (strstr(file, "..") || file[0] == '/') {
            pt_set_error("%s: \"file\" must be a path inside the dataset directory: '%s'", w, file);
            goto done;
        }
        d->shards[i].file = pt_strdup(file);
        d->shards[i].path = pt_path_join(d->dir, file);
        if (get_u64(s, "num_tokens", &d->shards[i].num_tokens, w, true) != 0) goto done;
        if (get_u64(s, "num_documents", &d->shards[i].num_documents, w, false) != 0) goto done;
        if (get_sha(s, "sha256", d->shards[i].sha256, w) != 0) goto done;
        total += d->shards[i].num_tokens;
    }
    if (total != d->num_tokens) {
        pt_set_error("%s: \"num_tokens\" %llu differs from the sum over shards %llu", index_path,
                     (unsigned long long)d->num_tokens, (unsigned long long)total);
        goto done;
    }
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (cJSON_IsArray(inputs)) {
        int n = cJSON_GetArraySize(inputs);
        d->inputs = pt_calloc((size_t)(n ? n : 1), sizeof *d->inputs);
        for (int i = 0; i < n; i++) {
            const cJSON *in = cJSON_GetArrayItem(inputs, i);
            const char *p = NULL;
            if (!cJSON_IsObject(in) || pt_json_get_string(in, "path", &p, what) != 0) continue;
            pt_dataset_input *di = &d->inputs[d->num_inputs++];
            di->path = pt_strdup(p);
            char w[4300];
            snprintf(w, sizeof w, "%s: inputs[%d]", index_path, i);
            if (get_u64(in, "bytes", &di->bytes, w, false) != 0 || get_u64(in, "documents", &di->documents, w, false) != 0 ||
                get_sha(in, "sha256", di->sha256, w) != 0)
                goto done;
        }
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc != 0) pt_dataset_free(d);
    return rc;
}

int pt_dataset_load(pt_dataset *d, const char *path) {
    memset(d, 0, sizeof *d);
    d->eos_id = -1;
    if (pt_is_dir(path)) {
        char *index = pt_path_join(path, PT_DATASET_INDEX);
        int rc = pt_file_exists(index) ? load_index(d, index) : load_bare_dir(d, path);
        free(index);
        return rc;
    }
    return load_index(d, path);
}

int pt_dataset_save(const pt_dataset *d, const char *path) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", PT_DATASET_FORMAT);
    cJSON_AddNumberToObject(root, "version", PT_DATASET_VERSION);
    cJSON_AddStringToObject(root, "tokenizer_sha256", d->tokenizer_sha256);
    cJSON_AddNumberToObject(root, "vocab_size", (double)d->vocab_size);
    cJSON_AddNumberToObject(root, "eos_id", (double)d->eos_id);
    cJSON_AddNumberToObject(root, "num_tokens", (double)d->num_tokens);
    cJSON_AddNumberToObject(root, "num_documents", (double)d->num_documents);
    cJSON *shards = cJSON_AddArrayToObject(root, "shards");
    for (int i = 0; i < d->num_shards; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "file", d->shards[i].file);
        cJSON_AddNumberToObject(s, "num_tokens", (double)d->shards[i].num_tokens);
        cJSON_AddNumberToObject(s, "num_documents", (double)d->shards[i].num_documents);
        cJSON_AddStringToObject(s, "sha256", d->shards[i].sha256);
        cJSON_AddItemToArray(shards, s);
    }
    cJSON *inputs = cJSON_AddArrayToObject(root, "inputs");
    for (int i = 0; i < d->num_inputs; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "path", d->inputs[i].path);
        cJSON_AddNumberToObject(s, "bytes", (double)d->inputs[i].bytes);
        cJSON_AddNumberToObject(s, "documents", (double)d->inputs[i].documents);
        cJSON_AddStringToObject(s, "sha256", d->inputs[i].sha256);
        cJSON_AddItemToArray(inputs, s);
    }
    int rc = pt_json_write_file(path, root);
    cJSON_Delete(root);
    return rc;
}

// ---------------------------------------------------------------- shard writer

struct pt_shard_writer {
    char *path, *tmp;
    int fd;
    uint64_t n;
    uint32_t vocab;
    uint8_t tok_sha[32];
    EVP_MD_CTX *md;
    uint32_t *buf;
    size_t buf_n;
};

#define SW_BUF_TOKENS (1u << 16)

pt_shard_writer *pt_shard_writer_open(const char *path, uint32_t vocab_size, const uint8_t tokenizer_sha[32]) {
    pt_shard_writer *w = pt_calloc(1, sizeof *w);
    w->path = pt_strdup(path);
    size_t n = strlen(path) + 8;
    w->tmp = pt_malloc(n);
    snprintf(w->tmp, n, "%s.tmp", path);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        pt_set_error("%s: cannot create: %s", w->tmp, strerror(errno));
        free(w->path);
        free(w->tmp);
        free(w);
        return NULL;
    }
    w->vocab = vocab_size;
    if (tokenizer_sha) memcpy(w->tok_sha, tokenizer_sha, 32);
    w->md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(w->md, EVP_sha256(), NULL);
    w->buf = pt_malloc(SW_BUF_TOKENS * sizeof *w->buf);
    static const int32_t zero[PT_SHARD_HEADER_INTS];
    if (pt_write_all(w->fd, zero, sizeof zero, w->tmp) != 0) {
        pt_shard_writer_abort(w);
        return NULL;
    }
    return w;
}

static int sw_flush(pt_shard_writer *w) {
    if (!w->buf_n) return 0;
    EVP_DigestUpdate(w->md, w->buf, w->buf_n * 4);
    int rc = pt_write_all(w->fd, w->buf, w->buf_n * 4, w->tmp);
    w->buf_n = 0;
    return rc;
}

int pt_shard_writer_append(pt_shard_writer *w, const uint32_t *ids, size_t n) {
    if (w->n + n > INT32_MAX) {
        pt_set_error("%s: more than 2^31-1 tokens, the v1 limit per shard", w->path);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= w->vocab) {
            pt_set_error("%s: token id %u >= vocab size %u", w->path, ids[i], w->vocab);
            return -1;
        }
        w->buf[w->buf_n++] = ids[i];
        if (w->buf_n == SW_BUF_TOKENS && sw_flush(w) != 0) return -1;
    }
    w->n += n;
    return 0;
}

uint64_t pt_shard_writer_tokens(const pt_shard_writer *w) { return w->n; }

static void sw_free(pt_shard_writer *w) {
    if (w->fd >= 0) close(w->fd);
    if (w->md) EVP_MD_CTX_free(w->md);
    free(w->buf);
    free(w->path);
    free(w->tmp);
    free(w);
}

int pt_shard_writer_close(pt_shard_writer *w, char content_sha_hex[65]) {
    if (sw_flush(w) != 0) {
        pt_shard_writer_abort(w);
        return -1;
    }
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_DigestFinal_ex(w->md, md, &mdlen);
    int32_t h[PT_SHARD_HEADER_INTS] = {0};
    h[0] = PT_SHARD_MAGIC;
    h[1] = PT_SHARD_VERSION;
    h[2] = (int32_t)w->n;
    h[3] = 4;
    h[4] = (int32_t)w->vocab;
    memcpy(&h[PT_SHARD_TOKENIZER_SHA_SLOT], w->tok_sha, 32);
    memcpy(&h[PT_SHARD_CONTENT_SHA_SLOT], md, 32);
    if (pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
        pt_set_error("%s: cannot write the header: %s", w->tmp, strerror(errno));
        pt_shard_writer_abort(w);
        return -1;
    }
    if (fsync(w->fd) != 0 || close(w->fd) != 0) {
        w->fd = -1;
        pt_set_error("%s: fsync/close failed: %s", w->tmp, strerror(errno));
        pt_shard_writer_abort(w);
        return -1;
    }
    w->fd = -1;
    if (rename(w->tmp, w->path) != 0) {
        pt_set_error("%s: cannot rename to %s: %s", w->tmp, w->path, strerror(errno));
        pt_shard_writer_abort(w);
        return -1;
    }
    char *dir = dir_of(w->path);
    pt_fsync_dir(dir);
    free(dir);
    if (content_sha_hex) pt_hex_from_bytes(md, content_sha_hex);
    sw_free(w);
    return 0;
}

void pt_shard_writer_abort(pt_shard_writer *w) {
    if (!w) return;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    unlink(w->tmp);
    sw_free(w);
}

// ---------------------------------------------------------------- dataset writer

struct pt_dataset_writer {
    char *dir, *prefix;
    uint64_t shard_tokens;
    uint32_t vocab;
    uint8_t tok_sha[32];
    bool have_tok_sha;
    int64_t eos;
    pt_dataset ds;  // shards completed so far + inputs
    int shard_cap, input_cap;
    int renamed;  // shards [0, renamed) already moved to their final names
    pt_shard_writer *cur;
    uint64_t cur_docs;
    uint64_t tokens, docs;
};

pt_dataset_writer *pt_dataset_writer_open(const char *dir, const char *prefix, uint64_t shard_tokens,
                                          uint32_t vocab_size, const uint8_t tokenizer_sha[32], int64_t eos_id) {
    if (shard_tokens == 0 || shard_tokens > INT32_MAX) {
        pt_set_error("shard size must be 1 .. 2^31-1 tokens (got %llu)", (unsigned long long)shard_tokens);
        return NULL;
    }
    if (vocab_size == 0 || vocab_size > INT32_MAX) {
        pt_set_error("vocab size %u out of range for a v1 shard", vocab_size);
        return NULL;
    }
    if (pt_mkdir_p(dir) != 0) return NULL;
    // A dataset already in dir stays untouched (and readable) until finish:
    // shards are written under hidden temporary names and only renamed over
    // the old ones once every document is in (docs/DATA.md).
    pt_dataset_writer *w = pt_calloc(1, sizeof *w);
    w->dir = pt_strdup(dir);
    w->prefix = pt_strdup(prefix && *prefix ? prefix : "shard");
    w->shard_tokens = shard_tokens;
    w->vocab = vocab_size;
    if (tokenizer_sha) {
        memcpy(w->tok_sha, tokenizer_sha, 32);
        w->have_tok_sha = true;
    }
    w->eos = eos_id;
    return w;
}

static int dw_close_shard(pt_dataset_writer *w) {
    if (!w->cur) return 0;
    uint64_t n = pt_shard_writer_tokens(w->cur);
    char sha[65];
    pt_shard_writer *cur = w->cur;
    w->cur = NULL;
    if (pt_shard_writer_close(cur, sha) != 0) return -1;
    pt_dataset_shard *s = &w->ds.shards[w->ds.num_shards - 1];
    s->num_tokens = n;
    s->num_documents = w->cur_docs;
    memcpy(s->sha256, sha, 65);
    w->cur_docs = 0;
    return 0;
}

static int dw_open_shard(pt_dataset_writer *w) {
    if (w->ds.num_shards == w->shard_cap) {
        w->shard_cap = w->shard_cap ? 2 * w->shard_cap : 8;
        w->ds.shards = pt_realloc(w->ds.shards, (size_t)w->shard_cap * sizeof *w->ds.shards);
    }
    char name[256], tmp[300];
    snprintf(name, sizeof name, "%s-%05d.bin", w->prefix, w->ds.num_shards);
    // Leading dot and no .bin suffix: a bare-directory read never picks it up.
    snprintf(tmp, sizeof tmp, ".%s.partial", name);
    pt_dataset_shard *s = &w->ds.shards[w->ds.num_shards];
    memset(s, 0, sizeof *s);
    s->file = pt_strdup(name);
    s->path = pt_path_join(w->dir, tmp);  // the final path once finish renames it
    w->ds.num_shards++;
    w->cur = pt_shard_writer_open(s->path, w->vocab, w->have_tok_sha ? w->tok_sha : NULL);
    return w->cur ? 0 : -1;
}

int pt_dataset_writer_add(pt_dataset_writer *w, const uint32_t *ids, size_t n) {
    bool has_eos = w->eos >= 0 && n > 0 && ids[n - 1] == (uint32_t)w->eos;
    while (n > 0) {
        if (!w->cur && dw_open_shard(w) != 0) return -1;
        uint64_t room = w->shard_tokens - pt_shard_writer_tokens(w->cur);
        size_t k = n < room ? n : (size_t)room;
        if (pt_shard_writer_append(w->cur, ids, k) != 0) return -1;
        ids += k;
        n -= k;
        w->tokens += k;
        if (n == 0 && has_eos) w->cur_docs++;  // a document counts where its EOS lands
        if (pt_shard_writer_tokens(w->cur) == w->shard_tokens && dw_close_shard(w) != 0) return -1;
    }
    w->docs++;
    return 0;
}

void pt_dataset_writer_add_input(pt_dataset_writer *w, const char *path, uint64_t bytes, uint64_t documents,
                                 const char sha256_hex[65]) {
    if (w->ds.num_inputs == w->input_cap) {
        w->input_cap = w->input_cap ? 2 * w->input_cap : 8;
        w->ds.inputs = pt_realloc(w->ds.inputs, (size_t)w->input_cap * sizeof *w->ds.inputs);
    }
    pt_dataset_input *in = &w->ds.inputs[w->ds.num_inputs++];
    memset(in, 0, sizeof *in);
    in->path = pt_strdup(path);
    in->bytes = bytes;
    in->documents = documents;
    if (sha256_hex) snprintf(in->sha256, sizeof in->sha256, "%s", sha256_hex);
}

uint64_t pt_dataset_writer_tokens(const pt_dataset_writer *w) { return w->tokens; }
uint64_t pt_dataset_writer_documents(const pt_dataset_writer *w) { return w->docs; }

// Removes hidden temporaries of earlier runs that were killed (SIGKILL, Ctrl-C, a pre-empted job) before
// their finish or abort: ".PREFIX-NNNNN.bin.partial" and its ".tmp". Called once this run's own are renamed,
// so every such name left is stale (up to a shard's size each, and hidden).
static void remove_stale_partials(const char *dir, const char *prefix) {
    DIR *dp = opendir(dir);
    if (!dp) return;
    const size_t pl = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(dp))) {
        const char *n = e->d_name, *p = n + 1;
        if (n[0] != '.' || strncmp(p, prefix, pl) != 0 || p[pl] != '-') continue;
        p += pl + 1;
        size_t digits = strspn(p, "0123456789");
        if (digits < 5) continue;
        p += digits;
        if (strcmp(p, ".bin.partial") != 0 && strcmp(p, ".bin.partial.tmp") != 0) continue;
        char *path = pt_path_join(dir, n);
        unlink(path);
        free(path);
    }
    closedir(dp);
}

int pt_dataset_writer_finish(pt_dataset_writer *w, pt_dataset *out) {
    if (w->tokens == 0) {
        pt_set_error("empty corpus: the inputs hold no document (nothing written to %s)", w->dir);
        pt_dataset_writer_abort(w);
        return -1;
    }
    if (dw_close_shard(w) != 0) {
        pt_dataset_writer_abort(w);
        return -1;
    }
    pt_dataset *d = &w->ds;
    // Commit: rename the shards over the old dataset's, then replace the index
    // atomically. An old index read meanwhile names shards whose sha256 no
    // longer matches, which the loader reports instead of mixing the two.
    for (int i = 0; i < d->num_shards; i++) {
        char *final = pt_path_join(w->dir, d->shards[i].file);
        if (rename(d->shards[i].path, final) != 0) {
            pt_set_error("%s: cannot rename to %s: %s", d->shards[i].path, final, strerror(errno));
            free(final);
            pt_dataset_writer_abort(w);
            return -1;
        }
        free(d->shards[i].path);
        d->shards[i].path = final;
        w->renamed = i + 1;
    }
    pt_fsync_dir(w->dir);
    d->dir = pt_strdup(w->dir);
    d->index_path = pt_path_join(w->dir, PT_DATASET_INDEX);
    if (w->have_tok_sha) pt_hex_from_bytes(w->tok_sha, d->tokenizer_sha256);
    d->vocab_size = w->vocab;
    d->eos_id = w->eos;
    d->num_tokens = w->tokens;
    d->num_documents = 0;
    for (int i = 0; i < d->num_shards; i++) d->num_documents += d->shards[i].num_documents;
    if (w->eos < 0) d->num_documents = w->docs;
    if (pt_dataset_save(d, d->index_path) != 0) {
        pt_dataset_writer_abort(w);
        return -1;
    }
    remove_stale_partials(w->dir, w->prefix);
    if (out) *out = *d;
    else pt_dataset_free(d);
    free(w->dir);
    free(w->prefix);
    free(w);
    return 0;
}

void pt_dataset_writer_abort(pt_dataset_writer *w) {
    if (!w) return;
    if (w->cur) pt_shard_writer_abort(w->cur);
    // Only this run's temporaries: the final names may be an old dataset's.
    for (int i = 0; i < w->ds.num_shards; i++)
        if (i >= w->renamed && w->ds.shards[i].path) unlink(w->ds.shards[i].path);
    pt_dataset_free(&w->ds);
    free(w->dir);
    free(w->prefix);
    free(w);
}
