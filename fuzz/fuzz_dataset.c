// libFuzzer target: a data set's dataset.json on arbitrary bytes, beside two real token shards, opened by the
// data loader (padded mode: the index's eos_id is used) and read for a few steps. The index names the shard
// files, their token counts and hashes: a bad index must be refused, never read past a shard. Run with
// FUZZ_DATASET_SEED=PATH once to write the valid index the corpus starts from.
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/shard.h"
#include "fuzz_tmp.h"

static char g_dir[256];

static void setup(void) {
    const char *p = fuzz_write_tmp("x", NULL, 0);
    snprintf(g_dir, sizeof g_dir, "%.*s", (int)(strrchr(p, '/') - p), p);
    static const uint32_t t0[12] = {5, 6, 7, 2, 9, 10, 11, 12, 2, 13, 14, 2}, t1[7] = {15, 16, 2, 17, 18, 19, 2};
    pt_dataset d = {.vocab_size = 64, .eos_id = 2, .num_tokens = 19, .num_documents = 5, .num_shards = 2};
    pt_dataset_shard sh[2] = {{.file = "shard-00000.bin", .num_tokens = 12, .num_documents = 3},
                              {.file = "shard-00001.bin", .num_tokens = 7, .num_documents = 2}};
    d.shards = sh;
    char path[300];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, sh[i].file);
        if (pt_shard_write(path, i ? t1 : t0, i ? 7 : 12, 64, NULL) != 0) abort();
    }
    const char *seed = getenv("FUZZ_DATASET_SEED");
    if (seed && pt_dataset_save(&d, seed) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    char path[300];
    snprintf(path, sizeof path, "%s/dataset.json", g_dir);
    fuzz_write_file(path, data, size);
    pt_loader_config c = {.data_path = path, .seq_len = 4, .rows_per_step = 2, .dp_rank = 0, .dp_world = 1,
                          .mode = PT_LOADER_PADDED, .model_vocab = 64};
    pt_loader *l = pt_loader_open(&c);
    if (!l) return 0;
    int32_t in[8], lab[8];
    int row_len = 0;
    for (uint64_t s = 0; s < 4; s++)
        if (pt_loader_batch(l, s, in, lab, &row_len) != 0) abort();  // an opened loader serves every step
    pt_loader_free(l);
    return 0;
}
