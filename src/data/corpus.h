// Reading raw-text corpora document by document (for `portatrain tokenize`).
//
// Input kinds, chosen per file:
//   - *.jsonl / *.ndjson / *.json (any case): JSON Lines, one JSON object per
//     line; the document is the string field `text_field`. Blank lines are
//     skipped. A line that is not a JSON object, lacks the field, or whose field
//     is not a string is an error naming FILE:LINE. A NUL inside the string
//     ("\u0000" or a raw byte) is kept with the rest of the document.
//   - anything else is text: the whole file is one document, or with `lines`
//     each line is one (its "\n" or "\r\n" removed; empty lines skipped).
// Empty documents are skipped. The bytes are passed on unchanged (the
// tokenizer defines what invalid UTF-8 becomes). Memory: one line (or, for a
// whole-file document, the file) at a time.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { PT_CORPUS_TEXT = 0, PT_CORPUS_LINES = 1, PT_CORPUS_JSONL = 2 } pt_corpus_kind;

typedef struct pt_corpus_reader pt_corpus_reader;

// The kind `path` is read as.
pt_corpus_kind pt_corpus_kind_of(const char *path, bool lines);
// How an input is read: by its name (AUTO), as text (whole file, or per line with `lines`), or as JSON Lines.
typedef enum { PT_CORPUS_AUTO = 0, PT_CORPUS_FORMAT_TEXT = 1, PT_CORPUS_FORMAT_JSONL = 2 } pt_corpus_format;
// Opens a file; NULL with an error naming it if it cannot be opened or is not a regular file.
// pt_corpus_open = pt_corpus_open_as(PT_CORPUS_AUTO). In AUTO mode a file read as text whose first line is
// a JSON object with the text field as a string gets a warning (JSON Lines under another name, e.g. a pipe).
pt_corpus_reader *pt_corpus_open(const char *path, bool lines, const char *text_field);
pt_corpus_reader *pt_corpus_open_as(const char *path, pt_corpus_format format, bool lines, const char *text_field);
// Next document: 1 with *text/*len valid until the next call, 0 at the end,
// -1 with an error naming FILE:LINE.
int pt_corpus_next(pt_corpus_reader *r, const char **text, size_t *len);
// Bytes consumed so far, documents returned so far.
uint64_t pt_corpus_bytes(const pt_corpus_reader *r);
uint64_t pt_corpus_documents(const pt_corpus_reader *r);
// sha256 of all bytes read (complete once pt_corpus_next returned 0).
void pt_corpus_sha256(const pt_corpus_reader *r, char hex[65]);
void pt_corpus_close(pt_corpus_reader *r);
