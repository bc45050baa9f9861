#include "model/qwen3_moe.h"
#include "util/bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// One sparse layer: where its tensors are, its routing and its activations of the last forward. Rows r of
// the gathered buffers are grouped by expert: expert e owns [start[e], start[e+1]), tokens ascending.
typedef struct {
    int router;                   // index into m->tensors; expert e's gate/up/down follow at router+1+3e
    real_t *probs;                // host [N,E] softmax of the router logits (the aux loss's mean probabilities)
    int32_t *sel;                 // host [N,K] experts chosen, by decreasing probability
    int32_t *start;               // host [E+1]
    real_t *logits, *b_probs, *b_topw;  // backend [N,E], [N,E], [N,K] (topw: the routing weights)
    int32_t *b_sel;                     // backend [N,K]
    int32_t *row_token, *row_w, *tok_rows;  // backend [N*K]: row r's token and its n*K+slot; token n's K rows
    real_t *xg, *gate, *up, *act, *eout;  // backend [rows,C], [rows,I] x3, [N*K,C] (eout: before the weight)
    // expert parallelism: xg/gate/up/act hold the rows this rank's experts received, rows = cap_rows (N*K, as
    // under balanced routing, grown to what an uneven routing sends: ep_grow); ep_cnt[p x El + j]: rows from
    // EP rank p for local expert j; ep_start[El+1]: local expert j's rows
    int32_t *ep_cnt, *ep_start;
    size_t cap_rows;
} moe_layer;

struct qwen3_moe {
    moe_layer *layers;  // [L]; router < 0 for dense layers
    int cap_N;          // tokens the buffers hold
    size_t cap_rows;    // expert-side rows the shared scratch and the host transit buffers hold (>= N*K)
    int last_N;         // tokens of the last forward
    double aux;         // the last forward's load-balancing loss
    double aux_tokens;  // the tokens it is over: the global micro-batch's (every data rank's)
    double *frac;       // host [E]: fraction of routed slots per expert over all sparse layers (aux's f_e)
    // shared scratch: the host side of the row bookkeeping and of d(aux)/d(probs); backend gradients
    int32_t *h_idx;     // host [3 N*K]: row_token, row_w, tok_rows
    double *h_dprob;    // host [E]
    real_t *d_eout, *d_act, *d_gate, *d_up, *d_xg, *d_logits;
    float *ep_h1, *ep_h2;  // expert parallelism: host rows in transit [cap_rows, C] each
    double *d_topw, *d_dprob;  // backend [N*K], [E]
    double *h_dw;              // host [N*K]: d(routing weights) summed over TP
};

int qwen3_moe_create(qwen3_model *m) {
    const qwen3_config *c = &m->cfg;
    qwen3_moe *s = pt_calloc(1, sizeof *s);
    s->layers = pt_calloc(c->num_hidden_layers, sizeof(moe_layer));
    for (int l = 0; l < c->num_hidden_layers; l++) s->layers[l].router = -1;
    for (int i = 0; i < m->num_tensors; i++)
        if (m->tensors[i].kind == P_ROUTER) s->layers[m->tensors[i].layer].router = i;
    s->frac = pt_calloc(c->num_experts > 0 ? c->num_experts : 1, sizeof(double));
    m->moe = s;
    return 0;
}

static void free_buffers(qwen3_model *m) {
    qwen3_moe *s = m->moe;
    pt_backend *be = m->be;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        moe_layer *y = &s->layers[l];
        free(y->probs); free(y->sel); free(y->start); free(y->ep_cnt); free(y->ep_start);
        void *dev[] = {y->logits, y->b_probs, y->b_topw, y->b_sel, y->row_token, y->row_w, y->tok_rows,
                       y->xg,     y->gate,    y->up,     y->act,   y->eout};
        for (size_t i = 0; i < PT_ARRAY_LEN(dev); i++)
            if (dev[i]) be->ops->free(be, dev[i]);
        const int router = y->router;
        memset(y, 0, sizeof *y);
        y->router = router;
    }
    free(s->h_idx); free(s->h_dprob); free(s->h_dw); free(s->ep_h1); free(s->ep_h2);
    s->h_dw = NULL;
    s->ep_h1 = s->ep_h2 = NULL;
    void *dev[] = {s->d_eout, s->d_act, s->d_gate, s->d_up, s->d_xg, s->d_logits, s->d_topw, s->d_dprob};
    for (size_t i = 0; i < PT_ARRAY_LEN(dev); i++)
        if (dev[i]) be->ops->free(be, dev[i]);
    s->h_idx = NULL;
    s->h_dprob = NULL;
    s->d_eout = s->d_act = s->d_gate = s->d_up = s->d_xg = s->d_logits = NULL;
    s->d_topw = s->d_dprob = NULL;
    s->cap_N = 0;
}

void qwen3_moe_free(qwen3_model *m) {
    if (!m->moe) return;
    free_buffers(m);
    free(m->moe->layers);
    free(m->moe->frac);
    free(m->moe);
    m->moe = NULL;
}

// Expert parallelism: the EP group's size (1: none).
static int ep_size(const qwen3_model *m) { return m->par && m->par->ep_size > 1 ? m->par->ep_size : 1; }

static void ensure_buffers(qwen3_model *m, int N) {
    qwen3_moe *s = m->moe;
    if (N <= s->cap_N) return;
    free_buffers(m);
    pt_backend *be = m->be;
    // sized for balanced routing; under EP an uneven routing grows the expert side (ep_grow)
    const size_t E = m->cfg.num_experts, K = m->cfg.num_experts_per_tok, C = m->cfg.hidden_size,
                 I = m->cfg.moe_intermediate_size, R = (size_t)N * K;
    const size_t F = sizeof(real_t);
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        moe_layer *y = &s->layers[l];
        if (y->router < 0) continue;
        y->probs = pt_malloc(F * N * E);
        y->sel = pt_malloc(sizeof(int32_t) * R);
        y->start = pt_malloc(sizeof(int32_t) * (E + 1));
        y->logits = be->ops->alloc(be, F * N * E);
        y->b_probs = be->ops->alloc(be, F * N * E);
        y->b_topw = be->ops->alloc(be, F * R);
        y->b_sel = be->ops->alloc(be, sizeof(int32_t) * R);
        y->row_token = be->ops->alloc(be, sizeof(int32_t) * R);
        y->row_w = be->ops->alloc(be, sizeof(int32_t) * R);
        y->tok_rows = be->ops->alloc(be, sizeof(int32_t) * R);
        y->xg = be->ops->alloc(be, F * R * C);
        y->gate = be->ops->alloc(be, F * R * I);
        y->up = be->ops->alloc(be, F * R * I);
        y->act = be->ops->alloc(be, F * R * I);
        y->eout = be->ops->alloc(be, F * R * C);
        y->cap_rows = R;
        if (ep_size(m) > 1) {
            y->ep_cnt = pt_malloc(sizeof(int32_t) * E);
            y->ep_start = pt_malloc(sizeof(int32_t) * (E + 1));
        }
    }
    if (ep_size(m) > 1) {
        s->ep_h1 = pt_malloc(sizeof(float) * R * C);
        s->ep_h2 = pt_malloc(sizeof(float) * R * C);
    }
    s->h_idx = pt_malloc(sizeof(int32_t) * 3 * R);
    s->h_dprob = pt_malloc(sizeof(double) * E);
    s->h_dw = pt_malloc(sizeof(double) * R);
    s->d_eout = be->ops->alloc(be, F * R * C);
    s->d_act = be->ops->alloc(be, F * R * I);
    s->d_gate = be->ops->alloc(be, F * R * I);
    s->d_up = be->ops->alloc(be, F * R * I);
    s->d_xg = be->ops->alloc(be, F * R * C);
    s->d_logits = be->ops->alloc(be, F * (size_t)N * E);
    s->d_topw = be->ops->alloc(be, sizeof(double) * R);
    s->d_dprob = be->ops->alloc(be, sizeof(double) * E);
    s->cap_N = N;
    s->cap_rows = R;
}

// Expert parallelism: room for `rows` expert-side rows in layer y and in the shared scratch. Routing decides
// how many rows an EP rank's experts receive (N*K on average; up to N x ep x min(K, E/ep) if every rank routes
// all it can to it), so the buffers start at the balanced size and grow to the largest count seen. Growth happens
// before the rows arrive; the R token-side rows xg already holds are kept. m->act_bytes follows.
static void ep_grow(qwen3_model *m, moe_layer *y, size_t rows, size_t R) {
    qwen3_moe *s = m->moe;
    pt_backend *be = m->be;
    const size_t C = m->cfg.hidden_size, I = m->cfg.moe_intermediate_size, F = sizeof(real_t);
    if (rows > y->cap_rows) {
        real_t *xg = be->ops->alloc(be, F * rows * C);
        be->ops->copy(be, xg, y->xg, F * R * C);
        real_t **bufs[] = {&y->xg, &y->gate, &y->up, &y->act};
        for (size_t i = 0; i < PT_ARRAY_LEN(bufs); i++) be->ops->free(be, *bufs[i]);
        y->xg = xg;
        y->gate = be->ops->alloc(be, F * rows * I);
        y->up = be->ops->alloc(be, F * rows * I);
        y->act = be->ops->alloc(be, F * rows * I);
        m->act_bytes += F * (rows - y->cap_rows) * (C + 3 * I);
        y->cap_rows = rows;
    }
    if (rows > s->cap_rows) {  // the shared scratch holds no live data between layers
        real_t **c_bufs[] = {&s->d_eout, &s->d_xg}, **i_bufs[] = {&s->d_act, &s->d_gate, &s->d_up};
        for (size_t i = 0; i < 2; i++) {
            be->ops->free(be, *c_bufs[i]);
            *c_bufs[i] = be->ops->alloc(be, F * rows * C);
        }
        for (size_t i = 0; i < 3; i++) {
            be->ops->free(be, *i_bufs[i]);
            *i_bufs[i] = be->ops->alloc(be, F * rows * I);
        }
        free(s->ep_h1);
        free(s->ep_h2);
        s->ep_h1 = pt_malloc(sizeof(float) * rows * C);
        s->ep_h2 = pt_malloc(sizeof(float) * rows * C);
        m->act_bytes += (rows - s->cap_rows) * (F * (2 * C + 3 * I) + 2 * sizeof(float) * C);
        s->cap_rows = rows;
    }
}

// The bytes ensure_buffers allocates for N tokens, on the host and on the backend: the same sizes, so that
// qwen3_activation_bytes (and `portatrain topo`) count what a run holds. Under EP (ep > 1) that is the
// balanced-routing size; ep_grow adds to it when a rank's experts receive more than N*K rows.
void qwen3_moe_buffer_bytes(const qwen3_config *c, int N, int ep, size_t *host, size_t *backend) {
    const size_t E = c->num_experts, K = c->num_experts_per_tok, C = c->hidden_size, I = c->moe_intermediate_size,
                 R = (size_t)N * K, F = sizeof(real_t), I4 = sizeof(int32_t);
    size_t layers = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) layers += c->moe && qwen3_layer_is_sparse(c, l);
    *host = *backend = 0;
    if (!layers) return;
    // per sparse layer, host: probs, sel, start (+ ep_cnt, ep_start); backend: logits, b_probs, b_topw, b_sel,
    // row_token, row_w, tok_rows, xg, gate, up, act, eout
    *host = layers * (F * N * E + I4 * R + I4 * (E + 1) + (ep > 1 ? I4 * (2 * E + 1) : 0));
    *backend = layers * (2 * F * N * E + F * R + 4 * I4 * R + 2 * F * R * C + 3 * F * R * I);
    // shared, host: h_idx, h_dprob, h_dw (+ ep_h1, ep_h2); backend: d_eout, d_act, d_gate, d_up, d_xg,
    // d_logits, d_topw, d_dprob
    *host += 3 * I4 * R + sizeof(double) * (E + R) + (ep > 1 ? 2 * sizeof(float) * R * C : 0);
    *backend += 2 * F * R * C + 3 * F * R * I + F * (size_t)N * E + sizeof(double) * (R + E);
}

// The most ep_grow can add to qwen3_moe_buffer_bytes: every rank of the EP group routing min(K, E/ep) rows of
// each of its N tokens to one rank's E/ep experts, in every sparse layer.
size_t qwen3_moe_ep_growth_bytes(const qwen3_config *c, int N, int ep) {
    if (ep <= 1 || !c->moe) return 0;
    const size_t K = c->num_experts_per_tok, most = (size_t)N * ep * PT_MIN(K, (size_t)(c->num_experts / ep));
    if (most <= (size_t)N * K) return 0;
    const size_t C = c->hidden_size, I = c->moe_intermediate_size, extra = most - (size_t)N * K, F = sizeof(real_t);
    size_t layers = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) layers += qwen3_layer_is_sparse(c, l);
    return extra * (layers * F * (C + 3 * I) + F * (2 * C + 3 * I) + 2 * sizeof(float) * C);
}

// The tensor's views: the model's own buffers, or the ones a parallel runtime bound (qwen3_bind_unit).
static real_t *param(const qwen3_model *m, int tensor) { return m->tparams[tensor]; }
static real_t *grad(const qwen3_model *m, int tensor) { return m->tgrads[tensor]; }

// The host's index bookkeeping from the downloaded selection: rows grouped by expert, ascending; tokens
// ascending within an expert; each token's K rows ascending (the combine's fixed order: experts ascending,
// as HF's index_add_ over the experts hit). Uploaded to the layer's backend index lists.
static void group_rows(qwen3_model *m, moe_layer *y, int N) {
    const int E = m->cfg.num_experts, K = m->cfg.num_experts_per_tok;
    const size_t R = (size_t)N * K;
    int32_t *row_token = m->moe->h_idx, *row_w = row_token + R, *tok_rows = row_w + R;
    memset(y->start, 0, sizeof(int32_t) * (E + 1));
    for (size_t i = 0; i < R; i++) y->start[y->sel[i] + 1]++;
    for (int e = 0; e < E; e++) y->start[e + 1] += y->start[e];
    int32_t *next = pt_malloc(sizeof(int32_t) * E);
    memcpy(next, y->start, sizeof(int32_t) * E);
    for (int n = 0; n < N; n++) {
        int32_t *mine = tok_rows + (size_t)n * K;
        for (int j = 0; j < K; j++) {
            const int r = next[y->sel[(size_t)n * K + j]]++;
            row_token[r] = n;
            row_w[r] = n * K + j;
            int k = j;  // insertion: the token's rows ascending
            for (; k > 0 && mine[k - 1] > r; k--) mine[k] = mine[k - 1];
            mine[k] = r;
        }
    }
    free(next);
    pt_backend *be = m->be;
    be->ops->upload(be, y->row_token, row_token, sizeof(int32_t) * R);
    be->ops->upload(be, y->row_w, row_w, sizeof(int32_t) * R);
    be->ops->upload(be, y->tok_rows, tok_rows, sizeof(int32_t) * R);
}

// Each expert's SwiGLU MLP on its rows: expert e0 + j owns rows [start[j], start[j + 1]) of the layer's
// xg/gate/up/act and of eout.
static void experts_forward(qwen3_model *m, const moe_layer *y, const int32_t *start, int e0, int ne, real_t *eout) {
    pt_backend *be = m->be;
    const int C = m->cfg.hidden_size, I = m->cfg.moe_intermediate_size;
    for (int j = 0; j < ne; j++) {
        const int r0 = start[j], n = start[j + 1] - r0;
        if (n == 0) continue;
        const int w = y->router + 1 + 3 * (e0 + j);
        real_t *gate = y->gate + (size_t)r0 * I, *up = y->up + (size_t)r0 * I, *out = eout + (size_t)r0 * C;
        qwen3_linear_forward(m, gate, y->xg + (size_t)r0 * C, param(m, w), n, C, I);
        qwen3_linear_forward(m, up, y->xg + (size_t)r0 * C, param(m, w + 1), n, C, I);
        qwen3_cast(m, gate, (size_t)n * I);
        qwen3_cast(m, up, (size_t)n * I);
        be->ops->swiglu_forward(be, y->act + (size_t)r0 * I, gate, up, (size_t)n * I);
        qwen3_linear_forward(m, out, y->act + (size_t)r0 * I, param(m, w + 2), n, I, C);
        qwen3_cast(m, out, (size_t)n * C);
    }
}

// ---------------------------------------------------------------- expert parallelism
// EP rank q owns experts [q x El, (q + 1) x El). A rank's rows are grouped by expert ascending, so its rows
// for rank q are one block, [start[q x El], start[(q + 1) x El]); they arrive source-major (EP rank p's rows
// for local expert 0, 1, ..., then rank p + 1's) and are reordered expert-major (local expert j: rank 0's
// rows, rank 1's, ...: the group's tokens in global order, as one process would hold them), computed, and
// sent back the same way. The data move through the host (the communicator's buffers are host memory).

// Rows between source-major (p, j) and expert-major (j, p) order; cnt[p x El + j] rows per block.
static void ep_reorder(const int32_t *cnt, int P, int El, const float *src, float *dst, size_t C, int to_expert) {
    size_t off_e = 0;
    for (int j = 0; j < El; j++)
        for (int p = 0; p < P; p++) {
            size_t off_s = 0;  // block (p, j) in source-major order
            for (int q = 0; q < p; q++)
                for (int k = 0; k < El; k++) off_s += (size_t)cnt[q * El + k];
            for (int k = 0; k < j; k++) off_s += (size_t)cnt[p * El + k];
            const size_t n = (size_t)cnt[p * El + j] * C;
            if (to_expert) memcpy(dst + off_e * C, src + off_s * C, sizeof(float) * n);
            else memcpy(dst + off_s * C, src + off_e * C, sizeof(float) * n);
            off_e += (size_t)cnt[p * El + j];
        }
}

// Rows (C floats each) between the token side and the expert side of the EP group. dispatch: this rank's R
// rows in `tok` (backend, grouped by expert) -> the rows of its experts, expert-major, into `exp` (backend).
// !dispatch: back (the expert side's rows -> the token side's, in the order they were sent).
static void ep_exchange(qwen3_model *m, const moe_layer *y, real_t *tok, real_t *exp, int R, int dispatch) {
    pt_backend *be = m->be;
    const int P = ep_size(m), El = m->cfg.num_experts / P;
    const size_t C = m->cfg.hidden_size, F = sizeof(float);
    size_t sb[P], rb[P], mine = 0;
    for (int p = 0; p < P; p++) {
        size_t got = 0;
        for (int j = 0; j < El; j++) got += (size_t)y->ep_cnt[p * El + j];
        mine += got;
        const size_t sent = (size_t)(y->start[(p + 1) * El] - y->start[p * El]);
        sb[p] = (dispatch ? sent : got) * C * F;
        rb[p] = (dispatch ? got : sent) * C * F;
    }
    float *h1 = m->moe->ep_h1, *h2 = m->moe->ep_h2;
    if (dispatch) {
        be->ops->download(be, h1, tok, F * (size_t)R * C);
        m->par->ep_alltoallv(m->par->ctx, h1, sb, h2, rb);
        ep_reorder(y->ep_cnt, P, El, h2, h1, C, 1);
        be->ops->upload(be, exp, h1, F * mine * C);
    } else {
        be->ops->download(be, h1, exp, F * mine * C);
        ep_reorder(y->ep_cnt, P, El, h1, h2, C, 0);
        m->par->ep_alltoallv(m->par->ctx, h2, sb, h1, rb);
        be->ops->upload(be, tok, h1, F * (size_t)R * C);
    }
}

// Forward under EP: the row counts per (EP rank, expert), the gathered rows y->xg to their experts' ranks,
// this rank's experts on them, and their outputs back into y->eout (the token side's rows).
static void ep_experts_forward(qwen3_model *m, moe_layer *y, int N) {
    const int P = ep_size(m), El = m->cfg.num_experts / P, e0 = m->par->ep_rank * El;
    int32_t cnt[m->cfg.num_experts];
    for (int e = 0; e < m->cfg.num_experts; e++) cnt[e] = y->start[e + 1] - y->start[e];
    size_t cb[P];
    for (int p = 0; p < P; p++) cb[p] = sizeof(int32_t) * El;
    m->par->ep_alltoallv(m->par->ctx, cnt, cb, y->ep_cnt, cb);
    y->ep_start[0] = 0;
    for (int j = 0; j < El; j++) {
        int32_t n = 0;
        for (int p = 0; p < P; p++) n += y->ep_cnt[p * El + j];
        y->ep_start[j + 1] = y->ep_start[j] + n;
    }
    const int R = N * m->cfg.num_experts_per_tok;
    ep_grow(m, y, PT_MAX((size_t)y->ep_start[El], (size_t)R), (size_t)R);
    ep_exchange(m, y, y->xg, y->xg, R, 1);  // (the token side's rows are downloaded before the upload)
    experts_forward(m, y, y->ep_start, e0, El, m->moe->d_eout);
    ep_exchange(m, y, y->eout, m->moe->d_eout, R, 0);
}

int qwen3_moe_forward(qwen3_model *m, int l, const real_t *x, real_t *out, int N) {
    pt_backend *be = m->be;
    const qwen3_config *c = &m->cfg;
    const int E = c->num_experts, K = c->num_experts_per_tok, C = c->hidden_size;
    const size_t R = (size_t)N * K, F = sizeof(real_t);
    ensure_buffers(m, N);
    qwen3_moe *s = m->moe;
    moe_layer *y = &s->layers[l];
    s->last_N = N;
    // bf16 (HF): bf16 router logits, the softmax / top-k / renormalisation in fp32, bf16 routing weights
    qwen3_linear_forward(m, y->logits, x, param(m, y->router), N, C, E);
    qwen3_cast(m, y->logits, (size_t)N * E);
    be->ops->moe_route(be, y->b_probs, y->b_sel, y->b_topw, y->logits, N, E, K, c->norm_topk_prob);
    qwen3_cast(m, y->b_topw, R);
    be->ops->download(be, y->sel, y->b_sel, sizeof(int32_t) * R);
    if (c->output_router_logits) {
        be->ops->download(be, y->probs, y->b_probs, F * N * E);
        if (m->bf16)  // HF's load-balancing loss takes softmax(bf16 logits) in bf16
            for (size_t i = 0; i < (size_t)N * E; i++) y->probs[i] = (real_t)pt_round_bf16((float)y->probs[i]);
    }
    group_rows(m, y, N);
    be->ops->moe_gather(be, y->xg, x, y->row_token, (int)R, C);
    if (ep_size(m) > 1) ep_experts_forward(m, y, N);
    else experts_forward(m, y, y->start, 0, E, y->eout);
    // out[t] = sum over the experts hit, ascending, of weight x expert output (HF: index_add_ of
    // current_hidden_states * top_k_weights into zeros)
    be->ops->moe_combine(be, out, y->eout, y->b_topw, y->row_w, y->tok_rows, N, K, C);
    return 0;
}

// Under data parallelism the loss is HF's over the global micro-batch: the routed counts, the probability
// sums and the token count of every data rank, summed in rank order (the same on every rank).
static void global_stats(const qwen3_model *m, double *counts, double *psum, double *tokens) {
    if (!m->par || !m->par->moe_data_sum) return;
    const int E = m->cfg.num_experts;
    double *buf = pt_malloc(sizeof(double) * (2 * (size_t)E + 1));
    memcpy(buf, counts, sizeof(double) * E);
    memcpy(buf + E, psum, sizeof(double) * E);
    buf[2 * E] = *tokens;
    m->par->moe_data_sum(m->par->ctx, buf, 2 * E + 1);
    memcpy(counts, buf, sizeof(double) * E);
    memcpy(psum, buf + E, sizeof(double) * E);
    *tokens = buf[2 * E];
    free(buf);
}

void qwen3_moe_finish_forward(qwen3_model *m, int N) {
    qwen3_moe *s = m->moe;
    const qwen3_config *c = &m->cfg;
    const int E = c->num_experts, K = c->num_experts_per_tok;
    s->aux = 0;
    if (!c->output_router_logits) return;
    // HF sums token counts and probabilities over the sparse layers, then divides both by
    // (sparse layers x tokens): aux = E * sum_e frac_e * prob_e.
    double *psum = pt_calloc(E, sizeof(double));
    memset(s->frac, 0, sizeof(double) * E);
    int layers = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const moe_layer *y = &s->layers[l];
        if (y->router < 0) continue;
        layers++;
        for (size_t i = 0; i < (size_t)N * K; i++) s->frac[y->sel[i]] += 1;
        for (int n = 0; n < N; n++)
            for (int e = 0; e < E; e++) psum[e] += y->probs[(size_t)n * E + e];
    }
    s->aux_tokens = N;
    global_stats(m, s->frac, psum, &s->aux_tokens);
    const double rows = (double)layers * s->aux_tokens;
    for (int e = 0; e < E && layers; e++) {
        s->frac[e] /= rows;
        s->aux += s->frac[e] * (psum[e] / rows);
    }
    s->aux *= E;
    free(psum);
}

double qwen3_moe_aux_loss(const qwen3_model *m) { return m->moe ? m->moe->aux : 0; }

int qwen3_moe_expert_load(const qwen3_model *m, int l, int *counts) {
    if (!m->moe || m->moe->layers[l].router < 0 || !m->moe->layers[l].start) return -1;
    const moe_layer *y = &m->moe->layers[l];
    for (int e = 0; e < m->cfg.num_experts; e++) counts[e] = y->start[e + 1] - y->start[e];
    return 0;
}

int qwen3_moe_block_output(qwen3_model *m, int l, real_t *out) {
    if (!m->moe || m->moe->layers[l].router < 0 || !m->moe->layers[l].start) return -1;
    const moe_layer *y = &m->moe->layers[l];
    pt_backend *be = m->be;
    const int N = m->moe->last_N, K = m->cfg.num_experts_per_tok, C = m->cfg.hidden_size;
    real_t *tmp = be->ops->alloc(be, sizeof(real_t) * (size_t)N * C);
    be->ops->moe_combine(be, tmp, y->eout, y->b_topw, y->row_w, y->tok_rows, N, K, C);
    be->ops->download(be, out, tmp, sizeof(real_t) * (size_t)N * C);
    be->ops->free(be, tmp);
    return 0;
}

// Through each expert's MLP: d(eout) rows in s->d_eout -> d(xg) rows in s->d_xg; weight gradients accumulate.
// Expert e0 + j owns rows [start[j], start[j + 1]).
static void experts_backward(qwen3_model *m, const moe_layer *y, const int32_t *start, int e0, int ne) {
    pt_backend *be = m->be;
    const qwen3_config *c = &m->cfg;
    const int C = c->hidden_size, I = c->moe_intermediate_size;
    qwen3_moe *s = m->moe;
    for (int j = 0; j < ne; j++) {
        const int r0 = start[j], n = start[j + 1] - r0;
        if (n == 0) continue;
        const int w = y->router + 1 + 3 * (e0 + j);
        real_t *dact = s->d_act + (size_t)r0 * I, *dg = s->d_gate + (size_t)r0 * I, *du = s->d_up + (size_t)r0 * I;
        real_t *dxg = s->d_xg + (size_t)r0 * C;
        const real_t *xg = y->xg + (size_t)r0 * C;
        be->ops->zero(be, dact, sizeof(real_t) * (size_t)n * I);
        qwen3_linear_backward(m, dact, grad(m, w + 2), s->d_eout + (size_t)r0 * C, y->act + (size_t)r0 * I,
                              param(m, w + 2), n, I, C);
        qwen3_cast(m, dact, (size_t)n * I);
        be->ops->swiglu_backward(be, dg, du, dact, y->gate + (size_t)r0 * I, y->up + (size_t)r0 * I, (size_t)n * I);
        qwen3_cast(m, dg, (size_t)n * I);
        qwen3_cast(m, du, (size_t)n * I);
        be->ops->zero(be, dxg, sizeof(real_t) * (size_t)n * C);
        qwen3_linear_backward(m, dxg, grad(m, w), dg, xg, param(m, w), n, C, I);
        qwen3_linear_backward(m, dxg, grad(m, w + 1), du, xg, param(m, w + 1), n, C, I);
        qwen3_cast(m, dxg, (size_t)n * C);  // (HF's fused gate_up: one bf16 d(x) per expert)
    }
}

// Tensor parallel: each rank holds its columns of every expert's intermediate, so its expert outputs are
// partial sums. d(routing weight) = dy . eout is linear in eout: the TP sum of the ranks' partial dots is the
// full one, the same on every rank, so each rank's (replicated) router gets the whole gradient.
static void tp_sum_dw(const qwen3_model *m, double *d_dw, size_t R) {
    if (!m->par || m->par->tp_size <= 1) return;
    pt_backend *be = m->be;
    double *h = m->moe->h_dw;
    be->ops->download(be, h, d_dw, sizeof(double) * R);
    m->par->tp_sum_f64(m->par->ctx, h, (int)R);
    be->ops->upload(be, d_dw, h, sizeof(double) * R);
}
// ... and d(x) through the column-parallel gate/up is partial too; summed before the router's (full) term.
static void tp_sum_dx(const qwen3_model *m, real_t *dx, size_t n) {
    if (m->par && m->par->tp_size > 1) m->par->tp_allreduce(m->par->ctx, dx, n);
}

// Backward under EP: d(eout) rows (s->d_eout) to the experts' ranks, through this rank's experts (their
// gradients accumulate here), and d(xg) back into s->d_xg.
static void ep_experts_backward(qwen3_model *m, const moe_layer *y, int N) {
    const int P = ep_size(m), El = m->cfg.num_experts / P, R = N * m->cfg.num_experts_per_tok;
    qwen3_moe *s = m->moe;
    ep_exchange(m, y, s->d_eout, s->d_eout, R, 1);
    experts_backward(m, y, y->ep_start, m->par->ep_rank * El, El);
    ep_exchange(m, y, s->d_xg, s->d_xg, R, 0);
}

void qwen3_moe_backward(qwen3_model *m, int l, real_t *dx, const real_t *dy, const real_t *x, int N,
                        float aux_scale) {
    pt_backend *be = m->be;
    const qwen3_config *c = &m->cfg;
    const int E = c->num_experts, K = c->num_experts_per_tok, C = c->hidden_size;
    const size_t R = (size_t)N * K;
    qwen3_moe *s = m->moe;
    const moe_layer *y = &s->layers[l];
    // out[t] = sum_r w_r * eout[r]: d(eout[r]) = w_r * dy[t], d(w_r) = dy[t] . eout[r]
    be->ops->moe_combine_backward(be, s->d_eout, s->d_topw, dy, y->eout, y->b_topw, y->row_w, (int)R, K, C);
    tp_sum_dw(m, s->d_topw, R);
    if (ep_size(m) > 1) ep_experts_backward(m, y, N);
    else experts_backward(m, y, y->start, 0, E);
    be->ops->moe_gather_backward(be, dx, s->d_xg, y->tok_rows, N, K, C);
    tp_sum_dx(m, dx, (size_t)N * C);
    // the router: d(logits) from d(weights) and the aux loss, then dx += d(logits) @ W_router. The aux loss
    // E * sum_e frac_e * mean_n(probs[n,e]) gives every token the same d(probs[n,e]) = aux_w * frac_e.
    int layers = 0;
    for (int i = 0; i < c->num_hidden_layers; i++) layers += s->layers[i].router >= 0;
    const double aux_w = c->output_router_logits
                             ? c->router_aux_loss_coef * aux_scale * E / ((double)layers * s->aux_tokens) : 0;
    if (aux_w > 0) {
        for (int e = 0; e < E; e++) s->h_dprob[e] = aux_w * s->frac[e];
        be->ops->upload(be, s->d_dprob, s->h_dprob, sizeof(double) * E);
    }
    be->ops->moe_route_backward(be, s->d_logits, s->d_topw, aux_w > 0 ? s->d_dprob : NULL, y->b_probs, y->b_sel,
                                y->b_topw, N, E, K, c->norm_topk_prob);
    if (!m->bf16) {
        be->ops->matmul_backward(be, dx, grad(m, y->router), s->d_logits, x, param(m, y->router), N, C, E);
        return;
    }
    // bf16: autograd adds the router's bf16 d(x) last, after the experts' (moe_gather_backward), in bf16
    qwen3_cast(m, s->d_logits, (size_t)N * E);
    be->ops->zero(be, s->d_xg, sizeof(real_t) * (size_t)N * C);
    qwen3_linear_backward(m, s->d_xg, grad(m, y->router), s->d_logits, x, param(m, y->router), N, C, E);
    qwen3_cast(m, s->d_xg, (size_t)N * C);
    be->ops->add(be, dx, dx, s->d_xg, (size_t)N * C);
    qwen3_cast(m, dx, (size_t)N * C);
}
