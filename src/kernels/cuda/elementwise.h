/* Elementwise pieces of the block that cannot be fused into a GEMM
 * epilogue: the residual add and the bias add. Device pointers; `stream` a
 * cudaStream_t; cudaError_t returned (0 = success). */
#ifndef RP_KERNELS_CUDA_ELEMENTWISE_H
#define RP_KERNELS_CUDA_ELEMENTWISE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = a + b over n floats (y may alias a or b). */
int rp_cuda_add(const float *a, const float *b, float *y, int64_t n, void *stream);

/* y[r*cols + j] += bias[j]; when y_bf16 != NULL the sum is also written
 * there in bf16. */
int rp_cuda_bias_add(float *y, uint16_t *y_bf16, const float *bias, int64_t rows, int64_t cols,
                     void *stream);

#ifdef __cplusplus
}
#endif
#endif
