#define _GNU_SOURCE  // realpath
#include "util/sysinfo.h"
#include "util/common.h"
#include "util/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The value of the first "key : value" line of text whose key is `key`.
static char *value_of(const char *text, const char *key) {
    size_t kl = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, key, kl) != 0 || (l[kl] != ' ' && l[kl] != '\t' && l[kl] != ':')) continue;
        const char *c = strchr(l, ':'), *e = strchr(l, '\n');
        if (!c || (e && c > e)) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        size_t n = e ? (size_t)(e - c) : strlen(c);
        char *v = pt_malloc(n + 1);
        memcpy(v, c, n);
        v[n] = 0;
        return v;
    }
    return NULL;
}

char *pt_cpuinfo_value(const char *key) {
    size_t len;
    char *ci = pt_file_exists("/proc/cpuinfo") ? pt_read_file("/proc/cpuinfo", &len) : NULL;
    pt_clear_error();  // no /proc (another OS, a sandbox): no description, not an error
    char *v = ci ? value_of(ci, key) : NULL;
    free(ci);
    return v;
}

void pt_cpu_model(char *out, size_t n) {
    char *m = pt_cpuinfo_value("model name");
    snprintf(out, n, "%s", m ? m : "unknown CPU");
    free(m);
}

int pt_loadavg(double out[3]) {
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return -1;
    const int n = fscanf(f, "%lf %lf %lf", &out[0], &out[1], &out[2]);
    fclose(f);
    return n == 3 ? 0 : -1;
}

// Whether the space-separated flag list holds the flag f.
static int has_flag(const char *flags, const char *f) {
    const size_t n = strlen(f);
    for (const char *p = flags; p && (p = strstr(p, f)); p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ' || p[n] == '\n')) return 1;
    return 0;
}

double pt_cpu_peak_flops(int threads, char *how, size_t n) {
    char *mhz = pt_cpuinfo_value("cpu MHz"), *flags = pt_cpuinfo_value("flags");
    const double clock = mhz ? atof(mhz) * 1e6 : 0;
    // two FMA units per core, each a multiply and an add per fp32 lane: 2 x 2 x lanes
    const int per_cycle = flags && has_flag(flags, "avx512f")                              ? 64
                          : flags && has_flag(flags, "avx2") && has_flag(flags, "fma") ? 32
                                                                                      : 8;
    const char *isa = per_cycle == 64 ? "AVX-512 FMA" : per_cycle == 32 ? "AVX2 FMA" : "SSE";
    free(mhz);
    free(flags);
    const double peak = threads > 0 ? threads * clock * per_cycle : 0;
    if (how && n) {
        if (peak > 0) snprintf(how, n, "%d cores x %.2f GHz x %d fp32 FLOP/cycle (%s), from /proc/cpuinfo", threads,
                               clock / 1e9, per_cycle, isa);
        else snprintf(how, n, "no CPU clock in /proc/cpuinfo");
    }
    return peak;
}

char *pt_install_path(const char *rel) {
    char *exe = realpath("/proc/self/exe", NULL);
    if (!exe) return NULL;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    const size_t n = strlen(exe) + strlen(rel) + 2;
    char *p = pt_malloc(n);
    snprintf(p, n, "%s/%s", exe, rel);
    free(exe);
    char *real = pt_file_exists(p) ? realpath(p, NULL) : NULL;
    free(p);
    return real;
}
