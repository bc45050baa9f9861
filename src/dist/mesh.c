#include "dist/mesh.h"
#include "backend/backend.h"
#include "model/qwen3.h"
#include "util/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const DIM_NAME[3] = {"tp", "fsdp", "dp"};

int pt_mesh_resolve(int world, int tp, int fsdp, int dp, const char *order, pt_mesh *m) {
    memset(m, 0, sizeof *m);
    m->tp = tp > 0 ? tp : 1;
    m->fsdp = fsdp > 0 ? fsdp : 1;
    const long long tf = (long long)m->tp * m->fsdp;  // the flags allow products past INT_MAX
    if (dp > 0) m->dp = dp;
    else if (fsdp > 0 || tp > 0) m->dp = world % tf == 0 ? (int)(world / tf) : 1;
    else m->dp = world;  // plain data parallel
    if (fsdp <= 0 && dp > 0 && tp > 0 && world % ((long long)m->tp * m->dp) == 0)
        m->fsdp = (int)(world / ((long long)m->tp * m->dp));
    m->order[0] = PT_DIM_TP, m->order[1] = PT_DIM_FSDP, m->order[2] = PT_DIM_DP;
    m->ep = 1;
    return order ? pt_mesh_parse_order(order, m->order) : 0;
}

int pt_mesh_parse_order(const char *s, int order[3]) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", s);
    int n = 0, seen[3] = {0, 0, 0};
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int d = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(tok, DIM_NAME[i])) d = i;
        if (d < 0 || seen[d] || n >= 3) {
            pt_set_error("--mesh-order '%s': want a permutation of tp,fsdp,dp (innermost first)", s);
            return -1;
        }
        seen[d] = 1;
        order[n++] = d;
    }
    if (n != 3) {
        pt_set_error("--mesh-order '%s': want a permutation of tp,fsdp,dp (innermost first)", s);
        return -1;
    }
    return 0;
}

void pt_mesh_order_str(const pt_mesh *m, char *buf, size_t n) {
    snprintf(buf, n, "%s,%s,%s", DIM_NAME[m->order[0]], DIM_NAME[m->order[1]], DIM_NAME[m->order[2]]);
}

int pt_mesh_world(const pt_mesh *m) { return m->tp * m->fsdp * m->dp; }

static int dim_size(const pt_mesh *m, int d) { return d == PT_DIM_TP ? m->tp : d == PT_DIM_FSDP ? m->fsdp : m->dp; }

int pt_mesh_validate(const pt_mesh *m, int world, const qwen3_config *cfg) {
    if (m->tp < 1 || m->fsdp < 1 || m->dp < 1) {
        pt_set_error("--tp, --fsdp and --dp must be >= 1 (got %d, %d, %d)", m->tp, m->fsdp, m->dp);
        return -1;
    }
    const long long lw = (long long)m->tp * m->fsdp * m->dp;  // 64-bit: the flags allow products past INT_MAX
    if (lw != world) {
        pt_set_error("the layout tp %d x fsdp %d x dp %d = %lld ranks, but the job has %d (mpirun -np %lld, or change "
                     "--tp/--fsdp/--dp)", m->tp, m->fsdp, m->dp, lw, world, lw);
        return -1;
    }
    const int ep = PT_MAX(1, m->ep);
    if (ep > 1 && (m->fsdp * m->dp) % ep != 0) {
        pt_set_error("--ep %d: the %d data ranks (fsdp %d x dp %d) do not split into expert-parallel groups of %d "
                     "(ep is carved from fsdp x dp)", ep, m->fsdp * m->dp, m->fsdp, m->dp, ep);
        return -1;
    }
    if (!cfg) return 0;
    if (ep > 1 && !cfg->moe) {
        pt_set_error("--ep %d: expert parallelism needs a Qwen3-MoE model (model_type qwen3_moe)", ep);
        return -1;
    }
    if (ep > 1 && cfg->num_experts % ep != 0) {
        pt_set_error("--ep %d: num_experts %d is not divisible by it (each expert-parallel rank owns num_experts/ep "
                     "experts)", ep, cfg->num_experts);
        return -1;
    }
    if (cfg->num_key_value_heads % m->tp != 0) {
        pt_set_error("--tp %d: num_key_value_heads %d is not divisible by it (KV heads are split across tensor-parallel "
                     "ranks, never replicated; use a tp that divides %d)", m->tp, cfg->num_key_value_heads,
                     cfg->num_key_value_heads);
        return -1;
    }
    if (cfg->num_attention_heads % m->tp != 0) {
        pt_set_error("--tp %d: num_attention_heads %d is not divisible by it", m->tp, cfg->num_attention_heads);
        return -1;
    }
    if (cfg->intermediate_size % m->tp != 0) {
        pt_set_error("--tp %d: intermediate_size %d is not divisible by it", m->tp, cfg->intermediate_size);
        return -1;
    }
    if (cfg->moe && cfg->moe_intermediate_size % m->tp != 0) {
        pt_set_error("--tp %d: moe_intermediate_size %d is not divisible by it (each expert's MLP splits like the "
                     "dense one)", m->tp, cfg->moe_intermediate_size);
        return -1;
    }
    if (cfg->vocab_size < m->tp) {
        pt_set_error("--tp %d: vocab_size %d is smaller than it", m->tp, cfg->vocab_size);
        return -1;
    }
    return 0;
}

void pt_mesh_coords(const pt_mesh *m, int rank, int coord[3]) {
    for (int k = 0; k < 3; k++) {
        const int d = m->order[k], n = dim_size(m, d);
        coord[d] = rank % n;
        rank /= n;
    }
}

int pt_mesh_rank(const pt_mesh *m, const int coord[3]) {
    int r = 0;
    for (int k = 2; k >= 0; k--) r = r * dim_size(m, m->order[k]) + coord[m->order[k]];
    return r;
}

int pt_plan_local_config(const qwen3_config *g, int tp, int r, qwen3_config *local, int *vocab_start) {
    *local = *g;
    const int vchunk = (g->vocab_size + tp - 1) / tp;
    const int v0 = r * vchunk, v1 = PT_MIN(g->vocab_size, v0 + vchunk);
    if (v1 <= v0) {
        pt_set_error("--tp %d: vocab_size %d leaves tensor-parallel rank %d without vocabulary rows", tp, g->vocab_size,
                     r);
        return -1;
    }
    local->vocab_size = v1 - v0;
    local->num_attention_heads = g->num_attention_heads / tp;
    local->num_key_value_heads = g->num_key_value_heads / tp;
    local->intermediate_size = g->intermediate_size / tp;
    local->moe_intermediate_size = g->moe_intermediate_size / tp;
    *vocab_start = v0;
    return 0;
}

int pt_plan_build(pt_plan *p, const qwen3_config *g, int tp, int tp_rank, int fsdp, int fsdp_rank) {
    return pt_plan_build_ep(p, g, tp, tp_rank, fsdp, fsdp_rank, 1, 0);
}

int pt_plan_sharded(const pt_plan *p) { return p->fsdp > 1 || p->ep > 1; }

// Expert parallelism: an expert's tensors live whole on the EP rank that owns the expert, after every unit's
// shards (so a unit's gather and reduce-scatter never touch them); elsewhere they are an empty box.
static size_t place_expert_tensors(pt_plan *p, const qwen3_model *lm, size_t off) {
    p->expert_offset = off;
    const int per = p->global.num_experts / p->ep;
    for (int i = 0; i < p->nt; i++) {
        pt_plan_tensor *t = &p->t[i];
        if (!t->ep_expert) continue;
        const int owned = lm->tensors[i].expert / per == p->ep_rank;
        t->chunk = t->lshape[0];
        t->soff[0] = t->loff[0];
        t->soff[1] = t->loff[1];
        t->sshape[0] = owned ? t->lshape[0] : 0;
        t->sshape[1] = t->lshape[1];
        t->shard_count = owned ? (size_t)t->lshape[0] * (size_t)t->lshape[1] : 0;
        t->shard_offset = off;
        off += (t->shard_count + 15) & ~(size_t)15;
    }
    return off;
}

int pt_plan_build_ep(pt_plan *p, const qwen3_config *g, int tp, int tp_rank, int fsdp, int fsdp_rank, int ep,
                     int ep_rank) {
    memset(p, 0, sizeof *p);
    p->ep = PT_MAX(1, ep);
    p->ep_rank = ep_rank;
    p->global = *g;
    p->tp = tp;
    p->tp_rank = tp_rank;
    p->fsdp = fsdp;
    p->fsdp_rank = fsdp_rank;
    if (pt_plan_local_config(g, tp, tp_rank, &p->local, &p->vocab_start) != 0) return -1;
    pt_backend *be = pt_backend_cpu_ref_create();  // layout only: nothing is allocated on it
    qwen3_model lm;
    if (qwen3_create_layout(&lm, &p->local, be) != 0) {
        pt_backend_destroy(be);
        return -1;
    }
    p->nt = lm.num_tensors;
    p->local_numel = lm.num_params;
    p->t = pt_calloc(p->nt, sizeof(pt_plan_tensor));
    p->nunits = qwen3_num_units(&lm);
    p->unit_shard_off = pt_calloc(p->nunits, sizeof(size_t));
    p->unit_shard_cnt = pt_calloc(p->nunits, sizeof(size_t));
    p->unit_model_off = pt_calloc(p->nunits, sizeof(size_t));
    p->unit_model_cnt = pt_calloc(p->nunits, sizeof(size_t));
    const int D = g->head_dim, hl = p->local.num_attention_heads, kvl = p->local.num_key_value_heads,
              il = p->local.intermediate_size, eil = p->local.moe_intermediate_size;
    size_t off = 0;
    int cur_unit = -1;
    for (int i = 0; i < p->nt; i++) {
        const qwen3_param_info *lt = &lm.tensors[i];
        pt_plan_tensor *t = &p->t[i];
        snprintf(t->name, sizeof t->name, "%s", lt->name);
        t->ndim = lt->ndim;
        t->unit = qwen3_tensor_unit(&lm, lt);
        t->model_offset = lt->offset;
        t->decays = qwen3_tensor_decays(lt);
        t->lshape[0] = lt->shape[0];
        t->lshape[1] = lt->ndim == 2 ? lt->shape[1] : 1;
        t->gshape[0] = t->lshape[0];
        t->gshape[1] = t->lshape[1];
        // where the TP-local tensor sits in the global one
        int row_split = 0, col_split = 0;
        int64_t per = 0;
        if (lt->layer < 0) {
            if (lt->ndim == 2) {  // embed_tokens / lm_head: vocabulary rows
                t->gshape[0] = g->vocab_size;
                t->loff[0] = p->vocab_start;
            } else {
                t->tp_replicated = 1;
            }
        } else {
            switch (lt->kind) {
            case P_Q: row_split = 1; per = (int64_t)hl * D; break;
            case P_K: case P_V: row_split = 1; per = (int64_t)kvl * D; break;
            case P_GATE: case P_UP: row_split = 1; per = il; break;
            case P_O: col_split = 1; per = (int64_t)hl * D; break;
            case P_DOWN: col_split = 1; per = il; break;
            case P_EXPERT_GATE: case P_EXPERT_UP: row_split = 1; per = eil; break;
            case P_EXPERT_DOWN: col_split = 1; per = eil; break;
            case P_ROUTER: t->tp_replicated = 1; break;
            case P_Q_NORM: case P_K_NORM: t->tp_replicated = 1; t->tp_partial_grad = tp > 1; break;
            default: t->tp_replicated = 1;
            }
        }
        if (row_split) {
            t->gshape[0] = per * tp;
            t->loff[0] = per * tp_rank;
        }
        if (col_split) {
            t->gshape[1] = per * tp;
            t->loff[1] = per * tp_rank;
        }
        t->ep_expert = p->ep > 1 && lt->layer >= 0 && lt->kind >= P_EXPERT_GATE;
        if (t->ep_expert) continue;  // placed after the units (place_expert_tensors)
        t->chunk = (t->lshape[0] + fsdp - 1) / fsdp;
        const int64_t r0 = PT_MIN(t->lshape[0], t->chunk * fsdp_rank), r1 = PT_MIN(t->lshape[0], r0 + t->chunk);
        t->soff[0] = t->loff[0] + r0;
        t->soff[1] = t->loff[1];
        t->sshape[0] = r1 - r0;
        t->sshape[1] = t->lshape[1];
        t->shard_count = (size_t)t->chunk * (size_t)t->lshape[1];
        if (t->unit != cur_unit) {
            cur_unit = t->unit;
            p->unit_shard_off[cur_unit] = off;
        }
        t->shard_offset = off;
        off += (t->shard_count + 15) & ~(size_t)15;  // 16-float aligned, as the model's layout
        p->unit_shard_cnt[cur_unit] = off - p->unit_shard_off[cur_unit];
    }
    // With fsdp 1 (and no EP) the shard layout is the local model's layout itself, so the
    // model's own buffers serve as the shards.
    if (p->ep > 1) off = place_expert_tensors(p, &lm, off);
    p->shard_numel = off;
    for (int u = 0; u < p->nunits; u++) qwen3_unit_range(&lm, u, &p->unit_model_off[u], &p->unit_model_cnt[u]);
    qwen3_free(&lm);
    pt_backend_destroy(be);
    return 0;
}

void pt_plan_free(pt_plan *p) {
    free(p->t);
    free(p->unit_shard_off);
    free(p->unit_shard_cnt);
    free(p->unit_model_off);
    free(p->unit_model_cnt);
    memset(p, 0, sizeof *p);
}

// The EP token all-to-all of one micro-batch (see pt_step_bytes): the exact part and the bytes per row received.
static void ep_alltoall_bytes(const pt_plan *p, const pt_mesh *mesh, long N, int accum, pt_step_bytes *out) {
    const qwen3_config *g = &p->global;
    int sparse = 0;
    for (int l = 0; l < g->num_hidden_layers; l++) sparse += qwen3_layer_is_sparse(g, l);
    const double f4 = sizeof(float), K = g->num_experts_per_tok, El = g->num_experts / mesh->ep;
    const double row = g->hidden_size * f4, R = (double)N * K, per = (double)accum * sparse;
    out->ep_alltoall_min = per * (g->num_experts * sizeof(int32_t) + 2 * R * row);  // counts, rows out (fwd, bwd)
    out->ep_alltoall = out->ep_alltoall_min + per * 2 * R * row;                       // N x K rows back, twice
    out->ep_alltoall_max = out->ep_alltoall_min + per * 2 * mesh->ep * (double)N * PT_MIN(K, El) * row;
}

void pt_plan_step_bytes(const pt_plan *p, const pt_mesh *mesh, long N, int accum, int recomputed_layers,
                        pt_step_bytes *out) {
    memset(out, 0, sizeof *out);
    const int L = p->global.num_hidden_layers, C = p->global.hidden_size, sharded = pt_plan_sharded(p);
    const double f4 = sizeof(float);
    if (mesh->tp > 1) {
        // per micro-batch: embedding + 2 per layer forward; lm_head + 2 per layer backward (a sparse layer's
        // expert output and its d(x) are TP-summed like the dense MLP's)
        out->tp_allreduce = accum * 2.0 * (1 + 2 * L) * (double)N * C * f4;
        // activation checkpointing: a recomputed (FULL) layer repeats its attention block in backward,
        // o_proj's all-reduce included (the MLP's output is not recomputed)
        out->tp_allreduce += accum * (double)recomputed_layers * N * C * f4;
        // q_norm/k_norm gradients: once per micro-batch per layer (sharded) or once per step
        double qk = 0;
        for (int i = 0; i < p->nt; i++)
            if (p->t[i].tp_partial_grad) qk += (double)p->t[i].lshape[0] * p->t[i].lshape[1];
        out->tp_allreduce += (sharded ? accum : 1) * qk * f4;
        // vocabulary-parallel cross-entropy: 3 doubles per row per rank, forward
        out->tp_allgather = accum * (double)mesh->tp * N * 3 * sizeof(double);
    }
    if (sharded) {  // under EP with fsdp 1 the units are gathered over a group of one (counted all the same)
        const double F = mesh->fsdp;
        // the units' shards (never the EP-owned experts, stored after them); layers differ in a Qwen3-MoE
        // model (dense and sparse ones)
        double layers = 0;
        for (int u = 1; u <= L; u++) layers += p->unit_shard_cnt[u];
        const double emb = p->unit_shard_cnt[0], head = p->unit_shard_cnt[L + 1], first = p->unit_shard_cnt[1],
                     last = p->unit_shard_cnt[L];
        // Each slot keeps its unit until another replaces it (or the update
        // invalidates it): step 1st micro-batch: embed, layers 1..L, head forward,
        // layers L-1..1 backward; later micro-batches: layers 2..L forward, L-1..1 backward.
        double gathered = emb + head + layers + (layers - last) + (accum - 1) * (2 * layers - first - last);
        out->fsdp_allgather = F * gathered * f4;
        out->fsdp_reduce_scatter = accum * F * (emb + head + layers) * f4;
    }
    // the experts' gradients are summed over the data ranks owning the same experts, the rest over dp
    const size_t shared = p->ep > 1 ? p->expert_offset : p->shard_numel;
    if (mesh->dp > 1) out->dp_allreduce = (double)shared * f4;
    if (p->ep > 1 && mesh->fsdp * mesh->dp / p->ep > 1) out->ep_allreduce = (double)(p->shard_numel - shared) * f4;
    if (p->ep > 1) ep_alltoall_bytes(p, mesh, N, accum, out);
}

int pt_plan_unit_direct(const pt_plan *p, int unit) {
    int n = 0, last = -1;
    for (int i = 0; i < p->nt; i++)
        if (p->t[i].unit == unit) n++, last = i;
    return n == 1 && p->t[last].shard_count % 16 == 0;
}

void pt_plan_slots(const pt_plan *p, size_t slots[3], size_t *staging, size_t *recv) {
    slots[0] = slots[1] = slots[2] = 0;
    *staging = *recv = 0;
    if (!pt_plan_sharded(p)) return;
    const int L = p->global.num_hidden_layers;
    for (int u = 0; u < p->nunits; u++) {
        const int s = u == 0 ? 0 : u <= L ? 1 : 2;
        size_t need = p->unit_model_cnt[u];
        if (pt_plan_unit_direct(p, u)) need = PT_MAX(need, (size_t)p->fsdp * p->unit_shard_cnt[u]);
        else *staging = PT_MAX(*staging, (size_t)p->fsdp * p->unit_shard_cnt[u]);
        slots[s] = PT_MAX(slots[s], need);
        *recv = PT_MAX(*recv, p->unit_shard_cnt[u]);
    }
}
