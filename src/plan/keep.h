/* Which layers keep their activations instead of recomputing them
 * (plan.h's kept, DESIGN 4 and 5a): the blocks nearest the tail first, as
 * many as the host bytes allow, and on executors that move them over a
 * link only where the round trip is cheaper than the recompute. */
#ifndef RP_PLAN_KEEP_H
#define RP_PLAN_KEEP_H

#include <stdint.h>

#include "plan/cost.h"
#include "plan/machine.h"
#include "plan/plan.h"

/* The number of blocks below p's tail that keep their activations under
 * mc->keep_budget for mc->microbatches microbatches: walking down from the
 * layer below the tail, each while its keep_bytes x M still fit and its
 * keep_ms is below its fwd_ms. A budget of 0 keeps none; < 0 (--recompute
 * none) keeps every block, whatever it costs. */
int rp_plan_choose_kept(const rp_cost_model *m, const rp_machine *mc, const rp_plan *p);

/* Price each layer's keeping (its keep_ms): nothing on executors that read
 * host memory where it lies (in_place), else the round trip of its
 * keep_bytes over a link of link_gbs; link_gbs <= 0 (not known) prices it
 * out (INFINITY: kept only under --recompute none). */
void rp_plan_price_keep(rp_cost_model *m, int in_place, double link_gbs);

/* The host bytes the kept layers of p take, over M microbatches. */
int64_t rp_plan_kept_bytes(const rp_cost_model *m, const rp_plan *p, int microbatches);

#endif
