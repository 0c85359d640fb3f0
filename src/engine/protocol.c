/* The event protocol (see protocol.h for the table): counter indices and the
 * waits and signals of every kind. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "engine/protocol.h"
#include "engine/wait_board.h"
#include "io/checkpoint.h"

/* ---- indices: the one place they are computed ---------------------------- */

/* slot_free indices: 0 the loss ring, then the forward stages' outputs, the
 * layers' checkpoints and the backward stages' input gradients. */
static int slot_fwd(const rp_engine *e, int s) { (void)e; return 1 + s; }
static int slot_ckpt(const rp_engine *e, int l) { return 1 + e->plan.nfwd + l; }
static int slot_bwd(const rp_engine *e, int i)
{
    return 1 + e->plan.nfwd + e->num_layers + i;
}
static int slot_count(const rp_engine *e)
{
    return 1 + e->plan.nfwd + e->num_layers + e->plan.nbwd;
}

/* uploaded indices: weights of layer l uploaded by a forward job, or by a
 * tail/backward job, of iteration t. Odd and even iterations count apart:
 * with a lagged optimizer iterations 1 and 2 both read version 0 and may
 * upload in either order; within one parity the order is enforced. */
static int uploaded_index(const rp_engine *e, int forward_job, int l, int64_t t)
{
    return (int)(t % 2) * 2 * e->num_layers + (forward_job ? 0 : e->num_layers) + l;
}

void rp_proto_dims(const rp_engine *e, rp_event_dims *dims)
{
    memset(dims, 0, sizeof *dims);
    dims->count[RP_EV_FWD_OUT] = e->plan.nfwd;
    dims->micro[RP_EV_FWD_OUT] = (int)e->microbatches;
    dims->count[RP_EV_BWD_OUT] = e->plan.nbwd;
    dims->micro[RP_EV_BWD_OUT] = (int)e->microbatches;
    dims->count[RP_EV_GRAD] = e->num_layers;
    dims->micro[RP_EV_GRAD] = e->pipelines;
    dims->count[RP_EV_VERSION] = e->num_layers;
    dims->micro[RP_EV_VERSION] = e->size;
    dims->count[RP_EV_SLOT_FREE] = slot_count(e);
    dims->micro[RP_EV_SLOT_FREE] = (int)e->microbatches;
    dims->count[RP_EV_UPLOADED] = 4 * e->num_layers;
    dims->micro[RP_EV_UPLOADED] = e->pipelines;
    dims->count[RP_EV_SUMMED] = e->num_layers;
    dims->micro[RP_EV_SUMMED] = e->size;
    dims->count[RP_EV_ROWS] = 1;
    dims->micro[RP_EV_ROWS] = e->size;
    dims->count[RP_EV_WRITTEN] = e->num_layers;
    dims->micro[RP_EV_WRITTEN] = 1;
    for (int k = 0; k < RP_EV_KIND_COUNT; k++)
        if (dims->micro[k] == 0)
            dims->micro[k] = 1;
}

/* RP_FAULT_DROP_SIGNAL=KIND:INDEX:MICRO (KIND as rp_event_describe names
 * it) makes that event's producer never signal: a planted deadlock for
 * testing that every wait ends at its deadline with a message naming it. */
void rp_proto_read_fault(rp_engine *e)
{
    e->drop_kind = -1;
    const char *stop = getenv("RP_FAULT_STOP_BEFORE_NORM");
    char *end = NULL;
    long long k = stop && *stop ? strtoll(stop, &end, 10) : 0;
    e->fault_stop_step = !stop || !*stop ? 0 : *end == '\0' && k >= 2 ? (int64_t)k : -1;
    const char *f = getenv("RP_FAULT_DROP_SIGNAL");
    char name[16];
    int index, micro;
    if (!f || sscanf(f, "%15[a-z_]:%d:%d", name, &index, &micro) != 3)
        return;
    for (int k = 0; k < RP_EV_KIND_COUNT; k++)
        if (strcmp(name, rp_event_kind_name((rp_event_kind)k)) == 0) {
            e->drop_kind = k;
            e->drop_index = index;
            e->drop_micro = micro;
        }
}

/* ---- the two primitives -------------------------------------------------- */

/* A wait that stops for rp_interrupt(): the step is the awaited iteration
 * (rp_train_run rewrites the message with the steps logged). */
static rp_status interrupted(rp_engine *e, uint64_t value, rp_error *err)
{
    int64_t step = (int64_t)value < e->it_first ? e->it_first : (int64_t)value;
    rp_status s = rp_error_set(err, RP_ERR_INTERRUPTED, "interrupted at step %lld of %lld",
                               (long long)(step < e->steps ? step : e->steps),
                               (long long)e->steps);
    rp_engine_fail(e, s, err);
    return s;
}

/* ---- stopping after a step ------------------------------------------------ */

/* The step the run stops after, once decided (0: none, or not yet). */
static int64_t stop_step(const rp_engine *e)
{
    int64_t v = atomic_load(e->stop_at);
    while (v == RP_STOP_PENDING) /* being decided: a few instructions */
        v = atomic_load(e->stop_at);
    return v == RP_STOP_REQUESTED ? 0 : v;
}

int rp_proto_stopped(const rp_engine *e, int64_t t)
{
    int64_t v = e->stop_at ? stop_step(e) : 0;
    return v != 0 && t > v;
}

/* A stop after the step in progress was asked (SIGTERM, SIGUSR1): rank 0
 * says so at once, once, with the newest complete checkpoint, which is what
 * is kept should the run be killed before its own is written (mpirun kills
 * its ranks a second after the SIGTERM it sends on Ctrl-C). Any thread. */
static void stop_notice(rp_engine *e)
{
    int sig = rp_checkpoint_requested();
    if (!sig || e->nd.world_rank != 0 || !e->o->checkpoint_dir ||
        atomic_exchange(&e->stop_noticed, 1))
        return;
    char newest[4096];
    rp_error err;
    if (rp_checkpoint_latest(e->o->checkpoint_dir, newest, sizeof newest, &err) != RP_OK)
        newest[0] = '\0';
    rp_log(e->lg, RP_LOG_INFO, "%s: stopping after the step in progress with its checkpoint (a "
           "second signal stops at once); until that is written, kept: %s",
           sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM", newest[0] ? newest : "no checkpoint");
}

/* Before an executor starts a job of step t: it records t as started, then
 * reads the stop step. The first executor to see a stop request decides it:
 * it marks the decision pending, reads the highest step started and makes
 * that the last. An executor that recorded its step before that read runs
 * it (it is at most the last); one that recorded it after sees the
 * decision, pending or made, and a later step than the last: so every job
 * of the steps up to the last runs on every rank, and none after. */
int rp_proto_stop_before(rp_engine *e, int64_t t)
{
    if (!e->stop_at)
        return 0;
    int64_t cur = atomic_load(e->started);
    while (cur < t && !atomic_compare_exchange_weak(e->started, &cur, t))
        ;
    int64_t none = 0;
    if (e->nd.nodes > 1) { /* the nodes decide together, along the chain (node_sums.h) */
        if (rp_checkpoint_requested())
            atomic_compare_exchange_strong(e->stop_at, &none, RP_STOP_REQUESTED);
        return rp_proto_stopped(e, t);
    }
    if (rp_checkpoint_requested() && atomic_load(e->stop_at) == 0 &&
        atomic_compare_exchange_strong(e->stop_at, &none, RP_STOP_PENDING))
        atomic_store(e->stop_at, atomic_load(e->started));
    return rp_proto_stopped(e, t);
}

/* RP_FAULT_STOP_BEFORE_NORM=STEP: the stop no request can decide (a
 * request makes the highest step started the last, and a step's gradients
 * come from its jobs), so that a step's speculative updates are abandoned
 * (optimizer.c) and the stop's checkpoint reads what they restored. */
rp_status rp_proto_fault_stop(rp_engine *e, int64_t t, rp_error *err)
{
    if (e->fault_stop_step == 0 || (e->fault_stop_step > 0 && t != e->fault_stop_step))
        return RP_OK;
    const char *why = e->fault_stop_step < 0      ? "not a step number of 2 or more"
                      : e->nd.nodes > 1           ? "one node only (several decide a stop "
                                                    "together, node_sums.h)"
                      : !e->o->checkpoint_dir     ? "no --checkpoint-dir (a stop writes one)"
                      : e->o->grad_clip <= 0      ? "no --grad-clip (without clipping every "
                                                    "update is made as its gradient is summed)"
                      : e->o->optimizer_lag       ? "--optimizer-lag 1 (a stop leaves its "
                                                    "update pending)"
                                                  : NULL;
    if (why)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "RP_FAULT_STOP_BEFORE_NORM=%s: %s",
                            getenv("RP_FAULT_STOP_BEFORE_NORM"), why);
    int64_t none = 0;
    if (e->nd.world_rank != 0 || !atomic_compare_exchange_strong(e->stop_at, &none, t - 1))
        return RP_OK;
    rp_request_checkpoint(SIGUSR1); /* after the decision: an executor that sees it decides none */
    return RP_STOP;
}

/* rp_event_wait with the run's deadline that also gives up when another
 * rank aborted or the run was interrupted, and returns RP_STOP when the
 * awaited value belongs to a step (`step`) after the one the run stops
 * after. */
static rp_status wait_for_step(rp_engine *e, rp_event_kind kind, int index, int micro,
                               uint64_t value, int64_t step, const char *job, int background,
                               rp_error *err)
{
    rp_event_name ev = {kind, index, micro};
    /* checked before the fast path too: in a pipeline that keeps up, a wait
     * may never get to the slices below */
    if (rp_interrupted())
        return interrupted(e, value, err);
    if (rp_checkpoint_requested()) /* said at once: a kill may follow soon */
        stop_notice(e);
    if (rp_event_value(e->ev, ev) >= value)
        return RP_OK;
    double deadline = rp_event_deadline(e->o->timeout_s * (background ? 1.25 : 1.0));
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    rp_status s = RP_OK;
    int posted = rp_wait_board_post(e->wait_board, e->rank, ev, value);
    for (;;) {
        /* wait in slices so an abort elsewhere is noticed quickly */
        double now = rp_event_now(), slice = now + 0.05;
        s = rp_event_wait(e->ev, ev, value, slice < deadline ? slice : deadline, job, err);
        if (s == RP_OK || slice >= deadline)
            break;
        if (rp_interrupted()) {
            s = interrupted(e, value, err);
            break;
        }
        if (rp_proto_stopped(e, step)) {
            s = RP_STOP;
            break;
        }
        int64_t who = atomic_load(e->abort_flag);
        if (who != 0) {
            char name[96];
            rp_event_describe(e->ev, ev, name, sizeof name);
            s = rp_error_echo(err, RP_ERR_TIMEOUT, "rank %d, job %s: stopped waiting for event "
                              "%s: value %llu, awaited %llu, because rank %d failed",
                              e->nd.world_rank, job ? job : "-", name,
                              (unsigned long long)rp_event_value(e->ev, ev),
                              (unsigned long long)value, e->nd.world_of[who - 1]);
            break;
        }
    }
    if (s == RP_ERR_TIMEOUT && err && !err->echo) /* this rank's own wait ran out */
        rp_wait_board_append(e->wait_board, e->size, e->nd.world_of, e->rank, posted, e->ev,
                             err->msg, sizeof err->msg);
    rp_wait_board_clear(e->wait_board, e->rank, posted);
    if (e->trace) {
        char name[96];
        rp_event_describe(e->ev, ev, name, sizeof name);
        rp_trace_span(e->trace, background ? RP_TRACK_OPTIMIZER_WAIT : RP_TRACK_WAIT, name, t0,
                      rp_trace_now_ns());
    }
    return s;
}

/* A wait whose value is its step. */
static rp_status wait(rp_engine *e, rp_event_kind kind, int index, int micro, uint64_t value,
                      const char *job, int background, rp_error *err)
{
    return wait_for_step(e, kind, index, micro, value, (int64_t)value, job, background, err);
}

static void publish(rp_engine *e, rp_event_kind kind, int index, int micro, int64_t t)
{
    if ((int)kind == e->drop_kind && index == e->drop_index && micro == e->drop_micro)
        return; /* a planted deadlock (RP_FAULT_DROP_SIGNAL) */
    rp_event_signal(e->ev, (rp_event_name){kind, index, micro}, (uint64_t)t);
}

/* Back-pressure: the consumers of iteration t-1 are done with the slot. */
static rp_status wait_slot(rp_engine *e, int slot, int m, int64_t t, const char *job,
                           rp_error *err)
{
    return t <= 1 ? RP_OK : wait(e, RP_EV_SLOT_FREE, slot, m, (uint64_t)(t - 1), job, 0, err);
}

/* Counted per rank share: every rank's counter of (kind, index). */
static rp_status wait_shares(rp_engine *e, rp_event_kind kind, int index, uint64_t need,
                             int64_t step, const char *job, int background, rp_error *err)
{
    for (int r = 0; r < e->size; r++)
        RP_TRY(wait_for_step(e, kind, index, r, need, step, job, background, err));
    return RP_OK;
}

/* ---- activations --------------------------------------------------------- */

rp_status rp_proto_wait_fwd_out(rp_engine *e, int stage, int m, int64_t t, const char *job,
                                rp_error *err)
{
    return wait(e, RP_EV_FWD_OUT, stage, m, (uint64_t)t, job, 0, err);
}

void rp_proto_fwd_out_read(rp_engine *e, int stage, int m, int64_t t)
{
    publish(e, RP_EV_SLOT_FREE, slot_fwd(e, stage), m, t);
}

rp_status rp_proto_wait_fwd_out_free(rp_engine *e, int stage, int m, int64_t t, const char *job,
                                     rp_error *err)
{
    return wait_slot(e, slot_fwd(e, stage), m, t, job, err);
}

void rp_proto_publish_fwd_out(rp_engine *e, int stage, int m, int64_t t)
{
    publish(e, RP_EV_FWD_OUT, stage, m, t);
}

rp_status rp_proto_wait_checkpoint_free(rp_engine *e, int layer, int m, int64_t t,
                                        const char *job, rp_error *err)
{
    return wait_slot(e, slot_ckpt(e, layer), m, t, job, err);
}

void rp_proto_checkpoint_read(rp_engine *e, int layer, int m, int64_t t)
{
    publish(e, RP_EV_SLOT_FREE, slot_ckpt(e, layer), m, t);
}

rp_status rp_proto_wait_bwd_out(rp_engine *e, int stage, int m, int64_t t, const char *job,
                                rp_error *err)
{
    return wait(e, RP_EV_BWD_OUT, stage, m, (uint64_t)t, job, 0, err);
}

void rp_proto_bwd_out_read(rp_engine *e, int stage, int m, int64_t t)
{
    publish(e, RP_EV_SLOT_FREE, slot_bwd(e, stage), m, t);
}

rp_status rp_proto_wait_bwd_out_free(rp_engine *e, int stage, int ends_at_embedding, int m,
                                     int64_t t, const char *job, rp_error *err)
{
    if (!ends_at_embedding) /* its buffer's last reader (arena.h) */
        return wait_slot(e, slot_bwd(e, e->arena.bwd_out_last[stage]), m, t, job, err);
    return t <= 1 ? RP_OK : wait(e, RP_EV_BWD_OUT, stage, m, (uint64_t)(t - 1), job, 0, err);
}

void rp_proto_publish_bwd_out(rp_engine *e, int stage, int m, int64_t t)
{
    publish(e, RP_EV_BWD_OUT, stage, m, t);
}

/* ---- losses -------------------------------------------------------------- */

rp_status rp_proto_wait_losses_free(rp_engine *e, int64_t t, const char *job, rp_error *err)
{
    if (t <= RP_ARENA_RING)
        return RP_OK;
    return wait(e, RP_EV_SLOT_FREE, 0, 0, (uint64_t)(t - RP_ARENA_RING), job, 0, err);
}

rp_status rp_proto_wait_losses(rp_engine *e, int64_t t, const char *job, rp_error *err)
{
    /* the tail (backward stage 0) of pipeline g signals its last microbatch */
    for (int g = 0; g < e->pipelines; g++)
        RP_TRY(wait(e, RP_EV_BWD_OUT, 0, (int)((g + 1) * e->micro_per_pipeline - 1), (uint64_t)t,
                    job, 1, err));
    return RP_OK;
}

void rp_proto_losses_read(rp_engine *e, int64_t t)
{
    publish(e, RP_EV_SLOT_FREE, 0, 0, t);
}

/* ---- weights ------------------------------------------------------------- */

rp_status rp_proto_wait_layer(rp_engine *e, int l, int rows_only, uint64_t version,
                              int64_t step, const char *job, int background, rp_error *err)
{
    return wait_shares(e, rows_only ? RP_EV_ROWS : RP_EV_VERSION, l, version, step, job,
                       background, err);
}

int rp_proto_layer_at(const rp_engine *e, int l, int rows_only, uint64_t version)
{
    for (int r = 0; r < e->size; r++)
        if (rp_event_value(e->ev, (rp_event_name){rows_only ? RP_EV_ROWS : RP_EV_VERSION, l, r}) <
            version)
            return 0;
    return 1;
}

void rp_proto_publish_version(rp_engine *e, int l, int64_t t)
{
    publish(e, RP_EV_VERSION, l, e->rank, t);
}

int rp_proto_version_at(const rp_engine *e, int l, int r, int64_t t)
{
    return rp_event_value(e->ev, (rp_event_name){RP_EV_VERSION, l, r}) >= (uint64_t)t;
}

void rp_proto_describe_version(const rp_engine *e, int l, int r, char *buf, size_t len)
{
    rp_event_describe(e->ev, (rp_event_name){RP_EV_VERSION, l, r}, buf, len);
}

void rp_proto_publish_rows(rp_engine *e, int64_t t)
{
    publish(e, RP_EV_ROWS, 0, e->rank, t);
}

void rp_proto_publish_uploaded(rp_engine *e, int forward_job, int l, int g, int64_t t)
{
    publish(e, RP_EV_UPLOADED, uploaded_index(e, forward_job, l, t), g, t);
}

rp_status rp_proto_wait_uploaded(rp_engine *e, int forward_job, int l, int g, int64_t t,
                                 const char *job, rp_error *err)
{
    return wait(e, RP_EV_UPLOADED, uploaded_index(e, forward_job, l, t), g, (uint64_t)t, job, 1,
                err);
}

/* ---- gradients ----------------------------------------------------------- */

void rp_proto_publish_grad(rp_engine *e, int l, int g, int64_t t)
{
    publish(e, RP_EV_GRAD, l, g, t);
}

int rp_proto_grad_at(const rp_engine *e, int l, int g, int64_t t)
{
    return rp_event_value(e->ev, (rp_event_name){RP_EV_GRAD, l, g}) >= (uint64_t)t;
}

void rp_proto_describe_grad(const rp_engine *e, int l, int g, char *buf, size_t len)
{
    rp_event_describe(e->ev, (rp_event_name){RP_EV_GRAD, l, g}, buf, len);
}

rp_status rp_proto_wait_grad(rp_engine *e, int l, int g, int64_t t, const char *job,
                             rp_error *err)
{
    return wait(e, RP_EV_GRAD, l, g, (uint64_t)t, job, 1, err);
}

void rp_proto_publish_summed(rp_engine *e, int l, int64_t t)
{
    publish(e, RP_EV_SUMMED, l, e->rank, t);
}

int rp_proto_summed_share_at(const rp_engine *e, int l, int r, int64_t t)
{
    return rp_event_value(e->ev, (rp_event_name){RP_EV_SUMMED, l, r}) >= (uint64_t)t;
}

rp_status rp_proto_wait_summed_share(rp_engine *e, int l, int r, int64_t t, const char *job,
                                     rp_error *err)
{
    return wait(e, RP_EV_SUMMED, l, r, (uint64_t)t, job, 1, err);
}

rp_status rp_proto_wait_summed(rp_engine *e, int l, int64_t t, const char *job, int background,
                               rp_error *err)
{
    return wait_shares(e, RP_EV_SUMMED, l, (uint64_t)t, t, job, background, err);
}

/* ---- checkpoints written while training goes on -------------------------- */

void rp_proto_publish_written(rp_engine *e, int l, int64_t step)
{
    publish(e, RP_EV_WRITTEN, l, 0, step);
}

rp_status rp_proto_wait_written(rp_engine *e, int l, int64_t step, const char *job,
                                rp_error *err)
{
    return wait(e, RP_EV_WRITTEN, l, 0, (uint64_t)step, job, 1, err);
}
