#include "dist/comm.h"
#include "util/common.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PT_HAVE_MPI
#include <mpi.h>
#endif

const char *const pt_coll_kind_name[PT_COLL_KINDS] = {"allreduce", "allgather", "reduce_scatter", "broadcast",
                                                      "alltoall", "control"};

struct pt_comm {
    int rank, size;
    int *world_ranks;  // [size]
#ifdef PT_HAVE_MPI
    MPI_Comm mpi;      // MPI_COMM_NULL on a one-rank world without MPI
#endif
    float *pack;       // reduce-scatter's packed piece [size x piece floats], kept between calls
    size_t pack_n;
};

static pt_comm_stats g_stats;
static int g_mpi_started;

static void account(pt_coll_kind k, size_t bytes, double t0) {
    g_stats.calls[k]++;
    g_stats.bytes[k] += bytes;
    g_stats.seconds[k] += pt_now_s() - t0;
}

void pt_comm_get_stats(pt_comm_stats *out) { *out = g_stats; }

void pt_comm_count(pt_coll_kind kind, size_t bytes, double seconds) {
    g_stats.calls[kind]++;
    g_stats.bytes[kind] += bytes;
    g_stats.seconds[kind] += seconds;
}

int pt_comm_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int pt_comm_has_mpi(void) {
#ifdef PT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

static pt_comm *self_world(void) {
    pt_comm *c = pt_calloc(1, sizeof *c);
    c->rank = 0;
    c->size = 1;
    c->world_ranks = pt_calloc(1, sizeof(int));
#ifdef PT_HAVE_MPI
    c->mpi = MPI_COMM_NULL;
#endif
    return c;
}

pt_comm *pt_comm_init(int force) {
    if (!force && !pt_comm_launched()) return self_world();
#ifdef PT_HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            pt_set_error("MPI_Init failed");
            return NULL;
        }
        g_mpi_started = 1;
    }
    // Errors are fatal for the job (the default): a failed collective on
    // one rank must not leave the others waiting.
    pt_comm *c = pt_calloc(1, sizeof *c);
    MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    c->world_ranks = pt_calloc(c->size, sizeof(int));
    for (int i = 0; i < c->size; i++) c->world_ranks[i] = i;
    return c;
#else
    pt_set_error("this portatrain was built without MPI (install libopenmpi-dev and rebuild) but runs under an MPI "
                 "launcher or was asked for several ranks");
    return NULL;
#endif
}

void pt_comm_finalize(void) {
#ifdef PT_HAVE_MPI
    if (g_mpi_started) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
    }
#endif
}

_Noreturn void pt_comm_abort(int code) {
#ifdef PT_HAVE_MPI
    if (g_mpi_started) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
#endif
    exit(code);
}

int pt_comm_rank(const pt_comm *c) { return c->rank; }
int pt_comm_size(const pt_comm *c) { return c->size; }
int pt_comm_world_rank(const pt_comm *c, int i) { return c->world_ranks[i]; }

pt_comm *pt_comm_split(pt_comm *c, int color, int key) {
    pt_comm *s = pt_calloc(1, sizeof *s);
#ifdef PT_HAVE_MPI
    if (c->mpi != MPI_COMM_NULL) {
        MPI_Comm_split(c->mpi, color, key, &s->mpi);
        MPI_Comm_rank(s->mpi, &s->rank);
        MPI_Comm_size(s->mpi, &s->size);
        s->world_ranks = pt_calloc(s->size, sizeof(int));
        int me = c->world_ranks[c->rank];
        MPI_Allgather(&me, 1, MPI_INT, s->world_ranks, 1, MPI_INT, s->mpi);
        return s;
    }
    s->mpi = MPI_COMM_NULL;
#endif
    s->rank = 0;
    s->size = 1;
    s->world_ranks = pt_calloc(1, sizeof(int));
    s->world_ranks[0] = c->world_ranks[c->rank];
    return s;
}

void pt_comm_free(pt_comm *c) {
    if (!c) return;
#ifdef PT_HAVE_MPI
    if (c->mpi != MPI_COMM_NULL) MPI_Comm_free(&c->mpi);
#endif
    free(c->world_ranks);
    free(c->pack);
    free(c);
}

#ifdef PT_HAVE_MPI
#define MULTI(c) ((c)->mpi != MPI_COMM_NULL && (c)->size > 1)
// MPI counts are int: large buffers go in pieces.
#define MPI_PIECE ((size_t)1 << 30)

// The reductions (all-reduce, reduce-scatter) go in pieces of at most this many bytes of message
// ($PT_MPI_PIECE_BYTES, default 16 MiB): MPI may take a temporary as large as the whole message. OpenMPI's
// default reduce-scatter of 2 ranks reduces all of it to rank 0 first, so FSDP2's reduce-scatter of a
// 128 MiB embedding gradient put 120 MiB on rank 0 alone (docs/DISTRIBUTED.md); its all-reduce algorithms
// take segment buffers of the message too. Results do not depend on the piece size with 2 ranks (a + b);
// with more, MPI's choice of algorithm by message size may order a sum differently, deterministically.
static size_t reduce_piece_bytes(void) {
    static size_t v;
    if (!v) {
        const char *e = getenv("PT_MPI_PIECE_BYTES");
        v = e && atoll(e) >= 64 ? (size_t)atoll(e) : (size_t)16 << 20;
    }
    return v;
}
#else
#define MULTI(c) 0
#endif

void pt_comm_allreduce(pt_comm *c, float *buf, size_t n, pt_coll_kind kind) {
    const double t0 = pt_now_s();
#ifdef PT_HAVE_MPI
    if (MULTI(c)) {
        const size_t piece = PT_MIN(MPI_PIECE, reduce_piece_bytes() / sizeof(float));
        for (size_t o = 0; o < n; o += piece)
            MPI_Allreduce(MPI_IN_PLACE, buf + o, (int)PT_MIN(piece, n - o), MPI_FLOAT, MPI_SUM, c->mpi);
    }
#endif
    account(kind, n * sizeof(float), t0);
}

void pt_comm_allgather(pt_comm *c, const float *send, float *recv, size_t n) {
    const double t0 = pt_now_s();
#ifdef PT_HAVE_MPI
    if (MULTI(c)) {
        if (n <= MPI_PIECE) {
            MPI_Allgather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, c->mpi);
        } else {  // one rank's block at a time
            for (int r = 0; r < c->size; r++) {
                if (r == c->rank) memcpy(recv + (size_t)r * n, send, n * sizeof(float));
                for (size_t o = 0; o < n; o += MPI_PIECE)
                    MPI_Bcast(recv + (size_t)r * n + o, (int)PT_MIN(MPI_PIECE, n - o), MPI_FLOAT, r, c->mpi);
            }
        }
        account(PT_COLL_ALLGATHER, (size_t)c->size * n * sizeof(float), t0);
        return;
    }
#endif
    if (recv != send) memmove(recv, send, n * sizeof(float));
    account(PT_COLL_ALLGATHER, (size_t)c->size * n * sizeof(float), t0);
}

void pt_comm_reduce_scatter(pt_comm *c, const float *send, float *recv, size_t n) {
    const double t0 = pt_now_s();
#ifdef PT_HAVE_MPI
    if (MULTI(c)) {
        // a piece: elements [o, o + q) of every rank's block, packed side by side (the layout
        // MPI_Reduce_scatter_block wants), so the message (and MPI's temporaries) stays within the piece bytes
        const size_t piece = PT_MAX((size_t)1, reduce_piece_bytes() / (sizeof(float) * (size_t)c->size));
        if (n <= piece) {
            MPI_Reduce_scatter_block(send, recv, (int)n, MPI_FLOAT, MPI_SUM, c->mpi);
        } else {
            if (c->pack_n < piece * (size_t)c->size) {
                free(c->pack);
                c->pack_n = piece * (size_t)c->size;
                c->pack = pt_malloc(sizeof(float) * c->pack_n);
            }
            // in place (recv = send + rank * n) is safe: a piece is packed before its result lands
            for (size_t o = 0; o < n; o += piece) {
                const size_t q = PT_MIN(piece, n - o);
                for (int r = 0; r < c->size; r++) memcpy(c->pack + (size_t)r * q, send + (size_t)r * n + o, sizeof(float) * q);
                MPI_Reduce_scatter_block(c->pack, recv + o, (int)q, MPI_FLOAT, MPI_SUM, c->mpi);
            }
        }
        account(PT_COLL_REDUCE_SCATTER, (size_t)c->size * n * sizeof(float), t0);
        return;
    }
#endif
    if (recv != send) memmove(recv, send, n * sizeof(float));
    account(PT_COLL_REDUCE_SCATTER, (size_t)c->size * n * sizeof(float), t0);
}

void pt_comm_broadcast(pt_comm *c, void *buf, size_t bytes, int root) {
    const double t0 = pt_now_s();
#ifdef PT_HAVE_MPI
    if (MULTI(c))
        for (size_t o = 0; o < bytes; o += MPI_PIECE)
            MPI_Bcast((char *)buf + o, (int)PT_MIN(MPI_PIECE, bytes - o), MPI_BYTE, root, c->mpi);
#endif
    account(PT_COLL_BROADCAST, bytes, t0);
}

void pt_comm_alltoallv(pt_comm *c, const void *send, const size_t *send_bytes, void *recv, const size_t *recv_bytes) {
    const double t0 = pt_now_s();
    size_t sent = 0;
    for (int r = 0; r < c->size; r++) sent += send_bytes[r];
#ifdef PT_HAVE_MPI
    if (MULTI(c)) {
        int *cnt = pt_malloc(sizeof(int) * 4 * (size_t)c->size), *sd = cnt + c->size, *rc = sd + c->size,
            *rd = rc + c->size;
        size_t so = 0, ro = 0;
        for (int r = 0; r < c->size; r++) {
            if (so + send_bytes[r] > INT_MAX || ro + recv_bytes[r] > INT_MAX) {
                fprintf(stderr, "portatrain: error: all-to-all of more than %d bytes (MPI's int counts)\n", INT_MAX);
                pt_comm_abort(1);
            }
            cnt[r] = (int)send_bytes[r], sd[r] = (int)so, rc[r] = (int)recv_bytes[r], rd[r] = (int)ro;
            so += send_bytes[r], ro += recv_bytes[r];
        }
        MPI_Alltoallv(send, cnt, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE, c->mpi);
        free(cnt);
        account(PT_COLL_ALLTOALL, sent, t0);
        return;
    }
#endif
    if (recv != send) memmove(recv, send, send_bytes[0]);
    account(PT_COLL_ALLTOALL, sent, t0);
}

void pt_comm_barrier(pt_comm *c) {
#ifdef PT_HAVE_MPI
    if (MULTI(c)) MPI_Barrier(c->mpi);
#endif
}

void pt_comm_allgather_f64(pt_comm *c, const double *send, double *recv, int n, pt_coll_kind kind) {
    const double t0 = pt_now_s();
#ifdef PT_HAVE_MPI
    if (MULTI(c)) {
        MPI_Allgather(send, n, MPI_DOUBLE, recv, n, MPI_DOUBLE, c->mpi);
        account(kind, (size_t)c->size * n * sizeof(double), t0);
        return;
    }
#endif
    if (recv != send) memmove(recv, send, (size_t)n * sizeof(double));
    account(kind, (size_t)c->size * n * sizeof(double), t0);
}

void pt_comm_sum_f64(pt_comm *c, const double *in, double *out, int n) {
    if (c->size == 1) {
        if (out != in) memmove(out, in, (size_t)n * sizeof(double));
        account(PT_COLL_CONTROL, (size_t)n * sizeof(double), pt_now_s());
        return;
    }
    double *all = pt_malloc(sizeof(double) * (size_t)n * c->size);
    pt_comm_allgather_f64(c, in, all, n, PT_COLL_CONTROL);
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < c->size; r++) s += all[(size_t)r * n + i];
        out[i] = s;
    }
    free(all);
}

// MPI's counts and displacements are int: a gather whose total passes INT_MAX bytes (the final model's
// embedding of a large vocabulary: Qwen3-8B's is 2.49 GB) goes rank by rank in pieces instead.
// PT_TEST_GATHER_LIMIT lowers that bound so tests take the piecewise path with small buffers.
static size_t gather_limit(void) {
    static size_t lim;
    if (!lim) {
        const char *e = getenv("PT_TEST_GATHER_LIMIT");
        lim = e && atoll(e) > 0 ? (size_t)atoll(e) : (size_t)INT_MAX;
    }
    return lim;
}

void pt_comm_gather_bytes(pt_comm *c, const void *send, size_t n, int root, char **recv, size_t *counts) {
    const double t0 = pt_now_s();
    if (c->rank == root) *recv = NULL;
#ifdef PT_HAVE_MPI
    if (MULTI(c)) {
        // every rank learns every size, so all take the same path
        uint64_t mine = n, *all = pt_calloc(c->size, sizeof(uint64_t));
        MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, c->mpi);
        size_t total = 0;
        for (int r = 0; r < c->size; r++) total += (size_t)all[r];
        const size_t lim = gather_limit();
        if (c->rank == root) {
            for (int r = 0; r < c->size; r++) counts[r] = (size_t)all[r];
            *recv = pt_malloc(total + 1);
        }
        if (total <= lim) {
            int *cnt = pt_calloc(c->size, sizeof(int)), *disp = pt_calloc(c->size, sizeof(int));
            for (int r = 0, off = 0; r < c->size; r++) cnt[r] = (int)all[r], disp[r] = off, off += cnt[r];
            MPI_Gatherv(send, (int)n, MPI_BYTE, c->rank == root ? *recv : NULL, cnt, disp, MPI_BYTE, root, c->mpi);
            free(cnt);
            free(disp);
        } else if (c->rank == root) {
            size_t off = 0;
            for (int r = 0; r < c->size; r++) {
                if (r == root) memcpy(*recv + off, send, n);
                else
                    for (size_t o = 0; o < all[r]; o += lim)
                        MPI_Recv(*recv + off + o, (int)PT_MIN(lim, all[r] - o), MPI_BYTE, r, 0, c->mpi,
                                 MPI_STATUS_IGNORE);
                off += all[r];
            }
        } else {
            for (size_t o = 0; o < n; o += lim)
                MPI_Send((const char *)send + o, (int)PT_MIN(lim, n - o), MPI_BYTE, root, 0, c->mpi);
        }
        free(all);
        account(PT_COLL_CONTROL, c->rank == root ? total : 0, t0);
        return;
    }
#endif
    *recv = pt_malloc(n + 1);
    memcpy(*recv, send, n);
    counts[0] = n;
    account(PT_COLL_CONTROL, n, t0);
}

int pt_comm_any(pt_comm *c, int flag) {
    double f = flag ? 1 : 0, sum;
    pt_comm_sum_f64(c, &f, &sum, 1);
    return sum > 0;
}
