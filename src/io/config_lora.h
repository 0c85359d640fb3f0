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

/* The module a projection lives in: "self_attn" or "mlp". */
const char *rp_lora_proj_module(rp_lora_proj p);

/* alpha / r, or alpha / sqrt(r) with use_rslora. */
double rp_lora_scaling(const rp_lora_config *c);

/* The targets a model of cfg has: without mixture-of-experts blocks, no
 * router (so a dense model's adapters, configs and checkpoints are those
 * of the seven projections); gpt-oss, the attention's four (what PEFT's
 * all-linear finds there: its router and experts are no Linear modules). */
unsigned rp_lora_model_targets(const rp_model_config *cfg, unsigned targets);

/* Why targets named one by one (not all-linear) cannot be adapted on a
 * model of cfg, or NULL when they can: gpt-oss's router and experts,
 * which PEFT adapts only as fused target_parameters (issue 35). */
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

/* PEFT's name of layer `block`'s projection p's lora_A (b = 0) or lora_B
 * (b = 1) weight; expert >= 0 names that expert's (an expert projection
 * of a mixture-of-experts block), -1 the block's own. */
void rp_lora_tensor_name(int block, int expert, rp_lora_proj p, int b, char *buf, size_t len);

#endif
