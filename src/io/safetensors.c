#include "io/safetensors.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *name; size_t size; } DTYPES[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},     [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},   [ST_F32] = {"F32", 4}, [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},   [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(st_dtype d) { return d < ST_DTYPE_COUNT ? DTYPES[d].name : "?"; }
size_t st_dtype_size(st_dtype d) { return d < ST_DTYPE_COUNT ? DTYPES[d].size : 0; }
int st_dtype_parse(const char *s, st_dtype *out) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (!strcmp(s, DTYPES[i].name)) {
            *out = (st_dtype)i;
            return 0;
        }
    return -1;
}

static int cmp_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}
static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

// The 8-byte header length and its bounds; sets f->data_start.
static int parse_header_len(st_file *f, const uint8_t *data, size_t size, const char *what) {
    if (size < 8) {
        pt_set_error("%s: file too small for a safetensors header (%zu bytes)", what, size);
        return -1;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | data[i];
    if (n > ST_MAX_HEADER) {
        pt_set_error("%s: header length %llu exceeds the %u-byte limit", what, (unsigned long long)n, ST_MAX_HEADER);
        return -1;
    }
    if (n > size - 8) {
        pt_set_error("%s: header length %llu runs past the end of the file (%zu bytes): truncated header", what,
                     (unsigned long long)n, size);
        return -1;
    }
    f->data_start = 8 + (size_t)n;
    if (n == 0 || data[8] != '{') {
        pt_set_error("%s: header is not a JSON object", what);
        return -1;
    }
    return 0;
}

static int parse_metadata(st_file *f, const cJSON *it, const char *what) {
    if (f->meta_keys) {
        pt_set_error("%s: duplicate __metadata__", what);
        return -1;
    }
    if (!cJSON_IsObject(it)) {
        pt_set_error("%s: __metadata__ must be an object of strings", what);
        return -1;
    }
    int m = cJSON_GetArraySize(it);
    f->meta_keys = pt_calloc(m ? m : 1, sizeof(char *));
    f->meta_values = pt_calloc(m ? m : 1, sizeof(char *));
    const cJSON *kv;
    cJSON_ArrayForEach(kv, it) {
        if (!cJSON_IsString(kv)) {
            pt_set_error("%s: __metadata__ value of \"%s\" is not a string", what, kv->string);
            return -1;
        }
        f->meta_keys[f->num_meta] = pt_strdup(kv->string);
        f->meta_values[f->num_meta++] = pt_strdup(kv->valuestring);
    }
    return 0;
}

// dtype and shape of a tensor entry; *overflow is set when the element count does not fit 64 bits.
static int parse_dtype_shape(st_tensor *t, const cJSON *it, bool *overflow, const char *what) {
    const char *name = t->name;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    if (!cJSON_IsString(dt) || st_dtype_parse(dt->valuestring, &t->dtype) != 0) {
        pt_set_error("%s: tensor \"%s\": missing or unknown dtype%s%s", what, name, cJSON_IsString(dt) ? " " : "",
                     cJSON_IsString(dt) ? dt->valuestring : "");
        return -1;
    }
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > ST_MAX_DIMS) {
        pt_set_error("%s: tensor \"%s\": shape must be an array of at most %d integers", what, name, ST_MAX_DIMS);
        return -1;
    }
    uint64_t numel = 1;
    *overflow = false;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        double v = cJSON_IsNumber(d) ? d->valuedouble : -1;
        if (v < 0 || v != floor(v) || v > 9.0e15) {
            pt_set_error("%s: tensor \"%s\": shape entries must be non-negative integers", what, name);
            return -1;
        }
        t->shape[t->ndim++] = (int64_t)v;
        if (v != 0 && numel > UINT64_MAX / (uint64_t)v) *overflow = true;
        numel *= (uint64_t)v;
    }
    t->numel = numel;
    return 0;
}

// data_offsets of a tensor entry, checked against its dtype x shape and the data section.
static int parse_offsets(st_tensor *t, const cJSON *it, bool overflow, uint64_t data_len, const char *what) {
    const char *name = t->name;
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(of, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(of, 1))) {
        pt_set_error("%s: tensor \"%s\": data_offsets must be [begin, end]", what, name);
        return -1;
    }
    double b = cJSON_GetArrayItem(of, 0)->valuedouble, e = cJSON_GetArrayItem(of, 1)->valuedouble;
    if (b < 0 || e < b || b != floor(b) || e != floor(e) || e > 1.8e19) {
        pt_set_error("%s: tensor \"%s\": invalid data_offsets [%.0f, %.0f]", what, name, b, e);
        return -1;
    }
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    const uint64_t numel = t->numel;
    size_t es = st_dtype_size(t->dtype);
    if (overflow || numel > UINT64_MAX / es || t->end - t->begin != numel * es) {
        pt_set_error("%s: tensor \"%s\": byte range [%llu, %llu) is %llu bytes but shape x %s needs %llu", what,
                     name, (unsigned long long)t->begin, (unsigned long long)t->end,
                     (unsigned long long)(t->end - t->begin), st_dtype_name(t->dtype),
                     overflow ? 0ull : (unsigned long long)(numel * es));
        return -1;
    }
    if (t->end > data_len) {
        pt_set_error("%s: tensor \"%s\": byte range [%llu, %llu) is outside the data section (%llu bytes)",
                     what, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                     (unsigned long long)data_len);
        return -1;
    }
    return 0;
}

static int parse_tensor(st_file *f, const cJSON *it, const char *name, uint64_t data_len, const char *what) {
    st_tensor *t = &f->tensors[f->num_tensors];
    t->name = pt_strdup(name);
    f->num_tensors++;
    if (!cJSON_IsObject(it)) {
        pt_set_error("%s: tensor \"%s\": entry is not an object", what, name);
        return -1;
    }
    bool overflow;
    if (parse_dtype_shape(t, it, &overflow, what)) return -1;
    return parse_offsets(t, it, overflow, data_len, what);
}

static int parse_entries(st_file *f, const uint8_t *data, uint64_t data_len, const char *what) {
    cJSON *root = pt_json_parse((const char *)data + 8, f->data_start - 8, what);
    if (!root) return -1;
    if (!cJSON_IsObject(root)) {
        pt_set_error("%s: header is not a JSON object", what);
        cJSON_Delete(root);
        return -1;
    }
    int count = cJSON_GetArraySize(root);
    f->tensors = pt_calloc(count ? count : 1, sizeof(st_tensor));
    int rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *name = it->string ? it->string : "";
        rc = !strcmp(name, "__metadata__") ? parse_metadata(f, it, what) : parse_tensor(f, it, name, data_len, what);
        if (rc) break;
    }
    cJSON_Delete(root);
    return rc;
}

// No duplicate names, and the tensors tile the data section exactly.
static int check_layout(const st_file *f, uint64_t data_len, const char *what) {
    st_tensor **order = pt_malloc(sizeof(st_tensor *) * (f->num_tensors ? f->num_tensors : 1));
    for (int i = 0; i < f->num_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, f->num_tensors, sizeof *order, cmp_name);
    for (int i = 1; i < f->num_tensors; i++)
        if (!strcmp(order[i]->name, order[i - 1]->name)) {
            pt_set_error("%s: duplicate tensor name \"%s\"", what, order[i]->name);
            free(order);
            return -1;
        }
    qsort(order, f->num_tensors, sizeof *order, cmp_begin);
    uint64_t pos = 0;
    for (int i = 0; i < f->num_tensors; i++) {
        if (order[i]->begin != pos) {
            pt_set_error("%s: tensor \"%s\": byte range [%llu, %llu) %s the previous tensor (expected to start "
                         "at %llu)", what, order[i]->name, (unsigned long long)order[i]->begin,
                         (unsigned long long)order[i]->end, order[i]->begin < pos ? "overlaps" : "leaves a gap after",
                         (unsigned long long)pos);
            free(order);
            return -1;
        }
        pos = order[i]->end;
    }
    free(order);
    if (pos != data_len) {
        pt_set_error("%s: data section is %llu bytes but the tensors cover %llu", what, (unsigned long long)data_len,
                     (unsigned long long)pos);
        return -1;
    }
    return 0;
}

int st_parse(st_file *f, const uint8_t *data, size_t size, const char *what) {
    memset(f, 0, sizeof *f);
    f->path = pt_strdup(what);
    f->map = data;
    f->size = size;
    if (parse_header_len(f, data, size, what) == 0) {
        const uint64_t data_len = size - f->data_start;
        if (parse_entries(f, data, data_len, what) == 0 && check_layout(f, data_len, what) == 0) return 0;
    }
    f->map = NULL;  // caller owns the buffer on failure
    st_close(f);
    return -1;
}

int st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    const void *map;
    size_t size;
    if (pt_map_file(path, &map, &size) != 0) return -1;
    if (st_parse(f, map, size, path) != 0) {
        pt_unmap_file(map, size);
        return -1;
    }
    f->mapped = 1;
    return 0;
}

// Drops the mapped pages of bytes [begin, end) of the data section.
static void release_bytes(const st_file *f, uint64_t begin, uint64_t end) {
    if (!f->mapped || end <= begin) return;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), base = (uintptr_t)f->map;
    // whole pages, rounded outwards: a clean private read-only mapping loses nothing (a neighbour's page
    // is read from the file again when touched)
    const uintptr_t a = (base + f->data_start + begin) & ~(pg - 1);
    const uintptr_t e = PT_MIN((base + f->data_start + end + pg - 1) & ~(pg - 1), (base + f->size + pg - 1) & ~(pg - 1));
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

void st_release(const st_file *f, const st_tensor *t) { release_bytes(f, t->begin, t->end); }

void st_release_range(const st_file *f, const st_tensor *t, uint64_t first, uint64_t count) {
    const uint64_t es = st_dtype_size(t->dtype);
    release_bytes(f, t->begin + first * es, PT_MIN(t->end, t->begin + (first + count) * es));
}

void st_close(st_file *f) {
    pt_unmap_file(f->map, f->size);
    for (int i = 0; i < f->num_tensors; i++) free(f->tensors[i].name);
    for (int i = 0; i < f->num_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    free(f->tensors);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->num_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const st_file *f, const char *key) {
    for (int i = 0; i < f->num_meta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_values[i];
    return NULL;
}

const void *st_data(const st_file *f, const st_tensor *t) { return f->map + f->data_start + t->begin; }

float pt_f16_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        if (m == 0) u = s;
        else {  // subnormal
            e = 127 - 15 + 1;
            while (!(m & 0x400)) { m <<= 1; e--; }
            m &= 0x3ff;
            u = s | (e << 23) | (m << 13);
        }
    } else if (e == 31) u = s | 0x7f800000u | (m << 13);
    else u = s | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t pt_float_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00;      // NaN (quiet)
    if (a >= 0x477ff000u) return sign | 0x7c00;     // >= 65520 (halfway past 65504) and inf: inf
    if (a < 0x38800000u) {                          // below 2^-14: a subnormal half, m x 2^-24
        float m;
        memcpy(&m, &a, 4);
        return sign | (uint16_t)lrintf(m * 16777216.0f);  // exact scaling; lrintf rounds ties to even
    }
    // normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even
    a += 0xc8000fffu + ((a >> 13) & 1);
    return sign | (uint16_t)(a >> 13);
}

#define CHECK_COUNT(t, count)                                                                                  \
    if ((t)->numel != (count)) {                                                                              \
        pt_set_error("%s: tensor \"%s\" has %llu elements, expected %llu", f->path, (t)->name,               \
                     (unsigned long long)(t)->numel, (unsigned long long)(count));                            \
        return -1;                                                                                            \
    }

#define CHECK_RANGE(t, first, count)                                                                           \
    if ((first) > (t)->numel || (count) > (t)->numel - (first)) {                                               \
        pt_set_error("%s: tensor \"%s\" has %llu elements, cannot read [%llu, %llu)", f->path, (t)->name,         \
                     (unsigned long long)(t)->numel, (unsigned long long)(first),                              \
                     (unsigned long long)((first) + (count)));                                                  \
        return -1;                                                                                            \
    }

// Element i of a floating-point tensor's bytes p, widened to double (exact for every floating dtype).
static inline int read_real(const st_file *f, const st_tensor *t, const uint8_t *p, uint64_t i, double *v) {
    switch (t->dtype) {
    case ST_F32: { float x; memcpy(&x, p + 4 * i, 4); *v = x; return 0; }
    case ST_F64: { memcpy(v, p + 8 * i, 8); return 0; }
    case ST_BF16: { uint16_t x; memcpy(&x, p + 2 * i, 2); *v = pt_bf16_to_float(x); return 0; }
    case ST_F16: { uint16_t x; memcpy(&x, p + 2 * i, 2); *v = pt_f16_to_float(x); return 0; }
    default:
        pt_set_error("%s: tensor \"%s\" has dtype %s; expected a floating type (F32, BF16, F16, F64)", f->path,
                     t->name, st_dtype_name(t->dtype));
        return -1;
    }
}

int st_read_double(const st_file *f, const st_tensor *t, double *out, uint64_t count) {
    CHECK_COUNT(t, count)
    return st_read_double_range(f, t, 0, count, out);
}

int st_read_double_range(const st_file *f, const st_tensor *t, uint64_t first, uint64_t count, double *out) {
    CHECK_RANGE(t, first, count)
    const uint8_t *p = (const uint8_t *)st_data(f, t) + first * st_dtype_size(t->dtype);
    for (uint64_t i = 0; i < count; i++)
        if (read_real(f, t, p, i, &out[i])) return -1;
    return 0;
}

int st_read_float(const st_file *f, const st_tensor *t, float *out, uint64_t count) {
    CHECK_COUNT(t, count)
    return st_read_float_range(f, t, 0, count, out);
}

int st_read_float_range(const st_file *f, const st_tensor *t, uint64_t first, uint64_t count, float *out) {
    CHECK_RANGE(t, first, count)
    const uint8_t *p = (const uint8_t *)st_data(f, t) + first * st_dtype_size(t->dtype);
    if (t->dtype == ST_F32) {
        memcpy(out, p, 4 * count);
        return 0;
    }
    for (uint64_t i = 0; i < count; i++) {
        double v;  // float -> double -> float is exact, so this is the direct conversion
        if (read_real(f, t, p, i, &v)) return -1;
        out[i] = (float)v;
    }
    return 0;
}

int st_read_i32(const st_file *f, const st_tensor *t, int32_t *out, uint64_t count) {
    CHECK_COUNT(t, count)
    const uint8_t *p = st_data(f, t);
    for (uint64_t i = 0; i < count; i++) {
        if (t->dtype == ST_I32) memcpy(&out[i], p + 4 * i, 4);
        else if (t->dtype == ST_I64) {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            if (v < INT32_MIN || v > INT32_MAX) {
                pt_set_error("%s: tensor \"%s\" element %llu out of int32 range", f->path, t->name,
                             (unsigned long long)i);
                return -1;
            }
            out[i] = (int32_t)v;
        } else {
            pt_set_error("%s: tensor \"%s\" has dtype %s; expected I32 or I64", f->path, t->name,
                         st_dtype_name(t->dtype));
            return -1;
        }
    }
    return 0;
}

static const void *given_data(void *ctx, int i, uint64_t offset, uint64_t *nbytes) {
    const st_write_tensor *t = &((const st_write_tensor *)ctx)[i];
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
    *nbytes = numel * st_dtype_size(t->dtype) - offset;
    return (const uint8_t *)t->data + offset;
}

char *st_header_json(const st_write_tensor *tensors, int n, const char *const *meta_kv, int n_meta, size_t *len,
                     uint64_t *data_bytes) {
    cJSON *root = cJSON_CreateObject();
    if (n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(meta, meta_kv[2 * i], meta_kv[2 * i + 1]);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const st_write_tensor *t = &tensors[i];
        uint64_t numel = 1;
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) {
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
            numel *= (uint64_t)t->shape[d];
        }
        uint64_t bytes = numel * st_dtype_size(t->dtype);
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t jn = strlen(json);
    size_t padded = (jn + 7) & ~(size_t)7;  // writers pad the header to 8 bytes with spaces
    json = pt_realloc(json, padded);
    memset(json + jn, ' ', padded - jn);
    *len = padded;
    if (data_bytes) *data_bytes = off;
    return json;
}

int st_write(const char *path, const st_write_tensor *tensors, int n, const char *const *meta_kv, int n_meta) {
    return st_write_stream(path, tensors, n, meta_kv, n_meta, given_data, (void *)tensors);
}

int st_write_stream(const char *path, const st_write_tensor *tensors, int n, const char *const *meta_kv, int n_meta,
                    st_data_fn data, void *ctx) {
    size_t padded;
    char *json = st_header_json(tensors, n, meta_kv, n_meta, &padded, NULL);
    char *tmp = NULL;
    size_t plen = strlen(path);
    tmp = pt_malloc(plen + 16);
    snprintf(tmp, plen + 16, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        pt_set_error("%s: cannot create temporary file: %s", path, strerror(errno));
        free(json);
        free(tmp);
        return -1;
    }
    uint8_t hdr[8];
    for (int i = 0; i < 8; i++) hdr[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int rc = pt_write_all(fd, hdr, 8, path);
    if (!rc) rc = pt_write_all(fd, json, padded, path);
    for (int i = 0; i < n && !rc; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < tensors[i].ndim; d++) numel *= (uint64_t)tensors[i].shape[d];
        const uint64_t want = numel * st_dtype_size(tensors[i].dtype);
        for (uint64_t done = 0; done < want && !rc;) {
            uint64_t nb = 0;
            const void *bytes = data(ctx, i, done, &nb);
            if (bytes && (nb == 0 || nb > want - done)) {
                pt_set_error("%s: tensor \"%s\": %llu bytes supplied at offset %llu of %llu", path, tensors[i].name,
                             (unsigned long long)nb, (unsigned long long)done, (unsigned long long)want);
                bytes = NULL;
            }
            rc = bytes ? pt_write_all(fd, bytes, nb, path) : -1;
            done += nb;
        }
    }
    free(json);
    if (!rc && fsync(fd) != 0) {
        pt_set_error("%s: fsync failed: %s", path, strerror(errno));
        rc = -1;
    }
    fchmod(fd, 0644);
    close(fd);
    if (!rc && rename(tmp, path) != 0) {
        pt_set_error("%s: rename failed: %s", path, strerror(errno));
        rc = -1;
    }
    if (rc) unlink(tmp);
    free(tmp);
    if (!rc) {
        char *dir = pt_strdup(path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        rc = pt_fsync_dir(slash ? (dir[0] ? dir : "/") : ".");
        free(dir);
    }
    return rc;
}
