// Thin helpers over cJSON (Debian libcjson) for typed, error-reporting reads.
#pragma once
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

// Parses a JSON file; NULL with an error naming the file (and position) on failure.
cJSON *pt_json_parse_file(const char *path);
cJSON *pt_json_parse(const char *text, size_t len, const char *what);

// Typed getters: return 0 on success, 1 if absent (out untouched), -1 (error
// set, naming `what` and the key) on a wrong type or out-of-range value.
int pt_json_get_int(const cJSON *obj, const char *key, int64_t *out, const char *what);
int pt_json_get_double(const cJSON *obj, const char *key, double *out, const char *what);
int pt_json_get_bool(const cJSON *obj, const char *key, bool *out, const char *what);
// *out points into the cJSON tree.
int pt_json_get_string(const cJSON *obj, const char *key, const char **out, const char *what);
// Writes `root` as formatted JSON atomically; 0/-1.
int pt_json_write_file(const char *path, const cJSON *root);
