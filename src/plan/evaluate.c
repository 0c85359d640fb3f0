/* Scoring candidate plans (evaluate.h). */
#include "plan/evaluate.h"

#include <math.h>
#include <stdlib.h>

#include "plan/keep.h"
#include "plan/schedule.h"
#include "plan/search.h"
#include "plan/simulate.h"

/* The score itself: no memo, no counting (safe on any thread). */
static rp_plan_score score_of(const rp_cost_model *m, const rp_machine *mc, rp_plan *p)
{
    rp_plan_score sc = {0, INFINITY};
    p->kept = rp_plan_choose_kept(m, mc, p);
    if (mc->memory_limit > 0) {
        int64_t peak =
            rp_schedule_peak_bytes(m, p, mc->gpus, mc->microbatches, mc->workspace_bytes, NULL);
        if (peak > mc->memory_limit)
            sc.excess = (double)(peak - mc->memory_limit);
    }
    rp_error e;
    rp_sim_result r;
    if (rp_simulate(m, p, mc, &r, &e) == RP_OK)
        sc.time = r.iteration_ms;
    return sc;
}

rp_plan_score rp_plan_evaluate(const rp_cost_model *m, const rp_machine *mc, rp_plan *p,
                               rp_plan_memo *memo)
{
    rp_plan_scored seen;
    if (rp_plan_memo_find(memo, p, &seen)) {
        p->kept = seen.kept;
        return seen.score;
    }
    rp_plan_score sc = score_of(m, mc, p);
    rp_plan_memo_store(memo, p, &(rp_plan_scored){sc, p->kept});
    rp_plan_search_simulated(mc->search);
    return sc;
}

rp_status rp_plan_batch_init(rp_plan_batch *batch, int cap, rp_pool *pool)
{
    if (cap < 1)
        cap = 1;
    if (cap > RP_PLAN_BATCH_MAX)
        cap = RP_PLAN_BATCH_MAX;
    batch->plans = malloc(sizeof *batch->plans * (size_t)cap);
    batch->scores = malloc(sizeof *batch->scores * (size_t)cap);
    batch->fresh = malloc((size_t)cap);
    batch->n = 0;
    batch->cap = cap;
    batch->pool = pool;
    if (batch->plans && batch->scores && batch->fresh)
        return RP_OK;
    rp_plan_batch_free(batch);
    return RP_ERR_NOMEM;
}

void rp_plan_batch_free(rp_plan_batch *batch)
{
    free(batch->plans);
    free(batch->scores);
    free(batch->fresh);
    batch->plans = NULL;
    batch->scores = NULL;
    batch->fresh = NULL;
    batch->n = batch->cap = 0;
}

rp_plan *rp_plan_batch_add(rp_plan_batch *batch)
{
    return batch->n < batch->cap ? &batch->plans[batch->n++] : NULL;
}

/* What the pool's threads share: the batch's fresh plans, by their index. */
typedef struct scoring {
    const rp_cost_model *m;
    const rp_machine *mc;
    rp_plan_batch *batch;
    int index[RP_PLAN_BATCH_MAX]; /* the fresh plans' places in the batch */
} scoring;

static void score_one(void *arg, int i)
{
    scoring *sc = arg;
    int k = sc->index[i];
    sc->batch->scores[k] = score_of(sc->m, sc->mc, &sc->batch->plans[k]);
}

void rp_plan_batch_evaluate(const rp_cost_model *m, const rp_machine *mc, rp_plan_batch *batch,
                            rp_plan_memo *memo)
{
    scoring sc; /* its index filled below, not zeroed: a hot path */
    sc.m = m;
    sc.mc = mc;
    sc.batch = batch;
    const int n = batch->n;
    int fresh = 0;
    for (int i = 0; i < n; i++) { /* the memo, in order */
        rp_plan_scored seen;
        batch->fresh[i] = !rp_plan_memo_find(memo, &batch->plans[i], &seen);
        if (!batch->fresh[i]) {
            batch->plans[i].kept = seen.kept;
            batch->scores[i] = seen.score;
        } else {
            sc.index[fresh++] = i;
        }
    }
    rp_pool_for(batch->pool, fresh, score_one, &sc);
    for (int i = 0; i < n; i++) /* stored in order (a plan twice in the batch: once) */
        if (batch->fresh[i]) {
            rp_plan_memo_store(memo, &batch->plans[i],
                               &(rp_plan_scored){batch->scores[i], batch->plans[i].kept});
            rp_plan_search_simulated(mc->search);
        }
}
