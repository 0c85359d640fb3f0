/* Rotary position embedding on the GPU, Hugging Face rotate_half layout,
 * as kernels/cpu/rope.h: element i of a head pairs with i + head_dim/2 and
 * both turn by pos * inv_freq[i]; positions restart per sequence. inv_freq
 * comes from the host (rp_model_rope_inv_freq, so default and llama3
 * scaling are computed once, in one place) and is uploaded by the caller.
 * Device pointers; `stream` a cudaStream_t; cudaError_t returned. */
#ifndef RP_KERNELS_CUDA_ROPE_H
#define RP_KERNELS_CUDA_ROPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cs[p*half + i] = cos(p*f_i), cs[seqlen*half + p*half + i] = sin(p*f_i),
 * the angle rounded to fp32 first (as rp_rope_table). */
int rp_cuda_rope_table(float *cs, const float *inv_freq, int64_t seqlen, int64_t half,
                       void *stream);

/* Rotate x [nseq*seqlen, nheads*head_dim] in place by +angle or, with
 * inverse, by -angle (the backward). When x_bf16 != NULL the rotated values
 * are also written there in bf16. A token's position is its index in its
 * sequence, or with seg_start (device memory; NULL: none) its distance from
 * its segment's first token. */
int rp_cuda_rope_apply(float *x, uint16_t *x_bf16, const float *cs, int64_t nseq, int64_t seqlen,
                       const int32_t *seg_start, int64_t nheads, int64_t head_dim, int inverse,
                       void *stream);

#ifdef __cplusplus
}
#endif
#endif
