// NCCL device collectives (dist/devcomm.h). Without PT_HAVE_NCCL (a build
// without PT_CUDA or without nccl.h) pt_devcomm_create returns NULL and callers
// keep the host path, so this file is always part of pt_dist.
//
// libnccl.so.2 is opened at run time (dlopen), not linked: the binary starts
// where NCCL is absent (CI, a GPU machine with cuBLAS only) and its ranks then
// exchange data through the host. PT_NCCL_LIBRARY names another file.
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
const char *pt_devcomm_describe(void) { return "not built (needs PT_CUDA and nccl.h at build time)"; }

#else

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

// The NCCL entry points used, resolved from the library opened at run time.
#define NCCL_FUNCS(X)                                                                                     \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclAllReduce)          \
    X(ncclAllGather) X(ncclReduceScatter) X(ncclGetErrorString) X(ncclGetLastError)
static struct {
#define X(f) __typeof__(f) *f;
    NCCL_FUNCS(X)
#undef X
} nccl;
static char g_load_error[256];

// 1 when every entry point resolved; else 0 with the reason in g_load_error.
static int nccl_load(void) {
    static int state = -1;
    if (state >= 0) return state;
    const char *want = getenv("PT_NCCL_LIBRARY");
    void *h = dlopen(want && *want ? want : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#ifdef PT_NCCL_BUILD_LIBRARY
    if (!h && !(want && *want)) h = dlopen(PT_NCCL_BUILD_LIBRARY, RTLD_NOW | RTLD_LOCAL);  // the one CMake found
#endif
    if (!h) {
        snprintf(g_load_error, sizeof g_load_error, "%s", dlerror());
        return state = 0;
    }
#define X(f)                                                                       \
    if (!(nccl.f = (__typeof__(f) *)dlsym(h, #f))) {                               \
        snprintf(g_load_error, sizeof g_load_error, "%s lacks " #f, want && *want ? want : "libnccl.so.2"); \
        return state = 0;                                                          \
    }
    NCCL_FUNCS(X)
#undef X
    return state = 1;
}

struct pt_devcomm {
    ncclComm_t nccl;
    cudaStream_t stream;
    int size;
    int timed;  // synchronise around each call so its seconds are its own (PT_NCCL_ASYNC=1: no)
};

// One line naming the call and NCCL's reason, then the whole job ends: a rank
// that stopped here would leave the others blocked in the collective.
static void nccl_fail(const pt_devcomm *d, const char *what, ncclResult_t r) {
    // NULL asks for the calling thread's last error (a failed init has no communicator yet)
    const char *last = nccl.ncclGetLastError ? nccl.ncclGetLastError(d ? d->nccl : NULL) : NULL;
    fprintf(stderr, "portatrain: error: NCCL %s failed: %s%s%s\n", what, nccl.ncclGetErrorString(r),
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
    if (!nccl_load()) return NULL;
    if (nccl.ncclGetVersion(&code) != ncclSuccess) return "NCCL (version unknown)";
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch
    snprintf(v, sizeof v, "NCCL %d.%d.%d", code / 10000, code / 100 % 100, code % 100);
    return v;
}

const char *pt_devcomm_describe(void) {
    static char line[400];
    const char *v = pt_devcomm_version();
    if (v) snprintf(line, sizeof line, "%s (device collectives of cuda ranks under mpirun)", v);
    else snprintf(line, sizeof line, "cannot load NCCL: %s (cuda ranks exchange data through the host)", g_load_error);
    return line;
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

// Whether NCCL can serve group c: every rank loaded the library, and no two
// ranks sit on one GPU (NCCL refuses a device twice in one communicator:
// "Duplicate GPU detected", ncclInvalidUsage). Each rank's (loaded, device
// UUID) is gathered at rank 0, which decides and says why not once; the verdict
// is broadcast, so every rank answers the same. PT_NCCL_SAME_GPU=1 skips the
// duplicate check (to see NCCL's own answer: tests/test_nccl.sh).
typedef struct {
    unsigned char uuid[16];
    int loaded;
    char why[240];
} rank_info;

static int group_can_use_nccl(pt_comm *c, int dev) {
    struct cudaDeviceProp prop;
    CUDA_OK("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, dev));
    rank_info me;
    memset(&me, 0, sizeof me);
    memcpy(me.uuid, prop.uuid.bytes, sizeof me.uuid);
    me.loaded = nccl_load();
    if (!me.loaded) snprintf(me.why, sizeof me.why, "%s", g_load_error);
    char *all = NULL;
    size_t *counts = pt_calloc(pt_comm_size(c), sizeof(size_t));
    pt_comm_gather_bytes(c, &me, sizeof me, 0, &all, counts);
    int ok = 1;
    if (pt_comm_rank(c) == 0) {
        const rank_info *r = (const rank_info *)all;
        const char *same = getenv("PT_NCCL_SAME_GPU");
        const int check_dup = !(same && strcmp(same, "0") != 0);
        for (int i = 0; i < pt_comm_size(c) && ok; i++) {
            if (!r[i].loaded) {
                pt_warn("rank %d cannot load NCCL (%s): the collectives of its group go through the host (MPI)",
                        pt_comm_world_rank(c, i), r[i].why);
                ok = 0;
            }
            for (int j = i + 1; j < pt_comm_size(c) && ok && check_dup; j++)
                if (!memcmp(r[i].uuid, r[j].uuid, sizeof r[i].uuid)) {
                    pt_warn("ranks %d and %d use the same GPU; NCCL allows a device only once per communicator, "
                            "so the collectives of their group go through the host (MPI)",
                            pt_comm_world_rank(c, i), pt_comm_world_rank(c, j));
                    ok = 0;
                }
        }
    }
    pt_comm_broadcast(c, &ok, sizeof ok, 0);
    free(all);
    free(counts);
    return ok;
}

pt_devcomm *pt_devcomm_create(pt_comm *c, pt_backend *be) {
    const char *off = getenv("PT_NCCL");
    if (off && strcmp(off, "0") == 0) return NULL;
    if (!be || strcmp(be->name, "cuda") != 0 || pt_comm_size(c) < 2) return NULL;
    int dev = 0;
    if (be->stream) CUDA_OK("cudaStreamGetDevice", cudaStreamGetDevice((cudaStream_t)be->stream, &dev));
    else CUDA_OK("cudaGetDevice", cudaGetDevice(&dev));
    if (!group_can_use_nccl(c, dev)) return NULL;
    CUDA_OK("cudaSetDevice", cudaSetDevice(dev));
    pin_algorithms();
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (pt_comm_rank(c) == 0) NCCL_OK(NULL, "ncclGetUniqueId", nccl.ncclGetUniqueId(&id));
    pt_comm_broadcast(c, &id, sizeof id, 0);
    pt_devcomm *d = pt_calloc(1, sizeof *d);
    d->stream = (cudaStream_t)be->stream;
    d->size = pt_comm_size(c);
    const char *async = getenv("PT_NCCL_ASYNC");
    d->timed = !(async && strcmp(async, "0") != 0);
    NCCL_OK(d, "ncclCommInitRank", nccl.ncclCommInitRank(&d->nccl, d->size, id, pt_comm_rank(c)));
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
    NCCL_OK(d, "ncclAllReduce", nccl.ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, d->nccl, d->stream));
    end(d, kind, n * sizeof(float), t0);
}

void pt_devcomm_allgather(pt_devcomm *d, const float *send, float *recv, size_t n) {
    const double t0 = begin(d);
    NCCL_OK(d, "ncclAllGather", nccl.ncclAllGather(send, recv, n, ncclFloat32, d->nccl, d->stream));
    end(d, PT_COLL_ALLGATHER, (size_t)d->size * n * sizeof(float), t0);
}

void pt_devcomm_reduce_scatter(pt_devcomm *d, const float *send, float *recv, size_t n) {
    const double t0 = begin(d);
    NCCL_OK(d, "ncclReduceScatter", nccl.ncclReduceScatter(send, recv, n, ncclFloat32, ncclSum, d->nccl, d->stream));
    end(d, PT_COLL_REDUCE_SCATTER, (size_t)d->size * n * sizeof(float), t0);
}

void pt_devcomm_free(pt_devcomm *d) {
    if (!d) return;
    // Pending work first: destroying a communicator with collectives in flight is undefined.
    cudaStreamSynchronize(d->stream);
    nccl.ncclCommDestroy(d->nccl);
    free(d);
}

#endif
