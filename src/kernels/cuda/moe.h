/* Mixture of experts on the GPU around the grouped GEMMs (grouped_gemm.h):
 * routing, grouping of (token, slot) pairs by expert, the statistics of a
 * routing, the gathers and weighted sums, and their backwards: what the ops
 * of the same names in kernels/ops.h compute (their contracts, and the pair,
 * slot and grouped-position vocabulary, are those), in the CPU kernels'
 * (kernels/cpu/moe.c) arithmetic: the same operations in the same order,
 * products and sums rounded separately (no fused multiply-add; the kernels
 * use the explicitly rounded intrinsics), so every output but the routing's
 * probabilities and weights (expf differs from the C library's in the last
 * bits; the experts chosen differ only where probabilities are that close)
 * equals the CPU's bit for bit on the same inputs.
 *
 * Grouping is a stable sort of the pairs by expert (CUB's radix sort, which
 * is stable, on the bits that can differ), then where[order[j]] = j and
 * offsets[e] = the first sorted position whose expert is >= e (a binary
 * search): the experts' counts stay on the device. It does not check the
 * experts' range (the table does, before: rp_cuda_tokens_first_bad); an
 * out-of-range expert gives a wrong grouping, never an access outside the
 * buffers.
 *
 * Device pointers; `stream` a cudaStream_t; each returns a cudaError_t (0 =
 * success; cudaErrorInvalidValue for arguments it cannot run with, nothing
 * launched). bf16 tensors are uint16_t bit patterns. */
#ifndef RP_KERNELS_CUDA_MOE_H
#define RP_KERNELS_CUDA_MOE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* probs [rows, E], experts and weights [rows, k] of logits [rows, E]:
 * softmax (max by a left-to-right scan, exp, an fp32 sum in expert order,
 * divided), then k rounds each taking the best expert ranking after the
 * previous round's (larger first, ties to the lower index, NaN after every
 * number: the k experts are distinct and in range whatever the logits), and
 * with norm_topk the weights divided by their fp32 sum in slot order. One
 * warp per row. 1 <= k <= E. */
int rp_cuda_moe_route(const float *logits, int64_t rows, int64_t nexperts, int64_t topk,
                      int norm_topk, float *probs, int32_t *experts, float *weights,
                      void *stream);

/* Bytes of scratch rp_cuda_moe_group needs for npairs pairs of nexperts
 * experts (asks CUB; no device work). */
int rp_cuda_moe_group_scratch(int64_t npairs, int64_t nexperts, size_t *bytes);

/* offsets [E+1], order and where [npairs] of the pairs' experts [npairs]
 * (all in [0, E)); npairs <= INT32_MAX. */
int rp_cuda_moe_group(const int32_t *experts, int64_t npairs, int64_t nexperts, int32_t *offsets,
                      int32_t *order, int32_t *where, void *scratch, size_t scratch_bytes,
                      void *stream);

/* stats [2E]: the counts of offsets, then sum over rows in row order of
 * probs[t, e] in double, rounded (one thread per expert: a serial chain of
 * `rows` double additions). */
int rp_cuda_moe_stats(const float *probs, const int32_t *offsets, int64_t rows, int64_t nexperts,
                      float *stats, void *stream);

/* xg[j] = x[order[j] / k] (bf16 rows of cols), times weights[order[j]] in
 * fp32 and rounded when weights != NULL. */
int rp_cuda_moe_gather(const uint16_t *x, const int32_t *order, const float *weights,
                       int64_t rows, int64_t topk, int64_t cols, uint16_t *xg, void *stream);

/* dx[t] (+)= the fp32 sum from 0 over slots in order of dxg[where[t*k+s]]. */
int rp_cuda_moe_scatter_add(const float *dxg, const int32_t *where, int64_t rows, int64_t topk,
                            int64_t cols, float *dx, int accumulate, void *stream);

/* y[t] = [residual[t] +] the fp32 sum from 0 over slots in order of the
 * rounded products weights[t*k+s] * yg[where[t*k+s]]. */
int rp_cuda_moe_combine(const float *yg, const float *weights, const int32_t *where,
                        const float *residual, int64_t rows, int64_t topk, int64_t cols, float *y,
                        void *stream);

/* dweights[order[j]] = sum over c in order of z[j,c] * m[j,c] in double,
 * rounded; dm[j] = weights[order[j]] * z[j] (dm may be z; NULL: not
 * written), dm_bf16 (optional) its rounded copy. One warp per row j. */
int rp_cuda_moe_down_backward(const float *z, const uint16_t *m, const float *weights,
                              const int32_t *order, int64_t rows, int64_t topk, int64_t cols,
                              float *dm, uint16_t *dm_bf16, float *dweights, void *stream);

/* dlogits [rows, E] (and dlogits_bf16, optional, its rounded copy) as
 * kernels/cpu/moe.c's rp_moe_route_backward computes them, in double. One
 * warp per row. An expert outside [0, E) in `experts` reads as a NaN
 * probability (never outside probs). */
int rp_cuda_moe_route_backward(const float *probs, const int32_t *experts, const float *dweights,
                               const float *aux_grad, int64_t rows, int64_t nexperts,
                               int64_t topk, int norm_topk, float *dlogits,
                               uint16_t *dlogits_bf16, void *stream);

#ifdef __cplusplus
}
#endif
#endif
