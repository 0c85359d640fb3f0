/* Parameter layout of the model, layer by layer. A "layer" is the unit the
 * pipeline cuts the model into:
 *   layer 0        the embedding            (model.embed_tokens.weight)
 *   layers 1..L    decoder blocks           (model.layers.{l-1}.*)
 *   layer L+1      the head: final norm and LM head (model.norm.weight,
 *                  lm_head.weight unless tie_word_embeddings)
 * Each layer's parameters are one contiguous fp32 block. Tensors sit at
 * offsets that are multiples of RP_PARAM_ALIGN elements; the gaps between
 * them are padding that stays zero (its gradient is always zero, so AdamW
 * leaves it at zero). Shapes are Hugging Face's: Linear weights are
 * [out, in], row-major. */
#ifndef RP_MODEL_LAYOUT_H
#define RP_MODEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/config.h"

#define RP_PARAM_ALIGN 16 /* elements: 64 bytes in fp32, 32 in bf16 */
#define RP_MODEL_MAX_HEAD_DIM 2048 /* RoPE frequencies live on the stack */

#include "core/layer_kind.h" /* shared with the planner */

typedef struct rp_param_desc {
    char name[96];    /* full Hugging Face name */
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* shape[1] = 1 when ndim == 1 */
    size_t offset;    /* elements from the start of the layer block */
    size_t numel;
    int decay;        /* AdamW weight decay applies (ndim >= 2) */
} rp_param_desc;

typedef struct rp_layer_desc {
    rp_layer_kind kind;
    int block;   /* decoder block index (HF's i in model.layers.i), -1 otherwise */
    int nparams;
    rp_param_desc *params; /* nparams of them (in the layers' own allocation) */
    size_t numel; /* elements of the whole block, padding included */
} rp_layer_desc;

/* Offsets of a decoder block's tensors within its layer block; absent ones
 * (biases without attention_bias, q/k norms outside Qwen3) are SIZE_MAX. The
 * order is the order of rp_layer_desc.params. A dense block has w_gate,
 * w_up and w_down; a mixture-of-experts block (rp_model_block_is_moe) has
 * instead the router (mlp.gate [E, H]) and its experts: expert e's
 * gate_proj [I, H], up_proj [I, H] and down_proj [H, I] (I the experts'
 * width) at expert(e) + 0, 1 and 2 times expert_stride, expert(e) = experts
 * + 3 e expert_stride. A gpt-oss block (every one of its blocks is a
 * mixture of experts) has biases on q/k/v/o, its sinks after o_proj,
 * the router mlp.router.weight [E, H] and .bias [E], and each expert's
 * projections as Linear weights under roundpipe's own names
 * mlp.experts.{e}.{gate,up,down}.weight ([I, H], [I, H], [H, I]) and
 * .bias ([I], [I], [H]), all weights first, then all biases; a model
 * directory holds transformers' fused tensors instead
 * (io/gpt_oss_experts.h maps them). */
typedef struct rp_block_offsets {
    size_t in_norm, wq, bq, wk, bk, wv, bv, wo, bo, q_norm, k_norm, post_norm, w_gate, w_up,
        w_down;
    size_t router, experts, expert_stride;
    /* gpt-oss (else SIZE_MAX): the sinks (self_attn.sinks [heads]), the
     * router's bias (mlp.router.bias [E]) and the experts' biases: expert
     * e's gate [I], up [I] and down [H] at expert_bias + e
     * expert_bias_stride + 0, align(I) and 2 align(I) */
    size_t sinks, router_bias, expert_bias, expert_bias_stride;
    size_t numel;
} rp_block_offsets;

/* Offsets of a LoRA block's adapters within its (trainable) layer block:
 * a[p] of projection p's A [r, in], b[p] of its B [out, r]; SIZE_MAX for a
 * projection the configuration does not target or the block does not have
 * (a dense block's router). A mixture-of-experts block's gate_proj, up_proj
 * and down_proj have one adapter per expert (io/config_lora.h rp_lora_copies):
 * expert e's A at a[p] + e expert_stride[p], its B at b[p] + e
 * expert_stride[p]; expert_stride[p] is 0 for a single adapter. */
typedef struct rp_lora_offsets {
    size_t a[RP_LORA_NPROJ], b[RP_LORA_NPROJ];
    size_t expert_stride[RP_LORA_NPROJ];
    size_t numel;
} rp_lora_offsets;

/* Checks the configuration for what the layer math needs (positive sizes,
 * heads divisible by kv heads, even head_dim, ...), naming the field. */
rp_status rp_model_config_check(const rp_model_config *cfg, rp_error *err);

/* Describe all num_hidden_layers + 2 layers: their trainable parameters.
 * The descriptors and their parameters are one allocation.
 * With LoRA (cfg->lora.rank > 0) those are the adapters only, under PEFT's
 * names (io/config_lora.h rp_lora_tensor_name): a block holds the A and B
 * of each targeted projection it has (rp_lora_offsets; per expert in a
 * mixture-of-experts block), the embedding and the head hold nothing
 * (numel 0); the frozen weights are
 * rp_model_base_layout's. *layers is malloc'ed; the caller frees it with
 * free(). A LoRA configuration with no target the model has, a dropout
 * outside [0, 1) or a non-finite alpha is an error, and so is a dropout
 * above 0 on a mixture of experts' experts (RP_ERR_UNSUPPORTED: their
 * rows are grouped by expert, not in the samples' order that keys the
 * masks). */
rp_status rp_model_layout(const rp_model_config *cfg, rp_layer_desc **layers, int *nlayers,
                          rp_error *err);

/* The layout of the full model (every weight, as without LoRA): with LoRA,
 * the frozen base the adapters sit beside. */
rp_status rp_model_base_layout(const rp_model_config *cfg, rp_layer_desc **layers, int *nlayers,
                               rp_error *err);

/* The adapter offsets of LoRA block `block` (model.layers.{block}; the
 * same numbers rp_model_layout puts in the descriptors). Blocks of one kind
 * (dense or mixture of experts) share their offsets. */
void rp_lora_offsets_get(const rp_model_config *cfg, int block, rp_lora_offsets *off);

/* The offsets of block `block` (model.layers.{block}; the same numbers
 * rp_model_layout puts in the descriptors). Blocks of one kind (dense or
 * mixture of experts) share their offsets. */
void rp_block_offsets_get(const rp_model_config *cfg, int block, rp_block_offsets *off);

/* Find a tensor by full name in a layer; NULL when absent. */
const rp_param_desc *rp_layer_find_param(const rp_layer_desc *layer, const char *name);

/* Random initialisation as transformers' _init_weights: matrices and
 * embeddings ~ normal(0, initializer_range) drawn with
 * rp_rng_fill_normal(seed, rp_rng_stream_id(full name), first index 0),
 * norm weights 1, biases 0, padding 0. Depends only on (seed, name, element),
 * never on ranks or threads. A LoRA adapter starts as PEFT's: A uniform in
 * +-1/sqrt(in) (kaiming_uniform with a = sqrt(5)), drawn as
 * (2 rp_rng_uniform(seed, rp_rng_stream_id(name), element) - 1) / sqrt(in),
 * and B zero. */
void rp_layer_init(const rp_model_config *cfg, const rp_layer_desc *layer, uint64_t seed,
                   float *params);
/* The same for elements [lo, hi) of the layer's array alone (padding
 * included, hi clipped to the layer's numel): any split of a layer into
 * ranges writes the bits of rp_layer_init. */
void rp_layer_init_range(const rp_model_config *cfg, const rp_layer_desc *layer, uint64_t seed,
                         float *params, size_t lo, size_t hi);

/* The layers [*first, *end) of part `part` of `parts` of a model's
 * layers, for the ranks of a node that each fill a part of one store:
 * contiguous, in order, about equal in elements (a part may hold none);
 * part 0 starts at layer 0 and the parts cover every layer once. */
void rp_layer_part(const rp_layer_desc *layers, int nlayers, int part, int parts, int *first,
                   int *end);

/* Cost of one layer for the planner. Closed forms (multiply-add = 2 FLOPs;
 * elementwise work, norms, softmax exponentials are not counted):
 *   embedding: 0 FLOPs (a row copy), backward 0 (a row add).
 *   block, per token, sequence length S:
 *     2*H*(QD + 2*KD) + 2*QD*H          q/k/v/o projections
 *     + 6*H*I                           gate, up, down (a mixture-of-experts
 *                                       block: 2*H*E + k*6*H*IE, the router
 *                                       and k experts of width IE)
 *     + 2*QD*(S+1)                      QK^T and PV, causal: on average
 *                                       (S+1)/2 keys per query, 2 products
 *     (QD = heads*head_dim, KD = kv_heads*head_dim)
 *     with LoRA + 2*r*(in+out) per targeted projection (the adapter,
 *                                       counted apart as `adapter` below;
 *                                       an expert projection's k times,
 *                                       the adapters of the k experts a
 *                                       token is routed to)
 *   head: 2*H*V per token (logits); the loss is elementwise.
 * Backward with recompute: bwd_flops = fwd + 2*gemm + 2.5*attn (the
 * forward again, then two products per GEMM, and five attention products
 * where the forward has two). The head runs forward and backward in one pass:
 * bwd_flops = 3 * 2*H*V.
 * With LoRA the frozen weights get no gradient: a block's backward is
 * fwd + gemm + 2*adapter + 2.5*attn (the input gradients of the base, two
 * products per adapter GEMM), the head's 2 * 2*H*V, the embedding's none.
 * A block's backward adds 2*(remade + remade_adapter) of rp_block_work
 * below: the MLP's forward it makes again (a mixture of experts' always,
 * a dense MLP's when its microbatch of nseq x S tokens walks several
 * chunks).
 * act_floats_per_token: the layer input the checkpoint saves (H; 1 int32 for
 * the embedding's token ids counted as one float). */
typedef struct rp_layer_flops {
    double fwd_flops_per_token;
    double bwd_flops_per_token; /* recompute included */
    size_t param_numel;         /* padding included */
    size_t act_floats_per_token;
} rp_layer_flops;

void rp_layer_flops_get(const rp_model_config *cfg, const rp_layer_desc *layer, int64_t nseq,
                        int64_t seqlen, rp_layer_flops *cost);

/* The work of block `block` a token does at sequence length S, as the
 * block runs it (the terms of rp_layer_flops_get above, and what `roundpipe
 * plan`'s closed form takes for a block it cannot derive from a dense
 * shape): gemm, the GEMM weights a token passes through (q/k/v/o, a dense
 * MLP or the router and k experts); adapter, the LoRA adapters' (an expert
 * projection's k times; gpt-oss's gate_up adapter with 2I outputs, gate and
 * up sharing A but each forming x A, so A counted twice); keys, those a
 * query sees on average; remade and remade_adapter, the GEMM and adapter
 * weights a token passes through again in the backward, which makes the
 * MLP's g and u again where the forward kept none (a mixture of experts
 * always, its k experts'; a dense MLP over several chunks of its
 * microbatch of nseq x S tokens, model/token_tiles.h): the gate and up
 * GEMMs, their adapters and the down projection's A; 0 when it keeps
 * them. */
typedef struct rp_block_work {
    double gemm;
    double adapter;
    double keys;
    double remade;
    double remade_adapter;
} rp_block_work;

void rp_block_work_get(const rp_model_config *cfg, int block, int64_t nseq, int64_t seqlen,
                       rp_block_work *w);

#endif
