#include "model/config.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static int get_int_field(const cJSON *root, const char *key, int *out, bool required, const char *what) {
    int64_t v;
    int rc = pt_json_get_int(root, key, &v, what);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (required) {
            pt_set_error("%s: missing required field \"%s\"", what, key);
            return -1;
        }
        return 0;
    }
    if (v < -1 || v > (1 << 30)) {
        pt_set_error("%s: field \"%s\" out of range: %lld", what, key, (long long)v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int qwen3_config_validate(const qwen3_config *c, const char *what) {
    struct { const char *name; int v; } pos[] = {
        {"vocab_size", c->vocab_size}, {"hidden_size", c->hidden_size},
        {"intermediate_size", c->intermediate_size}, {"num_hidden_layers", c->num_hidden_layers},
        {"num_attention_heads", c->num_attention_heads}, {"num_key_value_heads", c->num_key_value_heads},
        {"head_dim", c->head_dim}, {"max_position_embeddings", c->max_position_embeddings},
    };
    for (size_t i = 0; i < PT_ARRAY_LEN(pos); i++)
        if (pos[i].v <= 0) {
            pt_set_error("%s: field \"%s\" must be a positive integer, got %d", what, pos[i].name, pos[i].v);
            return -1;
        }
    if (c->num_attention_heads % c->num_key_value_heads != 0) {
        pt_set_error("%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", what,
                     c->num_attention_heads, c->num_key_value_heads);
        return -1;
    }
    if (c->head_dim % 2 != 0) {
        pt_set_error("%s: head_dim (%d) must be even for rotary embeddings", what, c->head_dim);
        return -1;
    }
    if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 0) || !(c->initializer_range >= 0)) {
        pt_set_error("%s: rms_norm_eps and rope_theta must be positive, initializer_range non-negative", what);
        return -1;
    }
    return 0;
}

// Qwen3Config (transformers 5.25) refuses null for these fields (only the token ids, num_key_value_heads,
// sliding_window, layer_types, rope_parameters and rope_scaling may be null); reading null as the
// default would run a model transformers does not load.
static int check_not_null(const cJSON *root, const char *what) {
    static const char *const not_null[] = {
        "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "head_dim", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps", "use_cache",
        "tie_word_embeddings", "rope_theta", "attention_bias", "use_sliding_window", "max_window_layers",
        "attention_dropout"};
    for (size_t i = 0; i < PT_ARRAY_LEN(not_null); i++)
        if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, not_null[i]))) {
            pt_set_error("%s: field \"%s\" is null, which transformers' Qwen3Config refuses; give a value or "
                         "remove the key", what, not_null[i]);
            return -1;
        }
    return 0;
}

// eos_token_id: an integer or a list of them (Qwen3 instruct models list
// <|im_end|> and <|endoftext|>); the first is the one used as a single id.
static int parse_eos(qwen3_config *c, const cJSON *root, const char *what) {
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (!cJSON_IsArray(eos)) return get_int_field(root, "eos_token_id", &c->eos_token_id, false, what);
    const int n = cJSON_GetArraySize(eos);
    if (n < 1 || n > QWEN3_MAX_EOS_IDS) {
        pt_set_error("%s: field \"eos_token_id\" must be an integer or a list of 1 to %d integers", what,
                     QWEN3_MAX_EOS_IDS);
        return -1;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, eos) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(v >= 0 && v <= (1 << 30) && v == (double)(int)v)) {
            pt_set_error("%s: field \"eos_token_id\" list must hold non-negative integers", what);
            return -1;
        }
        c->eos_token_ids[c->num_eos_token_ids++] = (int)v;
    }
    c->eos_token_id = c->eos_token_ids[0];
    return 0;
}

// The integer fields, with Qwen3Config's defaults for the optional ones.
static int parse_sizes(qwen3_config *c, const cJSON *root, const char *what) {
    c->max_position_embeddings = 32768;
    c->bos_token_id = c->eos_token_id = c->pad_token_id = -1;
    if (get_int_field(root, "vocab_size", &c->vocab_size, true, what) ||
        get_int_field(root, "hidden_size", &c->hidden_size, true, what) ||
        get_int_field(root, "intermediate_size", &c->intermediate_size, true, what) ||
        get_int_field(root, "num_hidden_layers", &c->num_hidden_layers, true, what) ||
        get_int_field(root, "num_attention_heads", &c->num_attention_heads, true, what) ||
        get_int_field(root, "max_position_embeddings", &c->max_position_embeddings, false, what) ||
        get_int_field(root, "bos_token_id", &c->bos_token_id, false, what) ||
        get_int_field(root, "pad_token_id", &c->pad_token_id, false, what) || parse_eos(c, root, what))
        return -1;
    // Qwen3Config: an absent num_key_value_heads is its default 32; an explicit null means
    // num_attention_heads (plain multi-head attention).
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads");
    c->num_key_value_heads = !kv ? 32 : c->num_attention_heads;
    if (get_int_field(root, "num_key_value_heads", &c->num_key_value_heads, false, what)) return -1;
    if (!kv && c->num_attention_heads % 32 != 0) {
        pt_set_error("%s: no num_key_value_heads: Qwen3Config's default 32 does not divide num_attention_heads "
                     "(%d); add \"num_key_value_heads\" (%d for plain multi-head attention)",
                     what, c->num_attention_heads, c->num_attention_heads);
        return -1;
    }
    // Qwen3Config's default (transformers 5.25), not hidden_size / heads: the
    // same config.json must describe the same model in both.
    c->head_dim = 128;
    return get_int_field(root, "head_dim", &c->head_dim, false, what);
}

// RoPE: `rope_theta` (older configs) or `rope_parameters` (transformers v5). As transformers 5 reads
// them: a non-empty `rope_scaling` object (the older key) replaces `rope_parameters` altogether,
// even when both are there (Qwen3's model card tells users to add a YaRN `rope_scaling` to
// config.json); its rope_theta, else the top-level one, else 10000.
static int parse_rope(qwen3_config *c, const cJSON *root, const char *what) {
    c->rope_theta = 10000.0;
    if (pt_json_get_double(root, "rope_theta", &c->rope_theta, what) < 0) return -1;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (!rp || cJSON_IsNull(rp) || (cJSON_IsObject(rp) && !rp->child))
        rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    if (!rp || cJSON_IsNull(rp)) return 0;
    if (!cJSON_IsObject(rp)) {
        pt_set_error("%s: field \"%s\" must be an object", what, rp->string);
        return -1;
    }
    const char *type = NULL;
    if (pt_json_get_string(rp, "rope_type", &type, what) < 0) return -1;
    if (!type && pt_json_get_string(rp, "type", &type, what) < 0) return -1;
    if (type && strcmp(type, "default") != 0) {
        pt_set_error("%s: %s.rope_type \"%s\" is not supported (only \"default\" RoPE)", what, rp->string, type);
        return -1;
    }
    return pt_json_get_double(rp, "rope_theta", &c->rope_theta, what) < 0 ? -1 : 0;
}

// An explicit layer_types list is taken as written: every layer must be "full_attention".
static int check_layer_types(const qwen3_config *c, const cJSON *lt, const char *what) {
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->num_hidden_layers) {
        pt_set_error("%s: field \"layer_types\" must be a list of num_hidden_layers (%d) strings", what,
                     c->num_hidden_layers);
        return -1;
    }
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, lt) {
        const char *t = cJSON_IsString(it) ? it->valuestring : "";
        if (strcmp(t, "full_attention") != 0) {
            pt_set_error("%s: layer_types[%d] is \"%s\"; only \"full_attention\" layers are supported "
                         "(no sliding-window attention)", what, i, t);
            return -1;
        }
        i++;
    }
    return 0;
}

// Sliding-window attention is not implemented; refuse any config in which a layer would use it.
// As Qwen3Config does: the window is sliding_window (default 4096) only with use_sliding_window
// true; layer_types, when absent or null, makes layers >= max_window_layers (default 28) sliding
// when there is a window; an explicit layer_types is taken as written. use_sliding_window true
// with every layer "full_attention" is plain causal attention and is accepted.
static int check_attention(const qwen3_config *c, const cJSON *root, const char *what) {
    bool flag = false;
    if (pt_json_get_bool(root, "attention_bias", &flag, what) < 0) return -1;
    if (flag) {
        pt_set_error("%s: attention_bias true is not supported (Qwen3 has no attention bias)", what);
        return -1;
    }
    flag = false;
    if (pt_json_get_bool(root, "use_sliding_window", &flag, what) < 0) return -1;
    int64_t window = 4096, max_window_layers = 28;
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    bool has_window = flag && !(sw && cJSON_IsNull(sw));
    if (pt_json_get_int(root, "sliding_window", &window, what) < 0 ||
        pt_json_get_int(root, "max_window_layers", &max_window_layers, what) < 0)
        return -1;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) return check_layer_types(c, lt, what);
    if (has_window && max_window_layers < c->num_hidden_layers) {
        pt_set_error("%s: use_sliding_window true with sliding_window %lld makes layers %lld to %d sliding-window "
                     "layers (max_window_layers %lld), which is not supported", what, (long long)window,
                     (long long)(max_window_layers < 0 ? 0 : max_window_layers), c->num_hidden_layers - 1,
                     (long long)max_window_layers);
        return -1;
    }
    return 0;
}

// attention_dropout is kept and written back; training refuses a non-zero rate (trainer.c), eval ignores
// it as transformers does in eval mode.
static int parse_dropout_act(qwen3_config *c, const cJSON *root, const char *what) {
    c->attention_dropout = 0;
    if (pt_json_get_double(root, "attention_dropout", &c->attention_dropout, what) < 0) return -1;
    if (!(c->attention_dropout >= 0 && c->attention_dropout < 1)) {
        pt_set_error("%s: field \"attention_dropout\" must be in [0, 1), got %g", what, c->attention_dropout);
        return -1;
    }
    const char *act = NULL;
    if (pt_json_get_string(root, "hidden_act", &act, what) < 0) return -1;
    // transformers' ACT2FN maps "swish" to the same SiLU as "silu"
    if (act && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0) {
        pt_set_error("%s: hidden_act \"%s\" is not supported (only \"silu\" / \"swish\")", what, act);
        return -1;
    }
    return 0;
}

static int parse_root(qwen3_config *c, const cJSON *root, const char *what) {
    if (!cJSON_IsObject(root)) {
        pt_set_error("%s: top level must be a JSON object", what);
        return -1;
    }
    if (check_not_null(root, what)) return -1;
    const char *model_type = NULL;
    if (pt_json_get_string(root, "model_type", &model_type, what) < 0) return -1;
    if (model_type && strcmp(model_type, "qwen3") != 0 && strcmp(model_type, "qwen3_moe") != 0) {
        pt_set_error("%s: model_type is \"%s\"; only \"qwen3\" (dense Qwen3) and \"qwen3_moe\" are supported", what,
                     model_type);
        return -1;
    }
    if (model_type && !strcmp(model_type, "qwen3_moe") && qwen3_moe_config_parse(c, root, what)) return -1;
    c->rms_norm_eps = 1e-6;
    c->initializer_range = 0.02;
    c->tie_word_embeddings = false;  // Qwen3Config's default
    if (parse_sizes(c, root, what)) return -1;
    if (pt_json_get_double(root, "rms_norm_eps", &c->rms_norm_eps, what) < 0 ||
        pt_json_get_double(root, "initializer_range", &c->initializer_range, what) < 0 ||
        pt_json_get_bool(root, "tie_word_embeddings", &c->tie_word_embeddings, what) < 0)
        return -1;
    if (parse_rope(c, root, what) || check_attention(c, root, what) || parse_dropout_act(c, root, what)) return -1;
    return qwen3_config_validate(c, what);
}

int qwen3_config_parse(qwen3_config *c, const char *json, size_t len, const char *what) {
    memset(c, 0, sizeof *c);
    cJSON *root = pt_json_parse(json, len, what);
    if (!root) return -1;
    int rc = parse_root(c, root, what);
    cJSON_Delete(root);
    return rc;
}

int qwen3_config_load(qwen3_config *cfg, const char *path) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    int rc = qwen3_config_parse(cfg, text, len, path);
    free(text);
    return rc;
}

cJSON *qwen3_config_to_json(const qwen3_config *c, const char *torch_dtype) {
    cJSON *r = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(c->moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"));
    cJSON_AddBoolToObject(r, "attention_bias", 0);
    cJSON_AddNumberToObject(r, "attention_dropout", c->attention_dropout);
    if (c->bos_token_id >= 0) cJSON_AddNumberToObject(r, "bos_token_id", c->bos_token_id);
    if (c->num_eos_token_ids > 0) {
        cJSON *ids = cJSON_AddArrayToObject(r, "eos_token_id");
        for (int i = 0; i < c->num_eos_token_ids; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(c->eos_token_ids[i]));
    } else if (c->eos_token_id >= 0) {
        cJSON_AddNumberToObject(r, "eos_token_id", c->eos_token_id);
    }
    cJSON_AddNumberToObject(r, "head_dim", c->head_dim);
    cJSON_AddStringToObject(r, "hidden_act", "silu");
    cJSON_AddNumberToObject(r, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(r, "initializer_range", c->initializer_range);
    cJSON_AddNumberToObject(r, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(r, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddStringToObject(r, "model_type", c->moe ? "qwen3_moe" : "qwen3");
    cJSON_AddNumberToObject(r, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(r, "num_hidden_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(r, "num_key_value_heads", c->num_key_value_heads);
    if (c->pad_token_id >= 0) cJSON_AddNumberToObject(r, "pad_token_id", c->pad_token_id);
    cJSON_AddNumberToObject(r, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNullToObject(r, "rope_scaling");
    cJSON_AddNumberToObject(r, "rope_theta", c->rope_theta);
    cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(r, "torch_dtype", torch_dtype ? torch_dtype : "float32");
    cJSON_AddBoolToObject(r, "use_cache", 1);
    cJSON_AddBoolToObject(r, "use_sliding_window", 0);
    cJSON_AddNumberToObject(r, "vocab_size", c->vocab_size);
    if (c->moe) qwen3_moe_config_to_json(c, r);
    return r;
}

int qwen3_config_save(const qwen3_config *c, const char *path, const char *torch_dtype) {
    cJSON *r = qwen3_config_to_json(c, torch_dtype);
    int rc = pt_json_write_file(path, r);
    cJSON_Delete(r);
    return rc;
}
