#include "util/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char g_error[1024];
static _Thread_local bool g_error_transient;
static bool g_quiet = false;

void pt_set_error(const char *fmt, ...) {
    g_error_transient = false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    // Keep it one line: a message is printed as a single line by the CLI.
    for (char *p = g_error; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

void pt_prefix_error(const char *fmt, ...) {
    char prefix[512], old[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    snprintf(old, sizeof old, "%s", g_error);
    snprintf(g_error, sizeof g_error, "%s%s", prefix, old);
}

const char *pt_last_error(void) { return g_error[0] ? g_error : "unknown error"; }

void pt_mark_error_transient(int err) {
    g_error_transient = err == EIO || err == ESTALE || err == ETIMEDOUT || err == EAGAIN || err == EINTR ||
                        err == ENOMEM || err == ENFILE || err == EMFILE || err == EBUSY || err == ENOLINK ||
                        err == ECONNRESET || err == EHOSTUNREACH || err == ENETDOWN;
}
bool pt_last_error_transient(void) { return g_error_transient; }
void pt_clear_error(void) { g_error[0] = 0; }
bool pt_has_error(void) { return g_error[0] != 0; }

static void die_oom(size_t n) {
    fprintf(stderr, "portatrain: error: out of memory allocating %zu bytes\n", n);
    exit(1);
}

void *pt_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die_oom(n);
    return p;
}
void *pt_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) die_oom(count * size);
    return p;
}
void *pt_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) die_oom(n);
    return q;
}
char *pt_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = pt_malloc(n);
    memcpy(d, s, n);
    return d;
}
// Levenshtein distance over a row of the table: names and typos are short (longer ones are capped).
static int edit_distance(const char *a, int na, const char *b) {
    enum { MAX = 63 };
    int nb = (int)strlen(b), row[MAX + 1];
    if (na > MAX) na = MAX;
    if (nb > MAX) nb = MAX;
    for (int j = 0; j <= nb; j++) row[j] = j;
    for (int i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= nb; j++) {
            const int up = row[j];  // substitute, delete, insert
            int d = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < d) d = up + 1;
            if (row[j - 1] + 1 < d) d = row[j - 1] + 1;
            row[j] = d;
            diag = up;
        }
    }
    return row[nb];
}

const char *pt_nearest_name(const char *s, int len, const char *const *names, int n, int max_dist) {
    const int ns = len < 0 ? (int)strlen(s) : len;
    const char *best = NULL;
    int best_d = max_dist + 1;
    for (int k = 0; k < n; k++) {
        const int d = edit_distance(s, ns, names[k]);
        if (d < best_d) best = names[k], best_d = d;
    }
    return best;
}

void *pt_aligned_alloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) die_oom(n);
    return p;
}
void pt_aligned_free(void *p) { free(p); }

void pt_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("portatrain: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
void pt_info(const char *fmt, ...) {
    if (g_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
void pt_set_quiet(bool quiet) { g_quiet = quiet; }

double pt_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
double pt_wall_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int pt_env_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < PT_ARRAY_LEN(vars); i++) {
        const char *r = getenv(vars[i]);
        if (r) return atoi(r);
    }
    return -1;
}
