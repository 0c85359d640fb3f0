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
    mc->nodes = 1;
    mc->network_gbs = RP_SIM_DEFAULT_NETWORK_GBS;
    mc->compute_bytes_per_param = 2.0;
}

rp_machine rp_machine_node(const rp_machine *mc)
{
    rp_machine one = *mc;
    int N = rp_machine_nodes(mc);
    one.nodes = 1;
    one.microbatches = mc->microbatches / N;
    one.tokens_per_iteration = mc->tokens_per_iteration / N;
    return one;
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
    if (mc->nodes < 0 || mc->nodes > RP_SIM_MAX_NODES)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: %d nodes (supported 1..%d)",
                            mc->nodes, RP_SIM_MAX_NODES);
    if (mc->nodes > 1) {
        if (mc->microbatches % mc->nodes)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "machine: %d microbatches do not split evenly over %d nodes "
                                "(each node runs M/N of the iteration's M)",
                                mc->microbatches, mc->nodes);
        if (!(mc->network_gbs > 0) || !isfinite(mc->network_gbs))
            return rp_error_set(err, RP_ERR_INVALID_ARG, "machine: network bandwidth must be > 0");
        if (!(mc->compute_bytes_per_param > 0) || !isfinite(mc->compute_bytes_per_param))
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "machine: compute bytes per parameter must be > 0");
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
    struct net *net; /* several nodes: the network and the nodes' optimizers, else NULL */
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

/* A min-heap of task indices h[0..*n): before(ctx, a, b) says whether task
 * a comes out before task b. One for the optimizer pools of one node and of
 * several (net_* below). */
typedef int (*task_order)(const void *ctx, int a, int b);

static void heap_push(int *h, int *n, task_order before, const void *ctx, int v)
{
    int i = (*n)++;
    while (i > 0 && before(ctx, v, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int heap_pop(int *h, int *n, task_order before, const void *ctx)
{
    int top = h[0], v = h[--(*n)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(ctx, h[c + 1], h[c]))
            c++;
        if (!before(ctx, h[c], v))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = v;
    return top;
}

/* One node's optimizer tasks: by priority (the lowest layer first). */
static int by_prio(const void *ctx, int a, int b)
{
    const opt_task *tk = ctx;
    return tk[a].prio < tk[b].prio;
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
            heap_push(heap, &hn, by_prio, tk, next++);
        int i = heap_pop(heap, &hn, by_prio, tk);
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

/* ---- Several nodes (simulate.h): the gradient chain, the scatter, the
 * sliced updates and the all-gather of one iteration, in virtual time. The
 * nodes' compute is the one timeline above; what differs between nodes is
 * their network role, so each node has its NIC and optimizer pools here.
 * Unlike one node's optimizer, the work here waits on messages and messages
 * wait on work, so it runs as a small event loop over time. */

/* optimizer task kinds: a sum of a layer's copies before its hop, of tied
 * layers' gradients before the base's hop, the update of a slice */
enum { NT_SUM = 0, NT_BASE_SUM = 1, NT_UPDATE = 2 };
enum { NM_CHAIN = 0, NM_SCATTER = 1, NM_GATHER = 2, NM_BASE = 3 }; /* message kinds */
enum { EV_TASK_READY, EV_TASK_DONE, EV_MSG_DONE, EV_LANDED, EV_WAKE };

typedef struct net_task {
    double ready, dur;
    int prio, kind, slot, node, pool; /* slot: the layer (a sum), the update slot */
} net_task;

typedef struct net_msg {
    double dur, bytes;
    int kind, slot, src, dst, next; /* next: in its (src, dst) queue */
} net_msg;

typedef struct net_event {
    double t;
    int seq, kind, a;
} net_event;

typedef struct net {
    int N, P;    /* nodes; optimizer pools per node (1 with opt_spread) */
    double rate; /* network bytes per ms */
    /* carried from one iteration to the next */
    double *send_free, *recv_free, *send_busy, *recv_busy, *sent; /* [N] */
    double *pool_free, *pool_busy;                                 /* [N * P] */
    /* one iteration */
    net_task *task;
    int ntask, ntask_max;
    int *upd;                 /* [(L + 1) * N]: slot k's update task on node n, or -1 */
    int *heap, *heap_off, *heap_n; /* each pool's ready tasks: a min-heap by prio */
    int *dirty, ndirty;       /* pools to dispatch */
    unsigned char *is_dirty;  /* [N * P] */
    int nic_dirty;            /* a NIC direction freed or a message was posted */
    net_msg *msg;
    int nmsg, nmsg_max;
    int *qhead, *qtail;       /* [N * N]: unstarted messages src -> dst, in posting order */
    net_event *ev;
    int nev, nev_max, seq;
    int *need;                /* [L * N]: what node n awaits before passing layer l on */
    int *need_base;           /* [N]: what node n awaits before passing the base on */
    double base_bytes;        /* the tied embedding's base (0: none) */
    int *have;                /* [(L + 1) * N]: slices of slot k on node n */
    int *slices_left;         /* [N]: with clip, slices node n awaits this iteration */
    double *gather_bytes;     /* [L + 1]: slot k's all-gather bytes, all slices */
    double *grad_bytes;       /* [L]: G_l (0: not trainable) */
} net;

static int ev_before(const net_event *a, const net_event *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void ev_push(net *w, double t, int kind, int a)
{
    net_event x = {t, w->seq++, kind, a};
    int i = w->nev++;
    while (i > 0 && ev_before(&x, &w->ev[(i - 1) / 2])) {
        w->ev[i] = w->ev[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->ev[i] = x;
}

static net_event ev_pop(net *w)
{
    net_event top = w->ev[0], x = w->ev[--w->nev];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= w->nev)
            break;
        if (c + 1 < w->nev && ev_before(&w->ev[c + 1], &w->ev[c]))
            c++;
        if (!ev_before(&w->ev[c], &x))
            break;
        w->ev[i] = w->ev[c];
        i = c;
    }
    if (w->nev > 0)
        w->ev[i] = x;
    return top;
}

/* Task a runs before task b in a pool: lower prio, then created first. */
static int task_before(const void *ctx, int a, int b)
{
    const net *w = ctx;
    return w->task[a].prio < w->task[b].prio || (w->task[a].prio == w->task[b].prio && a < b);
}

static void mark_pool(net *w, int pool)
{
    if (!w->is_dirty[pool]) {
        w->is_dirty[pool] = 1;
        w->dirty[w->ndirty++] = pool;
    }
}

/* Task i is ready: into its pool's heap. */
static void pool_add(net *w, int i)
{
    int pool = w->task[i].pool;
    heap_push(w->heap + w->heap_off[pool], &w->heap_n[pool], task_before, w, i);
    mark_pool(w, pool);
}

static int pool_take(net *w, int pool)
{
    return heap_pop(w->heap + w->heap_off[pool], &w->heap_n[pool], task_before, w);
}

static void post(net *w, int kind, int slot, int src, int dst, double bytes)
{
    int i = w->nmsg++, q = src * w->N + dst;
    w->msg[i] = (net_msg){RP_SIM_NET_LATENCY_MS + bytes / w->rate, bytes, kind, slot, src, dst, -1};
    if (w->qtail[q] >= 0)
        w->msg[w->qtail[q]].next = i;
    else
        w->qhead[q] = i;
    w->qtail[q] = i;
    w->nic_dirty = 1;
}

/* Node n has its slice of layer l: its updates of the layer may start
 * (with clip, once it has every slice of the iteration). */
static void slice_arrived(sim *s, net *w, int l, int n)
{
    if (s->mc->clip) {
        if (--w->slices_left[n] > 0)
            return;
        for (int k = 0; k <= s->L; k++)
            if (w->upd[k * w->N + n] >= 0)
                pool_add(w, w->upd[k * w->N + n]);
        return;
    }
    pool_add(w, w->upd[l * w->N + n]);
    if (l == 0 && w->upd[s->L * w->N + n] >= 0)
        pool_add(w, w->upd[s->L * w->N + n]);
}

/* One of the things node n awaits before passing layer l on has come: its
 * gradient landed, a sum of it finished, or the previous node's partial
 * arrived. With all of them: the next hop, or (the last node) the scatter. */
static void chain_step(sim *s, net *w, int l, int n)
{
    if (--w->need[l * w->N + n] > 0)
        return;
    int N = w->N;
    if (n < N - 1) {
        post(w, NM_CHAIN, l, n, n + 1, w->grad_bytes[l]);
        return;
    }
    for (int j = 0; j < N - 1; j++)
        post(w, NM_SCATTER, l, N - 1, j, w->grad_bytes[l] / N);
    slice_arrived(s, w, l, N - 1);
}

/* One of the things node n awaits before passing the tied embedding's base
 * on has come (a sum of its tied layers' gradients, the previous node's
 * base). With all of them: the next hop, or (the last node) the final base
 * to node 0, whose chain of layer 0 starts from it. */
static void base_step(net *w, int n)
{
    if (--w->need_base[n] > 0)
        return;
    post(w, NM_BASE, 0, n, (n + 1) % w->N, w->base_bytes);
}

/* Node n has one more slice of slot k; with all N the slot is at the new
 * version there, and done[k] is the latest node's time. */
static void slice_gathered(net *w, int k, int n, double T, double *done)
{
    if (++w->have[k * w->N + n] == w->N)
        done[k] = dmax(done[k], T);
}

static void net_handle(sim *s, net *w, net_event e, double T, double *done)
{
    int N = w->N;
    switch (e.kind) {
    case EV_TASK_READY:
        pool_add(w, e.a);
        break;
    case EV_TASK_DONE: {
        const net_task *tk = &w->task[e.a];
        mark_pool(w, tk->pool);
        if (tk->kind == NT_SUM) {
            chain_step(s, w, tk->slot, tk->node);
            break;
        }
        if (tk->kind == NT_BASE_SUM) {
            base_step(w, tk->node);
            break;
        }
        for (int d = 1; d < N; d++)
            post(w, NM_GATHER, tk->slot, tk->node, (tk->node + d) % N,
                 w->gather_bytes[tk->slot] / N);
        slice_gathered(w, tk->slot, tk->node, T, done);
        break;
    }
    case EV_MSG_DONE: {
        const net_msg *m = &w->msg[e.a];
        w->nic_dirty = 1;
        if (m->kind == NM_CHAIN)
            chain_step(s, w, m->slot, m->dst);
        else if (m->kind == NM_SCATTER)
            slice_arrived(s, w, m->slot, m->dst);
        else if (m->kind == NM_BASE && m->dst == 0) /* the final base */
            chain_step(s, w, 0, 0);
        else if (m->kind == NM_BASE)
            base_step(w, m->dst);
        else
            slice_gathered(w, m->slot, m->dst, T, done);
        break;
    }
    case EV_LANDED:
        for (int n = 0; n < N; n++)
            chain_step(s, w, e.a, n);
        break;
    default: /* EV_WAKE: a pool or a NIC direction busy from before is free */
        w->nic_dirty = 1;
        for (int p = 0; p < N * w->P; p++)
            mark_pool(w, p);
    }
}

/* At time T: every idle pool starts its most urgent ready task; every
 * message whose sender and receiver directions are both free starts, the
 * earliest posted first. */
static void net_dispatch(net *w, double T)
{
    for (int i = 0; i < w->ndirty; i++) {
        int p = w->dirty[i];
        w->is_dirty[p] = 0;
        while (w->pool_free[p] <= T && w->heap_n[p] > 0) {
            int k = pool_take(w, p);
            w->pool_free[p] = T + w->task[k].dur;
            w->pool_busy[p] += w->task[k].dur;
            ev_push(w, T + w->task[k].dur, EV_TASK_DONE, k);
        }
    }
    w->ndirty = 0;
    int N = w->N;
    while (w->nic_dirty) {
        int best = -1;
        for (int a = 0; a < N; a++) {
            if (w->send_free[a] > T)
                continue;
            for (int b = 0; b < N; b++) {
                int m = w->qhead[a * N + b];
                if (m >= 0 && w->recv_free[b] <= T && (best < 0 || m < best))
                    best = m;
            }
        }
        if (best < 0) {
            w->nic_dirty = 0;
            break;
        }
        net_msg *m = &w->msg[best];
        int q = m->src * N + m->dst;
        w->qhead[q] = m->next;
        if (m->next < 0)
            w->qtail[q] = -1;
        w->send_free[m->src] = w->recv_free[m->dst] = T + m->dur;
        w->send_busy[m->src] += m->dur;
        w->recv_busy[m->dst] += m->dur;
        w->sent[m->src] += m->bytes;
        ev_push(w, T + m->dur, EV_MSG_DONE, best);
    }
}

/* A piece of optimizer work on node n: on its one pool of G ranks (a G-th
 * of the time) with opt_spread, else on the producing rank's pool. */
static int net_task_add(sim *s, net *w, int kind, int slot, int prio, int n, double ready,
                        double bytes, int rank)
{
    const rp_machine *mc = s->mc;
    double dur = bytes / (mc->opt_gbs * 1e6);
    int pool = n * w->P + (mc->opt_spread ? 0 : rank);
    if (mc->opt_spread)
        dur /= mc->gpus;
    int i = w->ntask++;
    w->task[i] = (net_task){ready, dur, prio, kind, slot, n, pool};
    return i;
}

/* Layer l's optimizer work on every node, priced as run_optimizer prices
 * it on one node: the sum of its pipelines' copies (and of tied layers'
 * gradients), which the node's hop awaits, and the update of its slice (with
 * sparse_embed, parts (a) and (b)), released when the slice arrives. With
 * sparse_embed the tied layers' gradients are summed on landing, each its
 * own task, into the base, which has a chain of its own (ending on node 0,
 * where layer 0's chain then starts). Returns when the layer's gradients
 * (its own and tied layers') have all landed. */
static double net_layer_tasks(sim *s, net *w, int l)
{
    const rp_machine *mc = s->mc;
    const rp_cost_model *m = s->m;
    const rp_layer_cost *c = &m->layers[l];
    int N = w->N, L = s->L, sum_prio = l - (L + 2); /* every sum before any update */
    int sparse = l == 0 && s->emb, tied = 0;
    double a = sparse ? s->rf : 1.0; /* part (a)'s share of the update */
    double rows = sparse ? s->rfg : 1.0, landed = s->grad_done[l];
    double base = (double)(s->groups - 1) * rows * (double)c->grad_bytes;
    double work = (double)c->opt_params * mc->opt_bytes_per_param;
    for (int i = 0; i < s->ntied; i++) {
        const rp_layer_cost *tc = &m->layers[s->tied[i]];
        if (tc->tied_to != l)
            continue;
        tied++;
        landed = dmax(landed, s->grad_done[s->tied[i]]);
        if (!sparse)
            base += (double)s->groups * (double)tc->grad_bytes;
    }
    for (int n = 0; n < N; n++) {
        int *need = &w->need[l * N + n];
        *need = 1 + (n > 0 || (sparse && tied)); /* the landing; a partial or the base */
        if (sparse && tied)
            w->need_base[n] = tied + (n > 0);
        for (int i = 0; sparse && i < s->ntied; i++) {
            const rp_layer_cost *tc = &m->layers[s->tied[i]];
            if (tc->tied_to == l)
                net_task_add(s, w, NT_BASE_SUM, l, sum_prio, n, s->grad_done[s->tied[i]],
                             (double)s->groups * (double)tc->grad_bytes, s->producer[l]);
        }
        if (base > 0) {
            (*need)++;
            net_task_add(s, w, NT_SUM, l, sum_prio, n, sparse ? s->grad_done[l] : landed, base,
                         s->producer[l]);
        }
        w->upd[l * N + n] = net_task_add(s, w, NT_UPDATE, l, l, n, INFINITY, a * work / N,
                                         s->producer[l]);
        if (a < 1.0)
            w->upd[L * N + n] = net_task_add(s, w, NT_UPDATE, L, L, n, INFINITY,
                                             (1.0 - a) * work / N, s->producer[l]);
    }
    w->grad_bytes[l] = RP_SIM_NET_GRAD_BYTES * (double)c->opt_params;
    w->gather_bytes[l] = a * mc->compute_bytes_per_param * (double)c->opt_params;
    if (a < 1.0)
        w->gather_bytes[L] = (1.0 - a) * mc->compute_bytes_per_param * (double)c->opt_params;
    if (sparse && tied)
        w->base_bytes = w->grad_bytes[l];
    return landed;
}

/* Each pool's heap gets room for the tasks it may hold. */
static void net_heaps(net *w)
{
    int pools = w->N * w->P, off = 0;
    for (int p = 0; p < pools; p++)
        w->heap_n[p] = 0;
    for (int i = 0; i < w->ntask; i++)
        w->heap_n[w->task[i].pool]++;
    for (int p = 0; p < pools; p++) {
        w->heap_off[p] = off;
        off += w->heap_n[p];
        w->heap_n[p] = 0;
    }
}

/* Iteration t's updates on N nodes: ready[t][k] is when every node has the
 * new version of slot k (as run_optimizer's, 0 for untrained slots). */
static void net_optimizer(sim *s, int t)
{
    net *w = s->net;
    int N = w->N, L = s->L, trained = 0;
    double *done = s->ready + (size_t)t * (L + 1);
    w->ntask = w->nmsg = w->nev = w->seq = 0;
    w->base_bytes = 0;
    for (int k = 0; k <= L; k++) {
        done[k] = 0.0;
        for (int n = 0; n < N; n++) {
            w->upd[k * N + n] = -1;
            w->have[k * N + n] = 0;
        }
    }
    for (int q = 0; q < N * N; q++)
        w->qhead[q] = w->qtail[q] = -1;
    for (int l = 0; l < L; l++) {
        if (s->m->layers[l].opt_params <= 0)
            continue;
        trained++;
        ev_push(w, net_layer_tasks(s, w, l), EV_LANDED, l);
    }
    for (int n = 0; n < N; n++)
        w->slices_left[n] = trained;
    net_heaps(w);
    for (int i = 0; i < w->ntask; i++)
        if (w->task[i].kind != NT_UPDATE)
            ev_push(w, w->task[i].ready, EV_TASK_READY, i);
    for (int p = 0; p < N * w->P; p++)
        ev_push(w, w->pool_free[p], EV_WAKE, -1);
    for (int n = 0; n < N; n++) {
        ev_push(w, w->send_free[n], EV_WAKE, -1);
        ev_push(w, w->recv_free[n], EV_WAKE, -1);
    }
    while (w->nev > 0) {
        double T = w->ev[0].t;
        while (w->nev > 0 && w->ev[0].t <= T)
            net_handle(s, w, ev_pop(w), T, done);
        net_dispatch(w, T);
    }
}

static void net_free(net *w)
{
    if (!w)
        return;
    free(w->send_free);
    free(w->recv_free);
    free(w->send_busy);
    free(w->recv_busy);
    free(w->sent);
    free(w->pool_free);
    free(w->pool_busy);
    free(w->task);
    free(w->upd);
    free(w->heap);
    free(w->heap_off);
    free(w->heap_n);
    free(w->dirty);
    free(w->is_dirty);
    free(w->msg);
    free(w->qhead);
    free(w->qtail);
    free(w->ev);
    free(w->need);
    free(w->need_base);
    free(w->have);
    free(w->slices_left);
    free(w->gather_bytes);
    free(w->grad_bytes);
    free(w);
}

/* The network state of N > 1 nodes, sized for the largest iteration:
 * per layer at most 2 + (tied layers) sums and updates per node, N - 1
 * chain hops, N - 1 scatter messages and N (N - 1) gather messages per slot,
 * N hops of the base. */
static net *net_create(const sim *s)
{
    net *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    const rp_machine *mc = s->mc;
    int N = mc->nodes, L = s->L;
    size_t pools;
    w->N = N;
    w->P = mc->opt_spread ? 1 : mc->gpus;
    w->rate = mc->network_gbs * 1e9 / 8 / 1e3;
    pools = (size_t)N * w->P;
    w->ntask_max = (2 * L + 1 + s->ntied) * N;
    w->nmsg_max = 2 * L * (N - 1) + N + (L + 1) * N * (N - 1);
    w->nev_max = w->ntask_max * 2 + w->nmsg_max + L + (int)pools + 2 * N;
    w->send_free = calloc((size_t)N, sizeof(double));
    w->recv_free = calloc((size_t)N, sizeof(double));
    w->send_busy = calloc((size_t)N, sizeof(double));
    w->recv_busy = calloc((size_t)N, sizeof(double));
    w->sent = calloc((size_t)N, sizeof(double));
    w->pool_free = calloc(pools, sizeof(double));
    w->pool_busy = calloc(pools, sizeof(double));
    w->task = malloc(sizeof *w->task * (size_t)w->ntask_max);
    w->upd = malloc(sizeof(int) * (size_t)(L + 1) * N);
    w->heap = malloc(sizeof(int) * (size_t)w->ntask_max);
    w->heap_off = calloc(pools, sizeof(int));
    w->heap_n = calloc(pools, sizeof(int));
    w->dirty = malloc(sizeof(int) * pools);
    w->is_dirty = calloc(pools, 1);
    w->msg = malloc(sizeof *w->msg * (size_t)(w->nmsg_max > 0 ? w->nmsg_max : 1));
    w->qhead = malloc(sizeof(int) * (size_t)N * N);
    w->qtail = malloc(sizeof(int) * (size_t)N * N);
    w->ev = malloc(sizeof *w->ev * (size_t)w->nev_max);
    w->need = calloc((size_t)(L > 0 ? L : 1) * N, sizeof(int));
    w->need_base = calloc((size_t)N, sizeof(int));
    w->have = calloc((size_t)(L + 1) * N, sizeof(int));
    w->slices_left = calloc((size_t)N, sizeof(int));
    w->gather_bytes = calloc((size_t)L + 1, sizeof(double));
    w->grad_bytes = calloc((size_t)(L > 0 ? L : 1), sizeof(double));
    if (!w->send_free || !w->recv_free || !w->send_busy || !w->recv_busy || !w->sent ||
        !w->pool_free || !w->pool_busy || !w->task || !w->upd || !w->heap || !w->heap_off ||
        !w->heap_n || !w->dirty || !w->is_dirty || !w->msg || !w->qhead || !w->qtail || !w->ev ||
        !w->need || !w->need_base || !w->have || !w->slices_left || !w->gather_bytes ||
        !w->grad_bytes) {
        net_free(w);
        return NULL;
    }
    return w;
}

/* Per iteration, over the whole run: the busiest NIC direction of any node,
 * the most bytes one node sent, the busiest optimizer pool (a rank's time). */
static void net_results(const sim *s, rp_sim_result *r)
{
    const net *w = s->net;
    double busiest = 0, sent = 0, G = 0, W = 0;
    for (int n = 0; n < w->N; n++) {
        busiest = dmax(busiest, dmax(w->send_busy[n], w->recv_busy[n]));
        sent = dmax(sent, w->sent[n]);
    }
    for (int l = 0; l < s->L; l++) {
        double p = s->m->layers[l].opt_params > 0 ? (double)s->m->layers[l].opt_params : 0.0;
        G += RP_SIM_NET_GRAD_BYTES * p;
        W += s->mc->compute_bytes_per_param * p;
    }
    r->nodes = w->N;
    r->net_ms = busiest / s->iters;
    r->net_send_bytes = sent / s->iters;
    r->net_grad_bytes = G;
    r->net_weight_bytes = W;
    r->net_base_bytes = w->base_bytes;
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
    net_free(s->net);
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
    /* each node runs M/N of the iteration's microbatches */
    RP_TRY(rp_schedule_check(p, mc->gpus, mc->microbatches / rp_machine_nodes(mc), &s.Mg, err));
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
    if (rp_machine_nodes(mc) > 1 && !(s.net = net_create(&s))) {
        sim_free(&s);
        return rp_error_set(err, RP_ERR_NOMEM, "simulate: out of memory");
    }
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
        if (s.net)
            net_optimizer(&s, t);
        else
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
    for (int p = 0; s.net && p < s.net->N * s.net->P; p++) /* a pool's time is a rank's */
        opt = dmax(opt, s.net->pool_busy[p] / s.iters);
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
        for (int p = 0; s.net && p < s.net->P; p++) /* node 0's pools; one is G ranks' */
            optsum += s.net->pool_busy[p] / s.iters * (s.net->P == 1 ? mc->gpus : 1);
        bytes += optsum * rate;
        double host = bytes / (mc->host_gbs * 1e6);
        if (host > r->iteration_ms) {
            r->iteration_ms = host;
            r->limit = RP_LIMIT_HOST;
        }
    }
    if (s.net)
        net_results(&s, r);
    if (s.net && r->net_ms > r->iteration_ms) {
        r->iteration_ms = r->net_ms;
        r->limit = RP_LIMIT_NETWORK;
    }
    for (int e = 0; e < mc->gpus; e++) {
        /* busy is measured over w1-w0 iterations; scale to the steady rate */
        /* over the window, against the longer of the window's own iteration
         * time and the steady-state one (a floor may have raised it) */
        double per_iter = b > a ? busy[e] / nwin : 0.0;
        double span = dmax(r->iteration_ms, (b - a) / nwin);
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
