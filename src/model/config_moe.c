// The Qwen3-MoE fields of config.json, with Qwen3MoeConfig's defaults (transformers 5.25).
#include "model/config.h"
#include "util/common.h"
#include "util/json.h"

#include <cjson/cJSON.h>
#include <string.h>

bool qwen3_layer_is_sparse(const qwen3_config *c, int l) {
    if (!c->moe || c->num_experts <= 0 || (l + 1) % c->decoder_sparse_step != 0) return false;
    for (int i = 0; i < c->num_mlp_only_layers; i++)
        if (c->mlp_only_layers[i] == l) return false;
    return true;
}

// An integer field in [lo, hi], left at its default when absent.
static int get_ranged(const cJSON *root, const char *key, int *out, int lo, int hi, const char *what) {
    int64_t v;
    const int rc = pt_json_get_int(root, key, &v, what);
    if (rc < 0) return -1;
    if (rc == 1) return 0;
    if (v < lo || v > hi) {
        pt_set_error("%s: field \"%s\" must be in [%d, %d], got %lld", what, key, lo, hi, (long long)v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_mlp_only(qwen3_config *c, const cJSON *root, const char *what) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (!a || cJSON_IsNull(a)) return 0;  // Qwen3MoeConfig: None means []
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > QWEN3_MAX_MLP_ONLY_LAYERS) {
        pt_set_error("%s: field \"mlp_only_layers\" must be a list of at most %d layer indices", what,
                     QWEN3_MAX_MLP_ONLY_LAYERS);
        return -1;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        const double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(v >= 0 && v <= (1 << 30) && v == (double)(int)v)) {
            pt_set_error("%s: field \"mlp_only_layers\" must hold non-negative integers", what);
            return -1;
        }
        c->mlp_only_layers[c->num_mlp_only_layers++] = (int)v;
    }
    return 0;
}

int qwen3_moe_config_parse(qwen3_config *c, const cJSON *root, const char *what) {
    static const char *const not_null[] = {"num_experts", "num_local_experts", "num_experts_per_tok",
                                           "moe_intermediate_size", "decoder_sparse_step", "norm_topk_prob",
                                           "output_router_logits", "router_aux_loss_coef"};
    for (size_t i = 0; i < PT_ARRAY_LEN(not_null); i++)
        if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, not_null[i]))) {
            pt_set_error("%s: field \"%s\" is null, which transformers' Qwen3MoeConfig refuses", what, not_null[i]);
            return -1;
        }
    c->moe = true;
    c->num_experts = 128;
    c->num_experts_per_tok = 8;
    c->moe_intermediate_size = 768;
    c->decoder_sparse_step = 1;
    c->router_aux_loss_coef = 0.001;
    // transformers 5 maps num_experts onto num_local_experts (attribute_map) and writes the latter.
    if (get_ranged(root, "num_local_experts", &c->num_experts, 0, 1 << 20, what) ||
        get_ranged(root, "num_experts", &c->num_experts, 0, 1 << 20, what) ||
        get_ranged(root, "num_experts_per_tok", &c->num_experts_per_tok, 1, 1 << 20, what) ||
        get_ranged(root, "moe_intermediate_size", &c->moe_intermediate_size, 1, 1 << 30, what) ||
        get_ranged(root, "decoder_sparse_step", &c->decoder_sparse_step, 1, 1 << 30, what) ||
        pt_json_get_bool(root, "norm_topk_prob", &c->norm_topk_prob, what) < 0 ||
        pt_json_get_bool(root, "output_router_logits", &c->output_router_logits, what) < 0 ||
        pt_json_get_double(root, "router_aux_loss_coef", &c->router_aux_loss_coef, what) < 0 ||
        parse_mlp_only(c, root, what))
        return -1;
    if (c->num_experts > 0 && c->num_experts_per_tok > c->num_experts) {
        pt_set_error("%s: field \"num_experts_per_tok\" (%d) exceeds num_experts (%d)", what, c->num_experts_per_tok,
                     c->num_experts);
        return -1;
    }
    if (!(c->router_aux_loss_coef >= 0)) {
        pt_set_error("%s: field \"router_aux_loss_coef\" must be non-negative, got %g", what, c->router_aux_loss_coef);
        return -1;
    }
    return 0;
}

void qwen3_moe_config_to_json(const qwen3_config *c, cJSON *r) {
    cJSON_AddNumberToObject(r, "decoder_sparse_step", c->decoder_sparse_step);
    cJSON *m = cJSON_AddArrayToObject(r, "mlp_only_layers");
    for (int i = 0; i < c->num_mlp_only_layers; i++) cJSON_AddItemToArray(m, cJSON_CreateNumber(c->mlp_only_layers[i]));
    cJSON_AddNumberToObject(r, "moe_intermediate_size", c->moe_intermediate_size);
    cJSON_AddBoolToObject(r, "norm_topk_prob", c->norm_topk_prob);
    cJSON_AddNumberToObject(r, "num_experts", c->num_experts);
    cJSON_AddNumberToObject(r, "num_experts_per_tok", c->num_experts_per_tok);
    cJSON_AddBoolToObject(r, "output_router_logits", c->output_router_logits);
    cJSON_AddNumberToObject(r, "router_aux_loss_coef", c->router_aux_loss_coef);
}
