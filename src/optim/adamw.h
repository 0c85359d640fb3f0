/* AdamW update with torch.optim.AdamW semantics (decoupled weight decay,
 * bias-corrected moments, eps added after the square root).
 *
 * Hyperparameters are doubles because torch computes its scalar factors
 * (1 - lr*wd, lr/bc1, sqrt(bc2)) from Python floats in double precision and
 * only then rounds them to fp32; storing beta1 = 0.9 as a float would shift
 * the bias corrections by ~2e-7 relative. */
#ifndef RP_OPTIM_ADAMW_H
#define RP_OPTIM_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct rp_adamw_params {
    double lr;           /* learning rate of this step (from the schedule) */
    double beta1, beta2; /* moment decay rates, in [0, 1) */
    double eps;          /* added to sqrt(v_hat), >= 0 */
    double weight_decay; /* decoupled decay, >= 0; applied only where decay != 0 */
} rp_adamw_params;

/* Reject hyperparameters torch.optim.AdamW would reject (negative lr, eps or
 * weight decay, betas outside [0, 1), non-finite values). `what` names the
 * source in the message (e.g. "--lr" or a config path); may be NULL. */
rp_status rp_adamw_params_check(const rp_adamw_params *hp, const char *what, rp_error *err);

/* One AdamW step over one tensor of n elements, in a single fused pass
 * (OpenMP threads taking chunks as they come free; on the calling thread
 * alone inside a parallel region or below RP_ADAMW_PARALLEL_MIN elements;
 * every element is computed independently, so the result depends neither
 * on the thread count nor on which thread took which chunk).
 *
 *   step        1-based step count of this tensor after this update (t).
 *   grad_scale  multiplies g first, as torch's clip_grad_norm_ does with
 *               grad.mul_(clip_coef); pass 1.0f when not clipping.
 *   decay       non-zero: p *= 1 - lr*weight_decay before the update
 *               (torch skips it when weight_decay == 0, as we do).
 *   bf16_copy   optional (NULL: skipped): receives bf16(p_new), round to
 *               nearest even, the executors' compute copy.
 *
 * Per element, in torch's order and roundings (fp32, fused multiply-add
 * exactly where torch's vectorised CPU kernels fuse):
 *   g' = g * grad_scale
 *   p  = p * f32(1 - lr*wd)                       (if decay)
 *   m  = fma(f32(1 - b1), g' - m, m)              (lerp_)
 *   v  = fma(f32(1 - b2) * g', g', v * f32(b2))   (mul_, addcmul_)
 *   p  = p + (f32(-lr/bc1) * m) / (sqrt(v) / f32(sqrt(bc2)) + f32(eps))
 * with bc1 = 1 - b1^t, bc2 = 1 - b2^t in double.
 * Preconditions: step >= 1, hp passed rp_adamw_params_check, the four
 * arrays do not overlap (bf16_copy neither). p, m, v are updated in place. */
void rp_adamw_step(float *restrict p, const float *restrict g, float *restrict m,
                   float *restrict v, size_t n, int64_t step, const rp_adamw_params *hp,
                   int decay, float grad_scale, uint16_t *restrict bf16_copy);

/* rp_adamw_step that also stores the p, m and v it read (the values before
 * this update) into old_p, old_m and old_v, in the same pass: one read of
 * p, g, m, v; writes of the old and the new p, m, v (and the bf16 copy).
 * p, m, v and bf16_copy get the bits rp_adamw_step gives them. The
 * speculative update's backup (engine/speculative.c): 12 bytes written per
 * parameter instead of a separate copy's 12 read and 12 written.
 * The backup arrays overlap none of the others. */
void rp_adamw_step_backup(float *restrict p, const float *restrict g, float *restrict m,
                          float *restrict v, size_t n, int64_t step, const rp_adamw_params *hp,
                          int decay, float grad_scale, uint16_t *restrict bf16_copy,
                          float *restrict old_p, float *restrict old_m, float *restrict old_v);

/* rp_adamw_step from old_p, old_m, old_v (such a backup) instead of p, m,
 * v: reads them and g, writes the updated p, m, v (and the bf16 copy) to p,
 * m, v, whose values before are not read. The same bits as copying the
 * backup back into p, m, v and calling rp_adamw_step, in one pass of
 * rp_adamw_step's bytes (a redo when clipping clips). No array overlaps
 * another. */
void rp_adamw_step_from_backup(float *restrict p, const float *restrict g, float *restrict m,
                               float *restrict v, size_t n, int64_t step,
                               const rp_adamw_params *hp, int decay, float grad_scale,
                               uint16_t *restrict bf16_copy, const float *restrict old_p,
                               const float *restrict old_m, const float *restrict old_v);

/* Below this many elements a parallel region costs more than it saves:
 * rp_adamw_step and rp_adamw_ranges_split run on the calling thread alone. */
#define RP_ADAMW_PARALLEL_MIN 32768

/* Elements [lo, hi) of an array, lo <= hi. */
typedef struct rp_adamw_range {
    size_t lo, hi;
} rp_adamw_range;

/* Calls update(ctx, lo, hi) on pieces that together cover every element of
 * the `count` ranges exactly once, from one OpenMP parallel region whose
 * threads take chunks of the ranges' elements taken together as they come
 * free (rp_adamw_step's split of their total): a chunk may take the end of
 * one range and parts of the next ones, so many short ranges (an
 * embedding's runs of rows) use every thread as one long one would. On the
 * calling thread alone below RP_ADAMW_PARALLEL_MIN elements in all. For an
 * elementwise update such as AdamW the result does not depend on the split.
 * The ranges must not overlap; `update` must be safe to call from several
 * threads on disjoint pieces (a parallel region inside it runs on one thread
 * unless nested parallelism was enabled). */
void rp_adamw_ranges_split(const rp_adamw_range *ranges, size_t count,
                           void (*update)(void *ctx, size_t lo, size_t hi), void *ctx);

/* Bytes to reserve for one fp32 array of n elements that AdamW streams side
 * by side with others of the same size (master, gradient, m, v, the
 * pipelines' gradient copies): n * 4 rounded up to an odd multiple of 16 KiB
 * (0 for n = 0; SIZE_MAX if that does not fit). Arrays laid out back to back
 * at such a stride never start at the same offset modulo any larger power of
 * two: streams a large power of two apart share cache sets and memory banks.
 * Measured on the development VM (AMD EPYC, one core): AdamW over arrays
 * exactly 256 MiB apart ran at 7.4 GB/s, with 16 KiB more between them at
 * 48 GB/s (bench/README.md, bench_adamw). */
size_t rp_adamw_array_bytes(size_t n);

#endif
