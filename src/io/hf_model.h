// Hugging Face model directories: config.json + model.safetensors (or a
// sharded model.safetensors.index.json) in and out.
#pragma once
#include "model/qwen3.h"

// Reads DIR/config.json, creates the model on `be` and loads its weights
// (F32/BF16/F16/F64, converted to fp32). When tied, lm_head.weight may be
// absent (and must then equal model.embed_tokens.weight if present), or be the
// only copy stored (the embedding is read from it, as transformers does). Shapes are
// checked against the config.
int hf_model_load(qwen3_model *m, const char *dir, pt_backend *be);
// Loads weights from a model dir into an existing model (same config).
int hf_model_load_weights(qwen3_model *m, const char *dir);
// Writes DIR/config.json and the weights (dtype "float32" or "bfloat16"),
// sharded into model-0000K-of-0000N.safetensors + index when the weights
// exceed max_shard_bytes (0: never shard). The new files are written in a
// staging directory and moved into place; weight files of an earlier save
// that this one did not write are then removed (as save_pretrained does).
int hf_model_save(const qwen3_model *m, const char *dir, const char *dtype, uint64_t max_shard_bytes);

// The tokenizer and generation files transformers keeps next to a model (tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, chat_template.jinja, generation_config.json,
// vocab.json, merges.txt, added_tokens.json): those present in SRC are copied into DST (atomically,
// replacing any there), so DST tokenizes, chats and generates as SRC does. SRC == DST copies nothing.
// *ncopied (if not NULL) gets how many were copied.
extern const char *const hf_sidecar_files[];
extern const int hf_num_sidecar_files;
int hf_copy_sidecars(const char *src, const char *dst, int *ncopied);
