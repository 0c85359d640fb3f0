/* The optimizer state outside this node's slices (several nodes): stale
 * in this node's store while training runs (each node keeps its slices
 * current, node_sums.h), collected onto node 0 between segments for a
 * checkpoint or a save, and given back to the system after loading and
 * after a checkpoint. */
#include "engine/node_comm_impl.h"
#include "engine/node_sums.h"

rp_status rp_node_collect(rp_engine *e, int optimizer, int gradient, rp_error *err)
{
    const char *who = "collecting the optimizer state on node 0";
    for (int l = 0; l < e->num_layers; l++) {
        rp_layer_state *ls = &e->p->st[l];
        float *arrays[4] = {ls->master, optimizer ? ls->m : NULL, optimizer ? ls->v : NULL,
                            gradient ? ls->grad : NULL};
        for (int a = 0; a < 4; a++) {
            if (!arrays[a])
                continue;
            size_t b0, b1, lo, hi;
            for (int n = 1; n < e->nd.nodes; n++) {
                rp_engine_slice(e, l, e->rank, n, &b0, &b1, &lo, &hi);
                int tag_part = RP_NODE_COLLECT + a;
                if (e->nd.node == n)
                    RP_TRY(rp_node_send(e, e->nd.cross, arrays[a] + lo, (int)(hi - lo), MPI_FLOAT,
                                        0, l, (rp_node_part)tag_part, 0, who, err));
                else if (e->nd.node == 0)
                    RP_TRY(rp_node_receive(e, e->nd.cross, arrays[a] + lo, (int)(hi - lo),
                                           MPI_FLOAT, n, l, (rp_node_part)tag_part, 0, who, err));
            }
        }
    }
    return RP_OK;
}

void rp_node_release_others(rp_engine *e)
{
    for (int l = 0; l < e->num_layers; l++) {
        rp_layer_state *ls = &e->p->st[l];
        float *arrays[3] = {ls->m, ls->v, ls->compute != ls->master ? ls->master : NULL};
        for (int n = 0; n < e->nd.nodes; n++) {
            if (n == e->nd.node)
                continue;
            size_t b0, b1, lo, hi;
            rp_engine_slice(e, l, e->rank, n, &b0, &b1, &lo, &hi);
            for (int a = 0; a < 3; a++)
                if (arrays[a])
                    rp_store_release(e->param_store, arrays[a] + lo, (hi - lo) * sizeof(float));
        }
    }
}
