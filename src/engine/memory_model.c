/* Device memory of a training run's executors (see memory_model.h). */
#include "plan/cost.h" /* before model/layout.h: both know rp_layer_kind */

#include "engine/memory_model.h"

#include <stdlib.h>
#include <string.h>

#include "core/unproven.h"
#include "device/backend.h"
#include "engine/frozen_base.h"
#include "engine/host_memory.h"
#include "engine/padding.h"
#include "engine/params.h"
#include "io/fp8.h"
#include "model/layers.h"

/* Bytes block `layer`'s FP8 base moves when uploaded: the projections
 * cfg's config quantises (io/fp8.h rp_fp8_tensor_converted) in e4m3 with F32
 * scales (an upper bound: BF16 scales take less), its other tensors in the
 * compute dtype. */
static size_t fp8_travel_bytes(const rp_model_config *cfg, const rp_layer_desc *layer,
                               rp_dtype dtype)
{
    size_t n = 0;
    for (int i = 0; i < layer->nparams; i++) {
        const rp_param_desc *p = &layer->params[i];
        if (!rp_fp8_tensor_converted(cfg, p->name)) {
            n += p->numel * rp_dtype_size(dtype);
            continue;
        }
        const int64_t grid = ((p->shape[0] + cfg->fp8.block_rows - 1) / cfg->fp8.block_rows) *
                             ((p->shape[1] + cfg->fp8.block_cols - 1) / cfg->fp8.block_cols);
        n += p->numel + (size_t)grid * 4;
    }
    return n;
}

rp_status rp_memory_model_fill(const rp_model_config *cfg, rp_device_kind device, rp_dtype dtype,
                               rp_dtype grad_dtype, rp_dtype act_dtype, int documents,
                               int64_t microbatches,
                               int64_t samples_per_micro, int64_t seq_len, int64_t head_rows,
                               rp_cost_model *m, int64_t *workspace_bytes, rp_error *err)
{
    rp_model_config c = *cfg;
    rp_layer_desc *layers = NULL, *base = NULL;
    int n = 0, nb = 0;
    const int lora = cfg->lora.rank > 0;
    RP_TRY(rp_model_layout(&c, &layers, &n, err));
    rp_status s = RP_OK;
    if (lora) /* the frozen base beside the adapters */
        s = rp_frozen_base_layout(cfg, &base, &nb, err);
    if (s == RP_OK && (n != m->num_layers || (lora && nb != n)))
        s = rp_error_set(err, RP_ERR_INTERNAL, "memory model: %d layers for a model of %d",
                         m->num_layers, n);
    if (s != RP_OK) {
        free(layers);
        free(base);
        return s;
    }
    const int64_t tokens = samples_per_micro * seq_len, H = cfg->hidden_size;
    /* sized with the back end's kernel table, as its executors allocate
     * (0 for a kind this build lacks) */
    const rp_kernel_ops *ops = rp_device_kernel_ops(device);
    const int in_place = rp_frozen_base_in_place(ops);
    const int on_executor = rp_kept_on_executor(device);
    /* an FP8 checkpoint's base taken as FP8 (frozen_base.h's
     * rp_frozen_base_takes_fp8, the executors' rule): each block dequantised
     * for its use into one scratch per executor (rp_frozen_base_per_use) */
    const int fp8 = rp_frozen_base_takes_fp8(cfg, rp_frozen_base_reads(ops));
    int64_t base_scratch = 0;
    const int64_t slot =
        ops ? (int64_t)rp_block_saved_floats(ops, dtype, cfg, samples_per_micro, seq_len) * 4 : 0;
    /* the embedding's rows a stage holds (trainable, or a LoRA's frozen base) */
    const size_t emb_rows = (size_t)(rp_memory_embedding_rows(cfg, microbatches, tokens) * H);
    for (int l = 0; l < n; l++) {
        rp_layer_cost *L = &m->layers[l];
        size_t numel = layers[l].numel, base_numel = lora ? base[l].numel : 0;
        if (l == 0) {
            numel = numel ? emb_rows : 0;
            base_numel = base_numel ? emb_rows : 0;
        }
        int64_t floats = (int64_t)rp_padded_elements(numel);
        /* LoRA: the stage buffer also holds the layer's frozen weights,
         * unless the executors read them where they lie (host memory:
         * engine_impl.h's base_in_place), frozen_base.h's rp_frozen_base_copied */
        const int per_use = lora && rp_frozen_base_per_use(fp8, l, n);
        int64_t frozen = lora && rp_frozen_base_copied(in_place, fp8, l, n)
                             ? (int64_t)rp_padded_elements(base_numel)
                             : 0;
        /* an uploaded FP8 block stays FP8 in the stage buffer: its e4m3
         * bytes and scales and its other tensors as they lie
         * (stage_buffers.c), by the rule of an FP8 checkpoint of cfg */
        const int fp8_upload = per_use && !in_place;
        if (fp8_upload)
            frozen = (int64_t)rp_padded_elements(
                (rp_frozen_base_staged_bound(cfg, &base[l], dtype) + rp_dtype_size(dtype) - 1) /
                rp_dtype_size(dtype));
        /* and is dequantised for each use into the executor's one scratch
         * of the largest block's base (executor.c), uploaded or in place */
        if (per_use && (int64_t)rp_padded_elements(base[l].numel) * (int64_t)rp_dtype_size(dtype) >
                           base_scratch)
            base_scratch = (int64_t)rp_padded_elements(base[l].numel) * (int64_t)rp_dtype_size(dtype);
        /* each dequantisation reads what lies in the stage buffer or the
         * mapping (bounded like the upload) and writes the block's base */
        L->dequant_bytes =
            per_use ? (int64_t)fp8_travel_bytes(cfg, &base[l], dtype) +
                          (int64_t)base[l].numel * (int64_t)rp_dtype_size(dtype)
                    : 0;
        if (l == n - 1 && cfg->tie_word_embeddings && !lora)
            floats += cfg->vocab_size * H;
        L->weight_bytes = (floats + frozen) * (int64_t)rp_dtype_size(dtype);
        /* what travels: the adapters, and the base as an FP8 checkpoint ships
         * it (frozen_base.h's rp_frozen_base_fp8_checkpoint_bytes' rule) */
        L->upload_bytes = fp8_upload ? floats * (int64_t)rp_dtype_size(dtype) +
                                           (int64_t)fp8_travel_bytes(cfg, &base[l], dtype)
                                     : 0;
        /* bf16 gradients: an fp32 accumulator and its rounded copy on the
         * device, the copy downloaded */
        L->grad_bytes = floats * (grad_dtype == RP_BF16 ? 6 : 4);
        L->grad_download_bytes = floats * (grad_dtype == RP_BF16 ? 2 : 4);
        L->act_bytes = slot;
        L->out_bytes = tokens * H * 4;
        /* kept, a block holds its input and its own saved area in the
         * arena (arena.h), read in place by executors of host memory, or
         * in the executor's pool (fp32 input: executor.c), for each
         * microbatch of its pipeline */
        const size_t saved = ops && l > 0 && l < n - 1
                                 ? rp_padded_elements(rp_block_saved_floats_of(
                                       ops, dtype, cfg, l - 1, samples_per_micro, seq_len))
                                 : 0;
        L->keep_bytes = saved && !on_executor
                            ? 4 * (int64_t)(rp_padded_elements(
                                                ((size_t)(tokens * H) * rp_dtype_size(act_dtype) +
                                                 sizeof(float) - 1) / sizeof(float)) +
                                            saved)
                            : 0;
        L->keep_device_bytes =
            saved && on_executor ? 4 * (int64_t)(rp_padded_elements((size_t)(tokens * H)) + saved)
                                 : 0;
        size_t ws = ops ? rp_layer_workspace_floats(ops, dtype, cfg, l, n, samples_per_micro,
                                                    seq_len, head_rows)
                        : 0;
        const size_t narrow = rp_activation_narrow_floats(act_dtype, tokens, H);
        L->workspace_bytes = ops ? 4 * (int64_t)(ws > narrow ? ws : narrow) : 0;
    }
    m->keep_in_place = ops && ops->host_addressable && !on_executor;
    m->keep_on_executor = ops && on_executor;
    free(layers);
    free(base);
    *workspace_bytes = tokens * (int64_t)((documents ? 3 : 2) * sizeof(int32_t) + 1);
    /* a mixture of experts' load-balancing gradient and router statistics,
     * [E] and [2E] fp32, on a device the host does not address */
    if (ops && rp_router_stats_moved(device) && rp_model_has_moe(cfg))
        *workspace_bytes += 3 * 4 * cfg->moe.num_experts;
    /* and the scratch an FP8 base's blocks are dequantised in, every job's */
    *workspace_bytes += base_scratch;
    if (ops && rp_saves_staged(device)) /* the saves' staging slots (executor.c) */
        *workspace_bytes += RP_SAVE_SLOTS * tokens * H * (int64_t)sizeof(float);
    return RP_OK;
}

int rp_saves_staged(rp_device_kind device)
{
    if (device == RP_DEVICE_CUDA)
        return rp_unproven_allowed(RP_UNPROVEN_COPIES);
    const char *test = getenv("RP_TEST_SAVE_STAGING");
    return device == RP_DEVICE_CPU &&
           ((test && !strcmp(test, "1")) || rp_device_event_test(device));
}

int rp_router_stats_moved(rp_device_kind device)
{
    const rp_kernel_ops *ops = rp_device_kernel_ops(device);
    return (ops && !ops->host_addressable) || rp_device_unordered_test(device) ||
           rp_device_event_test(device);
}

/* A buffer of `bytes` as the evaluator asks the device for it: never empty. */
static size_t eval_buffer(size_t bytes)
{
    return bytes ? bytes : 1;
}

rp_status rp_memory_model_eval(const rp_model_config *cfg, rp_device_kind device, rp_dtype dtype,
                               int documents, int64_t samples_per_micro, int64_t seq_len,
                               rp_eval_memory *m, rp_error *err)
{
    memset(m, 0, sizeof *m);
    rp_model_config c = *cfg;
    c.lora.dropout = 0; /* evaluation is inference: no dropout buffers */
    rp_layer_desc *layers = NULL, *base = NULL;
    int n = 0, nb = 0;
    const int lora = cfg->lora.rank > 0;
    RP_TRY(rp_model_layout(&c, &layers, &n, err));
    rp_status s = RP_OK;
    if (lora)
        s = rp_frozen_base_layout(cfg, &base, &nb, err);
    if (s == RP_OK && lora && nb != n)
        s = rp_error_set(err, RP_ERR_INTERNAL, "memory model: a base of %d layers for a model "
                         "of %d", nb, n);
    if (s != RP_OK) {
        free(layers);
        free(base);
        return s;
    }
    /* the frozen base as the executors take it (the rules of rp_memory_model_fill) */
    const rp_kernel_ops *ops = rp_device_kernel_ops(device);
    const int in_place = lora && rp_frozen_base_in_place(ops);
    const int fp8 = rp_frozen_base_takes_fp8(cfg, rp_frozen_base_reads(ops));
    const size_t es = rp_dtype_size(dtype);
    const int64_t tokens = samples_per_micro * seq_len;
    size_t weights = 0, adapters = 0;
    for (int l = 0; l < n; l++) {
        size_t w = rp_params_compute_array_bytes(layers[l].numel, dtype);
        if (lora) /* the base's block (padding included) where the evaluator holds it */
            w = rp_frozen_base_copied(in_place, fp8, l, n) || rp_frozen_base_per_use(fp8, l, n)
                    ? base[l].numel * es
                    : 0;
        if (l == 0) {
            m->embedding = eval_buffer(w);
            continue;
        }
        weights = w > weights ? w : weights;
        if (lora) {
            size_t a = rp_params_compute_array_bytes(layers[l].numel, dtype);
            adapters = a > adapters ? a : adapters;
        }
        if (lora && !in_place && rp_frozen_base_per_use(fp8, l, n)) {
            size_t st = rp_frozen_base_staged_bound(cfg, &base[l], dtype);
            m->staging = st > m->staging ? st : m->staging;
        }
    }
    free(layers);
    free(base);
    m->weights = eval_buffer(weights);
    m->adapters = lora ? eval_buffer(adapters) : 0;
    m->activations = eval_buffer((size_t)(tokens * cfg->hidden_size) * sizeof(float));
    /* the evaluator's last microbatch may hold fewer samples (eval.c), and
     * a block's saved area is not monotonic in its tokens: a chunk that
     * covers them all keeps the dense MLP's g, u and m there (block.c's
     * mlp_kept), so a short microbatch can need more than a full one. The
     * largest over every count the evaluator can run. */
    size_t saved = 0, workspace = 0;
    for (int64_t ns = 1; ops && ns <= samples_per_micro; ns++) {
        const size_t a = rp_block_saved_floats(ops, dtype, &c, ns, seq_len),
                     b = rp_model_workspace_floats(ops, dtype, &c, ns, seq_len);
        saved = a > saved ? a : saved;
        workspace = b > workspace ? b : workspace;
    }
    m->saved = eval_buffer(saved * sizeof(float));
    m->workspace = eval_buffer(workspace * sizeof(float));
    m->token_ids = eval_buffer((size_t)tokens * sizeof(int32_t));
    m->mask = eval_buffer((size_t)tokens);
    m->segments = documents ? eval_buffer((size_t)tokens * sizeof(int32_t)) : 0;
    m->total = m->embedding + m->weights + m->adapters + m->staging + 2 * m->activations +
               m->saved + m->workspace + 2 * m->token_ids + m->mask + m->segments;
    return RP_OK;
}
