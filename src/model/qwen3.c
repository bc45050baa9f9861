#include "model/qwen3.h"
#include "model/qwen3_moe.h"
#include "util/philox.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_tensor(qwen3_model *m, int *cap, const char *name, int ndim, int64_t d0, int64_t d1, int layer,
                       int kind) {
    if (m->num_tensors == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        m->tensors = pt_realloc(m->tensors, sizeof(qwen3_param_info) * *cap);
    }
    qwen3_param_info *t = &m->tensors[m->num_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 1;
    t->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    t->offset = m->num_params;
    t->layer = layer;
    t->kind = kind;
    // Keep every tensor 16-float aligned inside the buffer (64-byte SIMD loads).
    m->num_params += (t->numel + 15) & ~(size_t)15;
}

static void bind_views(qwen3_model *m, real_t *base, real_t **embed, real_t **final_norm, real_t **lm_head,
                       qwen3_layer_params *layers) {
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *t = &m->tensors[i];
        real_t *p = base + t->offset;
        if (t->layer < 0) {
            if (!strcmp(t->name, "model.embed_tokens.weight")) *embed = p;
            else if (!strcmp(t->name, "model.norm.weight")) *final_norm = p;
            else if (!strcmp(t->name, "lm_head.weight")) *lm_head = p;
            continue;
        }
        if (t->kind >= P_LAYER_COUNT) {  // MoE tensors: per-tensor views (qwen3_moe.c)
            (layers == m->dlayers ? m->tgrads : m->tparams)[i] = p;
            continue;
        }
        qwen3_layer_params *L = &layers[t->layer];
        real_t **slot[P_LAYER_COUNT] = {&L->input_norm, &L->q, &L->k, &L->v, &L->o, &L->q_norm,
                                        &L->k_norm, &L->post_norm, &L->gate, &L->up, &L->down};
        *slot[t->kind] = p;
    }
    if (m->cfg.tie_word_embeddings) *lm_head = *embed;
}

static int create(qwen3_model *m, const qwen3_config *cfg, pt_backend *be, int alloc_params) {
    memset(m, 0, sizeof *m);
    if (qwen3_config_validate(cfg, "model config") != 0) return -1;
    m->cfg = *cfg;
    m->be = be;
    const int C = cfg->hidden_size, I = cfg->intermediate_size, D = cfg->head_dim;
    const int QD = cfg->num_attention_heads * D, KD = cfg->num_key_value_heads * D;
    int cap = 0;
    add_tensor(m, &cap, "model.embed_tokens.weight", 2, cfg->vocab_size, C, -1, -1);
    for (int l = 0; l < cfg->num_hidden_layers; l++) {
        char n[96];
#define LT(kind, suffix, nd, d0, d1)                               \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix); \
        add_tensor(m, &cap, n, nd, d0, d1, l, kind);
        LT(P_INPUT_NORM, "input_layernorm.weight", 1, C, 1)
        LT(P_Q, "self_attn.q_proj.weight", 2, QD, C)
        LT(P_K, "self_attn.k_proj.weight", 2, KD, C)
        LT(P_V, "self_attn.v_proj.weight", 2, KD, C)
        LT(P_O, "self_attn.o_proj.weight", 2, C, QD)
        LT(P_Q_NORM, "self_attn.q_norm.weight", 1, D, 1)
        LT(P_K_NORM, "self_attn.k_norm.weight", 1, D, 1)
        LT(P_POST_NORM, "post_attention_layernorm.weight", 1, C, 1)
        if (qwen3_layer_is_sparse(cfg, l)) {
            const int EI = cfg->moe_intermediate_size;
            LT(P_ROUTER, "mlp.gate.weight", 2, cfg->num_experts, C)
            for (int e = 0; e < cfg->num_experts; e++) {
                char en[64];
                snprintf(en, sizeof en, "mlp.experts.%d.gate_proj.weight", e);
                LT(P_EXPERT_GATE, en, 2, EI, C)
                m->tensors[m->num_tensors - 1].expert = e;
                snprintf(en, sizeof en, "mlp.experts.%d.up_proj.weight", e);
                LT(P_EXPERT_UP, en, 2, EI, C)
                m->tensors[m->num_tensors - 1].expert = e;
                snprintf(en, sizeof en, "mlp.experts.%d.down_proj.weight", e);
                LT(P_EXPERT_DOWN, en, 2, C, EI)
                m->tensors[m->num_tensors - 1].expert = e;
            }
            continue;
        }
        LT(P_GATE, "mlp.gate_proj.weight", 2, I, C)
        LT(P_UP, "mlp.up_proj.weight", 2, I, C)
        LT(P_DOWN, "mlp.down_proj.weight", 2, C, I)
#undef LT
    }
    add_tensor(m, &cap, "model.norm.weight", 1, C, 1, -1, -1);
    if (!cfg->tie_word_embeddings) add_tensor(m, &cap, "lm_head.weight", 2, cfg->vocab_size, C, -1, -1);
    m->layers = pt_calloc(cfg->num_hidden_layers, sizeof(qwen3_layer_params));
    m->dlayers = pt_calloc(cfg->num_hidden_layers, sizeof(qwen3_layer_params));
    m->tparams = pt_calloc(m->num_tensors, sizeof(real_t *));
    m->tgrads = pt_calloc(m->num_tensors, sizeof(real_t *));
    if (alloc_params) {
        m->params = be->ops->alloc(be, sizeof(real_t) * m->num_params);
        bind_views(m, m->params, &m->embed, &m->final_norm, &m->lm_head, m->layers);
    }
    if (cfg->moe && qwen3_moe_create(m) != 0) return -1;
    return 0;
}

int qwen3_create(qwen3_model *m, const qwen3_config *cfg, pt_backend *be) { return create(m, cfg, be, 1); }
int qwen3_create_layout(qwen3_model *m, const qwen3_config *cfg, pt_backend *be) { return create(m, cfg, be, 0); }

int qwen3_num_units(const qwen3_model *m) { return m->cfg.num_hidden_layers + 2; }

int qwen3_set_activation_checkpointing(qwen3_model *m, int policy, int every) {
    if (m->act_memory) {
        pt_set_error("activation checkpointing must be chosen before the activations are allocated");
        return -1;
    }
    m->ac_policy = policy;
    m->ac_every = every > 0 ? every : 1;
    return 0;
}

int qwen3_set_precision(qwen3_model *m, const char *precision) {
    if (!precision || !strcmp(precision, "fp32")) return 0;
    pt_backend *be = m->be;
    if (strcmp(precision, "bf16")) {
        pt_set_error("precision \"%s\" is not fp32 or bf16", precision);
        return -1;
    }
    if (!be->ops->round_bf16) {
        pt_set_error("backend %s has no bf16 path (precision bf16)", be->name);
        return -1;
    }
    if (m->act_memory || !m->params || m->par) {
        pt_set_error("precision bf16 must be chosen on a single-process model before its activations are allocated");
        return -1;
    }
    m->bf16 = 1;
    be->bf16_casts = true;
    m->wparams = be->ops->alloc(be, sizeof(real_t) * m->num_params);
    if (be->ops->pack_bf16 && be->ops->matmul_forward_bf16 && be->ops->matmul_backward_bf16 && be->ops->lm_head_xent_bf16)
        m->wpacked = be->ops->alloc(be, sizeof(uint16_t) * m->num_params);
    bind_views(m, m->wparams, &m->embed, &m->final_norm, &m->lm_head, m->layers);
    m->wparams_stale = 1;
    return 0;
}

void qwen3_params_changed(qwen3_model *m) { m->wparams_stale = 1; }

// bf16: the working copy the forward reads = the master weights rounded.
static void refresh_working_weights(qwen3_model *m) {
    if (!m->bf16 || !m->wparams_stale) return;
    pt_backend *be = m->be;
    be->ops->round_bf16(be, m->wparams, m->params, m->num_params);
    if (m->wpacked) be->ops->pack_bf16(be, m->wpacked, m->wparams, m->num_params);
    m->wparams_stale = 0;
}

int qwen3_parse_activation_checkpointing(const char *s, int *policy, int *every) {
    *policy = QWEN3_AC_NONE;
    *every = 1;
    if (!s || !strcmp(s, "none")) return 0;
    if (!strcmp(s, "full")) { *policy = QWEN3_AC_FULL; return 0; }
    if (!strcmp(s, "op")) { *policy = QWEN3_AC_OP; return 0; }
    if (!strncmp(s, "selective", 9)) {
        *policy = QWEN3_AC_SELECTIVE;
        *every = 2;  // TorchTitan's default layer frequency
        if (!s[9]) return 0;
        char *end;
        if (!strncmp(s + 9, ":every=", 7)) {
            long n = strtol(s + 16, &end, 10);
            if (end != s + 16 && !*end && n >= 1 && n <= 1000000) {
                *every = (int)n;
                return 0;
            }
        }
    }
    pt_set_error("--activation-checkpointing '%s': want none, full, selective[:every=N] (N >= 1) or op", s);
    return -1;
}

int qwen3_layer_ac_mode(const qwen3_model *m, int layer) {
    switch (m->ac_policy) {
    case QWEN3_AC_FULL: return QWEN3_AC_FULL;
    case QWEN3_AC_OP: return QWEN3_AC_OP;
    case QWEN3_AC_SELECTIVE: return (layer + 1) % m->ac_every == 0 ? QWEN3_AC_FULL : QWEN3_AC_NONE;
    default: return QWEN3_AC_NONE;
    }
}

int qwen3_tensor_unit(const qwen3_model *m, const qwen3_param_info *t) {
    if (t->layer >= 0) return t->layer + 1;
    return !strcmp(t->name, "model.embed_tokens.weight") ? 0 : m->cfg.num_hidden_layers + 1;
}

void qwen3_unit_range(const qwen3_model *m, int unit, size_t *offset, size_t *count) {
    size_t lo = SIZE_MAX, hi = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *t = &m->tensors[i];
        if (qwen3_tensor_unit(m, t) != unit) continue;
        lo = PT_MIN(lo, t->offset);
        hi = PT_MAX(hi, t->offset + ((t->numel + 15) & ~(size_t)15));
    }
    *offset = lo == SIZE_MAX ? 0 : lo;
    *count = lo == SIZE_MAX ? 0 : hi - lo;
}

void qwen3_bind_unit(qwen3_model *m, int unit, real_t *params_base, real_t *grads_base) {
    size_t off, cnt;
    qwen3_unit_range(m, unit, &off, &cnt);
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *t = &m->tensors[i];
        if (qwen3_tensor_unit(m, t) != unit) continue;
        for (int g = 0; g < 2; g++) {
            real_t *base = g ? grads_base : params_base;
            if (!base) continue;
            real_t *p = base + (t->offset - off);
            if (t->layer >= 0 && t->kind >= P_LAYER_COUNT) {
                (g ? m->tgrads : m->tparams)[i] = p;
            } else if (t->layer >= 0) {
                qwen3_layer_params *L = g ? &m->dlayers[t->layer] : &m->layers[t->layer];
                real_t **slot[P_LAYER_COUNT] = {&L->input_norm, &L->q, &L->k, &L->v, &L->o, &L->q_norm,
                                                &L->k_norm, &L->post_norm, &L->gate, &L->up, &L->down};
                *slot[t->kind] = p;
            } else if (unit == 0) {
                *(g ? &m->dembed : &m->embed) = p;
            } else if (!strcmp(t->name, "model.norm.weight")) {
                *(g ? &m->dfinal_norm : &m->final_norm) = p;
            } else {
                *(g ? &m->dlm_head : &m->lm_head) = p;
            }
        }
    }
    if (m->cfg.tie_word_embeddings) {
        m->lm_head = m->embed;
        m->dlm_head = m->dembed;
    }
}

void qwen3_alloc_grads(qwen3_model *m) {
    if (m->grads) return;
    m->grads = m->be->ops->alloc(m->be, sizeof(real_t) * m->num_params);
    bind_views(m, m->grads, &m->dembed, &m->dfinal_norm, &m->dlm_head, m->dlayers);
}

static void free_activations(qwen3_model *m) {
    pt_backend *be = m->be;
    if (m->act_memory) be->ops->free(be, m->act_memory);
    if (m->ids) be->ops->free(be, m->ids);
    if (m->targets) be->ops->free(be, m->targets);
    if (m->pos) be->ops->free(be, m->pos);
    if (m->pos_cos) be->ops->free(be, m->pos_cos);
    if (m->pos_sin) be->ops->free(be, m->pos_sin);
    free(m->host_rope_cos);
    free(m->host_rope_sin);
    free(m->host_pos_cos);
    free(m->host_pos_sin);
    m->host_rope_cos = m->host_rope_sin = m->host_pos_cos = m->host_pos_sin = NULL;
    m->pos = NULL;
    m->pos_cos = m->pos_sin = NULL;
    m->use_pos = 0;
    free(m->acts);
    free(m->host_ids);
    free(m->host_targets);
    m->host_ids = m->host_targets = NULL;
    m->act_memory = NULL;
    m->ids = m->targets = NULL;
    m->acts = NULL;
    m->max_B = m->max_T = 0;
}

void qwen3_free(qwen3_model *m) {
    if (!m->be) return;
    qwen3_moe_free(m);
    free_activations(m);
    if (m->params) m->be->ops->free(m->be, m->params);
    if (m->grads) m->be->ops->free(m->be, m->grads);
    if (m->wparams) m->be->ops->free(m->be, m->wparams);
    if (m->wpacked) m->be->ops->free(m->be, m->wpacked);
    free(m->tensors);
    free(m->layers);
    free(m->dlayers);
    free(m->tparams);
    free(m->tgrads);
    memset(m, 0, sizeof *m);
}

const qwen3_param_info *qwen3_find_tensor(const qwen3_model *m, const char *name) {
    for (int i = 0; i < m->num_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

int qwen3_tensor_decays(const qwen3_param_info *t) { return t->ndim >= 2; }

// RoPE tables exactly as transformers computes them in fp32:
// inv_freq[i] = 1 / theta^(2i/D); angle = t * inv_freq; emb = cat(angle, angle).
static void rope_tables(const qwen3_config *cfg, int T, real_t *cos_h, real_t *sin_h) {
    const int D = cfg->head_dim, h = D / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < h; i++) {
            float expo = (float)(2 * i) / (float)D;
            float inv = 1.0f / powf((float)cfg->rope_theta, expo);
#ifdef PT_REAL_DOUBLE
            double ang = (double)t / pow(cfg->rope_theta, (double)(2 * i) / D);
            (void)inv;
#else
            float ang = (float)t * inv;
#endif
            cos_h[(size_t)t * D + i] = cos_h[(size_t)t * D + i + h] = (real_t)cos(ang);
            sin_h[(size_t)t * D + i] = sin_h[(size_t)t * D + i + h] = (real_t)sin(ang);
        }
}

// Carves the activation buffers of a B x T batch out of the memory at `base`
// (m->acts and the shared buffers point into it) and returns its length in
// floats. With base 0 it only measures (the pointers are never used), so the
// allocation and qwen3_activation_bytes are the same computation.
static size_t carve_activations(qwen3_model *m, int B, int T, size_t S, uintptr_t base) {
    const qwen3_config *c = &m->cfg;
    const size_t N = (size_t)B * T, C = c->hidden_size, I = c->intermediate_size, H = c->num_attention_heads,
                 KV = c->num_key_value_heads, D = c->head_dim;
    const size_t QD = H * D, KD = KV * D;
    const int L = c->num_hidden_layers;
    size_t used = 0;
#define ALIGN16(x) (((x) + 15) & ~(size_t)15)
#define TAKE(n) (used += ALIGN16(n), (real_t *)(base + sizeof(real_t) * (used - ALIGN16(n))))
    free(m->acts);
    m->acts = pt_calloc(L, sizeof(qwen3_layer_acts));
    // Per-layer buffers, in struct order: length, and the policies that keep
    // the buffer per layer (the others point it at the shared set `rc`, which
    // the recomputation in backward refills).
    enum { K_NONE = 1 << QWEN3_AC_NONE, K_FULL = 1 << QWEN3_AC_FULL, K_OP = 1 << QWEN3_AC_OP };
    const struct { size_t off, len; int keep; } fields[] = {
#define F(name, len, keep) {offsetof(qwen3_layer_acts, name), len, keep}
        F(res_in, N * C, K_NONE | K_FULL | K_OP), F(ln1, N * C, K_NONE), F(ln1_rstd, N, K_NONE | K_OP),
        F(q_raw, N * QD, K_NONE | K_OP), F(k_raw, N * KD, K_NONE | K_OP), F(q_rstd, N * H, K_NONE | K_OP),
        F(k_rstd, N * KV, K_NONE | K_OP), F(q, N * QD, K_NONE), F(k, N * KD, K_NONE), F(v, N * KD, K_NONE | K_OP),
        F(att_saved, S, K_NONE | K_OP), F(att_out, N * QD, K_NONE | K_OP), F(res_mid, N * C, K_NONE | K_OP),
        F(ln2, N * C, K_NONE), F(ln2_rstd, N, K_NONE | K_OP), F(gate, N * I, K_NONE | K_OP),
        F(up, N * I, K_NONE | K_OP), F(act, N * I, K_NONE),
#undef F
    };
    const int nf = (int)(sizeof fields / sizeof fields[0]);
#define FIELD(acts, i) (*(real_t **)((char *)(acts) + fields[i].off))
    qwen3_layer_acts rc;
    memset(&rc, 0, sizeof rc);
    for (int i = 0; i < nf; i++) {  // shared: dropped by some layer's policy
        int needed = 0;
        for (int l = 0; l < L; l++) needed |= !(fields[i].keep & (1 << qwen3_layer_ac_mode(m, l)));
        if (needed) FIELD(&rc, i) = TAKE(fields[i].len);
    }
    for (int l = 0; l < L; l++) {
        qwen3_layer_acts *a = &m->acts[l];
        const int keep = 1 << qwen3_layer_ac_mode(m, l);
        for (int i = 0; i < nf; i++) FIELD(a, i) = fields[i].keep & keep ? TAKE(fields[i].len) : FIELD(&rc, i);
    }
#undef FIELD
    m->res_final = TAKE(N * C);
    m->lnf = TAKE(N * C);
    m->lnf_rstd = TAKE(N);
    m->rope_cos = TAKE((size_t)T * D);
    m->rope_sin = TAKE((size_t)T * D);
    m->d_res = TAKE(N * C);
    m->d_ln = TAKE(N * C);
    m->d_q = TAKE(N * QD);
    m->d_att = TAKE(N * QD);
    m->d_qn = TAKE(N * QD);
    m->d_k = TAKE(N * KD);
    m->d_v = TAKE(N * KD);
    m->d_kn = TAKE(N * KD);
    m->d_gate = TAKE(N * I);
    m->d_up = TAKE(N * I);
    m->d_act = TAKE(N * I);
#undef TAKE
#undef ALIGN16
    return used;
}

// The sparse blocks' own buffers (host and backend), allocated on their first forward of B x T tokens.
static size_t moe_buffer_bytes(const qwen3_config *cfg, int B, int T, int ep) {
    size_t host, backend;
    qwen3_moe_buffer_bytes(cfg, B * T, ep, &host, &backend);
    return host + backend;
}

size_t qwen3_activation_bytes(const qwen3_config *cfg, int B, int T, size_t S, int ac_policy, int ac_every, int ep) {
    qwen3_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.ac_policy = ac_policy;
    m.ac_every = ac_every > 0 ? ac_every : 1;
    const size_t used = carve_activations(&m, B, T, S, 0);
    free(m.acts);
    return used * sizeof(real_t) + moe_buffer_bytes(cfg, B, T, ep);
}

int qwen3_alloc_activations(qwen3_model *m, int B, int T) {
    if (B <= m->max_B && T <= m->max_T) return 0;
    if (T > m->cfg.max_position_embeddings) {
        pt_set_error("sequence length %d exceeds max_position_embeddings %d", T, m->cfg.max_position_embeddings);
        return -1;
    }
    B = PT_MAX(B, m->max_B);
    T = PT_MAX(T, m->max_T);
    free_activations(m);
    pt_backend *be = m->be;
    const qwen3_config *c = &m->cfg;
    const size_t N = (size_t)B * T, H = c->num_attention_heads, D = c->head_dim;
    const size_t S = be->ops->attention_saved_floats(be, B, T, (int)H, (int)D);
    const size_t carved = carve_activations(m, B, T, S, 0) * sizeof(real_t);
    m->act_memory = be->ops->alloc(be, carved);
    m->act_bytes = carved + moe_buffer_bytes(c, B, T, m->par && m->par->ep_size > 1 ? m->par->ep_size : 1);
    carve_activations(m, B, T, S, (uintptr_t)m->act_memory);
    m->ids = be->ops->alloc(be, sizeof(int32_t) * N);
    m->targets = be->ops->alloc(be, sizeof(int32_t) * N);
    m->host_ids = pt_malloc(sizeof(int32_t) * N);
    m->host_targets = pt_malloc(sizeof(int32_t) * N);
    m->pos = be->ops->alloc(be, sizeof(int32_t) * N);
    m->pos_cos = be->ops->alloc(be, sizeof(real_t) * N * D);
    m->pos_sin = be->ops->alloc(be, sizeof(real_t) * N * D);
    m->host_pos_cos = pt_malloc(sizeof(real_t) * N * D);
    m->host_pos_sin = pt_malloc(sizeof(real_t) * N * D);
    real_t *cs = pt_malloc(sizeof(real_t) * (size_t)T * D), *sn = pt_malloc(sizeof(real_t) * (size_t)T * D);
    rope_tables(c, T, cs, sn);
    be->ops->upload(be, m->rope_cos, cs, sizeof(real_t) * (size_t)T * D);
    be->ops->upload(be, m->rope_sin, sn, sizeof(real_t) * (size_t)T * D);
    if (m->bf16) {  // HF: cos.to(x.dtype), sin.to(x.dtype)
        be->ops->round_bf16(be, m->rope_cos, m->rope_cos, (size_t)T * D);
        be->ops->round_bf16(be, m->rope_sin, m->rope_sin, (size_t)T * D);
    }
    m->host_rope_cos = cs;
    m->host_rope_sin = sn;
    m->max_B = B;
    m->max_T = T;
    return 0;
}

static int check_ids(const qwen3_model *m, const int32_t *ids, const int32_t *targets, size_t N) {
    const int V = m->par ? m->par->vocab_global : m->cfg.vocab_size;
    for (size_t i = 0; i < N; i++) {
        if (ids[i] < 0 || ids[i] >= V) {
            pt_set_error("input token %zu has id %d outside the vocabulary [0, %d)", i, ids[i], V);
            return -1;
        }
        if (targets && targets[i] != -100 && (targets[i] < 0 || targets[i] >= V)) {
            pt_set_error("label %zu has id %d outside the vocabulary [0, %d) (and is not -100)", i, targets[i],
                         V);
            return -1;
        }
    }
    return 0;
}

static void gather(qwen3_model *m, int unit) {
    if (m->par && m->par->gather) m->par->gather(m->par->ctx, m, unit);
}
static void grads_ready(qwen3_model *m, int unit) {
    if (m->par && m->par->grads_ready) m->par->grads_ready(m->par->ctx, m, unit);
}
static void tp_allreduce(qwen3_model *m, real_t *x, size_t n) {
    if (m->par && m->par->tp_size > 1) m->par->tp_allreduce(m->par->ctx, x, n);
}
// Precision bf16: Hugging Face's bf16 model holds this tensor in bf16 here.
static void cast(qwen3_model *m, real_t *x, size_t n) {
    if (m->bf16) m->be->ops->round_bf16(m->be, x, x, n);
}
static const uint16_t *packed(const qwen3_model *m, const real_t *w) { return m->wpacked + (w - m->wparams); }
// Linear layer; under bf16 the output is a bf16 tensor (fp32 accumulation).
static void linear_forward(qwen3_model *m, real_t *out, const real_t *inp, const real_t *w, int N, int C, int OC) {
    pt_backend *be = m->be;
    if (m->wpacked) be->ops->matmul_forward_bf16(be, out, inp, w, packed(m, w), N, C, OC);
    else be->ops->matmul_forward(be, out, inp, w, N, C, OC);
}
static void linear_backward(qwen3_model *m, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                            const real_t *w, int N, int C, int OC) {
    pt_backend *be = m->be;
    if (m->wpacked) be->ops->matmul_backward_bf16(be, dinp, dw, dout, inp, w, packed(m, w), N, C, OC);
    else be->ops->matmul_backward(be, dinp, dw, dout, inp, w, N, C, OC);
}

// The sparse block (qwen3_moe.c) runs its matmuls and casts through the same helpers.
void qwen3_linear_forward(qwen3_model *m, real_t *out, const real_t *inp, const real_t *w, int N, int C, int OC) {
    linear_forward(m, out, inp, w, N, C, OC);
}
void qwen3_linear_backward(qwen3_model *m, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                           const real_t *w, int N, int C, int OC) {
    linear_backward(m, dinp, dw, dout, inp, w, N, C, OC);
}
void qwen3_cast(qwen3_model *m, real_t *x, size_t n) { cast(m, x, n); }

// The tied lm_head is the embedding: unit 0 again.
static void gather_lm_head(qwen3_model *m) {
    gather(m, m->cfg.tie_word_embeddings ? 0 : m->cfg.num_hidden_layers + 1);
}
static void lm_head_xent(qwen3_model *m, double *loss_sum, real_t *dinp, real_t *dw, int N, float scale) {
    pt_backend *be = m->be;
    const int C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    if (m->par && m->par->tp_size > 1)
        m->par->tp_lm_head_xent(m->par->ctx, loss_sum, dinp, dw, m->lnf, m->lm_head, m->targets, N, C, V, scale);
    else if (m->wpacked)
        be->ops->lm_head_xent_bf16(be, loss_sum, dinp, dw, m->lnf, m->lm_head, packed(m, m->lm_head), m->targets, N, C, V,
                              scale);
    else
        be->ops->lm_head_xent(be, loss_sum, dinp, dw, m->lnf, m->lm_head, m->targets, N, C, V, scale);
}

// RoPE on x[B,T,NH,D] at the current positions: per-token rows make the batch
// one sequence of B*T tokens.
static void rope_fwd(qwen3_model *m, real_t *x, int B, int T, int NH) {
    pt_backend *be = m->be;
    const int D = m->cfg.head_dim;
    if (m->use_pos) be->ops->rope_forward(be, x, x, m->pos_cos, m->pos_sin, 1, B * T, NH, D);
    else be->ops->rope_forward(be, x, x, m->rope_cos, m->rope_sin, B, T, NH, D);
}

static void rope_bwd(qwen3_model *m, real_t *dx, int B, int T, int NH) {
    pt_backend *be = m->be;
    const int D = m->cfg.head_dim;
    if (m->use_pos) be->ops->rope_backward(be, dx, dx, m->pos_cos, m->pos_sin, 1, B * T, NH, D);
    else be->ops->rope_backward(be, dx, dx, m->rope_cos, m->rope_sin, B, T, NH, D);
}

static const int32_t *att_pos(const qwen3_model *m) { return m->use_pos ? m->pos : NULL; }

// One decoder layer forward: res_out = layer(a->res_in). With `for_backward`
// (recomputing a checkpointed layer) it stops after SwiGLU: backward needs no
// down_proj output.
static void layer_forward(qwen3_model *m, int l, int B, int T, real_t *res_out, int for_backward) {
    pt_backend *be = m->be;
    const qwen3_config *c = &m->cfg;
    const int N = B * T, C = c->hidden_size, I = c->intermediate_size, H = c->num_attention_heads,
              KV = c->num_key_value_heads, D = c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    qwen3_layer_acts *a = &m->acts[l];
    const qwen3_layer_params *p = &m->layers[l];
    // attention block
    be->ops->rmsnorm_forward(be, a->ln1, a->ln1_rstd, a->res_in, p->input_norm, N, C, eps);
    linear_forward(m, a->q_raw, a->ln1, p->q, N, C, H * D);
    linear_forward(m, a->k_raw, a->ln1, p->k, N, C, KV * D);
    linear_forward(m, a->v, a->ln1, p->v, N, C, KV * D);
    cast(m, a->q_raw, (size_t)N * H * D);
    cast(m, a->k_raw, (size_t)N * KV * D);
    cast(m, a->v, (size_t)N * KV * D);
    be->ops->rmsnorm_forward(be, a->q, a->q_rstd, a->q_raw, p->q_norm, N * H, D, eps);
    be->ops->rmsnorm_forward(be, a->k, a->k_rstd, a->k_raw, p->k_norm, N * KV, D, eps);
    rope_fwd(m, a->q, B, T, H);
    rope_fwd(m, a->k, B, T, KV);
    be->ops->attention_forward(be, a->att_out, a->att_saved, a->q, a->k, a->v, att_pos(m), B, T, H, KV, D);
    cast(m, a->att_out, (size_t)N * H * D);
    linear_forward(m, a->res_mid, a->att_out, p->o, N, H * D, C);
    tp_allreduce(m, a->res_mid, (size_t)N * C);  // o_proj is row-parallel: partial sums
    cast(m, a->res_mid, (size_t)N * C);
    be->ops->add(be, a->res_mid, a->res_mid, a->res_in, (size_t)N * C);
    cast(m, a->res_mid, (size_t)N * C);
    // MLP block
    be->ops->rmsnorm_forward(be, a->ln2, a->ln2_rstd, a->res_mid, p->post_norm, N, C, eps);
    if (m->moe && qwen3_layer_is_sparse(c, l)) {
        if (for_backward) return;  // the sparse block keeps its own activations
        qwen3_moe_forward(m, l, a->ln2, res_out, N);
        tp_allreduce(m, res_out, (size_t)N * C);  // the experts' down_proj is row-parallel
        be->ops->add(be, res_out, res_out, a->res_mid, (size_t)N * C);
        cast(m, res_out, (size_t)N * C);
        return;
    }
    linear_forward(m, a->gate, a->ln2, p->gate, N, C, I);
    linear_forward(m, a->up, a->ln2, p->up, N, C, I);
    cast(m, a->gate, (size_t)N * I);
    cast(m, a->up, (size_t)N * I);
    be->ops->swiglu_forward(be, a->act, a->gate, a->up, (size_t)N * I);
    if (for_backward) return;
    linear_forward(m, res_out, a->act, p->down, N, I, C);
    tp_allreduce(m, res_out, (size_t)N * C);  // down_proj is row-parallel
    cast(m, res_out, (size_t)N * C);
    be->ops->add(be, res_out, res_out, a->res_mid, (size_t)N * C);
    cast(m, res_out, (size_t)N * C);
}

// QWEN3_AC_OP: the element-wise results dropped in forward, again from the
// kept matmul outputs (the same kernels on the same inputs: bitwise equal).
static void layer_recompute_cheap(qwen3_model *m, int l, int B, int T) {
    pt_backend *be = m->be;
    const qwen3_config *c = &m->cfg;
    const int N = B * T, C = c->hidden_size, I = c->intermediate_size, H = c->num_attention_heads,
              KV = c->num_key_value_heads, D = c->head_dim;
    const float eps = (float)c->rms_norm_eps;
    qwen3_layer_acts *a = &m->acts[l];
    const qwen3_layer_params *p = &m->layers[l];
    be->ops->rmsnorm_forward(be, a->ln1, a->ln1_rstd, a->res_in, p->input_norm, N, C, eps);
    be->ops->rmsnorm_forward(be, a->q, a->q_rstd, a->q_raw, p->q_norm, N * H, D, eps);
    be->ops->rmsnorm_forward(be, a->k, a->k_rstd, a->k_raw, p->k_norm, N * KV, D, eps);
    rope_fwd(m, a->q, B, T, H);
    rope_fwd(m, a->k, B, T, KV);
    be->ops->rmsnorm_forward(be, a->ln2, a->ln2_rstd, a->res_mid, p->post_norm, N, C, eps);
    be->ops->swiglu_forward(be, a->act, a->gate, a->up, (size_t)N * I);
}

// Shared forward up to the final norm (output in m->lnf).
static void forward_trunk(qwen3_model *m, int B, int T) {
    pt_backend *be = m->be;
    const qwen3_config *c = &m->cfg;
    const int N = B * T, C = c->hidden_size;
    const float eps = (float)c->rms_norm_eps;
    gather(m, 0);
    be->ops->embedding_forward(be, m->acts[0].res_in, m->ids, m->embed, N, C);
    tp_allreduce(m, m->acts[0].res_in, (size_t)N * C);  // each rank looked up its vocabulary rows
    for (int l = 0; l < c->num_hidden_layers; l++) {
        gather(m, l + 1);
        real_t *res_out = l + 1 < c->num_hidden_layers ? m->acts[l + 1].res_in : m->res_final;
        layer_forward(m, l, B, T, res_out, 0);
    }
    gather(m, c->num_hidden_layers + 1);
    be->ops->rmsnorm_forward(be, m->lnf, m->lnf_rstd, m->res_final, m->final_norm, N, C, eps);
    if (m->moe) qwen3_moe_finish_forward(m, N);
}

void qwen3_set_positions(qwen3_model *m, const int32_t *pos) { m->next_pos = pos; }

// The next forward's positions to the backend: checked (a document starts at
// 0 and counts up by one; no position reaches before its row), and their RoPE
// rows gathered from the tables, so RoPE runs as one sequence of N tokens.
static int upload_positions(qwen3_model *m, int B, int T) {
    const int32_t *pos = m->next_pos;
    m->next_pos = NULL;
    m->use_pos = pos != NULL;
    if (!pos) return 0;
    pt_backend *be = m->be;
    const size_t N = (size_t)B * T, D = (size_t)m->cfg.head_dim;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int32_t p = pos[(size_t)b * T + t];
            if (p < 0 || p > t || (p > 0 && (t == 0 || pos[(size_t)b * T + t - 1] != p - 1))) {
                pt_set_error("positions: row %d token %d has position %d (a document starts at 0 and counts up by "
                             "one within its row)", b, t, (int)p);
                return -1;
            }
        }
    real_t *cs = m->host_pos_cos, *sn = m->host_pos_sin;
    for (size_t i = 0; i < N; i++) {
        memcpy(cs + i * D, m->host_rope_cos + (size_t)pos[i] * D, sizeof(real_t) * D);
        memcpy(sn + i * D, m->host_rope_sin + (size_t)pos[i] * D, sizeof(real_t) * D);
    }
    be->ops->upload(be, m->pos, pos, sizeof(int32_t) * N);
    be->ops->upload(be, m->pos_cos, cs, sizeof(real_t) * N * D);
    be->ops->upload(be, m->pos_sin, sn, sizeof(real_t) * N * D);
    if (m->bf16) {
        be->ops->round_bf16(be, m->pos_cos, m->pos_cos, N * D);
        be->ops->round_bf16(be, m->pos_sin, m->pos_sin, N * D);
    }
    return 0;
}

static int prepare(qwen3_model *m, const int32_t *ids, const int32_t *targets, int B, int T, int *num_targets) {
    const size_t N = (size_t)B * T;
    if (check_ids(m, ids, targets, N) != 0) return -1;
    if (qwen3_alloc_activations(m, B, T) != 0) return -1;
    if (upload_positions(m, B, T) != 0) return -1;
    refresh_working_weights(m);
    int count = 0;
    if (targets)
        for (size_t i = 0; i < N; i++) count += targets[i] != -100;
    if (m->par && m->par->tp_size > 1) {
        // Vocabulary shard [v0, v0 + V): ids elsewhere become -1 (a zero
        // embedding row here; another rank contributes it); labels elsewhere
        // -1 (counted, but their logit lives on another rank).
        const int v0 = m->par->vocab_start, V = m->cfg.vocab_size;
        for (size_t i = 0; i < N; i++) m->host_ids[i] = ids[i] >= v0 && ids[i] < v0 + V ? ids[i] - v0 : -1;
        ids = m->host_ids;
        if (targets) {
            for (size_t i = 0; i < N; i++)
                m->host_targets[i] = targets[i] == -100 ? -100
                                     : targets[i] >= v0 && targets[i] < v0 + V ? targets[i] - v0 : -1;
            targets = m->host_targets;
        }
    }
    m->be->ops->upload(m->be, m->ids, ids, sizeof(int32_t) * N);
    if (targets) m->be->ops->upload(m->be, m->targets, targets, sizeof(int32_t) * N);
    if (num_targets) *num_targets = count;
    return 0;
}

int qwen3_forward(qwen3_model *m, const int32_t *ids, const int32_t *targets, int B, int T, double *loss_sum,
                  int *num_targets, float *logits_out) {
    if (logits_out && m->par && m->par->tp_size > 1) {
        pt_set_error("full logits are not gathered under tensor parallelism");
        return -1;
    }
    if (prepare(m, ids, targets, B, T, num_targets) != 0) return -1;
    pt_backend *be = m->be;
    const int N = B * T, C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    forward_trunk(m, B, T);
    gather_lm_head(m);
    if (logits_out) {
        real_t *lg = be->ops->alloc(be, sizeof(real_t) * (size_t)N * V);
        linear_forward(m, lg, m->lnf, m->lm_head, N, C, V);
        cast(m, lg, (size_t)N * V);  // HF's bf16 logits
        if (sizeof(real_t) == sizeof(float)) {
            be->ops->download(be, logits_out, lg, sizeof(float) * (size_t)N * V);
        } else {
            real_t *tmp = pt_malloc(sizeof(real_t) * (size_t)N * V);
            be->ops->download(be, tmp, lg, sizeof(real_t) * (size_t)N * V);
            for (size_t i = 0; i < (size_t)N * V; i++) logits_out[i] = (float)tmp[i];
            free(tmp);
        }
        be->ops->free(be, lg);
    }
    if (targets && loss_sum) lm_head_xent(m, loss_sum, NULL, NULL, N, 0.0f);
    return 0;
}

// The dense MLP's backward: res_out = res_mid + down(silu(gate) * up); m->d_ln = d(ln2) from m->d_res.
static void mlp_backward(qwen3_model *m, int l, int N) {
    pt_backend *be = m->be;
    const int C = m->cfg.hidden_size, I = m->cfg.intermediate_size;
    const qwen3_layer_acts *a = &m->acts[l];
    const qwen3_layer_params *p = &m->layers[l];
    const qwen3_layer_params *dp = &m->dlayers[l];
    be->ops->zero(be, m->d_act, sizeof(real_t) * (size_t)N * I);
    linear_backward(m, m->d_act, dp->down, m->d_res, a->act, p->down, N, I, C);
    cast(m, m->d_act, (size_t)N * I);
    be->ops->swiglu_backward(be, m->d_gate, m->d_up, m->d_act, a->gate, a->up, (size_t)N * I);
    cast(m, m->d_gate, (size_t)N * I);
    cast(m, m->d_up, (size_t)N * I);
    be->ops->zero(be, m->d_ln, sizeof(real_t) * (size_t)N * C);
    linear_backward(m, m->d_ln, dp->gate, m->d_gate, a->ln2, p->gate, N, C, I);
    linear_backward(m, m->d_ln, dp->up, m->d_up, a->ln2, p->up, N, C, I);
    tp_allreduce(m, m->d_ln, (size_t)N * C);  // gate/up are column-parallel: partial d(ln2)
    cast(m, m->d_ln, (size_t)N * C);
}

int qwen3_forward_backward(qwen3_model *m, const int32_t *ids, const int32_t *targets, int B, int T,
                           float loss_scale, double *loss_sum, int *num_targets) {
    if (!m->dembed) qwen3_alloc_grads(m);  // (a parallel runtime binds its own gradient views)
    if (prepare(m, ids, targets, B, T, num_targets) != 0) return -1;
    pt_backend *be = m->be;
    const qwen3_config *c = &m->cfg;
    const int N = B * T, C = c->hidden_size, H = c->num_attention_heads,
              KV = c->num_key_value_heads, D = c->head_dim;
    forward_trunk(m, B, T);
    // Fused lm_head + loss: d_ln = d(loss)/d(lnf), dlm_head accumulated.
    gather_lm_head(m);
    lm_head_xent(m, loss_sum, m->d_ln, m->dlm_head, N, loss_scale);
    tp_allreduce(m, m->d_ln, (size_t)N * C);  // vocabulary-parallel lm_head: partial d(lnf)
    cast(m, m->d_ln, (size_t)N * C);
    gather(m, c->num_hidden_layers + 1);
    be->ops->zero(be, m->d_res, sizeof(real_t) * (size_t)N * C);
    be->ops->rmsnorm_backward(be, m->d_res, m->dfinal_norm, m->d_ln, m->res_final, m->final_norm, m->lnf_rstd, N, C);
    cast(m, m->d_res, (size_t)N * C);
    grads_ready(m, c->num_hidden_layers + 1);
    // Under bf16 every activation gradient below is a bf16 tensor (cast after
    // each op, as autograd on a bf16 model); weight gradients stay fp32.
    for (int l = c->num_hidden_layers - 1; l >= 0; l--) {
        gather(m, l + 1);
        const int ac = qwen3_layer_ac_mode(m, l);
        if (ac == QWEN3_AC_FULL) layer_forward(m, l, B, T, NULL, 1);
        else if (ac == QWEN3_AC_OP) layer_recompute_cheap(m, l, B, T);
        const qwen3_layer_acts *a = &m->acts[l];
        const qwen3_layer_params *p = &m->layers[l];
        const qwen3_layer_params *dp = &m->dlayers[l];
        // d_res = d(res_out). MLP: res_out = res_mid + mlp(ln2), d_ln = d(ln2)
        if (m->moe && qwen3_layer_is_sparse(c, l)) qwen3_moe_backward(m, l, m->d_ln, m->d_res, a->ln2, N, 1.0f);
        else mlp_backward(m, l, N);
        be->ops->rmsnorm_backward(be, m->d_res, dp->post_norm, m->d_ln, a->res_mid, p->post_norm, a->ln2_rstd, N, C);
        cast(m, m->d_res, (size_t)N * C);
        // d_res = d(res_mid). Attention: res_mid = res_in + o(attn(...))
        be->ops->zero(be, m->d_att, sizeof(real_t) * (size_t)N * H * D);
        linear_backward(m, m->d_att, dp->o, m->d_res, a->att_out, p->o, N, H * D, C);
        cast(m, m->d_att, (size_t)N * H * D);
        be->ops->attention_backward(be, m->d_q, m->d_k, m->d_v, m->d_att, a->q, a->k, a->v, a->att_out, a->att_saved,
                               att_pos(m), B, T, H, KV, D);
        rope_bwd(m, m->d_q, B, T, H);
        rope_bwd(m, m->d_k, B, T, KV);
        cast(m, m->d_q, (size_t)N * H * D);
        cast(m, m->d_k, (size_t)N * KV * D);
        cast(m, m->d_v, (size_t)N * KV * D);
        be->ops->zero(be, m->d_qn, sizeof(real_t) * (size_t)N * H * D);
        be->ops->rmsnorm_backward(be, m->d_qn, dp->q_norm, m->d_q, a->q_raw, p->q_norm, a->q_rstd, N * H, D);
        cast(m, m->d_qn, (size_t)N * H * D);
        be->ops->zero(be, m->d_kn, sizeof(real_t) * (size_t)N * KV * D);
        be->ops->rmsnorm_backward(be, m->d_kn, dp->k_norm, m->d_k, a->k_raw, p->k_norm, a->k_rstd, N * KV, D);
        cast(m, m->d_kn, (size_t)N * KV * D);
        be->ops->zero(be, m->d_ln, sizeof(real_t) * (size_t)N * C);
        linear_backward(m, m->d_ln, dp->q, m->d_qn, a->ln1, p->q, N, C, H * D);
        linear_backward(m, m->d_ln, dp->k, m->d_kn, a->ln1, p->k, N, C, KV * D);
        linear_backward(m, m->d_ln, dp->v, m->d_v, a->ln1, p->v, N, C, KV * D);
        tp_allreduce(m, m->d_ln, (size_t)N * C);  // q/k/v are column-parallel: partial d(ln1)
        cast(m, m->d_ln, (size_t)N * C);
        be->ops->rmsnorm_backward(be, m->d_res, dp->input_norm, m->d_ln, a->res_in, p->input_norm, a->ln1_rstd, N, C);
        cast(m, m->d_res, (size_t)N * C);
        grads_ready(m, l + 1);
    }
    gather(m, 0);
    be->ops->embedding_backward(be, m->dembed, m->d_res, m->ids, N, C);
    grads_ready(m, 0);
    return 0;
}

void qwen3_init_weights(qwen3_model *m, uint64_t seed) {
    real_t *host = pt_malloc(sizeof(real_t) * m->num_params);
    memset(host, 0, sizeof(real_t) * m->num_params);
    const double std = m->cfg.initializer_range;
    for (int i = 0; i < m->num_tensors; i++) {
        const qwen3_param_info *t = &m->tensors[i];
        real_t *p = host + t->offset;
        if (t->ndim == 1) {
            for (size_t j = 0; j < t->numel; j++) p[j] = 1;
            continue;
        }
        const uint32_t stream = pt_stream_id(t->name);
#pragma omp parallel for
        for (size_t j = 0; j < t->numel; j++) p[j] = (real_t)(std * pt_philox_normal(seed, stream, j));
    }
    m->be->ops->upload(m->be, m->params, host, sizeof(real_t) * m->num_params);
    free(host);
    qwen3_params_changed(m);
}

double qwen3_train_flops_per_token(const qwen3_config *c, int T) {
    const double C = c->hidden_size, I = c->intermediate_size, QD = (double)c->num_attention_heads * c->head_dim,
                 KD = (double)c->num_key_value_heads * c->head_dim;
    double per_layer = C * QD * 2 + C * KD * 2 + 3 * C * I;
    double matmul_params = per_layer * c->num_hidden_layers + (double)c->vocab_size * C;
    // causal attention: QK^T and PV, forward 2 matmuls x 2 flops, x3 for training, halved by the mask
    double attn = 6.0 * c->num_hidden_layers * T * QD;
    return 6.0 * matmul_params + attn;
}
