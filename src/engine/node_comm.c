/* The node communication thread (several nodes; node_sums.h has the rule):
 * each step, layer by layer top down as the gradients land, the chain and
 * scatter of this rank's share (grad_completion.c's rp_grad_chain_layer,
 * which calls the exchanges of node_sums.c), then the step's exchanges
 * completed; after the segment's steps, the all-gathers of its last
 * updates; on a failure, the exchanges in flight abandoned and the other
 * nodes told (node_failure.c). */
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/node_comm_impl.h"
#include "engine/node_sums.h"
#include "engine/optimizer_impl.h"
#include "engine/protocol.h"

void *rp_engine_node_comm_main(void *arg)
{
    rp_engine *e = arg;
    rp_node_comm_thread_mark(e);
    /* the same cores as the optimizer beside it (optimizer.c) */
    omp_set_num_threads(e->device == RP_DEVICE_CPU ? 1 : e->threads);
    rp_error err = {0};
    rp_status s = RP_OK;
    size_t per = 2 * (size_t)e->nd.nodes;
    e->by_node_comm.node_pending =
        calloc((size_t)e->num_layers, sizeof *e->by_node_comm.node_pending);
    MPI_Request *reqs = calloc(2 * (size_t)e->num_layers * per, sizeof *reqs);
    if (!e->by_node_comm.node_pending || !reqs)
        s = rp_error_set(&err, RP_ERR_NOMEM, "node communication: request lists");
    for (int l = 0; s == RP_OK && l < e->num_layers; l++) {
        e->by_node_comm.node_pending[l].req = reqs + 2 * (size_t)l * per;
        e->by_node_comm.node_pending[l].greq = reqs + (2 * (size_t)l + 1) * per;
    }
    rp_node_listen_for_failures(e);
    char who[64];
    for (int64_t t = e->it_first; s == RP_OK && t <= e->it_last && !rp_proto_stopped(e, t); t++) {
        snprintf(who, sizeof who, "node communication, iteration %lld", (long long)t);
        for (int l = e->num_layers - 1; s == RP_OK && l >= 0; l--) /* as the gradients land */
            s = rp_grad_chain_layer(e, l, t, who, &err);
        if (s == RP_OK)
            s = rp_node_drain_pending(e, who, &err);
    }
    /* the segment's last updates: their all-gathers, until the optimizer is done */
    snprintf(who, sizeof who, "node communication, the last all-gathers");
    long pause = 20000;
    while (s == RP_OK && !atomic_load(&e->by_optimizer.optimizer_done) &&
           !atomic_load(e->abort_flag)) {
        if (rp_node_service(e))
            pause = 20000;
        rp_node_idle(&pause);
    }
    for (int l = 0; s == RP_OK && l < e->num_layers; l++) {
        rp_node_service(e); /* starts a gather posted last */
        struct rp_node_pending *p = &e->by_node_comm.node_pending[l];
        for (int i = 0; s == RP_OK && i < p->gn; i++)
            s = rp_node_wait(e, &p->greq[i], (e->nd.node + 1) % e->nd.nodes, l, RP_NODE_WEIGHTS,
                             p->gt, who, &err);
        if (s == RP_OK && p->gn > 0)
            rp_node_gather_done(e, l);
    }
    if (s != RP_OK && s != RP_STOP)
        rp_engine_fail(e, s, &err);
    if (atomic_load(e->abort_flag))
        rp_node_abandon_exchanges(e);
    free(reqs);
    free(e->by_node_comm.node_pending);
    e->by_node_comm.node_pending = NULL;
    rp_node_comm_thread_mark(NULL);
    rp_node_end_failures(e);
    return NULL;
}
