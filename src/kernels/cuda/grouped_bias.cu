/* gpt-oss's expert biases on the GPU (see grouped_bias.h). */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/grouped_bias.h"
#include "kernels/cuda/grouped_gemm.h"

namespace {

constexpr int MAXE = RP_CUDA_MOE_MAX_EXPERTS;

struct BiasPtrs {
    const float *p[MAXE];
};

struct GradPtrs {
    float *p[MAXE];
};

__device__ int64_t clamped(const int32_t *offsets, int64_t e, int64_t rows)
{
    const int64_t v = offsets[e];
    return v < 0 ? 0 : v > rows ? rows : v;
}

/* The expert whose range holds row r: the last e with offsets[e] <= r
 * (offsets non-decreasing; a binary search over E + 1 entries). */
__device__ int expert_of(const int32_t *offsets, int64_t nexperts, int64_t rows, int64_t r)
{
    int lo = 0, hi = (int)nexperts - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (clamped(offsets, mid, rows) <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

__global__ void forward_kernel(float *y, rp_bf16_t *yb, BiasPtrs b, const int32_t *offsets,
                               int64_t nexperts, int64_t rows, int64_t out)
{
    const int64_t first = clamped(offsets, 0, rows), last = clamped(offsets, nexperts, rows);
    const int64_t n = rows * out;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / out, c = i % out;
        float v = y[i];
        if (r >= first && r < last) { /* a row no expert holds keeps its value */
            const int e = expert_of(offsets, nexperts, rows, r);
            if (r < clamped(offsets, e + 1, rows))
                v = __fadd_rn(v, b.p[e][c]);
        }
        y[i] = v;
        if (yb) /* every row's copy, as the CPU op's */
            yb[i] = __float2bfloat16_rn(v);
    }
}

/* One thread per (expert, column): the rows in order, as the CPU's sum;
 * each bf16 dy widened exactly. */
__global__ void backward_kernel(const rp_bf16_t *dy, const int32_t *offsets, int64_t rows,
                                int64_t out, GradPtrs g)
{
    const int e = blockIdx.y;
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int64_t r0 = clamped(offsets, e, rows), r1 = clamped(offsets, e + 1, rows);
    if (c >= out || r1 <= r0)
        return;
    float acc = g.p[e][c];
    for (int64_t r = r0; r < r1; r++)
        acc = __fadd_rn(acc, __bfloat162float(dy[r * out + c]));
    g.p[e][c] = acc;
}

} // namespace

extern "C" int rp_cuda_grouped_bias_forward(float *y, uint16_t *y_bf16, const float *const *bias,
                                            const int32_t *offsets, int64_t nexperts,
                                            int64_t rows, int64_t out, void *stream)
{
    if (nexperts < 1 || nexperts > MAXE || rows < 0 || out < 0 || !y)
        return (int)cudaErrorInvalidValue;
    if (rows == 0 || out == 0)
        return 0;
    BiasPtrs b = {};
    for (int64_t e = 0; e < nexperts; e++)
        b.p[e] = bias[e];
    forward_kernel<<<rp_grid_for(rows * out, 256), 256, 0, rp_stream(stream)>>>(
        y, reinterpret_cast<rp_bf16_t *>(y_bf16), b, offsets, nexperts, rows, out);
    return rp_launch_status();
}

extern "C" int rp_cuda_grouped_bias_backward(const uint16_t *dy, const int32_t *offsets,
                                             int64_t nexperts, int64_t rows, int64_t out,
                                             float *const *dbias, void *stream)
{
    if (nexperts < 1 || nexperts > MAXE || rows < 0 || out < 0)
        return (int)cudaErrorInvalidValue;
    if (rows == 0 || out == 0)
        return 0;
    const int64_t gx = (out + 127) / 128;
    if (gx > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    GradPtrs g = {};
    for (int64_t e = 0; e < nexperts; e++)
        g.p[e] = dbias[e];
    dim3 grid((unsigned)gx, (unsigned)nexperts);
    backward_kernel<<<grid, 128, 0, rp_stream(stream)>>>(reinterpret_cast<const rp_bf16_t *>(dy),
                                                         offsets, rows, out, g);
    return rp_launch_status();
}
