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
