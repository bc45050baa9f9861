// Qwen3 model configuration (the fields of HF's Qwen3Config that matter).
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QWEN3_MAX_EOS_IDS 16
#define QWEN3_MAX_MLP_ONLY_LAYERS 256

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
    // Qwen3-MoE (model_type "qwen3_moe", Qwen3MoeConfig); all zero for a dense model.
    bool moe;
    int num_experts;                 // "num_experts" (written "num_local_experts" by transformers 5)
    int num_experts_per_tok;         // top-k
    int moe_intermediate_size;       // each expert's SwiGLU width
    int decoder_sparse_step;         // layer l is sparse when (l + 1) % step == 0 ...
    int num_mlp_only_layers;         // ... and l is not listed in mlp_only_layers
    int mlp_only_layers[QWEN3_MAX_MLP_ONLY_LAYERS];
    bool norm_topk_prob;             // renormalise the top-k probabilities to sum 1
    bool output_router_logits;       // add router_aux_loss_coef x load-balancing loss to the loss
    double router_aux_loss_coef;
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
struct cJSON;
// The same fields as a cJSON object (HF config.json keys); caller frees.
struct cJSON *qwen3_config_to_json(const qwen3_config *cfg, const char *torch_dtype);
// Whether decoder layer l has the sparse MoE block (Qwen3MoeDecoderLayer's rule); false for dense models.
bool qwen3_layer_is_sparse(const qwen3_config *cfg, int l);
// The qwen3_moe fields of a config.json object (config_moe.c); root is a cJSON object.
int qwen3_moe_config_parse(qwen3_config *cfg, const struct cJSON *root, const char *what);
void qwen3_moe_config_to_json(const qwen3_config *cfg, struct cJSON *out);

// Checks internal consistency (positive sizes, heads divisible by kv heads, even head_dim).
int qwen3_config_validate(const qwen3_config *cfg, const char *what);
