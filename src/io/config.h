/* Model configuration: the subset of a Hugging Face config.json that
 * roundpipe understands (model_type "llama" and "qwen3"). */
#ifndef RP_IO_CONFIG_H
#define RP_IO_CONFIG_H

#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "io/atomic_file.h"

typedef enum rp_arch { RP_ARCH_LLAMA = 0, RP_ARCH_QWEN3 = 1 } rp_arch;

typedef enum rp_rope_type {
    RP_ROPE_DEFAULT = 0, /* plain RoPE with rope_theta */
    RP_ROPE_LLAMA3 = 1   /* Llama 3.1 frequency scaling */
} rp_rope_type;

typedef struct rp_rope_scaling {
    rp_rope_type type;
    double factor;                            /* llama3: "factor" */
    double low_freq_factor;                   /* llama3: "low_freq_factor" */
    double high_freq_factor;                  /* llama3: "high_freq_factor" */
    int64_t original_max_position_embeddings; /* llama3 */
} rp_rope_scaling;

/* LoRA (issue 13): the projections of a decoder block that may carry an
 * adapter, and the adapters' settings (io/peft.h reads and writes them in
 * PEFT's layout). */
typedef enum rp_lora_proj {
    RP_LORA_Q_PROJ = 0,
    RP_LORA_K_PROJ,
    RP_LORA_V_PROJ,
    RP_LORA_O_PROJ,
    RP_LORA_GATE_PROJ,
    RP_LORA_UP_PROJ,
    RP_LORA_DOWN_PROJ,
    RP_LORA_NPROJ
} rp_lora_proj;

/* A set of projections: bit p for rp_lora_proj p. */
#define RP_LORA_ALL_LINEAR ((1u << RP_LORA_NPROJ) - 1u)

typedef struct rp_lora_config {
    int rank;          /* r >= 1 */
    double alpha;      /* lora_alpha */
    double dropout;    /* lora_dropout, in [0, 1) */
    int use_rslora;    /* scaling alpha / sqrt(r) instead of alpha / r */
    unsigned targets;  /* the adapted projections (RP_LORA_ALL_LINEAR: all of them) */
} rp_lora_config;

typedef struct rp_model_config {
    rp_arch arch;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads; /* default: num_attention_heads */
    int64_t head_dim;            /* default: hidden_size / num_attention_heads */
    int64_t vocab_size;
    int64_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    double initializer_range; /* default 0.02 */
    rp_rope_scaling rope_scaling;
    int tie_word_embeddings; /* default: 0 for llama, 0 for qwen3 unless set */
    int attention_bias;      /* q/k/v/o projections carry a bias (check transformers for o_proj) */
    rp_dtype torch_dtype;    /* dtype named in the file (F32 if absent) */
    rp_lora_config lora;     /* rank 0 (as parsed): full fine-tuning; else the blocks'
                                targeted projections carry trainable adapters and every
                                other parameter is frozen (model/layout.h) */
} rp_model_config;

/* Parse config.json at path. Unknown model types, missing required fields,
 * wrong JSON types and inconsistent values (heads not dividing, etc.) are
 * errors that name the file and the field. */
rp_status rp_config_load(const char *path, rp_model_config *cfg, rp_error *err);

/* Same, from a JSON text in memory (name is used in messages). */
rp_status rp_config_parse(const char *json, size_t len, const char *name, rp_model_config *cfg,
                          rp_error *err);

/* Write a config.json that transformers loads (architectures, model_type and
 * every field above; torch_dtype from dtype). Written to a temporary name and
 * renamed, so a failure leaves nothing half-written. */
rp_status rp_config_save(const char *path, const rp_model_config *cfg, rp_dtype dtype,
                         rp_error *err);

/* Like rp_config_save, but start from the JSON object in template_path (the
 * config.json the model was loaded from, or NULL) so fields roundpipe does not
 * model (bos_token_id, eos_token_id, ...) survive; every field above is
 * overwritten from cfg. Both RoPE layouts are written: rope_theta and
 * rope_scaling at the top level (transformers 4.x) and rope_parameters
 * (transformers 5.x), plus both "torch_dtype" and "dtype". */
rp_status rp_config_save_from(const char *path, const rp_model_config *cfg, rp_dtype dtype,
                              const char *template_path, rp_error *err);

/* The same with the template's text in memory (NUL-terminated JSON, or
 * NULL; template_name names it in messages): a template read at start
 * stays usable when its file is gone. */
rp_status rp_config_write_text(rp_atomic_file **af, const char *path, const rp_model_config *cfg,
                               rp_dtype dtype, const char *template_text,
                               const char *template_name, rp_error *err);

/* The text rp_config_save_from writes, into *af opened by the caller (a
 * member of a file set, io/file_set.h); path names it in messages. */
rp_status rp_config_write_to(rp_atomic_file **af, const char *path, const rp_model_config *cfg,
                             rp_dtype dtype, const char *template_path, rp_error *err);

#endif
