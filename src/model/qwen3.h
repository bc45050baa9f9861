// Qwen3 dense decoder: parameter layout, forward and backward over the
// backend interface (src/backend/backend.h). Mirrors transformers'
// modeling_qwen3.py with eager attention.
//
// Parameters, gradients and AdamW moments each live in ONE contiguous
// backend buffer; tensors are views at fixed offsets (qwen3_param_info).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/config.h"

// Tensor kinds within a layer, in HF state-dict order.
enum {
    P_INPUT_NORM, P_Q, P_K, P_V, P_O, P_Q_NORM, P_K_NORM, P_POST_NORM, P_GATE, P_UP, P_DOWN, P_LAYER_COUNT
};
// The sparse MoE block of a Qwen3-MoE layer (in place of P_GATE, P_UP, P_DOWN): the router, then each
// expert's gate/up/down in HF's per-expert names (model.layers.L.mlp.experts.E.gate_proj.weight, ...).
enum { P_ROUTER = P_LAYER_COUNT, P_EXPERT_GATE, P_EXPERT_UP, P_EXPERT_DOWN };

typedef struct {
    char name[96];     // HF state-dict name
    int ndim;
    int64_t shape[2];  // [out, in] for linears; [n, 1] for 1-D tensors (a row is shape[1] values)
    size_t offset;     // in elements, into the parameter buffer
    size_t numel;
    int layer;         // -1 for embed/final norm/lm_head
    int kind;          // P_* within a layer, -1 otherwise
    int expert;        // the expert of a P_EXPERT_* tensor, 0 otherwise
} qwen3_param_info;

typedef struct {
    real_t *input_norm, *q, *k, *v, *o, *q_norm, *k_norm, *post_norm, *gate, *up, *down;
} qwen3_layer_params;

// Saved activations of one layer (N = B*T rows).
typedef struct {
    real_t *res_in;      // [N,C] residual stream entering the layer
    real_t *ln1, *ln1_rstd;   // [N,C], [N]
    real_t *q_raw, *k_raw;    // [N,H*D], [N,KV*D] projections before q/k norm
    real_t *q_rstd, *k_rstd;  // [N*H], [N*KV]
    real_t *q, *k, *v;        // [N,H*D], [N,KV*D], [N,KV*D]: q,k after norm + RoPE
    real_t *att_saved;        // backend-defined
    real_t *att_out;          // [N,H*D]
    real_t *res_mid;          // [N,C] residual after attention
    real_t *ln2, *ln2_rstd;   // [N,C], [N]
    real_t *gate, *up, *act;  // [N,I]
} qwen3_layer_acts;

typedef struct qwen3_model qwen3_model;

// Hooks through which a parallel runtime (src/dist) joins the model without
// the model knowing about communicators. NULL on a single process.
//
// Tensor parallel (tp_size > 1): the model holds its rank's shard (heads,
// intermediate columns, vocabulary rows [vocab_start, vocab_start + local
// vocab)); the model maps token ids into the shard and calls tp_allreduce on
// the partial sums of the row-parallel matmuls (forward) and of d(input) of
// the column-parallel ones (backward), and tp_lm_head_xent instead of
// be->ops->lm_head_xent (targets: local index, -1 = counted but in another shard,
// -100 = ignored).
//
// Parameter units (FSDP): unit 0 = embedding, 1..L = layers, L+1 = head (final
// norm, untied lm_head). gather(u) is called before the model reads unit u's
// parameters, grads_ready(u) once a micro-batch's gradient of unit u is
// complete (after its last use in backward).
typedef struct qwen3_parallel {
    int tp_size, tp_rank;
    int vocab_start, vocab_global;
    void *ctx;
    void (*tp_allreduce)(void *ctx, real_t *x, size_t n);
    void (*tp_lm_head_xent)(void *ctx, double *loss_sum, real_t *dinp, real_t *dw, const real_t *inp,
                            const real_t *w, const int32_t *targets, int N, int C, int V, float scale);
    void (*gather)(void *ctx, qwen3_model *m, int unit);
    void (*grads_ready)(void *ctx, qwen3_model *m, int unit);
    // Qwen3-MoE. moe_data_sum: in-place sums of n doubles over the data ranks (fsdp x dp with this TP
    // coordinate), in rank order, so that the load-balancing loss is that of the GLOBAL micro-batch (the
    // routed counts, the probability sums and the tokens). tp_sum_f64: the same over the TP group (the
    // routing-weight gradient dy . eout of the TP-partial expert outputs). NULL: no such group.
    void (*moe_data_sum)(void *ctx, double *x, int n);
    void (*tp_sum_f64)(void *ctx, double *x, int n);
    // Expert parallelism (ep_size > 1): EP rank ep_rank owns experts [ep_rank x E/ep_size, ... + E/ep_size)
    // (the views of the others are NULL); ep_alltoallv exchanges bytes within the EP group (block r of send
    // to rank r, rank r's block for this rank at block r of recv).
    int ep_size, ep_rank;
    void (*ep_alltoallv)(void *ctx, const void *send, const size_t *send_bytes, void *recv,
                         const size_t *recv_bytes);
} qwen3_parallel;

struct qwen3_model {
    qwen3_config cfg;
    pt_backend *be;
    const qwen3_parallel *par;  // NULL: a single process

    int num_tensors;
    qwen3_param_info *tensors;
    size_t num_params;
    real_t *params;   // backend memory [num_params]
    real_t *grads;    // backend memory [num_params], NULL until qwen3_alloc_grads

    // views into params / grads
    real_t *embed, *final_norm, *lm_head;  // lm_head == embed when tied
    qwen3_layer_params *layers, *dlayers;
    real_t *dembed, *dfinal_norm, *dlm_head;

    // activations for up to max_B x max_T
    int max_B, max_T;
    qwen3_layer_acts *acts;
    real_t *res_final;            // [N,C] stream after the last layer
    real_t *lnf, *lnf_rstd;       // [N,C], [N]
    real_t *rope_cos, *rope_sin;  // [max_T, D]
    real_t *host_rope_cos, *host_rope_sin;  // [max_T, D] host copies (fp32) for per-token positions
    // Per-token positions (qwen3_set_positions): the next forward's host
    // positions, and the backend copies of the current one: positions [N] for
    // the document-masked attention and their RoPE rows pos_cos/pos_sin [N,D].
    const int32_t *next_pos;
    int use_pos;
    int32_t *pos;
    real_t *pos_cos, *pos_sin;
    real_t *host_pos_cos, *host_pos_sin;  // [N,D] host scratch for gathering those rows
    int32_t *ids, *targets;       // backend copies [N]
    // backward scratch
    real_t *d_res, *d_ln, *d_q, *d_k, *d_v, *d_att, *d_qn, *d_kn, *d_gate, *d_up, *d_act;
    real_t *act_memory;           // the single activation allocation
    size_t act_bytes;             // its bytes + the MoE blocks' buffers (qwen3_activation_bytes)
    int32_t *host_ids, *host_targets;  // [N] host scratch: ids mapped into the vocabulary shard
    int ac_policy, ac_every;      // activation checkpointing (qwen3_set_activation_checkpointing)
    // Precision bf16 (qwen3_set_precision): `params` stay the fp32 master
    // weights; the views above point into `wparams`, their bf16-rounded copy
    // (refreshed before a forward after qwen3_params_changed), and `wpacked`
    // holds it as packed bf16 for backends with bf16 matmuls (else NULL).
    int bf16;
    real_t *wparams;
    uint16_t *wpacked;
    int wparams_stale;
    // Qwen3-MoE: the sparse blocks' routing and activations (model/qwen3_moe.h); NULL for a dense model.
    struct qwen3_moe *moe;
    // [num_tensors]: the views of the MoE tensors (router, experts), set like the per-layer views above
    // (bind_views, qwen3_bind_unit); NULL for the others.
    real_t **tparams, **tgrads;
};

// "fp32" (default) or "bf16": bf16 weights and activations where Hugging
// Face's bf16 Qwen3 holds bf16 tensors, fp32 accumulation, norm statistics,
// softmax and loss, fp32 master weights and gradients. Before the activations
// are allocated; single process (not under TP/FSDP).
int qwen3_set_precision(qwen3_model *m, const char *precision);
// Call after anything writes m->params (optimizer step, loading): under bf16
// the working copy is re-rounded before the next forward.
void qwen3_params_changed(qwen3_model *m);

// Activation checkpointing policies. FULL: a layer keeps only its input and is
// recomputed in backward; SELECTIVE: every Nth layer (layers N-1, 2N-1, ...)
// is FULL, the others keep everything; OP: a layer keeps its matmul outputs and
// attention results, and the norms, RoPE and SwiGLU are recomputed. The
// recomputation runs the same kernels on the same inputs, so results are
// bitwise those of NONE.
enum { QWEN3_AC_NONE = 0, QWEN3_AC_FULL = 1, QWEN3_AC_SELECTIVE = 2, QWEN3_AC_OP = 3 };
struct qwen3_model;
int qwen3_set_activation_checkpointing(struct qwen3_model *m, int policy, int every);
// --activation-checkpointing none | full | selective[:every=N] | op: the policy and SELECTIVE's layer frequency.
int qwen3_parse_activation_checkpointing(const char *s, int *policy, int *every);
// The policy that applies to one layer (NONE, FULL or OP).
int qwen3_layer_ac_mode(const struct qwen3_model *m, int layer);

// Builds the parameter layout and allocates parameters (zeroed) on `be`.
int qwen3_create(qwen3_model *m, const qwen3_config *cfg, pt_backend *be);
// The same layout without allocating parameters: a parallel runtime binds
// each unit's views to its own buffers (qwen3_bind_unit).
int qwen3_create_layout(qwen3_model *m, const qwen3_config *cfg, pt_backend *be);
void qwen3_free(qwen3_model *m);
int qwen3_num_units(const qwen3_model *m);
int qwen3_tensor_unit(const qwen3_model *m, const qwen3_param_info *t);
// Elements [*offset, *offset + *count) of the parameter buffer that unit u spans.
void qwen3_unit_range(const qwen3_model *m, int unit, size_t *offset, size_t *count);
// Points the views of unit u's tensors (params and, if grads_base, grads) at
// buffers laid out like the unit's range of the parameter buffer.
void qwen3_bind_unit(qwen3_model *m, int unit, real_t *params_base, real_t *grads_base);
void qwen3_alloc_grads(qwen3_model *m);
// Allocates activations for batches up to B x T (re-allocates when larger).
int qwen3_alloc_activations(qwen3_model *m, int B, int T);
// Bytes of that activation allocation (S = the backend's attention_saved_floats) under an activation
// checkpointing policy (QWEN3_AC_*, every: SELECTIVE's layer frequency): the same carving as the allocation,
// plus a Qwen3-MoE model's sparse-block buffers for B x T tokens under expert parallelism over ep ranks (1:
// none; they are allocated on the first forward, host and backend together). m->act_bytes is the same sum.
size_t qwen3_activation_bytes(const qwen3_config *cfg, int B, int T, size_t S, int ac_policy, int ac_every, int ep);
const qwen3_param_info *qwen3_find_tensor(const qwen3_model *m, const char *name);
// Whether a tensor gets weight decay (HF Trainer: not norms or biases).
int qwen3_tensor_decays(const qwen3_param_info *t);

// Positions of the NEXT forward (or forward + backward) only: host [B,T], the
// position of each token inside its document (0 at a document's start, then
// +1 per token; TorchTitan's and HF's packed position_ids). Attention is then
// masked per document (a token sees only earlier tokens of its document) and
// RoPE uses these positions. NULL (and every forward without a call): row t
// has position t, one causal sequence per row. The pointer must stay valid
// until that forward returns; it is checked there (an error names the token).
void qwen3_set_positions(qwen3_model *m, const int32_t *pos);

// Forward on ids[B,T] (host). With targets (host, -100 = ignore) returns the
// summed token loss in *loss_sum and the count in *num_targets; `logits_out`
// (host [B,T,V]) is filled when non-NULL.
int qwen3_forward(qwen3_model *m, const int32_t *ids, const int32_t *targets, int B, int T, double *loss_sum,
                  int *num_targets, float *logits_out);
// Forward + backward: grads += loss_scale * d(loss_sum)/d(params) (grads are
// NOT zeroed, so micro-batches accumulate).
// loss_scale is 1/(targets in the whole optimizer step) for the mean loss.
int qwen3_forward_backward(qwen3_model *m, const int32_t *ids, const int32_t *targets, int B, int T,
                           float loss_scale, double *loss_sum, int *num_targets);

// Random init: normal(0, initializer_range) for linear/embedding weights, ones
// for norms, from Philox indexed by (seed, tensor name, element).
void qwen3_init_weights(qwen3_model *m, uint64_t seed);

// FLOPs of one training step per token (6*N_matmul + attention), for MFU.
double qwen3_train_flops_per_token(const qwen3_config *cfg, int T);
