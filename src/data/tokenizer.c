// Hugging Face-compatible byte-level BPE tokenizer. Design notes: docs/TOKENIZER.md.
//
// The tokenizer's files, one responsibility each (shared internals: tokenizer_internal.h):
//   tokenizer.c            UTF-8, the GPT-2 byte <-> char mapping and the Unicode classes HF agrees on
//   tokenizer_maps.c       arenas, hash maps and the added-token trie
//   tokenizer_regex.c      Oniguruma -> PCRE2 pattern translation
//   tokenizer_model.c      the BPE model: vocabulary, merges, byte tokens
//   tokenizer_load.c       tokenizer.json: normalizer, pre-tokenizer, decoder, added tokens
//   tokenizer_normalize.c  Unicode normalization
//   tokenizer_pretok.c     pre-tokenization (Split / Digits / ByteLevel)
//   tokenizer_bpe.c        BPE merges and the per-thread word cache
//   tokenizer_encode.c     per-thread state, added tokens in the text, encode
//   tokenizer_decode.c     decode and vocabulary look-ups
#include "data/tokenizer_internal.h"

#include <utf8proc.h>

/* ------------------------------------------------------------------------------------------------ */
/* UTF-8                                                                                             */

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

// Last code point of valid UTF-8 s[0..n), n > 0.
int32_t tk_utf8_last(const uint8_t *s, size_t n) {
    size_t i = n - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
    size_t l;
    return utf8_dec(s + i, &l);
}

size_t tk_utf8_enc(int32_t c, uint8_t *o) {
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

int32_t tk_g_byte_cp[256];
static int16_t g_cp_byte[512];
static pthread_once_t g_bytemap_once = PTHREAD_ONCE_INIT;

static void bytemap_init(void) {
    for (int i = 0; i < 512; i++) g_cp_byte[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        tk_g_byte_cp[b] = direct ? b : 256 + n++;
        g_cp_byte[tk_g_byte_cp[b]] = (int16_t)b;
    }
}

// Converts a ByteLevel-alphabet string to the raw bytes it stands for; false if some char is outside the
void tk_bytemap_ensure(void) { pthread_once(&g_bytemap_once, bytemap_init); }

// alphabet. out needs n bytes.
bool tk_bytelevel_to_raw(const uint8_t *s, size_t n, uint8_t *out, size_t *outn) {
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

bool tk_uni_white_space(int32_t c) {  // Unicode White_Space property
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

bool tk_uni_word(int32_t c) {  // \w = Alphabetic | M | Nd | Pc | Join_Control
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
bool tk_hf_inert(int32_t c) {
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

size_t tk_hf_new_cat(size_t i, uint32_t *lo, uint32_t *hi, int *cat) {
    if (i < PT_ARRAY_LEN(hf_new_cats)) {
        *lo = hf_new_cats[i].lo;
        *hi = hf_new_cats[i].hi;
        *cat = hf_new_cats[i].cat;
    }
    return PT_ARRAY_LEN(hf_new_cats);
}
