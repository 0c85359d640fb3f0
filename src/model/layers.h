/* The layer math of Llama / Qwen3 decoder-only models on CPU, fp32, with the
 * semantics of Hugging Face transformers (modeling_llama.py,
 * modeling_qwen3.py). Every layer has a forward and a backward; a block's
 * forward keeps what its backward needs in a caller-owned `saved` area, so
 * the backward never runs the forward again. Activations are row-major [tokens, hidden] with tokens = nseq
 * sequences of seqlen back to back; positions restart at 0 per sequence and
 * attention is causal within each sequence.
 *
 * Parameter gradients are accumulated (+=), so calling a backward on
 * microbatch 1 then microbatch 2 sums their gradients in that order. For a
 * fixed OpenMP thread count all results are bit-identical from run to run
 * (static schedules, every sum in a fixed order, no float atomics).
 *
 * The configuration must have passed rp_model_config_check (rp_model_layout
 * calls it). GEMMs go to OpenBLAS; do not call these from inside an OpenMP
 * parallel region. Workspace sizes depend only on the configuration and
 * the shapes (not on the thread count). */
#ifndef RP_MODEL_LAYERS_H
#define RP_MODEL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/config.h"
#include "model/layout.h"

/* Keys/queries per attention block (online softmax); memory is linear in
 * the sequence length for any block size. */
#define RP_ATTN_BLOCK 64

/* ---- embedding (layer 0) ----------------------------------------------- */

/* out[t] = W[tokens[t]], W is [vocab, hidden]. A token outside [0, vocab) is
 * an RP_ERR_RANGE error naming its position; out is then untouched. */
rp_status rp_embed_forward(const rp_model_config *cfg, const float *W, const int32_t *tokens,
                           int64_t T, float *out, rp_error *err);

/* dW[tokens[t]] += dout[t], tokens in order (each thread owns a slice of the
 * hidden columns). Same token check as the forward, before any write. */
rp_status rp_embed_backward(const rp_model_config *cfg, const int32_t *tokens, int64_t T,
                            const float *dout, float *dW, rp_error *err);

/* ---- decoder block (layers 1..L) ---------------------------------------- */

/* Floats for nseq sequences of seqlen tokens of the area a block's forward
 * saves for its backward (one per layer awaiting its backward), and of the
 * scratch workspace both calls use (one per executor): each a*tokens +
 * b*seqlen + c, no seqlen^2 term. */
size_t rp_block_saved_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen);
size_t rp_block_workspace_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen);

/* y = block(x), keeping in `saved` what the backward needs. y == NULL
 * skips the output (and the down projection): for a layer whose forward
 * runs only for its backward. params is the layer block laid out as
 * rp_block_offsets_get. y must not alias x. */
void rp_block_forward(const rp_model_config *cfg, const float *params, const float *x, float *y,
                      int64_t nseq, int64_t seqlen, float *saved, float *ws);

/* dx = dL/dx (overwritten; may alias dy, must not alias x) and dparams +=
 * dL/dparams, given dy = dL/dy, from the `saved` area of this layer's
 * forward on the same x and params (consumed: the backward overwrites part
 * of it, so each forward serves one backward). */
void rp_block_backward(const rp_model_config *cfg, const float *params, const float *x,
                       float *saved, const float *dy, float *dx, float *dparams, int64_t nseq,
                       int64_t seqlen, float *ws);

/* inv_freq [head_dim/2] of the model's RoPE (default or llama3 scaling). */
void rp_model_rope_inv_freq(const rp_model_config *cfg, float *inv_freq);

/* ---- head (layer L+1): final norm + LM head + cross-entropy ------------- */

#define RP_HEAD_CHUNK 64 /* a good default number of tokens per logits chunk */

/* Floats of workspace for rp_head_forward_backward over chunks of `chunk`
 * tokens (independent of T beyond min(T, chunk)). */
size_t rp_head_workspace_floats(const rp_model_config *cfg, int64_t T, int64_t chunk);

/* Token t counts when mask == NULL or mask[t] != 0; its loss is
 * -log softmax(lm_w * rmsnorm(x_t) * norm_w)[targets[t]] (targets are the
 * already shifted next tokens). *loss_sum = the sum over counted tokens, in
 * double, summed in token order; *ncounted (may be NULL) their number.
 * When dx != NULL: dx = d(scale * loss_sum)/dx (rows that do not count get
 * only what flows through other rows, i.e. zero), dnorm_w += and dlm_w +=
 * the scale-weighted gradients. lm_w is [vocab, hidden]: with tied
 * embeddings pass the embedding matrix and its gradient buffer.
 * Logits exist for `chunk` tokens at a time, never for all T.
 * A counted target outside [0, vocab) is RP_ERR_RANGE (checked before any
 * write). */
rp_status rp_head_forward_backward(const rp_model_config *cfg, const float *norm_w,
                                   const float *lm_w, const float *x, const int32_t *targets,
                                   const uint8_t *mask, int64_t T, float scale, float *dx,
                                   float *dnorm_w, float *dlm_w, int64_t chunk, float *ws,
                                   double *loss_sum, int64_t *ncounted, rp_error *err);

#endif
