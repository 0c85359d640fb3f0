/* RMSNorm as in Hugging Face LlamaRMSNorm / Qwen3RMSNorm, in fp32:
 *     y = w * (x * rsqrt(mean(x^2) + eps))
 * over the last dimension of a [rows, dim] array. Also used per head
 * (rows = tokens * heads, dim = head_dim) for Qwen3's q_norm / k_norm. */
#ifndef RP_KERNELS_CPU_RMSNORM_H
#define RP_KERNELS_CPU_RMSNORM_H

#include <stdint.h>

/* y = rmsnorm(x) * w; rstd[r] = rsqrt(mean(x_r^2) + eps) is saved for the
 * backward (rstd may be NULL). y may alias x. */
void rp_rmsnorm_forward(const float *x, const float *w, float *y, float *rstd, int64_t rows,
                        int64_t dim, float eps);

/* Given the forward's x and rstd and the output gradient dy:
 *   dx  = r*(w*dy) - r^3 * x * mean((w*dy) * x)   (dx += ... when accumulate)
 *   dw += sum over rows of dy * (x * r)           (skipped when dw is NULL)
 * dx may alias dy (each row's reduction is taken before the row is written).
 * dw is summed in row order per column, so it is deterministic. */
void rp_rmsnorm_backward(const float *x, const float *w, const float *rstd, const float *dy,
                         float *dx, float *dw, int64_t rows, int64_t dim, int accumulate);

#endif
