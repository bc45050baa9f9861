// The parallel runtime: a rank's share of a TP x FSDP x DP training job.
//
// It owns the communicators of the mesh (dist/mesh.h), the rank's TP-local
// model (model/qwen3.h, joined through qwen3_parallel hooks), and the rank's
// shards of parameters, gradients and AdamW moments (dist/mesh.h's plan).
// With fsdp 1 the shards are the local model's own buffers; with fsdp > 1
// the model holds no parameters: before a unit (embedding, a layer, the head)
// runs, its shards are all-gathered into a working slot (one per kind of
// unit, reused layer after layer), and once its gradient is complete it is
// reduce-scattered into the gradient shards and the slot is cleared (ZeRO-3).
// Data parallel replicas all-reduce the gradient shards once per step.
#pragma once
#include <cjson/cJSON.h>

#include "dist/comm.h"
#include "dist/mesh.h"
#include "io/checkpoint.h"
#include "model/qwen3.h"

typedef struct pt_parallel pt_parallel;

// Splits the mesh's communicators and plans this rank's shards. The
// configuration errors (layout vs world size, heads vs tp) come back as -1 +
// error on every rank (the caller prints on rank 0 only).
pt_parallel *pt_parallel_create(pt_comm *world, const pt_mesh *mesh, const qwen3_config *global, pt_backend *be);
void pt_parallel_free(pt_parallel *P);

qwen3_model *pt_parallel_model(pt_parallel *P);
const pt_mesh *pt_parallel_mesh(const pt_parallel *P);
int pt_parallel_rank(const pt_parallel *P);
int pt_parallel_world(const pt_parallel *P);
pt_comm *pt_parallel_world_comm(pt_parallel *P);
// The data-parallel position of this rank (fsdp x dp ranks read different rows).
int pt_parallel_data_rank(const pt_parallel *P);
int pt_parallel_data_world(const pt_parallel *P);
// The data-parallel group of this rank (ranks with the same TP coordinate).
pt_comm *pt_parallel_data_comm(pt_parallel *P);
// The sum over data-parallel ranks, in rank order (identical on every rank).
double pt_parallel_data_sum(pt_parallel *P, double local);
const pt_plan *pt_parallel_plan(const pt_parallel *P);
// Bytes of parameters + gradients + moments + working slots this rank holds.
size_t pt_parallel_state_bytes(const pt_parallel *P);

// Start-up, a block of rows of one global tensor at a time (hf_model_stream_weights): keeps this rank's part
// of rows [row0, row0 + nrows) of tensor `name` (HF name; `rows`: those global fp32 rows, row-major, host
// memory), so no rank ever holds the whole model, nor a whole tensor; -1 + error for a name the model lacks.
// Then pt_parallel_load_done, once every tensor has passed.
int pt_parallel_load_tensor(pt_parallel *P, const char *name, int64_t row0, int64_t nrows, const float *rows);
void pt_parallel_load_done(pt_parallel *P);

void pt_parallel_zero_grads(pt_parallel *P);
// After the step's micro-batches: TP-partial norm gradients (fsdp 1) and the
// data-parallel all-reduce.
void pt_parallel_finish_grads(pt_parallel *P);
// Global L2 norm of the gradient (fp64, fixed order; the same on every rank).
double pt_parallel_grad_norm(pt_parallel *P);
void pt_parallel_clip(pt_parallel *P, double total_norm, double max_norm);
// AdamW on the shards (t = the step count after this update); weight decay on
// HF's groups (norm weights excluded) unless decay_all (TorchTitan's default).
void pt_parallel_adamw(pt_parallel *P, float lr, float beta1, float beta2, float eps, float wd, bool decay_all, int t);
// Whether weights and moments are all finite (on every rank).
int pt_parallel_all_finite(pt_parallel *P, int include_moments);

// Sharded checkpoint: every rank writes its own slices (replicas once).
// PT_PARALLEL_NONFINITE (nothing written) when weights or moments are not finite.
#define PT_PARALLEL_NONFINITE (-2)
int pt_parallel_save(pt_parallel *P, const char *output_dir, long step, const cJSON *state, int keep_last,
                     ckpt_save_stats *stats);
// Reads this rank's boxes from a checkpoint of any layout.
int pt_parallel_load_ckpt(pt_parallel *P, ckpt *c);
// Gathers the full model to rank 0, which writes the HF model directory.
int pt_parallel_save_hf(pt_parallel *P, const char *dir);
