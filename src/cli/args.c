#include "cli/cli.h"
#include "data/shard.h"
#include "util/common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static _Thread_local const char *g_inline_value;
static _Thread_local char g_name[128];  // the option's canonical name ("--name" of "--name=value" or "--my_name")
static _Thread_local bool g_use_name;   // argp_next returned g_name, not the argv entry

// The option being parsed: its canonical name alone for "--name=value" and "--my_name".
static const char *cur_opt(const pt_argparse *p) { return g_use_name ? g_name : p->argv[p->i - 1]; }

bool argp_canonical_name(const char *arg, char *name, size_t size, const char **value) {
    *value = NULL;
    if (strncmp(arg, "--", 2) != 0) return false;
    const char *eq = strchr(arg, '=');
    const size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    if (n >= size) return false;
    // HF's HfArgumentParser takes both "--learning_rate" and "--learning-rate"; so do we (only the name part)
    bool changed = eq != NULL;
    for (size_t k = 0; k < n; k++) {
        name[k] = arg[k] == '_' && k >= 2 ? '-' : arg[k];
        changed |= name[k] != arg[k];
    }
    name[n] = 0;
    if (eq) *value = eq + 1;
    return changed;
}

void argp_init(pt_argparse *p, int argc, char **argv) {
    p->argc = argc;
    p->argv = argv;
    p->i = 1;
    p->cmd = argv[0];
    g_inline_value = NULL;
}

const char *argp_next(pt_argparse *p) {
    // "--flag=value" whose handler took no value (a flag not using argp_flag):
    // an error, not silently the flag's default meaning.
    if (g_inline_value) {
        fprintf(stderr, "portatrain: error: %s: option %s takes no value, got '%s'\n", p->cmd, g_name, g_inline_value);
        exit(2);
    }
    g_use_name = false;
    if (p->i >= p->argc) return NULL;
    const char *a = p->argv[p->i++];
    if (argp_canonical_name(a, g_name, sizeof g_name, &g_inline_value)) {
        g_use_name = true;
        return g_name;
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
        fprintf(stderr, "portatrain: error: %s: option %s needs a value\n", p->cmd, p->argv[p->i - 1]);
        exit(2);
    }
    return p->argv[p->i++];
}

int64_t argp_int(pt_argparse *p) {
    const char *opt = cur_opt(p);
    const char *v = argp_value(p);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end) {
        fprintf(stderr, "portatrain: error: %s: option %s expects an integer, got '%s'\n", p->cmd, opt, v);
        exit(2);
    }
    return x;
}

int64_t argp_parse_int(const char *cmd, const char *opt, const char *v, int64_t min, int64_t max) {
    char *end;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end) {
        fprintf(stderr, "portatrain: error: %s: option %s expects an integer, got '%s'\n", cmd, opt, v);
        exit(2);
    }
    if (x < min || x > max) {  // checked before any narrowing cast: 2^32+16 must not become 16
        fprintf(stderr, "portatrain: error: %s: option %s must be in [%lld, %lld], got '%s'\n", cmd, opt, (long long)min,
                (long long)max, v);
        exit(2);
    }
    return x;
}

double argp_parse_double(const char *cmd, const char *opt, const char *v, double min) {
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        fprintf(stderr, "portatrain: error: %s: option %s expects a number, got '%s'\n", cmd, opt, v);
        exit(2);
    }
    if (x < min) {
        fprintf(stderr, "portatrain: error: %s: option %s must be >= %g, got '%s'\n", cmd, opt, min, v);
        exit(2);
    }
    return x;
}

int64_t argp_int_range(pt_argparse *p, int64_t min, int64_t max) {
    const char *opt = cur_opt(p);
    return argp_parse_int(p->cmd, opt, argp_value(p), min, max);
}

bool argp_flag(pt_argparse *p) {
    const char *v = g_inline_value;
    g_inline_value = NULL;  // a flag never takes the next argument as its value
    return v ? argp_parse_bool(p->cmd, g_name, v) : true;
}

const char *argp_flag_value(pt_argparse *p) {
    const char *v = g_inline_value;
    g_inline_value = NULL;  // a flag never takes the next argument as its value
    return v;
}

bool argp_parse_bool(const char *cmd, const char *opt, const char *v) {
    static const char *const yes[] = {"true", "1", "yes"}, *const no[] = {"false", "0", "no"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(v, yes[i])) return true;
        if (!strcasecmp(v, no[i])) return false;
    }
    fprintf(stderr, "portatrain: error: %s: option %s takes no value or one of true/false/1/0/yes/no, got '%s'\n", cmd,
            opt, v);
    exit(2);
}

double argp_double(pt_argparse *p) {
    const char *opt = cur_opt(p);
    const char *v = argp_value(p);
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        fprintf(stderr, "portatrain: error: %s: option %s expects a number, got '%s'\n", p->cmd, opt, v);
        exit(2);
    }
    return x;
}

double argp_double_min(pt_argparse *p, double min) {
    const char *opt = cur_opt(p);
    return argp_parse_double(p->cmd, opt, argp_value(p), min);
}

int argp_unknown(pt_argparse *p, const char *opt) {
    // as the user typed it ("--learning_rat", not its canonical "--learning-rat")
    const char *typed = p->i > 0 && p->i <= p->argc ? p->argv[p->i - 1] : opt;
    const char *eq = strncmp(typed, "--", 2) == 0 ? strchr(typed, '=') : NULL;
    fprintf(stderr, "portatrain: error: %s: unknown option or argument '%.*s' (see portatrain %s --help)\n", p->cmd,
            eq ? (int)(eq - typed) : (int)strlen(typed), typed, p->cmd);
    return 2;
}

int cli_fail(void) {
    fprintf(stderr, "portatrain: error: %s\n", pt_last_error());
    return 1;
}

bool cli_raw_text(const char *path) {
    if (!path || !pt_shard_explain_raw_text(path)) return false;
    fprintf(stderr, "portatrain: error: %s\n", pt_last_error());
    return true;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "portatrain: error: %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}
