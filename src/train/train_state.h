// Training state <-> checkpoint: what a resumed run needs to be bit-for-bit
// the run that never stopped.
#pragma once
#include <cjson/cJSON.h>

#include "io/checkpoint.h"
#include "train/optim.h"

// The frozen parts of a run (sha256 hex), recorded in every checkpoint.
typedef struct {
    char config_sha256[65];
    char initial_weights_sha256[65];
    char dataset_sha256[65];
} pt_run_hashes;

// sha256 of the canonical model config JSON and of the fp32 parameters (each tensor's values in
// m->tensors order: the same digest as hashing the tensors as they stream in, hf_model_stream_weights).
void pt_hash_model(const qwen3_model *m, char config_hex[65], char weights_hex[65]);
void pt_hash_config(const qwen3_config *cfg, char config_hex[65]);

// Saves params + AdamW moments + `state` as checkpoint `step` under output_dir.
// Refuses (returns PT_SAVE_NONFINITE, writes nothing) when the weights or
// moments hold a NaN/Inf; -1 on other errors.
#define PT_SAVE_NONFINITE (-2)
int pt_save_train_state(const char *output_dir, long step, const qwen3_model *m, const pt_adamw *opt,
                        const cJSON *state, int keep_last, ckpt_save_stats *stats);
// Loads params and AdamW moments from an opened checkpoint into m/opt (any
// slice layout). Checks tensor shapes against the model.
int pt_load_train_state(ckpt *c, qwen3_model *m, pt_adamw *opt);
