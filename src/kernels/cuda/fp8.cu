/* FP8 e4m3 block-scaled matrices dequantised on the GPU (fp8.h). */
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8.h"

/* core/fp8.h's rp_e4m3_to_f32: a bit assembly, exact. */
static __device__ __forceinline__ float e4m3_to_f32(uint8_t v)
{
    const uint32_t sign = (uint32_t)(v & 0x80u) << 24, exp = (v >> 3) & 0xFu, man = v & 7u;
    if (exp == 15 && man == 7)
        return __uint_as_float(sign | 0x7fc00000u);
    if (exp == 0)
        return __uint_as_float(__float_as_uint((float)man * 0x1p-9f) | sign);
    return __uint_as_float(sign | ((exp + 120u) << 23) | (man << 20));
}

/* Scale i, read a byte at a time (the scales may sit at any address). */
static __device__ __forceinline__ float scale_at(const uint8_t *s, int dtype, int64_t i)
{
    if (dtype == 0) {
        const uint8_t *p = s + 4 * i;
        return __uint_as_float((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                               (uint32_t)p[3] << 24);
    }
    const uint8_t *p = s + 2 * i;
    const uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    if (dtype == 1)
        return __uint_as_float((uint32_t)h << 16);
    return __half2float(__ushort_as_half(h));
}

/* rp_f32_to_bf16: to nearest even; a NaN keeps its sign and turns quiet. */
static __device__ __forceinline__ uint16_t to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static __global__ void dequantise_kernel(const uint8_t *w, const uint8_t *s, int sdt,
                                         int64_t rows, int64_t cols, int64_t br, int64_t bc,
                                         void *dst, int bf16)
{
    const int64_t n = rows * cols, scale_cols = (cols + bc - 1) / bc;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, c = i % cols;
        /* one fp32 multiply, never fused with anything */
        const float v = __fmul_rn(e4m3_to_f32(w[i]), scale_at(s, sdt, (r / br) * scale_cols + c / bc));
        if (bf16)
            ((uint16_t *)dst)[i] = to_bf16(v);
        else
            ((float *)dst)[i] = v;
    }
}

extern "C" int rp_cuda_fp8_dequantise(const uint8_t *weight, const void *scale, int scale_dtype,
                                      int64_t rows, int64_t cols, int64_t block_rows,
                                      int64_t block_cols, void *dst, int dst_bf16, void *stream)
{
    const int64_t n = rows * cols;
    if (n <= 0)
        return 0;
    dequantise_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(
        weight, (const uint8_t *)scale, scale_dtype, rows, cols, block_rows, block_cols, dst,
        dst_bf16);
    return rp_launch_status();
}
