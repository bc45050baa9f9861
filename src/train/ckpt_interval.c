#include "train/ckpt_interval.h"

#include <math.h>

double pt_young_interval_s(double save_s, double mtbf_s) {
    if (!(save_s > 0) || !(mtbf_s > 0)) return NAN;
    return sqrt(2.0 * save_s * mtbf_s);
}

double pt_daly_interval_s(double save_s, double mtbf_s) {
    if (!(save_s > 0) || !(mtbf_s > 0)) return NAN;
    if (save_s >= 2.0 * mtbf_s) return mtbf_s;  // checkpoints cost more than failures: save once per MTBF
    const double r = save_s / (2.0 * mtbf_s);
    return sqrt(2.0 * save_s * mtbf_s) * (1.0 + sqrt(r) / 3.0 + r / 9.0) - save_s;
}

long pt_daly_interval_steps(double save_s, double mtbf_s, double step_s) {
    const double t = pt_daly_interval_s(save_s, mtbf_s);
    if (!isfinite(t) || !(step_s > 0)) return 0;
    const double steps = floor(t / step_s + 0.5);
    return steps < 1 ? 1 : steps > 1e12 ? (long)1e12 : (long)steps;
}
