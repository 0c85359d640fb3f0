/* The simulator's state, shared by its two halves: the single-node sweep
 * (plan/simulate.c: jobs, links, one node's optimizer, the results) and the
 * several-node part (plan/sim_nodes.c: the gradient chain, the scatter, the
 * sliced updates and the all-gather). Internal to plan/. */
#ifndef RP_PLAN_SIM_STATE_H
#define RP_PLAN_SIM_STATE_H

#include "plan/simulate.h"
#include "plan/schedule.h"

/* An executor computing one microbatch of a job. */
typedef struct rp_sim_interval {
    double start, end;
    int executor;
} rp_sim_interval;

typedef struct rp_sim_executor {
    double last_end, previous_end; /* end of the last job and of the one before it */
    double upload_free, download_free; /* when each direction of its link is free */
    double upload_busy;
    double compute_busy;
} rp_sim_executor;

/* A piece of one node's optimizer work. */
typedef struct rp_sim_task {
    double ready, duration;
    int priority; /* lower runs first among the ready tasks (the layer, by default) */
    int slot;     /* what it completes: a layer, or num_layers for part (b) of layer 0's update */
    int rank;
    /* A speculative update (machine.h's speculative): it runs as one only if
     * its rank starts it before overlap_end, when the last gradient of a
     * layer below it lands (as the engine's rp_gate_speculates: after that
     * the backward is over and it would overlap nothing); else it waits for
     * the norm (the pool's `norm`) and takes after_ms, without the backup. */
    int speculative;
    double overlap_end, after_ms;
    int queued; /* its place in its rank's queue: the pool's order among equal ready and priority */
} rp_sim_task;

typedef struct rp_sim_nodes rp_sim_nodes;

typedef struct rp_sim {
    const rp_cost_model *cost;
    const rp_plan *plan;
    const rp_machine *machine;
    int num_layers, num_jobs, width, groups, group_microbatches, iterations;
    rp_job *jobs;
    double *job_ms, *job_wgrad_ms, *upload_ms, *download_ms; /* [num_jobs] */
    double *dequant_first_ms, *dequant_later_ms; /* [num_jobs]: an FP8 base's dequantisations
                                                    in its first and each later microbatch
                                                    (rp_schedule_job_dequant) */
    double *layer_upload_ms; /* [num_jobs][num_layers]: job j's layer first+i's share of
                                upload_ms[j] at [j][i] (job_times) */
    rp_sim_executor executor[RP_SIM_MAX_GPUS];
    double pool_free[RP_SIM_MAX_GPUS], pool_busy[RP_SIM_MAX_GPUS]; /* each rank's optimizer */
    double *version_ready; /* [iterations][num_layers + 1]: update of iteration t's
                              gradients done; with sparse_embed, [0] is part (a) of layer
                              0's update, [num_layers] part (b) */
    double *grad_done;     /* [num_layers] for the current iteration */
    int *producer;         /* [num_layers]: the executor whose rank updates the layer */
    double *previous_job_out, *this_job_out; /* [group_microbatches]: when each
                                                microbatch's output is ready */
    rp_sim_interval *intervals;
    size_t num_intervals;
    double *iteration_end; /* [iterations]: last compute of the iteration ends */
    rp_sim_task *tasks, *rank_tasks;
    int *task_heap;
    int *held_tasks;      /* a pool's speculative tasks put back until the norm */
    int *tied_layers, num_tied; /* layers with tied_to >= 0 */
    int sparse_embed;          /* sparse_embed applies: layer 0 is an embedding */
    double rows_frac, group_rows_frac; /* rows fraction of the iteration, of one group */
    int gate_tail;             /* part (b) gates the tail job (no layer tied to layer 0) */
    /* link groups: each group's lanes per direction, how much longer a
     * transfer takes there than on a GPU's own link, its lanes' free times
     * ([group][direction][lane]) and its upload busy time */
    int lanes[RP_SIM_MAX_GPUS];
    double lane_slowdown[RP_SIM_MAX_GPUS];
    double lane_free[RP_SIM_MAX_GPUS][2][RP_SIM_MAX_LANES];
    double group_upload_busy[RP_SIM_MAX_GPUS];
    rp_sim_nodes *nodes; /* several nodes: the network and the nodes' optimizers, else NULL */
} rp_sim;

static inline double rp_sim_max(double a, double b) { return a > b ? a : b; }

/* A min-heap of indices heap[0..*size): before(ctx, a, b) says whether a
 * comes out before b. For the optimizer pools of one node and of several,
 * and the several-node part's events. */
typedef int (*rp_sim_task_order)(const void *ctx, int a, int b);

static inline void rp_sim_heap_push(int *heap, int *size, rp_sim_task_order before,
                                    const void *ctx, int task)
{
    int i = (*size)++;
    while (i > 0 && before(ctx, task, heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = task;
}

static inline int rp_sim_heap_pop(int *heap, int *size, rp_sim_task_order before,
                                  const void *ctx)
{
    int top = heap[0], last = heap[--(*size)], i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= *size)
            break;
        if (child + 1 < *size && before(ctx, heap[child + 1], heap[child]))
            child++;
        if (!before(ctx, heap[child], last))
            break;
        heap[i] = heap[child];
        i = child;
    }
    if (*size > 0)
        heap[i] = last;
    return top;
}

#endif
