#include "io/hf_model.h"
#include "io/dcp.h"
#include "io/safetensors.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int n;
    char **names;   // shard file names
    st_file *files;
} shard_set;

static void shards_close(shard_set *s) {
    for (int i = 0; i < s->n; i++) {
        st_close(&s->files[i]);
        free(s->names[i]);
    }
    free(s->files);
    free(s->names);
    memset(s, 0, sizeof *s);
}

static int shards_open(shard_set *s, const char *dir) {
    memset(s, 0, sizeof *s);
    char *single = pt_path_join(dir, "model.safetensors");
    char *index = pt_path_join(dir, "model.safetensors.index.json");
    int rc = -1;
    if (pt_file_exists(single)) {
        s->n = 1;
        s->names = pt_calloc(1, sizeof(char *));
        s->files = pt_calloc(1, sizeof(st_file));
        s->names[0] = pt_strdup("model.safetensors");
        rc = st_open(&s->files[0], single);
        if (rc) {
            free(s->names[0]);
            s->n = 0;
        }
    } else if (pt_file_exists(index)) {
        cJSON *root = pt_json_parse_file(index);
        if (!root) goto done;
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
        if (!cJSON_IsObject(wm)) {
            pt_set_error("%s: missing \"weight_map\" object", index);
            cJSON_Delete(root);
            goto done;
        }
        int cap = cJSON_GetArraySize(wm);
        s->names = pt_calloc(cap ? cap : 1, sizeof(char *));
        s->files = pt_calloc(cap ? cap : 1, sizeof(st_file));
        const cJSON *it;
        rc = 0;
        cJSON_ArrayForEach(it, wm) {
            if (!cJSON_IsString(it) || strchr(it->valuestring, '/')) {
                pt_set_error("%s: weight_map entry \"%s\" must be a file name in the same directory", index,
                             it->string);
                rc = -1;
                break;
            }
            int seen = 0;
            for (int i = 0; i < s->n; i++) seen |= !strcmp(s->names[i], it->valuestring);
            if (seen) continue;
            char *p = pt_path_join(dir, it->valuestring);
            if (st_open(&s->files[s->n], p) != 0) {
                free(p);
                rc = -1;
                break;
            }
            free(p);
            s->names[s->n++] = pt_strdup(it->valuestring);
        }
        cJSON_Delete(root);
    } else {
        pt_set_error("%s: no model.safetensors or model.safetensors.index.json", dir);
    }
done:
    free(single);
    free(index);
    if (rc) shards_close(s);
    return rc;
}

static const st_tensor *shards_find(const shard_set *s, const char *name, const st_file **file) {
    for (int i = 0; i < s->n; i++) {
        const st_tensor *t = st_find(&s->files[i], name);
        if (t) {
            *file = &s->files[i];
            return t;
        }
    }
    return NULL;
}

// Reads elements [first, first + n) of tensor t of f as fp32 (real_t) and drops their mapped pages again.
static int read_range(const st_file *f, const st_tensor *t, uint64_t first, size_t n, real_t *out) {
#ifdef PT_REAL_DOUBLE
    const int rc = st_read_double_range(f, t, first, n, out);
#else
    const int rc = st_read_float_range(f, t, first, n, out);
#endif
    st_release_range(f, t, first, n);
    return rc;
}

#define LOAD_BLOCK_BYTES_DEFAULT ((size_t)64 << 20)

size_t hf_weight_block_bytes(void) {
    const char *e = getenv("PT_WEIGHT_BLOCK_BYTES");
    const long long v = e && *e ? atoll(e) : 0;
    return v > 0 ? (size_t)v : LOAD_BLOCK_BYTES_DEFAULT;
}

int64_t hf_block_rows(const qwen3_param_info *t, size_t block_bytes) {
    return PT_MAX((int64_t)1, PT_MIN(t->shape[0], (int64_t)(block_bytes / (sizeof(real_t) * (size_t)t->shape[1]))));
}

// The largest block of tensor `name` (NULL: of any tensor), in elements, for blocks of block_bytes.
static size_t max_block_numel(const qwen3_model *layout, const char *name, size_t bb) {
    size_t n = 1;
    for (int i = 0; i < layout->num_tensors; i++) {
        const qwen3_param_info *t = &layout->tensors[i];
        if (name && strcmp(t->name, name)) continue;
        n = PT_MAX(n, (size_t)hf_block_rows(t, bb) * (size_t)t->shape[1]);
    }
    return n;
}

size_t hf_weight_block_numel(const qwen3_model *layout, const char *name) {
    return max_block_numel(layout, name, hf_weight_block_bytes());
}

// Where a model tensor's elements are stored: tensor t of file f, from element `base` on.
typedef struct {
    const st_file *f;
    const st_tensor *t;
    uint64_t base;
} tensor_src;

// Qwen3-MoE experts as transformers 5 holds them in memory, and as a plain state_dict() saves them: per layer
// mlp.experts.gate_up_proj [E, 2I, C] (expert e's I gate rows, then its I up rows) and mlp.experts.down_proj
// [E, C, I]. save_pretrained and the Hub checkpoints split them per expert (the model's own names); both read.
// Returns 1 and the source when pi is an expert tensor stored fused, 0 when it is not, -1 + error on a fused
// tensor of the wrong shape.
static int fused_expert_src(const shard_set *s, const qwen3_model *m, const qwen3_param_info *pi, tensor_src *src) {
    int layer, e, len = 0;
    char which[16];
    if (!m->cfg.moe ||
        sscanf(pi->name, "model.layers.%d.mlp.experts.%d.%15[a-z]_proj.weight%n", &layer, &e, which, &len) != 3 ||
        pi->name[len])
        return 0;
    const bool down = !strcmp(which, "down");
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%s", layer, down ? "down_proj" : "gate_up_proj");
    const st_tensor *t = shards_find(s, name, &src->f);
    if (!t) return 0;
    const int64_t E = m->cfg.num_experts, C = m->cfg.hidden_size, I = m->cfg.moe_intermediate_size;
    const int64_t want[3] = {E, down ? C : 2 * I, down ? I : C};
    if (t->ndim != 3 || t->shape[0] != want[0] || t->shape[1] != want[1] || t->shape[2] != want[2]) {
        pt_set_error("%s: tensor \"%s\" is not [%lld,%lld,%lld] as config.json implies", src->f->path, name,
                     (long long)want[0], (long long)want[1], (long long)want[2]);
        return -1;
    }
    src->t = t;
    src->base = (uint64_t)e * want[1] * want[2] + (!strcmp(which, "up") ? (uint64_t)I * C : 0);
    return 1;
}

// Whether `name` is a fused expert tensor this model reads (fused_expert_src), so not an unexpected one.
static bool is_fused_expert(const qwen3_model *m, const char *name) {
    int layer, len = 0;
    return m->cfg.moe && sscanf(name, "model.layers.%d.mlp.experts.%n", &layer, &len) == 1 && len &&
           (!strcmp(name + len, "gate_up_proj") || !strcmp(name + len, "down_proj")) &&
           qwen3_layer_is_sparse(&m->cfg, layer);
}

// The stored tensor of pi, its shape checked against the config. Tied weights may be stored only as
// lm_head.weight (transformers ties them either way round and loads the embedding from it).
static int find_src(const shard_set *s, const qwen3_model *m, const qwen3_param_info *pi, const char *dir,
                    tensor_src *src) {
    *src = (tensor_src){0};
    src->t = shards_find(s, pi->name, &src->f);
    if (!src->t && m->cfg.tie_word_embeddings && !strcmp(pi->name, "model.embed_tokens.weight"))
        src->t = shards_find(s, "lm_head.weight", &src->f);
    if (!src->t) {
        const int fused = fused_expert_src(s, m, pi, src);
        if (fused) return fused > 0 ? 0 : -1;
        pt_set_error("%s: missing tensor \"%s\"", dir, pi->name);
        return -1;
    }
    const st_tensor *t = src->t;
    if (t->ndim == pi->ndim && t->shape[0] == pi->shape[0] && (pi->ndim == 1 || t->shape[1] == pi->shape[1])) return 0;
    char got[128] = "", want[64];
    for (int d = 0; d < t->ndim; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (pi->ndim == 1) snprintf(want, sizeof want, "%lld", (long long)pi->shape[0]);
    else snprintf(want, sizeof want, "%lld,%lld", (long long)pi->shape[0], (long long)pi->shape[1]);
    pt_set_error("%s: tensor \"%s\" has shape [%s] but config.json implies [%s]", src->f->path, pi->name, got, want);
    return -1;
}

// The weights of DIR in the order of m->tensors, with every check of a load: each tensor is looked up in the
// shard set (find_src), read in fp32 into `into` + its offset (a host buffer of m->num_params) or, without
// `into`, in blocks of whole rows (hf_weight_block_numel) into one buffer, reused, each block handed to fn.
// read 0: names and shapes only (no data read, fn not called).
static int stream(const qwen3_model *m, const char *dir, real_t *into, hf_tensor_fn fn, void *ctx, int read) {
    shard_set s;
    if (shards_open(&s, dir) != 0) return -1;
    int rc = -1;
    const size_t bb = into ? SIZE_MAX : hf_weight_block_bytes();
    real_t *buf = read && !into ? pt_malloc(sizeof(real_t) * max_block_numel(m, NULL, bb)) : NULL, *lm = NULL;
    const st_file *tied_differs = NULL;  // the file whose lm_head.weight differs from the tied embedding
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *pi = &m->tensors[i];
        tensor_src src;
        if (find_src(&s, m, pi, dir, &src) != 0) goto done;
        const st_file *f = src.f;
        const st_tensor *t = src.t;
        if (!read) continue;
        // Tied: a file may still carry lm_head.weight (Qwen3-0.6B does, equal to the embedding). One that
        // differs would be silently dropped by tying (transformers warns and unties), so it is refused once
        // every tensor has been read; compared block by block with the embedding.
        const st_file *lf = NULL;
        const st_tensor *lt = NULL;
        if (m->cfg.tie_word_embeddings && !strcmp(pi->name, "model.embed_tokens.weight")) {
            lt = shards_find(&s, "lm_head.weight", &lf);
            if (lt == t) lt = NULL;  // the embedding stored only as lm_head.weight
            if (lt && !(lt->ndim == 2 && lt->shape[0] == pi->shape[0] && lt->shape[1] == pi->shape[1])) {
                tied_differs = lf;
                lt = NULL;
            }
        }
        const int64_t rows = pi->shape[0], cols = pi->shape[1], per = hf_block_rows(pi, bb);
        for (int64_t r0 = 0; r0 < rows; r0 += per) {
            const int64_t nr = PT_MIN(per, rows - r0);
            const size_t n = (size_t)(nr * cols), first = (size_t)(r0 * cols);
            real_t *data = into ? into + pi->offset + first : buf;
            if (read_range(f, t, src.base + first, n, data) != 0) goto done;
            if (lt && tied_differs != lf) {
                if (!lm) lm = pt_malloc(sizeof(real_t) * max_block_numel(m, pi->name, bb));
                if (read_range(lf, lt, first, n, lm) != 0) goto done;
                if (memcmp(lm, data, sizeof(real_t) * n)) tied_differs = lf;
            }
            if (fn && fn(ctx, pi, r0, nr, data) != 0) goto done;
        }
    }
    if (tied_differs) {
        pt_set_error("%s: lm_head.weight differs from model.embed_tokens.weight but config.json has "
                     "tie_word_embeddings true; set tie_word_embeddings to false to train them untied",
                     tied_differs->path);
        goto done;
    }
    // Unknown tensors are reported (as transformers does) but not fatal.
    for (int k = 0; k < s.n && read; k++)
        for (int j = 0; j < s.files[k].num_tensors; j++) {
            const char *name = s.files[k].tensors[j].name;
            if (!qwen3_find_tensor(m, name) && !(m->cfg.tie_word_embeddings && !strcmp(name, "lm_head.weight")) &&
                !is_fused_expert(m, name))
                pt_warn("%s: unexpected tensor \"%s\" ignored", s.files[k].path, name);
        }
    rc = 0;
done:
    free(lm);
    free(buf);
    shards_close(&s);
    return rc;
}

int hf_model_stream_weights(const qwen3_model *layout, const char *dir, hf_tensor_fn fn, void *ctx) {
    return stream(layout, dir, NULL, fn, ctx, 1);
}

int hf_model_check_weights(const qwen3_model *layout, const char *dir) {
    return stream(layout, dir, NULL, NULL, NULL, 0);
}

int hf_model_load_weights(qwen3_model *m, const char *dir) {
    // Host backends read straight into the parameters (no second full copy at start-up).
    real_t *host = m->be->host_memory ? m->params : pt_calloc(m->num_params, sizeof(real_t));
    const int rc = stream(m, dir, host, NULL, NULL, 1);
    if (rc == 0) {
        if (host != m->params) m->be->ops->upload(m->be, m->params, host, sizeof(real_t) * m->num_params);
        qwen3_params_changed(m);
    }
    if (host != m->params) free(host);
    return rc;
}

int hf_model_load_config(qwen3_config *cfg, const char *dir) {
    if (!pt_is_dir(dir)) {
        pt_set_error("%s: model directory not found", dir);
        return -1;
    }
    char *cfgp = pt_path_join(dir, "config.json");
    if (!pt_file_exists(cfgp) && dcp_is_checkpoint_dir(dir)) {
        free(cfgp);
        return dcp_refuse(dir);
    }
    const int rc = qwen3_config_load(cfg, cfgp);
    free(cfgp);
    return rc;
}

// The config of a TorchTitan HF export laid out as tools/torchtitan_run.py lays out a run: the export is
// DUMP/checkpoint/step-N (weights + model.safetensors.index.json, no config.json) and the run's
// --hf-assets-path is DUMP/assets. TorchTitan records its assets path nowhere in the dump folder, so this
// layout is the only one found without --config. NULL when DIR is not laid out so.
static char *titan_assets_config(const char *dir) {
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    char *index = pt_path_join(dir, "model.safetensors.index.json");
    const int export = strncmp(base, "step-", 5) == 0 && base[5] && strspn(base + 5, "0123456789") == strlen(base + 5)
                       && pt_file_exists(index);
    free(index);
    if (!export) return NULL;
    char *p = pt_path_join(dir, "../../assets/config.json");
    if (pt_file_exists(p)) return p;
    free(p);
    return NULL;
}

char *hf_model_config_path(const char *dir, const char *config) {
    if (!pt_is_dir(dir)) {
        pt_set_error("%s: model directory not found", dir);
        return NULL;
    }
    if (config) return pt_strdup(config);
    char *p = pt_path_join(dir, "config.json");
    if (pt_file_exists(p)) return p;
    free(p);
    if (dcp_is_checkpoint_dir(dir)) {
        dcp_refuse(dir);
        return NULL;
    }
    if ((p = titan_assets_config(dir))) {
        pt_warn("%s has no config.json; using %s (the TorchTitan run's hf assets; --config FILE names another)", dir,
                p);
        return p;
    }
    pt_set_error("%s: no config.json (TorchTitan's HF export writes none); give the model's config with --config "
                 "CONFIG.json (the run's hf_assets_path has it)", dir);
    return NULL;
}

int hf_model_load_config_from(qwen3_config *cfg, const char *dir, const char *config) {
    char *p = hf_model_config_path(dir, config);
    if (!p) return -1;
    const int rc = qwen3_config_load(cfg, p);
    free(p);
    return rc;
}

static int create_and_load(qwen3_model *m, const qwen3_config *cfg, const char *dir, pt_backend *be) {
    if (qwen3_create(m, cfg, be) != 0) return -1;
    if (hf_model_load_weights(m, dir) != 0) {
        qwen3_free(m);
        return -1;
    }
    return 0;
}

int hf_model_load(qwen3_model *m, const char *dir, pt_backend *be) {
    memset(m, 0, sizeof *m);  // callers test m->be to know whether there is anything to free
    qwen3_config cfg;
    if (hf_model_load_config(&cfg, dir) != 0) return -1;
    return create_and_load(m, &cfg, dir, be);
}

int hf_model_load_with_config(qwen3_model *m, const char *dir, const char *config, pt_backend *be) {
    memset(m, 0, sizeof *m);
    qwen3_config cfg;
    if (hf_model_load_config_from(&cfg, dir, config) != 0) return -1;
    return create_and_load(m, &cfg, dir, be);
}

// A weight file of an HF save: model.safetensors, its index, or a shard
// model-NNNNN-of-NNNNN.safetensors (the names transformers' save_pretrained
// also treats as its own when it cleans a directory).
static bool is_weight_file(const char *name) {
    if (!strcmp(name, "model.safetensors") || !strcmp(name, "model.safetensors.index.json")) return true;
    if (strlen(name) != strlen("model-00001-of-00002.safetensors") || strncmp(name, "model-", 6) ||
        strncmp(name + 11, "-of-", 4) || strcmp(name + 20, ".safetensors"))
        return false;
    for (int i = 0; i < 5; i++)
        if (!isdigit((unsigned char)name[6 + i]) || !isdigit((unsigned char)name[15 + i])) return false;
    return true;
}

// Removes a staging directory and the plain files in it.
static void remove_staging(const char *stage) {
    DIR *d = opendir(stage);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p = pt_path_join(stage, e->d_name);
            unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(stage);
}

// Removes weight files of an earlier save that this save did not write
// (written[0..n)), so no loader picks up a stale model.safetensors next to a
// new sharded index, or stale shards next to a new single file.
static int remove_stale_weights(const char *dir, char **written, int n) {
    DIR *d = opendir(dir);
    if (!d) {
        pt_set_error("%s: cannot list directory: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_weight_file(e->d_name)) continue;
        bool ours = false;
        for (int i = 0; i < n && !ours; i++) ours = !strcmp(written[i], e->d_name);
        if (ours) continue;
        char *p = pt_path_join(dir, e->d_name);
        if (unlink(p) != 0 && errno != ENOENT) {
            pt_set_error("%s: cannot remove stale weight file: %s", p, strerror(errno));
            rc = -1;
        }
        free(p);
    }
    closedir(d);
    return rc;
}

// One save in flight: the tensors' rows are fetched and converted a block at a time as st_write_stream asks.
typedef struct {
    const qwen3_model *m;
    const char *dir;
    st_dtype dtype;
    size_t es;            // bytes per element in the file
    size_t block_bytes;   // rows per block: hf_block_rows(t, block_bytes)
    hf_fetch_fn fetch;
    void *ctx;
    int first;            // the layout index of the file's first tensor (a file holds consecutive tensors)
    int next;             // the next block to fetch: tensor `next`, from row `next_row`
    int64_t next_row;
    real_t *buf;          // a block in fp32 (NULL: no fetch, the parameters are read in place)
    uint8_t *conv;        // ... in the target dtype (NULL when that is the fp32 values' own layout)
} save_stream;

// The next block of the layout's tensors (tensor ss->next from row ss->next_row) fetched into ss->buf, and the
// position moved past it; the fetch's return.
static int fetch_next_block(save_stream *ss, int64_t *row0, int64_t *nrows) {
    const qwen3_param_info *t = &ss->m->tensors[ss->next];
    *row0 = ss->next_row;
    *nrows = PT_MIN(hf_block_rows(t, ss->block_bytes), t->shape[0] - *row0);
    const int k = ss->next;
    if ((ss->next_row += *nrows) >= t->shape[0]) {
        ss->next++;
        ss->next_row = 0;
    }
    return ss->fetch(ss->ctx, k, t, *row0, *nrows, ss->buf);
}

static const void *save_tensor_bytes(void *vctx, int i, uint64_t offset, uint64_t *nbytes) {
    save_stream *ss = vctx;
    const int k = ss->first + i;
    const qwen3_param_info *ti = &ss->m->tensors[k];
    const size_t cols = (size_t)ti->shape[1];
    if (!ss->fetch && !ss->conv) {  // host fp32 parameters, written as they are
        *nbytes = ti->numel * ss->es - offset;
        return (const uint8_t *)(ss->m->params + ti->offset) + offset;
    }
    int64_t row0 = (int64_t)(offset / (ss->es * cols)), nrows = PT_MIN(hf_block_rows(ti, ss->block_bytes), ti->shape[0] - row0);
    const real_t *src = ss->m->params + ti->offset + (size_t)row0 * cols;
    if (ss->fetch) {
        if (k != ss->next || row0 != ss->next_row) {  // cannot happen: the writer goes in order
            pt_set_error("%s: the save asked for %s row %lld out of order", ss->dir, ti->name, (long long)row0);
            return NULL;
        }
        if (fetch_next_block(ss, &row0, &nrows) != 0) return NULL;
        src = ss->buf;
    }
    const size_t n = (size_t)nrows * cols;
    *nbytes = n * ss->es;
    if (!ss->conv) return src;
    for (size_t j = 0; j < n; j++) {
        const float v = (float)src[j];
        if (ss->dtype == ST_F32) {
            memcpy(ss->conv + 4 * j, &v, 4);
            continue;
        }
        const uint16_t h = ss->dtype == ST_BF16 ? pt_float_to_bf16(v) : pt_float_to_f16(v);
        // a weight float16 cannot hold (|w| >= 65520 becomes inf, as torch's .to(float16) silently makes it)
        // refuses the save
        if (ss->dtype == ST_F16 && isfinite(v) && (h & 0x7c00) == 0x7c00) {
            pt_set_error("%s: weight %s[%zu] = %g is beyond float16's range (+-65504); save as bfloat16 or "
                         "float32", ss->dir, ti->name, (size_t)row0 * cols + j, (double)v);
            return NULL;
        }
        memcpy(ss->conv + 2 * j, &h, 2);
    }
    return ss->conv;
}

static int fetch_from_model(void *ctx, int i, const qwen3_param_info *t, int64_t row0, int64_t nrows, real_t *out) {
    (void)i;
    const qwen3_model *m = ctx;
    const size_t cols = (size_t)t->shape[1];
    m->be->ops->download(m->be, out, m->params + t->offset + (size_t)row0 * cols, sizeof(real_t) * (size_t)nrows * cols);
    return 0;
}

int hf_model_save(const qwen3_model *m, const char *dir, const char *dtype, uint64_t max_shard_bytes) {
    // host memory: the parameters are written (or converted) in place, without a copy
    return hf_model_save_streamed(m, dir, dtype, max_shard_bytes, hf_weight_block_bytes(),
                                  m->be->host_memory ? NULL : fetch_from_model, (void *)m);
}

int hf_model_save_streamed(const qwen3_model *m, const char *dir, const char *dtype, uint64_t max_shard_bytes,
                           size_t block_bytes, hf_fetch_fn fetch, void *ctx) {
    const st_dtype out_dtype = !dtype || !strcmp(dtype, "float32") ? ST_F32
                             : !strcmp(dtype, "bfloat16")          ? ST_BF16
                             : !strcmp(dtype, "float16")           ? ST_F16
                                                                   : ST_DTYPE_COUNT;
    const int nt = m->num_tensors;
    const size_t maxn = max_block_numel(m, NULL, block_bytes);
    const size_t es = out_dtype == ST_F32 ? 4 : 2;
    save_stream ss = {.m = m, .dir = dir, .dtype = out_dtype, .es = es, .block_bytes = block_bytes, .fetch = fetch,
                      .ctx = ctx, .buf = fetch ? pt_malloc(sizeof(real_t) * maxn) : NULL};
    if (out_dtype != ST_F32 || sizeof(real_t) != 4) ss.conv = pt_malloc(es * maxn);
    int rc = -1;
    char *stage = NULL;
    int *shard_of = pt_calloc(nt, sizeof(int));
    cJSON *index = NULL, *wm = NULL;
    st_write_tensor *wt = pt_calloc(nt, sizeof(st_write_tensor));
    int nshards = 1, nwritten = 0;
    char **written = NULL;
    const bool existed = pt_is_dir(dir);
    if (out_dtype == ST_DTYPE_COUNT) {
        pt_set_error("unsupported export dtype \"%s\" (float32, bfloat16 or float16)", dtype);
        goto done;
    }
    if (pt_mkdir_p(dir) != 0) goto done;
    // The new weight files are written into a staging directory inside DIR and
    // renamed into place only once all of them are complete; stale files of an
    // earlier save are removed last. A save that fails midway (ENOSPC, a crash,
    // a weight float16 cannot hold) leaves the earlier save loadable.
    stage = pt_path_join(dir, ".portatrain-save.tmpXXXXXX");
    if (!mkdtemp(stage)) {
        pt_set_error("%s: cannot create staging directory: %s", dir, strerror(errno));
        free(stage);
        stage = NULL;
        goto done;
    }
    // Assign tensors to shards in order.
    uint64_t cur = 0, total = 0, total_params = 0;
    for (int i = 0; i < nt; i++) {
        uint64_t b = m->tensors[i].numel * es;
        if (max_shard_bytes && cur > 0 && cur + b > max_shard_bytes) {
            nshards++;
            cur = 0;
        }
        shard_of[i] = nshards - 1;
        cur += b;
        total += b;
        total_params += m->tensors[i].numel;
    }
    if (nshards > 1) {
        index = cJSON_CreateObject();
        cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
        // as transformers 5 writes it: the parameter count, and the bytes of tensor data (no headers)
        cJSON_AddNumberToObject(meta, "total_parameters", (double)total_params);
        cJSON_AddNumberToObject(meta, "total_size", (double)total);
        wm = cJSON_AddObjectToObject(index, "weight_map");
    }
    written = pt_calloc(nshards + 1, sizeof(char *));  // file names, index last
    const char *meta_kv[] = {"format", "pt"};
    rc = 0;
    for (int s = 0, first = 0; s < nshards && !rc; s++) {
        int n = 0;
        for (int i = first; i < nt && shard_of[i] == s; i++, n++) {
            const qwen3_param_info *t = &m->tensors[i];
            wt[n].name = t->name;
            wt[n].dtype = out_dtype;
            wt[n].ndim = t->ndim;
            wt[n].shape[0] = t->shape[0];
            wt[n].shape[1] = t->shape[1];
        }
        char fname[64];
        if (nshards == 1) snprintf(fname, sizeof fname, "model.safetensors");
        else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        char *path = pt_path_join(stage, fname);
        ss.first = first;
        rc = st_write_stream(path, wt, n, meta_kv, 1, save_tensor_bytes, &ss);
        free(path);
        written[nwritten++] = pt_strdup(fname);
        if (wm)
            for (int i = 0; i < n; i++) cJSON_AddStringToObject(wm, wt[i].name, fname);
        first += n;
    }
    if (!rc && index) {
        char *ip = pt_path_join(stage, "model.safetensors.index.json");
        rc = pt_json_write_file(ip, index);
        free(ip);
        written[nwritten++] = pt_strdup("model.safetensors.index.json");
    }
    // Shards first, the index (or the single file) last: a loader that looks
    // in between still finds a complete old or new set.
    for (int i = 0; i < nwritten && !rc; i++) {
        char *from = pt_path_join(stage, written[i]), *to = pt_path_join(dir, written[i]);
        if (rename(from, to) != 0) {
            pt_set_error("%s: cannot move into place: %s", to, strerror(errno));
            rc = -1;
        }
        free(from);
        free(to);
    }
    if (!rc) {
        char *cp = pt_path_join(dir, "config.json");
        rc = qwen3_config_save(&m->cfg, cp, out_dtype == ST_BF16 ? "bfloat16" : out_dtype == ST_F16 ? "float16" : "float32");
        free(cp);
    }
    if (!rc) rc = remove_stale_weights(dir, written, nwritten);
    if (!rc) rc = pt_fsync_dir(dir);
done:
    if (ss.next < nt && fetch) {
        // The rest are fetched (and dropped) all the same: fetch may be a collective every rank takes part in.
        char *err = pt_strdup(pt_last_error());
        int64_t r0, nr;
        while (ss.next < nt) fetch_next_block(&ss, &r0, &nr);
        pt_set_error("%s", err);
        free(err);
    }
    if (stage) remove_staging(stage);
    free(stage);
    if (rc && !existed) rmdir(dir);  // a refused save into a new directory leaves none behind
    for (int i = 0; i < nwritten; i++) free(written[i]);
    free(written);
    cJSON_Delete(index);
    free(wt);
    free(shard_of);
    free(ss.conv);
    free(ss.buf);
    return rc;
}

const char *const hf_sidecar_files[] = {"tokenizer.json",      "tokenizer_config.json",  "special_tokens_map.json",
                                        "chat_template.jinja", "generation_config.json", "vocab.json",
                                        "merges.txt",          "added_tokens.json"};
const int hf_num_sidecar_files = (int)PT_ARRAY_LEN(hf_sidecar_files);

int hf_copy_sidecars(const char *src, const char *dst, int *ncopied) {
    if (ncopied) *ncopied = 0;
    char *rs = realpath(src, NULL), *rd = realpath(dst, NULL);
    const bool same = rs && rd && !strcmp(rs, rd);
    free(rs);
    free(rd);
    if (same) return 0;
    int rc = 0;
    for (int i = 0; i < hf_num_sidecar_files && !rc; i++) {
        char *sp = pt_path_join(src, hf_sidecar_files[i]), *dp = pt_path_join(dst, hf_sidecar_files[i]);
        if (pt_file_exists(sp)) {
            size_t n;
            char *d = pt_read_file(sp, &n);
            rc = d ? pt_write_file_atomic(dp, d, n) : -1;
            free(d);
            if (!rc && ncopied) (*ncopied)++;
        }
        free(sp);
        free(dp);
    }
    return rc;
}
