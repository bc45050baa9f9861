// Learning-rate schedules with Hugging Face names and formulas
// (transformers.optimization): the multiplier for optimizer step s (0-based,
// the scheduler's position before scheduler.step()).
#pragma once

typedef enum { LR_CONSTANT, LR_CONSTANT_WITH_WARMUP, LR_LINEAR, LR_COSINE } pt_lr_schedule;

// "constant", "constant_with_warmup", "linear", "cosine"; -1 if unknown.
int pt_lr_schedule_parse(const char *name, pt_lr_schedule *out);
const char *pt_lr_schedule_name(pt_lr_schedule s);
double pt_lr_multiplier(pt_lr_schedule s, long step, long warmup_steps, long total_steps);
