/* The end of a tail or backward job: the stage's gradients, accumulated on
 * the device over the job's microbatches, downloaded once into its
 * pipeline's host buffers (rounded to bf16 on the way with --grad-dtype
 * bf16), after the update gate says those buffers are free, and announced
 * to the optimizer layer by layer (protocol.h's grad event). */
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

rp_status rp_stage_download_grads(executor *x, const rp_job *job, int64_t t, int g, rp_error *err)
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
    if (rp_stage_needs_tied(e, job)) {
        rp_xfer_req *r = &x->grad_requests[n++];
        memset(r, 0, sizeof *r);
        r->dst = rp_engine_tied_grad(e, g);
        r->src = rp_exec_tied_grad(x, job);
        r->bytes = (size_t)(e->p->cfg.vocab_size * e->hidden) * sizeof(float);
        r->cls = RP_XFER_GRAD;
        r->tag = "tied-grads";
        RP_TRY(round_request(x, r, (size_t)((const float *)r->src - x->grads), r->bytes / 4, err));
    }
    if (x->grads_bf16) /* the roundings are queued on the compute stream */
        RP_TRY(rp_device_sync(x->dev, err));
    for (int i = 0; i < n; i++)
        RP_TRY(rp_xfer_submit(x->xfer, &x->grad_requests[i], err));
    for (int i = 0; i < n; i++) {
        RP_TRY(rp_xfer_wait(x->xfer, &x->grad_requests[i], err));
        if (x->grads_bf16)
            rp_bf16_widen_in_place(x->grad_requests[i].dst, x->grad_requests[i].bytes / 2);
    }
    for (int l = job->last; l >= job->first; l--)
        rp_proto_publish_grad(e, l, g, t);
    return RP_OK;
}
