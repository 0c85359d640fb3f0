/* Sums across nodes in pipeline order (the rule is in node_sums.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "engine/node_sums.h"

#define NODE_PARTS 5

static int tag_of(const rp_engine *e, int l, rp_node_part part, int64_t t)
{
    return (int)(((t % 4) * e->num_layers + l) * NODE_PARTS + part);
}

static const char *part_name(rp_node_part part)
{
    switch (part) {
    case RP_NODE_PARTIAL: return "partial gradient sum";
    case RP_NODE_FINAL: return "summed gradient";
    case RP_NODE_BASE: return "partial sum of the tied embedding's head part";
    case RP_NODE_BASE_FINAL: return "summed tied embedding's head part";
    default: return "microbatch losses";
    }
}

/* Poll req until it completes, the node aborts, the run is interrupted or
 * --timeout passes; a failure names this rank and the node waited for. */
static rp_status node_wait(rp_engine *e, MPI_Request *req, int peer, int l, rp_node_part part,
                           int64_t t, const char *who, rp_error *err)
{
    double deadline = rp_event_deadline(e->o->timeout_s);
    const struct timespec pause = {0, 20000};
    int done = 0;
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    rp_status s = RP_OK;
    for (long spins = 0;; spins++) {
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            s = rp_error_set(err, RP_ERR_MPI, "rank %d (node %d), %s: MPI failed exchanging the "
                             "%s of layer %d (it %lld) with node %d", e->nd.world_rank,
                             e->nd.node, who, part_name(part), l, (long long)t, peer);
            break;
        }
        if (done)
            break;
        int64_t failed = atomic_load(e->abort_flag);
        if (failed || rp_interrupted() || rp_event_now() > deadline) {
            const char *why = failed ? "a rank of this node failed"
                              : rp_interrupted() ? "the run was interrupted"
                                                 : "the deadline (--timeout) passed";
            s = rp_error_set(err, failed || !rp_interrupted() ? RP_ERR_TIMEOUT : RP_ERR_INTERRUPTED,
                             "rank %d (node %d), %s: stopped waiting for the %s of layer %d "
                             "(it %lld) %s node %d: %s", e->nd.world_rank, e->nd.node, who,
                             part_name(part), l, (long long)t,
                             part == RP_NODE_PARTIAL || part == RP_NODE_BASE || peer < e->nd.node
                                 ? "from" : "with", peer, why);
            break;
        }
        if (spins > 1000)
            nanosleep(&pause, NULL);
    }
    if (e->trace) {
        char span[96];
        snprintf(span, sizeof span, "node %d: %s %d (it %lld)", peer, part_name(part), l,
                 (long long)t);
        rp_trace_span(e->trace, RP_TRACK_OPTIMIZER_WAIT, span, t0, rp_trace_now_ns());
    }
    return s;
}

static rp_status receive(rp_engine *e, MPI_Comm comm, void *into, int count, MPI_Datatype type,
                         int from, int l, rp_node_part part, int64_t t, const char *who,
                         rp_error *err)
{
    MPI_Request req;
    MPI_Irecv(into, count, type, from, tag_of(e, l, part, t), comm, &req);
    return node_wait(e, &req, from, l, part, t, who, err);
}

static rp_status send(rp_engine *e, MPI_Comm comm, const void *what, int count,
                      MPI_Datatype type, int to, int l, rp_node_part part, int64_t t,
                      const char *who, rp_error *err)
{
    MPI_Request req;
    MPI_Isend(what, count, type, to, tag_of(e, l, part, t), comm, &req);
    return node_wait(e, &req, to, l, part, t, who, err);
}

rp_status rp_node_receive_partial(rp_engine *e, int l, rp_node_part part, int64_t t, float *into,
                                  size_t lo, size_t hi, const char *who, rp_error *err)
{
    return receive(e, e->nd.cross, into, (int)(hi - lo), MPI_FLOAT, e->nd.node - 1, l, part, t,
                   who, err);
}

rp_status rp_node_pass_on(rp_engine *e, int l, int64_t t, float *acc, size_t lo, size_t hi,
                          const char *who, rp_error *err)
{
    int count = (int)(hi - lo), me = e->nd.node, last = e->nd.nodes - 1;
    if (me < last) {
        RP_TRY(send(e, e->nd.cross, acc + lo, count, MPI_FLOAT, me + 1, l, RP_NODE_PARTIAL, t, who,
                    err));
        return receive(e, e->nd.cross, acc + lo, count, MPI_FLOAT, last, l, RP_NODE_FINAL, t, who,
                       err);
    }
    for (int n = 0; n < last; n++) /* in turn: the first node needs it first */
        RP_TRY(send(e, e->nd.cross, acc + lo, count, MPI_FLOAT, n, l, RP_NODE_FINAL, t, who, err));
    return RP_OK;
}

rp_status rp_node_base_pass_on(rp_engine *e, int64_t t, float *acc, size_t lo, size_t hi,
                               const char *who, rp_error *err)
{
    int count = (int)(hi - lo), me = e->nd.node, last = e->nd.nodes - 1;
    if (me == last)
        return send(e, e->nd.cross, acc + lo, count, MPI_FLOAT, 0, 0, RP_NODE_BASE_FINAL, t, who,
                    err);
    RP_TRY(send(e, e->nd.cross, acc + lo, count, MPI_FLOAT, me + 1, 0, RP_NODE_BASE, t, who, err));
    if (me == 0) /* sent: the buffer may take the final sum, at the rows' time */
        MPI_Irecv(acc + lo, count, MPI_FLOAT, last, tag_of(e, 0, RP_NODE_BASE_FINAL, t),
                  e->nd.cross, &e->emb_base_req);
    return RP_OK;
}

rp_status rp_node_base_wait(rp_engine *e, int64_t t, const char *who, rp_error *err)
{
    return node_wait(e, &e->emb_base_req, e->nd.nodes - 1, 0, RP_NODE_BASE_FINAL, t, who, err);
}

rp_status rp_node_gather_losses(rp_engine *e, int64_t t, const double *mine, double *all,
                                rp_error *err)
{
    int M = (int)e->microbatches;
    const char *who = "logger";
    if (e->nd.node > 0)
        return send(e, e->nd.cross_loss, mine, M, MPI_DOUBLE, 0, 0, RP_NODE_LOSSES, t, who, err);
    for (int m = 0; m < M; m++)
        all[m] = mine[m];
    for (int n = 1; n < e->nd.nodes; n++)
        RP_TRY(receive(e, e->nd.cross_loss, all + (size_t)n * (size_t)M, M, MPI_DOUBLE, n, 0,
                       RP_NODE_LOSSES, t, who, err));
    return RP_OK;
}
