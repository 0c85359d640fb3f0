/* What a caller lends the partitioner (search.h). */
#include "plan/search.h"

#include "core/clock.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP_WIDTHS 64 /* searched widths remembered; the oldest gives way */

/* A width searched: the inputs compared whole, the outcome. */
typedef struct searched {
    rp_cost_model model;   /* layers NULL: compared through `layers` below */
    rp_layer_cost *layers; /* model.num_layers of them */
    rp_machine machine;    /* search NULL */
    int width;
    int found;
    rp_plan *plan; /* found: the width's best */
    double excess, ms;
} searched;

struct rp_plan_search {
    /* the caller's report */
    rp_plan_search_report_fn report;
    void *arg;
    double delay_s, interval_s;
    /* its threads (rp_plan_search_set_threads; 0 and < 0: the defaults) */
    int threads;
    double min_ms;
    /* where the searches are */
    rp_plan_search_state state;
    double t_start; /* 0: no search began yet */
    double t_next;  /* the next report is due then */
    /* the widths searched, a ring of KEEP_WIDTHS */
    searched kept[KEEP_WIDTHS];
    int nkept, next;
};

static double now_s(void)
{
    return 1e-9 * (double)rp_clock_ns();
}

rp_plan_search *rp_plan_search_create(void)
{
    rp_plan_search *s = calloc(1, sizeof *s);
    if (s) {
        s->state.best_ms = INFINITY;
        s->min_ms = -1;
    }
    return s;
}

void rp_plan_search_set_threads(rp_plan_search *search, int threads, double min_ms)
{
    search->threads = threads;
    search->min_ms = min_ms;
}

void rp_plan_search_get_threads(const rp_plan_search *search, int *threads, double *min_ms)
{
    *threads = search && search->threads > 0 ? search->threads : omp_get_max_threads();
    *min_ms = search && search->min_ms >= 0 ? search->min_ms : RP_PLAN_PARALLEL_MIN_MS;
}

static void forget(searched *w)
{
    free(w->layers);
    free(w->plan);
    memset(w, 0, sizeof *w);
}

void rp_plan_search_destroy(rp_plan_search **search)
{
    if (!search || !*search)
        return;
    for (int i = 0; i < (*search)->nkept; i++)
        forget(&(*search)->kept[i]);
    free(*search);
    *search = NULL;
}

void rp_plan_search_set_report(rp_plan_search *search, rp_plan_search_report_fn fn, void *arg,
                               double delay_s, double interval_s)
{
    search->report = fn;
    search->arg = arg;
    search->delay_s = delay_s;
    search->interval_s = interval_s;
}

rp_plan_search_state rp_plan_search_get_state(const rp_plan_search *search)
{
    rp_plan_search_state st = search->state;
    st.elapsed_s = search->t_start > 0 ? now_s() - search->t_start : 0;
    return st;
}

/* Report when one is due. */
static void tick(rp_plan_search *s)
{
    double t = now_s();
    if (s->t_start == 0) {
        s->t_start = t;
        s->t_next = t + s->delay_s;
    }
    if (!s->report || t < s->t_next)
        return;
    s->t_next = t + s->interval_s;
    s->state.elapsed_s = t - s->t_start;
    s->report(s->arg, &s->state);
}

void rp_plan_search_begin(rp_plan_search *search)
{
    if (search)
        search->state.best_ms = INFINITY;
}

void rp_plan_search_width(rp_plan_search *search, int width, int index, int widths)
{
    if (!search)
        return;
    search->state.width = width;
    search->state.width_index = index;
    search->state.widths = widths;
    rp_plan_search_phase(search, "seed plans", 0, 0);
}

void rp_plan_search_phase(rp_plan_search *search, const char *phase, int done, int total)
{
    if (!search)
        return;
    search->state.phase = phase;
    search->state.done = done;
    search->state.total = total;
    tick(search);
}

void rp_plan_search_offer(rp_plan_search *search, double ms)
{
    if (search && ms < search->state.best_ms)
        search->state.best_ms = ms;
}

void rp_plan_search_simulated(rp_plan_search *search)
{
    if (!search)
        return;
    search->state.simulated++;
    tick(search);
}

/* The inputs of a width's search as a searched entry holds them. */
static void key_of(const rp_cost_model *m, const rp_machine *mc, rp_cost_model *mk, rp_machine *mck)
{
    memcpy(mk, m, sizeof *mk);
    mk->layers = NULL;
    memcpy(mck, mc, sizeof *mck);
    mck->search = NULL;
}

static searched *find(rp_plan_search *s, const rp_cost_model *m, const rp_machine *mc, int width)
{
    rp_cost_model mk;
    rp_machine *mck = malloc(sizeof *mck); /* 4 KiB and more: not on the stack */
    searched *hit = NULL;
    if (!mck)
        return NULL;
    key_of(m, mc, &mk, mck);
    for (int i = 0; i < s->nkept && !hit; i++) {
        searched *w = &s->kept[i];
        if (w->width == width && !memcmp(&w->model, &mk, sizeof mk) &&
            !memcmp(w->layers, m->layers, sizeof *m->layers * (size_t)m->num_layers) &&
            !memcmp(&w->machine, mck, sizeof *mck))
            hit = w;
    }
    free(mck);
    return hit;
}

int rp_plan_search_recall(rp_plan_search *search, const rp_cost_model *m, const rp_machine *mc,
                          int width, rp_plan *plan, double *excess, double *ms)
{
    searched *w = search ? find(search, m, mc, width) : NULL;
    if (!w)
        return -1;
    search->state.recalled++;
    if (!w->found)
        return 0;
    *plan = *w->plan;
    *excess = w->excess;
    *ms = w->ms;
    return 1;
}

void rp_plan_search_remember(rp_plan_search *search, const rp_cost_model *m, const rp_machine *mc,
                             int width, const rp_plan *plan, double excess, double ms)
{
    if (!search || m->num_layers <= 0)
        return;
    size_t layer_bytes = sizeof *m->layers * (size_t)m->num_layers;
    rp_layer_cost *layers = malloc(layer_bytes);
    rp_plan *copy = plan ? malloc(sizeof *copy) : NULL;
    if (!layers || (plan && !copy)) {
        free(layers);
        free(copy);
        return;
    }
    memcpy(layers, m->layers, layer_bytes);
    if (plan)
        *copy = *plan;
    searched *w = &search->kept[search->next];
    forget(w);
    key_of(m, mc, &w->model, &w->machine);
    w->layers = layers;
    w->width = width;
    w->found = plan != NULL;
    w->plan = copy;
    w->excess = excess;
    w->ms = ms;
    search->next = (search->next + 1) % KEEP_WIDTHS;
    if (search->nkept < KEEP_WIDTHS)
        search->nkept++;
}

void rp_plan_search_describe(const rp_plan_search_state *st, char *buf, size_t len)
{
    int at = snprintf(buf, len, "width %d (%d of %d)", st->width, st->width_index, st->widths);
    if (st->phase && st->total > 0 && at >= 0 && (size_t)at < len)
        at += snprintf(buf + at, len - (size_t)at, ", %s %d of %d", st->phase, st->done + 1,
                       st->total);
    else if (st->phase && at >= 0 && (size_t)at < len)
        at += snprintf(buf + at, len - (size_t)at, ", %s", st->phase);
    if (at >= 0 && (size_t)at < len)
        at += snprintf(buf + at, len - (size_t)at, ", %lld plans simulated",
                       (long long)st->simulated);
    if (isfinite(st->best_ms) && at >= 0 && (size_t)at < len)
        at += snprintf(buf + at, len - (size_t)at, ", best %.1f ms an iteration", st->best_ms);
    if (at >= 0 && (size_t)at < len)
        snprintf(buf + at, len - (size_t)at, ", %.0f s", st->elapsed_s);
}
