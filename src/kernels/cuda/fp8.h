/* An FP8 base's matrix dequantised on the GPU (issue 36; kernels/ops.h
 * fp8_dequantise): dst[r, c] = e4m3(weight[r, c]) x scale[r / block_rows,
 * c / block_cols], the product in fp32 and, into bf16, rounded to nearest
 * even as rp_f32_to_bf16 does (NaN kept quiet with its sign), so the bits
 * are core/fp8.h's. scale_dtype 0/1/2: F32, BF16, F16 (rp_dtype);
 * dst_bf16 selects bf16 (else fp32). Device pointers of any alignment.
 * Returns the launch's cudaError_t. */
#ifndef RP_KERNELS_CUDA_FP8_H
#define RP_KERNELS_CUDA_FP8_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int rp_cuda_fp8_dequantise(const uint8_t *weight, const void *scale, int scale_dtype,
                           int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                           void *dst, int dst_bf16, void *stream);

#ifdef __cplusplus
}
#endif
#endif
