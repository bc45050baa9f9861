// Minimal test harness: CHECK macros that count failures, and helpers.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int pt_test_failures;
extern int pt_test_checks;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        pt_test_checks++;                                                 \
        if (!(cond)) {                                                    \
            pt_test_failures++;                                           \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

// Returns the process exit status: prints a summary line.
int test_summary(const char *name);
// $PT_SOURCE_DIR / $PT_SHARED_DIR with a relative path appended (malloc'd).
char *test_source_path(const char *rel);
char *test_shared_path(const char *rel);
// A fresh temporary directory (mkdtemp under $TMPDIR or /tmp).
char *test_tmpdir(const char *tag);
// Runs a shell command; returns its exit status; captures stderr into *err (malloc'd) if err.
int test_run(const char *cmd, char **out, char **err);

// The bit pattern of an fp32 value, and back (bitwise comparisons, NaN payloads).
static inline uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Kernel-test helpers (backend parity tests). A fixed LCG, so every run draws the same numbers.
float test_frand(void);                              // uniform [-1, 1)
float *test_rnd(size_t n, float amp);                // n values amp * test_frand(), aligned, caller frees
float *test_dup(const float *a, size_t n);           // aligned copy
double test_relmax(const float *a, const float *b, size_t n);  // max |a-b| / max |b|
// CHECKs test_relmax(got, want) <= tol naming `what`; keeps the worst ratio in test_worst_kernel.
extern double test_worst_kernel;
void test_cmp(const char *what, const float *got, const float *want, size_t n, double tol);
