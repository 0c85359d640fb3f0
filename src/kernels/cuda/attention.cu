/* Causal GQA flash attention, forward and backward, on tensor cores
 * (mma.sync m16n8k16 bf16 -> fp32). See attention.h for the contract.
 *
 * Fragment layouts used below (PTX ISA, "Matrix fragments for mma.m16n8k16"),
 * with g = lane / 4 and t = lane % 4:
 *   A 16x16 (row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..),
 *                  a3 = (g+8, 2t+8..)               (each a .b32 of two bf16)
 *   B 16x8  (col): b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
 *   C 16x8  fp32 : c0, c1 = (g, 2t), (g, 2t+1); c2, c3 = (g+8, 2t), (g+8, 2t+1)
 * so the C tiles of columns 16j..16j+15 are, packed to bf16, exactly the A
 * fragment of k block j (used for P.V, P^T.dO, dS^T.Q, dS.K).
 * Shared-memory tiles are row-major with rows padded to D + 8 elements
 * (16 bytes): the eight 16-byte rows one ldmatrix phase reads then fall into
 * distinct bank groups. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "kernels/cuda/attention.h"

namespace {

typedef __nv_bfloat16 bf16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kThreads = 128; /* 4 warps per block in every kernel */
constexpr int kRows = 64;     /* query rows (forward, dq) or keys (dk/dv) per block: 16 per warp */

/* ---- PTX wrappers ------------------------------------------------------- */

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, zero-filled when !valid (src is then not read). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* c += a * b (16x8x16, bf16 in, fp32 accumulate). */
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats -> one .b32 of bf16 (lo in the low half: the lower column). */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* ---- fragment loads from padded row-major shared tiles (row stride LD) --- */

/* A fragment of the 16x16 block at (row r0, col c0) of a row-major tile. */
template <int LD> __device__ __forceinline__ void load_a(uint32_t a[4], const bf16 *s, int r0, int c0, int lane)
{
    ldsm_x4(a, s + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + c0 + (lane >> 4) * 8);
}

/* B fragments of two n8 tiles (n0, n0+8) for k block k0, where the tile
 * stores B transposed, i.e. row n holds B[., n] (K for q.k^T, V for do.v^T,
 * Q / dO for the dk/dv kernel's k.q^T and v.do^T): r[0..1] for n0,
 * r[2..3] for n0+8. */
template <int LD> __device__ __forceinline__ void load_b_nk(uint32_t r[4], const bf16 *s, int n0, int k0, int lane)
{
    ldsm_x4(r, s + (n0 + (lane & 7) + (lane >> 4) * 8) * LD + k0 + ((lane >> 3) & 1) * 8);
}

/* B fragments of two n8 tiles (n0, n0+8) for k block k0, where the tile
 * stores B itself, row k holding B[k, .] (V for p.v, dO for p^T.dO, Q for
 * ds^T.q, K for ds.k). */
template <int LD> __device__ __forceinline__ void load_b_kn(uint32_t r[4], const bf16 *s, int k0, int n0, int lane)
{
    ldsm_x4_trans(r, s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8);
}

/* Rows row0..row0+R-1 of one head's [*, hd] slice (row stride `stride`
 * elements) into a padded tile; rows >= nrows and columns >= hd read as 0. */
template <int R, int D>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *base, int64_t stride, int row0,
                                          int nrows, int hd, int tid)
{
    constexpr int LD = D + 8, CH = D / 8;
    for (int c = tid; c < R * CH; c += kThreads) {
        const int r = c / CH, ch = c % CH, row = row0 + r;
        const bool ok = row < nrows && ch * 8 < hd;
        const bf16 *src = ok ? base + (int64_t)row * stride + ch * 8 : base;
        cp_async16(dst + r * LD + ch * 8, src, ok);
    }
}

/* n floats (element stride `stride`) of rows row0.. into shared; 0 past nrows. */
template <int R>
__device__ __forceinline__ void load_vec(float *dst, const float *base, int64_t stride, int row0,
                                         int nrows, int tid)
{
    for (int r = tid; r < R; r += kThreads) {
        const bool ok = row0 + r < nrows;
        cp_async4(dst + r, ok ? base + (int64_t)(row0 + r) * stride : base, ok);
    }
}

struct attn_params {
    const bf16 *q, *k, *v, *dout;
    float *o, *lse, *dq, *dk, *dv;
    bf16 *o16;
    const float *lse_in, *delta;
    const int32_t *seg; /* each token's segment start in its sequence (nullptr: none) */
    const float *sinks; /* gpt-oss: [nheads] sink logits (nullptr: none) */
    int seqlen, nheads, nkv, group, hd;
    int window; /* gpt-oss: W >= 1, query t sees keys t-W < j <= t; 0: none */
    float scale, scale_log2;
};

/* Segment starts are non-decreasing within a sequence, so the earliest key
 * any of rows r0.. sees is seg[r0] (0 without segments). */
__device__ __forceinline__ int seg_lo(const int32_t *sg, int row, int S)
{
    return sg ? sg[min(row, S - 1)] : 0;
}

/* The earliest key row `row` sees: its segment's start, and with a window
 * row - W + 1; non-decreasing in row as seg_lo is, so the earliest key any
 * of rows r0.. sees is row_lo(r0). */
__device__ __forceinline__ int row_lo(const int32_t *sg, int row, int S, int W)
{
    const int lo = seg_lo(sg, row, S);
    return W > 0 ? max(lo, row - W + 1) : lo;
}

/* ---- forward ------------------------------------------------------------ */

template <int D> __host__ __device__ constexpr int fwd_smem_bytes() { return (kRows + 4 * 64) * (D + 8) * 2; }

template <int D> __global__ void __launch_bounds__(kThreads) attn_fwd_kernel(attn_params p)
{
    constexpr int LD = D + 8, BC = 64, KB = D / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem);
    bf16 *sK = sQ + kRows * LD; /* two stages of BC rows */
    bf16 *sV = sK + 2 * BC * LD;

    const int S = p.seqlen, nqt = (S + kRows - 1) / kRows;
    const int qt = nqt - 1 - (int)blockIdx.x; /* longest rows first */
    const int h = blockIdx.y, b = blockIdx.z, g = h / p.group;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gi = lane >> 2, ti = lane & 3;
    const int q0 = qt * kRows, wrow0 = q0 + warp * 16;
    const int64_t tok0 = (int64_t)b * S;
    const int64_t qs = (int64_t)p.nheads * p.hd, ks = (int64_t)p.nkv * p.hd;
    const bf16 *qb = p.q + tok0 * qs + (int64_t)h * p.hd;
    const bf16 *kb = p.k + tok0 * ks + (int64_t)g * p.hd;
    const bf16 *vb = p.v + tok0 * ks + (int64_t)g * p.hd;
    const int last = min(q0 + kRows - 1, S - 1), nkt = last / BC + 1;
    /* document segments and windows: key tiles before the block's earliest
     * visible key are skipped; each row masks the keys before its segment
     * and its window */
    const int32_t *sg = p.seg ? p.seg + tok0 : nullptr;
    const int W = p.window;
    const int j0 = row_lo(sg, q0, S, W) / BC, wlo = row_lo(sg, wrow0, S, W),
              whi = row_lo(sg, wrow0 + 15, S, W);
    int lo[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        lo[i] = row_lo(sg, wrow0 + gi + i * 8, S, W);

    load_tile<kRows, D>(sQ, qb, qs, q0, S, p.hd, tid);
    load_tile<BC, D>(sK + (j0 & 1) * BC * LD, kb, ks, j0 * BC, S, p.hd, tid);
    load_tile<BC, D>(sV + (j0 & 1) * BC * LD, vb, ks, j0 * BC, S, p.hd, tid);
    cp_async_commit();

    uint32_t qf[KB][4];
    float oacc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};

    for (int j = j0; j < nkt; j++) {
        if (j + 1 < nkt) {
            const int st = (j + 1) & 1;
            load_tile<BC, D>(sK + st * BC * LD, kb, ks, (j + 1) * BC, S, p.hd, tid);
            load_tile<BC, D>(sV + st * BC * LD, vb, ks, (j + 1) * BC, S, p.hd, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == j0) {
#pragma unroll
            for (int kk = 0; kk < KB; kk++)
                load_a<LD>(qf[kk], sQ, warp * 16, kk * 16, lane);
        }
        const bf16 *cK = sK + (j & 1) * BC * LD, *cV = sV + (j & 1) * BC * LD;
        const int k0 = j * BC;
        /* some key of the tile is visible to a row of this warp */
        if (k0 <= wrow0 + 15 && k0 + BC > wlo) {
            float s[BC / 8][4];
#pragma unroll
            for (int n = 0; n < BC / 8; n++)
                s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KB; kk++)
#pragma unroll
                for (int nn = 0; nn < BC / 16; nn++) {
                    uint32_t bf[4];
                    load_b_nk<LD>(bf, cK, nn * 16, kk * 16, lane);
                    mma_bf16(s[2 * nn], qf[kk], bf[0], bf[1]);
                    mma_bf16(s[2 * nn + 1], qf[kk], bf[2], bf[3]);
                }
            const bool diag = k0 + BC - 1 > wrow0, below = k0 < whi;
            float mx[2] = {mrow[0], mrow[1]};
#pragma unroll
            for (int n = 0; n < BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float x = s[n][e] * p.scale_log2;
                    if (diag || below) {
                        const int col = k0 + n * 8 + 2 * ti + (e & 1);
                        const int row = wrow0 + gi + (e >> 1) * 8;
                        if (col > row || col < lo[e >> 1])
                            x = -INFINITY;
                    }
                    s[n][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float alpha[2], lsum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                /* a row with nothing visible yet keeps m = -inf: use 0 so the
                 * exponentials below give 0, not NaN */
                const float mref = mx[i] == -INFINITY ? 0.0f : mx[i];
                alpha[i] = exp2f(mrow[i] - mref);
                mrow[i] = mx[i];
                mx[i] = mref;
            }
#pragma unroll
            for (int n = 0; n < BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[n][e] = exp2f(s[n][e] - mx[e >> 1]);
                    lsum[e >> 1] += s[n][e];
                }
#pragma unroll
            for (int i = 0; i < 2; i++)
                lrow[i] = lrow[i] * alpha[i] + lsum[i]; /* per-thread partial; alpha is row-uniform */
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                oacc[n][0] *= alpha[0];
                oacc[n][1] *= alpha[0];
                oacc[n][2] *= alpha[1];
                oacc[n][3] *= alpha[1];
            }
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                uint32_t a[4];
                a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
                a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
                a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int nn = 0; nn < D / 16; nn++) {
                    uint32_t bf[4];
                    load_b_kn<LD>(bf, cV, kk * 16, nn * 16, lane);
                    mma_bf16(oacc[2 * nn], a, bf[0], bf[1]);
                    mma_bf16(oacc[2 * nn + 1], a, bf[2], bf[3]);
                }
            }
        }
        __syncthreads(); /* the next iteration's loads overwrite the other stage */
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
        lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 1);
        lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 2);
    }
    /* a sink: one more logit in the denominator (natural units, unscaled),
     * with no value: the row's sums rescaled to the new maximum */
    float keep[2] = {1.0f, 1.0f};
    if (p.sinks) {
        const float s2 = p.sinks[h] * kLog2e;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float m = fmaxf(mrow[i], s2);
            keep[i] = exp2f(mrow[i] - m);
            lrow[i] = lrow[i] * keep[i] + exp2f(s2 - m);
            mrow[i] = m;
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = wrow0 + gi + i * 8;
        if (row >= S)
            continue;
        const float inv = keep[i] / lrow[i];
        const int64_t at = (tok0 + row) * qs + (int64_t)h * p.hd;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const int col = n * 8 + 2 * ti;
            if (col < p.hd) {
                const float x0 = oacc[n][2 * i] * inv, x1 = oacc[n][2 * i + 1] * inv;
                if (p.o)
                    *reinterpret_cast<float2 *>(p.o + at + col) = make_float2(x0, x1);
                if (p.o16)
                    *reinterpret_cast<__nv_bfloat162 *>(p.o16 + at + col) =
                        __floats2bfloat162_rn(x0, x1);
            }
        }
        if (ti == 0)
            p.lse[(tok0 + row) * p.nheads + h] = (mrow[i] + log2f(lrow[i])) * kLn2;
    }
}

/* ---- backward: delta ------------------------------------------------------ */

/* One warp per (token, head) row. */
__global__ void attn_delta_kernel(const float *o, const float *dout, float *delta, bf16 *dout16,
                                  int64_t rows, int hd)
{
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const float *orow = o + row * hd, *drow = dout + row * hd;
    float acc = 0.0f;
    for (int d = lane; d < hd; d += 32) {
        const float x = drow[d];
        acc += x * orow[d];
        if (dout16)
            dout16[row * hd + d] = __float2bfloat16_rn(x);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0)
        delta[row] = acc;
}

/* The same from bf16 o and dout (the CUDA back end keeps them in bf16). */
__global__ void attn_delta_bf16_kernel(const bf16 *o, const bf16 *dout, float *delta,
                                       int64_t rows, int hd)
{
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows)
        return;
    const bf16 *orow = o + row * hd, *drow = dout + row * hd;
    float acc = 0.0f;
    for (int d = lane; d < hd; d += 32)
        acc += __bfloat162float(drow[d]) * __bfloat162float(orow[d]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0)
        delta[row] = acc;
}

/* ---- backward: the sinks' gradient ------------------------------------------ */

/* One block per head: dsinks[h] += -sum over rows t of exp(sinks[h] -
 * lse[t, h]) * (dout[t, h] . o[t, h]), each row's term in double, summed in
 * a fixed tree (the same bits every run; the CPU sums in row order). */
constexpr int kSinkThreads = 256;
__global__ void __launch_bounds__(kSinkThreads)
    attn_sink_grad_kernel(const bf16 *o, const bf16 *dout, const float *lse, const float *sinks,
                          float *dsinks, int64_t T, int nheads, int hd)
{
    __shared__ double part[kSinkThreads];
    const int h = blockIdx.x;
    const float sink = sinks[h];
    double acc = 0.0;
    for (int64_t t = threadIdx.x; t < T; t += kSinkThreads) {
        const int64_t row = t * nheads + h;
        const bf16 *orow = o + row * hd, *drow = dout + row * hd;
        float d = 0.0f;
        for (int j = 0; j < hd; j++)
            d = __fadd_rn(d, __fmul_rn(__bfloat162float(drow[j]), __bfloat162float(orow[j])));
        acc += (double)expf(sink - lse[row]) * (double)d;
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int half = kSinkThreads / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        dsinks[h] += (float)-part[0];
}

/* ---- backward: dk, dv ----------------------------------------------------- */

template <int D> __host__ __device__ constexpr int dkdv_bq() { return D > 64 ? 32 : 64; }
template <int D> __host__ __device__ constexpr int dkdv_smem_bytes()
{
    return (2 * kRows + 4 * dkdv_bq<D>()) * (D + 8) * 2 + 4 * dkdv_bq<D>() * 4;
}

/* Block: keys c0..c0+63 of kv head g of sequence b; warp w owns keys
 * c0+16w..c0+16w+15 (rows of dk, dv). Loops over query head h of the group
 * and query tiles (BQ rows) from the diagonal on. Everything is computed
 * transposed (keys as rows): S^T = K Q^T, dP^T = V dO^T. */
template <int D> __global__ void __launch_bounds__(kThreads) attn_dkdv_kernel(attn_params p)
{
    constexpr int LD = D + 8, BQ = dkdv_bq<D>(), KB = D / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem);
    bf16 *sV = sK + kRows * LD;
    bf16 *sQ = sV + kRows * LD;  /* 2 stages */
    bf16 *sO = sQ + 2 * BQ * LD; /* dO, 2 stages */
    float *sL = reinterpret_cast<float *>(sO + 2 * BQ * LD); /* lse, 2 stages */
    float *sD = sL + 2 * BQ;                                  /* delta, 2 stages */

    const int S = p.seqlen;
    const int kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gi = lane >> 2, ti = lane & 3;
    const int c0 = kt * kRows, kw0 = c0 + warp * 16;
    const int64_t tok0 = (int64_t)b * S;
    const int64_t qs = (int64_t)p.nheads * p.hd, ks = (int64_t)p.nkv * p.hd;
    /* the query tiles that see a key of this block: from the diagonal to,
     * with document segments, the last row whose segment starts at or
     * before the block's last key (segment starts never decrease) */
    const int32_t *sg = p.seg ? p.seg + tok0 : nullptr;
    int qend = S; /* rows [c0, qend) */
    if (sg) {
        int lo = c0, hi = S;
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (sg[mid] <= c0 + kRows - 1)
                lo = mid + 1;
            else
                hi = mid;
        }
        qend = lo;
    }
    const int W = p.window;
    if (W > 0) /* the last row that sees the block's last key: c0 + kRows - 1 + W - 1 */
        qend = min(qend, c0 + kRows - 1 + W);
    const int i0 = c0 / BQ, nper = max(1, (qend + BQ - 1) / BQ - i0), niter = p.group * nper;

    load_tile<kRows, D>(sK, p.k + tok0 * ks + (int64_t)g * p.hd, ks, c0, S, p.hd, tid);
    load_tile<kRows, D>(sV, p.v + tok0 * ks + (int64_t)g * p.hd, ks, c0, S, p.hd, tid);
    auto issue = [&](int it, int st) {
        const int h = g * p.group + it / nper, qrow0 = (i0 + it % nper) * BQ;
        load_tile<BQ, D>(sQ + st * BQ * LD, p.q + tok0 * qs + (int64_t)h * p.hd, qs, qrow0, S,
                         p.hd, tid);
        load_tile<BQ, D>(sO + st * BQ * LD, p.dout + tok0 * qs + (int64_t)h * p.hd, qs, qrow0, S,
                         p.hd, tid);
        load_vec<BQ>(sL + st * BQ, p.lse_in + tok0 * p.nheads + h, p.nheads, qrow0, S, tid);
        load_vec<BQ>(sD + st * BQ, p.delta + tok0 * p.nheads + h, p.nheads, qrow0, S, tid);
    };
    issue(0, 0);
    cp_async_commit();

    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[n][e] = dv[n][e] = 0.0f;

    for (int it = 0; it < niter; it++) {
        if (it + 1 < niter) {
            issue(it + 1, (it + 1) & 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int st = it & 1, qrow0 = (i0 + it % nper) * BQ;
        const bf16 *cQ = sQ + st * BQ * LD, *cO = sO + st * BQ * LD;
        const float *cL = sL + st * BQ, *cD = sD + st * BQ;
        if (qrow0 + BQ - 1 >= kw0) { /* some query of the tile sees some key of this warp */
            float s[BQ / 8][4], dp[BQ / 8][4];
#pragma unroll
            for (int n = 0; n < BQ / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KB; kk++) {
                uint32_t ak[4], av[4];
                load_a<LD>(ak, sK, warp * 16, kk * 16, lane);
                load_a<LD>(av, sV, warp * 16, kk * 16, lane);
#pragma unroll
                for (int nn = 0; nn < BQ / 16; nn++) {
                    uint32_t bq[4], bo[4];
                    load_b_nk<LD>(bq, cQ, nn * 16, kk * 16, lane);
                    load_b_nk<LD>(bo, cO, nn * 16, kk * 16, lane);
                    mma_bf16(s[2 * nn], ak, bq[0], bq[1]);
                    mma_bf16(s[2 * nn + 1], ak, bq[2], bq[3]);
                    mma_bf16(dp[2 * nn], av, bo[0], bo[1]);
                    mma_bf16(dp[2 * nn + 1], av, bo[2], bo[3]);
                }
            }
            /* s <- P^T, dp <- dS^T = P^T * (dP^T - delta) (scale applied at the end) */
#pragma unroll
            for (int n = 0; n < BQ / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int ql = n * 8 + 2 * ti + (e & 1), qq = qrow0 + ql;
                    const int key = kw0 + gi + (e >> 1) * 8;
                    float pr = 0.0f;
                    if (qq >= key && qq < S && (!sg || sg[qq] <= key) && (W <= 0 || qq - key < W))
                        pr = exp2f(s[n][e] * p.scale_log2 - cL[ql] * kLog2e);
                    s[n][e] = pr;
                    dp[n][e] = pr * (dp[n][e] - cD[ql]);
                }
#pragma unroll
            for (int kq = 0; kq < BQ / 16; kq++) {
                uint32_t ap[4], ad[4];
                ap[0] = pack_bf16(s[2 * kq][0], s[2 * kq][1]);
                ap[1] = pack_bf16(s[2 * kq][2], s[2 * kq][3]);
                ap[2] = pack_bf16(s[2 * kq + 1][0], s[2 * kq + 1][1]);
                ap[3] = pack_bf16(s[2 * kq + 1][2], s[2 * kq + 1][3]);
                ad[0] = pack_bf16(dp[2 * kq][0], dp[2 * kq][1]);
                ad[1] = pack_bf16(dp[2 * kq][2], dp[2 * kq][3]);
                ad[2] = pack_bf16(dp[2 * kq + 1][0], dp[2 * kq + 1][1]);
                ad[3] = pack_bf16(dp[2 * kq + 1][2], dp[2 * kq + 1][3]);
#pragma unroll
                for (int nn = 0; nn < D / 16; nn++) {
                    uint32_t bo[4], bq[4];
                    load_b_kn<LD>(bo, cO, kq * 16, nn * 16, lane);
                    load_b_kn<LD>(bq, cQ, kq * 16, nn * 16, lane);
                    mma_bf16(dv[2 * nn], ap, bo[0], bo[1]);
                    mma_bf16(dv[2 * nn + 1], ap, bo[2], bo[3]);
                    mma_bf16(dk[2 * nn], ad, bq[0], bq[1]);
                    mma_bf16(dk[2 * nn + 1], ad, bq[2], bq[3]);
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int key = kw0 + gi + i * 8;
        if (key >= S)
            continue;
        const int64_t at = (tok0 + key) * ks + (int64_t)g * p.hd;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const int col = n * 8 + 2 * ti;
            if (col < p.hd) {
                *reinterpret_cast<float2 *>(p.dk + at + col) =
                    make_float2(dk[n][2 * i] * p.scale, dk[n][2 * i + 1] * p.scale);
                *reinterpret_cast<float2 *>(p.dv + at + col) =
                    make_float2(dv[n][2 * i], dv[n][2 * i + 1]);
            }
        }
    }
}

/* ---- backward: dq ----------------------------------------------------------- */

template <int D> __host__ __device__ constexpr int dq_bk() { return D > 64 ? 32 : 64; }
template <int D> __host__ __device__ constexpr int dq_smem_bytes() { return (2 * kRows + 4 * dq_bk<D>()) * (D + 8) * 2; }

/* Block: query rows q0..q0+63 of head h of sequence b, 16 per warp; key
 * tiles of BK up to the diagonal. */
template <int D> __global__ void __launch_bounds__(kThreads) attn_dq_kernel(attn_params p)
{
    constexpr int LD = D + 8, BK = dq_bk<D>(), KB = D / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem);
    bf16 *sO = sQ + kRows * LD;
    bf16 *sK = sO + kRows * LD; /* 2 stages */
    bf16 *sV = sK + 2 * BK * LD;

    const int S = p.seqlen, nqt = (S + kRows - 1) / kRows;
    const int qt = nqt - 1 - (int)blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, g = h / p.group;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gi = lane >> 2, ti = lane & 3;
    const int q0 = qt * kRows, wrow0 = q0 + warp * 16;
    const int64_t tok0 = (int64_t)b * S;
    const int64_t qs = (int64_t)p.nheads * p.hd, ks = (int64_t)p.nkv * p.hd;
    const bf16 *kb = p.k + tok0 * ks + (int64_t)g * p.hd;
    const bf16 *vb = p.v + tok0 * ks + (int64_t)g * p.hd;
    const int last = min(q0 + kRows - 1, S - 1), nkt = last / BK + 1;
    const int32_t *sg = p.seg ? p.seg + tok0 : nullptr; /* as the forward */
    const int W = p.window;
    const int j0 = row_lo(sg, q0, S, W) / BK, wlo = row_lo(sg, wrow0, S, W);
    int lo[2];
#pragma unroll
    for (int i = 0; i < 2; i++)
        lo[i] = row_lo(sg, wrow0 + gi + i * 8, S, W);

    load_tile<kRows, D>(sQ, p.q + tok0 * qs + (int64_t)h * p.hd, qs, q0, S, p.hd, tid);
    load_tile<kRows, D>(sO, p.dout + tok0 * qs + (int64_t)h * p.hd, qs, q0, S, p.hd, tid);
    load_tile<BK, D>(sK + (j0 & 1) * BK * LD, kb, ks, j0 * BK, S, p.hd, tid);
    load_tile<BK, D>(sV + (j0 & 1) * BK * LD, vb, ks, j0 * BK, S, p.hd, tid);
    cp_async_commit();

    /* this thread's two rows: lse (log2 units) and delta; rows past the
     * sequence get 0 (their results are never stored) */
    float l2[2], dl[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = wrow0 + gi + i * 8;
        const bool ok = row < S;
        l2[i] = ok ? p.lse_in[(tok0 + row) * p.nheads + h] * kLog2e : 0.0f;
        dl[i] = ok ? p.delta[(tok0 + row) * p.nheads + h] : 0.0f;
    }

    uint32_t qf[KB][4], of[KB][4];
    float dq[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    for (int j = j0; j < nkt; j++) {
        if (j + 1 < nkt) {
            const int st = (j + 1) & 1;
            load_tile<BK, D>(sK + st * BK * LD, kb, ks, (j + 1) * BK, S, p.hd, tid);
            load_tile<BK, D>(sV + st * BK * LD, vb, ks, (j + 1) * BK, S, p.hd, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == j0) {
#pragma unroll
            for (int kk = 0; kk < KB; kk++) {
                load_a<LD>(qf[kk], sQ, warp * 16, kk * 16, lane);
                load_a<LD>(of[kk], sO, warp * 16, kk * 16, lane);
            }
        }
        const bf16 *cK = sK + (j & 1) * BK * LD, *cV = sV + (j & 1) * BK * LD;
        const int k0 = j * BK;
        if (k0 <= wrow0 + 15 && k0 + BK > wlo) {
            float s[BK / 8][4], dp[BK / 8][4];
#pragma unroll
            for (int n = 0; n < BK / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KB; kk++)
#pragma unroll
                for (int nn = 0; nn < BK / 16; nn++) {
                    uint32_t bk[4], bv[4];
                    load_b_nk<LD>(bk, cK, nn * 16, kk * 16, lane);
                    load_b_nk<LD>(bv, cV, nn * 16, kk * 16, lane);
                    mma_bf16(s[2 * nn], qf[kk], bk[0], bk[1]);
                    mma_bf16(s[2 * nn + 1], qf[kk], bk[2], bk[3]);
                    mma_bf16(dp[2 * nn], of[kk], bv[0], bv[1]);
                    mma_bf16(dp[2 * nn + 1], of[kk], bv[2], bv[3]);
                }
#pragma unroll
            for (int n = 0; n < BK / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int col = k0 + n * 8 + 2 * ti + (e & 1);
                    const int row = wrow0 + gi + (e >> 1) * 8;
                    float pr = 0.0f;
                    if (col <= row && col >= lo[e >> 1])
                        pr = exp2f(s[n][e] * p.scale_log2 - l2[e >> 1]);
                    dp[n][e] = pr * (dp[n][e] - dl[e >> 1]);
                }
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                uint32_t a[4];
                a[0] = pack_bf16(dp[2 * kk][0], dp[2 * kk][1]);
                a[1] = pack_bf16(dp[2 * kk][2], dp[2 * kk][3]);
                a[2] = pack_bf16(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
                a[3] = pack_bf16(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
                for (int nn = 0; nn < D / 16; nn++) {
                    uint32_t bk[4];
                    load_b_kn<LD>(bk, cK, kk * 16, nn * 16, lane);
                    mma_bf16(dq[2 * nn], a, bk[0], bk[1]);
                    mma_bf16(dq[2 * nn + 1], a, bk[2], bk[3]);
                }
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = wrow0 + gi + i * 8;
        if (row >= S)
            continue;
        const int64_t at = (tok0 + row) * qs + (int64_t)h * p.hd;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const int col = n * 8 + 2 * ti;
            if (col < p.hd)
                *reinterpret_cast<float2 *>(p.dq + at + col) =
                    make_float2(dq[n][2 * i] * p.scale, dq[n][2 * i + 1] * p.scale);
        }
    }
}

/* ---- conversions and helpers ----------------------------------------------- */

__global__ void f32_to_bf16_kernel(const float *src, bf16 *dst, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

int fail(const char **why, const char *msg)
{
    if (why)
        *why = msg;
    return -1;
}

int cuda_fail(const char **why, cudaError_t e)
{
    if (why)
        *why = cudaGetErrorString(e);
    return -2;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The shape checks every entry point shares; NULL when the shape is usable. */
const char *shape_problem(const rp_attn_shape *s)
{
    if (!s)
        return "attention: shape is NULL";
    if (s->nseq < 1 || s->seqlen < 1 || s->nheads < 1 || s->nkv < 1)
        return "attention: nseq, seqlen, nheads and nkv must be >= 1";
    if (s->nheads % s->nkv != 0)
        return "attention: nheads must be a multiple of nkv";
    if (s->head_dim < 8 || s->head_dim > 128 || s->head_dim % 8 != 0)
        return "attention: head_dim must be a multiple of 8 in [8, 128] on CUDA";
    if (s->seqlen > (int64_t)1 << 30 || s->nheads > 65535 || s->nseq > 65535)
        return "attention: seqlen above 2^30, or nheads or nseq above 65535";
    if (!isfinite(s->scale))
        return "attention: scale is not finite";
    if (s->window < 0 || s->window > (int64_t)1 << 30)
        return "attention: window outside [0, 2^30]";
    return nullptr;
}

attn_params make_params(const rp_attn_shape *s)
{
    attn_params p = {};
    p.seqlen = (int)s->seqlen;
    p.nheads = (int)s->nheads;
    p.nkv = (int)s->nkv;
    p.group = (int)(s->nheads / s->nkv);
    p.hd = (int)s->head_dim;
    p.scale = s->scale;
    p.scale_log2 = s->scale * kLog2e;
    p.seg = s->seg_start;
    p.window = (int)s->window;
    p.sinks = s->sinks;
    return p;
}

/* Launch a kernel needing `smem` dynamic shared bytes (opting in above 48 KiB). */
template <typename K>
cudaError_t launch(K kernel, dim3 grid, int smem, cudaStream_t st, const attn_params &p)
{
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess)
        return e;
    kernel<<<grid, kThreads, smem, st>>>(p);
    return cudaGetLastError();
}

cudaError_t run_forward(const rp_attn_shape *s, attn_params p, cudaStream_t st)
{
    const dim3 grid((unsigned)((s->seqlen + kRows - 1) / kRows), (unsigned)s->nheads,
                    (unsigned)s->nseq);
    if (s->head_dim <= 64)
        return launch(attn_fwd_kernel<64>, grid, fwd_smem_bytes<64>(), st, p);
    return launch(attn_fwd_kernel<128>, grid, fwd_smem_bytes<128>(), st, p);
}

cudaError_t run_backward(const rp_attn_shape *s, attn_params p, cudaStream_t st)
{
    const dim3 gkv((unsigned)((s->seqlen + kRows - 1) / kRows), (unsigned)s->nkv,
                   (unsigned)s->nseq);
    const dim3 gq((unsigned)((s->seqlen + kRows - 1) / kRows), (unsigned)s->nheads,
                  (unsigned)s->nseq);
    cudaError_t e;
    if (s->head_dim <= 64) {
        e = launch(attn_dkdv_kernel<64>, gkv, dkdv_smem_bytes<64>(), st, p);
        if (e == cudaSuccess)
            e = launch(attn_dq_kernel<64>, gq, dq_smem_bytes<64>(), st, p);
    } else {
        e = launch(attn_dkdv_kernel<128>, gkv, dkdv_smem_bytes<128>(), st, p);
        if (e == cudaSuccess)
            e = launch(attn_dq_kernel<128>, gq, dq_smem_bytes<128>(), st, p);
    }
    return e;
}

cudaError_t convert(const float *src, bf16 *dst, size_t n, cudaStream_t st)
{
    if (n == 0)
        return cudaSuccess;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65536)
        blocks = 65536;
    f32_to_bf16_kernel<<<(unsigned)blocks, 256, 0, st>>>(src, dst, n);
    return cudaGetLastError();
}

cudaError_t run_delta(const rp_attn_shape *s, const float *o, const float *dout, float *delta,
                      bf16 *dout16, cudaStream_t st)
{
    const int64_t rows = s->nseq * s->seqlen * s->nheads;
    const int per = 256 / 32;
    attn_delta_kernel<<<(unsigned)((rows + per - 1) / per), 256, 0, st>>>(
        o, dout, delta, dout16, rows, (int)s->head_dim);
    return cudaGetLastError();
}

size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

struct ws_layout {
    size_t q, k, v, dout, delta, total;
};

ws_layout carve(const rp_attn_shape *s)
{
    const size_t T = (size_t)(s->nseq * s->seqlen);
    const size_t nq = T * (size_t)(s->nheads * s->head_dim), nk = T * (size_t)(s->nkv * s->head_dim);
    ws_layout w;
    w.q = 0;
    w.k = w.q + round_up(nq * 2);
    w.v = w.k + round_up(nk * 2);
    w.dout = w.v + round_up(nk * 2);
    w.delta = w.dout + round_up(nq * 2);
    w.total = w.delta + round_up(T * (size_t)s->nheads * 4);
    return w;
}

/* Deterministic pseudo-random fill in [-1, 1) for the bench. */
__global__ void fill_kernel(float *x, size_t n, uint32_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 0x9E3779B1u ^ seed;
        h ^= h >> 16;
        h *= 0x85EBCA6Bu;
        h ^= h >> 13;
        h *= 0xC2B2AE35u;
        h ^= h >> 16;
        x[i] = (float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
    }
}

} // namespace

/* ---- C entry points ------------------------------------------------------- */

extern "C" size_t rp_cuda_attn_workspace_bytes(const rp_attn_shape *s, int backward)
{
    if (shape_problem(s))
        return 0;
    ws_layout w = carve(s);
    return backward ? w.total : w.dout;
}

extern "C" int rp_cuda_f32_to_bf16(const float *src, uint16_t *dst, size_t n, cudaStream_t stream,
                                   const char **why)
{
    if (n && (!src || !dst))
        return fail(why, "f32_to_bf16: NULL buffer");
    cudaError_t e = convert(src, reinterpret_cast<bf16 *>(dst), n, stream);
    return e == cudaSuccess ? 0 : cuda_fail(why, e);
}

extern "C" int rp_cuda_attn_forward_bf16(const rp_attn_shape *s, const uint16_t *q,
                                         const uint16_t *k, const uint16_t *v, float *o,
                                         uint16_t *o16, float *lse, cudaStream_t stream,
                                         const char **why)
{
    const char *bad = shape_problem(s);
    if (bad)
        return fail(why, bad);
    if (!q || !k || !v || (!o && !o16) || !lse)
        return fail(why, "attention forward: NULL buffer (q, k, v, lse, and o or o16)");
    if (!aligned16(q) || !aligned16(k) || !aligned16(v) || ((uintptr_t)o & 7) ||
        ((uintptr_t)o16 & 3) || ((uintptr_t)lse & 3))
        return fail(why, "attention forward: q, k, v must be 16-byte aligned, o 8, o16 and lse 4");
    attn_params p = make_params(s);
    p.q = reinterpret_cast<const bf16 *>(q);
    p.k = reinterpret_cast<const bf16 *>(k);
    p.v = reinterpret_cast<const bf16 *>(v);
    p.o = o;
    p.o16 = reinterpret_cast<bf16 *>(o16);
    p.lse = lse;
    cudaError_t e = run_forward(s, p, stream);
    return e == cudaSuccess ? 0 : cuda_fail(why, e);
}

extern "C" int rp_cuda_attn_delta(const rp_attn_shape *s, const float *o, const float *dout,
                                  float *delta, uint16_t *dout16, cudaStream_t stream,
                                  const char **why)
{
    const char *bad = shape_problem(s);
    if (bad)
        return fail(why, bad);
    if (!o || !dout || !delta)
        return fail(why, "attention delta: NULL buffer");
    cudaError_t e = run_delta(s, o, dout, delta, reinterpret_cast<bf16 *>(dout16), stream);
    return e == cudaSuccess ? 0 : cuda_fail(why, e);
}

extern "C" int rp_cuda_attn_delta_bf16(const rp_attn_shape *s, const uint16_t *o,
                                       const uint16_t *dout, float *delta, cudaStream_t stream,
                                       const char **why)
{
    const char *bad = shape_problem(s);
    if (bad)
        return fail(why, bad);
    if (!o || !dout || !delta)
        return fail(why, "attention delta: NULL buffer");
    const int64_t rows = s->nseq * s->seqlen * s->nheads;
    const int per = 256 / 32;
    attn_delta_bf16_kernel<<<(unsigned)((rows + per - 1) / per), 256, 0, stream>>>(
        reinterpret_cast<const bf16 *>(o), reinterpret_cast<const bf16 *>(dout), delta, rows,
        (int)s->head_dim);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : cuda_fail(why, e);
}

extern "C" int rp_cuda_attn_backward_bf16(const rp_attn_shape *s, const uint16_t *q,
                                          const uint16_t *k, const uint16_t *v,
                                          const uint16_t *dout, const float *lse,
                                          const float *delta, float *dq, float *dk, float *dv,
                                          cudaStream_t stream, const char **why)
{
    const char *bad = shape_problem(s);
    if (bad)
        return fail(why, bad);
    if (!q || !k || !v || !dout || !lse || !delta || !dq || !dk || !dv)
        return fail(why, "attention backward: NULL buffer");
    if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(dout) ||
        ((uintptr_t)lse & 3) || ((uintptr_t)delta & 3) || ((uintptr_t)dq & 7) ||
        ((uintptr_t)dk & 7) || ((uintptr_t)dv & 7))
        return fail(why, "attention backward: q, k, v, dout must be 16-byte aligned, "
                         "dq, dk, dv 8, lse and delta 4");
    attn_params p = make_params(s);
    p.q = reinterpret_cast<const bf16 *>(q);
    p.k = reinterpret_cast<const bf16 *>(k);
    p.v = reinterpret_cast<const bf16 *>(v);
    p.dout = reinterpret_cast<const bf16 *>(dout);
    p.lse_in = lse;
    p.delta = delta;
    p.dq = dq;
    p.dk = dk;
    p.dv = dv;
    cudaError_t e = run_backward(s, p, stream);
    return e == cudaSuccess ? 0 : cuda_fail(why, e);
}

extern "C" int rp_cuda_attn_sink_backward_bf16(const rp_attn_shape *s, const uint16_t *o,
                                               const float *lse, const uint16_t *dout,
                                               float *dsinks, cudaStream_t stream,
                                               const char **why)
{
    const char *bad = shape_problem(s);
    if (bad)
        return fail(why, bad);
    if (!s->sinks)
        return 0;
    if (!o || !lse || !dout || !dsinks)
        return fail(why, "attention sink backward: NULL buffer");
    attn_sink_grad_kernel<<<(unsigned)s->nheads, kSinkThreads, 0, stream>>>(
        reinterpret_cast<const bf16 *>(o), reinterpret_cast<const bf16 *>(dout), lse, s->sinks,
        dsinks, s->nseq * s->seqlen, (int)s->nheads, (int)s->head_dim);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : cuda_fail(why, e);
}

extern "C" int rp_cuda_attn_forward(const rp_attn_shape *s, const float *q, const float *k,
                                    const float *v, float *o, float *lse, void *ws,
                                    size_t ws_bytes, cudaStream_t stream, const char **why)
{
    const char *bad = shape_problem(s);
    if (bad)
        return fail(why, bad);
    if (!q || !k || !v || !o || !lse || !ws)
        return fail(why, "attention forward: NULL buffer");
    ws_layout w = carve(s);
    if (ws_bytes < w.dout)
        return fail(why, "attention forward: workspace smaller than rp_cuda_attn_workspace_bytes");
    if (!aligned16(ws))
        return fail(why, "attention forward: workspace must be 16-byte aligned");
    unsigned char *base = static_cast<unsigned char *>(ws);
    uint16_t *q16 = reinterpret_cast<uint16_t *>(base + w.q);
    uint16_t *k16 = reinterpret_cast<uint16_t *>(base + w.k);
    uint16_t *v16 = reinterpret_cast<uint16_t *>(base + w.v);
    const size_t T = (size_t)(s->nseq * s->seqlen);
    cudaError_t e = convert(q, reinterpret_cast<bf16 *>(q16), T * (size_t)(s->nheads * s->head_dim), stream);
    if (e == cudaSuccess)
        e = convert(k, reinterpret_cast<bf16 *>(k16), T * (size_t)(s->nkv * s->head_dim), stream);
    if (e == cudaSuccess)
        e = convert(v, reinterpret_cast<bf16 *>(v16), T * (size_t)(s->nkv * s->head_dim), stream);
    if (e != cudaSuccess)
        return cuda_fail(why, e);
    return rp_cuda_attn_forward_bf16(s, q16, k16, v16, o, nullptr, lse, stream, why);
}

extern "C" int rp_cuda_attn_backward(const rp_attn_shape *s, const float *q, const float *k,
                                     const float *v, const float *o, const float *lse,
                                     const float *dout, float *dq, float *dk, float *dv, void *ws,
                                     size_t ws_bytes, cudaStream_t stream, const char **why)
{
    const char *bad = shape_problem(s);
    if (bad)
        return fail(why, bad);
    if (!q || !k || !v || !o || !lse || !dout || !dq || !dk || !dv || !ws)
        return fail(why, "attention backward: NULL buffer");
    ws_layout w = carve(s);
    if (ws_bytes < w.total)
        return fail(why, "attention backward: workspace smaller than rp_cuda_attn_workspace_bytes");
    if (!aligned16(ws))
        return fail(why, "attention backward: workspace must be 16-byte aligned");
    unsigned char *base = static_cast<unsigned char *>(ws);
    uint16_t *q16 = reinterpret_cast<uint16_t *>(base + w.q);
    uint16_t *k16 = reinterpret_cast<uint16_t *>(base + w.k);
    uint16_t *v16 = reinterpret_cast<uint16_t *>(base + w.v);
    uint16_t *do16 = reinterpret_cast<uint16_t *>(base + w.dout);
    float *delta = reinterpret_cast<float *>(base + w.delta);
    const size_t T = (size_t)(s->nseq * s->seqlen);
    cudaError_t e = convert(q, reinterpret_cast<bf16 *>(q16), T * (size_t)(s->nheads * s->head_dim), stream);
    if (e == cudaSuccess)
        e = convert(k, reinterpret_cast<bf16 *>(k16), T * (size_t)(s->nkv * s->head_dim), stream);
    if (e == cudaSuccess)
        e = convert(v, reinterpret_cast<bf16 *>(v16), T * (size_t)(s->nkv * s->head_dim), stream);
    if (e == cudaSuccess)
        e = run_delta(s, o, dout, delta, reinterpret_cast<bf16 *>(do16), stream);
    if (e != cudaSuccess)
        return cuda_fail(why, e);
    return rp_cuda_attn_backward_bf16(s, q16, k16, v16, do16, lse, delta, dq, dk, dv, stream, why);
}

extern "C" double rp_cuda_attn_flops(const rp_attn_shape *s, int backward)
{
    const double S = (double)s->seqlen;
    const double fwd = 4.0 * (S * S / 2.0) * (double)s->head_dim * (double)s->nheads *
                       (double)s->nseq;
    return backward ? 2.5 * fwd : fwd;
}

extern "C" int rp_cuda_attn_bench(int dev, const rp_attn_shape *s, int iters, double *fwd_tflops,
                                  double *bwd_tflops, const char **why)
{
    const char *bad = shape_problem(s);
    if (bad)
        return fail(why, bad);
    if (iters < 1 || !fwd_tflops || !bwd_tflops)
        return fail(why, "attention bench: iters must be >= 1 and the result pointers set");
    const size_t T = (size_t)(s->nseq * s->seqlen);
    const size_t nq = T * (size_t)(s->nheads * s->head_dim), nk = T * (size_t)(s->nkv * s->head_dim);
    const size_t nl = T * (size_t)s->nheads;
    float *f32 = nullptr; /* q, k, v, o, dout (fp32), lse, delta, dq, dk, dv */
    bf16 *b16 = nullptr;  /* q, k, v, dout (bf16) */
    cudaEvent_t ev[3] = {nullptr, nullptr, nullptr};
    const size_t nf = 2 * nq + 2 * nk + nq + 2 * nl + nq + 2 * nk; /* q k v o do lse delta dq dk dv */
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess)
        e = cudaMalloc(&f32, nf * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMalloc(&b16, (2 * nq + 2 * nk) * sizeof(bf16));
    for (int i = 0; i < 3 && e == cudaSuccess; i++)
        e = cudaEventCreate(&ev[i]);
    int rc = 0;
    if (e == cudaSuccess) {
        float *fq = f32, *fk = fq + nq, *fv = fk + nk, *fo = fv + nk, *fdo = fo + nq;
        float *flse = fdo + nq, *fdl = flse + nl, *fdq = fdl + nl, *fdk = fdq + nq,
              *fdv = fdk + nk;
        bf16 *bq = b16, *bk = bq + nq, *bv = bk + nk, *bdo = bv + nk;
        fill_kernel<<<1024, 256>>>(f32, nf, 12345u);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = convert(fq, bq, nq, 0);
        if (e == cudaSuccess) e = convert(fk, bk, nk, 0);
        if (e == cudaSuccess) e = convert(fv, bv, nk, 0);
        if (e == cudaSuccess) e = convert(fdo, bdo, nq, 0);
        attn_params p = make_params(s);
        p.q = bq; p.k = bk; p.v = bv; p.dout = bdo;
        p.o = fo; p.lse = flse; p.lse_in = flse; p.delta = fdl;
        p.dq = fdq; p.dk = fdk; p.dv = fdv;
        /* warm-up, then timed runs */
        for (int pass = 0; pass < 2 && e == cudaSuccess; pass++) {
            const int n = pass ? iters : 1;
            if (e == cudaSuccess) e = cudaEventRecord(ev[0], 0);
            for (int i = 0; i < n && e == cudaSuccess; i++)
                e = run_forward(s, p, 0);
            if (e == cudaSuccess) e = cudaEventRecord(ev[1], 0);
            for (int i = 0; i < n && e == cudaSuccess; i++) {
                e = run_delta(s, fo, fdo, fdl, nullptr, 0);
                if (e == cudaSuccess) e = run_backward(s, p, 0);
            }
            if (e == cudaSuccess) e = cudaEventRecord(ev[2], 0);
            if (e == cudaSuccess) e = cudaEventSynchronize(ev[2]);
        }
        float tf = 0, tb = 0;
        if (e == cudaSuccess) e = cudaEventElapsedTime(&tf, ev[0], ev[1]);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&tb, ev[1], ev[2]);
        if (e == cudaSuccess) {
            *fwd_tflops = rp_cuda_attn_flops(s, 0) * iters / (tf * 1e-3) / 1e12;
            *bwd_tflops = rp_cuda_attn_flops(s, 1) * iters / (tb * 1e-3) / 1e12;
        }
    }
    if (e != cudaSuccess)
        rc = cuda_fail(why, e);
    for (int i = 0; i < 3; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    cudaFree(f32);
    cudaFree(b16);
    return rc;
}
