// Tokenizing a corpus into a dataset: text / JSON Lines inputs (data/corpus.h) -> token shards and
// dataset.json (data/dataset.h), with the end-of-document id after each document.
//
// Streaming: documents are read in chunks of bounded size, each chunk is tokenized by a team of threads
// (one document per task), and the results are appended in input order, so the output is byte-identical
// for any thread count. Memory is bounded by the chunk size (plus the largest single document).
#pragma once
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *const *inputs;  // the input files, read in this order
    int ninputs;
    pt_corpus_format format;
    bool lines;
    const char *text_field;
    int threads;               // >= 1
    bool special_as_text;      // special-token text is ordinary text (HF encode_special_tokens = True)
} pt_tokenize_opts;

// A progress bar on stderr (bytes read of `total`, MB/s, tokens), redrawn at most every 0.1 s.
typedef struct {
    bool on;
    uint64_t total;
    double t0, last;
} pt_tokenize_progress;
void pt_tokenize_progress_show(pt_tokenize_progress *p, uint64_t done, uint64_t tokens, bool final);

typedef struct {
    uint64_t bytes;           // input bytes read
    uint64_t special_docs;    // documents whose text produced a special id (not with special_as_text)
    int64_t special_example;  // the first such id
    uint64_t eos_docs;        // ... of which produced the end-of-document id
} pt_tokenize_stats;

// Every input must be readable before anything is written: opens (and closes) each one, sums the sizes
// of regular files into *total_bytes and warns about a regular file named twice (it is tokenized twice).
// A named pipe is only checked for access (opening and closing it would end its writer). 0 / -1 with
// the error naming the input.
int pt_tokenize_check_inputs(const pt_tokenize_opts *o, uint64_t *total_bytes);

// The end-of-document id: `eos_name` if given, else <|endoftext|>, else the eos_token of
// tokenizer_config.json beside `tok_path`. -1 with the error set if there is none.
int64_t pt_tokenize_eos_id(const pt_tokenizer *tok, const char *tok_path, const char *eos_name);

// Tokenizes every input into w (which the caller finishes or aborts), recording each input with
// pt_dataset_writer_add_input. progress may be NULL. 0 / -1 with the error set.
int pt_tokenize_corpus(pt_tokenizer *tok, uint32_t eos, const pt_tokenize_opts *o, pt_dataset_writer *w,
                       pt_tokenize_progress *progress, pt_tokenize_stats *stats);
