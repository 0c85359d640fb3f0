/* Internal state of the engine, shared by its threads: the executor (the
 * rank's main thread, which also sets the run up and re-plans between
 * segments), the optimizer thread, the node communication thread (several
 * nodes), and on rank 0 the logger and the checkpoint writer. The state is
 * grouped by who writes it: the run's shape and set-up (written before the
 * threads start, read-only while they run), views into the host store (set
 * up once; what they point to is written under the event protocol,
 * protocol.h), the error and stop slots (any thread, atomically or under
 * the lock), and one part per thread, written by that thread only while
 * the threads run (the set-up may give them their starting values, and the
 * run reads them once the threads have joined). */
#ifndef RP_ENGINE_ENGINE_IMPL_H
#define RP_ENGINE_ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/log.h"
#include "device/backend.h"
#include "device/device.h"
#include "engine/arena.h"
#include "io/dataset.h"
#include "engine/event.h"
#include "engine/frozen_base.h"
#include "engine/nodes.h"
#include "engine/params.h"
#include "engine/progress.h"
#include "engine/router_aux.h"
#include "io/trace.h"
#include "engine/train_options.h"
#include "engine/transfer.h"
#include "optim/lr.h"
#include "plan/plan.h"
#include "plan/schedule.h"
#include "store/store.h"

/* A node rank's PCIe link (engine/link_groups.c): its group, numbered 0..
 * in rank order (-1: a link of its own), the NUMA node of its GPU (-1:
 * unknown) and its group's shared link over a GPU's own (1: unknown). */
typedef struct rp_rank_link {
    int group, numa;
    double uplink;
} rp_rank_link;

/* The optimizer thread's part (optimizer.c, grad_completion.c, and the
 * update gate it calls): written by it while a segment runs; the set-up
 * gives adam_step its starting value, the run reads it between segments. */
typedef struct rp_engine_optimizer_part {
    int64_t adam_step;   /* AdamW's own step count, the updates applied so far (a step with no
                            counted target applies none, while the lr schedule still advances
                            with the step), kept across segments */
    float lag_coef;      /* rank 0's lagged optimizer: the clipping coefficient of the step it
                            is updating (for a checkpoint after a stop) */
    _Atomic uint64_t adamw_ns;   /* CPU time of the threads that called AdamW on this rank (an
                                    OpenMP team's other threads not counted), in the steps from
                                    the run's RP_ADAMW_TIMED_FROM-th on */
    _Atomic uint64_t ck_held_ns; /* updates held for the checkpoint writer (this rank) */
    _Atomic int64_t *gather_posted; /* several nodes, [layer]: the newest step whose update of
                                       this rank's slice the optimizer handed to the
                                       all-gather (rp_gate_update_done; the communication
                                       thread reads it) */
    _Atomic int optimizer_done;     /* the optimizer thread's segment is over */
    float *spec_backup;  /* the speculative update (speculative.c): master, m and v of this
                            rank's slices of layers 1.. before their speculative AdamW
                            (spec_backup_floats, allocated once for the run), or NULL */
    int64_t spec_hits;   /* steps whose speculative updates were kept (the norm did not clip) */
    int64_t spec_misses; /* and those redone (it clipped) */
    int64_t spec_layers; /* this rank's layer shares speculated, in steps that may speculate */
    int64_t spec_after;  /* and those updated after the norm instead, the backward being over
                            (rp_gate_speculates) */
} rp_engine_optimizer_part;

/* The executor's measurements (stage_compute.c, stage_buffers.c): ms summed
 * over calls, and the calls, per layer, taken in a segment's iterations
 * after its first; the run reads them between segments to re-plan
 * (run_plan.c). */
typedef struct rp_engine_executor_part {
    double *meas_ms; /* [3 * num_layers]: forward, backward, then an FP8 base's
                        dequantisation (each use that dequantised the block) */
    double *meas_n;
} rp_engine_executor_part;

/* The logger thread's part (logger.c, outputs.c; rank 0): written by it
 * while a segment runs; the set-up opens --log and starts the clocks, the
 * run reads them after the threads joined. */
typedef struct rp_engine_logger_part {
    FILE *log;             /* --log, rank 0 */
    int log_errno;         /* errno of the first failed write to --log (0: none) */
    int64_t log_failed_step;
    double t_logged;       /* when the previous iteration was logged */
    uint64_t trace_step_ns; /* the same on the trace's clock (start of the step span) */
    double last_loss;
    int64_t steps_logged;  /* steps whose metrics are done */
} rp_engine_logger_part;

/* The node communication thread's part (node_comm.c, node_sums.c; several nodes): its
 * exchanges and what it sent; the set-up allocates the buffer. */
typedef struct rp_engine_node_comm_part {
    float *node_buf;   /* a partial sum from the node before (the largest share of a layer),
                          or NULL */
    struct rp_node_pending *node_pending; /* the exchanges in flight, per layer */
    MPI_Request emb_base_req; /* node 0: the tied embedding's summed base, on its way from
                                 the last node */
    _Atomic uint64_t node_sent; /* bytes this rank sent to other nodes while training */
    int node_failure_sent[2]; /* this node and its status, as the failure notice sent to the
                                 other nodes holds them */
} rp_engine_node_comm_part;

/* The checkpoint writer's part (checkpoint_write.c; rank 0): written by the
 * writer thread while a segment runs, and by the run's checkpoint after a
 * segment (rp_checkpoint_save), never both at once. */
typedef struct rp_engine_checkpoint_part {
    int64_t ck_written; /* the newest checkpoint written during a segment */
    int64_t ck_failed;  /* the step of the first checkpoint not written (0: none) */
    rp_error ck_error;  /* and why */
    char lora_base_hash[17]; /* LoRA checkpoints: the base's fingerprint, once computed
                                (engine/lora_checkpoint.h) */
} rp_engine_checkpoint_part;

typedef struct rp_engine {
    /* ---- the run: written by its set-up (run.c) before the threads
     * start, and between segments (it_first, it_last, plan); read-only while
     * the threads run ---- */
    /* options, logging, the ranks */
    const rp_train_options *o;
    const rp_logger *lg;
    rp_nodes nd;       /* the job's nodes (engine/nodes.h) */
    int rank, size;    /* within this rank's node: the executors the engine deals jobs to */
    int threads;
    /* the device */
    rp_device_kind device; /* executor kind */
    int device_ordinal;    /* node-local rank mod visible devices */
    unsigned unproven;     /* the CUDA paths on: proven or allowed, not turned off
                              (core/unproven.h: bit 1u << rp_unproven), read once */
    int boundary_before;   /* RP_TEST_STEP_BOUNDARY_BEFORE=1: issue 33's step boundary
                              as before it (update_gate.h), read once */
    int speculative;       /* --speculative-update resolved: on (speculative.c) */
    size_t spec_backup_floats; /* this rank's backup: 3 x its slices of layers 1.. */
    size_t spec_backup_node_bytes; /* the node's ranks' backups together (host memory) */
    int64_t memory_limit;  /* device bytes an executor may allocate (the planner's limit),
                              0 = none; the same on every rank (device_memory_limit) */
    int64_t head_rows;     /* the head's chunk in training (memory_model.h's
                              rp_memory_head_rows), the same on every rank */
    rp_device *dev;    /* this rank's executor device, for the whole run */
    /* the model and its weights */
    rp_params *p;      /* attached to the store: with LoRA, the adapters */
    int lora;          /* LoRA: the model's other weights are frozen, in `base` */
    rp_frozen_base *base; /* LoRA's frozen weights (engine/frozen_base.h), or NULL */
    int base_in_place;    /* executors whose memory is the host's (CPU) read `base` where
                           * it lies: it is not copied into their stage buffers (an FP8
                           * model's blocks are dequantised from there into the executor's
                           * scratch for each use: stage_weights.h) */
    uint64_t uploaded_bytes; /* this rank's executor: the bytes its stages' uploads moved
                                (the transfer engine's weights and prefetch classes), summed
                                over the run's segments */
    int tied;          /* the LM head is the embedding */
    rp_router_aux raux; /* a mixture of experts' load-balancing loss (coef 0: none) */
    char *model_config_text; /* the config.json the model came from, read at start (rank 0;
                                NULL elsewhere): the template of every save and checkpoint,
                                usable when its file is gone (a pruned checkpoint) */
    rp_companions *companions; /* the model's tokenizer and generation files, read at start
                                  (rank 0; NULL elsewhere and with --init-config): they go
                                  into every save and a full model's checkpoints */
    /* the plan, its schedule and the data */
    rp_plan plan;
    rp_lr_schedule sched;
    rp_dataset *ds;
    rp_dataset *eval_ds; /* --eval-data (NULL: none) */
    int eval_allocation_logged; /* rank 0 said what its first evaluation allocated */
    /* the shape of the run */
    int64_t steps;              /* iterations of the run */
    int64_t microbatches;       /* of this node per iteration (M / nodes) */
    int64_t batch_micro;        /* of the whole iteration, every node's (M) */
    int64_t micro_base;         /* this node's first microbatch: node x microbatches */
    int64_t samples_per_micro;  /* samples of a microbatch (B / M) */
    int64_t seq_len;            /* tokens of a sample */
    int64_t tokens_per_micro;   /* samples_per_micro * seq_len */
    int64_t hidden;             /* the model's hidden size */
    int pipelines;              /* P of this node: gradients summed in pipeline order, node
                                   n's pipelines nP.. of all nodes' N x P (node_sums.h) */
    int virtual_executors;      /* max(G, P): pipeline g runs its jobs on virtual executors
                                   g*V/P.., folded onto the ranks mod G */
    int64_t micro_per_pipeline; /* pipeline g runs microbatches g*Mg .. (g+1)*Mg-1 */
    size_t act_floats;          /* floats of one microbatch's activations */
    size_t *kept_floats;        /* [num_layers] a kept layer's saved area in the arena
                                   (host_memory.h's rp_host_kept_floats) */
    int jobs_per_it;            /* jobs of one pipeline in one iteration */
    int weight_buffers;         /* stage weight buffers per executor, 1 or 2, as the leader's
                                   plan chose them (--weight-buffers; shared with the plan) */
    int num_layers;             /* embedding, blocks, head */
    /* the running segment and the resume */
    int64_t it_first, it_last;  /* iterations of the running segment (one plan each) */
    int segments_built;         /* segments started so far: from the second on, the exchanges
                                   that start one wait at most --timeout (step_loop.c) */
    int measuring;              /* the running segment's layer times feed the re-plan after
                                   it (step_loop.c); no later segment's are read */
    int64_t adam_first;         /* by_optimizer.adam_step when the running segment started */
    int64_t resume_step;      /* --resume: the checkpoint's step (0: a fresh start) */
    int64_t resume_adam_step; /* and AdamW's update count then */
    const char *resume_dir;   /* the checkpoint (the model is read from it) */
    int resume_pending;       /* its update of resume_step is still to be applied (a lagged
                                 optimizer's checkpoint, engine/checkpoints.h), with: */
    float resume_coef;        /* that step's clipping coefficient */
    rp_dtype resume_model_dtype; /* the dtype the run's --model was stored in (the
                                    checkpoint's own weights are fp32): --save's default */
    int stopped_early;  /* the run stopped after e->it_last < e->steps, with a checkpoint */
    int peer_lost;      /* a bounded agreement expired: no more collectives on comm */
    /* transfers: pinned ranges and PCIe links */
    /* host ranges the executor registers with its device (pins) so copies run
     * at full speed: for the run, each layer's compute copy (uploaded) and
     * gradient (downloaded into), and the areas of the tied head's, the other
     * pipelines' and the embedding rows' gradients (pins[0, npins_run)); the
     * segment's activations last. Master weights and AdamW moments, which no
     * copy touches, stay pageable. */
    struct rp_pin {
        void *base;
        size_t bytes;
    } *pins;
    int npins, npins_run;
    int pinned_run;    /* pins[0, pinned_run) registered with dev, for the run */
    /* transfer arbitration on a shared PCIe link (engine/link_groups.c):
     * this rank's group among the node's, its slot in the group's board
     * and the group's member count (< 2: no arbitration) */
    int link_group, link_member, link_members;
    rp_rank_link *link_of; /* [node ranks]: each rank's link, the node leader's model */
    int *deal;             /* [node ranks]: the rank that runs round-robin executor x (the
                              plan's deal, plan/deal.h); NULL: rank x */
    int plan_shared;       /* the first plan has been shared (run_plan.c) */
    char numa_logged[512]; /* the last --activation-numa line (step_loop.c) */
    /* tracing and fault injection */
    rp_progress progress;
    rp_trace *trace;   /* NULL unless --trace */
    int drop_kind, drop_index, drop_micro; /* RP_FAULT_DROP_SIGNAL (tests); kind -1: none */
    int64_t fault_stop_step; /* RP_FAULT_STOP_BEFORE_NORM (tests); 0: none, -1: malformed */

    /* ---- views into the host store: set up with the store (host_memory.c,
     * run.c); the data behind them is written by the producers the
     * event protocol names (protocol.h) ---- */
    rp_store *store;       /* the running segment's store */
    rp_store *param_store; /* the run's store: parameters and optimizer state */
    size_t param_store_bytes; /* the run's store (host_memory.h) */
    struct rp_xfer_link *link_boards; /* the segment store's boards, one per group */
    struct rp_wait_slot *wait_board;  /* the segment store's waits (engine/wait_board.h) */
    rp_events *ev;
    rp_arena arena;
    float *act;        /* arena base in the store */
    float *tied_grad;  /* the head's part of a tied embedding's gradient, one per pipeline
                          (vocab x hidden floats each), or NULL */
    float *group_grad; /* gradients of pipelines 1..P-1 (pipeline 0's are the params'), laid
                          out per layer at goff[l], gstride floats per pipeline; not the
                          embedding's, which travels as rows (below) */
    size_t *goff, gstride;
    /* The embedding's gradient of pipeline g: the rows its tokens touched,
     * sorted ids emb_ids[g][0..emb_n[g]) and their rows emb_rows[g]
     * (emb_cap rows of hidden floats each), written by the job that
     * downloads them. Jobs upload only these rows of the table too
     * (stage_buffers.c). */
    int32_t *emb_ids_base;
    float *emb_rows_base;
    int64_t *emb_n;
    int64_t emb_cap;   /* min(vocab, tokens of a pipeline's microbatches) */
    int64_t emb_device_rows; /* rows of it a stage holds on the device, weights and gradient:
                                memory_model.h's rp_memory_embedding_rows (the iteration's
                                tokens, so that the planner, which does not know the
                                pipelines, counts the same) */

    /* ---- the error and stop slots: any thread ---- */
    _Atomic int64_t *abort_flag; /* in the store: 0, or 1 + the rank that failed */
    /* a stop after the step in progress (rp_request_checkpoint), in the
     * store: the last step to run (0: none; RP_STOP_PENDING while it is
     * being decided) and the highest step any executor started a job of
     * (protocol.c, rp_proto_stop_before) */
    _Atomic int64_t *stop_at;
    _Atomic int64_t *started;
    _Atomic int stop_noticed; /* rank 0 said that a stop after the step was asked */
    pthread_mutex_t lock; /* over status and err */
    rp_status status;  /* first failure of this rank (rp_engine_fail) */
    rp_error err;

    /* ---- one part per thread, written by that thread only ---- */
    rp_engine_executor_part by_executor;
    rp_engine_optimizer_part by_optimizer;
    rp_engine_logger_part by_logger;                 /* rank 0 */
    rp_engine_node_comm_part by_node_comm;           /* several nodes */
    rp_engine_checkpoint_part by_checkpoint_writer;  /* rank 0 */
} rp_engine;

/* After the logger wrote step's metrics line: flush it, and on the first
 * failure report it at once (the run goes on, the model is still saved,
 * and rp_engine_log_close fails at the end). outputs.c */
void rp_engine_log_written(rp_engine *e, int64_t step);
rp_status rp_engine_log_close(rp_engine *e, rp_error *err);

/* Rank 0, before any work: every output path (--save, --log, --trace) can
 * be written. outputs.c */
rp_status rp_engine_outputs_check(const rp_train_options *o, rp_error *err);

/* Record a failure (the first one wins) and raise the store's abort flag so
 * every rank of the node stops waiting. Returns s. */
rp_status rp_engine_fail(rp_engine *e, rp_status s, const rp_error *err);
int rp_engine_aborted(const rp_engine *e);

/* Whether this rank says how far long work is (core/slow_work.h's lines:
 * the stores' allocation, a random start, the last checkpoint, the saves):
 * rank 0, unless --progress none. */
static inline int rp_engine_tells_work(const rp_engine *e)
{
    return e->nd.world_rank == 0 && e->o->progress != RP_PROGRESS_NONE;
}

/* Does the running segment start with a checkpoint's pending update (a
 * lagged optimizer's, engine/checkpoints.h), to apply before its first
 * step's? */
static inline int rp_engine_resumes_pending(const rp_engine *e)
{
    return e->resume_pending && e->it_first == e->resume_step + 1;
}

/* Counted targets of iteration t, and the tokens of microbatch m. */
int64_t rp_engine_counted(const rp_engine *e, int64_t t);
void rp_engine_tokens(const rp_engine *e, int64_t t, int64_t m, int32_t *inputs, int32_t *targets,
                      uint8_t *mask);
/* With --documents: each token's segment start within its sample, for
 * microbatch m of iteration t (rp_dataset_segments per sample). */
void rp_engine_segments(const rp_engine *e, int64_t t, int64_t m, int32_t *seg_start);

/* Executor of job j of pipeline g in iteration t (1-based). */
static inline int rp_engine_executor(const rp_engine *e, int64_t t, int j, int g)
{
    int x = rp_schedule_executor(&e->plan, e->virtual_executors, t - 1, j, g) % e->size;
    return e->deal ? e->deal[x] : x;
}

/* Host gradient buffer of pipeline g for layer l > 0 (the embedding's
 * travels as rows, rp_engine_emb_rows), and a tied head's part. */
static inline float *rp_engine_grad(const rp_engine *e, int g, int l)
{
    return g == 0 ? e->p->st[l].grad : e->group_grad + (size_t)(g - 1) * e->gstride + e->goff[l];
}
static inline float *rp_engine_tied_grad(const rp_engine *e, int g)
{
    return e->tied_grad + (size_t)g * (size_t)(e->p->cfg.vocab_size * e->hidden);
}

static inline int32_t *rp_engine_emb_ids(const rp_engine *e, int g)
{
    return e->emb_ids_base + (size_t)g * (size_t)(e->micro_per_pipeline * e->tokens_per_micro);
}
static inline float *rp_engine_emb_rows(const rp_engine *e, int g)
{
    return e->emb_rows_base + (size_t)g * (size_t)e->emb_cap * (size_t)e->hidden;
}

/* Sorted distinct input tokens of pipeline g's microbatches in iteration t
 * (the embedding rows its jobs read): ids[0..return), ids holding Mg*T;
 * -1 when out of memory. */
int64_t rp_engine_rows(const rp_engine *e, int64_t t, int g, int32_t *ids);
/* Sort ids[0..n) and drop repeats; returns the count left. */
int64_t rp_engine_sort_unique(int32_t *ids, int64_t n);

/* The optimizer's share of layer l on rank r: the whole clip blocks
 * [*b0, *b1) of the layer's gradient, elements [*lo, *hi). Every rank
 * updates its share of every layer, so the update of a layer is spread
 * over the node; elementwise work and block norms give the same bits
 * whatever the split. */
void rp_engine_share(const rp_engine *e, int l, int r, size_t *b0, size_t *b1, size_t *lo,
                     size_t *hi);

/* The part of rank r's share of layer l whose optimizer state node `node`
 * keeps and updates (node_sums.h): whole clip blocks [*b0, *b1), elements
 * [*lo, *hi); with one node, the share. */
void rp_engine_slice(const rp_engine *e, int l, int r, int node, size_t *b0, size_t *b1,
                     size_t *lo, size_t *hi);

static inline double *rp_engine_loss(const rp_engine *e, int64_t t)
{
    return (double *)(e->act + e->arena.loss) + (t % RP_ARENA_RING) * e->microbatches;
}

/* Block norms of layer l in iteration t: RP_ARENA_SUMSQ_BLOCKS doubles. */
static inline double *rp_engine_sumsq(const rp_engine *e, int64_t t, int l)
{
    return (double *)(e->act + e->arena.sumsq) +
           ((t % RP_ARENA_RING) * e->num_layers + l) * RP_ARENA_SUMSQ_BLOCKS;
}

/* The executor loop of this rank over all iterations. */
rp_status rp_engine_run_executor(rp_engine *e);
/* Thread bodies (arg: rp_engine *). */
void *rp_engine_optimizer_main(void *arg);
void *rp_engine_logger_main(void *arg);
/* Several nodes: each rank's node communication thread (node_sums.h). */
void *rp_engine_node_comm_main(void *arg);

/* The step of a run (counted from its start or resume) from which AdamW's
 * time is counted: the first ones touch the state's pages for the first time. */
#define RP_ADAMW_TIMED_FROM 3

/* What a wait or a loop returns once the run stops after an earlier step
 * (not an error: the threads end cleanly, a checkpoint follows). */
#define RP_STOP ((rp_status)1)
#define RP_STOP_PENDING INT64_MAX
/* Several nodes: a stop was asked on this node; the nodes decide its step
 * together (node_sums.h). Not a decision: reads as none. */
#define RP_STOP_REQUESTED (INT64_MAX - 1)

#endif
