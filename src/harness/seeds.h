// Several seeds per side: steps to reach a target loss, and a one-sided Welch
// t-test that the candidate is not slower to converge (in the spirit of
// MLPerf's reference convergence points). See docs/COMPARE.md.
#pragma once
#include "cJSON.h"

typedef struct {
    double target_loss;  // NAN: the worst baseline seed's trailing-mean loss 2/3 into its run
    int window;          // trailing-mean window for "reached" (default 10)
    double alpha;        // significance level of the one-sided test (default 0.05)
} pt_seeds_opts;

// Upper tail P(T > t) of Student's t with df degrees of freedom (df > 0).
double pt_student_t_sf(double t, double df);

// runs_a: baseline runs (one per seed), runs_b: candidate runs; each a run dir or
// imported log. 0 ACCEPTED, 1 REJECTED (candidate significantly slower, or a seed
// never reached the target), 2 unusable input. *out: the JSON result.
int pt_compare_seeds(const char *const *runs_a, int na, const char *const *runs_b, int nb, const pt_seeds_opts *o,
                     cJSON **out);
