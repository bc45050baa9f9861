// The BPE model of tokenizer.json: vocabulary, merges, single-byte and byte-fallback tokens, unk.
#include "data/tokenizer_internal.h"

#include "util/json.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------------------------------ */
/* loading                                                                                           */

int tk_json_bool(const cJSON *o, const char *key, bool def, bool *out, const char *what) {
    *out = def;
    int r = pt_json_get_bool(o, key, out, what);
    return r < 0 ? -1 : 0;
}

const char *tk_json_type(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

// Vocabulary string -> id (as HF's model.token_to_id).
uint32_t tk_vocab_lookup(const pt_tokenizer *t, const char *s, size_t n, uint8_t *scratch) {
    size_t rn;
    if (tk_bytelevel_to_raw((const uint8_t *)s, n, scratch, &rn)) return tk_sm_get(&t->raw, scratch, rn);
    return tk_sm_get(&t->str, s, n);
}

// dropout, affixes and the flags of the model section.
static int check_model_options(pt_tokenizer *t, const cJSON *model, const char **unk) {
    const char *nm = t->name;
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
    if (tk_json_bool(model, "fuse_unk", false, &t->fuse_unk, nm) ||
        tk_json_bool(model, "byte_fallback", false, &t->byte_fallback, nm) ||
        tk_json_bool(model, "ignore_merges", false, &t->ignore_merges, nm))
        return -1;
    return pt_json_get_string(model, "unk_token", unk, nm) < 0 ? -1 : 0;
}

// A growable scratch buffer for ByteLevel -> raw conversions.
typedef struct {
    uint8_t *p;
    size_t cap;
} scratch_buf;

static void scratch_fit(scratch_buf *s, size_t n) {
    if (n > s->cap) {
        s->cap = n * 2;
        s->p = pt_realloc(s->p, s->cap);
    }
}

static int load_vocab(pt_tokenizer *t, const cJSON *vocab, scratch_buf *scr, uint32_t *max_id) {
    size_t nv = (size_t)cJSON_GetArraySize(vocab);
    tk_sm_init(&t->raw, &t->keys, nv);
    tk_sm_init(&t->str, &t->keys, 64);
    uint32_t mx = 0;
    size_t count = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= MAX_VOCAB ||
            e->valuedouble != (double)(uint32_t)e->valuedouble) {
            pt_set_error("%s: model.vocab[\"%.40s\"] must be an integer id in [0, %u)", t->name, e->string, MAX_VOCAB);
            return -1;
        }
        uint32_t id = (uint32_t)e->valuedouble;
        size_t n = strlen(e->string);
        scratch_fit(scr, n);
        size_t rn;
        if (tk_bytelevel_to_raw((const uint8_t *)e->string, n, scr->p, &rn)) {
            if (tk_sm_get(&t->raw, scr->p, rn) == NO_ID) count++;
            tk_sm_put(&t->raw, scr->p, rn, id);
        } else {
            if (tk_sm_get(&t->str, e->string, n) == NO_ID) count++;
            tk_sm_put(&t->str, e->string, n, id);
        }
        if (id > mx) mx = id;
    }
    t->model_vocab_len = (uint32_t)count;
    *max_id = count ? mx : 0;
    return 0;
}

// The two halves of merges[idx]: 1 with them set, 0 for a "#version" line, -1 on a malformed entry.
static int merge_pair(const pt_tokenizer *t, const cJSON *e, size_t idx, const char **a, size_t *al, const char **b,
                      size_t *bl) {
    if (cJSON_IsString(e)) {
        const char *s = e->valuestring;
        if (strncmp(s, "#version", 8) == 0) return 0;
        const char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) {
            pt_set_error("%s: model.merges[%zu] = \"%.60s\" is not of the form \"a b\"", t->name, idx, s);
            return -1;
        }
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        *bl = strlen(*b);
        return 1;
    }
    if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) && cJSON_IsString(e->child->next)) {
        *a = e->child->valuestring;
        *al = strlen(*a);
        *b = e->child->next->valuestring;
        *bl = strlen(*b);
        return 1;
    }
    pt_set_error("%s: model.merges[%zu] must be a string \"a b\" or a pair [\"a\", \"b\"]", t->name, idx);
    return -1;
}

// Adds merge a + b with the next rank; both halves and their concatenation must be in the vocabulary.
static int add_merge(pt_tokenizer *t, size_t idx, const char *a, size_t al, const char *b, size_t bl,
                     scratch_buf *cat, scratch_buf *scr) {
    scratch_fit(cat, al + bl + 1);
    scratch_fit(scr, al + bl + 1);
    uint32_t ia = tk_vocab_lookup(t, a, al, scr->p);
    uint32_t ib = tk_vocab_lookup(t, b, bl, scr->p);
    memcpy(cat->p, a, al);
    memcpy(cat->p + al, b, bl);
    uint32_t inew = tk_vocab_lookup(t, (const char *)cat->p, al + bl, scr->p);
    if (ia == NO_ID || ib == NO_ID || inew == NO_ID) {
        const char *missing = ia == NO_ID ? a : ib == NO_ID ? b : NULL;
        size_t ml = ia == NO_ID ? al : bl;
        if (missing)
            pt_set_error("%s: model.merges[%zu]: token \"%.*s\" is not in the vocabulary", t->name, idx,
                         (int)PT_MIN(ml, 60), missing);
        else
            pt_set_error("%s: model.merges[%zu]: merged token \"%.*s\" is not in the vocabulary", t->name, idx,
                         (int)PT_MIN(al + bl, 60), (const char *)cat->p);
        return -1;
    }
    tk_mm_put(&t->merges, ia, ib, (uint32_t)t->n_merges, inew);
    t->n_merges++;
    return 0;
}

static int load_merges(pt_tokenizer *t, const cJSON *merges, scratch_buf *scr) {
    tk_mm_init(&t->merges, (size_t)cJSON_GetArraySize(merges));
    t->n_merges = 0;
    scratch_buf cat = {0};
    size_t idx = 0;
    int rc = 0;
    for (const cJSON *e = merges->child; e && !rc; e = e->next, idx++) {
        const char *a, *b;
        size_t al, bl;
        int got = merge_pair(t, e, idx, &a, &al, &b, &bl);
        if (got < 0) rc = -1;
        else if (got > 0) rc = add_merge(t, idx, a, al, b, bl, &cat, scr);
    }
    free(cat.p);
    return rc;
}

// Single-byte tokens, byte-fallback tokens (<0xNN>) and the unk token.
static void load_byte_tokens(pt_tokenizer *t, const char *unk, scratch_buf *scr) {
    for (int b = 0; b < 256; b++) {
        uint8_t raw = (uint8_t)b;
        t->byte_tok[b] = tk_sm_get(&t->raw, &raw, 1);
        uint8_t u[4];
        size_t ul = tk_utf8_enc(tk_g_byte_cp[b], u);
        t->fb_n[b] = 0;
        if (!t->byte_fallback) continue;
        bool ok = true;
        for (size_t k = 0; k < ul; k++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", u[k]);
            uint32_t id = tk_vocab_lookup(t, name, strlen(name), scr->p);
            if (id == NO_ID) ok = false;
            t->fb_tok[b][k] = id;
        }
        if (ok) t->fb_n[b] = (uint8_t)ul;
    }
    if (unk) {
        t->has_unk = true;
        t->unk_token = pt_strdup(unk);
        scratch_fit(scr, strlen(unk) + 1);
        t->unk_id = tk_vocab_lookup(t, unk, strlen(unk), scr->p);
    }
}

int tk_load_model(pt_tokenizer *t, const cJSON *model, uint32_t *max_id) {
    const char *nm = t->name;
    if (!cJSON_IsObject(model)) {
        pt_set_error("%s: field \"model\" is missing or not an object", nm);
        return -1;
    }
    const char *type = tk_json_type(model);
    if (type && strcmp(type, "BPE") != 0) {
        pt_set_error("%s: model.type is \"%s\"; only byte-level BPE models are supported", nm, type);
        return -1;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const char *unk = NULL;
    if (!cJSON_IsObject(vocab)) {
        pt_set_error("%s: model.vocab is missing or not an object", nm);
        return -1;
    }
    if (!cJSON_IsArray(merges)) {
        pt_set_error("%s: model.merges is missing or not an array", nm);
        return -1;
    }
    if (check_model_options(t, model, &unk)) return -1;
    scratch_buf scr = {pt_malloc(4096), 4096};
    int rc = load_vocab(t, vocab, &scr, max_id);
    if (!rc) rc = load_merges(t, merges, &scr);
    if (!rc) load_byte_tokens(t, unk, &scr);
    free(scr.p);
    return rc;
}
