// opencl: the backend interface on an OpenCL 1.2 device.
//
// Memory. Backend pointers must support the model's pointer arithmetic
// (tensors are offsets into one big allocation), but a cl_mem is an opaque
// handle. So alloc() reserves an inaccessible host address range of the same
// size (mmap PROT_NONE: no memory is committed, and a stray host dereference
// faults at once instead of corrupting anything) and records
// (base, bytes, cl_mem) in a table; any pointer base + off resolves to
// (cl_mem, off), and kernels take element offsets as arguments.
//
// Programs. The kernel source (opencl.cl, embedded at build time) is built at
// run time: a base program with the generic kernels, built when the backend
// is created, and one shape-specialised program per (sequence length, head
// dim) for RoPE and attention, built on first use. Every build goes through
// an on-disk cache of program binaries keyed by sha256(device, driver,
// options, source); a cache entry that fails its checksum or that the driver
// rejects is rebuilt from source. Build time, cache hits/misses and the
// number of shape recompilations are reported through compile_stats.
//
// bf16 (precision bf16, backend.h): round_bf16 and the in-kernel casts under
// bf16_casts (a kernel argument); no packed-bf16 fast path, so the model runs
// the fp32 GEMMs on bf16-exact operands, which is exactly bf16 semantics.
//
// Determinism: one in-order queue; every output element is produced by one
// work-item in a fixed reduction order (opencl.cl); host-side sums (losses,
// sums of squares) add device partials in index order in double.
#ifdef PT_HAVE_OPENCL
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "backend/backend.h"
#include "backend/opencl_source.h"  // generated: pt_opencl_source[], pt_opencl_source_len
#include "util/fileio.h"
#include "util/hash.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// GEMM tile sizes (tunable: PT_OPENCL_GEMM_TILE="TM,TN,TK,RM,RN"). The
// defaults suit PoCL's CPU devices; a GPU would want larger RM/RN.
#define DEF_TM 32
#define DEF_TN 32
#define DEF_TK 16
#define DEF_RM 4
#define DEF_RN 4
#define SPLIT_K 2048  // K slice of long NN products (see gemm)
#define XWG 64    // cross-entropy row work-group
#define SWG 256   // sum-of-squares work-group (blocks of SWG*16 elements)
#define XENT_MAX_LOGITS (16u << 20)  // floats in one chunk's logits buffer (64 MiB)

typedef struct {
    uintptr_t base;
    size_t bytes;
    cl_mem mem;
} ocl_alloc;

// A shape-specialised program (RoPE, attention) for one (SEQ, HD).
typedef struct {
    int T, D;
    cl_program prog;
    cl_kernel rope_fwd, rope_bwd, att_fwd, att_dq, att_dkv;
} ocl_variant;

typedef struct {
    cl_platform_id platform;
    cl_device_id device;
    cl_context ctx;
    cl_command_queue queue;
    char devkey[1024];   // device, vendor, versions: part of the cache key
    char base_opts[512];
    char cache_dir[4096];  // "" = cache disabled
    int tm, tn, tk, rm, rn;
    cl_program base;
    bool tiled_gemm;  // PT_OPENCL_GEMM=tiled: the local-memory kernel for every layout
    cl_kernel k_gemm, k_gemm_nt, k_gemm_nn_tn, k_sum_slices, k_emb_fwd, k_emb_bwd, k_rms_fwd, k_rms_bwd_dinp, k_rms_bwd_dw, k_swiglu_fwd,
        k_swiglu_bwd, k_add, k_scale, k_adamw, k_sumsq, k_xent, k_round_bf16;
    cl_kernel k_moe[6];  // MoE kernels (K_MOE_*), made on first use: a dense model never needs fp64
    ocl_variant *vars;
    int nvars;
    ocl_alloc *allocs;
    int nallocs, cap_allocs;
    // scratch buffers (not in the alloc table), grown on demand
    cl_mem xent_logits, xent_loss, rowdot, partial, splitk;
    size_t xent_logits_n, xent_loss_n, rowdot_n, partial_n, splitk_n;
    pt_compile_stats stats;
} ocl;

static ocl *O(pt_backend *be) { return be->impl; }

static const char *cl_err_name(cl_int e) {
    switch (e) {
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_BINARY: return "CL_INVALID_BINARY";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_ARG_INDEX: return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_MEM_COPY_OVERLAP: return "CL_MEM_COPY_OVERLAP";
    default: return "CL error";
    }
}

// A failing OpenCL call inside a kernel (which returns void) cannot be
// reported to the caller: one line naming the call, and exit.
static void ck(cl_int e, const char *what) {
    if (e == CL_SUCCESS) return;
    fprintf(stderr, "portatrain: error: opencl: %s failed: %s (%d)\n", what, cl_err_name(e), (int)e);
    exit(1);
}

// ------------------------------------------------------------ memory

static void *ocl_alloc_fn(pt_backend *be, size_t bytes) {
    ocl *o = O(be);
    size_t n = bytes ? bytes : 4;
    void *addr = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (addr == MAP_FAILED) {
        fprintf(stderr, "portatrain: error: opencl: cannot reserve %zu bytes of address space: %s\n", n,
                strerror(errno));
        exit(1);
    }
    cl_int e;
    cl_mem m = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, n, NULL, &e);
    ck(e, "clCreateBuffer");
    const cl_uchar zero = 0;
    ck(clEnqueueFillBuffer(o->queue, m, &zero, 1, 0, n, 0, NULL, NULL), "clEnqueueFillBuffer");
    if (o->nallocs == o->cap_allocs) {
        o->cap_allocs = o->cap_allocs ? 2 * o->cap_allocs : 16;
        o->allocs = pt_realloc(o->allocs, sizeof(ocl_alloc) * o->cap_allocs);
    }
    o->allocs[o->nallocs++] = (ocl_alloc){(uintptr_t)addr, n, m};
    return addr;
}

// (cl_mem, byte offset) of any pointer into a live allocation.
static cl_mem resolve(ocl *o, const void *p, size_t *off) {
    const uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < o->nallocs; i++)
        if (a >= o->allocs[i].base && a < o->allocs[i].base + o->allocs[i].bytes) {
            *off = a - o->allocs[i].base;
            return o->allocs[i].mem;
        }
    fprintf(stderr, "portatrain: error: opencl: pointer %p is not in any backend allocation\n", p);
    abort();
}

static void ocl_free_fn(pt_backend *be, void *p) {
    ocl *o = O(be);
    if (!p) return;
    for (int i = 0; i < o->nallocs; i++)
        if (o->allocs[i].base == (uintptr_t)p) {
            clReleaseMemObject(o->allocs[i].mem);
            munmap(p, o->allocs[i].bytes);
            o->allocs[i] = o->allocs[--o->nallocs];
            return;
        }
    fprintf(stderr, "portatrain: error: opencl: free of %p, which is not an allocation base\n", p);
    abort();
}

// A blocking transfer between host memory and the buffer that holds dev: into it (write) or out of it.
static void transfer(pt_backend *be, const void *dev, void *host, size_t bytes, bool write) {
    if (!bytes) return;
    ocl *o = O(be);
    size_t off;
    cl_mem m = resolve(o, dev, &off);
    if (write) ck(clEnqueueWriteBuffer(o->queue, m, CL_TRUE, off, bytes, host, 0, NULL, NULL), "clEnqueueWriteBuffer");
    else ck(clEnqueueReadBuffer(o->queue, m, CL_TRUE, off, bytes, host, 0, NULL, NULL), "clEnqueueReadBuffer");
}

// clEnqueueWriteBuffer only reads host: the cast drops const for the one helper that serves both ways.
static void ocl_upload(pt_backend *be, void *dst, const void *src, size_t bytes) {
    transfer(be, dst, (void *)src, bytes, true);
}

static void ocl_download(pt_backend *be, void *dst, const void *src, size_t bytes) {
    transfer(be, src, dst, bytes, false);
}

static void ocl_copy(pt_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    ocl *o = O(be);
    size_t doff, soff;
    cl_mem dm = resolve(o, dst, &doff), sm = resolve(o, src, &soff);
    if (dm == sm && doff < soff + bytes && soff < doff + bytes) {
        // overlapping regions of one buffer (memmove semantics): bounce through the host
        void *tmp = pt_malloc(bytes);
        ck(clEnqueueReadBuffer(o->queue, sm, CL_TRUE, soff, bytes, tmp, 0, NULL, NULL), "clEnqueueReadBuffer");
        ck(clEnqueueWriteBuffer(o->queue, dm, CL_TRUE, doff, bytes, tmp, 0, NULL, NULL), "clEnqueueWriteBuffer");
        free(tmp);
        return;
    }
    ck(clEnqueueCopyBuffer(o->queue, sm, dm, soff, doff, bytes, 0, NULL, NULL), "clEnqueueCopyBuffer");
}

static void ocl_zero(pt_backend *be, void *dst, size_t bytes) {
    if (!bytes) return;
    ocl *o = O(be);
    size_t off;
    cl_mem m = resolve(o, dst, &off);
    const cl_uchar zero = 0;
    ck(clEnqueueFillBuffer(o->queue, m, &zero, 1, off, bytes, 0, NULL, NULL), "clEnqueueFillBuffer");
}

static void ocl_sync(pt_backend *be) { ck(clFinish(O(be)->queue), "clFinish"); }

// Grows a scratch buffer to at least `floats` floats.
static cl_mem scratch(ocl *o, cl_mem *m, size_t *have, size_t floats) {
    if (*have >= floats && *m) return *m;
    if (*m) {
        ck(clFinish(o->queue), "clFinish");
        clReleaseMemObject(*m);
    }
    cl_int e;
    *m = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, sizeof(float) * (floats ? floats : 1), NULL, &e);
    ck(e, "clCreateBuffer (scratch)");
    *have = floats;
    return *m;
}

// ------------------------------------------------------------ kernel launch helpers

typedef struct {
    cl_kernel k;
    cl_uint i;
    ocl *o;
} argl;

static void a_raw(argl *a, size_t size, const void *v) { ck(clSetKernelArg(a->k, a->i++, size, v), "clSetKernelArg"); }
// A backend pointer: two arguments, the cl_mem and the element offset.
static void a_ptr(argl *a, const void *p) {
    size_t off;
    cl_mem m = resolve(a->o, p, &off);
    cl_ulong eo = off / 4;  // float and int32 elements
    a_raw(a, sizeof m, &m);
    a_raw(a, sizeof eo, &eo);
}
// A backend pointer to doubles: the offset in 8-byte elements.
static void a_ptr8(argl *a, const void *p) {
    size_t off;
    cl_mem m = resolve(a->o, p, &off);
    cl_ulong eo = off / 8;
    a_raw(a, sizeof m, &m);
    a_raw(a, sizeof eo, &eo);
}
static void a_mem(argl *a, cl_mem m) { a_raw(a, sizeof m, &m); }
static void a_int(argl *a, int v) { a_raw(a, sizeof v, &v); }
static void a_ulong(argl *a, size_t v) {
    cl_ulong u = v;
    a_raw(a, sizeof u, &u);
}
static void a_float(argl *a, float v) { a_raw(a, sizeof v, &v); }

static void launch1(ocl *o, cl_kernel k, size_t n, size_t local) {
    if (!n) return;
    size_t g = (n + local - 1) / local * local;
    ck(clEnqueueNDRangeKernel(o->queue, k, 1, NULL, &g, &local, 0, NULL, NULL), "clEnqueueNDRangeKernel");
}

// C[m,n] (+)= sum_k A(m,k) B(k,n) with element strides (opencl.cl: gemm).
// Pointers are backend pointers, or NULL with the cl_mem given instead.
static void gemm(ocl *o, int M, int N, int K, cl_mem Am, size_t Ao, int a_sm, int a_sk, cl_mem Bm, size_t Bo,
                 int b_sk, int b_sn, cl_mem Cm, size_t Co, int ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    // register-blocked kernels for the three layouts the backend uses, unless
    // the local-memory tiled kernel is asked for (PT_OPENCL_GEMM=tiled)
    const bool nt = a_sk == 1 && b_sk == 1, nn = a_sk == 1 && b_sn == 1, tn = a_sm == 1 && b_sn == 1;
    if (!o->tiled_gemm && nn && K >= 2 * SPLIT_K) {
        // A long reduction (lm_head backward: K = vocabulary): slices of
        // SPLIT_K into partial products (each slice of B stays in cache while
        // every row block passes over it), then added in slice order.
        const int S = (K + SPLIT_K - 1) / SPLIT_K;
        cl_mem part = scratch(o, &o->splitk, &o->splitk_n, (size_t)S * M * N);
        for (int s = 0; s < S; s++) {
            const int k0 = s * SPLIT_K, kn = PT_MIN(SPLIT_K, K - k0);
            gemm(o, M, N, kn, Am, Ao + (size_t)k0, a_sm, 1, Bm, Bo + (size_t)k0 * b_sk, b_sk, 1, part,
                 (size_t)s * M * N, N, 0);
        }
        argl a = {o->k_sum_slices, 0, o};
        a_mem(&a, Cm); a_ulong(&a, Co); a_int(&a, ldc); a_mem(&a, part); a_int(&a, S); a_int(&a, M); a_int(&a, N);
        a_int(&a, accumulate);
        launch1(o, o->k_sum_slices, (size_t)M * N, 64);
        return;
    }
    if (!o->tiled_gemm && (nt || nn || tn)) {
        cl_kernel k = nt ? o->k_gemm_nt : o->k_gemm_nn_tn;
        argl a = {k, 0, o};
        a_int(&a, M); a_int(&a, N); a_int(&a, K);
        a_mem(&a, Am); a_ulong(&a, Ao); a_int(&a, nt || nn ? a_sm : a_sk);
        a_mem(&a, Bm); a_ulong(&a, Bo); a_int(&a, nt ? b_sn : b_sk);
        a_mem(&a, Cm); a_ulong(&a, Co); a_int(&a, ldc); a_int(&a, accumulate);
        if (!nt) a_int(&a, tn && !nn);
        const int bn = nt ? 4 : 8;
        const int bm = nt ? 4 : 8;
        size_t global[2] = {(size_t)(N + bn - 1) / bn, (size_t)(M + bm - 1) / bm};
        ck(clEnqueueNDRangeKernel(o->queue, k, 2, NULL, global, NULL, 0, NULL, NULL), "clEnqueueNDRangeKernel (gemm)");
        return;
    }
    argl a = {o->k_gemm, 0, o};
    a_int(&a, M); a_int(&a, N); a_int(&a, K);
    a_mem(&a, Am); a_ulong(&a, Ao); a_int(&a, a_sm); a_int(&a, a_sk);
    a_mem(&a, Bm); a_ulong(&a, Bo); a_int(&a, b_sk); a_int(&a, b_sn);
    a_mem(&a, Cm); a_ulong(&a, Co); a_int(&a, ldc); a_int(&a, accumulate);
    size_t local[2] = {o->tn / o->rn, o->tm / o->rm};
    size_t global[2] = {(size_t)(N + o->tn - 1) / o->tn * local[0], (size_t)(M + o->tm - 1) / o->tm * local[1]};
    ck(clEnqueueNDRangeKernel(o->queue, o->k_gemm, 2, NULL, global, local, 0, NULL, NULL), "clEnqueueNDRangeKernel (gemm)");
}

// element offset of a backend pointer
static cl_mem mem_of(ocl *o, const void *p, size_t *elem_off) {
    size_t off;
    cl_mem m = resolve(o, p, &off);
    *elem_off = off / 4;
    return m;
}

// ------------------------------------------------------------ program building and the cache

// Cache file: "PTCLBIN1", u64 payload length, sha256 hex of the payload (64
// bytes), payload. The checksum is verified before the driver sees a byte.
static const char CACHE_MAGIC[8] = {'P', 'T', 'C', 'L', 'B', 'I', 'N', '1'};

static void cache_key(ocl *o, const char *opts, char hex[65]) {
    pt_sha256 *h = pt_sha256_new();
    pt_sha256_update(h, o->devkey, strlen(o->devkey));
    pt_sha256_update(h, "\n", 1);
    pt_sha256_update(h, opts, strlen(opts));
    pt_sha256_update(h, "\n", 1);
    pt_sha256_update(h, pt_opencl_source, pt_opencl_source_len);
    pt_sha256_final_hex(h, hex);
}

// The program from a cache file, or NULL (missing, corrupt, rejected).
static cl_program cache_load(ocl *o, const char *path, const char *opts) {
    size_t len = 0;
    char *buf = pt_file_exists(path) ? pt_read_file(path, &len) : NULL;
    pt_clear_error();
    if (!buf) return NULL;
    cl_program p = NULL;
    uint64_t n = 0;
    if (len >= 8 + 8 + 64 && !memcmp(buf, CACHE_MAGIC, 8)) memcpy(&n, buf + 8, 8);
    if (n > 0 && n == len - 80) {
        char hex[65];
        pt_sha256_hex(buf + 80, n, hex);
        if (!memcmp(hex, buf + 16, 64)) {
            const unsigned char *bin = (const unsigned char *)buf + 80;
            size_t bl = n;
            cl_int st, e;
            p = clCreateProgramWithBinary(o->ctx, 1, &o->device, &bl, &bin, &st, &e);
            if (e != CL_SUCCESS || st != CL_SUCCESS) p = NULL;
            if (p && clBuildProgram(p, 1, &o->device, opts, NULL, NULL) != CL_SUCCESS) {
                clReleaseProgram(p);
                p = NULL;
            }
        }
    }
    if (!p) pt_warn("opencl: program cache entry %s is unusable; rebuilding it", path);
    free(buf);
    return p;
}

static void cache_store(ocl *o, cl_program p, const char *path) {
    size_t n = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS || !n) return;
    char *buf = pt_malloc(80 + n);
    unsigned char *bin = (unsigned char *)buf + 80;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS) {
        free(buf);
        return;
    }
    uint64_t n64 = n;
    memcpy(buf, CACHE_MAGIC, 8);
    memcpy(buf + 8, &n64, 8);
    char hex[65];
    pt_sha256_hex(bin, n, hex);
    memcpy(buf + 16, hex, 64);
    // temp file + fsync + rename: a reader sees a whole entry or none
    if (pt_mkdir_p(o->cache_dir) != 0 || pt_write_file_atomic(path, buf, 80 + n) != 0) {
        pt_warn("opencl: cannot write the program cache (%s); continuing without it", pt_last_error());
        pt_clear_error();
    }
    free(buf);
}

// Builds (or loads from the cache) the program for `opts`; NULL + error on a
// build failure (the log's first lines in the message).
static cl_program build_program(ocl *o, const char *opts) {
    const double t0 = pt_now_s();
    char key[65], path[4200] = "";
    cl_program p = NULL;
    if (o->cache_dir[0]) {
        cache_key(o, opts, key);
        snprintf(path, sizeof path, "%s/%s.bin", o->cache_dir, key);
        p = cache_load(o, path, opts);
    }
    if (p) {
        o->stats.cache_hits++;
    } else {
        const char *src = pt_opencl_source;
        size_t sl = pt_opencl_source_len;
        cl_int e;
        p = clCreateProgramWithSource(o->ctx, 1, &src, &sl, &e);
        ck(e, "clCreateProgramWithSource");
        if (clBuildProgram(p, 1, &o->device, opts, NULL, NULL) != CL_SUCCESS) {
            char log[2048] = "";
            clGetProgramBuildInfo(p, o->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
            for (char *c = log; *c; c++)
                if (*c == '\n') *c = ' ';
            pt_set_error("opencl: building the kernels (%s) failed: %.400s", opts, log);
            clReleaseProgram(p);
            return NULL;
        }
        o->stats.cache_misses++;
        if (path[0]) cache_store(o, p, path);
    }
    o->stats.compile_seconds += pt_now_s() - t0;
    return p;
}

static cl_kernel kernel(cl_program p, const char *name) {
    cl_int e;
    cl_kernel k = clCreateKernel(p, name, &e);
    if (e != CL_SUCCESS) {
        fprintf(stderr, "portatrain: error: opencl: kernel %s: %s (%d)\n", name, cl_err_name(e), (int)e);
        exit(1);
    }
    return k;
}

// The shape-specialised program for (T, D): found, or built on first use
// (each one after the first is a recompilation: a new sequence-length bucket).
static ocl_variant *variant(ocl *o, int T, int D) {
    for (int i = 0; i < o->nvars; i++)
        if (o->vars[i].T == T && o->vars[i].D == D) return &o->vars[i];
    char opts[700];
    snprintf(opts, sizeof opts, "%s -DSEQ=%d -DHD=%d", o->base_opts, T, D);
    cl_program p = build_program(o, opts);
    if (!p) {
        fprintf(stderr, "portatrain: error: %s\n", pt_last_error());
        exit(1);
    }
    if (o->nvars > 0) o->stats.recompilations++;
    o->vars = pt_realloc(o->vars, sizeof(ocl_variant) * (o->nvars + 1));
    ocl_variant *v = &o->vars[o->nvars++];
    v->T = T;
    v->D = D;
    v->prog = p;
    v->rope_fwd = kernel(p, "rope_forward");
    v->rope_bwd = kernel(p, "rope_backward");
    v->att_fwd = kernel(p, "attention_forward");
    v->att_dq = kernel(p, "attention_backward_dq");
    v->att_dkv = kernel(p, "attention_backward_dkv");
    return v;
}

static void ocl_compile_stats(pt_backend *be, pt_compile_stats *out) { *out = O(be)->stats; }

// ------------------------------------------------------------ kernels

static void ocl_embedding_forward(pt_backend *be, real_t *out, const int32_t *ids, const real_t *wte, int N, int C) {
    ocl *o = O(be);
    argl a = {o->k_emb_fwd, 0, o};
    a_ptr(&a, out); a_ptr(&a, ids); a_ptr(&a, wte); a_int(&a, N); a_int(&a, C);
    launch1(o, o->k_emb_fwd, (size_t)N * C, 64);
}

static void ocl_embedding_backward(pt_backend *be, real_t *dwte, const real_t *dout, const int32_t *ids, int N,
                                   int C) {
    ocl *o = O(be);
    argl a = {o->k_emb_bwd, 0, o};
    a_ptr(&a, dwte); a_ptr(&a, dout); a_ptr(&a, ids); a_int(&a, N); a_int(&a, C);
    launch1(o, o->k_emb_bwd, C, 16);
}

static void ocl_matmul_forward(pt_backend *be, real_t *out, const real_t *inp, const real_t *w, int N, int C,
                               int OC) {
    ocl *o = O(be);
    size_t io, wo, oo;
    cl_mem im = mem_of(o, inp, &io), wm = mem_of(o, w, &wo), om = mem_of(o, out, &oo);
    // out[n,oc] = sum_c inp[n,c] w[oc,c]
    gemm(o, N, OC, C, im, io, C, 1, wm, wo, 1, C, om, oo, OC, 0);
}

static void ocl_matmul_backward(pt_backend *be, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                                const real_t *w, int N, int C, int OC) {
    ocl *o = O(be);
    size_t go, io, wo, dwo, dio;
    cl_mem gm = mem_of(o, dout, &go), im = mem_of(o, inp, &io), wm = mem_of(o, w, &wo), dwm = mem_of(o, dw, &dwo);
    if (dinp) {  // dinp[n,c] += sum_oc dout[n,oc] w[oc,c]
        cl_mem dim = mem_of(o, dinp, &dio);
        gemm(o, N, C, OC, gm, go, OC, 1, wm, wo, C, 1, dim, dio, C, 1);
    }
    // dw[oc,c] += sum_n dout[n,oc] inp[n,c]
    gemm(o, OC, C, N, gm, go, 1, OC, im, io, C, 1, dwm, dwo, C, 1);
}

static void ocl_rmsnorm_forward(pt_backend *be, real_t *out, real_t *rstd, const real_t *inp, const real_t *w,
                                int N, int C, float eps) {
    ocl *o = O(be);
    argl a = {o->k_rms_fwd, 0, o};
    a_ptr(&a, out); a_ptr(&a, rstd); a_ptr(&a, inp); a_ptr(&a, w); a_int(&a, N); a_int(&a, C); a_float(&a, eps);
    a_int(&a, be->bf16_casts);
    launch1(o, o->k_rms_fwd, N, 16);
}

static void ocl_rmsnorm_backward(pt_backend *be, real_t *dinp, real_t *dw, const real_t *dout, const real_t *inp,
                                 const real_t *w, const real_t *rstd, int N, int C) {
    ocl *o = O(be);
    argl a = {o->k_rms_bwd_dinp, 0, o};
    a_ptr(&a, dinp); a_ptr(&a, dout); a_ptr(&a, inp); a_ptr(&a, w); a_ptr(&a, rstd); a_int(&a, N); a_int(&a, C);
    launch1(o, o->k_rms_bwd_dinp, N, 16);
    argl b = {o->k_rms_bwd_dw, 0, o};
    a_ptr(&b, dw); a_ptr(&b, dout); a_ptr(&b, inp); a_ptr(&b, rstd); a_int(&b, N); a_int(&b, C);
    launch1(o, o->k_rms_bwd_dw, C, 16);
}

static void rope(pt_backend *be, bool fwd, real_t *out, const real_t *inp, const real_t *cos, const real_t *sin, int B,
                 int T, int NH, int D) {
    ocl *o = O(be);
    ocl_variant *v = variant(o, T, D);
    cl_kernel k = fwd ? v->rope_fwd : v->rope_bwd;
    argl a = {k, 0, o};
    a_ptr(&a, out); a_ptr(&a, inp); a_ptr(&a, cos); a_ptr(&a, sin); a_int(&a, B); a_int(&a, NH);
    if (fwd) a_int(&a, be->bf16_casts);  // (the backward never rounds)
    launch1(o, k, (size_t)B * T * NH * (D / 2), 64);
}
static void ocl_rope_forward(pt_backend *be, real_t *out, const real_t *inp, const real_t *cos, const real_t *sin,
                             int B, int T, int NH, int D) {
    rope(be, true, out, inp, cos, sin, B, T, NH, D);
}
static void ocl_rope_backward(pt_backend *be, real_t *dinp, const real_t *dout, const real_t *cos, const real_t *sin,
                              int B, int T, int NH, int D) {
    rope(be, false, dinp, dout, cos, sin, B, T, NH, D);
}

// saved = logsumexp per (b, h, t)
static size_t ocl_attention_saved_floats(pt_backend *be, int B, int T, int H, int D) { return (size_t)B * H * T; }

// The attention kernels' (pos, pos_o, has_pos) arguments: without document
// masking, `dummy` (any backend buffer) stands in and has_pos = 0.
static void a_pos(argl *a, const int32_t *pos, const void *dummy) {
    a_ptr(a, pos ? (const void *)pos : dummy);
    a_int(a, pos != NULL);
}

static void ocl_attention_forward(pt_backend *be, real_t *out, real_t *saved, const real_t *q, const real_t *k,
                                  const real_t *v, const int32_t *pos, int B, int T, int H, int KV, int D) {
    ocl *o = O(be);
    ocl_variant *va = variant(o, T, D);
    argl a = {va->att_fwd, 0, o};
    a_ptr(&a, out); a_ptr(&a, saved); a_ptr(&a, q); a_ptr(&a, k); a_ptr(&a, v); a_pos(&a, pos, q);
    a_int(&a, B); a_int(&a, H); a_int(&a, KV);
    launch1(o, va->att_fwd, (size_t)B * H * T, 16);
}

static void ocl_attention_backward(pt_backend *be, real_t *dq, real_t *dk, real_t *dv, const real_t *dout,
                                   const real_t *q, const real_t *k, const real_t *v, const real_t *out,
                                   const real_t *saved, const int32_t *pos, int B, int T, int H, int KV, int D) {
    ocl *o = O(be);
    ocl_variant *va = variant(o, T, D);
    cl_mem rd = scratch(o, &o->rowdot, &o->rowdot_n, (size_t)B * H * T);
    argl a = {va->att_dq, 0, o};
    a_ptr(&a, dq); a_mem(&a, rd); a_ptr(&a, dout); a_ptr(&a, q); a_ptr(&a, k); a_ptr(&a, v); a_ptr(&a, saved);
    a_pos(&a, pos, q); a_int(&a, B); a_int(&a, H); a_int(&a, KV);
    launch1(o, va->att_dq, (size_t)B * H * T, 16);
    argl b = {va->att_dkv, 0, o};
    a_ptr(&b, dk); a_ptr(&b, dv); a_mem(&b, rd); a_ptr(&b, dout); a_ptr(&b, q); a_ptr(&b, k); a_ptr(&b, v);
    a_ptr(&b, saved); a_pos(&b, pos, q); a_int(&b, B); a_int(&b, H); a_int(&b, KV);
    launch1(o, va->att_dkv, (size_t)B * KV * T, 16);
}

static void ocl_swiglu_forward(pt_backend *be, real_t *out, const real_t *gate, const real_t *up, size_t n) {
    ocl *o = O(be);
    argl a = {o->k_swiglu_fwd, 0, o};
    a_ptr(&a, out); a_ptr(&a, gate); a_ptr(&a, up); a_ulong(&a, n); a_int(&a, be->bf16_casts);
    launch1(o, o->k_swiglu_fwd, n, 64);
}

static void ocl_swiglu_backward(pt_backend *be, real_t *dgate, real_t *dup, const real_t *dout, const real_t *gate,
                                const real_t *up, size_t n) {
    ocl *o = O(be);
    argl a = {o->k_swiglu_bwd, 0, o};
    a_ptr(&a, dgate); a_ptr(&a, dup); a_ptr(&a, dout); a_ptr(&a, gate); a_ptr(&a, up); a_ulong(&a, n);
    launch1(o, o->k_swiglu_bwd, n, 64);
}

// ---- mixture of experts (opencl.cl: moe_*) ----
enum { K_MOE_ROUTE, K_MOE_ROUTE_BWD, K_MOE_GATHER, K_MOE_GATHER_BWD, K_MOE_COMBINE, K_MOE_COMBINE_BWD };
static const char *const moe_kernel_names[6] = {"moe_route",           "moe_route_backward", "moe_gather",
                                                "moe_gather_backward", "moe_combine",        "moe_combine_backward"};

static cl_kernel moe_kernel(ocl *o, int which) {
    if (o->k_moe[which]) return o->k_moe[which];
    cl_int e;
    o->k_moe[which] = clCreateKernel(o->base, moe_kernel_names[which], &e);
    if (e != CL_SUCCESS) {
        fprintf(stderr, "portatrain: error: opencl: kernel %s: %s (%d)%s\n", moe_kernel_names[which], cl_err_name(e),
                (int)e, e == CL_INVALID_KERNEL_NAME ? "; the MoE routing kernels need a device with cl_khr_fp64" : "");
        exit(1);
    }
    return o->k_moe[which];
}

static void ocl_moe_route(pt_backend *be, real_t *probs, int32_t *sel, real_t *topw, const real_t *logits, int N,
                          int E, int K, bool norm) {
    ocl *o = O(be);
    cl_kernel k = moe_kernel(o, K_MOE_ROUTE);
    argl a = {k, 0, o};
    a_ptr(&a, probs); a_ptr(&a, sel); a_ptr(&a, topw); a_ptr(&a, logits);
    a_int(&a, N); a_int(&a, E); a_int(&a, K); a_int(&a, norm);
    launch1(o, k, N, 16);
}

static void ocl_moe_route_backward(pt_backend *be, real_t *dlogits, const double *dtopw, const double *dprob,
                                   const real_t *probs, const int32_t *sel, const real_t *topw, int N, int E, int K,
                                   bool norm) {
    ocl *o = O(be);
    cl_kernel k = moe_kernel(o, K_MOE_ROUTE_BWD);
    argl a = {k, 0, o};
    a_ptr(&a, dlogits); a_ptr8(&a, dtopw); a_ptr8(&a, dprob ? dprob : dtopw); a_int(&a, dprob != NULL);
    a_ptr(&a, probs); a_ptr(&a, sel); a_ptr(&a, topw); a_int(&a, N); a_int(&a, E); a_int(&a, K); a_int(&a, norm);
    launch1(o, k, N, 16);
}

static void ocl_moe_gather(pt_backend *be, real_t *out, const real_t *inp, const int32_t *idx, int R, int C) {
    ocl *o = O(be);
    cl_kernel k = moe_kernel(o, K_MOE_GATHER);
    argl a = {k, 0, o};
    a_ptr(&a, out); a_ptr(&a, inp); a_ptr(&a, idx); a_int(&a, R); a_int(&a, C);
    launch1(o, k, (size_t)R * C, 64);
}

static void ocl_moe_gather_backward(pt_backend *be, real_t *dinp, const real_t *drows, const int32_t *tok_rows, int N,
                                    int K, int C) {
    ocl *o = O(be);
    cl_kernel k = moe_kernel(o, K_MOE_GATHER_BWD);
    argl a = {k, 0, o};
    a_ptr(&a, dinp); a_ptr(&a, drows); a_ptr(&a, tok_rows); a_int(&a, N); a_int(&a, K); a_int(&a, C);
    a_int(&a, be->bf16_casts);
    launch1(o, k, (size_t)N * C, 64);
}

static void ocl_moe_combine(pt_backend *be, real_t *out, const real_t *rows, const real_t *topw, const int32_t *row_w,
                            const int32_t *tok_rows, int N, int K, int C) {
    ocl *o = O(be);
    cl_kernel k = moe_kernel(o, K_MOE_COMBINE);
    argl a = {k, 0, o};
    a_ptr(&a, out); a_ptr(&a, rows); a_ptr(&a, topw); a_ptr(&a, row_w); a_ptr(&a, tok_rows);
    a_int(&a, N); a_int(&a, K); a_int(&a, C); a_int(&a, be->bf16_casts);
    launch1(o, k, (size_t)N * C, 64);
}

static void ocl_moe_combine_backward(pt_backend *be, real_t *drows, double *dtopw, const real_t *dout,
                                     const real_t *rows, const real_t *topw, const int32_t *row_w, int R, int K,
                                     int C) {
    ocl *o = O(be);
    cl_kernel k = moe_kernel(o, K_MOE_COMBINE_BWD);
    argl a = {k, 0, o};
    a_ptr(&a, drows); a_ptr8(&a, dtopw); a_ptr(&a, dout); a_ptr(&a, rows); a_ptr(&a, topw); a_ptr(&a, row_w);
    a_int(&a, R); a_int(&a, K); a_int(&a, C); a_int(&a, be->bf16_casts);
    launch1(o, k, R, 16);
}

static void ocl_add(pt_backend *be, real_t *out, const real_t *x, const real_t *y, size_t n) {
    ocl *o = O(be);
    argl a = {o->k_add, 0, o};
    a_ptr(&a, out); a_ptr(&a, x); a_ptr(&a, y); a_ulong(&a, n);
    launch1(o, o->k_add, n, 64);
}

static void ocl_scale(pt_backend *be, real_t *x, float s, size_t n) {
    ocl *o = O(be);
    argl a = {o->k_scale, 0, o};
    a_ptr(&a, x); a_float(&a, s); a_ulong(&a, n);
    launch1(o, o->k_scale, n, 64);
}

// Row chunks of R rows: logits[R,V] = inp @ w^T (GEMM), per-row loss and
// gradient in place (xent_rows), then dinp[chunk] = g @ w (overwrite) and
// dw += g^T @ inp[chunk]. Only one chunk's logits exist at a time. Under
// bf16_casts xent_rows rounds the logits and the gradient in place, so both
// backward GEMMs read bf16 values.
static void ocl_lm_head_xent(pt_backend *be, double *loss_sum, real_t *dinp, real_t *dw, const real_t *inp,
                             const real_t *w, const int32_t *targets, int N, int C, int V, float scale) {
    ocl *o = O(be);
    int R = (int)PT_MIN((size_t)N, PT_MAX((size_t)16, XENT_MAX_LOGITS / (size_t)V));
    cl_mem lg = scratch(o, &o->xent_logits, &o->xent_logits_n, (size_t)R * V);
    cl_mem ls = scratch(o, &o->xent_loss, &o->xent_loss_n, N);
    size_t io, wo, dio = 0, dwo = 0;
    cl_mem im = mem_of(o, inp, &io), wm = mem_of(o, w, &wo), dim = NULL, dwm = NULL;
    if (dinp) {
        dim = mem_of(o, dinp, &dio);
        dwm = mem_of(o, dw, &dwo);
    }
    const int grad = dinp != NULL;
    for (int n0 = 0; n0 < N; n0 += R) {
        const int nc = PT_MIN(R, N - n0);
        gemm(o, nc, V, C, im, io + (size_t)n0 * C, C, 1, wm, wo, 1, C, lg, 0, V, 0);
        argl a = {o->k_xent, 0, o};
        a_mem(&a, lg); a_int(&a, V); a_ptr(&a, targets); a_mem(&a, ls); a_int(&a, n0); a_float(&a, scale);
        a_int(&a, grad); a_int(&a, be->bf16_casts);
        size_t g = (size_t)nc * XWG, l = XWG;
        ck(clEnqueueNDRangeKernel(o->queue, o->k_xent, 1, NULL, &g, &l, 0, NULL, NULL), "clEnqueueNDRangeKernel (xent)");
        if (!grad) continue;
        gemm(o, nc, C, V, lg, 0, V, 1, wm, wo, C, 1, dim, dio + (size_t)n0 * C, C, 0);
        gemm(o, V, C, nc, lg, 0, 1, V, im, io + (size_t)n0 * C, C, 1, dwm, dwo, C, 1);
    }
    float *rl = pt_malloc(sizeof(float) * (N ? N : 1));
    if (N) ck(clEnqueueReadBuffer(o->queue, ls, CL_TRUE, 0, sizeof(float) * N, rl, 0, NULL, NULL), "clEnqueueReadBuffer");
    double total = 0;
    for (int n = 0; n < N; n++) total += rl[n];
    free(rl);
    *loss_sum = total;
}

static void ocl_round_bf16(pt_backend *be, real_t *dst, const real_t *src, size_t n) {
    ocl *o = O(be);
    argl a = {o->k_round_bf16, 0, o};
    a_ptr(&a, dst); a_ptr(&a, src); a_ulong(&a, n);
    launch1(o, o->k_round_bf16, n, 64);
}

static void ocl_sum_squares(pt_backend *be, double *out, const real_t *g, size_t n) {
    ocl *o = O(be);
    const size_t blk = (size_t)SWG * 16, nb = (n + blk - 1) / blk;
    *out = 0;
    if (!nb) return;
    cl_mem part = scratch(o, &o->partial, &o->partial_n, nb);
    argl a = {o->k_sumsq, 0, o};
    a_mem(&a, part); a_ptr(&a, g); a_ulong(&a, n);
    size_t gl = nb * SWG, l = SWG;
    ck(clEnqueueNDRangeKernel(o->queue, o->k_sumsq, 1, NULL, &gl, &l, 0, NULL, NULL), "clEnqueueNDRangeKernel (sum_squares)");
    float *p = pt_malloc(sizeof(float) * nb);
    ck(clEnqueueReadBuffer(o->queue, part, CL_TRUE, 0, sizeof(float) * nb, p, 0, NULL, NULL), "clEnqueueReadBuffer");
    double s = 0;
    for (size_t b = 0; b < nb; b++) s += p[b];
    free(p);
    *out = s;
}

static void ocl_adamw(pt_backend *be, real_t *p, const real_t *g, real_t *m, real_t *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, int t) {
    ocl *o = O(be);
    // the scalars exactly as cpu-ref computes them
    const float decay = (float)(1.0 - (double)lr * weight_decay);
    const float w1 = (float)(1.0 - beta1), b2 = beta2, w2 = (float)(1.0 - beta2);
    const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    argl a = {o->k_adamw, 0, o};
    a_ptr(&a, p); a_ptr(&a, g); a_ptr(&a, m); a_ptr(&a, v); a_ulong(&a, n);
    a_float(&a, decay); a_float(&a, w1); a_float(&a, b2); a_float(&a, w2); a_float(&a, step_size);
    a_float(&a, bc2_sqrt); a_float(&a, eps);
    launch1(o, o->k_adamw, n, 64);
}

// ------------------------------------------------------------ create / destroy

static void ocl_destroy(pt_backend *be) {
    ocl *o = O(be);
    if (o->queue) clFinish(o->queue);
    for (int i = 0; i < o->nallocs; i++) {
        clReleaseMemObject(o->allocs[i].mem);
        munmap((void *)o->allocs[i].base, o->allocs[i].bytes);
    }
    free(o->allocs);
    cl_mem sc[] = {o->xent_logits, o->xent_loss, o->rowdot, o->partial, o->splitk};
    for (size_t i = 0; i < PT_ARRAY_LEN(sc); i++)
        if (sc[i]) clReleaseMemObject(sc[i]);
    for (int i = 0; i < o->nvars; i++) {
        ocl_variant *v = &o->vars[i];
        clReleaseKernel(v->rope_fwd); clReleaseKernel(v->rope_bwd); clReleaseKernel(v->att_fwd);
        clReleaseKernel(v->att_dq); clReleaseKernel(v->att_dkv);
        clReleaseProgram(v->prog);
    }
    free(o->vars);
    cl_kernel ks[] = {o->k_gemm, o->k_gemm_nt, o->k_gemm_nn_tn, o->k_sum_slices, o->k_emb_fwd, o->k_emb_bwd, o->k_rms_fwd, o->k_rms_bwd_dinp, o->k_rms_bwd_dw,
                      o->k_swiglu_fwd, o->k_swiglu_bwd, o->k_add, o->k_scale, o->k_adamw, o->k_sumsq, o->k_xent,
                      o->k_round_bf16};
    for (size_t i = 0; i < PT_ARRAY_LEN(ks); i++)
        if (ks[i]) clReleaseKernel(ks[i]);
    for (size_t i = 0; i < PT_ARRAY_LEN(o->k_moe); i++)
        if (o->k_moe[i]) clReleaseKernel(o->k_moe[i]);
    if (o->base) clReleaseProgram(o->base);
    if (o->queue) clReleaseCommandQueue(o->queue);
    if (o->ctx) clReleaseContext(o->ctx);
    free(o);
    free(be);
}

static void str_info(cl_device_id d, cl_device_info what, char *buf, size_t n) {
    buf[0] = 0;
    if (clGetDeviceInfo(d, what, n - 1, buf, NULL) != CL_SUCCESS) buf[0] = 0;
    buf[n - 1] = 0;
}

// $PT_OPENCL_CACHE ("off" disables), else $XDG_CACHE_HOME/portatrain/opencl,
// else ~/.cache/portatrain/opencl.
static void cache_dir(char *out, size_t n) {
    const char *e = getenv("PT_OPENCL_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (e && *e) snprintf(out, n, "%s", strcmp(e, "off") ? e : "");
    else if (x && *x) snprintf(out, n, "%s/portatrain/opencl", x);
    else if (h && *h) snprintf(out, n, "%s/.cache/portatrain/opencl", h);
    else out[0] = 0;
}

// Platforms and their devices (all types); counts in *np, devices per platform.
static int get_platforms(cl_platform_id **plats, cl_uint *np) {
    *plats = NULL;
    *np = 0;
    if (clGetPlatformIDs(0, NULL, np) != CL_SUCCESS || *np == 0) {
        *np = 0;
        return 0;
    }
    *plats = pt_calloc(*np, sizeof(cl_platform_id));
    if (clGetPlatformIDs(*np, *plats, NULL) != CL_SUCCESS) *np = 0;
    return (int)*np;
}

static int get_devices(cl_platform_id p, cl_device_id **devs, cl_uint *nd) {
    *devs = NULL;
    *nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, NULL, nd) != CL_SUCCESS || *nd == 0) {
        *nd = 0;
        return 0;
    }
    *devs = pt_calloc(*nd, sizeof(cl_device_id));
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, *nd, *devs, NULL) != CL_SUCCESS) *nd = 0;
    return (int)*nd;
}

int pt_opencl_print_devices(FILE *f) {
    cl_platform_id *plats;
    cl_uint np;
    if (!get_platforms(&plats, &np)) {
        fprintf(f, "opencl       no OpenCL platform\n");
        return 0;
    }
    int count = 0;
    for (cl_uint p = 0; p < np; p++) {
        char pname[256] = "", pver[256] = "";
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
        clGetPlatformInfo(plats[p], CL_PLATFORM_VERSION, sizeof pver - 1, pver, NULL);
        cl_device_id *devs;
        cl_uint nd;
        get_devices(plats[p], &devs, &nd);
        if (!nd) fprintf(f, "opencl:%u     platform %s (%s): no devices\n", p, pname, pver);
        for (cl_uint d = 0; d < nd; d++) {
            char name[256], ver[256], drv[256];
            str_info(devs[d], CL_DEVICE_NAME, name, sizeof name);
            str_info(devs[d], CL_DEVICE_VERSION, ver, sizeof ver);
            str_info(devs[d], CL_DRIVER_VERSION, drv, sizeof drv);
            cl_ulong mem = 0;
            cl_uint cu = 0;
            clGetDeviceInfo(devs[d], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
            clGetDeviceInfo(devs[d], CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
            fprintf(f, "opencl:%u:%u   %s: %s (%s, driver %s, %u compute units, %.1f GiB)\n", p, d, pname, name,
                    ver, drv, cu, mem / 1073741824.0);
            count++;
        }
        free(devs);
    }
    free(plats);
    return count;
}

// Parses ":P:D" (or "" for 0:0) into indices; -1 + error otherwise.
static int parse_indices(const char *s, long *pi, long *di) {
    *pi = *di = 0;
    if (!*s) return 0;
    char *end;
    if (*s != ':') goto bad;
    *pi = strtol(s + 1, &end, 10);
    if (end == s + 1 || *pi < 0) goto bad;
    if (*end == 0) return 0;
    if (*end != ':') goto bad;
    const char *d = end + 1;
    *di = strtol(d, &end, 10);
    if (end == d || *end || *di < 0) goto bad;
    return 0;
bad:
    pt_set_error("backend 'opencl%s': expected opencl[:PLATFORM[:DEVICE]] with indices from `portatrain devices`", s);
    return -1;
}

// The platform and device a suffix names; -1 + the error create gives when
// there is none (no ICD, an index past the list).
static int find_device(const char *suffix, cl_platform_id *plat, cl_device_id *dev, long *pi_out, long *di_out) {
    long pi, di;
    if (parse_indices(suffix, &pi, &di) != 0) return -1;
    cl_platform_id *plats;
    cl_uint np;
    if (!get_platforms(&plats, &np)) {
        pt_set_error("backend 'opencl%s': no OpenCL platform found (install an ICD, e.g. pocl-opencl-icd)", suffix);
        return -1;
    }
    if (pi >= (long)np) {
        pt_set_error("backend 'opencl%s': no OpenCL platform %ld (%u found; see `portatrain devices`)", suffix, pi, np);
        free(plats);
        return -1;
    }
    cl_device_id *devs;
    cl_uint nd;
    get_devices(plats[pi], &devs, &nd);
    if (di >= (long)nd) {
        pt_set_error("backend 'opencl%s': platform %ld has no device %ld (%u found; see `portatrain devices`)", suffix,
                     pi, di, nd);
        free(plats);
        free(devs);
        return -1;
    }
    *plat = plats[pi];
    *dev = devs[di];
    *pi_out = pi;
    *di_out = di;
    free(plats);
    free(devs);
    return 0;
}

// Availability without a context (accept checks its SPECs before any run).
int pt_opencl_probe(const char *suffix) {
    cl_platform_id p;
    cl_device_id d;
    long pi, di;
    return find_device(suffix, &p, &d, &pi, &di);
}

static const pt_backend_ops opencl_ops = {
    .alloc = ocl_alloc_fn,
    .free = ocl_free_fn,
    .upload = ocl_upload,
    .download = ocl_download,
    .copy = ocl_copy,
    .zero = ocl_zero,
    .synchronize = ocl_sync,
    .destroy = ocl_destroy,
    .embedding_forward = ocl_embedding_forward,
    .embedding_backward = ocl_embedding_backward,
    .matmul_forward = ocl_matmul_forward,
    .matmul_backward = ocl_matmul_backward,
    .rmsnorm_forward = ocl_rmsnorm_forward,
    .rmsnorm_backward = ocl_rmsnorm_backward,
    .rope_forward = ocl_rope_forward,
    .rope_backward = ocl_rope_backward,
    .attention_saved_floats = ocl_attention_saved_floats,
    .attention_forward = ocl_attention_forward,
    .attention_backward = ocl_attention_backward,
    .swiglu_forward = ocl_swiglu_forward,
    .swiglu_backward = ocl_swiglu_backward,
    .add = ocl_add,
    .lm_head_xent = ocl_lm_head_xent,
    .sum_squares = ocl_sum_squares,
    .scale = ocl_scale,
    .adamw = ocl_adamw,
    // bf16: rounding kernels only; the model runs the fp32 matmuls on bf16-exact operands
    .round_bf16 = ocl_round_bf16,
    .moe_route = ocl_moe_route,
    .moe_route_backward = ocl_moe_route_backward,
    .moe_gather = ocl_moe_gather,
    .moe_gather_backward = ocl_moe_gather_backward,
    .moe_combine = ocl_moe_combine,
    .moe_combine_backward = ocl_moe_combine_backward,
    .compile_stats = ocl_compile_stats,
};

// The device's description (be->device) and the key of its program cache.
static void describe(pt_backend *be, ocl *o, long pi, long di) {
    char name[256], vendor[256], ver[256], drv[256], pname[256] = "", pver[256] = "";
    str_info(o->device, CL_DEVICE_NAME, name, sizeof name);
    str_info(o->device, CL_DEVICE_VENDOR, vendor, sizeof vendor);
    str_info(o->device, CL_DEVICE_VERSION, ver, sizeof ver);
    str_info(o->device, CL_DRIVER_VERSION, drv, sizeof drv);
    clGetPlatformInfo(o->platform, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    clGetPlatformInfo(o->platform, CL_PLATFORM_VERSION, sizeof pver - 1, pver, NULL);
    snprintf(o->devkey, sizeof o->devkey, "%s|%s|%s|%s|%s|%s", pname, pver, name, vendor, ver, drv);
    snprintf(be->device, sizeof be->device, "OpenCL %ld:%ld %s (%s, %s, driver %s)", pi, di, name, pname, ver, drv);
}

// The base program's build options: GEMM tiles (defaults or
// PT_OPENCL_GEMM_TILE="TM,TN,TK,RM,RN"), NT vector width, work-group sizes.
// -1 + error for a malformed PT_OPENCL_GEMM_TILE.
static int set_build_options(ocl *o) {
    o->tm = DEF_TM; o->tn = DEF_TN; o->tk = DEF_TK; o->rm = DEF_RM; o->rn = DEF_RN;
    const char *tile = getenv("PT_OPENCL_GEMM_TILE");
    if (tile && *tile) {
        int t[5];
        if (sscanf(tile, "%d,%d,%d,%d,%d", &t[0], &t[1], &t[2], &t[3], &t[4]) != 5 || t[0] <= 0 || t[1] <= 0 ||
            t[2] <= 0 || t[3] <= 0 || t[4] <= 0 || t[0] % t[3] || t[1] % t[4]) {
            pt_set_error("PT_OPENCL_GEMM_TILE '%s': expected TM,TN,TK,RM,RN with RM dividing TM and RN dividing TN",
                         tile);
            return -1;
        }
        o->tm = t[0]; o->tn = t[1]; o->tk = t[2]; o->rm = t[3]; o->rn = t[4];
    }
    // Correctly rounded sqrt and division where the device offers them (AdamW
    // and RMSNorm then match cpu-ref's IEEE results); never fast-relaxed math.
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(o->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    // NT GEMM vector width: PT_OPENCL_NT_VEC (4, 8, 16), default 16 (PoCL on AVX-512: 2x of 4)
    const char *nv = getenv("PT_OPENCL_NT_VEC");
    const int ntv = nv && (!strcmp(nv, "4") || !strcmp(nv, "8")) ? atoi(nv) : 16;
    snprintf(o->base_opts, sizeof o->base_opts,
             "-cl-std=CL1.2%s -DTM=%d -DTN=%d -DTK=%d -DRM=%d -DRN=%d -DNTV=%d -DXWG=%d -DSWG=%d",
             (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) ? " -cl-fp32-correctly-rounded-divide-sqrt" : "", o->tm,
             o->tn, o->tk, o->rm, o->rn, ntv, XWG, SWG);
    return 0;
}

// The kernels of the base program (shape-specialised ones are built on use).
static void get_kernels(ocl *o) {
    o->k_gemm = kernel(o->base, "gemm");
    o->k_gemm_nt = kernel(o->base, "gemm_nt");
    o->k_gemm_nn_tn = kernel(o->base, "gemm_nn_tn");
    o->k_sum_slices = kernel(o->base, "sum_slices");
    o->k_emb_fwd = kernel(o->base, "embedding_forward");
    o->k_emb_bwd = kernel(o->base, "embedding_backward");
    o->k_rms_fwd = kernel(o->base, "rmsnorm_forward");
    o->k_rms_bwd_dinp = kernel(o->base, "rmsnorm_backward_dinp");
    o->k_rms_bwd_dw = kernel(o->base, "rmsnorm_backward_dw");
    o->k_swiglu_fwd = kernel(o->base, "swiglu_forward");
    o->k_swiglu_bwd = kernel(o->base, "swiglu_backward");
    o->k_add = kernel(o->base, "add");
    o->k_scale = kernel(o->base, "scale");
    o->k_adamw = kernel(o->base, "adamw");
    o->k_sumsq = kernel(o->base, "sum_squares");
    o->k_xent = kernel(o->base, "xent_rows");
    o->k_round_bf16 = kernel(o->base, "round_bf16");
}

pt_backend *pt_backend_opencl_create(const char *suffix) {
    cl_platform_id plat;
    cl_device_id dev;
    long pi, di;
    if (find_device(suffix, &plat, &dev, &pi, &di) != 0) return NULL;
    ocl *o = pt_calloc(1, sizeof *o);
    o->platform = plat;
    o->device = dev;
    pt_backend *be = pt_calloc(1, sizeof *be);
    be->impl = o;
    cl_int e;
    o->ctx = clCreateContext(NULL, 1, &o->device, NULL, NULL, &e);
    if (e == CL_SUCCESS) o->queue = clCreateCommandQueue(o->ctx, o->device, 0, &e);
    if (e != CL_SUCCESS) {
        pt_set_error("backend 'opencl%s': cannot create a context/queue: %s (%d)", suffix, cl_err_name(e), (int)e);
        ocl_destroy(be);
        return NULL;
    }
    describe(be, o, pi, di);
    if (set_build_options(o) != 0) {
        ocl_destroy(be);
        return NULL;
    }
    cache_dir(o->cache_dir, sizeof o->cache_dir);
    o->base = build_program(o, o->base_opts);
    if (!o->base) {
        ocl_destroy(be);
        return NULL;
    }
    get_kernels(o);
    const char *gk = getenv("PT_OPENCL_GEMM");
    o->tiled_gemm = gk && !strcmp(gk, "tiled");
    be->name = "opencl";
    be->host_memory = false;
    be->ops = &opencl_ops;
    return be;
}
#endif  // PT_HAVE_OPENCL
