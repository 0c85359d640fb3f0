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
