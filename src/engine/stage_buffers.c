/* The executor's stage buffers: two device buffers of weights, so the next
 * job's weights upload (prefetch) while this job computes; a stage holding
 * the embedding uploads only the rows its pipeline's tokens read, gathered
 * on the host. */
#include <stdio.h>
#include <string.h>

#include "engine/executor_impl.h"
#include "engine/padding.h"
#include "engine/protocol.h"
#include "engine/update_gate.h"

/* Move bytes between host and device now, through the transfer engine's
 * queue of the given class (so a transfer of a higher class goes first). */
rp_status rp_exec_move(executor *x, void *dst, const void *src, size_t bytes, rp_xfer_class cls,
                       const char *tag, rp_error *err)
{
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

size_t rp_stage_floats(const rp_engine *e, const rp_job *job, size_t *off)
{
    size_t n = 0;
    int i = 0;
    for (int l = job->first; l <= job->last; l++, i++) {
        if (off)
            off[i] = n;
        n += rp_padded_elements(rp_layer_numel(e, l));
    }
    if (off)
        off[e->num_layers] = n;
    if (rp_stage_needs_tied(e, job))
        n += (size_t)(e->p->cfg.vocab_size * e->hidden);
    return n;
}

size_t rp_stage_base_floats(const rp_engine *e, const rp_job *job, size_t *boff)
{
    if (!e->lora || e->base_in_place)
        return 0;
    size_t start = rp_stage_floats(e, job, NULL), n = start;
    for (int l = job->first, i = 0; l <= job->last; l++, i++) {
        if (boff)
            boff[i] = n;
        n += rp_padded_elements(rp_frozen_base_numel(e->base, l));
    }
    return n - start;
}

/* The rows of the embedding table (elements of wb bytes) this pipeline's
 * tokens read, gathered into the stage's pinned buffer; a request (r, when
 * not NULL) uploads them to its dst. */
static rp_status gather_rows(rp_engine *e, stage_buf *b, rp_xfer_req *r, const void *table,
                             size_t wb, int64_t t, int g, int j, rp_error *err)
{
    b->nrows = rp_engine_rows(e, t, g, b->rows);
    if (b->nrows < 0)
        return rp_error_set(err, RP_ERR_NOMEM, "rank %d: embedding rows of job %d",
                            e->nd.world_rank, j);
    size_t row = (size_t)e->hidden * wb;
    char *gather = b->gather;
#pragma omp parallel for schedule(static) if (b->nrows * e->hidden > 65536)
    for (int64_t i = 0; i < b->nrows; i++)
        memcpy(gather + (size_t)i * row, (const char *)table + (size_t)b->rows[i] * row, row);
    if (!r)
        return RP_OK;
    r->src = b->gather;
    r->bytes = (size_t)b->nrows * row;
    r->tag = "embedding rows";
    return RP_OK;
}

size_t rp_stage_max_reqs(const rp_engine *e)
{
    size_t n = 1; /* a tied head's matrix */
    for (int l = 0; l < e->num_layers; l++) /* a stage's layers, each with its base's tensors */
        n += 1 + (e->lora ? (size_t)rp_frozen_base_layer(e->base, l)->nparams : 0);
    return n;
}

/* LoRA: the frozen base of layer l, tensor by tensor (the embedding's
 * rows as the pipeline's tokens read them). */
static rp_status submit_base(executor *x, stage_buf *b, int l, int i, int64_t t, int g, int j,
                             rp_xfer_class cls, rp_error *err)
{
    rp_engine *e = x->e;
    const size_t wb = rp_dtype_size(e->p->compute_dtype);
    const rp_weight_piece *pc;
    int n = rp_frozen_base_pieces(e->base, l, &pc);
    if (e->base_in_place) /* read where it lies; only the embedding's rows are gathered */
        return l == 0 ? gather_rows(e, b, NULL, pc[0].src,
                                    rp_dtype_size(rp_frozen_base_dtype(e->base)), t, g, j, err)
                      : RP_OK;
    for (int k = 0; k < (l == 0 ? 1 : n); k++) {
        rp_xfer_req *r = &b->req[b->nreq++];
        memset(r, 0, sizeof *r);
        r->dst = (char *)b->w + (b->boff[i] + pc[k].at) * wb;
        r->cls = cls;
        if (l == 0) {
            RP_TRY(gather_rows(e, b, r, pc[0].src, wb, t, g, j, err));
        } else {
            r->src = pc[k].src;
            r->bytes = pc[k].numel * wb;
            r->tag = "frozen weights";
        }
        RP_TRY(rp_xfer_submit(x->xfer, r, err));
    }
    return RP_OK;
}

static rp_status submit_upload(executor *x, stage_buf *b, const rp_job *job, int64_t t, int g,
                               int j, rp_xfer_class cls, rp_error *err)
{
    rp_engine *e = x->e;
    rp_stage_floats(e, job, b->off);
    rp_stage_base_floats(e, job, b->boff);
    b->nreq = 0;
    b->t = t;
    b->g = g;
    b->j = j;
    const size_t wb = rp_dtype_size(e->p->compute_dtype); /* bytes of a weight element */
    for (int l = job->first; l <= job->last; l++) {
        if (e->lora) /* the frozen base; the trainable part, when there is one */
            RP_TRY(submit_base(x, b, l, l - job->first, t, g, j, cls, err));
        if (e->lora && rp_layer_numel(e, l) == 0)
            continue;
        rp_xfer_req *r = &b->req[b->nreq++];
        memset(r, 0, sizeof *r);
        r->dst = (char *)b->w + b->off[l - job->first] * wb;
        r->cls = cls;
        if (l == 0) { /* only the rows this pipeline's tokens read */
            RP_TRY(gather_rows(e, b, r, e->p->st[0].compute, wb, t, g, j, err));
        } else {
            r->src = e->p->st[l].compute;
            r->bytes = rp_layer_numel(e, l) * wb;
            r->tag = "weights";
        }
        RP_TRY(rp_xfer_submit(x->xfer, r, err));
    }
    if (rp_stage_needs_tied(e, job)) {
        rp_xfer_req *r = &b->req[b->nreq++];
        memset(r, 0, sizeof *r);
        r->dst = (char *)b->w + b->off[e->num_layers] * wb;
        r->src = e->p->st[0].compute;
        r->bytes = (size_t)(e->p->cfg.vocab_size * e->hidden) * wb;
        r->cls = cls;
        r->tag = "tied-head";
        RP_TRY(rp_xfer_submit(x->xfer, r, err));
    }
    return RP_OK;
}

static rp_status wait_upload(executor *x, stage_buf *b, rp_error *err)
{
    for (int i = 0; i < b->nreq; i++)
        RP_TRY(rp_xfer_wait(x->xfer, &b->req[i], err));
    return RP_OK;
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

/* Prefetch the next job's weights into the other buffer when they are
 * already at the version it needs (otherwise it uploads at its start). */
static rp_status maybe_prefetch(executor *x, int64_t t, int g, int j, rp_error *err)
{
    rp_engine *e = x->e;
    int64_t nt;
    int ng, nj;
    if (!next_job(e, t, g, j, &nt, &ng, &nj))
        return RP_OK;
    rp_job job = rp_schedule_job(&e->plan, nj);
    if (!rp_gate_weights_ready(e, job.first, job.last, rp_stage_needs_tied(e, &job), nt))
        return RP_OK;
    return submit_upload(x, &x->buf[1 - x->cur], &job, nt, ng, nj, RP_XFER_PREFETCH, err);
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
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    stage_buf *pre = &x->buf[1 - x->cur];
    if (pre->t == t && pre->g == g && pre->j == j) {
        x->cur = 1 - x->cur;
        RP_TRY(wait_upload(x, pre, err));
    } else {
        RP_TRY(rp_gate_wait_weights(e, job->first, job->last, rp_stage_needs_tied(e, job), t,
                                    x->name, err));
        RP_TRY(submit_upload(x, &x->buf[x->cur], job, t, g, j, RP_XFER_WEIGHTS, err));
        RP_TRY(wait_upload(x, &x->buf[x->cur], err));
    }
    trace_weights_wait(x, job, job->first, job->last, g, t, t0);
    x->buf[1 - x->cur].t = 0;
    /* tell a lagged optimizer these weights may now change */
    for (int l = job->first; l <= job->last; l++)
        rp_proto_publish_uploaded(e, job->kind == RP_JOB_FWD, l, g, t);
    return maybe_prefetch(x, t, g, j, err);
}
