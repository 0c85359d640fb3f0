/* Several nodes (simulate.h): the gradient chain, the scatter, the sliced
 * updates and the all-gather of one iteration, in virtual time. The nodes'
 * compute is the single-node sweep's one timeline (plan/simulate.c); what
 * differs between nodes is their network role, so each node has its NIC and
 * optimizer pools here. Unlike one node's optimizer, the work here waits on
 * messages and messages wait on work, so it runs as a small event loop over
 * time. */
#include <math.h>
#include <stdlib.h>

#include "plan/sim_nodes.h"

static int event_before(const void *ctx, int a, int b)
{
    const event *events = ((const rp_sim_nodes *)ctx)->events;
    return events[a].time < events[b].time || (events[a].time == events[b].time && a < b);
}

static void event_push(rp_sim_nodes *net, double time, int kind, int arg)
{
    int i = net->num_posted++;
    net->events[i] = (event){time, kind, arg};
    rp_sim_heap_push(net->event_heap, &net->num_events, event_before, net, i);
}

static event event_pop(rp_sim_nodes *net)
{
    return net->events[rp_sim_heap_pop(net->event_heap, &net->num_events, event_before, net)];
}

/* Task a runs before task b in a pool: lower priority, then created first. */
static int task_before(const void *ctx, int a, int b)
{
    const rp_sim_nodes *net = ctx;
    const node_task *x = &net->tasks[a], *y = &net->tasks[b];
    return x->priority < y->priority || (x->priority == y->priority && a < b);
}

static void mark_pool(rp_sim_nodes *net, int pool)
{
    if (!net->pool_dirty[pool]) {
        net->pool_dirty[pool] = 1;
        net->dirty_pools[net->num_dirty++] = pool;
    }
}

/* Task i is ready: into its pool's heap. */
static void pool_add(rp_sim_nodes *net, int i)
{
    int pool = net->tasks[i].pool;
    rp_sim_heap_push(net->heap + net->heap_offset[pool], &net->heap_size[pool], task_before, net,
                     i);
    mark_pool(net, pool);
}

static int pool_take(rp_sim_nodes *net, int pool)
{
    return rp_sim_heap_pop(net->heap + net->heap_offset[pool], &net->heap_size[pool],
                           task_before, net);
}

static void post(rp_sim_nodes *net, int kind, int slot, int src, int dst, double bytes)
{
    int i = net->num_messages++, queue = src * net->nodes + dst;
    net->messages[i] = (message){RP_SIM_NET_LATENCY_MS + bytes / net->bytes_per_ms,
                                 bytes, kind, slot, src, dst, -1};
    if (net->queue_tail[queue] >= 0)
        net->messages[net->queue_tail[queue]].next = i;
    else
        net->queue_head[queue] = i;
    net->queue_tail[queue] = i;
    net->nic_dirty = 1;
}

/* Node n has its slice of layer l: its updates of the layer may start
 * (with clip, once it has every slice of the iteration). */
static void slice_arrived(const rp_sim *sim, rp_sim_nodes *net, int l, int n)
{
    int nodes = net->nodes, num_layers = sim->num_layers;
    if (sim->machine->clip) {
        if (--net->slices_left[n] > 0)
            return;
        for (int k = 0; k <= num_layers; k++)
            if (net->update_task[k * nodes + n] >= 0)
                pool_add(net, net->update_task[k * nodes + n]);
        return;
    }
    pool_add(net, net->update_task[l * nodes + n]);
    if (l == 0 && net->update_task[num_layers * nodes + n] >= 0)
        pool_add(net, net->update_task[num_layers * nodes + n]);
}

/* One of the things node n awaits before passing layer l on has come: its
 * gradient landed, a sum of it finished, or the previous node's partial
 * arrived. With all of them: the next hop, or (the last node) the scatter. */
static void chain_step(const rp_sim *sim, rp_sim_nodes *net, int l, int n)
{
    int nodes = net->nodes;
    if (--net->chain_awaits[l * nodes + n] > 0)
        return;
    if (n < nodes - 1) {
        post(net, MSG_CHAIN, l, n, n + 1, net->grad_bytes[l]);
        return;
    }
    for (int j = 0; j < nodes - 1; j++)
        post(net, MSG_SCATTER, l, nodes - 1, j, net->grad_bytes[l] / nodes);
    slice_arrived(sim, net, l, nodes - 1);
}

/* One of the things node n awaits before passing the tied embedding's base
 * on has come (a sum of its tied layers' gradients, the previous node's
 * base). With all of them: the next hop, or (the last node) the final base
 * to node 0, whose chain of layer 0 starts from it. */
static void base_step(rp_sim_nodes *net, int n)
{
    if (--net->base_awaits[n] > 0)
        return;
    post(net, MSG_BASE, 0, n, (n + 1) % net->nodes, net->base_bytes);
}

/* Node n has one more slice of slot k; with all of them the slot is at the
 * new version there, and done[k] is the latest node's time. */
static void slice_gathered(rp_sim_nodes *net, int k, int n, double now, double *done)
{
    if (++net->slices_held[k * net->nodes + n] == net->nodes)
        done[k] = rp_sim_max(done[k], now);
}

static void handle(const rp_sim *sim, rp_sim_nodes *net, event e, double now, double *done)
{
    int nodes = net->nodes;
    switch (e.kind) {
    case EVENT_TASK_READY:
        pool_add(net, e.arg);
        break;
    case EVENT_TASK_DONE: {
        const node_task *task = &net->tasks[e.arg];
        mark_pool(net, task->pool);
        if (task->kind == TASK_SUM) {
            chain_step(sim, net, task->slot, task->node);
            break;
        }
        if (task->kind == TASK_BASE_SUM) {
            base_step(net, task->node);
            break;
        }
        for (int d = 1; d < nodes; d++)
            post(net, MSG_GATHER, task->slot, task->node, (task->node + d) % nodes,
                 net->gather_bytes[task->slot] / nodes);
        slice_gathered(net, task->slot, task->node, now, done);
        break;
    }
    case EVENT_MSG_DONE: {
        const message *msg = &net->messages[e.arg];
        net->nic_dirty = 1;
        if (msg->kind == MSG_CHAIN)
            chain_step(sim, net, msg->slot, msg->dst);
        else if (msg->kind == MSG_SCATTER)
            slice_arrived(sim, net, msg->slot, msg->dst);
        else if (msg->kind == MSG_BASE && msg->dst == 0) /* the final base */
            chain_step(sim, net, 0, 0);
        else if (msg->kind == MSG_BASE)
            base_step(net, msg->dst);
        else
            slice_gathered(net, msg->slot, msg->dst, now, done);
        break;
    }
    case EVENT_LANDED:
        for (int n = 0; n < nodes; n++)
            chain_step(sim, net, e.arg, n);
        break;
    default: /* EVENT_WAKE: a pool or a NIC direction busy from before is free */
        net->nic_dirty = 1;
        for (int p = 0; p < nodes * net->pools_per_node; p++)
            mark_pool(net, p);
    }
}

/* At time `now`: every idle pool starts its most urgent ready task; every
 * message whose sender and receiver directions are both free starts, the
 * earliest posted first. */
static void dispatch(rp_sim_nodes *net, double now)
{
    for (int i = 0; i < net->num_dirty; i++) {
        int pool = net->dirty_pools[i];
        net->pool_dirty[pool] = 0;
        while (net->pool_free[pool] <= now && net->heap_size[pool] > 0) {
            int k = pool_take(net, pool);
            net->pool_free[pool] = now + net->tasks[k].duration;
            net->pool_busy[pool] += net->tasks[k].duration;
            event_push(net, now + net->tasks[k].duration, EVENT_TASK_DONE, k);
        }
    }
    net->num_dirty = 0;
    int nodes = net->nodes;
    while (net->nic_dirty) {
        int best = -1;
        for (int src = 0; src < nodes; src++) {
            if (net->send_free[src] > now)
                continue;
            for (int dst = 0; dst < nodes; dst++) {
                int m = net->queue_head[src * nodes + dst];
                if (m >= 0 && net->recv_free[dst] <= now && (best < 0 || m < best))
                    best = m;
            }
        }
        if (best < 0) {
            net->nic_dirty = 0;
            break;
        }
        message *msg = &net->messages[best];
        int queue = msg->src * nodes + msg->dst;
        net->queue_head[queue] = msg->next;
        if (msg->next < 0)
            net->queue_tail[queue] = -1;
        net->send_free[msg->src] = net->recv_free[msg->dst] = now + msg->duration;
        net->send_busy[msg->src] += msg->duration;
        net->recv_busy[msg->dst] += msg->duration;
        net->sent[msg->src] += msg->bytes;
        event_push(net, now + msg->duration, EVENT_MSG_DONE, best);
    }
}

/* A piece of optimizer work on node n: on its one pool of G ranks (a G-th
 * of the time) with opt_spread, else on the producing rank's pool. */
static int task_add(const rp_sim *sim, rp_sim_nodes *net, int kind, int slot, int priority,
                    int n, double ready, double bytes, int rank)
{
    const rp_machine *mc = sim->machine;
    double duration = bytes / (mc->opt_gbs * 1e6);
    int pool = n * net->pools_per_node + (mc->opt_spread ? 0 : rank);
    if (mc->opt_spread)
        duration /= mc->gpus;
    int i = net->num_tasks++;
    net->tasks[i] = (node_task){ready, duration, priority, kind, slot, n, pool};
    return i;
}

/* Layer l's optimizer work on every node, priced as the single-node sweep
 * prices it on one node: the sum of its pipelines' copies (and of tied
 * layers' gradients), which the node's hop awaits, and the update of its
 * slice (with sparse_embed, parts (a) and (b)), released when the slice
 * arrives. With sparse_embed the tied layers' gradients are summed on
 * landing, each its own task, into the base, which has a chain of its own
 * (ending on node 0, where layer 0's chain then starts). Returns when the
 * layer's gradients (its own and tied layers') have all landed. */
static double layer_tasks(const rp_sim *sim, rp_sim_nodes *net, int l)
{
    const rp_machine *mc = sim->machine;
    const rp_cost_model *m = sim->cost;
    const rp_layer_cost *c = &m->layers[l];
    int nodes = net->nodes, num_layers = sim->num_layers;
    int sum_priority = l - (num_layers + 2); /* every sum before any update */
    int sparse = l == 0 && sim->sparse_embed, tied = 0;
    double part_a = sparse ? sim->rows_frac : 1.0; /* part (a)'s share of the update */
    double rows = sparse ? sim->group_rows_frac : 1.0, landed = sim->grad_done[l];
    double sum_bytes = (double)(sim->groups - 1) * rows * (double)c->grad_bytes;
    double work = (double)c->opt_params * mc->opt_bytes_per_param;
    for (int i = 0; i < sim->num_tied; i++) {
        const rp_layer_cost *tied_cost = &m->layers[sim->tied_layers[i]];
        if (tied_cost->tied_to != l)
            continue;
        tied++;
        landed = rp_sim_max(landed, sim->grad_done[sim->tied_layers[i]]);
        if (!sparse)
            sum_bytes += (double)sim->groups * (double)tied_cost->grad_bytes;
    }
    int rank = sim->producer[l];
    for (int n = 0; n < nodes; n++) {
        int *awaits = &net->chain_awaits[l * nodes + n];
        *awaits = 1 + (n > 0 || (sparse && tied)); /* the landing; a partial or the base */
        if (sparse && tied)
            net->base_awaits[n] = tied + (n > 0);
        for (int i = 0; sparse && i < sim->num_tied; i++) {
            const rp_layer_cost *tied_cost = &m->layers[sim->tied_layers[i]];
            if (tied_cost->tied_to == l)
                task_add(sim, net, TASK_BASE_SUM, l, sum_priority, n,
                         sim->grad_done[sim->tied_layers[i]],
                         (double)sim->groups * (double)tied_cost->grad_bytes, rank);
        }
        if (sum_bytes > 0) {
            (*awaits)++;
            task_add(sim, net, TASK_SUM, l, sum_priority, n, sparse ? sim->grad_done[l] : landed,
                     sum_bytes, rank);
        }
        net->update_task[l * nodes + n] =
            task_add(sim, net, TASK_UPDATE, l, l, n, INFINITY, part_a * work / nodes, rank);
        if (part_a < 1.0)
            net->update_task[num_layers * nodes + n] =
                task_add(sim, net, TASK_UPDATE, num_layers, num_layers, n, INFINITY,
                         (1.0 - part_a) * work / nodes, rank);
    }
    net->grad_bytes[l] = RP_SIM_NET_GRAD_BYTES * (double)c->opt_params;
    net->gather_bytes[l] = part_a * mc->compute_bytes_per_param * (double)c->opt_params;
    if (part_a < 1.0)
        net->gather_bytes[num_layers] =
            (1.0 - part_a) * mc->compute_bytes_per_param * (double)c->opt_params;
    if (sparse && tied)
        net->base_bytes = net->grad_bytes[l];
    return landed;
}

/* Each pool's heap gets room for the tasks it may hold. */
static void size_heaps(rp_sim_nodes *net)
{
    int pools = net->nodes * net->pools_per_node, offset = 0;
    for (int p = 0; p < pools; p++)
        net->heap_size[p] = 0;
    for (int i = 0; i < net->num_tasks; i++)
        net->heap_size[net->tasks[i].pool]++;
    for (int p = 0; p < pools; p++) {
        net->heap_offset[p] = offset;
        offset += net->heap_size[p];
        net->heap_size[p] = 0;
    }
}

void rp_sim_nodes_optimizer(rp_sim *sim, int t)
{
    rp_sim_nodes *net = sim->nodes;
    int nodes = net->nodes, num_layers = sim->num_layers, trained = 0;
    double *done = sim->version_ready + (size_t)t * (num_layers + 1);
    net->num_tasks = net->num_messages = net->num_events = net->num_posted = 0;
    net->base_bytes = 0;
    for (int k = 0; k <= num_layers; k++) {
        done[k] = 0.0;
        for (int n = 0; n < nodes; n++) {
            net->update_task[k * nodes + n] = -1;
            net->slices_held[k * nodes + n] = 0;
        }
    }
    for (int q = 0; q < nodes * nodes; q++)
        net->queue_head[q] = net->queue_tail[q] = -1;
    for (int l = 0; l < num_layers; l++) {
        if (sim->cost->layers[l].opt_params <= 0)
            continue;
        trained++;
        event_push(net, layer_tasks(sim, net, l), EVENT_LANDED, l);
    }
    for (int n = 0; n < nodes; n++)
        net->slices_left[n] = trained;
    size_heaps(net);
    for (int i = 0; i < net->num_tasks; i++)
        if (net->tasks[i].kind != TASK_UPDATE)
            event_push(net, net->tasks[i].ready, EVENT_TASK_READY, i);
    for (int p = 0; p < nodes * net->pools_per_node; p++)
        event_push(net, net->pool_free[p], EVENT_WAKE, -1);
    for (int n = 0; n < nodes; n++) {
        event_push(net, net->send_free[n], EVENT_WAKE, -1);
        event_push(net, net->recv_free[n], EVENT_WAKE, -1);
    }
    while (net->num_events > 0) {
        double now = net->events[net->event_heap[0]].time;
        while (net->num_events > 0 && net->events[net->event_heap[0]].time <= now)
            handle(sim, net, event_pop(net), now, done);
        dispatch(net, now);
    }
}

void rp_sim_nodes_destroy(rp_sim_nodes **nodes)
{
    rp_sim_nodes *net = *nodes;
    if (!net)
        return;
    void *arrays[] = {net->send_free,    net->recv_free,    net->send_busy,   net->recv_busy,
                      net->sent,         net->pool_free,    net->pool_busy,   net->tasks,
                      net->update_task,  net->heap,         net->heap_offset, net->heap_size,
                      net->dirty_pools,  net->pool_dirty,   net->messages,    net->queue_head,
                      net->queue_tail,   net->events,       net->event_heap,  net->chain_awaits,
                      net->base_awaits,  net->slices_held,  net->slices_left, net->gather_bytes,
                      net->grad_bytes};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        free(arrays[i]);
    free(net);
    *nodes = NULL;
}

/* calloc of count (at least 1) elements of size bytes; *ok cleared when it fails. */
static void *zeroed(size_t count, size_t size, int *ok)
{
    void *p = calloc(count > 0 ? count : 1, size);
    if (!p)
        *ok = 0;
    return p;
}

/* Sized for the largest iteration: per layer at most 2 + (tied layers) sums
 * and updates per node, N - 1 chain hops, N - 1 scatter messages and
 * N (N - 1) gather messages per slot, N hops of the base. */
rp_sim_nodes *rp_sim_nodes_create(const rp_sim *sim)
{
    rp_sim_nodes *net = calloc(1, sizeof *net);
    if (!net)
        return NULL;
    const rp_machine *mc = sim->machine;
    int nodes = mc->nodes, num_layers = sim->num_layers, ok = 1;
    net->nodes = nodes;
    net->pools_per_node = mc->opt_spread ? 1 : mc->gpus;
    net->bytes_per_ms = mc->network_gbs * 1e9 / 8 / 1e3;
    size_t n = (size_t)nodes, pools = n * net->pools_per_node;
    size_t layers = (size_t)num_layers, slots = layers + 1;
    net->max_tasks = (2 * num_layers + 1 + sim->num_tied) * nodes;
    net->max_messages =
        2 * num_layers * (nodes - 1) + nodes + (num_layers + 1) * nodes * (nodes - 1);
    /* every event an iteration posts: a task's ready and done, a message's
     * done, a layer's landing, the wakes */
    net->max_events =
        net->max_tasks * 2 + net->max_messages + num_layers + (int)pools + 2 * nodes;
    net->send_free = zeroed(n, sizeof(double), &ok);
    net->recv_free = zeroed(n, sizeof(double), &ok);
    net->send_busy = zeroed(n, sizeof(double), &ok);
    net->recv_busy = zeroed(n, sizeof(double), &ok);
    net->sent = zeroed(n, sizeof(double), &ok);
    net->pool_free = zeroed(pools, sizeof(double), &ok);
    net->pool_busy = zeroed(pools, sizeof(double), &ok);
    net->tasks = zeroed((size_t)net->max_tasks, sizeof *net->tasks, &ok);
    net->update_task = zeroed(slots * n, sizeof(int), &ok);
    net->heap = zeroed((size_t)net->max_tasks, sizeof(int), &ok);
    net->heap_offset = zeroed(pools, sizeof(int), &ok);
    net->heap_size = zeroed(pools, sizeof(int), &ok);
    net->dirty_pools = zeroed(pools, sizeof(int), &ok);
    net->pool_dirty = zeroed(pools, 1, &ok);
    net->messages = zeroed((size_t)net->max_messages, sizeof *net->messages, &ok);
    net->queue_head = zeroed(n * n, sizeof(int), &ok);
    net->queue_tail = zeroed(n * n, sizeof(int), &ok);
    net->events = zeroed((size_t)net->max_events, sizeof *net->events, &ok);
    net->event_heap = zeroed((size_t)net->max_events, sizeof(int), &ok);
    net->chain_awaits = zeroed(layers * n, sizeof(int), &ok);
    net->base_awaits = zeroed(n, sizeof(int), &ok);
    net->slices_held = zeroed(slots * n, sizeof(int), &ok);
    net->slices_left = zeroed(n, sizeof(int), &ok);
    net->gather_bytes = zeroed(slots, sizeof(double), &ok);
    net->grad_bytes = zeroed(layers, sizeof(double), &ok);
    if (!ok)
        rp_sim_nodes_destroy(&net);
    return net;
}

double rp_sim_nodes_busiest_pool(const rp_sim *sim)
{
    const rp_sim_nodes *net = sim->nodes;
    double busiest = 0;
    for (int p = 0; p < net->nodes * net->pools_per_node; p++)
        busiest = rp_sim_max(busiest, net->pool_busy[p] / sim->iterations);
    return busiest;
}

double rp_sim_nodes_add_first_node_optimizer(const rp_sim *sim, double sum)
{
    const rp_sim_nodes *net = sim->nodes;
    int ranks_per_pool = net->pools_per_node == 1 ? sim->machine->gpus : 1;
    for (int p = 0; p < net->pools_per_node; p++)
        sum += net->pool_busy[p] / sim->iterations * ranks_per_pool;
    return sum;
}

/* Per iteration, over the whole run: the busiest NIC direction of any node,
 * the most bytes one node sent; the bytes a step moves. */
void rp_sim_nodes_results(const rp_sim *sim, rp_sim_result *r)
{
    const rp_sim_nodes *net = sim->nodes;
    double busiest = 0, sent = 0, grad_bytes = 0, weight_bytes = 0;
    for (int n = 0; n < net->nodes; n++) {
        busiest = rp_sim_max(busiest, rp_sim_max(net->send_busy[n], net->recv_busy[n]));
        sent = rp_sim_max(sent, net->sent[n]);
    }
    for (int l = 0; l < sim->num_layers; l++) {
        const rp_layer_cost *c = &sim->cost->layers[l];
        double params = c->opt_params > 0 ? (double)c->opt_params : 0.0;
        grad_bytes += RP_SIM_NET_GRAD_BYTES * params;
        weight_bytes += sim->machine->compute_bytes_per_param * params;
    }
    r->nodes = net->nodes;
    r->net_ms = busiest / sim->iterations;
    r->net_send_bytes = sent / sim->iterations;
    r->net_grad_bytes = grad_bytes;
    r->net_weight_bytes = weight_bytes;
    r->net_base_bytes = net->base_bytes;
}
