// Qwen3 model configuration (the fields of HF's Qwen3Config that matter).
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QWEN3_MAX_EOS_IDS 16

typedef struct {
    int vocab_size;
    int hidden_size;          // C
    int intermediate_size;    // I
    int num_hidden_layers;    // L
    int num_attention_heads;  // H
    int num_key_value_heads;  // KV
    int head_dim;             // D (may differ from C/H)
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    double initializer_range;
    double attention_dropout;        // transformers' training-mode dropout; training here needs 0
    bool tie_word_embeddings;
    int bos_token_id, eos_token_id;  // -1 when absent; eos_token_id: the first id of a list
    int pad_token_id;                // -1 when absent
    // eos_token_id given as a list (HF allows int or list): kept to write it back unchanged
    int num_eos_token_ids;           // 0 when eos_token_id is absent or an integer
    int eos_token_ids[QWEN3_MAX_EOS_IDS];
} qwen3_config;

// Parses an HF config.json (model_type "qwen3"); accepts `rope_theta` or the
// newer `rope_parameters` form; head_dim defaults to 128 (as
// transformers' Qwen3Config, not hidden/heads). Refuses
// features this trainer does not implement (bias, sliding window, non-default
// RoPE) with an error naming the file and field.
int qwen3_config_load(qwen3_config *cfg, const char *path);
int qwen3_config_parse(qwen3_config *cfg, const char *json, size_t len, const char *what);
// Writes an HF-loadable config.json (atomically). torch_dtype: "float32"/"bfloat16".
int qwen3_config_save(const qwen3_config *cfg, const char *path, const char *torch_dtype);
// The same fields as a cJSON object (HF config.json keys); caller frees.
struct cJSON;
struct cJSON *qwen3_config_to_json(const qwen3_config *cfg, const char *torch_dtype);
// Checks internal consistency (positive sizes, heads divisible by kv heads, even head_dim).
int qwen3_config_validate(const qwen3_config *cfg, const char *what);
