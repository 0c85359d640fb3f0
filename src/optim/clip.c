/* Deterministic sum of squares and the clip coefficient. */
#include "optim/clip.h"

#include <math.h>

/* Blocks are at least this long (parallel work worth a thread) and there
 * are at most RP_CLIP_MAX_BLOCKS of them, so the partial sums fit on the
 * stack. Both depend on n only, never on the thread count. */
#define RP_CLIP_MIN_BLOCK 16384
#define RP_CLIP_LANES 8

/* Left to right in RP_CLIP_LANES interleaved accumulators (element i goes to
 * lane i % LANES), lanes combined pairwise. x*x is exact in double for fp32
 * x, so whether the compiler fuses the multiply-add cannot change a bit. */
static double block_sumsq(const float *g, size_t n)
{
    double acc[RP_CLIP_LANES] = {0};
    size_t i = 0;
    for (; i + RP_CLIP_LANES <= n; i += RP_CLIP_LANES)
        for (size_t j = 0; j < RP_CLIP_LANES; j++) {
            double x = g[i + j];
            acc[j] += x * x;
        }
    for (size_t j = 0; i < n; i++, j++) {
        double x = g[i];
        acc[j] += x * x;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

size_t rp_clip_blocks(size_t n, size_t *block)
{
    size_t bl = (n + RP_CLIP_MAX_BLOCKS - 1) / RP_CLIP_MAX_BLOCKS;
    if (bl < RP_CLIP_MIN_BLOCK)
        bl = RP_CLIP_MIN_BLOCK;
    *block = bl;
    return (n + bl - 1) / bl;
}

double rp_clip_block_sumsq(const float *g, size_t n, size_t b)
{
    size_t block, nblk = rp_clip_blocks(n, &block);
    if (b >= nblk)
        return 0.0;
    size_t lo = b * block, len = n - lo < block ? n - lo : block;
    return block_sumsq(g + lo, len);
}

double rp_clip_sumsq(const float *g, size_t n)
{
    if (n == 0)
        return 0.0;
    size_t block, nblk = rp_clip_blocks(n, &block);
    double part[RP_CLIP_MAX_BLOCKS];
#pragma omp parallel for schedule(static) if (nblk > 1)
    for (size_t b = 0; b < nblk; b++) {
        size_t lo = b * block, len = n - lo < block ? n - lo : block;
        part[b] = block_sumsq(g + lo, len);
    }
    double s = 0.0;
    for (size_t b = 0; b < nblk; b++)
        s += part[b];
    return s;
}

rp_status rp_clip_coef(double sumsq, double max_norm, double *norm, float *coef, rp_error *err)
{
    *coef = 1.0f;
    *norm = sqrt(sumsq);
    if (isnan(max_norm) || isinf(max_norm))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "gradient clipping: max norm must be finite, got %g", max_norm);
    if (!isfinite(sumsq))
        return rp_error_set(err, RP_ERR_NUMERIC,
                            "gradient norm is not finite (%g): a gradient holds NaN or Inf",
                            *norm);
    if (sumsq < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "gradient clipping: sum of squares is negative (%g)", sumsq);
    if (max_norm <= 0)
        return RP_OK;
    /* torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.0,
     * evaluated on an fp32 total_norm; doing the same fp32 operations
     * gives torch's coefficient whenever the fp32 norms agree. A norm
     * beyond fp32 range (torch would get Inf and a zero coefficient) is
     * handled in double instead. */
    float norm32 = (float)*norm;
    if (isfinite(norm32)) {
        float c = (float)max_norm / (norm32 + (float)1e-6);
        if (c < 1.0f)
            *coef = c;
    } else {
        *coef = (float)(max_norm / (*norm + 1e-6));
    }
    return RP_OK;
}
