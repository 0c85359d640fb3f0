/* Device memory of a training run's executors, in the terms of the
 * planner's cost model (plan/cost.h): the sizes engine/executor.c
 * allocates, so that a plan the partitioner keeps under a memory limit
 * (rp_schedule_peak_bytes) fits on the device; and of its evaluation
 * (--eval-data, rp_memory_model_eval), the sizes engine/eval.c allocates.
 * Used by `roundpipe train`'s planner and by `roundpipe plan` for a config. */
#ifndef RP_ENGINE_MEMORY_MODEL_H
#define RP_ENGINE_MEMORY_MODEL_H

#include "device/device.h"
#include "io/config.h"
#include "model/layers.h"
#include "plan/cost.h"

/* Fill the memory fields of m (the layers [embedding, blocks..., head] of
 * cfg) for executors of `device` computing microbatches of
 * samples_per_micro samples of seq_len tokens, with the host store's
 * compute copy (what is uploaded) in `dtype`:
 *   weight_bytes, grad_bytes: the layer's parameters in `dtype` and its
 *       gradient in fp32 (and its bf16 rounding for the download with
 *       grad_dtype bf16), each layer rounded up to 16 elements as the stage
 *       buffers lay them out; the embedding only as the rows `microbatches`
 *       microbatches can read (rp_memory_embedding_rows), which is all a
 *       stage holds of it; the head of a tied model also holds the whole
 *       embedding matrix (the tail uploads it and accumulates its gradient);
 *       with LoRA (cfg->lora.rank > 0) the parameters are the adapters and,
 *       on executors whose memory is not the host's, weight_bytes adds the
 *       layer's frozen weights in `dtype` (the untied base layout, rounded
 *       likewise: a tied head holds its own copy of the matrix), which
 *       have no gradient (executors of host memory read the base where it
 *       lies: nothing of it is uploaded); an FP8 checkpoint's blocks taken
 *       as FP8 (frozen_base.h's rp_frozen_base_per_use) hold, uploaded, their
 *       e4m3 bytes and scales and their other tensors instead
 *       (rp_frozen_base_staged_bound), and nothing in place;
 *   dequant_bytes: such a block's, what each dequantisation into the
 *       scratch moves: those bytes as the upload counts them, read, and the
 *       block's base in `dtype`, written (dequant_ms 0: the caller prices
 *       it, plan/cost.h's rp_cost_price_dequant);
 *   act_bytes: one slot of what a layer's forward keeps for its backward
 *       (rp_block_saved_floats with the back end's kernel table; the
 *       executor gives every layer of a tail/backward stage one);
 *   out_bytes: one microbatch's activations, tokens x hidden in fp32;
 *   keep_bytes: a block's input and its own saved area as the arena holds
 *       them when the plan keeps it (arena.h), and m->keep_in_place, for
 *       executors of host memory, which read them there; or, for executors
 *       that keep them in their own pool (host_memory.h's
 *       rp_kept_on_executor: GPUs), keep_device_bytes, the fp32 input and the
 *       saved area there (executor.c), and m->keep_on_executor;
 *   workspace_bytes: the scratch of the layer's calls
 *       (rp_layer_workspace_floats, the head's in chunks of head_rows
 *       tokens, rp_memory_head_rows): a job's is its layers' largest, in the
 *       executor's scratch after its gradients (engine/executor.c);
 *       with act_dtype bf16 (--activation-dtype) at least the buffer an
 *       activation is narrowed in on its way to the host and widened from
 *       on its way back (rp_activation_narrow_floats), which every job's
 *       workspace holds; a kept block's input in keep_bytes is in act_dtype;
 * and *workspace_bytes, what every job shares: the microbatch's token ids,
 * targets and mask (and with documents its segment starts), and with an
 * FP8 base taken as FP8 the scratch its blocks are dequantised in for each
 * use, the largest block's base in `dtype`, and where saves are staged
 * (rp_saves_staged) their RP_SAVE_SLOTS slots of tokens x hidden fp32. */
rp_status rp_memory_model_fill(const rp_model_config *cfg, rp_device_kind device, rp_dtype dtype,
                               rp_dtype grad_dtype, rp_dtype act_dtype, int documents,
                               int64_t microbatches,
                               int64_t samples_per_micro, int64_t seq_len, int64_t head_rows,
                               rp_cost_model *m, int64_t *workspace_bytes, rp_error *err);

/* Activation saves through staging slots: 1 when executors of `device`
 * download the activations they save (a checkpoint, a stage's output, an
 * input gradient) from RP_SAVE_SLOTS slots of their own, each an
 * activation's fp32 bytes, and go on computing while the download runs
 * (engine/staged_saves.c); the slots are counted in every job's share
 * (rp_memory_model_fill's *workspace_bytes). CUDA executors whose copies
 * are ordered by events (the copies path of core/unproven.h, read now), and CPU
 * executors when the environment sets RP_TEST_SAVE_STAGING=1 (that path
 * tested on a machine without a GPU) or RP_TEST_EVENT_DEVICE=1 (checked as
 * such a CUDA executor, device/backend.h); otherwise a save is waited for, from
 * where the activation lies. */
#define RP_SAVE_SLOTS 2
int rp_saves_staged(rp_device_kind device);

/* A mixture of experts' router statistics and load-balancing gradient in
 * buffers of the executor's own ([2E] and [E] fp32, in every job's share,
 * rp_memory_model_fill's *workspace_bytes), the statistics downloaded after
 * each block's forward: 1 for executors of `device` whose memory the host
 * does not address (GPUs), and CPU executors checked as an unordered device
 * or an event-ordered one (device/backend.h's rp_device_unordered_test and
 * rp_device_event_test); 0 where the kernels write
 * and read them in the host store. */
int rp_router_stats_moved(rp_device_kind device);

/* Device memory of one rank's evaluation (--eval-data, engine/eval.c),
 * which runs between segments, the executor buffers freed, on the
 * device of `device` for microbatches of samples_per_micro samples of
 * seq_len tokens, with the compute copy in `dtype`; each field is one
 * buffer's bytes as rp_device_alloc is asked for them (at least one byte:
 * no buffer is empty), 0 where there is no buffer. eval.c allocates
 * exactly these and checks that each layer fits them, so this count is
 * what a run allocates, from the configuration alone (`roundpipe plan`
 * counts it too). */
typedef struct rp_eval_memory {
    size_t embedding;   /* layer 0's weights, the whole table (a tied LM head reads it
                           there); with LoRA its frozen base, unless read in place (1) */
    size_t weights;     /* one other layer's, the largest: its compute copy, or with
                           LoRA its frozen base copied or an FP8 block's dequantised */
    size_t adapters;    /* LoRA: one layer's adapters, the largest */
    size_t staging;     /* LoRA, an FP8 base uploaded: a block's as it travels, the
                           largest (frozen_base.h's rp_frozen_base_staged_bound) */
    size_t activations; /* a microbatch's activations, tokens x hidden fp32: two
                           buffers, in and out */
    size_t saved;       /* a block forward's saved area (no dropout: inference), for a
                           microbatch of any count of samples up to a full one's */
    size_t workspace;   /* the scratch of any block or head call, the same */
    size_t token_ids;   /* the microbatch's token ids, int32: two buffers, ids and targets */
    size_t mask;        /* the targets' counted mask, a byte each */
    size_t segments;    /* with documents (--eval-documents): their starts, int32 */
    size_t total;       /* every buffer, two of activations and of token_ids */
} rp_eval_memory;

rp_status rp_memory_model_eval(const rp_model_config *cfg, rp_device_kind device, rp_dtype dtype,
                               int documents, int64_t samples_per_micro, int64_t seq_len,
                               rp_eval_memory *m, rp_error *err);

/* Rows of the head's chunk a training run's executors of `ops` use
 * (rp_head_forward_backward's chunk): the back end's for a device memory
 * figure that is the same on every rank, whatever the plan's width or how
 * many ranks share a device (the chunk orders the sums of the LM head's
 * gradient): --memory-limit-mib when given, else the GPU's whole memory
 * (the smallest over the ranks), 0 when there is none (the CPU). */
static inline int64_t rp_memory_head_rows(const rp_kernel_ops *ops, const rp_model_config *cfg,
                                          int64_t memory_bytes)
{
    return ops ? ops->logits_rows(cfg->vocab_size, memory_bytes) : 0;
}

/* Floats of the workspace layer l of n (the embedding, blocks, the head)
 * calls on executors of `ops`: none for the embedding, a block's
 * (rp_block_workspace_floats, the largest over the model's blocks), the
 * head's over the microbatch's tokens in chunks of head_rows
 * (rp_head_workspace_floats; 0: the back end's without a memory figure). */
static inline size_t rp_layer_workspace_floats(const rp_kernel_ops *ops, rp_dtype dtype,
                                               const rp_model_config *cfg, int l, int n,
                                               int64_t samples_per_micro, int64_t seq_len,
                                               int64_t head_rows)
{
    if (l == 0)
        return 0;
    if (l == n - 1)
        return rp_head_workspace_floats(ops, dtype, cfg, samples_per_micro * seq_len, head_rows);
    return rp_block_workspace_floats(ops, dtype, cfg, samples_per_micro, seq_len);
}

/* Floats of the buffer a microbatch's activations are narrowed in on the
 * way to the host store and widened from on the way back, with act_dtype
 * bf16 (--activation-dtype; 0 with fp32): tokens x hidden bf16, rounded up
 * to 16 floats. It lies at the start of the running job's workspace, which
 * no layer call holds between calls: a job's workspace is at least it. */
static inline size_t rp_activation_narrow_floats(rp_dtype act_dtype, int64_t tokens,
                                                 int64_t hidden)
{
    if (act_dtype == RP_F32)
        return 0;
    size_t bytes = (size_t)(tokens * hidden) * rp_dtype_size(act_dtype);
    return (((bytes + sizeof(float) - 1) / sizeof(float)) + 15) & ~(size_t)15;
}

/* Rows of the embedding a stage holds on the device, in its weights and
 * its gradient buffer: the rows an iteration's tokens can read
 * (microbatches of tokens_per_micro tokens), at most the vocabulary. A
 * job uploads only the rows its pipeline's tokens read and accumulates
 * their gradient there (stage_buffers.c), never the whole table; a tied
 * head still holds the whole matrix, which its logits read. */
static inline int64_t rp_memory_embedding_rows(const rp_model_config *cfg, int64_t microbatches,
                                               int64_t tokens_per_micro)
{
    int64_t tokens = microbatches * tokens_per_micro;
    return tokens < cfg->vocab_size ? tokens : cfg->vocab_size;
}

#endif
