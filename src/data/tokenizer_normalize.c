// Unicode normalization (NFC / NFD / NFKC / NFKD via utf8proc), as HF's normalizers.
#include "data/tokenizer_internal.h"

#include <utf8proc.h>

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
            if (tk_hf_inert(c)) {
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

int tk_normalize_string(tstate *st, const uint8_t *s, size_t n, const uint8_t **out, size_t *outn) {
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
