/* Rotary position embedding in Hugging Face's rotate_half layout: element i
 * of a head pairs with element i + head_dim/2 and both turn by the angle
 * pos * inv_freq[i]. Positions restart at 0 for every sequence. */
#ifndef RP_KERNELS_CPU_ROPE_H
#define RP_KERNELS_CPU_ROPE_H

#include <stdint.h>

#include "kernels/rope_freq.h" /* the frequencies the table is built from */

/* cos/sin table for positions 0..seqlen-1: cs[p*half + i] = cos(p*f_i),
 * cs[seqlen*half + p*half + i] = sin(p*f_i), angles in fp32 as in
 * transformers (position * inv_freq rounded to fp32 first). 2*seqlen*half
 * floats. */
void rp_rope_table(float *cs, const float *inv_freq, int64_t seqlen, int64_t half);

/* Rotate x [nseq*seqlen, nheads*head_dim] in place by +angle (forward) or
 * -angle (inverse = transpose, which is the backward of the forward). Token
 * t's position is its index in its sequence, or with seg_start (see
 * rp_attn_shape) its distance from its segment's first token. */
void rp_rope_apply(float *x, const float *cs, int64_t nseq, int64_t seqlen,
                   const int32_t *seg_start, int64_t nheads, int64_t head_dim, int inverse);

#endif
