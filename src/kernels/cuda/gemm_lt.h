/* A Linear layer's forward through cuBLASLt, the residual and the bias
 * added in the GEMM's epilogue (issue 38), in ROW-MAJOR terms as gemm.h:
 *
 *   y[rows, out] = x[rows, in] (W[out, in])^T (+ bias[out]) (+ residual[rows, out])
 *
 * bf16 x and W, fp32 compute and accumulation (CUBLAS_COMPUTE_32F), fp32 y,
 * bias and residual. The residual is cuBLASLt's C (beta = 1) and y its D,
 * so nothing is copied into y first (y never aliases the residual:
 * kernels/ops.h); the bias is CUBLASLT_EPILOGUE_BIAS with an fp32 vector.
 *
 * Deterministic: the same inputs give the same bits on every call and
 * every run (on GPUs of one architecture and SM count, cuBLAS's guarantee).
 * The algorithm is chosen once per shape (rows, in, out, bias or not,
 * residual or not, and the operands' alignments up to 16 bytes, which
 * the heuristic reads) and then reused, never re-chosen; the preference admits only
 * CUBLASLT_REDUCTION_SCHEME_NONE, "the dot-product performed in one
 * sequence" (cublasLt.h): no split-K, so no partial sums whose reduction
 * order or in-place counters could vary; the workspace is this state's own
 * (cuBLAS's documented cure for the nondeterminism of a workspace shared
 * between streams).
 *
 * One state per executor, used from its stream's thread only. */
#ifndef RP_KERNELS_CUDA_GEMM_LT_H
#define RP_KERNELS_CUDA_GEMM_LT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* bench/gpu/bench_gemm.cu times it */
#endif

/* The workspace the heuristic may use, allocated once with the state (on
 * Hopper cuBLAS itself asks 32 MiB a handle; src/device/device.h's
 * RP_CUDA_RESERVE_MIB covers it). */
#define RP_CUDA_GEMM_LT_WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct rp_cuda_gemm_lt rp_cuda_gemm_lt;

/* A cuBLASLt handle and the workspace on the current device (cuBLASLt
 * opened first, cublas_api.h). 0, or -1 with why filled (what could not be
 * opened, or the call that failed and its status). */
int rp_cuda_gemm_lt_create(rp_cuda_gemm_lt **out, char *why, size_t why_len);
/* Frees the state and the cached algorithms; NULL or *lt NULL is a no-op.
 * The caller has waited for the stream that used it. */
void rp_cuda_gemm_lt_destroy(rp_cuda_gemm_lt **lt);

/* y = x W^T (+ bias) (+ residual) queued on stream; bias and residual may
 * be NULL. Returns the cublasStatus_t (0 success). *taken is 1 when the
 * product was queued, 0 when cuBLASLt has no algorithm for this shape or
 * the bias is not 16-byte aligned (the caller computes it another way; the
 * heuristic's answer is cached too, so a shape is always taken or never).
 * rows, in, out > 0. */
int rp_cuda_gemm_lt_linear_forward(rp_cuda_gemm_lt *lt, void *stream, const uint16_t *x,
                                   const uint16_t *W, const float *bias, const float *residual,
                                   float *y, int64_t rows, int64_t in, int64_t out, int *taken);

#ifdef __cplusplus
}
#endif
#endif
