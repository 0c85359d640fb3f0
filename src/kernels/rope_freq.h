/* Rotary position embedding's frequencies, the same for every back end:
 * computed on the host in fp32 (as transformers does) and handed to a back
 * end's rope table (the ops table's rope_table). The model computes them
 * from its config (rp_model_rope_inv_freq); the kernels only apply them. */
#ifndef RP_KERNELS_ROPE_FREQ_H
#define RP_KERNELS_ROPE_FREQ_H

#include <stdint.h>

/* Frequency scaling of Llama 3.1 ("rope_type": "llama3"); factor <= 0 or a
 * NULL pointer means plain RoPE. */
typedef struct rp_rope_llama3 {
    double factor;
    double low_freq_factor;
    double high_freq_factor;
    double original_max_position_embeddings;
} rp_rope_llama3;

/* inv_freq[i] for i < head_dim/2, computed in fp32 the way transformers
 * does: 1 / theta^(2i/head_dim), then the llama3 rescaling when given. */
void rp_rope_inv_freq(float *inv_freq, int64_t head_dim, double theta, const rp_rope_llama3 *l3);

/* YaRN ("rope_type": "yarn"; gpt-oss): the settings of io/config.h's
 * rp_rope_scaling as transformers reads them. */
typedef struct rp_rope_yarn {
    double factor;                           /* > 0 */
    double beta_fast, beta_slow;             /* 0: transformers' 32 and 1 */
    double original_max_position_embeddings; /* > 0 */
    int truncate;                            /* floor/ceil the correction range */
    double attention_factor;                 /* > 0: as given; 0: derived */
    double mscale, mscale_all_dim;           /* 0: absent */
} rp_rope_yarn;

/* inv_freq[i] for i < head_dim/2 and the attention factor (returned) of
 * YaRN, computed as transformers' _compute_yarn_parameters does (the
 * correction range in double as Python floats, the frequencies and the
 * ramp in fp32 tensors): frequencies below the range are interpolated
 * (divided by factor), above it extrapolated (kept), a linear ramp between.
 * The attention factor (0.1 ln(factor) + 1 when derived, 1 for factor <=
 * 1; with mscale and mscale_all_dim their ratio of that form) scales the
 * cos and sin tables transformers' rotary embedding returns: cos, sin =
 * cos(p f) * a, sin(p f) * a in fp32; rotating q and k by the scaled table
 * multiplies every attention logit by a^2. */
double rp_rope_yarn_inv_freq(float *inv_freq, int64_t head_dim, double theta,
                             const rp_rope_yarn *yarn);

#endif
