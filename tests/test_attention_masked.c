// Document-masked (block-causal) attention, backend.h's `pos` contract, on
// every backend this build has (cpu-ref, cpu, opencl, cuda-sim, cuda on a
// GPU; a backend not built or without a device is skipped and said so):
// - forward out and backward dq, dk, dv with packed documents against a
//   float64 reference computed here, B = 2 rows (one starting with the short
//   tail of a document, one a single document), GQA H = 4, KV = 2, on T = 37
//   (no multiple of any tile) and T = 150 (query tiles whose first key blocks
//   are all masked, so the tile-skipping paths run);
// - pos[t] == t bitwise equal to pos == NULL (out, saved, dq, dk, dv);
// - the k and v of one document changed: every other document's out, dq and
//   the dk, dv of every other document's keys bitwise unchanged, while the
//   changed document's out does change;
// - the float64 reference's dq against central finite differences of its own
//   forward, so the reference backward itself is checked.
#include "backend/backend.h"
#include "util/common.h"
#include "testtrain.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, H = 4, KV = 2, D = 16 };

// Tolerances, relative to the largest magnitude of the reference tensor. Every
// backend sums in fp32 (unit roundoff u = 6e-8): a sequential sum of n terms
// errs by at most about n*u times the sum of |terms|. The forward output is a
// convex combination of v rows (n <= T = 150 keys, after D = 16-term dot
// products and an exp of a few ulps): 150*u ~ 1e-5. The gradients chain two
// such sums (dP = dout.v, then dS*k / dS*q / P*dout over up to T*H/KV = 300
// terms) and a cancellation (dP - rowdot): 300*u ~ 2e-5 per sum, 4e-5 for
// two. Measured errors are below 5e-7 on every backend, while a key wrongly
// masked or included errs by O(1) (an out off by 8x was seen in development).
#define TOL_OUT 1e-5
#define TOL_GRAD 4e-5

// pos for documents of the given lengths packed into one row of T tokens.
static void fill_pos(int32_t *p, int T, const int *lens) {
    int t = 0;
    for (int d = 0; t < T; d++)
        for (int i = 0; i < lens[d] && t < T; i++) p[t++] = i;
}

// ------------------------------------------------------------ float64 reference

static size_t qi(int T, int b, int t, int h) { return (((size_t)b * T + t) * H + h) * D; }
static size_t ki(int T, int b, int t, int h) { return (((size_t)b * T + t) * KV + h) * D; }

// P[b,h,t,s] (zero where masked) and out
static void ref_forward(double *out, double *P, const float *q, const float *k, const float *v, const double *dq_shift,
                        const int32_t *pos, int T) {
    const double scale = 1.0 / sqrt((double)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const int kh = h / (H / KV), lo = t - pos[b * T + t];
                double *p = P + (((size_t)b * H + h) * T + t) * T, mx = -INFINITY, sum = 0;
                for (int s = 0; s < T; s++) {
                    p[s] = 0;
                    if (s < lo || s > t) continue;
                    double dot = 0;
                    for (int i = 0; i < D; i++) {
                        const double qv = q[qi(T, b, t, h) + i] + (dq_shift ? dq_shift[qi(T, b, t, h) + i] : 0);
                        dot += qv * k[ki(T, b, s, kh) + i];
                    }
                    p[s] = dot * scale;
                    mx = fmax(mx, p[s]);
                }
                for (int s = lo; s <= t; s++) sum += p[s] = exp(p[s] - mx);
                for (int s = lo; s <= t; s++) p[s] /= sum;
                for (int i = 0; i < D; i++) {
                    double a = 0;
                    for (int s = lo; s <= t; s++) a += p[s] * v[ki(T, b, s, kh) + i];
                    out[qi(T, b, t, h) + i] = a;
                }
            }
}

static void ref_backward(double *dq, double *dk, double *dv, const double *P, const float *dout, const float *q,
                         const float *k, const float *v, const int32_t *pos, int T) {
    const double scale = 1.0 / sqrt((double)D);
    memset(dq, 0, sizeof(double) * B * T * H * D);
    memset(dk, 0, sizeof(double) * B * T * KV * D);
    memset(dv, 0, sizeof(double) * B * T * KV * D);
    double *dp = malloc(sizeof(double) * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const int kh = h / (H / KV), lo = t - pos[b * T + t];
                const double *p = P + (((size_t)b * H + h) * T + t) * T;
                const float *go = dout + qi(T, b, t, h);
                double rowdot = 0;
                for (int s = 0; s < T; s++) {
                    dp[s] = 0;
                    for (int i = 0; i < D; i++) dp[s] += (double)go[i] * v[ki(T, b, s, kh) + i];
                    rowdot += p[s] * dp[s];
                }
                for (int s = lo; s <= t; s++) {
                    const double ds = p[s] * (dp[s] - rowdot) * scale;
                    for (int i = 0; i < D; i++) {
                        dq[qi(T, b, t, h) + i] += ds * k[ki(T, b, s, kh) + i];
                        dk[ki(T, b, s, kh) + i] += ds * q[qi(T, b, t, h) + i];
                        dv[ki(T, b, s, kh) + i] += p[s] * go[i];
                    }
                }
            }
    free(dp);
}

// max |got - want| / max |want|
static double relerr(const float *got, const double *want, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)got[i] - want[i]));
        m = fmax(m, fabs(want[i]));
    }
    return m > 0 ? e / m : e;
}

// ------------------------------------------------------------ one case

typedef struct {
    int T;
    const int *lens[B];  // document lengths of each row
    int32_t *pos;
    float *q, *k, *v, *dout;
    double *out, *P, *dq, *dk, *dv;  // the reference
} attn_case;

static void case_init(attn_case *c) {
    const int T = c->T;
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D;
    c->pos = malloc(sizeof(int32_t) * B * T);
    for (int b = 0; b < B; b++) fill_pos(c->pos + b * T, T, c->lens[b]);
    c->q = test_rnd(nq, 1.0f);
    c->k = test_rnd(nk, 1.0f);
    c->v = test_rnd(nk, 1.0f);
    c->dout = test_rnd(nq, 1.0f);
    c->out = malloc(sizeof(double) * nq);
    c->P = malloc(sizeof(double) * B * H * T * T);
    c->dq = malloc(sizeof(double) * nq);
    c->dk = malloc(sizeof(double) * nk);
    c->dv = malloc(sizeof(double) * nk);
    ref_forward(c->out, c->P, c->q, c->k, c->v, NULL, c->pos, T);
    ref_backward(c->dq, c->dk, c->dv, c->P, c->dout, c->q, c->k, c->v, c->pos, T);
}

static void case_free(attn_case *c) {
    free(c->pos);
    pt_aligned_free(c->q);
    pt_aligned_free(c->k);
    pt_aligned_free(c->v);
    pt_aligned_free(c->dout);
    free(c->out);
    free(c->P);
    free(c->dq);
    free(c->dk);
    free(c->dv);
}

// The reference's dq against central differences of
// L = sum(out * dout) (so dL/dq = dq): a few entries of each, in float64.
static void check_reference_gradients(attn_case *c) {
    const int T = c->T;
    const size_t nq = (size_t)B * T * H * D;
    double *out = malloc(sizeof(double) * nq), *P = malloc(sizeof(double) * B * H * T * T);
    double *shift = calloc(nq, sizeof(double));
    const double eps = 1e-4;
    const size_t picks[] = {qi(T, 0, 5, 1) + 3, qi(T, 1, T - 1, 3) + 7, qi(T, 0, T / 2, 2) + 11};
    for (int n = 0; n < 3; n++) {
        double L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            shift[picks[n]] = sgn ? -eps : eps;
            ref_forward(out, P, c->q, c->k, c->v, shift, c->pos, T);
            L[sgn] = 0;
            for (size_t i = 0; i < nq; i++) L[sgn] += out[i] * c->dout[i];
        }
        shift[picks[n]] = 0;
        const double fd = (L[0] - L[1]) / (2 * eps);
        // central differences err by O(eps^2) ~ 1e-8 here; the analytic dq is O(0.1)
        CHECK(fabs(fd - c->dq[picks[n]]) <= 1e-6 * fmax(1.0, fabs(fd)), "T%d reference dq[%zu]: %.9g vs finite "
              "difference %.9g", T, picks[n], c->dq[picks[n]], fd);
    }
    free(out);
    free(P);
    free(shift);
}

// Runs forward (and backward) on `be`; host results into the given arrays.
typedef struct {
    float *out, *saved, *dq, *dk, *dv;
    size_t nsaved;
} run_out;

static void run(pt_backend *be, run_out *r, const attn_case *c, const float *k, const float *v, const int32_t *pos) {
    const int T = c->T;
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D;
    const pt_backend_ops *o = be->ops;
    r->nsaved = o->attention_saved_floats(be, B, T, H, D);
    float *dq_ = o->alloc(be, 4 * nq), *dk_ = o->alloc(be, 4 * nk), *dv_ = o->alloc(be, 4 * nk);
    float *q_ = o->alloc(be, 4 * nq), *k_ = o->alloc(be, 4 * nk), *v_ = o->alloc(be, 4 * nk);
    float *go_ = o->alloc(be, 4 * nq), *out_ = o->alloc(be, 4 * nq), *sv_ = o->alloc(be, 4 * r->nsaved);
    int32_t *pos_ = pos ? o->alloc(be, sizeof(int32_t) * B * T) : NULL;
    o->upload(be, q_, c->q, 4 * nq);
    o->upload(be, k_, k, 4 * nk);
    o->upload(be, v_, v, 4 * nk);
    o->upload(be, go_, c->dout, 4 * nq);
    if (pos) o->upload(be, pos_, pos, sizeof(int32_t) * B * T);
    o->attention_forward(be, out_, sv_, q_, k_, v_, pos_, B, T, H, KV, D);
    o->attention_backward(be, dq_, dk_, dv_, go_, q_, k_, v_, out_, sv_, pos_, B, T, H, KV, D);
    r->out = malloc(4 * nq);
    r->saved = malloc(4 * r->nsaved);
    r->dq = malloc(4 * nq);
    r->dk = malloc(4 * nk);
    r->dv = malloc(4 * nk);
    o->download(be, r->out, out_, 4 * nq);
    o->download(be, r->saved, sv_, 4 * r->nsaved);
    o->download(be, r->dq, dq_, 4 * nq);
    o->download(be, r->dk, dk_, 4 * nk);
    o->download(be, r->dv, dv_, 4 * nk);
    void *bufs[] = {dq_, dk_, dv_, q_, k_, v_, go_, out_, sv_, pos_};
    for (int i = 0; i < 10; i++)
        if (bufs[i]) o->free(be, bufs[i]);
}

static void run_free(run_out *r) {
    free(r->out);
    free(r->saved);
    free(r->dq);
    free(r->dk);
    free(r->dv);
}

static bool same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, 4 * n); }

// Rows [t0, t1) of row b of x[B,T,NH,D] bitwise equal in a and b, or (inside
// = false) every other row.
static bool rows_same(const float *a, const float *c, int T, int NH, int b, int t0, int t1, bool inside) {
    for (int bb = 0; bb < B; bb++)
        for (int t = 0; t < T; t++) {
            const bool in = bb == b && t >= t0 && t < t1;
            const size_t o = (((size_t)bb * T + t) * NH) * D;
            if (in == inside && memcmp(a + o, c + o, 4 * (size_t)NH * D)) return false;
        }
    return true;
}

static void check_backend(const char *spec, pt_backend *be, attn_case *c) {
    const int T = c->T;
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D;
    run_out r;
    run(be, &r, c, c->k, c->v, c->pos);
    const double eo = relerr(r.out, c->out, nq), eq = relerr(r.dq, c->dq, nq);
    const double ek = relerr(r.dk, c->dk, nk), ev = relerr(r.dv, c->dv, nk);
    printf("%s T%d: relative error out %.2e dq %.2e dk %.2e dv %.2e\n", spec, T, eo, eq, ek, ev);
    CHECK(eo <= TOL_OUT, "%s T%d: out off the float64 reference by %.3g", spec, T, eo);
    CHECK(eq <= TOL_GRAD, "%s T%d: dq off the float64 reference by %.3g", spec, T, eq);
    CHECK(ek <= TOL_GRAD, "%s T%d: dk off the float64 reference by %.3g", spec, T, ek);
    CHECK(ev <= TOL_GRAD, "%s T%d: dv off the float64 reference by %.3g", spec, T, ev);

    // pos[t] == t (one document per row) is plain causal attention, bit for bit
    int32_t *ident = malloc(sizeof(int32_t) * B * T);
    for (int i = 0; i < B * T; i++) ident[i] = i % T;
    run_out a, n;
    run(be, &a, c, c->k, c->v, ident);
    run(be, &n, c, c->k, c->v, NULL);
    CHECK(same_bits(a.out, n.out, nq) && same_bits(a.saved, n.saved, a.nsaved), "%s T%d: forward with pos[t] == t "
          "differs from pos == NULL", spec, T);
    CHECK(same_bits(a.dq, n.dq, nq) && same_bits(a.dk, n.dk, nk) && same_bits(a.dv, n.dv, nk),
          "%s T%d: backward with pos[t] == t differs from pos == NULL", spec, T);
    run_free(&a);
    run_free(&n);
    free(ident);

    // Another document's keys: change k and v of row 0's third document.
    int t0 = c->lens[0][0] + c->lens[0][1], t1 = t0 + c->lens[0][2];
    float *k2 = test_dup(c->k, nk), *v2 = test_dup(c->v, nk);
    for (int t = t0; t < t1; t++)
        for (int i = 0; i < KV * D; i++) {
            k2[ki(T, 0, t, 0) + i] += 0.5f;
            v2[ki(T, 0, t, 0) + i] -= 0.75f;
        }
    run_out p;
    run(be, &p, c, k2, v2, c->pos);
    CHECK(rows_same(p.out, r.out, T, H, 0, t0, t1, false), "%s T%d: changing the keys of tokens %d..%d changed the "
          "out of another document", spec, T, t0, t1 - 1);
    CHECK(!rows_same(p.out, r.out, T, H, 0, t0, t1, true), "%s T%d: changing the keys of tokens %d..%d did not "
          "change their own document's out (the check above would be empty)", spec, T, t0, t1 - 1);
    CHECK(rows_same(p.dq, r.dq, T, H, 0, t0, t1, false), "%s T%d: changing the keys of tokens %d..%d changed dq of "
          "another document", spec, T, t0, t1 - 1);
    CHECK(rows_same(p.dk, r.dk, T, KV, 0, t0, t1, false) && rows_same(p.dv, r.dv, T, KV, 0, t0, t1, false),
          "%s T%d: changing the keys of tokens %d..%d changed dk/dv of another document", spec, T, t0, t1 - 1);
    run_free(&p);
    pt_aligned_free(k2);
    pt_aligned_free(v2);
    run_free(&r);
}

int main(void) {
    pt_set_quiet(true);
    char *cache = test_tmpdir("masked-cache");
    setenv("PT_OPENCL_CACHE", cache, 1);
    // Row 0 starts with the 3-token tail of a document, then documents of
    // several lengths (one of a single token); row 1 is one document.
    static const int r37[] = {3, 10, 1, 15, 8}, one37[] = {37};
    // T = 150: row 0's last document starts at 77, so its query tiles skip key
    // block 0 (cpu: 64-row blocks; cuda: 32-row tiles skip blocks 0..1).
    static const int r150[] = {5, 70, 2, 73}, r150b[] = {90, 60};
    attn_case cases[] = {{.T = 37, .lens = {r37, one37}}, {.T = 150, .lens = {r150, r150b}}};
    const int ncases = sizeof cases / sizeof cases[0];
    for (int i = 0; i < ncases; i++) {
        case_init(&cases[i]);
        check_reference_gradients(&cases[i]);
    }
    const char *specs[] = {"cpu-ref", "cpu", "opencl", "cuda-sim", "cuda"};
    int ran = 0;
    for (int s = 0; s < 5; s++) {
        pt_backend *be = pt_backend_create(specs[s]);
        if (!be) {
            const char *e = pt_last_error();
            const bool absent = strstr(e, "no OpenCL platform") || strstr(e, "no CUDA device") ||
                                strstr(e, "unknown backend") || strstr(e, "not built into this binary");
            CHECK(absent || s >= 2, "%s backend: %s", specs[s], e);  // cpu-ref and cpu are always built
            printf("SKIP %s: %s\n", specs[s], e);
            continue;
        }
        for (int i = 0; i < ncases; i++) check_backend(specs[s], be, &cases[i]);
        pt_backend_destroy(be);
        ran++;
    }
    CHECK(ran >= 2, "only %d backends ran", ran);
    for (int i = 0; i < ncases; i++) case_free(&cases[i]);
    test_rmdir(cache);
    return test_summary("test_attention_masked");
}
