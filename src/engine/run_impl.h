/* Shared by the files of a run: trainer.c (its entry, rp_train_run), run.c
 * (set-up and teardown), step_loop.c (the steps in segments, the re-plan),
 * outputs.c (the outputs started and written) and run_plan.c (the plan).
 * Internal to the engine.
 *
 * The engine on one node (DESIGN.md sections 3-7): the ranks of a
 * communicator share a host store (weights, master weights, gradients,
 * AdamW state, activation arena, events); every iteration's jobs
 *     F0 .. F(f-1) | T | B1 .. B(b-1)
 * of each of the --pipelines round-robin pipelines are dealt to the
 * executors by plan/schedule.c's rule. Each rank runs its jobs in order and
 * synchronises only through events in the store (protocol.h); an optimizer
 * thread per rank sums and updates its share of every layer as soon as the
 * update gate lets it (update_gate.h), and a layer's version gates the next
 * iteration's forward, so results equal a plain synchronous loop. */
#ifndef RP_ENGINE_RUN_IMPL_H
#define RP_ENGINE_RUN_IMPL_H

#include <mpi.h>

#include "device/device.h"
#include "engine/engine_impl.h"
#include "engine/host_memory.h"
#include "io/config.h"

/* What one call of rp_train_run holds beyond the engine: the model's
 * configuration and layout, the parameter store and the start-up facts. */
typedef struct rp_resume rp_resume; /* engine/checkpoints.h */

typedef struct rp_run_state {
    rp_model_config cfg;
    const char *config_path; /* the config.json read (named in messages and saved) */
    char path[4096];
    rp_params probe;         /* the layout alone (sizes, names) until the store exists */
    rp_store *pstore;        /* parameters and optimizer state, for the whole run */
    rp_param_store_map map;
    rp_params *shared;       /* attached to pstore */
    char executors[512];     /* the start-up line's executor summary */
    rp_logger live_lg;       /* the logger, printing through the live progress line */
} rp_run_state;

/* The engine and the run's state before the set-up: the resolved options,
 * the checkpoint resumed from (resume lives as long as the run), the nodes
 * and the logger. run.c */
void rp_run_init(rp_engine *e, rp_run_state *r, const rp_train_options *o,
                 const rp_resume *resume, const rp_nodes *nd, const rp_logger *lg);
/* Every output writable, the model read, the run's shape checked, the data
 * opened, the node set up: its store, devices, plan, threads and parameters
 * (collective). run.c */
rp_status rp_run_set_up(rp_engine *e, rp_run_state *r, MPI_Comm comm, rp_error *err);
/* Everything the set-up made, freed (whatever the run's outcome). run.c */
void rp_run_tear_down(rp_engine *e, rp_run_state *r);

/* The run's steps, segment by segment, with the checkpoints, evaluations
 * and the re-plan between segments (collective). step_loop.c */
rp_status rp_run_steps(rp_engine *e, MPI_Comm comm, rp_error *err);

/* The metrics log and its run description, the trace, the start-up line
 * and the progress display; after the steps (`trained`: their status), the
 * model, adapters, trace and the checkpoint failures, each written whatever
 * became of the others. outputs.c */
rp_status rp_run_outputs_start(rp_engine *e, rp_run_state *r, MPI_Comm comm, rp_error *err);
rp_status rp_run_outputs_write(rp_engine *e, rp_run_state *r, rp_status trained, MPI_Comm comm,
                               rp_error *err);

/* Make a status collective: every rank learns whether any rank failed
 * (agree.c says how a lost rank is bounded). */
rp_status rp_run_agree(rp_engine *e, rp_status s, MPI_Comm comm, rp_error *err);

/* The same for an exchange every rank reaches within about an iteration of
 * the others (the re-plan): a rank that did not fail waits at most
 * --timeout too, and names `what` when the others do not come. */
rp_status rp_run_agree_within(rp_engine *e, rp_status s, MPI_Comm comm, const char *what,
                              rp_error *err);

/* Wait for req, a non-blocking collective of such an exchange, at most
 * --timeout; then the job ends: RP_ERR_PEER_LOST naming `what` (no
 * collective may be called on comm after it). */
rp_status rp_run_wait_peers(rp_engine *e, MPI_Request *req, const char *what, rp_error *err);

/* RP_FAULT_STALL=WHERE:RANK (a test): the rank of that world rank stops
 * itself (SIGSTOP) where the run calls this with WHERE: "replan" (the
 * re-plan's agreement), "segment-end" (before the agreement ending a
 * segment), "segment" and "segment-store" (at the start of a segment after
 * the first, and before its host store is made). */
void rp_fault_stall(const char *where, int world_rank);

/* e->memory_limit: the device bytes an executor may allocate, the same on
 * every rank (collective). */
rp_status rp_run_memory_limit(rp_engine *e, const rp_device_info *info, int node_size,
                              MPI_Comm comm);

/* With --eval-data: the device memory each evaluation allocates
 * (memory_model.h's rp_memory_model_eval), said by rank 0, and refused
 * before any step when it is over e->memory_limit (collective). */
rp_status rp_run_eval_memory(rp_engine *e, MPI_Comm comm, rp_error *err);

/* The host bytes a node's run needs without activations: the parameter
 * store without its arena (and the speculative update's backups once it is
 * on), which --recompute auto and --speculative-update auto fit beside.
 * run_plan.c */
rp_status rp_run_host_model_state(const rp_engine *e, int64_t *bytes, rp_error *err);

/* e->plan: --plan, or the leader's partition of the model's cost model
 * under e->memory_limit, shared and validated (collective). */
rp_status rp_run_choose_plan(rp_engine *e, MPI_Comm comm, rp_error *err);
/* A --plan's text, its width against --pipelines and its stages, checked
 * from the shape alone (set_shape: before the host store is built; what it
 * needs of the device's memory is checked with the plan's choice). */
rp_status rp_run_forced_plan_check(const rp_engine *e, rp_error *err);
/* The width a plan gets from --pipelines (0: the plan's own), or an error
 * naming both where the plan says another. */
rp_status rp_run_plan_width(const rp_engine *e, rp_plan *plan, rp_error *err);

/* This rank's PCIe link group and its place in it (e->link_*), from
 * --link-groups, or on GPUs from the hwloc topology, or none; collective
 * over the node communicator. link_groups.c */
rp_status rp_run_link_groups(rp_engine *e, MPI_Comm node, rp_error *err);

/* e->plan re-made from the layer times the executors measured (summed
 * over the ranks), on the leader, and shared (collective). */
rp_status rp_run_replan(rp_engine *e, MPI_Comm comm, rp_error *err);

#endif
