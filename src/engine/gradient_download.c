/* The end of a tail or backward job: the stage's gradients, accumulated on
 * the device over the job's microbatches, downloaded once into its
 * pipeline's host buffers (rounded to bf16 on the way with --grad-dtype
 * bf16), after the update gate says those buffers are free, and announced
 * to the optimizer layer by layer (protocol.h's grad event) as each lands:
 * the job ends once the download is submitted, and the next job starts
 * (its weights going up while the gradients come down) until it would
 * write the scratch they are read from (rp_stage_grads_landed); with
 * --grad-dtype bf16 and synchronous copies the job waits for it, see
 * widened_by_executor. */
#include <stdatomic.h>
#include <string.h>

#include "device/backend.h"
#include "engine/executor_impl.h"
#include "engine/protocol.h"
#include "engine/update_gate.h"

/* With --grad-dtype bf16, point request r (elements [at, at + n) of the
 * stage's gradients, fp32 on the device) at their bf16 rounding instead:
 * half the bytes travel, and they are widened on the host. */
static rp_status round_request(executor *x, rp_xfer_req *r, size_t at, size_t n, rp_error *err)
{
    if (!x->grads_bf16)
        return RP_OK;
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    uint16_t *dst = (uint16_t *)x->grads_bf16 + at;
    RP_TRY(k.ops->convert(k.state, x->grads + at, RP_F32, dst, RP_BF16, (int64_t)n, err));
    r->src = dst;
    r->bytes = n * 2;
    return RP_OK;
}

/* With --grad-dtype bf16 and synchronous copies, the executor's thread
 * widens each request and announces it (the job waits for its download, as
 * the widening would hold the one transfer thread, and with it the next
 * job's uploads, for milliseconds a layer); otherwise the transfer
 * engine's thread does, as each request ends. */
static int widened_by_executor(const executor *x)
{
    return x->grads_bf16 && !rp_xfer_asynchronous(x->xfer);
}

/* Request r has landed: widened on the host with --grad-dtype bf16, and
 * its layer announced once everything of it is down. */
static void landed(executor *x, rp_xfer_req *r)
{
    if (x->grads_bf16)
        rp_bf16_widen_in_place(r->dst, r->bytes / 2);
    const int l = x->grad_layer[r - x->grad_requests];
    if (atomic_fetch_sub(&x->grad_left[l - x->grad_first], 1) == 1)
        rp_proto_publish_grad(x->e, l, x->grad_g, x->grad_t);
}

/* A request of the download has ended (on the transfer engine's thread).
 * A failed one stops the run at once: the optimizer waits for its layer,
 * and the next job perhaps for that layer's update. */
static void grad_landed(rp_xfer_req *r, void *arg, rp_xfer_state state)
{
    executor *x = arg;
    if (state == RP_XFER_FAILED)
        rp_engine_fail(x->e, r->status, &r->err);
    if (state == RP_XFER_DONE && !widened_by_executor(x))
        landed(x, r);
}

rp_status rp_stage_grads_landed(executor *x, rp_error *err)
{
    rp_status s = RP_OK;
    for (int i = 0; i < x->grads_pending; i++) { /* every one, whatever failed */
        rp_error mine = {0};
        rp_status si = rp_xfer_wait(x->xfer, &x->grad_requests[i], &mine);
        if (si == RP_OK && widened_by_executor(x))
            landed(x, &x->grad_requests[i]);
        if (si != RP_OK && s == RP_OK) {
            s = si;
            *err = mine;
        }
    }
    x->grads_pending = 0;
    return s;
}

rp_status rp_stage_download_grads(executor *x, const rp_job *job, int64_t t, int g, rp_error *err)
{
    rp_engine *e = x->e;
    int n = 0;
    RP_TRY(rp_stage_grads_landed(x, err)); /* the requests are reused */
    RP_TRY(rp_gate_wait_grad_buffers(e, job->first, job->last, rp_stage_needs_tied(e, job), t,
                                     x->name, err));
    for (int l = job->first; l <= job->last; l++) {
        if (e->lora && rp_layer_numel(e, l) == 0) { /* frozen: nothing travels */
            if (l == 0)
                e->emb_n[g] = 0;
            continue;
        }
        x->grad_layer[n] = l;
        rp_xfer_req *r = &x->grad_requests[n++];
        memset(r, 0, sizeof *r);
        r->src = rp_exec_layer_grad(x, job, l);
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
        RP_TRY(round_request(x, r, (size_t)((const float *)r->src - x->grads), r->bytes / 4, err));
    }
    if (rp_stage_needs_tied(e, job)) { /* announced with the head */
        x->grad_layer[n] = job->last;
        rp_xfer_req *r = &x->grad_requests[n++];
        memset(r, 0, sizeof *r);
        r->dst = rp_engine_tied_grad(e, g);
        r->src = rp_exec_tied_grad(x, job);
        r->bytes = (size_t)(e->p->cfg.vocab_size * e->hidden) * sizeof(float);
        r->cls = RP_XFER_GRAD;
        r->tag = "tied-grads";
        RP_TRY(round_request(x, r, (size_t)((const float *)r->src - x->grads), r->bytes / 4, err));
    }
    /* the gradients (and their roundings) are the kernel ops' results: the
     * downloads come after them, ordered on the device where it is ordered
     * by events, else after a host wait (the last layer synced already
     * without the roundings) */
    if (x->by_events)
        RP_TRY(rp_device_copies_after_compute(x->dev, RP_COPY_DOWN, err));
    else if (x->grads_bf16)
        RP_TRY(rp_device_sync(x->dev, err));
    x->grad_first = job->first;
    x->grad_g = g;
    x->grad_t = t;
    for (int l = job->first; l <= job->last; l++)
        atomic_store(&x->grad_left[l - job->first], 0);
    for (int i = 0; i < n; i++)
        atomic_fetch_add(&x->grad_left[x->grad_layer[i] - job->first], 1);
    for (int l = job->first; l <= job->last; l++) /* a frozen layer: nothing to wait for */
        if (atomic_load(&x->grad_left[l - job->first]) == 0)
            rp_proto_publish_grad(e, l, g, t);
    for (int i = 0; i < n; i++) {
        x->grad_requests[i].done = grad_landed;
        x->grad_requests[i].done_arg = x;
        rp_status s = rp_xfer_submit(x->xfer, &x->grad_requests[i], err);
        x->grads_pending = s == RP_OK ? i + 1 : i;
        RP_TRY(s);
    }
    return widened_by_executor(x) ? rp_stage_grads_landed(x, err) : RP_OK;
}
