/* The layers of Llama / Qwen3 decoder-only models with the semantics of
 * Hugging Face transformers (modeling_llama.py, modeling_qwen3.py), written
 * once over the kernel ops table of src/kernels/ops.h: every call takes the
 * table and its state (rp_kernels) of the back end that runs it, and every
 * pointer is that back end's memory. Every layer has a forward and a
 * backward; a block's forward keeps what its backward needs in a
 * caller-owned `saved` area, so the backward never runs the forward again.
 * Activations are row-major [tokens, hidden] with tokens = nseq sequences of
 * seqlen back to back; positions restart at 0 per sequence and attention is
 * causal within each sequence.
 *
 * Parameters come in `params_dtype`, fp32 or bf16 (the host store's compute
 * copy, uploaded as it is); activations between layers and gradients are
 * fp32; what the GEMMs and the attention read is in the table's compute
 * dtype (fp32 on the CPU, bf16 on CUDA), but weights in a dtype the table's
 * GEMMs read (ops->weight_dtypes: bf16 on the CPU too) are read where they
 * lie; parameters in another dtype are converted once per forward (and
 * kept for the backward); 1-D tensors (norm weights, biases) are read in
 * fp32. Parameter gradients are accumulated (+=), so calling a
 * backward on microbatch 1 then microbatch 2 sums their gradients in that
 * order. On the CPU table, for a fixed OpenMP thread count, all results are
 * bit-identical from run to run (static schedules, every sum in a fixed
 * order, no float atomics).
 *
 * The configuration must have passed rp_model_config_check (rp_model_layout
 * calls it). Sizes depend only on the table, the configuration and the
 * shapes (not on the thread count), so the planner sizes jobs with the same
 * functions the executors allocate with. Calls return RP_OK or the failing
 * op's error. */
#ifndef RP_MODEL_LAYERS_H
#define RP_MODEL_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/config.h"
#include "kernels/ops.h"
#include "model/layout.h"

/* Keys/queries per attention block (online softmax); memory is linear in
 * the sequence length for any block size. */
#define RP_ATTN_BLOCK 64

/* ---- embedding (layer 0) ----------------------------------------------- */

/* out[t] = W[tokens[t]], W is [vocab, hidden]. A token outside [0, vocab) is
 * an RP_ERR_RANGE error naming its position; out is then untouched. */
rp_status rp_embed_forward(const rp_kernels *k, const rp_model_config *cfg, const void *W,
                           rp_dtype W_dtype, const int32_t *tokens, int64_t T, float *out,
                           rp_error *err);

/* dW[tokens[t]] += dout[t], tokens in order (each thread owns a slice of the
 * hidden columns). Same token check as the forward, before any write. */
rp_status rp_embed_backward(const rp_kernels *k, const rp_model_config *cfg,
                            const int32_t *tokens, int64_t T, const float *dout, float *dW,
                            rp_error *err);

/* ---- decoder block (layers 1..L) ---------------------------------------- */

/* The shape of block `block`'s attention calls over nseq sequences of
 * seqlen tokens (no segments and no sinks: the calls set those; gpt-oss's
 * sliding blocks with their window). */
rp_attn_shape rp_block_attn_shape(const rp_model_config *cfg, int block, int64_t nseq,
                                  int64_t seqlen);

/* Floats for nseq sequences of seqlen tokens of the area a block's forward
 * saves for its backward (one per layer awaiting its backward), and of the
 * scratch workspace both calls use (one per executor), on the back end of
 * `ops`: each a*tokens + b*seqlen + c, no seqlen^2 term. */
size_t rp_block_saved_floats(const rp_kernel_ops *ops, rp_dtype params_dtype,
                             const rp_model_config *cfg, int64_t nseq, int64_t seqlen);
size_t rp_block_workspace_floats(const rp_kernel_ops *ops, rp_dtype params_dtype,
                                 const rp_model_config *cfg, int64_t nseq, int64_t seqlen);
/* The saved area of block `block` alone (rp_block_saved_floats is the
 * largest over the model's blocks: a dense and a mixture-of-experts
 * block's differ), for a host store that keeps it per layer. */
size_t rp_block_saved_floats_of(const rp_kernel_ops *ops, rp_dtype params_dtype,
                                const rp_model_config *cfg, int block, int64_t nseq,
                                int64_t seqlen);

/* Guard bands, for tests: with rp_model_guard_floats > 0 (set before
 * anything is sized, never changed while buffers of that size exist), every
 * slice of a block's saved area and scratch is followed by that many floats
 * no op may write; rp_block_guards lists where they are (area 0: saved,
 * 1: scratch; offsets in floats), so a test that poisoned both areas can
 * check that nothing ran past its slice. */
#define RP_MODEL_MAX_GUARDS 64
typedef struct rp_model_guards {
    int n;
    int area[RP_MODEL_MAX_GUARDS];
    size_t at[RP_MODEL_MAX_GUARDS];
} rp_model_guards;
extern size_t rp_model_guard_floats;
void rp_block_guards(const rp_kernel_ops *ops, rp_dtype params_dtype, const rp_model_config *cfg,
                     int block, int64_t nseq, int64_t seqlen, rp_model_guards *out);

/* One tensor of a layer where it lies: its element offset `at` in the
 * layer's block layout (rp_block_offsets) and its bytes. */
typedef struct rp_weight_piece {
    size_t at;
    const void *src;
    size_t numel;
} rp_weight_piece;

/* LoRA (cfg->lora.rank > 0): what a block call needs besides the frozen
 * weights. Those come as `params` (laid out as without LoRA, in
 * params_dtype), or, with base != NULL and params NULL, tensor by tensor
 * where they lie (a CPU executor reading a mapped base in place), in
 * base_dtype, which the table's GEMMs must read (ops->weight_dtypes). The
 * layer's adapters (its trainable block, rp_lora_offsets) are in
 * params_dtype; the dropout masks are keyed by (seed, step, sample, layer,
 * projection, element) with sample = first_sample + the sequence's index
 * in the call (kernels/ops.h, rp_dropout_site), so they do not depend on
 * how samples are dealt to microbatches or ranks. */
typedef struct rp_lora_call {
    const void *adapters;
    const rp_weight_piece *base; /* NULL: the frozen weights are `params` */
    int nbase;
    rp_dtype base_dtype;
    uint64_t seed;
    int64_t step;
    int32_t layer;        /* the decoder block's index (model.layers.{layer}) */
    int64_t first_sample; /* of the iteration's batch */
} rp_lora_call;

/* What a block call needs besides its weights and activations: which
 * block it is, LoRA's adapters, and a mixture-of-experts block's router
 * statistics. NULL (a call without any) stands for block 0 of a model
 * without LoRA; a model with LoRA or experts needs one. */
typedef struct rp_block_call {
    int32_t block;             /* model.layers.{block} */
    const rp_lora_call *lora;  /* with LoRA (cfg->lora.rank > 0), else NULL */
    /* Mixture of experts (rp_model_block_is_moe), device memory of k's
     * back end: the forward writes the routing's load-balancing
     * statistics to router_stats (fp32 [2E], the kernel ops' moe_stats:
     * tokens per expert, then the sums of each expert's probability),
     * unless it is NULL (a recompute); the backward adds router_aux_grad
     * (fp32 [E], or NULL: no auxiliary loss) to every token's gradient of
     * each expert's probability. */
    float *router_stats;
    const float *router_aux_grad;
    /* non-zero: ops written for this back end but not yet run on it may
     * run (rp_model_ops_check's allow_unproven) */
    int allow_unproven;
    /* the call's seg_start in host memory, or NULL (rp_attn_shape's
     * seg_host: a GPU's attention reads the documents' count from it) */
    const int32_t *segments_host;
} rp_block_call;

/* y = block(x), keeping in `saved` what the backward needs. y == NULL
 * skips the output (and the down projection): for a layer whose forward
 * runs only for its backward. params is the layer block laid out as
 * rp_block_offsets_get. y must not alias x. seg_start (device memory of
 * k's back end, or NULL) packs documents into each sequence: a token
 * attends to the earlier tokens of its segment only and its RoPE position
 * restarts there (rp_attn_shape). With LoRA, call->lora gives the
 * adapters: each targeted projection adds scaling * B A dropout(x) to its
 * frozen output (model/lora.h). A mixture-of-experts block's MLP is
 * model/moe.h's, with its router's and per-expert adapters. */
rp_status rp_block_forward(const rp_kernels *k, const rp_model_config *cfg, const void *params,
                           rp_dtype params_dtype, const float *x, float *y, int64_t nseq,
                           int64_t seqlen, const int32_t *seg_start, float *saved, float *ws,
                           const rp_block_call *call, rp_error *err);

/* dx = dL/dx (overwritten; may alias dy, must not alias x) and dparams +=
 * dL/dparams, given dy = dL/dy, from the `saved` area of this layer's
 * forward on the same x and params (consumed: the backward overwrites part
 * of it, so each forward serves one backward). With LoRA, dparams is the
 * adapters' gradient (laid out as they are) and the frozen weights get
 * none; call is the forward's (but for router_stats). */
rp_status rp_block_backward(const rp_kernels *k, const rp_model_config *cfg, const void *params,
                            rp_dtype params_dtype, const float *x, float *saved, const float *dy,
                            float *dx, float *dparams, int64_t nseq, int64_t seqlen,
                            const int32_t *seg_start, float *ws, const rp_block_call *call,
                            rp_error *err);

/* Whether the back end of `ops` runs every layer of the model: gpt-oss
 * runs on a GPU's table only where allow_unproven (the gpt-oss path of
 * core/unproven.h: proven on the H200 of 2026-11-30, on unless
 * RP_DISABLE_CUDA_PATHS names it). RP_ERR_UNSUPPORTED naming the back end
 * otherwise. */
rp_status rp_model_ops_check(const rp_model_config *cfg, const rp_kernel_ops *ops,
                             int allow_unproven, rp_error *err);

/* Whether RP_TEST_FUSED_GATE_UP=1 asks the CPU executors for the dense
 * MLP's gate and up as one GEMM (a test hook; model/block.c). Like the
 * CUDA paths of core/unproven.h it lays out a block's buffers, so every rank must
 * read the same (engine/trainer.c checks). */
int rp_block_test_fused_gate_up(void);

/* inv_freq [head_dim/2] of the model's RoPE (default, llama3 or YaRN
 * scaling), and the factor YaRN scales its cos and sin tables by (1
 * without YaRN): the blocks scale the table rope_table made by it. */
void rp_model_rope_inv_freq(const rp_model_config *cfg, float *inv_freq);
double rp_model_rope_attention_factor(const rp_model_config *cfg);

/* ---- head (layer L+1): final norm + LM head + cross-entropy ------------- */

/* Floats of workspace for rp_head_forward_backward over T tokens in chunks
 * of `chunk` tokens (0: the back end's choice without a memory figure,
 * ops->logits_rows(vocab, 0)): the logits of one chunk and the losses of
 * all T tokens. */
size_t rp_head_workspace_floats(const rp_kernel_ops *ops, rp_dtype params_dtype,
                                const rp_model_config *cfg, int64_t T, int64_t chunk);

/* Token t counts when mask == NULL or mask[t] != 0; its loss is
 * -log softmax(lm_w * rmsnorm(x_t) * norm_w)[targets[t]] (targets are the
 * already shifted next tokens). *loss_sum (host) = the sum over counted
 * tokens, in double, summed in token order.
 * When dx != NULL: dx = d(scale * loss_sum)/dx (rows that do not count get
 * only what flows through other rows, i.e. zero), dnorm_w += and dlm_w +=
 * the scale-weighted gradients (either may be NULL: a frozen weight, as
 * with LoRA). norm_w and lm_w are in params_dtype; the GEMMs read lm_w
 * where it lies when the table reads that dtype (ops->weight_dtypes), else
 * it is converted whole into the workspace. lm_w is [vocab, hidden]: with tied
 * embeddings pass the embedding matrix and its gradient buffer.
 * Logits exist for `chunk` tokens at a time (0: the back end's choice),
 * never for all T. A counted target outside [0, vocab) is RP_ERR_RANGE
 * (checked before any write). */
rp_status rp_head_forward_backward(const rp_kernels *k, const rp_model_config *cfg,
                                   const void *norm_w, const void *lm_w, rp_dtype params_dtype,
                                   const float *x,
                                   const int32_t *targets, const uint8_t *mask, int64_t T,
                                   float scale, float *dx, float *dnorm_w, float *dlm_w,
                                   int64_t chunk, float *ws, double *loss_sum, rp_error *err);

/* Workspace floats one executor needs for any block or head call on the
 * back end of `ops` (the larger of the two). */
size_t rp_model_workspace_floats(const rp_kernel_ops *ops, rp_dtype params_dtype,
                                 const rp_model_config *cfg, int64_t nseq, int64_t seqlen);

#endif
