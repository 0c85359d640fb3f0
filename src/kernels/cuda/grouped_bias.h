/* gpt-oss's expert biases on the GPU (issue 35): what grouped_bias_forward
 * and grouped_bias_backward of kernels/ops.h compute, beside the grouped
 * GEMMs (grouped_gemm.h), with the experts' row ranges read from `offsets`
 * in device memory (clamped to [0, rows], as there).
 *   forward:  y[r, c] += bias[e][c] for each row r of expert e (fp32 y,
 *             optionally its bf16 copy y_bf16; y_bf16 alone is refused);
 *   backward: dbias[e][c] += the sum of dy[r, c] over expert e's rows, dy
 *             bf16 (the compute dtype: the gradient the grouped GEMMs
 *             read), widened exactly, one thread per (expert, column)
 *             adding the rows in row order in fp32 onto dbias's value: the
 *             CPU op's sum (rp_colsum_accumulate) of the same values in the
 *             same order, so the same bits; an expert without rows is not
 *             touched.
 * The E bias pointers (host arrays of device pointers) reach the kernels by
 * value, as grouped_gemm.h's. Device pointers; `stream` a cudaStream_t; a
 * cudaError_t returned, cudaErrorInvalidValue for E outside [1,
 * RP_CUDA_MOE_MAX_EXPERTS]. */
#ifndef RP_KERNELS_CUDA_GROUPED_BIAS_H
#define RP_KERNELS_CUDA_GROUPED_BIAS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int rp_cuda_grouped_bias_forward(float *y, uint16_t *y_bf16, const float *const *bias,
                                 const int32_t *offsets, int64_t nexperts, int64_t rows,
                                 int64_t out, void *stream);

int rp_cuda_grouped_bias_backward(const uint16_t *dy, const int32_t *offsets, int64_t nexperts,
                                  int64_t rows, int64_t out, float *const *dbias, void *stream);

#ifdef __cplusplus
}
#endif
#endif
