#include "dist/parallel.h"
#include "dist/devcomm.h"
#include "io/hf_model.h"
#include "util/common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SLOT_EMBED, SLOT_LAYER, SLOT_HEAD, SLOTS };
#define XENT_ROWS 32

struct pt_parallel {
    pt_mesh mesh;
    int world, rank, coord[3];
    pt_comm *world_c, *tp_c, *fsdp_c, *dp_c, *data_c;
    // expert parallelism (mesh.ep > 1): this rank's EP group, and the data ranks that own the same experts
    // (their gradients are summed there instead of over dp)
    pt_comm *ep_c, *rep_c;
    int ep_rank;
    bool sharded;           // the model holds no parameters; units are gathered (pt_plan_sharded)
    // NCCL twins of tp_c, fsdp_c, dp_c (NULL: that group's collectives go through the host)
    pt_devcomm *tp_d, *fsdp_d, *dp_d;
    pt_backend *be;
    pt_plan plan;
    qwen3_model m;          // TP-local; layout only when fsdp > 1
    qwen3_parallel hooks;
    real_t *p, *g, *mo, *vo;  // shards [plan.shard_numel] (p, g = the model's buffers when fsdp 1)
    // fsdp > 1: working slots, the unit each holds (-1 none), gather staging
    real_t *slot_p[SLOTS], *slot_g[SLOTS];
    size_t slot_n[SLOTS];
    int resident[SLOTS];
    real_t *staging, *recv;
    // host staging for backends whose memory is not host memory
    float *host_a, *host_b;
    size_t host_n;
    // start-up (pt_parallel_load_tensor): host copy of the shards (device backends), the next tensor expected
    float *load_stage;
    int load_next;
    // vocabulary-parallel cross-entropy scratch
    real_t *xent_lg;
    float *xent_host;
    int32_t *xent_tg;
    double *xent_stats, *xent_all, *xent_lse;
    int xent_n;
};

qwen3_model *pt_parallel_model(pt_parallel *P) { return &P->m; }
const pt_mesh *pt_parallel_mesh(const pt_parallel *P) { return &P->mesh; }
int pt_parallel_rank(const pt_parallel *P) { return P->rank; }
int pt_parallel_world(const pt_parallel *P) { return P->world; }
pt_comm *pt_parallel_world_comm(pt_parallel *P) { return P->world_c; }
int pt_parallel_data_rank(const pt_parallel *P) { return P->coord[PT_DIM_DP] * P->mesh.fsdp + P->coord[PT_DIM_FSDP]; }
int pt_parallel_data_world(const pt_parallel *P) { return P->mesh.dp * P->mesh.fsdp; }
const pt_plan *pt_parallel_plan(const pt_parallel *P) { return &P->plan; }
pt_comm *pt_parallel_data_comm(pt_parallel *P) { return P->data_c; }

double pt_parallel_data_sum(pt_parallel *P, double local) {
    double out;
    pt_comm_sum_f64(P->data_c, &local, &out, 1);
    return out;
}

size_t pt_parallel_state_bytes(const pt_parallel *P) {
    size_t slots[3], stage, recv;
    pt_plan_slots(&P->plan, slots, &stage, &recv);
    return sizeof(real_t) * (P->plan.shard_numel * 4 + (slots[0] + slots[1] + slots[2]) * 2 + stage + recv);
}

// ---------------------------------------------------------------- host staging

static float *host_buf(pt_parallel *P, int which, size_t n) {
    if (n > P->host_n) {
        free(P->host_a);
        free(P->host_b);
        P->host_a = pt_malloc(sizeof(float) * n);
        P->host_b = pt_malloc(sizeof(float) * n);
        P->host_n = n;
    }
    return which ? P->host_b : P->host_a;
}

// The device communicator of group c, when it has one.
static pt_devcomm *devcomm_of(const pt_parallel *P, const pt_comm *c) {
    return c == P->tp_c ? P->tp_d : c == P->fsdp_c ? P->fsdp_d : c == P->dp_c ? P->dp_d : NULL;
}

static void dev_allreduce(pt_parallel *P, pt_comm *c, real_t *x, size_t n) {
    if (P->be->host_memory) {
        pt_comm_allreduce(c, x, n, PT_COLL_ALLREDUCE);
        return;
    }
    pt_devcomm *d = devcomm_of(P, c);
    if (d) {
        pt_devcomm_allreduce(d, x, n, PT_COLL_ALLREDUCE);
        return;
    }
    float *h = host_buf(P, 0, n);
    P->be->ops->download(P->be, h, x, n * sizeof(float));
    pt_comm_allreduce(c, h, n, PT_COLL_ALLREDUCE);
    P->be->ops->upload(P->be, x, h, n * sizeof(float));
}

// All-gather (send n, receive W x n) or reduce-scatter (send W x n, receive n)
// of backend memory, through host copies when the backend's memory is not host memory.
static void dev_gather_scatter(pt_parallel *P, pt_comm *c, int gather, const real_t *send, real_t *recv, size_t n) {
    void (*op)(pt_comm *, const float *, float *, size_t) = gather ? pt_comm_allgather : pt_comm_reduce_scatter;
    if (P->be->host_memory) {
        op(c, send, recv, n);
        return;
    }
    pt_devcomm *d = devcomm_of(P, c);
    if (d) {
        if (gather) pt_devcomm_allgather(d, send, recv, n);
        else pt_devcomm_reduce_scatter(d, send, recv, n);
        return;
    }
    const size_t W = (size_t)pt_comm_size(c), ns = gather ? n : n * W, nr = gather ? n * W : n;
    float *hs = host_buf(P, 0, n * W), *hr = host_buf(P, 1, n * W);
    P->be->ops->download(P->be, hs, send, ns * sizeof(float));
    op(c, hs, hr, n);
    P->be->ops->upload(P->be, recv, hr, nr * sizeof(float));
}
#define dev_allgather(P, c, send, recv, n) dev_gather_scatter(P, c, 1, send, recv, n)
#define dev_reduce_scatter(P, c, send, recv, n) dev_gather_scatter(P, c, 0, send, recv, n)

// ---------------------------------------------------------------- FSDP units

static int slot_of(const pt_parallel *P, int unit) {
    return unit == 0 ? SLOT_EMBED : unit <= P->plan.global.num_hidden_layers ? SLOT_LAYER : SLOT_HEAD;
}

static int unit_direct(const pt_parallel *P, int unit) { return pt_plan_unit_direct(&P->plan, unit); }

// Moves a unit's tensors between a slot (model layout) and P->staging (FSDP rank f's rows of every tensor
// at f * unit size, shard layout): into the staging buffer for a reduce-scatter, out of it after an
// all-gather.
static void restage(pt_parallel *P, int unit, real_t *slot, bool to_staging) {
    pt_backend *be = P->be;
    const pt_plan *pl = &P->plan;
    const size_t uo = pl->unit_shard_off[unit], un = pl->unit_shard_cnt[unit], mo = pl->unit_model_off[unit];
    for (int i = 0; i < pl->nt; i++) {
        const pt_plan_tensor *t = &pl->t[i];
        if (t->unit != unit || t->ep_expert) continue;
        for (int f = 0; f < P->mesh.fsdp; f++) {
            const int64_t r0 = PT_MIN(t->lshape[0], t->chunk * f), r1 = PT_MIN(t->lshape[0], r0 + t->chunk);
            if (r1 <= r0) continue;
            real_t *rows = slot + (t->model_offset - mo) + (size_t)r0 * t->lshape[1];
            real_t *shard = P->staging + (size_t)f * un + (t->shard_offset - uo);
            const size_t bytes = sizeof(real_t) * (size_t)(r1 - r0) * t->lshape[1];
            if (to_staging) be->ops->copy(be, shard, rows, bytes);
            else be->ops->copy(be, rows, shard, bytes);
        }
    }
}

// Binds unit u's views to a slot; under EP its experts' tensors point at this rank's own shards (the experts
// of other EP ranks at nothing: this rank never runs them).
static void bind_unit(pt_parallel *P, int unit, real_t *slot_p, real_t *slot_g) {
    qwen3_bind_unit(&P->m, unit, slot_p, slot_g);
    for (int i = 0; i < P->plan.nt; i++) {
        const pt_plan_tensor *t = &P->plan.t[i];
        if (t->unit != unit || !t->ep_expert) continue;
        P->m.tparams[i] = t->sshape[0] ? P->p + t->shard_offset : NULL;
        P->m.tgrads[i] = t->sshape[0] ? P->g + t->shard_offset : NULL;
    }
}

static void hook_gather(void *ctx, qwen3_model *m, int unit) {
    pt_parallel *P = ctx;
    const int s = slot_of(P, unit);
    if (P->resident[s] == unit) return;
    const size_t uo = P->plan.unit_shard_off[unit], un = P->plan.unit_shard_cnt[unit];
    if (unit_direct(P, unit)) {
        dev_allgather(P, P->fsdp_c, P->p + uo, P->slot_p[s], un);
    } else {
        dev_allgather(P, P->fsdp_c, P->p + uo, P->staging, un);
        restage(P, unit, P->slot_p[s], false);
    }
    bind_unit(P, unit, P->slot_p[s], P->slot_g[s]);
    P->resident[s] = unit;
}

static void hook_grads_ready(void *ctx, qwen3_model *m, int unit) {
    pt_parallel *P = ctx;
    const int s = slot_of(P, unit);
    pt_backend *be = P->be;
    const pt_plan *pl = &P->plan;
    const size_t uo = pl->unit_shard_off[unit], un = pl->unit_shard_cnt[unit], mo = pl->unit_model_off[unit];
    const int F = P->mesh.fsdp;
    for (int i = 0; i < pl->nt; i++) {  // q_norm/k_norm: each TP rank saw only its heads
        const pt_plan_tensor *t = &pl->t[i];
        if (t->unit == unit && t->tp_partial_grad)
            dev_allreduce(P, P->tp_c, P->slot_g[s] + (t->model_offset - mo), (size_t)t->lshape[0] * t->lshape[1]);
    }
    if (unit_direct(P, unit)) {
        dev_reduce_scatter(P, P->fsdp_c, P->slot_g[s], P->recv, un);
    } else {
        be->ops->zero(be, P->staging, sizeof(real_t) * F * un);
        restage(P, unit, P->slot_g[s], true);
        dev_reduce_scatter(P, P->fsdp_c, P->staging, P->recv, un);
    }
    be->ops->add(be, P->g + uo, P->g + uo, P->recv, un);
    be->ops->zero(be, P->slot_g[s], sizeof(real_t) * P->slot_n[s]);
}

// ---------------------------------------------------------------- tensor parallel

static void hook_tp_allreduce(void *ctx, real_t *x, size_t n) {
    pt_parallel *P = ctx;
    dev_allreduce(P, P->tp_c, x, n);
}

// Rank-ordered double sums (pt_comm_sum_f64: the same bits on every rank) of the MoE block's small vectors.
static void sum_f64_inplace(pt_comm *c, double *x, int n) {
    double *out = pt_malloc(sizeof(double) * (size_t)n);
    pt_comm_sum_f64(c, x, out, n);
    memcpy(x, out, sizeof(double) * (size_t)n);
    free(out);
}
static void hook_moe_data_sum(void *ctx, double *x, int n) { sum_f64_inplace(((pt_parallel *)ctx)->data_c, x, n); }
static void hook_tp_sum_f64(void *ctx, double *x, int n) { sum_f64_inplace(((pt_parallel *)ctx)->tp_c, x, n); }
static void hook_ep_alltoallv(void *ctx, const void *send, const size_t *send_bytes, void *recv,
                              const size_t *recv_bytes) {
    pt_comm_alltoallv(((pt_parallel *)ctx)->ep_c, send, send_bytes, recv, recv_bytes);
}

// The TP cross-entropy's buffers, sized for P->xent_n rows.
static void free_xent(pt_parallel *P) {
    if (P->xent_lg) P->be->ops->free(P->be, P->xent_lg);
    free(P->xent_host);
    free(P->xent_tg);
    free(P->xent_stats);
    free(P->xent_all);
    free(P->xent_lse);
}

// Vocabulary-parallel lm_head + cross-entropy. Each rank has the logits of
// its vocabulary rows only; per row it shares (max, sum exp(l - max), target
// logit) with the TP group, and every rank combines them in rank order into
// the same logsumexp. The backward pass recomputes the local logits chunk by
// chunk, so nothing larger than XENT_ROWS x V_local is ever held.
static void hook_tp_xent(void *ctx, double *loss_sum, real_t *dinp, real_t *dw, const real_t *inp,
                         const real_t *w, const int32_t *targets, int N, int C, int V, float scale) {
    pt_parallel *P = ctx;
    pt_backend *be = P->be;
    const int T = P->mesh.tp;
    if (N > P->xent_n) {
        free_xent(P);
        P->xent_lg = be->ops->alloc(be, sizeof(real_t) * (size_t)XENT_ROWS * V);
        P->xent_host = be->host_memory ? NULL : pt_malloc(sizeof(float) * (size_t)XENT_ROWS * V);
        P->xent_tg = pt_malloc(sizeof(int32_t) * N);
        P->xent_stats = pt_malloc(sizeof(double) * 3 * N);
        P->xent_all = pt_malloc(sizeof(double) * 3 * (size_t)N * T);
        P->xent_lse = pt_malloc(sizeof(double) * N);
        P->xent_n = N;
    }
    int32_t *tg = P->xent_tg;
    be->ops->download(be, tg, targets, sizeof(int32_t) * N);
    double *st = P->xent_stats;
    for (int n0 = 0; n0 < N; n0 += XENT_ROWS) {
        const int rc = PT_MIN(XENT_ROWS, N - n0);
        be->ops->matmul_forward(be, P->xent_lg, inp + (size_t)n0 * C, w, rc, C, V);
        const float *lg = P->xent_lg;
        if (!be->host_memory) {
            be->ops->download(be, P->xent_host, P->xent_lg, sizeof(float) * (size_t)rc * V);
            lg = P->xent_host;
        }
        for (int r = 0; r < rc; r++) {
            const int n = n0 + r, t = tg[n];
            const float *l = lg + (size_t)r * V;
            double *sn = st + 3 * (size_t)n;
            if (t == -100) {
                sn[0] = 0, sn[1] = 0, sn[2] = 0;
                continue;
            }
            float mx = -INFINITY;
            for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
            double se = 0;
            for (int v = 0; v < V; v++) se += exp((double)(l[v] - mx));
            sn[0] = mx, sn[1] = se, sn[2] = t >= 0 ? (double)l[t] : 0.0;
        }
    }
    pt_comm_allgather_f64(P->tp_c, st, P->xent_all, 3 * N, PT_COLL_ALLGATHER);
    double total = 0;
    for (int n = 0; n < N; n++) {
        if (tg[n] == -100) {
            P->xent_lse[n] = 0;
            continue;
        }
        double M = -INFINITY, S = 0, tl = 0;
        for (int r = 0; r < T; r++) M = PT_MAX(M, P->xent_all[((size_t)r * N + n) * 3]);
        for (int r = 0; r < T; r++) {
            const double *a = P->xent_all + ((size_t)r * N + n) * 3;
            S += a[1] * exp(a[0] - M);
            tl += a[2];
        }
        const double lse = M + log(S);
        P->xent_lse[n] = lse;
        total += lse - tl;
    }
    *loss_sum = total;
    if (!dinp) return;
    for (int n0 = 0; n0 < N; n0 += XENT_ROWS) {
        const int rc = PT_MIN(XENT_ROWS, N - n0);
        be->ops->matmul_forward(be, P->xent_lg, inp + (size_t)n0 * C, w, rc, C, V);
        float *lg = P->xent_lg;
        if (!be->host_memory) {
            be->ops->download(be, P->xent_host, P->xent_lg, sizeof(float) * (size_t)rc * V);
            lg = P->xent_host;
        }
        for (int r = 0; r < rc; r++) {
            const int n = n0 + r, t = tg[n];
            float *l = lg + (size_t)r * V;
            if (t == -100) {
                memset(l, 0, sizeof(float) * V);
                continue;
            }
            const double lse = P->xent_lse[n];
            for (int v = 0; v < V; v++) l[v] = (float)exp((double)l[v] - lse) * scale;
            if (t >= 0) l[t] -= scale;
        }
        if (!be->host_memory) be->ops->upload(be, P->xent_lg, P->xent_host, sizeof(float) * (size_t)rc * V);
        be->ops->zero(be, dinp + (size_t)n0 * C, sizeof(real_t) * (size_t)rc * C);
        be->ops->matmul_backward(be, dinp + (size_t)n0 * C, dw, P->xent_lg, inp + (size_t)n0 * C, w, rc, C, V);
    }
}

// ---------------------------------------------------------------- create

pt_parallel *pt_parallel_create(pt_comm *world, const pt_mesh *mesh, const qwen3_config *global, pt_backend *be) {
    if (pt_mesh_validate(mesh, pt_comm_size(world), global) != 0) return NULL;
    pt_parallel *P = pt_calloc(1, sizeof *P);
    P->mesh = *mesh;
    P->world_c = world;
    P->world = pt_comm_size(world);
    P->rank = pt_comm_rank(world);
    P->be = be;
    pt_mesh_coords(mesh, P->rank, P->coord);
    const int tpi = P->coord[PT_DIM_TP], fi = P->coord[PT_DIM_FSDP], di = P->coord[PT_DIM_DP];
    const int F = mesh->fsdp, T = mesh->tp;
    P->tp_c = pt_comm_split(world, fi + F * di, tpi);
    P->fsdp_c = pt_comm_split(world, tpi + T * di, fi);
    P->dp_c = pt_comm_split(world, tpi + T * fi, di);
    P->data_c = pt_comm_split(world, tpi, di * F + fi);
    const int EP = PT_MAX(1, mesh->ep), d = di * F + fi;
    P->ep_rank = d % EP;
    P->ep_c = pt_comm_split(world, tpi + T * (d / EP), P->ep_rank);
    P->rep_c = pt_comm_split(world, tpi + T * P->ep_rank, d / EP);
    // Every rank creates the device communicators in the same order (each call is collective over its group).
    P->tp_d = pt_devcomm_create(P->tp_c, be);
    P->fsdp_d = pt_devcomm_create(P->fsdp_c, be);
    P->dp_d = pt_devcomm_create(P->dp_c, be);
    if (P->rank == 0 && (P->tp_d || P->fsdp_d || P->dp_d))
        pt_info("device collectives: %s for%s%s%s (the other groups, if any, through the host)", pt_devcomm_version(),
                P->tp_d ? " tp" : "", P->fsdp_d ? " fsdp" : "", P->dp_d ? " dp" : "");
    if (pt_plan_build_ep(&P->plan, global, T, tpi, F, fi, EP, P->ep_rank) != 0) {
        pt_parallel_free(P);
        return NULL;
    }
    const pt_plan *pl = &P->plan;
    P->hooks = (qwen3_parallel){.tp_size = T, .tp_rank = tpi, .vocab_start = pl->vocab_start,
                                .vocab_global = global->vocab_size, .ctx = P, .tp_allreduce = hook_tp_allreduce,
                                .tp_lm_head_xent = hook_tp_xent, .moe_data_sum = hook_moe_data_sum,
                                .tp_sum_f64 = hook_tp_sum_f64, .ep_size = EP, .ep_rank = P->ep_rank,
                                .ep_alltoallv = hook_ep_alltoallv};
    for (int s = 0; s < SLOTS; s++) P->resident[s] = -1;
    P->sharded = pt_plan_sharded(pl);
    if (!P->sharded) {
        if (qwen3_create(&P->m, &pl->local, be) != 0) {
            pt_parallel_free(P);
            return NULL;
        }
        qwen3_alloc_grads(&P->m);
        P->p = P->m.params;
        P->g = P->m.grads;
    } else {
        if (qwen3_create_layout(&P->m, &pl->local, be) != 0) {
            pt_parallel_free(P);
            return NULL;
        }
        P->hooks.gather = hook_gather;
        P->hooks.grads_ready = hook_grads_ready;
        P->p = be->ops->alloc(be, sizeof(real_t) * pl->shard_numel);
        P->g = be->ops->alloc(be, sizeof(real_t) * pl->shard_numel);
        size_t stage = 0, recv = 0;
        pt_plan_slots(pl, P->slot_n, &stage, &recv);
        for (int s = 0; s < SLOTS; s++)
            if (P->slot_n[s]) {
                P->slot_p[s] = be->ops->alloc(be, sizeof(real_t) * P->slot_n[s]);
                P->slot_g[s] = be->ops->alloc(be, sizeof(real_t) * P->slot_n[s]);
            }
        P->staging = be->ops->alloc(be, sizeof(real_t) * PT_MAX(stage, 16));
        P->recv = be->ops->alloc(be, sizeof(real_t) * PT_MAX(recv, 16));
        // Views start on the slots; every gather rebinds its unit.
        for (int u = 0; u < pl->nunits; u++) {
            const int s = slot_of(P, u);
            bind_unit(P, u, P->slot_p[s], P->slot_g[s]);
        }
    }
    P->mo = be->ops->alloc(be, sizeof(real_t) * pl->shard_numel);
    P->vo = be->ops->alloc(be, sizeof(real_t) * pl->shard_numel);
    P->m.par = &P->hooks;
    return P;
}

void pt_parallel_free(pt_parallel *P) {
    if (!P) return;
    pt_backend *be = P->be;
    if (P->sharded) {
        if (P->p) be->ops->free(be, P->p);
        if (P->g) be->ops->free(be, P->g);
        for (int s = 0; s < SLOTS; s++) {
            if (P->slot_p[s]) be->ops->free(be, P->slot_p[s]);
            if (P->slot_g[s]) be->ops->free(be, P->slot_g[s]);
        }
        if (P->staging) be->ops->free(be, P->staging);
        if (P->recv) be->ops->free(be, P->recv);
    }
    if (P->mo) be->ops->free(be, P->mo);
    if (P->vo) be->ops->free(be, P->vo);
    free_xent(P);
    free(P->host_a);
    free(P->host_b);
    free(P->load_stage);
    qwen3_free(&P->m);
    pt_plan_free(&P->plan);
    pt_devcomm_free(P->tp_d);
    pt_devcomm_free(P->fsdp_d);
    pt_devcomm_free(P->dp_d);
    pt_comm_free(P->tp_c);
    pt_comm_free(P->fsdp_c);
    pt_comm_free(P->dp_c);
    pt_comm_free(P->data_c);
    pt_comm_free(P->ep_c);
    pt_comm_free(P->rep_c);
    free(P);
}

// ---------------------------------------------------------------- weights in

// out[box] = the box's part of global rows [row0, row0 + nrows) (row-major, host): the rows both hold
static void box_from_rows(const float *rows, int64_t row0, int64_t nrows, const pt_plan_tensor *t, float *out) {
    const int64_t gc = t->gshape[1];
    const int64_t r0 = PT_MAX(row0, t->soff[0]), r1 = PT_MIN(row0 + nrows, t->soff[0] + t->sshape[0]);
    for (int64_t r = r0; r < r1; r++)
        memcpy(out + (size_t)(r - t->soff[0]) * t->sshape[1], rows + (size_t)(r - row0) * gc + t->soff[1],
               sizeof(float) * (size_t)t->sshape[1]);
}

// The plan's tensor called name, or NULL. The search starts at index `from`: callers that walk the tensors in
// the layout's order pass where the last one was found, so that a model's load or save stays linear.
static const pt_plan_tensor *plan_tensor(const pt_plan *plan, const char *name, int from) {
    for (int k = 0; k < plan->nt; k++) {
        const int i = ((from + k) % plan->nt + plan->nt) % plan->nt;
        if (!strcmp(plan->t[i].name, name)) return &plan->t[i];
    }
    return NULL;
}

int pt_parallel_load_tensor(pt_parallel *P, const char *name, int64_t row0, int64_t nrows, const float *rows) {
    // tensors come in the layout's order, a block of rows at a time: the one of the last block first, then
    // the ones after it
    const pt_plan_tensor *t = plan_tensor(&P->plan, name, P->load_next - 1);
    if (!t) {
        pt_set_error("tensor \"%s\" is not a parameter of this model", name);
        return -1;
    }
    P->load_next = (int)(t - P->plan.t) + 1;
    // Host backends: straight into the shards (zero-filled, padding included); others: a host copy of the
    // shards, uploaded by pt_parallel_load_done.
    float *shard = P->p;
    if (!P->be->host_memory) {
        if (!P->load_stage) P->load_stage = pt_calloc(P->plan.shard_numel, sizeof(float));
        shard = P->load_stage;
    }
    box_from_rows(rows, row0, nrows, t, shard + t->shard_offset);
    return 0;
}

void pt_parallel_load_done(pt_parallel *P) {
    if (P->load_stage) {
        P->be->ops->upload(P->be, P->p, P->load_stage, sizeof(float) * P->plan.shard_numel);
        free(P->load_stage);
        P->load_stage = NULL;
    }
    P->load_next = 0;
    for (int s = 0; s < SLOTS; s++) P->resident[s] = -1;
}

// ---------------------------------------------------------------- the step

void pt_parallel_zero_grads(pt_parallel *P) { P->be->ops->zero(P->be, P->g, sizeof(real_t) * P->plan.shard_numel); }

void pt_parallel_finish_grads(pt_parallel *P) {
    if (!P->sharded && P->mesh.tp > 1)
        for (int i = 0; i < P->plan.nt; i++) {
            const pt_plan_tensor *t = &P->plan.t[i];
            if (t->tp_partial_grad)
                dev_allreduce(P, P->tp_c, P->g + t->shard_offset, (size_t)t->lshape[0] * t->lshape[1]);
        }
    // Under EP the experts' tensors (after every unit's shards) are summed over the data ranks that own the
    // same experts; the rest over dp as usual.
    const size_t shared = P->plan.ep > 1 ? P->plan.expert_offset : P->plan.shard_numel;
    if (P->mesh.dp > 1) dev_allreduce(P, P->dp_c, P->g, shared);
    if (P->plan.ep > 1 && pt_comm_size(P->rep_c) > 1)
        dev_allreduce(P, P->rep_c, P->g + shared, P->plan.shard_numel - shared);
}

// Whether this rank's copy of tensor t counts in global sums (replicas once).
static int counts_once(const pt_parallel *P, const pt_plan_tensor *t) {
    const int first_replica = t->ep_expert ? pt_comm_rank(P->rep_c) == 0 : P->coord[PT_DIM_DP] == 0;
    return (!t->tp_replicated || P->coord[PT_DIM_TP] == 0) && first_replica && t->sshape[0] > 0;
}

static double global_sum_squares(pt_parallel *P, const real_t *buf) {
    double local = 0;
    for (int i = 0; i < P->plan.nt; i++) {
        const pt_plan_tensor *t = &P->plan.t[i];
        if (!counts_once(P, t)) continue;
        double ss = 0;
        P->be->ops->sum_squares(P->be, &ss, buf + t->shard_offset, (size_t)t->sshape[0] * t->sshape[1]);
        local += ss;
    }
    double total;
    pt_comm_sum_f64(P->world_c, &local, &total, 1);
    return total;
}

double pt_parallel_grad_norm(pt_parallel *P) { return sqrt(global_sum_squares(P, P->g)); }

void pt_parallel_clip(pt_parallel *P, double total_norm, double max_norm) {
    if (!(max_norm > 0)) return;
    float coef = (float)max_norm / ((float)total_norm + 1e-6f);
    if (coef < 1.0f) P->be->ops->scale(P->be, P->g, coef, P->plan.shard_numel);
}

void pt_parallel_adamw(pt_parallel *P, float lr, float beta1, float beta2, float eps, float wd, bool decay_all,
                       int t_step) {
    for (int i = 0; i < P->plan.nt; i++) {
        const pt_plan_tensor *t = &P->plan.t[i];
        const size_t n = (size_t)t->sshape[0] * t->sshape[1], o = t->shard_offset;
        if (!n) continue;
        P->be->ops->adamw(P->be, P->p + o, P->g + o, P->mo + o, P->vo + o, n, lr, beta1, beta2, eps,
                          t->decays || decay_all ? wd : 0.0f, t_step);
    }
    for (int s = 0; s < SLOTS; s++) P->resident[s] = -1;  // the gathered copies are stale now
}

int pt_parallel_all_finite(pt_parallel *P, int include_moments) {
    const real_t *bufs[3] = {P->p, P->mo, P->vo};
    double local = 0;
    for (int b = 0; b < (include_moments ? 3 : 1); b++) {
        double ss = 0;
        P->be->ops->sum_squares(P->be, &ss, bufs[b], P->plan.shard_numel);
        local += isfinite(ss) ? 0.0 : 1.0;
    }
    double total;
    pt_comm_sum_f64(P->world_c, &local, &total, 1);
    return total == 0;
}

// ---------------------------------------------------------------- checkpoints

static const char *GROUPS[3] = {"model/", "optim/exp_avg/", "optim/exp_avg_sq/"};

static void group_gather(void *ctx, const void *send, size_t n, char **recv, size_t *counts) {
    pt_comm_gather_bytes(ctx, send, n, 0, recv, counts);
}
static void group_bcast(void *ctx, void *buf, size_t n) { pt_comm_broadcast(ctx, buf, n, 0); }

int pt_parallel_save(pt_parallel *P, const char *output_dir, long step, const cJSON *state, int keep_last,
                     ckpt_save_stats *stats) {
    if (!pt_parallel_all_finite(P, 1)) {
        pt_set_error("refusing to save checkpoint %ld: the weights or AdamW moments hold non-finite values (NaN/Inf); "
                     "nothing was written", step);
        return PT_PARALLEL_NONFINITE;
    }
    const size_t np = P->plan.shard_numel;
    const real_t *bufs[3] = {P->p, P->mo, P->vo};
    float *host = NULL;
    const float *src[3];
    if (P->be->host_memory) {
        for (int b = 0; b < 3; b++) src[b] = bufs[b];
    } else {
        host = pt_malloc(sizeof(float) * np * 3);
        for (int b = 0; b < 3; b++) {
            P->be->ops->download(P->be, host + b * np, bufs[b], sizeof(float) * np);
            src[b] = host + b * np;
        }
    }
    ckpt_slice *sl = pt_calloc((size_t)P->plan.nt * 3, sizeof(ckpt_slice));
    char (*names)[128] = pt_calloc((size_t)P->plan.nt * 3, 128);
    int n = 0;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < P->plan.nt; i++) {
            const pt_plan_tensor *t = &P->plan.t[i];
            if (!counts_once(P, t)) continue;
            ckpt_slice *s = &sl[n];
            snprintf(names[n], 128, "%s%s", GROUPS[b], t->name);
            s->name = names[n];
            s->ndim = t->ndim;
            for (int d = 0; d < t->ndim; d++) {
                s->global_shape[d] = t->gshape[d];
                s->offset[d] = t->soff[d];
                s->shape[d] = t->sshape[d];
            }
            s->data = src[b] + t->shard_offset;
            n++;
        }
    ckpt_group g = {.rank = P->rank, .size = P->world, .ctx = P->world_c, .gather = group_gather,
                    .bcast = group_bcast};
    const int rc = ckpt_save_group(output_dir, step, sl, n, state, keep_last, stats, &g);
    free(names);
    free(sl);
    free(host);
    return rc;
}

int pt_parallel_load_ckpt(pt_parallel *P, ckpt *c) {
    const size_t np = P->plan.shard_numel;
    real_t *bufs[3] = {P->p, P->mo, P->vo};
    float *host = pt_calloc(np * 3, sizeof(float));
    int rc = -1;
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < P->plan.nt; i++) {
            const pt_plan_tensor *t = &P->plan.t[i];
            char name[160];
            snprintf(name, sizeof name, "%s%s", GROUPS[b], t->name);
            int64_t shape[CKPT_MAX_DIMS];
            const int nd = ckpt_tensor_shape(c, name, shape);
            if (nd < 0) {
                pt_set_error("%s: checkpoint lacks tensor \"%s\"", ckpt_dir(c), name);
                goto done;
            }
            if (nd != t->ndim || shape[0] != t->gshape[0] || (nd == 2 && shape[1] != t->gshape[1])) {
                pt_set_error("%s: tensor \"%s\" has a different shape from the model's", ckpt_dir(c), name);
                goto done;
            }
            if (!t->sshape[0]) continue;
            if (ckpt_read(c, name, t->ndim, t->soff, t->sshape, host + b * np + t->shard_offset) != 0) goto done;
        }
    for (int b = 0; b < 3; b++) P->be->ops->upload(P->be, bufs[b], host + b * np, sizeof(float) * np);
    for (int s = 0; s < SLOTS; s++) P->resident[s] = -1;
    rc = 0;
done:
    free(host);
    return rc;
}

// The final HF save streams (hf_model_save_streamed): a block of rows of one tensor at a time, every rank
// sends rank 0 the part of its box in those rows, [4 x int64 box | data] or an empty box, and rank 0 places
// the parts into the block and writes it. No rank holds more than its shards and, on rank 0, about two copies
// of one block; neither the model nor a whole tensor is gathered (Qwen3-8B's embedding: 2.32 GiB in fp32).
typedef struct {
    pt_parallel *P;
    size_t *counts;  // the gather's per-rank sizes (rank 0)
} hf_gather;

static int gather_rows(void *ctx, int i, const qwen3_param_info *ft, int64_t row0, int64_t nrows, real_t *out) {
    hf_gather *g = ctx;
    pt_parallel *P = g->P;
    const pt_plan_tensor *t = plan_tensor(&P->plan, ft->name, i);  // the plan lists the layout's tensors in order
    // this rank's rows of the block: its box's rows [soff0, soff0 + sshape0) within [row0, row0 + nrows)
    int64_t r0 = 0, r1 = 0;
    if (t && counts_once(P, t)) {
        r0 = PT_MAX(row0, t->soff[0]);
        r1 = PT_MAX(r0, PT_MIN(row0 + nrows, t->soff[0] + t->sshape[0]));
    }
    const size_t n = (size_t)(r1 - r0) * (t ? t->sshape[1] : 0);
    char *msg = pt_malloc(32 + n * sizeof(real_t));
    const int64_t box[4] = {r0, n ? t->soff[1] : 0, r1 - r0, n ? t->sshape[1] : 0};
    memcpy(msg, box, 32);
    if (n)
        P->be->ops->download(P->be, msg + 32, P->p + t->shard_offset + (size_t)(r0 - t->soff[0]) * t->sshape[1],
                        n * sizeof(real_t));
    char *all = NULL;
    pt_comm_gather_bytes(P->world_c, msg, 32 + n * sizeof(real_t), 0, &all, g->counts);
    free(msg);
    if (P->rank == 0) {
        const int64_t cols = ft->shape[1];
        size_t off = 0;
        for (int r = 0; r < P->world; r++) {
            int64_t b[4];
            memcpy(b, all + off, 32);
            const real_t *d = (const real_t *)(all + off + 32);
            for (int64_t row = 0; row < b[2]; row++)
                memcpy(out + (size_t)(b[0] - row0 + row) * cols + b[1], d + (size_t)row * b[3],
                       sizeof(real_t) * (size_t)b[3]);
            off += g->counts[r];
        }
    }
    free(all);
    return 0;
}

int pt_parallel_save_hf(pt_parallel *P, const char *dir) {
    qwen3_model layout;  // the whole model's tensors: names, shapes, the order the save writes them in
    if (qwen3_create_layout(&layout, &P->plan.global, P->be) != 0) return -1;  // cannot happen: validated
    // every rank cuts the tensors into rank 0's blocks (the gathers must match, whatever each rank's environment)
    uint64_t block_bytes = hf_weight_block_bytes();
    pt_comm_broadcast(P->world_c, &block_bytes, sizeof block_bytes, 0);
    hf_gather g = {.P = P, .counts = pt_calloc(P->world, sizeof(size_t))};
    int rc = 0;
    if (P->rank == 0) rc = hf_model_save_streamed(&layout, dir, "float32", 0, block_bytes, gather_rows, &g);
    else
        for (int i = 0; i < layout.num_tensors; i++) {
            const qwen3_param_info *t = &layout.tensors[i];
            const int64_t per = hf_block_rows(t, block_bytes);
            for (int64_t r = 0; r < t->shape[0]; r += per) gather_rows(&g, i, t, r, PT_MIN(per, t->shape[0] - r), NULL);
        }
    free(g.counts);
    qwen3_free(&layout);
    // every rank learns whether rank 0 wrote it
    int ok = rc == 0;
    pt_comm_broadcast(P->world_c, &ok, sizeof ok, 0);
    if (!ok && P->rank != 0) pt_set_error("rank 0 could not write the final model to %s", dir);
    return ok ? 0 : -1;
}
