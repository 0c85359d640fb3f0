/* Job order of one iteration (DESIGN.md section 4) and the device memory a
 * job needs.
 *
 *   jobs:  F0 .. F(f-1) | T | B1 .. B(b-1)         n = f + b per iteration
 *
 * The G executors form G/W groups of W (W = plan width, 0 meaning G). Every
 * group runs the whole job list over its own M*W/G microbatches; in group g,
 * job j of iteration t runs on executor g*W + (t*n + j) mod W, i.e. the job
 * counter c = t*n carries over from one iteration to the next. */
#ifndef RP_PLAN_SCHEDULE_H
#define RP_PLAN_SCHEDULE_H

#include <stdint.h>

#include "plan/cost.h"
#include "plan/plan.h"

typedef enum rp_job_kind { RP_JOB_FWD = 0, RP_JOB_TAIL = 1, RP_JOB_BWD = 2 } rp_job_kind;

typedef struct rp_job {
    rp_job_kind kind;
    int stage;       /* index into plan fwd[] (FWD) or bwd[] (TAIL = 0, BWD >= 1) */
    int first, last; /* layers */
} rp_job;

static inline int rp_schedule_num_jobs(const rp_plan *p) { return p->nfwd + p->nbwd; }

/* Job j (0 <= j < n) of every iteration. */
rp_job rp_schedule_job(const rp_plan *p, int j);

/* Effective width for G executors (plan width, or G when 0). */
static inline int rp_schedule_width(const rp_plan *p, int gpus)
{
    return p->width > 0 ? p->width : gpus;
}

/* Executor of job j of iteration t in group g. */
int rp_schedule_executor(const rp_plan *p, int gpus, int64_t iteration, int j, int group);

/* Check that W divides G and that the microbatches split evenly over the
 * groups; on success *per_group = M*W/G. */
rp_status rp_schedule_check(const rp_plan *p, int gpus, int microbatches, int *per_group,
                            rp_error *err);

/* Per-microbatch compute time of a job of plan p: sum of fwd_ms (FWD) or of
 * fwd_ms + bwd_ms (TAIL: forward+backward without recompute; BWD: recompute
 * + backward, the same sum), where a BWD job's layers that p keeps
 * (plan.h's kept) skip their recompute's fwd_ms (read where they lie). */
double rp_schedule_job_ms(const rp_cost_model *m, const rp_plan *p, const rp_job *job);

/* The dequantisations of an FP8 base's blocks in a job (layers whose
 * dequant_ms is not 0), counted as the executor runs them
 * (engine/stage_buffers.c): each use of such a block (a forward, a
 * recompute, a backward) dequantises it into the executor's one scratch
 * unless the scratch holds it already. Per microbatch a job uses its blocks
 * in this order: FWD first..last; TAIL first..last-1, then back down; BWD
 * its recomputed blocks (up to the first kept one from the top) upwards,
 * then every block downwards. So a stage of one block dequantises once per
 * job, a forward stage of k blocks k times a microbatch, a backward or tail
 * stage recomputing all its k blocks 1 + (2k - 2) a microbatch (the next
 * microbatch starts with the block the last ended with). *first_ms: the
 * time of those of the job's first microbatch (the scratch empty: the
 * previous job on the executor ends with other blocks), *later_ms: of each
 * later one. */
void rp_schedule_job_dequant(const rp_cost_model *m, const rp_plan *p, const rp_job *job,
                             double *first_ms, double *later_ms);

/* The microbatches of an executor's pipeline: M x W / G. */
int64_t rp_schedule_pool_microbatches(const rp_plan *p, int gpus, int microbatches);

/* The device bytes of an executor's pool for the kept layers of p (0 unless
 * m->keep_on_executor, plan/keep.h): their keep_device_bytes for each
 * microbatch of its pipeline (engine/executor.c allocates it so). */
int64_t rp_schedule_kept_pool_bytes(const rp_cost_model *m, const rp_plan *p, int gpus,
                                    int microbatches);

/* Peak device bytes of job j: its weights and those of the next job on the
 * same executor (double buffering; not with single_weight_buffer), its gradients (TAIL/BWD), the
 * activations of one microbatch (the largest layer's for FWD, the sum over
 * the stage for TAIL/BWD), input/output buffers, its own workspace (the
 * largest workspace_bytes of its layers), the shared `workspace` and the
 * executor's pool of kept activations, resident through every job
 * (rp_schedule_kept_pool_bytes for `microbatches` M). */
int64_t rp_schedule_job_bytes(const rp_cost_model *m, const rp_plan *p, int gpus,
                              int microbatches, int j, int64_t workspace);

/* Device bytes an executor allocates for the plan, once, for all its jobs:
 * 2 x the largest stage's weights (the running and the prefetched stage;
 * 1 x with the cost model's single_weight_buffer),
 * the largest over the jobs of a job's gradients (TAIL/BWD) plus its own
 * workspace (one scratch they take in turn), the largest TAIL/BWD sum of
 * act_bytes (at least the largest layer's), (longest stage's layers + 2) x
 * the largest out_bytes, the shared workspace, and the pool of kept
 * activations (rp_schedule_kept_pool_bytes for `microbatches` M). At least the largest
 * rp_schedule_job_bytes; *worst gets the index of the job with the largest
 * rp_schedule_job_bytes. */
int64_t rp_schedule_peak_bytes(const rp_cost_model *m, const rp_plan *p, int gpus,
                               int microbatches, int64_t workspace, int *worst);

/* The parts of rp_schedule_peak_bytes, each with the job (index j) or layer
 * that sets it (-1: none does, the part is 0), for saying what bounds a
 * plan: total = weight_buffers x weights + scratch + saved + (layers + 2) out
 * + workspace + kept_pool. */
typedef struct rp_peak_parts {
    int64_t weights;  /* the largest stage's weights (weight_buffers buffers of it) */
    int weight_buffers; /* 2, or 1 with the cost model's single_weight_buffer */
    int weights_job;
    int64_t scratch;  /* the largest job's gradients (TAIL/BWD) and own workspace */
    int scratch_job;
    int64_t scratch_workspace; /* of it, that job's own workspace */
    int64_t saved;    /* saved activations: the largest TAIL/BWD stage's sum of act_bytes,
                         or the largest layer's when that is more */
    int saved_job;    /* the stage's job, -1 when one layer's slot set it */
    int saved_layer;  /* the layer of the largest act_bytes */
    int64_t out;      /* the largest out_bytes: one microbatch's activations */
    int io_layer;     /* its layer */
    int layers;       /* the longest stage's layers (at most all but one) */
    int64_t workspace; /* the one every job shares */
    int64_t kept_pool; /* kept activations in the executor's own memory (rp_schedule_kept_pool_bytes;
                          0 unless the cost model keeps them there) */
    int worst_job;    /* the job of the largest rp_schedule_job_bytes */
    int64_t total;
} rp_peak_parts;
int64_t rp_schedule_peak_parts(const rp_cost_model *m, const rp_plan *p, int gpus,
                               int microbatches, int64_t workspace, rp_peak_parts *parts);

#endif
