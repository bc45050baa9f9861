// libFuzzer target: a token shard on arbitrary bytes, opened by the data loader in packed and padded mode and
// read for a few steps. Byte 0 picks the mode and options, the rest is the shard file.
#include <stdlib.h>

#include "data/loader.h"
#include "fuzz_tmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t opt = data[0];
    const char *path = fuzz_write_tmp("shard.bin", data + 1, size - 1);
    const int T = 4 + (opt >> 4), B = 1 + (opt >> 2 & 3);
    pt_loader_config c = {.data_path = path, .seq_len = T, .rows_per_step = B, .dp_rank = 0, .dp_world = 1,
                          .mode = opt & 1 ? PT_LOADER_PADDED : PT_LOADER_PACKED, .shuffle = opt & 2, .seed = 7,
                          .model_vocab = 4096, .eos_id = 2, .group_by_bucket = opt & 128};
    pt_loader *l = pt_loader_open(&c);
    if (!l) return 0;
    int32_t in[16 * 20], lab[16 * 20];
    int row_len = 0;
    for (uint64_t s = 0; s < 5; s++) {
        if (pt_loader_batch(l, s, in, lab, &row_len) != 0) abort();  // an opened loader serves every step
        if (row_len < 1 || row_len > T) abort();
        for (int i = 0; i < B * row_len; i++)
            if (in[i] < 0 || in[i] >= 4096 || lab[i] < -100 || lab[i] >= 4096 || (lab[i] < 0 && lab[i] != -100)) abort();
    }
    pt_loader_free(l);
    return 0;
}
