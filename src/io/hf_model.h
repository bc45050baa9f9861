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
// DIR/config.json alone (hf_model_load's first step: the directory must exist). A DCP checkpoint directory
// (io/dcp.h) is refused in one line naming the converter.
int hf_model_load_config(qwen3_config *cfg, const char *dir);
// The config file of model dir DIR: `config` when not NULL (it overrides DIR/config.json), else
// DIR/config.json, else, for a TorchTitan HF export (no config.json) in tools/torchtitan_run.py's layout
// (DIR = DUMP/checkpoint/step-N with model.safetensors.index.json), DUMP/assets/config.json, said on stderr.
// Otherwise NULL with the error set: a DCP directory is refused (io/dcp.h), anything else names --config.
// Returns a malloc'd path.
char *hf_model_config_path(const char *dir, const char *config);
// hf_model_load_config with the config found by hf_model_config_path(dir, config).
int hf_model_load_config_from(qwen3_config *cfg, const char *dir, const char *config);
// hf_model_load with the config found by hf_model_config_path(dir, config) (config may be NULL). The
// weights may be TorchTitan's export as it is: model-0000K-of-0000N.safetensors + index, HF names, no
// lm_head.weight when the config ties it.
int hf_model_load_with_config(qwen3_model *m, const char *dir, const char *config, pt_backend *be);

// The weights of a model dir a block of rows at a time, with every check of hf_model_load_weights (the same
// errors): for each tensor of layout->tensors, in that order (a model from qwen3_create or
// qwen3_create_layout; only its cfg and tensors are read), its rows are read in fp32, in blocks of whole
// rows of at most hf_weight_block_bytes() (64 MiB; at least one row), into one buffer, reused; fn gets
// rows [row0, row0 + nrows) of t (1-D tensors: elements) in order (a non-zero return, with the error set,
// stops the load and is returned). The file's mapped pages are dropped block by block, so a load holds
// about one block (two while a tied lm_head.weight is compared with the embedding), never the whole model
// nor a whole 151936-row embedding: a parallel runtime keeps its shard of each block (dist/parallel.h) and
// hashes the blocks as they pass (their bytes in order are the tensor's).
typedef int (*hf_tensor_fn)(void *ctx, const qwen3_param_info *t, int64_t row0, int64_t nrows, const real_t *data);
int hf_model_stream_weights(const qwen3_model *layout, const char *dir, hf_tensor_fn fn, void *ctx);
// The elements of the largest block of rows of tensor `name` (NULL: any tensor) the weights stream in,
// loaded (hf_model_stream_weights) or saved (hf_model_save_streamed), at hf_weight_block_bytes().
size_t hf_weight_block_numel(const qwen3_model *layout, const char *name);
// The checks that need no tensor data (every tensor present, its shape the config's), as the load makes them.
int hf_model_check_weights(const qwen3_model *layout, const char *dir);
// Writes DIR/config.json and the weights (dtype "float32" or "bfloat16"),
// sharded into model-0000K-of-0000N.safetensors + index when the weights
// exceed max_shard_bytes (0: never shard). The new files are written in a
// staging directory and moved into place; weight files of an earlier save
// that this one did not write are then removed (as save_pretrained does).
int hf_model_save(const qwen3_model *m, const char *dir, const char *dtype, uint64_t max_shard_bytes);
// hf_model_save with the weights supplied a block of rows at a time as the files are written:
// fetch(ctx, i, t, row0, nrows, out) puts rows [row0, row0 + nrows) of tensor i of layout->tensors (t; 1-D
// tensors: elements) into out, nrows x t's row length values. The blocks are whole rows of at most
// block_bytes in fp32 (at least one row); fetch is called exactly once for every block of every tensor, in
// layout order, even when the save fails partway (the rest are fetched and dropped), so a fetch that is a
// collective (dist/parallel.c gathers each block to rank 0) stays matched on every rank. The save holds one
// block at a time (fp32, and in the target dtype), never the whole model nor a whole tensor. layout: only cfg
// and tensors are read. fetch NULL: layout->params are host memory (be->host_memory), written or converted
// in place.
typedef int (*hf_fetch_fn)(void *ctx, int i, const qwen3_param_info *t, int64_t row0, int64_t nrows, real_t *out);
int hf_model_save_streamed(const qwen3_model *layout, const char *dir, const char *dtype, uint64_t max_shard_bytes,
                           size_t block_bytes, hf_fetch_fn fetch, void *ctx);
// The bytes of a block of rows the weights stream in, loaded and saved: $PT_WEIGHT_BLOCK_BYTES, else 64 MiB.
size_t hf_weight_block_bytes(void);
// Rows of tensor t in one block of block_bytes: whole rows in fp32, at least one, at most t's.
int64_t hf_block_rows(const qwen3_param_info *t, size_t block_bytes);

// The tokenizer and generation files transformers keeps next to a model (tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, chat_template.jinja, generation_config.json,
// vocab.json, merges.txt, added_tokens.json): those present in SRC are copied into DST (atomically,
// replacing any there), so DST tokenizes, chats and generates as SRC does. SRC == DST copies nothing.
// *ncopied (if not NULL) gets how many were copied.
extern const char *const hf_sidecar_files[];
extern const int hf_num_sidecar_files;
int hf_copy_sidecars(const char *src, const char *dst, int *ncopied);
