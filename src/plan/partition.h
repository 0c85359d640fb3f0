/* The partitioner: forward stages, backward stages (tail first) and the
 * pipeline width, chosen for the least modelled iteration time.
 *
 * Objective: the steady-state iteration time rp_simulate reports for the
 * given machine (exact or lagged optimizer as the machine says), so the
 * upload a stage's compute fails to cover, inter-stage latency, optimizer
 * waits and pipeline fill/drain are all charged the way the simulator
 * charges them. Constraint: every job's device memory
 * (rp_schedule_job_bytes) fits machine->memory_limit.
 *
 * Search: seeds are one layer per stage and, for a set of tail sizes (every
 * size up to 12 layers, then 16, 24, 32, 48...) and of forward and backward
 * stage counts (likewise), the min-max balanced cut of the forward and the
 * backward layers by upload-aware per-microbatch cost. The best seeds are
 * improved by first-improvement local search over boundary shifts
 * (including the tail's first layer), splits and merges, then by a few
 * rounds of iterated local search (two random moves, climb again, keep if
 * better; the generator is seeded with a constant so every rank computes the
 * same plan). Plans over the memory limit rank below all plans within it,
 * by how far over they are, so the search can walk into the feasible
 * region.
 * Every pipeline width that divides G (and M over the groups) is tried
 * unless one is fixed. Ties go to the plan with fewer jobs.
 * Threads: where one simulation takes long enough (plan/search.h), the
 * seeds and each climb's neighbours are scored in batches on a pool of the
 * search's threads and taken in the order they were made
 * (plan/evaluate.h), so the plan is the same for any number of threads. */
#ifndef RP_PLAN_PARTITION_H
#define RP_PLAN_PARTITION_H

#include "plan/simulate.h"

/* width 0: search the widths; > 0: use that one. On success *out holds the
 * plan and *res (if not NULL) its simulation. Errors: a layer that cannot fit
 * the memory limit even alone (RP_ERR_DEVICE_MEMORY, naming the layer and
 * the bytes), no width/microbatch split that works (RP_ERR_INVALID_ARG). */
rp_status rp_partition(const rp_cost_model *m, const rp_machine *mc, int width, rp_plan *out,
                       rp_sim_result *res, rp_error *err);

/* The objective the partitioner minimises: modelled iteration time in ms,
 * or INFINITY when the plan does not fit the memory limit or cannot run on
 * this machine, with the blocks the machine's budget keeps (plan/keep.h:
 * the search sets every candidate's kept so). Exposed so tests can compare
 * against brute force. */
double rp_partition_objective(const rp_cost_model *m, const rp_machine *mc, const rp_plan *p);

#endif
