// Hugging Face-compatible byte-level BPE tokenizer. Design notes: docs/TOKENIZER.md.
//
// Internally every token of the model vocabulary whose string is made of ByteLevel alphabet characters is
// keyed by the raw bytes it stands for (the GPT-2 byte<->char mapping is a bijection), so pre-tokens are
// looked up, cached and merged as raw bytes without ever being mapped to the ByteLevel alphabet.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizer.h"

#include "util/common.h"
#include "util/fileio.h"
#include "util/hash.h"
#include "util/json.h"

#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define NO_ID UINT32_MAX
#define MAX_VOCAB (1u << 24)
#define MAX_STAGES 8
#define MAX_NORM 8
#define CACHE_MAX_WORD 255
#define CACHE_SLOTS (1u << 15)
#define CACHE_MAX_KEYS (4u << 20)
#define CACHE_MAX_IDS (1u << 20)

static size_t g_heap_threshold = 64;
void tokenizer_set_bpe_heap_threshold(size_t n) { g_heap_threshold = n; }

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

static uint32_t arena_put(arena *a, const void *s, size_t n) {
    if (a->len + n + 1 > a->cap) {
        size_t c = a->cap ? a->cap : 4096;
        while (c < a->len + n + 1) c *= 2;
        a->p = pt_realloc(a->p, c);
        a->cap = c;
    }
    uint32_t off = (uint32_t)a->len;
    if (n) memcpy(a->p + a->len, s, n);
    a->len += n;
    a->p[a->len] = 0;
    return off;
}

// Same, keeping the terminating NUL (the next string starts after it).
static uint32_t arena_put_z(arena *a, const void *s, size_t n) {
    uint32_t off = arena_put(a, s, n);
    a->len++;
    return off;
}

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

static void sm_init(strmap *m, arena *keys, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    m->slots = pt_malloc(cap * sizeof(sm_slot));
    for (size_t i = 0; i < cap; i++) m->slots[i].val = NO_ID;
    m->mask = cap - 1;
    m->n = 0;
    m->keys = keys;
}

static void sm_free(strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

static uint32_t sm_get(const strmap *m, const void *k, size_t n) {
    if (!m->slots) return NO_ID;
    uint64_t h = hash_bytes(k, n);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const sm_slot *s = &m->slots[i];
        if (s->val == NO_ID) return NO_ID;
        if (s->h == h && s->len == n && memcmp(m->keys->p + s->off, k, n) == 0) return s->val;
    }
}

static void sm_put(strmap *m, const void *k, size_t n, uint32_t val);

static void sm_grow(strmap *m) {
    sm_slot *old = m->slots;
    size_t oldcap = m->mask + 1, cap = oldcap * 2;
    m->slots = pt_malloc(cap * sizeof(sm_slot));
    for (size_t i = 0; i < cap; i++) m->slots[i].val = NO_ID;
    m->mask = cap - 1;
    for (size_t i = 0; i < oldcap; i++) {
        if (old[i].val == NO_ID) continue;
        size_t j = old[i].h & m->mask;
        while (m->slots[j].val != NO_ID) j = (j + 1) & m->mask;
        m->slots[j] = old[i];
    }
    free(old);
}

// Inserts or overwrites (later definitions win, like a Rust HashMap collected from the JSON).
static void sm_put(strmap *m, const void *k, size_t n, uint32_t val) {
    if ((m->n + 1) * 2 > m->mask + 1) sm_grow(m);
    uint64_t h = hash_bytes(k, n);
    size_t i = h & m->mask;
    for (;; i = (i + 1) & m->mask) {
        sm_slot *s = &m->slots[i];
        if (s->val == NO_ID) break;
        if (s->h == h && s->len == n && memcmp(m->keys->p + s->off, k, n) == 0) {
            s->val = val;
            return;
        }
    }
    sm_slot *s = &m->slots[i];
    s->h = h;
    s->off = arena_put_z(m->keys, k, n);
    s->len = (uint32_t)n;
    s->val = val;
    m->n++;
}

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

static void mm_init(mergemap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    m->slots = pt_malloc(cap * sizeof(mm_slot));
    for (size_t i = 0; i < cap; i++) m->slots[i].key = MM_EMPTY;
    m->mask = cap - 1;
}

static void mm_put(mergemap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t nid) {
    uint64_t key = ((uint64_t)a << 32) | b;
    for (size_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->slots[i].key == MM_EMPTY || m->slots[i].key == key) {
            m->slots[i].key = key;
            m->slots[i].rank = rank;
            m->slots[i].nid = nid;
            return;
        }
    }
}

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

bool tokenizer_utf8_valid(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0, sub;
    while (i < n) {
        // ASCII fast path, 8 bytes at a time
        while (i + 8 <= n) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if (v & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        size_t l = utf8_seq(s + i, n - i, &sub);
        if (!l) return false;
        i += l;
    }
    return true;
}

size_t tokenizer_utf8_replace(const char *str, size_t n, char *out) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0, o = 0, sub;
    while (i < n) {
        size_t l = utf8_seq(s + i, n - i, &sub);
        if (l) {
            memcpy(out + o, s + i, l);
            o += l;
            i += l;
        } else {
            out[o++] = (char)0xEF;
            out[o++] = (char)0xBF;
            out[o++] = (char)0xBD;
            i += sub;
        }
    }
    return o;
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

// Last code point of valid UTF-8 s[0..n), n > 0.
static int32_t utf8_last(const uint8_t *s, size_t n) {
    size_t i = n - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
    size_t l;
    return utf8_dec(s + i, &l);
}

static size_t utf8_enc(int32_t c, uint8_t *o) {
    if (c < 0x80) {
        o[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (uint8_t)(0xC0 | (c >> 6));
        o[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (c >> 12));
        o[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (c >> 18));
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* ------------------------------------------------------------------------------------------------ */
/* GPT-2 byte <-> char mapping                                                                       */

static int32_t g_byte_cp[256];
static int16_t g_cp_byte[512];
static pthread_once_t g_bytemap_once = PTHREAD_ONCE_INIT;

static void bytemap_init(void) {
    for (int i = 0; i < 512; i++) g_cp_byte[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        g_byte_cp[b] = direct ? b : 256 + n++;
        g_cp_byte[g_byte_cp[b]] = (int16_t)b;
    }
}

// Converts a ByteLevel-alphabet string to the raw bytes it stands for; false if some char is outside the
// alphabet. out needs n bytes.
static bool bytelevel_to_raw(const uint8_t *s, size_t n, uint8_t *out, size_t *outn) {
    size_t i = 0, o = 0, l;
    while (i < n) {
        int32_t c = utf8_dec(s + i, &l);
        if (c >= 512 || g_cp_byte[c] < 0) return false;
        out[o++] = (uint8_t)g_cp_byte[c];
        i += l;
    }
    *outn = o;
    return true;
}

/* ------------------------------------------------------------------------------------------------ */
/* Unicode classes of the Rust `regex` crate (added tokens' single_word / lstrip / rstrip)           */

static bool uni_white_space(int32_t c) {  // Unicode White_Space property
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static bool uni_word(int32_t c) {  // \w = Alphabetic | M | Nd | Pc | Join_Control
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        break;
    }
    // Join_Control and the Other_Alphabetic symbols (circled / squared Latin letters)
    return c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
           (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
}

/* BEGIN GENERATED by tools/tokenizer_parity.py --gen-unicode-tables (HF tokenizers 0.23.3) */
// Code points HF tokenizers' normalizers (Unicode 9 data) leave alone while utf8proc would reorder,
// (de)compose or drop them: copied through unchanged, splitting the text around them.
static const uint32_t hf_norm_inert[][2] = {
    {0x7FD, 0x7FD}, {0x898, 0x89F}, {0x8CA, 0x8D3}, {0x9FE, 0x9FE}, {0xC3C, 0xC3C}, {0xD3B, 0xD3C},
    {0xEBA, 0xEBA}, {0x11A7, 0x11A7}, {0x1715, 0x1715}, {0x1ABF, 0x1ACE}, {0x1DF6, 0x1DFA}, {0x32FF, 0x32FF},
    {0xA7F2, 0xA7F4}, {0xA82C, 0xA82C}, {0xAB69, 0xAB69}, {0x10781, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA},
    {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070},
    {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A}, {0x11930, 0x11930}, {0x1193D, 0x1193E}, {0x11943, 0x11943},
    {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47}, {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45},
    {0x11D97, 0x11D97}, {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF}, {0x1F16C, 0x1F16C}, {0x1FBF0, 0x1FBF9},
};
// General categories of code points that HF's regex engine (Oniguruma) knows and utf8proc does not.
static const struct {
    uint32_t lo, hi;
    uint8_t cat;  // utf8proc_category_t
} hf_new_cats[] = {
    {0x897, 0x897, 6}, {0x1B4E, 0x1B4F, 18}, {0x1B7F, 0x1B7F, 18}, {0x1C89, 0x1C89, 1}, {0x1C8A, 0x1C8A, 2},
    {0x2427, 0x2429, 22}, {0x2FFC, 0x2FFF, 22}, {0x31E4, 0x31E5, 22}, {0x31EF, 0x31EF, 22}, {0xA7CB, 0xA7CC, 1},
    {0xA7CD, 0xA7CD, 2}, {0xA7DA, 0xA7DA, 1}, {0xA7DB, 0xA7DB, 2}, {0xA7DC, 0xA7DC, 1}, {0x105C0, 0x105F3, 5},
    {0x10D40, 0x10D49, 9}, {0x10D4A, 0x10D4D, 5}, {0x10D4E, 0x10D4E, 4}, {0x10D4F, 0x10D4F, 5}, {0x10D50, 0x10D65, 1},
    {0x10D69, 0x10D6D, 6}, {0x10D6E, 0x10D6E, 13}, {0x10D6F, 0x10D6F, 4}, {0x10D70, 0x10D85, 2}, {0x10D8E, 0x10D8F, 19},
    {0x10EC2, 0x10EC4, 5}, {0x10EFC, 0x10EFC, 6}, {0x11380, 0x11389, 5}, {0x1138B, 0x1138B, 5}, {0x1138E, 0x1138E, 5},
    {0x11390, 0x113B5, 5}, {0x113B7, 0x113B7, 5}, {0x113B8, 0x113BA, 7}, {0x113BB, 0x113C0, 6}, {0x113C2, 0x113C2, 7},
    {0x113C5, 0x113C5, 7}, {0x113C7, 0x113CA, 7}, {0x113CC, 0x113CD, 7}, {0x113CE, 0x113CE, 6}, {0x113CF, 0x113CF, 7},
    {0x113D0, 0x113D0, 6}, {0x113D1, 0x113D1, 5}, {0x113D2, 0x113D2, 6}, {0x113D3, 0x113D3, 5}, {0x113D4, 0x113D5, 18},
    {0x113D7, 0x113D8, 18}, {0x113E1, 0x113E2, 6}, {0x116D0, 0x116E3, 9}, {0x11BC0, 0x11BE0, 5}, {0x11BE1, 0x11BE1, 18},
    {0x11BF0, 0x11BF9, 9}, {0x11F5A, 0x11F5A, 6}, {0x13460, 0x143FA, 5}, {0x16100, 0x1611D, 5}, {0x1611E, 0x16129, 6},
    {0x1612A, 0x1612C, 7}, {0x1612D, 0x1612F, 6}, {0x16130, 0x16139, 9}, {0x16D40, 0x16D42, 4}, {0x16D43, 0x16D6A, 5},
    {0x16D6B, 0x16D6C, 4}, {0x16D6D, 0x16D6F, 18}, {0x16D70, 0x16D79, 9}, {0x18CFF, 0x18CFF, 5}, {0x1CC00, 0x1CCEF, 22},
    {0x1CCF0, 0x1CCF9, 9}, {0x1CD00, 0x1CEB3, 22}, {0x1E5D0, 0x1E5ED, 5}, {0x1E5EE, 0x1E5EF, 6}, {0x1E5F0, 0x1E5F0, 5},
    {0x1E5F1, 0x1E5FA, 9}, {0x1E5FF, 0x1E5FF, 18}, {0x1F8B2, 0x1F8BB, 22}, {0x1F8C0, 0x1F8C1, 22}, {0x1FA89, 0x1FA89, 22},
    {0x1FA8F, 0x1FA8F, 22}, {0x1FABE, 0x1FABE, 22}, {0x1FAC6, 0x1FAC6, 22}, {0x1FADC, 0x1FADC, 22}, {0x1FADF, 0x1FADF, 22},
    {0x1FAE9, 0x1FAE9, 22}, {0x1FBCB, 0x1FBEF, 22}, {0x2EBF0, 0x2EE5D, 5},
};
/* END GENERATED */

// True for code points the normalizers must copy through unchanged (HF compatibility, see above). The
// table is small and sorted; most text never reaches the binary search.
static bool hf_inert(int32_t c) {
    if (c < (int32_t)hf_norm_inert[0][0]) return false;
    size_t lo = 0, hi = PT_ARRAY_LEN(hf_norm_inert);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)c < hf_norm_inert[mid][0]) hi = mid;
        else if ((uint32_t)c > hf_norm_inert[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

/* ------------------------------------------------------------------------------------------------ */
/* Oniguruma -> PCRE2 pattern translation                                                            */
//
// HF tokenizers compiles Split patterns with Oniguruma (Ruby syntax). PCRE2 with UTF|UCP agrees on the
// syntax used by tokenizer files, with these differences that we translate:
//  - ^ and $ are line anchors in Ruby syntax (PCRE2_MULTILINE);
//  - \s is Unicode White_Space (PCRE2's \s also matches U+180E); \h/\H is a hex digit in Ruby syntax;
//    \d is \p{Nd}; \w is Alphabetic|M|Nd|Pc|Join_Control;
//  - PCRE2 10.42 knows Unicode 14; for \p{<general category>} we add the code points that utf8proc (a
//    newer Unicode) assigns to that category and PCRE2 does not know (computed at run time).

static char *g_aug[30];  // per utf8proc category: "\x{..}-\x{..}..." (possibly empty)
static pthread_once_t g_aug_once = PTHREAD_ONCE_INIT;

typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n + 1) c *= 2;
        b->p = pt_realloc(b->p, c);
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void aug_init(void) {
    int err;
    PCRE2_SIZE eoff;
    pcre2_code *cn = pcre2_compile((PCRE2_SPTR) "\\p{Cn}", PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED,
                                   &err, &eoff, NULL);
    sbuf b[30] = {{0}};
    for (int i = 0; i < 30; i++) sb_add(&b[i], "", 0);
    if (cn) {
        pcre2_jit_compile(cn, PCRE2_JIT_COMPLETE);
        pcre2_match_data *md = pcre2_match_data_create(1, NULL);
        int32_t run_start = -1, run_end = -1, run_cat = -1;
        for (int32_t c = 0; c <= 0x110000; c++) {
            int cat = -1;
            if (c < 0x110000 && !(c >= 0xD800 && c < 0xE000)) {
                int uc = utf8proc_category(c);
                if (uc != UTF8PROC_CATEGORY_CN && uc != UTF8PROC_CATEGORY_CO && uc != UTF8PROC_CATEGORY_CS) {
                    uint8_t u[4];
                    size_t l = utf8_enc(c, u);
                    if (pcre2_match(cn, u, l, 0, PCRE2_NO_UTF_CHECK, md, NULL) > 0) cat = uc;
                }
            }
            if (cat >= 0 && cat == run_cat && c == run_end + 1) {
                run_end = c;
                continue;
            }
            if (run_cat >= 0) {
                char tmp[48];
                if (run_start == run_end) snprintf(tmp, sizeof tmp, "\\x{%X}", (unsigned)run_start);
                else snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", (unsigned)run_start, (unsigned)run_end);
                sb_str(&b[run_cat], tmp);
            }
            run_cat = cat;
            run_start = run_end = c;
        }
        pcre2_match_data_free(md);
        pcre2_code_free(cn);
    }
    for (size_t i = 0; i < PT_ARRAY_LEN(hf_new_cats); i++) {
        if (!hf_new_cats[i].cat || hf_new_cats[i].cat >= 30) continue;
        char tmp[48];
        snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", (unsigned)hf_new_cats[i].lo, (unsigned)hf_new_cats[i].hi);
        sb_str(&b[hf_new_cats[i].cat], tmp);
    }
    for (int i = 0; i < 30; i++) g_aug[i] = b[i].p;
}

// Categories named by a \p{...} general category name; returns the count written to cats, 0 if the name is
// not a general category.
static int gc_categories(const char *name, size_t n, int *cats) {
    static const char *two[30] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
                                  "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
    int k = 0;
    if (n == 1) {
        for (int i = 1; i < 30; i++)
            if (two[i][0] == name[0]) cats[k++] = i;
        return k;
    }
    if (n == 2) {
        for (int i = 1; i < 30; i++)
            if (two[i][0] == name[0] && two[i][1] == name[1]) cats[k++] = i;
        if (name[0] == 'L' && (name[1] == '&' || name[1] == 'C')) cats[k++] = 1, cats[k++] = 2, cats[k++] = 3;
    }
    return k;
}

static void aug_append(sbuf *o, const char *name, size_t n) {
    int cats[8];
    int k = gc_categories(name, n, cats);
    if (!k) return;
    pthread_once(&g_aug_once, aug_init);
    for (int i = 0; i < k; i++)
        if (g_aug[cats[i]]) sb_str(o, g_aug[cats[i]]);
}

#define WS_CLASS "\\t\\n\\x0B\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define WORD_EXTRA "\\x{200C}\\x{200D}\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}"

static void word_class(sbuf *o) {
    static const char *parts[] = {"L", "Nl", "M", "Nd", "Pc"};
    for (int i = 0; i < 5; i++) {
        sb_str(o, "\\p{");
        sb_str(o, parts[i]);
        sb_str(o, "}");
        aug_append(o, parts[i], strlen(parts[i]));
    }
    sb_str(o, WORD_EXTRA);
}

static char *translate_regex(const char *pat, size_t n) {
    sbuf o = {0};
    sb_add(&o, "", 0);
    bool in_class = false;
    size_t class_start = 0;
    for (size_t i = 0; i < n;) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char e = pat[i + 1];
            if (e == 'Q') {  // \Q...\E literal: copy through
                size_t j = i + 2;
                while (j < n && !(pat[j] == '\\' && j + 1 < n && pat[j + 1] == 'E')) j++;
                j = j < n ? j + 2 : n;
                sb_add(&o, pat + i, j - i);
                i = j;
                continue;
            }
            if (e == 'p' || e == 'P') {
                const char *name = NULL;
                size_t nl = 0, end = i + 2;
                if (i + 2 < n && pat[i + 2] == '{') {
                    size_t j = i + 3;
                    while (j < n && pat[j] != '}') j++;
                    if (j < n) {
                        name = pat + i + 3;
                        nl = j - (i + 3);
                        end = j + 1;
                    }
                } else if (i + 2 < n) {
                    name = pat + i + 2;
                    nl = 1;
                    end = i + 3;
                }
                if (!name) {
                    sb_add(&o, pat + i, 2);
                    i += 2;
                    continue;
                }
                int cats[8];
                bool gc = gc_categories(name, nl, cats) > 0;
                if (!gc || (e == 'P' && in_class)) {
                    sb_add(&o, pat + i, end - i);
                } else if (in_class) {
                    sb_add(&o, pat + i, end - i);
                    aug_append(&o, name, nl);
                } else {
                    sb_str(&o, e == 'P' ? "[^\\p{" : "[\\p{");
                    sb_add(&o, name, nl);
                    sb_str(&o, "}");
                    aug_append(&o, name, nl);
                    sb_str(&o, "]");
                }
                i = end;
                continue;
            }
            if (e == 's' || e == 'd' || e == 'w' || e == 'h') {
                if (!in_class) sb_str(&o, "[");
                if (e == 's') sb_str(&o, WS_CLASS);
                else if (e == 'd') sb_str(&o, "\\p{Nd}"), aug_append(&o, "Nd", 2);
                else if (e == 'w') word_class(&o);
                else sb_str(&o, "0-9a-fA-F");
                if (!in_class) sb_str(&o, "]");
                i += 2;
                continue;
            }
            if (e == 'S' || e == 'D' || e == 'W' || e == 'H') {
                if (in_class) {
                    if (e == 'H') sb_str(&o, "\\x00-\\x2F\\x3A-\\x40\\x47-\\x60\\x67-\\x{10FFFF}");
                    else sb_add(&o, pat + i, 2);  // cannot complement inside a class: PCRE2's own class
                } else {
                    sb_str(&o, "[^");
                    if (e == 'S') sb_str(&o, WS_CLASS);
                    else if (e == 'D') sb_str(&o, "\\p{Nd}"), aug_append(&o, "Nd", 2);
                    else if (e == 'W') word_class(&o);
                    else sb_str(&o, "0-9a-fA-F");
                    sb_str(&o, "]");
                }
                i += 2;
                continue;
            }
            // any other escape: copy the backslash and the whole next character
            size_t l = 1;
            uint8_t b = (uint8_t)e;
            if (b >= 0xF0) l = 4;
            else if (b >= 0xE0) l = 3;
            else if (b >= 0xC0) l = 2;
            if (i + 1 + l > n) l = n - i - 1;
            sb_add(&o, pat + i, 1 + l);
            i += 1 + l;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            sb_add(&o, "[", 1);
            i++;
            if (i < n && pat[i] == '^') sb_add(&o, "^", 1), i++;
            class_start = i;
            if (i < n && pat[i] == ']') sb_add(&o, "]", 1), i++;  // literal ] first in a class
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && pat[i + 1] == ':') {  // POSIX [:name:]
            size_t j = i + 2;
            while (j + 1 < n && !(pat[j] == ':' && pat[j + 1] == ']')) j++;
            j = j + 1 < n ? j + 2 : n;
            sb_add(&o, pat + i, j - i);
            i = j;
            continue;
        }
        if (in_class && c == ']' && i > class_start) {
            in_class = false;
            sb_add(&o, "]", 1);
            i++;
            continue;
        }
        sb_add(&o, pat + i, 1);
        i++;
    }
    return o.p;
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

/* ------------------------------------------------------------------------------------------------ */
/* added-token trie                                                                                  */

static void trie_init(trie *t) {
    memset(t, 0, sizeof *t);
    t->cap = 16;
    t->nodes = pt_calloc(t->cap, sizeof(trie_node));
    t->n = 1;
    t->nodes[0].term = -1;
    t->empty = true;
}

static uint32_t trie_child(const trie *t, uint32_t node, uint8_t b) {
    if (node == 0) return t->root_child[b];
    for (uint32_t c = t->nodes[node].child; c; c = t->nodes[c].sibling)
        if (t->nodes[c].byte == b) return c;
    return 0;
}

static void trie_add(trie *t, const char *s, size_t n, int32_t term) {
    if (!n) return;
    uint32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        uint32_t c = trie_child(t, node, b);
        if (!c) {
            if (t->n == t->cap) {
                t->cap *= 2;
                t->nodes = pt_realloc(t->nodes, t->cap * sizeof(trie_node));
            }
            c = (uint32_t)t->n++;
            t->nodes[c] = (trie_node){0, 0, -1, b};
            if (node == 0) t->root_child[b] = c;
            else {
                t->nodes[c].sibling = t->nodes[node].child;
                t->nodes[node].child = c;
            }
        }
        node = c;
    }
    t->nodes[node].term = term;
    t->first[(uint8_t)s[0]] = true;
    t->empty = false;
}

// Leftmost-longest match in s[from..n): returns true with [*ms, *me) and the added index.
static bool trie_find(const trie *t, const uint8_t *s, size_t n, size_t from, size_t *ms, size_t *me, int32_t *term) {
    for (size_t i = from; i < n; i++) {
        if (!t->first[s[i]]) continue;
        uint32_t node = 0;
        int32_t best = -1;
        size_t best_end = 0;
        for (size_t j = i; j < n; j++) {
            node = trie_child(t, node, s[j]);
            if (!node) break;
            if (t->nodes[node].term >= 0) {
                best = t->nodes[node].term;
                best_end = j + 1;
            }
        }
        if (best >= 0) {
            *ms = i;
            *me = best_end;
            *term = best;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------------------------------ */
/* loading                                                                                           */

static int json_bool(const cJSON *o, const char *key, bool def, bool *out, const char *what) {
    *out = def;
    int r = pt_json_get_bool(o, key, out, what);
    return r < 0 ? -1 : 0;
}

static const char *json_type(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

// Vocabulary string -> id (as HF's model.token_to_id).
static uint32_t vocab_lookup(const pt_tokenizer *t, const char *s, size_t n, uint8_t *scratch) {
    size_t rn;
    if (bytelevel_to_raw((const uint8_t *)s, n, scratch, &rn)) return sm_get(&t->raw, scratch, rn);
    return sm_get(&t->str, s, n);
}

static int load_model(pt_tokenizer *t, const cJSON *model, uint32_t *max_id) {
    const char *nm = t->name;
    if (!cJSON_IsObject(model)) {
        pt_set_error("%s: field \"model\" is missing or not an object", nm);
        return -1;
    }
    const char *type = json_type(model);
    if (type && strcmp(type, "BPE") != 0) {
        pt_set_error("%s: model.type is \"%s\"; only byte-level BPE models are supported", nm, type);
        return -1;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab)) {
        pt_set_error("%s: model.vocab is missing or not an object", nm);
        return -1;
    }
    if (!cJSON_IsArray(merges)) {
        pt_set_error("%s: model.merges is missing or not an array", nm);
        return -1;
    }
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (it && !cJSON_IsNull(it)) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 1) {
            pt_set_error("%s: model.dropout must be null or a number in [0, 1]", nm);
            return -1;
        }
        if (it->valuedouble != 0) {
            pt_set_error("%s: model.dropout = %g is not supported (BPE dropout is random; tokenization here is "
                         "deterministic)", nm, it->valuedouble);
            return -1;
        }
    }
    static const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *v = NULL;
        if (pt_json_get_string(model, affix[i], &v, nm) < 0) return -1;
        if (v && *v) {
            pt_set_error("%s: model.%s = \"%s\" is not supported (byte-level BPE uses none)", nm, affix[i], v);
            return -1;
        }
    }
    if (json_bool(model, "fuse_unk", false, &t->fuse_unk, nm) || json_bool(model, "byte_fallback", false, &t->byte_fallback, nm) ||
        json_bool(model, "ignore_merges", false, &t->ignore_merges, nm))
        return -1;
    const char *unk = NULL;
    if (pt_json_get_string(model, "unk_token", &unk, nm) < 0) return -1;

    // vocabulary
    size_t nv = (size_t)cJSON_GetArraySize(vocab);
    sm_init(&t->raw, &t->keys, nv);
    sm_init(&t->str, &t->keys, 64);
    uint8_t *scratch = pt_malloc(4096);
    size_t scap = 4096;
    uint32_t mx = 0;
    size_t count = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_VOCAB ||
            e->valuedouble != (double)(uint32_t)e->valuedouble) {
            pt_set_error("%s: model.vocab[\"%.40s\"] must be an integer id in [0, %u)", nm, e->string, MAX_VOCAB);
            free(scratch);
            return -1;
        }
        uint32_t id = (uint32_t)e->valuedouble;
        size_t n = strlen(e->string);
        if (n > scap) {
            scap = n * 2;
            scratch = pt_realloc(scratch, scap);
        }
        size_t rn;
        if (bytelevel_to_raw((const uint8_t *)e->string, n, scratch, &rn)) {
            if (sm_get(&t->raw, scratch, rn) == NO_ID) count++;
            sm_put(&t->raw, scratch, rn, id);
        } else {
            if (sm_get(&t->str, e->string, n) == NO_ID) count++;
            sm_put(&t->str, e->string, n, id);
        }
        if (id > mx) mx = id;
    }
    t->model_vocab_len = (uint32_t)count;
    *max_id = count ? mx : 0;

    // merges
    size_t nm_ = (size_t)cJSON_GetArraySize(merges);
    mm_init(&t->merges, nm_);
    uint32_t rank = 0;
    char *cat = NULL;
    size_t catcap = 0;
    size_t idx = 0;
    for (const cJSON *e = merges->child; e; e = e->next, idx++) {
        const char *a, *b;
        size_t al, bl;
        if (cJSON_IsString(e)) {
            const char *s = e->valuestring;
            if (strncmp(s, "#version", 8) == 0) continue;
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                pt_set_error("%s: model.merges[%zu] = \"%.60s\" is not of the form \"a b\"", nm, idx, s);
                free(scratch);
                free(cat);
                return -1;
            }
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring;
            al = strlen(a);
            b = e->child->next->valuestring;
            bl = strlen(b);
        } else {
            pt_set_error("%s: model.merges[%zu] must be a string \"a b\" or a pair [\"a\", \"b\"]", nm, idx);
            free(scratch);
            free(cat);
            return -1;
        }
        if (al + bl + 1 > catcap) {
            catcap = (al + bl + 1) * 2;
            cat = pt_realloc(cat, catcap);
        }
        if (al + bl + 1 > scap) {
            scap = (al + bl + 1) * 2;
            scratch = pt_realloc(scratch, scap);
        }
        uint32_t ia = vocab_lookup(t, a, al, scratch);
        uint32_t ib = vocab_lookup(t, b, bl, scratch);
        memcpy(cat, a, al);
        memcpy(cat + al, b, bl);
        uint32_t inew = vocab_lookup(t, cat, al + bl, scratch);
        if (ia == NO_ID || ib == NO_ID || inew == NO_ID) {
            const char *missing = ia == NO_ID ? a : ib == NO_ID ? b : NULL;
            size_t ml = ia == NO_ID ? al : bl;
            if (missing)
                pt_set_error("%s: model.merges[%zu]: token \"%.*s\" is not in the vocabulary", nm, idx, (int)PT_MIN(ml, 60),
                             missing);
            else
                pt_set_error("%s: model.merges[%zu]: merged token \"%.*s\" is not in the vocabulary", nm, idx,
                             (int)PT_MIN(al + bl, 60), cat);
            free(scratch);
            free(cat);
            return -1;
        }
        mm_put(&t->merges, ia, ib, rank, inew);
        rank++;
    }
    t->n_merges = rank;
    free(cat);

    // single bytes, byte fallback, unk
    for (int b = 0; b < 256; b++) {
        uint8_t raw = (uint8_t)b;
        t->byte_tok[b] = sm_get(&t->raw, &raw, 1);
        uint8_t u[4];
        size_t ul = utf8_enc(g_byte_cp[b], u);
        t->fb_n[b] = 0;
        if (t->byte_fallback) {
            bool ok = true;
            for (size_t k = 0; k < ul; k++) {
                char name[8];
                snprintf(name, sizeof name, "<0x%02X>", u[k]);
                uint32_t id = vocab_lookup(t, name, strlen(name), scratch);
                if (id == NO_ID) ok = false;
                t->fb_tok[b][k] = id;
            }
            if (ok) t->fb_n[b] = (uint8_t)ul;
        }
    }
    if (unk) {
        t->has_unk = true;
        t->unk_token = pt_strdup(unk);
        t->unk_id = vocab_lookup(t, unk, strlen(unk), scratch);
    }
    free(scratch);
    return 0;
}

static int add_norm(pt_tokenizer *t, const cJSON *n, const char *path) {
    const char *nm = t->name;
    if (!n || cJSON_IsNull(n)) return 0;
    if (!cJSON_IsObject(n)) {
        pt_set_error("%s: %s must be an object or null", nm, path);
        return -1;
    }
    const char *type = json_type(n);
    if (!type) {
        pt_set_error("%s: %s has no \"type\"", nm, path);
        return -1;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list)) {
            pt_set_error("%s: %s.normalizers must be an array", nm, path);
            return -1;
        }
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", path, i);
            if (add_norm(t, e, sub)) return -1;
        }
        return 0;
    }
    int opts;
    if (!strcmp(type, "NFC")) opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    else if (!strcmp(type, "NFD")) opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    else if (!strcmp(type, "NFKC")) opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    else if (!strcmp(type, "NFKD")) opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    else {
        pt_set_error("%s: %s type \"%s\" is not supported (supported: NFC, NFD, NFKC, NFKD and Sequence of these)", nm,
                     path, type);
        return -1;
    }
    if (t->n_norm == MAX_NORM) {
        pt_set_error("%s: %s: too many normalizers (at most %d)", nm, path, MAX_NORM);
        return -1;
    }
    t->norm[t->n_norm++] = opts;
    return 0;
}

static int compile_re(pt_tokenizer *t, const char *pat, size_t n, bool literal, const char *path) {
    if (t->n_re == MAX_STAGES) {
        pt_set_error("%s: %s: too many pre-tokenizers (at most %d)", t->name, path, MAX_STAGES);
        return -1;
    }
    char *tr = NULL;
    uint32_t opts = PCRE2_UTF;
    if (literal) opts |= PCRE2_LITERAL;  // (UCP is not allowed with LITERAL and is irrelevant to it)
    else {
        opts |= PCRE2_UCP;
        tr = translate_regex(pat, n);
        opts |= PCRE2_MULTILINE;
        pat = tr;
        n = strlen(tr);
    }
    int err;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, n, opts, &err, &eoff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        pt_set_error("%s: %s: cannot compile the regex: %s (at offset %zu)", t->name, path, (char *)msg, (size_t)eoff);
        free(tr);
        return -1;
    }
    free(tr);
    t->re_jit[t->n_re] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    t->re[t->n_re] = re;
    return t->n_re++;
}

static const char *GPT2_RE = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_pretok(pt_tokenizer *t, const cJSON *p, const char *path) {
    const char *nm = t->name;
    if (!cJSON_IsObject(p)) {
        pt_set_error("%s: %s must be an object", nm, path);
        return -1;
    }
    const char *type = json_type(p);
    if (!type) {
        pt_set_error("%s: %s has no \"type\"", nm, path);
        return -1;
    }
    if (t->n_stages > 0 && t->stages[t->n_stages - 1].kind == ST_BYTELEVEL) {
        pt_set_error("%s: %s (%s) follows the ByteLevel pre-tokenizer; only a final ByteLevel is supported", nm, path,
                     type);
        return -1;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list)) {
            pt_set_error("%s: %s.pretokenizers must be an array", nm, path);
            return -1;
        }
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", path, i);
            if (add_pretok(t, e, sub)) return -1;
        }
        return 0;
    }
    if (t->n_stages == MAX_STAGES) {
        pt_set_error("%s: %s: too many pre-tokenizers (at most %d)", nm, path, MAX_STAGES);
        return -1;
    }
    stage sg = {0};
    sg.re = -1;
    char sub[300];
    if (!strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *rx = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
        const cJSON *lit = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
        const cJSON *src = cJSON_IsString(rx) ? rx : cJSON_IsString(lit) ? lit : NULL;
        if (!src) {
            pt_set_error("%s: %s.pattern must be {\"Regex\": string} or {\"String\": string}", nm, path);
            return -1;
        }
        const char *beh = NULL;
        if (pt_json_get_string(p, "behavior", &beh, nm) < 0) return -1;
        if (!beh) {
            pt_set_error("%s: %s.behavior is missing", nm, path);
            return -1;
        }
        if (!strcmp(beh, "Isolated")) sg.behavior = B_ISOLATED;
        else if (!strcmp(beh, "Removed")) sg.behavior = B_REMOVED;
        else if (!strcmp(beh, "MergedWithPrevious")) sg.behavior = B_MERGED_PREV;
        else if (!strcmp(beh, "MergedWithNext")) sg.behavior = B_MERGED_NEXT;
        else if (!strcmp(beh, "Contiguous")) sg.behavior = B_CONTIGUOUS;
        else {
            pt_set_error("%s: %s.behavior \"%s\" is not a known split behaviour", nm, path, beh);
            return -1;
        }
        if (json_bool(p, "invert", false, &sg.invert, nm)) return -1;
        snprintf(sub, sizeof sub, "%s.pattern", path);
        sg.kind = ST_SPLIT;
        sg.re = compile_re(t, src->valuestring, strlen(src->valuestring), src == lit, sub);
        if (sg.re < 0) return -1;
    } else if (!strcmp(type, "Digits")) {
        bool individual;
        if (json_bool(p, "individual_digits", false, &individual, nm)) return -1;
        sg.kind = ST_SPLIT;
        sg.behavior = B_ISOLATED;
        snprintf(sub, sizeof sub, "%s (Digits)", path);
        sg.re = compile_re(t, individual ? "\\p{N}" : "\\p{N}+", individual ? 5 : 6, false, sub);
        if (sg.re < 0) return -1;
    } else if (!strcmp(type, "ByteLevel")) {
        if (json_bool(p, "add_prefix_space", true, &sg.add_prefix_space, nm) ||
            json_bool(p, "use_regex", true, &sg.use_regex, nm))
            return -1;
        sg.kind = ST_BYTELEVEL;
        sg.behavior = B_ISOLATED;
        if (sg.use_regex) {
            snprintf(sub, sizeof sub, "%s (ByteLevel regex)", path);
            sg.re = compile_re(t, GPT2_RE, strlen(GPT2_RE), false, sub);
            if (sg.re < 0) return -1;
        }
    } else {
        pt_set_error("%s: %s type \"%s\" is not supported (supported: Sequence, Split, Digits, ByteLevel)", nm, path, type);
        return -1;
    }
    t->stages[t->n_stages++] = sg;
    return 0;
}

static int load_decoder(pt_tokenizer *t, const cJSON *d) {
    if (!d || cJSON_IsNull(d)) {
        t->decoder = 0;
        return 0;
    }
    const char *type = cJSON_IsObject(d) ? json_type(d) : NULL;
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1) return load_decoder(t, list->child);
    }
    if (type && !strcmp(type, "ByteLevel")) {
        t->decoder = 1;
        return 0;
    }
    pt_set_error("%s: decoder type \"%s\" is not supported (supported: ByteLevel)", t->name, type ? type : "?");
    return -1;
}

// Applies the normalizers to s into a malloc'd string (for added-token contents at load time).
static int normalize_string(tstate *st, const uint8_t *s, size_t n, const uint8_t **out, size_t *outn);
static tstate *state_acquire(pt_tokenizer *t);
static void state_release(pt_tokenizer *t, tstate *st);

static int load_added(pt_tokenizer *t, const cJSON *list, uint32_t *max_id) {
    const char *nm = t->name;
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) {
        pt_set_error("%s: added_tokens must be an array", nm);
        return -1;
    }
    size_t cap = (size_t)cJSON_GetArraySize(list);
    t->added = pt_calloc(cap ? cap : 1, sizeof(added_tok));
    sm_init(&t->added_map, &t->added_keys, cap);
    uint32_t next_id = t->model_vocab_len;  // HF: max added id + 1 or the model's vocab size
    uint8_t *scratch = NULL;
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        char what[64];
        snprintf(what, sizeof what, "%s: added_tokens[%d]", nm, i);
        if (!cJSON_IsObject(e)) {
            pt_set_error("%s must be an object", what);
            free(scratch);
            return -1;
        }
        const char *content = NULL;
        if (pt_json_get_string(e, "content", &content, what) < 0) {
            free(scratch);
            return -1;
        }
        if (!content) {
            pt_set_error("%s: field \"content\" is missing", what);
            free(scratch);
            return -1;
        }
        added_tok a = {0};
        if (json_bool(e, "single_word", false, &a.single_word, what) || json_bool(e, "lstrip", false, &a.lstrip, what) ||
            json_bool(e, "rstrip", false, &a.rstrip, what) || json_bool(e, "normalized", true, &a.normalized, what) ||
            json_bool(e, "special", false, &a.special, what)) {
            free(scratch);
            return -1;
        }
        int64_t file_id = -1;
        if (pt_json_get_int(e, "id", &file_id, what) < 0) {
            free(scratch);
            return -1;
        }
        size_t len = strlen(content);
        if (!len) continue;  // HF ignores empty added tokens
        uint32_t existing = sm_get(&t->added_map, content, len);
        uint32_t id;
        added_tok *slot = NULL;
        if (existing != NO_ID) {
            id = existing;
            for (size_t k = 0; k < t->n_added; k++)
                if (t->added[k].id == id) slot = &t->added[k];
        } else {
            scratch = pt_realloc(scratch, len + 1);
            id = vocab_lookup(t, content, len, scratch);
            if (id == NO_ID) id = next_id++;
        }
        if (id >= MAX_VOCAB) {
            pt_set_error("%s: id %u is too large", what, id);
            free(scratch);
            return -1;
        }
        if (file_id >= 0 && (uint64_t)file_id != id)
            pt_warn("%s: token '%s' has id %lld in the file but gets id %u (as in HF tokenizers)", nm, content,
                    (long long)file_id, id);
        if (!slot) {
            // an id already used by another added token: replace it (HF's id -> token map)
            for (size_t k = 0; k < t->n_added; k++)
                if (t->added[k].id == id) slot = &t->added[k];
        }
        if (slot) {
            free(slot->content);
            if (slot->pattern != slot->content) free(slot->pattern);
        } else {
            slot = &t->added[t->n_added++];
        }
        a.content = pt_strdup(content);
        a.len = len;
        a.pattern = a.content;
        a.plen = len;
        a.id = id;
        *slot = a;
        sm_put(&t->added_map, content, len, id);
        if (id > *max_id) *max_id = id;
    }
    free(scratch);
    // normalized forms of normalized tokens
    if (t->n_norm) {
        tstate *st = state_acquire(t);
        if (!st) return -1;
        for (size_t k = 0; k < t->n_added; k++) {
            added_tok *a = &t->added[k];
            if (!a->normalized) continue;
            const uint8_t *o;
            size_t on;
            if (normalize_string(st, (const uint8_t *)a->content, a->len, &o, &on)) {
                state_release(t, st);
                pt_prefix_error("%s: added token '%s': ", nm, a->content);
                return -1;
            }
            if (on != a->len || memcmp(o, a->content, on)) {
                a->pattern = pt_malloc(on + 1);
                memcpy(a->pattern, o, on);
                a->pattern[on] = 0;
                a->plen = on;
            }
        }
        state_release(t, st);
    }
    return 0;
}

static void build_id_tables(pt_tokenizer *t, uint32_t max_id) {
    uint32_t V = max_id + 1;
    t->vocab_size = V;
    t->tok_off = pt_malloc(V * sizeof(uint32_t));
    t->tok_len = pt_malloc(V * sizeof(uint32_t));
    t->dec_off = pt_malloc(V * sizeof(uint32_t));
    t->dec_len = pt_malloc(V * sizeof(uint32_t));
    t->flags = pt_calloc(V, 1);
    for (uint32_t i = 0; i < V; i++) t->tok_len[i] = t->dec_len[i] = NO_ID;
    // model vocabulary: raw-keyed tokens decode to their raw bytes
    uint8_t u[4];
    for (size_t s = 0; s <= t->raw.mask; s++) {
        const sm_slot *sl = &t->raw.slots[s];
        if (sl->val == NO_ID) continue;
        const uint8_t *raw = (const uint8_t *)t->keys.p + sl->off;
        size_t start = t->strs.len;
        for (uint32_t k = 0; k < sl->len; k++) {
            size_t l = utf8_enc(g_byte_cp[raw[k]], u);
            arena_put(&t->strs, u, l);
        }
        t->tok_off[sl->val] = (uint32_t)start;
        t->tok_len[sl->val] = (uint32_t)(t->strs.len - start);
        t->strs.len++;  // keep the NUL
        t->dec_off[sl->val] = sl->off;  // decoded bytes are the raw key itself (in t->keys)
        t->dec_len[sl->val] = sl->len;
    }
    for (size_t s = 0; s <= t->str.mask; s++) {
        const sm_slot *sl = &t->str.slots[s];
        if (sl->val == NO_ID) continue;
        t->tok_off[sl->val] = sl->off | 0x80000000u;  // high bit: string lives in t->keys
        t->tok_len[sl->val] = sl->len;
        t->dec_off[sl->val] = sl->off;
        t->dec_len[sl->val] = sl->len;
    }
}

static int finish_added(pt_tokenizer *t) {
    // added tokens override the per-id tables; decoding follows the ByteLevel decoder's rule: a token made
    // only of alphabet chars decodes to the raw bytes, any other token to its UTF-8 text.
    for (size_t k = 0; k < t->n_added; k++) {
        added_tok *a = &t->added[k];
        const char *shown = a->normalized ? a->pattern : a->content;  // HF returns the normalized form
        size_t sl = a->normalized ? a->plen : a->len;
        uint32_t off = arena_put_z(&t->strs, shown, sl);
        t->tok_off[a->id] = off;
        t->tok_len[a->id] = (uint32_t)sl;
        uint8_t *raw = pt_malloc(sl + 1);
        size_t rn;
        uint32_t doff;
        if (t->decoder == 1 && bytelevel_to_raw((const uint8_t *)shown, sl, raw, &rn)) {
            doff = arena_put(&t->decs, raw, rn);
        } else {
            doff = arena_put(&t->decs, shown, sl);
            rn = sl;
        }
        free(raw);
        t->dec_off[a->id] = doff | 0x80000000u;  // high bit: bytes live in t->decs
        t->dec_len[a->id] = (uint32_t)rn;
        t->flags[a->id] |= F_ADDED;
        if (a->special) t->flags[a->id] |= F_SPECIAL;
    }
    // special set is by content: a non-special token with the content of a special one is special too
    trie_init(&t->trie_raw);
    trie_init(&t->trie_norm);
    for (size_t k = 0; k < t->n_added; k++) {
        added_tok *a = &t->added[k];
        if (a->normalized) trie_add(&t->trie_norm, a->pattern, a->plen, (int32_t)k);
        else trie_add(&t->trie_raw, a->content, a->len, (int32_t)k);
    }
    return 0;
}

static pt_tokenizer *load_fail(pt_tokenizer *t, cJSON *root) {
    if (root) cJSON_Delete(root);
    tokenizer_free(t);
    return NULL;
}

pt_tokenizer *tokenizer_load_json(const char *json, size_t len, const char *name) {
    pthread_once(&g_bytemap_once, bytemap_init);
    if (!name) name = "tokenizer.json";
    pt_tokenizer *t = pt_calloc(1, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    t->name = pt_strdup(name);
    pt_sha256_hex(json, len, t->sha_hex);
    for (int i = 0; i < 32; i++) {
        unsigned v;
        sscanf(t->sha_hex + 2 * i, "%2x", &v);
        t->sha[i] = (uint8_t)v;
    }
    // HF's loader reads the file as UTF-8 text and refuses anything else; the vocabulary code below decodes
    // token strings assuming complete UTF-8 sequences (a truncated one read past the string: found by fuzzing).
    for (size_t i = 0, sub; i < len;) {
        const size_t l = utf8_seq((const uint8_t *)json + i, len - i, &sub);
        if (!l) {
            pt_set_error("%s: not valid UTF-8 at byte %zu (tokenizer.json must be UTF-8 text)", name, i);
            return load_fail(t, NULL);
        }
        i += l;
    }
    cJSON *root = pt_json_parse(json, len, name);
    if (!root) return load_fail(t, NULL);
    if (!cJSON_IsObject(root)) {
        pt_set_error("%s: the top level must be a JSON object", name);
        return load_fail(t, root);
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (ver && !(cJSON_IsString(ver) && !strcmp(ver->valuestring, "1.0"))) {
        pt_set_error("%s: unknown tokenizer.json version (expected \"1.0\")", name);
        return load_fail(t, root);
    }
    uint32_t max_id = 0;
    if (load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), &max_id)) return load_fail(t, root);
    if (add_norm(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer")) return load_fail(t, root);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (!pre || cJSON_IsNull(pre)) {
        pt_set_error("%s: pre_tokenizer is null: not a byte-level BPE tokenizer (a ByteLevel pre-tokenizer is required)",
                     name);
        return load_fail(t, root);
    }
    if (add_pretok(t, pre, "pre_tokenizer")) return load_fail(t, root);
    if (t->n_stages == 0 || t->stages[t->n_stages - 1].kind != ST_BYTELEVEL) {
        pt_set_error("%s: pre_tokenizer has no final ByteLevel step: not a byte-level BPE tokenizer", name);
        return load_fail(t, root);
    }
    for (int i = 0; i < t->n_stages - 1; i++)
        if (t->stages[i].kind == ST_BYTELEVEL) {
            pt_set_error("%s: pre_tokenizer has more than one ByteLevel step", name);
            return load_fail(t, root);
        }
    if (load_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"))) return load_fail(t, root);
    if (load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &max_id)) return load_fail(t, root);
    cJSON_Delete(root);
    build_id_tables(t, max_id);
    finish_added(t);
    return t;
}

pt_tokenizer *tokenizer_load(const char *path) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return NULL;
    pt_tokenizer *t = tokenizer_load_json(text, len, path);
    free(text);
    return t;
}

/* ------------------------------------------------------------------------------------------------ */
/* per-thread state                                                                                  */

static void state_free(tstate *st) {
    for (int i = 0; i < MAX_STAGES; i++) {
        if (st->md[i]) pcre2_match_data_free(st->md[i]);
        free(st->pfx[i]);
        free(st->spl[i].v);
    }
    if (st->mctx) pcre2_match_context_free(st->mctx);
    if (st->jstack) pcre2_jit_stack_free(st->jstack);
    free(st->san);
    free(st->norm[0]);
    free(st->norm[1]);
    free(st->u32);
    free(st->sym);
    free(st->rk);
    free(st->nid);
    free(st->prev);
    free(st->next);
    free(st->alive);
    free(st->heap);
    free(st->cache);
    free(st->ckeys.p);
    free(st->cids);
    free(st);
}

static tstate *state_new(pt_tokenizer *t) {
    tstate *st = pt_calloc(1, sizeof *st);
    st->tok = t;
    st->mctx = pcre2_match_context_create(NULL);
    st->jstack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    if (!st->mctx || !st->jstack) {
        pt_set_error("tokenizer: cannot allocate PCRE2 match state");
        state_free(st);
        return NULL;
    }
    pcre2_jit_stack_assign(st->mctx, NULL, st->jstack);
    for (int i = 0; i < t->n_re; i++) {
        st->md[i] = pcre2_match_data_create_from_pattern(t->re[i], NULL);
        if (!st->md[i]) {
            pt_set_error("tokenizer: cannot allocate PCRE2 match data");
            state_free(st);
            return NULL;
        }
    }
    st->cache = pt_calloc(CACHE_SLOTS, sizeof(cslot));
    return st;
}

static tstate *state_acquire(pt_tokenizer *t) {
    pthread_mutex_lock(&t->lock);
    tstate *st = t->free_states;
    if (st) t->free_states = st->next_free;
    pthread_mutex_unlock(&t->lock);
    if (st) return st;
    st = state_new(t);
    if (!st) return NULL;
    pthread_mutex_lock(&t->lock);
    st->next_all = t->all_states;
    t->all_states = st;
    pthread_mutex_unlock(&t->lock);
    return st;
}

static void state_release(pt_tokenizer *t, tstate *st) {
    pthread_mutex_lock(&t->lock);
    st->next_free = t->free_states;
    t->free_states = st;
    pthread_mutex_unlock(&t->lock);
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    *cap = c;
    return pt_realloc(p, c * elem);
}

/* ------------------------------------------------------------------------------------------------ */
/* normalization                                                                                     */

// One utf8proc normalization of s (valid UTF-8) into *buf. ASCII bytes are starters that never compose
// with what precedes them, so only runs of non-ASCII characters (with the ASCII character before them)
// go through utf8proc.
static int normalize_one(tstate *st, const uint8_t *s, size_t n, int opts, uint8_t **buf, size_t *cap, size_t *outn) {
    size_t o = 0, i = 0;
    *buf = grow(*buf, cap, n + 16, 1);
    while (i < n) {
        if (s[i] < 0x80) {
            size_t a = i;
            while (i < n && s[i] < 0x80) i++;
            *buf = grow(*buf, cap, o + (i - a) + 1, 1);
            memcpy(*buf + o, s + a, i - a);
            o += i - a;
            continue;
        }
        size_t a = i;
        if (a > 0 && s[a - 1] < 0x80) {
            a--;
            o--;
        }
        size_t b = i;
        bool inert_next = false;
        while (b < n && s[b] >= 0x80) {
            size_t l;
            int32_t c = utf8_dec(s + b, &l);
            if (hf_inert(c)) {
                inert_next = true;
                break;
            }
            b += l;
        }
        while (b > a) {
            utf8proc_ssize_t r = utf8proc_decompose(s + a, (utf8proc_ssize_t)(b - a), st->u32, (utf8proc_ssize_t)st->u32_cap,
                                                    (utf8proc_option_t)opts);
            if (r < 0) {
                pt_set_error("Unicode normalization failed: %s", utf8proc_errmsg(r));
                return -1;
            }
            if ((size_t)r >= st->u32_cap) {  // reencode writes a NUL after the UTF-8: keep one spare slot
                st->u32 = grow(st->u32, &st->u32_cap, (size_t)r + 16, sizeof(int32_t));
                continue;
            }
            r = utf8proc_reencode(st->u32, r, (utf8proc_option_t)opts);
            if (r < 0) {
                pt_set_error("Unicode normalization failed: %s", utf8proc_errmsg(r));
                return -1;
            }
            *buf = grow(*buf, cap, o + (size_t)r + 1, 1);
            memcpy(*buf + o, st->u32, (size_t)r);
            o += (size_t)r;
            break;
        }
        i = b;
        if (inert_next) {  // copy the inert code point through unchanged
            size_t l;
            utf8_dec(s + i, &l);
            *buf = grow(*buf, cap, o + l + 1, 1);
            memcpy(*buf + o, s + i, l);
            o += l;
            i += l;
        }
    }
    *outn = o;
    return 0;
}

static int normalize_string(tstate *st, const uint8_t *s, size_t n, const uint8_t **out, size_t *outn) {
    const pt_tokenizer *t = st->tok;
    *out = s;
    *outn = n;
    if (!t->n_norm) return 0;
    size_t i = 0;
    while (i < n && s[i] < 0x80) i++;
    if (i == n) return 0;  // ASCII is invariant under every normalization form
    const uint8_t *cur = s;
    size_t curn = n;
    for (int k = 0; k < t->n_norm; k++) {
        int w = k & 1;
        size_t on;
        if (normalize_one(st, cur, curn, t->norm[k], &st->norm[w], &st->norm_cap[w], &on)) return -1;
        cur = st->norm[w];
        curn = on;
    }
    *out = cur;
    *outn = curn;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* BPE                                                                                               */

static inline void push_id(tstate *st, uint32_t id) {
    pt_token_buf *o = st->out;
    if (o->len == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 1024;
        o->ids = pt_realloc(o->ids, o->cap * sizeof(uint32_t));
    }
    o->ids[o->len++] = id;
}

static void cache_clear(tstate *st) {
    memset(st->cache, 0, CACHE_SLOTS * sizeof(cslot));
    st->ccount = 0;
    st->ckeys.len = 0;
    st->cids_len = 0;
}

static size_t bpe_merge_naive(const pt_tokenizer *t, tstate *st, size_t m) {
    uint32_t *sym = st->sym, *rk = st->rk, *nid = st->nid;
    for (size_t i = 0; i + 1 < m; i++) {
        const mm_slot *s = mm_get(&t->merges, sym[i], sym[i + 1]);
        rk[i] = s ? s->rank : NO_ID;
        nid[i] = s ? s->nid : NO_ID;
    }
    while (m > 1) {
        uint32_t best = NO_ID;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rk[i] < best) best = rk[i], bi = i;
        if (best == NO_ID) break;
        sym[bi] = nid[bi];
        // remove symbol bi+1 and pair bi+1
        memmove(sym + bi + 1, sym + bi + 2, (m - bi - 2) * sizeof(uint32_t));
        if (bi + 2 < m) {
            memmove(rk + bi + 1, rk + bi + 2, (m - bi - 3) * sizeof(uint32_t));
            memmove(nid + bi + 1, nid + bi + 2, (m - bi - 3) * sizeof(uint32_t));
        }
        m--;
        if (bi > 0) {
            const mm_slot *s = mm_get(&t->merges, sym[bi - 1], sym[bi]);
            rk[bi - 1] = s ? s->rank : NO_ID;
            nid[bi - 1] = s ? s->nid : NO_ID;
        }
        if (bi + 1 < m) {
            const mm_slot *s = mm_get(&t->merges, sym[bi], sym[bi + 1]);
            rk[bi] = s ? s->rank : NO_ID;
            nid[bi] = s ? s->nid : NO_ID;
        }
    }
    return m;
}

static inline bool hless(const hitem *a, const hitem *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void hpush(tstate *st, size_t *hn, hitem it) {
    st->heap = grow(st->heap, &st->hcap, *hn + 1, sizeof(hitem));
    size_t i = (*hn)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&it, &st->heap[p])) break;
        st->heap[i] = st->heap[p];
        i = p;
    }
    st->heap[i] = it;
}

static hitem hpop(tstate *st, size_t *hn) {
    hitem top = st->heap[0];
    hitem last = st->heap[--(*hn)];
    size_t n = *hn, i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const hitem *best = &last;
        if (l < n && hless(&st->heap[l], best)) m = l, best = &st->heap[l];
        if (r < n && hless(&st->heap[r], best)) m = r;
        if (m == i) break;
        st->heap[i] = st->heap[m];
        i = m;
    }
    if (n) st->heap[i] = last;
    return top;
}

// HF's Word::merge_all: a priority queue of (rank, position), lowest first.
static size_t bpe_merge_heap(const pt_tokenizer *t, tstate *st, size_t m) {
    uint32_t *c = st->sym;
    int32_t *prev = st->prev, *next = st->next;
    uint8_t *alive = st->alive;
    size_t hn = 0;
    for (size_t i = 0; i < m; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)(i + 1) : -1;
        alive[i] = 1;
    }
    for (size_t i = 0; i + 1 < m; i++) {
        const mm_slot *s = mm_get(&t->merges, c[i], c[i + 1]);
        if (s) hpush(st, &hn, (hitem){s->rank, (uint32_t)i, s->nid});
    }
    while (hn) {
        hitem top = hpop(st, &hn);
        uint32_t p = top.pos;
        if (!alive[p] || next[p] < 0) continue;
        int32_t q = next[p];
        const mm_slot *s = mm_get(&t->merges, c[p], c[q]);
        if (!s || s->nid != top.nid) continue;
        c[p] = top.nid;
        alive[q] = 0;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = (int32_t)p;
        if (prev[p] >= 0) {
            const mm_slot *s2 = mm_get(&t->merges, c[prev[p]], c[p]);
            if (s2) hpush(st, &hn, (hitem){s2->rank, (uint32_t)prev[p], s2->nid});
        }
        if (next[p] >= 0) {
            const mm_slot *s2 = mm_get(&t->merges, c[p], c[next[p]]);
            if (s2) hpush(st, &hn, (hitem){s2->rank, p, s2->nid});
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        if (alive[i]) c[k++] = c[i];
    return k;
}

static int bpe_word(tstate *st, const uint8_t *w, size_t n) {
    const pt_tokenizer *t = st->tok;
    if (!n) return 0;
    if (t->ignore_merges) {
        uint32_t id = sm_get(&t->raw, w, n);
        if (id != NO_ID) {
            push_id(st, id);
            return 0;
        }
    }
    if (n == 1 && t->byte_tok[w[0]] != NO_ID) {
        push_id(st, t->byte_tok[w[0]]);
        return 0;
    }
    uint64_t h = 0;
    size_t slot = 0;
    bool cacheable = n <= CACHE_MAX_WORD;
    if (cacheable) {
        h = hash_bytes(w, n);
        for (slot = h & (CACHE_SLOTS - 1);; slot = (slot + 1) & (CACHE_SLOTS - 1)) {
            cslot *c = &st->cache[slot];
            if (!c->klen) break;
            if (c->h == h && c->klen == n && memcmp(st->ckeys.p + c->koff, w, n) == 0) {
                const uint32_t *ids = st->cids + c->ioff;
                for (uint32_t k = 0; k < c->nids; k++) push_id(st, ids[k]);
                return 0;
            }
        }
    }
    size_t need = 2 * n + 1;
    if (need > st->bcap) {
        size_t cap = st->bcap;
        st->sym = grow(st->sym, &cap, need, sizeof(uint32_t));
        cap = st->bcap;
        st->rk = grow(st->rk, &cap, need, sizeof(uint32_t));
        cap = st->bcap;
        st->nid = grow(st->nid, &cap, need, sizeof(uint32_t));
        cap = st->bcap;
        st->prev = grow(st->prev, &cap, need, sizeof(int32_t));
        cap = st->bcap;
        st->next = grow(st->next, &cap, need, sizeof(int32_t));
        cap = st->bcap;
        st->alive = grow(st->alive, &cap, need, 1);
        st->bcap = cap;
    }
    size_t m = 0;
    bool unk_pending = false;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = t->byte_tok[w[i]];
        if (id != NO_ID) {
            if (unk_pending) st->sym[m++] = t->unk_id, unk_pending = false;
            st->sym[m++] = id;
            continue;
        }
        if (t->fb_n[w[i]]) {  // HF adds the fallback bytes without flushing a pending unk
            for (int k = 0; k < t->fb_n[w[i]]; k++) st->sym[m++] = t->fb_tok[w[i]][k];
            continue;
        }
        if (t->has_unk) {
            if (t->unk_id == NO_ID) {
                pt_set_error("%s: unk_token \"%s\" is not in the vocabulary", t->name, t->unk_token);
                return -1;
            }
            if (unk_pending && !t->fuse_unk) st->sym[m++] = t->unk_id;
            unk_pending = true;
        }
        // no unk token: HF drops the character
    }
    if (unk_pending) st->sym[m++] = t->unk_id;
    if (m > g_heap_threshold) m = bpe_merge_heap(t, st, m);
    else m = bpe_merge_naive(t, st, m);
    for (size_t k = 0; k < m; k++) push_id(st, st->sym[k]);
    if (cacheable && m > 0 && m < 65536) {
        if ((st->ccount + 1) * 2 > CACHE_SLOTS || st->ckeys.len + n > CACHE_MAX_KEYS || st->cids_len + m > CACHE_MAX_IDS) {
            cache_clear(st);
            for (slot = h & (CACHE_SLOTS - 1); st->cache[slot].klen; slot = (slot + 1) & (CACHE_SLOTS - 1)) {
            }
        }
        st->cids = grow(st->cids, &st->cids_cap, st->cids_len + m, sizeof(uint32_t));
        cslot *c = &st->cache[slot];
        c->h = h;
        c->koff = arena_put(&st->ckeys, w, n);
        c->klen = (uint16_t)n;
        c->ioff = (uint32_t)st->cids_len;
        c->nids = (uint16_t)m;
        memcpy(st->cids + st->cids_len, st->sym, m * sizeof(uint32_t));
        st->cids_len += m;
        st->ccount++;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* pre-tokenization                                                                                  */

typedef struct {
    size_t last_end, last_match_end;
    bool have_last;
} re_iter;

// Oniguruma find_iter semantics (as used by HF): an empty match right after the previous match is skipped
// by advancing one character.
static int re_next(tstate *st, int re, const uint8_t *s, size_t n, re_iter *it, size_t *ms, size_t *me) {
    const pt_tokenizer *t = st->tok;
    for (;;) {
        if (it->last_end > n) return 0;
        int rc;
        if (t->re_jit[re])
            rc = pcre2_jit_match(t->re[re], s, n, it->last_end, 0, st->md[re], st->mctx);
        else
            rc = pcre2_match(t->re[re], s, n, it->last_end, PCRE2_NO_UTF_CHECK, st->md[re], st->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            pt_set_error("%s: pre-tokenizer regex failed: %s", t->name, (char *)msg);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md[re]);
        size_t a = ov[0], b = ov[1];
        if (a == b && it->have_last && it->last_match_end == b) {
            if (it->last_end < n) {
                size_t l;
                utf8_dec(s + it->last_end, &l);
                it->last_end += l;
            } else {
                it->last_end++;
            }
            continue;
        }
        it->last_end = b;
        it->last_match_end = b;
        it->have_last = true;
        *ms = a;
        *me = b;
        return 1;
    }
}

static int run_stage(tstate *st, int k, const uint8_t *p, size_t n);

static inline int emit(tstate *st, int next, const uint8_t *p, size_t n) {
    if (!n) return 0;
    return next < 0 ? bpe_word(st, p, n) : run_stage(st, next, p, n);
}

static void svec_push(svec *v, size_t a, size_t b, size_t flag) {
    v->v = grow(v->v, &v->cap, v->n + 3, sizeof(size_t));
    v->v[v->n++] = a;
    v->v[v->n++] = b;
    v->v[v->n++] = flag;
}

static int run_split(tstate *st, const stage *sg, int depth, int next, const uint8_t *s, size_t n) {
    re_iter it = {0};
    size_t ms, me, prev = 0;
    int r;
    if (sg->behavior == B_ISOLATED) {
        while ((r = re_next(st, sg->re, s, n, &it, &ms, &me)) > 0) {
            if (prev != ms && emit(st, next, s + prev, ms - prev)) return -1;
            if (emit(st, next, s + ms, me - ms)) return -1;
            prev = me;
        }
        if (r < 0) return -1;
        if (prev != n && emit(st, next, s + prev, n - prev)) return -1;
        return 0;
    }
    // other behaviours: collect (offsets, is_match) as HF's Pattern::find_matches, then fold
    svec *v = &st->spl[depth];
    v->n = 0;
    while ((r = re_next(st, sg->re, s, n, &it, &ms, &me)) > 0) {
        if (prev != ms) svec_push(v, prev, ms, 0);
        svec_push(v, ms, me, 1);
        prev = me;
    }
    if (r < 0) return -1;
    if (prev != n) svec_push(v, prev, n, 0);
    size_t cnt = v->n / 3;
    size_t *e = v->v;
    if (sg->invert)
        for (size_t i = 0; i < cnt; i++) e[3 * i + 2] ^= 1;
    // fold in place into (start, end, remove) triples; w = number of output triples
    size_t w = 0;
    bool prev_match = false;
    switch (sg->behavior) {
    case B_REMOVED:
        w = cnt;
        break;
    case B_CONTIGUOUS:
        for (size_t i = 0; i < cnt; i++) {
            bool m = e[3 * i + 2];
            if (m == prev_match && w > 0) e[3 * (w - 1) + 1] = e[3 * i + 1];
            else e[3 * w] = e[3 * i], e[3 * w + 1] = e[3 * i + 1], e[3 * w + 2] = 0, w++;
            prev_match = m;
        }
        break;
    case B_MERGED_PREV:
        for (size_t i = 0; i < cnt; i++) {
            bool m = e[3 * i + 2];
            if (m && !prev_match && w > 0) e[3 * (w - 1) + 1] = e[3 * i + 1];
            else e[3 * w] = e[3 * i], e[3 * w + 1] = e[3 * i + 1], e[3 * w + 2] = 0, w++;
            prev_match = m;
        }
        break;
    case B_MERGED_NEXT: {
        // fold from the right, writing output triples at the end of the array, then use them in order
        size_t top = cnt;  // output occupies [top, cnt)
        for (size_t ii = cnt; ii-- > 0;) {
            size_t a = e[3 * ii], b = e[3 * ii + 1];
            bool m = e[3 * ii + 2];
            if (m && !prev_match && top < cnt) e[3 * top] = a;
            else {
                top--;
                e[3 * top] = a, e[3 * top + 1] = b, e[3 * top + 2] = 0;
            }
            prev_match = m;
        }
        for (size_t i = top; i < cnt; i++)
            if (!e[3 * i + 2] && e[3 * i + 1] > e[3 * i]) {
                // copy out: nested stages may reuse deeper vectors only
                if (emit(st, next, s + e[3 * i], e[3 * i + 1] - e[3 * i])) return -1;
                e = v->v;
            }
        return 0;
    }
    }
    for (size_t i = 0; i < w; i++) {
        if (e[3 * i + 2]) continue;  // removed
        if (emit(st, next, s + e[3 * i], e[3 * i + 1] - e[3 * i])) return -1;
        e = v->v;
    }
    return 0;
}

static int run_stage(tstate *st, int k, const uint8_t *p, size_t n) {
    const stage *sg = &st->tok->stages[k];
    if (sg->kind == ST_BYTELEVEL) {
        if (sg->add_prefix_space && p[0] != ' ') {
            st->pfx[k] = grow(st->pfx[k], &st->pfx_cap[k], n + 1, 1);
            st->pfx[k][0] = ' ';
            memcpy(st->pfx[k] + 1, p, n);
            p = st->pfx[k];
            n++;
        }
        if (sg->use_regex) return run_split(st, sg, k, -1, p, n);
        return bpe_word(st, p, n);
    }
    return run_split(st, sg, k, k + 1, p, n);
}

/* ------------------------------------------------------------------------------------------------ */
/* added tokens + normalization                                                                      */

// HF AddedVocabulary::find_matches over s; gaps go to level 0 (normalize) or level 1 (pre-tokenize).
static int process_gap(tstate *st, int level, const uint8_t *s, size_t n);

static int added_split(tstate *st, const trie *tr, int level, const uint8_t *s, size_t n) {
    const pt_tokenizer *t = st->tok;
    size_t start_offset = 0, pos = 0, ms, me;
    int32_t term;
    while (pos < n && trie_find(tr, s, n, pos, &ms, &me, &term)) {
        pos = me;
        const added_tok *a = &t->added[term];
        // as HF: a special token skipped here still advances the scan past it
        if (t->encode_special && tokenizer_is_special(t, a->id)) continue;
        size_t start = ms, stop = me;
        if (a->single_word) {
            bool start_space = start == 0 || !uni_word(utf8_last(s, start));
            size_t l;
            bool stop_space = stop == n || !uni_word(utf8_dec(s + stop, &l));
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t j = ns - 1;
                while (j > 0 && (s[j] & 0xC0) == 0x80) j--;
                size_t l;
                if (!uni_white_space(utf8_dec(s + j, &l))) break;
                ns = j;
            }
            start = PT_MAX(ns, start_offset);
        }
        if (a->rstrip) {
            while (stop < n) {
                size_t l;
                if (!uni_white_space(utf8_dec(s + stop, &l))) break;
                stop += l;
            }
        }
        if (start_offset < start && process_gap(st, level, s + start_offset, start - start_offset)) return -1;
        push_id(st, a->id);
        start_offset = stop;
    }
    if (start_offset < n && process_gap(st, level, s + start_offset, n - start_offset)) return -1;
    return 0;
}

static int process_gap(tstate *st, int level, const uint8_t *s, size_t n) {
    const pt_tokenizer *t = st->tok;
    if (!n) return 0;
    if (level == 1) return run_stage(st, 0, s, n);
    const uint8_t *p;
    size_t m;
    if (normalize_string(st, s, n, &p, &m)) return -1;
    if (t->trie_norm.empty) return m ? run_stage(st, 0, p, m) : 0;
    // p may live in a normalization scratch buffer: the normalized-token pass never normalizes again
    return added_split(st, &t->trie_norm, 1, p, m);
}

int tokenizer_encode_append(pt_tokenizer *tok, const char *text, size_t len, pt_token_buf *out) {
    if (!tok || !out || (!text && len)) {
        pt_set_error("tokenizer_encode: invalid arguments");
        return -1;
    }
    if (!len) return 0;
    tstate *st = state_acquire(tok);
    if (!st) return -1;
    st->out = out;
    size_t start_len = out->len;
    const uint8_t *s = (const uint8_t *)text;
    size_t n = len;
    if (!tokenizer_utf8_valid(text, len)) {
        st->san = grow(st->san, &st->san_cap, 3 * len, 1);
        n = tokenizer_utf8_replace(text, len, (char *)st->san);
        s = st->san;
    }
    int rc = tok->trie_raw.empty ? process_gap(st, 0, s, n) : added_split(st, &tok->trie_raw, 0, s, n);
    if (rc) out->len = start_len;
    st->out = NULL;
    state_release(tok, st);
    return rc;
}

int tokenizer_encode(pt_tokenizer *tok, const char *text, size_t len, uint32_t **ids, size_t *n) {
    pt_token_buf b = {0};
    *ids = NULL;
    *n = 0;
    if (tokenizer_encode_append(tok, text, len, &b)) {
        free(b.ids);
        return -1;
    }
    *ids = b.ids;
    *n = b.len;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* decoding and accessors                                                                            */

static const char *dec_bytes(const pt_tokenizer *t, uint32_t id) {
    uint32_t off = t->dec_off[id];
    return off & 0x80000000u ? t->decs.p + (off & 0x7FFFFFFFu) : t->keys.p + off;
}

const char *tokenizer_id_to_token(const pt_tokenizer *t, uint32_t id, size_t *len) {
    if (!t || id >= t->vocab_size || t->tok_len[id] == NO_ID) return NULL;
    uint32_t off = t->tok_off[id];
    if (len) *len = t->tok_len[id];
    if (t->flags[id] & F_ADDED) return t->strs.p + off;
    return off & 0x80000000u ? t->keys.p + (off & 0x7FFFFFFFu) : t->strs.p + off;
}

int tokenizer_decode_bytes(pt_tokenizer *t, const uint32_t *ids, size_t n, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->vocab_size) {
            pt_set_error("decode: token id %u at position %zu is out of range (vocabulary size %u)", id, i, t->vocab_size);
            return -1;
        }
        if (t->dec_len[id] == NO_ID) {
            pt_set_error("decode: token id %u at position %zu is not in the vocabulary", id, i);
            return -1;
        }
        total += t->decoder == 1 ? t->dec_len[id] : t->tok_len[id] + 1;
    }
    char *o = pt_malloc(total + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (t->decoder == 1) {
            memcpy(o + k, dec_bytes(t, id), t->dec_len[id]);
            k += t->dec_len[id];
        } else {  // no decoder: HF joins the token strings with spaces
            size_t l = 0;
            const char *s = tokenizer_id_to_token(t, id, &l);
            if (i) o[k++] = ' ';
            memcpy(o + k, s, l);
            k += l;
        }
    }
    o[k] = 0;
    *out = o;
    *len = k;
    return 0;
}

int tokenizer_decode(pt_tokenizer *t, const uint32_t *ids, size_t n, char **out, size_t *len) {
    char *raw;
    size_t rn;
    if (tokenizer_decode_bytes(t, ids, n, &raw, &rn)) return -1;
    if (tokenizer_utf8_valid(raw, rn)) {
        *out = raw;
        *len = rn;
        return 0;
    }
    char *o = pt_malloc(3 * rn + 1);
    size_t on = tokenizer_utf8_replace(raw, rn, o);
    o[on] = 0;
    free(raw);
    *out = o;
    *len = on;
    return 0;
}

uint32_t tokenizer_vocab_size(const pt_tokenizer *t) { return t->vocab_size; }

int64_t tokenizer_token_id(const pt_tokenizer *t, const char *token) {
    size_t n = strlen(token);
    uint32_t id = sm_get(&t->added_map, token, n);
    if (id != NO_ID) return id;
    uint8_t *scratch = pt_malloc(n + 1);
    id = vocab_lookup(t, token, n, scratch);
    free(scratch);
    return id == NO_ID ? -1 : (int64_t)id;
}

bool tokenizer_is_special(const pt_tokenizer *t, uint32_t id) {
    if (id >= t->vocab_size) return false;
    if (t->flags[id] & F_SPECIAL) return true;
    // HF keeps special tokens as a set of contents
    size_t l;
    const char *s = tokenizer_id_to_token(t, id, &l);
    if (!s) return false;
    for (size_t k = 0; k < t->n_added; k++)
        if (t->added[k].special && t->added[k].len == l && !memcmp(t->added[k].content, s, l)) return true;
    return false;
}

void tokenizer_set_encode_special_tokens(pt_tokenizer *t, bool on) { t->encode_special = on; }

bool tokenizer_is_added(const pt_tokenizer *t, uint32_t id) { return id < t->vocab_size && (t->flags[id] & F_ADDED); }

const char *tokenizer_sha256_hex(const pt_tokenizer *t) { return t->sha_hex; }
const uint8_t *tokenizer_sha256(const pt_tokenizer *t) { return t->sha; }

void tokenizer_free(pt_tokenizer *t) {
    if (!t) return;
    for (tstate *st = t->all_states; st;) {
        tstate *nx = st->next_all;
        state_free(st);
        st = nx;
    }
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    sm_free(&t->raw);
    sm_free(&t->str);
    sm_free(&t->added_map);
    free(t->merges.slots);
    free(t->keys.p);
    free(t->strs.p);
    free(t->decs.p);
    free(t->added_keys.p);
    for (size_t k = 0; k < t->n_added; k++) {
        if (t->added[k].pattern != t->added[k].content) free(t->added[k].pattern);
        free(t->added[k].content);
    }
    free(t->added);
    free(t->trie_raw.nodes);
    free(t->trie_norm.nodes);
    free(t->tok_off);
    free(t->tok_len);
    free(t->dec_off);
    free(t->dec_len);
    free(t->flags);
    free(t->unk_token);
    free(t->name);
    pthread_mutex_destroy(&t->lock);
    free(t);
}
