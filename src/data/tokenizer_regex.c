// Oniguruma (HF tokenizers) -> PCRE2 translation of pre-tokenizer patterns, and their compilation.
#include "data/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

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

static void aug_add_run(sbuf *b, int32_t lo, int32_t hi) {
    char tmp[48];
    if (lo == hi) snprintf(tmp, sizeof tmp, "\\x{%X}", (unsigned)lo);
    else snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", (unsigned)lo, (unsigned)hi);
    sb_str(b, tmp);
}

// The utf8proc category of c when PCRE2 holds it unassigned (\p{Cn}), else -1.
static int aug_category(pcre2_code *cn, pcre2_match_data *md, int32_t c) {
    if (c >= 0x110000 || (c >= 0xD800 && c < 0xE000)) return -1;
    int uc = utf8proc_category(c);
    if (uc == UTF8PROC_CATEGORY_CN || uc == UTF8PROC_CATEGORY_CO || uc == UTF8PROC_CATEGORY_CS) return -1;
    uint8_t u[4];
    size_t l = tk_utf8_enc(c, u);
    return pcre2_match(cn, u, l, 0, PCRE2_NO_UTF_CHECK, md, NULL) > 0 ? uc : -1;
}

// Appends, per category, the runs of code points utf8proc assigns and PCRE2 does not know.
static void aug_scan_unassigned(sbuf b[30]) {
    int err;
    PCRE2_SIZE eoff;
    pcre2_code *cn = pcre2_compile((PCRE2_SPTR) "\\p{Cn}", PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED,
                                   &err, &eoff, NULL);
    if (!cn) return;
    pcre2_jit_compile(cn, PCRE2_JIT_COMPLETE);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int32_t run_start = -1, run_end = -1, run_cat = -1;
    for (int32_t c = 0; c <= 0x110000; c++) {
        int cat = aug_category(cn, md, c);
        if (cat >= 0 && cat == run_cat && c == run_end + 1) {
            run_end = c;
            continue;
        }
        if (run_cat >= 0) aug_add_run(&b[run_cat], run_start, run_end);
        run_cat = cat;
        run_start = run_end = c;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(cn);
}

static void aug_init(void) {
    sbuf b[30] = {{0}};
    for (int i = 0; i < 30; i++) sb_add(&b[i], "", 0);
    aug_scan_unassigned(b);
    uint32_t lo, hi;
    int cat;
    for (size_t i = 0, n = tk_hf_new_cat(0, &lo, &hi, &cat); i < n; i++) {
        tk_hf_new_cat(i, &lo, &hi, &cat);
        if (!cat || cat >= 30) continue;
        char tmp[48];
        snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", (unsigned)lo, (unsigned)hi);
        sb_str(&b[cat], tmp);
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

// The translator's state: the output and whether the pattern is inside a [...] class.
typedef struct {
    sbuf o;
    const char *pat;
    size_t n;
    bool in_class;
    size_t class_start;
} xlat;

// \p{Name} / \pN / \P...: general categories get the code points PCRE2 does not know; returns the end.
static size_t xlat_property(xlat *x, size_t i) {
    const char *pat = x->pat;
    const size_t n = x->n;
    const char e = pat[i + 1];
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
        sb_add(&x->o, pat + i, 2);
        return i + 2;
    }
    int cats[8];
    bool gc = gc_categories(name, nl, cats) > 0;
    if (!gc || (e == 'P' && x->in_class)) {
        sb_add(&x->o, pat + i, end - i);
    } else if (x->in_class) {
        sb_add(&x->o, pat + i, end - i);
        aug_append(&x->o, name, nl);
    } else {
        sb_str(&x->o, e == 'P' ? "[^\\p{" : "[\\p{");
        sb_add(&x->o, name, nl);
        sb_str(&x->o, "}");
        aug_append(&x->o, name, nl);
        sb_str(&x->o, "]");
    }
    return end;
}

// The body of the class of \s, \d, \w or \h (Ruby meaning).
static void xlat_class_body(sbuf *o, char e) {
    if (e == 's') sb_str(o, WS_CLASS);
    else if (e == 'd') sb_str(o, "\\p{Nd}"), aug_append(o, "Nd", 2);
    else if (e == 'w') word_class(o);
    else sb_str(o, "0-9a-fA-F");
}

// \S, \D, \W, \H: the complement of the class.
static void xlat_negated(xlat *x, size_t i) {
    const char e = x->pat[i + 1];
    if (x->in_class) {
        if (e == 'H') sb_str(&x->o, "\\x00-\\x2F\\x3A-\\x40\\x47-\\x60\\x67-\\x{10FFFF}");
        else sb_add(&x->o, x->pat + i, 2);  // cannot complement inside a class: PCRE2's own class
        return;
    }
    sb_str(&x->o, "[^");
    xlat_class_body(&x->o, (char)(e - 'A' + 'a'));
    sb_str(&x->o, "]");
}

// A backslash escape at pat[i]; returns the index after it.
static size_t xlat_escape(xlat *x, size_t i) {
    const char *pat = x->pat;
    const size_t n = x->n;
    const char e = pat[i + 1];
    if (e == 'Q') {  // \Q...\E literal: copy through
        size_t j = i + 2;
        while (j < n && !(pat[j] == '\\' && j + 1 < n && pat[j + 1] == 'E')) j++;
        j = j < n ? j + 2 : n;
        sb_add(&x->o, pat + i, j - i);
        return j;
    }
    if (e == 'p' || e == 'P') return xlat_property(x, i);
    if (e == 's' || e == 'd' || e == 'w' || e == 'h') {
        if (!x->in_class) sb_str(&x->o, "[");
        xlat_class_body(&x->o, e);
        if (!x->in_class) sb_str(&x->o, "]");
        return i + 2;
    }
    if (e == 'S' || e == 'D' || e == 'W' || e == 'H') {
        xlat_negated(x, i);
        return i + 2;
    }
    // any other escape: copy the backslash and the whole next character
    size_t l = 1;
    uint8_t b = (uint8_t)e;
    if (b >= 0xF0) l = 4;
    else if (b >= 0xE0) l = 3;
    else if (b >= 0xC0) l = 2;
    if (i + 1 + l > n) l = n - i - 1;
    sb_add(&x->o, pat + i, 1 + l);
    return i + 1 + l;
}

// Class syntax at pat[i] ('[' or ']'); returns the index after what it copied, or i if it is none.
static size_t xlat_class(xlat *x, size_t i) {
    const char *pat = x->pat;
    const size_t n = x->n;
    const char c = pat[i];
    if (!x->in_class && c == '[') {
        x->in_class = true;
        sb_add(&x->o, "[", 1);
        i++;
        if (i < n && pat[i] == '^') sb_add(&x->o, "^", 1), i++;
        x->class_start = i;
        if (i < n && pat[i] == ']') sb_add(&x->o, "]", 1), i++;  // literal ] first in a class
        return i;
    }
    if (x->in_class && c == '[' && i + 1 < n && pat[i + 1] == ':') {  // POSIX [:name:]
        size_t j = i + 2;
        while (j + 1 < n && !(pat[j] == ':' && pat[j + 1] == ']')) j++;
        j = j + 1 < n ? j + 2 : n;
        sb_add(&x->o, pat + i, j - i);
        return j;
    }
    if (x->in_class && c == ']' && i > x->class_start) {
        x->in_class = false;
        sb_add(&x->o, "]", 1);
        return i + 1;
    }
    return i;
}

static char *translate_regex(const char *pat, size_t n) {
    xlat x = {.pat = pat, .n = n};
    sb_add(&x.o, "", 0);
    for (size_t i = 0; i < n;) {
        if (pat[i] == '\\' && i + 1 < n) {
            i = xlat_escape(&x, i);
            continue;
        }
        size_t j = xlat_class(&x, i);
        if (j != i) {
            i = j;
            continue;
        }
        sb_add(&x.o, pat + i, 1);
        i++;
    }
    return x.o.p;
}

int tk_compile_re(pt_tokenizer *t, const char *pat, size_t n, bool literal, const char *path) {
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

