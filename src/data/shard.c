#include "data/shard.h"
#include "data/dataset.h"
#include "util/common.h"
#include "util/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int pt_shard_open(pt_shard *s, const char *path) {
    memset(s, 0, sizeof *s);
    const void *cmap;
    size_t size;
    if (pt_map_file(path, &cmap, &size) != 0) return -1;
    if (size < PT_SHARD_HEADER_BYTES) {
        pt_set_error("%s: truncated shard header (%zu bytes, need %d)", path, size, PT_SHARD_HEADER_BYTES);
        pt_unmap_file(cmap, size);
        return -1;
    }
    void *map = (void *)cmap;
    memcpy(s->header, map, PT_SHARD_HEADER_BYTES);
    const int32_t *h = s->header;
    const char *why = NULL;
    if (h[0] != PT_SHARD_MAGIC) why = "wrong magic (not a portatrain token shard)";
    else if (h[1] != PT_SHARD_VERSION) why = "unsupported version";
    else if (h[3] != 4) why = "bytes per token must be 4";
    else if (h[2] < 0) why = "negative token count";
    else if (h[4] <= 0) why = "vocab size must be positive";
    if (why) {
        pt_set_error("%s: %s (header: magic %d, version %d, tokens %d, bytes/token %d, vocab %d)", path, why,
                     h[0], h[1], h[2], h[3], h[4]);
        munmap(map, size);
        return -1;
    }
    uint64_t n = (uint32_t)h[2];
    uint64_t want = PT_SHARD_HEADER_BYTES + n * 4;
    if (size != want) {
        pt_set_error("%s: body is %zu bytes but the header declares %llu tokens (%llu bytes): %s", path,
                     size - PT_SHARD_HEADER_BYTES, (unsigned long long)n, (unsigned long long)(n * 4),
                     size < want ? "truncated" : "trailing data");
        munmap(map, size);
        return -1;
    }
    s->path = pt_strdup(path);
    s->map = map;
    s->map_len = size;
    s->num_tokens = n;
    s->vocab_size = (uint32_t)h[4];
    s->tokens = (const uint32_t *)((const char *)map + PT_SHARD_HEADER_BYTES);
    uint32_t mx = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t t = s->tokens[i];
        if (t > mx) mx = t;
        if (t >= s->vocab_size) {
            pt_set_error("%s: token %llu has id %u >= the shard's vocab size %u", path, (unsigned long long)i, t,
                         s->vocab_size);
            pt_shard_close(s);
            return -1;
        }
    }
    s->max_token = mx;
    return 0;
}

int pt_shard_check_vocab(const pt_shard *s, uint32_t model_vocab) {
    if (s->num_tokens > 0 && s->max_token >= model_vocab) {
        for (uint64_t i = 0; i < s->num_tokens; i++)
            if (s->tokens[i] >= model_vocab) {
                pt_set_error("%s: token %llu has id %u >= the model's vocab_size %u", s->path,
                             (unsigned long long)i, s->tokens[i], model_vocab);
                return -1;
            }
    }
    return 0;
}

void pt_shard_close(pt_shard *s) {
    if (s->map) munmap(s->map, s->map_len);
    free(s->path);
    memset(s, 0, sizeof *s);
}

int pt_shard_write(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab_size,
                   const uint8_t tokenizer_sha[32]) {
    if (n > INT32_MAX) {
        pt_set_error("%s: %llu tokens exceed the v1 limit of 2^31-1 per shard", path, (unsigned long long)n);
        return -1;
    }
    size_t bytes = PT_SHARD_HEADER_BYTES + n * 4;
    char *buf = pt_calloc(1, bytes);
    int32_t *h = (int32_t *)buf;
    h[0] = PT_SHARD_MAGIC;
    h[1] = PT_SHARD_VERSION;
    h[2] = (int32_t)n;
    h[3] = 4;
    h[4] = (int32_t)vocab_size;
    if (tokenizer_sha) memcpy(&h[PT_SHARD_TOKENIZER_SHA_SLOT], tokenizer_sha, 32);
    memcpy(buf + PT_SHARD_HEADER_BYTES, tokens, n * 4);
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(buf + PT_SHARD_HEADER_BYTES, n * 4, md, &mdlen, EVP_sha256(), NULL);
    memcpy(&h[PT_SHARD_CONTENT_SHA_SLOT], md, 32);
    int rc = pt_write_file_atomic(path, buf, bytes);
    free(buf);
    return rc;
}

// ---------------------------------------------------------------- raw text where shards belong

// Enough of a file to tell text from a binary shard (whose magic alone holds a control byte).
#define RAW_SNIFF_BYTES 4096

// UTF-8 with no NUL or control byte other than whitespace. A character cut by the end of a sample
// that stopped short of the file's end still counts as text.
static bool looks_like_text(const unsigned char *b, size_t n, bool sample_cut) {
    if (n == 0) return false;
    for (size_t i = 0; i < n;) {
        unsigned c = b[i];
        if (c < 0x80) {
            if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') || c == 0x7f) return false;
            i++;
            continue;
        }
        size_t len = c >= 0xc2 && c < 0xe0 ? 2 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xf0 && c < 0xf5 ? 4 : 0;
        if (len == 0) return false;
        for (size_t k = 1; k < len; k++) {
            if (i + k >= n) return sample_cut;
            if ((b[i + k] & 0xc0) != 0x80) return false;
        }
        i += len;
    }
    return true;
}

static bool has_suffix_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static bool file_is_raw_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    unsigned char b[RAW_SNIFF_BYTES + 1];
    size_t n = fread(b, 1, RAW_SNIFF_BYTES, f);
    bool cut = n == RAW_SNIFF_BYTES && fgetc(f) != EOF;
    b[n] = 0;  // text holds no NUL: a C string from here on
    fclose(f);
    int32_t magic = 0;
    if (n >= 4) memcpy(&magic, b, 4);
    if (magic == PT_SHARD_MAGIC || !looks_like_text(b, n, cut)) return false;
    // A .bin is named as a shard: its header error ("truncated shard header", ...) says more than this one.
    if (has_suffix_ci(path, ".bin")) return false;
    // A data set index is JSON text too; even a broken one names its "format" (or is called dataset.json),
    // and its own error says more than this one.
    if (has_suffix_ci(path, ".json")) {
        const char *base = strrchr(path, '/');
        if (!strcmp(base ? base + 1 : path, PT_DATASET_INDEX) || strstr((const char *)b, "\"format\"")) return false;
    }
    return true;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// The first text file (by name) of a directory that holds no data set: no dataset.json, no *.bin.
static char *dir_raw_text_file(const char *dir) {
    char *index = pt_path_join(dir, PT_DATASET_INDEX);
    bool is_dataset = pt_file_exists(index);
    free(index);
    DIR *dp = is_dataset ? NULL : opendir(dir);
    if (!dp) return NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        if (has_suffix_ci(e->d_name, ".bin")) is_dataset = true;
        if (n == cap) names = pt_realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
        names[n++] = pt_strdup(e->d_name);
    }
    closedir(dp);
    if (n) qsort(names, n, sizeof *names, cmp_name);
    char *found = NULL;
    for (size_t i = 0; i < n; i++) {
        char *p = pt_path_join(dir, names[i]);
        if (!is_dataset && !found && !pt_is_dir(p) && file_is_raw_text(p)) found = p;
        else free(p);
        free(names[i]);
    }
    free(names);
    return found;
}

bool pt_shard_explain_raw_text(const char *path) {
    const char *hint = "tokenize it first: portatrain tokenize --tokenizer tokenizer.json --output-dir DIR";
    if (!pt_is_dir(path)) {
        if (!file_is_raw_text(path)) return false;
        pt_set_error("%s: not token shards (looks like raw text); %s %s", path, hint, path);
        return true;
    }
    char *file = dir_raw_text_file(path);
    if (!file) return false;
    const char *base = strrchr(file, '/') + 1, *dot = strrchr(base, '.');
    pt_set_error("%s: not token shards (looks like raw text, e.g. %s); %s %s/*%s", path, base, hint, path,
                 dot && dot != base ? dot : "");
    free(file);
    return true;
}
