// Decoding ids to text, and the vocabulary look-ups of the public API.
#include "data/tokenizer_internal.h"

#include <stdlib.h>

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
    uint32_t id = tk_sm_get(&t->added_map, token, n);
    if (id != NO_ID) return id;
    uint8_t *scratch = pt_malloc(n + 1);
    id = tk_vocab_lookup(t, token, n, scratch);
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
