/* The executor's job runner: sets up the rank's device buffers for the
 * plan (the largest stage, allocated once) and its transfer engine, then
 * runs this rank's jobs in order on its device, through the device
 * interface (src/device/backend.h): for each job its weights
 * (stage_buffers.c), each microbatch's tokens and its stage's forward or
 * backward (stage_compute.c), and the gradients' download at the end
 * (gradient_download.c). Everything a job computes on lives in device
 * memory; weights, activations and gradients move between the host store
 * and the device through the transfer engine, by priority class. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/unproven.h"
#include "device/backend.h"
#include "engine/engine_impl.h"
#include "engine/executor_impl.h"
#include "engine/host_memory.h"
#include "engine/memory_model.h"
#include "engine/padding.h"
#include "engine/protocol.h"
#include "engine/stage_weights.h"

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

/* Test hook: RP_FAULT_COPY=CLASS:N makes the N-th chunk (from 1) of class
 * CLASS (rp_xfer_class_name: input, weights, prefetch, save, grad) this
 * process copies fail, as a failing copy would: for testing that the run
 * then stops with the message and nothing hangs. Read once. */
static struct {
    pthread_once_t once;
    int cls; /* -1: no fault */
    long long n;
    _Atomic long long count;
} copy_fault = {.once = PTHREAD_ONCE_INIT, .cls = -1};

static void copy_fault_read(void)
{
    const char *f = getenv("RP_FAULT_COPY");
    char name[16];
    long long n;
    if (!f || sscanf(f, "%15[a-z]:%lld", name, &n) != 2 || n < 1)
        return;
    for (int c = 0; c < RP_XFER_NCLASS; c++)
        if (strcmp(name, rp_xfer_class_name((rp_xfer_class)c)) == 0) {
            copy_fault.cls = c;
            copy_fault.n = n;
        }
}

static rp_status copy_fault_check(rp_xfer_class cls, rp_error *err)
{
    pthread_once(&copy_fault.once, copy_fault_read);
    if ((int)cls != copy_fault.cls || atomic_fetch_add(&copy_fault.count, 1) + 1 != copy_fault.n)
        return RP_OK;
    return rp_error_set(err, RP_ERR_IO, "copying chunk %lld of the %s transfers: an injected "
                        "fault (RP_FAULT_COPY)", copy_fault.n, rp_xfer_class_name(cls));
}

static rp_status device_copy(void *ctx, void *dst, const void *src, size_t bytes,
                             rp_xfer_class cls, rp_error *err)
{
    RP_TRY(copy_fault_check(cls, err));
    return rp_device_copy(ctx, dst, src, bytes, err);
}

/* The transfer engine's tickets are the device's: one event each. */
_Static_assert(RP_XFER_TICKETS <= RP_DEVICE_COPY_TICKETS, "a device event per transfer ticket");
_Static_assert((int)RP_XFER_UP == (int)RP_COPY_UP && (int)RP_XFER_DOWN == (int)RP_COPY_DOWN,
               "the engine's directions are the device's");

static rp_status device_issue(void *ctx, int ticket, void *dst, const void *src, size_t bytes,
                              rp_xfer_class cls, rp_error *err)
{
    RP_TRY(copy_fault_check(cls, err));
    return rp_device_copy_issue(ctx, ticket, dst, src, bytes,
                                (rp_copy_direction)rp_xfer_class_direction(cls), err);
}

static rp_status device_complete(void *ctx, int ticket, rp_error *err)
{
    return rp_device_copy_complete(ctx, ticket, err);
}

/* The transfer engine's copies: asynchronous where the device offers them
 * and, on CUDA, the copies path is on (core/unproven.h: proven on the H200
 * of 2026-11-30; a CPU device offers them only under RP_TEST_EVENT_DEVICE,
 * to check the engine's ordering of them), else synchronous, a chunk at a
 * time. */
static rp_xfer_ops transfer_ops(const rp_engine *e, rp_device *dev)
{
    if (rp_device_copies_asynchronous(dev) &&
        (e->device != RP_DEVICE_CUDA || rp_unproven_in(e->unproven, RP_UNPROVEN_COPIES)))
        return (rp_xfer_ops){.ctx = dev, .issue = device_issue, .complete = device_complete};
    return (rp_xfer_ops){.copy = device_copy, .ctx = dev};
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
        free(x->buf[b].piece_of);
        free(x->buf[b].pending);
        free(x->buf[b].ready);
        free((void *)x->buf[b].left);
        free(x->buf[b].rows);
        if (x->buf[b].gather_pinned)
            rp_device_host_unregister(x->dev, x->buf[b].gather);
        free(x->buf[b].gather);
    }
    rp_device_free(x->dev, x->scratch);
    rp_device_free(x->dev, x->base_scratch);
    rp_device_free(x->dev, x->kept_pool);
    free(x->kept_at);
    for (int i = 0; x->acts && i <= x->e->num_layers; i++)
        rp_device_free(x->dev, x->acts[i]);
    free(x->acts);
    for (int i = 0; x->saved && i < x->nsaved; i++)
        rp_device_free(x->dev, x->saved[i]);
    free(x->saved);
    rp_device_free(x->dev, x->act_grad);
    for (int s = 0; s < RP_SAVE_SLOTS; s++)
        rp_device_free(x->dev, x->save_slot[s]);
    rp_device_free(x->dev, x->tokens);
    rp_device_free(x->dev, x->targets);
    rp_device_free(x->dev, x->mask);
    rp_device_free(x->dev, x->segments);
    free(x->host_segments);
    free(x->host_tokens);
    free(x->host_targets);
    free(x->host_mask);
    free(x->grad_requests);
    free(x->grad_layer);
    free((void *)x->grad_left);
    if (x->aux_grad != x->host_aux_grad)
        rp_device_free(x->dev, x->aux_grad);
    free(x->host_aux_grad);
    rp_device_free(x->dev, x->router_stats);
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

/* Bytes of the executor's scratch job `job` takes: its own workspace, the
 * largest of its layers' (memory_model.h's rp_layer_workspace_floats) and
 * at least the activations' narrowing buffer (rp_activation_narrow_floats), and
 * its gradients (fp32, and their bf16 rounding with --grad-dtype bf16; a
 * tied head's inside); *workspace_floats (may be NULL) the former. */
static size_t job_scratch_bytes(const rp_engine *e, const rp_job *job, size_t *workspace_floats)
{
    const rp_kernel_ops *kops = rp_device_kernel_ops(e->device);
    size_t grads = 0, ws = 0;
    if (job->kind != RP_JOB_FWD)
        grads = rp_stage_floats(e, job, NULL) * (e->o->grad_dtype == RP_BF16 ? 6 : 4);
    for (int l = job->first; l <= job->last; l++) {
        size_t f = rp_layer_workspace_floats(kops, e->p->compute_dtype, &e->p->cfg, l,
                                             e->num_layers, e->samples_per_micro, e->seq_len,
                                             e->head_rows);
        ws = f > ws ? f : ws;
    }
    const size_t narrow = rp_activation_narrow_floats(e->o->activation_dtype, e->tokens_per_micro,
                                                      e->hidden);
    ws = narrow > ws ? narrow : ws;
    if (workspace_floats)
        *workspace_floats = ws;
    return ws * sizeof(float) + grads;
}

/* The running job's workspace and gradients in the scratch, which every
 * job has to itself: the workspace first (the layer calls carve it from
 * 64-byte boundaries on, model/carve.h, and take whole 16-float pieces, so
 * the gradients after it start on one too), then the fp32 gradients, then
 * their bf16 rounding. */
static void scratch_begin(executor *x, const rp_job *job)
{
    size_t ws = 0;
    job_scratch_bytes(x->e, job, &ws);
    size_t floats = job->kind == RP_JOB_FWD ? 0 : rp_stage_floats(x->e, job, NULL);
    x->workspace = x->scratch;
    /* between layer calls the workspace is free: activations are narrowed
     * and widened at its start (stage_compute.c) */
    x->act_narrow = x->e->o->activation_dtype != RP_F32 ? x->scratch : NULL;
    x->grads = (float *)x->scratch + ws;
    x->grads_bf16 = x->e->o->grad_dtype == RP_BF16 ? x->grads + floats : NULL;
}

static rp_status executor_init(executor *x, rp_engine *e, rp_error *err)
{
    memset(x, 0, sizeof *x);
    x->e = e;
    x->by_events = rp_device_ordered_by_events(e->dev);
    /* Device memory sized from the plan: the largest stage, allocated once;
     * one scratch for the largest job's gradients and workspace. */
    size_t wmax = 0, scratch = sizeof(float);
    int nst_max = 1;
    x->nsaved = 1;
    for (int j = 0; j < e->jobs_per_it; j++) {
        rp_job job = rp_schedule_job(&e->plan, j);
        size_t n = rp_stage_floats(e, &job, NULL), nw = n + rp_stage_base_floats(e, &job, NULL);
        size_t sj = job_scratch_bytes(e, &job, NULL);
        int layers = job.last - job.first + 1;
        wmax = nw > wmax ? nw : wmax;
        scratch = sj > scratch ? sj : scratch;
        nst_max = layers > nst_max ? layers : nst_max;
        /* a tail runs its forward whole; a backward stage too unless every
         * layer's input was saved (layer-grain recompute), and for its
         * kept layers, read where they lie, the arena or the executor's
         * pool (plan/schedule.c counts the same) */
        int keeps = job.kind == RP_JOB_TAIL ||
                    (job.kind == RP_JOB_BWD && e->o->recompute != RP_RECOMPUTE_LAYER);
        int slots = layers;
        if (job.kind == RP_JOB_BWD && (rp_device_kernel_ops(e->device)->host_addressable ||
                                       rp_kept_on_executor(e->device)))
            for (int l = job.first; l <= job.last; l++)
                slots -= rp_plan_is_kept(&e->plan, l);
        if (keeps && slots > x->nsaved)
            x->nsaved = slots;
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
        /* the prefetch's buffer, unless --weight-buffers 1 (stage_buffers.c) */
        const int weights = b == 0 || e->weight_buffers != 1;
        x->buf[b].w = weights ? dalloc(x, (wmax ? wmax : 1) * wb, err) : NULL;
        x->buf[b].off = calloc((size_t)e->num_layers + 1, sizeof(size_t));
        x->buf[b].boff = calloc((size_t)e->num_layers + 1, sizeof(size_t));
        x->buf[b].req = calloc(rp_stage_max_reqs(e), sizeof(rp_xfer_req));
        x->buf[b].piece_of = calloc(rp_stage_max_reqs(e), sizeof(int));
        x->buf[b].pending = calloc((size_t)e->num_layers + 1, 1);
        x->buf[b].ready = calloc((size_t)e->num_layers + 1, 1);
        x->buf[b].left = calloc((size_t)e->num_layers + 1, sizeof(_Atomic int));
        x->buf[b].rows =
            malloc((size_t)(e->micro_per_pipeline * e->tokens_per_micro) * sizeof(int32_t));
        if (posix_memalign((void **)&x->buf[b].gather, 4096, gather_bytes) != 0)
            x->buf[b].gather = NULL;
        ok &= (x->buf[b].w || !weights) && x->buf[b].off && x->buf[b].boff && x->buf[b].req &&
              x->buf[b].rows &&
              x->buf[b].gather && x->buf[b].piece_of && x->buf[b].pending && x->buf[b].ready &&
              x->buf[b].left;
    }
    x->scratch = dalloc(x, scratch, err);
    /* an FP8 base's blocks, each dequantised for its use (stage_buffers.c):
     * one block's base, the largest (memory_model.c counts it the same) */
    size_t base_scratch = 0;
    for (int l = 0; l < e->num_layers; l++)
        if (rp_stage_base_per_use(e, l) &&
            rp_padded_elements(rp_frozen_base_numel(e->base, l)) * wb > base_scratch)
            base_scratch = rp_padded_elements(rp_frozen_base_numel(e->base, l)) * wb;
    x->base_layer = -1;
    if (base_scratch) {
        x->base_scratch = dalloc(x, base_scratch, err);
        ok &= x->base_scratch != NULL;
    }
    /* the kept layers' pool, laid out as stage_compute.c's pool_slot reads
     * it (plan/schedule.h's rp_schedule_kept_pool_bytes counts it the same) */
    if (e->plan.kept > 0 && rp_kept_on_executor(e->device)) {
        size_t floats = 0;
        x->kept_at = calloc((size_t)e->num_layers, sizeof(size_t));
        for (int l = 0; x->kept_at && l < e->num_layers; l++)
            if (rp_plan_is_kept(&e->plan, l)) {
                x->kept_at[l] = floats;
                floats += (size_t)e->micro_per_pipeline *
                          (rp_padded_elements(e->act_floats) +
                           rp_padded_elements(e->kept_floats[l]));
            }
        x->kept_pool = x->kept_at ? falloc(x, floats, err) : NULL;
        ok &= x->kept_pool != NULL;
    }
    x->acts = calloc((size_t)e->num_layers + 1, sizeof(float *));
    x->act_grad = falloc(x, e->act_floats, err);
    for (int s = 0; rp_saves_staged(e->device) && s < RP_SAVE_SLOTS; s++) /* staged_saves.c */
        ok &= (x->save_slot[s] = falloc(x, e->act_floats, err)) != NULL;
    const rp_kernel_ops *kops = rp_device_kernel_ops(e->device);
    const rp_dtype wdt = e->p->compute_dtype;
    x->saved = calloc((size_t)x->nsaved, sizeof(float *));
    x->tokens = dalloc(x, (size_t)e->tokens_per_micro * sizeof(int32_t), err);
    x->targets = dalloc(x, (size_t)e->tokens_per_micro * sizeof(int32_t), err);
    x->mask = dalloc(x, (size_t)e->tokens_per_micro, err);
    x->host_tokens = malloc((size_t)e->tokens_per_micro * sizeof(int32_t));
    x->host_targets = malloc((size_t)e->tokens_per_micro * sizeof(int32_t));
    x->host_mask = malloc((size_t)e->tokens_per_micro);
    if (rp_dataset_has_documents(e->ds)) {
        x->segments = dalloc(x, (size_t)e->tokens_per_micro * sizeof(int32_t), err);
        x->host_segments = malloc((size_t)e->tokens_per_micro * sizeof(int32_t));
        ok &= x->segments && x->host_segments;
    }
    x->grad_requests = calloc((size_t)e->num_layers + 1, sizeof(rp_xfer_req));
    x->grad_layer = calloc((size_t)e->num_layers + 1, sizeof(int));
    x->grad_left = calloc((size_t)e->num_layers + 1, sizeof(_Atomic int));
    if (rp_model_has_moe(cfg)) { /* with or without the loss: the memory model counts them */
        const size_t E = (size_t)cfg->moe.num_experts;
        const int moved = rp_router_stats_moved(e->device);
        x->host_aux_grad = malloc(E * sizeof(float));
        x->aux_grad = moved ? falloc(x, E, err) : x->host_aux_grad;
        x->router_stats = moved ? falloc(x, 2 * E, err) : NULL;
        ok &= x->host_aux_grad && x->aux_grad && (!moved || x->router_stats);
    }
    ok &= x->scratch && x->acts && x->act_grad && x->saved && x->tokens && x->targets && x->mask && x->host_tokens &&
          x->host_targets && x->host_mask && x->grad_requests && x->grad_layer && x->grad_left;
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
    xp.ops = transfer_ops(e, x->dev);
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
    /* the uploads from here on (the rest of this job's weights, the next
     * job's prefetch into the buffer the job before read) overwrite only
     * what the job before's kernel ops have read: ordered on the device
     * where it is ordered by events (the job before ended without a host
     * wait for them), else they had finished */
    if (x->by_events)
        RP_TRY(rp_device_copies_after_compute(x->dev, RP_COPY_UP, err));
    RP_TRY(rp_stage_acquire(x, &job, t, g, j, err));
    /* the job before's gradients came down while this one's weights went
     * up; they are read from the scratch this job is about to write */
    RP_TRY(rp_stage_grads_landed(x, err));
    scratch_begin(x, &job);

    int64_t counted = job.kind == RP_JOB_FWD ? 0 : rp_engine_counted(e, t);
    float scale = counted > 0 ? (float)(1.0 / (double)counted) : 0.0f;
    if (job.kind != RP_JOB_FWD) {
        RP_TRY(rp_device_memset0(x->dev, x->grads,
                                 x->buf[x->cur].off[job.last - job.first] * sizeof(float) +
                                     rp_stage_layer_elements(e, job.last) * sizeof(float),
                                 err));
        if (rp_stage_needs_tied(e, &job))
            RP_TRY(rp_device_memset0(x->dev, rp_exec_tied_grad(x, &job),
                                     (size_t)(e->p->cfg.vocab_size * e->hidden) * sizeof(float),
                                     err));
    }
    for (int m = g * (int)e->micro_per_pipeline; m < (g + 1) * (int)e->micro_per_pipeline; m++) {
        if (rp_engine_aborted(e))
            return rp_error_echo(err, RP_ERR_INTERNAL, "rank %d, step %lld: stopped because "
                                 "rank %d failed", e->nd.world_rank, (long long)t,
                                 e->nd.world_of[atomic_load(e->abort_flag) - 1]);
        uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
        if (x->segments && job.last > 0 && job.first < e->num_layers - 1) { /* a block reads them */
            rp_engine_segments(e, t, m, x->host_segments);
            RP_TRY(rp_exec_move(x, x->segments, x->host_segments,
                                (size_t)e->tokens_per_micro * sizeof(int32_t), RP_XFER_INPUT,
                                "segments", err));
        }
        if (job.first == 0 || job.kind == RP_JOB_TAIL) {
            rp_engine_tokens(e, t, m, x->host_tokens, x->host_targets, x->host_mask);
            if (job.first == 0)
                rp_stage_renumber(&x->buf[x->cur], x->host_tokens, e->tokens_per_micro);
            RP_TRY(rp_exec_move(x, x->tokens, x->host_tokens,
                                (size_t)e->tokens_per_micro * sizeof(int32_t), RP_XFER_INPUT,
                                "tokens", err));
            if (job.kind == RP_JOB_TAIL) {
                RP_TRY(rp_exec_move(x, x->targets, x->host_targets,
                                    (size_t)e->tokens_per_micro * sizeof(int32_t), RP_XFER_INPUT,
                                    "targets", err));
                RP_TRY(rp_exec_move(x, x->mask, x->host_mask, (size_t)e->tokens_per_micro,
                                    RP_XFER_INPUT, "mask", err));
            }
        }
        x->micro = m;
        switch (job.kind) {
        case RP_JOB_FWD: RP_TRY(rp_stage_forward(x, &job, t, m, err)); break;
        case RP_JOB_TAIL: RP_TRY(rp_stage_tail(x, &job, t, m, scale, err)); break;
        case RP_JOB_BWD: RP_TRY(rp_stage_backward(x, &job, t, m, err)); break;
        }
        if (e->trace) {
            char span[48];
            snprintf(span, sizeof span, "%s%d m%d (it %lld)", kind_letter(job.kind), job.stage,
                     m, (long long)t);
            rp_trace_span(e->trace, RP_TRACK_COMPUTE, span, t0, rp_trace_now_ns());
        }
    }
    if (job.kind != RP_JOB_FWD)
        RP_TRY(rp_stage_download_grads(x, &job, t, g, err));
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
        const unsigned proven = rp_unproven_proven_mask();
        if (e->device == RP_DEVICE_CUDA && (e->unproven & ~proven)) { /* the maintainer's switch */
            char names[256];
            rp_unproven_list(e->unproven & ~proven, names, sizeof names);
            rp_log(e->lg, RP_LOG_INFO, "unproven CUDA paths allowed (RP_ALLOW_UNPROVEN_CUDA): %s; "
                   "not yet run on a GPU, each proven by its case of bench/gpu/parity.sh", names);
        }
        if (e->device == RP_DEVICE_CUDA && (proven & ~e->unproven)) {
            char names[256];
            rp_unproven_list(proven & ~e->unproven, names, sizeof names);
            rp_log(e->lg, RP_LOG_INFO, "CUDA paths turned off (RP_DISABLE_CUDA_PATHS): %s; the "
                   "earlier code runs instead", names);
        }
        if (rp_device_copies_asynchronous(x.dev) && e->device != RP_DEVICE_CUDA)
            rp_log(e->lg, RP_LOG_INFO, "copies: asynchronous, on an upload and a download stream, "
                   "%d chunks in flight each way, ordered with the layers by events, the CPU "
                   "checked as such a CUDA executor (RP_TEST_EVENT_DEVICE)", RP_XFER_DEPTH);
        else if (rp_device_copies_asynchronous(x.dev)) /* CUDA: a choice */
            rp_log(e->lg, RP_LOG_INFO, rp_xfer_asynchronous(x.xfer)
                   ? "copies: asynchronous, on an upload and a download stream, %d chunks in flight "
                     "each way, ordered with the layers by events"
                   : "copies: synchronous, one chunk at a time (the asynchronous copies, %d chunks "
                     "in flight each way, are turned off: RP_DISABLE_CUDA_PATHS names copies)",
                   RP_XFER_DEPTH);
    }
    s = rp_layer_clock_anchor(&x, &err); /* --trace: the device's spans' anchor */
    if (s != RP_OK)
        rp_engine_fail(e, s, &err);
    for (int64_t t = e->it_first; s == RP_OK && t <= e->it_last; t++)
        for (int g = 0; s == RP_OK && g < e->pipelines; g++)
            for (int j = 0; s == RP_OK && j < e->jobs_per_it; j++)
                if (rp_engine_executor(e, t, j, g) == e->rank) {
                    s = rp_proto_stop_before(e, t) ? RP_STOP : run_job(&x, t, g, j, &err);
                    if (s != RP_OK && s != RP_STOP)
                        rp_engine_fail(e, s, &err);
                }
    rp_error landed_err = {0}; /* the last job's gradients, whatever stopped the loop */
    rp_status sl = rp_stage_grads_landed(&x, &landed_err);
    rp_status ss = rp_exec_saves_landed(&x, sl == RP_OK ? &landed_err : &(rp_error){0});
    sl = sl == RP_OK ? ss : sl;
    if (sl == RP_OK) /* every layer time, before the re-plan reads them */
        sl = rp_layer_clock_settle(&x, 1, &landed_err);
    if (sl != RP_OK && (s == RP_OK || s == RP_STOP)) {
        s = sl;
        rp_engine_fail(e, s, &landed_err);
    }
    rp_xfer_drain(x.xfer);
    rp_xfer_stats st;
    rp_xfer_get_stats(x.xfer, &st);
    e->uploaded_bytes += st.bytes[RP_XFER_WEIGHTS] + st.bytes[RP_XFER_PREFETCH];
    executor_free(&x);
    return s == RP_STOP ? RP_OK : s;
}
