/* Per-layer cost model: what the partitioner and the simulator know about a
 * layer. Times are per microbatch; bytes are per microbatch or per layer.
 *
 * Times come either from a closed-form FLOP count of a model shape and a
 * device's TFLOP/s and GB/s (rp_cost_from_shape), or from a layer-times file
 * of measured milliseconds (plan/layers_file.h). This module does not depend
 * on src/model on purpose: the planner must run before any weights exist. */
#ifndef RP_PLAN_COST_H
#define RP_PLAN_COST_H

#include <stdint.h>

#include "core/error.h"

#include "core/layer_kind.h"

typedef struct rp_layer_cost {
    rp_layer_kind kind;
    double fwd_ms;         /* forward of one microbatch */
    double bwd_ms;         /* backward of one microbatch, NOT counting the recompute
                              of the forward (backward with recompute = fwd_ms + bwd_ms) */
    double wgrad_ms;       /* part of bwd_ms that only produces weight gradients and so
                              can run after the input gradient has been sent on */
    int64_t weight_bytes;  /* compute-dtype weights uploaded with the stage */
    int64_t grad_bytes;    /* trainable-gradient bytes accumulated on the device over
                              the microbatches and downloaded once per job */
    int64_t grad_download_bytes; /* of them, the bytes the download moves when it differs
                              (bf16 gradients: the fp32 accumulator stays on the device,
                              its rounded copy travels); 0: grad_bytes */
    int64_t upload_bytes;  /* of weight_bytes' weights, the bytes their upload moves when it
                              differs (an FP8 base: e4m3 bytes and scales at most, kept so in
                              weight_bytes and dequantised for each use, issue 36); 0:
                              weight_bytes */
    int64_t dequant_bytes; /* LoRA on an FP8 base: the device bytes one dequantisation of
                              this block's base moves (its e4m3 bytes, scales and other
                              tensors read, the block written in the compute dtype); 0: its
                              base, if any, is used as it lies */
    double dequant_ms;     /* the time of one such dequantisation, which the executor runs
                              before a use of the block unless its scratch holds the block
                              already (plan/schedule.h counts them per job); 0: none, or
                              included in measured times */
    int64_t opt_params;    /* trainable parameters the CPU optimizer updates */
    int64_t act_bytes;     /* device activation bytes of one microbatch kept between this
                              layer's forward and its backward */
    int64_t out_bytes;     /* bytes of this layer's output for one microbatch */
    int64_t workspace_bytes; /* scratch of this layer's calls on the device: a job's is the
                              largest of its layers', beside the machine's workspace_bytes
                              (plan/machine.h); 0: none of its own */
    int64_t keep_bytes;    /* host bytes one microbatch's kept activations of this layer
                              take (plan.h's kept: its input and what its backward needs,
                              as the arena lays them out); 0: none in the host store */
    int64_t keep_device_bytes; /* device bytes they take instead on executors that keep
                              them (keep_on_executor: the input and the saved area in the
                              executor's pool, for every microbatch of its pipeline); 0:
                              none there. A layer with neither keeps nothing */
    int tied_to;           /* -1, or the layer whose parameters this one shares (a tied
                              LM head names the embedding: its gradient is summed into
                              that layer's, whose update it then also waits for) */
} rp_layer_cost;

typedef struct rp_cost_model {
    char name[64];
    int num_layers;
    rp_layer_cost *layers;        /* num_layers entries, layer 0 first */
    int64_t tokens_per_microbatch; /* 0 when unknown (then no tokens/s) */
    /* defaults a layer-times file may carry (0 = not given) */
    int default_gpus;
    int default_microbatches;
    double default_transfer_ms;
    int keep_in_place;             /* executors read kept activations where the host store
                                      holds them (plan.h's kept): a kept layer of a backward
                                      job needs no device slot (act_bytes) */
    int saved_by_layer;            /* --recompute layer: every layer's input is a checkpoint,
                                      and a backward job holds one layer's saved area at a
                                      time (its act_bytes), not its stage's sum; the tail
                                      still holds its stage's (engine/executor.c) */
    int single_weight_buffer;      /* --weight-buffers 1: an executor holds one stage's
                                      weights, so a job's upload waits for the job before
                                      it on that executor to end (plan/schedule.h counts
                                      one buffer, plan/simulate.c starts it then) */
    int keep_on_executor;          /* executors keep them in a pool of their own memory
                                      (keep_device_bytes; GPUs, whose link a round trip of
                                      them would cost more than the recompute): a kept
                                      layer's forward and backward jobs must then run on one
                                      executor (plan/keep.h), and its backward job needs no
                                      device slot for it either */
} rp_cost_model;

/* A decoder block the fields of rp_model_shape cannot describe (a mixture
 * of experts: every expert's weights held, k of them run a token, the
 * router beside; gpt-oss's biases; adapters on the router and on the
 * experts, each expert's on its k tokens), as its owner counts it (the
 * caller, from the model's layout: the planner knows no model). */
typedef struct rp_block_shape {
    int64_t params;             /* every weight the block holds (0: the dense block of the
                                   shape's fields) */
    double gemm_params;         /* the GEMM weights a token passes through */
    double attention_keys;      /* the keys a query sees on average */
    int64_t adapter_params;     /* LoRA: the adapters the block holds */
    double adapter_gemm_params; /* LoRA: the adapters' weights a token passes through */
    double remade_gemm_params;  /* the GEMM weights a token passes through again in the
                                   backward (the MLP's forward made again) */
    double remade_adapter_gemm_params; /* LoRA: the adapters' weights likewise */
} rp_block_shape;

/* A model shape, the fields of a config.json the FLOP count needs. */
typedef struct rp_model_shape {
    int64_t hidden;
    int64_t intermediate;
    int64_t heads;
    int64_t kv_heads;
    int64_t head_dim;
    int64_t vocab;
    int64_t layers; /* decoder blocks */
    int tied;       /* LM head shares the embedding */
    int attention_bias;
    /* LoRA (0: full fine-tuning): adapters of rank lora_rank on the
     * projections whose bits are set in lora_targets, bit p for projection
     * p in the order q, k, v, o, gate, up, down (io/config.h's
     * rp_lora_proj); every other weight is frozen */
    int64_t lora_rank;
    unsigned lora_targets;
    /* NULL, or one per block (blocks[i] for model.layers.i): a block whose
     * params are not 0 is costed from its own figures, not the fields
     * above (with LoRA, lora_targets may then be empty) */
    const rp_block_shape *blocks;
    /* 1: the blocks of the fields above keep none of their MLP's g, u and
     * m (a microbatch of several chunks, model/token_tiles.h), and their
     * backward makes them again: the gate and up GEMMs, their adapters
     * and the down adapter's A once more */
    int mlp_remade;
} rp_model_shape;

/* What the closed-form model assumes about a device and the run. */
typedef struct rp_device_spec {
    double tflops;          /* achieved dense bf16 TFLOP/s */
    double mem_gbs;         /* device memory GB/s (roofline floor for small microbatches) */
    int compute_bytes;      /* bytes per weight element on the device (2 = bf16) */
    int grad_bytes;         /* bytes per gradient element accumulated on the device (4) */
    int64_t seq_len;        /* tokens per sample */
    int64_t tokens_per_mb;  /* tokens per microbatch */
} rp_device_spec;

/* Allocate a model of n zeroed layers (tied_to = -1). */
rp_status rp_cost_model_create(int n, rp_cost_model **out, rp_error *err);
void rp_cost_model_destroy(rp_cost_model **m);

/* Build the layer list [embedding, blocks..., head] of a full fine-tune, or
 * with shape->lora_rank > 0 of a LoRA run, from a shape and a device. FLOP
 * counts (documented in cost.c):
 *   GEMMs: 2 * params * tokens forward;
 *   attention scores + values: 4 * (heads*head_dim) per key a query sees,
 *   (S + 1) / 2 keys on average under the causal mask;
 *   backward = 2 x the GEMMs' forward and 2.5 x the attention's (the
 *   recompute is charged separately, fwd_ms), plus the MLP's forward the
 *   backward makes again (mlp_remade, a block's remade_*);
 *   weight-gradient part = the GEMM forward FLOPs (one of the two backward GEMMs).
 * With LoRA the frozen weights are uploaded but get no gradient: a block's
 * backward is the base's input-gradient GEMMs, the attention's and twice
 * the adapters' forward; only the adapters' gradients are downloaded and
 * updated; the embedding and the head train nothing. */
rp_status rp_cost_from_shape(const rp_model_shape *shape, const rp_device_spec *dev,
                             rp_cost_model **out, rp_error *err);

/* What a layer of a model costs, as its owner counts it (the engine, from
 * src/model's layer table: the planner knows no model). */
typedef struct rp_layer_work {
    rp_layer_kind kind;
    double fwd_flops_per_token;
    double bwd_flops_per_token; /* the recompute of the forward included */
    int64_t params;             /* trainable parameters the optimizer updates */
    int tied_to;                /* -1, or the layer it shares its parameters with */
} rp_layer_work;

/* The cost model of n layers of work for microbatches of tokens_per_mb
 * tokens on an executor doing flops_per_ms: fwd_ms = forward FLOPs / rate
 * + 1 us, bwd_ms = (backward - forward FLOPs) / rate + 1 us, unless a
 * measured time is given (fwd_ms[l], bwd_ms[l] >= 0; either array may be
 * NULL). The bytes are left 0 for the caller (the executor's memory). */
rp_status rp_cost_from_work(const rp_layer_work *work, int n, double flops_per_ms,
                            int64_t tokens_per_mb, const double *fwd_ms, const double *bwd_ms,
                            rp_cost_model **out, rp_error *err);

/* FLOPs of one token's forward through one decoder block at sequence length S. */
double rp_cost_block_fwd_flops_per_token(const rp_model_shape *shape, int64_t seq_len);

/* Parameters of one decoder block, of the embedding and of the head. */
int64_t rp_cost_block_params(const rp_model_shape *shape);
int64_t rp_cost_embed_params(const rp_model_shape *shape);
int64_t rp_cost_head_params(const rp_model_shape *shape); /* norm (+ LM head if untied) */
/* LoRA: the adapter parameters of one block, sum over the targeted
 * projections of rank x (in + out); 0 without LoRA. */
int64_t rp_cost_adapter_params(const rp_model_shape *shape);

/* The closed form's dequant_ms of each layer of m: its dequant_bytes at the
 * device's memory bandwidth (GB/s), a memory-bound pass like roof_ms's. */
void rp_cost_price_dequant(rp_cost_model *m, double mem_gbs);

/* Sums over the layers [first, last] (inclusive). */
double rp_cost_fwd_ms(const rp_cost_model *m, int first, int last);
/* Backward including recompute: sum of fwd_ms + bwd_ms. The tail stage, which
 * runs forward and backward in one go without recompute, costs the same. */
double rp_cost_bwd_ms(const rp_cost_model *m, int first, int last);
double rp_cost_wgrad_ms(const rp_cost_model *m, int first, int last);
int64_t rp_cost_weight_bytes(const rp_cost_model *m, int first, int last);
/* The bytes the uploads of layers first..last move. */
int64_t rp_cost_upload_bytes(const rp_cost_model *m, int first, int last);
int64_t rp_cost_grad_bytes(const rp_cost_model *m, int first, int last);
/* The bytes the gradient downloads of layers first..last move. */
int64_t rp_cost_grad_download_bytes(const rp_cost_model *m, int first, int last);
int64_t rp_cost_act_bytes(const rp_cost_model *m, int first, int last);
int64_t rp_cost_max_act_bytes(const rp_cost_model *m, int first, int last);

#endif
