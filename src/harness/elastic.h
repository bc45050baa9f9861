// Elastic restarts (train --supervise --elastic): when a node's ranks are lost for good, the supervisor
// restarts the job on the largest layout the remaining ranks allow. TP stays (a TP group is the unit the
// model is split by); the data ranks (FSDP x DP) shrink; the global batch stays the same, the rows a
// data rank gave up going into gradient accumulation. The checkpoint loader reshards to any layout.
#pragma once
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    int world, tp, fsdp, dp;
    long batch, accum;  // --per-device-train-batch-size, --gradient-accumulation-steps
} pt_layout;

typedef struct {
    bool on;                // --elastic
    int min_world;          // --min-world N: never fewer ranks than this
    int nproc_per_node;     // --nproc-per-node K: ranks per node without --hostfile
    const char *hostfile;   // --hostfile FILE: the nodes (OpenMPI format), re-read before each restart
    double rejoin_timeout;  // --rejoin-timeout S: how long lost ranks may take to come back
} pt_elastic_opts;

// The layout a `train` argv asks for on `world` ranks (dp takes what tp x fsdp leave, as train does).
// -1 + error when the flags are unreadable or do not divide the world.
int pt_layout_from_args(int argc, char **argv, int world, pt_layout *l);
// The largest layout of at most `live` ranks (and at least min_world) with old's TP and global batch
// (batch x accum x fsdp x dp rows). 0 and *out set; -1 with a one-line reason in `why`.
int pt_layout_shrink(const pt_layout *old, int live, int min_world, pt_layout *out, char *why, size_t n);
// "TP2 x FSDP4 x DP1 (8 ranks, batch 1 x accumulation 1)"
void pt_layout_str(const pt_layout *l, char *out, size_t n);

// The worker command of a layout: the launcher with its -np/-n replaced, and the train argv with its
// layout flags replaced. Owns its strings; pt_elastic_cmd_free releases them.
typedef struct {
    char *launcher;
    char **argv;
    int argc;
    char vals[5][64];
} pt_elastic_cmd;
int pt_elastic_cmd_build(pt_elastic_cmd *c, const char *launcher, int argc, char **argv, const pt_layout *l);
void pt_elastic_cmd_free(pt_elastic_cmd *c);
