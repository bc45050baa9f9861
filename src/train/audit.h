// --audit-dump DIR: what accept's step-1 audit compares between platforms (docs/ACCEPT.md, "The step-1
// audit"). After step 1's backward, before clipping and the optimizer: the loss, per parameter tensor (HF
// names) the gradient's L2 norm, sum and PT_AUDIT_PROJ projections on fixed Philox +-1 vectors, the full
// gradient of tensors up to PT_AUDIT_FULL_NUMEL elements (DIR/grads.safetensors), and per layer the RMS,
// mean and max-abs of the residual stream and norm outputs. After each of the first PT_AUDIT_STEPS optimizer
// steps (fewer when the run has fewer): per tensor the parameter delta's L2 norm and projections.
// DIR/audit.json is written once those steps are recorded. A single fresh process only: a parallel job or a
// resumed run writes an audit.json that says what it does not cover ("covered": false, "reason").
#pragma once
#include "train/trainer_ctx.h"

#define PT_AUDIT_PROJ 4
#define PT_AUDIT_STEPS 3
#define PT_AUDIT_FULL_NUMEL 65536
#define PT_AUDIT_FORMAT "portatrain-audit-1"

typedef struct pt_audit pt_audit;

// *out NULL when --audit-dump is not given (or not on rank 0). 0, or -1 with the error set.
int pt_audit_open(pt_trainer *t, pt_audit **out);
// step is 1-based; row_len the step's row length. Each 0, or -1 with the error set (the dump could not be
// written); a NULL au does nothing.
int pt_audit_after_backward(pt_audit *au, pt_trainer *t, long step, int row_len, double loss, double grad_norm);
int pt_audit_after_update(pt_audit *au, pt_trainer *t, long step);
void pt_audit_free(pt_audit *au);

// The +-1 vector k of a tensor's projections: sign bit i of Philox blocks keyed by the tensor's name.
// sums[k] += sum_i x[i] * s_k(i) for i in [0, n).
void pt_audit_project(const char *name, const float *x, size_t n, double sums[PT_AUDIT_PROJ]);
