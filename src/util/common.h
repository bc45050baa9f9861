// Shared conventions: errors, allocation, small helpers.
//
// Library functions report failure by returning -1 (or NULL) after calling
// pt_set_error() with a one-line message that names the file/field at fault.
// The CLI prints that message as "portatrain: error: ..." and exits non-zero.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

// Floating type of the model and reference kernels. fp32 in every product build;
// the finite-difference gradient check compiles the same sources with
// -DPT_REAL_DOUBLE to get a double-precision model.
#ifdef PT_REAL_DOUBLE
typedef double real_t;
#else
typedef float real_t;
#endif

#if defined(__GNUC__)
#define PT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PT_PRINTF(a, b)
#endif

void pt_set_error(const char *fmt, ...) PT_PRINTF(1, 2);
// Prepends context ("loading model dir X: ") to the current error.
void pt_prefix_error(const char *fmt, ...) PT_PRINTF(1, 2);
const char *pt_last_error(void);
// Marks the error just set as one that may clear up when the operation is retried: an I/O error such as EIO,
// ESTALE or ETIMEDOUT (err = the errno), not a missing, unreadable or malformed file. pt_set_error clears the
// mark, pt_prefix_error keeps it. The trainer uses it to tell a restart worth trying (exit 1) from input that
// will fail the same way (exit 2).
void pt_mark_error_transient(int err);
bool pt_last_error_transient(void);
void pt_clear_error(void);
bool pt_has_error(void);

// Aborting allocators for sizes the program cannot continue without.
void *pt_malloc(size_t n);
void *pt_calloc(size_t count, size_t size);
void *pt_realloc(void *p, size_t n);
char *pt_strdup(const char *s);
// The name in names[0..n) nearest to s (the first of equals), by edit distance over at most the first
// len characters of s (len < 0: all of it), or NULL when even that one is more than max_dist edits away:
// what a "did you mean" suggests.
const char *pt_nearest_name(const char *s, int len, const char *const *names, int n, int max_dist);
// 64-byte aligned allocation (free with pt_aligned_free).
void *pt_aligned_alloc(size_t n);
void pt_aligned_free(void *p);

void pt_warn(const char *fmt, ...) PT_PRINTF(1, 2);
void pt_info(const char *fmt, ...) PT_PRINTF(1, 2);
// Quiet mode silences pt_info (tests, machine-readable output).
void pt_set_quiet(bool quiet);

// This process's world rank as an MPI launcher set it in the environment (Open MPI's OMPI_COMM_WORLD_RANK,
// else PMI_RANK, else PMIX_RANK); -1 when none did (not started by a launcher).
int pt_env_rank(void);

double pt_now_s(void);        // monotonic seconds
double pt_wall_time_s(void);  // seconds since the epoch

#define PT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define PT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
