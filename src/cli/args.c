#include "cli/cli.h"
#include "util/common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local const char *g_inline_value;

void argp_init(pt_argparse *p, int argc, char **argv) {
    p->argc = argc;
    p->argv = argv;
    p->i = 1;
    p->cmd = argv[0];
    g_inline_value = NULL;
}

const char *argp_next(pt_argparse *p) {
    static _Thread_local char name[128];
    if (p->i >= p->argc) return NULL;
    const char *a = p->argv[p->i++];
    g_inline_value = NULL;
    if (strncmp(a, "--", 2) == 0) {
        const char *eq = strchr(a, '=');
        if (eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            g_inline_value = eq + 1;
            return name;
        }
    }
    return a;
}

const char *argp_value(pt_argparse *p) {
    if (g_inline_value) {
        const char *v = g_inline_value;
        g_inline_value = NULL;
        return v;
    }
    if (p->i >= p->argc) {
        fprintf(stderr, "portatrain %s: option %s needs a value\n", p->cmd, p->argv[p->i - 1]);
        exit(2);
    }
    return p->argv[p->i++];
}

int64_t argp_int(pt_argparse *p) {
    const char *opt = p->argv[p->i - 1];
    const char *v = argp_value(p);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end) {
        fprintf(stderr, "portatrain %s: option %s expects an integer, got '%s'\n", p->cmd, opt, v);
        exit(2);
    }
    return x;
}

double argp_double(pt_argparse *p) {
    const char *opt = p->argv[p->i - 1];
    const char *v = argp_value(p);
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        fprintf(stderr, "portatrain %s: option %s expects a number, got '%s'\n", p->cmd, opt, v);
        exit(2);
    }
    return x;
}

int argp_unknown(pt_argparse *p, const char *opt) {
    fprintf(stderr, "portatrain %s: unknown option or argument '%s' (see portatrain %s --help)\n", p->cmd, opt,
            p->cmd);
    return 2;
}

int cli_fail(void) {
    fprintf(stderr, "portatrain: error: %s\n", pt_last_error());
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "portatrain %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}
