/* Global gradient-norm clipping, as torch.nn.utils.clip_grad_norm_ does it:
 * norm = sqrt(sum over tensors of sum(g^2)), coef = max_norm / (norm + 1e-6)
 * clamped to at most 1, and every gradient is multiplied by coef (the
 * trainer passes coef to rp_adamw_step as grad_scale).
 *
 * Sums are in double and deterministic: a tensor is cut into blocks whose
 * size depends only on n, each block is summed left to right in a fixed
 * number of lanes, and the block sums are added in index order, so the
 * result is the same for any thread count. The trainer adds the per-tensor
 * sums in a fixed order (layer order) for the same reason. */
#ifndef RP_OPTIM_CLIP_H
#define RP_OPTIM_CLIP_H

#include <stddef.h>

#include "core/error.h"

/* Sum of squares of g[0..n) in double. Non-finite inputs give a non-finite
 * sum (Inf or NaN), which rp_clip_coef reports. */
double rp_clip_sumsq(const float *g, size_t n);

/* The blocks rp_clip_sumsq cuts a tensor of n elements into: returns their
 * count (at most RP_CLIP_MAX_BLOCKS, 0 for n = 0) and sets *block to their
 * length (the last may be shorter). rp_clip_sumsq(g, n) is exactly
 * 0.0 + s[0] + s[1] + ... in index order, s[b] = rp_clip_block_sumsq(g, n, b),
 * so several threads or ranks that each sum some blocks, added up in block
 * order, get the same bits. */
#define RP_CLIP_MAX_BLOCKS 256
size_t rp_clip_blocks(size_t n, size_t *block);
double rp_clip_block_sumsq(const float *g, size_t n, size_t b);

/* From the total sum of squares of all gradients: the global norm (always
 * written, for logging) and the factor to multiply gradients by: 1 when
 * max_norm <= 0 (clipping off) or when the norm is already within
 * max_norm, otherwise max_norm / (norm + 1e-6) computed as torch does it,
 * in fp32 from the fp32-rounded norm.
 * Returns RP_ERR_NUMERIC (message names the value) when the norm is NaN or
 * infinite, whether or not clipping is on, so the trainer stops instead of
 * writing NaN into the weights; *coef is then 1. RP_ERR_INVALID_ARG for a
 * NaN/infinite max_norm or a negative sumsq. */
rp_status rp_clip_coef(double sumsq, double max_norm, double *norm, float *coef, rp_error *err);

#endif
