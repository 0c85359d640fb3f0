/* Linear layers on CPU: y = x W^T + b with W in Hugging Face [out, in]
 * layout, and its two backward products. GEMMs go to CBLAS (OpenBLAS);
 * everything is row-major, x is [rows, in], y is [rows, out].
 *
 * Determinism: OpenBLAS partitions a GEMM statically over its threads and
 * never splits the reduction dimension across threads, so for a fixed thread
 * count every result is bit-identical run to run. Weight gradients are
 * accumulated with beta = 1 (dW += ...), so two calls accumulate in call order.
 * Must not be called from inside an OpenMP parallel region. */
#ifndef RP_KERNELS_CPU_LINEAR_H
#define RP_KERNELS_CPU_LINEAR_H

#include <stdint.h>

/* y = x W^T (+ b when b != NULL). y must not alias x. */
void rp_linear_forward(const float *x, const float *W, const float *b, float *y, int64_t rows,
                       int64_t in, int64_t out);

/* dx = dy W, or dx += dy W when accumulate is non-zero. */
void rp_linear_backward_input(const float *dy, const float *W, float *dx, int64_t rows, int64_t in,
                              int64_t out, int accumulate);

/* The same two products with W in bf16 [out, in]: W is widened (exactly)
 * into a per-thread block of RP_LINEAR_WIDEN_FLOATS floats, rows of W for
 * the forward (columns of y), columns of W for the input gradient (columns
 * of dx), and each block goes to one sgemm, so every output element is one
 * dot product over the whole reduction, as with an fp32 W. The blocking
 * depends on the shape only: deterministic for a fixed thread count.
 * Return 0, or -1 when the block cannot be allocated. */
#define RP_LINEAR_WIDEN_FLOATS ((size_t)1 << 20)
int rp_linear_forward_bf16(const float *x, const uint16_t *W, const float *b, float *y,
                           int64_t rows, int64_t in, int64_t out);
int rp_linear_backward_input_bf16(const float *dy, const uint16_t *W, float *dx, int64_t rows,
                                  int64_t in, int64_t out, int accumulate);

/* dW += dy^T x and, when db != NULL, db += column sums of dy (summed in row
 * order, each column owned by one thread). */
void rp_linear_backward_weight(const float *dy, const float *x, float *dW, float *db, int64_t rows,
                               int64_t in, int64_t out);

/* dst[j] += sum over rows r of src[r*cols + j], rows in increasing order. */
void rp_colsum_accumulate(const float *src, int64_t rows, int64_t cols, float *dst);

#endif
