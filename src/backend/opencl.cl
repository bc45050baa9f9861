// OpenCL C kernels of the `opencl` backend (src/backend/opencl.c), OpenCL C
// 1.2 core, no extensions. Embedded into the binary at build time
// (CMakeLists.txt -> opencl_source.h) and built at run time.
//
// Every buffer argument comes with an element offset (`*_o`): the model hands
// the backend pointers into the middle of large allocations, and the host
// side maps each to (cl_mem, offset).
//
// Determinism: every output element is written by exactly one work-item that
// reduces in a fixed order (sequential loops, or a fixed-shape tree in local
// memory); no atomics anywhere. FP contraction is off, matching the host build
// (-ffp-contract=off), so a*b+c is never silently fused.
//
// Compile-time constants (-D, see opencl.c):
//   TM TN TK RM RN  GEMM tile: a work-group computes a TM x TN output tile
//                   with (TM/RM) x (TN/RN) work-items, RM x RN outputs each,
//                   stepping through K in slices of TK.
//   NTV             vector width (4, 8, 16) along k of the NT GEMM
//   XWG             work-group size of the per-row cross-entropy kernel
//   SWG             work-group size of the sum-of-squares kernel
//   SEQ HD          (shape-specialised programs only) sequence length and
//                   head dim of the attention and RoPE kernels.
//
// bf16 (precision bf16, backend.h "bf16"): tensors stay fp32 holding
// bf16-exact values. The kernels whose PyTorch counterpart rounds inside the
// op take an int `bf16` argument (the model sets the flag after the base
// program is built, so it is not a compile-time variant) and round there with
// bf16_round, bit for bit util/bf16.h.
#pragma OPENCL FP_CONTRACT OFF

// ------------------------------------------------------------ bf16
// Round to nearest even on the bits (no float arithmetic, so no contraction,
// flush-to-zero or rounding mode can change it); a NaN stays a quiet NaN.
static uint bf16_round_bits(uint u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) & 0xffff0000u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}
// A product passed here is first the correctly rounded fp32 product: its bits
// are needed, so it can never be fused into an fma with a later add.
static float bf16_round(float f) { return as_float(bf16_round_bits(as_uint(f))); }

// dst[i] = bf16(src[i]) on the bit patterns (dst may alias src).
__kernel void round_bf16(__global uint *dst, ulong dst_o, __global const uint *src, ulong src_o, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) dst[dst_o + i] = bf16_round_bits(src[src_o + i]);
}

// ------------------------------------------------------------ GEMM
// C[m,n] = (accumulate ? C[m,n] : 0) + sum_k A(m,k) * B(k,n) over k = 0..K-1
// in order, with A(m,k) = A[m*a_sm + k*a_sk] and B(k,n) = B[k*b_sk + n*b_sn]:
// the strides express the three matmul layouts (x w^T, g w, g^T x).
__kernel __attribute__((reqd_work_group_size(TN / RN, TM / RM, 1)))
void gemm(int M, int N, int K,
          __global const float *A, ulong A_o, int a_sm, int a_sk,
          __global const float *B, ulong B_o, int b_sk, int b_sn,
          __global float *Cm, ulong C_o, int ldc, int accumulate) {
    __local float As[TK][TM + 1];
    __local float Bs[TK][TN + 1];
    A += A_o;
    B += B_o;
    Cm += C_o;
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int WX = TN / RN, WY = TM / RM, NT = WX * WY, lid = ty * WX + tx;
    const int m0 = get_group_id(1) * TM, n0 = get_group_id(0) * TN;
    float acc[RM][RN];
    for (int r = 0; r < RM; r++)
        for (int c = 0; c < RN; c++) acc[r][c] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int i = lid; i < TK * TM; i += NT) {  // A tile, zero-padded at the edges
            const int mm = i / TK, kk = i % TK, m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < M && k < K) ? A[(size_t)m * a_sm + (size_t)k * a_sk] : 0.0f;
        }
        for (int i = lid; i < TK * TN; i += NT) {
            const int nn = i / TK, kk = i % TK, n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < N && k < K) ? B[(size_t)k * b_sk + (size_t)n * b_sn] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; kk++) {
            float a[RM], b[RN];
            for (int r = 0; r < RM; r++) a[r] = As[kk][ty + r * WY];
            for (int c = 0; c < RN; c++) b[c] = Bs[kk][tx + c * WX];
            for (int r = 0; r < RM; r++)
                for (int c = 0; c < RN; c++) acc[r][c] += a[r] * b[c];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < RM; r++) {
        const int m = m0 + ty + r * WY;
        if (m >= M) continue;
        for (int c = 0; c < RN; c++) {
            const int n = n0 + tx + c * WX;
            if (n >= N) continue;
            __global float *o = Cm + (size_t)m * ldc + n;
            *o = accumulate ? *o + acc[r][c] : acc[r][c];
        }
    }
}

// Register-blocked GEMMs without local memory, one per layout, for devices
// where local memory is no faster than cache (CPUs: PoCL). Each work-item
// computes a 4 x 4 (NT) or 8 x 8 (NN, TN) block, float4 along the contiguous
// dimension. k order is fixed per output (NT: NTV interleaved partial sums
// added by a fixed tree, then the tail; NN/TN: sequential).
// NT: C[m,n] (+)= sum_k A[m*lda+k] B[n*ldb+k]          (x w^T)
// Vectors of NTV floats along k (4, 8 or 16: -DNTV); lanes are added by a
// fixed halving tree at the end, then the k tail.
#define NT_VEC_(n) float##n
#define NT_VEC(n) NT_VEC_(n)
#define NT_LOAD_(n) vload##n
#define NT_LOAD(n) NT_LOAD_(n)
typedef NT_VEC(NTV) ntvec;
static float nt_hsum(ntvec v) {
#if NTV == 16
    const float8 h8 = v.lo + v.hi;
#elif NTV == 8
    const float8 h8 = v;
#endif
#if NTV >= 8
    const float4 h4 = h8.lo + h8.hi;
#else
    const float4 h4 = v;
#endif
    const float2 h2 = h4.lo + h4.hi;
    return h2.x + h2.y;
}
__kernel void gemm_nt(int M, int N, int K, __global const float *A, ulong A_o, int lda, __global const float *B,
                      ulong B_o, int ldb, __global float *Cm, ulong C_o, int ldc, int accumulate) {
    const int n0 = get_global_id(0) * 4, m0 = get_global_id(1) * 4;
    if (m0 >= M || n0 >= N) return;
    A += A_o;
    B += B_o;
    Cm += C_o;
    __global const float *ar[4], *br[4];
    for (int r = 0; r < 4; r++) ar[r] = A + (size_t)min(m0 + r, M - 1) * lda;  // clamped rows: computed, not stored
    for (int c = 0; c < 4; c++) br[c] = B + (size_t)min(n0 + c, N - 1) * ldb;
    ntvec acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = (ntvec)(0.0f);
    int k = 0;
    for (; k + NTV <= K; k += NTV) {
        ntvec a[4], b[4];
        for (int r = 0; r < 4; r++) a[r] = NT_LOAD(NTV)(0, ar[r] + k);
        for (int c = 0; c < 4; c++) b[c] = NT_LOAD(NTV)(0, br[c] + k);
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++) acc[r][c] += a[r] * b[c];
    }
    for (int r = 0; r < 4; r++) {
        const int m = m0 + r;
        if (m >= M) break;
        for (int c = 0; c < 4; c++) {
            const int n = n0 + c;
            if (n >= N) break;
            float s = nt_hsum(acc[r][c]);
            for (int kk = k; kk < K; kk++) s += ar[r][kk] * br[c][kk];
            __global float *o = Cm + (size_t)m * ldc + n;
            *o = accumulate ? *o + s : s;
        }
    }
}

// NN: C[m,n] (+)= sum_k A[m*lda+k] B[k*ldb+n]          (g w)
// TN: C[m,n] (+)= sum_k A[k*lda+m] B[k*ldb+n]          (g^T x)
// 8 x 8 blocks (each B row segment is reused by 8 rows: on a CPU the long-K
// products are bound by re-reading B). Edge blocks take the scalar path, in
// the same k order.
__kernel void gemm_nn_tn(int M, int N, int K, __global const float *A, ulong A_o, int lda, __global const float *B,
                         ulong B_o, int ldb, __global float *Cm, ulong C_o, int ldc, int accumulate, int a_trans) {
    const int n0 = get_global_id(0) * 8, m0 = get_global_id(1) * 8;
    if (m0 >= M || n0 >= N) return;
    A += A_o;
    B += B_o;
    Cm += C_o;
    float sc[8][8];
    if (n0 + 8 <= N && m0 + 8 <= M) {
        float4 acc[8][2];
        for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = (float4)(0.0f);
        for (int k = 0; k < K; k++) {
            __global const float *bk = B + (size_t)k * ldb + n0;
            const float4 b0 = vload4(0, bk), b1 = vload4(1, bk);
            float a[8];
            if (a_trans) {
                __global const float *ak = A + (size_t)k * lda + m0;
                const float4 a0 = vload4(0, ak), a1 = vload4(1, ak);
                a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w;
                a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
            } else {
                for (int r = 0; r < 8; r++) a[r] = A[(size_t)(m0 + r) * lda + k];
            }
            for (int r = 0; r < 8; r++) {
                acc[r][0] += a[r] * b0;
                acc[r][1] += a[r] * b1;
            }
        }
        for (int r = 0; r < 8; r++) {
            vstore4(acc[r][0], 0, sc[r]);
            vstore4(acc[r][1], 1, sc[r]);
        }
    } else {
        for (int r = 0; r < 8; r++)
            for (int c = 0; c < 8; c++) sc[r][c] = 0.0f;
        for (int k = 0; k < K; k++)
            for (int r = 0; r < 8 && m0 + r < M; r++) {
                const float a = a_trans ? A[(size_t)k * lda + m0 + r] : A[(size_t)(m0 + r) * lda + k];
                for (int c = 0; c < 8 && n0 + c < N; c++) sc[r][c] += a * B[(size_t)k * ldb + n0 + c];
            }
    }
    for (int r = 0; r < 8 && m0 + r < M; r++)
        for (int c = 0; c < 8 && n0 + c < N; c++) {
            __global float *o = Cm + (size_t)(m0 + r) * ldc + n0 + c;
            *o = accumulate ? *o + sc[r][c] : sc[r][c];
        }
}

// Split-K epilogue: C[m,n] = (accumulate ? C[m,n] : 0) + P[0][m][n] + P[1][m][n] + ...
// slices added in order (deterministic), one work-item per output.
__kernel void sum_slices(__global float *Cm, ulong C_o, int ldc, __global const float *P, int S, int M, int N,
                         int accumulate) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)M * N) return;
    const int m = i / N, n = i % N;
    float s = 0.0f;
    for (int j = 0; j < S; j++) s += P[(size_t)j * M * N + i];
    __global float *o = Cm + C_o + (size_t)m * ldc + n;
    *o = accumulate ? *o + s : s;
}

// ------------------------------------------------------------ embedding
// out[n,:] = wte[ids[n],:]; an id < 0 (token outside this vocabulary shard)
// gives a zero row. One work-item per element.
__kernel void embedding_forward(__global float *out, ulong out_o, __global const int *ids, ulong ids_o,
                                __global const float *wte, ulong wte_o, int N, int C) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)N * C) return;
    const int n = i / C, c = i % C, id = ids[ids_o + n];
    out[out_o + i] = id < 0 ? 0.0f : wte[wte_o + (size_t)id * C + c];
}

// dwte[ids[n],c] += dout[n,c], rows n in order (rows may share an id): one
// work-item per column c; ids < 0 are skipped.
__kernel void embedding_backward(__global float *dwte, ulong dwte_o, __global const float *dout, ulong dout_o,
                                 __global const int *ids, ulong ids_o, int N, int C) {
    const int c = get_global_id(0);
    if (c >= C) return;
    for (int n = 0; n < N; n++) {
        const int id = ids[ids_o + n];
        if (id < 0) continue;
        dwte[dwte_o + (size_t)id * C + c] += dout[dout_o + (size_t)n * C + c];
    }
}

// ------------------------------------------------------------ RMSNorm
// One work-item per row (sequential sum of squares, as cpu-ref).
__kernel void rmsnorm_forward(__global float *out, ulong out_o, __global float *rstd, ulong rstd_o,
                              __global const float *inp, ulong inp_o, __global const float *w, ulong w_o, int N,
                              int C, float eps, int bf16) {
    const int n = get_global_id(0);
    if (n >= N) return;
    __global const float *x = inp + inp_o + (size_t)n * C;
    w += w_o;
    float ss = 0.0f;
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    const float r = 1.0f / sqrt(ss / C + eps);
    rstd[rstd_o + n] = r;
    __global float *y = out + out_o + (size_t)n * C;
    if (bf16)  // HF: weight * hidden.to(bf16), in bf16
        for (int c = 0; c < C; c++) y[c] = bf16_round(w[c] * bf16_round(x[c] * r));
    else
        for (int c = 0; c < C; c++) y[c] = w[c] * (x[c] * r);
}

// dinp[n,:] += r * (g*w - xhat * mean(g*w*xhat)), one work-item per row.
__kernel void rmsnorm_backward_dinp(__global float *dinp, ulong dinp_o, __global const float *dout, ulong dout_o,
                                    __global const float *inp, ulong inp_o, __global const float *w, ulong w_o,
                                    __global const float *rstd, ulong rstd_o, int N, int C) {
    const int n = get_global_id(0);
    if (n >= N) return;
    __global const float *x = inp + inp_o + (size_t)n * C, *g = dout + dout_o + (size_t)n * C;
    w += w_o;
    const float r = rstd[rstd_o + n];
    float dot = 0.0f;
    for (int c = 0; c < C; c++) dot += g[c] * w[c] * (x[c] * r);
    const float m = dot / C;
    __global float *dx = dinp + dinp_o + (size_t)n * C;
    for (int c = 0; c < C; c++) dx[c] += r * (g[c] * w[c] - (x[c] * r) * m);
}

// dw[c] += sum_n dout[n,c] * xhat[n,c], rows in order, one work-item per column.
__kernel void rmsnorm_backward_dw(__global float *dw, ulong dw_o, __global const float *dout, ulong dout_o,
                                  __global const float *inp, ulong inp_o, __global const float *rstd, ulong rstd_o,
                                  int N, int C) {
    const int c = get_global_id(0);
    if (c >= C) return;
    dout += dout_o;
    inp += inp_o;
    rstd += rstd_o;
    float s = 0.0f;
    for (int n = 0; n < N; n++) s += dout[(size_t)n * C + c] * (inp[(size_t)n * C + c] * rstd[n]);
    dw[dw_o + c] += s;
}

// ------------------------------------------------------------ elementwise
static float silu_sig(float x) { return 1.0f / (1.0f + exp(-x)); }

__kernel void swiglu_forward(__global float *out, ulong out_o, __global const float *gate, ulong gate_o,
                             __global const float *up, ulong up_o, ulong n, int bf16) {
    const size_t i = get_global_id(0);
    if (i >= n) return;
    const float x = gate[gate_o + i], silu = x / (1.0f + exp(-x));
    out[out_o + i] = bf16 ? bf16_round(bf16_round(silu) * up[up_o + i]) : silu * up[up_o + i];
}

__kernel void swiglu_backward(__global float *dgate, ulong dgate_o, __global float *dup, ulong dup_o,
                              __global const float *dout, ulong dout_o, __global const float *gate, ulong gate_o,
                              __global const float *up, ulong up_o, ulong n) {
    const size_t i = get_global_id(0);
    if (i >= n) return;
    const float x = gate[gate_o + i], d = dout[dout_o + i];
    const float sg = silu_sig(x);
    dup[dup_o + i] = d * (x * sg);
    dgate[dgate_o + i] = d * up[up_o + i] * (sg * (1.0f + x * (1.0f - sg)));
}

__kernel void add(__global float *out, ulong out_o, __global const float *a, ulong a_o, __global const float *b,
                  ulong b_o, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) out[out_o + i] = a[a_o + i] + b[b_o + i];
}

__kernel void scale(__global float *x, ulong x_o, float s, ulong n) {
    const size_t i = get_global_id(0);
    if (i < n) x[x_o + i] *= s;
}

// PyTorch AdamW, the same operation order as cpu-ref; the scalars are
// computed on the host exactly as cpu-ref computes them.
__kernel void adamw(__global float *p, ulong p_o, __global const float *g, ulong g_o, __global float *m, ulong m_o,
                    __global float *v, ulong v_o, ulong n, float decay, float w1, float b2, float w2, float step_size,
                    float bc2_sqrt, float eps) {
    const size_t i = get_global_id(0);
    if (i >= n) return;
    p += p_o; g += g_o; m += m_o; v += v_o;
    const float gi = g[i];
    float pi = p[i] * decay;
    const float mi = m[i] + w1 * (gi - m[i]);
    const float vi = v[i] * b2 + w2 * (gi * gi);
    const float denom = sqrt(vi) / bc2_sqrt + eps;
    pi += -step_size * (mi / denom);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
}

// ------------------------------------------------------------ reductions
// part[blk] = sum of squares of g[blk*SWG*16 ..) : each work-item sums its 16
// strided elements in order, then a fixed tree in local memory. The host adds
// the partial sums in block order (double).
__kernel __attribute__((reqd_work_group_size(SWG, 1, 1)))
void sum_squares(__global float *part, __global const float *g, ulong g_o, ulong n) {
    __local float red[SWG];
    const int lid = get_local_id(0);
    const size_t base = (size_t)get_group_id(0) * SWG * 16;
    g += g_o;
    float s = 0.0f;
    for (int j = 0; j < 16; j++) {
        const size_t i = base + (size_t)j * SWG + lid;
        if (i < n) s += g[i] * g[i];
    }
    red[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = SWG / 2; h > 0; h >>= 1) {
        if (lid < h) red[lid] += red[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) part[get_group_id(0)] = red[0];
}

// Cross-entropy over the logits of one row chunk, one work-group per row:
// lse = max + log(sum exp(l - max)); loss[row] = lse - l[target]; with grad,
// the logits are overwritten by scale * (softmax - onehot). An ignored row
// (target < 0) gives loss 0 and a zero gradient row.
__kernel __attribute__((reqd_work_group_size(XWG, 1, 1)))
void xent_rows(__global float *lg, int V, __global const int *tg, ulong tg_o, __global float *loss, int row0,
               float scale, int grad, int bf16) {
    __local float red[XWG];
    const int r = get_group_id(0), lid = get_local_id(0);
    __global float *l = lg + (size_t)r * V;
    const int t = tg[tg_o + row0 + r];
    if (t < 0) {  // uniform over the work-group: no barrier is skipped by some items only
        if (grad)
            for (int v = lid; v < V; v += XWG) l[v] = 0.0f;
        if (lid == 0) loss[row0 + r] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int v = lid; v < V; v += XWG) {
        if (bf16) l[v] = bf16_round(l[v]);  // bf16 logits, then HF's logits.float() loss
        mx = fmax(mx, l[v]);
    }
    red[lid] = mx;
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);  // (global: the rounded l[t] is read by all)
    for (int h = XWG / 2; h > 0; h >>= 1) {
        if (lid < h) red[lid] = fmax(red[lid], red[lid + h]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mx = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float se = 0.0f;
    for (int v = lid; v < V; v += XWG) se += exp(l[v] - mx);
    red[lid] = se;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = XWG / 2; h > 0; h >>= 1) {
        if (lid < h) red[lid] += red[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float lse = mx + log(red[0]);
    const float lt = l[t];
    barrier(CLK_GLOBAL_MEM_FENCE);  // everyone has read l[t] before it is overwritten
    if (lid == 0) loss[row0 + r] = lse - lt;
    if (!grad) return;
    for (int v = lid; v < V; v += XWG) {
        float g = exp(l[v] - lse) * scale;
        if (v == t) g -= scale;
        l[v] = bf16 ? bf16_round(g) : g;  // bf16: the gradient flows back through .float()
    }
}

// ------------------------------------------------------------ shape-specialised
#ifdef HD
// RoPE (rotate-half) on x[B,SEQ,NH,HD], tables cos/sin[SEQ,HD]. One
// work-item per pair (i, i+HD/2): it reads both before writing both, so
// out may alias inp.
__kernel void rope_forward(__global float *out, ulong out_o, __global const float *inp, ulong inp_o,
                           __global const float *cs, ulong cs_o, __global const float *sn, ulong sn_o, int B,
                           int NH, int bf16) {
    const int h = HD / 2;
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)B * SEQ * NH * h) return;
    const int i = gid % h;
    const size_t row = gid / h;  // (b*SEQ + t)*NH + head
    const int t = (row / NH) % SEQ;
    const size_t base = row * HD;
    cs += cs_o + (size_t)t * HD;
    sn += sn_o + (size_t)t * HD;
    const float x1 = inp[inp_o + base + i], x2 = inp[inp_o + base + i + h];
    if (bf16) {  // HF: each product a bf16 tensor, then their bf16 sum
        out[out_o + base + i] = bf16_round(bf16_round(x1 * cs[i]) + bf16_round((-x2) * sn[i]));
        out[out_o + base + i + h] = bf16_round(bf16_round(x2 * cs[i + h]) + bf16_round(x1 * sn[i + h]));
    } else {
        out[out_o + base + i] = x1 * cs[i] + (-x2) * sn[i];
        out[out_o + base + i + h] = x2 * cs[i + h] + x1 * sn[i + h];
    }
}

// dinp = R^T dout (overwrites; may alias dout), same pairing.
__kernel void rope_backward(__global float *dinp, ulong dinp_o, __global const float *dout, ulong dout_o,
                            __global const float *cs, ulong cs_o, __global const float *sn, ulong sn_o, int B,
                            int NH) {
    const int h = HD / 2;
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)B * SEQ * NH * h) return;
    const int j = gid % h;
    const size_t row = gid / h;
    const int t = (row / NH) % SEQ;
    const size_t base = row * HD;
    cs += cs_o + (size_t)t * HD;
    sn += sn_o + (size_t)t * HD;
    const float d1 = dout[dout_o + base + j], d2 = dout[dout_o + base + j + h];
    dinp[dinp_o + base + j] = d1 * cs[j] + d2 * sn[j + h];
    dinp[dinp_o + base + j + h] = d2 * cs[j + h] - d1 * sn[j];
}

// Causal GQA attention forward, one work-item per query row (b, h, t):
// scores, max, sum of exp, then out = sum (p / sum) v, in the order of
// cpu-ref. saved[b,h,t] = logsumexp of the row's scaled scores (the
// backward recomputes probabilities from it: no [T,T] buffer).
// Document masking (backend.h): with has_pos, row t sees keys
// t - pos[b,t] .. t only; without it `pos` is a dummy buffer never read.
__kernel void attention_forward(__global float *out, ulong out_o, __global float *lse, ulong lse_o,
                                __global const float *q, ulong q_o, __global const float *k, ulong k_o,
                                __global const float *v, ulong v_o, __global const int *pos, ulong pos_o,
                                int has_pos, int B, int H, int KV) {
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)B * H * SEQ) return;
    const int t = gid % SEQ, hh = (gid / SEQ) % H, b = gid / ((size_t)SEQ * H);
    const int kvh = hh / (H / KV);
    const float scale = 1.0f / sqrt((float)HD);
    q += q_o; k += k_o; v += v_o;
    const int lo = has_pos ? t - pos[pos_o + (size_t)b * SEQ + t] : 0;
    float qv[HD], acc[HD];
    for (int i = 0; i < HD; i++) {
        qv[i] = q[(((size_t)b * SEQ + t) * H + hh) * HD + i];
        acc[i] = 0.0f;
    }
    float mx = -INFINITY;
    for (int s = lo; s <= t; s++) {
        __global const float *kr = k + (((size_t)b * SEQ + s) * KV + kvh) * HD;
        float dot = 0.0f;
        for (int i = 0; i < HD; i++) dot += qv[i] * kr[i];
        mx = fmax(mx, dot * scale);
    }
    float sum = 0.0f;
    for (int s = lo; s <= t; s++) {
        __global const float *kr = k + (((size_t)b * SEQ + s) * KV + kvh) * HD;
        float dot = 0.0f;
        for (int i = 0; i < HD; i++) dot += qv[i] * kr[i];
        sum += exp(dot * scale - mx);
    }
    for (int s = lo; s <= t; s++) {
        __global const float *kr = k + (((size_t)b * SEQ + s) * KV + kvh) * HD;
        __global const float *vr = v + (((size_t)b * SEQ + s) * KV + kvh) * HD;
        float dot = 0.0f;
        for (int i = 0; i < HD; i++) dot += qv[i] * kr[i];
        const float p = exp(dot * scale - mx) / sum;
        for (int i = 0; i < HD; i++) acc[i] += p * vr[i];
    }
    __global float *o = out + out_o + (((size_t)b * SEQ + t) * H + hh) * HD;
    for (int i = 0; i < HD; i++) o[i] = acc[i];
    lse[lse_o + ((size_t)b * H + hh) * SEQ + t] = mx + log(sum);
}

// Backward part 1, per query row (b, h, t): rowdot = sum_s p dp (dp = dout.v_s),
// ds = p (dp - rowdot) scale, dq = sum_s ds k_s (OVERWRITTEN). rowdot goes to
// a scratch buffer [B,H,SEQ] for part 2.
__kernel void attention_backward_dq(__global float *dq, ulong dq_o, __global float *rowdot,
                                    __global const float *dout, ulong dout_o, __global const float *q, ulong q_o,
                                    __global const float *k, ulong k_o, __global const float *v, ulong v_o,
                                    __global const float *lse, ulong lse_o, __global const int *pos, ulong pos_o,
                                    int has_pos, int B, int H, int KV) {
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)B * H * SEQ) return;
    const int t = gid % SEQ, hh = (gid / SEQ) % H, b = gid / ((size_t)SEQ * H);
    const int kvh = hh / (H / KV);
    const float scale = 1.0f / sqrt((float)HD);
    q += q_o; k += k_o; v += v_o; dout += dout_o;
    const size_t qi = (((size_t)b * SEQ + t) * H + hh) * HD;
    const float L = lse[lse_o + ((size_t)b * H + hh) * SEQ + t];
    const int lo = has_pos ? t - pos[pos_o + (size_t)b * SEQ + t] : 0;
    float qv[HD], go[HD], acc[HD];
    for (int i = 0; i < HD; i++) {
        qv[i] = q[qi + i];
        go[i] = dout[qi + i];
        acc[i] = 0.0f;
    }
    float rd = 0.0f;
    for (int s = lo; s <= t; s++) {
        const size_t ki = (((size_t)b * SEQ + s) * KV + kvh) * HD;
        float dot = 0.0f, dp = 0.0f;
        for (int i = 0; i < HD; i++) dot += qv[i] * k[ki + i];
        for (int i = 0; i < HD; i++) dp += go[i] * v[ki + i];
        rd += exp(dot * scale - L) * dp;
    }
    for (int s = lo; s <= t; s++) {
        const size_t ki = (((size_t)b * SEQ + s) * KV + kvh) * HD;
        float dot = 0.0f, dp = 0.0f;
        for (int i = 0; i < HD; i++) dot += qv[i] * k[ki + i];
        for (int i = 0; i < HD; i++) dp += go[i] * v[ki + i];
        const float ds = exp(dot * scale - L) * (dp - rd) * scale;
        for (int i = 0; i < HD; i++) acc[i] += ds * k[ki + i];
    }
    for (int i = 0; i < HD; i++) dq[dq_o + qi + i] = acc[i];
    rowdot[((size_t)b * H + hh) * SEQ + t] = rd;
}

// Backward part 2, per key row (b, kv head, s): dk = sum over the group's
// heads and t >= s of ds q_t, dv = sum p dout_t (both OVERWRITTEN), heads then
// t in order, as cpu-ref.
__kernel void attention_backward_dkv(__global float *dk, ulong dk_o, __global float *dv, ulong dv_o,
                                     __global const float *rowdot, __global const float *dout, ulong dout_o,
                                     __global const float *q, ulong q_o, __global const float *k, ulong k_o,
                                     __global const float *v, ulong v_o, __global const float *lse, ulong lse_o,
                                     __global const int *pos, ulong pos_o, int has_pos, int B, int H, int KV) {
    const size_t gid = get_global_id(0);
    if (gid >= (size_t)B * KV * SEQ) return;
    const int s = gid % SEQ, kvh = (gid / SEQ) % KV, b = gid / ((size_t)SEQ * KV);
    const int g = H / KV;
    const float scale = 1.0f / sqrt((float)HD);
    q += q_o; k += k_o; v += v_o; dout += dout_o; lse += lse_o;
    const size_t ki = (((size_t)b * SEQ + s) * KV + kvh) * HD;
    float kv[HD], vv[HD], ak[HD], av[HD];
    for (int i = 0; i < HD; i++) {
        kv[i] = k[ki + i];
        vv[i] = v[ki + i];
        ak[i] = av[i] = 0.0f;
    }
    for (int hh = kvh * g; hh < (kvh + 1) * g; hh++)
        for (int t = s; t < SEQ; t++) {
            if (has_pos && t - pos[pos_o + (size_t)b * SEQ + t] > s) continue;  // s is outside t's document
            const size_t qi = (((size_t)b * SEQ + t) * H + hh) * HD;
            const size_t ri = ((size_t)b * H + hh) * SEQ + t;
            float dot = 0.0f, dp = 0.0f;
            for (int i = 0; i < HD; i++) dot += q[qi + i] * kv[i];
            for (int i = 0; i < HD; i++) dp += dout[qi + i] * vv[i];
            const float p = exp(dot * scale - lse[ri]);
            const float ds = p * (dp - rowdot[ri]) * scale;
            for (int i = 0; i < HD; i++) {
                ak[i] += ds * q[qi + i];
                av[i] += p * dout[qi + i];
            }
        }
    for (int i = 0; i < HD; i++) {
        dk[dk_o + ki + i] = ak[i];
        dv[dv_o + ki + i] = av[i];
    }
}
#endif

// ------------------------------------------------------------ mixture of experts
// backend.h's "mixture of experts" contracts, one work-item per token (route, gather backward, combine) or
// per row (gather, combine backward), each in cpu-ref's order. The gradients of the routing weights are
// double, so these kernels exist only on a device with fp64 (opencl.c says so on first use otherwise).
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

__kernel void moe_route(__global float *probs, ulong probs_o, __global int *sel, ulong sel_o, __global float *topw,
                        ulong topw_o, __global const float *logits, ulong logits_o, int N, int E, int K, int norm) {
    const int n = get_global_id(0);
    if (n >= N) return;
    __global const float *z = logits + logits_o + (size_t)n * E;
    __global float *p = probs + probs_o + (size_t)n * E;
    __global int *s = sel + sel_o + (size_t)n * K;
    __global float *w = topw + topw_o + (size_t)n * K;
    float mx = z[0], sum = 0.0f, tot = 0.0f;
    for (int e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
    for (int e = 0; e < E; e++) sum += p[e] = (float)exp((double)(z[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= sum;
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= s[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;  // strict: a tie keeps the lower index
        }
        s[j] = best;
        w[j] = p[best];
        tot += w[j];
    }
    if (norm)
        for (int j = 0; j < K; j++) w[j] /= tot;
}

__kernel void moe_route_backward(__global float *dlogits, ulong dl_o, __global const double *dtopw, ulong dw_o,
                                 __global const double *dprob, ulong dp_o, int has_dprob, __global const float *probs,
                                 ulong probs_o, __global const int *sel, ulong sel_o, __global const float *topw,
                                 ulong topw_o, int N, int E, int K, int norm) {
    const int n = get_global_id(0);
    if (n >= N) return;
    __global const float *p = probs + probs_o + (size_t)n * E, *w = topw + topw_o + (size_t)n * K;
    __global const int *s = sel + sel_o + (size_t)n * K;
    __global const double *dw = dtopw + dw_o + (size_t)n * K;
    double tot = 0, wdw = 0, pdp = 0;
    for (int j = 0; j < K; j++) tot += p[s[j]];
    for (int j = 0; j < K; j++) wdw += dw[j] * (double)w[j];
    for (int pass = 0; pass < 2; pass++)
        for (int e = 0; e < E; e++) {
            double dp = has_dprob ? dprob[dp_o + e] : 0.0;
            for (int j = 0; j < K; j++)
                if (s[j] == e) dp += norm ? (dw[j] - wdw) / tot : dw[j];
            if (pass == 0) pdp += (double)p[e] * dp;
            else dlogits[dl_o + (size_t)n * E + e] = (float)((double)p[e] * (dp - pdp));
        }
}

__kernel void moe_combine_backward(__global float *drows, ulong dr_o, __global double *dtopw, ulong dw_o,
                                   __global const float *dout, ulong dout_o, __global const float *rows, ulong rows_o,
                                   __global const float *topw, ulong topw_o, __global const int *row_w, ulong rw_o,
                                   int R, int K, int C, int bf16) {
    const int r = get_global_id(0);
    if (r >= R) return;
    const int wi = row_w[rw_o + r];
    const float w = topw[topw_o + wi];
    __global const float *g = dout + dout_o + (size_t)(wi / K) * C, *v = rows + rows_o + (size_t)r * C;
    __global float *d = drows + dr_o + (size_t)r * C;
    double acc = 0;
    for (int i = 0; i < C; i++) {
        d[i] = bf16 ? bf16_round(g[i] * w) : g[i] * w;
        acc += bf16 ? (double)bf16_round(g[i] * v[i]) : (double)g[i] * v[i];
    }
    dtopw[dw_o + wi] = bf16 ? (double)bf16_round((float)acc) : acc;
}
#endif

// out[r,:] = inp[idx[r],:]: one work-item per element
__kernel void moe_gather(__global float *out, ulong out_o, __global const float *inp, ulong inp_o,
                         __global const int *idx, ulong idx_o, int R, int C) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)R * C) return;
    const size_t r = i / C, c = i % C;
    out[out_o + i] = inp[inp_o + (size_t)idx[idx_o + r] * C + c];
}

// One work-item per (token, column): the token's K rows added from 0 in k order
__kernel void moe_gather_backward(__global float *dinp, ulong dinp_o, __global const float *drows, ulong dr_o,
                                  __global const int *tok_rows, ulong tr_o, int N, int K, int C, int bf16) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)N * C) return;
    const size_t n = i / C, c = i % C;
    float d = 0.0f;
    if (bf16)  // autograd's bf16 sum, the highest expert first
        for (int k = K - 1; k >= 0; k--) d = bf16_round(d + drows[dr_o + (size_t)tok_rows[tr_o + n * K + k] * C + c]);
    else
        for (int k = 0; k < K; k++) d += drows[dr_o + (size_t)tok_rows[tr_o + n * K + k] * C + c];
    dinp[dinp_o + i] = d;
}

__kernel void moe_combine(__global float *out, ulong out_o, __global const float *rows, ulong rows_o,
                          __global const float *topw, ulong topw_o, __global const int *row_w, ulong rw_o,
                          __global const int *tok_rows, ulong tr_o, int N, int K, int C, int bf16) {
    const size_t i = get_global_id(0);
    if (i >= (size_t)N * C) return;
    const size_t n = i / C, c = i % C;
    float o = 0.0f;
    for (int k = 0; k < K; k++) {
        const int r = tok_rows[tr_o + n * K + k];
        const float scaled = rows[rows_o + (size_t)r * C + c] * topw[topw_o + row_w[rw_o + r]];
        o = bf16 ? bf16_round(o + bf16_round(scaled)) : o + scaled;  // bf16: HF's index_add_ into a bf16 tensor
    }
    out[out_o + i] = o;
}
