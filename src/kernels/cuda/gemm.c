/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: a
 * row-major [r, c] array with stride ld is the column-major [c, r] array
 * with the same ld, so cuBLAS gets B first with B's flag, then A with A's,
 * and the dimensions N, M. Host code alone: plain C on cuBLAS's API
 * (cublas_api.h). */
#include "kernels/cuda/gemm.h"

#include "kernels/cuda/cublas_api.h"

int rp_cuda_gemm(void *handle, int transA, int transB, int64_t M, int64_t N, int64_t K, float alpha,
                 const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                 void *C, int c_bf16, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return 0;
    if (K <= 0 && beta == 1.0f)
        return 0; /* nothing to add */
    return (int)rp_cublas.gemm_ex((cublasHandle_t)handle, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  transA ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                  &alpha, B, CUDA_R_16BF, (int)ldb, A, CUDA_R_16BF, (int)lda, &beta,
                                  C, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, (int)ldc,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

int rp_cuda_linear_forward(void *handle, const uint16_t *x, const uint16_t *W, float *y,
                           int64_t rows, int64_t in, int64_t out, int accumulate)
{
    /* y[rows, out] = x[rows, in] (W[out, in])^T */
    return rp_cuda_gemm(handle, 0, 1, rows, out, in, 1.0f, x, in, W, in, accumulate ? 1.0f : 0.0f,
                        y, 0, out);
}

int rp_cuda_linear_backward_input(void *handle, const uint16_t *dy, const uint16_t *W, float *dx,
                                  int64_t rows, int64_t in, int64_t out, int accumulate)
{
    /* dx[rows, in] = dy[rows, out] W[out, in] */
    return rp_cuda_gemm(handle, 0, 0, rows, in, out, 1.0f, dy, out, W, in, accumulate ? 1.0f : 0.0f,
                        dx, 0, in);
}

int rp_cuda_linear_backward_weight(void *handle, const uint16_t *dy, const uint16_t *x, float *dW,
                                   int64_t rows, int64_t in, int64_t out)
{
    /* dW[out, in] += (dy[rows, out])^T x[rows, in] */
    return rp_cuda_gemm(handle, 1, 0, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dW, 0, in);
}
