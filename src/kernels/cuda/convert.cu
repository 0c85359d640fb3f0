#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.h"

static __global__ void f32_to_bf16_kernel(const float *src, rp_bf16_t *dst, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

static __global__ void bf16_to_f32_kernel(const rp_bf16_t *src, float *dst, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

extern "C" int rp_cuda_bf16_from_f32(const float *src, uint16_t *dst, int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    f32_to_bf16_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(
        src, reinterpret_cast<rp_bf16_t *>(dst), n);
    return rp_launch_status();
}

extern "C" int rp_cuda_f32_from_bf16(const uint16_t *src, float *dst, int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    bf16_to_f32_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(
        reinterpret_cast<const rp_bf16_t *>(src), dst, n);
    return rp_launch_status();
}
