#include "testutil.h"

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
