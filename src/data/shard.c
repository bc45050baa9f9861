#include "data/shard.h"
#include "util/common.h"
#include "util/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
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
