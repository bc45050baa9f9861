// Young/Daly checkpoint intervals against hand-computed values.
#include <math.h>

#include "testutil.h"
#include "train/ckpt_interval.h"

int main(void) {
    // C = 10 s, M = 24 h = 86400 s: Young sqrt(2*10*86400) = 1314.53 s.
    CHECK(fabs(pt_young_interval_s(10, 86400) - 1314.534138) < 1e-5, "young %g", pt_young_interval_s(10, 86400));
    // Daly: r = 10/172800; 1314.534138 * (1 + sqrt(r)/3 + r/9) - 10 = 1307.8759...
    const double r = 10.0 / 172800.0, want = 1314.5341380 * (1 + sqrt(r) / 3 + r / 9) - 10;
    CHECK(fabs(pt_daly_interval_s(10, 86400) - want) < 1e-5 && fabs(want - 1307.8759) < 1e-3, "daly %g want %g",
          pt_daly_interval_s(10, 86400), want);
    // Daly is below Young by about C for C << M.
    CHECK(pt_daly_interval_s(1, 1e6) < pt_young_interval_s(1, 1e6), "daly < young for small C");
    // C >= 2M: one checkpoint per MTBF.
    CHECK(pt_daly_interval_s(300, 100) == 100, "C >= 2M gives M");
    CHECK(isnan(pt_daly_interval_s(0, 100)) && isnan(pt_young_interval_s(1, -1)), "non-positive input is NaN");
    // In steps: 1307.88 s / 0.15 s = 8719.2 -> 8719 steps; tiny intervals round up to 1.
    CHECK(pt_daly_interval_steps(10, 86400, 0.15) == 8719, "steps %ld", pt_daly_interval_steps(10, 86400, 0.15));
    CHECK(pt_daly_interval_steps(1e-6, 1e-3, 10) == 1, "at least one step");
    CHECK(pt_daly_interval_steps(10, 86400, 0) == 0, "bad step time");
    return test_summary("test_ckpt_interval");
}
