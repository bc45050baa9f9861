// The backend interface: every kernel the model needs, plus memory.
//
// The model code (src/model) calls kernels only through this table, so a new
// backend (fast CPU, CUDA, OpenCL) plugs in without model changes. Pointers
// passed to kernels are backend memory from alloc(); the model does pointer
// arithmetic on them but never dereferences them (host <-> backend transfers
// go through upload/download). Shapes are in the comments, row-major.
//
// Gradient kernels ACCUMULATE (+=) into weight gradients and into `dinp`
// unless stated otherwise, so shared inputs (x feeding q/k/v) and gradient
// accumulation need no extra adds; the caller zeroes what it must.
#pragma once
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/common.h"

typedef struct pt_backend pt_backend;

// Run-time compilation of a device backend's kernels (opencl): seconds spent
// building or loading programs, program-cache hits and misses, and
// recompilations (programs built after the first shape-specialised one: a new
// sequence-length bucket). Cumulative since the backend was created.
typedef struct {
    double compile_seconds;
    int cache_hits, cache_misses, recompilations;
} pt_compile_stats;

// One backend's operations: every kernel the model needs, plus memory. Each
// backend defines one static const table of them; the NULL-able entries are
// marked so.
typedef struct pt_backend_ops {
    // ---- memory ----
    void *(*alloc)(pt_backend *be, size_t bytes);  // zero-filled
    void (*free)(pt_backend *be, void *p);
    void (*upload)(pt_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(pt_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(pt_backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(pt_backend *be, void *dst, size_t bytes);
    void (*synchronize)(pt_backend *be);
    void (*destroy)(pt_backend *be);

    // ---- kernels ----
    // out[N,C] = wte[ids[n], :]; a row with ids[n] < 0 (token outside this
    // rank's vocabulary shard, tensor parallel) is zero.
    void (*embedding_forward)(pt_backend *be, real_t *out, const int32_t *ids, const real_t *wte, int N, int C);
    // dwte[ids[n], :] += dout[n, :] (rows with ids[n] < 0 skipped)
    void (*embedding_backward)(pt_backend *be, real_t *dwte, const real_t *dout, const int32_t *ids, int N, int C);

    // out[N,OC] = inp[N,C] @ w[OC,C]^T
    void (*matmul_forward)(pt_backend *be, real_t *out, const real_t *inp, const real_t *w, int N, int C, int OC);
    // dinp[N,C] += dout @ w (skipped when dinp is NULL); dw[OC,C] += dout^T @ inp
    void (*matmul_backward)(pt_backend *be, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                            const real_t *w, int N, int C, int OC);

    // RMSNorm over rows of C: rstd[n] = 1/sqrt(mean(x^2)+eps); out = w * (x * rstd)
    void (*rmsnorm_forward)(pt_backend *be, real_t *out, real_t *rstd, const real_t *inp, const real_t *w, int N,
                            int C, float eps);
    // dinp[N,C] += ...; dw[C] += ...
    void (*rmsnorm_backward)(pt_backend *be, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                             const real_t *w, const real_t *rstd, int N, int C);

    // Rotary embedding, rotate-half convention, on x[B,T,NH,D] with tables
    // cos/sin[T,D] (position t = row t). out may alias inp.
    void (*rope_forward)(pt_backend *be, real_t *out, const real_t *inp, const real_t *cos, const real_t *sin,
                         int B, int T, int NH, int D);
    // dinp = R^T dout (overwrites; may alias dout)
    void (*rope_backward)(pt_backend *be, real_t *dinp, const real_t *dout, const real_t *cos, const real_t *sin,
                          int B, int T, int NH, int D);

    // Causal GQA attention. q[B,T,H,D], k,v[B,T,KV,D] -> out[B,T,H,D];
    // KV head j serves query heads j*(H/KV) .. (j+1)*(H/KV)-1; scale D^-0.5.
    // `saved` holds whatever the backward needs (attention_saved_floats).
    //
    // Document masking (several documents packed in one row): `pos` is backend
    // memory, int32 [B,T], the position of each token inside its document, or
    // NULL. NULL: plain causal attention, query t sees keys 0..t. Non-NULL:
    // query t of row b sees the keys j of row b with
    //     t - pos[b*T+t] <= j <= t
    // (t - pos[b*T+t] is where its document starts in the row); the caller
    // guarantees 0 <= pos[b*T+t] <= t. Masked keys are skipped, never added as
    // exp(-inf) terms, so on cpu-ref and cpu a pos with pos[b*T+t] == t for
    // every t gives results bitwise identical to pos == NULL, and changing the
    // (finite) k or v of another document leaves a document's out bitwise
    // unchanged. The backward takes the same pos as the forward it follows.
    size_t (*attention_saved_floats)(pt_backend *be, int B, int T, int H, int D);
    void (*attention_forward)(pt_backend *be, real_t *out, real_t *saved, const real_t *q, const real_t *k,
                              const real_t *v, const int32_t *pos, int B, int T, int H, int KV, int D);
    // dq, dk, dv are OVERWRITTEN.
    void (*attention_backward)(pt_backend *be, real_t *dq, real_t *dk, real_t *dv, const real_t *dout,
                               const real_t *q, const real_t *k, const real_t *v, const real_t *out,
                               const real_t *saved, const int32_t *pos, int B, int T, int H, int KV, int D);

    // out[n] = silu(gate[n]) * up[n]
    void (*swiglu_forward)(pt_backend *be, real_t *out, const real_t *gate, const real_t *up, size_t n);
    // dgate, dup OVERWRITTEN
    void (*swiglu_backward)(pt_backend *be, real_t *dgate, real_t *dup, const real_t *dout, const real_t *gate,
                            const real_t *up, size_t n);

    // out = a + b (out may alias a)
    void (*add)(pt_backend *be, real_t *out, const real_t *a, const real_t *b, size_t n);

    // Fused lm_head + cross-entropy over rows: logits = inp[N,C] @ w[V,C]^T,
    // loss_n = logsumexp(logits_n) - logits_n[target_n] for target_n != -100.
    // Returns in *loss_sum (host) the sum of loss_n over counted rows. With
    // dinp != NULL: dinp[N,C] is OVERWRITTEN with scale * d(sum loss)/d inp and
    // dw[V,C] += scale * d(sum loss)/dw. Never needs the full [N,V] logits.
    void (*lm_head_xent)(pt_backend *be, double *loss_sum, real_t *dinp, real_t *dw, const real_t *inp,
                         const real_t *w, const int32_t *targets, int N, int C, int V, float scale);

    // ---- mixture of experts (Qwen3-MoE's sparse block; src/model/qwen3_moe.c) ----
    // N tokens, E experts, K experts per token, R = N*K routed rows. Every op
    // is deterministic: each output is computed by one thread in the fixed
    // order written here, so results never depend on the thread count or the
    // schedule (no atomics). Index lists are backend memory, int32.
    //
    // Routing: probs[N,E] = softmax(logits) per row (fp32 as HF's
    // softmax(dtype=float): the row maximum subtracted, exp in double rounded
    // to fp32, the sum in fp32 in expert order); sel[N,K] = the K experts of
    // highest probability by decreasing probability, an exact tie going to
    // the LOWER expert index (torch.topk, sorted); topw[N,K] = their
    // probabilities, divided by their sum (added in slot order) when norm.
    void (*moe_route)(pt_backend *be, real_t *probs, int32_t *sel, real_t *topw, const real_t *logits, int N, int E,
                      int K, bool norm);
    // dlogits[N,E] OVERWRITTEN with d/d(logits) given dtopw[N,K] = d/d(topw)
    // and, optional (NULL: none), dprob[E] = d/d(probs[n,e]) for every token n
    // (the load-balancing loss is linear in the mean probabilities, so its
    // gradient is the same for every token). dtopw and dprob are double, as
    // is the per-token arithmetic; dlogits is rounded once.
    void (*moe_route_backward)(pt_backend *be, real_t *dlogits, const double *dtopw, const double *dprob,
                               const real_t *probs, const int32_t *sel, const real_t *topw, int N, int E, int K,
                               bool norm);
    // out[r,:] = inp[idx[r],:], r < R (rows of C)
    void (*moe_gather)(pt_backend *be, real_t *out, const real_t *inp, const int32_t *idx, int R, int C);
    // dinp[n,:] OVERWRITTEN = sum over k < K of drows[tok_rows[n*K+k],:],
    // added from 0 in k order (tok_rows: each token's K rows, ascending).
    void (*moe_gather_backward)(pt_backend *be, real_t *dinp, const real_t *drows, const int32_t *tok_rows, int N,
                                int K, int C);
    // out[n,:] OVERWRITTEN = sum over k < K, from 0 in k order, of
    // w * rows[r,:] with r = tok_rows[n*K+k] and w = topw[row_w[r]] (row_w[r]
    // = n*K + the top-k slot of row r); each product rounded before the add.
    void (*moe_combine)(pt_backend *be, real_t *out, const real_t *rows, const real_t *topw, const int32_t *row_w,
                        const int32_t *tok_rows, int N, int K, int C);
    // Per row r (token n = row_w[r] / K): drows[r,:] OVERWRITTEN = w *
    // dout[n,:]; dtopw[row_w[r]] OVERWRITTEN = dout[n,:] . rows[r,:]
    // accumulated in double in column order.
    void (*moe_combine_backward)(pt_backend *be, real_t *drows, double *dtopw, const real_t *dout, const real_t *rows,
                                 const real_t *topw, const int32_t *row_w, int R, int K, int C);

    // ---- optimizer ----
    // sum of squares of g[0..n) into *out (host), in a fixed (deterministic) order
    void (*sum_squares)(pt_backend *be, double *out, const real_t *g, size_t n);
    void (*scale)(pt_backend *be, real_t *x, float s, size_t n);
    // PyTorch AdamW (decoupled decay, bias correction, eps outside sqrt), step t >= 1
    void (*adamw)(pt_backend *be, real_t *p, const real_t *g, real_t *m, real_t *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t);

    // ---- bf16 (precision bf16; round_bf16 == NULL: the backend has no bf16 path) ----
    // A bf16 tensor is kept in fp32 storage holding bf16-exact values, so every
    // kernel above works on it unchanged (products of bf16 numbers are exact in
    // fp32; sums accumulate in fp32 as on bf16 units). The model rounds each op's
    // output where Hugging Face's bf16 Qwen3 holds a bf16 tensor. With
    // be->bf16_casts set, the kernels whose PyTorch counterpart rounds INSIDE the
    // op round there too (the other backward kernels never do; the model
    // rounds their activation gradients, weight gradients stay fp32):
    //   rmsnorm_forward: out = bf16(w * bf16(inp * rstd))        (rstd in fp32)
    //   rope_forward:    out = bf16(bf16(x * cos) + bf16(rot(x) * sin))
    //   swiglu_forward:  out = bf16(bf16(silu(gate)) * up)
    //   lm_head_xent:    logits rounded to bf16 before the fp32 softmax/loss
    //                    (HF: logits.float()); d(logits) rounded to bf16 before
    //                    both matmuls of the backward.
    //   moe_combine:     each product rounded to bf16 and the running sum
    //                    rounded after each add (HF: index_add_ of the bf16
    //                    product into a bf16 zeros tensor, expert by expert).
    //   moe_combine_backward: drows = bf16(w * dout); dtopw = bf16 of the sum
    //                    (in double) of the products dout[c] * rows[c], each
    //                    rounded to bf16 (autograd's bf16 mul, then its sum).
    //   moe_gather_backward: the K rows added from the LAST (k = K-1) to the
    //                    first, each partial sum rounded (autograd accumulates
    //                    the experts' bf16 gradients, the highest expert first).
    // dst[i] = src[i] rounded to the nearest bf16 (ties to even; NaN stays NaN,
    // +-inf stay), in fp32 storage. dst may alias src.
    void (*round_bf16)(pt_backend *be, real_t *dst, const real_t *src, size_t n);
    // Optional fast path (NULL: the model calls matmul_forward/backward on the
    // bf16-exact fp32 operands). pack_bf16: dst[i] = the bf16 bits of src[i]
    // (src bf16-exact, so lossless). matmul_*_bf16: the contracts of
    // matmul_forward/backward with bf16-exact operands, w16 = pack_bf16(w), on
    // the backend's bf16 units (AMX, tensor cores) with fp32 accumulation.
    void (*pack_bf16)(pt_backend *be, uint16_t *dst, const real_t *src, size_t n);
    void (*matmul_forward_bf16)(pt_backend *be, real_t *out, const real_t *inp, const real_t *w, const uint16_t *w16,
                                int N, int C, int OC);
    void (*matmul_backward_bf16)(pt_backend *be, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                                 const real_t *w, const uint16_t *w16, int N, int C, int OC);
    // lm_head_xent (with the bf16 casts above) given also w16 = pack_bf16(w).
    void (*lm_head_xent_bf16)(pt_backend *be, double *loss_sum, real_t *dinp, real_t *dw, const real_t *inp,
                              const real_t *w, const uint16_t *w16, const int32_t *targets, int N, int C, int V,
                              float scale);

    // ---- optional (NULL when the backend has nothing to report) ----
    void (*compile_stats)(pt_backend *be, pt_compile_stats *out);
} pt_backend_ops;

// One backend instance: its operations, its own state and the flags its
// caller sets.
struct pt_backend {
    const pt_backend_ops *ops;
    const char *name;
    char device[256];   // human-readable device description
    void *impl;         // backend-private state
    bool host_memory;   // backend pointers are ordinary host memory (CPU backends)
    // The backend's native queue (cudaStream_t for cuda), NULL for host
    // backends: device collectives (NCCL, src/dist) are ordered on it.
    void *stream;

    // ---- set by the caller before the first kernel; the kernels read them ----
    // Set by the model (precision bf16); see "bf16" in pt_backend_ops.
    bool bf16_casts;
    // fp32 GEMMs on TF32 tensor cores (cuda; HF TrainingArguments' --tf32):
    // set by the CLI; backends without TF32 ignore it.
    bool tf32;
};

// "cpu-ref", "cpu", "opencl[:PLATFORM[:DEVICE]]", "cuda[:DEVICE]", "cuda-sim"
// (indices as listed by pt_backend_print_devices). NULL + error if unknown or unavailable.
pt_backend *pt_backend_create(const char *spec);
// Cheap availability check of a built backend without creating it (cuda:
// counts devices, no GPU context; opencl: the platform and device exist, no
// context): 0, or -1 + the error create would give for a missing device.
// Other backends: 0 (create tells).
int pt_backend_probe(const char *spec);
void pt_backend_destroy(pt_backend *be);
// Comma-separated list of the backends compiled in.
const char *pt_backend_list(void);
// The error for a spec naming no backend of this build (-1): an unknown name with the nearest known one,
// or a known backend this build left out, with the ones it has.
int pt_backend_unknown(const char *spec);
// openblas_get_config() when the fast cpu backend (OpenBLAS) is compiled in, else NULL.
const char *pt_backend_blas_config(void);

// `portatrain devices`: every backend of this build and each device it finds
// (one line each; "no OpenCL platform" when there is none).
void pt_backend_print_devices(FILE *f);

pt_backend *pt_backend_cpu_ref_create(void);
