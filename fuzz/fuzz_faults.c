// libFuzzer target: the --inject fault-spec parser on arbitrary text.
#include <stdlib.h>
#include <string.h>

#include "train/faults.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *spec = malloc(size + 1);
    memcpy(spec, data, size);
    spec[size] = 0;
    pt_fault f[16];
    int n = 0;
    if (pt_fault_parse(spec, f, 16, &n) == 0) {
        if (n < 0 || n > 16) abort();
        for (int i = 0; i < n; i++) {
            if (f[i].kind < 0 || f[i].kind >= PT_FAULT_NKINDS) abort();
            if (f[i].step == 0 || f[i].step < -1) abort();  // 1-based, or -1 = random
            if (f[i].rank < -2) abort();
            if (!pt_fault_name(f[i].kind) || !pt_fault_env_var(f[i].kind)) abort();
        }
        pt_fault_sort(f, n);
        for (int i = 1; i < n; i++)
            if (f[i].step >= 0 && f[i - 1].step >= 0 && f[i].step < f[i - 1].step) abort();  // sorted by step
    }
    free(spec);
    return 0;
}
