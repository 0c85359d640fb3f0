/* Mixture of experts on CPU, fp32: routing, grouping of (token, slot) pairs
 * by expert, the gathers and sums around the experts' GEMMs, their
 * backwards, and the grouped GEMMs themselves. The contracts are those of
 * the ops of the same names in kernels/ops.h; the pair, slot and grouped
 * position vocabulary is theirs.
 *
 * Determinism: loops are OpenMP with static schedules and every output
 * element is computed by one thread with its sums in a fixed order, so
 * results do not depend on the thread count. The grouped GEMMs run the
 * GEMMs of kernels/cpu/linear.h on tiles of rows fixed by the offsets, each
 * on one thread (see moe.c), so they do not depend on the thread count (or
 * on which thread takes which tile) either; a row's result may depend on
 * how many rows its expert has, as a GEMM's depends on its shape. Must not
 * be called from inside an OpenMP parallel region. */
#ifndef RP_KERNELS_CPU_MOE_H
#define RP_KERNELS_CPU_MOE_H

#include <stdint.h>

/* probs = softmax(logits) per row, experts/weights the top k (largest
 * first, ties to the lower index; a NaN ranks below every number, so the
 * k indices are distinct and in range whatever the logits). */
void rp_moe_route(const float *logits, int64_t rows, int64_t nexperts, int64_t topk,
                  int norm_topk, float *probs, int32_t *experts, float *weights);

/* The first pair whose expert is outside [0, nexperts), or -1. */
int64_t rp_moe_bad_expert(const int32_t *experts, int64_t npairs, int64_t nexperts);

/* The stable counting sort of npairs pairs by expert (every expert in
 * range: see rp_moe_bad_expert) into offsets [nexperts+1], order, where. */
void rp_moe_group(const int32_t *experts, int64_t npairs, int64_t nexperts, int32_t *offsets,
                  int32_t *order, int32_t *where);

/* Whether offsets [nexperts+1] start at 0, never decrease and end at rows. */
int rp_moe_offsets_valid(const int32_t *offsets, int64_t nexperts, int64_t rows);

void rp_moe_stats(const float *probs, const int32_t *offsets, int64_t rows, int64_t nexperts,
                  float *stats);

void rp_moe_gather(const float *x, const int32_t *order, const float *weights, int64_t rows,
                   int64_t topk, int64_t cols, float *xg);

void rp_moe_scatter_add(const float *dxg, const int32_t *where, int64_t rows, int64_t topk,
                        int64_t cols, float *dx, int accumulate);

/* y must not alias yg; residual may be NULL. */
void rp_moe_combine(const float *yg, const float *weights, const int32_t *where,
                    const float *residual, int64_t rows, int64_t topk, int64_t cols, float *y);

/* dm may alias z. */
void rp_moe_down_backward(const float *z, const float *m, const float *weights,
                          const int32_t *order, int64_t rows, int64_t topk, int64_t cols,
                          float *dm, float *dweights);

/* aux_grad may be NULL. */
void rp_moe_route_backward(const float *probs, const int32_t *experts, const float *dweights,
                           const float *aux_grad, int64_t rows, int64_t nexperts, int64_t topk,
                           int norm_topk, float *dlogits);

/* The grouped GEMMs: expert e's rows offsets[e] .. offsets[e+1]-1 with
 * W[e], fp32 or (W_bf16) bf16 widened as linear.h does. An expert with no
 * rows is skipped, its W[e] and dW[e] not read. The forward and the input
 * gradient return 0, or -1 when a bf16 widening block cannot be allocated
 * (the output is then partly written). */
int rp_moe_grouped_forward(const float *x, const void *const *W, int W_bf16,
                           const int32_t *offsets, int64_t nexperts, int64_t in, int64_t out,
                           float *y);
int rp_moe_grouped_backward_input(const float *dy, const void *const *W, int W_bf16,
                                  const int32_t *offsets, int64_t nexperts, int64_t in,
                                  int64_t out, float *dx, int accumulate);
void rp_moe_grouped_backward_weight(const float *dy, const float *x, const int32_t *offsets,
                                    int64_t nexperts, int64_t in, int64_t out,
                                    float *const *dW);

/* gpt-oss's expert biases (issue 35): y[j] += bias[e] (fp32, one rounding
 * per element) for each row j of expert e; and dbias[e] += the column sums
 * of dy over expert e's rows, in row order as rp_colsum_accumulate sums a
 * dense bias's gradient. An expert with no rows is skipped, its bias[e]
 * and dbias[e] not read. */
void rp_moe_grouped_bias_add(float *y, const float *const *bias, const int32_t *offsets,
                             int64_t nexperts, int64_t out);
void rp_moe_grouped_bias_backward(const float *dy, const int32_t *offsets, int64_t nexperts,
                                  int64_t out, float *const *dbias);

#endif
