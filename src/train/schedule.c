#include "train/schedule.h"

#include <math.h>
#include <string.h>

static const char *NAMES[] = {"constant", "constant_with_warmup", "linear", "cosine"};

int pt_lr_schedule_parse(const char *name, pt_lr_schedule *out) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, NAMES[i])) {
            *out = (pt_lr_schedule)i;
            return 0;
        }
    return -1;
}
const char *pt_lr_schedule_name(pt_lr_schedule s) { return NAMES[s]; }

double pt_lr_multiplier(pt_lr_schedule s, long step, long warmup, long total) {
    if (s == LR_CONSTANT) return 1.0;
    if (step < warmup) return (double)step / (double)(warmup > 1 ? warmup : 1);
    if (s == LR_CONSTANT_WITH_WARMUP) return 1.0;
    long span = total - warmup > 1 ? total - warmup : 1;
    if (s == LR_LINEAR) {
        double r = (double)(total - step) / (double)span;
        return r > 0 ? r : 0.0;
    }
    // cosine, num_cycles = 0.5
    double progress = (double)(step - warmup) / (double)span;
    double r = 0.5 * (1.0 + cos(M_PI * 0.5 * 2.0 * progress));
    return r > 0 ? r : 0.0;
}
