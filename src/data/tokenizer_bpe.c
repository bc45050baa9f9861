// BPE on one pre-token: merges by rank (a quadratic scan for short words, a heap for long ones), with a
// per-thread cache of words already seen.
#include "data/tokenizer_internal.h"

#include <stdlib.h>

static size_t g_heap_threshold = 64;
void tokenizer_set_bpe_heap_threshold(size_t n) { g_heap_threshold = n; }

/* ------------------------------------------------------------------------------------------------ */
/* BPE                                                                                               */

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

int tk_bpe_word(tstate *st, const uint8_t *w, size_t n) {
    const pt_tokenizer *t = st->tok;
    if (!n) return 0;
    if (t->ignore_merges) {
        uint32_t id = tk_sm_get(&t->raw, w, n);
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
        c->koff = tk_arena_put(&st->ckeys, w, n);
        c->klen = (uint16_t)n;
        c->ioff = (uint32_t)st->cids_len;
        c->nids = (uint16_t)m;
        memcpy(st->cids + st->cids_len, st->sym, m * sizeof(uint32_t));
        st->cids_len += m;
        st->ccount++;
    }
    return 0;
}
