// A backend against `cpu-ref`: `test_backend_parity SPEC` with SPEC cpu (the
// fast host backend), opencl (PoCL's CPU device in CI), cuda-sim (the cuda
// kernels on the host CUDA emulator) or cuda (a GPU); tests/tests.cmake
// registers one test per SPEC:
// - every kernel on odd shapes, its inputs and outputs placed at odd offsets
//   inside one device allocation (the pointer -> (cl_mem, offset) mapping),
//   with ACCUMULATE / OVERWRITE semantics checked by non-zero initial outputs;
//   all three GEMM paths (register-blocked, split-K for long reductions, the
//   local-memory tiled kernel with odd tile sizes);
//   embedding ids < 0 (zero row forward, skipped backward);
// - bf16 (precision bf16): round_bf16 bitwise equal to cpu-ref's on random bit
//   patterns, ties, NaN, inf and denormals; the in-kernel casts of rmsnorm,
//   rope, swiglu and lm_head_xent (bf16_casts set) against cpu-ref's, counted
//   in bf16 ulps;
// - whole-model parity on the golden fixtures: step-0 loss within 1e-5
//   relative, every gradient tensor within 1e-4 of its max magnitude; under
//   precision bf16 within 1e-4 and 2e-2, and nearer cpu-ref's bf16 gradients
//   than its fp32 ones are;
// - 50-step training loss curves within 1e-4 relative at every step;
// - two runs bitwise identical (metrics and weights);
// - opencl only: the program cache: a second backend loads every program
//   from it (no compilation), a corrupt or truncated entry is rebuilt, never
//   a crash; the local-memory tiled GEMM;
// - cpu only: matmuls split over threads bitwise equal to 1 thread (300 rows
//   and 520 columns are 2 x 2 blocks of 256 x 512); attention's saved
//   statistics are B*H*T floats, on T up to 300 (5 query tiles of 64);
//   lm_head_xent in small row chunks and vocabulary tiles
//   (PT_CPU_XENT_ROWS / PT_CPU_XENT_TILE) and with the tile products on
//   OpenBLAS (PT_CPU_TILE_SGEMM); a vocabulary of 2500 (2 tiles of 2048, the
//   last partial) in the model and curve checks; metrics and weights bitwise
//   identical across 1 vs 2 threads;
// - cuda / cuda-sim only: tf32 GEMMs (differ from fp32, within 1e-2); the
//   lm_head chunking across chunk boundaries (PT_CUDA_XENT_ROWS); attention
//   with T not a multiple of the 32-row tile, head_dim 128, 256 and the tiny
//   config's 32, GQA ratios 1, 2, 4; the CUDA stream exposed in be->stream.
// cuda-sim runs the same set (about 40 s on one core; PT_PARITY_STEPS=N
// shortens the curves for a quick look, sanitized builds run 10 steps, cpu 12).
// Exits 77 (skipped) when the backend is not built or finds no device.
#include "backend/backend.h"
#include "data/shard.h"
#include "io/hf_model.h"
#include "train/trainer.h"
#include "util/common.h"
#include "util/bf16.h"
#include "util/fileio.h"
#include "testtrain.h"
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static pt_backend *ref, *dev;
static const char *spec;       // the backend under test
static bool is_opencl, is_cuda, is_sim, is_cpu;  // cuda: cuda[:N] or cuda-sim; sim: cuda-sim

// The bounds that differ by backend (the first row whose spec matches, else the last): the cpu backend is held
// tighter on the sum of squares, the step-0 loss and the curves, and looser on rmsnorm's forward.
typedef struct {
    const char *spec;  // NULL: every other backend
    double rmsnorm_fwd;     // rmsnorm_forward out and rstd, relative to max
    double sum_squares;     // relative
    double step0_loss;      // fp32 model, relative
    double curve;           // every step's loss, relative
    int sanitized_steps;    // curve length in sanitized builds
} bounds;
static const bounds BOUNDS[] = {
    {"cpu", 1e-5, 1e-12, 1e-6, 1e-5, 12},
    {NULL, 1e-6, 1e-6, 1e-5, 1e-4, 10},
};
static const bounds *tol;

// ------------------------------------------------------------ helpers

// test_rnd rounded to bf16 (what the model's bf16 tensors hold)
static float *rnd_bf16(size_t n, float amp) {
    float *p = test_rnd(n, amp);
    for (size_t i = 0; i < n; i++) p[i] = pt_round_bf16(p[i]);
    return p;
}

// Device arena: one allocation; each tensor lands at an odd float offset
// (3 floats after the previous one), so kernels see sub-pointers.
static char *arena;
static size_t arena_used, arena_cap;
static void *put(const void *host, size_t bytes) {
    arena_used += 12;
    CHECK(arena_used + bytes <= arena_cap, "test arena too small");
    void *d = arena + arena_used;
    if (host) dev->ops->upload(dev, d, host, bytes);  // (NULL: room for a device-side result)
    arena_used += (bytes + 3) & ~(size_t)3;
    return d;
}
static float *putf(const float *h, size_t n) { return put(h, sizeof(float) * n); }
static float *get(const float *d, size_t n) {  // fresh host copy of a device range
    float *h = pt_aligned_alloc(sizeof(float) * (n ? n : 1));
    dev->ops->download(dev, h, d, sizeof(float) * n);
    return h;
}
static void reset_arena(void) { arena_used = 0; }

// ------------------------------------------------------------ kernels

static void check_matmul(int N, int C, int OC) {
    reset_arena();
    float *x = test_rnd((size_t)N * C, 1), *w = test_rnd((size_t)OC * C, 0.5f), *g = test_rnd((size_t)N * OC, 1);
    float *o1 = test_rnd((size_t)N * OC, 1), *dx1 = test_rnd((size_t)N * C, 1), *dw1 = test_rnd((size_t)OC * C, 1);
    float *dx_init = test_dup(dx1, (size_t)N * C), *dw_init = test_dup(dw1, (size_t)OC * C);
    float *dX = putf(x, (size_t)N * C), *dW = putf(w, (size_t)OC * C), *dG = putf(g, (size_t)N * OC);
    float *dO = putf(o1, (size_t)N * OC), *dDX = putf(dx1, (size_t)N * C), *dDW = putf(dw1, (size_t)OC * C);
    ref->ops->matmul_forward(ref, o1, x, w, N, C, OC);
    dev->ops->matmul_forward(dev, dO, dX, dW, N, C, OC);
    ref->ops->matmul_backward(ref, dx1, dw1, g, x, w, N, C, OC);
    dev->ops->matmul_backward(dev, dDX, dDW, dG, dX, dW, N, C, OC);
    float *o2 = get(dO, (size_t)N * OC), *dx2 = get(dDX, (size_t)N * C), *dw2 = get(dDW, (size_t)OC * C);
    char what[96];
    snprintf(what, sizeof what, "matmul_forward %dx%dx%d", N, C, OC);
    test_cmp(what, o2, o1, (size_t)N * OC, 1e-5);
    snprintf(what, sizeof what, "matmul_backward dinp (+=) %dx%dx%d", N, C, OC);
    test_cmp(what, dx2, dx1, (size_t)N * C, 1e-5);
    snprintf(what, sizeof what, "matmul_backward dw (+=) %dx%dx%d", N, C, OC);
    test_cmp(what, dw2, dw1, (size_t)OC * C, 1e-5);
    // dinp == NULL: dw only, dinp untouched
    float *dDX2 = putf(dx_init, (size_t)N * C), *dDW2 = putf(dw_init, (size_t)OC * C);
    dev->ops->matmul_backward(dev, NULL, dDW2, dG, dX, dW, N, C, OC);
    float *dx3 = get(dDX2, (size_t)N * C), *dw3 = get(dDW2, (size_t)OC * C);
    CHECK(!memcmp(dx3, dx_init, sizeof(float) * N * C), "matmul_backward with dinp NULL touched memory");
    CHECK(!memcmp(dw3, dw2, sizeof(float) * OC * C), "matmul_backward dw differs when dinp is NULL");
    pt_aligned_free(x); pt_aligned_free(w); pt_aligned_free(g); pt_aligned_free(o1); pt_aligned_free(o2);
    pt_aligned_free(dx1); pt_aligned_free(dx2); pt_aligned_free(dw1); pt_aligned_free(dw2);
    pt_aligned_free(dx_init); pt_aligned_free(dw_init); pt_aligned_free(dx3); pt_aligned_free(dw3);
}

static void check_rmsnorm(int N, int C) {
    reset_arena();
    float *x = test_rnd((size_t)N * C, 2), *w = test_rnd(C, 1), *g = test_rnd((size_t)N * C, 1);
    float *y1 = test_rnd((size_t)N * C, 1), *r1 = test_rnd(N, 1), *dx1 = test_rnd((size_t)N * C, 1), *dw1 = test_rnd(C, 1);
    float *dX = putf(x, (size_t)N * C), *dW = putf(w, C), *dG = putf(g, (size_t)N * C), *dY = putf(y1, (size_t)N * C),
          *dR = putf(r1, N), *dDX = putf(dx1, (size_t)N * C), *dDW = putf(dw1, C);
    ref->ops->rmsnorm_forward(ref, y1, r1, x, w, N, C, 1e-6f);
    dev->ops->rmsnorm_forward(dev, dY, dR, dX, dW, N, C, 1e-6f);
    ref->ops->rmsnorm_backward(ref, dx1, dw1, g, x, w, r1, N, C);
    dev->ops->rmsnorm_backward(dev, dDX, dDW, dG, dX, dW, dR, N, C);
    float *y2 = get(dY, (size_t)N * C), *r2 = get(dR, N), *dx2 = get(dDX, (size_t)N * C), *dw2 = get(dDW, C);
    test_cmp("rmsnorm_forward out", y2, y1, (size_t)N * C, tol->rmsnorm_fwd);
    test_cmp("rmsnorm_forward rstd", r2, r1, N, tol->rmsnorm_fwd);
    test_cmp("rmsnorm_backward dinp (+=)", dx2, dx1, (size_t)N * C, 1e-5);
    test_cmp("rmsnorm_backward dw (+=)", dw2, dw1, C, 1e-5);
    pt_aligned_free(x); pt_aligned_free(w); pt_aligned_free(g); pt_aligned_free(y1); pt_aligned_free(y2);
    pt_aligned_free(r1); pt_aligned_free(r2); pt_aligned_free(dx1); pt_aligned_free(dx2); pt_aligned_free(dw1);
    pt_aligned_free(dw2);
}

static void check_rope(int B, int T, int NH, int D) {
    reset_arena();
    const size_t n = (size_t)B * T * NH * D;
    float *cs = test_rnd((size_t)T * D, 1), *sn = test_rnd((size_t)T * D, 1), *x = test_rnd(n, 1), *a = test_dup(x, n);
    float *dC = putf(cs, (size_t)T * D), *dS = putf(sn, (size_t)T * D), *dX = putf(x, n), *dA = putf(x, n);
    float *dB = putf(x, n);  // overwritten: initial contents irrelevant
    ref->ops->rope_forward(ref, a, a, cs, sn, B, T, NH, D);
    dev->ops->rope_forward(dev, dA, dA, dC, dS, B, T, NH, D);  // in place
    dev->ops->rope_forward(dev, dB, dX, dC, dS, B, T, NH, D);  // out of place
    float *r1 = get(dA, n), *r2 = get(dB, n);
    test_cmp("rope_forward in place", r1, a, n, 1e-6);
    test_cmp("rope_forward out of place", r2, a, n, 1e-6);
    memcpy(a, x, sizeof(float) * n);
    dev->ops->upload(dev, dA, x, sizeof(float) * n);
    ref->ops->rope_backward(ref, a, a, cs, sn, B, T, NH, D);
    dev->ops->rope_backward(dev, dA, dA, dC, dS, B, T, NH, D);
    float *r3 = get(dA, n);
    test_cmp("rope_backward in place", r3, a, n, 1e-6);
    pt_aligned_free(cs); pt_aligned_free(sn); pt_aligned_free(x); pt_aligned_free(a); pt_aligned_free(r1);
    pt_aligned_free(r2); pt_aligned_free(r3);
}

static void check_attention(int B, int T, int H, int KV, int D) {
    reset_arena();
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * KV * D;
    float *q = test_rnd(nq, 2), *k = test_rnd(nk, 2), *v = test_rnd(nk, 1), *go = test_rnd(nq, 1), *o1 = test_rnd(nq, 1);
    float *s1 = test_rnd(ref->ops->attention_saved_floats(ref, B, T, H, D), 1);
    const size_t ns = dev->ops->attention_saved_floats(dev, B, T, H, D);
    if (is_cpu) CHECK(ns == (size_t)B * H * T, "attention_saved_floats %zu, want B*H*T", ns);
    float *tmp = test_rnd(ns > nq ? ns : nq, 1);
    float *dQ = putf(q, nq), *dK = putf(k, nk), *dV = putf(v, nk), *dGO = putf(go, nq), *dO = putf(tmp, nq),
          *dS = putf(tmp, ns);
    ref->ops->attention_forward(ref, o1, s1, q, k, v, NULL, B, T, H, KV, D);
    dev->ops->attention_forward(dev, dO, dS, dQ, dK, dV, NULL, B, T, H, KV, D);
    float *o2 = get(dO, nq);
    char what[96];
    snprintf(what, sizeof what, "attention_forward B%d T%d H%d KV%d D%d", B, T, H, KV, D);
    test_cmp(what, o2, o1, nq, 1e-5);
    float *dq1 = test_rnd(nq, 1), *dk1 = test_rnd(nk, 1), *dv1 = test_rnd(nk, 1);
    float *dDQ = putf(tmp, nq), *dDK = putf(tmp, nk), *dDV = putf(tmp, nk);  // OVERWRITTEN: garbage in
    ref->ops->attention_backward(ref, dq1, dk1, dv1, go, q, k, v, o1, s1, NULL, B, T, H, KV, D);
    dev->ops->attention_backward(dev, dDQ, dDK, dDV, dGO, dQ, dK, dV, dO, dS, NULL, B, T, H, KV, D);
    float *dq2 = get(dDQ, nq), *dk2 = get(dDK, nk), *dv2 = get(dDV, nk);
    snprintf(what, sizeof what, "attention_backward dq T%d D%d", T, D);
    test_cmp(what, dq2, dq1, nq, 1e-5);
    snprintf(what, sizeof what, "attention_backward dk T%d D%d", T, D);
    test_cmp(what, dk2, dk1, nk, 1e-5);
    snprintf(what, sizeof what, "attention_backward dv T%d D%d", T, D);
    test_cmp(what, dv2, dv1, nk, 1e-5);
    pt_aligned_free(q); pt_aligned_free(k); pt_aligned_free(v); pt_aligned_free(go); pt_aligned_free(o1);
    pt_aligned_free(o2); pt_aligned_free(s1); pt_aligned_free(tmp); pt_aligned_free(dq1); pt_aligned_free(dk1);
    pt_aligned_free(dv1); pt_aligned_free(dq2); pt_aligned_free(dk2); pt_aligned_free(dv2);
}

static void check_elementwise(void) {
    reset_arena();
    const size_t n = 100003;  // several reduction blocks, odd tail
    float *g = test_rnd(n, 8), *u = test_rnd(n, 2), *d = test_rnd(n, 1), *a1 = test_rnd(n, 1), *b1 = test_rnd(n, 1);
    float *dG = putf(g, n), *dU = putf(u, n), *dD = putf(d, n), *dA = putf(a1, n), *dB = putf(b1, n);
    ref->ops->swiglu_forward(ref, a1, g, u, n);
    dev->ops->swiglu_forward(dev, dA, dG, dU, n);
    float *a2 = get(dA, n);
    test_cmp("swiglu_forward", a2, a1, n, 1e-6);
    ref->ops->swiglu_backward(ref, a1, b1, d, g, u, n);
    dev->ops->swiglu_backward(dev, dA, dB, dD, dG, dU, n);
    float *a3 = get(dA, n), *b3 = get(dB, n);
    test_cmp("swiglu_backward dgate", a3, a1, n, 1e-6);
    test_cmp("swiglu_backward dup", b3, b1, n, 1e-6);
    ref->ops->add(ref, a1, g, u, n);
    dev->ops->add(dev, dA, dG, dU, n);
    float *a4 = get(dA, n);
    CHECK(!memcmp(a1, a4, sizeof(float) * n), "add differs");
    memcpy(a1, g, sizeof(float) * n);
    ref->ops->scale(ref, a1, 0.37f, n);
    dev->ops->copy(dev, dA, dG, sizeof(float) * n);
    dev->ops->scale(dev, dA, 0.37f, n);
    float *a5 = get(dA, n);
    CHECK(!memcmp(a1, a5, sizeof(float) * n), "copy + scale differs");
    double s1, s2, s3;
    ref->ops->sum_squares(ref, &s1, g, n);
    dev->ops->sum_squares(dev, &s2, dG, n);
    dev->ops->sum_squares(dev, &s3, dG + 5, n - 7);  // a sub-range
    ref->ops->sum_squares(ref, &s1, g, n);
    CHECK(fabs(s1 - s2) <= tol->sum_squares * s1, "sum_squares %.17g vs %.17g", s2, s1);
    double s4;
    ref->ops->sum_squares(ref, &s4, g + 5, n - 7);
    CHECK(fabs(s4 - s3) <= 1e-6 * s4, "sum_squares of a sub-range %.17g vs %.17g", s3, s4);
    // zero of a sub-range
    dev->ops->zero(dev, dA + 10, sizeof(float) * 20);
    float *a6 = get(dA, 40);
    int zok = a6[9] == a5[9] && a6[30] == a5[30];
    for (int i = 10; i < 30; i++) zok &= a6[i] == 0;
    CHECK(zok, "zero of a sub-range is wrong");
    // AdamW: 3 steps with weight decay, bitwise (same operation order, IEEE sqrt/div)
    float *p1 = test_rnd(n, 1), *m1 = pt_aligned_alloc(sizeof(float) * n), *v1 = pt_aligned_alloc(sizeof(float) * n);
    memset(m1, 0, sizeof(float) * n);
    memset(v1, 0, sizeof(float) * n);
    float *dP = putf(p1, n), *dM = putf(m1, n), *dVv = putf(v1, n);
    for (int t = 1; t <= 3; t++) {
        ref->ops->adamw(ref, p1, d, m1, v1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        dev->ops->adamw(dev, dP, dD, dM, dVv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    float *p2 = get(dP, n), *m2 = get(dM, n), *v2 = get(dVv, n);
    test_cmp("adamw params", p2, p1, n, 1e-6);
    test_cmp("adamw m", m2, m1, n, 1e-6);
    test_cmp("adamw v", v2, v1, n, 1e-6);
    pt_aligned_free(g); pt_aligned_free(u); pt_aligned_free(d); pt_aligned_free(a1); pt_aligned_free(b1);
    pt_aligned_free(a2); pt_aligned_free(a3); pt_aligned_free(b3); pt_aligned_free(a4); pt_aligned_free(a5);
    pt_aligned_free(a6); pt_aligned_free(p1); pt_aligned_free(m1); pt_aligned_free(v1); pt_aligned_free(p2);
    pt_aligned_free(m2); pt_aligned_free(v2);
}

static void check_embedding(void) {
    reset_arena();
    const int N = 300, C = 40, V = 57;
    int32_t ids[300];
    for (int i = 0; i < N; i++) ids[i] = (i * 7 + i / 13) % V;
    float *wte = test_rnd((size_t)V * C, 1), *e1 = test_rnd((size_t)N * C, 1), *dw1 = test_rnd((size_t)V * C, 1);
    float *dW = putf(wte, (size_t)V * C), *dE = putf(e1, (size_t)N * C), *dDW = putf(dw1, (size_t)V * C);
    int32_t *dI = put(ids, sizeof ids);
    ref->ops->embedding_forward(ref, e1, ids, wte, N, C);
    dev->ops->embedding_forward(dev, dE, dI, dW, N, C);
    float *e2 = get(dE, (size_t)N * C);
    CHECK(!memcmp(e1, e2, sizeof(float) * N * C), "embedding_forward differs");
    ref->ops->embedding_backward(ref, dw1, e1, ids, N, C);
    dev->ops->embedding_backward(dev, dDW, dE, dI, N, C);
    float *dw2 = get(dDW, (size_t)V * C);
    CHECK(!memcmp(dw1, dw2, sizeof(float) * V * C), "embedding_backward differs");
    // ids < 0: not in this vocabulary shard (tensor parallel): zero row, no gradient
    int32_t sid[4] = {3, -1, 5, -7};
    int32_t *dSI = put(sid, sizeof sid);
    dev->ops->embedding_forward(dev, dE, dSI, dW, 4, C);
    float *e3 = get(dE, (size_t)4 * C);
    int ok = !memcmp(e3, wte + 3 * C, sizeof(float) * C) && !memcmp(e3 + 2 * C, wte + 5 * C, sizeof(float) * C);
    for (int c = 0; c < C; c++) ok &= e3[C + c] == 0 && e3[3 * C + c] == 0;
    CHECK(ok, "embedding_forward with ids < 0: want zero rows");
    float *want = test_dup(dw2, (size_t)V * C);
    for (int c = 0; c < C; c++) {
        want[3 * C + c] += e3[c];
        want[5 * C + c] += e3[2 * C + c];
    }
    dev->ops->embedding_backward(dev, dDW, dE, dSI, 4, C);
    float *dw3 = get(dDW, (size_t)V * C);
    CHECK(!memcmp(dw3, want, sizeof(float) * V * C), "embedding_backward with ids < 0: want those rows skipped");
    pt_aligned_free(wte); pt_aligned_free(e1); pt_aligned_free(e2); pt_aligned_free(e3); pt_aligned_free(dw1);
    pt_aligned_free(dw2); pt_aligned_free(dw3); pt_aligned_free(want);
}

// An lm_head_xent problem on both backends: every 11th row ignored (-100),
// non-zero initial dinp (to be overwritten) and dw (to be accumulated into).
typedef struct {
    int N, C, V;
    float scale;
    float *x, *w, *dx, *dw;  // host: cpu-ref's
    int32_t *tg;
    float *dX, *dW, *dDX, *dDW;  // device copies: opencl's
    int32_t *dT;
} xent_case;

static xent_case xent_case_new(int N, int C, int V, float *(*gen)(size_t, float)) {
    xent_case c = {.N = N, .C = C, .V = V, .scale = 1.0f / N};
    c.x = gen((size_t)N * C, 1);
    c.w = gen((size_t)V * C, 0.3f);
    c.tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) c.tg[i] = i % 11 == 5 ? -100 : (int32_t)((i * 7919u) % V);
    c.tg[N - 1] = V - 1;
    c.dx = test_rnd((size_t)N * C, 1);
    c.dw = test_rnd((size_t)V * C, 0.1f);
    c.dX = putf(c.x, (size_t)N * C);
    c.dW = putf(c.w, (size_t)V * C);
    c.dDX = putf(c.dx, (size_t)N * C);
    c.dDW = putf(c.dw, (size_t)V * C);
    c.dT = put(c.tg, sizeof(int32_t) * N);
    return c;
}
static void xent_case_free(xent_case *c) {
    pt_aligned_free(c->x); pt_aligned_free(c->w); pt_aligned_free(c->dx); pt_aligned_free(c->dw); free(c->tg);
}

static void check_xent(int N, int C, int V) {
    reset_arena();
    xent_case c = xent_case_new(N, C, V, test_rnd);
    const float scale = c.scale;
    float *dx1 = c.dx, *dw1 = c.dw;
    double l1, l2, l3;
    ref->ops->lm_head_xent(ref, &l1, dx1, dw1, c.x, c.w, c.tg, N, C, V, scale);
    dev->ops->lm_head_xent(dev, &l2, c.dDX, c.dDW, c.dX, c.dW, c.dT, N, C, V, scale);
    dev->ops->lm_head_xent(dev, &l3, NULL, NULL, c.dX, c.dW, c.dT, N, C, V, 0.0f);
    printf("lm_head_xent N=%d C=%d V=%d: loss %.10f (cpu-ref %.10f)\n", N, C, V, l2, l1);
    CHECK(fabs(l2 - l1) <= 1e-6 * fabs(l1), "xent loss %.10f vs %.10f", l2, l1);
    CHECK(l3 == l2, "xent forward-only loss %.17g differs from training loss %.17g", l3, l2);
    float *dx2 = get(c.dDX, (size_t)N * C), *dw2 = get(c.dDW, (size_t)V * C);
    char what[96];
    snprintf(what, sizeof what, "lm_head_xent dinp (overwrite) N%d V%d", N, V);
    test_cmp(what, dx2, dx1, (size_t)N * C, 1e-5);
    snprintf(what, sizeof what, "lm_head_xent dw (+=) N%d V%d", N, V);
    test_cmp(what, dw2, dw1, (size_t)V * C, 1e-5);
    xent_case_free(&c);
    pt_aligned_free(dx2); pt_aligned_free(dw2);
}

// ------------------------------------------------------------ bf16

// Distance in bf16 ulps of two bf16-exact values (on the ordered integer line,
// so it also counts across zero).
static long bf16_ulps(float a, float b) {
    const uint32_t ua = float_bits(a), ub = float_bits(b);
    const long ka = ua >> 31 ? -(long)(ua & 0x7fffffffu) : (long)ua;
    const long kb = ub >> 31 ? -(long)(ub & 0x7fffffffu) : (long)ub;
    return labs(ka - kb) >> 16;
}
static bool all_bf16_exact(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (float_bits(a[i]) & 0xffffu) return false;
    return true;
}
// Elements differing from want, and the largest difference in bf16 ulps.
static size_t bf16_mismatches(const float *got, const float *want, size_t n, long *max_ulps) {
    size_t diff = 0;
    *max_ulps = 0;
    for (size_t i = 0; i < n; i++)
        if (float_bits(got[i]) != float_bits(want[i])) {
            diff++;
            long u = bf16_ulps(got[i], want[i]);
            if (u > *max_ulps) *max_ulps = u;
        }
    return diff;
}

static void check_round_bf16(void) {
    reset_arena();
    const uint32_t special[] = {
        0x00000000u, 0x80000000u,                            // +-0
        0x7f800000u, 0xff800000u,                            // +-inf
        0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffffffffu,  // signalling and quiet NaNs
        0x7f808000u, 0x7fbf0000u,                            // NaNs whose rounding would carry into inf
        0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu,  // denormals (ties among them)
        0x807fffffu, 0x80008001u,
        0x3f808000u, 0x3f818000u,                            // ties to even, down and up
        0x3f807fffu, 0x3f808001u, 0xbf808000u, 0xbf818000u,  // one either side of a tie
        0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0xff7fffffu,  // near FLT_MAX: up to inf, or not
        0x00800000u, 0x007f8000u,                            // smallest normal; a tie up to it
    };
    const size_t ns = PT_ARRAY_LEN(special), n = 300007;  // many work-groups, odd tail
    float *x = pt_aligned_alloc(sizeof(float) * n);
    uint64_t r = 12345;
    for (size_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(r >> 32);
        if (i < ns) u = special[i];
        else if (i % 4 == 1) u = (u & 0xffff0000u) | 0x8000u;  // exact ties, both parities of bit 16
        else if (i % 4 == 2) u &= 0x807fffffu;                 // denormals
        x[i] = bits_to_float(u);
    }
    float *want = pt_aligned_alloc(sizeof(float) * n);
    ref->ops->round_bf16(ref, want, x, n);
    float *dX = putf(x, n), *dY = putf(x, n);
    dev->ops->round_bf16(dev, dY, dX, n);  // out of place
    dev->ops->round_bf16(dev, dX, dX, n);  // in place
    float *y = get(dY, n), *z = get(dX, n);
    CHECK(!memcmp(y, want, sizeof(float) * n), "round_bf16 (out of place) differs bitwise from cpu-ref");
    CHECK(!memcmp(z, want, sizeof(float) * n), "round_bf16 (in place) differs bitwise from cpu-ref");
    size_t bad = 0;
    for (size_t i = 0; i < ns; i++) bad += float_bits(y[i]) != float_bits(want[i]);
    CHECK(float_bits(want[16]) == 0x3f800000u && float_bits(want[17]) == 0x3f820000u &&
              float_bits(want[23]) == 0x7f800000u && (float_bits(want[4]) & 0x7fffffffu) > 0x7f800000u &&
              (float_bits(want[8]) & 0x7fffffffu) > 0x7f800000u,
          "cpu-ref round_bf16: ties, NaN or overflow not as util/bf16.h documents");
    printf("round_bf16: %zu values (%zu special) bitwise equal to cpu-ref: %s\n", n, ns,
           !memcmp(y, want, sizeof(float) * n) && !bad ? "yes" : "NO");
    pt_aligned_free(x); pt_aligned_free(want); pt_aligned_free(y); pt_aligned_free(z);
}

// The four kernels that round inside the op under bf16_casts, on bf16-exact
// inputs as the model gives them. Tolerances (measured numbers printed):
// - swiglu, rope: every product is rounded to fp32 then to bf16 on the bits
//   on both backends, so bitwise, except that swiglu's silu uses the device's
//   fp32 exp where cpu-ref's goes through double: a 1-ulp fp32 difference
//   flips bf16(silu) near a rounding boundary, hence at most 1 in 10^4
//   elements may differ, by at most 2 bf16 ulps;
// - rmsnorm: a row is bitwise equal where the fp32 rstd is (cpu-ref's 1/sqrt
//   goes through double); elsewhere within 2 bf16 ulps (1 ulp in bf16(x*r),
//   carried through the weight multiply);
// - lm_head_xent: the logits GEMM sums in another order than cpu-ref, so a
//   bf16 logit may differ by 1 ulp; the loss stays within 1e-5 relative
//   and the gradients, products of bf16-rounded d(logits), within 1e-3 of
//   their max magnitude; loss and dinp at least 10x closer to cpu-ref's bf16
//   results than cpu-ref's fp32 ones are (the casts are in effect).
static void check_bf16_kernels(void) {
    reset_arena();
    ref->bf16_casts = dev->bf16_casts = true;
    long ulps;
    size_t diff;
    {  // swiglu
        const size_t n = 100003;
        float *g = rnd_bf16(n, 8), *u = rnd_bf16(n, 2), *want = test_rnd(n, 1);
        float *dG = putf(g, n), *dU = putf(u, n), *dO = putf(want, n);
        ref->ops->swiglu_forward(ref, want, g, u, n);
        dev->ops->swiglu_forward(dev, dO, dG, dU, n);
        float *got = get(dO, n);
        diff = bf16_mismatches(got, want, n, &ulps);
        printf("bf16 swiglu_forward: %zu of %zu differ from cpu-ref (max %ld bf16 ulps)\n", diff, n, ulps);
        CHECK(all_bf16_exact(got, n), "bf16 swiglu_forward: output not bf16-exact");
        CHECK(diff * 10000 <= n && ulps <= 2, "bf16 swiglu_forward: %zu differ, max %ld bf16 ulps", diff, ulps);
        pt_aligned_free(g); pt_aligned_free(u); pt_aligned_free(want); pt_aligned_free(got);
    }
    {  // rope, in place as the model calls it
        const int B = 2, T = 19, NH = 3, D = 24;
        const size_t n = (size_t)B * T * NH * D;
        float *cs = rnd_bf16((size_t)T * D, 1), *sn = rnd_bf16((size_t)T * D, 1), *x = rnd_bf16(n, 3);
        float *dC = putf(cs, (size_t)T * D), *dS = putf(sn, (size_t)T * D), *dX = putf(x, n);
        ref->ops->rope_forward(ref, x, x, cs, sn, B, T, NH, D);
        dev->ops->rope_forward(dev, dX, dX, dC, dS, B, T, NH, D);
        float *got = get(dX, n);
        diff = bf16_mismatches(got, x, n, &ulps);
        printf("bf16 rope_forward: %zu of %zu differ from cpu-ref (max %ld bf16 ulps)\n", diff, n, ulps);
        CHECK(all_bf16_exact(got, n), "bf16 rope_forward: output not bf16-exact");
        CHECK(diff == 0, "bf16 rope_forward: %zu elements differ from cpu-ref (max %ld bf16 ulps)", diff, ulps);
        pt_aligned_free(cs); pt_aligned_free(sn); pt_aligned_free(x); pt_aligned_free(got);
    }
    {  // rmsnorm
        const int N = 1000, C = 72;
        const size_t n = (size_t)N * C;
        float *x = rnd_bf16(n, 2), *w = rnd_bf16(C, 1), *y = test_rnd(n, 1), *r = test_rnd(N, 1);
        float *dX = putf(x, n), *dW = putf(w, C), *dY = putf(y, n), *dR = putf(r, N);
        ref->ops->rmsnorm_forward(ref, y, r, x, w, N, C, 1e-6f);
        dev->ops->rmsnorm_forward(dev, dY, dR, dX, dW, N, C, 1e-6f);
        float *got = get(dY, n), *rg = get(dR, N);
        int rows_rstd_differ = 0, rows_same_rstd_differ = 0;
        long worst = 0;
        for (int i = 0; i < N; i++) {
            const size_t row = (size_t)i * C;
            diff = bf16_mismatches(got + row, y + row, C, &ulps);
            if (ulps > worst) worst = ulps;
            if (float_bits(rg[i]) != float_bits(r[i])) rows_rstd_differ++;
            else rows_same_rstd_differ += diff > 0;
        }
        diff = bf16_mismatches(got, y, n, &ulps);
        printf("bf16 rmsnorm_forward: %zu of %zu differ from cpu-ref (max %ld bf16 ulps); rstd differs in %d of %d "
               "rows\n", diff, n, worst, rows_rstd_differ, N);
        CHECK(all_bf16_exact(got, n), "bf16 rmsnorm_forward: output not bf16-exact");
        CHECK(rows_same_rstd_differ == 0, "bf16 rmsnorm_forward: %d rows with cpu-ref's rstd differ",
              rows_same_rstd_differ);
        CHECK(worst <= 2, "bf16 rmsnorm_forward: %ld bf16 ulps from cpu-ref", worst);
        pt_aligned_free(x); pt_aligned_free(w); pt_aligned_free(y); pt_aligned_free(r); pt_aligned_free(got);
        pt_aligned_free(rg);
    }
    {  // lm_head_xent
        const int N = 300, C = 40, V = 3000;
        xent_case c = xent_case_new(N, C, V, rnd_bf16);
        float *dx1 = c.dx, *dw1 = c.dw;
        double l1, l2, l_fp32;
        ref->ops->lm_head_xent(ref, &l1, dx1, dw1, c.x, c.w, c.tg, N, C, V, c.scale);
        dev->ops->lm_head_xent(dev, &l2, c.dDX, c.dDW, c.dX, c.dW, c.dT, N, C, V, c.scale);
        // cpu-ref without the casts: how far bf16 itself moves the results
        float *dx_fp32 = test_rnd((size_t)N * C, 1), *dw_fp32 = test_rnd((size_t)V * C, 0.1f);
        ref->bf16_casts = false;
        ref->ops->lm_head_xent(ref, &l_fp32, dx_fp32, dw_fp32, c.x, c.w, c.tg, N, C, V, c.scale);
        ref->bf16_casts = true;
        float *dx2 = get(c.dDX, (size_t)N * C), *dw2 = get(c.dDW, (size_t)V * C);
        const double rel = fabs(l2 - l1) / fabs(l1), rel_bf16 = fabs(l1 - l_fp32) / fabs(l_fp32);
        const double edx = test_relmax(dx2, dx1, (size_t)N * C), edw = test_relmax(dw2, dw1, (size_t)V * C);
        const double edx_bf16 = test_relmax(dx_fp32, dx1, (size_t)N * C);
        printf("bf16 lm_head_xent: loss %.10f (cpu-ref %.10f, relative %.3e; bf16's own effect %.3e); "
               "dinp %.3e (bf16's own effect %.3e), dw %.3e relative-to-max\n", l2 / N, l1 / N, rel, rel_bf16, edx,
               edx_bf16, edw);
        CHECK(rel <= 1e-5 && rel * 10 < rel_bf16, "bf16 lm_head_xent loss relative %.3e (bf16's own effect %.3e)",
              rel, rel_bf16);
        CHECK(edx <= 1e-3 && edx * 10 < edx_bf16,
              "bf16 lm_head_xent dinp: relative-to-max %.3e (bf16's own effect %.3e)", edx, edx_bf16);
        CHECK(edw <= 1e-3, "bf16 lm_head_xent dw: relative-to-max %.3e > 1e-3", edw);
        xent_case_free(&c);
        pt_aligned_free(dx2); pt_aligned_free(dw2); pt_aligned_free(dx_fp32); pt_aligned_free(dw_fp32);
    }
    ref->bf16_casts = dev->bf16_casts = false;  // (qwen3_set_precision only ever sets it)
}

// ------------------------------------------------------------ model

// cpu-ref's fp32 gradients of the batch (a host copy).
static float *ref_fp32_grads(const char *dir, const int32_t *ids, const int32_t *lab, int B, int T) {
    qwen3_model m;
    CHECK(hf_model_load(&m, dir, ref) == 0, "%s", pt_last_error());
    qwen3_alloc_grads(&m);
    ref->ops->zero(ref, m.grads, sizeof(float) * m.num_params);
    double loss;
    int n;
    CHECK(qwen3_forward_backward(&m, ids, lab, B, T, 1.0f / (B * T), &loss, &n) == 0, "%s", pt_last_error());
    float *g = test_dup(m.grads, m.num_params);
    qwen3_free(&m);
    return g;
}

// Precision "bf16": every cast of the model on both backends, tolerances
// loss_tol and grad_tol (bf16 turns 1-ulp fp32 differences into occasional
// 1-ulp bf16 ones, which the backward carries on), and each gradient tensor
// closer to cpu-ref's bf16 one than cpu-ref's fp32 one is (the casts are all
// in effect; measured on PoCL: at most 0.33 of that distance).
static void check_model_grads(const char *name, const char *dir, int B, int T, const char *precision,
                              double loss_tol, double grad_tol) {
    qwen3_model mr, mc;
    CHECK(hf_model_load(&mr, dir, ref) == 0, "%s", pt_last_error());
    CHECK(hf_model_load(&mc, dir, dev) == 0, "%s", pt_last_error());
    const int N = B * T, V = mr.cfg.vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * N), *lab = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) {
        ids[i] = (int32_t)((i * 2654435761u) % V);
        lab[i] = i % 9 == 3 ? -100 : (int32_t)((i * 40503u + 11) % V);
    }
    const bool bf16 = !strcmp(precision, "bf16");
    float *g_fp32 = bf16 ? ref_fp32_grads(dir, ids, lab, B, T) : NULL;  // (before the casts are switched on)
    CHECK(qwen3_set_precision(&mr, precision) == 0 && qwen3_set_precision(&mc, precision) == 0, "%s",
          pt_last_error());
    double lr_, lc, lf;
    int nr, nc;
    qwen3_alloc_grads(&mr);
    qwen3_alloc_grads(&mc);
    ref->ops->zero(ref, mr.grads, sizeof(float) * mr.num_params);
    dev->ops->zero(dev, mc.grads, sizeof(float) * mc.num_params);
    CHECK(qwen3_forward_backward(&mr, ids, lab, B, T, 1.0f / N, &lr_, &nr) == 0, "%s", pt_last_error());
    CHECK(qwen3_forward_backward(&mc, ids, lab, B, T, 1.0f / N, &lc, &nc) == 0, "%s", pt_last_error());
    CHECK(qwen3_forward(&mc, ids, lab, B, T, &lf, &nc, NULL) == 0, "%s", pt_last_error());
    double rel = fabs(lc - lr_) / fabs(lr_);
    printf("[%s] step-0 loss %.10f (cpu-ref %.10f): relative difference %.3e\n", name, lc / nr, lr_ / nr, rel);
    CHECK(rel <= loss_tol, "[%s] step-0 loss relative difference %.3e > %.0e", name, rel, loss_tol);
    CHECK(lf == lc, "[%s] forward-only loss differs from forward_backward", name);
    float *g = pt_aligned_alloc(sizeof(float) * mc.num_params);
    dev->ops->download(dev, g, mc.grads, sizeof(float) * mc.num_params);
    double worst = 0, least_bf16_effect = INFINITY, worst_ratio = 0;
    const char *worst_name = "", *worst_ratio_name = "";
    for (int i = 0; i < mr.num_tensors; i++) {
        const qwen3_param_info *t = &mr.tensors[i];
        double r = test_relmax(g + t->offset, mr.grads + t->offset, t->numel);
        if (r > worst) {
            worst = r;
            worst_name = t->name;
        }
        CHECK(r <= grad_tol, "[%s] grad %s: relative-to-max error %.3e > %.0e", name, t->name, r, grad_tol);
        if (!g_fp32) continue;
        const double effect = test_relmax(g_fp32 + t->offset, mr.grads + t->offset, t->numel);
        least_bf16_effect = fmin(least_bf16_effect, effect);
        if (r / effect > worst_ratio) {
            worst_ratio = r / effect;
            worst_ratio_name = t->name;
        }
        CHECK(r < effect, "[%s] grad %s: backends differ by %.3e, bf16's own effect is only %.3e", name, t->name, r,
              effect);
    }
    printf("[%s] %d gradient tensors: worst relative-to-max error %.3e (%s)\n", name, mr.num_tensors, worst,
           worst_name);
    if (g_fp32)
        printf("[%s] bf16's own effect on the gradients (cpu-ref bf16 vs fp32): at least %.3e per tensor; "
               "backend difference / that effect at most %.3f (%s)\n", name, least_bf16_effect, worst_ratio,
               worst_ratio_name);
    pt_aligned_free(g);
    pt_aligned_free(g_fp32);
    free(ids);
    free(lab);
    qwen3_free(&mr);
    qwen3_free(&mc);
    ref->bf16_casts = dev->bf16_casts = false;  // (qwen3_set_precision only ever sets it)
}

static void check_curves(const char *name, const char *model, const char *data, int B, int T, int STEPS) {
    double lr_[64], lc[64], l2[64];
    char *fr, *fc, *f2, *dr, *dc, *d2;
    int nr = test_train("cpu-ref", model, data, B, T, STEPS, lr_, &fr, &dr);
    int nc = test_train(spec, model, data, B, T, STEPS, lc, &fc, &dc);
    int n2 = test_train(spec, model, data, B, T, STEPS, l2, &f2, &d2);
    CHECK(nr == STEPS && nc == STEPS && n2 == STEPS, "[%s] %d / %d / %d steps in metrics.jsonl", name, nr, nc, n2);
    double worst = 0;
    int worst_step = 0;
    for (int s = 0; s < STEPS && s < nr && s < nc; s++) {
        double r = fabs(lc[s] - lr_[s]) / fabs(lr_[s]);
        if (r > worst) {
            worst = r;
            worst_step = s + 1;
        }
        CHECK(r <= tol->curve, "[%s] step %d loss %.10f vs cpu-ref %.10f (relative %.3e)", name, s + 1, lc[s], lr_[s],
              r);
    }
    printf("[%s] %d-step loss curve: %.6f -> %.6f, worst relative difference to cpu-ref %.3e (step %d)\n", name,
           STEPS, lc[0], lc[STEPS - 1], worst, worst_step);
    size_t n1 = 0, nn2 = 0;
    char *w1 = test_slurp(dc, "model.safetensors", &n1), *w2 = test_slurp(d2, "model.safetensors", &nn2);
    const int same = !strcmp(fc, f2) && w1 && w2 && n1 == nn2 && !memcmp(w1, w2, n1);
    CHECK(same, "[%s] two %s runs differ (metrics or weights)", name, spec);
    printf("[%s] two %s runs bitwise identical (metrics and weights): %s\n", name, spec, same ? "yes" : "NO");
    if (is_opencl) {  // the metrics carry the compile stats
        size_t ml = 0;
        char *m = test_slurp(dc, "metrics.jsonl", &ml);
        CHECK(m && strstr(m, "\"compile_s\": ") && strstr(m, "\"cache_hits\": ") &&
                  strstr(m, "\"recompilations\": 0"),
              "[%s] metrics.jsonl lacks compile_s / cache_hits / recompilations", name);
        free(m);
    }
    free(w1); free(w2); free(fr); free(fc); free(f2);
    test_rmdir(dr);
    test_rmdir(dc);
    test_rmdir(d2);
}

// ------------------------------------------------------------ program cache

static int count_bins(const char *dir, char *first, size_t n) {
    DIR *d = opendir(dir);
    int c = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".bin") && !strstr(e->d_name, ".tmp")) {
            if (!c && first) snprintf(first, n, "%s/%s", dir, e->d_name);
            c++;
        }
    if (d) closedir(d);
    return c;
}

// A fresh backend + the attention program for one shape; returns its stats.
static pt_compile_stats cycle(const char *what) {
    pt_backend *be = pt_backend_create("opencl");
    CHECK(be != NULL, "%s: %s", what, pt_last_error());
    pt_compile_stats cs = {0};
    if (!be) return cs;
    float *buf = be->ops->alloc(be, sizeof(float) * 4 * 8 * 16 * 2);
    be->ops->rope_forward(be, buf, buf, buf, buf, 1, 8, 1, 16);  // builds the (T=8, D=16) program
    be->ops->rope_forward(be, buf, buf, buf, buf, 1, 4, 1, 16);  // (T=4): a recompilation
    be->ops->rope_forward(be, buf, buf, buf, buf, 1, 8, 1, 16);  // (T=8) again: in memory, no build
    be->ops->synchronize(be);
    be->ops->compile_stats(be, &cs);
    printf("%s: compile %.3f s, cache hits %d, misses %d, recompilations %d\n", what, cs.compile_seconds,
           cs.cache_hits, cs.cache_misses, cs.recompilations);
    be->ops->free(be, buf);
    pt_backend_destroy(be);
    return cs;
}

static void check_cache(const char *dir) {
    pt_compile_stats a = cycle("cold cache");
    CHECK(a.cache_misses == 3 && a.cache_hits == 0 && a.recompilations == 1,
          "cold cache: want 3 misses, 0 hits, 1 recompilation; got %d, %d, %d", a.cache_misses, a.cache_hits,
          a.recompilations);
    char first[4400] = "";
    CHECK(count_bins(dir, first, sizeof first) == 3, "want 3 cache entries in %s", dir);
    pt_compile_stats b = cycle("warm cache");
    CHECK(b.cache_hits == 3 && b.cache_misses == 0, "warm cache: want 3 hits, 0 misses; got %d, %d", b.cache_hits,
          b.cache_misses);
    // a flipped byte, then a truncated file: rebuilt (one miss), never a crash
    size_t n = 0;
    char *bytes = pt_read_file(first, &n);
    CHECK(bytes && n > 200, "cannot read %s", first);
    if (!bytes || n <= 200) return;
    bytes[n / 2] ^= 0x5a;
    CHECK(pt_write_file_atomic(first, bytes, n) == 0, "%s", pt_last_error());
    pt_compile_stats c = cycle("corrupt entry");
    CHECK(c.cache_hits == 2 && c.cache_misses == 1, "corrupt entry: want 2 hits, 1 miss; got %d, %d", c.cache_hits,
          c.cache_misses);
    CHECK(pt_write_file_atomic(first, bytes, 100) == 0, "%s", pt_last_error());
    pt_compile_stats d = cycle("truncated entry");
    CHECK(d.cache_hits == 2 && d.cache_misses == 1, "truncated entry: want 2 hits, 1 miss; got %d, %d",
          d.cache_hits, d.cache_misses);
    pt_compile_stats e = cycle("repaired");
    CHECK(e.cache_hits == 3 && e.cache_misses == 0, "after the rebuild: want 3 hits; got %d, %d", e.cache_hits,
          e.cache_misses);
    free(bytes);
}

// ------------------------------------------------------------ cuda

// tf32 GEMMs: results differ from fp32 (the switch is in effect) but stay
// within 1e-2 relative-to-max (10 mantissa bits per operand).
static void check_tf32(int N, int C, int OC) {
    reset_arena();
    float *x = test_rnd((size_t)N * C, 1), *w = test_rnd((size_t)OC * C, 0.5f), *o1 = test_rnd((size_t)N * OC, 1);
    float *dX = putf(x, (size_t)N * C), *dW = putf(w, (size_t)OC * C), *dO = putf(o1, (size_t)N * OC);
    ref->ops->matmul_forward(ref, o1, x, w, N, C, OC);
    dev->tf32 = true;
    dev->ops->matmul_forward(dev, dO, dX, dW, N, C, OC);
    dev->tf32 = false;
    float *o2 = get(dO, (size_t)N * OC);
    const double e = test_relmax(o2, o1, (size_t)N * OC);
    printf("tf32 matmul_forward %dx%dx%d: relative-to-max difference to fp32 cpu-ref %.3e\n", N, C, OC, e);
    CHECK(e > 1e-6, "tf32 matmul_forward equals fp32 to %.3e: the tf32 switch has no effect", e);
    CHECK(e <= 1e-2, "tf32 matmul_forward: relative-to-max %.3e > 1e-2", e);
    dev->ops->matmul_forward(dev, dO, dX, dW, N, C, OC);  // and off again: fp32
    float *o3 = get(dO, (size_t)N * OC);
    CHECK(test_relmax(o3, o1, (size_t)N * OC) <= 1e-5, "matmul_forward after tf32 is switched off is not fp32");
    pt_aligned_free(x); pt_aligned_free(w); pt_aligned_free(o1); pt_aligned_free(o2); pt_aligned_free(o3);
}

// A second backend whose lm_head chunks are `rows` rows (PT_CUDA_XENT_ROWS):
// N spans several chunks and ends in a partial one; fp32 and bf16 paths.
static void check_xent_chunks(int rows) {
    char v[16];
    snprintf(v, sizeof v, "%d", rows);
    setenv("PT_CUDA_XENT_ROWS", v, 1);
    pt_backend *whole = dev;
    dev = pt_backend_create(spec);
    unsetenv("PT_CUDA_XENT_ROWS");
    CHECK(dev != NULL, "%s with PT_CUDA_XENT_ROWS=%d: %s", spec, rows, pt_last_error());
    if (dev) {
        arena = dev->ops->alloc(dev, arena_cap);
        printf("lm_head chunks of %d rows:\n", rows);
        check_xent(2 * rows + 3, 40, 700);
        check_xent(rows, 24, 300);
        {  // the packed bf16 path across chunks, against cpu-ref's bf16 casts
            reset_arena();
            const int N = 3 * rows + 1, C = 32, V = 500;
            ref->bf16_casts = dev->bf16_casts = true;
            xent_case c = xent_case_new(N, C, V, rnd_bf16);
            uint16_t *w16 = put(NULL, sizeof(uint16_t) * V * C);
            dev->ops->pack_bf16(dev, w16, c.dW, (size_t)V * C);
            double l1, l2;
            ref->ops->lm_head_xent(ref, &l1, c.dx, c.dw, c.x, c.w, c.tg, N, C, V, c.scale);
            dev->ops->lm_head_xent_bf16(dev, &l2, c.dDX, c.dDW, c.dX, c.dW, w16, c.dT, N, C, V, c.scale);
            float *dx2 = get(c.dDX, (size_t)N * C), *dw2 = get(c.dDW, (size_t)V * C);
            const double rel = fabs(l2 - l1) / fabs(l1), edx = test_relmax(dx2, c.dx, (size_t)N * C),
                         edw = test_relmax(dw2, c.dw, (size_t)V * C);
            printf("bf16 lm_head_xent_bf16 N=%d in chunks of %d: loss relative %.3e, dinp %.3e, dw %.3e\n", N, rows,
                   rel, edx, edw);
            CHECK(rel <= 1e-5 && edx <= 1e-3 && edw <= 1e-3,
                  "bf16 lm_head_xent_bf16 in chunks: loss %.3e, dinp %.3e, dw %.3e", rel, edx, edw);
            ref->bf16_casts = dev->bf16_casts = false;
            xent_case_free(&c);
            pt_aligned_free(dx2); pt_aligned_free(dw2);
        }
        dev->ops->free(dev, arena);
        pt_backend_destroy(dev);
    }
    dev = whole;
    arena = NULL;
}

// matmul_forward_bf16 / matmul_backward_bf16 (packed weights) against
// cpu-ref's fp32 kernels on the same bf16-exact operands: only the summation
// order differs.
static void check_matmul_bf16(int N, int C, int OC) {
    reset_arena();
    float *x = rnd_bf16((size_t)N * C, 1), *w = rnd_bf16((size_t)OC * C, 0.5f), *g = rnd_bf16((size_t)N * OC, 1);
    float *o1 = test_rnd((size_t)N * OC, 1), *dx1 = test_rnd((size_t)N * C, 1), *dw1 = test_rnd((size_t)OC * C, 1);
    float *dX = putf(x, (size_t)N * C), *dW = putf(w, (size_t)OC * C), *dG = putf(g, (size_t)N * OC);
    float *dO = putf(o1, (size_t)N * OC), *dDX = putf(dx1, (size_t)N * C), *dDW = putf(dw1, (size_t)OC * C);
    uint16_t *w16 = put(NULL, sizeof(uint16_t) * OC * C);
    dev->ops->pack_bf16(dev, w16, dW, (size_t)OC * C);
    uint16_t *h16 = pt_malloc(sizeof(uint16_t) * OC * C);
    dev->ops->download(dev, h16, w16, sizeof(uint16_t) * OC * C);
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)OC * C; i++) bad += h16[i] != pt_float_to_bf16(w[i]);
    CHECK(bad == 0, "pack_bf16: %zu of %d values are not the bf16 bits of util/bf16.h", bad, OC * C);
    ref->ops->matmul_forward(ref, o1, x, w, N, C, OC);
    dev->ops->matmul_forward_bf16(dev, dO, dX, dW, w16, N, C, OC);
    ref->ops->matmul_backward(ref, dx1, dw1, g, x, w, N, C, OC);
    dev->ops->matmul_backward_bf16(dev, dDX, dDW, dG, dX, dW, w16, N, C, OC);
    float *o2 = get(dO, (size_t)N * OC), *dx2 = get(dDX, (size_t)N * C), *dw2 = get(dDW, (size_t)OC * C);
    char what[96];
    snprintf(what, sizeof what, "matmul_forward_bf16 %dx%dx%d", N, C, OC);
    test_cmp(what, o2, o1, (size_t)N * OC, 1e-5);
    snprintf(what, sizeof what, "matmul_backward_bf16 dinp (+=) %dx%dx%d", N, C, OC);
    test_cmp(what, dx2, dx1, (size_t)N * C, 1e-5);
    snprintf(what, sizeof what, "matmul_backward_bf16 dw (+=) %dx%dx%d", N, C, OC);
    test_cmp(what, dw2, dw1, (size_t)OC * C, 1e-5);
    free(h16);
    pt_aligned_free(x); pt_aligned_free(w); pt_aligned_free(g); pt_aligned_free(o1); pt_aligned_free(o2);
    pt_aligned_free(dx1); pt_aligned_free(dx2); pt_aligned_free(dw1); pt_aligned_free(dw2);
}

// ------------------------------------------------------------ cpu

// matmul split over threads: bitwise equal to 1 thread (host pointers: cpu only).
static void check_matmul_threads(int N, int C, int OC) {
    float *x = test_rnd((size_t)N * C, 1), *w = test_rnd((size_t)OC * C, 0.5f), *g = test_rnd((size_t)N * OC, 1);
    float *o3 = test_rnd((size_t)N * OC, 1), *o4 = test_dup(o3, (size_t)N * OC);
    float *dw3 = test_rnd((size_t)OC * C, 1), *dw4 = test_dup(dw3, (size_t)OC * C), *dx3 = test_rnd((size_t)N * C, 1),
          *dx4 = test_dup(dx3, (size_t)N * C);
    dev->ops->matmul_forward(dev, o3, x, w, N, C, OC);
    dev->ops->matmul_backward(dev, dx3, dw3, g, x, w, N, C, OC);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    dev->ops->matmul_forward(dev, o4, x, w, N, C, OC);
    dev->ops->matmul_backward(dev, dx4, dw4, g, x, w, N, C, OC);
    omp_set_num_threads(nt);
    CHECK(!memcmp(o3, o4, sizeof(float) * N * OC), "matmul_forward %dx%dx%d: split result differs from 1 thread",
          N, C, OC);
    CHECK(!memcmp(dx3, dx4, sizeof(float) * N * C), "matmul_backward dinp %dx%dx%d: split differs from 1 thread",
          N, C, OC);
    CHECK(!memcmp(dw3, dw4, sizeof(float) * OC * C), "matmul_backward dw %dx%dx%d: split differs from 1 thread",
          N, C, OC);
    pt_aligned_free(x); pt_aligned_free(w); pt_aligned_free(g); pt_aligned_free(o3); pt_aligned_free(o4);
    pt_aligned_free(dw3); pt_aligned_free(dw4); pt_aligned_free(dx3); pt_aligned_free(dx4);
}

// Runs checks on a second backend of the same SPEC created with the environment variables env (name, value
// pairs, NULL-terminated), in place of the one under test.
static void with_variant(const char *what, const char *const *env, void (*checks)(void)) {
    for (int i = 0; env[i]; i += 2) setenv(env[i], env[i + 1], 1);
    pt_backend *main_dev = dev;
    char *main_arena = arena;
    dev = pt_backend_create(spec);
    for (int i = 0; env[i]; i += 2) unsetenv(env[i]);
    CHECK(dev != NULL, "%s with %s: %s", spec, what, pt_last_error());
    if (dev) {
        printf("%s with %s:\n", spec, what);
        arena = dev->ops->alloc(dev, arena_cap);
        checks();
        dev->ops->free(dev, arena);
        pt_backend_destroy(dev);
    }
    dev = main_dev;
    arena = main_arena;
}
// 3 row chunks of 128 (the last partial), 3 vocabulary tiles of 1024 (the last partial)
static void small_xent_chunks(void) { check_xent(300, 40, 3000); }
// the tile products (lm_head chunks, attention tiles) on OpenBLAS instead of oneDNN's sgemm
static void openblas_tiles(void) {
    CHECK(strstr(dev->device, "tile sgemm: OpenBLAS") != NULL, "PT_CPU_TILE_SGEMM=openblas ignored: %s", dev->device);
    check_attention(1, 300, 8, 2, 64);
    check_xent(300, 40, 3000);
}

static qwen3_config vocab2500_config(void) {
    qwen3_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 2500;  // 2 vocabulary tiles of 2048 (last one partial)
    c.hidden_size = 64;
    c.intermediate_size = 96;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 24;  // != hidden / heads
    c.max_position_embeddings = 128;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000;
    c.initializer_range = 0.02;
    c.tie_word_embeddings = true;
    c.bos_token_id = c.eos_token_id = -1;
    return c;
}

// A model dir (random init) + a token shard for the 2500-token vocabulary.
static void make_vocab2500(const char *dir, char **data_path) {
    qwen3_config c = vocab2500_config();
    pt_backend *be = pt_backend_create("cpu-ref");
    qwen3_model m;
    CHECK(qwen3_create(&m, &c, be) == 0, "%s", pt_last_error());
    qwen3_init_weights(&m, 7);
    CHECK(hf_model_save(&m, dir, "float32", 0) == 0, "%s", pt_last_error());
    qwen3_free(&m);
    pt_backend_destroy(be);
    const uint64_t n = 20000;
    uint32_t *tok = malloc(sizeof(uint32_t) * n);
    uint64_t s = 12345;
    for (uint64_t i = 0; i < n; i++) {  // a skewed, learnable distribution
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(s >> 33);
        tok[i] = i % 3 == 2 ? (tok[i - 1] * 31 + 7) % c.vocab_size : (r % 97) * (r % 26) % c.vocab_size;
    }
    *data_path = pt_path_join(dir, "data.bin");
    CHECK(pt_shard_write(*data_path, tok, n, c.vocab_size, NULL) == 0, "%s", pt_last_error());
    free(tok);
}

// Two runs at the default thread count and one at another: metrics and weights bitwise identical.
static void check_thread_determinism(const char *model, const char *data, int B, int T) {
    enum { STEPS = 8 };
    double l[STEPS];
    char *f1, *f2, *f3, *d1, *d2, *d3;
    test_train(spec, model, data, B, T, STEPS, l, &f1, &d1);
    test_train(spec, model, data, B, T, STEPS, l, &f2, &d2);
    int nt = omp_get_max_threads();
    omp_set_num_threads(nt > 1 ? 1 : 2);
    test_train(spec, model, data, B, T, STEPS, l, &f3, &d3);
    omp_set_num_threads(nt);
    size_t n1, n2, n3;
    char *w1 = test_slurp(d1, "model.safetensors", &n1), *w2 = test_slurp(d2, "model.safetensors", &n2),
         *w3 = test_slurp(d3, "model.safetensors", &n3);
    CHECK(!strcmp(f1, f2), "two %s runs at %d threads differ:\n%s---\n%s", spec, nt, f1, f2);
    CHECK(w1 && w2 && n1 == n2 && !memcmp(w1, w2, n1), "two %s runs wrote different weights", spec);
    CHECK(!strcmp(f1, f3), "%s runs at %d and %d threads differ:\n%s---\n%s", spec, nt, nt > 1 ? 1 : 2, f1, f3);
    CHECK(w3 && n1 == n3 && !memcmp(w1, w3, n1), "%s runs at different thread counts wrote different weights", spec);
    printf("determinism: 2 runs at %d threads bitwise identical: %s; %d vs %d threads: %s\n", nt,
           !strcmp(f1, f2) && n1 == n2 && !memcmp(w1, w2, n1) ? "yes" : "NO", nt, nt > 1 ? 1 : 2,
           !strcmp(f1, f3) && n1 == n3 && !memcmp(w1, w3, n1) ? "yes" : "NO");
    free(f1); free(f2); free(f3); free(w1); free(w2); free(w3);
    test_rmdir(d1);
    test_rmdir(d2);
    test_rmdir(d3);
}

// The cpu backend's own kernel paths: thread splits, the lm_head chunking and tile-product variants.
static void check_cpu_kernels(void) {
    CHECK(strstr(pt_backend_list(), "cpu-ref") && strstr(pt_backend_list(), ",cpu"), "pt_backend_list: %s",
          pt_backend_list());
    check_matmul(300, 96, 520);  // split over rows
    check_matmul_threads(37, 70, 130);
    check_matmul_threads(300, 96, 520);
    check_matmul_threads(64, 200, 1500);  // split over columns
    check_attention(1, 130, 2, 1, 128);
    check_attention(1, 300, 8, 2, 64);  // 5 query tiles, 4 query heads per KV head
    const char *const small[] = {"PT_CPU_XENT_ROWS", "128", "PT_CPU_XENT_TILE", "1024", NULL};
    with_variant("small lm_head chunks", small, small_xent_chunks);
    const char *const openblas[] = {"PT_CPU_TILE_SGEMM", "openblas", NULL};
    with_variant("OpenBLAS tiles", openblas, openblas_tiles);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_backend_parity SPEC (cpu, opencl, cuda-sim, cuda[:N])\n");
        return 2;
    }
    spec = argv[1];
    is_opencl = !strncmp(spec, "opencl", 6);
    is_sim = !strcmp(spec, "cuda-sim");
    is_cuda = !strncmp(spec, "cuda", 4);
    is_cpu = !strcmp(spec, "cpu");
    tol = &BOUNDS[0];
    while (tol->spec && strcmp(tol->spec, spec)) tol++;
    char title[96];
    snprintf(title, sizeof title, "test_backend_parity %s", spec);
    pt_set_quiet(true);
    char *cache = test_tmpdir("parity-cache");
    setenv("PT_OPENCL_CACHE", cache, 1);
    ref = pt_backend_create("cpu-ref");
    dev = pt_backend_create(spec);
    if (!dev) {
        const char *e = pt_last_error();
        if (strstr(e, "no OpenCL platform") || strstr(e, "no CUDA device") || strstr(e, "unknown backend") ||
            strstr(e, "not built into this binary")) {
            printf("SKIP %s: %s\n", title, e);
            test_rmdir(cache);
            return 77;
        }
        CHECK(0, "%s backend: %s", spec, e);
        return test_summary(title);
    }
    printf("%s\n", dev->device);
    CHECK(dev->host_memory == is_cpu, "%s: host_memory %d, want %d", spec, dev->host_memory, is_cpu);
    if (is_opencl) {
        pt_compile_stats cs;
        dev->ops->compile_stats(dev, &cs);
        printf("base program: %.3f s (%s)\n", cs.compile_seconds, cs.cache_hits ? "cache" : "built");
    }
    if (is_cuda) {
        CHECK(dev->stream != NULL, "%s: be->stream (the cudaStream_t) is not set", spec);
        CHECK(dev->ops->pack_bf16 && dev->ops->matmul_forward_bf16 && dev->ops->matmul_backward_bf16 && dev->ops->lm_head_xent_bf16,
              "%s: the packed bf16 path is missing", spec);
    }
    arena_cap = 64u << 20;
    arena = dev->ops->alloc(dev, arena_cap);
    float *z = get((float *)arena, 1 << 20);
    int nz = 1;
    for (size_t i = 0; i < (1u << 20); i++) nz &= z[i] == 0;
    CHECK(nz, "alloc is not zero-filled");
    pt_aligned_free(z);

    check_matmul(37, 70, 130);
    check_matmul(64, 200, 1500);
    check_matmul(1, 5, 3);
    check_matmul(20, 24, 5000);  // dinp: K = 5000 (opencl: the split-K path)
    if (is_cpu) check_cpu_kernels();
    check_rmsnorm(50, 72);
    check_rmsnorm(1000, 24);     // (cuda: 4 dw partials of 256 rows, the last partial)
    check_rope(2, 19, 3, 24);
    check_rope(1, 7, 2, 128);
    check_attention(2, 100, 4, 2, 24);  // GQA
    check_attention(1, 64, 3, 3, 32);   // MHA
    check_attention(2, 5, 2, 1, 16);
    if (is_cuda) {  // the flash kernels' tiles: T across and inside 32-row tiles, head dims, GQA ratios
        check_attention(1, 33, 4, 1, 32);    // GQA 4, tiny's head_dim, one row past a tile
        check_attention(1, 70, 2, 2, 128);   // head_dim 128 (> 48 KiB of shared memory), MHA
        check_attention(1, 31, 4, 2, 128);   // one tile, partial
        check_attention(1, 40, 2, 1, 256);   // the largest head_dim, GQA 2
        check_attention(2, 300, 8, 2, 128);  // GQA 4, many tiles
        check_attention(1, 257, 16, 16, 64);
    }
    check_elementwise();
    check_embedding();
    check_xent(300, 40, 3000);
    check_xent(7, 64, 100);
    check_xent(40, 24, 9000);  // the dinp product of K = V = 9000 (opencl: the split-K path)
    check_round_bf16();
    check_bf16_kernels();
    if (is_cuda) {
        check_matmul_bf16(37, 70, 130);
        check_matmul_bf16(1, 5, 3);
        check_tf32(64, 256, 96);
    }
    dev->ops->free(dev, arena);
    if (is_opencl) {  // the local-memory tiled GEMM (PT_OPENCL_GEMM=tiled) on the same shapes, odd tiles
        setenv("PT_OPENCL_GEMM", "tiled", 1);
        setenv("PT_OPENCL_GEMM_TILE", "16,32,8,2,4", 1);
        setenv("PT_OPENCL_NT_VEC", "4", 1);  // (the register-blocked NT kernel is unused here; its build must work)
        pt_backend *fast = dev;
        dev = pt_backend_create("opencl");
        CHECK(dev != NULL, "opencl with the tiled GEMM: %s", pt_last_error());
        if (dev) {
            arena = dev->ops->alloc(dev, arena_cap);
            check_matmul(37, 70, 130);
            check_matmul(1, 5, 3);
            check_xent(300, 40, 3000);
            dev->ops->free(dev, arena);
            pt_backend_destroy(dev);
        }
        dev = fast;
        unsetenv("PT_OPENCL_GEMM");
        unsetenv("PT_OPENCL_GEMM_TILE");
        unsetenv("PT_OPENCL_NT_VEC");
    }
    if (is_cuda) {
        check_xent_chunks(16);
        check_xent_chunks(1);
        setenv("PT_CUDA_XENT_ROWS", "0", 1);
        pt_backend *bad = pt_backend_create(spec);
        unsetenv("PT_CUDA_XENT_ROWS");
        CHECK(!bad && strstr(pt_last_error(), "PT_CUDA_XENT_ROWS '0'"), "PT_CUDA_XENT_ROWS=0 accepted or error '%s'",
              pt_last_error());
        pt_backend_destroy(bad);
        pt_backend *bad2 = pt_backend_create(is_sim ? "cuda-sim:99" : "cuda:99");
        CHECK(!bad2 && strstr(pt_last_error(), "no CUDA device 99"), "%s:99 accepted or error '%s'", spec,
              pt_last_error());
        pt_backend_destroy(bad2);
    }
    printf("kernels: worst relative-to-max error %.3e\n", test_worst_kernel);

    char *tied = test_source_path("tests/fixtures/golden/tied");
    char *untied = test_source_path("tests/fixtures/golden/untied");
    char *tdata = pt_path_join(tied, "data.bin"), *udata = pt_path_join(untied, "data.bin");
    check_model_grads("tied", tied, 2, 16, "fp32", tol->step0_loss, 1e-4);
    check_model_grads("untied", untied, 2, 16, "fp32", tol->step0_loss, 1e-4);
    check_model_grads("tied T=48", tied, 3, 48, "fp32", tol->step0_loss, 1e-4);
    char *v2500 = NULL, *v2500_data = NULL;
    if (is_cpu) {  // 320 rows, 2 vocabulary tiles; T=80: 2 attention tiles
        v2500 = test_tmpdir("parity-vocab2500");
        make_vocab2500(v2500, &v2500_data);
        check_model_grads("vocab2500", v2500, 4, 80, "fp32", tol->step0_loss, 1e-4);
    }
    check_model_grads("tied bf16", tied, 2, 16, "bf16", 1e-4, 2e-2);
    check_model_grads("untied bf16", untied, 2, 16, "bf16", 1e-4, 2e-2);
    const char *ps = getenv("PT_PARITY_STEPS");
    // (sanitized builds: fewer steps, cpu-ref and the emulator's fibers run ~10x slower there)
    const int steps = ps && atoi(ps) > 0 ? PT_MIN(atoi(ps), 64) : getenv("PT_SANITIZED") ? tol->sanitized_steps : 50;
    if (steps != 50) printf("%s: %d-step curves (PT_PARITY_STEPS or a sanitized build)\n", spec, steps);
    check_curves("tied", tied, tdata, 2, 16, steps);
    check_curves("untied", untied, udata, 2, 16, steps);
    if (is_cpu) {
        check_curves("vocab2500", v2500, v2500_data, 4, 80, steps);
        check_thread_determinism(v2500, v2500_data, 4, 80);
        test_rmdir(v2500);  // (frees v2500)
        free(v2500_data);
    }
    pt_backend_destroy(dev);

    if (is_opencl) {
        char *cdir = test_tmpdir("parity-cache2");
        setenv("PT_OPENCL_CACHE", cdir, 1);
        check_cache(cdir);
        test_rmdir(cdir);
    }

    free(tdata); free(udata); free(tied); free(untied);
    test_rmdir(cache);
    pt_backend_destroy(ref);
    return test_summary(title);
}
