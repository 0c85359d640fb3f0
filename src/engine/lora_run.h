/* A LoRA run's set-up and outputs (issue 13): the adapters' settings from
 * the options and an initial adapter, their initial values, and the
 * adapter (and merged model) the run saves. */
#ifndef RP_ENGINE_LORA_RUN_H
#define RP_ENGINE_LORA_RUN_H

#include "core/error.h"
#include "engine/frozen_base.h"
#include "engine/params.h"
#include "engine/train_options.h"
#include "model/layers.h"

typedef struct rp_engine rp_engine;

/* cfg->lora from --lora-rank, --lora-alpha, --lora-targets,
 * --lora-dropout, --use-rslora and --lora-init (whose r, alpha, targets
 * and rslora must agree with the options given; the ones not given are
 * taken from it). Errors name the option or the adapter's file and key. */
rp_status rp_lora_resolve(const rp_train_options *o, rp_model_config *cfg, rp_error *err);

/* The adapters' initial values: --lora-init's tensors, or PEFT's fresh
 * adapter (rp_layer_init with --seed). */
rp_status rp_lora_load_adapters(rp_params *p, const rp_train_options *o, rp_error *err);

/* What block l's call at step t needs besides its frozen weights, for the
 * samples from first_sample of the step's batch: the adapters, the run's
 * dropout keys and, when the executors read the base where it lies
 * (e->base_in_place), its tensors. One definition for training and
 * evaluation. */
void rp_lora_call_of(const rp_engine *e, int l, int64_t t, int64_t first_sample,
                     const void *adapters, rp_lora_call *c);

/* --save DIR: the adapter in PEFT's layout (base_model_name_or_path: the
 * --model path). */
rp_status rp_lora_save_adapter(const rp_params *p, const rp_train_options *o, rp_error *err);

/* --save-merged DIR: the model with W + scaling B A in place of each
 * targeted W (each expert's with its own adapter, the router's with its),
 * in Hugging Face layout (experts per expert), stored in dtype, with the
 * base's tokenizer and generation files (companions, may be NULL). Each
 * tensor is made a piece at a time as the file is written, never the
 * whole merged model in memory (engine/lora_merged.c); progress as for
 * rp_model_dir_save. */
rp_status rp_lora_save_merged(const rp_params *p, const rp_frozen_base *base,
                              const rp_train_options *o, rp_dtype dtype,
                              const char *template_config, const rp_companions *companions,
                              const rp_progress_hook *progress, rp_error *err);

#endif
