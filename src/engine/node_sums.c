/* Sums across nodes in pipeline order (the rule is in node_sums.h): the
 * exchanges of one layer's chain, scatter and all-gather that
 * grad_completion.c and the communication thread start, the waits that keep
 * the other exchanges going meanwhile (rp_node_service), the stop decision
 * riding the top layer's chain, and the exchanges still in flight at a
 * segment's end, completed or abandoned. The thread's loop is node_comm.c;
 * the failure notices node_failure.c. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/node_comm_impl.h"
#include "engine/node_sums.h"
#include "engine/optimizer_impl.h"
#include "engine/protocol.h"
#include "engine/update_gate.h"

/* A message's tag: its part, layer and step (modulo 4: the threads of two
 * nodes are never more than one step apart, the versions see to that). */
static int tag_of(const rp_engine *e, int l, rp_node_part part, int64_t t)
{
    return (int)(((t % 4) * e->num_layers + l) * RP_NODE_PARTS + part);
}

static const char *part_name(rp_node_part part)
{
    switch (part) {
    case RP_NODE_PARTIAL: return "partial gradient sum";
    case RP_NODE_FINAL: return "summed gradient";
    case RP_NODE_BASE: return "partial sum of the tied embedding's head part";
    case RP_NODE_BASE_FINAL: return "summed tied embedding's head part";
    case RP_NODE_LOSSES: return "microbatch losses";
    case RP_NODE_NORMS: return "block norms";
    case RP_NODE_WEIGHTS: return "updated weights";
    case RP_NODE_STOP: return "stop request flag";
    case RP_NODE_STOP_DECISION: return "stop decision";
    default: return "optimizer state";
    }
}

/* A node leader's communication thread: the stop decision of step t on its
 * way from the last node (active), and where it lands; on the last node,
 * the decision it sends. */
static _Thread_local struct {
    int active;
    int64_t t, decision;
    MPI_Request req;
} stop_rx;

/* Set on the node communication thread: its waits keep its exchanges going. */
static _Thread_local rp_engine *comm_thread_of;

void rp_node_comm_thread_mark(rp_engine *e)
{
    comm_thread_of = e;
}


static void start_gather(rp_engine *e, int l, int64_t t);

/* Layer l's all-gather completed: every slice of its update is in. */
void rp_node_gather_done(rp_engine *e, int l)
{
    struct rp_node_pending *p = &e->by_node_comm.node_pending[l];
    p->gn = 0;
    if (l == 0)
        rp_proto_publish_rows(e, p->gt);
    rp_proto_publish_version(e, l, p->gt);
}

/* A summed event held for the stop decision, once that is in. */
static void publish_deferred(rp_engine *e, int l)
{
    struct rp_node_pending *p = &e->by_node_comm.node_pending[l];
    if (p->deferred && !stop_rx.active) {
        p->deferred = 0;
        rp_proto_publish_summed(e, l, p->t);
    }
}

/* A decided stop after step t (the chain of t carried a request): the
 * run's last step is t (with a lagged optimizer t + 1, whose jobs may have
 * started), unless a stop is already decided. */
static void apply_stop(rp_engine *e, int64_t t, int64_t decision)
{
    if (!decision)
        return;
    int64_t cur = atomic_load(e->stop_at);
    while ((cur == 0 || cur == RP_STOP_REQUESTED) &&
           !atomic_compare_exchange_weak(e->stop_at, &cur, rp_gate_stop_last_step(e, t)))
        ;
}

/* Layer l's exchange of step t completed: its summed event, unless the
 * stop decision of a step up to t is still on its way (a later step's jobs
 * could start on the event's consequences before the node knows it stops). */
static void exchange_done(rp_engine *e, int l)
{
    struct rp_node_pending *p = &e->by_node_comm.node_pending[l];
    p->n = 0;
    p->deferred = stop_rx.active && stop_rx.t <= p->t;
    if (!p->deferred)
        rp_proto_publish_summed(e, l, p->t);
}

/* What the communication thread does while it waits for anything: raise
 * the events of the exchanges that completed, start the all-gathers the
 * optimizer handed over. Returns whether anything happened. */
int rp_node_service(rp_engine *e)
{
    int done = 0, moved = 0;
    rp_node_check_failures(e);
    if (stop_rx.active && MPI_Test(&stop_rx.req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
        stop_rx.active = 0;
        apply_stop(e, stop_rx.t, stop_rx.decision);
        moved = 1;
    }
    for (int l = 0; l < e->num_layers; l++) {
        struct rp_node_pending *p = &e->by_node_comm.node_pending[l];
        done = 0;
        if (p->n > 0 && MPI_Testall(p->n, p->req, &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS &&
            done) {
            exchange_done(e, l);
            moved = 1;
        }
        publish_deferred(e, l);
        done = 0;
        if (p->gn > 0 && MPI_Testall(p->gn, p->greq, &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS &&
            done) {
            rp_node_gather_done(e, l);
            moved = 1;
        }
        int64_t posted = atomic_load(&e->by_optimizer.gather_posted[l]);
        if (p->gn == 0 && posted > p->gt) {
            start_gather(e, l, posted);
            moved = 1;
        }
    }
    return moved;
}

/* Between two polls of a waiting thread: 20 us at first, twice as long
 * after each idle poll up to 1 ms, so that a thread that waits long (the
 * communication thread through a whole forward) leaves the cores to the
 * executors and the optimizer. */
void rp_node_idle(long *pause_ns)
{
    struct timespec ts = {0, *pause_ns};
    nanosleep(&ts, NULL);
    *pause_ns = *pause_ns * 2 > 1000000 ? 1000000 : *pause_ns * 2;
}

/* Why a wait of this rank gives up now, or NULL: its node aborted (another
 * rank's failure, told here: the caller's error is an echo), the run was
 * interrupted, the deadline passed; then *s gets the status to return. */
static const char *why_stop(const rp_engine *e, double deadline, rp_status *s)
{
    if (atomic_load(e->abort_flag)) {
        *s = RP_ERR_TIMEOUT;
        return "a rank of this node failed";
    }
    if (rp_interrupted()) {
        *s = RP_ERR_INTERRUPTED;
        return "the run was interrupted";
    }
    if (rp_event_now() <= deadline)
        return NULL;
    *s = RP_ERR_TIMEOUT;
    return "the deadline (--timeout) passed";
}

/* Poll req until it completes, the node aborts, the run is interrupted or
 * --timeout passes; a failure names this rank and the node waited for. */
rp_status rp_node_wait(rp_engine *e, MPI_Request *req, int peer, int l, rp_node_part part,
                       int64_t t, const char *who, rp_error *err)
{
    double deadline = rp_event_deadline(e->o->timeout_s);
    long pause = 20000;
    int done = 0;
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    rp_status s = RP_OK;
    for (long spins = 0;; spins++) {
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            s = rp_error_set(err, RP_ERR_MPI, "rank %d, %s: MPI failed exchanging the %s of "
                             "layer %d (it %lld) with node %d", e->nd.world_rank, who,
                             part_name(part), l, (long long)t, peer);
            break;
        }
        if (done)
            break;
        if (comm_thread_of == e && rp_node_service(e)) /* the other exchanges go on meanwhile */
            pause = 20000;
        const char *why = why_stop(e, deadline, &s);
        if (why) {
            rp_error_set(err, s, "rank %d, %s: stopped waiting for the %s of layer %d (it %lld) "
                         "with node %d: %s", e->nd.world_rank, who, part_name(part), l,
                         (long long)t, peer, why);
            err->echo = rp_engine_aborted(e);
            break;
        }
        if (spins > 100)
            rp_node_idle(&pause);
    }
    if (e->trace) {
        char span[96];
        snprintf(span, sizeof span, "node %d: %s %d (it %lld)", peer, part_name(part), l,
                 (long long)t);
        rp_trace_span(e->trace, RP_TRACK_OPTIMIZER_WAIT, span, t0, rp_trace_now_ns());
    }
    return s;
}

/* A receive given up on (its node stops): cancelled, so that the message,
 * should it come after all, never lands in memory freed meanwhile. */
static void cancel_receive(MPI_Request *req)
{
    if (*req == MPI_REQUEST_NULL)
        return;
    MPI_Cancel(req);
    MPI_Wait(req, MPI_STATUS_IGNORE);
}

/* A send given up on: left to complete on its own (MPI cannot be relied on
 * to cancel a send; the receiving node cancels its side). */
static void drop_send(MPI_Request *req)
{
    if (*req != MPI_REQUEST_NULL)
        MPI_Request_free(req);
}

rp_status rp_node_receive(rp_engine *e, MPI_Comm comm, void *into, int count, MPI_Datatype type,
                          int from, int l, rp_node_part part, int64_t t, const char *who,
                          rp_error *err)
{
    MPI_Request req;
    MPI_Irecv(into, count, type, from, tag_of(e, l, part, t), comm, &req);
    rp_status s = rp_node_wait(e, &req, from, l, part, t, who, err);
    if (s != RP_OK)
        cancel_receive(&req);
    return s;
}

/* Start sending part `part` of layer l, step t, to node `to` on comm,
 * counting training traffic (not a checkpoint's or the stop flags') in
 * node_sent. */
static void post_send_on(rp_engine *e, MPI_Comm comm, const void *what, int count,
                         MPI_Datatype type, int to, int l, rp_node_part part, int64_t t,
                         MPI_Request *req)
{
    int size;
    MPI_Type_size(type, &size);
    if (part < RP_NODE_COLLECT)
        atomic_fetch_add(&e->by_node_comm.node_sent, (uint64_t)count * (uint64_t)size);
    MPI_Isend(what, count, type, to, tag_of(e, l, part, t), comm, req);
}

static void post_send(rp_engine *e, const void *what, int count, MPI_Datatype type, int to,
                      int l, rp_node_part part, int64_t t, MPI_Request *req)
{
    post_send_on(e, e->nd.cross, what, count, type, to, l, part, t, req);
}

rp_status rp_node_send(rp_engine *e, MPI_Comm comm, const void *what, int count, MPI_Datatype type,
                       int to, int l, rp_node_part part, int64_t t, const char *who, rp_error *err)
{
    MPI_Request req;
    post_send_on(e, comm, what, count, type, to, l, part, t, &req);
    rp_status s = rp_node_wait(e, &req, to, l, part, t, who, err);
    if (s != RP_OK)
        drop_send(&req);
    return s;
}

rp_status rp_node_receive_partial(rp_engine *e, int l, rp_node_part part, int64_t t, float *into,
                                  size_t lo, size_t hi, const char *who, rp_error *err)
{
    return rp_node_receive(e, e->nd.cross, into, (int)(hi - lo), MPI_FLOAT, e->nd.node - 1, l, part,
                           t, who, err);
}

rp_status rp_node_pass_on(rp_engine *e, int l, int64_t t, float *acc, double *part,
                          const char *who, rp_error *err)
{
    int me = e->nd.node, last = e->nd.nodes - 1;
    size_t b0, b1, lo, hi, s0, s1, slo, shi;
    rp_engine_share(e, l, e->rank, &b0, &b1, &lo, &hi);
    int nb = (int)(b1 - b0);
    struct rp_node_pending *p = &e->by_node_comm.node_pending[l];
    p->t = t;
    p->n = 0;
    /* node leaders, top layer: a stop asked on any node rides the chain */
    int carry = e->rank == 0 && l == e->num_layers - 1;
    int64_t flag = 0;
    if (carry) {
        if (me > 0)
            RP_TRY(rp_node_receive(e, e->nd.cross, &flag, 1, MPI_INT64_T, me - 1, l, RP_NODE_STOP,
                                   t, who, err));
        int64_t v = atomic_load(e->stop_at);
        flag |= rp_checkpoint_requested() != 0 || v == RP_STOP_REQUESTED;
    }
    if (me < last) { /* sent (the buffer is free), then the final slice may come into it */
        RP_TRY(rp_node_send(e, e->nd.cross, acc + lo, (int)(hi - lo), MPI_FLOAT, me + 1, l,
                            RP_NODE_PARTIAL, t, who, err));
        if (carry) { /* the flag on, the decision back from the last node */
            RP_TRY(rp_node_send(e, e->nd.cross, &flag, 1, MPI_INT64_T, me + 1, l, RP_NODE_STOP, t,
                                who, err));
            stop_rx.active = 1;
            stop_rx.t = t;
            MPI_Irecv(&stop_rx.decision, 1, MPI_INT64_T, last,
                      tag_of(e, l, RP_NODE_STOP_DECISION, t), e->nd.cross, &stop_rx.req);
        }
        rp_engine_slice(e, l, e->rank, me, &s0, &s1, &slo, &shi);
        MPI_Irecv(acc + slo, (int)(shi - slo), MPI_FLOAT, last, tag_of(e, l, RP_NODE_FINAL, t),
                  e->nd.cross, &p->req[p->n++]);
        MPI_Irecv(part + b0, nb, MPI_DOUBLE, last, tag_of(e, l, RP_NODE_NORMS, t), e->nd.cross,
                  &p->req[p->n++]);
        p->peer = last;
        return RP_OK;
    }
    if (carry) { /* the decision: applied here first, then sent with the slices */
        stop_rx.decision = flag;
        apply_stop(e, t, flag);
        for (int n = 0; n < last; n++)
            post_send(e, &stop_rx.decision, 1, MPI_INT64_T, n, l, RP_NODE_STOP_DECISION, t,
                      &p->req[p->n++]);
    }
    for (int n = 0; n < last; n++) { /* in turn: the first node needs it first */
        rp_engine_slice(e, l, e->rank, n, &s0, &s1, &slo, &shi);
        post_send(e, acc + slo, (int)(shi - slo), MPI_FLOAT, n, l, RP_NODE_FINAL, t,
                  &p->req[p->n++]);
        post_send(e, part + b0, nb, MPI_DOUBLE, n, l, RP_NODE_NORMS, t, &p->req[p->n++]);
    }
    p->peer = 0;
    return RP_OK;
}

/* Every exchange of the comm thread in flight completed, each layer's
 * summed event raised. */
rp_status rp_node_drain_pending(rp_engine *e, const char *who, rp_error *err)
{
    if (stop_rx.active) {
        RP_TRY(rp_node_wait(e, &stop_rx.req, e->nd.nodes - 1, e->num_layers - 1,
                            RP_NODE_STOP_DECISION, stop_rx.t, who, err));
        if (stop_rx.active) { /* (service may have taken it meanwhile) */
            stop_rx.active = 0;
            apply_stop(e, stop_rx.t, stop_rx.decision);
        }
    }
    for (int l = 0; l < e->num_layers; l++) {
        struct rp_node_pending *p = &e->by_node_comm.node_pending[l];
        for (int i = 0; i < p->n; i++)
            RP_TRY(rp_node_wait(e, &p->req[i], p->peer, l, RP_NODE_FINAL, p->t, who, err));
        if (p->n > 0)
            exchange_done(e, l);
        publish_deferred(e, l); /* the decision is in */
    }
    return RP_OK;
}

/* The exchanges still in flight when this node failed: the receives
 * cancelled (the store they write into goes with the run), the sends left
 * to complete on their own. Which requests are receives: a chain's (every
 * node but the last; the last node's are its scatter's sends), a gather's
 * first N-1, the stop decision's and the tied base's. */
void rp_node_abandon_exchanges(rp_engine *e)
{
    if (stop_rx.active) {
        cancel_receive(&stop_rx.req);
        stop_rx.active = 0;
    }
    if (rp_node_first(e))
        cancel_receive(&e->by_node_comm.emb_base_req);
    for (int l = 0; e->by_node_comm.node_pending && l < e->num_layers; l++) {
        struct rp_node_pending *p = &e->by_node_comm.node_pending[l];
        for (int i = 0; i < p->n; i++) {
            if (rp_node_last(e))
                drop_send(&p->req[i]);
            else
                cancel_receive(&p->req[i]);
        }
        for (int i = 0; i < p->gn; i++) {
            if (i < e->nd.nodes - 1)
                cancel_receive(&p->greq[i]);
            else
                drop_send(&p->greq[i]);
        }
        p->n = p->gn = 0;
    }
}

/* Post the all-gather of layer l's update of step t: every other node's
 * slice of this rank's share into the compute copy, this node's to them. */
static void start_gather(rp_engine *e, int l, int64_t t)
{
    struct rp_node_pending *p = &e->by_node_comm.node_pending[l];
    size_t es = rp_dtype_size(e->p->compute_dtype), b0, b1, lo, hi;
    char *w = e->p->st[l].compute;
    int tag = tag_of(e, l, RP_NODE_WEIGHTS, t), bytes;
    p->gt = t;
    p->gn = 0;
    for (int n = 0; n < e->nd.nodes; n++) { /* every receive posted before any send */
        if (n == e->nd.node)
            continue;
        rp_engine_slice(e, l, e->rank, n, &b0, &b1, &lo, &hi);
        MPI_Irecv(w + lo * es, (int)((hi - lo) * es), MPI_BYTE, n, tag, e->nd.cross,
                  &p->greq[p->gn++]);
    }
    rp_engine_slice(e, l, e->rank, e->nd.node, &b0, &b1, &lo, &hi);
    bytes = (int)((hi - lo) * es);
    for (int n = 0; n < e->nd.nodes; n++)
        if (n != e->nd.node)
            post_send(e, w + lo * es, bytes, MPI_BYTE, n, l, RP_NODE_WEIGHTS, t,
                      &p->greq[p->gn++]);
}

/* Poll until at(e, l, i, t) (an event of this node's store: layer l, index
 * i, at t), keeping this thread's exchanges going; at the deadline or an
 * abort, fail naming the event (describe). */
static rp_status wait_serviced(rp_engine *e, int (*at)(const rp_engine *, int, int, int64_t),
                               void (*describe)(const rp_engine *, int, int, char *, size_t),
                               int l, int i, int64_t t, double deadline, long *pause,
                               const char *who, rp_error *err)
{
    while (!at(e, l, i, t)) {
        rp_status s;
        const char *why = why_stop(e, deadline, &s);
        if (why) {
            char name[96];
            describe(e, l, i, name, sizeof name);
            rp_error_set(err, s, "rank %d, %s: stopped waiting for event %s (it %lld): %s",
                         e->nd.world_rank, who, name, (long long)t, why);
            err->echo = rp_engine_aborted(e);
            return s;
        }
        if (rp_node_service(e))
            *pause = 20000;
        rp_node_idle(pause);
    }
    return RP_OK;
}

rp_status rp_node_wait_grads(rp_engine *e, int l, int64_t t, const char *who, rp_error *err)
{
    double deadline = rp_event_deadline(e->o->timeout_s * 1.25);
    long pause = 20000;
    for (int g = 0; g < e->pipelines; g++)
        for (int head = 0; head < 1 + (l == 0 && e->tied); head++) {
            int layer = head ? e->num_layers - 1 : l; /* a tied head's part came with the tail */
            RP_TRY(wait_serviced(e, rp_proto_grad_at, rp_proto_describe_grad, layer, g, t,
                                 deadline, &pause, who, err));
        }
    return RP_OK;
}

rp_status rp_node_wait_share_version(rp_engine *e, int l, int64_t t, const char *who,
                                     rp_error *err)
{
    long pause = 20000;
    return wait_serviced(e, rp_proto_version_at, rp_proto_describe_version, l, e->rank, t,
                         rp_event_deadline(e->o->timeout_s * 1.25), &pause, who, err);
}

rp_status rp_node_base_pass_on(rp_engine *e, int64_t t, float *acc, size_t lo, size_t hi,
                               const char *who, rp_error *err)
{
    int count = (int)(hi - lo), me = e->nd.node, last = e->nd.nodes - 1;
    if (me == last)
        return rp_node_send(e, e->nd.cross, acc + lo, count, MPI_FLOAT, 0, 0, RP_NODE_BASE_FINAL, t,
                            who, err);
    RP_TRY(rp_node_send(e, e->nd.cross, acc + lo, count, MPI_FLOAT, me + 1, 0, RP_NODE_BASE, t, who,
                        err));
    if (me == 0) /* sent: the buffer may take the final sum, at the rows' time */
        MPI_Irecv(acc + lo, count, MPI_FLOAT, last, tag_of(e, 0, RP_NODE_BASE_FINAL, t),
                  e->nd.cross, &e->by_node_comm.emb_base_req);
    return RP_OK;
}

rp_status rp_node_base_wait(rp_engine *e, int64_t t, const char *who, rp_error *err)
{
    return rp_node_wait(e, &e->by_node_comm.emb_base_req, e->nd.nodes - 1, 0, RP_NODE_BASE_FINAL, t,
                        who, err);
}
