/* A LoRA run's checkpoints (issue 13; checkpoints.h has the rest). Such a
 * checkpoint holds the adapters (model.safetensors: their fp32 masters
 * under PEFT's names; optimizer.safetensors: their AdamW m and v), never
 * the frozen base; trainer_state.json records what the adapters were
 * trained with, and a resume must have the same:
 *   "lora": {"r", "lora_alpha", "target_modules" (names, in the model's
 *            order), "lora_dropout", "use_rslora", and with dropout
 *            "dropout_seed" (--seed keys the masks)}
 *   "base": {"model": the --model directory's absolute path, "hash": its
 *            fingerprint (rp_lora_base_hash), "hash_method"} or, for a
 *            random base (--init-config), {"model": null, "seed": --seed}
 *            (the config is the checkpoint's config.json). */
#ifndef RP_ENGINE_LORA_CHECKPOINT_H
#define RP_ENGINE_LORA_CHECKPOINT_H

#include <json-c/json.h>
#include <stddef.h>

#include "core/error.h"
#include "io/config.h"
#include "engine/train_options.h"

#define RP_LORA_BASE_HASH_METHOD "fnv1a64-sampled-1"

/* The fingerprint of the safetensors weights in model_dir, 16 hex digits
 * into hex[17] (see lora_checkpoint.c for what it covers). */
rp_status rp_lora_base_hash(const char *model_dir, char hex[17], rp_error *err);

/* Add "lora" and "base" for a run of cfg (cfg->lora.rank >= 1) with
 * options o to the trainer state st. hash_cache (17 chars) keeps the base's
 * fingerprint between checkpoints: computed when it is empty. */
rp_status rp_lora_checkpoint_state(json_object *st, const rp_model_config *cfg,
                                   const rp_train_options *o, char *hash_cache, rp_error *err);

/* --resume of checkpoint dir (trainer state st) by this run: a LoRA
 * checkpoint needs --lora-rank, a full one refuses it; the LoRA settings
 * (resolved as rp_lora_resolve resolves them) and the base must be the
 * checkpoint's. Without --model and --init-config the run takes the
 * recorded base (the path, or the checkpoint's config.json for a random
 * one) into base (len bytes) and points resolved at it. Errors name the
 * file and the field. Rank 0 only. */
rp_status rp_lora_checkpoint_check(const char *dir, json_object *st, rp_train_options *resolved,
                                   char *base, size_t len, rp_error *err);

#endif
