// NCCL device collectives (dist/devcomm.h). Without PT_HAVE_NCCL (a build
// without PT_CUDA or without NCCL) pt_devcomm_create returns NULL and callers
// keep the host path, so this file is always part of pt_dist.
#include "dist/devcomm.h"
#include "util/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PT_HAVE_NCCL

pt_devcomm *pt_devcomm_create(pt_comm *c, pt_backend *be) { return NULL; }
// Never reached: create never returns a devcomm in such a build.
void pt_devcomm_allreduce(pt_devcomm *d, float *buf, size_t n, pt_coll_kind kind) { abort(); }
void pt_devcomm_allgather(pt_devcomm *d, const float *send, float *recv, size_t n) { abort(); }
void pt_devcomm_reduce_scatter(pt_devcomm *d, const float *send, float *recv, size_t n) { abort(); }
void pt_devcomm_free(pt_devcomm *d) {}
const char *pt_devcomm_version(void) { return NULL; }

#else

#include <cuda_runtime.h>
#include <nccl.h>

struct pt_devcomm {
    ncclComm_t nccl;
    cudaStream_t stream;
    int size;
    int timed;  // synchronise around each call so its seconds are its own (PT_NCCL_ASYNC=1: no)
};

// One line naming the call and NCCL's reason, then the whole job ends: a rank
// that stopped here would leave the others blocked in the collective.
static void nccl_fail(const pt_devcomm *d, const char *what, ncclResult_t r) {
    const char *last = d && d->nccl ? ncclGetLastError(d->nccl) : NULL;
    fprintf(stderr, "portatrain: error: NCCL %s failed: %s%s%s\n", what, ncclGetErrorString(r),
            last && *last ? ": " : "", last && *last ? last : "");
    pt_comm_abort(1);
}
static void cuda_fail(const char *what, cudaError_t e) {
    fprintf(stderr, "portatrain: error: %s failed: %s\n", what, cudaGetErrorString(e));
    pt_comm_abort(1);
}
#define NCCL_OK(d, what, call)                     \
    do {                                           \
        ncclResult_t r_ = (call);                  \
        if (r_ != ncclSuccess) nccl_fail(d, what, r_); \
    } while (0)
#define CUDA_OK(what, call)                        \
    do {                                           \
        cudaError_t e_ = (call);                   \
        if (e_ != cudaSuccess) cuda_fail(what, e_); \
    } while (0)

const char *pt_devcomm_version(void) {
    static char v[32];
    int code = 0;
    if (ncclGetVersion(&code) != ncclSuccess) return "NCCL (version unknown)";
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch
    snprintf(v, sizeof v, "NCCL %d.%d.%d", code / 10000, code / 100 % 100, code % 100);
    return v;
}

// Run-to-run determinism: with a fixed number of ranks and topology, NCCL's
// ring all-reduce and reduce-scatter add the ranks' contributions in an order
// fixed by the ring, but the tuner may pick other algorithms (tree, NVLS: the
// reduction in the NVSwitch) or protocols by message size and topology. Pin the
// ring with the Simple protocol unless the user chose (NCCL_ALGO / NCCL_PROTO
// set) or asked for NCCL's own tuning (PT_NCCL_TUNED=1). NCCL reads these once,
// at its first communicator, so this must run before any ncclCommInitRank.
static void pin_algorithms(void) {
    const char *tuned = getenv("PT_NCCL_TUNED");
    if (tuned && strcmp(tuned, "0") != 0) return;
    setenv("NCCL_ALGO", "Ring", 0);
    setenv("NCCL_PROTO", "Simple", 0);
}

// Whether two ranks of c sit on one GPU (device UUIDs gathered at rank 0, the
// verdict broadcast, so every rank answers the same). NCCL refuses a device
// twice in one communicator ("Duplicate GPU detected", ncclInvalidUsage).
static int shares_a_gpu(pt_comm *c, int dev) {
    struct cudaDeviceProp prop;
    CUDA_OK("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, dev));
    char *all = NULL;
    size_t *counts = pt_calloc(pt_comm_size(c), sizeof(size_t));
    pt_comm_gather_bytes(c, prop.uuid.bytes, sizeof prop.uuid.bytes, 0, &all, counts);
    int dup[2] = {-1, -1};
    if (pt_comm_rank(c) == 0) {
        const size_t U = sizeof prop.uuid.bytes;
        for (int i = 0; i < pt_comm_size(c) && dup[0] < 0; i++)
            for (int j = i + 1; j < pt_comm_size(c); j++)
                if (!memcmp(all + i * U, all + j * U, U)) {
                    dup[0] = pt_comm_world_rank(c, i), dup[1] = pt_comm_world_rank(c, j);
                    break;
                }
        if (dup[0] >= 0)
            pt_warn("ranks %d and %d use the same GPU; NCCL allows a device only once per communicator, so the "
                    "collectives of their group go through the host (MPI)", dup[0], dup[1]);
    }
    pt_comm_broadcast(c, dup, sizeof dup, 0);
    free(all);
    free(counts);
    return dup[0] >= 0;
}

pt_devcomm *pt_devcomm_create(pt_comm *c, pt_backend *be) {
    const char *off = getenv("PT_NCCL");
    if (off && strcmp(off, "0") == 0) return NULL;
    if (!be || strcmp(be->name, "cuda") != 0 || pt_comm_size(c) < 2) return NULL;
    int dev = 0;
    if (be->stream) CUDA_OK("cudaStreamGetDevice", cudaStreamGetDevice((cudaStream_t)be->stream, &dev));
    else CUDA_OK("cudaGetDevice", cudaGetDevice(&dev));
    if (shares_a_gpu(c, dev)) return NULL;
    CUDA_OK("cudaSetDevice", cudaSetDevice(dev));
    pin_algorithms();
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (pt_comm_rank(c) == 0) NCCL_OK(NULL, "ncclGetUniqueId", ncclGetUniqueId(&id));
    pt_comm_broadcast(c, &id, sizeof id, 0);
    pt_devcomm *d = pt_calloc(1, sizeof *d);
    d->stream = (cudaStream_t)be->stream;
    d->size = pt_comm_size(c);
    const char *async = getenv("PT_NCCL_ASYNC");
    d->timed = !(async && strcmp(async, "0") != 0);
    NCCL_OK(d, "ncclCommInitRank", ncclCommInitRank(&d->nccl, d->size, id, pt_comm_rank(c)));
    return d;
}

// The seconds counted are the collective's alone: the stream's earlier work
// (compute) is waited for first. portatrain does not overlap communication
// with compute, so this costs one synchronisation per call, no parallelism.
static double begin(pt_devcomm *d) {
    if (d->timed) CUDA_OK("cudaStreamSynchronize", cudaStreamSynchronize(d->stream));
    return pt_now_s();
}
static void end(pt_devcomm *d, pt_coll_kind kind, size_t bytes, double t0) {
    if (d->timed) CUDA_OK("cudaStreamSynchronize", cudaStreamSynchronize(d->stream));
    pt_comm_count(kind, bytes, pt_now_s() - t0);
}

void pt_devcomm_allreduce(pt_devcomm *d, float *buf, size_t n, pt_coll_kind kind) {
    const double t0 = begin(d);
    NCCL_OK(d, "ncclAllReduce", ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, d->nccl, d->stream));
    end(d, kind, n * sizeof(float), t0);
}

void pt_devcomm_allgather(pt_devcomm *d, const float *send, float *recv, size_t n) {
    const double t0 = begin(d);
    NCCL_OK(d, "ncclAllGather", ncclAllGather(send, recv, n, ncclFloat32, d->nccl, d->stream));
    end(d, PT_COLL_ALLGATHER, (size_t)d->size * n * sizeof(float), t0);
}

void pt_devcomm_reduce_scatter(pt_devcomm *d, const float *send, float *recv, size_t n) {
    const double t0 = begin(d);
    NCCL_OK(d, "ncclReduceScatter", ncclReduceScatter(send, recv, n, ncclFloat32, ncclSum, d->nccl, d->stream));
    end(d, PT_COLL_REDUCE_SCATTER, (size_t)d->size * n * sizeof(float), t0);
}

void pt_devcomm_free(pt_devcomm *d) {
    if (!d) return;
    // Pending work first: destroying a communicator with collectives in flight is undefined.
    cudaStreamSynchronize(d->stream);
    ncclCommDestroy(d->nccl);
    free(d);
}

#endif
