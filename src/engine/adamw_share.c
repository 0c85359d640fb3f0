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
void rp_optimizer_update_share(rp_engine *e, int l, int64_t t, float coef, size_t lo, size_t hi)
{
    struct timespec c0, c1; /* the calling thread's CPU time: contention does not count */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
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
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    if (t >= e->resume_step + RP_ADAMW_TIMED_FROM) /* past the first touch of the state's pages */
        atomic_fetch_add(
            &e->by_optimizer.adamw_ns,
            (uint64_t)((c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec)));
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
