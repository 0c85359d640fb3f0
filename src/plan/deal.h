/* The deal of the round-robin executors to GPUs, chosen with the plan.
 *
 * Executor e of the round-robin deal (plan/schedule.h) drives GPU
 * rp_machine_gpu_of(mc, e). With PCIe link groups (GPUs behind one switch
 * share its uplink), the natural deal (executor e on GPU e, bus order)
 * puts consecutive jobs, whose uploads overlap, on one switch; the
 * interleaved deal (rp_machine_interleave_deal) puts them on different
 * switches. Which is faster depends on the model and the plan, so `best`
 * plans both and keeps the interleaved deal only when the simulator's
 * virtual time says it is faster by more than RP_DEAL_MIN_GAIN: the two
 * deals often give the same iteration time but for rounding in the last
 * bits, and a deal that moves the ranks' work for no modelled gain is
 * harder to read in a trace for nothing. This is
 * the one place that rule lives: `roundpipe plan`, `roundpipe simulate`
 * and `train`'s planner call it. */
#ifndef RP_PLAN_DEAL_H
#define RP_PLAN_DEAL_H

#include "plan/cost.h"
#include "plan/plan.h"
#include "plan/simulate.h"

/* The gain, as a fraction of the natural deal's iteration time, that the
 * interleaved deal must beat for `best` to keep it (0.1%). */
#define RP_DEAL_MIN_GAIN 1e-3

/* 1 when `best` keeps the interleaved deal: its modelled iteration time
 * is below the natural deal's by more than RP_DEAL_MIN_GAIN of it. */
int rp_deal_interleaved_wins(double natural_ms, double interleaved_ms);

/* --deal natural|interleaved|best */
typedef enum rp_deal_choice { RP_DEAL_BEST = 0, RP_DEAL_NATURAL, RP_DEAL_INTERLEAVED } rp_deal_choice;

/* Parse "natural", "interleaved" or "best"; the error names the option. */
rp_status rp_deal_parse(const char *text, const char *option, rp_deal_choice *out, rp_error *err);
const char *rp_deal_name(const rp_machine *mc);

/* The plan for *mc: forced (simulated, and refused when a job exceeds the
 * memory limit) or, when forced is NULL, the partitioner's at the given
 * width (0: searched); with link groups, the deal as `choice` says, written
 * into *mc (without link groups the deal is natural whatever the choice).
 * Near-ties go to the natural deal (rp_deal_interleaved_wins). *res (may
 * be NULL) is the kept plan's simulation. Errors are rp_partition's, and
 * the forced plan's memory. */
rp_status rp_plan_dealt(const rp_cost_model *m, rp_machine *mc, int width, const rp_plan *forced,
                        rp_deal_choice choice, rp_plan *out, rp_sim_result *res, rp_error *err);

/* rp_plan_dealt, and under --weight-buffers auto (auto_buffers) once more
 * with one stage weight buffer (m->single_weight_buffer, which stays set)
 * when no plan fits the device memory with two; a forced plan keeps two.
 * This is the one place that rule lives (train's planner and `roundpipe
 * plan` call it). The last try's error stands. */
rp_status rp_plan_dealt_buffers(rp_cost_model *m, rp_machine *mc, int width, const rp_plan *forced,
                                rp_deal_choice choice, int auto_buffers, rp_plan *out,
                                rp_sim_result *res, rp_error *err);

#endif
