/* The logger's exchange across nodes: each step's microbatch losses (and
 * a load-balancing loss's aux) of every node to node 0, on their own
 * communicator (e->nd.cross_loss), so that node 0 sums them in microbatch
 * order. */
#include <stdlib.h>
#include <string.h>

#include "engine/node_comm_impl.h"
#include "engine/node_sums.h"

rp_status rp_node_gather_losses(rp_engine *e, int64_t t, const double *loss, const double *aux,
                                double *all, rp_error *err)
{
    int M = (int)e->microbatches, N = e->nd.nodes, k = aux ? 2 : 1;
    const char *who = "logger";
    double *msg = malloc(sizeof(double) * (size_t)k * (size_t)M);
    if (!msg)
        return rp_error_set(err, RP_ERR_NOMEM, "logger: a node's microbatch losses");
    rp_status s = RP_OK;
    if (e->nd.node > 0) { /* one message: the losses, then the aux */
        memcpy(msg, loss, sizeof(double) * (size_t)M);
        if (aux)
            memcpy(msg + M, aux, sizeof(double) * (size_t)M);
        s = rp_node_send(e, e->nd.cross_loss, msg, k * M, MPI_DOUBLE, 0, 0, RP_NODE_LOSSES, t, who,
                         err);
        free(msg);
        return s;
    }
    for (int n = 0; n < N && s == RP_OK; n++) {
        const double *from_loss = loss, *from_aux = aux;
        if (n > 0) {
            s = rp_node_receive(e, e->nd.cross_loss, msg, k * M, MPI_DOUBLE, n, 0, RP_NODE_LOSSES,
                                t, who, err);
            from_loss = msg;
            from_aux = msg + M;
        }
        if (s != RP_OK)
            break;
        memcpy(all + (size_t)n * (size_t)M, from_loss, sizeof(double) * (size_t)M);
        if (aux)
            memcpy(all + ((size_t)N + (size_t)n) * (size_t)M, from_aux,
                   sizeof(double) * (size_t)M);
    }
    free(msg);
    return s;
}
