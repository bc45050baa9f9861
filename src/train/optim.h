// AdamW over the model's contiguous buffers, with global-norm clipping.
#pragma once
#include <stdbool.h>

#include "model/qwen3.h"

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    // false: HF Trainer's groups (weight decay on matrices only, not on norm weights; Qwen3 has no biases);
    // true: on every parameter, as TorchTitan's default AdamW (one group).
    bool decay_all;
} pt_adamw_hparams;

typedef struct {
    qwen3_model *model;
    real_t *m, *v;  // backend memory, same layout as params
    int t;          // steps taken
} pt_adamw;

void pt_adamw_init(pt_adamw *opt, qwen3_model *model);
void pt_adamw_free(pt_adamw *opt);
// Global L2 norm of all gradients (fp64 sum in a fixed order).
double pt_grad_global_norm(qwen3_model *model);
// torch.nn.utils.clip_grad_norm_: grads *= min(1, max_norm / (norm + 1e-6)).
void pt_clip_grads(qwen3_model *model, double total_norm, double max_norm);
// One AdamW step; norms are excluded from weight decay unless h->decay_all.
void pt_adamw_step(pt_adamw *opt, const pt_adamw_hparams *h);
