#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"

static __global__ void add_kernel(const float *a, const float *b, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

static __global__ void bias_kernel(float *y, rp_bf16_t *yb, const float *bias, int64_t rows,
                                   int64_t cols)
{
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = y[i] + bias[i % cols];
        y[i] = v;
        if (yb)
            yb[i] = __float2bfloat16_rn(v);
    }
}

extern "C" int rp_cuda_add(const float *a, const float *b, float *y, int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    add_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(a, b, y, n);
    return rp_launch_status();
}

extern "C" int rp_cuda_bias_add(float *y, uint16_t *y_bf16, const float *bias, int64_t rows,
                                int64_t cols, void *stream)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    bias_kernel<<<rp_grid_for(rows * cols, 256), 256, 0, rp_stream(stream)>>>(
        y, reinterpret_cast<rp_bf16_t *>(y_bf16), bias, rows, cols);
    return rp_launch_status();
}
