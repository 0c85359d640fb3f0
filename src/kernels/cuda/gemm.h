/* GEMMs through cuBLAS with bf16 inputs, fp32 compute and accumulation
 * (CUBLAS_COMPUTE_32F, tensor cores) and an fp32 or bf16 output, in
 * ROW-MAJOR terms (the layouts of the rest of roundpipe). `handle` is a
 * cublasHandle_t already bound to the caller's stream (cublasSetStream),
 * made through cublas_api.h's table once rp_cublas_open has succeeded (the
 * calls go through that table). Each returns the cublasStatus_t (0 =
 * CUBLAS_STATUS_SUCCESS). */
#ifndef RP_KERNELS_CUDA_GEMM_H
#define RP_KERNELS_CUDA_GEMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* C[M,N] = alpha * op(A) op(B) + beta * C, op(X) = X^T when trans*;
 * A is [M,K] (or [K,M] transposed) with row stride lda, B is [K,N] (or
 * [N,K]) with row stride ldb, C has row stride ldc and is bf16 when c_bf16
 * (else fp32). */
int rp_cuda_gemm(void *handle, int transA, int transB, int64_t M, int64_t N, int64_t K,
                 float alpha, const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                 float beta, void *C, int c_bf16, int64_t ldc);

/* The three products of a Linear layer with W [out, in] (Hugging Face):
 *   forward          y  = x W^T         (y += ... when accumulate)    fp32 y
 *   backward input   dx = dy W          (dx += ... when accumulate)   fp32 dx
 *   backward weight  dW += dy^T x                                      fp32 dW */
int rp_cuda_linear_forward(void *handle, const uint16_t *x, const uint16_t *W, float *y,
                           int64_t rows, int64_t in, int64_t out, int accumulate);
int rp_cuda_linear_backward_input(void *handle, const uint16_t *dy, const uint16_t *W, float *dx,
                                  int64_t rows, int64_t in, int64_t out, int accumulate);
int rp_cuda_linear_backward_weight(void *handle, const uint16_t *dy, const uint16_t *x, float *dW,
                                   int64_t rows, int64_t in, int64_t out);

#ifdef __cplusplus
}
#endif
#endif
