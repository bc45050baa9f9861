// The sparse MoE block of Qwen3-MoE (transformers' Qwen3MoeSparseMoeBlock) and its load-balancing loss
// (load_balancing_loss_func), forward and backward over the backend interface.
//
// Routing, gather and combine are backend ops (backend.h, "mixture of experts"): the router logits (a
// backend matmul) -> softmax in fp32, top-k with ties to the lower expert index (torch.topk, sorted),
// optional renormalisation. Only the selected experts come back to the host, which counts the rows per
// expert and builds the index lists: tokens gathered by expert (experts ascending, tokens ascending within
// an expert), each expert's SwiGLU MLP as backend matmuls on its rows, the outputs combined per token in
// that fixed order (HF's index_add_ over the experts hit, ascending), so results are bitwise reproducible.
//
// The block keeps its own activations for every sparse layer (not subject to activation checkpointing:
// a recomputed layer reuses them), allocated on the first forward of a larger batch.
#pragma once
#include "model/qwen3.h"

typedef struct qwen3_moe qwen3_moe;

// Bytes of the block's own buffers for N tokens per forward under expert parallelism over ep ranks (1:
// none), on the host and on the backend: every sparse layer's routing and activations and the shared scratch.
void qwen3_moe_buffer_bytes(const qwen3_config *c, int N, int ep, size_t *host, size_t *backend);
// Under expert parallelism the buffers above are the balanced-routing size; a rank whose experts receive more
// rows grows them, by at most this (every rank of the group routing all it can to one rank).
size_t qwen3_moe_ep_growth_bytes(const qwen3_config *c, int N, int ep);
// qwen3.c's linear layer and bf16 cast, shared with the sparse block: under precision bf16 the matmuls read
// the working weights (packed where the backend has bf16 matmuls) and cast rounds a bf16 tensor in place;
// in fp32 they are matmul_forward / matmul_backward and a no-op.
void qwen3_linear_forward(qwen3_model *m, real_t *out, const real_t *inp, const real_t *w, int N, int C, int OC);
void qwen3_linear_backward(qwen3_model *m, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                           const real_t *w, int N, int C, int OC);
void qwen3_cast(qwen3_model *m, real_t *x, size_t n);

// Called by qwen3_create for a config with moe set.
int qwen3_moe_create(qwen3_model *m);
void qwen3_moe_free(qwen3_model *m);
// out[N,C] = the sparse block of layer l on x[N,C] (backend memory; out overwritten).
int qwen3_moe_forward(qwen3_model *m, int l, const real_t *x, real_t *out, int N);
// After all layers' forward: the load-balancing loss over the batch (0 without sparse layers).
void qwen3_moe_finish_forward(qwen3_model *m, int N);
// dx[N,C] = d(out)/d(x) . dy (OVERWRITTEN); the layer's router and expert gradients accumulate. With
// output_router_logits, the gradient of router_aux_loss_coef x aux_scale x the load-balancing loss is
// added too (routing through the router logits, as autograd does in HF).
void qwen3_moe_backward(qwen3_model *m, int l, real_t *dx, const real_t *dy, const real_t *x, int N, float aux_scale);
// The load-balancing loss of the last forward (without router_aux_loss_coef), as HF's aux_loss; 0 when
// output_router_logits is false.
double qwen3_moe_aux_loss(const qwen3_model *m);
// Tokens routed to each expert by sparse layer l in the last forward (counts[num_experts]); -1 if l is dense.
int qwen3_moe_expert_load(const qwen3_model *m, int l, int *counts);
// The block output of sparse layer l in the last forward (before the residual add), recombined from the kept
// expert outputs (bitwise the forward's), into out[N,C] (host); -1 if l is dense or no forward ran.
int qwen3_moe_block_output(qwen3_model *m, int l, real_t *out);
