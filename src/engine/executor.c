/* The executor: runs this rank's jobs in order on its device, through the
 * device interface (src/device/backend.h). Everything a job computes on
 * lives in device memory; weights, activations and gradients move between
 * the host store and the device through the transfer engine, by priority
 * class. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "engine/engine_impl.h"
#include "engine/executor_impl.h"
#include "engine/lora_run.h"
#include "engine/protocol.h"
#include "engine/stage_weights.h"
#include "engine/update_gate.h"
#include "model/layers.h"

/* Device allocations keep the first failure's message (bytes asked and,
 * from the CUDA back end, bytes free). */
static void *dalloc(executor *x, size_t bytes, rp_error *err)
{
    void *q = NULL;
    rp_error mine = {0};
    if (rp_device_alloc(x->dev, bytes, &q, &mine) != RP_OK && err->code == RP_OK)
        *err = mine;
    if (q)
        x->device_bytes += bytes;
    return q;
}

static float *falloc(executor *x, size_t n, rp_error *err)
{
    return dalloc(x, (n ? n : 1) * sizeof(float), err);
}

static rp_status device_copy(void *ctx, void *dst, const void *src, size_t bytes,
                             rp_xfer_class cls, rp_error *err)
{
    (void)cls;
    return rp_device_copy(ctx, dst, src, bytes, err);
}

static void executor_free(executor *x)
{
    rp_xfer_destroy(&x->xfer);
    if (!x->dev)
        return;
    for (int b = 0; b < 2; b++) {
        rp_device_free(x->dev, x->buf[b].w);
        free(x->buf[b].off);
        free(x->buf[b].boff);
        free(x->buf[b].req);
        free(x->buf[b].rows);
        if (x->buf[b].gather_pinned)
            rp_device_host_unregister(x->dev, x->buf[b].gather);
        free(x->buf[b].gather);
    }
    rp_device_free(x->dev, x->g);
    rp_device_free(x->dev, x->g16);
    for (int i = 0; x->acts && i <= x->e->num_layers; i++)
        rp_device_free(x->dev, x->acts[i]);
    free(x->acts);
    for (int i = 0; x->saved && i < x->nsaved; i++)
        rp_device_free(x->dev, x->saved[i]);
    free(x->saved);
    rp_device_free(x->dev, x->d);
    rp_device_free(x->dev, x->ws);
    rp_device_free(x->dev, x->in);
    rp_device_free(x->dev, x->tgt);
    rp_device_free(x->dev, x->mask);
    rp_device_free(x->dev, x->seg);
    free(x->hseg);
    free(x->hin);
    free(x->htgt);
    free(x->hmask);
    free(x->greq);
    if (x->aux_grad != x->haux_grad)
        rp_device_free(x->dev, x->aux_grad);
    free(x->haux_grad);
    rp_device_free(x->dev, x->rstats);
    if (x->segment_pinned)
        rp_device_host_unregister(x->dev, x->e->pins[x->e->npins_run].base);
    x->dev = NULL; /* the engine's, for the whole run */
}

static void xfer_trace(void *ctx, rp_xfer_class cls, const char *tag, size_t offset, size_t bytes,
                       uint64_t t0_ns, uint64_t t1_ns)
{
    rp_engine *e = ctx;
    char name[64];
    (void)offset;
    if (bytes == 0 && tag) /* a wait (for a link peer's urgent transfer) */
        snprintf(name, sizeof name, "%s", tag);
    else
        snprintf(name, sizeof name, "%s %zu B", tag ? tag : "", bytes);
    rp_trace_span(e->trace, (rp_trace_track)(RP_TRACK_XFER_INPUT + (int)cls), name, t0_ns, t1_ns);
}

static rp_status executor_init(executor *x, rp_engine *e, rp_error *err)
{
    memset(x, 0, sizeof *x);
    x->e = e;
    /* Device memory sized from the plan: the largest stage, allocated once. */
    size_t wmax = 0, gmax = 1;
    int nst_max = 1;
    x->nsaved = 1;
    for (int j = 0; j < e->jobs_per_it; j++) {
        rp_job job = rp_schedule_job(&e->plan, j);
        size_t n = rp_stage_floats(e, &job, NULL), nw = n + rp_stage_base_floats(e, &job, NULL);
        int layers = job.last - job.first + 1;
        wmax = nw > wmax ? nw : wmax;
        if (job.kind != RP_JOB_FWD && n > gmax) /* gradients: the tied head's inside */
            gmax = n;
        nst_max = layers > nst_max ? layers : nst_max;
        /* a tail runs its forward whole; a backward stage too unless every
         * layer's input was saved (layer-grain recompute) */
        int keeps = job.kind == RP_JOB_TAIL || (job.kind == RP_JOB_BWD && !e->o->recompute_layer);
        if (keeps && layers > x->nsaved)
            x->nsaved = layers;
    }
    const rp_model_config *cfg = &e->p->cfg;
    x->dev = e->dev;
    int ok = 1;
    const size_t wb = rp_dtype_size(e->p->compute_dtype); /* bytes of a weight element */
    size_t gb = wb; /* bytes of a gathered element: a base read in place may be wider */
    if (e->base_in_place && rp_dtype_size(rp_frozen_base_dtype(e->base)) > gb)
        gb = rp_dtype_size(rp_frozen_base_dtype(e->base));
    size_t gather_bytes = ((size_t)(e->emb_cap * e->hidden) * gb + 4095) & ~(size_t)4095;
    for (int b = 0; b < 2; b++) {
        x->buf[b].w = dalloc(x, (wmax ? wmax : 1) * wb, err);
        x->buf[b].off = calloc((size_t)e->num_layers + 1, sizeof(size_t));
        x->buf[b].boff = calloc((size_t)e->num_layers + 1, sizeof(size_t));
        x->buf[b].req = calloc(rp_stage_max_reqs(e), sizeof(rp_xfer_req));
        x->buf[b].rows =
            malloc((size_t)(e->micro_per_pipeline * e->tokens_per_micro) * sizeof(int32_t));
        if (posix_memalign((void **)&x->buf[b].gather, 4096, gather_bytes) != 0)
            x->buf[b].gather = NULL;
        ok &= x->buf[b].w && x->buf[b].off && x->buf[b].boff && x->buf[b].req && x->buf[b].rows &&
              x->buf[b].gather;
    }
    x->g = falloc(x, gmax, err);
    if (e->o->grad_dtype == RP_BF16 && x->g)
        x->g16 = dalloc(x, gmax * 2, err);
    x->acts = calloc((size_t)e->num_layers + 1, sizeof(float *));
    x->d = falloc(x, e->act_floats, err);
    const rp_kernel_ops *kops = rp_device_kernel_ops(e->device);
    const rp_dtype wdt = e->p->compute_dtype;
    x->ws = falloc(x, rp_model_workspace_floats(kops, wdt, cfg, e->samples_per_micro, e->seq_len),
                   err);
    x->saved = calloc((size_t)x->nsaved, sizeof(float *));
    x->in = dalloc(x, (size_t)e->tokens_per_micro * sizeof(int32_t), err);
    x->tgt = dalloc(x, (size_t)e->tokens_per_micro * sizeof(int32_t), err);
    x->mask = dalloc(x, (size_t)e->tokens_per_micro, err);
    x->hin = malloc((size_t)e->tokens_per_micro * sizeof(int32_t));
    x->htgt = malloc((size_t)e->tokens_per_micro * sizeof(int32_t));
    x->hmask = malloc((size_t)e->tokens_per_micro);
    if (rp_dataset_has_documents(e->ds)) {
        x->seg = dalloc(x, (size_t)e->tokens_per_micro * sizeof(int32_t), err);
        x->hseg = malloc((size_t)e->tokens_per_micro * sizeof(int32_t));
        ok &= x->seg && x->hseg;
    }
    x->greq = calloc((size_t)e->num_layers + 1, sizeof(rp_xfer_req));
    if (rp_model_has_moe(cfg)) { /* with or without the loss: the memory model counts them */
        const size_t E = (size_t)cfg->moe.num_experts;
        x->haux_grad = malloc(E * sizeof(float));
        x->aux_grad = kops->host_addressable ? x->haux_grad : falloc(x, E, err);
        x->rstats = kops->host_addressable ? NULL : falloc(x, 2 * E, err);
        ok &= x->haux_grad && x->aux_grad && (kops->host_addressable || x->rstats);
    }
    ok &= x->g && (x->g16 || e->o->grad_dtype != RP_BF16) && x->acts && x->d && x->ws && x->saved && x->in &&
          x->tgt && x->mask && x->hin && x->htgt && x->hmask && x->greq;
    for (int i = 0; ok && i <= nst_max && i <= e->num_layers; i++)
        ok &= (x->acts[i] = falloc(x, e->act_floats, err)) != NULL;
    size_t saved_floats = rp_block_saved_floats(kops, wdt, cfg, e->samples_per_micro, e->seq_len);
    for (int i = 0; ok && i < x->nsaved; i++)
        ok &= (x->saved[i] = falloc(x, saved_floats, err)) != NULL;
    if (!ok) {
        executor_free(x);
        if (err->code == RP_OK)
            rp_error_set(err, RP_ERR_NOMEM, "allocating executor buffers");
        return rp_error_prefix(err, "rank %d: executor buffers for the plan (%zu MiB of weights "
                               "per stage, two stages) on %s", e->nd.world_rank, wmax * wb >> 20,
                               rp_device_kind_name(e->device));
    }
    for (int b = 0; b < 2; b++) { /* the gathered embedding rows */
        rp_status ps = rp_device_host_register(x->dev, x->buf[b].gather, gather_bytes, err);
        if (ps != RP_OK) {
            executor_free(x);
            return ps;
        }
        x->buf[b].gather_pinned = 1;
    }
    /* pin the segment's activations (the run's pins are the engine's) */
    if (e->npins > e->npins_run && e->pins[e->npins_run].bytes > 0) {
        rp_status ps = rp_device_host_register(x->dev, e->pins[e->npins_run].base,
                                               e->pins[e->npins_run].bytes, err);
        if (ps != RP_OK) {
            executor_free(x);
            return ps;
        }
        x->segment_pinned = 1;
    }
    rp_xfer_params xp = {0};
    xp.ops.copy = device_copy;
    xp.ops.ctx = x->dev;
    xp.trace = e->trace ? xfer_trace : NULL;
    xp.trace_ctx = e;
    if (e->link_members >= 2) { /* peers on this rank's PCIe link */
        xp.link = &e->link_boards[e->link_group];
        xp.link_member = e->link_member;
        xp.link_members = e->link_members;
    }
    xp.chunk_bytes = (size_t)(e->o->chunk_mib * 1048576.0);
    if (xp.chunk_bytes < 4096)
        xp.chunk_bytes = 4096;
    rp_status s = rp_xfer_create(&xp, &x->xfer, err);
    if (s != RP_OK)
        executor_free(x);
    return s;
}

/* ---- layer calls on the device buffers --------------------------------- */

/* The tied LM head's gradient [vocab, hidden]: in the gradient buffer past
 * the stage's layers, where the weights buffer holds the tied matrix. */
static float *tied_grad(executor *x, const rp_job *job)
{
    size_t vh = (size_t)(x->e->p->cfg.vocab_size * x->e->hidden);
    return x->g + (rp_stage_floats(x->e, job, NULL) - vh);
}

/* The running job's stage buffer as a weights view (stage_weights.h). */
static rp_stage_weights stage_view(const executor *x, const rp_job *job)
{
    const rp_engine *e = x->e;
    const stage_buf *b = &x->buf[x->cur];
    rp_stage_weights w = {.first = job->first, .buffer = b->w, .offsets = b->off,
                          .base_offsets = b->boff};
    if (e->lora && e->base_in_place) /* the embedding's rows gathered from where it lies */
        w.embedding = b->gather;
    if (rp_stage_needs_tied(e, job))
        w.tied_matrix =
            (const char *)b->w + b->off[e->num_layers] * rp_dtype_size(e->p->compute_dtype);
    return w;
}

/* Layer l's trainable weights in the stage buffer (compute dtype). */
static const void *W(executor *x, const rp_job *job, int l)
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
    rp_lora_call_of(e, l, t, (e->micro_base + x->micro) * e->samples_per_micro, W(x, job, l), c);
    return c;
}

/* Block l's call (l >= 1): its index, LoRA's adapters, and a mixture of
 * experts' router statistics (a forward of a forward job or the tail: a
 * backward stage's recompute writes none) or the load-balancing loss's
 * gradient (a backward, rp_exec_aux_grad made it). */
static const rp_block_call *block_call(executor *x, const rp_job *job, int l, int64_t t,
                                       int forward, rp_lora_call *lc, rp_block_call *c)
{
    rp_engine *e = x->e;
    memset(c, 0, sizeof *c);
    c->block = (int32_t)(l - 1);
    c->lora = lora_call(x, job, l, t, lc);
    float *slot = rp_router_stats_slot(e, t, x->micro, l);
    if (forward && slot && job->kind != RP_JOB_BWD)
        c->router_stats = x->rstats ? x->rstats : slot;
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
    rp_router_aux_of(e, t, m, aux, x->haux_grad);
    if (x->aux_grad == x->haux_grad)
        return RP_OK;
    return rp_exec_move(x, x->aux_grad, x->haux_grad, sizeof(float) * (size_t)e->raux.experts,
                        RP_XFER_INPUT, "aux-grad", err);
}

/* The weights a call of layer l reads (stage_weights.h). */
static const void *block_weights(executor *x, const rp_job *job, int l)
{
    rp_stage_weights w = stage_view(x, job);
    return rp_stage_weights_layer(x->e, &w, l);
}

static float *G(executor *x, const rp_job *job, int l)
{
    return x->g + x->buf[x->cur].off[l - job->first];
}

/* Layer times for re-planning: every call in a segment's iterations after
 * its first (the first pays page faults and thread start-up). */
static void measure(executor *x, int l, int bwd, int64_t t, double t0)
{
    rp_engine *e = x->e;
    if (t > e->it_first) {
        e->by_executor.meas_ms[bwd * e->num_layers + l] += (rp_now() - t0) * 1e3;
        e->by_executor.meas_n[bwd * e->num_layers + l] += 1;
    }
}

/* The forward of layer l from `in` into `out` (NULL: only what its
 * backward needs, kept in `saved`; the embedding keeps nothing). */
static rp_status layer_forward(executor *x, const rp_job *job, int l, const float *in, float *out,
                               float *saved, int64_t t, rp_error *err)
{
    rp_engine *e = x->e;
    double t0 = rp_now();
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    rp_status s;
    if (l == 0) {
        if (!out)
            return RP_OK;
        rp_model_config rows = e->p->cfg; /* the table holds the uploaded rows only */
        rows.vocab_size = x->buf[x->cur].nrows;
        s = rp_embed_forward(&k, &rows, block_weights(x, job, 0), rp_stage_weights_dtype(e, 0),
                             x->in, e->tokens_per_micro, out, err);
    } else {
        rp_lora_call lc;
        rp_block_call c;
        s = rp_block_forward(&k, &e->p->cfg, block_weights(x, job, l),
                             rp_stage_weights_dtype(e, l), in, out, e->samples_per_micro,
                             e->seq_len, x->seg, saved, x->ws, block_call(x, job, l, t, 1, &lc, &c),
                             err);
        if (s == RP_OK && c.router_stats && c.router_stats == x->rstats)
            s = rp_exec_move(x, rp_router_stats_slot(e, t, x->micro, l), x->rstats,
                             sizeof(float) * e->raux.floats / (size_t)e->raux.nmoe,
                             RP_XFER_SAVE, "router-stats", err);
    }
    if (s == RP_OK)
        s = rp_device_sync(x->dev, err);
    measure(x, l, 0, t, t0);
    return s;
}

/* The backward of layer l from what its forward on `in` kept in `saved`. */
static rp_status layer_backward(executor *x, const rp_job *job, int l, const float *in,
                                float *saved, int64_t t, rp_error *err)
{
    rp_engine *e = x->e;
    if (l == 0 && e->lora) /* a frozen embedding: nothing to compute */
        return RP_OK;
    double t0 = rp_now();
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    rp_status s;
    if (l == 0) {
        rp_model_config rows = e->p->cfg;
        rows.vocab_size = x->buf[x->cur].nrows;
        s = rp_embed_backward(&k, &rows, x->in, e->tokens_per_micro, x->d, G(x, job, 0), err);
    } else {
        rp_lora_call lc;
        rp_block_call c;
        s = rp_block_backward(&k, &e->p->cfg, block_weights(x, job, l),
                              rp_stage_weights_dtype(e, l), in, saved, x->d, x->d, G(x, job, l),
                              e->samples_per_micro, e->seq_len, x->seg, x->ws,
                              block_call(x, job, l, t, 0, &lc, &c), err);
    }
    if (s == RP_OK)
        s = rp_device_sync(x->dev, err);
    measure(x, l, 1, t, t0);
    return s;
}

static float *arena(const rp_engine *e, size_t off)
{
    return e->act + off;
}

/* ---- the three kinds of job, one microbatch ------------------------------ */

static rp_status run_fwd(executor *x, const rp_job *job, int64_t t, int m, rp_error *err)
{
    rp_engine *e = x->e;
    int M = (int)e->microbatches, s = job->stage, nb = 0;
    size_t bytes = e->act_floats * sizeof(float);
    const float *cur = NULL;
    if (job->first > 0) {
        RP_TRY(rp_proto_wait_fwd_out(e, s - 1, m, t, x->name, err));
        RP_TRY(rp_exec_move(x, x->acts[0], arena(e, e->arena.fwd_out[(s - 1) * M + m]), bytes,
                    RP_XFER_INPUT, "input", err));
        rp_proto_fwd_out_read(e, s - 1, m, t);
        cur = x->acts[0];
        nb = 1;
    }
    for (int l = job->first; l <= job->last; l++) {
        float *out = x->acts[nb];
        nb ^= 1;
        if (l > 0 && e->arena.is_ckpt[l]) { /* the activation checkpoint */
            RP_TRY(rp_proto_wait_checkpoint_free(e, l, m, t, x->name, err));
            RP_TRY(rp_exec_move(x, arena(e, e->arena.ckpt[l * M + m]), cur, bytes, RP_XFER_SAVE,
                        "checkpoint", err));
        }
        RP_TRY(layer_forward(x, job, l, cur, out, x->saved[0], t, err));
        cur = out;
    }
    RP_TRY(rp_proto_wait_fwd_out_free(e, s, m, t, x->name, err));
    RP_TRY(rp_exec_move(x, arena(e, e->arena.fwd_out[s * M + m]), cur, bytes, RP_XFER_SAVE, "output",
                err));
    rp_proto_publish_fwd_out(e, s, m, t);
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
    rp_engine *e = x->e;
    const float *cur = NULL;
    if (host_in0) {
        RP_TRY(rp_exec_move(x, x->acts[0], host_in0, e->act_floats * sizeof(float), RP_XFER_INPUT, "input",
                    err));
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
    if (job->first > 0)
        RP_TRY(rp_exec_move(x, arena(e, e->arena.bwd_out[i * (int)e->microbatches + m]), x->d,
                    e->act_floats * sizeof(float), RP_XFER_SAVE, "input-grad", err));
    rp_proto_publish_bwd_out(e, i, m, t);
    return RP_OK;
}

static rp_status run_tail(executor *x, const rp_job *job, int64_t t, int m, float scale,
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
        RP_TRY(
            rp_exec_move(x, x->acts[0], in0, e->act_floats * sizeof(float), RP_XFER_INPUT, "input", err));
    if (job->first > 0) /* the input was copied to the device */
        rp_proto_fwd_out_read(e, e->plan.nfwd - 1, m, t);
    /* the loss slot of this iteration must have been read by the logger */
    RP_TRY(rp_proto_wait_losses_free(e, t, x->name, err));
    RP_TRY(aux_grad(x, t, m, e->raux.coef > 0 ? &rp_router_aux_values(e, t)[m] : NULL, err));
    rp_stage_weights w = stage_view(x, job);
    rp_head_weights hw;
    rp_stage_weights_head(e, &w, head, &hw);
    float *norm_g = NULL, *lm_g = NULL; /* a frozen head has none */
    if (hw.trainable) {
        norm_g = G(x, job, head) + hw.norm_at;
        lm_g = hw.lm_tied ? tied_grad(x, job) : G(x, job, head) + hw.lm_at;
    }
    double *loss = rp_engine_loss(e, t);
    double th = rp_now();
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    RP_TRY(rp_head_forward_backward(&k, &e->p->cfg, hw.norm, hw.lm, rp_stage_weights_dtype(e, head),
                                    x->acts[head - job->first], x->tgt, x->mask,
                                    e->tokens_per_micro, scale, x->d, norm_g, lm_g, 0, x->ws,
                                    &loss[m], err));
    RP_TRY(rp_device_sync(x->dev, err));
    measure(x, head, 1, t, th); /* forward and backward in one call: counted as backward */
    for (int l = head - 1; l >= job->first; l--)
        RP_TRY(layer_backward(x, job, l, x->acts[l - job->first], x->saved[l - job->first], t,
                              err));
    RP_TRY(publish_bwd(x, job, t, m, err));
    return RP_OK;
}

static rp_status run_bwd(executor *x, const rp_job *job, int64_t t, int m, rp_error *err)
{
    rp_engine *e = x->e;
    int M = (int)e->microbatches, i = job->stage;
    RP_TRY(rp_proto_wait_bwd_out(e, i - 1, m, t, x->name, err));
    RP_TRY(rp_exec_move(x, x->d, arena(e, e->arena.bwd_out[(i - 1) * M + m]), e->act_floats * sizeof(float),
                RP_XFER_INPUT, "output-grad", err));
    RP_TRY(aux_grad(x, t, m, NULL, err));
    rp_proto_bwd_out_read(e, i - 1, m, t);
    if (e->o->recompute_layer) {
        /* every layer's input was saved: no stage-wide recompute, one layer's
         * activations on the device at a time */
        for (int l = job->last; l >= job->first; l--) {
            if (l > 0) {
                RP_TRY(rp_exec_move(x, x->acts[0], arena(e, e->arena.ckpt[l * M + m]),
                            e->act_floats * sizeof(float), RP_XFER_INPUT, "checkpoint", err));
                rp_proto_checkpoint_read(e, l, m, t);
                RP_TRY(layer_forward(x, job, l, x->acts[0], NULL, x->saved[0], t, err));
            }
            RP_TRY(layer_backward(x, job, l, l > 0 ? x->acts[0] : NULL, x->saved[0], t, err));
        }
    } else {
        const float *in0 = job->first > 0 ? arena(e, e->arena.ckpt[job->first * M + m]) : NULL;
        RP_TRY(recompute(x, job, in0, job->last, 0, t, err));
        if (job->first > 0)
            rp_proto_checkpoint_read(e, job->first, m, t);
        for (int l = job->last; l >= job->first; l--)
            RP_TRY(layer_backward(x, job, l, x->acts[l - job->first], x->saved[l - job->first], t,
                                  err));
    }
    RP_TRY(publish_bwd(x, job, t, m, err));
    return RP_OK;
}

/* With --grad-dtype bf16, point request r (elements [at, at + n) of the
 * stage's gradients, fp32 on the device) at their bf16 rounding instead:
 * half the bytes travel, and finish_grads widens them on the host. */
static rp_status round_request(executor *x, rp_xfer_req *r, size_t at, size_t n, rp_error *err)
{
    if (!x->g16)
        return RP_OK;
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    uint16_t *dst = (uint16_t *)x->g16 + at;
    RP_TRY(k.ops->convert(k.state, x->g + at, RP_F32, dst, RP_BF16, (int64_t)n, err));
    r->src = dst;
    r->bytes = n * 2;
    return RP_OK;
}

/* Download the job's gradients into pipeline g's host buffers (a tail with
 * a tied LM head: also its part of the embedding's gradient) and say so.
 * Summing over the pipelines, the tied part and the norms are the
 * optimizer's (optimizer.c). */
static rp_status finish_grads(executor *x, const rp_job *job, int64_t t, int g, rp_error *err)
{
    rp_engine *e = x->e;
    int n = 0;
    RP_TRY(rp_gate_wait_grad_buffers(e, job->first, job->last, rp_stage_needs_tied(e, job), t,
                                     x->name, err));
    for (int l = job->first; l <= job->last; l++) {
        if (e->lora && rp_layer_numel(e, l) == 0) { /* frozen: nothing travels */
            if (l == 0)
                e->emb_n[g] = 0;
            continue;
        }
        rp_xfer_req *r = &x->greq[n++];
        memset(r, 0, sizeof *r);
        r->src = G(x, job, l);
        r->cls = RP_XFER_GRAD;
        if (l == 0) { /* the rows the tokens touched, and which they are */
            const stage_buf *b = &x->buf[x->cur];
            r->dst = rp_engine_emb_rows(e, g);
            r->bytes = (size_t)(b->nrows * e->hidden) * sizeof(float);
            r->tag = "embedding grad rows";
            memcpy(rp_engine_emb_ids(e, g), b->rows, (size_t)b->nrows * sizeof(int32_t));
            e->emb_n[g] = b->nrows;
        } else {
            r->dst = rp_engine_grad(e, g, l);
            r->bytes = rp_layer_numel(e, l) * sizeof(float);
            r->tag = "grads";
        }
        RP_TRY(round_request(x, r, (size_t)((const float *)r->src - x->g), r->bytes / 4, err));
    }
    if (rp_stage_needs_tied(e, job)) {
        rp_xfer_req *r = &x->greq[n++];
        memset(r, 0, sizeof *r);
        r->dst = rp_engine_tied_grad(e, g);
        r->src = tied_grad(x, job);
        r->bytes = (size_t)(e->p->cfg.vocab_size * e->hidden) * sizeof(float);
        r->cls = RP_XFER_GRAD;
        r->tag = "tied-grads";
        RP_TRY(round_request(x, r, (size_t)((const float *)r->src - x->g), r->bytes / 4, err));
    }
    if (x->g16) /* the roundings are queued on the compute stream */
        RP_TRY(rp_device_sync(x->dev, err));
    for (int i = 0; i < n; i++)
        RP_TRY(rp_xfer_submit(x->xfer, &x->greq[i], err));
    for (int i = 0; i < n; i++) {
        RP_TRY(rp_xfer_wait(x->xfer, &x->greq[i], err));
        if (x->g16)
            rp_bf16_widen_in_place(x->greq[i].dst, x->greq[i].bytes / 2);
    }
    for (int l = job->last; l >= job->first; l--)
        rp_proto_publish_grad(e, l, g, t);
    return RP_OK;
}

static const char *kind_letter(rp_job_kind k)
{
    return k == RP_JOB_FWD ? "F" : k == RP_JOB_TAIL ? "T" : "B";
}

static rp_status run_job(executor *x, int64_t t, int g, int j, rp_error *err)
{
    rp_engine *e = x->e;
    rp_job job = rp_schedule_job(&e->plan, j);
    if (e->pipelines > 1)
        snprintf(x->name, sizeof x->name, "%d (%s%d, layers %d-%d) of pipeline %d, iteration %lld",
                 j, kind_letter(job.kind), job.stage, job.first, job.last, g, (long long)t);
    else
        snprintf(x->name, sizeof x->name, "%d (%s%d, layers %d-%d) of iteration %lld", j,
                 kind_letter(job.kind), job.stage, job.first, job.last, (long long)t);
    RP_TRY(rp_stage_acquire(x, &job, t, g, j, err));

    int64_t counted = job.kind == RP_JOB_FWD ? 0 : rp_engine_counted(e, t);
    float scale = counted > 0 ? (float)(1.0 / (double)counted) : 0.0f;
    if (job.kind != RP_JOB_FWD) {
        RP_TRY(rp_device_memset0(x->dev, x->g,
                                 x->buf[x->cur].off[job.last - job.first] * sizeof(float) +
                                     rp_layer_numel(e, job.last) * sizeof(float), err));
        if (rp_stage_needs_tied(e, &job))
            RP_TRY(rp_device_memset0(
                x->dev, tied_grad(x, &job), (size_t)(e->p->cfg.vocab_size * e->hidden) * sizeof(float),
                err));
    }
    for (int m = g * (int)e->micro_per_pipeline; m < (g + 1) * (int)e->micro_per_pipeline; m++) {
        if (rp_engine_aborted(e))
            return rp_error_echo(err, RP_ERR_INTERNAL, "rank %d, step %lld: stopped because "
                                 "rank %d failed", e->nd.world_rank, (long long)t,
                                 e->nd.world_of[atomic_load(e->abort_flag) - 1]);
        uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
        if (x->seg && job.last > 0 && job.first < e->num_layers - 1) { /* a block reads them */
            rp_engine_segments(e, t, m, x->hseg);
            RP_TRY(rp_exec_move(x, x->seg, x->hseg, (size_t)e->tokens_per_micro * sizeof(int32_t),
                                RP_XFER_INPUT, "segments", err));
        }
        if (job.first == 0 || job.kind == RP_JOB_TAIL) {
            rp_engine_tokens(e, t, m, x->hin, x->htgt, x->hmask);
            if (job.first == 0)
                rp_stage_renumber(&x->buf[x->cur], x->hin, e->tokens_per_micro);
            RP_TRY(rp_exec_move(x, x->in, x->hin, (size_t)e->tokens_per_micro * sizeof(int32_t),
                        RP_XFER_INPUT, "tokens", err));
            if (job.kind == RP_JOB_TAIL) {
                RP_TRY(rp_exec_move(x, x->tgt, x->htgt, (size_t)e->tokens_per_micro * sizeof(int32_t),
                            RP_XFER_INPUT, "targets", err));
                RP_TRY(rp_exec_move(x, x->mask, x->hmask, (size_t)e->tokens_per_micro, RP_XFER_INPUT,
                            "mask", err));
            }
        }
        x->micro = m;
        switch (job.kind) {
        case RP_JOB_FWD: RP_TRY(run_fwd(x, &job, t, m, err)); break;
        case RP_JOB_TAIL: RP_TRY(run_tail(x, &job, t, m, scale, err)); break;
        case RP_JOB_BWD: RP_TRY(run_bwd(x, &job, t, m, err)); break;
        }
        if (e->trace) {
            char span[48];
            snprintf(span, sizeof span, "%s%d m%d (it %lld)", kind_letter(job.kind), job.stage,
                     m, (long long)t);
            rp_trace_span(e->trace, RP_TRACK_COMPUTE, span, t0, rp_trace_now_ns());
        }
    }
    if (job.kind != RP_JOB_FWD)
        RP_TRY(finish_grads(x, &job, t, g, err));
    return RP_OK;
}

rp_status rp_engine_run_executor(rp_engine *e)
{
    executor x;
    rp_error err = {0};
    rp_status s = executor_init(&x, e, &err);
    if (s != RP_OK)
        return rp_engine_fail(e, s, &err);
    if (e->nd.world_rank == 0 && e->it_first == 1) {
        char lim[64] = "no limit";
        if (e->memory_limit > 0)
            snprintf(lim, sizeof lim, "limit %.1f MiB", e->memory_limit / 1048576.0);
        size_t pinned = 0, acts = e->pins[e->npins_run].bytes;
        for (int i = 0; i < e->npins; i++)
            pinned += e->pins[i].bytes;
        rp_log(e->lg, RP_LOG_INFO, "executor buffers: %.1f MiB of device memory per executor "
               "(%zu bytes; %s)", x.device_bytes / 1048576.0, x.device_bytes, lim);
        char pin[96] = "";
        if (e->device == RP_DEVICE_CUDA)
            snprintf(pin, sizeof pin, "; %.1f MiB of it pinned for copies (%zu bytes)",
                     pinned / 1048576.0, pinned);
        rp_log(e->lg, RP_LOG_INFO, "host store: %.1f MiB of model state and gradients, %.1f MiB "
               "of activations (%zu, %zu bytes)%s", e->param_store_bytes / 1048576.0,
               acts / 1048576.0, e->param_store_bytes, acts, pin);
    }
    for (int64_t t = e->it_first; s == RP_OK && t <= e->it_last; t++)
        for (int g = 0; s == RP_OK && g < e->pipelines; g++)
            for (int j = 0; s == RP_OK && j < e->jobs_per_it; j++)
                if (rp_engine_executor(e, t, j, g) == e->rank) {
                    s = rp_proto_stop_before(e, t) ? RP_STOP : run_job(&x, t, g, j, &err);
                    if (s != RP_OK && s != RP_STOP)
                        rp_engine_fail(e, s, &err);
                }
    rp_xfer_drain(x.xfer);
    executor_free(&x);
    return s == RP_STOP ? RP_OK : s;
}
