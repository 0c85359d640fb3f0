/* One microbatch through the running job's stage on the executor's device
 * (DESIGN 4): a forward job's layers, the tail's forward, loss and
 * backward, a backward job's recompute and backward; the layer calls they
 * make (each layer's weights from the stage-weights view, stage_weights.h;
 * LoRA's adapters and a mixture of experts' router statistics beside
 * them), the activations' moves between the device and the host store's
 * arena, and the events that order them (protocol.h). The job runner
 * (executor.c) calls it for each microbatch of a job. */
#include <string.h>

#include "core/unproven.h"
#include "device/backend.h"
#include "engine/executor_impl.h"
#include "engine/lora_run.h"
#include "engine/padding.h"
#include "engine/protocol.h"
#include "engine/stage_weights.h"
#include "engine/train_options.h"
#include "model/layers.h"

/* The running job's stage buffer as a weights view (stage_weights.h). */
static rp_stage_weights stage_view(const executor *x, const rp_job *job)
{
    const rp_engine *e = x->e;
    const stage_buf *b = &x->buf[x->cur];
    rp_stage_weights w = {.first = job->first, .buffer = b->w, .offsets = b->off,
                          .base_offsets = b->boff, .base_scratch = x->base_scratch};
    if (e->lora && e->base_in_place) /* the embedding's rows gathered from where it lies */
        w.embedding = b->gather;
    if (rp_stage_needs_tied(e, job))
        w.tied_matrix =
            (const char *)b->w + b->off[e->num_layers] * rp_dtype_size(e->p->compute_dtype);
    return w;
}

/* Layer l's trainable weights in the stage buffer (compute dtype). */
static const void *trainable_weights(executor *x, const rp_job *job, int l)
{
    rp_stage_weights w = stage_view(x, job);
    return rp_stage_weights_trainable(x->e, &w, l, 0);
}

/* What a block call needs besides its weights: with LoRA, its adapters,
 * the frozen base's tensors when they are read in place, and the dropout
 * keys of this microbatch (NULL without LoRA). */
static const rp_lora_call *lora_call(executor *x, const rp_job *job, int l, int64_t t,
                                     rp_lora_call *c)
{
    rp_engine *e = x->e;
    if (!e->lora)
        return NULL;
    rp_lora_call_of(e, l, t, (e->micro_base + x->micro) * e->samples_per_micro,
                    trainable_weights(x, job, l), c);
    return c;
}

/* Block l's call (l >= 1): its index, LoRA's adapters, the documents'
 * host copy, and a mixture of experts' router statistics (a forward of a
 * forward job or the tail: a backward stage's recompute writes none) or the
 * load-balancing loss's gradient (a backward, rp_exec_aux_grad made it). */
static const rp_block_call *block_call(executor *x, const rp_job *job, int l, int64_t t,
                                       int forward, rp_lora_call *lc, rp_block_call *c)
{
    rp_engine *e = x->e;
    memset(c, 0, sizeof *c);
    c->block = (int32_t)(l - 1);
    c->lora = lora_call(x, job, l, t, lc);
    c->allow_unproven = rp_unproven_in(x->e->unproven, RP_UNPROVEN_GPT_OSS);
    c->segments_host = x->segments ? x->host_segments : NULL; /* microbatch x->micro's */
    float *slot = rp_router_stats_slot(e, t, x->micro, l);
    if (forward && slot && job->kind != RP_JOB_BWD)
        c->router_stats = x->router_stats ? x->router_stats : slot;
    if (!forward && slot)
        c->router_aux_grad = x->aux_grad;
    return c;
}

/* The load-balancing loss's gradient of microbatch m on the device, for
 * the backward of its blocks (every forward of m has run before: its
 * statistics are in the arena); with aux, the tail also records m's loss. */
static rp_status aux_grad(executor *x, int64_t t, int m, double *aux, rp_error *err)
{
    rp_engine *e = x->e;
    if (e->raux.coef <= 0)
        return RP_OK;
    rp_router_aux_of(e, t, m, aux, x->host_aux_grad);
    if (x->aux_grad == x->host_aux_grad)
        return RP_OK;
    return rp_exec_move(x, x->aux_grad, x->host_aux_grad, sizeof(float) * (size_t)e->raux.experts,
                        RP_XFER_INPUT, "aux-grad", err);
}

/* The weights a call of layer l reads (stage_weights.h). */
static const void *block_weights(executor *x, const rp_job *job, int l)
{
    rp_stage_weights w = stage_view(x, job);
    return rp_stage_weights_layer(x->e, &w, l);
}

/* The end of a layer call: on a device not ordered by events, the host
 * waits for its kernel ops (the copies after it read their results, and
 * its time is the host's clock after them); ordered by events, nothing
 * waits (the copies are ordered on the device, rp_exec_move). Then its time
 * for the re-plan (layer_clock.c). */
static rp_status layer_end(executor *x, int l, int backward, int64_t t, rp_status s,
                           rp_error *err)
{
    if (s == RP_OK && !x->by_events)
        s = rp_device_sync(x->dev, err);
    if (s == RP_OK)
        s = rp_layer_clock_stop(x, l, backward, t, err);
    return s;
}

/* --activation-dtype bf16 (arena.h): a layer's output rounded to it where
 * it is made, in every job that makes it (forward, the tail's forward, a
 * backward's recompute), so that the residual stream is the same bits
 * whichever plan cuts it and the host store's bf16 copy of a boundary
 * loses nothing; the next layer reads it widened. */
static rp_status round_output(executor *x, float *out, rp_error *err)
{
    if (!x->act_narrow)
        return RP_OK;
    const rp_dtype dt = x->e->o->activation_dtype;
    const int64_t n = (int64_t)x->e->act_floats;
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    RP_TRY(k.ops->convert(k.state, out, RP_F32, x->act_narrow, dt, n, err));
    return k.ops->convert(k.state, x->act_narrow, dt, out, RP_F32, n, err);
}

/* save_activation's narrowing, waited for: through act_narrow. */
static rp_status save_narrowed(executor *x, float *host, const float *dev, const char *tag,
                               rp_error *err)
{
    rp_engine *e = x->e;
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    RP_TRY(k.ops->convert(k.state, dev, RP_F32, x->act_narrow, e->o->activation_dtype,
                          (int64_t)e->act_floats, err));
    return rp_exec_move(x, host, x->act_narrow,
                        e->act_floats * rp_dtype_size(e->o->activation_dtype), RP_XFER_SAVE, tag,
                        err);
}

/* An activation (a layer's input or output, already rounded) from the
 * device into its arena buffer, in the activation dtype, then `publish`
 * (may be NULL) said: through a staging slot where saves are staged
 * (staged_saves.c: the executor goes on, and the event is published once
 * the save has landed), else waited for and published here. */
static rp_status save_activation(executor *x, float *host, const float *dev, const char *tag,
                                 const rp_save_publish *publish, rp_error *err)
{
    rp_engine *e = x->e;
    if (x->save_slot[0])
        return rp_exec_save_staged(x, host, dev, x->act_narrow ? e->o->activation_dtype : RP_F32,
                                   tag, publish, err);
    if (!x->act_narrow)
        RP_TRY(rp_exec_move(x, host, dev, e->act_floats * sizeof(float), RP_XFER_SAVE, tag, err));
    else
        RP_TRY(save_narrowed(x, host, dev, tag, err));
    rp_exec_publish(e, publish);
    return RP_OK;
}

/* An arena buffer of activations onto the device, widened to fp32. */
static rp_status load_activation(executor *x, float *dev, const float *host, const char *tag,
                                 rp_error *err)
{
    rp_engine *e = x->e;
    if (!x->act_narrow)
        return rp_exec_move(x, dev, host, e->act_floats * sizeof(float), RP_XFER_INPUT, tag, err);
    RP_TRY(rp_exec_move(x, x->act_narrow, host,
                        e->act_floats * rp_dtype_size(e->o->activation_dtype), RP_XFER_INPUT, tag,
                        err));
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    RP_TRY(k.ops->convert(k.state, x->act_narrow, e->o->activation_dtype, dev, RP_F32,
                          (int64_t)e->act_floats, err));
    /* the next upload into act_narrow comes after the widening has read it
     * (ordered by events: rp_exec_move orders it on the device) */
    return x->by_events ? RP_OK : rp_device_sync(x->dev, err);
}

/* The forward of layer l from `in` into `out` (NULL: only what its
 * backward needs, kept in `saved`; the embedding keeps nothing); `out`
 * rounded to the activation dtype (round_output). */
static rp_status layer_forward(executor *x, const rp_job *job, int l, const float *in, float *out,
                               float *saved, int64_t t, rp_error *err)
{
    rp_engine *e = x->e;
    RP_TRY(rp_stage_wait_layer(x, job, l, err));
    RP_TRY(rp_layer_clock_start(x, err));
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    rp_status s;
    if (l == 0) {
        if (!out)
            return RP_OK;
        rp_model_config rows = e->p->cfg; /* the table holds the uploaded rows only */
        rows.vocab_size = x->buf[x->cur].nrows;
        s = rp_embed_forward(&k, &rows, block_weights(x, job, 0), rp_stage_weights_dtype(e, 0),
                             x->tokens, e->tokens_per_micro, out, err);
    } else {
        rp_lora_call lc;
        rp_block_call c;
        s = rp_block_forward(&k, &e->p->cfg, block_weights(x, job, l), rp_stage_weights_dtype(e, l),
                             in, out, e->samples_per_micro, e->seq_len, x->segments, saved,
                             x->workspace, block_call(x, job, l, t, 1, &lc, &c), err);
        /* the statistics are the block's kernel ops' results: their
         * download comes after them (rp_exec_move) */
        if (s == RP_OK && c.router_stats && c.router_stats == x->router_stats)
            s = rp_exec_move(x, rp_router_stats_slot(e, t, x->micro, l), x->router_stats,
                             sizeof(float) * e->raux.floats / (size_t)e->raux.nmoe, RP_XFER_SAVE,
                             "router-stats", err);
    }
    if (s == RP_OK && out)
        s = round_output(x, out, err);
    return layer_end(x, l, 0, t, s, err);
}

/* The backward of layer l from what its forward on `in` kept in `saved`. */
static rp_status layer_backward(executor *x, const rp_job *job, int l, const float *in,
                                float *saved, int64_t t, rp_error *err)
{
    rp_engine *e = x->e;
    if (l == 0 && e->lora) /* a frozen embedding: nothing to compute */
        return RP_OK;
    RP_TRY(rp_stage_wait_layer(x, job, l, err));
    RP_TRY(rp_layer_clock_start(x, err));
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    rp_status s;
    if (l == 0) {
        rp_model_config rows = e->p->cfg;
        rows.vocab_size = x->buf[x->cur].nrows;
        s = rp_embed_backward(&k, &rows, x->tokens, e->tokens_per_micro, x->act_grad,
                              rp_exec_layer_grad(x, job, 0), err);
    } else {
        rp_lora_call lc;
        rp_block_call c;
        s = rp_block_backward(&k, &e->p->cfg, block_weights(x, job, l),
                              rp_stage_weights_dtype(e, l), in, saved, x->act_grad, x->act_grad,
                              rp_exec_layer_grad(x, job, l), e->samples_per_micro, e->seq_len,
                              x->segments, x->workspace, block_call(x, job, l, t, 0, &lc, &c), err);
    }
    return layer_end(x, l, 1, t, s, err);
}

static float *arena(const rp_engine *e, size_t off)
{
    return e->act + off;
}

/* Where a kept layer's activations lie (plan.h's kept): in the executor's
 * own pool (GPUs: host_memory.h's rp_kept_on_executor), else in the
 * arena, which executors of host memory compute into and read in place. */
static int kept_in_pool(const executor *x)
{
    return x->kept_pool != NULL;
}

/* Kept layer l's input (saved 0) or saved area (saved 1) of microbatch m
 * in the executor's pool: per layer, for each microbatch of the pipeline,
 * the input (act_floats) then the saved area (kept_floats[l]), each
 * rounded up to 16 floats (executor.c lays it out, memory_model.c counts
 * it). */
static float *pool_slot(const executor *x, int l, int m, int saved)
{
    const rp_engine *e = x->e;
    const size_t in = rp_padded_elements(e->act_floats);
    const size_t local = (size_t)m % (size_t)e->micro_per_pipeline;
    return x->kept_pool + x->kept_at[l] + local * (in + rp_padded_elements(e->kept_floats[l])) +
           (saved ? in : 0);
}

/* The input and the saved area of kept layer l's forward of microbatch m,
 * for its backward: in the pool, or where the arena holds them (a bf16
 * input widened into the device buffer acts[i] first: the layer reads
 * fp32). */
static rp_status kept_for_backward(executor *x, int l, int i, int m, const float **in,
                                   float **saved, rp_error *err)
{
    rp_engine *e = x->e;
    int M = (int)e->microbatches;
    if (kept_in_pool(x)) {
        *in = pool_slot(x, l, m, 0);
        *saved = pool_slot(x, l, m, 1);
        return RP_OK;
    }
    float *host_in = arena(e, e->arena.ckpt[l * M + m]);
    *saved = arena(e, e->arena.kept[l * M + m]);
    if (!x->act_narrow) {
        *in = host_in;
        return RP_OK;
    }
    /* a bf16 input is widened into the stage's slot of l, which nothing
     * else of this microbatch uses (the recompute stops below the kept) */
    RP_TRY(load_activation(x, x->acts[i], host_in, "kept input", err));
    *in = x->acts[i];
    return RP_OK;
}

/* The backward of kept layer l (its forward job kept what it needs: no
 * recompute), then its arena slots are free for the next iteration. */
static rp_status kept_backward(executor *x, const rp_job *job, int l, int i, int64_t t, int m,
                               rp_error *err)
{
    const float *in;
    float *saved;
    RP_TRY(kept_for_backward(x, l, i, m, &in, &saved, err));
    RP_TRY(layer_backward(x, job, l, in, saved, t, err));
    if (x->e->arena.is_ckpt[l]) /* its input was read from the arena */
        rp_proto_checkpoint_read(x->e, l, m, t);
    return RP_OK;
}

/* ---- the three kinds of job, one microbatch ------------------------------ */

rp_status rp_stage_forward(executor *x, const rp_job *job, int64_t t, int m, rp_error *err)
{
    rp_engine *e = x->e;
    int M = (int)e->microbatches, s = job->stage, nb = 0;
    const float *cur = NULL;
    if (job->first > 0) {
        RP_TRY(rp_proto_wait_fwd_out(e, s - 1, m, t, x->name, err));
        RP_TRY(load_activation(x, x->acts[0], arena(e, e->arena.fwd_out[(s - 1) * M + m]),
                               "input", err));
        rp_proto_fwd_out_read(e, s - 1, m, t);
        cur = x->acts[0];
        nb = 1;
    }
    for (int l = job->first; l <= job->last; l++) {
        float *out = x->acts[nb], *saved = x->saved[0];
        int kept = rp_plan_is_kept(&e->plan, l);
        nb ^= 1;
        /* the activation checkpoint (a kept layer's input), unless it is
         * the buffer this job's input came from (arena.h) */
        if (l > 0 && e->arena.is_ckpt[l] && e->arena.ckpt_of_fwd_out[l] < 0) {
            RP_TRY(rp_proto_wait_checkpoint_free(e, l, m, t, x->name, err));
            RP_TRY(save_activation(x, arena(e, e->arena.ckpt[l * M + m]), cur, "checkpoint",
                                   NULL, err));
        }
        if (kept && kept_in_pool(x)) { /* its input and saved area stay here */
            /* a kernel op: after the ops that wrote cur and before those that
             * read the slot, on the compute stream, with no host wait */
            rp_kernels k;
            RP_TRY(rp_device_kernels(x->dev, &k, err));
            RP_TRY(k.ops->copy(k.state, pool_slot(x, l, m, 0), cur, e->act_floats * sizeof(float),
                               err));
            saved = pool_slot(x, l, m, 1);
        } else if (kept) {
            saved = arena(e, e->arena.kept[l * M + m]);
        }
        RP_TRY(layer_forward(x, job, l, cur, out, saved, t, err));
        cur = out;
    }
    RP_TRY(rp_proto_wait_fwd_out_free(e, s, m, t, x->name, err));
    /* the output that is also the next stage's checkpoint (arena.h): free
     * once the backward of the iteration before has read it too */
    if (s + 1 < e->plan.nfwd && e->arena.ckpt_of_fwd_out[e->plan.fwd[s + 1].first] == s)
        RP_TRY(rp_proto_wait_checkpoint_free(e, e->plan.fwd[s + 1].first, m, t, x->name, err));
    const rp_save_publish out = {RP_SAVE_PUBLISH_FWD_OUT, s, m, t};
    RP_TRY(save_activation(x, arena(e, e->arena.fwd_out[s * M + m]), cur, "output", &out, err));
    return RP_OK;
}

/* The forward of layers first..last of a backward-type job, once: acts[i]
 * holds the input of layer first+i (acts[0] is uploaded from host_in0, or
 * unused when first is the embedding) and saved[i] what its backward
 * needs. The output of `last` is kept only when `last_output` (the tail's
 * head reads it). */
static rp_status recompute(executor *x, const rp_job *job, const float *host_in0, int last,
                           int last_output, int64_t t, rp_error *err)
{
    const float *cur = NULL;
    if (host_in0) {
        RP_TRY(load_activation(x, x->acts[0], host_in0, "input", err));
        cur = x->acts[0];
    }
    for (int l = job->first; l <= last; l++) {
        int i = l - job->first;
        float *out = l < last || last_output ? x->acts[i + 1] : NULL;
        RP_TRY(layer_forward(x, job, l, cur, out, x->saved[i], t, err));
        cur = out;
    }
    return RP_OK;
}

/* Hand the input gradient of a tail/backward stage to the stage below. A
 * stage that ends at the embedding has no one to hand it to but still
 * signals (the logger waits on the tail's); then, with a lagged optimizer
 * letting iterations overlap, it keeps its signals in iteration order. */
static rp_status publish_bwd(executor *x, const rp_job *job, int64_t t, int m, rp_error *err)
{
    rp_engine *e = x->e;
    int i = job->stage;
    RP_TRY(rp_proto_wait_bwd_out_free(e, i, job->first == 0, m, t, x->name, err));
    if (job->first > 0) {
        float *host = arena(e, e->arena.bwd_out[i * (int)e->microbatches + m]);
        const rp_save_publish in_grad = {RP_SAVE_PUBLISH_BWD_OUT, i, m, t};
        if (x->save_slot[0]) /* published once it has landed */
            return rp_exec_save_staged(x, host, x->act_grad, RP_F32, "input-grad", &in_grad, err);
        RP_TRY(rp_exec_move(x, host, x->act_grad, e->act_floats * sizeof(float), RP_XFER_SAVE,
                            "input-grad", err));
    }
    rp_proto_publish_bwd_out(e, i, m, t);
    return RP_OK;
}

rp_status rp_stage_tail(executor *x, const rp_job *job, int64_t t, int m, float scale,
                        rp_error *err)
{
    rp_engine *e = x->e;
    int M = (int)e->microbatches, head = job->last;
    const float *in0 = NULL;
    if (job->first > 0) {
        RP_TRY(rp_proto_wait_fwd_out(e, e->plan.nfwd - 1, m, t, x->name, err));
        in0 = arena(e, e->arena.fwd_out[(e->plan.nfwd - 1) * M + m]);
    }
    if (head > job->first)
        RP_TRY(recompute(x, job, in0, head - 1, 1, t, err));
    else if (in0) /* the head alone: its input */
        RP_TRY(load_activation(x, x->acts[0], in0, "input", err));
    if (job->first > 0) /* the input was copied to the device */
        rp_proto_fwd_out_read(e, e->plan.nfwd - 1, m, t);
    /* the loss slot of this iteration must have been read by the logger */
    RP_TRY(rp_proto_wait_losses_free(e, t, x->name, err));
    RP_TRY(aux_grad(x, t, m, e->raux.coef > 0 ? &rp_router_aux_values(e, t)[m] : NULL, err));
    RP_TRY(rp_stage_wait_layer(x, job, head, err));
    rp_stage_weights w = stage_view(x, job);
    rp_head_weights hw;
    rp_stage_weights_head(e, &w, head, &hw);
    float *norm_g = NULL, *lm_g = NULL; /* a frozen head has none */
    if (hw.trainable) {
        norm_g = rp_exec_layer_grad(x, job, head) + hw.norm_at;
        lm_g = hw.lm_tied ? rp_exec_tied_grad(x, job) : rp_exec_layer_grad(x, job, head) + hw.lm_at;
    }
    double *loss = rp_engine_loss(e, t);
    RP_TRY(rp_layer_clock_start(x, err));
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    RP_TRY(rp_head_forward_backward(&k, &e->p->cfg, hw.norm, hw.lm, rp_stage_weights_dtype(e, head),
                                    x->acts[head - job->first], x->targets, x->mask,
                                    e->tokens_per_micro, scale, x->act_grad, norm_g, lm_g,
                                    e->head_rows, x->workspace, &loss[m], err));
    /* forward and backward in one call: counted as backward */
    RP_TRY(layer_end(x, head, 1, t, RP_OK, err));
    for (int l = head - 1; l >= job->first; l--)
        RP_TRY(layer_backward(x, job, l, x->acts[l - job->first], x->saved[l - job->first], t,
                              err));
    RP_TRY(publish_bwd(x, job, t, m, err));
    return RP_OK;
}

rp_status rp_stage_backward(executor *x, const rp_job *job, int64_t t, int m, rp_error *err)
{
    rp_engine *e = x->e;
    int M = (int)e->microbatches, i = job->stage;
    RP_TRY(rp_proto_wait_bwd_out(e, i - 1, m, t, x->name, err));
    RP_TRY(rp_exec_move(x, x->act_grad, arena(e, e->arena.bwd_out[(i - 1) * M + m]),
                        e->act_floats * sizeof(float), RP_XFER_INPUT, "output-grad", err));
    RP_TRY(aux_grad(x, t, m, NULL, err));
    rp_proto_bwd_out_read(e, i - 1, m, t);
    if (e->o->recompute == RP_RECOMPUTE_LAYER) {
        /* every layer's input was saved: no stage-wide recompute, one layer's
         * activations on the device at a time */
        for (int l = job->last; l >= job->first; l--) {
            if (rp_plan_is_kept(&e->plan, l)) {
                RP_TRY(kept_backward(x, job, l, 0, t, m, err));
                continue;
            }
            if (l > 0) {
                RP_TRY(load_activation(x, x->acts[0], arena(e, e->arena.ckpt[l * M + m]),
                                       "checkpoint", err));
                rp_proto_checkpoint_read(e, l, m, t);
                RP_TRY(layer_forward(x, job, l, x->acts[0], NULL, x->saved[0], t, err));
            }
            RP_TRY(layer_backward(x, job, l, l > 0 ? x->acts[0] : NULL, x->saved[0], t, err));
        }
    } else {
        /* the kept layers are the stage's top ones (plan.h): the others are
         * recomputed from the stage's checkpoint, up to the first kept */
        int top = job->last;
        while (top >= job->first && rp_plan_is_kept(&e->plan, top))
            top--;
        if (top >= job->first) {
            const float *in0 =
                job->first > 0 ? arena(e, e->arena.ckpt[job->first * M + m]) : NULL;
            RP_TRY(recompute(x, job, in0, top, 0, t, err));
            if (job->first > 0)
                rp_proto_checkpoint_read(e, job->first, m, t);
        }
        for (int l = job->last; l >= job->first; l--) {
            if (l > top)
                RP_TRY(kept_backward(x, job, l, l - job->first, t, m, err));
            else
                RP_TRY(layer_backward(x, job, l, x->acts[l - job->first],
                                      x->saved[l - job->first], t, err));
        }
    }
    RP_TRY(publish_bwd(x, job, t, m, err));
    return RP_OK;
}
