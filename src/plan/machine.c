/* The modelled machine (plan/machine.h): defaults, checks and the
 * quantities derived from it. */
#include "plan/machine.h"

#include <math.h>
#include <string.h>

void rp_machine_defaults(rp_machine *mc)
{
    memset(mc, 0, sizeof *mc);
    mc->gpus = 1;
    mc->microbatches = 1;
    mc->link_gbs = 25.0;
    mc->transfer_ms = 0.0;
    mc->opt_gbs = 10.0;
    mc->opt_bytes_per_param = 30.0;
    mc->iterations = 12;
    mc->workspace_bytes = (int64_t)256 << 20;
    mc->nodes = 1;
    mc->network_gbs = RP_SIM_DEFAULT_NETWORK_GBS;
    mc->compute_bytes_per_param = 2.0;
}

rp_machine rp_machine_node(const rp_machine *mc)
{
    rp_machine one = *mc;
    int nodes = rp_machine_nodes(mc);
    one.nodes = 1;
    one.microbatches = mc->microbatches / nodes;
    one.tokens_per_iteration = mc->tokens_per_iteration / nodes;
    return one;
}

void rp_machine_interleave_deal(rp_machine *mc)
{
    if (!mc->link_groups)
        return;
    int executor = 0;
    for (int round = 0; executor < mc->gpus; round++)
        for (int group = 0; group < mc->link_groups; group++) {
            int nth = 0; /* the group's round-th GPU, if it has one */
            for (int gpu = 0; gpu < mc->gpus; gpu++)
                if (mc->link_group[gpu] == group && nth++ == round)
                    mc->deal[executor++] = gpu;
        }
    mc->deal_set = 1;
}

rp_status rp_machine_check(const rp_machine *mc, rp_error *err)
{
    if (mc->gpus < 1 || mc->gpus > RP_SIM_MAX_GPUS)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d executors (supported 1..%d)",
                            mc->gpus, RP_SIM_MAX_GPUS);
    if (mc->microbatches < 1 || mc->microbatches > (1 << 20))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d microbatches", mc->microbatches);
    if (!(mc->link_gbs > 0) || !isfinite(mc->link_gbs))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: host-device bandwidth must be > 0");
    if (!(mc->opt_gbs > 0) || !isfinite(mc->opt_gbs))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: optimizer bandwidth must be > 0");
    if (!(mc->transfer_ms >= 0) || !isfinite(mc->transfer_ms))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: transfer latency must be >= 0");
    if (!(mc->opt_bytes_per_param >= 0) || !isfinite(mc->opt_bytes_per_param))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: optimizer bytes/param must be >= 0");
    if (mc->optimizer_lag < 0 || mc->optimizer_lag > 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: optimizer lag %d (0 or 1)",
                            mc->optimizer_lag);
    if (mc->iterations < 4 || mc->iterations > 10000)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d iterations (4..10000)",
                            mc->iterations);
    if (mc->memory_limit < 0 || mc->workspace_bytes < 0 || mc->tokens_per_iteration < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: negative byte or token count");
    if (!(mc->host_gbs >= 0) || !isfinite(mc->host_gbs))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: host memory bandwidth must be >= 0");
    if (mc->sparse_embed < 0 || mc->sparse_embed > 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: sparse embedding %d (0 or 1)",
                            mc->sparse_embed);
    if (mc->link_groups < 0 || mc->link_groups > mc->gpus)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d link groups for %d GPUs",
                            mc->link_groups, mc->gpus);
    for (int g = 0; mc->link_groups && g < mc->gpus; g++)
        if (mc->link_group[g] < 0 || mc->link_group[g] >= mc->link_groups)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: GPU %d in link group %d of %d",
                                g, mc->link_group[g], mc->link_groups);
    for (int k = 0; k < mc->link_groups; k++)
        if (!(mc->uplink_gbs[k] >= 0) || !isfinite(mc->uplink_gbs[k]))
            return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: link group %d's bandwidth", k);
    if (mc->deal_set) {
        int seen[RP_SIM_MAX_GPUS] = {0};
        for (int e = 0; e < mc->gpus; e++) {
            if (mc->deal[e] < 0 || mc->deal[e] >= mc->gpus || seen[mc->deal[e]]++)
                return rp_error_set(err, RP_ERR_INVALID_ARG,
                                    "machine: the deal is not a permutation of the %d GPUs",
                                    mc->gpus);
        }
    }
    if (mc->nodes < 0 || mc->nodes > RP_SIM_MAX_NODES)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d nodes (supported 1..%d)",
                            mc->nodes, RP_SIM_MAX_NODES);
    if (mc->nodes > 1) {
        if (mc->microbatches % mc->nodes)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "machine: %d microbatches do not split evenly over %d nodes "
                                "(each node runs M/N of the iteration's M)",
                                mc->microbatches, mc->nodes);
        if (!(mc->network_gbs > 0) || !isfinite(mc->network_gbs))
            return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: network bandwidth must be > 0");
        if (!(mc->compute_bytes_per_param > 0) || !isfinite(mc->compute_bytes_per_param))
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "machine: compute bytes per parameter must be > 0");
    }
    if (!(mc->embed_rows_frac >= 0 && mc->embed_rows_frac <= 1))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "machine: embedding rows fraction %g (0 < X <= 1, or 0 to derive it)",
                            mc->embed_rows_frac);
    return RP_OK;
}

double rp_machine_embed_rows_frac(const rp_cost_model *m, const rp_machine *mc, int k)
{
    if (mc->embed_rows_frac > 0)
        return mc->embed_rows_frac;
    if (m->num_layers < 1 || m->layers[0].kind != RP_LAYER_EMBED)
        return 1.0;
    const rp_layer_cost *embed = &m->layers[0];
    if (embed->out_bytes <= 0 || embed->weight_bytes <= 0)
        return 1.0;
    double frac = (double)k * (double)embed->out_bytes / (double)embed->weight_bytes;
    return frac < 1.0 ? frac : 1.0;
}
