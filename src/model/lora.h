/* A LoRA-augmented projection (model-internal, used by block.c): on top of
 * the frozen y = x W^T (+ bias) the block has already formed,
 *   y += scaling * (dropout(x) A^T) B^T
 * written over the kernel ops as
 *   t  = dropout(x) A^T                 [T, r]  (fp32, scratch)
 *   ts = scaling * t                    [T, r]  (compute dtype, saved)
 *   y += ts B^T
 * and its backward, given dy (the gradient of y, compute dtype):
 *   dB += dy^T ts,  dt = scaling * (dy B),  dA += dt^T dropout(x),
 *   dx += dropout'(dt A)   (the same mask, regenerated from its key).
 * The backward is split in two so the block can take the adapter's weight
 * gradients while x is still alive (the down projection's x, m, is
 * overwritten by its own gradient on fp32 tables), then add the input
 * gradient where the block accumulates it. */
#ifndef RP_MODEL_LORA_H
#define RP_MODEL_LORA_H

#include "model/layers.h"

/* The buffers of one projection's call: ts (saved by the forward for the
 * backward), the rest scratch shared by all projections. */
typedef struct rp_lora_bufs {
    void *ts;    /* [T, r] compute dtype, this projection's, saved */
    float *t;    /* [T, r] fp32 */
    float *u;    /* [T, max features] fp32 */
    void *dt;    /* [T, r] compute dtype */
    void *xd;    /* [T, max features] compute dtype: dropout(x) (NULL without dropout) */
    float *dxd;  /* [T, max features] fp32: the gradient of dropout(x) (NULL without) */
} rp_lora_bufs;

/* Where projection p's adapter is: its A and B in the compute dtype. */
typedef struct rp_lora_adapter {
    const void *A, *B;
    float *dA, *dB; /* their gradients (backward) */
    rp_lora_proj proj;
    int64_t in, out;
} rp_lora_adapter;

/* y (fp32) += the adapter's output for x [T, in] (compute dtype);
 * y_compute (optional) gets the rounded sum. y == NULL makes only what the
 * backward needs (ts). */
rp_status rp_lora_forward(const rp_kernels *k, const rp_model_config *cfg, const rp_lora_call *lc,
                          const rp_lora_adapter *a, const void *x, int64_t nseq, int64_t seqlen,
                          float *y, void *y_compute, const rp_lora_bufs *b, rp_error *err);

/* dB and dA from dy (compute dtype) and the forward's x and ts; leaves dt
 * in b->dt for rp_lora_backward_input. */
rp_status rp_lora_backward_weights(const rp_kernels *k, const rp_model_config *cfg,
                                   const rp_lora_call *lc, const rp_lora_adapter *a,
                                   const void *x, const void *dy, int64_t nseq, int64_t seqlen,
                                   const rp_lora_bufs *b, rp_error *err);

/* dx (fp32) += the adapter's part of the input gradient, from what
 * rp_lora_backward_weights left in b. */
rp_status rp_lora_backward_input(const rp_kernels *k, const rp_model_config *cfg,
                                 const rp_lora_call *lc, const rp_lora_adapter *a, int64_t nseq,
                                 int64_t seqlen, float *dx, const rp_lora_bufs *b, rp_error *err);

/* The same over T rows of a microbatch from its row row0 on (x, y, dy, dx
 * and b's buffers point at those rows): the MLP's tiles of tokens
 * (model/token_tiles.h). row0 places the rows in their samples of seqlen
 * rows, which is where the dropout masks are drawn. */
rp_status rp_lora_forward_rows(const rp_kernels *k, const rp_model_config *cfg,
                               const rp_lora_call *lc, const rp_lora_adapter *a, const void *x,
                               int64_t row0, int64_t T, int64_t seqlen, float *y,
                               void *y_compute, const rp_lora_bufs *b, rp_error *err);
rp_status rp_lora_backward_weights_rows(const rp_kernels *k, const rp_model_config *cfg,
                                        const rp_lora_call *lc, const rp_lora_adapter *a,
                                        const void *x, const void *dy, int64_t row0, int64_t T,
                                        int64_t seqlen, const rp_lora_bufs *b, rp_error *err);
rp_status rp_lora_backward_input_rows(const rp_kernels *k, const rp_model_config *cfg,
                                      const rp_lora_call *lc, const rp_lora_adapter *a,
                                      int64_t row0, int64_t T, int64_t seqlen, float *dx,
                                      const rp_lora_bufs *b, rp_error *err);

#endif
