/* Sums across nodes, in pipeline order: the one rule that makes N nodes of
 * P pipelines compute the bits of one node of N x P pipelines.
 *
 * Node n runs pipelines nP .. nP+P-1 of the iteration's N x P (microbatches
 * (nP+p) x M/(NP) ..). A gradient element's sum over the pipelines is a left
 * fold in pipeline order, so it cannot be split into per-node sums added
 * afterwards; it travels as a chain instead, between the ranks of equal
 * node-local rank (their optimizer shares are the same elements):
 *   - node 0 sums its pipelines and passes the partial to node 1;
 *   - node n > 0 starts from node n-1's partial, adds its pipelines in
 *     order and passes it on;
 *   - the last node's sum is final: it takes the block norms of the share
 *     and sends each node its slice of the share (rp_engine_slice) with
 *     all the share's norms (reduce-scatter).
 * Each node keeps the optimizer state of its slices only current, updates
 * them and sends the new compute-dtype weights of its slices to every other
 * node (all-gather); a layer's version is raised once every slice is in.
 * Every node takes the same global norm from the same block norms; the
 * store's master weights, m and v outside a node's slices are stale there,
 * so a checkpoint or a save first collects them on node 0
 * (rp_node_collect, between segments).
 * The embedding's two parts (grad_completion.c) are two chains: the tied
 * LM head's parts, whose final sum goes to node 0 only, then each
 * pipeline's rows added onto it, scattered like any layer's.
 * Losses go to node 0's logger, which sums them in microbatch order.
 *
 * Stopping after a step (SIGUSR1, SIGTERM with --checkpoint-dir): an
 * executor that sees the request marks it in its node's store
 * (RP_STOP_REQUESTED); the node leaders' chain of the top layer carries,
 * each step, whether any node so far saw one, and the last node's answer
 * comes back to every node with the slices: a stop seen on the chain of
 * step t makes t (t + 1 with a lagged optimizer) the last step on every
 * node. No job of a later step can have started then: it needs version t of
 * the embedding, which follows the chain of every layer of step t, and a
 * leader raises no summed event of step t before it knows the decision.
 *
 * Every rank runs a node communication thread (rp_engine_node_comm_main)
 * beside its optimizer: layer by layer, top down as the gradients land, it
 * does the chain and the scatter of its share (the local sums included)
 * and, without waiting for a layer's slice to come back, goes on with the
 * next layer; each layer's summed event is raised when its slice and norms
 * are in; the rank's optimizer, which waits for it, updates the slice and
 * hands it back (the update gate, rp_gate_update_done, through
 * gather_posted); the communication thread runs its
 * all-gather and raises the layer's version when every slice is in. The
 * thread drives every exchange without blocking on one: while it waits for
 * anything it completes the others (service in node_sums.c). Messages: the
 * gradients' and weights' on e->nd.cross, the losses on e->nd.cross_loss
 * (the logger thread); tags name the part, layer and step, so messages
 * match whatever order the threads of two nodes post them in. A wait gives up at
 * --timeout, on an abort of its node or an interrupt, naming the node it
 * waited for; a node that fails sends every other node a notice, on which
 * they fail at once (node_failure.c), cancelling their receives in flight. */
#ifndef RP_ENGINE_NODE_SUMS_H
#define RP_ENGINE_NODE_SUMS_H

#include "engine/engine_impl.h"

/* The message parts, one tag each per layer and step */
typedef enum {
    RP_NODE_PARTIAL = 0, /* a partial sum to the next node */
    RP_NODE_FINAL = 1,   /* the full sum back from the last node */
    RP_NODE_BASE = 2,    /* the embedding's tied base: its partial (to the next node) */
    RP_NODE_BASE_FINAL = 3, /* and its final sum (to node 0) */
    RP_NODE_LOSSES = 4,  /* a node's microbatch losses (to node 0's logger) */
    RP_NODE_NORMS = 5,   /* a share's block norms, with its final sum */
    RP_NODE_WEIGHTS = 6, /* a slice's updated compute-dtype weights (all-gather) */
    RP_NODE_COLLECT = 7, /* a slice's state to node 0 (+ the array: master, m, v, gradient) */
    RP_NODE_STOP = 11,   /* whether a stop was asked on a node so far along the chain */
    RP_NODE_STOP_DECISION = 12, /* the last node's decision, to every node */
} rp_node_part;
#define RP_NODE_PARTS 13

static inline int rp_node_first(const rp_engine *e) { return e->nd.node == 0; }
static inline int rp_node_last(const rp_engine *e) { return e->nd.node == e->nd.nodes - 1; }

/* Node n > 0: receive node n-1's partial of elements [lo, hi) of layer l
 * into `into` (hi - lo floats). */
rp_status rp_node_receive_partial(rp_engine *e, int l, rp_node_part part, int64_t t, float *into,
                                  size_t lo, size_t hi, const char *who, rp_error *err);

/* After this node added its pipelines to rank's share [lo, hi) of layer l
 * (acc, blocks [b0, b1)): pass it to node n+1, then start receiving this
 * node's slice of the final sum into acc and the share's block norms into
 * part[b0..b1) (every node but the last); or, on the last node, whose part
 * holds the norms, start sending each other node its slice and the norms.
 * The layer's summed event is raised once that completes (node
 * communication thread only). */
rp_status rp_node_pass_on(rp_engine *e, int l, int64_t t, float *acc, double *part,
                          const char *who, rp_error *err);

/* The node communication thread: this node's pipelines' gradients of layer
 * l in step t (and a tied head's part) are on the host, its exchanges kept
 * going meanwhile; fails at the deadline or an abort, naming the event. */
rp_status rp_node_wait_grads(rp_engine *e, int l, int64_t t, const char *who, rp_error *err);

/* The node communication thread: this rank's share of layer l at version t
 * (its all-gather completed), its exchanges kept going meanwhile; fails at
 * the deadline or an abort, naming the event. */
rp_status rp_node_wait_share_version(rp_engine *e, int l, int64_t t, const char *who,
                                     rp_error *err);

/* Between segments (the main thread; the engine's threads are joined):
 * every node's slices of the master weights, and with `optimizer` of m and
 * v, and with `gradient` of the summed gradient, onto node 0's store. */
rp_status rp_node_collect(rp_engine *e, int optimizer, int gradient, rp_error *err);

/* The tied embedding's base, at the tails' time: pass the partial on, or
 * (last node) send the final sum to node 0, which receives it into acc
 * (rp_node_base_posted, then rp_node_base_wait before the rows). */
rp_status rp_node_base_pass_on(rp_engine *e, int64_t t, float *acc, size_t lo, size_t hi,
                               const char *who, rp_error *err);
rp_status rp_node_base_wait(rp_engine *e, int64_t t, const char *who, rp_error *err);

/* The logger: node 0 gathers every node's microbatch losses of step t
 * into all[0 .. batch_micro) (its own first) and, when aux is not NULL
 * (a load-balancing loss), their aux into all[batch_micro .. 2 batch_micro)
 * in the same order; other nodes send theirs, losses and aux in one
 * message. */
rp_status rp_node_gather_losses(rp_engine *e, int64_t t, const double *loss, const double *aux,
                                double *all, rp_error *err);

/* This rank's share of the optimizer state outside this node's slices
 * (m and v, and the master weights unless they are the compute copy) given
 * back to the system (rp_store_release): after loading and after a
 * checkpoint collected them. The node's store then holds 1/N of them. */
void rp_node_release_others(rp_engine *e);

/* After training, with --ranks-per-node or several nodes (collective over
 * comm; rank 0 logs): per node, the bytes it sent per step against the
 * rule's count and the model's fp32 parameter bytes, and its ranks' AdamW
 * time per step, over `steps` steps. */
void rp_node_report(rp_engine *e, MPI_Comm comm, int64_t steps);

#endif
