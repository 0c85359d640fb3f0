/* Which layers keep their activations instead of recomputing them
 * (plan.h's kept, DESIGN 4 and 5a): the blocks nearest the tail first, as
 * many as the memory that holds them allows: the host store's, read where
 * it lies by executors of host memory, or, on executors that keep them in
 * a pool of their own memory (cost.h's keep_on_executor: GPUs, whose link
 * a round trip of them would cost more than the recompute), that memory,
 * for blocks whose forward and backward jobs run on one executor. Either
 * way a kept block's backward reads them where they lie: it costs no
 * time, only memory. */
#ifndef RP_PLAN_KEEP_H
#define RP_PLAN_KEEP_H

#include <stdint.h>

#include "plan/cost.h"
#include "plan/machine.h"
#include "plan/plan.h"

/* The number of blocks below p's tail that keep their activations under
 * mc->keep_budget (host bytes) for mc->microbatches microbatches: walking
 * down from the layer below the tail, each while its keep_bytes x M still
 * fit and it has a recompute to save (fwd_ms > 0); on executors that keep them
 * (m->keep_on_executor), also while its forward and backward jobs run on
 * one executor (rp_plan_kept_on_one_executor) and while the pool
 * (plan/schedule.h's rp_schedule_kept_pool_bytes) still fits beside the rest of the plan's peak
 * under mc->memory_limit (if any). A budget of 0 keeps none;
 * < 0 (--recompute none) keeps every block it can, whatever it costs. */
int rp_plan_choose_kept(const rp_cost_model *m, const rp_machine *mc, const rp_plan *p);

/* 1 when layer l's forward job and the backward (or tail) job holding it
 * run on the same executor in every iteration: their job indices differ by
 * a multiple of the width (plan/schedule.h's deal). */
int rp_plan_kept_on_one_executor(const rp_plan *p, int gpus, int l);

/* A forced plan's kept blocks (keep=N) where executors keep them in their
 * own memory: each must have its forward and backward jobs on one
 * executor, else RP_ERR_INVALID_ARG naming the block, its two jobs and how
 * many blocks the plan could keep. RP_OK otherwise (and always for
 * executors that read them in the host store). */
rp_status rp_plan_check_kept(const rp_cost_model *m, const rp_plan *p, int gpus, rp_error *err);

/* The host bytes the kept layers of p take, over M microbatches. */
int64_t rp_plan_kept_bytes(const rp_cost_model *m, const rp_plan *p, int microbatches);

#endif
