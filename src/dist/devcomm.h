// Device collectives: NCCL on the cuda backend's own buffers and stream.
//
// The same contracts as comm.h's float collectives, but every buffer is
// BACKEND (device) memory and the call is ordered on be->stream, so nothing
// is staged through the host. One pt_devcomm mirrors one pt_comm (same ranks,
// same order) and is bootstrapped over it: rank 0 makes the NCCL unique id and
// broadcasts it, every rank joins with ncclCommInitRank on the device the
// backend made current.
//
// Counters: each call adds to the pt_comm_stats of its kind with comm.h's byte
// conventions (all-reduce the buffer, all-gather the gathered buffer,
// reduce-scatter the scattered buffer), so `portatrain topo` predicts them as
// it does the MPI layer's. The seconds are the collective's own time: the
// stream is synchronised before (compute is not counted) and after it.
//
// Errors (an NCCL or CUDA call failing) print one line with the NCCL/CUDA
// error string and end the job (pt_comm_abort): no rank is left waiting.
#pragma once
#include <stddef.h>

#include "backend/backend.h"
#include "dist/comm.h"

typedef struct pt_devcomm pt_devcomm;

// NULL, without an error, when device collectives do not apply and callers
// keep the host path: this build has no NCCL, the backend is not `cuda`, c has
// one rank, two ranks of c share one GPU (NCCL refuses a device twice in a
// communicator), or PT_NCCL=0 is set. Collective over c: every rank of c calls
// it, in the same order of communicators, and every rank gets the same answer.
pt_devcomm *pt_devcomm_create(pt_comm *c, pt_backend *be);
// In-place sum of buf[n] over the ranks (counted under `kind`).
void pt_devcomm_allreduce(pt_devcomm *d, float *buf, size_t n, pt_coll_kind kind);
// recv[size * n] = every rank's send[n], in rank order.
void pt_devcomm_allgather(pt_devcomm *d, const float *send, float *recv, size_t n);
// send[size * n]: block r of the sum over ranks lands in rank r's recv[n].
void pt_devcomm_reduce_scatter(pt_devcomm *d, const float *send, float *recv, size_t n);
void pt_devcomm_free(pt_devcomm *d);
// "NCCL 2.28.9" when this build has NCCL and the library loads, else NULL.
const char *pt_devcomm_version(void);
// One line for `portatrain devices`: the version, or why there is no NCCL.
const char *pt_devcomm_describe(void);
