/* Grouped expert GEMMs on tensor cores through wmma (16x16x16 bf16 ->
 * fp32). See grouped_gemm.h for the contract and the launch scheme.
 *
 * Every kernel computes C[m, n] = sum_k A[m, k] B[k, n] over 64 x 64 output
 * tiles with 4 warps (each a 32 x 32 quarter: 2 x 2 fragments), stepping k
 * by 32. Each k step copies A's and B's 64 x 32 slices to shared memory
 * (rows or columns past the matrix read as 0, so ragged edges and an
 * expert's last partial tile need no special case), then each warp runs its
 * 2 x 2 x 2 mma_sync. The shared tiles keep the global layout's contiguous
 * dimension contiguous, so a copy is 16-byte vectors when the dimensions
 * are multiples of 8 and the pointers 16-byte aligned (VEC), element by
 * element otherwise, and the fragments are loaded row- or column-major to
 * match:
 *                      A (m x k)                B (k x n)
 *   forward            x rows       [m][k]      W[e] rows      [n][k]
 *   backward input     dy rows      [m][k]      W[e] rows      [k][n]
 *   backward weight    dy rows      [k][m]      x rows         [k][n]
 * Tiles whose rows run along k have a row stride of LDK = 32 + 8 elements,
 * the others LDT = 64 + 8: the padding of 16 bytes staggers rows over the
 * shared-memory banks and keeps every fragment's address a multiple of 32
 * bytes, as wmma requires (and every stride a multiple of 8 elements).
 *
 * No double buffering and no asynchronous copies: a block loads, waits,
 * computes, waits; several blocks per SM hide part of the load latency.
 * Simple rather than fast: expect a fraction of cuBLAS's dense bf16 rate
 * (not yet measured). The yardstick is one dense cuBLAS GEMM over the same
 * total rows; the next steps, if it falls short, are cp.async double
 * buffering, 128-row tiles for experts with many rows, and mma.sync with
 * ldmatrix as attention.cu does. */
#include <mma.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/grouped_gemm.h"

using namespace nvcuda;

namespace {

constexpr int BM = 64, BN = 64, BK = 32; /* output tile and k step */
constexpr int THREADS = 128;             /* 4 warps, 2 x 2 over the output tile */
constexpr int LDK = BK + 8;              /* row stride of tiles whose rows run along k */
constexpr int LDT = 64 + 8;              /* row stride of tiles whose rows are one k */
constexpr int LDC = BN + 4;              /* row stride of the fp32 output tile */
constexpr int MAXE = RP_CUDA_MOE_MAX_EXPERTS;

static_assert(BM == 64 && BN == 64, "LDT assumes 64-wide m and n tiles");
static_assert(BK * LDT <= BM * LDK && BK * LDT <= BN * LDK, "tile space is sized by LDK");

/* A and B of one k step (each at most 64 * LDK elements), later reused for
 * the fp32 output tile. */
constexpr int AB_ELEMS = BM * LDK;
constexpr int SMEM_BYTES = (2 * AB_ELEMS * 2 > BM * LDC * 4) ? 2 * AB_ELEMS * 2 : BM * LDC * 4;

/* The per-expert pointers, by value in the kernel's parameters. */
struct WeightPtrs {
    const uint16_t *p[MAXE];
};
struct GradPtrs {
    float *p[MAXE];
};

template <bool KM>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16,
                             typename std::conditional<KM, wmma::col_major, wmma::row_major>::type>;
template <bool KN>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                             typename std::conditional<KN, wmma::row_major, wmma::col_major>::type>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/* Rows 0..R-1, columns 0..C-1 of a shared tile with row stride LD from g
 * (row stride ld elements); rows >= nr and columns >= nc read as 0. VEC:
 * C, nc and ld are multiples of 8 and g is 16-byte aligned, so a vector of
 * 8 is either wholly inside the matrix or wholly outside. */
template <int R, int C, int LD, bool VEC>
__device__ __forceinline__ void load_tile(uint16_t *s, const uint16_t *g, int64_t ld, int nr,
                                          int nc, int tid)
{
    if (VEC) {
        constexpr int CH = C / 8;
        for (int i = tid; i < R * CH; i += THREADS) {
            const int r = i / CH, c = (i % CH) * 8;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r < nr && c < nc)
                v = *reinterpret_cast<const uint4 *>(g + (int64_t)r * ld + c);
            *reinterpret_cast<uint4 *>(s + r * LD + c) = v;
        }
    } else {
        for (int i = tid; i < R * C; i += THREADS) {
            const int r = i / C, c = i % C;
            s[r * LD + c] = (r < nr && c < nc) ? g[(int64_t)r * ld + c] : (uint16_t)0;
        }
    }
}

/* acc += A B over one k step of 32: A_KM stores A as [k][m] (else [m][k]),
 * B_KN stores B as [k][n] (else [n][k]). The warp's quarter is rows wm*32..
 * and columns wn*32.. of the output tile. */
template <bool A_KM, bool B_KN>
__device__ __forceinline__ void mma_step(const uint16_t *As, const uint16_t *Bs, FragC acc[2][2],
                                         int wm, int wn)
{
    const __nv_bfloat16 *a = reinterpret_cast<const __nv_bfloat16 *>(As);
    const __nv_bfloat16 *b = reinterpret_cast<const __nv_bfloat16 *>(Bs);
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        FragA<A_KM> fa[2];
        FragB<B_KN> fb[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int m0 = wm * 32 + i * 16;
            if (A_KM)
                wmma::load_matrix_sync(fa[i], a + kk * LDT + m0, LDT);
            else
                wmma::load_matrix_sync(fa[i], a + m0 * LDK + kk, LDK);
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int n0 = wn * 32 + j * 16;
            if (B_KN)
                wmma::load_matrix_sync(fb[j], b + kk * LDT + n0, LDT);
            else
                wmma::load_matrix_sync(fb[j], b + n0 * LDK + kk, LDK);
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 2; j++)
                wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
}

/* The accumulators into the fp32 tile C [BM][LDC] (the A/B space: callers
 * wait for every warp's last mma_step first, and read C after a barrier). */
__device__ __forceinline__ void store_acc(float *C, FragC acc[2][2], int wm, int wn)
{
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(C + (wm * 32 + i * 16) * LDC + wn * 32 + j * 16, acc[i][j],
                                    LDC, wmma::mem_row_major);
}

__device__ __forceinline__ uint16_t bf16_bits(float v)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* The (expert, rows) of row tile `tile` of the grouped rows, the same in
 * every thread (all threads must call it). Offsets are clamped to [0, rows]
 * and a count below 0 counts as 0, so the rows found lie in [0, rows) for
 * any offsets. start[e] = the tiles of experts before e (a block scan: thread
 * t counts experts 2t and 2t+1, E <= 2 * THREADS); the tile's expert is the
 * last e with start[e] <= tile, which has tiles (start[e+1] > tile).
 * Returns false when tile >= start[E]: the block has no work. */
__device__ bool find_tile(const int32_t *offsets, int E, int64_t rows, int64_t tile, int *e_out,
                          int *row0_out, int *nrows_out)
{
    __shared__ int s_off[MAXE + 1];
    __shared__ int s_start[MAXE + 1];
    __shared__ int s_warp[THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int e = tid; e <= E; e += THREADS) {
        int64_t v = offsets[e];
        v = v < 0 ? 0 : (v > rows ? rows : v);
        s_off[e] = (int)v;
    }
    __syncthreads();
    const int e0 = 2 * tid, e1 = 2 * tid + 1;
    int t0 = 0, t1 = 0;
    if (e0 < E) {
        const int n = s_off[e0 + 1] - s_off[e0];
        t0 = n > 0 ? (n + BM - 1) / BM : 0;
    }
    if (e1 < E) {
        const int n = s_off[e1 + 1] - s_off[e1];
        t1 = n > 0 ? (n + BM - 1) / BM : 0;
    }
    int v = t0 + t1; /* inclusive scan over the warp, then over the warps */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o)
            v += u;
    }
    if (lane == 31)
        s_warp[warp] = v;
    __syncthreads();
    int before = 0;
    for (int w = 0; w < warp; w++)
        before += s_warp[w];
    const int incl = before + v; /* tiles of experts 0..e1 */
    if (e0 < E)
        s_start[e0 + 1] = incl - t1;
    if (e1 < E)
        s_start[e1 + 1] = incl;
    if (tid == 0)
        s_start[0] = 0;
    __syncthreads();
    if (tile >= (int64_t)s_start[E])
        return false;
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if ((int64_t)s_start[mid] <= tile)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int row0 = s_off[lo] + (int)(tile - s_start[lo]) * BM;
    const int n = s_off[lo + 1] - row0;
    *e_out = lo;
    *row0_out = row0;
    *nrows_out = n < BM ? n : BM;
    return true;
}

/* y[r, n] = sum_k x[r, k] W[e][n, k]: block (row tile, column tile of y). */
template <bool VEC>
__global__ void __launch_bounds__(THREADS)
    forward_kernel(const uint16_t *x, WeightPtrs W, const int32_t *offsets, int E, int64_t rows,
                   int64_t in, int64_t out, float *y, uint16_t *yb)
{
    __shared__ __align__(128) unsigned char smem[SMEM_BYTES];
    int e, row0, nr;
    if (!find_tile(offsets, E, rows, blockIdx.x, &e, &row0, &nr))
        return;
    uint16_t *As = reinterpret_cast<uint16_t *>(smem), *Bs = As + AB_ELEMS;
    float *C = reinterpret_cast<float *>(smem);
    const int tid = threadIdx.x, wm = (tid >> 5) >> 1, wn = (tid >> 5) & 1;
    const int64_t n0 = (int64_t)blockIdx.y * BN;
    const int nn = (int)(out - n0 < BN ? out - n0 : BN);
    const uint16_t *We = W.p[e];
    FragC acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    for (int64_t k0 = 0; k0 < in; k0 += BK) {
        const int kc = (int)(in - k0 < BK ? in - k0 : BK);
        load_tile<BM, BK, LDK, VEC>(As, x + (int64_t)row0 * in + k0, in, nr, kc, tid);
        load_tile<BN, BK, LDK, VEC>(Bs, We + n0 * in + k0, in, nn, kc, tid);
        __syncthreads();
        mma_step<false, false>(As, Bs, acc, wm, wn);
        __syncthreads();
    }
    store_acc(C, acc, wm, wn);
    __syncthreads();
    for (int i = tid; i < BM * BN; i += THREADS) {
        const int r = i / BN, c = i % BN;
        if (r < nr && c < nn) {
            const float v = C[r * LDC + c];
            const int64_t o = (int64_t)(row0 + r) * out + n0 + c;
            if (y)
                y[o] = v;
            if (yb)
                yb[o] = bf16_bits(v);
        }
    }
}

/* dx[r, n] (+)= sum_k dy[r, k] W[e][k, n]: block (row tile, column tile of
 * dx). */
template <bool VEC>
__global__ void __launch_bounds__(THREADS)
    backward_input_kernel(const uint16_t *dy, WeightPtrs W, const int32_t *offsets, int E,
                          int64_t rows, int64_t in, int64_t out, float *dx, uint16_t *dxb,
                          int accumulate)
{
    __shared__ __align__(128) unsigned char smem[SMEM_BYTES];
    int e, row0, nr;
    if (!find_tile(offsets, E, rows, blockIdx.x, &e, &row0, &nr))
        return;
    uint16_t *As = reinterpret_cast<uint16_t *>(smem), *Bs = As + AB_ELEMS;
    float *C = reinterpret_cast<float *>(smem);
    const int tid = threadIdx.x, wm = (tid >> 5) >> 1, wn = (tid >> 5) & 1;
    const int64_t n0 = (int64_t)blockIdx.y * BN;
    const int nn = (int)(in - n0 < BN ? in - n0 : BN);
    const uint16_t *We = W.p[e];
    FragC acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    for (int64_t k0 = 0; k0 < out; k0 += BK) {
        const int kc = (int)(out - k0 < BK ? out - k0 : BK);
        load_tile<BM, BK, LDK, VEC>(As, dy + (int64_t)row0 * out + k0, out, nr, kc, tid);
        load_tile<BK, BN, LDT, VEC>(Bs, We + k0 * in + n0, in, kc, nn, tid);
        __syncthreads();
        mma_step<false, true>(As, Bs, acc, wm, wn);
        __syncthreads();
    }
    store_acc(C, acc, wm, wn);
    __syncthreads();
    for (int i = tid; i < BM * BN; i += THREADS) {
        const int r = i / BN, c = i % BN;
        if (r < nr && c < nn) {
            const float v = C[r * LDC + c];
            const int64_t o = (int64_t)(row0 + r) * in + n0 + c;
            if (dx)
                dx[o] = accumulate ? dx[o] + v : v;
            else
                dxb[o] = bf16_bits(v);
        }
    }
}

/* dW[e][m, n] += sum over expert e's rows r, in order, of dy[r, m] x[r, n]:
 * block (column tile of dW over in, row tile over out, expert). */
template <bool VEC>
__global__ void __launch_bounds__(THREADS)
    backward_weight_kernel(const uint16_t *dy, const uint16_t *x, const int32_t *offsets,
                           int64_t rows, int64_t in, int64_t out, GradPtrs dW)
{
    __shared__ __align__(128) unsigned char smem[SMEM_BYTES];
    const int e = blockIdx.z;
    int64_t begin = offsets[e], end = offsets[e + 1];
    begin = begin < 0 ? 0 : (begin > rows ? rows : begin);
    end = end < 0 ? 0 : (end > rows ? rows : end);
    if (end <= begin)
        return; /* no rows: dW[e] is not touched */
    const int64_t count = end - begin;
    uint16_t *As = reinterpret_cast<uint16_t *>(smem), *Bs = As + AB_ELEMS;
    float *C = reinterpret_cast<float *>(smem);
    const int tid = threadIdx.x, wm = (tid >> 5) >> 1, wn = (tid >> 5) & 1;
    const int64_t n0 = (int64_t)blockIdx.x * BN, m0 = (int64_t)blockIdx.y * BM;
    const int nn = (int)(in - n0 < BN ? in - n0 : BN), nm = (int)(out - m0 < BM ? out - m0 : BM);
    FragC acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);
    for (int64_t k0 = 0; k0 < count; k0 += BK) {
        const int kc = (int)(count - k0 < BK ? count - k0 : BK);
        const int64_t r = begin + k0;
        load_tile<BK, BM, LDT, VEC>(As, dy + r * out + m0, out, kc, nm, tid);
        load_tile<BK, BN, LDT, VEC>(Bs, x + r * in + n0, in, kc, nn, tid);
        __syncthreads();
        mma_step<true, true>(As, Bs, acc, wm, wn);
        __syncthreads();
    }
    store_acc(C, acc, wm, wn);
    __syncthreads();
    float *g = dW.p[e];
    for (int i = tid; i < BM * BN; i += THREADS) {
        const int r = i / BN, c = i % BN;
        if (r < nm && c < nn) {
            const int64_t o = (m0 + r) * in + n0 + c;
            g[o] = g[o] + C[r * LDC + c];
        }
    }
}

inline bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* 16-byte copies are possible: both dimensions multiples of 8 and every
 * given pointer 16-byte aligned (NULL, an unused expert, counts as aligned). */
bool vec_ok(int64_t in, int64_t out, const void *a, const void *b, const void *const *W,
            int64_t E)
{
    if (in % 8 != 0 || out % 8 != 0 || !aligned16(a) || !aligned16(b))
        return false;
    if (W)
        for (int64_t e = 0; e < E; e++)
            if (!aligned16(W[e]))
                return false;
    return true;
}

inline int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Grid of the row-tiled kernels: x = row tiles (at most ceil(rows/BM) + E
 * have work), y = column tiles of the output; false when beyond CUDA's
 * grid limits. */
bool row_grid(int64_t rows, int64_t E, int64_t cols, dim3 *grid)
{
    const int64_t gx = cdiv(rows, BM) + E, gy = cdiv(cols, BN);
    if (gx > 0x7fffffff || gy > 65535)
        return false;
    *grid = dim3((unsigned)gx, (unsigned)gy, 1);
    return true;
}

} /* namespace */

extern "C" int rp_cuda_grouped_forward(const uint16_t *x, const void *const *W,
                                       const int32_t *offsets, int64_t nexperts, int64_t rows,
                                       int64_t in, int64_t out, float *y, uint16_t *y_bf16,
                                       void *stream)
{
    if (nexperts < 1 || nexperts > MAXE || rows < 0 || in < 0 || out < 0)
        return (int)cudaErrorInvalidValue;
    if (rows == 0 || out == 0)
        return 0;
    dim3 grid;
    if (!row_grid(rows, nexperts, out, &grid))
        return (int)cudaErrorInvalidValue;
    WeightPtrs w = {};
    for (int64_t e = 0; e < nexperts; e++)
        w.p[e] = static_cast<const uint16_t *>(W[e]);
    cudaStream_t st = rp_stream(stream);
    if (vec_ok(in, out, x, x, W, nexperts))
        forward_kernel<true><<<grid, THREADS, 0, st>>>(x, w, offsets, (int)nexperts, rows, in,
                                                       out, y, y_bf16);
    else
        forward_kernel<false><<<grid, THREADS, 0, st>>>(x, w, offsets, (int)nexperts, rows, in,
                                                        out, y, y_bf16);
    return rp_launch_status();
}

extern "C" int rp_cuda_grouped_backward_input(const uint16_t *dy, const void *const *W,
                                              const int32_t *offsets, int64_t nexperts,
                                              int64_t rows, int64_t in, int64_t out, float *dx,
                                              uint16_t *dx_bf16, int accumulate, void *stream)
{
    if (nexperts < 1 || nexperts > MAXE || rows < 0 || in < 0 || out < 0 || (!dx && !dx_bf16) ||
        (!dx && accumulate))
        return (int)cudaErrorInvalidValue;
    if (rows == 0 || in == 0)
        return 0;
    dim3 grid;
    if (!row_grid(rows, nexperts, in, &grid))
        return (int)cudaErrorInvalidValue;
    WeightPtrs w = {};
    for (int64_t e = 0; e < nexperts; e++)
        w.p[e] = static_cast<const uint16_t *>(W[e]);
    cudaStream_t st = rp_stream(stream);
    if (vec_ok(in, out, dy, dy, W, nexperts))
        backward_input_kernel<true><<<grid, THREADS, 0, st>>>(dy, w, offsets, (int)nexperts, rows,
                                                              in, out, dx, dx_bf16, accumulate);
    else
        backward_input_kernel<false><<<grid, THREADS, 0, st>>>(
            dy, w, offsets, (int)nexperts, rows, in, out, dx, dx_bf16, accumulate);
    return rp_launch_status();
}

extern "C" int rp_cuda_grouped_backward_weight(const uint16_t *dy, const uint16_t *x,
                                               const int32_t *offsets, int64_t nexperts,
                                               int64_t rows, int64_t in, int64_t out,
                                               float *const *dW, void *stream)
{
    if (nexperts < 1 || nexperts > MAXE || rows < 0 || in < 0 || out < 0)
        return (int)cudaErrorInvalidValue;
    if (rows == 0 || in == 0 || out == 0)
        return 0;
    const int64_t gx = cdiv(in, BN), gy = cdiv(out, BM);
    if (gx > 0x7fffffff || gy > 65535)
        return (int)cudaErrorInvalidValue;
    GradPtrs g = {};
    for (int64_t e = 0; e < nexperts; e++)
        g.p[e] = dW[e];
    dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)nexperts);
    cudaStream_t st = rp_stream(stream);
    if (vec_ok(in, out, dy, x, NULL, 0))
        backward_weight_kernel<true><<<grid, THREADS, 0, st>>>(dy, x, offsets, rows, in, out, g);
    else
        backward_weight_kernel<false><<<grid, THREADS, 0, st>>>(dy, x, offsets, rows, in, out, g);
    return rp_launch_status();
}
