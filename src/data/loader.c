#include "data/loader.h"
#include "data/shard.h"
#include "util/common.h"
#include "util/hash.h"

#include <stdlib.h>
#include <string.h>

struct pt_loader {
    pt_loader_config cfg;
    pt_shard shard;
    uint64_t num_windows;
    char sha[65];
};

pt_loader *pt_loader_open(const pt_loader_config *cfg) {
    if (cfg->seq_len <= 0 || cfg->rows_per_step <= 0 || cfg->dp_world <= 0 || cfg->dp_rank < 0 ||
        cfg->dp_rank >= cfg->dp_world) {
        pt_set_error("data loader: invalid seq_len %d / rows per step %d / dp rank %d of %d", cfg->seq_len,
                     cfg->rows_per_step, cfg->dp_rank, cfg->dp_world);
        return NULL;
    }
    if (cfg->rows_per_step % cfg->dp_world != 0) {
        pt_set_error("data loader: the global batch of %d rows does not divide by %d data-parallel ranks",
                     cfg->rows_per_step, cfg->dp_world);
        return NULL;
    }
    if (cfg->mode != PT_LOADER_PACKED || cfg->shuffle) {
        pt_set_error("data loader: only unshuffled packed batches are supported by this build");
        return NULL;
    }
    pt_loader *l = pt_calloc(1, sizeof *l);
    l->cfg = *cfg;
    if (pt_shard_open(&l->shard, cfg->data_path) != 0 || pt_shard_check_vocab(&l->shard, cfg->model_vocab) != 0) {
        pt_loader_free(l);
        return NULL;
    }
    uint64_t n = l->shard.num_tokens;
    l->num_windows = n > 1 ? (n - 1) / (uint64_t)cfg->seq_len : 0;
    if (l->num_windows == 0) {
        pt_set_error("%s: %llu tokens are too few for one window of seq_len+1 = %d tokens", cfg->data_path,
                     (unsigned long long)n, cfg->seq_len + 1);
        pt_loader_free(l);
        return NULL;
    }
    pt_sha256_hex(l->shard.map, l->shard.map_len, l->sha);
    return l;
}

void pt_loader_free(pt_loader *l) {
    if (!l) return;
    pt_shard_close(&l->shard);
    free(l);
}

int pt_loader_local_rows(const pt_loader *l) { return l->cfg.rows_per_step / l->cfg.dp_world; }
uint64_t pt_loader_num_rows(const pt_loader *l) { return l->num_windows; }
const char *pt_loader_data_sha256(const pt_loader *l) { return l->sha; }

int pt_loader_batch(pt_loader *l, uint64_t step, int32_t *inputs, int32_t *labels, int *row_len) {
    const int T = l->cfg.seq_len;
    const int local = pt_loader_local_rows(l);
    for (int r = 0; r < local; r++) {
        uint64_t global_row = step * (uint64_t)l->cfg.rows_per_step + (uint64_t)(l->cfg.dp_rank * local + r);
        uint64_t w = global_row % l->num_windows;
        const uint32_t *src = l->shard.tokens + w * (uint64_t)T;
        for (int t = 0; t < T; t++) {
            inputs[(size_t)r * T + t] = (int32_t)src[t];
            labels[(size_t)r * T + t] = (int32_t)src[t + 1];
        }
    }
    *row_len = T;
    return 0;
}
