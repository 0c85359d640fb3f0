/* Activation saves through staging slots (memory_model.h's
 * rp_saves_staged): a save (a forward's checkpoint or output, a backward's
 * input gradient) copies the activation on the device into the next of
 * RP_SAVE_SLOTS slots (rounded to the activation dtype there where it is
 * bf16), queues the slot's download and returns: the executor goes on
 * computing, and overwriting the activation, while the download runs. The
 * host-store event that hands a save to its consumer (protocol.h's fwd_out
 * or bwd_out) is published when the download has landed, on the transfer
 * engine's thread: a stage's saves all go in the save class, whose
 * requests finish in the order submitted, so when a microbatch's last save
 * (the one that publishes) has landed, its earlier ones (checkpoints) have
 * too. A failed save stops the run (rp_engine_fail) and publishes nothing
 * after it.
 *
 * Waits: a slot is written again only once its previous download has
 * landed (the host waits for it; that is a save RP_SAVE_SLOTS saves back,
 * so only a link that far behind holds the executor), and the downloads
 * start after the kernel ops that made the slot's bytes, ordered on the
 * device where it is ordered by events (rp_device_copies_after_compute). */
#include <string.h>

#include "device/backend.h"
#include "engine/executor_impl.h"
#include "engine/memory_model.h"
#include "engine/protocol.h"

void rp_exec_publish(rp_engine *e, const rp_save_publish *p)
{
    if (p && p->kind == RP_SAVE_PUBLISH_FWD_OUT)
        rp_proto_publish_fwd_out(e, p->stage, p->micro, p->t);
    else if (p && p->kind == RP_SAVE_PUBLISH_BWD_OUT)
        rp_proto_publish_bwd_out(e, p->stage, p->micro, p->t);
}

/* A save has ended (on the transfer engine's thread). */
static void save_landed(rp_xfer_req *r, void *arg, rp_xfer_state state)
{
    executor *x = arg;
    if (state == RP_XFER_FAILED)
        rp_engine_fail(x->e, r->status, &r->err);
    if (state == RP_XFER_DONE && !rp_engine_aborted(x->e))
        rp_exec_publish(x->e, &x->save_publish[r - x->save_req]);
}

rp_status rp_exec_save_staged(executor *x, void *host, const float *dev, rp_dtype dtype,
                              const char *tag, const rp_save_publish *publish, rp_error *err)
{
    rp_engine *e = x->e;
    const int s = x->save_next;
    rp_xfer_req *r = &x->save_req[s];
    RP_TRY(rp_xfer_wait(x->xfer, r, err)); /* the slot's last download has read it */
    x->save_next = (s + 1) % RP_SAVE_SLOTS;
    rp_kernels k;
    RP_TRY(rp_device_kernels(x->dev, &k, err));
    const size_t bytes = e->act_floats * rp_dtype_size(dtype);
    if (dtype == RP_F32)
        RP_TRY(k.ops->copy(k.state, x->save_slot[s], dev, bytes, err));
    else
        RP_TRY(k.ops->convert(k.state, dev, RP_F32, x->save_slot[s], dtype,
                              (int64_t)e->act_floats, err));
    RP_TRY(rp_device_copies_after_compute(x->dev, RP_COPY_DOWN, err));
    memset(r, 0, sizeof *r);
    r->dst = host;
    r->src = x->save_slot[s];
    r->bytes = bytes;
    r->cls = RP_XFER_SAVE;
    r->tag = tag;
    r->done = save_landed;
    r->done_arg = x;
    x->save_publish[s] = publish ? *publish : (rp_save_publish){.kind = RP_SAVE_PUBLISH_NONE};
    return rp_xfer_submit(x->xfer, r, err);
}

rp_status rp_exec_saves_landed(executor *x, rp_error *err)
{
    rp_status s = RP_OK;
    for (int i = 0; i < RP_SAVE_SLOTS; i++) { /* every one, whatever failed */
        rp_error mine = {0};
        rp_status si = rp_xfer_wait(x->xfer, &x->save_req[i], &mine);
        if (si != RP_OK && s == RP_OK) {
            s = si;
            *err = mine;
        }
    }
    return s;
}
