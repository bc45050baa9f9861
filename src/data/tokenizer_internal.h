// Internals shared by the tokenizer's files (src/data/tokenizer*.c); not part of the public API.
//
// Every token of the model vocabulary whose string is made of ByteLevel alphabet characters is keyed by
// the raw bytes it stands for (the GPT-2 byte<->char mapping is a bijection), so pre-tokens are looked up,
// cached and merged as raw bytes without ever being mapped to the ByteLevel alphabet.
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizer.h"
#include "util/common.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define NO_ID UINT32_MAX
#define MAX_VOCAB (1u << 24)
#define MAX_STAGES 8
#define MAX_NORM 8
#define CACHE_MAX_WORD 255
#define CACHE_SLOTS (1u << 15)
#define CACHE_MAX_KEYS (4u << 20)
#define CACHE_MAX_IDS (1u << 20)

/* ------------------------------------------------------------------------------------------------ */
/* hashing, arenas, maps                                                                             */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t hash_bytes(const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t h = 0x243F6A8885A308D3ULL ^ ((uint64_t)n * 0x9E3779B97F4A7C15ULL);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
        h = (h << 27) | (h >> 37);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = 0;
        memcpy(&v, p, n);
        h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
    }
    return mix64(h);
}

typedef struct {
    char *p;
    size_t len, cap;
} arena;

// String -> u32 map; keys live in an arena owned by the caller.
typedef struct {
    uint64_t h;
    uint32_t off, len, val, pad;
} sm_slot;
typedef struct {
    sm_slot *slots;
    size_t mask, n;
    arena *keys;
} strmap;

// (left id, right id) -> (rank, merged id).
typedef struct {
    uint64_t key;
    uint32_t rank, nid;
} mm_slot;
typedef struct {
    mm_slot *slots;
    size_t mask;
} mergemap;
#define MM_EMPTY UINT64_MAX

static inline const mm_slot *mm_get(const mergemap *m, uint32_t a, uint32_t b) {
    uint64_t key = ((uint64_t)a << 32) | b;
    for (size_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        const mm_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == MM_EMPTY) return NULL;
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* UTF-8                                                                                             */

// Length of the valid UTF-8 sequence at s[0..n) (Unicode Table 3-7), or 0 if invalid; *sub gets the
// length of the maximal invalid subpart to replace when invalid.
static inline size_t utf8_seq(const uint8_t *s, size_t n, size_t *sub) {
    uint8_t b = s[0];
    if (b < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) need = 2, lo = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) need = 2;
    else if (b == 0xED) need = 2, hi = 0x9F;
    else if (b == 0xF0) need = 3, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else if (b == 0xF4) need = 3, hi = 0x8F;
    else {
        *sub = 1;
        return 0;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n) break;
        uint8_t c = s[i];
        if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
    }
    if (i == need + 1) return need + 1;
    *sub = i;
    return 0;
}

// Decodes one code point from valid UTF-8.
static inline int32_t utf8_dec(const uint8_t *s, size_t *len) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *len = 1;
        return b;
    }
    if (b < 0xE0) {
        *len = 2;
        return ((b & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (b < 0xF0) {
        *len = 3;
        return ((b & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    *len = 4;
    return ((b & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}


/* ------------------------------------------------------------------------------------------------ */
/* tokenizer structures                                                                              */

typedef struct {
    char *content;   // original content (NUL-terminated)
    size_t len;
    char *pattern;   // text matched: the normalized content for normalized tokens
    size_t plen;
    uint32_t id;
    bool single_word, lstrip, rstrip, normalized, special;
} added_tok;

typedef struct {
    uint32_t child, sibling;  // 0 = none (node 0 is the root)
    int32_t term;             // index into added[] or -1
    uint8_t byte;
} trie_node;

typedef struct {
    trie_node *nodes;
    size_t n, cap;
    uint32_t root_child[256];
    bool first[256];
    bool empty;
} trie;

enum { ST_SPLIT, ST_BYTELEVEL };
enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS };

typedef struct {
    int kind;
    int re;  // index into tok->re, -1 if none
    int behavior;
    bool invert;
    bool add_prefix_space, use_regex;
} stage;

typedef struct tstate tstate;

struct pt_tokenizer {
    char *name;
    char sha_hex[65];
    uint8_t sha[32];

    arena keys;   // map keys
    strmap raw;   // raw bytes -> id (tokens made of ByteLevel alphabet chars)
    strmap str;   // string -> id for the other vocabulary tokens
    mergemap merges;
    size_t n_merges;
    uint32_t byte_tok[256];
    uint32_t fb_tok[256][2];
    uint8_t fb_n[256];
    bool has_unk, fuse_unk, byte_fallback, ignore_merges;
    uint32_t unk_id;
    char *unk_token;
    uint32_t model_vocab_len;
    uint32_t vocab_size;

    // per id
    uint32_t *tok_off, *tok_len;  // token string in strs (tok_len NO_ID: no token)
    uint32_t *dec_off, *dec_len;  // decoded bytes in decs
    uint8_t *flags;               // 1 added, 2 special
    arena strs, decs;

    added_tok *added;
    size_t n_added;
    strmap added_map;  // content -> id
    arena added_keys;
    trie trie_raw, trie_norm;
    bool encode_special;  // special tokens in the text are ordinary text (tokenizer_set_encode_special_tokens)

    int norm[MAX_NORM];  // utf8proc option sets applied in order
    int n_norm;

    stage stages[MAX_STAGES];
    int n_stages;
    pcre2_code *re[MAX_STAGES];
    bool re_jit[MAX_STAGES];
    int n_re;

    int decoder;  // 0: none (tokens joined by spaces), 1: ByteLevel

    pthread_mutex_t lock;
    tstate *free_states, *all_states;
};

#define F_ADDED 1
#define F_SPECIAL 2

typedef struct {
    uint64_t h;
    uint32_t koff, ioff;
    uint16_t klen, nids;
} cslot;

typedef struct {
    uint32_t rank, pos, nid;
} hitem;

typedef struct {
    size_t *v;  // triples (start, end, flag)
    size_t n, cap;
} svec;

struct tstate {
    tstate *next_free, *next_all;
    pt_tokenizer *tok;
    pcre2_match_data *md[MAX_STAGES];
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    uint8_t *san;
    size_t san_cap;
    uint8_t *norm[2];
    size_t norm_cap[2];
    int32_t *u32;
    size_t u32_cap;
    uint8_t *pfx[MAX_STAGES];
    size_t pfx_cap[MAX_STAGES];
    svec spl[MAX_STAGES];
    // BPE scratch
    uint32_t *sym, *rk, *nid;
    int32_t *prev, *next;
    uint8_t *alive;
    size_t bcap;
    hitem *heap;
    size_t hcap;
    // cache
    cslot *cache;
    size_t ccount;
    arena ckeys;
    uint32_t *cids;
    size_t cids_len, cids_cap;
    pt_token_buf *out;
};

static inline void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    *cap = c;
    return pt_realloc(p, c * elem);
}


/* ------------------------------------------------------------------------------------------------ */
/* functions shared between the tokenizer's files                                                    */

// tokenizer_maps.c
uint32_t tk_arena_put(arena *a, const void *s, size_t n);
// Same, keeping the terminating NUL (the next string starts after it).
uint32_t tk_arena_put_z(arena *a, const void *s, size_t n);
void tk_sm_init(strmap *m, arena *keys, size_t expected);
void tk_sm_free(strmap *m);
uint32_t tk_sm_get(const strmap *m, const void *k, size_t n);
// Inserts or overwrites (later definitions win, like a Rust HashMap collected from the JSON).
void tk_sm_put(strmap *m, const void *k, size_t n, uint32_t val);
void tk_mm_init(mergemap *m, size_t expected);
void tk_mm_put(mergemap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t nid);
void tk_trie_init(trie *t);
void tk_trie_add(trie *t, const char *s, size_t n, int32_t term);
// Leftmost-longest match in s[from..n): returns true with [*ms, *me) and the added index.
bool tk_trie_find(const trie *t, const uint8_t *s, size_t n, size_t from, size_t *ms, size_t *me, int32_t *term);

// tokenizer.c: UTF-8, the GPT-2 byte <-> char mapping, Unicode classes
// Last code point of valid UTF-8 s[0..n), n > 0.
int32_t tk_utf8_last(const uint8_t *s, size_t n);
size_t tk_utf8_enc(int32_t c, uint8_t *o);
extern int32_t tk_g_byte_cp[256];  // byte -> ByteLevel code point (after tk_bytemap_ensure)
void tk_bytemap_ensure(void);
// Converts a ByteLevel-alphabet string to the raw bytes it stands for; false if some char is outside the
// alphabet. out needs n bytes.
bool tk_bytelevel_to_raw(const uint8_t *s, size_t n, uint8_t *out, size_t *outn);
bool tk_uni_white_space(int32_t c);
bool tk_uni_word(int32_t c);
bool tk_hf_inert(int32_t c);
// Entry i of the code points HF's regex engine places in a general category and utf8proc does not; the
// count is returned, and *lo, *hi, *cat are set when i is below it.
size_t tk_hf_new_cat(size_t i, uint32_t *lo, uint32_t *hi, int *cat);

// tokenizer_regex.c: compiles a Split pattern (or a literal) into t->re; the regex index or -1.
int tk_compile_re(pt_tokenizer *t, const char *pat, size_t n, bool literal, const char *path);

// tokenizer_model.c
int tk_json_bool(const cJSON *o, const char *key, bool def, bool *out, const char *what);
const char *tk_json_type(const cJSON *o);
// Vocabulary string -> id (as HF's model.token_to_id).
uint32_t tk_vocab_lookup(const pt_tokenizer *t, const char *s, size_t n, uint8_t *scratch);
int tk_load_model(pt_tokenizer *t, const cJSON *model, uint32_t *max_id);

// tokenizer_normalize.c: applies the normalizers to s (*out may point into st's scratch or at s).
int tk_normalize_string(tstate *st, const uint8_t *s, size_t n, const uint8_t **out, size_t *outn);

// tokenizer_encode.c: the per-thread scratch states
tstate *tk_state_acquire(pt_tokenizer *t);
void tk_state_release(pt_tokenizer *t, tstate *st);
void tk_state_free(tstate *st);

// tokenizer_pretok.c: runs pre-tokenizer stage k (and the following ones, then BPE) on p[0..n).
int tk_run_stage(tstate *st, int k, const uint8_t *p, size_t n);

// tokenizer_bpe.c
static inline void push_id(tstate *st, uint32_t id) {
    pt_token_buf *o = st->out;
    if (o->len == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 1024;
        o->ids = pt_realloc(o->ids, o->cap * sizeof(uint32_t));
    }
    o->ids[o->len++] = id;
}
// BPE of one pre-token w[0..n) (raw bytes), ids appended to st->out.
int tk_bpe_word(tstate *st, const uint8_t *w, size_t n);
