/* Which layers keep their activations (see keep.h). */
#include "plan/keep.h"

#include <math.h>

int rp_plan_choose_kept(const rp_cost_model *m, const rp_machine *mc, const rp_plan *p)
{
    if (mc->keep_budget == 0)
        return 0;
    int64_t left = mc->keep_budget, kept = 0;
    for (int l = rp_plan_tail_first(p) - 1; l >= 1; l--) {
        const rp_layer_cost *c = &m->layers[l];
        int64_t bytes = c->keep_bytes * (int64_t)mc->microbatches;
        /* the nearest layers first: a kept layer that does not pay stops the
         * walk, so the kept ones stay the run just below the tail */
        if (c->keep_bytes <= 0 || (mc->keep_budget > 0 && c->keep_ms >= c->fwd_ms))
            break;
        if (mc->keep_budget > 0 && bytes > left)
            break;
        left -= bytes;
        kept++;
    }
    return (int)kept;
}

int64_t rp_plan_kept_bytes(const rp_cost_model *m, const rp_plan *p, int microbatches)
{
    int64_t bytes = 0;
    for (int l = 1; l < rp_plan_tail_first(p); l++)
        if (rp_plan_is_kept(p, l))
            bytes += m->layers[l].keep_bytes * (int64_t)microbatches;
    return bytes;
}

void rp_plan_price_keep(rp_cost_model *m, int in_place, double link_gbs)
{
    for (int l = 0; l < m->num_layers; l++)
        m->layers[l].keep_ms = in_place       ? 0.0
                               : link_gbs > 0 ? 2.0 * (double)m->layers[l].keep_bytes /
                                                    (link_gbs * 1e6)
                                              : INFINITY;
}
