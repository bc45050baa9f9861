// Encoding: the pool of per-thread scratch states, added tokens matched in the text, and the public
// encode calls.
#include "data/tokenizer_internal.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------ */
/* per-thread state                                                                                  */

void tk_state_free(tstate *st) {
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
        tk_state_free(st);
        return NULL;
    }
    pcre2_jit_stack_assign(st->mctx, NULL, st->jstack);
    for (int i = 0; i < t->n_re; i++) {
        st->md[i] = pcre2_match_data_create_from_pattern(t->re[i], NULL);
        if (!st->md[i]) {
            pt_set_error("tokenizer: cannot allocate PCRE2 match data");
            tk_state_free(st);
            return NULL;
        }
    }
    st->cache = pt_calloc(CACHE_SLOTS, sizeof(cslot));
    return st;
}

tstate *tk_state_acquire(pt_tokenizer *t) {
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

void tk_state_release(pt_tokenizer *t, tstate *st) {
    pthread_mutex_lock(&t->lock);
    st->next_free = t->free_states;
    t->free_states = st;
    pthread_mutex_unlock(&t->lock);
}
/* ------------------------------------------------------------------------------------------------ */
/* added tokens + normalization                                                                      */

// HF AddedVocabulary::find_matches over s; gaps go to level 0 (normalize) or level 1 (pre-tokenize).
static int process_gap(tstate *st, int level, const uint8_t *s, size_t n);

static int added_split(tstate *st, const trie *tr, int level, const uint8_t *s, size_t n) {
    const pt_tokenizer *t = st->tok;
    size_t start_offset = 0, pos = 0, ms, me;
    int32_t term;
    while (pos < n && tk_trie_find(tr, s, n, pos, &ms, &me, &term)) {
        pos = me;
        const added_tok *a = &t->added[term];
        // as HF: a special token skipped here still advances the scan past it
        if (t->encode_special && tokenizer_is_special(t, a->id)) continue;
        size_t start = ms, stop = me;
        if (a->single_word) {
            bool start_space = start == 0 || !tk_uni_word(tk_utf8_last(s, start));
            size_t l;
            bool stop_space = stop == n || !tk_uni_word(utf8_dec(s + stop, &l));
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t j = ns - 1;
                while (j > 0 && (s[j] & 0xC0) == 0x80) j--;
                size_t l;
                if (!tk_uni_white_space(utf8_dec(s + j, &l))) break;
                ns = j;
            }
            start = PT_MAX(ns, start_offset);
        }
        if (a->rstrip) {
            while (stop < n) {
                size_t l;
                if (!tk_uni_white_space(utf8_dec(s + stop, &l))) break;
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
    if (level == 1) return tk_run_stage(st, 0, s, n);
    const uint8_t *p;
    size_t m;
    if (tk_normalize_string(st, s, n, &p, &m)) return -1;
    if (t->trie_norm.empty) return m ? tk_run_stage(st, 0, p, m) : 0;
    // p may live in a normalization scratch buffer: the normalized-token pass never normalizes again
    return added_split(st, &t->trie_norm, 1, p, m);
}

int tokenizer_encode_append(pt_tokenizer *tok, const char *text, size_t len, pt_token_buf *out) {
    if (!tok || !out || (!text && len)) {
        pt_set_error("tokenizer_encode: invalid arguments");
        return -1;
    }
    if (!len) return 0;
    tstate *st = tk_state_acquire(tok);
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
    tk_state_release(tok, st);
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
