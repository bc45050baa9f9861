// The device mesh (TP x FSDP x DP), rank placement, and the shard plan: which
// box of every global tensor a rank holds. Pure functions of the model config
// and the layout (no communication), so `portatrain topo` computes exactly
// what a run will allocate and move.
//
// Placement: `order` lists the mesh dimensions innermost first (default
// tp,fsdp,dp). Consecutive world ranks differ in the innermost dimension, and
// launchers fill a node's slots with consecutive ranks, so the innermost
// groups (TP by default) stay inside a node.
//
// Tensor parallel shards (Megatron): q/k/v and gate/up split their output rows,
// o and down their input columns, embed_tokens and an untied lm_head their
// vocabulary rows (ceil(V/tp) per rank, the last rank the rest); the
// attention heads split as num_attention_heads/tp and num_key_value_heads/tp
// (both must divide: KV heads are never replicated); norms are replicated.
// FSDP then splits each TP-local tensor along its first dimension into
// ceil(rows/fsdp) rows per rank (zero-padded), like TorchTitan's FSDP2.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"

enum { PT_DIM_TP = 0, PT_DIM_FSDP = 1, PT_DIM_DP = 2 };

typedef struct {
    int tp, fsdp, dp;  // world = tp * fsdp * dp
    int order[3];      // dims innermost first
    // Qwen3-MoE expert parallelism, borrowed from the data ranks (TorchTitan's EP over the data-parallel
    // dimension): data rank d = dp index x fsdp + fsdp index (the same TP coordinate) belongs to EP group
    // d / ep as EP rank d % ep, which owns experts [(d % ep) x E/ep, (d % ep + 1) x E/ep). 1: none.
    int ep;
} pt_mesh;

// The layout of `world` ranks from the flags, 0 for an unset one, as train runs it: tp and fsdp default to 1;
// an unset dp takes what tp x fsdp leave of the world (with none set, all of it: plain data parallel), and an
// unset fsdp what tp x dp leave when both are set. order: "tp,fsdp,dp" (NULL: that). The result is not checked
// against the world (pt_mesh_validate). -1 + error on a bad order.
int pt_mesh_resolve(int world, int tp, int fsdp, int dp, const char *order, pt_mesh *m);
// Parses "tp,fsdp,dp" (any permutation). -1 + error on anything else.
int pt_mesh_parse_order(const char *s, int order[3]);
void pt_mesh_order_str(const pt_mesh *m, char *buf, size_t n);
int pt_mesh_world(const pt_mesh *m);
// Checks world == tp*fsdp*dp and that the model splits over tp.
int pt_mesh_validate(const pt_mesh *m, int world, const qwen3_config *cfg);
// coord[PT_DIM_*] of a world rank, and back.
void pt_mesh_coords(const pt_mesh *m, int rank, int coord[3]);
int pt_mesh_rank(const pt_mesh *m, const int coord[3]);

typedef struct {
    char name[96];
    int ndim;
    int64_t gshape[2];             // global (HF) shape; 1-D: [n, 1]
    int64_t loff[2], lshape[2];    // the TP-local tensor: a box of the global one
    int64_t chunk;                 // FSDP rows per rank (ceil(lshape[0] / fsdp))
    int64_t soff[2], sshape[2];    // this rank's shard: a box of the global tensor (may have 0 rows)
    size_t shard_offset;           // into the rank's shard buffers (elements)
    size_t shard_count;            // chunk * lshape[1], the padded shard (gather block)
    size_t model_offset;           // into the TP-local model's parameter layout
    int unit;                      // qwen3 parameter unit (model/qwen3.h)
    int tp_replicated;             // the same values on every TP rank (norms)
    int tp_partial_grad;           // and each TP rank sees only its heads' gradient (q_norm, k_norm)
    int ep_expert;                 // an expert's tensor under EP: whole (TP-local) on its owner, absent elsewhere,
                                   // stored after every unit's shards (not FSDP-sharded, never gathered)
    int decays;
} pt_plan_tensor;

typedef struct {
    qwen3_config global, local;    // local: this TP rank's shapes (heads, intermediate, vocab)
    int tp, tp_rank, fsdp, fsdp_rank;
    int ep, ep_rank;               // expert parallelism (1, 0: none)
    size_t expert_offset;          // ep > 1: where the owned experts' tensors start in the shard buffers
    int vocab_start;
    int nt;
    pt_plan_tensor *t;
    size_t shard_numel;            // the shard buffers' length
    size_t local_numel;            // the TP-local model's parameter buffer length
    int nunits;
    size_t *unit_shard_off, *unit_shard_cnt;  // per unit: range in the shard buffers
    size_t *unit_model_off, *unit_model_cnt;  // per unit: range in the local model layout
} pt_plan;

int pt_plan_build(pt_plan *p, const qwen3_config *global, int tp, int tp_rank, int fsdp, int fsdp_rank);
// The same with expert parallelism: EP rank ep_rank of ep owns its experts' tensors whole.
int pt_plan_build_ep(pt_plan *p, const qwen3_config *global, int tp, int tp_rank, int fsdp, int fsdp_rank, int ep,
                     int ep_rank);
// Whether the model holds no parameters and units are gathered (fsdp > 1, or expert parallelism).
int pt_plan_sharded(const pt_plan *p);
void pt_plan_free(pt_plan *p);
// The local config of TP rank r (vocab rows start at *vocab_start).
int pt_plan_local_config(const qwen3_config *g, int tp, int r, qwen3_config *local, int *vocab_start);

// Working memory of FSDP (elements): the slot of each kind of unit
// (embedding, layer, head; params and grads each) and the gather staging.
// All zero when fsdp is 1.
void pt_plan_slots(const pt_plan *p, size_t slots[3], size_t *staging, size_t *recv);
// Elements a unit of one tensor gathers straight into its slot (no staging).
int pt_plan_unit_direct(const pt_plan *p, int unit);

// Bytes a rank's collectives move in one optimizer step (pt_comm counters'
// units), by group: predicted from the plan, the local batch (rows x seq
// tokens per micro-batch), the accumulation steps and the number of layers
// activation checkpointing recomputes in backward (QWEN3_AC_FULL layers).
//
// Expert parallelism: ep_allreduce sums the owned experts' gradients over the
// data ranks that own the same experts (counted as allreduce). The token
// all-to-all depends on routing: per sparse layer and micro-batch a rank sends
// the routed counts (E int32), its N x K rows out and, in backward, their
// gradients out (exact), and the rows its experts received back, twice (forward
// outputs, backward d(x)). ep_alltoall is the expectation under uniform routing
// (each row on EP rank e with probability 1/ep: N x K rows received); it is
// also exactly the mean over an EP group's ranks, whose received rows sum to
// what they sent. ep_alltoall_min is the routing-independent part (nothing
// received), ep_alltoall_max the worst case (every rank of the group sends this
// rank min(K, E/ep) rows per token).
typedef struct {
    double tp_allreduce, tp_allgather, fsdp_allgather, fsdp_reduce_scatter, dp_allreduce;
    double ep_allreduce, ep_alltoall, ep_alltoall_min, ep_alltoall_max;
} pt_step_bytes;
void pt_plan_step_bytes(const pt_plan *p, const pt_mesh *mesh, long tokens_per_micro, int accum,
                        int recomputed_layers, pt_step_bytes *out);
