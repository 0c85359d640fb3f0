/* The deal of the round-robin executors to GPUs, chosen with the plan.
 *
 * Executor e of the round-robin deal (plan/schedule.h) drives GPU
 * rp_machine_gpu_of(mc, e). With PCIe link groups (GPUs behind one switch
 * share its uplink), the natural deal (executor e on GPU e, bus order)
 * puts consecutive jobs, whose uploads overlap, on one switch; the
 * interleaved deal (rp_machine_interleave_deal) puts them on different
 * switches. Which is faster depends on the model and the plan, so `best`
 * plans both and keeps the faster in the simulator's virtual time. This is
 * the one place that rule lives: `roundpipe plan`, `roundpipe simulate`
 * and `train`'s planner call it. */
#ifndef RP_PLAN_DEAL_H
#define RP_PLAN_DEAL_H

#include "plan/cost.h"
#include "plan/plan.h"
#include "plan/simulate.h"

/* --deal natural|interleaved|best */
typedef enum rp_deal_choice { RP_DEAL_BEST = 0, RP_DEAL_NATURAL, RP_DEAL_INTERLEAVED } rp_deal_choice;

/* Parse "natural", "interleaved" or "best"; the error names the option. */
rp_status rp_deal_parse(const char *text, const char *option, rp_deal_choice *out, rp_error *err);
const char *rp_deal_name(const rp_machine *mc);

/* The plan for *mc: forced (simulated, and refused when a job exceeds the
 * memory limit) or, when forced is NULL, the partitioner's at the given
 * width (0: searched); with link groups, the deal as `choice` says, written
 * into *mc (without link groups the deal is natural whatever the choice).
 * Ties go to the natural deal. *res (may be NULL) is the kept plan's
 * simulation. Errors are rp_partition's, and the forced plan's memory. */
rp_status rp_plan_dealt(const rp_cost_model *m, rp_machine *mc, int width, const rp_plan *forced,
                        rp_deal_choice choice, rp_plan *out, rp_sim_result *res, rp_error *err);

#endif
