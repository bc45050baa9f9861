// The tokenizer's lookup structures: string arenas, the string -> id map, the merge map and the
// added-token trie.
#include "data/tokenizer_internal.h"

#include <stdlib.h>

uint32_t tk_arena_put(arena *a, const void *s, size_t n) {
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
uint32_t tk_arena_put_z(arena *a, const void *s, size_t n) {
    uint32_t off = tk_arena_put(a, s, n);
    a->len++;
    return off;
}

void tk_sm_init(strmap *m, arena *keys, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    m->slots = pt_malloc(cap * sizeof(sm_slot));
    for (size_t i = 0; i < cap; i++) m->slots[i].val = NO_ID;
    m->mask = cap - 1;
    m->n = 0;
    m->keys = keys;
}

void tk_sm_free(strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

uint32_t tk_sm_get(const strmap *m, const void *k, size_t n) {
    if (!m->slots) return NO_ID;
    uint64_t h = hash_bytes(k, n);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        const sm_slot *s = &m->slots[i];
        if (s->val == NO_ID) return NO_ID;
        if (s->h == h && s->len == n && memcmp(m->keys->p + s->off, k, n) == 0) return s->val;
    }
}

void tk_sm_put(strmap *m, const void *k, size_t n, uint32_t val);

static void tk_sm_grow(strmap *m) {
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
void tk_sm_put(strmap *m, const void *k, size_t n, uint32_t val) {
    if ((m->n + 1) * 2 > m->mask + 1) tk_sm_grow(m);
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
    s->off = tk_arena_put_z(m->keys, k, n);
    s->len = (uint32_t)n;
    s->val = val;
    m->n++;
}

void tk_mm_init(mergemap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    m->slots = pt_malloc(cap * sizeof(mm_slot));
    for (size_t i = 0; i < cap; i++) m->slots[i].key = MM_EMPTY;
    m->mask = cap - 1;
}

void tk_mm_put(mergemap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t nid) {
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

/* ------------------------------------------------------------------------------------------------ */
/* added-token trie                                                                                  */

void tk_trie_init(trie *t) {
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

void tk_trie_add(trie *t, const char *s, size_t n, int32_t term) {
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
bool tk_trie_find(const trie *t, const uint8_t *s, size_t n, size_t from, size_t *ms, size_t *me, int32_t *term) {
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
