// Hugging Face-compatible byte-level BPE tokenizer (tokenizer.json).
//
// Loads any HF `tokenizer.json` whose model is a byte-level BPE (GPT-2, Qwen2/Qwen3, Llama-3 family) and
// produces the same ids as the Rust `tokenizers` library (`encode(text, add_special_tokens=False)`).
// Pipeline: added tokens (normalized:false) on the raw text, leftmost-longest, with single_word/lstrip/
// rstrip -> normalizer (NFC/NFD/NFKC/NFKD via utf8proc) -> added tokens (normalized:true) -> pre-tokenizer
// (Split / Digits with PCRE2 + JIT, then ByteLevel) -> BPE by merge rank. See docs/TOKENIZER.md.
//
// Invalid UTF-8 input: encode first replaces each maximal invalid subpart with U+FFFD, exactly like
// Python's bytes.decode("utf-8", errors="replace"), then tokenizes the result. So encode(x) ==
// HF.encode(x.decode("utf-8", "replace")) for any bytes x.
//
// Thread safety: a loaded tokenizer is read-only; encode/decode may be called concurrently from any number
// of threads on the same tokenizer (each call borrows a per-thread scratch state with its own BPE cache from
// a small pool). tokenizer_free must not race with other calls.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pt_tokenizer pt_tokenizer;

// A growable id buffer (zero-initialise it; free ids with free()).
typedef struct {
    uint32_t *ids;
    size_t len, cap;
} pt_token_buf;

// Loads a tokenizer.json. NULL with pt_last_error() naming the file and field on failure.
pt_tokenizer *tokenizer_load(const char *path);
// Same from an in-memory JSON document; `name` is used in error messages and sha256 covers `json`.
pt_tokenizer *tokenizer_load_json(const char *json, size_t len, const char *name);
void tokenizer_free(pt_tokenizer *tok);

// Encodes `len` bytes of `text` (any bytes; see invalid UTF-8 above). *ids is malloc'd (free it), *n its
// length; an empty text gives *n == 0 (and *ids may be NULL). 0 on success, -1 with error set.
int tokenizer_encode(pt_tokenizer *tok, const char *text, size_t len, uint32_t **ids, size_t *n);
// Appends the ids of `text` to `out` (no allocation per call once the buffer has grown). 0 / -1.
int tokenizer_encode_append(pt_tokenizer *tok, const char *text, size_t len, pt_token_buf *out);
// on: special added tokens (e.g. "<|endoftext|>") written in the text are encoded as ordinary text, not
// as their ids, like HF's `tokenizer.encode_special_tokens = True`; non-special added tokens still match.
// Default off (HF's default). Set it before encoding, not while other threads encode.
void tokenizer_set_encode_special_tokens(pt_tokenizer *tok, bool on);

// Decodes like HF `decode(ids, skip_special_tokens=False)`: the ByteLevel decoder's bytes, with every
// maximal invalid UTF-8 subpart replaced by U+FFFD (Python errors="replace"). *out is malloc'd and
// NUL-terminated (not counted in *len). An id >= vocab size or a hole in the vocabulary is an error
// (HF silently skips unknown ids). 0 / -1.
int tokenizer_decode(pt_tokenizer *tok, const uint32_t *ids, size_t n, char **out, size_t *len);
// The exact decoded bytes, without the UTF-8 replacement step.
int tokenizer_decode_bytes(pt_tokenizer *tok, const uint32_t *ids, size_t n, char **out, size_t *len);

// Max id + 1 over the model vocabulary and the added tokens (Qwen3: 151669).
uint32_t tokenizer_vocab_size(const pt_tokenizer *tok);
// Id of a token string as HF token_to_id: added tokens by content, then the model vocabulary (byte-level
// form, e.g. "Ġthe"). -1 if absent.
int64_t tokenizer_token_id(const pt_tokenizer *tok, const char *token);
// The token string of an id (added token content or vocabulary string), NULL if none. *len may be NULL.
const char *tokenizer_id_to_token(const pt_tokenizer *tok, uint32_t id, size_t *len);  // NUL-terminated
bool tokenizer_is_special(const pt_tokenizer *tok, uint32_t id);
bool tokenizer_is_added(const pt_tokenizer *tok, uint32_t id);
// sha256 of the loaded file's bytes: 64 hex chars, and the 32 raw bytes.
const char *tokenizer_sha256_hex(const pt_tokenizer *tok);
const uint8_t *tokenizer_sha256(const pt_tokenizer *tok);

// UTF-8 helpers used by the encoder (exposed for the CLI, tests and tools).
bool tokenizer_utf8_valid(const char *s, size_t n);
// Writes s with each maximal invalid subpart replaced by U+FFFD into out (capacity >= 3*n); returns the
// output length.
size_t tokenizer_utf8_replace(const char *s, size_t n, char *out);

// Testing knob: words with more than this many symbols use the heap BPE instead of the quadratic scan
// (both give identical results; default 64). Process-wide.
void tokenizer_set_bpe_heap_threshold(size_t nsymbols);
