// The host's CPU as /proc/cpuinfo describes it (the one reader of that file).
#pragma once
#include <stddef.h>

// The value of /proc/cpuinfo's first "KEY : value" line ("model name", "flags"), malloc'd; NULL when there
// is none (or no /proc/cpuinfo).
char *pt_cpuinfo_value(const char *key);
// The CPU's model name into out, or "unknown CPU".
void pt_cpu_model(char *out, size_t n);
// The 1-, 5- and 15-minute load averages of /proc/loadavg into out: 0, or -1 when there is none.
int pt_loadavg(double out[3]);
// An estimate of the peak fp32 FLOP/s of `threads` cores of this CPU: cores x clock ("cpu MHz") x fp32
// FLOPs per cycle of its widest FMA units (avx512f 64, avx2+fma 32, else 8); 0 when /proc/cpuinfo has no
// clock. `how` (may be NULL) receives the derivation as text.
double pt_cpu_peak_flops(int threads, char *how, size_t n);
// REL under the tree this binary was built or installed in (the directory above the one holding
// /proc/self/exe: build/portatrain -> the source tree), malloc'd, when it exists there; else NULL.
char *pt_install_path(const char *rel);
