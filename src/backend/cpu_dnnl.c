// oneDNN bf16 matmuls for the fast CPU backend (see cpu_dnnl.h).
#include "backend/cpu_dnnl.h"

#include "util/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// A kernel cannot return an error: a matmul oneDNN cannot run here is fatal.
PT_PRINTF(1, 2) static _Noreturn void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

#ifdef PT_HAVE_DNNL
#include <dnnl.h>

enum { CACHE_MAX = 128 };

// One cached primitive per shape/layout; its memory objects are re-pointed at
// each call's buffers (dnnl_memory_set_data_handle), so a call allocates nothing.
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, accumulate;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
} gemm_entry;

struct pt_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    gemm_entry cache[CACHE_MAX];
    int n;
    char impl[128];
};

static int create_entry(pt_dnnl *d, gemm_entry *e) {
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_dims_t adims = {e->M, e->K}, bdims = {e->K, e->N}, cdims = {e->M, e->N};
    dnnl_dims_t astr = {e->ta ? 1 : e->lda, e->ta ? e->lda : 1}, bstr = {e->tb ? 1 : e->ldb, e->tb ? e->ldb : 1},
                cstr = {e->ldc, 1};
    if (dnnl_memory_desc_init_by_strides(&ad, 2, adims, dnnl_bf16, astr) ||
        dnnl_memory_desc_init_by_strides(&bd, 2, bdims, dnnl_bf16, bstr) ||
        dnnl_memory_desc_init_by_strides(&cd, 2, cdims, dnnl_f32, cstr))
        return -1;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd)) return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (dnnl_primitive_attr_create(&attr)) return -1;
    if (e->accumulate) {  // C += A B as the "sum" post-op
        if (dnnl_post_ops_create(&po) || dnnl_post_ops_append_sum(po, 1.0f) || dnnl_primitive_attr_set_post_ops(attr, po)) {
            if (po) dnnl_post_ops_destroy(po);
            dnnl_primitive_attr_destroy(attr);
            return -1;
        }
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, attr, d->engine, NULL);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (st) return -1;
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(d->impl, sizeof d->impl, "%s", impl);
    st = dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st) return -1;
    if (dnnl_memory_create(&e->a, &ad, d->engine, DNNL_MEMORY_NONE) ||
        dnnl_memory_create(&e->b, &bd, d->engine, DNNL_MEMORY_NONE) ||
        dnnl_memory_create(&e->c, &cd, d->engine, DNNL_MEMORY_NONE))
        return -1;
    return 0;
}

static gemm_entry *lookup(pt_dnnl *d, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, int acc) {
    for (int i = 0; i < d->n; i++) {
        gemm_entry *e = &d->cache[i];
        if (e->ta == ta && e->tb == tb && e->M == M && e->N == N && e->K == K && e->lda == lda && e->ldb == ldb &&
            e->ldc == ldc && e->accumulate == acc)
            return e;
    }
    if (d->n == CACHE_MAX) {  // more shapes than any model uses: recycle the oldest entry
        gemm_entry *e = &d->cache[0];
        dnnl_primitive_destroy(e->prim);
        dnnl_memory_destroy(e->a);
        dnnl_memory_destroy(e->b);
        dnnl_memory_destroy(e->c);
        memmove(d->cache, d->cache + 1, sizeof(gemm_entry) * (CACHE_MAX - 1));
        d->n--;
    }
    gemm_entry *e = &d->cache[d->n];
    memset(e, 0, sizeof *e);
    *e = (gemm_entry){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .accumulate = acc};
    if (create_entry(d, e) != 0) die("oneDNN: no bf16 matmul for M=%d N=%d K=%d on this CPU", M, N, K);
    d->n++;
    return e;
}

void pt_dnnl_gemm_bf16(pt_dnnl *d, bool ta, bool tb, int M, int N, int K, const uint16_t *A, int lda,
                       const uint16_t *B, int ldb, bool accumulate, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // C = 0 or unchanged
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * N);
        return;
    }
    gemm_entry *e = lookup(d, ta, tb, M, N, K, lda, ldb, ldc, accumulate);
    dnnl_memory_set_data_handle(e->a, (void *)A);
    dnnl_memory_set_data_handle(e->b, (void *)B);
    dnnl_memory_set_data_handle(e->c, C);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
    if (dnnl_primitive_execute(e->prim, d->stream, 3, args) || dnnl_stream_wait(d->stream))
        die("oneDNN: bf16 matmul M=%d N=%d K=%d failed", M, N, K);
}

pt_dnnl *pt_dnnl_create(void) {
    pt_dnnl *d = pt_calloc(1, sizeof *d);
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) ||
        dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags)) {
        pt_warn("oneDNN: no CPU engine; the cpu backend runs bf16 matmuls on fp32 sgemm");
        free(d);
        return NULL;
    }
    // Probe: a bf16 matmul this CPU can run at all (oneDNN has no bf16 on pre-AVX-512 x86), of a size
    // that gets the implementation a model's matmuls get (impl is reported by `portatrain devices`).
    gemm_entry probe = {.tb = 1, .M = 256, .N = 256, .K = 256, .lda = 256, .ldb = 256, .ldc = 256};
    if (create_entry(d, &probe) != 0) {
        pt_warn("oneDNN has no bf16 matmul on this CPU; the cpu backend runs bf16 matmuls on fp32 sgemm");
        dnnl_stream_destroy(d->stream);
        dnnl_engine_destroy(d->engine);
        free(d);
        return NULL;
    }
    d->cache[d->n++] = probe;
    return d;
}

void pt_dnnl_destroy(pt_dnnl *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) {
        dnnl_primitive_destroy(d->cache[i].prim);
        dnnl_memory_destroy(d->cache[i].a);
        dnnl_memory_destroy(d->cache[i].b);
        dnnl_memory_destroy(d->cache[i].c);
    }
    dnnl_stream_destroy(d->stream);
    dnnl_engine_destroy(d->engine);
    free(d);
}

const char *pt_dnnl_impl(const pt_dnnl *d) { return d->impl; }

const char *pt_dnnl_version(void) {
    static char v[64];
    const dnnl_version_t *dv = dnnl_version();
    snprintf(v, sizeof v, "oneDNN %d.%d.%d (%.10s)", dv->major, dv->minor, dv->patch, dv->hash);
    return v;
}

#else  // built without oneDNN

pt_dnnl *pt_dnnl_create(void) { return NULL; }
void pt_dnnl_destroy(pt_dnnl *d) { (void)d; }
void pt_dnnl_gemm_bf16(pt_dnnl *d, bool ta, bool tb, int M, int N, int K, const uint16_t *A, int lda,
                       const uint16_t *B, int ldb, bool accumulate, float *C, int ldc) {
    die("oneDNN is not built in");
}
const char *pt_dnnl_impl(const pt_dnnl *d) { return "none"; }
const char *pt_dnnl_version(void) { return NULL; }
#endif
