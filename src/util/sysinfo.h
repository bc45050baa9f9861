// The host's CPU as /proc/cpuinfo describes it (the one reader of that file).
#pragma once
#include <stddef.h>

// The value of /proc/cpuinfo's first "KEY : value" line ("model name", "flags"), malloc'd; NULL when there
// is none (or no /proc/cpuinfo).
char *pt_cpuinfo_value(const char *key);
// The CPU's model name into out, or "unknown CPU".
void pt_cpu_model(char *out, size_t n);
