#include "data/loader.h"
#include "data/dataset.h"
#include "data/shard.h"
#include "util/common.h"
#include "util/hash.h"
#include "util/philox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Philox stream ids of the two permutations (row order, batch order).
#define STREAM_ROWS 0x726f7773u     // "rows"
#define STREAM_BATCHES 0x62617463u  // "batc"

typedef struct {
    uint64_t epoch;
    uint32_t *order;  // order_len entries
    bool valid;
} epoch_cache;

struct pt_loader {
    pt_loader_config cfg;
    int nshards;
    pt_shard *shards;
    uint64_t *starts;  // first global token of each shard; starts[nshards] = ntok
    uint64_t ntok;
    char sha[65];
    char key[65];
    uint64_t nrows;  // windows or pieces
    uint64_t R;      // rows per epoch ("wrap"); "hf": num rows
    bool hf;         // "hf" epoch boundaries
    uint64_t M;      // "hf": rows per micro-batch
    uint64_t U;      // "hf": rows used per epoch (R, or floor(R/M)*M with drop_last)
    uint64_t S;      // steps per epoch
    uint64_t order_len;  // entries of a cached epoch order
    // padded mode
    uint32_t eos;
    int nb;
    int buckets[PT_LOADER_MAX_BUCKETS];
    uint64_t ndocs;
    uint64_t *piece_start;
    uint32_t *piece_len;  // inputs in the piece (labels are the next tokens)
    // documents mode
    uint64_t *doc_start;  // [ndocs+1] first token of each document; doc_start[ndocs] = ntok
    uint64_t *doc_pairs;  // [ndocs+1] triples before each document (prefix sums of n-1)
    uint64_t *part_doc;   // [doc_shards+1] first document of each part
    int32_t *pos;         // [local rows x seq_len] positions of the last batch
    // state
    epoch_cache cache[2];
    int cache_next;
    uint32_t *scratch;  // seq_len + 1 tokens
    uint64_t *grow;     // rows_per_step row ids of the current step
    uint64_t pad_positions, all_positions;
    double last_pad;
    int last_real;
};

// ---------------------------------------------------------------- token stream

static int shard_of(const pt_loader *l, uint64_t idx) {
    int lo = 0, hi = l->nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l->starts[mid] <= idx) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Copies stream tokens [start, start+n) (must be in range).
static void copy_tokens(const pt_loader *l, uint64_t start, uint64_t n, uint32_t *dst) {
    int s = shard_of(l, start);
    while (n > 0) {
        while (start >= l->starts[s + 1]) s++;
        uint64_t off = start - l->starts[s];
        uint64_t avail = l->starts[s + 1] - start;
        uint64_t k = n < avail ? n : avail;
        memcpy(dst, l->shards[s].tokens + off, k * sizeof *dst);
        dst += k;
        start += k;
        n -= k;
    }
}

// ---------------------------------------------------------------- permutations

static uint64_t philox_u64(uint64_t seed, uint32_t stream, uint64_t epoch, uint64_t i) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)epoch, stream ^ (uint32_t)(epoch >> 32)};
    uint32_t out[4];
    pt_philox4x32(key, ctr, out);
    return (uint64_t)out[0] << 32 | out[1];
}

// floor(x * m / 2^64) for m <= 2^32, exactly, in 64-bit arithmetic.
static uint64_t mulhi_bounded(uint64_t x, uint64_t m) {
    uint64_t hi = (x >> 32) * m;
    uint64_t lo = ((x & 0xffffffffu) * m) >> 32;
    return (hi + lo) >> 32;
}

// Fisher-Yates: for i = n-1 .. 1, swap a[i] with a[j], j = floor(u_i * (i+1)),
// u_i = Philox(key = seed, counter = (i, epoch, stream)) / 2^64.
static void philox_permutation(uint32_t *a, uint64_t n, uint64_t seed, uint32_t stream, uint64_t epoch) {
    for (uint64_t i = 0; i < n; i++) a[i] = (uint32_t)i;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = mulhi_bounded(philox_u64(seed, stream, epoch, i - 1), i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static int bucket_index(const pt_loader *l, uint32_t len) {
    for (int b = 0; b < l->nb; b++)
        if ((uint32_t)l->buckets[b] >= len) return b;
    return l->nb - 1;  // not reached: pieces are at most the largest bucket
}

static bool grouped(const pt_loader *l) { return l->cfg.mode == PT_LOADER_PADDED && l->cfg.group_by_bucket; }

#define NO_ROW32 UINT32_MAX

static void build_order(const pt_loader *l, uint64_t epoch, uint32_t *out) {
    const uint64_t n = l->nrows;
    if (!grouped(l)) {
        philox_permutation(out, n, l->cfg.seed, STREAM_ROWS, epoch);  // shuffled (identity is never cached)
        return;
    }
    uint32_t *base = pt_malloc(n * sizeof *base);
    if (l->cfg.shuffle) philox_permutation(base, n, l->cfg.seed, STREAM_ROWS, epoch);
    else
        for (uint64_t i = 0; i < n; i++) base[i] = (uint32_t)i;
    // Stable counting sort by bucket.
    uint64_t count[PT_LOADER_MAX_BUCKETS + 1] = {0};
    for (uint64_t i = 0; i < n; i++) count[bucket_index(l, l->piece_len[base[i]]) + 1]++;
    for (int b = 0; b < l->nb; b++) count[b + 1] += count[b];
    uint32_t *sorted = pt_malloc(l->order_len * sizeof *sorted);
    for (uint64_t i = 0; i < n; i++) sorted[count[bucket_index(l, l->piece_len[base[i]])]++] = base[i];
    if (l->hf)  // no completion: positions from U on (the dropped tail, the short last batch's rest) are empty
        for (uint64_t i = l->U; i < l->order_len; i++) sorted[i] = NO_ROW32;
    else
        for (uint64_t i = n; i < l->R; i++) sorted[i] = sorted[i - n];  // complete the last batch (R - n < B <= ... )
    free(base);
    const uint64_t B = (uint64_t)l->cfg.rows_per_step, nbatch = l->order_len / B;
    if (!l->cfg.shuffle) {
        memcpy(out, sorted, l->order_len * sizeof *out);
    } else {
        uint32_t *perm = pt_malloc(nbatch * sizeof *perm);
        philox_permutation(perm, nbatch, l->cfg.seed, STREAM_BATCHES, epoch);
        for (uint64_t k = 0; k < nbatch; k++) memcpy(out + k * B, sorted + (uint64_t)perm[k] * B, B * sizeof *out);
        free(perm);
    }
    free(sorted);
}

// The epoch's order, or NULL for the identity.
static const uint32_t *epoch_order(pt_loader *l, uint64_t epoch) {
    if (!l->cfg.shuffle && !grouped(l)) return NULL;
    for (int i = 0; i < 2; i++)
        if (l->cache[i].valid && l->cache[i].epoch == epoch) return l->cache[i].order;
    epoch_cache *c = &l->cache[l->cache_next];
    l->cache_next ^= 1;
    if (!c->order) c->order = pt_malloc(l->order_len * sizeof *c->order);
    build_order(l, epoch, c->order);
    c->epoch = epoch;
    c->valid = true;
    return c->order;
}

uint64_t pt_loader_row_of(pt_loader *l, uint64_t step, int j) {
    uint64_t e, p;
    if (l->hf) {
        e = step / l->S;
        p = (step % l->S) * (uint64_t)l->cfg.rows_per_step + (uint64_t)j;
        if (!grouped(l) && p >= l->U) return PT_LOADER_NO_ROW;
    } else {
        uint64_t g = step * (uint64_t)l->cfg.rows_per_step + (uint64_t)j;
        e = g / l->R;
        p = g % l->R;
    }
    const uint32_t *order = epoch_order(l, e);
    if (!order) return p;
    return order[p] == NO_ROW32 && l->hf ? PT_LOADER_NO_ROW : order[p];
}

// ---------------------------------------------------------------- opening

static int add_piece(pt_loader *l, uint64_t start, uint32_t len, uint64_t *cap) {
    if (l->nrows == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        l->piece_start = pt_realloc(l->piece_start, *cap * sizeof *l->piece_start);
        l->piece_len = pt_realloc(l->piece_len, *cap * sizeof *l->piece_len);
    }
    l->piece_start[l->nrows] = start;
    l->piece_len[l->nrows] = len;
    l->nrows++;
    return 0;
}

static void add_document(pt_loader *l, uint64_t start, uint64_t n, uint64_t *cap) {
    if (l->cfg.mode == PT_LOADER_DOCUMENTS) {
        if (l->ndocs == *cap) {
            *cap = *cap ? 2 * *cap : 1024;
            l->doc_start = pt_realloc(l->doc_start, (*cap + 1) * sizeof *l->doc_start);
        }
        l->doc_start[l->ndocs++] = start;
        return;
    }
    l->ndocs++;
    if (n < 2) return;
    const uint64_t m = n - 1, maxb = (uint64_t)l->buckets[l->nb - 1];
    for (uint64_t off = 0; off < m; off += maxb) {
        uint64_t len = m - off < maxb ? m - off : maxb;
        add_piece(l, start + off, (uint32_t)len, cap);
        if (l->cfg.long_docs == PT_LOADER_TRUNCATE_LONG) break;
    }
}

static void scan_documents(pt_loader *l) {
    uint64_t cap = 0, doc_start = 0;
    for (int s = 0; s < l->nshards; s++) {
        const uint32_t *t = l->shards[s].tokens;
        const uint64_t n = l->shards[s].num_tokens, base = l->starts[s];
        for (uint64_t i = 0; i < n; i++)
            if (t[i] == l->eos) {
                add_document(l, doc_start, base + i + 1 - doc_start, &cap);
                doc_start = base + i + 1;
            }
    }
    if (doc_start < l->ntok) add_document(l, doc_start, l->ntok - doc_start, &cap);
}

static int setup_buckets(pt_loader *l) {
    const pt_loader_config *c = &l->cfg;
    const int T = c->seq_len;
    if (c->num_buckets < 0 || c->num_buckets > PT_LOADER_MAX_BUCKETS) {
        pt_set_error("data loader: num_buckets %d out of range 0..%d", c->num_buckets, PT_LOADER_MAX_BUCKETS);
        return -1;
    }
    if (c->num_buckets == 0) {
        const int div[4] = {8, 4, 2, 1};
        for (int i = 0; i < 4; i++) {
            int b = T / div[i];
            if (b >= 1 && (l->nb == 0 || b > l->buckets[l->nb - 1])) l->buckets[l->nb++] = b;
        }
        return 0;
    }
    for (int i = 0; i < c->num_buckets; i++) {
        int b = c->buckets[i];
        if (b < 1 || b > T || (i > 0 && b <= c->buckets[i - 1])) {
            pt_set_error("data loader: buckets must be ascending lengths in 1..seq_len=%d (bucket %d is %d)", T, i, b);
            return -1;
        }
        l->buckets[l->nb++] = b;
    }
    return 0;
}

static int open_shards(pt_loader *l, const char *path) {
    pt_dataset ds;
    bool is_ds = pt_dataset_path_is_index(path);
    if (is_ds) {
        if (pt_dataset_load(&ds, path) != 0) return -1;
    } else {
        memset(&ds, 0, sizeof ds);
        ds.eos_id = -1;
        ds.num_shards = 1;
        ds.shards = pt_calloc(1, sizeof *ds.shards);
        ds.shards[0].path = pt_strdup(path);
        ds.shards[0].file = pt_strdup(path);
    }
    int rc = -1;
    l->nshards = ds.num_shards;
    l->shards = pt_calloc((size_t)ds.num_shards, sizeof *l->shards);
    l->starts = pt_calloc((size_t)ds.num_shards + 1, sizeof *l->starts);
    uint8_t ds_tok_sha[32] = {0}, zero[32] = {0};
    if (ds.tokenizer_sha256[0]) pt_bytes_from_hex(ds.tokenizer_sha256, ds_tok_sha);
    pt_sha256 *stream = is_ds ? pt_sha256_new() : NULL;
    for (int i = 0; i < ds.num_shards; i++) {
        pt_shard *s = &l->shards[i];
        const pt_dataset_shard *d = &ds.shards[i];
        if (pt_shard_open(s, d->path) != 0) goto done;
        if (l->cfg.model_vocab && pt_shard_check_vocab(s, l->cfg.model_vocab) != 0) goto done;
        if (ds.index_path) {
            if (s->num_tokens != d->num_tokens) {
                pt_set_error("%s: holds %llu tokens but %s says %llu", d->path, (unsigned long long)s->num_tokens,
                             ds.index_path, (unsigned long long)d->num_tokens);
                goto done;
            }
            if (s->vocab_size != ds.vocab_size) {
                pt_set_error("%s: header vocab size %u differs from %s's vocab_size %u", d->path, s->vocab_size,
                             ds.index_path, ds.vocab_size);
                goto done;
            }
            const uint8_t *ts = (const uint8_t *)&s->header[PT_SHARD_TOKENIZER_SHA_SLOT];
            if (ds.tokenizer_sha256[0] && memcmp(ts, zero, 32) != 0 && memcmp(ts, ds_tok_sha, 32) != 0) {
                pt_set_error("%s: written with another tokenizer than %s records (tokenizer sha256 differs)", d->path,
                             ds.index_path);
                goto done;
            }
        }
        if (i > 0 && s->vocab_size != l->shards[0].vocab_size) {
            pt_set_error("%s: header vocab size %u differs from the first shard's %u", d->path, s->vocab_size,
                         l->shards[0].vocab_size);
            goto done;
        }
        // One pass: the file hash (single shard), the body hash (checked against
        // the header slot and the index) and the stream hash (data sets).
        pt_sha256 *file = is_ds ? NULL : pt_sha256_new();
        pt_sha256 *body = pt_sha256_new();
        if (file) pt_sha256_update(file, s->map, PT_SHARD_HEADER_BYTES);
        const char *p = (const char *)s->tokens;
        size_t left = s->num_tokens * 4;
        while (left > 0) {
            size_t k = left < (1u << 20) ? left : (1u << 20);
            if (file) pt_sha256_update(file, p, k);
            if (stream) pt_sha256_update(stream, p, k);
            pt_sha256_update(body, p, k);
            p += k;
            left -= k;
        }
        char body_hex[65], slot_hex[65];
        pt_sha256_final_hex(body, body_hex);
        if (file) pt_sha256_final_hex(file, l->sha);
        const uint8_t *cs = (const uint8_t *)&s->header[PT_SHARD_CONTENT_SHA_SLOT];
        pt_hex_from_bytes(cs, slot_hex);
        if (memcmp(cs, zero, 32) != 0 && strcmp(slot_hex, body_hex) != 0) {
            pt_set_error("%s: corrupt shard: the token body's sha256 %s differs from the header's %s", d->path,
                         body_hex, slot_hex);
            goto done;
        }
        if (d->sha256[0] && strcmp(d->sha256, body_hex) != 0) {
            pt_set_error("%s: the token body's sha256 %s differs from %s's %s", d->path, body_hex, ds.index_path,
                         d->sha256);
            goto done;
        }
        l->starts[i + 1] = l->starts[i] + s->num_tokens;
    }
    l->ntok = l->starts[l->nshards];
    if (stream) {
        pt_sha256_final_hex(stream, l->sha);
        stream = NULL;
    }
    if (l->cfg.mode != PT_LOADER_PACKED) {
        if (l->cfg.eos_id > 0) l->eos = (uint32_t)l->cfg.eos_id;
        else if (ds.eos_id >= 0) l->eos = (uint32_t)ds.eos_id;
        else {
            pt_set_error("%s: %s mode needs the end-of-document id, which %s: use the data set directory "
                         "(or its dataset.json) that `portatrain tokenize` wrote, which records \"eos_id\"", path,
                         l->cfg.mode == PT_LOADER_PADDED ? "padded" : "documents",
                         is_ds ? "this dataset.json does not record (\"eos_id\": -1)" : "a bare shard does not record");
            goto done;
        }
    }
    rc = 0;
done:
    if (stream) {
        char tmp[65];
        pt_sha256_final_hex(stream, tmp);
    }
    pt_dataset_free(&ds);
    return rc;
}

// ---------------------------------------------------------------- documents mode

static int parts(const pt_loader *l) { return l->cfg.doc_shards > 1 ? l->cfg.doc_shards : 1; }

// Splits the scanned documents into the parts (Hugging Face's contiguous
// Dataset.shard) and counts each document's triples.
static int setup_documents(pt_loader *l, const char *path) {
    const int S = parts(l);
    const uint64_t D = l->ndocs;
    if (l->cfg.shuffle) {
        pt_set_error("data loader: documents mode reads the documents in order (as TorchTitan) and cannot shuffle");
        return -1;
    }
    if (l->cfg.rows_per_step % S != 0) {
        pt_set_error("data loader: the global batch of %d rows does not divide into %d document parts",
                     l->cfg.rows_per_step, S);
        return -1;
    }
    if (!l->doc_start) l->doc_start = pt_malloc(sizeof *l->doc_start);
    l->doc_start[D] = l->ntok;
    l->doc_pairs = pt_malloc((D + 1) * sizeof *l->doc_pairs);
    l->doc_pairs[0] = 0;
    for (uint64_t d = 0; d < D; d++) {
        uint64_t n = l->doc_start[d + 1] - l->doc_start[d];
        l->doc_pairs[d + 1] = l->doc_pairs[d] + (n > 1 ? n - 1 : 0);
    }
    l->part_doc = pt_malloc(((size_t)S + 1) * sizeof *l->part_doc);
    const uint64_t div = D / (uint64_t)S, mod = D % (uint64_t)S;
    for (int p = 0; p <= S; p++) l->part_doc[p] = div * (uint64_t)p + ((uint64_t)p < mod ? (uint64_t)p : mod);
    for (int p = 0; p < S; p++)
        if (l->doc_pairs[l->part_doc[p + 1]] == l->doc_pairs[l->part_doc[p]]) {
            pt_set_error("%s: document part %d of %d (documents %llu..%llu of %llu) holds no token with a next token",
                         path, p, S, (unsigned long long)l->part_doc[p], (unsigned long long)l->part_doc[p + 1],
                         (unsigned long long)D);
            return -1;
        }
    l->nrows = l->doc_pairs[D] / (uint64_t)l->cfg.seq_len;
    if (l->nrows == 0) {
        pt_set_error("%s: %llu input tokens in %llu documents are too few for one row of seq_len = %d", path,
                     (unsigned long long)l->doc_pairs[D], (unsigned long long)D, l->cfg.seq_len);
        return -1;
    }
    l->pos = pt_malloc((size_t)pt_loader_local_rows(l) * (size_t)l->cfg.seq_len * sizeof *l->pos);
    return 0;
}

// The document holding triple x: the last d in [lo, hi) with doc_pairs[d] <= x.
static uint64_t doc_of_pair(const pt_loader *l, uint64_t x, uint64_t lo, uint64_t hi) {
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (l->doc_pairs[mid] <= x) lo = mid;
        else hi = mid;
    }
    return lo;
}

// Row k of part p's triple stream into in/lab/pos [T].
static void documents_row(const pt_loader *l, int p, uint64_t k, int32_t *in, int32_t *lab, int32_t *pos) {
    const int T = l->cfg.seq_len;
    const uint64_t d0 = l->part_doc[p], d1 = l->part_doc[p + 1];
    const uint64_t base = l->doc_pairs[d0], n = l->doc_pairs[d1] - base;
    uint64_t x = base + (uint64_t)((unsigned __int128)k * (unsigned)T % n);
    uint64_t d = doc_of_pair(l, x, d0, d1);
    for (int t = 0; t < T; t++) {
        while (l->doc_pairs[d + 1] <= x) d++;  // skips documents of one token
        const uint64_t off = x - l->doc_pairs[d];
        uint32_t two[2];
        copy_tokens(l, l->doc_start[d] + off, 2, two);
        in[t] = (int32_t)two[0];
        lab[t] = (int32_t)two[1];
        pos[t] = (int32_t)off;
        if (++x == base + n) x = base, d = d0;  // the stream wraps to the part's start
    }
    // A document continued from the previous row starts at position 0 here.
    const int32_t shift = pos[0];
    for (int t = 0; t < T && shift > 0 && pos[t] != 0; t++) pos[t] -= shift;
}

static void documents_batch(pt_loader *l, uint64_t step, int32_t *inputs, int32_t *labels) {
    const int T = l->cfg.seq_len, B = l->cfg.rows_per_step, b = B / parts(l);
    const int local = pt_loader_local_rows(l);
    for (int r = 0; r < local; r++) {
        const int j = pt_loader_global_row(l, r);
        const size_t o = (size_t)r * T;
        documents_row(l, j / b, step * (uint64_t)b + (uint64_t)(j % b), inputs + o, labels + o, l->pos + o);
    }
}

const int32_t *pt_loader_last_positions(const pt_loader *l) {
    return l->cfg.mode == PT_LOADER_DOCUMENTS ? l->pos : NULL;
}

static const char *mode_name(pt_loader_mode m) {
    return m == PT_LOADER_PACKED ? "packed" : m == PT_LOADER_PADDED ? "padded" : "documents";
}

static void make_state_key(pt_loader *l) {
    const pt_loader_config *c = &l->cfg;
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "portatrain-loader-v1 data=%s mode=%s T=%d B=%d shuffle=%d seed=%llu", l->sha,
                     mode_name(c->mode), c->seq_len, c->rows_per_step,
                     c->shuffle ? 1 : 0, (unsigned long long)(c->shuffle ? c->seed : 0));
    if (c->mode == PT_LOADER_PADDED) {
        n += snprintf(buf + n, sizeof buf - n, " eos=%u long=%s group=%d buckets=", l->eos,
                      c->long_docs == PT_LOADER_TRUNCATE_LONG ? "truncate" : "split", c->group_by_bucket ? 1 : 0);
        for (int b = 0; b < l->nb; b++) n += snprintf(buf + n, sizeof buf - n, "%s%d", b ? "," : "", l->buckets[b]);
    }
    if (c->mode == PT_LOADER_DOCUMENTS) n += snprintf(buf + n, sizeof buf - n, " eos=%u parts=%d", l->eos, parts(l));
    // "wrap" keeps the key it had before epoch boundaries were configurable (old checkpoints resume). The
    // micro-batch size changes the rows only with drop_last (so a checkpoint moves between layouts otherwise).
    if (l->hf) n += snprintf(buf + n, sizeof buf - n, " epochs=hf");
    if (l->hf && c->drop_last)
        n += snprintf(buf + n, sizeof buf - n, " drop_last=1 micro=%llu", (unsigned long long)l->M);
    pt_sha256_hex(buf, (size_t)n, l->key);
}

pt_loader *pt_loader_open(const pt_loader_config *cfg) {
    if (cfg->seq_len <= 0 || cfg->rows_per_step <= 0 || cfg->dp_world <= 0 || cfg->dp_rank < 0 ||
        cfg->dp_rank >= cfg->dp_world) {
        pt_set_error("data loader: invalid seq_len %d / rows per step %d / dp rank %d of %d", cfg->seq_len,
                     cfg->rows_per_step, cfg->dp_rank, cfg->dp_world);
        return NULL;
    }
    if (cfg->rows_per_step % cfg->dp_world != 0) {
        pt_set_error("data loader: the global batch of %d rows does not divide by %d data-parallel ranks",
                     cfg->rows_per_step, cfg->dp_world);
        return NULL;
    }
    if (cfg->micro_rows > 0 && (cfg->micro_rows % cfg->dp_world || cfg->rows_per_step % cfg->micro_rows)) {
        pt_set_error("data loader: micro-batches of %d rows do not split over %d data-parallel ranks and %d rows "
                     "per step", cfg->micro_rows, cfg->dp_world, cfg->rows_per_step);
        return NULL;
    }
    if (cfg->mode != PT_LOADER_PACKED && cfg->mode != PT_LOADER_PADDED && cfg->mode != PT_LOADER_DOCUMENTS) {
        pt_set_error("data loader: unknown mode %d", (int)cfg->mode);
        return NULL;
    }
    if (!cfg->data_path || !*cfg->data_path) {
        pt_set_error("data loader: no data path");
        return NULL;
    }
    pt_loader *l = pt_calloc(1, sizeof *l);
    l->cfg = *cfg;
    l->cfg.data_path = NULL;  // not owned
    if (cfg->mode == PT_LOADER_PADDED && setup_buckets(l) != 0) goto fail;
    if (open_shards(l, cfg->data_path) != 0) {
        pt_shard_explain_raw_text(cfg->data_path);  // raw text: say so rather than quote a "header" of text
        goto fail;
    }
    const uint64_t T = (uint64_t)cfg->seq_len;
    if (cfg->mode == PT_LOADER_PACKED) {
        l->nrows = l->ntok > 1 ? (l->ntok - 1) / T : 0;
        if (l->nrows == 0) {
            pt_set_error("%s: %llu tokens are too few for one window of seq_len+1 = %d tokens", cfg->data_path,
                         (unsigned long long)l->ntok, cfg->seq_len + 1);
            goto fail;
        }
    } else if (cfg->mode == PT_LOADER_DOCUMENTS) {
        scan_documents(l);
        if (setup_documents(l, cfg->data_path) != 0) goto fail;
    } else {
        scan_documents(l);
        if (l->nrows == 0) {
            pt_set_error("%s: no document of 2 or more tokens (end-of-document id %u) for padded rows", cfg->data_path,
                         l->eos);
            goto fail;
        }
    }
    const uint64_t B = (uint64_t)cfg->rows_per_step;
    if (cfg->epochs == PT_LOADER_EPOCHS_HF && cfg->mode != PT_LOADER_DOCUMENTS) {
        l->hf = true;
        l->M = cfg->micro_rows > 0 ? (uint64_t)cfg->micro_rows : B;
        if (B % l->M != 0) {
            pt_set_error("data loader: %llu rows per step are not a whole number of micro-batches of %llu rows",
                         (unsigned long long)B, (unsigned long long)l->M);
            goto fail;
        }
        l->R = l->nrows;
        l->U = cfg->drop_last ? l->nrows / l->M * l->M : l->nrows;
        if (l->U == 0) {
            pt_set_error("%s: %llu rows per epoch make no complete micro-batch of %llu rows: with dataloader_drop_last "
                         "nothing is left to train on", cfg->data_path, (unsigned long long)l->nrows,
                         (unsigned long long)l->M);
            goto fail;
        }
        l->S = (l->U + B - 1) / B;
        l->order_len = grouped(l) ? l->S * B : l->nrows;
    } else {
        if (cfg->drop_last) {
            pt_set_error(cfg->mode == PT_LOADER_DOCUMENTS ? "data loader: documents mode is one endless stream: no "
                                                            "epoch's last batch to drop (drop_last)" :
                         "data loader: drop_last needs \"hf\" epoch boundaries (\"wrap\" has no last batch)");
            goto fail;
        }
        l->R = grouped(l) ? (l->nrows + B - 1) / B * B : l->nrows;
        l->S = (l->R + B - 1) / B;
        l->order_len = l->R;
    }
    if ((cfg->shuffle || grouped(l)) && l->order_len >= UINT32_MAX) {
        pt_set_error("%s: %llu rows per epoch exceed the shuffler's limit of 2^32-1", cfg->data_path,
                     (unsigned long long)l->R);
        goto fail;
    }
    l->scratch = pt_malloc((T + 1) * sizeof *l->scratch);
    l->grow = pt_malloc(B * sizeof *l->grow);
    make_state_key(l);
    return l;
fail:
    pt_loader_free(l);
    return NULL;
}

void pt_loader_free(pt_loader *l) {
    if (!l) return;
    for (int i = 0; i < l->nshards; i++) pt_shard_close(&l->shards[i]);
    free(l->shards);
    free(l->starts);
    free(l->piece_start);
    free(l->piece_len);
    free(l->doc_start);
    free(l->doc_pairs);
    free(l->part_doc);
    free(l->pos);
    for (int i = 0; i < 2; i++) free(l->cache[i].order);
    free(l->scratch);
    free(l->grow);
    free(l);
}

// ---------------------------------------------------------------- batches

int pt_loader_local_rows(const pt_loader *l) { return l->cfg.rows_per_step / l->cfg.dp_world; }

// Each of the rank's micro-batches (b =
// micro_rows / dp_world rows) is its slice of one global micro-batch, as Hugging Face's Trainer shards each
// micro-batch of the data loader over the data-parallel ranks: so the global micro-batch i is the rows one
// process with accumulation puts in its micro-batch i, whatever the rank count. What is computed per
// micro-batch (a Qwen3-MoE load-balancing loss) therefore sees the same tokens on any layout.
int pt_loader_global_row(const pt_loader *l, int r) {
    if (l->cfg.mode == PT_LOADER_DOCUMENTS) return l->cfg.dp_rank * pt_loader_local_rows(l) + r;  // by part
    const int W = l->cfg.dp_world, b = l->cfg.micro_rows > 0 ? l->cfg.micro_rows / W : pt_loader_local_rows(l);
    return r / b * b * W + l->cfg.dp_rank * b + r % b;
}
uint64_t pt_loader_num_rows(const pt_loader *l) { return l->nrows; }
const char *pt_loader_data_sha256(const pt_loader *l) { return l->sha; }
uint64_t pt_loader_rows_per_epoch(const pt_loader *l) { return l->hf ? l->U : l->R; }

bool pt_loader_epochs_change_rows(const pt_loader *l, uint64_t steps) {
    const uint64_t B = (uint64_t)l->cfg.rows_per_step;
    if (!l->hf || (l->U == l->nrows && l->nrows % B == 0)) return false;  // whole steps per epoch: as wrap
    if (grouped(l) && l->cfg.shuffle) return true;  // batches permuted: the short one may come first
    return steps > l->U / B;  // positions below floor(U/B)*B are the same rows under both
}
uint64_t pt_loader_epoch_of_step(const pt_loader *l, uint64_t step) {
    if (l->hf) return step / l->S;
    return step * (uint64_t)l->cfg.rows_per_step / l->R;
}
uint64_t pt_loader_steps_per_epoch(const pt_loader *l) { return l->S; }
double pt_loader_epochs_done(const pt_loader *l, uint64_t steps) {
    if (!l->hf) return (double)steps * l->cfg.rows_per_step / (double)l->R;
    // HF: epoch + (micro-batches done in it) / len(dataloader)
    const uint64_t e = steps / l->S, k = steps % l->S, A = (uint64_t)l->cfg.rows_per_step / l->M;
    const uint64_t L = (l->U + l->M - 1) / l->M;
    return (double)e + (double)(k * A) / (double)L;
}
int pt_loader_last_real_rows(const pt_loader *l) { return l->last_real; }
uint64_t pt_loader_num_tokens(const pt_loader *l) { return l->ntok; }
uint64_t pt_loader_num_documents(const pt_loader *l) { return l->ndocs; }
double pt_loader_padding_fraction(const pt_loader *l) {
    return l->all_positions ? (double)l->pad_positions / (double)l->all_positions : 0.0;
}
double pt_loader_last_padding_fraction(const pt_loader *l) { return l->last_pad; }
int pt_loader_buckets(const pt_loader *l, const int **buckets) {
    if (l->cfg.mode != PT_LOADER_PADDED) {
        *buckets = &l->cfg.seq_len;
        return 1;
    }
    *buckets = l->buckets;
    return l->nb;
}
const char *pt_loader_state_key(const pt_loader *l) { return l->key; }

int pt_loader_batch(pt_loader *l, uint64_t step, int32_t *inputs, int32_t *labels, int *row_len) {
    const int T = l->cfg.seq_len, B = l->cfg.rows_per_step;
    const int local = pt_loader_local_rows(l);
    if (l->cfg.mode == PT_LOADER_DOCUMENTS) {
        documents_batch(l, step, inputs, labels);
        *row_len = T;
        l->last_real = B;
        l->last_pad = 0;
        l->all_positions += (uint64_t)B * (uint64_t)T;
        return 0;
    }
    if (l->cfg.mode == PT_LOADER_PACKED) {
        int real = B;
        if (l->hf)  // the global batch's rows (the same on every rank)
            for (int j = 0; j < B; j++) real -= pt_loader_row_of(l, step, j) == PT_LOADER_NO_ROW;
        for (int r = 0; r < local; r++) {
            uint64_t w = pt_loader_row_of(l, step, pt_loader_global_row(l, r));
            if (w == PT_LOADER_NO_ROW) {  // an empty row: no target
                for (int t = 0; t < T; t++) {
                    inputs[(size_t)r * T + t] = 0;
                    labels[(size_t)r * T + t] = -100;
                }
                continue;
            }
            copy_tokens(l, w * (uint64_t)T, (uint64_t)T + 1, l->scratch);
            for (int t = 0; t < T; t++) {
                inputs[(size_t)r * T + t] = (int32_t)l->scratch[t];
                labels[(size_t)r * T + t] = (int32_t)l->scratch[t + 1];
            }
        }
        *row_len = T;
        l->last_real = real;
        l->last_pad = (double)(B - real) / (double)B;
        l->pad_positions += (uint64_t)(B - real) * (uint64_t)T;
        l->all_positions += (uint64_t)B * (uint64_t)T;
        return 0;
    }
    // Padded: the row length comes from the whole global batch, so every rank
    // (and every dp world size) uses the same shape.
    uint32_t maxlen = 0;
    uint64_t content = 0;
    int real = 0;
    for (int j = 0; j < B; j++) {
        l->grow[j] = pt_loader_row_of(l, step, j);
        if (l->grow[j] == PT_LOADER_NO_ROW) continue;  // an empty row: all padding
        real++;
        uint32_t len = l->piece_len[l->grow[j]];
        content += len;
        if (len > maxlen) maxlen = len;
    }
    const int L = l->buckets[bucket_index(l, maxlen)];
    const uint64_t positions = (uint64_t)B * (uint64_t)L;
    l->pad_positions += positions - content;
    l->all_positions += positions;
    l->last_pad = (double)(positions - content) / (double)positions;
    for (int r = 0; r < local; r++) {
        uint64_t piece = l->grow[pt_loader_global_row(l, r)];
        uint32_t len = piece == PT_LOADER_NO_ROW ? 0 : l->piece_len[piece];
        if (len) copy_tokens(l, l->piece_start[piece], (uint64_t)len + 1, l->scratch);
        int32_t *in = inputs + (size_t)r * L, *lab = labels + (size_t)r * L;
        for (uint32_t t = 0; t < len; t++) {
            in[t] = (int32_t)l->scratch[t];
            lab[t] = (int32_t)l->scratch[t + 1];
        }
        for (int t = (int)len; t < L; t++) {
            in[t] = (int32_t)l->eos;
            lab[t] = -100;
        }
    }
    *row_len = L;
    l->last_real = real;
    return 0;
}
