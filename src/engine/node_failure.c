/* The failure notices between nodes (several nodes): why and how a node
 * that fails tells the others, and how the others hear it (below). Run on
 * each rank's node communication thread (node_comm.c); its waits check
 * for a notice (node_sums.c's rp_node_service). */
#include <stdatomic.h>

#include "engine/node_comm_impl.h"

/* A node that fails tells the others at once: without it their waits for
 * its messages would last until --timeout. Each rank's communication
 * thread listens, for the whole segment, for a notice from any other node
 * (on nd.cross_failure: the failed node and its status) and makes its own
 * node fail on one, naming that node; and when its own node failed (the
 * abort flag: an error, a divergence, an interrupt on any of its threads)
 * and no notice caused it, it sends the notice to the same node-local rank
 * of every other node as it ends. */
static _Thread_local struct {
    MPI_Request req;
    int msg[2];
    int heard; /* a notice came: this node's failure is another's, not to be sent on */
} failure_rx;

void rp_node_listen_for_failures(rp_engine *e)
{
    failure_rx.heard = 0;
    MPI_Irecv(failure_rx.msg, 2, MPI_INT, MPI_ANY_SOURCE, 0, e->nd.cross_failure,
              &failure_rx.req);
}

static void heard_failure(rp_engine *e)
{
    failure_rx.heard = 1;
    rp_error err;
    rp_status s = (rp_status)failure_rx.msg[1];
    rp_error_echo(&err, s, "rank %d: stopped because node %d failed (see its message)",
                 e->nd.world_rank, failure_rx.msg[0]);
    rp_engine_fail(e, s, &err);
}

/* Has another node failed? Then this one fails too (communication thread). */
void rp_node_check_failures(rp_engine *e)
{
    int done = 0;
    if (failure_rx.req != MPI_REQUEST_NULL &&
        MPI_Test(&failure_rx.req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
        heard_failure(e);
}

/* At the end of the segment: stop listening (a notice that came meanwhile
 * still counts), then tell the other nodes if this one failed. */
void rp_node_end_failures(rp_engine *e)
{
    rp_node_check_failures(e);
    if (failure_rx.req != MPI_REQUEST_NULL) {
        MPI_Status st;
        int cancelled = 1;
        MPI_Cancel(&failure_rx.req);
        MPI_Wait(&failure_rx.req, &st);
        MPI_Test_cancelled(&st, &cancelled);
        if (!cancelled)
            heard_failure(e);
    }
    if (!atomic_load(e->abort_flag) || failure_rx.heard)
        return;
    pthread_mutex_lock(&e->lock);
    e->by_node_comm.node_failure_sent[0] = e->nd.node;
    e->by_node_comm.node_failure_sent[1] = (int)(e->status != RP_OK ? e->status : RP_ERR_TIMEOUT);
    pthread_mutex_unlock(&e->lock);
    for (int n = 0; n < e->nd.nodes; n++) { /* small: sent at once, or on its own later */
        MPI_Request req;
        if (n == e->nd.node)
            continue;
        MPI_Isend(e->by_node_comm.node_failure_sent, 2, MPI_INT, n, 0, e->nd.cross_failure, &req);
        MPI_Request_free(&req);
    }
}
