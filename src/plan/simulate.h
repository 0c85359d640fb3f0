/* Virtual-time simulation of the round-robin schedule on a modelled machine.
 *
 * What is modelled (all per executor unless said otherwise):
 * - compute: job j's microbatches run in order, each taking
 *   rp_schedule_job_ms, plus an FP8 base's dequantisations
 *   (rp_schedule_job_dequant: the first microbatch's with the rest of its
 *   work); microbatch m of a job waits for microbatch m of the
 *   job before it in the chain (F0 -> .. -> T -> B1 -> ..), plus transfer_ms
 *   when that job ran on another executor (activations go through the host);
 * - weight upload: one host-to-device link per executor (link_gbs), weights
 *   uploaded once per job, prefetched into the second of two buffers as soon
 *   as the job two back on that executor has finished; jobs stream versions:
 *   the layers go up in order, each no earlier than it reaches the version
 *   the job needs, and the first microbatch runs each layer's forward (or
 *   recompute) as soon as that layer is up and the previous job on the
 *   executor has finished, the rest of its work after the last layer's;
 * - gradient download: device-to-host on its own direction of the link,
 *   once per job after its last microbatch;
 * - optimizer: AdamW per layer on the CPU, opt_bytes_per_param bytes moved
 *   per trainable parameter at opt_gbs per rank (plus reading the extra
 *   gradient copies when several pipelines are summed), on the rank that
 *   produced the gradient (or split over all ranks with opt_spread), lowest
 *   layer first among those ready; with clip, no update starts before the
 *   last gradient of the iteration is on the host, but with speculative
 *   (a step whose norm does not clip) every layer's but the embedding's
 *   starts as its gradient lands, moving RP_SIM_SPEC_BACKUP_BYTES more per
 *   parameter, and its version is raised once the last gradient is in;
 *   one its rank would start only once every layer below it has its
 *   gradient (the backward over) runs after the norm instead, without
 *   the backup, as the engine's rule;
 * - versions: a job of iteration t needs the updates from iteration t-1
 *   (exact) or t-2 (optimizer_lag 1) of its layers (and of a tied layer);
 * - sparse_embed (what the engine does; 0 in rp_machine_defaults, 1 by
 *   default in `roundpipe plan`/`simulate`):
 *   layer 0, when it is the embedding, gets a sparse gradient and a
 *   row-priority update, see rp_machine.sparse_embed below.
 * - link groups (when given): GPUs behind one PCIe switch share its uplink;
 *   an upload or download also takes one of its group's lanes per
 *   direction (floor(uplink / link_gbs) lanes, at least 1, each at
 *   min(link_gbs, uplink)), earliest free first, so two GPUs of a 2-GPU
 *   switch uploading at once each get half of an x16 uplink; and the deal
 *   (which GPU executor index e drives) decides whether consecutive jobs'
 *   uploads land on one group or on different ones.
 * - several nodes (nodes N > 1, data parallel, what the engine does): M is
 *   the iteration's microbatch count over all nodes and every node runs the
 *   machine above (G executors, its own optimizer ranks and host) over M/N
 *   of them. The nodes' compute is simulated once: all nodes run the same
 *   schedule, so a layer's gradient is complete on every node at the same
 *   time g_l. Per layer l with trainable parameters, with
 *   G_l = RP_SIM_NET_GRAD_BYTES x opt_params (the fp32 gradient) and
 *   W_l = compute_bytes_per_param x opt_params (the updated compute copy):
 *   (0) each node sums its own pipelines' copies (and, without
 *       sparse_embed, a tied layer's gradient) of the whole layer on its
 *       optimizer ranks, the work the one-node model charges to the update,
 *       no earlier than g_l;
 *   (1) chain: node 0 sends its partial sum (G_l bytes) to node 1, which
 *       sends on to node 2 once it has received it and its own sum (0) is
 *       done, ... to node N-1 (the hop itself adds nothing: the add is not
 *       charged);
 *   (2) scatter: node N-1 sends slice j (G_l / N bytes) to each node
 *       j != N-1, in order j = 0, 1, ...;
 *   (3) each node runs the layer's update on its slice (the update work / N),
 *       once the slice is there; with clip, once its last slice of the
 *       iteration is there (the scatter carries the block norms, so every
 *       node then knows the global norm);
 *   (4) all-gather: each node j sends its updated slice (W_l / N bytes) to
 *       nodes j+1, j+2, ... (mod N). The layer is at the new version when
 *       every node has all N slices: the latest node's gathered copy gates
 *       the next jobs on every node (the nodes' compute is one timeline:
 *       conservative for the nodes whose copy is complete earlier).
 *   With sparse_embed, the chain and the scatter still carry layer 0's whole
 *   gradient; each node updates parts (a) and (b) of its slice (each / N)
 *   and gathers (a)'s rows (rows_frac x W_0 / N) and (b)'s (the rest)
 *   separately. A layer tied to layer 0 (the LM head) gives, as in the
 *   engine, a chain of its own, the base: each node sums the tied layers'
 *   gradients on landing (the head's share of (0)), node 0 sends the sum
 *   (G_0 bytes) to node 1, which adds its own and sends on, ..., and node
 *   N-1 sends the final base to node 0, whose chain (1) of layer 0 starts
 *   from it once its pipelines' rows are summed (0).
 *   Network: each node has one full-duplex NIC of network_gbs gigabits/s per
 *   direction. A message of B bytes takes RP_SIM_NET_LATENCY_MS + B / rate
 *   and occupies its sender's send direction and its receiver's receive
 *   direction; it starts as soon as both are free, the earliest posted first
 *   among those that can start (an iteration's messages after the previous
 *   iteration's). A node's G optimizer ranks are one pool of G x opt_gbs
 *   with opt_spread (each rank gets the same share of every task), else
 *   the ranks' pools as on one node; a node's sums (0) run before its
 *   updates, lower layers first. Not modelled: the network's host memory
 *   traffic (not in host_gbs), the few bytes of block norms and losses
 *   that travel too, MPI progress. rp_partition plans for one node: give it
 *   rp_machine_node's machine.
 * Host memory bandwidth shared by PCIe and the optimizer is only a bound on
 * the steady state (host_gbs), not a contention model; kernel launch
 * overheads are not modelled. */
#ifndef RP_PLAN_SIMULATE_H
#define RP_PLAN_SIMULATE_H

#include <stdint.h>

#include "plan/cost.h"
#include "plan/machine.h"
#include "plan/plan.h"

typedef enum rp_sim_limit {
    RP_LIMIT_SCHEDULE = 0,  /* the simulated schedule itself */
    RP_LIMIT_OPTIMIZER = 1, /* a rank's optimizer work per iteration */
    RP_LIMIT_UPLOAD = 2,    /* an executor's weight uploads per iteration */
    RP_LIMIT_HOST = 3,      /* host memory traffic per iteration (host_gbs) */
    RP_LIMIT_NETWORK = 4    /* a node's busiest NIC direction per iteration */
} rp_sim_limit;

typedef struct rp_sim_result {
    double iteration_ms;         /* steady state: the mean time between the ends of
                                    successive iterations (the last compute of each) over
                                    the second half of the simulated iterations, and no
                                    less than the busiest executor's compute, rank's
                                    optimizer time, executor's upload time or (several
                                    nodes) NIC direction's busy time per iteration (a
                                    backlog a short run may not show yet) */
    rp_sim_limit limit;          /* which of those set iteration_ms */
    double bubble[RP_SIM_MAX_GPUS]; /* per executor: 1 - compute per iteration / iteration_ms */
    double bubble_mean, bubble_max;
    double tokens_per_s;         /* 0 when tokens are unknown */
    double compute_ms;           /* mean compute per executor per iteration */
    double upload_ms;            /* mean upload busy time per executor per iteration */
    double opt_ms;               /* optimizer busy time per iteration, busiest rank */
    int64_t peak_bytes;          /* largest job's device memory */
    int worst_job;               /* its index */
    int width, groups, group_microbatches; /* of one node */
    /* several nodes (0 with one): bytes per iteration */
    int nodes;
    double net_grad_bytes;       /* G = sum of G_l: RP_SIM_NET_GRAD_BYTES per trainable param */
    double net_weight_bytes;     /* W = sum of W_l: compute_bytes_per_param per trainable param */
    double net_base_bytes;       /* T: the tied embedding's base, RP_SIM_NET_GRAD_BYTES per
                                    parameter of layer 0 (0 without sparse_embed or a tie) */
    double net_send_bytes;       /* the most one node sends: G + T + (N-1)/N W (node N-1:
                                    (N-1)/N G + T + (N-1)/N W), as the simulation counted
                                    them */
    double net_ms;               /* the busiest NIC direction's busy time (transfers and
                                    latencies) per iteration, of any node */
} rp_sim_result;

rp_status rp_simulate(const rp_cost_model *m, const rp_plan *p, const rp_machine *mc,
                      rp_sim_result *r, rp_error *err);

#endif
