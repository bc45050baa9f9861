// libFuzzer target: --lr-scheduler-type / --lr-scheduler-kwargs parsing and the schedules' multipliers.
// Input: byte 0 picks the schedule, bytes 1..8 the step counts, the rest is the kwargs JSON text.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/schedule.h"
#include "util/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 9) return 0;
    const char *name = pt_lr_schedule_name((pt_lr_kind)(data[0] % LR_SCHEDULE_COUNT));
    const long total = 1 + (data[1] | data[2] << 8);
    const long warmup = (data[5] | data[6] << 8) % (total + 1);
    char *kwargs = malloc(size - 9 + 1);
    memcpy(kwargs, data + 9, size - 9);
    kwargs[size - 9] = 0;
    pt_lr_schedule s;
    if (pt_lr_schedule_parse(&s, name, kwargs, 3e-4) == 0 && pt_lr_schedule_check(&s, 3e-4, warmup, total) == 0) {
        // A schedule that parses and passes the trainer's check gives a finite, non-negative rate at every step of the run (0 .. total-1; at
        // `total` itself, past the last update, HF's polynomial divides by zero when warmup == total).
        const long probe[] = {0, PT_MIN(1, total - 1), warmup ? warmup - 1 : 0, PT_MIN(warmup, total - 1), PT_MIN(warmup + 1, total - 1),
                              total / 2, total - 1};
        for (size_t i = 0; i < sizeof probe / sizeof *probe; i++) {
            const double m = pt_lr_multiplier(&s, probe[i], warmup, total);
            if (!isfinite(m) || m < 0) abort();
        }
    }
    free(kwargs);
    return 0;
}
