// Checkpoint interval advice from the measured save cost and a mean time
// between failures: Young's first-order optimum and Daly's higher-order one.
#pragma once

// Young (1974): sqrt(2 C M), seconds of work between checkpoints.
double pt_young_interval_s(double save_s, double mtbf_s);
// Daly (2006): sqrt(2 C M) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C for C < 2M, else M.
double pt_daly_interval_s(double save_s, double mtbf_s);
// Daly's interval in whole training steps (>= 1) for a step time; 0 on bad input.
long pt_daly_interval_steps(double save_s, double mtbf_s, double step_s);
