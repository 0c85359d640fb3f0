/* The update gate (see update_gate.h for the table): the one place that
 * decides when a layer's update may run and which version a job may read. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/checkpoint_steps.h"
#include "engine/engine_impl.h"
#include "engine/protocol.h"
#include "engine/update_gate.h"
#include "io/trace.h"
#include "optim/clip.h"

rp_gate_order rp_gate_order_of(const rp_engine *e)
{
    if (e->o->optimizer_lag)
        return RP_GATE_LAGGED;
    return e->o->grad_clip > 0 ? RP_GATE_BY_NEED : RP_GATE_AS_SUMMED;
}

uint64_t rp_gate_version_read(const rp_engine *e, int64_t t)
{
    int64_t v = t - 1 - e->o->optimizer_lag;
    return v > 0 ? (uint64_t)v : 0;
}

/* The step whose update made version v: past a stop's last step, a wait
 * for it returns RP_STOP. A lagged run that stops after step v leaves v's
 * update pending, so v belongs to step v + 1. (On several nodes a node's
 * executors may start a job of the step after the last before the decision
 * reaches them; such a job waits for that version.) */
static int64_t step_of_version(const rp_engine *e, uint64_t v)
{
    return (int64_t)v + e->o->optimizer_lag;
}

/* An embedding a job reads only through its tokens needs only the rows the
 * tokens read (updated first); every other layer its whole version. */
static int rows_only(int l, int tied_head)
{
    return l == 0 && !tied_head;
}

rp_status rp_gate_wait_layer_weights(rp_engine *e, int l, int tied_head, int64_t t,
                                     const char *who, rp_error *err)
{
    uint64_t need = rp_gate_version_read(e, t);
    return rp_proto_wait_layer(e, l, rows_only(l, tied_head), need, step_of_version(e, need),
                               who, 0, err);
}

int rp_gate_layer_weights_ready(const rp_engine *e, int l, int tied_head, int64_t t)
{
    return rp_proto_layer_at(e, l, rows_only(l, tied_head), rp_gate_version_read(e, t));
}

int rp_gate_weights_before_compute(const rp_engine *e)
{
    return e->o->optimizer_lag != 0 || e->boundary_before;
}

int rp_gate_boundary_before_switch(void)
{
    const char *v = getenv("RP_TEST_STEP_BOUNDARY_BEFORE");
    return v && strcmp(v, "1") == 0;
}

/* The host buffers of step t-1 must have been consumed by its update
 * (always true with exact semantics; with a lagged optimizer the update may
 * trail). The embedding's rows, and a tied head's part, once the
 * embedding's gradient was summed (waiting for its update would deadlock a
 * lagged optimizer, whose update of the embedding waits for this step's
 * later uploads). */
rp_status rp_gate_wait_grad_buffers(rp_engine *e, int first, int last, int tied_head, int64_t t,
                                    const char *who, rp_error *err)
{
    uint64_t before = (uint64_t)(t - 1);
    for (int l = first; l <= last; l++)
        RP_TRY(l == 0 ? rp_proto_wait_summed(e, 0, t - 1, who, 0, err)
                      : rp_proto_wait_layer(e, l, 0, before, step_of_version(e, before), who, 0,
                                            err));
    if (tied_head)
        RP_TRY(rp_proto_wait_summed(e, 0, t - 1, who, 0, err));
    return RP_OK;
}

int64_t rp_gate_embedding_sum_after(const rp_engine *e, int64_t t)
{
    if (e->nd.nodes == 1 || !e->o->optimizer_lag) /* t-1's update came first */
        return -1;
    return t - 1;
}

rp_status rp_gate_wait_slice_summed(rp_engine *e, int l, int64_t t, const char *who,
                                    rp_error *err)
{
    return rp_proto_wait_summed_share(e, l, e->rank, t, who, err);
}

rp_status rp_gate_wait_global_sumsq(rp_engine *e, int64_t t, const char *who, double *total,
                                    rp_error *err)
{
    for (int l = 0; l < e->num_layers; l++)
        RP_TRY(rp_proto_wait_summed(e, l, t, who, 1, err));
    double sum = 0.0;
    for (int l = 0; l < e->num_layers; l++) {
        size_t block, nblk = rp_clip_blocks(e->p->layers[l].numel, &block);
        const double *part = rp_engine_sumsq(e, t, l);
        double layer = 0.0; /* as rp_clip_sumsq adds its blocks */
        for (size_t b = 0; b < nblk; b++)
            layer += part[b];
        sum += layer;
    }
    *total = sum;
    return RP_OK;
}

/* With --optimizer-lag 1 the update of step t may only change layer l once
 * every job of step t+1 that reads l has uploaded it. A run that stops
 * after step t leaves t's update pending (its checkpoint holds the
 * gradient): RP_STOP. That is read from the stop decision, not from whether
 * t+1's uploads happened: on several nodes a node's executors may start a
 * job of t+1 before the decision reaches them (it is made on the last
 * node), but never its optimizer the update of t (the decision comes before
 * t's summed gradients), so every node leaves the same update. */
int rp_gate_layer_trained(const rp_engine *e, int l)
{
    return e->p->layers[l].numel > 0;
}

static rp_status wait_lag(rp_engine *e, int l, int64_t t, const char *who, rp_error *err)
{
    if (!e->o->optimizer_lag || t >= e->it_last || !rp_gate_layer_trained(e, l))
        return RP_OK;
    if (rp_proto_stopped(e, t + 1))
        return RP_STOP;
    for (int g = 0; g < e->pipelines; g++) {
        RP_TRY(rp_proto_wait_uploaded(e, 0, l, g, t + 1, who, err));
        if (l < rp_plan_tail_first(&e->plan))
            RP_TRY(rp_proto_wait_uploaded(e, 1, l, g, t + 1, who, err));
        if (l == 0 && e->tied) /* the tail reads the embedding as its LM head */
            RP_TRY(rp_proto_wait_uploaded(e, 0, e->num_layers - 1, g, t + 1, who, err));
    }
    return RP_OK;
}

/* Hold the update of step t of layer l until the checkpoint that needs the
 * layer's state before it has it: the checkpoint of step t-1 (its state
 * after its update), or with a lagged optimizer of step t (its state
 * before, with the gradient). The one rule of the writer's back-pressure;
 * the time held is counted for the writer's report. */
static rp_status wait_checkpoint(rp_engine *e, int l, int64_t t, const char *who, rp_error *err)
{
    int64_t c = e->o->optimizer_lag ? t : t - 1;
    if (!rp_checkpoint_in_segment(e, c))
        return RP_OK;
    uint64_t t0 = rp_trace_now_ns();
    rp_status s = rp_proto_wait_written(e, l, c, who, err);
    atomic_fetch_add(&e->by_optimizer.ck_held_ns, rp_trace_now_ns() - t0);
    return s;
}

rp_status rp_gate_wait_update(rp_engine *e, int l, int64_t t, const char *who, rp_error *err)
{
    RP_TRY(wait_lag(e, l, t, who, err));
    return wait_checkpoint(e, l, t, who, err);
}

int rp_gate_fused(const rp_engine *e, int l, int skip)
{
    return rp_gate_order_of(e) == RP_GATE_AS_SUMMED && !skip && l > 0;
}

int rp_gate_may_speculate(const rp_engine *e, int skip)
{
    return e->speculative && rp_gate_order_of(e) == RP_GATE_BY_NEED && !skip;
}

/* Whether everything this rank's sums of the layers below l wait for is in
 * (the backward is over for this rank: one node, every pipeline's gradient
 * of each of them; several nodes, the communication thread's sum of this
 * rank's slice of each). Polled, no wait. */
static int below_all_in(const rp_engine *e, int l, int64_t t)
{
    for (int k = 0; k < l; k++) {
        if (e->nd.nodes > 1) {
            if (!rp_proto_summed_share_at(e, k, e->rank, t))
                return 0;
            continue;
        }
        for (int g = 0; g < e->pipelines; g++)
            if (!rp_proto_grad_at(e, k, g, t))
                return 0;
    }
    return 1;
}

int rp_gate_speculates(const rp_engine *e, int l, int64_t t, int skip)
{
    /* RP_FAULT_STOP_BEFORE_NORM's step: every share, whatever the timing,
     * so that its stop always has speculated updates to abandon */
    int planted = e->fault_stop_step > 0 && t == e->fault_stop_step;
    return rp_gate_may_speculate(e, skip) && l > 0 && (planted || !below_all_in(e, l, t));
}

void rp_gate_update_done(rp_engine *e, int l, int64_t t, int updated)
{
    if (e->nd.nodes > 1 && updated) { /* the communication thread gathers, then publishes */
        atomic_store(&e->by_optimizer.gather_posted[l], t);
        return;
    }
    if (l == 0)
        rp_proto_publish_rows(e, t);
    rp_proto_publish_version(e, l, t);
}

rp_status rp_gate_wait_checkpoint_state(rp_engine *e, int l, int64_t c, int pending,
                                        const char *who, rp_error *err)
{
    return pending ? rp_proto_wait_summed(e, l, c, who, 1, err)
                   : rp_proto_wait_layer(e, l, 0, (uint64_t)c, step_of_version(e, (uint64_t)c),
                                         who, 1, err);
}

int rp_gate_checkpoint_pending(const rp_engine *e, int64_t c)
{
    return e->o->optimizer_lag && c < e->steps;
}

int64_t rp_gate_stop_last_step(const rp_engine *e, int64_t t)
{
    return t + e->o->optimizer_lag;
}
