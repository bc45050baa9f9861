// cpu-ref: the reference backend. Plain C, straightforward loops, OpenMP only
// over independent outputs with every reduction done serially in a fixed
// order, so results are bitwise identical across runs and thread counts.
#include "backend/backend.h"
#include "backend/moe_ref.h"
#include "util/bf16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Accumulator type for reductions: double in the double build, float otherwise
// (matching fp32 frameworks); loss and norm sums are always double.
typedef real_t acc_t;

// Dot product with 8 independent partial sums combined in a fixed order: the
// compiler can vectorise it without -ffast-math, and the result depends only
// on n, never on threads.
// bf16 rounding in fp32 storage (precision bf16; a no-op question in the double gradcheck build).
#define RB(x) ((real_t)pt_round_bf16((float)(x)))

static inline acc_t dot(const real_t *restrict a, const real_t *restrict b, int n) {
    acc_t s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
    acc_t t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++) t += a[i] * b[i];
    return t;
}

// y[0..n) += a * x[0..n)
static inline void axpy(real_t *restrict y, real_t a, const real_t *restrict x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static void *ref_alloc(pt_backend *be, size_t bytes) {
    void *p = pt_aligned_alloc(bytes);
    memset(p, 0, bytes);
    return p;
}
static void ref_free(pt_backend *be, void *p) { pt_aligned_free(p); }
static void ref_memcpy(pt_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
}
static void ref_zero(pt_backend *be, void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
}
static void ref_sync(pt_backend *be) {}
static void ref_destroy(pt_backend *be) { free(be); }

static void ref_embedding_forward(pt_backend *be, real_t *out, const int32_t *ids, const real_t *wte, int N,
                                  int C) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        if (ids[n] < 0) memset(out + (size_t)n * C, 0, sizeof(real_t) * C);
        else memcpy(out + (size_t)n * C, wte + (size_t)ids[n] * C, sizeof(real_t) * C);
    }
}

static void ref_embedding_backward(pt_backend *be, real_t *dwte, const real_t *dout, const int32_t *ids, int N,
                                   int C) {
    // Serial over rows: several rows may share a token id.
    for (int n = 0; n < N; n++) {
        if (ids[n] < 0) continue;
        real_t *d = dwte + (size_t)ids[n] * C;
        const real_t *g = dout + (size_t)n * C;
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
}

static void ref_matmul_forward(pt_backend *be, real_t *out, const real_t *inp, const real_t *w, int N, int C,
                               int OC) {
#pragma omp parallel for collapse(2)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            out[(size_t)n * OC + o] = dot(inp + (size_t)n * C, w + (size_t)o * C, C);
        }
}

static void ref_matmul_backward(pt_backend *be, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                                const real_t *w, int N, int C, int OC) {
    if (dinp) {
#pragma omp parallel for
        for (int n = 0; n < N; n++) {
            real_t *dx = dinp + (size_t)n * C;
            const real_t *g = dout + (size_t)n * OC;
            real_t *tmp = pt_aligned_alloc(sizeof(real_t) * C);
            memset(tmp, 0, sizeof(real_t) * C);
            for (int o = 0; o < OC; o++) axpy(tmp, g[o], w + (size_t)o * C, C);
            for (int c = 0; c < C; c++) dx[c] += tmp[c];
            pt_aligned_free(tmp);
        }
    }
#pragma omp parallel for
    for (int o = 0; o < OC; o++) {
        real_t *dwr = dw + (size_t)o * C;
        for (int n = 0; n < N; n++) axpy(dwr, dout[(size_t)n * OC + o], inp + (size_t)n * C, C);
    }
}

static void ref_rmsnorm_forward(pt_backend *be, real_t *out, real_t *rstd, const real_t *inp, const real_t *w,
                                int N, int C, float eps) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const real_t *x = inp + (size_t)n * C;
        acc_t ss = 0;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        real_t r = (real_t)1 / sqrt(ss / C + (real_t)eps);
        rstd[n] = r;
        real_t *y = out + (size_t)n * C;
        if (be->bf16_casts)  // HF: weight * hidden.to(bf16), in bf16
            for (int c = 0; c < C; c++) y[c] = RB(w[c] * RB(x[c] * r));
        else
            for (int c = 0; c < C; c++) y[c] = w[c] * (x[c] * r);
    }
}

static void ref_rmsnorm_backward(pt_backend *be, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                                 const real_t *w, const real_t *rstd, int N, int C) {
    // y = w * xhat, xhat = x * r: dx = r * (g*w - xhat * mean(g*w*xhat))
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const real_t *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        real_t r = rstd[n];
        acc_t dot = 0;
        for (int c = 0; c < C; c++) dot += g[c] * w[c] * (x[c] * r);
        real_t m = dot / C;
        real_t *dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) dx[c] += r * (g[c] * w[c] - (x[c] * r) * m);
    }
#pragma omp parallel for
    for (int c = 0; c < C; c++) {
        acc_t s = 0;
        for (int n = 0; n < N; n++) s += dout[(size_t)n * C + c] * (inp[(size_t)n * C + c] * rstd[n]);
        dw[c] += s;
    }
}

// One head's row of D: the rotation x*cos + rotate_half(x)*sin, rounded as bf16 when the backend casts.
static void rope_row_forward(const pt_backend *be, real_t *tmp, const real_t *x, const real_t *cs, const real_t *sn,
                             int D) {
    const int h = D / 2;
    for (int i = 0; i < D; i++) {
        real_t rot = i < h ? -x[i + h] : x[i - h];
        tmp[i] = be->bf16_casts ? RB(RB(x[i] * cs[i]) + RB(rot * sn[i])) : x[i] * cs[i] + rot * sn[i];
    }
}

// The transpose of rope_row_forward's rotation applied to one head's gradient row.
static void rope_row_backward(real_t *tmp, const real_t *g, const real_t *cs, const real_t *sn, int D) {
    const int h = D / 2;
    for (int j = 0; j < D; j++) {
        real_t v = g[j] * cs[j];
        if (j < h) v += g[j + h] * sn[j + h];
        else v -= g[j - h] * sn[j - h];
        tmp[j] = v;
    }
}

// Every (b, t, head) row of [B,T,NH,D]: forward rotates inp into out, backward rotates dout back into dinp.
static void rope_rows(pt_backend *be, bool backward, real_t *out, const real_t *in, const real_t *cos,
                      const real_t *sin, int B, int T, int NH, int D) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const real_t *cs = cos + (size_t)t * D, *sn = sin + (size_t)t * D;
            for (int hd = 0; hd < NH; hd++) {
                size_t base = (((size_t)b * T + t) * NH + hd) * D;
                real_t tmp[D];
                if (backward) rope_row_backward(tmp, in + base, cs, sn, D);
                else rope_row_forward(be, tmp, in + base, cs, sn, D);
                memcpy(out + base, tmp, sizeof tmp);
            }
        }
}

static void ref_rope_forward(pt_backend *be, real_t *out, const real_t *inp, const real_t *cos, const real_t *sin,
                             int B, int T, int NH, int D) {
    rope_rows(be, false, out, inp, cos, sin, B, T, NH, D);
}

static void ref_rope_backward(pt_backend *be, real_t *dinp, const real_t *dout, const real_t *cos,
                              const real_t *sin, int B, int T, int NH, int D) {
    rope_rows(be, true, dinp, dout, cos, sin, B, T, NH, D);
}

// saved = softmax probabilities [B,H,T,T] (zeros where masked)
static size_t ref_attention_saved_floats(pt_backend *be, int B, int T, int H, int D) {
    return (size_t)B * H * T * T;
}

// First key query t of row b sees: its document's start (0 without pos).
static inline int att_lo(const int32_t *pos, int b, int T, int t) { return pos ? t - pos[(size_t)b * T + t] : 0; }

static void ref_attention_forward(pt_backend *be, real_t *out, real_t *saved, const real_t *q, const real_t *k,
                                  const real_t *v, const int32_t *pos, int B, int T, int H, int KV, int D) {
    const int g = H / KV;
    const real_t scale = (real_t)1 / sqrt((real_t)D);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++)
            for (int t = 0; t < T; t++) {
                const int kvh = hh / g;
                const real_t *qv = q + (((size_t)b * T + t) * H + hh) * D;
                real_t *p = saved + (((size_t)b * H + hh) * T + t) * T;
                const int lo = att_lo(pos, b, T, t);
                real_t mx = -INFINITY;
                for (int s = 0; s < lo; s++) p[s] = 0;
                for (int s = lo; s <= t; s++) {
                    const real_t *kv = k + (((size_t)b * T + s) * KV + kvh) * D;
                    acc_t dot = 0;
                    for (int i = 0; i < D; i++) dot += qv[i] * kv[i];
                    p[s] = dot * scale;
                    if (p[s] > mx) mx = p[s];
                }
                acc_t sum = 0;
                for (int s = lo; s <= t; s++) {
                    p[s] = exp(p[s] - mx);
                    sum += p[s];
                }
                for (int s = lo; s <= t; s++) p[s] /= sum;
                for (int s = t + 1; s < T; s++) p[s] = 0;
                real_t *o = out + (((size_t)b * T + t) * H + hh) * D;
                for (int i = 0; i < D; i++) {
                    acc_t a = 0;
                    for (int s = lo; s <= t; s++) a += p[s] * v[(((size_t)b * T + s) * KV + kvh) * D + i];
                    o[i] = a;
                }
            }
}

static void ref_attention_backward(pt_backend *be, real_t *dq, real_t *dk, real_t *dv, const real_t *dout,
                                   const real_t *q, const real_t *k, const real_t *v, const real_t *out,
                                   const real_t *saved, const int32_t *pos, int B, int T, int H, int KV, int D) {
    const int g = H / KV;
    const real_t scale = (real_t)1 / sqrt((real_t)D);
    // dscores[b,h,t,s] = p * (dp - sum_s' p dp), dp = dout . v
    real_t *ds = pt_aligned_alloc(sizeof(real_t) * (size_t)B * H * T * T);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++)
            for (int t = 0; t < T; t++) {
                const int kvh = hh / g;
                const real_t *p = saved + (((size_t)b * H + hh) * T + t) * T;
                const real_t *go = dout + (((size_t)b * T + t) * H + hh) * D;
                real_t *d = ds + (((size_t)b * H + hh) * T + t) * T;
                const int lo = att_lo(pos, b, T, t);
                acc_t rowdot = 0;
                for (int s = 0; s < lo; s++) d[s] = 0;
                for (int s = lo; s <= t; s++) {
                    const real_t *vv = v + (((size_t)b * T + s) * KV + kvh) * D;
                    acc_t dp = 0;
                    for (int i = 0; i < D; i++) dp += go[i] * vv[i];
                    d[s] = dp;
                    rowdot += p[s] * dp;
                }
                for (int s = lo; s <= t; s++) d[s] = p[s] * (d[s] - rowdot) * scale;
                for (int s = t + 1; s < T; s++) d[s] = 0;
                // dq[t] = sum_s ds[t,s] k[s]
                real_t *gq = dq + (((size_t)b * T + t) * H + hh) * D;
                for (int i = 0; i < D; i++) {
                    acc_t a = 0;
                    for (int s = lo; s <= t; s++) a += d[s] * k[(((size_t)b * T + s) * KV + kvh) * D + i];
                    gq[i] = a;
                }
            }
    // dk[s] = sum_{heads in group} sum_{t>=s, t sees s} ds[t,s] q[t]; dv[s] = sum p[t,s] dout[t]
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int kvh = 0; kvh < KV; kvh++)
            for (int s = 0; s < T; s++) {
                real_t *gk = dk + (((size_t)b * T + s) * KV + kvh) * D;
                real_t *gv = dv + (((size_t)b * T + s) * KV + kvh) * D;
                for (int i = 0; i < D; i++) {
                    acc_t ak = 0, av = 0;
                    for (int hh = kvh * g; hh < (kvh + 1) * g; hh++)
                        for (int t = s; t < T; t++) {
                            if (att_lo(pos, b, T, t) > s) continue;  // s is outside t's document
                            size_t pi = (((size_t)b * H + hh) * T + t) * T + s;
                            size_t qi = (((size_t)b * T + t) * H + hh) * D + i;
                            ak += ds[pi] * q[qi];
                            av += saved[pi] * dout[qi];
                        }
                    gk[i] = ak;
                    gv[i] = av;
                }
            }
    pt_aligned_free(ds);
}

static inline real_t silu(real_t x) { return x / (1 + exp(-x)); }

static void ref_swiglu_forward(pt_backend *be, real_t *out, const real_t *gate, const real_t *up, size_t n) {
    const bool bf16 = be->bf16_casts;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = bf16 ? RB(RB(silu(gate[i])) * up[i]) : silu(gate[i]) * up[i];
}

static void ref_swiglu_backward(pt_backend *be, real_t *dgate, real_t *dup, const real_t *dout, const real_t *gate,
                                const real_t *up, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        real_t x = gate[i];
        real_t sg = 1 / (1 + exp(-x));
        real_t s = x * sg;
        dup[i] = dout[i] * s;
        dgate[i] = dout[i] * up[i] * (sg * (1 + x * (1 - sg)));
    }
}

static void ref_add(pt_backend *be, real_t *out, const real_t *a, const real_t *b, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// Rows are processed in chunks: the chunk's logits/probabilities are the only
// [rows x V] buffer, and dw is accumulated chunk by chunk in row order.
#define XENT_CHUNK 32
static void ref_lm_head_xent(pt_backend *be, double *loss_sum, real_t *dinp, real_t *dw, const real_t *inp,
                             const real_t *w, const int32_t *targets, int N, int C, int V, float scale) {
    real_t *lg = pt_aligned_alloc(sizeof(real_t) * (size_t)XENT_CHUNK * V);
    double *row_loss = pt_calloc(N, sizeof(double));
    for (int n0 = 0; n0 < N; n0 += XENT_CHUNK) {
        int nc = PT_MIN(XENT_CHUNK, N - n0);
#pragma omp parallel for
        for (int r = 0; r < nc; r++) {
            const int n = n0 + r;
            const real_t *x = inp + (size_t)n * C;
            real_t *l = lg + (size_t)r * V;
            for (int vv = 0; vv < V; vv++) l[vv] = dot(x, w + (size_t)vv * C, C);
            if (be->bf16_casts)  // bf16 logits, then HF's logits.float() loss
                for (int vv = 0; vv < V; vv++) l[vv] = RB(l[vv]);
            int t = targets[n];
            if (t < 0) {  // ignored row (-100): no loss, no gradient
                for (int vv = 0; vv < V; vv++) l[vv] = 0;
                continue;
            }
            real_t mx = -INFINITY;
            for (int vv = 0; vv < V; vv++) mx = l[vv] > mx ? l[vv] : mx;
            double se = 0;
            for (int vv = 0; vv < V; vv++) se += exp((double)(l[vv] - mx));
            double lse = (double)mx + log(se);
            row_loss[n] = lse - (double)l[t];
            if (dinp) {
                for (int vv = 0; vv < V; vv++) l[vv] = (real_t)(exp((double)l[vv] - lse)) * scale;
                l[t] -= scale;
                if (be->bf16_casts)  // the gradient flows back through .float(): bf16
                    for (int vv = 0; vv < V; vv++) l[vv] = RB(l[vv]);
            }
        }
        if (!dinp) continue;
        // dinp rows (overwrite) and dw (+=, row order within the chunk)
#pragma omp parallel for
        for (int r = 0; r < nc; r++) {
            real_t *dx = dinp + (size_t)(n0 + r) * C;
            const real_t *l = lg + (size_t)r * V;
            memset(dx, 0, sizeof(real_t) * C);
            for (int vv = 0; vv < V; vv++)
                if (l[vv] != 0) axpy(dx, l[vv], w + (size_t)vv * C, C);
        }
#pragma omp parallel for
        for (int vv = 0; vv < V; vv++) {
            real_t *dwr = dw + (size_t)vv * C;
            for (int r = 0; r < nc; r++) {
                real_t gv = lg[(size_t)r * V + vv];
                if (gv == 0) continue;
                axpy(dwr, gv, inp + (size_t)(n0 + r) * C, C);
            }
        }
    }
    double total = 0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    *loss_sum = total;
    free(row_loss);
    pt_aligned_free(lg);
}

static void ref_round_bf16(pt_backend *be, real_t *dst, const real_t *src, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) dst[i] = RB(src[i]);
}

static void ref_sum_squares(pt_backend *be, double *out, const real_t *g, size_t n) {
    // Fixed blocks summed in order: deterministic for any thread count.
    enum { BLK = 4096 };
    size_t nb = (n + BLK - 1) / BLK;
    double *part = pt_calloc(nb ? nb : 1, sizeof(double));
#pragma omp parallel for
    for (size_t b = 0; b < nb; b++) {
        double s = 0;
        size_t end = PT_MIN(n, (b + 1) * BLK);
        for (size_t i = b * BLK; i < end; i++) s += (double)g[i] * (double)g[i];
        part[b] = s;
    }
    double s = 0;
    for (size_t b = 0; b < nb; b++) s += part[b];
    free(part);
    *out = s;
}

static void ref_scale(pt_backend *be, real_t *x, float s, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void ref_adamw(pt_backend *be, real_t *p, const real_t *g, real_t *m, real_t *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int t) {
    // Same operation order as torch.optim.AdamW (single-tensor path).
    const real_t decay = (real_t)(1.0 - (double)lr * weight_decay);
    const real_t w1 = (real_t)(1.0 - beta1), b2 = beta2, w2 = (real_t)(1.0 - beta2);
    const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    const real_t step_size = (real_t)(lr / bc1);
    const real_t bc2_sqrt = (real_t)sqrt(bc2);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        real_t gi = g[i];
        p[i] *= decay;
        m[i] += w1 * (gi - m[i]);
        v[i] = v[i] * b2 + w2 * (gi * gi);
        real_t denom = sqrt(v[i]) / bc2_sqrt + (real_t)eps;
        p[i] += -step_size * (m[i] / denom);
    }
}

// ---- mixture of experts: one token (or one row) per iteration, each in a fixed order ----

void pt_ref_moe_route(pt_backend *be, real_t *probs, int32_t *sel, real_t *topw, const real_t *logits, int N, int E,
                      int K, bool norm) {
    (void)be;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const real_t *z = logits + (size_t)n * E;
        real_t *p = probs + (size_t)n * E;
        real_t mx = z[0], sum = 0;
        for (int e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
        for (int e = 0; e < E; e++) sum += p[e] = (real_t)exp(z[e] - mx);
        for (int e = 0; e < E; e++) p[e] /= sum;
        int32_t *s = sel + (size_t)n * K;
        real_t *w = topw + (size_t)n * K, tot = 0;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= s[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;  // strict: a tie keeps the lower index
            }
            s[j] = best;
            w[j] = p[best];
            tot += w[j];
        }
        if (norm)
            for (int j = 0; j < K; j++) w[j] /= tot;
    }
}

// Softmax backward through dp[e] = dprob[e] + (the slot j that selected e: its d(weight) through the
// renormalisation, dw_j - sum_i w_i dw_i over the selected mass, or dw_j alone without it).
void pt_ref_moe_route_backward(pt_backend *be, real_t *dlogits, const double *dtopw, const double *dprob,
                               const real_t *probs, const int32_t *sel, const real_t *topw, int N, int E, int K,
                               bool norm) {
    (void)be;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const real_t *p = probs + (size_t)n * E, *w = topw + (size_t)n * K;
        const int32_t *s = sel + (size_t)n * K;
        const double *dw = dtopw + (size_t)n * K;
        double tot = 0, wdw = 0, pdp = 0;
        for (int j = 0; j < K; j++) tot += p[s[j]];
        for (int j = 0; j < K; j++) wdw += dw[j] * (double)w[j];
        for (int pass = 0; pass < 2; pass++)
            for (int e = 0; e < E; e++) {
                double dp = dprob ? dprob[e] : 0;
                for (int j = 0; j < K; j++)
                    if (s[j] == e) dp += norm ? (dw[j] - wdw) / tot : dw[j];
                if (pass == 0) pdp += (double)p[e] * dp;
                else dlogits[(size_t)n * E + e] = (real_t)((double)p[e] * (dp - pdp));
            }
    }
}

void pt_ref_moe_gather(pt_backend *be, real_t *out, const real_t *inp, const int32_t *idx, int R, int C) {
    (void)be;
#pragma omp parallel for
    for (int r = 0; r < R; r++) memcpy(out + (size_t)r * C, inp + (size_t)idx[r] * C, sizeof(real_t) * C);
}

void pt_ref_moe_gather_backward(pt_backend *be, real_t *dinp, const real_t *drows, const int32_t *tok_rows, int N,
                                int K, int C) {
    const bool bf16 = be->bf16_casts;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        real_t *d = dinp + (size_t)n * C;
        memset(d, 0, sizeof(real_t) * C);
        for (int j = 0; j < K; j++) {
            const int k = bf16 ? K - 1 - j : j;  // bf16: autograd's bf16 sum, the highest expert first
            const real_t *v = drows + (size_t)tok_rows[(size_t)n * K + k] * C;
            if (bf16)
                for (int i = 0; i < C; i++) d[i] = RB(d[i] + v[i]);
            else
                for (int i = 0; i < C; i++) d[i] += v[i];
        }
    }
}

void pt_ref_moe_combine(pt_backend *be, real_t *out, const real_t *rows, const real_t *topw, const int32_t *row_w,
                        const int32_t *tok_rows, int N, int K, int C) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        real_t *o = out + (size_t)n * C;
        memset(o, 0, sizeof(real_t) * C);
        for (int k = 0; k < K; k++) {
            const int r = tok_rows[(size_t)n * K + k];
            const real_t w = topw[row_w[r]], *v = rows + (size_t)r * C;
            if (be->bf16_casts)  // HF's index_add_ into a bf16 tensor
                for (int i = 0; i < C; i++) o[i] = RB(o[i] + RB(v[i] * w));
            else
                for (int i = 0; i < C; i++) {
                    const real_t scaled = v[i] * w;
                    o[i] += scaled;
                }
        }
    }
}

void pt_ref_moe_combine_backward(pt_backend *be, real_t *drows, double *dtopw, const real_t *dout, const real_t *rows,
                                 const real_t *topw, const int32_t *row_w, int R, int K, int C) {
    const bool bf16 = be->bf16_casts;
#pragma omp parallel for
    for (int r = 0; r < R; r++) {
        const real_t w = topw[row_w[r]];
        const real_t *g = dout + (size_t)(row_w[r] / K) * C, *v = rows + (size_t)r * C;
        real_t *d = drows + (size_t)r * C;
        double acc = 0;
        if (bf16) {
            for (int i = 0; i < C; i++) {
                d[i] = RB(g[i] * w);
                acc += RB(g[i] * v[i]);
            }
            acc = RB(acc);
        } else {
            for (int i = 0; i < C; i++) {
                d[i] = g[i] * w;
                acc += (double)g[i] * v[i];
            }
        }
        dtopw[row_w[r]] = acc;
    }
}

static const pt_backend_ops cpu_ref_ops = {
    .alloc = ref_alloc,
    .free = ref_free,
    .upload = ref_memcpy,
    .download = ref_memcpy,
    .copy = ref_memcpy,
    .zero = ref_zero,
    .synchronize = ref_sync,
    .destroy = ref_destroy,
    .embedding_forward = ref_embedding_forward,
    .embedding_backward = ref_embedding_backward,
    .matmul_forward = ref_matmul_forward,
    .matmul_backward = ref_matmul_backward,
    .rmsnorm_forward = ref_rmsnorm_forward,
    .rmsnorm_backward = ref_rmsnorm_backward,
    .rope_forward = ref_rope_forward,
    .rope_backward = ref_rope_backward,
    .attention_saved_floats = ref_attention_saved_floats,
    .attention_forward = ref_attention_forward,
    .attention_backward = ref_attention_backward,
    .swiglu_forward = ref_swiglu_forward,
    .swiglu_backward = ref_swiglu_backward,
    .add = ref_add,
    .lm_head_xent = ref_lm_head_xent,
    .sum_squares = ref_sum_squares,
    .scale = ref_scale,
    .adamw = ref_adamw,
    .round_bf16 = ref_round_bf16,
    PT_REF_MOE_OPS
};

pt_backend *pt_backend_cpu_ref_create(void) {
    pt_backend *be = pt_calloc(1, sizeof *be);
    be->name = "cpu-ref";
    be->host_memory = true;
    snprintf(be->device, sizeof be->device, "host CPU (reference kernels, %s)",
             sizeof(real_t) == 8 ? "fp64" : "fp32");
    be->ops = &cpu_ref_ops;
    return be;
}
