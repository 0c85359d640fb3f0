/* The LoRA part of a model's config (io/config.h's rp_lora_config): the
 * projections' names, an adapter's scaling, which projections and how many
 * adapters of each a model of a config has, their shapes, and the names
 * their tensors go by (PEFT's, io/peft.h). What the model's layout and
 * layers need of LoRA, so model/ takes it from the config reader
 * (DESIGN 12) rather than from the adapter files' reader. */
#ifndef RP_IO_CONFIG_LORA_H
#define RP_IO_CONFIG_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "io/config.h"

/* "q_proj", ..., "down_proj", "gate" (the router); and back (-1 for
 * another name). */
const char *rp_lora_proj_name(rp_lora_proj p);
int rp_lora_proj_parse(const char *name);

/* gpt-oss's target_parameters (io/config.h): the bit of name
 * ("mlp.experts.gate_up_proj", "mlp.experts.down_proj" or
 * "mlp.router.weight"), 0 for another; and the name of the parameter
 * projection p adapts on a model of cfg (NULL: p is no parameter's, or
 * cfg is not gpt-oss). */
unsigned rp_lora_param_parse(const char *name);
const char *rp_lora_param_name(const rp_model_config *cfg, rp_lora_proj p);

/* The module a projection lives in: "self_attn" or "mlp". */
const char *rp_lora_proj_module(rp_lora_proj p);

/* alpha / r, or alpha / sqrt(r) with use_rslora. */
double rp_lora_scaling(const rp_lora_config *c);

/* The projections a model of cfg adapts for targets named by a list
 * (rp_lora_targets_parse's bits, or those projections again): without
 * mixture-of-experts blocks, no router (so a dense model's adapters,
 * configs and checkpoints are those of the seven projections); on
 * gpt-oss, all-linear is the attention's four (what PEFT's all-linear
 * finds there: its router and experts are no Linear modules), and its
 * target_parameters are the projections io/config.h maps them to. */
unsigned rp_lora_model_targets(const rp_model_config *cfg, unsigned targets);

/* Why targets named one by one (not all-linear) cannot be adapted on a
 * model of cfg, or NULL when they can: gpt-oss's router and experts named
 * as Linear modules (PEFT adapts them only as target_parameters, issue
 * 35), and target_parameters on a model other than gpt-oss. */
const char *rp_lora_refused_targets(const rp_model_config *cfg, unsigned targets);

/* Whether projection p of block `block` has one adapter per expert:
 * gate_proj, up_proj and down_proj of a mixture-of-experts block. */
int rp_lora_per_expert(const rp_model_config *cfg, int block, rp_lora_proj p);

/* How many adapters projection p of block `block` takes when targeted: 0
 * when the block has no such projection (the router of a dense block),
 * num_experts when they are per expert, else 1. */
int64_t rp_lora_copies(const rp_model_config *cfg, int block, rp_lora_proj p);

/* in and out features of projection p of block `block` of cfg (one
 * expert's for an expert projection); 0 and 0 when the block has none. */
void rp_lora_features(const rp_model_config *cfg, int block, rp_lora_proj p, int64_t *in,
                      int64_t *out);

/* The name of layer `block`'s projection p's lora_A (b = 0) or lora_B
 * (b = 1) weight; expert >= 0 names that expert's (an expert projection
 * of a mixture-of-experts block), -1 the block's own. PEFT's names, but
 * for gpt-oss's experts, whose per-expert names are roundpipe's own
 * (<block>.mlp.experts.<e>.gate_up_proj.lora_A.weight: PEFT holds all
 * experts in one tensor, rp_lora_fused_name); gpt-oss's router is
 * mlp.router. */
void rp_lora_tensor_name(const rp_model_config *cfg, int block, int expert, rp_lora_proj p,
                         int b, char *buf, size_t len);

/* PEFT's name of gpt-oss block `block`'s fused experts adapter of p
 * (RP_LORA_GATE_PROJ: gate_up_proj, RP_LORA_DOWN_PROJ: down_proj) when
 * `targets` are adapted: a ParamWrapper wraps the experts module per
 * parameter, in the module's order of its parameters (PEFT 0.21's
 * _inject_parameters; target_parameters' order only says which), so with
 * both gate_up_proj's is the inner one, mlp.experts.base_layer.lora_A.weight,
 * and down_proj's mlp.experts.lora_A.weight, whichever the list names first. lora_A is [r*E, in], expert
 * e's A its rows e*r ..; lora_B [out, r*E], B_e[o][k] at column k*E + e,
 * gate_up_proj's rows interleaved (row 2j gate j, 2j+1 up j). */
void rp_lora_fused_name(int block, rp_lora_proj p, unsigned targets, int b, char *buf,
                        size_t len);

#endif
