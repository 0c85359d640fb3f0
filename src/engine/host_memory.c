/* Host memory of a training run (see host_memory.h). */
#include "engine/host_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "engine/arena.h"
#include "engine/padding.h"
#include "engine/params.h"
#include "model/layers.h"
#include "model/layout.h"
#include "optim/adamw.h"
#include "store/shm.h"

rp_status rp_param_store_layout(const rp_model_config *cfg, rp_dtype dtype, int pipelines,
                                int64_t tokens_per_pipeline, size_t base_bytes, size_t *goff,
                                rp_store_layout **layout, rp_param_store_map *map,
                                rp_error *err)
{
    memset(map, 0, sizeof *map);
    if (layout)
        *layout = NULL;
    rp_model_config c = *cfg;
    rp_layer_desc *layers = NULL;
    int n = 0;
    RP_TRY(rp_model_layout(&c, &layers, &n, err));
    const size_t H = (size_t)cfg->hidden_size, P = (size_t)pipelines;
    /* with LoRA nothing of the embedding or the head trains */
    const int lora = cfg->lora.rank > 0;
    size_t vh = cfg->tie_word_embeddings && !lora ? (size_t)cfg->vocab_size * H : 0;
    /* gradients of pipelines 1..P-1, 64-byte aligned per layer; one
     * pipeline's block is staggered like the model state's arrays, since
     * the optimizer streams a layer's copies side by side */
    size_t gs = 0;
    for (int l = 0; l < n; l++) {
        if (goff)
            goff[l] = gs;
        if (l > 0) /* the embedding's travels as rows */
            gs += rp_padded_elements(layers[l].numel);
    }
    free(layers);
    map->gstride = rp_adamw_array_bytes(gs) / sizeof(float);
    map->emb_cap = tokens_per_pipeline < cfg->vocab_size ? tokens_per_pipeline : cfg->vocab_size;
    map->tied_bytes = P * vh * sizeof(float);
    map->group_bytes = (P - 1) * map->gstride * sizeof(float);
    map->emb_rows_bytes = lora ? 0 : P * (size_t)map->emb_cap * H * sizeof(float);
    map->base_bytes = base_bytes;
    rp_store_layout *lay = NULL;
    RP_TRY(rp_store_layout_create(&lay, err));
    rp_status s = rp_store_layout_add(lay, "params", rp_params_bytes(cfg, dtype),
                                      RP_STORE_ALIGN_PAGE, &map->params, err);
    if (s == RP_OK)
        s = rp_store_layout_add(lay, "tied-grad", map->tied_bytes, RP_STORE_ALIGN_PAGE, &map->tied,
                                err);
    if (s == RP_OK)
        s = rp_store_layout_add(lay, "pipeline-grads", map->group_bytes, RP_STORE_ALIGN_PAGE,
                                &map->group, err);
    if (s == RP_OK)
        s = rp_store_layout_add(lay, "embedding-grad-ids",
                                P * (size_t)tokens_per_pipeline * sizeof(int32_t),
                                RP_STORE_ALIGN_PAGE, &map->emb_ids, err);
    if (s == RP_OK)
        s = rp_store_layout_add(lay, "embedding-grad-rows", map->emb_rows_bytes,
                                RP_STORE_ALIGN_PAGE, &map->emb_rows, err);
    if (s == RP_OK)
        s = rp_store_layout_add(lay, "embedding-grad-counts", P * sizeof(int64_t),
                                RP_STORE_ALIGN_LINE, &map->emb_n, err);
    if (s == RP_OK)
        s = rp_store_layout_add(lay, "control", 64, RP_STORE_ALIGN_LINE, &map->ctrl, err);
    if (s == RP_OK)
        s = rp_store_layout_add(lay, "frozen-base", base_bytes, RP_STORE_ALIGN_PAGE, &map->base,
                                err);
    map->bytes = rp_store_layout_bytes(lay);
    if (s == RP_OK && layout)
        *layout = lay;
    else
        rp_store_layout_destroy(&lay);
    return s;
}

rp_status rp_host_memory_count(const rp_model_config *cfg, rp_dtype dtype, int pipelines,
                               int microbatches, int64_t tokens_per_micro, const rp_plan *plan,
                               int recompute_layer, rp_dtype act_dtype,
                               const size_t *kept_floats, int kept_on_executor,
                               const rp_frozen_base *base,
                               rp_host_memory *out, rp_error *err)
{
    memset(out, 0, sizeof *out);
    out->lora = cfg->lora.rank > 0;
    if (out->lora && !base)
        return rp_error_set(err, RP_ERR_INTERNAL, "host memory: a LoRA model without its base");
    if (out->lora && rp_frozen_base_mapped(base))
        out->base_mapped = rp_frozen_base_bytes(base);
    if (out->lora && rp_frozen_base_fp8(base))
        out->base_bf16 = rp_frozen_base_bf16_bytes(base);
    if (out->lora) /* all of it, or a mapped FP8 base's odd tensors */
        out->base_store = rp_frozen_base_store_bytes(base);
    rp_param_store_map map;
    int64_t per_pipeline = (int64_t)(microbatches / pipelines) * tokens_per_micro;
    RP_TRY(rp_param_store_layout(cfg, dtype, pipelines, per_pipeline, out->base_store, NULL, NULL,
                                 &map, err));
    out->param_store = map.bytes;
    /* the base's region is pinned like the compute copies it stands for */
    out->pinned = map.tied_bytes + map.group_bytes + map.emb_rows_bytes + map.base_bytes;
    rp_model_config c = *cfg;
    rp_layer_desc *layers = NULL;
    int n = 0;
    RP_TRY(rp_model_layout(&c, &layers, &n, err));
    for (int l = 0; l < n; l++) {
        size_t lb = rp_adamw_array_bytes(layers[l].numel);
        if (rp_pin_layer_compute(l, cfg->tie_word_embeddings && !out->lora))
            out->pinned += rp_params_compute_array_bytes(layers[l].numel, dtype);
        if (rp_pin_layer_grad(l))
            out->pinned += lb;
    }
    free(layers);
    /* a mixture of experts' router statistics, as if its load-balancing
     * loss were on (engine/router_aux.h) */
    size_t router_floats = 0;
    for (int64_t b = 0; b < cfg->num_hidden_layers; b++)
        router_floats += rp_model_block_is_moe(cfg, b) ? 2 * (size_t)cfg->moe.num_experts : 0;
    rp_arena arena;
    rp_arena_spec as = {n, microbatches, (size_t)(tokens_per_micro * cfg->hidden_size),
                        recompute_layer, router_floats, kept_floats, act_dtype, kept_on_executor};
    if (plan->kept > 0 && !kept_floats && !kept_on_executor)
        return rp_error_set(err, RP_ERR_INTERNAL, "host memory: kept layers without their sizes");
    if (rp_arena_init(&arena, plan, &as) != 0)
        return rp_error_set(err, RP_ERR_NOMEM, "host memory: the activation arena's index");
    out->activations = arena.floats * sizeof(float);
    out->kept_layers = plan->kept > 0 ? plan->kept : 0;
    out->kept_on_executor = kept_on_executor;
    for (int l = 0; kept_floats && !kept_on_executor && l < n; l++) /* its input, unless a
                                                  forward output holds it (arena.h) */
        if (rp_plan_is_kept(plan, l))
            out->kept += (size_t)microbatches * sizeof(float) *
                         ((arena.ckpt_of_fwd_out[l] < 0 ? arena.buffer_floats : 0) +
                          rp_padded_elements(kept_floats[l]));
    rp_arena_free(&arena);
    out->pinned += out->activations;
    return RP_OK;
}

int rp_kept_on_executor(rp_device_kind device)
{
    const rp_kernel_ops *ops = rp_device_kernel_ops(device);
    if (ops && !ops->host_addressable)
        return 1;
    const char *test = getenv("RP_TEST_KEEP_ON_EXECUTOR");
    return device == RP_DEVICE_CPU && test && !strcmp(test, "1");
}

rp_status rp_host_kept_floats(rp_device_kind device, rp_dtype dtype, const rp_model_config *cfg,
                              int64_t samples_per_micro, int64_t seq_len, size_t **out,
                              rp_error *err)
{
    const rp_kernel_ops *ops = rp_device_kernel_ops(device);
    const int n = (int)cfg->num_hidden_layers + 2;
    *out = NULL;
    if (!ops)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "kept activations: no %s back end in this "
                            "build", rp_device_kind_name(device));
    size_t *f = calloc((size_t)n, sizeof *f);
    if (!f)
        return rp_error_set(err, RP_ERR_NOMEM, "kept activations' sizes");
    for (int l = 1; l < n - 1; l++)
        f[l] = rp_block_saved_floats_of(ops, dtype, cfg, l - 1, samples_per_micro, seq_len);
    *out = f;
    return RP_OK;
}

/* "1.25 GiB", or "12.3 MiB" below a GiB. */
static const char *size_text(size_t bytes, char *buf, size_t len)
{
    if (bytes >= ((size_t)1 << 30))
        snprintf(buf, len, "%.2f GiB", bytes / 1073741824.0);
    else
        snprintf(buf, len, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

void rp_host_memory_format(const rp_host_memory *hm, char *buf, size_t len)
{
    char a[32], b[32], c[32], d[32], e[32];
    size_t store = hm->param_store + hm->activations;
    char converted[96] = "";
    if (hm->lora && !hm->base_mapped)
        snprintf(converted, sizeof converted, ", the frozen base converted into it %s",
                 size_text(hm->base_store, a, sizeof a));
    else if (hm->lora && hm->base_store) /* frozen_base.h: an FP8 base's odd tensors */
        snprintf(converted, sizeof converted, ", the frozen base's tensors in another dtype "
                 "converted into it %s", size_text(hm->base_store, a, sizeof a));
    char kept[128] = "";
    if (hm->kept_layers > 0 && hm->kept_on_executor)
        snprintf(kept, sizeof kept, "; kept by %d block%s instead of recomputed, in the "
                 "executors' own memory", hm->kept_layers, hm->kept_layers == 1 ? "" : "s");
    else if (hm->kept_layers > 0)
        snprintf(kept, sizeof kept, " of which %s kept by %d block%s instead of recomputed",
                 size_text(hm->kept, e, sizeof e), hm->kept_layers,
                 hm->kept_layers == 1 ? "" : "s");
    int at = snprintf(buf, len, "host memory per node: %s in %s (model state and gradients %s%s, "
                      "activations %s%s)", size_text(store, b, sizeof b), RP_SHM_DEFAULT_DIR,
                      size_text(hm->param_store - hm->base_store, c, sizeof c), converted,
                      size_text(hm->activations, d, sizeof d), kept);
    char fp8[128] = "";
    if (hm->base_bf16)
        snprintf(fp8, sizeof fp8, " (FP8 e4m3 with its block scales, %zu bytes; %s, %zu bytes, "
                 "in bf16)", hm->base_mapped, size_text(hm->base_bf16, c, sizeof c),
                 hm->base_bf16);
    if (at >= 0 && (size_t)at < len && hm->base_mapped) {
        store += hm->base_mapped;
        at += snprintf(buf + at, len - (size_t)at, " + the frozen base %s%s mapped read-only "
                       "from the model's safetensors files (page cache, one copy per node) = %s",
                       size_text(hm->base_mapped, a, sizeof a), fp8,
                       size_text(store, b, sizeof b));
    }
    if (at >= 0 && (size_t)at < len && hm->speculative_backup)
        snprintf(buf + at, len - (size_t)at, " + the speculative update's backup %s in the "
                 "ranks' own memory = %s", size_text(hm->speculative_backup, a, sizeof a),
                 size_text(store + hm->speculative_backup, b, sizeof b));
}

int64_t rp_host_memory_limit(double limit_mib, const char **from)
{
    if (limit_mib > 0) {
        *from = "--host-memory-limit-mib";
        return (int64_t)(limit_mib * 1048576.0);
    }
    *from = "MemAvailable";
    return (int64_t)rp_device_host_available_bytes();
}
