/* AdamW on a range of a layer's share, with the optimizer's trace spans:
 * called by the optimizer thread's two files, optimizer.c (the scheduled
 * updates) and grad_completion.c (an update fused into the sum). */
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "engine/engine_impl.h"
#include "engine/optimizer_impl.h"
#include "optim/adamw.h"

/* AdamW on elements [lo, hi) of layer l: the parts of its tensors there,
 * writing the bf16 compute copy in the same pass; the padding between and
 * after tensors is copied as it is (zeros). */
static void update_range(rp_engine *e, int l, int64_t t, float coef, size_t lo, size_t hi)
{
    /* the lr follows the step; bias correction counts the updates applied */
    rp_layer_state *ls = &e->p->st[l];
    rp_adamw_params hp = {rp_lr_at(&e->sched, t), e->o->beta1, e->o->beta2, e->o->eps,
                          e->o->weight_decay};
    int copy = ls->compute != ls->master;
    size_t cur = lo;
    for (int i = 0; i < ls->desc->nparams; i++) {
        const rp_param_desc *d = &ls->desc->params[i];
        size_t a = d->offset > lo ? d->offset : lo, b = d->offset + d->numel;
        b = b < hi ? b : hi;
        if (a >= b)
            continue;
        if (copy) {
            rp_params_sync_compute_range(e->p, l, cur, a);
            rp_adamw_step(ls->master + a, ls->grad + a, ls->m + a, ls->v + a, b - a,
                          e->by_optimizer.adam_step, &hp, d->decay, coef,
                          (uint16_t *)ls->compute + a);
        } else {
            rp_adamw_step(ls->master + a, ls->grad + a, ls->m + a, ls->v + a, b - a,
                          e->by_optimizer.adam_step, &hp, d->decay, coef, NULL);
        }
        cur = b;
    }
    if (copy)
        rp_params_sync_compute_range(e->p, l, cur, hi);
}

/* The calling thread's CPU time (contention does not count), ns. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec c;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
    return (uint64_t)c.tv_sec * 1000000000u + (uint64_t)c.tv_nsec;
}

/* Adds the calling thread's AdamW time since c0 to the rank's (its other
 * OpenMP threads' not counted, as in a dense update) */
static void count_adamw(rp_engine *e, int64_t t, uint64_t c0)
{
    if (t >= e->resume_step + RP_ADAMW_TIMED_FROM) /* past the first touch of the state's pages */
        atomic_fetch_add(&e->by_optimizer.adamw_ns, thread_cpu_ns() - c0);
}

void rp_optimizer_update_share(rp_engine *e, int l, int64_t t, float coef, size_t lo, size_t hi)
{
    uint64_t c0 = thread_cpu_ns();
    update_range(e, l, t, coef, lo, hi);
    count_adamw(e, t, c0);
}

typedef struct ranges_update {
    rp_engine *e;
    int l;
    int64_t t;
    float coef;
} ranges_update;

static void update_piece(void *ctx, size_t lo, size_t hi)
{
    const ranges_update *u = ctx;
    update_range(u->e, u->l, u->t, u->coef, lo, hi);
}

void rp_optimizer_update_ranges(rp_engine *e, int l, int64_t t, float coef,
                                const rp_adamw_range *ranges, size_t count)
{
    uint64_t c0 = thread_cpu_ns();
    ranges_update u = {e, l, t, coef};
    rp_adamw_ranges_split(ranges, count, update_piece, &u);
    count_adamw(e, t, c0);
}

/* An optimizer span "WHAT L (it T)" from t0 to now, with --trace. */
void rp_optimizer_trace(rp_engine *e, const char *what, int l, int64_t t, uint64_t t0)
{
    if (!e->trace)
        return;
    char span[64];
    snprintf(span, sizeof span, "%s %d (it %lld)", what, l, (long long)t);
    rp_trace_span(e->trace, RP_TRACK_OPTIMIZER, span, t0, rp_trace_now_ns());
}
