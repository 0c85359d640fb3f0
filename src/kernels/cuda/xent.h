/* Softmax cross-entropy over a chunk of LM-head logits on the GPU (compiled
 * by nvcc; C entry points): what rp_xent_rows (src/kernels/cpu/xent.h)
 * computes, for the chunked head of rp_head_forward_backward
 * (src/model/head.c). The caller computes the chunk's logits
 * [rows, vocab] (fp32) with a GEMM, calls rp_cuda_xent_chunk, and feeds the
 * in-place gradient to the two backward GEMMs; it loops over chunks, so
 * [T, vocab] logits never exist.
 *
 * One thread block per row. The row's log-sum-exp accumulates from one read
 * of it, in double (as the CPU kernel does) or, with fp32_sums, in float
 * (issue 38: no double arithmetic per logit; the row's loss still leaves in
 * double), in an order fixed by the vocabulary (a fixed stride per thread,
 * then a fixed tree). The gradient takes a second read and is written once,
 * in bf16 when the caller gives a bf16 buffer (no fp32 gradient, no
 * separate convert). No atomics: losses are bit-reproducible run to run,
 * and the chunk sum is a plain left-to-right sum in row order, so summing
 * chunk after chunk into one accumulator reproduces head.c's token-order
 * sum.
 *
 * Every entry point returns 0 on success, -1 for a bad argument (nothing is
 * launched) or -2 when a CUDA call fails; *why then holds a static message.
 * Pointers are device pointers unless said otherwise; work is queued on
 * `stream` (0: the legacy default stream). */
#ifndef RP_KERNELS_CUDA_XENT_H
#define RP_KERNELS_CUDA_XENT_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* For each row r of logits [rows, vocab] that counts (counted == NULL or
 * counted[r] != 0): loss_rows[r] = logsumexp(z_r) - z_r[targets[r]];
 * other rows get 0. When grad != 0 the gradient scale * (softmax(z_r) -
 * onehot(targets[r])) if the row counts, else zeros, goes to row r of
 * dlogits_bf16 ([rows, vocab] bf16, each fp32 value rounded to nearest
 * even as rp_cuda_bf16_from_f32 rounds; the logits are then only read),
 * or, with dlogits_bf16 NULL, overwrites the row in place in fp32; with
 * fp32_sums the row's sum of exponentials is a float (in the same fixed
 * order) and the gradient's exp(z - lse) takes z - lse in float, else both
 * are in double, as the CPU kernel has them; when
 * grad == 0 nothing is written but the losses. When loss_sum != NULL,
 * *loss_sum += loss_rows[0] + loss_rows[1] + ... (one thread, in row order,
 * after the rows are done). targets of counted rows must lie in [0, vocab)
 * (check them first with rp_cuda_xent_check_targets); a counted row whose
 * target is outside gets loss NaN and no one-hot term rather than an
 * out-of-bounds access. loss_rows ([rows] doubles) is required. */
int rp_cuda_xent_chunk(float *logits, int64_t rows, int64_t vocab, const int32_t *targets,
                       const uint8_t *counted, float scale, int grad, void *dlogits_bf16,
                       int fp32_sums, double *loss_rows, double *loss_sum, cudaStream_t stream,
                       const char **why);

/* The first position t < T that counts (mask == NULL or mask[t] != 0) and
 * whose target lies outside [0, vocab): host *bad_pos = t and *bad_target =
 * targets[t], or *bad_pos = -1 when all are in range. scratch is 2 device
 * int64s. Waits for the stream (the answer is needed on the host before any
 * write, as head.c checks before writing). */
int rp_cuda_xent_check_targets(const int32_t *targets, const uint8_t *mask, int64_t T,
                               int64_t vocab, int64_t *scratch, int64_t *bad_pos,
                               int32_t *bad_target, cudaStream_t stream, const char **why);

#ifdef __cplusplus
}
#endif
#endif
