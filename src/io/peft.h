/* LoRA adapters in PEFT's layout (issue 13; DESIGN 11): the projection
 * names a target list may hold, an adapter's scaling, its tensors' names and
 * shapes for a model, and reading an adapter directory (adapter_config.json
 * + adapter_model.safetensors) as `--lora-init` takes it.
 *
 * PEFT's tensor names: base_model.model.model.layers.{i}.self_attn.
 * {q,k,v,o}_proj.lora_{A,B}.weight and ...layers.{i}.mlp.{gate,up,down}_proj.
 * lora_{A,B}.weight; A is [r, in], B is [out, r]. A mixture-of-experts
 * block (issue 15) has, as PEFT's "all-linear" adapts a model whose experts
 * are Linear modules, ...layers.{i}.mlp.gate.lora_{A,B}.weight (the
 * router, [r, H] and [E, r]) and one adapter per expert and projection,
 * ...layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.lora_{A,B}.weight.
 * (PEFT on transformers 5's fused Qwen3-MoE experts keeps other, fused
 * tensors (target_parameters): not read.) gpt-oss (issue 35) has its
 * router and fused experts adapted as PEFT's target_parameters: the
 * router's ...layers.{i}.mlp.router.lora_{A,B}.weight ([r, H], [E, r]) and
 * each expert parameter's one fused pair (io/config_lora.h's
 * rp_lora_fused_name), listed in adapter_config.json's target_parameters.
 * A config's target_modules is a list of
 * projection names ("q_proj", "gate" for the router), a list of module
 * paths ("model.layers.0.self_attn.q_proj", "model.layers.0.mlp.experts.
 * 3.up_proj": what PEFT writes for "all-linear" with few modules), or the
 * string "all-linear" (PEFT matches any other string as a regular
 * expression: refused). */
#ifndef RP_IO_PEFT_H
#define RP_IO_PEFT_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/config.h"
#include "io/config_lora.h"

/* A comma-separated list of projection names (and gpt-oss's
 * target_parameters, io/config.h's RP_LORA_PARAM_* bits), or
 * "all-linear". Errors
 * (RP_ERR_INVALID_ARG) name `what` and the bad entry; an empty list or
 * entry is one. */
rp_status rp_lora_targets_parse(const char *list, const char *what, unsigned *targets,
                                rp_error *err);

/* Read and check the adapter directory dir for a model of cfg: its
 * config (peft_type "LORA", bias "none", fan_in_fan_out false, no
 * target_parameters but gpt-oss's, r, alpha, dropout, rslora, the targets, kept to those
 * the model has (rp_lora_model_targets); module paths must name every
 * block and expert of a projection they name; every other field PEFT
 * would apply at its default: no alpha_pattern, rank_pattern,
 * layers_to_transform, exclude_modules, modules_to_save, DoRA, ...,
 * an init_lora_weights that only sets A and B, and a field peft.c does
 * not know only null or false (roundpipe-formats(5))) and that
 * adapter_model.safetensors holds exactly the A and B of every targeted
 * projection of every block (and expert), 2-D, fp32, bf16 or fp16, of the
 * shapes cfg and r give. Errors name the file and the field or tensor. */
rp_status rp_peft_read(const char *dir, const rp_model_config *cfg, rp_lora_config *out,
                       rp_error *err);

/* The fp32 data of block `block`'s projection p's lora_A (b = 0, [r, in])
 * or lora_B (b = 1, [out, r]) for rp_peft_write; expert as
 * rp_lora_tensor_name's. */
typedef const float *(*rp_lora_tensor_fn)(void *arg, int block, int expert, rp_lora_proj p,
                                          int b);

/* The expert of gpt-oss's fused adapter tensors, which hold all experts
 * (io/config_lora.h's rp_lora_fused_name): never passed to an
 * rp_lora_tensor_fn, which is asked for each expert's. */
#define RP_LORA_ALL_EXPERTS (-2)

/* Where block `block`'s projection p's lora_A (b = 0) or lora_B (b = 1)
 * of expert `expert` (as rp_lora_tensor_fn's) is to be read to: fp32. */
typedef float *(*rp_lora_dst_fn)(void *arg, int block, int expert, rp_lora_proj p, int b);

/* Read adapter_model.safetensors of the adapter directory dir (which
 * rp_peft_read has checked for cfg, giving c) into dst's places, gpt-oss's
 * fused experts tensors split into each expert's A and B. */
rp_status rp_peft_load(const char *dir, const rp_model_config *cfg, const rp_lora_config *c,
                       rp_lora_dst_fn dst, void *arg, rp_error *err);

/* Write the adapter directory dir as PEFT does, all or nothing (io/
 * file_set.h): adapter_config.json (peft_type "LORA", task_type
 * "CAUSAL_LM", r, lora_alpha, lora_dropout, target_modules as names
 * (those of c->targets the model has),
 * bias "none", use_rslora, fan_in_fan_out false, base_model_name_or_path
 * base_model (may be NULL: null), inference_mode true) and
 * adapter_model.safetensors with every targeted projection's A and B of
 * every block (and expert) in fp32. */
rp_status rp_peft_write(const char *dir, const rp_model_config *cfg, const rp_lora_config *c,
                        const char *base_model, rp_lora_tensor_fn tensor, void *arg,
                        rp_error *err);

#endif
