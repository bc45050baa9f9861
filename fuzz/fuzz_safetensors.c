// libFuzzer target: the safetensors header/layout validator on arbitrary bytes.
// Any input must either parse (and then every tensor's bytes are in range)
// or fail with an error message; never crash or read out of bounds.
#include "io/safetensors.h"
#include "util/common.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // Copy into an exact-size heap buffer so ASan catches any overread.
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    st_file f;
    if (st_parse(&f, buf, size, "fuzz.safetensors") == 0) {
        for (int i = 0; i < f.num_tensors; i++) {
            const st_tensor *t = &f.tensors[i];
            if (t->numel > 0 && t->numel < (1u << 16)) {
                float *out = malloc(sizeof(float) * t->numel);
                if (st_read_float(&f, t, out, t->numel) != 0) (void)pt_last_error();
                free(out);
            }
        }
        f.map = NULL;  // not mmap'd: the buffer is ours
        f.size = 0;
        st_close(&f);
    } else {
        if (!pt_last_error()[0]) abort();
    }
    free(buf);
    return 0;
}
