// Token datasets: a directory of v1 shards (data/shard.h) plus a dataset.json
// index, and a streaming writer that produces them (docs/DATA.md).
//
// dataset.json (format "portatrain-dataset", version 1):
//   {
//     "format": "portatrain-dataset", "version": 1,
//     "tokenizer_sha256": "<hex sha256 of tokenizer.json>" | "",
//     "vocab_size": <ids the tokenizer can emit; the shards' header slot 4>,
//     "eos_id": <end-of-document id appended after each document> | -1,
//     "num_tokens": <sum over shards>, "num_documents": <EOS count>,
//     "shards": [ {"file": "shard-00000.bin", "num_tokens": n, "num_documents": d,
//                  "sha256": "<sha256 of the token body = the header's content slot>"}, ... ],
//     "inputs": [ {"path": "...", "bytes": b, "documents": d, "sha256": "<of the input file>"}, ... ]
//   }
// The shards, in order, are one token stream: a document may straddle two
// shards (shards are cut at exactly shard_tokens tokens). "inputs" is
// informational; readers ignore it.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PT_DATASET_FORMAT "portatrain-dataset"
#define PT_DATASET_VERSION 1
#define PT_DATASET_INDEX "dataset.json"

typedef struct {
    char *file;       // as written in dataset.json (relative to the index's directory)
    char *path;       // resolved path
    uint64_t num_tokens;
    uint64_t num_documents;
    char sha256[65];  // content (body) sha256, hex; "" if not recorded
} pt_dataset_shard;

typedef struct {
    char *path;    // any input path
    uint64_t bytes;
    uint64_t documents;
    char sha256[65];
} pt_dataset_input;

typedef struct {
    char *dir;                  // directory holding the index / shards
    char *index_path;           // the dataset.json read, NULL for a bare directory of shards
    char tokenizer_sha256[65];  // "" if unknown
    uint32_t vocab_size;
    int64_t eos_id;             // -1 if unknown
    uint64_t num_tokens;
    uint64_t num_documents;
    int num_shards;
    pt_dataset_shard *shards;
    int num_inputs;
    pt_dataset_input *inputs;
} pt_dataset;

// Reads `path`: a dataset.json file, or a directory holding one, or a
// directory of *.bin shards without an index (sorted by name; only the shard
// list is known then). Validates the schema; -1 with an error naming the file.
int pt_dataset_load(pt_dataset *d, const char *path);
// Writes d as dataset.json (atomically) at `path`.
int pt_dataset_save(const pt_dataset *d, const char *path);
void pt_dataset_free(pt_dataset *d);
// True if `path` looks like a dataset (a directory or a *.json file) rather than a bare shard.
bool pt_dataset_path_is_index(const char *path);

// 32 raw bytes <-> 64 hex chars. from_hex returns -1 on a malformed string.
void pt_hex_from_bytes(const uint8_t b[32], char hex[65]);
int pt_bytes_from_hex(const char *hex, uint8_t b[32]);

// ---- Streaming shard writer: memory does not depend on the shard size. ----
// Writes "<path>.tmp" (placeholder header, then tokens as they come, hashing
// the body incrementally) and on close fills the header (token count, vocab,
// tokenizer sha, content sha), fsyncs and renames to `path`.
typedef struct pt_shard_writer pt_shard_writer;
pt_shard_writer *pt_shard_writer_open(const char *path, uint32_t vocab_size, const uint8_t tokenizer_sha[32]);
int pt_shard_writer_append(pt_shard_writer *w, const uint32_t *ids, size_t n);
uint64_t pt_shard_writer_tokens(const pt_shard_writer *w);
// Finishes the shard; content_sha_hex (may be NULL) receives the body sha256. Frees w.
int pt_shard_writer_close(pt_shard_writer *w, char content_sha_hex[65]);
// Removes the temporary file and frees w.
void pt_shard_writer_abort(pt_shard_writer *w);

// ---- Dataset writer: documents in, shards of shard_tokens tokens + dataset.json out. ----
typedef struct pt_dataset_writer pt_dataset_writer;
// tokenizer_sha may be NULL (unknown). eos_id: the id ending each document (-1 unknown).
pt_dataset_writer *pt_dataset_writer_open(const char *dir, const char *prefix, uint64_t shard_tokens,
                                          uint32_t vocab_size, const uint8_t tokenizer_sha[32], int64_t eos_id);
// Appends one document's ids (the caller includes the trailing EOS). Ids must be < vocab_size.
int pt_dataset_writer_add(pt_dataset_writer *w, const uint32_t *ids, size_t n);
// Records an input file for the index (informational).
void pt_dataset_writer_add_input(pt_dataset_writer *w, const char *path, uint64_t bytes, uint64_t documents,
                                 const char sha256_hex[65]);
uint64_t pt_dataset_writer_tokens(const pt_dataset_writer *w);
uint64_t pt_dataset_writer_documents(const pt_dataset_writer *w);
// Closes the last shard and writes DIR/dataset.json; copies the index into *out if out != NULL
// (free it with pt_dataset_free). Fails ("empty corpus") if no token was added. Frees w.
int pt_dataset_writer_finish(pt_dataset_writer *w, pt_dataset *out);
// Removes the shards written so far and frees w.
void pt_dataset_writer_abort(pt_dataset_writer *w);
