/* Mixture-of-experts kernels around the grouped GEMMs; see moe.h. Sums the
 * contracts put in a fixed order are serial chains here too (in one thread,
 * or every lane of a warp adding the lanes' terms in lane order after a
 * shuffle), with __fadd_rn / __fmul_rn / __dadd_rn / __dmul_rn / __d*_rn so
 * nvcc forms no fused multiply-add. */

#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/sort.h"

namespace {

constexpr unsigned FULL = 0xffffffffu;
constexpr int WARP_THREADS = 128; /* 4 rows per block in the warp-per-row kernels */

__device__ __forceinline__ float bf16_to_f32(uint16_t b)
{
    return __uint_as_float((unsigned)b << 16);
}

__device__ __forceinline__ uint16_t bf16_bits(float v)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* Rows (or grouped rows) handled by warps: the first index of this warp
 * and the stride over all warps of the grid. */
__device__ __forceinline__ int64_t warp_first()
{
    return ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
}

__device__ __forceinline__ int64_t warp_stride()
{
    return ((int64_t)gridDim.x * blockDim.x) >> 5;
}

unsigned warp_grid(int64_t rows)
{
    return rp_grid_for(rows, WARP_THREADS / 32);
}

/* ---- routing ------------------------------------------------------------- */

/* Whether expert a with probability pa ranks before expert b with pb:
 * larger first, ties to the lower index, a NaN after every number (and
 * NaNs by index). A strict total order on (probability, index) pairs. */
__device__ __forceinline__ bool ranks_before(float pa, int a, float pb, int b)
{
    const bool na = isnan(pa), nb = isnan(pb);
    if (na || nb)
        return na == nb ? a < b : nb;
    return pa > pb || (pa == pb && a < b);
}

__global__ void route_kernel(const float *logits, int64_t rows, int E, int k, int norm_topk,
                             float *probs, int32_t *experts, float *weights)
{
    const int lane = threadIdx.x & 31;
    for (int64_t t = warp_first(); t < rows; t += warp_stride()) {
        const float *l = logits + t * E;
        float *p = probs + t * E;
        /* the max by the CPU's left-to-right scan (the same NaN behaviour) */
        float mx = 0.0f;
        if (lane == 0) {
            mx = l[0];
            for (int e = 1; e < E; e++)
                mx = l[e] > mx ? l[e] : mx;
        }
        mx = __shfl_sync(FULL, mx, 0);
        for (int e = lane; e < E; e += 32)
            p[e] = expf(l[e] - mx);
        __syncwarp(); /* lane 0 reads every lane's p */
        float sum = 0.0f;
        if (lane == 0)
            for (int e = 0; e < E; e++)
                sum = __fadd_rn(sum, p[e]);
        sum = __shfl_sync(FULL, sum, 0); /* after lane 0's reads: p may change now */
        for (int e = lane; e < E; e += 32)
            p[e] = __fdiv_rn(p[e], sum);
        /* slot s: the best expert ranking after slot s-1's; each lane
         * scans its own experts (its own writes above), then the warp takes
         * the best of the lanes' (a maximum under a total order, the same in
         * every lane whatever the shuffle order) */
        float pv = 0.0f;
        int pi = -1;
        for (int s = 0; s < k; s++) {
            float bv = 0.0f;
            int bi = -1;
            for (int e = lane; e < E; e += 32) {
                const float v = p[e];
                if (s > 0 && !ranks_before(pv, pi, v, e))
                    continue;
                if (bi < 0 || ranks_before(v, e, bv, bi)) {
                    bv = v;
                    bi = e;
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(FULL, bv, o);
                const int oi = __shfl_xor_sync(FULL, bi, o);
                if (oi >= 0 && (bi < 0 || ranks_before(ov, oi, bv, bi))) {
                    bv = ov;
                    bi = oi;
                }
            }
            /* k <= E: E - s >= 1 experts rank after the previous slot's,
             * so bi >= 0 */
            pv = bv;
            pi = bi;
            if (lane == 0) {
                experts[t * k + s] = bi;
                weights[t * k + s] = bv;
            }
        }
        if (norm_topk && lane == 0) { /* lane 0 wrote every weight of the row */
            float *w = weights + t * k;
            float z = 0.0f;
            for (int s = 0; s < k; s++)
                z = __fadd_rn(z, w[s]);
            for (int s = 0; s < k; s++)
                w[s] = __fdiv_rn(w[s], z);
        }
    }
}

/* ---- grouping ------------------------------------------------------------ */

size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* The first index of keys [n] (ascending) holding a value >= v (n if none). */
__device__ int32_t lower_bound(const int32_t *keys, int64_t n, int64_t v)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if ((int64_t)keys[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int32_t)lo;
}

/* After the sort: where = the inverse of order, offsets[e] = the first
 * sorted position of an expert >= e (offsets[E] = n). */
__global__ void group_finish_kernel(const int32_t *keys, const int32_t *order, int64_t n, int E,
                                    int32_t *offsets, int32_t *where)
{
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = first; j < n; j += stride)
        where[order[j]] = (int32_t)j;
    for (int64_t e = first; e <= E; e += stride)
        offsets[e] = lower_bound(keys, n, e);
}

/* ---- statistics ---------------------------------------------------------- */

__global__ void stats_kernel(const float *__restrict__ probs, const int32_t *__restrict__ offsets,
                             int64_t rows, int E, float *__restrict__ stats)
{
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E)
        return;
    double acc = 0.0;
    const float *p = probs + e;
#pragma unroll 8
    for (int64_t t = 0; t < rows; t++)
        acc = __dadd_rn(acc, (double)p[t * E]);
    stats[e] = (float)(offsets[e + 1] - offsets[e]);
    stats[E + e] = (float)acc;
}

/* ---- gather, scatter-add, combine ---------------------------------------- */

/* a bf16 value times w in fp32, rounded to bf16 */
__device__ __forceinline__ uint32_t scale_bf16(uint32_t b, float w)
{
    return bf16_bits(__fmul_rn(w, bf16_to_f32((uint16_t)b)));
}

/* two packed bf16 values (the lower element in the low half), each scaled */
__device__ __forceinline__ uint32_t scale_pair(uint32_t v, float w)
{
    return scale_bf16(v & 0xffffu, w) | (scale_bf16(v >> 16, w) << 16);
}

/* One block per grouped row j; VEC: cols % 8 == 0 and both tensors 16-byte
 * aligned, so rows are whole 16-byte vectors. */
template <bool VEC>
__global__ void gather_kernel(const uint16_t *x, const int32_t *order, const float *weights,
                              int64_t n, int k, int64_t cols, uint16_t *xg)
{
    for (int64_t j = blockIdx.x; j < n; j += gridDim.x) {
        const int64_t p = order[j];
        const uint16_t *src = x + (p / k) * cols;
        uint16_t *dst = xg + j * cols;
        const float w = weights ? weights[p] : 1.0f;
        if (VEC) {
            const uint4 *s4 = reinterpret_cast<const uint4 *>(src);
            uint4 *d4 = reinterpret_cast<uint4 *>(dst);
            for (int64_t i = threadIdx.x; i < cols / 8; i += blockDim.x) {
                uint4 v = s4[i];
                if (weights) {
                    v.x = scale_pair(v.x, w);
                    v.y = scale_pair(v.y, w);
                    v.z = scale_pair(v.z, w);
                    v.w = scale_pair(v.w, w);
                }
                d4[i] = v;
            }
        } else {
            for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
                dst[c] = weights ? (uint16_t)scale_bf16(src[c], w) : src[c];
        }
    }
}

/* One block per token t, threads over columns. */
__global__ void scatter_add_kernel(const float *dxg, const int32_t *where, int64_t rows, int k,
                                   int64_t cols, float *dx, int accumulate)
{
    for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
        const int32_t *wt = where + t * k;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float acc = 0.0f;
            for (int s = 0; s < k; s++)
                acc = __fadd_rn(acc, dxg[(int64_t)wt[s] * cols + c]);
            float *d = dx + t * cols + c;
            *d = accumulate ? __fadd_rn(*d, acc) : acc;
        }
    }
}

__global__ void combine_kernel(const float *yg, const float *weights, const int32_t *where,
                               const float *residual, int64_t rows, int k, int64_t cols, float *y)
{
    for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
        const int32_t *wt = where + t * k;
        const float *wr = weights + t * k;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float acc = 0.0f;
            for (int s = 0; s < k; s++)
                acc = __fadd_rn(acc, __fmul_rn(wr[s], yg[(int64_t)wt[s] * cols + c]));
            const int64_t o = t * cols + c;
            y[o] = residual ? __fadd_rn(residual[o], acc) : acc;
        }
    }
}

/* ---- backwards ------------------------------------------------------------ */

/* One warp per grouped row j: lanes take 32 columns at a time; every lane
 * adds the 32 products in column order (the same chain in every lane). Each
 * lane reads z[j, c] before it writes dm[j, c], so dm may be z. */
__global__ void down_backward_kernel(const float *z, const uint16_t *m, const float *weights,
                                     const int32_t *order, int64_t n, int64_t cols, float *dm,
                                     uint16_t *dmb, float *dweights)
{
    const int lane = threadIdx.x & 31;
    for (int64_t j = warp_first(); j < n; j += warp_stride()) {
        const int64_t p = order[j];
        const float w = weights[p];
        const float *zr = z + j * cols;
        const uint16_t *mr = m + j * cols;
        double acc = 0.0;
        for (int64_t c0 = 0; c0 < cols; c0 += 32) {
            const int64_t c = c0 + lane;
            float zv = 0.0f;
            double prod = 0.0;
            if (c < cols) {
                zv = zr[c];
                prod = __dmul_rn((double)zv, (double)bf16_to_f32(mr[c]));
            }
            const int nv = cols - c0 < 32 ? (int)(cols - c0) : 32;
            for (int i = 0; i < nv; i++)
                acc = __dadd_rn(acc, __shfl_sync(FULL, prod, i));
            if (c < cols) {
                const float d = __fmul_rn(w, zv);
                if (dm)
                    dm[j * cols + c] = d;
                if (dmb)
                    dmb[j * cols + c] = bf16_bits(d);
            }
        }
        if (lane == 0)
            dweights[p] = (float)acc;
    }
}

/* p[e] widened, or a NaN for an expert outside [0, E) (never read) */
__device__ __forceinline__ double prob_at(const float *p, int32_t e, int E)
{
    return (e >= 0 && e < E) ? (double)p[e] : (double)NAN;
}

/* d loss / d p_e: aux_grad[e] plus, for each slot holding e, (dw_s - s1) / z
 * (z = 1, s1 = 0 without renormalisation), added in slot order. */
__device__ double prob_grad(int e, const int32_t *ex, const float *dw, int k, double z, double s1,
                            const float *aux_grad)
{
    double g = aux_grad ? (double)aux_grad[e] : 0.0;
    for (int s = 0; s < k; s++)
        if (ex[s] == e)
            g = __dadd_rn(g, __ddiv_rn(__dsub_rn((double)dw[s], s1), z));
    return g;
}

__global__ void route_backward_kernel(const float *probs, const int32_t *experts,
                                      const float *dweights, const float *aux_grad, int64_t rows,
                                      int E, int k, int norm_topk, float *dlogits,
                                      uint16_t *dlogits_b)
{
    const int lane = threadIdx.x & 31;
    for (int64_t t = warp_first(); t < rows; t += warp_stride()) {
        const float *p = probs + t * E, *dw = dweights + t * k;
        const int32_t *ex = experts + t * k;
        /* every lane computes z and s1 (k terms each, in slot order) */
        double z = 1.0, s1 = 0.0;
        if (norm_topk) {
            z = 0.0;
            for (int s = 0; s < k; s++)
                z = __dadd_rn(z, prob_at(p, ex[s], E));
            for (int s = 0; s < k; s++)
                s1 = __dadd_rn(s1, __dmul_rn((double)dw[s], __ddiv_rn(prob_at(p, ex[s], E), z)));
        }
        /* dot = sum over e in order of p_e * g_e */
        double dot = 0.0;
        for (int e0 = 0; e0 < E; e0 += 32) {
            const int e = e0 + lane;
            double prod = 0.0;
            if (e < E)
                prod = __dmul_rn((double)p[e], prob_grad(e, ex, dw, k, z, s1, aux_grad));
            const int nv = E - e0 < 32 ? E - e0 : 32;
            for (int i = 0; i < nv; i++)
                dot = __dadd_rn(dot, __shfl_sync(FULL, prod, i));
        }
        for (int e = lane; e < E; e += 32) {
            const double g = prob_grad(e, ex, dw, k, z, s1, aux_grad);
            const float v = (float)__dmul_rn((double)p[e], __dsub_rn(g, dot));
            dlogits[t * E + e] = v;
            if (dlogits_b)
                dlogits_b[t * E + e] = bf16_bits(v);
        }
    }
}

inline bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* blocks of the block-per-row kernels: one per row, at most rp_grid_for's cap */
unsigned row_blocks(int64_t rows)
{
    return rp_grid_for(rows, 1);
}

/* threads of a block-per-row kernel over `cols` columns */
int row_threads(int64_t cols)
{
    return cols >= 256 ? 256 : (cols > 64 ? 128 : 64);
}

} /* namespace */

extern "C" int rp_cuda_moe_route(const float *logits, int64_t rows, int64_t nexperts, int64_t topk,
                                 int norm_topk, float *probs, int32_t *experts, float *weights,
                                 void *stream)
{
    if (nexperts < 1 || nexperts > 0x7fffffff || topk < 1 || topk > nexperts || rows < 0)
        return (int)cudaErrorInvalidValue;
    if (rows == 0)
        return 0;
    route_kernel<<<warp_grid(rows), WARP_THREADS, 0, rp_stream(stream)>>>(
        logits, rows, (int)nexperts, (int)topk, norm_topk, probs, experts, weights);
    return rp_launch_status();
}

extern "C" int rp_cuda_moe_group_scratch(int64_t npairs, int64_t nexperts, size_t *bytes)
{
    *bytes = 0;
    if (npairs < 0 || npairs > 0x7fffffff || nexperts < 1)
        return (int)cudaErrorInvalidValue;
    const int n = npairs > 0 ? (int)npairs : 1;
    size_t cub_bytes = 0;
    int e = rp_cuda_sort_positions_scratch(n, rp_cuda_sort_key_bits(nexperts), &cub_bytes);
    *bytes = align256((size_t)n * sizeof(int32_t)) + align256(cub_bytes);
    return e;
}

extern "C" int rp_cuda_moe_group(const int32_t *experts, int64_t npairs, int64_t nexperts,
                                 int32_t *offsets, int32_t *order, int32_t *where, void *scratch,
                                 size_t scratch_bytes, void *stream)
{
    if (npairs < 0 || npairs > 0x7fffffff || nexperts < 1 || nexperts > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    cudaStream_t st = rp_stream(stream);
    if (npairs == 0)
        return (int)cudaMemsetAsync(offsets, 0, sizeof(int32_t) * (size_t)(nexperts + 1), st);
    const size_t keys_bytes = align256((size_t)npairs * sizeof(int32_t));
    if (scratch_bytes < keys_bytes)
        return (int)cudaErrorInvalidValue;
    int32_t *keys = (int32_t *)scratch;
    void *tmp = (char *)scratch + keys_bytes;
    size_t tmp_bytes = scratch_bytes - keys_bytes;
    /* where holds the pair indices the sort carries (positions in), order
     * receives them sorted (positions out) */
    int e = rp_cuda_sort_positions(experts, npairs, rp_cuda_sort_key_bits(nexperts), keys, where,
                                   order, tmp, tmp_bytes, stream);
    if (e != 0)
        return e;
    const int64_t span = npairs > nexperts + 1 ? npairs : nexperts + 1;
    group_finish_kernel<<<rp_grid_for(span, 256), 256, 0, st>>>(keys, order, npairs,
                                                                (int)nexperts, offsets, where);
    return rp_launch_status();
}

extern "C" int rp_cuda_moe_stats(const float *probs, const int32_t *offsets, int64_t rows,
                                 int64_t nexperts, float *stats, void *stream)
{
    if (nexperts < 1 || nexperts > 0x7fffffff || rows < 0)
        return (int)cudaErrorInvalidValue;
    /* one warp per block: the experts' serial chains spread over SMs */
    stats_kernel<<<(unsigned)((nexperts + 31) / 32), 32, 0, rp_stream(stream)>>>(
        probs, offsets, rows, (int)nexperts, stats);
    return rp_launch_status();
}

extern "C" int rp_cuda_moe_gather(const uint16_t *x, const int32_t *order, const float *weights,
                                  int64_t rows, int64_t topk, int64_t cols, uint16_t *xg,
                                  void *stream)
{
    if (rows < 0 || topk < 1 || topk > 0x7fffffff || cols < 0)
        return (int)cudaErrorInvalidValue;
    const int64_t n = rows * topk;
    if (n == 0 || cols == 0)
        return 0;
    const bool vec = cols % 8 == 0 && aligned16(x) && aligned16(xg);
    const int threads = row_threads(vec ? cols / 8 : cols);
    cudaStream_t st = rp_stream(stream);
    if (vec)
        gather_kernel<true><<<row_blocks(n), threads, 0, st>>>(x, order, weights, n, (int)topk,
                                                               cols, xg);
    else
        gather_kernel<false><<<row_blocks(n), threads, 0, st>>>(x, order, weights, n, (int)topk,
                                                                cols, xg);
    return rp_launch_status();
}

extern "C" int rp_cuda_moe_scatter_add(const float *dxg, const int32_t *where, int64_t rows,
                                       int64_t topk, int64_t cols, float *dx, int accumulate,
                                       void *stream)
{
    if (rows < 0 || topk < 1 || topk > 0x7fffffff || cols < 0)
        return (int)cudaErrorInvalidValue;
    if (rows == 0 || cols == 0)
        return 0;
    scatter_add_kernel<<<row_blocks(rows), row_threads(cols), 0, rp_stream(stream)>>>(
        dxg, where, rows, (int)topk, cols, dx, accumulate);
    return rp_launch_status();
}

extern "C" int rp_cuda_moe_combine(const float *yg, const float *weights, const int32_t *where,
                                   const float *residual, int64_t rows, int64_t topk, int64_t cols,
                                   float *y, void *stream)
{
    if (rows < 0 || topk < 1 || topk > 0x7fffffff || cols < 0)
        return (int)cudaErrorInvalidValue;
    if (rows == 0 || cols == 0)
        return 0;
    combine_kernel<<<row_blocks(rows), row_threads(cols), 0, rp_stream(stream)>>>(
        yg, weights, where, residual, rows, (int)topk, cols, y);
    return rp_launch_status();
}

extern "C" int rp_cuda_moe_down_backward(const float *z, const uint16_t *m, const float *weights,
                                         const int32_t *order, int64_t rows, int64_t topk,
                                         int64_t cols, float *dm, uint16_t *dm_bf16,
                                         float *dweights, void *stream)
{
    if (rows < 0 || topk < 1 || cols < 0)
        return (int)cudaErrorInvalidValue;
    const int64_t n = rows * topk;
    if (n == 0)
        return 0;
    down_backward_kernel<<<warp_grid(n), WARP_THREADS, 0, rp_stream(stream)>>>(
        z, m, weights, order, n, cols, dm, dm_bf16, dweights);
    return rp_launch_status();
}

extern "C" int rp_cuda_moe_route_backward(const float *probs, const int32_t *experts,
                                          const float *dweights, const float *aux_grad,
                                          int64_t rows, int64_t nexperts, int64_t topk,
                                          int norm_topk, float *dlogits, uint16_t *dlogits_bf16,
                                          void *stream)
{
    if (nexperts < 1 || nexperts > 0x7fffffff || topk < 1 || topk > nexperts || rows < 0)
        return (int)cudaErrorInvalidValue;
    if (rows == 0)
        return 0;
    route_backward_kernel<<<warp_grid(rows), WARP_THREADS, 0, rp_stream(stream)>>>(
        probs, experts, dweights, aux_grad, rows, (int)nexperts, (int)topk, norm_topk, dlogits,
        dlogits_bf16);
    return rp_launch_status();
}
