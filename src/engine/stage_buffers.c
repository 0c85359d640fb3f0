/* The executor's stage buffers: two device buffers of weights, so the next
 * job's weights upload (prefetch) while this job computes; a stage holding
 * the embedding uploads only the rows its pipeline's tokens read, gathered
 * on the host.
 *
 * Uploads stream (DESIGN 5a): a job's weights are pieces, one per layer and
 * a tied head's matrix; a piece is submitted as soon as the update gate
 * says its version is in (a LoRA base, frozen, at once), and the compute of
 * a layer waits only for its own pieces (rp_stage_wait_layer). Nothing runs
 * in the background: the executor thread looks for pieces that have landed
 * whenever it is about to compute a layer (and when a job starts), for the
 * running job and for the next job's prefetch, and blocks on the gate only
 * for the layer it must compute next. The transfer engine's classes still
 * order the bytes: the running job's pieces as weights, the next job's as
 * prefetch (a prefetched piece keeps its class once that job runs). */
#include <stdio.h>
#include <string.h>

#include "engine/executor_impl.h"
#include "engine/padding.h"
#include "engine/protocol.h"
#include "engine/stage_weights.h"
#include "engine/update_gate.h"

/* Move bytes between host and device now, through the transfer engine's
 * queue of the given class (so a transfer of a higher class goes first).
 * Ordered by events, the host does not wait for the kernel ops before it:
 * the copy's stream waits for them on the device (a download reads what
 * they wrote, an upload overwrites only what they have read). Otherwise a
 * download waits for them on the host (the copy does not wait for the
 * compute stream); an upload's caller orders it. */
rp_status rp_exec_move(executor *x, void *dst, const void *src, size_t bytes, rp_xfer_class cls,
                       const char *tag, rp_error *err)
{
    const rp_copy_direction dir = (rp_copy_direction)rp_xfer_class_direction(cls);
    if (x->by_events)
        RP_TRY(rp_device_copies_after_compute(x->dev, dir, err));
    else if (dir == RP_COPY_DOWN)
        RP_TRY(rp_device_sync(x->dev, err));
    rp_xfer_req r;
    memset(&r, 0, sizeof r);
    r.dst = dst;
    r.src = src;
    r.bytes = bytes;
    r.cls = cls;
    r.tag = tag;
    RP_TRY(rp_xfer_submit(x->xfer, &r, err));
    return rp_xfer_wait(x->xfer, &r, err);
}

int rp_stage_needs_tied(const rp_engine *e, const rp_job *job)
{
    return e->tied && job->kind == RP_JOB_TAIL;
}

/* The embedding's rows on the device, for a table of `numel` elements
 * (0: nothing of it there). */
static size_t embedding_elements(const rp_engine *e, size_t numel)
{
    return numel ? (size_t)(e->emb_device_rows * e->hidden) : 0;
}

size_t rp_stage_layer_elements(const rp_engine *e, int l)
{
    return l == 0 ? embedding_elements(e, rp_layer_numel(e, 0)) : rp_layer_numel(e, l);
}

size_t rp_stage_floats(const rp_engine *e, const rp_job *job, size_t *off)
{
    size_t n = 0;
    int i = 0;
    for (int l = job->first; l <= job->last; l++, i++) {
        if (off)
            off[i] = n;
        n += rp_padded_elements(rp_stage_layer_elements(e, l));
    }
    if (off)
        off[e->num_layers] = n;
    if (rp_stage_needs_tied(e, job))
        n += (size_t)(e->p->cfg.vocab_size * e->hidden);
    return n;
}

/* An FP8 base uploaded (not read in place): block l's staging area, its
 * FP8 tensors with their scales and its others as they lie, in
 * compute-dtype elements: what the config's rule reserves
 * (rp_frozen_base_staged_bound, which the planner counts), or the files'
 * own area when that is larger. Nothing of the block in the compute dtype:
 * that is dequantised into the executor's scratch for each use. */
static size_t staging_elements(const rp_engine *e, int l)
{
    if (e->base_in_place || !rp_stage_base_per_use(e, l))
        return 0;
    const size_t wb = rp_dtype_size(e->p->compute_dtype);
    size_t bytes = rp_frozen_base_staged_bound(&e->p->cfg, rp_frozen_base_layer(e->base, l),
                                               e->p->compute_dtype);
    if (rp_frozen_base_staged_bytes(e->base, l) > bytes)
        bytes = rp_frozen_base_staged_bytes(e->base, l);
    return rp_padded_elements((bytes + wb - 1) / wb);
}

/* Where block l (index i of buffer b's job) stages its base. */
static char *staging_of(const stage_buf *b, int i)
{
    return (char *)b->w + b->boff[i] * rp_dtype_size(b->e->p->compute_dtype);
}

size_t rp_stage_base_floats(const rp_engine *e, const rp_job *job, size_t *boff)
{
    if (!e->lora)
        return 0;
    size_t start = rp_stage_floats(e, job, NULL), n = start;
    for (int l = job->first, i = 0; l <= job->last; l++, i++) {
        if (boff)
            boff[i] = n;
        if (rp_stage_base_copied(e, l)) {
            size_t numel = rp_frozen_base_numel(e->base, l);
            n += rp_padded_elements(l == 0 ? embedding_elements(e, numel) : numel);
        }
        n += staging_elements(e, l);
    }
    return n - start;
}

size_t rp_stage_max_reqs(const rp_engine *e)
{
    size_t n = 1; /* a tied head's matrix */
    /* a stage's layers, each with its base's tensors (an FP8 one's scales apart) */
    const size_t per = e->lora && rp_frozen_base_fp8(e->base) ? 2 : 1;
    for (int l = 0; l < e->num_layers; l++)
        n += 1 + (e->lora ? per * (size_t)rp_frozen_base_layer(e->base, l)->nparams : 0);
    return n;
}

/* The rows of the embedding this pipeline's tokens read in iteration t,
 * sorted (the tokens are renumbered to positions in them): known before
 * the weights' version is. */
static rp_status list_rows(rp_engine *e, stage_buf *b, rp_error *err)
{
    b->nrows = rp_engine_rows(e, b->t, b->g, b->rows);
    if (b->nrows < 0)
        return rp_error_set(err, RP_ERR_NOMEM, "rank %d: embedding rows of job %d",
                            e->nd.world_rank, b->j);
    return RP_OK;
}

/* Those rows of the embedding table (elements of wb bytes) gathered into
 * the stage's pinned buffer; a request (r, when not NULL) uploads them to
 * its dst. */
static void gather_rows(rp_engine *e, stage_buf *b, rp_xfer_req *r, const void *table, size_t wb)
{
    size_t row = (size_t)e->hidden * wb;
    char *gather = b->gather;
#pragma omp parallel for schedule(static) if (b->nrows * e->hidden > 65536)
    for (int64_t i = 0; i < b->nrows; i++)
        memcpy(gather + (size_t)i * row, (const char *)table + (size_t)b->rows[i] * row, row);
    if (!r)
        return;
    r->src = b->gather;
    r->bytes = (size_t)b->nrows * row;
    r->tag = "embedding rows";
}

/* Pieces of the buffer's job: its layers, and a tied head's matrix. */
static int layer_pieces(const stage_buf *b)
{
    return b->job.last - b->job.first + 1;
}

/* The layer (index from first) a piece's uploads count for: a tied head's
 * matrix counts with the head. */
static int layer_of_piece(const stage_buf *b, int p)
{
    return p < layer_pieces(b) ? p : layer_pieces(b) - 1;
}

/* A lagged optimizer waits for a job's uploads of a layer (protocol.h's
 * uploaded): said once its last upload is done and the job has started.
 * (A prefetched job that a stop keeps from running never says it: the
 * optimizer reads the stop first.) */
static void layer_uploaded(stage_buf *b, int i)
{
    if (atomic_fetch_sub(&b->left[i], 1) == 1 && rp_gate_layer_trained(b->e, b->job.first + i))
        rp_proto_publish_uploaded(b->e, b->job.kind == RP_JOB_FWD, b->job.first + i, b->g, b->t);
}

/* The transfer engine's worker, when an upload ends. */
static void upload_done(rp_xfer_req *r, void *arg, rp_xfer_state state)
{
    stage_buf *b = arg;
    if (state == RP_XFER_DONE)
        layer_uploaded(b, layer_of_piece(b, b->piece_of[r - b->req]));
}

static rp_xfer_req *new_request(stage_buf *b, int p, size_t dst)
{
    rp_xfer_req *r = &b->req[b->nreq];
    b->piece_of[b->nreq++] = p;
    memset(r, 0, sizeof *r);
    r->dst = (char *)b->w + dst * rp_dtype_size(b->e->p->compute_dtype);
    r->cls = b->cls;
    r->done = upload_done;
    r->done_arg = b;
    return r;
}

/* LoRA: the frozen base of layer l, tensor by tensor (the embedding's
 * rows as the pipeline's tokens read them); it has no version. */
static rp_status submit_base(executor *x, stage_buf *b, int l, rp_error *err)
{
    rp_engine *e = x->e;
    const size_t wb = rp_dtype_size(e->p->compute_dtype);
    const int i = l - b->job.first;
    const rp_weight_piece *pc;
    int n = rp_frozen_base_pieces(e->base, l, &pc);
    if (e->base_in_place) {
        /* read where it lies (an FP8 block dequantised from there for each
         * use); only the embedding's rows are gathered */
        if (l == 0)
            gather_rows(e, b, NULL, pc[0].src, rp_dtype_size(rp_frozen_base_dtype(e->base)));
        return RP_OK;
    }
    if (rp_stage_base_per_use(e, l)) { /* FP8: the block as it lies into its staging area */
        for (int k = 0; k < n; k++) {
            size_t at, scale_at;
            const rp_fp8_matrix *q = rp_frozen_base_piece_staged(e->base, l, k, &at, &scale_at);
            rp_xfer_req *r = new_request(b, i, 0);
            r->dst = staging_of(b, i) + at;
            r->src = pc[k].src;
            r->bytes = pc[k].numel * rp_dtype_size(rp_frozen_base_dtype(e->base));
            r->tag = "frozen weights";
            if (q) {
                r->src = q->weight;
                r->bytes = (size_t)(q->rows * q->cols);
                r->tag = "frozen weights (FP8)";
                RP_TRY(rp_xfer_submit(x->xfer, r, err));
                r = new_request(b, i, 0);
                r->dst = staging_of(b, i) + scale_at;
                r->src = q->scale;
                r->bytes = (size_t)(rp_fp8_scale_rows(q) * rp_fp8_scale_cols(q)) *
                           rp_dtype_size(q->scale_dtype);
                r->tag = "frozen weights (FP8 scales)";
            }
            RP_TRY(rp_xfer_submit(x->xfer, r, err));
        }
        return RP_OK;
    }
    for (int k = 0; k < (l == 0 ? 1 : n); k++) {
        rp_xfer_req *r = new_request(b, i, b->boff[i] + pc[k].at);
        if (l == 0) {
            gather_rows(e, b, r, pc[0].src, wb);
        } else {
            r->src = pc[k].src;
            r->bytes = pc[k].numel * wb;
            r->tag = "frozen weights";
        }
        RP_TRY(rp_xfer_submit(x->xfer, r, err));
    }
    return RP_OK;
}

/* Requests of a frozen base (uploads that count for the layer). */
static int base_requests(const rp_engine *e, int l)
{
    const rp_weight_piece *pc;
    if (!e->lora || e->base_in_place)
        return 0;
    if (l == 0)
        return 1;
    int n = rp_frozen_base_pieces(e->base, l, &pc), fp8 = 0;
    size_t at, scale_at;
    for (int k = 0; rp_stage_base_per_use(e, l) && k < n; k++)
        fp8 += rp_frozen_base_piece_staged(e->base, l, k, &at, &scale_at) != NULL;
    return n + fp8; /* an FP8 tensor's scales travel apart */
}

/* Piece p's trainable weights, its version being in. */
static rp_status submit_piece(executor *x, stage_buf *b, int p, rp_error *err)
{
    rp_engine *e = x->e;
    const size_t wb = rp_dtype_size(e->p->compute_dtype);
    b->pending[p] = 0;
    if (p == layer_pieces(b)) { /* the embedding as a tied LM head */
        rp_xfer_req *r = new_request(b, p, b->off[e->num_layers]);
        r->src = e->p->st[0].compute;
        r->bytes = (size_t)(e->p->cfg.vocab_size * e->hidden) * wb;
        r->tag = "tied-head";
        return rp_xfer_submit(x->xfer, r, err);
    }
    int l = b->job.first + p;
    rp_xfer_req *r = new_request(b, p, b->off[p]);
    if (l == 0) { /* only the rows this pipeline's tokens read */
        gather_rows(e, b, r, e->p->st[0].compute, wb);
    } else {
        r->src = e->p->st[l].compute;
        r->bytes = rp_layer_numel(e, l) * wb;
        r->tag = "weights";
    }
    return rp_xfer_submit(x->xfer, r, err);
}

/* The layer the gate is asked about for piece p. */
static int gate_layer(const stage_buf *b, int p)
{
    return p == layer_pieces(b) ? 0 : b->job.first + p;
}

/* Submit every piece of the buffer's job whose version is in (not
 * waiting). */
static rp_status submit_landed(executor *x, stage_buf *b, rp_error *err)
{
    if (b->t == 0)
        return RP_OK;
    int tied = rp_stage_needs_tied(x->e, &b->job);
    for (int p = 0; p <= layer_pieces(b); p++)
        if (b->pending[p] && rp_gate_layer_weights_ready(x->e, gate_layer(b, p), tied, b->t))
            RP_TRY(submit_piece(x, b, p, err));
    return RP_OK;
}

/* Wait (at the gate, naming the layer) for piece p's version, then
 * submit it. */
static rp_status wait_piece(executor *x, stage_buf *b, int p, rp_error *err)
{
    if (!b->pending[p])
        return RP_OK;
    RP_TRY(rp_gate_wait_layer_weights(x->e, gate_layer(b, p), rp_stage_needs_tied(x->e, &b->job),
                                      b->t, x->name, err));
    return submit_piece(x, b, p, err);
}

/* Every upload submitted into the buffer has ended (before it is reused). */
static rp_status finish(executor *x, stage_buf *b, rp_error *err)
{
    rp_status s = RP_OK;
    for (int k = 0; k < b->nreq; k++) {
        rp_status sk = rp_xfer_wait(x->xfer, &b->req[k], err);
        s = s == RP_OK ? sk : s;
    }
    b->nreq = 0;
    return s;
}

/* Begin job (t, g, j)'s weights in buffer b: its layout, its embedding
 * rows, its frozen bases, and every piece already at its version; the rest
 * waits (submit_landed, wait_piece). `started`: the job runs now (else a
 * prefetch, whose uploads count once it starts: rp_stage_acquire). */
static rp_status begin(executor *x, stage_buf *b, const rp_job *job, int64_t t, int g, int j,
                       int started, rp_error *err)
{
    rp_engine *e = x->e;
    RP_TRY(finish(x, b, err));
    b->e = e;
    b->job = *job;
    b->t = t;
    b->g = g;
    b->j = j;
    b->cls = started ? RP_XFER_WEIGHTS : RP_XFER_PREFETCH;
    rp_stage_floats(e, job, b->off);
    rp_stage_base_floats(e, job, b->boff);
    if (job->first == 0)
        RP_TRY(list_rows(e, b, err));
    const int n = layer_pieces(b), tied = rp_stage_needs_tied(e, job);
    for (int i = 0; i < n; i++) {
        int l = job->first + i, trainable = !(e->lora && rp_layer_numel(e, l) == 0);
        int uploads = base_requests(e, l) + trainable + (tied && i == n - 1);
        b->pending[i] = (unsigned char)trainable;
        b->ready[i] = 0;
        atomic_store(&b->left[i], uploads + !started);
        if (started && uploads == 0 && rp_gate_layer_trained(e, l)) /* nothing to upload */
            rp_proto_publish_uploaded(e, job->kind == RP_JOB_FWD, l, g, t);
    }
    b->pending[n] = (unsigned char)tied;
    for (int l = job->first; e->lora && l <= job->last; l++)
        RP_TRY(submit_base(x, b, l, err));
    return submit_landed(x, b, err);
}

/* Next job of this rank after (t, g, j), if any within the run: a rank
 * runs its jobs by iteration, then pipeline, then job index. */
static int next_job(const rp_engine *e, int64_t t, int g, int j, int64_t *nt, int *ng, int *nj)
{
    for (;;) {
        if (++j == e->jobs_per_it) {
            j = 0;
            if (++g == e->pipelines) {
                g = 0;
                if (++t > e->it_last)
                    return 0;
            }
        }
        if (rp_engine_executor(e, t, j, g) == e->rank) {
            *nt = t;
            *ng = g;
            *nj = j;
            return 1;
        }
    }
}

void rp_stage_renumber(const stage_buf *b, int32_t *ids, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        int64_t lo = 0, hi = b->nrows - 1;
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (b->rows[mid] < ids[i])
                lo = mid + 1;
            else
                hi = mid;
        }
        ids[i] = (int32_t)lo;
    }
}

/* With --trace: the executor waited for weights from t0 to now, a span on
 * the waits track naming what it waited for and the job ("weights of
 * layers 0-3 (F0, pipeline 0, it 12)"), so a timeline shows how long a job
 * stood still for its weights (tools/trace-weights-wait.py sums them). */
static void trace_weights_wait(executor *x, const rp_job *job, int first, int last, int g,
                               int64_t t, uint64_t t0)
{
    rp_engine *e = x->e;
    if (!e->trace)
        return;
    char span[64], layers[24];
    if (first == last)
        snprintf(layers, sizeof layers, "layer %d", first);
    else
        snprintf(layers, sizeof layers, "layers %d-%d", first, last);
    snprintf(span, sizeof span, "weights of %s (%s%d, pipeline %d, it %lld)", layers,
             job->kind == RP_JOB_FWD ? "F" : job->kind == RP_JOB_TAIL ? "T" : "B", job->stage, g,
             (long long)t);
    rp_trace_span(e->trace, RP_TRACK_WAIT, span, t0, rp_trace_now_ns());
}

rp_status rp_stage_acquire(executor *x, const rp_job *job, int64_t t, int g, int j,
                           rp_error *err)
{
    rp_engine *e = x->e;
    stage_buf *pre = &x->buf[1 - x->cur];
    if (pre->t == t && pre->g == g && pre->j == j) { /* prefetched: the job starts */
        x->cur = 1 - x->cur;
        pre->cls = RP_XFER_WEIGHTS;
        for (int i = 0; i < layer_pieces(pre); i++)
            layer_uploaded(pre, i);
    } else {
        RP_TRY(begin(x, &x->buf[x->cur], job, t, g, j, 1, err));
    }
    stage_buf *b = &x->buf[x->cur];
    RP_TRY(submit_landed(x, b, err));
    if (rp_gate_weights_before_compute(e)) { /* every version, in layer order */
        uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
        for (int p = 0; p <= layer_pieces(b); p++)
            RP_TRY(wait_piece(x, b, p, err));
        trace_weights_wait(x, job, job->first, job->last, g, t, t0);
    }
    int64_t nt;
    int ng, nj;
    stage_buf *next = &x->buf[1 - x->cur];
    /* --weight-buffers 1: no second buffer, the next job uploads into
     * this one when it starts */
    if (e->weight_buffers == 1 || !next_job(e, t, g, j, &nt, &ng, &nj)) {
        /* nothing prefetched there; its uploads of the job before end
         * first: their completions (upload_done) read its t, and ordered
         * by events the job before waited only for their issue */
        RP_TRY(finish(x, next, err));
        next->t = 0;
        return RP_OK;
    }
    rp_job njob = rp_schedule_job(&e->plan, nj);
    return begin(x, next, &njob, nt, ng, nj, 0, err);
}

/* An FP8 block's base into the executor's scratch in the compute dtype,
 * from the stage's staging area (uploaded) or from where it lies (in
 * place), just before the block computes: every use (a forward, a
 * backward's recompute, a backward) finds its own layer there. The base is
 * frozen, so a scratch that holds block l already (the same layer's next
 * microbatch in a stage of one block; a recompute's last block and its
 * backward) is not dequantised again. One scratch: the dequantisation runs
 * on the compute stream, so it cannot overlap the previous layer's compute
 * anyway, and a second layer's worth of device memory is what this path
 * saves. Timed only in a segment whose layer times the re-plan reads
 * (e->measuring): the clock has the host wait for the device around it,
 * which no later segment pays (the dequantisation is then queued on the
 * compute stream after the upload it reads, as the block's kernels are). */
static rp_status dequantise_base(executor *x, const stage_buf *b, int l, int i, rp_error *err)
{
    rp_engine *e = x->e;
    if (!rp_stage_base_per_use(e, l) || x->base_layer == l)
        return RP_OK;
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    x->base_layer = -1; /* until it is whole */
    /* ordered by events, the compute stream may still hold the layer
     * before's kernel ops and the wait for this block's upload
     * (weights_before_compute): finished first when it is timed, so the
     * clock below times the dequantisation alone */
    if (x->by_events && e->measuring)
        RP_TRY(rp_device_sync(x->dev, err));
    const double t0 = rp_now();
    if (e->base_in_place)
        RP_TRY(rp_frozen_base_materialise(e->base, l, &k, x->base_scratch, e->p->compute_dtype,
                                          err));
    else
        RP_TRY(rp_frozen_base_dequantise_staged(e->base, l, &k, staging_of(b, i),
                                                x->base_scratch, e->p->compute_dtype, err));
    /* timed alone, for the re-plan (its dequant_ms): the layer's own clock
     * starts after it. Every one, the first iteration's too: a scratch
     * that still holds its block from the job before is not dequantised
     * again, so there may be no other */
    if (e->measuring) {
        RP_TRY(rp_device_sync(x->dev, err));
        e->by_executor.meas_ms[2 * e->num_layers + l] += (rp_now() - t0) * 1e3;
        e->by_executor.meas_n[2 * e->num_layers + l] += 1;
    }
    x->base_layer = l;
    return RP_OK;
}

/* The kernel ops issued from now on read what upload r writes. Ordered by
 * events, the host waits only until r's copies are under way (the device's
 * issue, not the bytes) and the compute stream waits for the copy of its
 * last chunk on the device: the layer's kernels are queued while its
 * weights are still on the link. Whether the upload succeeded is then seen
 * when its completion is (upload_done says the layer uploaded only then;
 * the buffer's next job waits for every request, finish). Otherwise the host
 * waits for the bytes. */
static rp_status weights_before_compute(executor *x, rp_xfer_req *r, rp_error *err)
{
    if (!x->by_events)
        return rp_xfer_wait(x->xfer, r, err);
    int ticket;
    RP_TRY(rp_xfer_wait_issued(x->xfer, r, &ticket, err));
    return ticket < 0 ? RP_OK : rp_device_compute_after_copy(x->dev, ticket, err);
}

rp_status rp_stage_wait_layer(executor *x, const rp_job *job, int l, rp_error *err)
{
    rp_engine *e = x->e;
    stage_buf *b = &x->buf[x->cur];
    const int i = l - job->first, n = layer_pieces(b);
    const int tied = rp_stage_needs_tied(e, job) && l == job->last; /* the head's matrix too */
    if (!b->ready[i]) {
        uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
        RP_TRY(submit_landed(x, b, err));
        RP_TRY(wait_piece(x, b, i, err));
        if (tied)
            RP_TRY(wait_piece(x, b, n, err));
        RP_TRY(submit_landed(x, b, err)); /* what landed while it waited */
        for (int k = 0; k < b->nreq; k++)
            if (b->piece_of[k] == i || (tied && b->piece_of[k] == n))
                RP_TRY(weights_before_compute(x, &b->req[k], err));
        b->ready[i] = 1;
        trace_weights_wait(x, job, l, l, b->g, b->t, t0); /* once per layer and job */
    } else {
        RP_TRY(submit_landed(x, b, err));
    }
    RP_TRY(dequantise_base(x, b, l, i, err));
    return submit_landed(x, &x->buf[1 - x->cur], err);
}
