/* Where a LoRA dropout mask is drawn: the key of the counter-based
 * generator (DESIGN 10) for one call of the dropout op (kernels/ops.h).
 * Plain C, shared by the op tables, their CUDA kernels and the model. */
#ifndef RP_KERNELS_DROPOUT_H
#define RP_KERNELS_DROPOUT_H

#include <stdint.h>

/* Row r of a call is row R = first_row + r counted from the start of sample
 * first_sample: it belongs to sample first_sample + R / rows_per_sample and
 * is row R % rows_per_sample of it (first_row lets a call start inside a
 * sample, as the MLP's tiles of tokens do: model/token_tiles.h). Element c
 * of that row keeps its value when rp_rng_uniform(seed,
 * rp_dropout_stream(step, sample, layer, proj), (R % rows_per_sample) *
 * cols + c) >= p (core/philox.h), so a mask depends on the sample and the
 * element's place in it, never on how rows are split into calls, ranks or
 * threads. */
typedef struct rp_dropout_site {
    uint64_t seed;
    int64_t step;            /* the optimizer step */
    int32_t layer;           /* the decoder layer */
    int32_t proj;            /* the projection within the layer */
    int64_t first_sample;    /* the sample of the call's first row */
    int64_t rows_per_sample; /* >= 1 */
    int64_t first_row;       /* of the call's first row in its sample, [0, rows_per_sample) */
    float p;                 /* the chance of dropping, in [0, 1) */
} rp_dropout_site;

/* The argument checks both op tables make (NULL: fine), so they refuse the
 * same calls with the same reasons. */
static inline const char *rp_scaled_add_refusal(int64_t n, const float *y, const void *y_compute,
                                                int accumulate)
{
    return n < 0              ? "n < 0"
           : !y && accumulate ? "accumulate needs y"
           : !y && !y_compute ? "neither y nor y_compute"
                              : 0;
}

static inline const char *rp_dropout_refusal(const rp_dropout_site *site, int64_t rows,
                                             int64_t cols)
{
    if (!(site->p >= 0.0f && site->p < 1.0f)) /* NaN too */
        return "p is outside [0, 1)";
    if (site->rows_per_sample < 1 || rows < 0 || cols < 0)
        return "rows, cols >= 0 and rows_per_sample >= 1 are required";
    if (site->first_row < 0 || site->first_row >= site->rows_per_sample)
        return "first_row is outside [0, rows_per_sample)";
    return 0;
}

#endif
