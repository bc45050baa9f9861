// Collectives over a communicator: the only place that talks to MPI.
//
// A pt_comm is the world or a sub-group (pt_comm_split). On a single process
// (no MPI launcher, or a build without MPI) the world has one rank and every
// collective is a local copy, so callers need no special case.
//
// Buffers are HOST memory. Every call adds its payload to the per-process
// counters of its kind (pt_comm_stats): all-reduce counts the buffer, all-gather
// the gathered (received) buffer, reduce-scatter the scattered (sent) buffer,
// broadcast the buffer. "control" is the small scalar traffic (loss, counts,
// norms, metrics), kept apart so the data-movement figures can be checked
// exactly against `portatrain topo`.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum { PT_COLL_ALLREDUCE, PT_COLL_ALLGATHER, PT_COLL_REDUCE_SCATTER, PT_COLL_BROADCAST, PT_COLL_ALLTOALL,
               PT_COLL_CONTROL, PT_COLL_KINDS } pt_coll_kind;
extern const char *const pt_coll_kind_name[PT_COLL_KINDS];

typedef struct pt_comm pt_comm;

typedef struct {
    uint64_t calls[PT_COLL_KINDS], bytes[PT_COLL_KINDS];
    double seconds[PT_COLL_KINDS];
} pt_comm_stats;

// Starts MPI when this process was launched by mpirun/srun (or `force`), else
// a one-rank world. Returns the world, NULL + error when MPI was required but
// is not compiled in or failed to start.
pt_comm *pt_comm_init(int force);
// MPI_Finalize (when it was started).
void pt_comm_finalize(void);
// Whether this process runs under an MPI launcher (environment), without starting MPI.
int pt_comm_launched(void);
int pt_comm_has_mpi(void);
// Ends every rank of the job (MPI_Abort) after this rank's error; on one process, exit(code).
_Noreturn void pt_comm_abort(int code);

int pt_comm_rank(const pt_comm *c);
int pt_comm_size(const pt_comm *c);
// The world rank of member `i` of c.
int pt_comm_world_rank(const pt_comm *c, int i);
// Ranks with the same color form a group, ordered by key.
pt_comm *pt_comm_split(pt_comm *c, int color, int key);
void pt_comm_free(pt_comm *c);

// In-place sum of float buffers over c.
void pt_comm_allreduce(pt_comm *c, float *buf, size_t n, pt_coll_kind kind);
// recv[size * n] = concatenation of every rank's send[n], in rank order.
void pt_comm_allgather(pt_comm *c, const float *send, float *recv, size_t n);
// send[size * n]: block r of the sum over ranks lands in rank r's recv[n].
void pt_comm_reduce_scatter(pt_comm *c, const float *send, float *recv, size_t n);
void pt_comm_broadcast(pt_comm *c, void *buf, size_t bytes, int root);
// All-to-all of bytes: block r of send (send_bytes[r] long, blocks back to back in rank order) goes to rank
// r, and rank r's block for this rank lands at recv's block r (recv_bytes[r] long, back to back). Counted as
// the bytes sent (the own block included), kind alltoall. Each block and each total must fit an int.
void pt_comm_alltoallv(pt_comm *c, const void *send, const size_t *send_bytes, void *recv, const size_t *recv_bytes);
void pt_comm_barrier(pt_comm *c);
// Deterministic double reduction: out[i] = sum over ranks, in rank order, of
// in[i] (identical bits on every rank). Control traffic.
void pt_comm_sum_f64(pt_comm *c, const double *in, double *out, int n);
// recv[size * n] doubles (all-gather of small control values).
void pt_comm_allgather_f64(pt_comm *c, const double *send, double *recv, int n, pt_coll_kind kind);
// Variable-size gather of bytes at root: *recv (malloc'd, root only) holds the
// ranks' buffers back to back, counts[size] their sizes (root only). Control.
void pt_comm_gather_bytes(pt_comm *c, const void *send, size_t n, int root, char **recv, size_t *counts);

// Whether `flag` is non-zero on any rank (control).
int pt_comm_any(pt_comm *c, int flag);

// Per-process counters since the start (never reset; callers take differences).
void pt_comm_get_stats(pt_comm_stats *out);
// Adds one call of `kind` to the counters: for collectives that bypass this
// file (the NCCL device collectives, dist/devcomm.h), with the same byte units.
void pt_comm_count(pt_coll_kind kind, size_t bytes, double seconds);
