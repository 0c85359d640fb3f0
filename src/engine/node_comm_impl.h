/* What the node files share among themselves (node_sums.c's exchanges
 * and waits, node_comm.c's thread loop, node_failure.c's notices,
 * node_collect.c and node_losses.c): not for the rest of the engine, which
 * uses node_sums.h. */
#ifndef RP_ENGINE_NODE_COMM_IMPL_H
#define RP_ENGINE_NODE_COMM_IMPL_H

#include "engine/node_sums.h"

/* The node communication thread's exchanges in flight, per layer: the
 * receives of its slice and norms (or the last node's scatter sends) of
 * iteration t, after which the layer's summed event is raised; and the
 * all-gather of its slice's update of iteration gt, after which its version
 * (and, for the embedding, its rows) event is raised. */
struct rp_node_pending {
    MPI_Request *req; /* 2 x nodes */
    int n;
    int peer;         /* named if a wait fails */
    int64_t t;
    MPI_Request *greq; /* 2 x nodes */
    int gn;
    int64_t gt;        /* the step of the gather in flight, or of the last one */
    int deferred;      /* the exchange of t completed; its summed event waits for the stop
                          decision of t (node leaders) */
};

/* The calling thread is the node communication thread of e (NULL: no
 * longer): its waits then keep its other exchanges going. */
void rp_node_comm_thread_mark(rp_engine *e);

/* What the communication thread does while it waits for anything: raise
 * the events of the exchanges that completed, start the all-gathers the
 * optimizer handed over, hear a failure notice. Returns whether anything
 * happened. */
int rp_node_service(rp_engine *e);

/* Between two polls of a waiting thread (*pause_ns grows, up to 1 ms). */
void rp_node_idle(long *pause_ns);

/* Poll req until it completes, the node aborts, the run is interrupted or
 * --timeout passes; a failure names this rank, the part, layer and step,
 * and the node waited for (`peer`). */
rp_status rp_node_wait(rp_engine *e, MPI_Request *req, int peer, int l, rp_node_part part,
                       int64_t t, const char *who, rp_error *err);

/* Receive from / send to node `node` part `part` of layer l, step t, on
 * comm, and wait for it (rp_node_wait). */
rp_status rp_node_receive(rp_engine *e, MPI_Comm comm, void *into, int count, MPI_Datatype type,
                          int node, int l, rp_node_part part, int64_t t, const char *who,
                          rp_error *err);
rp_status rp_node_send(rp_engine *e, MPI_Comm comm, const void *what, int count,
                       MPI_Datatype type, int node, int l, rp_node_part part, int64_t t,
                       const char *who, rp_error *err);

/* Layer l's all-gather completed: its version (and the embedding's rows)
 * raised. */
void rp_node_gather_done(rp_engine *e, int l);

/* At a step's end: every exchange in flight completed, each layer's summed
 * event raised, the stop decision applied. */
rp_status rp_node_drain_pending(rp_engine *e, const char *who, rp_error *err);

/* After a failure: the receives in flight cancelled, the sends left. */
void rp_node_abandon_exchanges(rp_engine *e);

/* The failure notices (node_failure.c): listen from the segment's start,
 * check while waiting, and at its end stop listening and tell the other
 * nodes when this one failed. */
void rp_node_listen_for_failures(rp_engine *e);
void rp_node_check_failures(rp_engine *e);
void rp_node_end_failures(rp_engine *e);

#endif
