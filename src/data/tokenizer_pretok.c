// Pre-tokenization: the Split / Digits / ByteLevel stages, regex matching with Oniguruma's find_iter
// semantics.
#include "data/tokenizer_internal.h"

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

int tk_run_stage(tstate *st, int k, const uint8_t *p, size_t n);

static inline int emit(tstate *st, int next, const uint8_t *p, size_t n) {
    if (!n) return 0;
    return next < 0 ? tk_bpe_word(st, p, n) : tk_run_stage(st, next, p, n);
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

int tk_run_stage(tstate *st, int k, const uint8_t *p, size_t n) {
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
        return tk_bpe_word(st, p, n);
    }
    return run_split(st, sg, k, k + 1, p, n);
}
