/* Rotary position embedding's frequencies (kernels/rope_freq.h). */
#include "kernels/rope_freq.h"

#include <math.h>

void rp_rope_inv_freq(float *inv_freq, int64_t head_dim, double theta, const rp_rope_llama3 *l3)
{
    const int64_t half = head_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        /* torch: arange(0, dim, 2).float() / dim, then base ** that, all fp32 */
        float e = (float)(2 * i) / (float)head_dim;
        float f = 1.0f / powf((float)theta, e);
        if (l3 && l3->factor > 0) {
            /* transformers does this in fp32 tensors against Python floats,
             * which torch rounds to fp32 before comparing or combining */
            float factor = (float)l3->factor, old = (float)l3->original_max_position_embeddings;
            float lo = (float)l3->low_freq_factor;
            float low_wl = (float)(l3->original_max_position_embeddings / l3->low_freq_factor);
            float high_wl = (float)(l3->original_max_position_embeddings / l3->high_freq_factor);
            float wl = (float)(2.0 * M_PI) / f;
            if (wl > low_wl) {
                f = f / factor;
            } else if (!(wl < high_wl)) {
                /* medium band: interpolate between scaled and unscaled */
                float smooth = (old / wl - lo) / (float)(l3->high_freq_factor - l3->low_freq_factor);
                f = (1.0f - smooth) * f / factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}

/* transformers' get_mscale */
static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* The dimension at which a wavelength makes num_rotations turns over the
 * original context (find_correction_dim), in double like Python's math. */
static double yarn_correction_dim(double num_rotations, double dim, double base, double max_pos)
{
    return (dim * log(max_pos / (num_rotations * 2 * M_PI))) / (2 * log(base));
}

double rp_rope_yarn_inv_freq(float *inv_freq, int64_t head_dim, double theta,
                             const rp_rope_yarn *y)
{
    const double factor = y->factor;
    double attention = y->attention_factor;
    if (!(attention > 0))
        attention = y->mscale != 0 && y->mscale_all_dim != 0
                        ? yarn_mscale(factor, y->mscale) / yarn_mscale(factor, y->mscale_all_dim)
                        : yarn_mscale(factor, 1.0);
    const double beta_fast = y->beta_fast != 0 ? y->beta_fast : 32;
    const double beta_slow = y->beta_slow != 0 ? y->beta_slow : 1;
    const double dim = (double)head_dim, orig = y->original_max_position_embeddings;
    double low = yarn_correction_dim(beta_fast, dim, theta, orig);
    double high = yarn_correction_dim(beta_slow, dim, theta, orig);
    if (y->truncate) {
        low = floor(low);
        high = ceil(high);
    }
    low = low > 0 ? low : 0;
    high = high < dim - 1 ? high : dim - 1;
    if (low == high)
        high += 0.001; /* transformers: "Prevent singularity" */
    /* torch rounds a Python float operand to the fp32 tensor's dtype */
    const float low_f = (float)low, span_f = (float)(high - low), factor_f = (float)factor;
    const int64_t half = head_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)head_dim;
        float pos_freq = powf((float)theta, e);
        float extrapolation = 1.0f / pos_freq;
        float interpolation = 1.0f / (factor_f * pos_freq);
        float ramp = ((float)i - low_f) / span_f;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        /* each product and the sum rounded to fp32 on its own, as torch's
         * separate elementwise ops */
        float keep = 1.0f - ramp;
        float a = interpolation * (1.0f - keep);
        float b = extrapolation * keep;
        inv_freq[i] = a + b;
    }
    return attention;
}
