#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rmsnorm.h"

#define ROWS_PER_BLOCK 8 /* one warp per row */

static __global__ void rmsnorm_fwd_kernel(const float *x, const float *w, float *y,
                                          rp_bf16_t *y_bf16, float *rstd, int64_t rows,
                                          int64_t dim, float eps)
{
    const int64_t r = blockIdx.x * (int64_t)ROWS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows)
        return;
    const float *xr = x + r * dim;
    float ss = 0.0f;
    for (int64_t j = lane; j < dim; j += 32)
        ss += xr[j] * xr[j];
    ss = rp_warp_sum(ss);
    const float s = 1.0f / sqrtf(ss / (float)dim + eps);
    if (rstd && lane == 0)
        rstd[r] = s;
    for (int64_t j = lane; j < dim; j += 32) {
        float v = w[j] * (xr[j] * s);
        if (y)
            y[r * dim + j] = v;
        if (y_bf16)
            y_bf16[r * dim + j] = __float2bfloat16_rn(v);
    }
}

static __global__ void rmsnorm_bwd_kernel(const float *x, const float *w, const float *rstd,
                                          const float *dy, float *dx, rp_bf16_t *dx_bf16,
                                          int64_t rows, int64_t dim, int accumulate)
{
    const int64_t r = blockIdx.x * (int64_t)ROWS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows)
        return;
    const float *xr = x + r * dim, *dyr = dy + r * dim;
    float *dxr = dx + r * dim;
    const float s = rstd[r];
    float dot = 0.0f;
    for (int64_t j = lane; j < dim; j += 32)
        dot += (w[j] * dyr[j]) * xr[j];
    dot = rp_warp_sum(dot);
    const float c = dot / (float)dim * s * s * s;
    /* each lane reads dy[j] before writing dx[j] of the same j: dx may alias dy */
    for (int64_t j = lane; j < dim; j += 32) {
        float v = s * (w[j] * dyr[j]) - c * xr[j];
        if (accumulate)
            v += dxr[j];
        dxr[j] = v;
        if (dx_bf16)
            dx_bf16[r * dim + j] = __float2bfloat16_rn(v);
    }
}

extern "C" int rp_cuda_rmsnorm_forward(const float *x, const float *w, float *y, uint16_t *y_bf16,
                                       float *rstd, int64_t rows, int64_t dim, float eps,
                                       void *stream)
{
    if (rows <= 0)
        return 0;
    unsigned blocks = (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    rmsnorm_fwd_kernel<<<blocks, 32 * ROWS_PER_BLOCK, 0, rp_stream(stream)>>>(
        x, w, y, reinterpret_cast<rp_bf16_t *>(y_bf16), rstd, rows, dim, eps);
    return rp_launch_status();
}

extern "C" int rp_cuda_rmsnorm_backward(const float *x, const float *w, const float *rstd,
                                        const float *dy, float *dx, uint16_t *dx_bf16,
                                        int64_t rows, int64_t dim, int accumulate, void *stream)
{
    if (rows <= 0)
        return 0;
    unsigned blocks = (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    rmsnorm_bwd_kernel<<<blocks, 32 * ROWS_PER_BLOCK, 0, rp_stream(stream)>>>(
        x, w, rstd, dy, dx, reinterpret_cast<rp_bf16_t *>(dx_bf16), rows, dim, accumulate);
    return rp_launch_status();
}
