// safetensors reader (validating) and writer.
//
// Reader rules (as the reference implementation): header length N <= 100 MB
// and inside the file; the header is a JSON object of name -> {dtype, shape,
// data_offsets} plus an optional "__metadata__" of strings; every byte range
// has end-begin == numel * dtype size; sorted by offset the ranges tile the
// data section exactly (no gaps, overlaps or trailing bytes); no duplicate
// names. Errors name the file and the tensor.
#pragma once
#include "util/bf16.h"  // pt_bf16_to_float, pt_float_to_bf16
#include <stddef.h>
#include <stdint.h>

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64,
    ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT
} st_dtype;

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u * 1000u * 1000u)

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;  // relative to the data section
    uint64_t numel;
} st_tensor;

typedef struct {
    char *path;
    const uint8_t *map;  // whole file, mmap'd read-only
    size_t size;
    size_t data_start;   // 8 + N
    int num_tensors;
    st_tensor *tensors;
    int num_meta;
    char **meta_keys, **meta_values;
    int mapped;          // map is a mapping of the file (st_open), not a caller's buffer (st_parse)
} st_file;

const char *st_dtype_name(st_dtype d);
size_t st_dtype_size(st_dtype d);
int st_dtype_parse(const char *s, st_dtype *out);

int st_open(st_file *f, const char *path);
// Validates an in-memory file image (used by st_open and the fuzzer). The
// buffer must outlive `f`; st_close does not free it when `owned` is 0.
int st_parse(st_file *f, const uint8_t *data, size_t size, const char *what);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key);
const void *st_data(const st_file *f, const st_tensor *t);
// Drops the mapped pages of tensor t from the process's resident set once it has been read (a file from
// st_open; they are read from the file again if touched). Streaming a model tensor by tensor this way
// keeps the mapping's resident pages to about one tensor instead of the whole file.
void st_release(const st_file *f, const st_tensor *t);
// The same for elements [first, first + count) of t (a block of rows streamed by itself).
void st_release_range(const st_file *f, const st_tensor *t, uint64_t first, uint64_t count);
// Converts a F32/F16/BF16/F64 tensor to float; count must equal numel.
int st_read_float(const st_file *f, const st_tensor *t, float *out, uint64_t count);
int st_read_double(const st_file *f, const st_tensor *t, double *out, uint64_t count);
// Elements [first, first + count) of t (row-major order), converted as above; the range must lie in t.
int st_read_float_range(const st_file *f, const st_tensor *t, uint64_t first, uint64_t count, float *out);
int st_read_double_range(const st_file *f, const st_tensor *t, uint64_t first, uint64_t count, double *out);
// Reads an I32/I64 tensor as int32 (range-checked).
int st_read_i32(const st_file *f, const st_tensor *t, int32_t *out, uint64_t count);

// ---- writer ----
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;  // numel * dtype size bytes, already in the target dtype
} st_write_tensor;

// Writes a safetensors file durably (temp file, fsync, rename, dir fsync).
// Tensors are laid out in the given order; metadata pairs may be NULL.
int st_write(const char *path, const st_write_tensor *tensors, int n, const char *const *meta_kv, int n_meta);
// The same with each tensor's bytes supplied as the file is written, in order, in pieces (tensors[i].data is
// not read): data(ctx, i, offset, &nbytes) returns the next bytes of tensor i from byte `offset` on (at least
// one, at most the rest), valid until the next call, or NULL with the error set (nothing is moved into place);
// it is called until the tensor's bytes are all written. The header needs only the names, dtypes and shapes,
// so no more than a piece of one tensor need be held at a time.
typedef const void *(*st_data_fn)(void *ctx, int i, uint64_t offset, uint64_t *nbytes);
int st_write_stream(const char *path, const st_write_tensor *tensors, int n, const char *const *meta_kv, int n_meta,
                    st_data_fn data, void *ctx);

// The JSON header of a safetensors file holding these tensors in order (their data is not read) and the
// metadata pairs, padded with spaces to a multiple of 8 bytes; *len is that padded length, *data_bytes (may
// be NULL) the bytes of tensor data after it. malloc'd; not NUL-terminated.
char *st_header_json(const st_write_tensor *tensors, int n, const char *const *meta_kv, int n_meta, size_t *len,
                     uint64_t *data_bytes);

// bf16 / f16 helpers
float pt_f16_to_float(uint16_t h);
// The IEEE half nearest f (ties to even, as torch's .to(float16)); beyond +-65504 (from 65520 on) it is
// +-inf, below 2^-14 a subnormal or zero; NaN stays NaN.
uint16_t pt_float_to_f16(float f);
