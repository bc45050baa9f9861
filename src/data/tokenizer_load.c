// Loading tokenizer.json: the pipeline (normalizer, pre-tokenizer, decoder), the added tokens and the
// per-id tables; freeing a tokenizer.
#include "data/tokenizer_internal.h"

#include "util/fileio.h"
#include "util/hash.h"
#include "util/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

// A pipeline step's "type"; NULL (error set) when the step is no object (`object` says what it must be)
// or has none.
static const char *step_type(const pt_tokenizer *t, const cJSON *n, const char *path, const char *object) {
    if (!cJSON_IsObject(n)) {
        pt_set_error("%s: %s must be %s", t->name, path, object);
        return NULL;
    }
    const char *type = tk_json_type(n);
    if (!type) pt_set_error("%s: %s has no \"type\"", t->name, path);
    return type;
}

typedef int (*add_step_fn)(pt_tokenizer *t, const cJSON *step, const char *path);

// A "Sequence" node: each element of its array `key`, in order, added as PATH.key[i].
static int add_sequence(pt_tokenizer *t, const cJSON *n, const char *key, const char *path, add_step_fn add) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, key);
    if (!cJSON_IsArray(list)) {
        pt_set_error("%s: %s.%s must be an array", t->name, path, key);
        return -1;
    }
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s[%d]", path, key, i);
        if (add(t, e, sub)) return -1;
    }
    return 0;
}

static int add_norm(pt_tokenizer *t, const cJSON *n, const char *path) {
    const char *nm = t->name;
    if (!n || cJSON_IsNull(n)) return 0;
    const char *type = step_type(t, n, path, "an object or null");
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) return add_sequence(t, n, "normalizers", path, add_norm);
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

static const char *GPT2_RE = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_pretok(pt_tokenizer *t, const cJSON *p, const char *path) {
    const char *nm = t->name;
    const char *type = step_type(t, p, path, "an object");
    if (!type) return -1;
    if (t->n_stages > 0 && t->stages[t->n_stages - 1].kind == ST_BYTELEVEL) {
        pt_set_error("%s: %s (%s) follows the ByteLevel pre-tokenizer; only a final ByteLevel is supported", nm, path,
                     type);
        return -1;
    }
    if (!strcmp(type, "Sequence")) return add_sequence(t, p, "pretokenizers", path, add_pretok);
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
        if (tk_json_bool(p, "invert", false, &sg.invert, nm)) return -1;
        snprintf(sub, sizeof sub, "%s.pattern", path);
        sg.kind = ST_SPLIT;
        sg.re = tk_compile_re(t, src->valuestring, strlen(src->valuestring), src == lit, sub);
        if (sg.re < 0) return -1;
    } else if (!strcmp(type, "Digits")) {
        bool individual;
        if (tk_json_bool(p, "individual_digits", false, &individual, nm)) return -1;
        sg.kind = ST_SPLIT;
        sg.behavior = B_ISOLATED;
        snprintf(sub, sizeof sub, "%s (Digits)", path);
        sg.re = tk_compile_re(t, individual ? "\\p{N}" : "\\p{N}+", individual ? 5 : 6, false, sub);
        if (sg.re < 0) return -1;
    } else if (!strcmp(type, "ByteLevel")) {
        if (tk_json_bool(p, "add_prefix_space", true, &sg.add_prefix_space, nm) ||
            tk_json_bool(p, "use_regex", true, &sg.use_regex, nm))
            return -1;
        sg.kind = ST_BYTELEVEL;
        sg.behavior = B_ISOLATED;
        if (sg.use_regex) {
            snprintf(sub, sizeof sub, "%s (ByteLevel regex)", path);
            sg.re = tk_compile_re(t, GPT2_RE, strlen(GPT2_RE), false, sub);
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
    const char *type = cJSON_IsObject(d) ? tk_json_type(d) : NULL;
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
static int load_added(pt_tokenizer *t, const cJSON *list, uint32_t *max_id) {
    const char *nm = t->name;
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) {
        pt_set_error("%s: added_tokens must be an array", nm);
        return -1;
    }
    size_t cap = (size_t)cJSON_GetArraySize(list);
    t->added = pt_calloc(cap ? cap : 1, sizeof(added_tok));
    tk_sm_init(&t->added_map, &t->added_keys, cap);
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
        if (tk_json_bool(e, "single_word", false, &a.single_word, what) || tk_json_bool(e, "lstrip", false, &a.lstrip, what) ||
            tk_json_bool(e, "rstrip", false, &a.rstrip, what) || tk_json_bool(e, "normalized", true, &a.normalized, what) ||
            tk_json_bool(e, "special", false, &a.special, what)) {
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
        uint32_t existing = tk_sm_get(&t->added_map, content, len);
        uint32_t id;
        added_tok *slot = NULL;
        if (existing != NO_ID) {
            id = existing;
            for (size_t k = 0; k < t->n_added; k++)
                if (t->added[k].id == id) slot = &t->added[k];
        } else {
            scratch = pt_realloc(scratch, len + 1);
            id = tk_vocab_lookup(t, content, len, scratch);
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
        tk_sm_put(&t->added_map, content, len, id);
        if (id > *max_id) *max_id = id;
    }
    free(scratch);
    // normalized forms of normalized tokens
    if (t->n_norm) {
        tstate *st = tk_state_acquire(t);
        if (!st) return -1;
        for (size_t k = 0; k < t->n_added; k++) {
            added_tok *a = &t->added[k];
            if (!a->normalized) continue;
            const uint8_t *o;
            size_t on;
            if (tk_normalize_string(st, (const uint8_t *)a->content, a->len, &o, &on)) {
                tk_state_release(t, st);
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
        tk_state_release(t, st);
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
            size_t l = tk_utf8_enc(tk_g_byte_cp[raw[k]], u);
            tk_arena_put(&t->strs, u, l);
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
        uint32_t off = tk_arena_put_z(&t->strs, shown, sl);
        t->tok_off[a->id] = off;
        t->tok_len[a->id] = (uint32_t)sl;
        uint8_t *raw = pt_malloc(sl + 1);
        size_t rn;
        uint32_t doff;
        if (t->decoder == 1 && tk_bytelevel_to_raw((const uint8_t *)shown, sl, raw, &rn)) {
            doff = tk_arena_put(&t->decs, raw, rn);
        } else {
            doff = tk_arena_put(&t->decs, shown, sl);
            rn = sl;
        }
        free(raw);
        t->dec_off[a->id] = doff | 0x80000000u;  // high bit: bytes live in t->decs
        t->dec_len[a->id] = (uint32_t)rn;
        t->flags[a->id] |= F_ADDED;
        if (a->special) t->flags[a->id] |= F_SPECIAL;
    }
    // special set is by content: a non-special token with the content of a special one is special too
    tk_trie_init(&t->trie_raw);
    tk_trie_init(&t->trie_norm);
    for (size_t k = 0; k < t->n_added; k++) {
        added_tok *a = &t->added[k];
        if (a->normalized) tk_trie_add(&t->trie_norm, a->pattern, a->plen, (int32_t)k);
        else tk_trie_add(&t->trie_raw, a->content, a->len, (int32_t)k);
    }
    return 0;
}

static pt_tokenizer *load_fail(pt_tokenizer *t, cJSON *root) {
    if (root) cJSON_Delete(root);
    tokenizer_free(t);
    return NULL;
}

pt_tokenizer *tokenizer_load_json(const char *json, size_t len, const char *name) {
    tk_bytemap_ensure();
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
    if (tk_load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), &max_id)) return load_fail(t, root);
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
void tokenizer_free(pt_tokenizer *t) {
    if (!t) return;
    for (tstate *st = t->all_states; st;) {
        tstate *nx = st->next_all;
        tk_state_free(st);
        st = nx;
    }
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    tk_sm_free(&t->raw);
    tk_sm_free(&t->str);
    tk_sm_free(&t->added_map);
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
