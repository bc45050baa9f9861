// Learning-rate schedules with Hugging Face names, keyword arguments and formulas
// (transformers.optimization, get_scheduler), and TorchTitan's warmup-stable-decay schedule ("torchtitan",
// its lr_scheduler config's fields as keyword arguments): the multiplier of the base learning rate for
// optimizer step s (0-based, the scheduler's position before scheduler.step()).
#pragma once
#include <stdbool.h>

typedef enum {
    LR_CONSTANT,
    LR_CONSTANT_WITH_WARMUP,
    LR_LINEAR,
    LR_COSINE,
    LR_COSINE_WITH_RESTARTS,
    LR_POLYNOMIAL,
    LR_INVERSE_SQRT,
    LR_COSINE_WITH_MIN_LR,
    LR_COSINE_WARMUP_WITH_MIN_LR,
    LR_WARMUP_STABLE_DECAY,
    LR_TORCHTITAN,
    LR_SCHEDULE_COUNT
} pt_lr_kind;

// WSD warmup/decay shapes (TorchTitan's "sqrt" decay is 1-sqrt)
typedef enum { LR_SHAPE_LINEAR, LR_SHAPE_COSINE, LR_SHAPE_1_SQRT } pt_lr_shape;

typedef struct {
    pt_lr_kind kind;
    double num_cycles;        // cosine family (0.5: a half cosine; cosine_with_restarts: 1)
    double min_lr_rate;       // cosine_with_min_lr, cosine_warmup_with_min_lr (min_lr / lr when min_lr given)
    double warmup_lr_rate;    // cosine_warmup_with_min_lr; NAN = unset
    double lr_end, power;     // polynomial (1e-7, 1.0)
    double lr_init;           // polynomial: the base learning rate
    double timescale;         // inverse_sqrt; 0 = warmup steps, or 10000 without warmup
    long num_decay_steps;     // warmup_stable_decay (required)
    long num_stable_steps;    // warmup_stable_decay; -1 = total - warmup - decay
    pt_lr_shape warmup_type, decay_type;  // warmup_stable_decay: linear, cosine
    double min_lr_ratio;      // warmup_stable_decay
    double min_lr_factor;     // torchtitan (0): the decay ends at this fraction of the peak
    double decay_ratio;       // torchtitan: the decay's share of the total steps; NAN = unset (all after warmup)
    long total_steps;         // torchtitan: the schedule's length; 0 = the run's (TorchTitan's training.steps)
} pt_lr_schedule;

// name: HF's lr_scheduler_type, or "torchtitan"; kwargs_json: HF's lr_scheduler_kwargs as a JSON object (NULL or "" for
// none); lr: the base learning rate (polynomial's lr_init, cosine_with_min_lr's min_lr). Unknown names,
// unknown or mistyped keyword arguments and values HF refuses are an error (pt_set_error, -1).
int pt_lr_schedule_parse(pt_lr_schedule *out, const char *name, const char *kwargs_json, double lr);
const char *pt_lr_schedule_name(pt_lr_kind k);
// Whether the schedule uses warmup steps (constant does not, as in HF).
bool pt_lr_schedule_warms_up(const pt_lr_schedule *s);
double pt_lr_multiplier(const pt_lr_schedule *s, long step, long warmup_steps, long total_steps);
// Whether every step 0..total_steps-1 of the run gets a finite multiplier >= 0 (keyword arguments HF accepts
// can still give inf or NaN, where Python raises ZeroDivisionError: inverse_sqrt with a timescale far below
// the warmup, or a negative rate: a min_lr_rate below 0). -1 with pt_set_error naming the first bad step.
// Runs of more than 10 million steps are checked at every phase boundary and 10 million steps between.
int pt_lr_schedule_check(const pt_lr_schedule *s, double lr, long warmup_steps, long total_steps);
