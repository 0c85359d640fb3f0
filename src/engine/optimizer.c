/* The optimizer thread of a rank: AdamW for the layers whose gradients this
 * rank's backward jobs produced, as soon as each gradient is complete (with
 * clipping: once every layer's is, since the global norm scales them all),
 * then the layer's version is raised, which lets the next iteration's
 * forward use it. Order: with clipping, by need (layer 0 first: the next
 * forward starts there); without, as the gradients land (top down), and
 * always top down with --optimizer-lag 1 (see below). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine_impl.h"
#include "optim/adamw.h"
#include "optim/clip.h"

static rp_status update_layer(rp_engine *e, int l, int64_t t, float coef)
{
    rp_layer_state *ls = &e->p->st[l];
    rp_adamw_params hp = {rp_lr_at(&e->sched, t), e->o->beta1, e->o->beta2, e->o->eps,
                          e->o->weight_decay};
    for (int i = 0; i < ls->desc->nparams; i++) {
        const rp_param_desc *d = &ls->desc->params[i];
        rp_adamw_step(ls->master + d->offset, ls->grad + d->offset, ls->m + d->offset,
                      ls->v + d->offset, d->numel, t, &hp, d->decay, coef, NULL);
    }
    rp_params_sync_compute(e->p, l);
    return RP_OK;
}

/* Global norm and clip coefficient of iteration t, summed in layer order so
 * every rank gets the same bits. */
static rp_status clip_coef(rp_engine *e, int64_t t, double *norm, float *coef, const char *who,
                           rp_error *err)
{
    for (int l = 0; l < e->L; l++)
        RP_TRY(rp_engine_wait(e, RP_EV_GRAD, l, 0, (uint64_t)t, who, 1, err));
    const double *sumsq = rp_engine_sumsq(e, t);
    double total = 0.0;
    for (int l = 0; l < e->L; l++)
        total += sumsq[l];
    rp_status s = rp_clip_coef(total, e->o->grad_clip, norm, coef, err);
    if (s != RP_OK)
        rp_error_prefix(err, "step %lld: gradient norm", (long long)t);
    return s;
}

/* With --optimizer-lag 1 the update of iteration t may only change layer l
 * once every job of iteration t+1 that reads l has uploaded it. */
static rp_status wait_uploads(rp_engine *e, int l, int64_t t, const char *who, rp_error *err)
{
    if (!e->o->optimizer_lag || t >= e->last)
        return RP_OK;
    uint64_t next = (uint64_t)(t + 1);
    RP_TRY(rp_engine_wait(e, RP_EV_UPLOADED, rp_up_bwd(e, l, t + 1), 0, next, who, 1, err));
    if (l < rp_plan_tail_first(&e->plan))
        RP_TRY(rp_engine_wait(e, RP_EV_UPLOADED, rp_up_fwd(e, l, t + 1), 0, next, who, 1, err));
    if (l == 0 && e->tied) /* the tail reads the embedding as its LM head */
        RP_TRY(rp_engine_wait(e, RP_EV_UPLOADED, rp_up_bwd(e, e->L - 1, t + 1), 0, next, who, 1, err));
    return RP_OK;
}

static rp_status run(rp_engine *e, rp_error *err)
{
    int *order = malloc(sizeof(int) * (size_t)e->L);
    if (!order)
        return rp_error_set(err, RP_ERR_NOMEM, "optimizer order");
    rp_status s = RP_OK;
    char who[64];
    for (int64_t t = e->first; s == RP_OK && t <= e->last; t++) {
        /* the layers of this rank's tail/backward jobs of iteration t */
        int n = 0;
        for (int j = e->plan.nfwd; j < e->J; j++) {
            if (rp_engine_executor(e, t, j) != e->rank)
                continue;
            rp_job job = rp_schedule_job(&e->plan, j);
            for (int l = job.last; l >= job.first; l--)
                order[n++] = l;
        }
        if (n == 0)
            continue;
        snprintf(who, sizeof who, "optimizer, iteration %lld", (long long)t);
        float coef = 1.0f;
        double norm = 0.0;
        if (e->o->grad_clip > 0)
            s = clip_coef(e, t, &norm, &coef, who, err);
        if (e->o->grad_clip > 0 && !e->o->optimizer_lag) {
            /* by need: ascending layers. (A lagged update waits for the next
             * iteration's uploads, which come top down: keep job order.) */
            for (int a = 0; a < n / 2; a++) {
                int tmp = order[a];
                order[a] = order[n - 1 - a];
                order[n - 1 - a] = tmp;
            }
        }
        int skip = rp_engine_counted(e, t) == 0; /* nothing counted: no update */
        for (int k = 0; s == RP_OK && k < n; k++) {
            int l = order[k];
            s = rp_engine_wait(e, RP_EV_GRAD, l, 0, (uint64_t)t, who, 1, err);
            if (s == RP_OK)
                s = wait_uploads(e, l, t, who, err);
            /* updates of a layer apply in iteration order (AdamW's moments);
             * implied by the events above except for a lagged last update */
            if (s == RP_OK)
                s = rp_engine_wait(e, RP_EV_VERSION, l, 0, (uint64_t)(t - 1), who, 1, err);
            uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
            if (s == RP_OK && !skip)
                s = update_layer(e, l, t, coef);
            if (e->trace) {
                char span[48];
                snprintf(span, sizeof span, "adamw layer %d (it %lld)", l, (long long)t);
                rp_trace_span(e->trace, RP_TRACK_OPTIMIZER, span, t0, rp_trace_now_ns());
            }
            if (s == RP_OK)
                rp_engine_signal(e, RP_EV_VERSION, l, 0, (uint64_t)t);
        }
    }
    free(order);
    return s;
}

void *rp_engine_optimizer_main(void *arg)
{
    rp_engine *e = arg;
    omp_set_num_threads(e->threads);
    rp_error err = {0};
    rp_status s = run(e, &err);
    if (s != RP_OK)
        rp_engine_fail(e, s, &err);
    return NULL;
}
