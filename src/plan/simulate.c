/* Discrete-event simulation of the round-robin schedule (see simulate.h):
 * the single-node sweep of jobs, links and one node's optimizer, and the
 * steady-state results. The network of several nodes is plan/sim_nodes.c.
 *
 * Every dependency points from an earlier job (in the order jobs are
 * issued: iteration, then group, then job index) or from the optimizer of an
 * earlier iteration to a later job, so the simulation is a single sweep in
 * that order: no event queue is needed. The optimizer of iteration t is
 * scheduled once all of t's gradients are known, before iteration t+1's
 * jobs, which are the first that can wait for it. */
#include "plan/simulate.h"

#include <stdlib.h>
#include <string.h>

#include "plan/schedule.h"
#include "plan/sim_nodes.h"

/* A transfer of `ms` (at the GPU's own link rate) by GPU `gpu` in direction
 * dir (0 up, 1 down), ready at `ready`: its end, taking the earliest free
 * lane of the GPU's link group. */
static double take_link(rp_sim *sim, int gpu, int dir, double ready, double ms)
{
    const rp_machine *mc = sim->machine;
    if (!mc->link_groups)
        return ready + ms;
    int group = mc->link_group[gpu], best = 0;
    double *lane = sim->lane_free[group][dir];
    for (int i = 1; i < sim->lanes[group]; i++)
        if (lane[i] < lane[best])
            best = i;
    double start = rp_sim_max(ready, lane[best]), duration = ms * sim->lane_slowdown[group];
    lane[best] = start + duration;
    if (dir == 0)
        sim->group_upload_busy[group] += duration;
    return start + duration;
}

/* The version_ready row iteration t's jobs read, or NULL before any update. */
static const double *source_versions(const rp_sim *sim, int t)
{
    int source = t - 1 - sim->machine->optimizer_lag;
    return source < 0 ? NULL : sim->version_ready + (size_t)source * (sim->num_layers + 1);
}

/* Time at which layer l is at the version iteration t needs. */
static double weights_ready(const rp_sim *sim, int t, int l)
{
    const double *versions = source_versions(sim, t);
    if (!versions)
        return 0.0;
    double ready = versions[l];
    int tied = sim->cost->layers[l].tied_to;
    if (tied >= 0)
        ready = rp_sim_max(ready, versions[tied]);
    if (sim->sparse_embed && tied == 0)
        ready = rp_sim_max(ready, versions[sim->num_layers]); /* the whole table: (b) too */
    return ready;
}

/* Job j's layers' shares of its upload: each layer's weight bytes (with
 * sparse_embed, layer 0's rows the group reads, as job_times counts them)
 * out of the job's, so the shares add up to upload_ms[j] whatever
 * job_times charges; into layer_upload_ms[j][l - first], once per
 * simulation (the sweep reads them every iteration and group). */
static void layer_upload_shares(rp_sim *sim, int j)
{
    const rp_cost_model *m = sim->cost;
    const rp_job *job = &sim->jobs[j];
    double *share = sim->layer_upload_ms + (size_t)j * sim->num_layers, total = 0.0;
    for (int k = job->first; k <= job->last; k++) {
        double bytes = (double)rp_cost_upload_bytes(m, k, k);
        if (sim->sparse_embed && k == 0)
            bytes *= sim->group_rows_frac;
        share[k - job->first] = bytes;
        total += bytes;
    }
    for (int k = job->first; k <= job->last; k++) {
        double *mine = &share[k - job->first];
        if (total <= 0.0) /* nothing uploaded: all of it on the first layer */
            *mine = k == job->first ? sim->upload_ms[j] : 0.0;
        else
            *mine = sim->upload_ms[j] * *mine / total;
    }
}

static double layer_upload_ms(const rp_sim *sim, int j, int l)
{
    return sim->layer_upload_ms[(size_t)j * sim->num_layers + (l - sim->jobs[j].first)];
}

/* Record that `executor` computed over [start, end), merging it into the
 * interval before when that one is the executor's and ends at start. */
static void add_interval(rp_sim *sim, int executor, double start, double end)
{
    if (sim->num_intervals > 0) {
        rp_sim_interval *last = &sim->intervals[sim->num_intervals - 1];
        if (last->executor == executor && last->end == start) {
            last->end = end;
            return;
        }
    }
    sim->intervals[sim->num_intervals++] = (rp_sim_interval){start, end, executor};
}

/* Group g's jobs of iteration t, in order, on the executors the deal gives.
 *
 * Jobs stream versions (DESIGN 5a, as the engine runs them): a job uploads
 * its layers in order, each as soon as that layer is at the version the job
 * needs (and the link and the job's buffer are free), not when all of them
 * are; and its first microbatch runs the forward (the tail's, or a backward
 * stage's recompute) of layer l as soon as layer l is on the device, then
 * the rest of its work (loss, backward) once the last layer's forward is
 * done. The later microbatches find every layer there. What a layer's
 * forward is of a microbatch's job time is its fwd_ms (all of it when the
 * job's time is less: kept layers that skip the recompute). */
/* Job j's dequantisations over its microbatches. */
static double job_dequant_ms(const rp_sim *sim, int j)
{
    return sim->dequant_first_ms[j] + (sim->group_microbatches - 1) * sim->dequant_later_ms[j];
}

static void run_jobs(rp_sim *sim, int t, int g)
{
    const rp_machine *mc = sim->machine;
    const rp_cost_model *m = sim->cost;
    int previous_executor = -1;
    for (int j = 0; j < sim->num_jobs; j++) {
        const rp_job *job = &sim->jobs[j];
        int executor = rp_schedule_executor(sim->plan, mc->gpus, t, j, g);
        int gpu = rp_machine_gpu_of(mc, executor);
        rp_sim_executor *ex = &sim->executor[executor];
        const double *versions = source_versions(sim, t);
        /* the job's buffer is free once the job two back on this executor is
         * done; with one buffer, the job before it */
        double link_at = rp_sim_max(ex->upload_free, m->single_weight_buffer ? ex->last_end
                                                                             : ex->previous_end);
        if (sim->gate_tail && job->kind == RP_JOB_TAIL && versions)
            link_at = rp_sim_max(link_at, versions[sim->num_layers]);
        double latency =
            (previous_executor >= 0 && previous_executor != executor) ? mc->transfer_ms : 0.0;
        double deferred =
            (mc->defer_wgrad && job->kind != RP_JOB_FWD) ? sim->job_wgrad_ms[j] : 0.0;
        /* the first microbatch, layer by layer behind the uploads */
        double streamed = rp_cost_fwd_ms(m, job->first, job->last);
        double scale = streamed > sim->job_ms[j] && streamed > 0 ? sim->job_ms[j] / streamed : 1.0;
        double clock = rp_sim_max(ex->last_end, j == 0 ? 0.0 : sim->previous_job_out[0] + latency);
        for (int l = job->first; l <= job->last; l++) {
            double upload_start = rp_sim_max(link_at, weights_ready(sim, t, l));
            double upload_end = take_link(sim, gpu, 0, upload_start, layer_upload_ms(sim, j, l));
            ex->upload_busy += upload_end - upload_start;
            link_at = upload_end;
            double start = rp_sim_max(clock, upload_end);
            clock = start + m->layers[l].fwd_ms * scale;
            add_interval(sim, executor, start, clock);
        }
        ex->upload_free = link_at;
        /* an FP8 base's dequantisations of the first microbatch with the
         * rest of its work (on the compute stream, as the engine runs them) */
        double rest = sim->job_ms[j] - streamed * scale + sim->dequant_first_ms[j];
        if (rest > 0) {
            add_interval(sim, executor, clock, clock + rest);
            clock += rest;
        }
        sim->this_job_out[0] = clock - deferred;
        for (int mb = 1; mb < sim->group_microbatches; mb++) {
            double input_at = j == 0 ? 0.0 : sim->previous_job_out[mb] + latency;
            double start = rp_sim_max(clock, input_at);
            clock = start + sim->job_ms[j] + sim->dequant_later_ms[j];
            sim->this_job_out[mb] = clock - deferred;
            add_interval(sim, executor, start, clock);
        }
        ex->previous_end = ex->last_end;
        ex->last_end = clock;
        ex->compute_busy += sim->job_ms[j] * sim->group_microbatches + job_dequant_ms(sim, j);
        if (clock > sim->iteration_end[t])
            sim->iteration_end[t] = clock;
        if (job->kind != RP_JOB_FWD) {
            double landed = take_link(sim, gpu, 1, rp_sim_max(ex->download_free, clock),
                                      sim->download_ms[j]);
            ex->download_free = landed;
            for (int l = job->first; l <= job->last; l++) {
                sim->grad_done[l] = rp_sim_max(sim->grad_done[l], landed);
                if (g == 0)
                    sim->producer[l] = executor;
            }
        }
        double *swap = sim->previous_job_out;
        sim->previous_job_out = sim->this_job_out;
        sim->this_job_out = swap;
        previous_executor = executor;
    }
}

/* The pool's order: ready time, then priority, then the order queued (so
 * the order is total and any sort gives the one a stable sort by ready time
 * and priority gives). */
static int by_ready(const void *a, const void *b)
{
    const rp_sim_task *x = a, *y = b;
    if (x->ready != y->ready)
        return x->ready < y->ready ? -1 : 1;
    if (x->priority != y->priority)
        return x->priority < y->priority ? -1 : 1;
    return x->queued - y->queued;
}

/* The tasks in by_ready's order. They come queued by layer: often in order
 * already (with clipping every one is ready at the norm), or nearly in the
 * reverse (the top layers' gradients land first), which an insertion sort
 * of the reversed queue orders in a few moves a task; past 4 moves a task
 * on average, the rest is sorted. */
static void order_by_ready(rp_sim_task *tasks, int n)
{
    int sorted = 1;
    for (int i = 1; i < n && sorted; i++)
        sorted = by_ready(&tasks[i - 1], &tasks[i]) < 0;
    if (sorted)
        return;
    for (int i = 0, j = n - 1; i < j; i++, j--) {
        rp_sim_task t = tasks[i];
        tasks[i] = tasks[j];
        tasks[j] = t;
    }
    long budget = 4L * n;
    for (int i = 1; i < n; i++) {
        rp_sim_task t = tasks[i];
        int j = i;
        for (; j > 0 && budget > 0 && by_ready(&tasks[j - 1], &t) > 0; j--, budget--)
            tasks[j] = tasks[j - 1];
        tasks[j] = t;
        if (budget == 0) {
            qsort(tasks, (size_t)n, sizeof *tasks, by_ready);
            return;
        }
    }
}

/* One node's optimizer tasks: by priority (the lowest layer first). */
static int by_priority(const void *ctx, int a, int b)
{
    const rp_sim_task *tasks = ctx;
    return tasks[a].priority < tasks[b].priority;
}

/* Non-preemptive, highest priority (lowest layer) first among the ready
 * tasks of one rank. A speculative task the rank would start once the
 * backward is over for it (at or after its overlap_end) is not speculated:
 * it is put back until the norm, without its backup. */
static void run_pool(rp_sim *sim, int rank, rp_sim_task *tasks, int num_tasks, double norm,
                     double *done)
{
    order_by_ready(tasks, num_tasks);
    double now = sim->pool_free[rank];
    int next = 0, heap_size = 0, held = 0;
    while (next < num_tasks || heap_size > 0 || held > 0) {
        if (heap_size == 0) { /* idle until the next task is ready */
            double at = next < num_tasks ? tasks[next].ready : norm;
            at = held > 0 && norm < at ? norm : at;
            now = rp_sim_max(now, at);
        }
        while (next < num_tasks && tasks[next].ready <= now)
            rp_sim_heap_push(sim->task_heap, &heap_size, by_priority, tasks, next++);
        while (held > 0 && norm <= now)
            rp_sim_heap_push(sim->task_heap, &heap_size, by_priority, tasks,
                             sim->held_tasks[--held]);
        if (heap_size == 0)
            continue;
        int i = rp_sim_heap_pop(sim->task_heap, &heap_size, by_priority, tasks);
        rp_sim_task *task = &tasks[i];
        if (task->speculative && now >= task->overlap_end) {
            task->speculative = 0;
            task->ready = norm;
            task->duration = task->after_ms;
            sim->held_tasks[held++] = i;
            continue;
        }
        now += task->duration;
        sim->pool_busy[rank] += task->duration;
        done[task->slot] = rp_sim_max(done[task->slot], now);
    }
    sim->pool_free[rank] = now;
}

/* Queue one piece of optimizer work: on every rank (duration / G each) with
 * opt_spread, else on `rank`. */
static void add_task(rp_sim *sim, int *num_tasks, double ready, double duration, int priority,
                     int slot, int rank)
{
    const rp_machine *mc = sim->machine;
    if (mc->opt_spread) {
        for (int r = 0; r < mc->gpus; r++)
            sim->tasks[(*num_tasks)++] = (rp_sim_task){.ready = ready,
                                                        .duration = duration / mc->gpus,
                                                        .priority = priority,
                                                        .slot = slot,
                                                        .rank = r};
    } else {
        sim->tasks[(*num_tasks)++] = (rp_sim_task){
            .ready = ready, .duration = duration, .priority = priority, .slot = slot, .rank = rank};
    }
}

/* Layer 0's update with sparse_embed, ready at `ready`: the tied layers'
 * dense gradients are summed over the groups as soon as they land, ahead of
 * any update, by the rank(s) that will update layer 0 (so part (a) follows
 * them on that rank); (a) sums the groups' sparse parts (like the dense
 * copies: groups - 1 extra reads) and updates the rows the next forward
 * reads; (b) the other rows, after every other update. */
static void add_sparse_embed_tasks(rp_sim *sim, int *num_tasks, double ready, double rate)
{
    const rp_machine *mc = sim->machine;
    const rp_cost_model *m = sim->cost;
    const rp_layer_cost *c = &m->layers[0];
    int rank = sim->producer[0];
    for (int i = 0; i < sim->num_tied; i++)
        if (m->layers[sim->tied_layers[i]].tied_to == 0) {
            double landed = sim->grad_done[sim->tied_layers[i]];
            ready = rp_sim_max(ready, landed);
            add_task(sim, num_tasks, landed,
                     (double)sim->groups * (double)m->layers[sim->tied_layers[i]].grad_bytes /
                         rate,
                     -1, 0, rank);
        }
    double part_a = (double)(sim->groups - 1) * sim->group_rows_frac * (double)c->grad_bytes +
                    sim->rows_frac * (double)c->opt_params * mc->opt_bytes_per_param;
    double part_b = (1.0 - sim->rows_frac) * (double)c->opt_params * mc->opt_bytes_per_param;
    add_task(sim, num_tasks, ready, part_a / rate, 0, 0, rank);
    if (part_b > 0)
        add_task(sim, num_tasks, ready, part_b / rate, sim->num_layers, sim->num_layers, rank);
}

/* Whether layer l's update is speculative (machine.h): every layer but the
 * embedding, with clipping, exact. */
static int speculates(const rp_machine *mc, int l)
{
    return mc->speculative && mc->clip && !mc->optimizer_lag && l > 0;
}

/* Iteration t's updates on one node, each on the rank that produced the
 * layer's gradient (or spread over all); with clipping after the norm (the
 * last gradient), but a speculative update's work as its gradient lands,
 * while the backward is not over for it (run_pool). */
static void run_optimizer(rp_sim *sim, int t)
{
    const rp_machine *mc = sim->machine;
    const rp_cost_model *m = sim->cost;
    int num_layers = sim->num_layers;
    double *done = sim->version_ready + (size_t)t * (num_layers + 1);
    double last = 0.0;
    for (int l = 0; l < num_layers; l++)
        last = rp_sim_max(last, sim->grad_done[l]);
    double rate = mc->opt_gbs * 1e6; /* bytes per ms */
    int num_tasks = 0;
    done[num_layers] = 0.0;
    double below = 0.0; /* the last gradient to land of the layers below l */
    for (int l = 0; l < num_layers; l++) {
        const rp_layer_cost *c = &m->layers[l];
        if (l > 0)
            below = rp_sim_max(below, sim->grad_done[l - 1]);
        done[l] = 0.0;
        if (c->opt_params <= 0)
            continue;
        double ready = mc->clip && !speculates(mc, l) ? last : sim->grad_done[l];
        if (l == 0 && sim->sparse_embed) {
            add_sparse_embed_tasks(sim, &num_tasks, ready, rate);
            continue;
        }
        double bytes = (double)c->opt_params * mc->opt_bytes_per_param +
                       (double)(sim->groups - 1) * (double)c->grad_bytes;
        /* a tied layer's gradient arrives in two parts that are summed here */
        for (int i = 0; i < sim->num_tied; i++)
            if (m->layers[sim->tied_layers[i]].tied_to == l) {
                ready = rp_sim_max(ready, sim->grad_done[sim->tied_layers[i]]);
                bytes += (double)sim->groups * (double)m->layers[sim->tied_layers[i]].grad_bytes;
            }
        double backup = speculates(mc, l) ? (double)c->opt_params * RP_SIM_SPEC_BACKUP_BYTES : 0;
        int first = num_tasks;
        add_task(sim, &num_tasks, ready, (bytes + backup) / rate, l, l, sim->producer[l]);
        if (!speculates(mc, l))
            continue;
        /* speculated only while a gradient below it is still to land */
        for (int i = first; i < num_tasks; i++) {
            sim->tasks[i].speculative = 1;
            sim->tasks[i].overlap_end = below;
            sim->tasks[i].after_ms = sim->tasks[i].duration * bytes / (bytes + backup);
        }
    }
    /* group the tasks by rank, each rank's in the order queued (a counting
     * sort); each rank's pool runs its own */
    int at[RP_SIM_MAX_GPUS + 1] = {0};
    for (int i = 0; i < num_tasks; i++)
        at[sim->tasks[i].rank + 1]++;
    for (int r = 0; r < mc->gpus; r++)
        at[r + 1] += at[r];
    int fill[RP_SIM_MAX_GPUS];
    memcpy(fill, at, sizeof(int) * (size_t)mc->gpus);
    for (int i = 0; i < num_tasks; i++) {
        const int r = sim->tasks[i].rank;
        sim->rank_tasks[fill[r]] = sim->tasks[i];
        sim->rank_tasks[fill[r]].queued = fill[r] - at[r];
        fill[r]++;
    }
    for (int r = 0; r < mc->gpus; r++)
        if (at[r + 1] > at[r])
            run_pool(sim, r, sim->rank_tasks + at[r], at[r + 1] - at[r], last, done);
    /* a speculated update is published once the norm is known */
    for (int l = 0; l < num_layers; l++)
        if (mc->clip && speculates(mc, l) && m->layers[l].opt_params > 0)
            done[l] = rp_sim_max(done[l], last);
}

static void sim_free(rp_sim *sim)
{
    free(sim->jobs);
    free(sim->job_ms);
    free(sim->dequant_first_ms);
    free(sim->dequant_later_ms);
    free(sim->layer_upload_ms);
    free(sim->job_wgrad_ms);
    free(sim->upload_ms);
    free(sim->download_ms);
    free(sim->version_ready);
    free(sim->grad_done);
    free(sim->producer);
    free(sim->previous_job_out);
    free(sim->this_job_out);
    free(sim->intervals);
    free(sim->iteration_end);
    free(sim->tasks);
    free(sim->rank_tasks);
    free(sim->task_heap);
    free(sim->held_tasks);
    free(sim->tied_layers);
    rp_sim_nodes_destroy(&sim->nodes);
}

/* The arrays of the sweep, the tied layers, the network of several nodes. */
static rp_status sim_alloc(rp_sim *sim, rp_error *err)
{
    const rp_machine *mc = sim->machine;
    int num_layers = sim->num_layers, num_jobs = sim->num_jobs;
    /* each job's microbatches, its first one's layers apart (run_jobs) */
    size_t num_intervals = (size_t)sim->iterations * sim->groups *
                           ((size_t)num_jobs * (sim->group_microbatches + 1) + 2 * num_layers);
    sim->jobs = malloc(sizeof *sim->jobs * num_jobs);
    sim->job_ms = malloc(sizeof(double) * num_jobs);
    sim->job_wgrad_ms = malloc(sizeof(double) * num_jobs);
    sim->upload_ms = malloc(sizeof(double) * num_jobs);
    sim->download_ms = malloc(sizeof(double) * num_jobs);
    sim->dequant_first_ms = malloc(sizeof(double) * num_jobs);
    sim->dequant_later_ms = malloc(sizeof(double) * num_jobs);
    sim->layer_upload_ms = malloc(sizeof(double) * (size_t)num_jobs * (size_t)num_layers);
    sim->version_ready = calloc((size_t)sim->iterations * (num_layers + 1), sizeof(double));
    sim->grad_done = calloc((size_t)num_layers, sizeof(double));
    sim->producer = calloc((size_t)num_layers, sizeof(int));
    sim->previous_job_out = calloc((size_t)sim->group_microbatches, sizeof(double));
    sim->this_job_out = calloc((size_t)sim->group_microbatches, sizeof(double));
    sim->intervals = malloc(sizeof *sim->intervals * (num_intervals ? num_intervals : 1));
    sim->iteration_end = calloc((size_t)sim->iterations, sizeof(double));
    /* one task per layer and rank, and with sparse_embed up to L - 1 tied
     * sums and part (b) more */
    size_t num_tasks = (size_t)2 * (num_layers + 1) * mc->gpus;
    sim->tasks = malloc(sizeof *sim->tasks * num_tasks);
    sim->rank_tasks = malloc(sizeof *sim->rank_tasks * num_tasks);
    sim->task_heap = malloc(sizeof(int) * num_tasks);
    sim->held_tasks = malloc(sizeof(int) * num_tasks);
    sim->tied_layers = malloc(sizeof(int) * (size_t)num_layers);
    if (!sim->jobs || !sim->job_ms || !sim->job_wgrad_ms || !sim->upload_ms ||
        !sim->download_ms || !sim->dequant_first_ms || !sim->dequant_later_ms || !sim->layer_upload_ms || !sim->version_ready || !sim->grad_done || !sim->producer ||
        !sim->previous_job_out || !sim->this_job_out || !sim->intervals ||
        !sim->iteration_end || !sim->tasks || !sim->rank_tasks || !sim->task_heap ||
        !sim->held_tasks || !sim->tied_layers)
        return rp_error_set(err, RP_ERR_NOMEM, "simulate: out of memory");
    for (int l = 0; l < num_layers; l++)
        if (sim->cost->layers[l].tied_to >= 0)
            sim->tied_layers[sim->num_tied++] = l;
    if (rp_machine_nodes(mc) > 1 && !(sim->nodes = rp_sim_nodes_create(sim)))
        return rp_error_set(err, RP_ERR_NOMEM, "simulate: out of memory");
    return RP_OK;
}

/* Each job's times: compute, weight upload and gradient download (with
 * sparse_embed, layer 0's rows that a group's tokens read). */
static void job_times(rp_sim *sim, double link)
{
    const rp_cost_model *m = sim->cost;
    for (int j = 0; j < sim->num_jobs; j++) {
        sim->jobs[j] = rp_schedule_job(sim->plan, j);
        const rp_job *job = &sim->jobs[j];
        sim->job_ms[j] = rp_schedule_job_ms(m, sim->plan, job);
        rp_schedule_job_dequant(m, sim->plan, job, &sim->dequant_first_ms[j],
                                &sim->dequant_later_ms[j]);
        sim->job_wgrad_ms[j] = rp_cost_wgrad_ms(m, job->first, job->last);
        sim->upload_ms[j] = (double)rp_cost_upload_bytes(m, job->first, job->last) / link;
        sim->download_ms[j] =
            job->kind == RP_JOB_FWD
                ? 0.0
                : (double)rp_cost_grad_download_bytes(m, job->first, job->last) / link;
        if (sim->sparse_embed && job->first == 0) {
            /* the rows this group's tokens read, and gradient rows for them */
            const rp_layer_cost *embed = &m->layers[0];
            double weight_bytes =
                (double)rp_cost_upload_bytes(m, 0, job->last) - (double)embed->weight_bytes;
            double grad_bytes = (double)rp_cost_grad_download_bytes(m, 0, job->last) -
                                (double)rp_cost_grad_download_bytes(m, 0, 0);
            sim->upload_ms[j] =
                (weight_bytes + sim->group_rows_frac * (double)embed->weight_bytes) / link;
            if (job->kind != RP_JOB_FWD)
                sim->download_ms[j] =
                    (grad_bytes +
                     sim->group_rows_frac * (double)rp_cost_grad_download_bytes(m, 0, 0)) /
                    link;
        }
        layer_upload_shares(sim, j);
    }
}

/* The steady state of the simulated iterations, and the floors a short run
 * may not reach (simulate.h: rp_sim_result). */
static void results(const rp_sim *sim, double link, rp_sim_result *r)
{
    const rp_machine *mc = sim->machine;
    const rp_cost_model *m = sim->cost;
    int iterations = sim->iterations;
    int window_first = (iterations - 1) / 2, window_last = iterations - 1;
    r->iteration_ms = (sim->iteration_end[window_last] - sim->iteration_end[window_first]) /
                      (window_last - window_first);
    /* busy time is counted up to the end of the last iteration but one: after
     * that, executors idle only because no later jobs were simulated */
    double window_start = sim->iteration_end[window_first];
    double window_end = sim->iteration_end[window_last - 1];
    int window_iterations = window_last - 1 - window_first;
    double busy[RP_SIM_MAX_GPUS] = {0};
    for (size_t i = 0; i < sim->num_intervals; i++) {
        const rp_sim_interval *iv = &sim->intervals[i];
        double lo = rp_sim_max(iv->start, window_start);
        double hi = iv->end < window_end ? iv->end : window_end;
        if (hi > lo)
            busy[iv->executor] += hi - lo;
    }
    double bubble_sum = 0, bubble_max = 0, upload_total = 0, busiest_optimizer = 0;
    double busiest_upload = 0, busiest_compute = 0;
    for (int e = 0; e < mc->gpus; e++) {
        busiest_compute = rp_sim_max(busiest_compute, sim->executor[e].compute_busy / iterations);
        upload_total += sim->executor[e].upload_busy;
        busiest_upload = rp_sim_max(busiest_upload, sim->executor[e].upload_busy / iterations);
        busiest_optimizer = rp_sim_max(busiest_optimizer, sim->pool_busy[e] / iterations);
    }
    if (sim->nodes) /* a pool's time is a rank's */
        busiest_optimizer = rp_sim_max(busiest_optimizer, rp_sim_nodes_busiest_pool(sim));
    /* A rank's optimizer or an executor's link that is busier than an
     * iteration falls further behind every iteration; a short simulation may
     * not run long enough for that to throttle the jobs, so steady state is
     * at least that busy time. */
    r->limit = RP_LIMIT_SCHEDULE;
    /* an executor that runs ahead of the others (nothing but the weight
     * versions holds back the first jobs) shortens a short window; its work
     * per iteration is a floor on the steady state */
    if (busiest_compute > r->iteration_ms)
        r->iteration_ms = busiest_compute;
    if (busiest_optimizer > r->iteration_ms) {
        r->iteration_ms = busiest_optimizer;
        r->limit = RP_LIMIT_OPTIMIZER;
    }
    for (int k = 0; k < mc->link_groups; k++) /* a shared link busier than an iteration */
        busiest_upload =
            rp_sim_max(busiest_upload, sim->group_upload_busy[k] / iterations / sim->lanes[k]);
    if (busiest_upload > r->iteration_ms) {
        r->iteration_ms = busiest_upload;
        r->limit = RP_LIMIT_UPLOAD;
    }
    if (mc->host_gbs > 0) {
        /* bytes through host memory per iteration: every upload and gradient
         * download, each hand-over written and read once, the optimizer's */
        double bytes = 0;
        for (int j = 0; j < sim->num_jobs; j++) {
            const rp_job *job = &sim->jobs[j];
            bytes += (sim->upload_ms[j] + sim->download_ms[j]) * link * sim->groups;
            bytes += 2.0 * (double)m->layers[job->last].out_bytes * sim->group_microbatches *
                     sim->groups;
        }
        double rate = mc->opt_gbs * 1e6, optimizer_ms = 0;
        for (int e = 0; e < mc->gpus; e++)
            optimizer_ms += sim->pool_busy[e] / iterations;
        if (sim->nodes) /* node 0's pools */
            optimizer_ms = rp_sim_nodes_add_first_node_optimizer(sim, optimizer_ms);
        bytes += optimizer_ms * rate;
        double host = bytes / (mc->host_gbs * 1e6);
        if (host > r->iteration_ms) {
            r->iteration_ms = host;
            r->limit = RP_LIMIT_HOST;
        }
    }
    if (sim->nodes)
        rp_sim_nodes_results(sim, r);
    if (sim->nodes && r->net_ms > r->iteration_ms) {
        r->iteration_ms = r->net_ms;
        r->limit = RP_LIMIT_NETWORK;
    }
    for (int e = 0; e < mc->gpus; e++) {
        /* busy is measured over the window; scale to the steady rate, against
         * the longer of the window's own iteration time and the steady-state
         * one (a floor may have raised it) */
        double per_iteration = window_end > window_start ? busy[e] / window_iterations : 0.0;
        double span = rp_sim_max(r->iteration_ms, (window_end - window_start) / window_iterations);
        r->bubble[e] = span > 0 ? 1.0 - per_iteration / span : 0.0;
        bubble_sum += r->bubble[e];
        bubble_max = rp_sim_max(bubble_max, r->bubble[e]);
    }
    r->bubble_mean = bubble_sum / mc->gpus;
    r->bubble_max = bubble_max;
    double work = 0;
    for (int j = 0; j < sim->num_jobs; j++)
        work += (sim->job_ms[j] * sim->group_microbatches + job_dequant_ms(sim, j)) * sim->groups;
    r->compute_ms = work / mc->gpus;
    r->upload_ms = upload_total / mc->gpus / iterations;
    r->opt_ms = busiest_optimizer;
    if (mc->tokens_per_iteration > 0 && r->iteration_ms > 0)
        r->tokens_per_s = (double)mc->tokens_per_iteration / (r->iteration_ms / 1e3);
    r->peak_bytes = rp_schedule_peak_bytes(m, sim->plan, mc->gpus, mc->microbatches, mc->workspace_bytes,
                                           &r->worst_job);
    r->width = sim->width;
    r->groups = sim->groups;
    r->group_microbatches = sim->group_microbatches;
}

rp_status rp_simulate(const rp_cost_model *m, const rp_plan *p, const rp_machine *mc,
                      rp_sim_result *r, rp_error *err)
{
    memset(r, 0, sizeof *r);
    RP_TRY(rp_machine_check(mc, err));
    RP_TRY(rp_plan_validate(p, m->num_layers, err));
    rp_sim sim;
    memset(&sim, 0, sizeof sim);
    sim.cost = m;
    sim.plan = p;
    sim.machine = mc;
    sim.num_layers = m->num_layers;
    sim.num_jobs = rp_schedule_num_jobs(p);
    sim.width = rp_schedule_width(p, mc->gpus);
    sim.iterations = mc->iterations;
    /* each node runs M/N of the iteration's microbatches */
    RP_TRY(rp_schedule_check(p, mc->gpus, mc->microbatches / rp_machine_nodes(mc),
                             &sim.group_microbatches, err));
    sim.groups = mc->gpus / sim.width;
    rp_status st = sim_alloc(&sim, err);
    if (st != RP_OK) {
        sim_free(&sim);
        return st;
    }
    sim.sparse_embed = mc->sparse_embed && sim.num_layers >= 1 &&
                       m->layers[0].kind == RP_LAYER_EMBED;
    if (sim.sparse_embed) {
        sim.rows_frac = rp_machine_embed_rows_frac(m, mc, mc->microbatches);
        sim.group_rows_frac = rp_machine_embed_rows_frac(m, mc, sim.group_microbatches);
        sim.gate_tail = 1;
        for (int i = 0; i < sim.num_tied; i++)
            if (m->layers[sim.tied_layers[i]].tied_to == 0)
                sim.gate_tail = 0;
    }
    double link = mc->link_gbs * 1e6; /* bytes per ms */
    for (int k = 0; k < mc->link_groups; k++) {
        double uplink = mc->uplink_gbs[k] > 0 ? mc->uplink_gbs[k] : mc->link_gbs;
        int lanes = (int)(uplink / mc->link_gbs + 1e-9);
        sim.lanes[k] = lanes < 1 ? 1 : lanes > RP_SIM_MAX_LANES ? RP_SIM_MAX_LANES : lanes;
        sim.lane_slowdown[k] = uplink < mc->link_gbs ? mc->link_gbs / uplink : 1.0;
    }
    job_times(&sim, link);

    for (int t = 0; t < sim.iterations; t++) {
        for (int l = 0; l < sim.num_layers; l++)
            sim.grad_done[l] = 0.0;
        for (int g = 0; g < sim.groups; g++)
            run_jobs(&sim, t, g);
        if (sim.nodes)
            rp_sim_nodes_optimizer(&sim, t);
        else
            run_optimizer(&sim, t);
    }
    results(&sim, link, r);
    sim_free(&sim);
    return RP_OK;
}
