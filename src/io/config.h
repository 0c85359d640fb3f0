/* Model configuration: the subset of a Hugging Face config.json that
 * roundpipe understands (model_type "llama", "qwen3" and "qwen3_moe"; and
 * "gpt_oss", issue 35). */
#ifndef RP_IO_CONFIG_H
#define RP_IO_CONFIG_H

#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "io/atomic_file.h"

typedef enum rp_arch {
    RP_ARCH_LLAMA = 0,
    RP_ARCH_QWEN3 = 1,
    RP_ARCH_QWEN3_MOE = 2,
    RP_ARCH_GPT_OSS = 3
} rp_arch;

/* model_type as config.json spells it. */
const char *rp_arch_name(rp_arch arch);

typedef enum rp_rope_type {
    RP_ROPE_DEFAULT = 0, /* plain RoPE with rope_theta */
    RP_ROPE_LLAMA3 = 1,  /* Llama 3.1 frequency scaling */
    RP_ROPE_YARN = 2     /* YaRN (gpt_oss only so far; kernels/rope_freq.h) */
} rp_rope_type;

typedef struct rp_rope_scaling {
    rp_rope_type type;
    double factor;                            /* llama3, yarn: "factor" */
    double low_freq_factor;                   /* llama3: "low_freq_factor" */
    double high_freq_factor;                  /* llama3: "high_freq_factor" */
    int64_t original_max_position_embeddings; /* llama3, yarn (yarn: default
                                                 max_position_embeddings) */
    double beta_fast;        /* yarn: "beta_fast" (absent, null or 0: 32) */
    double beta_slow;        /* yarn: "beta_slow" (absent, null or 0: 1) */
    int truncate;            /* yarn: "truncate" (absent: true) */
    double attention_factor; /* yarn: "attention_factor"; 0 when absent (derived) */
    double mscale;           /* yarn: "mscale", 0 when absent */
    double mscale_all_dim;   /* yarn: "mscale_all_dim", 0 when absent */
} rp_rope_scaling;

/* LoRA (issue 13): the projections of a decoder block that may carry an
 * adapter, and the adapters' settings (io/peft.h reads and writes them in
 * PEFT's layout). In a mixture-of-experts block (issue 15) gate_proj,
 * up_proj and down_proj are every expert's (one adapter per expert, as
 * PEFT wraps each expert's Linear), and the router (mlp.gate, PEFT's name
 * "gate") is a projection too; a dense block has no router. */
typedef enum rp_lora_proj {
    RP_LORA_Q_PROJ = 0,
    RP_LORA_K_PROJ,
    RP_LORA_V_PROJ,
    RP_LORA_O_PROJ,
    RP_LORA_GATE_PROJ,
    RP_LORA_UP_PROJ,
    RP_LORA_DOWN_PROJ,
    RP_LORA_ROUTER, /* last: a dense model's bits and layouts are those before it */
    RP_LORA_NPROJ
} rp_lora_proj;

/* A set of projections: bit p for rp_lora_proj p. "all-linear" names
 * every one; a model keeps those it has (rp_lora_model_targets, io/config_lora.h:
 * no router without experts). */
#define RP_LORA_ALL_LINEAR ((1u << RP_LORA_NPROJ) - 1u)
/* The projections of a mixture of experts' experts. */
#define RP_LORA_EXPERT_PROJS                                                                     \
    ((1u << RP_LORA_GATE_PROJ) | (1u << RP_LORA_UP_PROJ) | (1u << RP_LORA_DOWN_PROJ))
/* the attention's four: all gpt-oss has as PEFT's Linear modules */
#define RP_LORA_ATTENTION_PROJS                                                                  \
    ((1u << RP_LORA_Q_PROJ) | (1u << RP_LORA_K_PROJ) | (1u << RP_LORA_V_PROJ) |                  \
     (1u << RP_LORA_O_PROJ))
/* gpt-oss's router and fused experts are no Linear modules: PEFT adapts
 * them as target_parameters (a ParamWrapper over the parameter), named
 * mlp.experts.gate_up_proj, mlp.experts.down_proj and mlp.router.weight
 * in --lora-targets and adapter_config.json. Those names are these bits of
 * a list's names (rp_lora_targets_parse, past the projections'), which
 * rp_lora_model_targets turns into the projections that carry them in
 * roundpipe: gate_up_proj's adapter (one A [r, H] and B [2I, r] per
 * expert, gate and up sharing A) is RP_LORA_GATE_PROJ's, down_proj's
 * RP_LORA_DOWN_PROJ's, the router's RP_LORA_ROUTER's. */
#define RP_LORA_PARAM_GATE_UP (1u << RP_LORA_NPROJ)
#define RP_LORA_PARAM_DOWN (1u << (RP_LORA_NPROJ + 1))
#define RP_LORA_PARAM_ROUTER (1u << (RP_LORA_NPROJ + 2))
#define RP_LORA_PARAMS (RP_LORA_PARAM_GATE_UP | RP_LORA_PARAM_DOWN | RP_LORA_PARAM_ROUTER)
/* the projections gpt-oss adapts: the attention's and those the
 * parameters map to */
#define RP_LORA_GPT_OSS_PROJS                                                                    \
    (RP_LORA_ATTENTION_PROJS | (1u << RP_LORA_GATE_PROJ) | (1u << RP_LORA_DOWN_PROJ) |          \
     (1u << RP_LORA_ROUTER))

typedef struct rp_lora_config {
    int rank;          /* r >= 1 */
    double alpha;      /* lora_alpha */
    double dropout;    /* lora_dropout, in [0, 1) */
    int use_rslora;    /* scaling alpha / sqrt(r) instead of alpha / r */
    unsigned targets;  /* the adapted projections (RP_LORA_ALL_LINEAR: all of them) */
} rp_lora_config;

/* Mixture of experts (Qwen3-MoE, issue 15): which blocks route each token
 * to num_experts_per_tok of num_experts SwiGLU experts (rp_model_block_is_moe)
 * and the router's load-balancing loss. */
#define RP_MOE_MAX_LAYERS 4096 /* mlp_only_layers is a bitmap of this many */
/* The most experts a block takes (model/moe.h's RP_MOE_MAX_EXPERTS, which
 * test_io_config checks it equals): config.json is refused above it, before
 * anything is done per expert. */
#define RP_CONFIG_MAX_EXPERTS 512

typedef struct rp_moe_config {
    int64_t num_experts;           /* 0: every block is dense */
    int64_t num_experts_per_tok;   /* k, in [1, num_experts] */
    int64_t moe_intermediate_size; /* each expert's width */
    int64_t decoder_sparse_step;   /* block i is MoE only when (i + 1) % step == 0 */
    int norm_topk_prob;            /* renormalise the k chosen probabilities */
    int output_router_logits;      /* config.json turns the auxiliary loss on */
    double router_aux_loss_coef;   /* its coefficient (transformers' default 0.001) */
    uint64_t mlp_only[RP_MOE_MAX_LAYERS / 64]; /* bit i: block i is dense */
} rp_moe_config;

/* gpt-oss (issue 35): what its blocks have beyond a mixture of experts
 * (whose sizes and aux loss are in rp_moe_config: num_local_experts,
 * num_experts_per_tok, intermediate_size as each expert's width,
 * output_router_logits, router_aux_loss_coef). */
typedef struct rp_gpt_oss_config {
    double swiglu_limit;    /* "swiglu_limit" (7.0): gate clamped above, up to +-limit */
    double swiglu_alpha;    /* "swiglu_alpha" (absent: 1.702): the sigmoid's gain */
    int64_t sliding_window; /* "sliding_window" W >= 1 (128): in a sliding block query
                               i attends to key j iff i - W < j <= i */
    uint64_t sliding[RP_MOE_MAX_LAYERS / 64]; /* bit i: layer_types[i] is
                                                 "sliding_attention" (else full) */
    int mxfp4; /* "quantization_config" with quant_method "mxfp4" */
    uint64_t mxfp4_experts[RP_MOE_MAX_LAYERS / 64]; /* bit i: block i's experts ship as
                                                       MXFP4 (mxfp4 and
                                                       model.layers.i.mlp.experts not
                                                       in modules_to_not_convert) */
} rp_gpt_oss_config;

/* Whether block i of a gpt_oss model attends through a sliding window. */
static inline int rp_gpt_oss_block_is_sliding(const rp_gpt_oss_config *g, int64_t i)
{
    return i >= 0 && i < RP_MOE_MAX_LAYERS && ((g->sliding[i / 64] >> (i % 64)) & 1u);
}

/* Whether block i of a gpt_oss model ships its experts MXFP4-quantised. */
static inline int rp_gpt_oss_experts_are_mxfp4(const rp_gpt_oss_config *g, int64_t i)
{
    return i >= 0 && i < RP_MOE_MAX_LAYERS && ((g->mxfp4_experts[i / 64] >> (i % 64)) & 1u);
}

/* An FP8 checkpoint (issue 36; llama, qwen3, qwen3_moe): quantization_config
 * {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
 * "weight_block_size": [BR, BC], "modules_to_not_convert": [...]}. Its
 * quantised projections ship as `<name>.weight` F8_E4M3 [out, in] with
 * `<name>.weight_scale_inv` [ceil(out / BR), ceil(in / BC)], w[r, c] =
 * fp8[r, c] x s[r / BR, c / BC] (io/fp8.h). Which projections are quantised
 * is what the config says, as transformers reads it: every decoder block's
 * q/k/v/o, gate/up/down (in a mixture of experts every expert's) whose
 * module no pattern of modules_to_not_convert matches (io/quant_modules.h);
 * never the routers, the embedding or lm_head (transformers' Qwen3-MoE
 * router is no Linear, and FP8 releases ship those unquantised). The files
 * must agree (engine/frozen_base.c checks each tensor). Such a model is a
 * frozen LoRA base only. */
#define RP_FP8_MAX_BLOCKS RP_MOE_MAX_LAYERS

typedef struct rp_fp8_config {
    int on;             /* quantization_config with quant_method "fp8" */
    int64_t block_rows; /* weight_block_size[0] (BR) */
    int64_t block_cols; /* weight_block_size[1] (BC) */
    int any;            /* some block projection is quantised (converted[] not all 0) */
    uint8_t converted[RP_FP8_MAX_BLOCKS]; /* block i: bit p (rp_lora_proj, never
                                             the router) when projection p ships FP8 */
} rp_fp8_config;

/* Whether an FP8 config quantises projection p of decoder block `block`. */
static inline int rp_fp8_converted(const rp_fp8_config *f, int64_t block, rp_lora_proj p)
{
    return f->on && block >= 0 && block < RP_FP8_MAX_BLOCKS && p >= 0 && p < RP_LORA_NPROJ &&
           ((f->converted[block] >> p) & 1u);
}

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
    rp_moe_config moe;       /* qwen3_moe and gpt_oss; zero otherwise */
    rp_gpt_oss_config oss;   /* gpt_oss only; zero otherwise */
    rp_fp8_config fp8;       /* an FP8 checkpoint's quantisation; zero otherwise */
    rp_lora_config lora;     /* rank 0 (as parsed): full fine-tuning; else the blocks'
                                targeted projections carry trainable adapters and every
                                other parameter is frozen (model/layout.h) */
    /* set by the run, never by config.json (model/token_tiles.h): */
    int64_t token_tile;  /* tokens per tile of the MLP's GEMMs; 0: RP_TOKEN_TILE_DEFAULT */
    int64_t chunk_tiles; /* tiles of the MLP alive at once; 0: chosen from memory */
} rp_model_config;

/* Whether the model has Qwen3's per-head q/k norms (qwen3, qwen3_moe). */
static inline int rp_model_has_qk_norm(const rp_model_config *cfg)
{
    return cfg->arch == RP_ARCH_QWEN3 || cfg->arch == RP_ARCH_QWEN3_MOE;
}

/* Whether decoder block i (model.layers.i) is a mixture of experts:
 * every block of gpt_oss; qwen3_moe, num_experts > 0, i not in mlp_only_layers and (i + 1) a
 * multiple of decoder_sparse_step (transformers' Qwen3MoeDecoderLayer). An
 * index outside [0, num_hidden_layers) is no block: 0. */
static inline int rp_model_block_is_moe(const rp_model_config *cfg, int64_t i)
{
    const rp_moe_config *m = &cfg->moe;
    if (cfg->arch == RP_ARCH_GPT_OSS) /* every gpt-oss block routes to its experts */
        return m->num_experts > 0 && i >= 0 && i < cfg->num_hidden_layers;
    if (cfg->arch != RP_ARCH_QWEN3_MOE || m->num_experts <= 0 || i < 0 ||
        i >= cfg->num_hidden_layers || i >= RP_MOE_MAX_LAYERS || m->decoder_sparse_step < 1)
        return 0;
    if ((m->mlp_only[i / 64] >> (i % 64)) & 1u)
        return 0;
    return (i + 1) % m->decoder_sparse_step == 0;
}

/* Whether any block of the model is a mixture of experts. */
int rp_model_has_moe(const rp_model_config *cfg);

/* Parse config.json at path. Unknown model types, missing required fields,
 * wrong JSON types and inconsistent values (heads not dividing, etc.) are
 * errors that name the file and the field. */
rp_status rp_config_load(const char *path, rp_model_config *cfg, rp_error *err);

/* The entry of quantization_config.modules_to_not_convert in the
 * config.json at path that keeps module `name` (e.g.
 * "model.layers.1.self_attn.q_proj") unquantised, as rp_fp8_config reads
 * it: *index (-1: no entry does) and its text into pattern[len]. For
 * messages naming why a tensor should ship as it does. */
rp_status rp_config_not_convert_entry(const char *path, const char *name, int *index,
                                      char *pattern, size_t len, rp_error *err);

/* 1, with the warning train and plan print at start in buf (no "warning:"
 * prefix, no newline), when seq_len is beyond the config's
 * max_position_embeddings: the run works (RoPE has no table to overflow),
 * but the model never saw those positions; 0 otherwise. */
int rp_config_seq_len_warning(const rp_model_config *cfg, int64_t seq_len, char *buf, size_t len);

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
