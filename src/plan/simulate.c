/* Discrete-event simulation of the round-robin schedule (see simulate.h).
 *
 * Every dependency points from an earlier job (in the order jobs are
 * issued: iteration, then group, then job index) or from the optimizer of an
 * earlier iteration to a later job, so the simulation is a single sweep in
 * that order: no event queue is needed. The optimizer of iteration t is
 * scheduled once all of t's gradients are known, before iteration t+1's
 * jobs, which are the first that can wait for it. */
#include "plan/simulate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/schedule.h"

void rp_machine_defaults(rp_machine *mc)
{
    memset(mc, 0, sizeof *mc);
    mc->gpus = 1;
    mc->microbatches = 1;
    mc->link_gbs = 25.0;
    mc->transfer_ms = 0.0;
    mc->opt_gbs = 10.0;
    mc->opt_bytes_per_param = 30.0;
    mc->iterations = 12;
    mc->workspace_bytes = (int64_t)256 << 20;
}

void rp_machine_interleave_deal(rp_machine *mc)
{
    if (!mc->link_groups)
        return;
    int e = 0;
    for (int round = 0; e < mc->gpus; round++)
        for (int k = 0; k < mc->link_groups; k++) {
            int nth = 0; /* the group's round-th GPU, if it has one */
            for (int g = 0; g < mc->gpus; g++)
                if (mc->link_group[g] == k && nth++ == round)
                    mc->deal[e++] = g;
        }
    mc->deal_set = 1;
}

rp_status rp_machine_check(const rp_machine *mc, rp_error *err)
{
    if (mc->gpus < 1 || mc->gpus > RP_SIM_MAX_GPUS)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d executors (supported 1..%d)",
                            mc->gpus, RP_SIM_MAX_GPUS);
    if (mc->microbatches < 1 || mc->microbatches > (1 << 20))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d microbatches", mc->microbatches);
    if (!(mc->link_gbs > 0) || !isfinite(mc->link_gbs))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: host-device bandwidth must be > 0");
    if (!(mc->opt_gbs > 0) || !isfinite(mc->opt_gbs))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: optimizer bandwidth must be > 0");
    if (!(mc->transfer_ms >= 0) || !isfinite(mc->transfer_ms))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: transfer latency must be >= 0");
    if (!(mc->opt_bytes_per_param >= 0) || !isfinite(mc->opt_bytes_per_param))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: optimizer bytes/param must be >= 0");
    if (mc->optimizer_lag < 0 || mc->optimizer_lag > 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: optimizer lag %d (0 or 1)",
                            mc->optimizer_lag);
    if (mc->iterations < 4 || mc->iterations > 10000)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d iterations (4..10000)",
                            mc->iterations);
    if (mc->memory_limit < 0 || mc->workspace_bytes < 0 || mc->tokens_per_iteration < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: negative byte or token count");
    if (!(mc->host_gbs >= 0) || !isfinite(mc->host_gbs))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: host memory bandwidth must be >= 0");
    if (mc->sparse_embed < 0 || mc->sparse_embed > 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: sparse embedding %d (0 or 1)",
                            mc->sparse_embed);
    if (mc->link_groups < 0 || mc->link_groups > mc->gpus)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d link groups for %d GPUs",
                            mc->link_groups, mc->gpus);
    for (int g = 0; mc->link_groups && g < mc->gpus; g++)
        if (mc->link_group[g] < 0 || mc->link_group[g] >= mc->link_groups)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: GPU %d in link group %d of %d",
                                g, mc->link_group[g], mc->link_groups);
    for (int k = 0; k < mc->link_groups; k++)
        if (!(mc->uplink_gbs[k] >= 0) || !isfinite(mc->uplink_gbs[k]))
            return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: link group %d's bandwidth", k);
    if (mc->deal_set) {
        int seen[RP_SIM_MAX_GPUS] = {0};
        for (int e = 0; e < mc->gpus; e++) {
            if (mc->deal[e] < 0 || mc->deal[e] >= mc->gpus || seen[mc->deal[e]]++)
                return rp_error_set(err, RP_ERR_INVALID_ARG,
                                    "machine: the deal is not a permutation of the %d GPUs",
                                    mc->gpus);
        }
    }
    if (!(mc->embed_rows_frac >= 0 && mc->embed_rows_frac <= 1))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "machine: embedding rows fraction %g (0 < X <= 1, or 0 to derive it)",
                            mc->embed_rows_frac);
    return RP_OK;
}

double rp_machine_embed_rows_frac(const rp_cost_model *m, const rp_machine *mc, int k)
{
    if (mc->embed_rows_frac > 0)
        return mc->embed_rows_frac;
    if (m->num_layers < 1 || m->layers[0].kind != RP_LAYER_EMBED)
        return 1.0;
    const rp_layer_cost *c = &m->layers[0];
    if (c->out_bytes <= 0 || c->weight_bytes <= 0)
        return 1.0;
    double f = (double)k * (double)c->out_bytes / (double)c->weight_bytes;
    return f < 1.0 ? f : 1.0;
}

typedef struct ival {
    double s, e;
    int exec;
} ival;

typedef struct exec_state {
    double end1, end2; /* end of the last job and of the one before it */
    double h2d_free, d2h_free;
    double upload_busy;
    double busy; /* compute */
} exec_state;

typedef struct opt_task {
    double ready, dur;
    int prio; /* lower runs first among the ready tasks (the layer, by default) */
    int slot; /* what it completes: a layer, or L for part (b) of layer 0's update */
    int rank;
} opt_task;

typedef struct sim {
    const rp_cost_model *m;
    const rp_plan *p;
    const rp_machine *mc;
    int L, n, W, groups, Mg, iters;
    rp_job *jobs;
    double *job_ms, *job_wgrad, *up_ms, *down_ms;
    exec_state ex[RP_SIM_MAX_GPUS];
    double pool_free[RP_SIM_MAX_GPUS], pool_busy[RP_SIM_MAX_GPUS];
    double *ready;     /* [iters][L+1]: update of iteration t's gradients done; with
                          sparse_embed, [0] is part (a) of layer 0's update, [L] part (b) */
    double *grad_done; /* [L] for the current iteration */
    int *producer;     /* [L] */
    double *prev_out, *cur_out;
    ival *iv;
    size_t niv;
    double *iter_end; /* [iters]: last compute of the iteration ends */
    opt_task *tasks, *mine;
    int *heap;
    int *tied, ntied; /* layers with tied_to >= 0 */
    int emb;          /* sparse_embed applies: layer 0 is an embedding */
    double rf, rfg;   /* rows fraction of the iteration, of one group */
    int gate_tail;    /* part (b) gates the tail job (no layer tied to layer 0) */
    /* link groups: each group's lanes per direction, how much longer a
     * transfer takes there than on a GPU's own link, its lanes' free times
     * ([group][direction][lane]) and its upload busy time */
    int lanes[RP_SIM_MAX_GPUS];
    double slow[RP_SIM_MAX_GPUS];
    double lane_free[RP_SIM_MAX_GPUS][2][RP_SIM_MAX_LANES];
    double group_up_busy[RP_SIM_MAX_GPUS];
} sim;

static double dmax(double a, double b) { return a > b ? a : b; }

/* A transfer of `ms` (at the GPU's own link rate) by GPU `gpu` in direction
 * dir (0 up, 1 down), ready at `ready`: its end, taking the earliest free
 * lane of the GPU's link group. */
static double take_link(sim *s, int gpu, int dir, double ready, double ms)
{
    const rp_machine *mc = s->mc;
    if (!mc->link_groups)
        return ready + ms;
    int k = mc->link_group[gpu], best = 0;
    double *lane = s->lane_free[k][dir];
    for (int i = 1; i < s->lanes[k]; i++)
        if (lane[i] < lane[best])
            best = i;
    double start = dmax(ready, lane[best]), dur = ms * s->slow[k];
    lane[best] = start + dur;
    if (dir == 0)
        s->group_up_busy[k] += dur;
    return start + dur;
}

/* Time at which layer l is at the version iteration t needs. */
static double weights_ready(const sim *s, int t, int l)
{
    int src = t - 1 - s->mc->optimizer_lag;
    if (src < 0)
        return 0.0;
    const double *rd = s->ready + (size_t)src * (s->L + 1);
    double r = rd[l];
    int tied = s->m->layers[l].tied_to;
    if (tied >= 0)
        r = dmax(r, rd[tied]);
    if (s->emb && tied == 0)
        r = dmax(r, rd[s->L]); /* reads the whole table: part (b) too */
    return r;
}

static void run_jobs(sim *s, int t, int g)
{
    const rp_machine *mc = s->mc;
    int prev_exec = -1;
    for (int j = 0; j < s->n; j++) {
        const rp_job *job = &s->jobs[j];
        int e = rp_schedule_executor(s->p, mc->gpus, t, j, g);
        int gpu = rp_machine_gpu_of(mc, e);
        exec_state *x = &s->ex[e];
        double wr = 0.0;
        for (int l = job->first; l <= job->last; l++)
            wr = dmax(wr, weights_ready(s, t, l));
        if (s->gate_tail && job->kind == RP_JOB_TAIL && t - 1 - mc->optimizer_lag >= 0)
            wr = dmax(wr, s->ready[(size_t)(t - 1 - mc->optimizer_lag) * (s->L + 1) + s->L]);
        double up_start = dmax(dmax(x->h2d_free, wr), x->end2);
        double up_end = take_link(s, gpu, 0, up_start, s->up_ms[j]);
        x->h2d_free = up_end;
        x->upload_busy += up_end - up_start;
        double clock = dmax(up_end, x->end1);
        double lat = (prev_exec >= 0 && prev_exec != e) ? mc->transfer_ms : 0.0;
        double defer = (mc->defer_wgrad && job->kind != RP_JOB_FWD) ? s->job_wgrad[j] : 0.0;
        for (int mb = 0; mb < s->Mg; mb++) {
            double in = j == 0 ? 0.0 : s->prev_out[mb] + lat;
            double st = dmax(clock, in);
            clock = st + s->job_ms[j];
            s->cur_out[mb] = clock - defer;
            s->iv[s->niv++] = (ival){st, clock, e};
        }
        x->end2 = x->end1;
        x->end1 = clock;
        x->busy += s->job_ms[j] * s->Mg;
        if (clock > s->iter_end[t])
            s->iter_end[t] = clock;
        if (job->kind != RP_JOB_FWD) {
            double d = take_link(s, gpu, 1, dmax(x->d2h_free, clock), s->down_ms[j]);
            x->d2h_free = d;
            for (int l = job->first; l <= job->last; l++) {
                s->grad_done[l] = dmax(s->grad_done[l], d);
                if (g == 0)
                    s->producer[l] = e;
            }
        }
        double *tmp = s->prev_out;
        s->prev_out = s->cur_out;
        s->cur_out = tmp;
        prev_exec = e;
    }
}

static int by_ready(const void *a, const void *b)
{
    const opt_task *x = a, *y = b;
    if (x->ready != y->ready)
        return x->ready < y->ready ? -1 : 1;
    return x->prio - y->prio;
}

/* Min-heap of task indices keyed by priority. */
static void heap_push(int *h, int *n, const opt_task *tk, int v)
{
    int i = (*n)++;
    while (i > 0 && tk[h[(i - 1) / 2]].prio > tk[v].prio) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int heap_pop(int *h, int *n, const opt_task *tk)
{
    int top = h[0], v = h[--(*n)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && tk[h[c + 1]].prio < tk[h[c]].prio)
            c++;
        if (tk[h[c]].prio >= tk[v].prio)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = v;
    return top;
}

/* Non-preemptive, highest priority (lowest layer) first among the ready
 * tasks of one rank. */
static void run_pool(sim *s, int rank, opt_task *tk, int nt, int *heap, double *done)
{
    qsort(tk, (size_t)nt, sizeof *tk, by_ready);
    double now = s->pool_free[rank];
    int next = 0, hn = 0;
    while (next < nt || hn > 0) {
        if (hn == 0 && tk[next].ready > now)
            now = tk[next].ready;
        while (next < nt && tk[next].ready <= now)
            heap_push(heap, &hn, tk, next++);
        int i = heap_pop(heap, &hn, tk);
        now += tk[i].dur;
        s->pool_busy[rank] += tk[i].dur;
        done[tk[i].slot] = dmax(done[tk[i].slot], now);
    }
    s->pool_free[rank] = now;
}

/* Queue one piece of optimizer work: on every rank (dur / G each) with
 * opt_spread, else on `rank`. */
static void add_task(sim *s, int *nt, double ready, double dur, int prio, int slot, int rank)
{
    const rp_machine *mc = s->mc;
    if (mc->opt_spread) {
        for (int r = 0; r < mc->gpus; r++)
            s->tasks[(*nt)++] = (opt_task){ready, dur / mc->gpus, prio, slot, r};
    } else {
        s->tasks[(*nt)++] = (opt_task){ready, dur, prio, slot, rank};
    }
}

static void run_optimizer(sim *s, int t)
{
    const rp_machine *mc = s->mc;
    const rp_cost_model *m = s->m;
    double *done = s->ready + (size_t)t * (s->L + 1);
    double last = 0.0;
    for (int l = 0; l < s->L; l++)
        last = dmax(last, s->grad_done[l]);
    double rate = mc->opt_gbs * 1e6; /* bytes per ms */
    int nt = 0;
    done[s->L] = 0.0;
    for (int l = 0; l < s->L; l++) {
        const rp_layer_cost *c = &m->layers[l];
        done[l] = 0.0;
        if (c->opt_params <= 0)
            continue;
        double ready = mc->clip ? last : s->grad_done[l];
        if (l == 0 && s->emb) {
            /* the tied layers' dense gradients are summed over the groups as
             * soon as they land, ahead of any update, by the rank(s) that
             * will update layer 0 (so part (a) follows them on that rank) */
            for (int i = 0; i < s->ntied; i++)
                if (m->layers[s->tied[i]].tied_to == 0) {
                    double land = s->grad_done[s->tied[i]];
                    ready = dmax(ready, land);
                    add_task(s, &nt, land,
                             (double)s->groups * (double)m->layers[s->tied[i]].grad_bytes / rate,
                             -1, 0, s->producer[0]);
                }
            /* (a) sum the groups' sparse parts (like the dense copies:
             * groups - 1 extra reads), update the rows the next forward
             * reads; (b) the other rows, after every other update */
            double a = (double)(s->groups - 1) * s->rfg * (double)c->grad_bytes +
                       s->rf * (double)c->opt_params * mc->opt_bytes_per_param;
            double b = (1.0 - s->rf) * (double)c->opt_params * mc->opt_bytes_per_param;
            add_task(s, &nt, ready, a / rate, 0, 0, s->producer[0]);
            if (b > 0)
                add_task(s, &nt, ready, b / rate, s->L, s->L, s->producer[0]);
            continue;
        }
        double bytes = (double)c->opt_params * mc->opt_bytes_per_param +
                       (double)(s->groups - 1) * (double)c->grad_bytes;
        /* a tied layer's gradient arrives in two parts that are summed here */
        for (int i = 0; i < s->ntied; i++)
            if (m->layers[s->tied[i]].tied_to == l) {
                ready = dmax(ready, s->grad_done[s->tied[i]]);
                bytes += (double)s->groups * (double)m->layers[s->tied[i]].grad_bytes;
            }
        add_task(s, &nt, ready, bytes / rate, l, l, s->producer[l]);
    }
    /* group the tasks by rank; each rank's pool runs its own */
    for (int r = 0; r < mc->gpus; r++) {
        int k = 0;
        for (int i = 0; i < nt; i++)
            if (s->tasks[i].rank == r)
                s->mine[k++] = s->tasks[i];
        if (k)
            run_pool(s, r, s->mine, k, s->heap, done);
    }
}

static void sim_free(sim *s)
{
    free(s->jobs);
    free(s->job_ms);
    free(s->job_wgrad);
    free(s->up_ms);
    free(s->down_ms);
    free(s->ready);
    free(s->grad_done);
    free(s->producer);
    free(s->prev_out);
    free(s->cur_out);
    free(s->iv);
    free(s->iter_end);
    free(s->tasks);
    free(s->mine);
    free(s->heap);
    free(s->tied);
}

rp_status rp_simulate(const rp_cost_model *m, const rp_plan *p, const rp_machine *mc,
                      rp_sim_result *r, rp_error *err)
{
    memset(r, 0, sizeof *r);
    RP_TRY(rp_machine_check(mc, err));
    RP_TRY(rp_plan_validate(p, m->num_layers, err));
    sim s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.p = p;
    s.mc = mc;
    s.L = m->num_layers;
    s.n = rp_schedule_num_jobs(p);
    s.W = rp_schedule_width(p, mc->gpus);
    s.iters = mc->iterations;
    RP_TRY(rp_schedule_check(p, mc->gpus, mc->microbatches, &s.Mg, err));
    s.groups = mc->gpus / s.W;
    size_t nivals = (size_t)s.iters * s.groups * s.n * s.Mg;
    s.jobs = malloc(sizeof *s.jobs * s.n);
    s.job_ms = malloc(sizeof(double) * s.n);
    s.job_wgrad = malloc(sizeof(double) * s.n);
    s.up_ms = malloc(sizeof(double) * s.n);
    s.down_ms = malloc(sizeof(double) * s.n);
    s.ready = calloc((size_t)s.iters * (s.L + 1), sizeof(double));
    s.grad_done = calloc((size_t)s.L, sizeof(double));
    s.producer = calloc((size_t)s.L, sizeof(int));
    s.prev_out = calloc((size_t)s.Mg, sizeof(double));
    s.cur_out = calloc((size_t)s.Mg, sizeof(double));
    s.iv = malloc(sizeof *s.iv * (nivals ? nivals : 1));
    s.iter_end = calloc((size_t)s.iters, sizeof(double));
    /* one task per layer and rank, and with sparse_embed up to L - 1 tied
     * sums and part (b) more */
    size_t ntasks = (size_t)2 * (s.L + 1) * mc->gpus;
    s.tasks = malloc(sizeof *s.tasks * ntasks);
    s.mine = malloc(sizeof *s.mine * ntasks);
    s.heap = malloc(sizeof(int) * ntasks);
    s.tied = malloc(sizeof(int) * (size_t)s.L);
    if (!s.jobs || !s.job_ms || !s.job_wgrad || !s.up_ms || !s.down_ms || !s.ready ||
        !s.grad_done || !s.producer || !s.prev_out || !s.cur_out || !s.iv || !s.iter_end ||
        !s.tasks || !s.mine || !s.heap || !s.tied) {
        sim_free(&s);
        return rp_error_set(err, RP_ERR_NOMEM, "simulate: out of memory");
    }
    for (int l = 0; l < s.L; l++)
        if (m->layers[l].tied_to >= 0)
            s.tied[s.ntied++] = l;
    s.emb = mc->sparse_embed && s.L >= 1 && m->layers[0].kind == RP_LAYER_EMBED;
    if (s.emb) {
        s.rf = rp_machine_embed_rows_frac(m, mc, mc->microbatches);
        s.rfg = rp_machine_embed_rows_frac(m, mc, s.Mg);
        s.gate_tail = 1;
        for (int i = 0; i < s.ntied; i++)
            if (m->layers[s.tied[i]].tied_to == 0)
                s.gate_tail = 0;
    }
    double link = mc->link_gbs * 1e6; /* bytes per ms */
    for (int k = 0; k < mc->link_groups; k++) {
        double up = mc->uplink_gbs[k] > 0 ? mc->uplink_gbs[k] : mc->link_gbs;
        int lanes = (int)(up / mc->link_gbs + 1e-9);
        s.lanes[k] = lanes < 1 ? 1 : lanes > RP_SIM_MAX_LANES ? RP_SIM_MAX_LANES : lanes;
        s.slow[k] = up < mc->link_gbs ? mc->link_gbs / up : 1.0;
    }
    for (int j = 0; j < s.n; j++) {
        s.jobs[j] = rp_schedule_job(p, j);
        const rp_job *jb = &s.jobs[j];
        s.job_ms[j] = rp_schedule_job_ms(m, jb);
        s.job_wgrad[j] = rp_cost_wgrad_ms(m, jb->first, jb->last);
        s.up_ms[j] = (double)rp_cost_weight_bytes(m, jb->first, jb->last) / link;
        s.down_ms[j] = jb->kind == RP_JOB_FWD
                           ? 0.0
                           : (double)rp_cost_grad_download_bytes(m, jb->first, jb->last) / link;
        if (s.emb && jb->first == 0) {
            /* the rows this group's tokens read, and gradient rows for them */
            const rp_layer_cost *e = &m->layers[0];
            double wb = (double)rp_cost_weight_bytes(m, 0, jb->last) - (double)e->weight_bytes;
            double gb = (double)rp_cost_grad_download_bytes(m, 0, jb->last) -
                        (double)rp_cost_grad_download_bytes(m, 0, 0);
            s.up_ms[j] = (wb + s.rfg * (double)e->weight_bytes) / link;
            if (jb->kind != RP_JOB_FWD)
                s.down_ms[j] = (gb + s.rfg * (double)rp_cost_grad_download_bytes(m, 0, 0)) / link;
        }
    }

    for (int t = 0; t < s.iters; t++) {
        for (int l = 0; l < s.L; l++)
            s.grad_done[l] = 0.0;
        for (int g = 0; g < s.groups; g++)
            run_jobs(&s, t, g);
        run_optimizer(&s, t);
    }

    int w0 = (s.iters - 1) / 2, w1 = s.iters - 1;
    r->iteration_ms = (s.iter_end[w1] - s.iter_end[w0]) / (w1 - w0);
    /* busy time is counted up to the end of the last iteration but one: after
     * that, executors idle only because no later jobs were simulated */
    double a = s.iter_end[w0], b = s.iter_end[w1 - 1];
    int nwin = w1 - 1 - w0;
    double busy[RP_SIM_MAX_GPUS] = {0};
    for (size_t i = 0; i < s.niv; i++) {
        double lo = dmax(s.iv[i].s, a), hi = s.iv[i].e < b ? s.iv[i].e : b;
        if (hi > lo)
            busy[s.iv[i].exec] += hi - lo;
    }
    double tot = 0, mx = 0, up = 0, opt = 0, upmax = 0, cmax = 0;
    for (int e = 0; e < mc->gpus; e++) {
        cmax = dmax(cmax, s.ex[e].busy / s.iters);
        up += s.ex[e].upload_busy;
        upmax = dmax(upmax, s.ex[e].upload_busy / s.iters);
        opt = dmax(opt, s.pool_busy[e] / s.iters);
    }
    /* A rank's optimizer or an executor's link that is busier than an
     * iteration falls further behind every iteration; a short simulation may
     * not run long enough for that to throttle the jobs, so steady state is
     * at least that busy time. */
    r->limit = RP_LIMIT_SCHEDULE;
    /* an executor that runs ahead of the others (nothing but the weight
     * versions holds back the first jobs) shortens a short window; its work
     * per iteration is a floor on the steady state */
    if (cmax > r->iteration_ms)
        r->iteration_ms = cmax;
    if (opt > r->iteration_ms) {
        r->iteration_ms = opt;
        r->limit = RP_LIMIT_OPTIMIZER;
    }
    for (int k = 0; k < mc->link_groups; k++) /* a shared link busier than an iteration */
        upmax = dmax(upmax, s.group_up_busy[k] / s.iters / s.lanes[k]);
    if (upmax > r->iteration_ms) {
        r->iteration_ms = upmax;
        r->limit = RP_LIMIT_UPLOAD;
    }
    if (mc->host_gbs > 0) {
        /* bytes through host memory per iteration: every upload and gradient
         * download, each hand-over written and read once, the optimizer's */
        double bytes = 0;
        for (int j = 0; j < s.n; j++) {
            const rp_job *jb = &s.jobs[j];
            bytes += (s.up_ms[j] + s.down_ms[j]) * link * s.groups;
            bytes += 2.0 * (double)m->layers[jb->last].out_bytes * s.Mg * s.groups;
        }
        double rate = mc->opt_gbs * 1e6, optsum = 0;
        for (int e = 0; e < mc->gpus; e++)
            optsum += s.pool_busy[e] / s.iters;
        bytes += optsum * rate;
        double host = bytes / (mc->host_gbs * 1e6);
        if (host > r->iteration_ms) {
            r->iteration_ms = host;
            r->limit = RP_LIMIT_HOST;
        }
    }
    for (int e = 0; e < mc->gpus; e++) {
        /* busy is measured over w1-w0 iterations; scale to the steady rate */
        /* over the window, against the longer of the window's own iteration
         * time and the steady-state one (a floor may have raised it) */
        double per_iter = b > a ? busy[e] / nwin : 0.0, span = dmax(r->iteration_ms, (b - a) / nwin);
        r->bubble[e] = span > 0 ? 1.0 - per_iter / span : 0.0;
        tot += r->bubble[e];
        mx = dmax(mx, r->bubble[e]);
    }
    r->bubble_mean = tot / mc->gpus;
    r->bubble_max = mx;
    double work = 0;
    for (int j = 0; j < s.n; j++)
        work += s.job_ms[j] * s.Mg * s.groups;
    r->compute_ms = work / mc->gpus;
    r->upload_ms = up / mc->gpus / s.iters;
    r->opt_ms = opt;
    if (mc->tokens_per_iteration > 0 && r->iteration_ms > 0)
        r->tokens_per_s = (double)mc->tokens_per_iteration / (r->iteration_ms / 1e3);
    r->peak_bytes = rp_schedule_peak_bytes(m, p, mc->gpus, mc->workspace_bytes, &r->worst_job);
    r->width = s.W;
    r->groups = s.groups;
    r->group_microbatches = s.Mg;
    sim_free(&s);
    return RP_OK;
}
