#include "util/json.h"
#include "util/common.h"
#include "util/fileio.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

cJSON *pt_json_parse(const char *text, size_t len, const char *what) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t off = end ? (size_t)(end - text) : 0;
        pt_set_error("%s: malformed JSON near byte %zu", what, off);
        return NULL;
    }
    return root;
}

cJSON *pt_json_parse_file(const char *path) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return NULL;
    cJSON *root = pt_json_parse(text, len, path);
    free(text);
    return root;
}

int pt_json_get_int(const cJSON *obj, const char *key, int64_t *out, const char *what) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return 1;
    if (!cJSON_IsNumber(it)) {
        pt_set_error("%s: field \"%s\" must be an integer", what, key);
        return -1;
    }
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v) || fabs(v) > 9.0e15) {
        pt_set_error("%s: field \"%s\" must be an integer, got %g", what, key, v);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

int pt_json_get_double(const cJSON *obj, const char *key, double *out, const char *what) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return 1;
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) {
        pt_set_error("%s: field \"%s\" must be a finite number", what, key);
        return -1;
    }
    *out = it->valuedouble;
    return 0;
}

int pt_json_get_bool(const cJSON *obj, const char *key, bool *out, const char *what) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return 1;
    if (!cJSON_IsBool(it)) {
        pt_set_error("%s: field \"%s\" must be true or false", what, key);
        return -1;
    }
    *out = cJSON_IsTrue(it);
    return 0;
}

int pt_json_get_string(const cJSON *obj, const char *key, const char **out, const char *what) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return 1;
    if (!cJSON_IsString(it)) {
        pt_set_error("%s: field \"%s\" must be a string", what, key);
        return -1;
    }
    *out = it->valuestring;
    return 0;
}

int pt_json_write_file(const char *path, const cJSON *root) {
    char *text = cJSON_Print(root);
    if (!text) {
        pt_set_error("%s: cannot serialise JSON", path);
        return -1;
    }
    size_t n = strlen(text);
    text = pt_realloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = 0;
    int rc = pt_write_file_atomic(path, text, n + 1);
    free(text);
    return rc;
}
