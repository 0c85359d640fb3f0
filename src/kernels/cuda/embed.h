/* Token embedding on the GPU and the token-range check the layer calls
 * share. Device pointers; `stream` is a cudaStream_t; functions return a
 * cudaError_t (0 = success).
 *
 * The backward is deterministic without atomics: the (token, position)
 * pairs are radix-sorted by token (a stable sort, so positions stay in
 * increasing order within a token), then one thread block owns each
 * distinct token and adds its rows in position order:
 *     dW[v] = ((dW[v] + dout[t1]) + dout[t2]) + ...   with t1 < t2 < ...
 * which is exactly the CPU order, so the result equals the CPU's bit for
 * bit. */
#ifndef RP_KERNELS_CUDA_EMBED_H
#define RP_KERNELS_CUDA_EMBED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* *first_bad (device, 8 bytes) = the smallest position t (with mask == NULL
 * or mask[t] != 0) whose token is outside [0, limit), or UINT64_MAX when
 * there is none. */
int rp_cuda_tokens_first_bad(const int32_t *tokens, const uint8_t *mask, int64_t T,
                             int64_t limit, unsigned long long *first_bad, void *stream);

/* out[t] = W[tokens[t]] for rows of H floats; tokens must be in range. */
int rp_cuda_embed_forward(const float *W, const int32_t *tokens, int64_t T, int64_t H,
                          float *out, void *stream);
/* The same from a bf16 table [vocab, H], widened exactly. */
int rp_cuda_embed_forward_bf16(const uint16_t *W, const int32_t *tokens, int64_t T, int64_t H,
                               float *out, void *stream);

/* Bytes of device scratch the backward needs for T tokens of a vocabulary
 * of `vocab` (asks CUB, so it needs a CUDA device). */
int rp_cuda_embed_backward_scratch(int64_t T, int64_t vocab, size_t *bytes);

/* dW[tokens[t]] += dout[t] (rows of H floats) in token-position order. */
int rp_cuda_embed_backward(const int32_t *tokens, int64_t T, int64_t H, int64_t vocab,
                           const float *dout, float *dW, void *scratch, size_t scratch_bytes,
                           void *stream);

#ifdef __cplusplus
}
#endif
#endif
