// Token shard format v1 (little-endian):
//   header: 256 x int32
//     [0] magic 20241202   [1] version 1   [2] number of tokens N
//     [3] bytes per token (4)   [4] vocab size of the tokenizer that wrote it
//     [8..15]  sha256 of the tokenizer.json (32 raw bytes), zero if unknown
//     [16..23] sha256 of the token body (32 raw bytes), zero if unknown
//     everything else zero
//   body: N x uint32 token ids
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PT_SHARD_MAGIC 20241202
#define PT_SHARD_VERSION 1
#define PT_SHARD_HEADER_INTS 256
#define PT_SHARD_HEADER_BYTES (PT_SHARD_HEADER_INTS * 4)
#define PT_SHARD_TOKENIZER_SHA_SLOT 8
#define PT_SHARD_CONTENT_SHA_SLOT 16

typedef struct {
    char *path;
    int32_t header[PT_SHARD_HEADER_INTS];
    uint64_t num_tokens;
    uint32_t vocab_size;   // from the header
    uint32_t max_token;    // largest id present (validated < vocab_size)
    const uint32_t *tokens;  // mmap'd body
    void *map;
    size_t map_len;
} pt_shard;

// Opens and validates a shard (magic, version, sizes, ids < header vocab);
// -1 with an error naming the file on any problem.
int pt_shard_open(pt_shard *s, const char *path);
void pt_shard_close(pt_shard *s);
// Checks every id is < model_vocab (ids past the embedding would be UB).
int pt_shard_check_vocab(const pt_shard *s, uint32_t model_vocab);

// Raw text given where token data belongs (the commonest first mistake): a file that is not a shard
// and whose first bytes are UTF-8 text (a .json other than a data set index, which names its "format"),
// or a directory with no dataset.json and no *.bin holding such a file. Then sets the error
// "PATH: not token shards (looks like raw text); tokenize it first: portatrain tokenize ..." and returns
// true; otherwise false, the error untouched.
bool pt_shard_explain_raw_text(const char *path);

// Writes a v1 shard atomically. tokenizer_sha / content_sha may be NULL
// (content_sha is computed when NULL).
int pt_shard_write(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab_size,
                   const uint8_t tokenizer_sha[32]);
