#include "testutil.h"

#include "util/common.h"

#include <math.h>

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int pt_test_failures = 0;
int pt_test_checks = 0;

int test_summary(const char *name) {
    printf("%s: %d checks, %d failed\n", name, pt_test_checks, pt_test_failures);
    return pt_test_failures ? 1 : 0;
}

static char *env_path(const char *var, const char *fallback, const char *rel) {
    const char *base = getenv(var);
    if (!base) base = fallback;
    size_t n = strlen(base) + strlen(rel) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", base, rel);
    return p;
}
char *test_source_path(const char *rel) { return env_path("PT_SOURCE_DIR", ".", rel); }
char *test_shared_path(const char *rel) { return env_path("PT_SHARED_DIR", "../shared", rel); }

char *test_tmpdir(const char *tag) {
    const char *base = getenv("TMPDIR");
    if (!base) base = "/tmp";
    size_t n = strlen(base) + strlen(tag) + 32;
    char *p = malloc(n);
    snprintf(p, n, "%s/pt-%s-XXXXXX", base, tag);
    if (!mkdtemp(p)) {
        perror("mkdtemp");
        exit(1);
    }
    return p;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(n + 1);
    size_t got = fread(b, 1, n, f);
    b[got] = 0;
    fclose(f);
    return b;
}

int test_run(const char *cmd, char **out, char **err) {
    char *dir = test_tmpdir("run");
    size_t n = strlen(cmd) + 2 * strlen(dir) + 64;
    char *full = malloc(n);
    snprintf(full, n, "%s >%s/out 2>%s/err", cmd, dir, dir);
    int rc = system(full);
    free(full);
    char path[4096];
    snprintf(path, sizeof path, "%s/out", dir);
    if (out) *out = slurp(path);
    unlink(path);
    snprintf(path, sizeof path, "%s/err", dir);
    if (err) *err = slurp(path);
    unlink(path);
    rmdir(dir);
    free(dir);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

// ---- kernel-test helpers

static uint64_t test_rng = 0x9E3779B97F4A7C15ull;
float test_frand(void) {
    test_rng = test_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((test_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
float *test_rnd(size_t n, float amp) {
    float *p = pt_aligned_alloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = amp * test_frand();
    return p;
}
float *test_dup(const float *a, size_t n) {
    float *p = pt_aligned_alloc(sizeof(float) * (n ? n : 1));
    memcpy(p, a, sizeof(float) * n);
    return p;
}
double test_relmax(const float *a, const float *b, size_t n) {
    double mx = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)b[i]));
        err = fmax(err, fabs((double)a[i] - (double)b[i]));
    }
    return mx > 0 ? err / mx : err;
}
double test_worst_kernel = 0;
void test_cmp(const char *what, const float *got, const float *want, size_t n, double tol) {
    double r = test_relmax(got, want, n);
    if (r > test_worst_kernel) test_worst_kernel = r;
    CHECK(r <= tol, "%s: relative-to-max error %.3e > %.1e", what, r, tol);
}
