// Deterministic, resumable training batches.
//
// The batch of optimizer step s is a pure function of (data, seed, s): the
// global batch (rows_per_step rows) is defined first, then rank r of a
// data-parallel group of W ranks takes rows [r*rows/W, (r+1)*rows/W). So the
// concatenation over ranks is the same for any W, and the cursor is just the
// step number.
//
// Packed mode: the token stream is cut into windows of seq_len+1 tokens with
// stride seq_len (inputs w[0:T], labels w[1:T+1]). Unshuffled, step s takes
// windows s*B .. s*B+B-1 (B = rows_per_step), wrapping around at the end of
// the data (a new epoch).
#pragma once
#include <stdbool.h>
#include <stdint.h>

typedef enum { PT_LOADER_PACKED = 0, PT_LOADER_PADDED = 1 } pt_loader_mode;

typedef struct {
    const char *data_path;  // a v1 shard
    int seq_len;            // T (max row length in padded mode)
    int rows_per_step;      // global rows per optimizer step (batch x accumulation x dp world)
    int dp_rank, dp_world;  // this rank's share (0, 1 for a single process)
    pt_loader_mode mode;
    bool shuffle;
    uint64_t seed;
    uint32_t model_vocab;   // every id must be < this
} pt_loader_config;

typedef struct pt_loader pt_loader;

pt_loader *pt_loader_open(const pt_loader_config *cfg);
void pt_loader_free(pt_loader *l);
// Rows this rank gets per step.
int pt_loader_local_rows(const pt_loader *l);
// Fills this rank's rows of step `step`: inputs and labels are
// [local_rows x seq_len] int32 (labels -100 where ignored); *row_len is the
// row length used (seq_len in packed mode, the bucket in padded mode).
int pt_loader_batch(pt_loader *l, uint64_t step, int32_t *inputs, int32_t *labels, int *row_len);
// Windows (packed) or documents (padded) available per epoch.
uint64_t pt_loader_num_rows(const pt_loader *l);
// sha256 (hex) of the data file(s), for the run manifest.
const char *pt_loader_data_sha256(const pt_loader *l);
