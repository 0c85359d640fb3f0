/* Deterministic column reductions on the GPU (bias gradients, RMSNorm
 * weight gradients), without atomics: pass 1 cuts the rows into
 * RP_CUDA_COLSUM_SLICES fixed slices and sums each slice per column in a
 * fixed order into `partial`; pass 2 adds the slices in slice order to dst.
 * The same shapes give the same bits on every run. Device pointers; `stream`
 * a cudaStream_t; cudaError_t returned (0 = success). */
#ifndef RP_KERNELS_CUDA_REDUCE_H
#define RP_KERNELS_CUDA_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RP_CUDA_COLSUM_SLICES 64

/* Floats of `partial` a reduction over `cols` columns needs (sizes.c, plain C). */
size_t rp_cuda_colsum_partial_floats(int64_t cols);

/* dst[j] += sum over r of src[r*cols + j]. */
int rp_cuda_colsum_accumulate(const float *src, int64_t rows, int64_t cols, float *dst,
                              float *partial, void *stream);

/* RMSNorm weight gradient: dw[j] += sum over r of dy[r,j] * x[r,j] * rstd[r]. */
int rp_cuda_rmsnorm_dw(const float *x, const float *rstd, const float *dy, int64_t rows,
                       int64_t dim, float *dw, float *partial, void *stream);

#ifdef __cplusplus
}
#endif
#endif
