/* The machine the simulator models (plan/simulate.h says how): executors,
 * links and their PCIe groups, the deal of executors to GPUs, the CPU
 * optimizer, host memory, and several nodes on a network; its defaults,
 * its checks, and the derived quantities (one node of several, the share
 * of the vocabulary an iteration's tokens read). */
#ifndef RP_PLAN_MACHINE_H
#define RP_PLAN_MACHINE_H

#include <stdint.h>

#include "core/error.h"
#include "plan/cost.h"

#define RP_SIM_MAX_GPUS 256
#define RP_SIM_MAX_LANES 8 /* transfers a link group carries at once per direction */
#define RP_SIM_MAX_NODES 64
#define RP_SIM_NET_LATENCY_MS 0.005 /* per network message: 5 us */
#define RP_SIM_NET_GRAD_BYTES 4     /* bytes per parameter the chains and the scatter move
                                       (the nodes sum fp32 gradients) */
#define RP_SIM_DEFAULT_NETWORK_GBS 100.0 /* gigabits/s per NIC direction */
#define RP_SIM_SPEC_BACKUP_BYTES 12.0 /* the speculative update's backup per parameter:
                                         fp32 master, m and v written in AdamW's own pass
                                         (rp_adamw_step_backup: nothing more read) */

typedef struct rp_machine {
    int gpus;                  /* G executors */
    int microbatches;          /* M per iteration */
    double link_gbs;           /* host<->device GB/s per executor, each direction */
    double transfer_ms;        /* latency of passing a microbatch's activations to another
                                  executor through the host store */
    double opt_gbs;            /* GB/s one rank's optimizer threads achieve */
    double opt_bytes_per_param;/* bytes AdamW moves per parameter (fp32 master, grad, m, v
                                  read; master, m, v written; compute copy written) */
    int optimizer_lag;         /* 0: exact; 1: one step stale */
    int clip;                  /* global-norm clipping */
    int speculative;           /* with clip and the exact optimizer, --speculative-update: a
                                  hit step (the norm does not clip) runs each layer's AdamW
                                  but the embedding's as its gradient lands, plus the backup
                                  of master, m and v (RP_SIM_SPEC_BACKUP_BYTES per parameter),
                                  while a gradient below it is still to land (else after the
                                  norm, without the backup); its version still waits for the
                                  norm. One node's optimizer: several nodes are simulated
                                  without it */
    int defer_wgrad;           /* weight-gradient work runs after the input gradient is sent */
    int opt_spread;            /* split each layer's update over all ranks */
    int iterations;            /* simulated iterations (>= 4); the first half is warm-up */
    int64_t memory_limit;      /* device bytes for a job, 0 = unlimited */
    int64_t keep_budget;       /* host bytes the kept activations of the layers below the
                                  tail may take (plan/keep.h): 0 keeps none, < 0 no limit */
    int64_t workspace_bytes;   /* added to every job's device memory */
    int64_t tokens_per_iteration; /* 0 = unknown */
    double host_gbs;           /* host memory GB/s shared by all ranks (0 = not modelled):
                                  uploads, downloads, activation hand-overs and optimizer
                                  traffic of one iteration cannot take less than their
                                  bytes at this rate */
    /* Sparse embedding gradient + row-priority embedding update: a modelled
     * lever the engine implements (0 = a dense embedding, rp_machine_defaults'
     * value). With it on and layer 0 an embedding (kind RP_LAYER_EMBED):
     * - a job holding layer 0 uploads only the rows its group's microbatches
     *   read (rows_frac_group x weight_bytes) and a backward job holding it
     *   downloads gradient rows only for those tokens (rows_frac_group x
     *   grad_bytes); the optimizer sums the groups' parts as it sums dense
     *   copies ((groups - 1) x rows_frac_group x grad_bytes extra reads), so
     *   with rows_frac 1 the work is the dense model's;
     * - the dense gradient of a layer tied to layer 0 (the LM head) is summed
     *   over the groups as soon as it is on the host (optimizer work ready
     *   then, ahead of any update), not after the last backward job;
     * - layer 0's update is split: (a) the rows the next forward reads
     *   (rows_frac of them), first (it gates the jobs holding layer 0); (b) the
     *   other rows, after every other update of the iteration (all rows are
     *   updated every step: AdamW moments decay with a zero gradient); (b)
     *   gates the jobs that read the whole table: those holding a layer tied
     *   to layer 0, or, with no tied layer, the next tail job (conservative).
     * rows_frac comes from embed_rows_frac, or when that is 0 from
     * rp_machine_embed_rows_frac's bound. Device memory is still counted with
     * the whole table (conservative). */
    int sparse_embed;
    double embed_rows_frac;    /* 0: derive (see rp_machine_embed_rows_frac); else 0 < X <= 1:
                                  the fraction of the vocabulary an iteration's tokens read */
    /* PCIe link groups (store/topology.h's), 0: every GPU on a link of its
     * own. GPU g is in group link_group[g], whose shared link has
     * uplink_gbs[k] GB/s per direction (0: link_gbs). */
    int link_groups;
    int link_group[RP_SIM_MAX_GPUS];
    double uplink_gbs[RP_SIM_MAX_GPUS];
    /* The GPU executor index e of the round-robin deal drives: deal[e] (the
     * identity when deal_set is 0). */
    int deal_set;
    int deal[RP_SIM_MAX_GPUS];
    /* Several nodes (see plan/simulate.h); 0 or 1: one node, no network. */
    int nodes;                 /* N; must divide microbatches */
    double network_gbs;        /* each node's NIC, gigaBITS/s per direction (100 = 12.5 GB/s) */
    double compute_bytes_per_param; /* bytes of a parameter's compute copy the all-gather
                                       moves (2: bf16) */
    /* Not the machine: what the caller lends a plan search (plan/search.h:
     * progress reports, the widths searched before); NULL: nothing. */
    struct rp_plan_search *search;
} rp_machine;

/* The GPU executor e of the round-robin deal drives. */
static inline int rp_machine_gpu_of(const rp_machine *mc, int e)
{
    return mc->deal_set ? mc->deal[e] : e;
}

/* Deal executors to GPUs group by group in turn (GPU 0 of group 0, GPU 0
 * of group 1, ..., GPU 1 of group 0, ...), so consecutive jobs of the
 * round-robin deal land on different link groups. No-op without groups. */
void rp_machine_interleave_deal(rp_machine *mc);

/* G = 1, M = 1, 25 GB/s link, no transfer latency, 10 GB/s optimizer per
 * rank, 30 bytes/param, exact, 12 iterations, no memory limit, 256 MiB
 * workspace; one node (a network of RP_SIM_DEFAULT_NETWORK_GBS Gb/s and
 * bf16 compute copies when nodes is raised). */
void rp_machine_defaults(rp_machine *mc);

/* Nodes the machine has: nodes, or 1 when it is 0. */
static inline int rp_machine_nodes(const rp_machine *mc)
{
    return mc->nodes > 1 ? mc->nodes : 1;
}

/* One node of mc: nodes 1, microbatches M/N, tokens_per_iteration / N (what
 * the planner plans for and the scaling efficiency's reference). Assumes N
 * divides M (rp_machine_check). */
rp_machine rp_machine_node(const rp_machine *mc);

/* Fraction of layer 0's rows (the vocabulary) that k microbatches read:
 * embed_rows_frac when it is given (> 0; then every pipeline group is
 * assumed to read all of them: conservative), else the bound
 * min(1, k x out_bytes / weight_bytes) of layer 0 (tokens over vocabulary
 * rows, every token distinct: the embedding's output holds one row of hidden
 * values per token, its table one per vocabulary entry, in the same dtype),
 * and 1 when layer 0 is not an embedding or either byte count is 0
 * (unknown). k = M gives the iteration's rows_frac, k = M/groups a group's. */
double rp_machine_embed_rows_frac(const rp_cost_model *m, const rp_machine *mc, int k);

/* Check the machine description (positive rates, G <= RP_SIM_MAX_GPUS...). */
rp_status rp_machine_check(const rp_machine *mc, rp_error *err);

#endif
