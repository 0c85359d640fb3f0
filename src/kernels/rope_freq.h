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

#endif
