#include "harness/elastic.h"
#include "util/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The layout flags the supervisor rewrites: the mesh and the batch split.
static const char *const k_layout_flags[] = {"tp", "fsdp", "dp", "per-device-train-batch-size",
                                             "gradient-accumulation-steps"};
enum { F_TP, F_FSDP, F_DP, F_BATCH, F_ACCUM, F_N };

// Which layout flag argv[i] is (F_N: none): "--name v" or "--name=v", dashes or underscores. *inline_val:
// the "=v" part or NULL.
static int layout_flag(const char *arg, const char **inline_val) {
    *inline_val = NULL;
    if (strncmp(arg, "--", 2) != 0) return F_N;
    char name[64];
    size_t n = 0;
    for (const char *p = arg + 2; *p && *p != '=' && n + 1 < sizeof name; p++) name[n++] = *p == '_' ? '-' : *p;
    name[n] = 0;
    const char *eq = strchr(arg, '=');
    for (int f = 0; f < F_N; f++)
        if (!strcmp(name, k_layout_flags[f])) {
            *inline_val = eq ? eq + 1 : NULL;
            return f;
        }
    return F_N;
}

int pt_layout_from_args(int argc, char **argv, int world, pt_layout *l) {
    long v[F_N] = {1, 1, 0, 8, 1};  // train's defaults; dp 0: what is left
    for (int i = 1; i < argc; i++) {
        const char *iv;
        const int f = layout_flag(argv[i], &iv);
        if (f == F_N) continue;
        const char *s = iv ? iv : i + 1 < argc ? argv[++i] : "";
        char *end;
        v[f] = strtol(s, &end, 10);
        if (*end || v[f] < 1 || v[f] > 1000000000L) {
            pt_set_error("--elastic: --%s %s is not a positive integer", k_layout_flags[f], s);
            return -1;
        }
    }
    if (!v[F_DP]) v[F_DP] = world / (v[F_TP] * v[F_FSDP]);
    if (v[F_TP] * v[F_FSDP] * v[F_DP] != world) {
        pt_set_error("--elastic: tp %ld x fsdp %ld x dp %ld is not the launcher's %d ranks", v[F_TP], v[F_FSDP],
                     v[F_DP], world);
        return -1;
    }
    *l = (pt_layout){world, (int)v[F_TP], (int)v[F_FSDP], (int)v[F_DP], v[F_BATCH], v[F_ACCUM]};
    return 0;
}

void pt_layout_str(const pt_layout *l, char *out, size_t n) {
    snprintf(out, n, "TP%d x FSDP%d x DP%d (%d ranks, batch %ld x accumulation %ld)", l->tp, l->fsdp, l->dp,
             l->world, l->batch, l->accum);
}

int pt_layout_shrink(const pt_layout *old, int live, int min_world, pt_layout *out, char *why, size_t n) {
    const long rows = old->batch * old->accum * old->fsdp * old->dp;  // the global batch, kept
    const int floor_d = (min_world + old->tp - 1) / old->tp;
    for (int d = live / old->tp; d >= 1 && d >= floor_d; d--) {
        // Each data rank keeps its micro-batch (activation memory stays) and accumulates more of them.
        if (rows % d || (rows / d) % old->batch) continue;
        // FSDP shrinks and DP stays when it still divides; else the data ranks become one FSDP group.
        const bool keep_dp = d % old->dp == 0 && old->fsdp > 1;
        const int dp = old->fsdp == 1 ? d : keep_dp ? old->dp : 1;
        *out = (pt_layout){d * old->tp, old->tp, d / dp, dp, old->batch, rows / d / old->batch};
        return 0;
    }
    if (live < min_world)
        snprintf(why, n, "%d ranks remain, fewer than --min-world %d", live, min_world);
    else
        snprintf(why, n, "no layout of TP%d on %d to %d ranks keeps the global batch of %ld rows (its %ld "
                 "micro-batches of %ld rows do not split evenly over the data ranks)", old->tp, floor_d * old->tp,
                 live, rows, rows / old->batch, old->batch);
    return -1;
}

// The launcher with its rank count replaced ("mpirun -np 8 --oversubscribe" -> "... -np 4 ...").
static char *launcher_with_np(const char *launcher, int np) {
    const char *p = strstr(launcher, "-np ");
    if (!p) p = strstr(launcher, "-n ");
    if (!p) return pt_strdup(launcher);
    const char *num = strchr(p, ' ') + 1, *end = num;
    while (*end >= '0' && *end <= '9') end++;
    const size_t len = strlen(launcher) + 16;
    char *s = malloc(len);
    snprintf(s, len, "%.*s%d%s", (int)(num - launcher), launcher, np, end);
    return s;
}

int pt_elastic_cmd_build(pt_elastic_cmd *c, const char *launcher, int argc, char **argv, const pt_layout *l) {
    memset(c, 0, sizeof *c);
    c->launcher = launcher_with_np(launcher, l->world);
    c->argv = calloc((size_t)argc + 2 * F_N + 1, sizeof *c->argv);
    for (int i = 0; i < argc; i++) {
        const char *iv;
        if (layout_flag(argv[i], &iv) != F_N) {
            if (!iv) i++;  // its value
            continue;
        }
        c->argv[c->argc++] = argv[i];
    }
    const long v[F_N] = {l->tp, l->fsdp, l->dp, l->batch, l->accum};
    for (int f = 0; f < F_N; f++) {
        snprintf(c->vals[f], sizeof c->vals[f], "--%s=%ld", k_layout_flags[f], v[f]);
        c->argv[c->argc++] = c->vals[f];
    }
    c->argv[c->argc] = NULL;
    return 0;
}

void pt_elastic_cmd_free(pt_elastic_cmd *c) {
    free(c->launcher);
    free(c->argv);
    memset(c, 0, sizeof *c);
}
