/* How the partitioner (plan/partition.c) scores a candidate plan, one at a
 * time or a batch of them on a pool of threads (core/pool.h).
 *
 * A score is a pure function of the cost model, the machine and the plan's
 * stages: its kept blocks are chosen from the machine's budget
 * (plan/keep.h), its device memory counted against the limit
 * (plan/schedule.h) and its iteration simulated (plan/simulate.h). So a
 * batch scored on any number of threads gives the same scores as one
 * scored plan by plan, and a search that takes them in the batch's order
 * makes the same choices; the memo of plans scored before (plan_memo.h) is
 * read and written in that order, on the calling thread. */
#ifndef RP_PLAN_EVALUATE_H
#define RP_PLAN_EVALUATE_H

#include "core/pool.h"
#include "plan/machine.h"
#include "plan/plan.h"
#include "plan/plan_memo.h"

typedef struct rp_plan_score {
    double excess; /* bytes over the memory limit, 0 when it fits */
    double time;   /* modelled iteration ms, INFINITY if it cannot run */
} rp_plan_score;

/* What the memo keeps of a plan scored: its score and the kept blocks. */
typedef struct rp_plan_scored {
    rp_plan_score score;
    int kept;
} rp_plan_scored;

/* p's kept blocks set and p scored; a plan found in memo (NULL: none) is not
 * simulated again. Counts each simulation in mc->search (plan/search.h). */
rp_plan_score rp_plan_evaluate(const rp_cost_model *m, const rp_machine *mc, rp_plan *p,
                               rp_plan_memo *memo);

/* Plans scored together: filled through rp_plan_batch_add in the search's
 * order, scored by rp_plan_batch_evaluate, read in that order. */
typedef struct rp_plan_batch {
    rp_plan *plans;
    rp_plan_score *scores;
    unsigned char *fresh; /* not found in the memo: simulated by this batch */
    int n, cap;
    rp_pool *pool; /* the threads that score it (NULL: the caller's alone); not owned */
} rp_plan_batch;

#define RP_PLAN_BATCH_MAX 512

/* cap plans at most (1 to RP_PLAN_BATCH_MAX), scored on pool's threads
 * (NULL: the caller's). RP_ERR_NOMEM: nothing allocated. */
rp_status rp_plan_batch_init(rp_plan_batch *batch, int cap, rp_pool *pool);
void rp_plan_batch_free(rp_plan_batch *batch);

/* The next plan's place (n grows by one), NULL when the batch is full. */
rp_plan *rp_plan_batch_add(rp_plan_batch *batch);

/* Every plan of the batch scored (its kept blocks set): the memo looked up
 * and then written in the batch's order, the rest simulated on the pool's
 * threads. n is left as it is (the caller reads, then sets n to 0). */
void rp_plan_batch_evaluate(const rp_cost_model *m, const rp_machine *mc, rp_plan_batch *batch,
                            rp_plan_memo *memo);

#endif
