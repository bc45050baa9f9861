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

// The field `key` of obj: 1 if absent or null, -1 (error set) if `ok` rejects it, else 0 with *it set.
static int typed_field(const cJSON *obj, const char *key, cJSON_bool (*ok)(const cJSON *), const char *expected,
                       const char *what, const cJSON **it) {
    *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!*it || cJSON_IsNull(*it)) return 1;
    if (!ok(*it)) {
        pt_set_error("%s: field \"%s\" must be %s", what, key, expected);
        return -1;
    }
    return 0;
}

static cJSON_bool is_finite_number(const cJSON *it) {
    return cJSON_IsNumber(it) && isfinite(it->valuedouble);
}

int pt_json_get_int(const cJSON *obj, const char *key, int64_t *out, const char *what) {
    const cJSON *it;
    int rc = typed_field(obj, key, cJSON_IsNumber, "an integer", what, &it);
    if (rc) return rc;
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v) || fabs(v) > 9.0e15) {
        pt_set_error("%s: field \"%s\" must be an integer, got %g", what, key, v);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

int pt_json_get_double(const cJSON *obj, const char *key, double *out, const char *what) {
    const cJSON *it;
    int rc = typed_field(obj, key, is_finite_number, "a finite number", what, &it);
    if (rc == 0) *out = it->valuedouble;
    return rc;
}

int pt_json_get_bool(const cJSON *obj, const char *key, bool *out, const char *what) {
    const cJSON *it;
    int rc = typed_field(obj, key, cJSON_IsBool, "true or false", what, &it);
    if (rc == 0) *out = cJSON_IsTrue(it);
    return rc;
}

int pt_json_get_string(const cJSON *obj, const char *key, const char **out, const char *what) {
    const cJSON *it;
    int rc = typed_field(obj, key, cJSON_IsString, "a string", what, &it);
    if (rc == 0) *out = it->valuestring;
    return rc;
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
