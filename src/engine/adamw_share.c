/* AdamW on a range of a layer's share, with the optimizer's trace spans:
 * called by the optimizer thread's two files, optimizer.c (the scheduled
 * updates) and grad_completion.c (an update fused into the sum). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/engine_impl.h"
#include "engine/optimizer_impl.h"
#include "optim/adamw.h"

/* The speculative update's backup of a range [lo, hi) of a layer: master,
 * m and v of its n = hi - lo elements at old, old + n and old + 2n
 * (speculative.c's layout); `from`: the update reads its old state there
 * (a redo) instead of writing it there. */
typedef struct range_backup {
    float *old;
    size_t lo, n;
    int from;
} range_backup;

/* Elements [a, b) of the layer's master, m and v into the backup, as they
 * are: the padding between and after tensors, which no update changes, so
 * that the backup is an image of the whole range (a restore writes all of
 * it back). */
static void save_padding(const rp_layer_state *ls, const range_backup *bk, size_t a, size_t b)
{
    if (b <= a || bk->from)
        return;
    size_t at = a - bk->lo, bytes = (b - a) * sizeof(float);
    memcpy(bk->old + at, ls->master + a, bytes);
    memcpy(bk->old + bk->n + at, ls->m + a, bytes);
    memcpy(bk->old + 2 * bk->n + at, ls->v + a, bytes);
}

/* AdamW on elements [lo, hi) of layer l: the parts of its tensors there,
 * writing the bf16 compute copy in the same pass; the padding between and
 * after tensors is copied as it is (zeros). With `bk`, the speculative
 * update's backup written in that same pass (or read, for a redo). */
static void update_range(rp_engine *e, int l, int64_t t, float coef, size_t lo, size_t hi,
                         const range_backup *bk)
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
        if (copy)
            rp_params_sync_compute_range(e->p, l, cur, a);
        uint16_t *bf = copy ? (uint16_t *)ls->compute + a : NULL;
        if (!bk) {
            rp_adamw_step(ls->master + a, ls->grad + a, ls->m + a, ls->v + a, b - a,
                          e->by_optimizer.adam_step, &hp, d->decay, coef, bf);
        } else {
            save_padding(ls, bk, cur, a);
            float *old = bk->old + (a - bk->lo);
            if (bk->from)
                rp_adamw_step_from_backup(ls->master + a, ls->grad + a, ls->m + a, ls->v + a,
                                          b - a, e->by_optimizer.adam_step, &hp, d->decay, coef,
                                          bf, old, old + bk->n, old + 2 * bk->n);
            else
                rp_adamw_step_backup(ls->master + a, ls->grad + a, ls->m + a, ls->v + a, b - a,
                                     e->by_optimizer.adam_step, &hp, d->decay, coef, bf, old,
                                     old + bk->n, old + 2 * bk->n);
        }
        cur = b;
    }
    if (copy)
        rp_params_sync_compute_range(e->p, l, cur, hi);
    if (bk)
        save_padding(ls, bk, cur, hi);
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
    update_range(e, l, t, coef, lo, hi, NULL);
    count_adamw(e, t, c0);
}

void rp_optimizer_update_share_backup(rp_engine *e, int l, int64_t t, float coef, size_t lo,
                                      size_t hi, float *backup, int from)
{
    uint64_t c0 = thread_cpu_ns();
    range_backup bk = {backup, lo, hi - lo, from};
    update_range(e, l, t, coef, lo, hi, &bk);
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
    update_range(u->e, u->l, u->t, u->coef, lo, hi, NULL);
}

void rp_optimizer_update_ranges(rp_engine *e, int l, int64_t t, float coef,
                                const rp_adamw_range *ranges, size_t count)
{
    uint64_t c0 = thread_cpu_ns();
    ranges_update u = {e, l, t, coef};
    if (e->boundary_before) /* before issue 33: a run at a time (update_gate.h) */
        for (size_t i = 0; i < count; i++)
            update_piece(&u, ranges[i].lo, ranges[i].hi);
    else
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
