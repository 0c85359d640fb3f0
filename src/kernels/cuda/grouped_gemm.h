/* The grouped (per-expert) GEMMs of a mixture-of-experts layer on the GPU:
 * what grouped_linear_forward / _backward_input / _backward_weight of
 * kernels/ops.h compute, with the experts' row ranges read from `offsets`
 * in device memory, so the host never learns the experts' counts.
 *
 * bf16 operands, fp32 accumulation on tensor cores (wmma 16x16x16), output
 * tiles of 64 x 64 per thread block. A tile never straddles two experts:
 * the row-tiled kernels (forward, input gradient) launch one block per
 * 64-row tile of the grouped rows plus one per expert (ceil(rows/64) + E
 * blocks bound the sum over experts of ceil(count/64)); each block finds
 * its (expert, tile) with a prefix sum of the per-expert tile counts and a
 * binary search over it, and exits when it has none. The weight gradient
 * launches one block per (expert, 64 x 64 tile of dW[e]); a block whose
 * expert has no rows exits without touching dW[e].
 *
 * Deterministic without atomics: every output element belongs to one block,
 * whose sum runs over k (the expert's rows for the weight gradient) in a
 * fixed order, so two runs give the same bits.
 *
 * The E per-expert pointers (W or dW, host arrays of device pointers) reach
 * the kernel by value, in a kernel parameter of RP_CUDA_MOE_MAX_EXPERTS
 * pointers (2 KiB, under the 4 KiB parameter limit of every CUDA version),
 * so nothing is uploaded, allocated or waited for. Offsets are clamped to
 * [0, rows] on the device, so malformed offsets cannot make a kernel read
 * or write outside x, y or dx (they give wrong results, not faults).
 *
 * Device pointers; `stream` a cudaStream_t; each returns a cudaError_t (0 =
 * success), cudaErrorInvalidValue for E outside [1, RP_CUDA_MOE_MAX_EXPERTS]
 * or a dimension beyond the launch grid (nothing is launched then). bf16
 * tensors are uint16_t bit patterns. */
#ifndef RP_KERNELS_CUDA_GROUPED_GEMM_H
#define RP_KERNELS_CUDA_GROUPED_GEMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RP_CUDA_MOE_MAX_EXPERTS 256

/* y[r] = x[r] W[e]^T for the rows r of expert e (offsets[e] <= r <
 * offsets[e+1]), x [rows, in] bf16, W[e] [out, in] bf16, into y (fp32) and/or
 * y_bf16 (the fp32 result rounded to nearest even); NULL = not wanted. */
int rp_cuda_grouped_forward(const uint16_t *x, const void *const *W, const int32_t *offsets,
                            int64_t nexperts, int64_t rows, int64_t in, int64_t out, float *y,
                            uint16_t *y_bf16, void *stream);

/* dx[r] = dy[r] W[e] (dy [rows, out] bf16), into dx (fp32; dx[r] + that with
 * accumulate) or dx_bf16 (rounded; accumulate must be 0). */
int rp_cuda_grouped_backward_input(const uint16_t *dy, const void *const *W,
                                   const int32_t *offsets, int64_t nexperts, int64_t rows,
                                   int64_t in, int64_t out, float *dx, uint16_t *dx_bf16,
                                   int accumulate, void *stream);

/* dW[e] [out, in] (fp32) += dy_e^T x_e over expert e's rows in row order;
 * experts without rows are not touched (their dW[e] may be NULL). */
int rp_cuda_grouped_backward_weight(const uint16_t *dy, const uint16_t *x,
                                    const int32_t *offsets, int64_t nexperts, int64_t rows,
                                    int64_t in, int64_t out, float *const *dW, void *stream);

#ifdef __cplusplus
}
#endif
#endif
