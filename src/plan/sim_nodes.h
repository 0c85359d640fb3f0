/* The simulator's several-node part (plan/sim_nodes.c; the model is in
 * plan/simulate.h): each node's NIC and optimizer pools, and one
 * iteration's optimizer tasks, messages and events. Internal to plan/. */
#ifndef RP_PLAN_SIM_NODES_H
#define RP_PLAN_SIM_NODES_H

#include "plan/sim_state.h"

/* optimizer task kinds: a sum of a layer's copies before its hop, of tied
 * layers' gradients before the base's hop, the update of a slice */
enum { TASK_SUM = 0, TASK_BASE_SUM = 1, TASK_UPDATE = 2 };
enum { MSG_CHAIN = 0, MSG_SCATTER = 1, MSG_GATHER = 2, MSG_BASE = 3 };
enum { EVENT_TASK_READY, EVENT_TASK_DONE, EVENT_MSG_DONE, EVENT_LANDED, EVENT_WAKE };

typedef struct node_task {
    double ready, duration;
    int priority, kind, slot, node, pool; /* slot: the layer (a sum), the update slot */
} node_task;

typedef struct message {
    double duration, bytes;
    int kind, slot, src, dst, next; /* next: in its (src, dst) queue */
} message;

/* An event's index in events is its sequence number: among events at one
 * time, the one posted first is handled first. */
typedef struct event {
    double time;
    int kind, arg; /* arg: a task, a message or a layer */
} event;

struct rp_sim_nodes {
    int nodes, pools_per_node; /* pools per node: 1 with opt_spread, else G */
    double bytes_per_ms;       /* network */
    /* carried from one iteration to the next */
    double *send_free, *recv_free, *send_busy, *recv_busy, *sent; /* [nodes] */
    double *pool_free, *pool_busy;                                 /* [nodes * pools_per_node] */
    /* one iteration */
    node_task *tasks;
    int num_tasks, max_tasks;
    int *update_task;         /* [(L + 1) * nodes]: slot k's update task on node n, or -1 */
    int *heap, *heap_offset, *heap_size; /* each pool's ready tasks: a min-heap by priority */
    int *dirty_pools, num_dirty;
    unsigned char *pool_dirty; /* [nodes * pools_per_node] */
    int nic_dirty;             /* a NIC direction freed or a message was posted */
    message *messages;
    int num_messages, max_messages;
    int *queue_head, *queue_tail; /* [nodes * nodes]: unstarted messages src -> dst, in
                                     posting order */
    event *events;            /* this iteration's, in posting order */
    int *event_heap;          /* the pending ones: a min-heap by time, then posting */
    int num_events, max_events, num_posted;
    int *chain_awaits;        /* [L * nodes]: what node n awaits before passing layer l on */
    int *base_awaits;         /* [nodes]: what node n awaits before passing the base on */
    double base_bytes;        /* the tied embedding's base (0: none) */
    int *slices_held;         /* [(L + 1) * nodes]: slices of slot k on node n */
    int *slices_left;         /* [nodes]: with clip, slices node n awaits this iteration */
    double *gather_bytes;     /* [L + 1]: slot k's all-gather bytes, all slices */
    double *grad_bytes;       /* [L]: G_l (0: not trainable) */
};

/* The state for sim's machine, sized for its largest iteration; NULL when
 * out of memory. */
rp_sim_nodes *rp_sim_nodes_create(const rp_sim *sim);
void rp_sim_nodes_destroy(rp_sim_nodes **nodes);

/* Iteration t's updates on every node: version_ready[t][k] is when every
 * node has the new version of slot k (0 for untrained slots). */
void rp_sim_nodes_optimizer(rp_sim *sim, int t);

/* Per iteration: the busiest optimizer pool's time (a rank's); and sum
 * plus node 0's pools' times over its ranks, added one pool after the other
 * (the host traffic bound's optimizer share). */
double rp_sim_nodes_busiest_pool(const rp_sim *sim);
double rp_sim_nodes_add_first_node_optimizer(const rp_sim *sim, double sum);

/* The network's figures of the result (nodes, net_*). */
void rp_sim_nodes_results(const rp_sim *sim, rp_sim_result *result);

#endif
