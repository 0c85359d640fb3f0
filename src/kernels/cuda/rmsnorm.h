/* RMSNorm on the GPU with the semantics of kernels/cpu/rmsnorm.h:
 *     y = w * (x * rsqrt(mean(x^2) + eps))
 * over rows of `dim` floats; per head for Qwen3's q/k norm (rows = tokens *
 * heads, dim = head_dim). One warp per row, sums in fp32. Device pointers,
 * `stream` a cudaStream_t, cudaError_t returned (0 = success). The weight
 * gradient is a separate deterministic reduction (reduce.h). */
#ifndef RP_KERNELS_CUDA_RMSNORM_H
#define RP_KERNELS_CUDA_RMSNORM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes y (fp32, may alias x) and/or y_bf16 (either may be NULL) and rstd
 * (may be NULL). */
int rp_cuda_rmsnorm_forward(const float *x, const float *w, float *y, uint16_t *y_bf16,
                            float *rstd, int64_t rows, int64_t dim, float eps, void *stream);

/* dx = r*(w*dy) - r^3 * x * mean((w*dy) * x), or dx += that when
 * accumulate; dx may alias dy. When dx_bf16 != NULL it also receives the
 * final dx rounded to bf16. */
int rp_cuda_rmsnorm_backward(const float *x, const float *w, const float *rstd, const float *dy,
                             float *dx, uint16_t *dx_bf16, int64_t rows, int64_t dim,
                             int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
#endif
