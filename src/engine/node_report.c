/* After training with several nodes (or --ranks-per-node): what each node
 * sent to the others per step, against the count node_sums.h's rule
 * gives, and its ranks' AdamW time, logged by rank 0. */
#include <stdatomic.h>
#include <stdlib.h>

#include "engine/node_sums.h"
#include "engine/optimizer_impl.h"

/* The bytes node n sends in one step by the rule of node_sums.h: the chain
 * (every node but the last: every share of every layer in fp32), the
 * scatter (the last node: each other node's slices in fp32 and the shares'
 * block norms), the all-gather (its slices in the compute dtype to N-1
 * nodes), the tied embedding's base (a share each) and the losses (with
 * the aux of a load-balancing loss). */
static double formula_bytes(const rp_engine *e, int n)
{
    int N = e->nd.nodes, last = N - 1;
    double es = (double)rp_dtype_size(e->p->compute_dtype), bytes = 0;
    if (N == 1)
        return 0;
    for (int l = 0; l < e->num_layers; l++) {
        double numel = (double)e->p->layers[l].numel;
        if (n < last)
            bytes += 4 * numel;
        if (l == 0 && e->tied)
            bytes += 4 * numel;
        for (int r = 0; r < e->size; r++) {
            size_t b0, b1, lo, hi;
            rp_engine_slice(e, l, r, n, &b0, &b1, &lo, &hi);
            bytes += (N - 1) * es * (double)(hi - lo);
            if (n == last)
                for (int j = 0; j < last; j++) {
                    rp_engine_slice(e, l, r, j, &b0, &b1, &lo, &hi);
                    bytes += 4.0 * (double)(hi - lo);
                    rp_engine_share(e, l, r, &b0, &b1, &lo, &hi);
                    bytes += 8.0 * (double)(b1 - b0);
                }
        }
    }
    /* the microbatch losses, and their load-balancing aux when it is on */
    return bytes + (n > 0 ? 8.0 * (double)e->microbatches * (e->raux.coef > 0 ? 2 : 1) : 0);
}

void rp_node_report(rp_engine *e, MPI_Comm comm, int64_t steps)
{
    /* per rank: bytes sent, AdamW ns, its node, its store's pages (node leaders) */
    enum { SENT, NS, NODE, HELD, N_FIELDS };
    uint64_t mine[N_FIELDS] = {atomic_load(&e->by_node_comm.node_sent),
                               atomic_load(&e->by_optimizer.adamw_ns), (uint64_t)e->nd.node,
                               e->rank == 0 ? rp_store_resident_bytes(e->param_store) : 0};
    int root = e->nd.world_rank == 0;
    uint64_t *all = root ? calloc(N_FIELDS * (size_t)e->nd.world_size, sizeof(uint64_t)) : NULL;
    MPI_Gather(mine, N_FIELDS, MPI_UINT64_T, all, N_FIELDS, MPI_UINT64_T, 0, comm);
    if (!all || steps <= 0) {
        free(all);
        return;
    }
    double params = 0;
    for (int l = 0; l < e->num_layers; l++)
        params += (double)e->p->layers[l].numel;
    int64_t timed = steps - (RP_ADAMW_TIMED_FROM - 1);
    for (int n = 0; n < e->nd.nodes; n++) {
        double sent = 0, ns = 0, held = 0;
        for (int r = 0; r < e->nd.world_size; r++) {
            const uint64_t *f = all + (size_t)r * N_FIELDS;
            if (f[NODE] == (uint64_t)n) {
                sent += (double)f[SENT];
                ns += (double)f[NS];
                held += (double)f[HELD];
            }
        }
        sent /= (double)steps;
        rp_log(e->lg, RP_LOG_INFO, "node %d of %d: sent %.0f bytes per step to other nodes "
               "(the rule's %.0f; %.3f x the model's %.0f fp32 parameter bytes); AdamW %.3f ms "
               "CPU per step on its ranks (steps 3-); parameter store %.1f of %.1f MiB in "
               "memory",
               n, e->nd.nodes, sent, formula_bytes(e, n), sent / (4 * params), 4 * params,
               timed > 0 ? ns / 1e6 / (double)timed : 0.0, held / 1048576.0,
               (double)rp_store_bytes(e->param_store) / 1048576.0);
    }
    free(all);
}
