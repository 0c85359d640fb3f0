/* The run's step loop: its steps in segments (one plan each, with their own
 * store of activations and events), each segment's threads (executor,
 * optimizer, node communication, logger, checkpoint writer), the
 * checkpoint and evaluation between segments, and the re-plan from
 * measured layer times. */
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "engine/arena_numa.h"
#include "engine/checkpoint_steps.h"
#include "engine/checkpoints.h"
#include "engine/engine_impl.h"
#include "engine/eval.h"
#include "engine/wait_board.h"
#include "engine/host_memory.h"
#include "engine/protocol.h"
#include "engine/run_impl.h"
#include "store/shm.h"

/* Iterations run under the cost model's plan before re-planning from
 * measured layer times (the first of them is not measured). */
#define RP_REPLAN_AFTER 2

/* --activation-numa reader: what the node leader bound, when it changes. */
static void log_activation_numa(rp_engine *e, rp_numa_bound b, size_t shared)
{
    static const double mib = 1048576.0;
    char text[512];
    int known = 0;
    for (int r = 0; r < e->size && e->link_of; r++)
        known |= e->link_of[r].numa >= 0;
    snprintf(text, sizeof text, "activation buffers on their readers' NUMA node: %.2f MiB bound "
             "of %.2f MiB asked%s; %.2f MiB read from several nodes stay interleaved; left "
             "interleaved: %.2f MiB on nodes this machine lacks or cannot bind, %.2f MiB over "
             "half a node's memory, %.2f MiB the kernel refused",
             (double)b.bound / mib, (double)b.asked / mib,
             known ? "" : " (no rank's GPU has a known NUMA node: give --topology)",
             (double)shared / mib, (double)b.absent / mib, (double)b.over_half / mib,
             (double)b.refused / mib);
    if (strcmp(text, e->numa_logged)) {
        rp_log(e->lg, RP_LOG_INFO, "%s", text);
        snprintf(e->numa_logged, sizeof e->numa_logged, "%s", text);
    }
}

/* The exchanges that start a segment after the first: every rank comes to
 * them from the end of the one before (its re-plan, checkpoint or
 * evaluation), so each waits at most --timeout and names this; a rank that
 * stops there ends the job instead of holding it. The first segment's
 * exchanges wait as long as the ranks take (a rank may still be pinning its
 * host memory). */
#define SEGMENT_START "the start of the next segment"

static rp_status segment_agree(rp_engine *e, rp_status s, MPI_Comm comm, rp_error *err)
{
    return e->segments_built > 0 ? rp_run_agree_within(e, s, comm, SEGMENT_START, err)
                                 : rp_run_agree(e, s, comm, err);
}

/* The store of one segment (iterations first..last under one plan): the
 * activation arena and the events, every counter starting at first - 1 as if
 * the earlier iterations had run under this plan. */
static rp_status build_segment(rp_engine *e, MPI_Comm comm, rp_error *err)
{
    const int bounded = e->segments_built++ > 0;
    if (bounded)
        rp_fault_stall("segment", e->nd.world_rank);
    rp_arena_spec as = {e->num_layers, (int)e->microbatches, e->act_floats,
                        e->o->recompute == RP_RECOMPUTE_LAYER, e->raux.floats, e->kept_floats,
                        e->o->activation_dtype, rp_kept_on_executor(e->device)};
    e->jobs_per_it = rp_schedule_num_jobs(&e->plan);
    if (rp_arena_init(&e->arena, &e->plan, &as) != 0)
        return segment_agree(e, rp_error_set(err, RP_ERR_NOMEM, "arena index"), comm, err);
    rp_event_dims dims;
    rp_proto_dims(e, &dims);
    rp_store_layout *lay = NULL;
    RP_TRY(segment_agree(e, rp_store_layout_create(&lay, err), comm, err));
    size_t act, evo, links, waits;
    rp_status s = rp_store_layout_add(lay, "activations", e->arena.floats * sizeof(float),
                                      RP_STORE_ALIGN_PAGE, &act, err);
    if (s == RP_OK) /* the link groups' arbitration boards (zeroed: nothing urgent) */
        s = rp_store_layout_add(lay, "link boards", (size_t)e->size * sizeof(rp_xfer_link),
                                RP_STORE_ALIGN_LINE, &links, err);
    if (s == RP_OK)
        s = rp_store_layout_add(lay, "wait board", rp_wait_board_bytes(e->size),
                                RP_STORE_ALIGN_LINE, &waits, err);
    if (s == RP_OK)
        s = rp_store_layout_add(lay, "events", rp_events_bytes(&dims), RP_STORE_ALIGN_LINE, &evo,
                                err);
    rp_store_params sp;
    memset(&sp, 0, sizeof sp);
    rp_numa_range *near = NULL;
    size_t shared = 0;
    if (s == RP_OK && e->o->activation_numa)
        s = rp_arena_numa_ranges(e, act, &near, &sp.nbind, &shared, err);
    sp.bind = near;
    rp_work_lines lines; /* rank 0 says how far a long allocation is */
    sp.reserve_progress = rp_work_lines_start(&lines, e->lg, rp_engine_tells_work(e),
                                              "allocating the activations' host store");
    sp.wait_s = bounded ? e->o->timeout_s : 0;
    if (s == RP_OK && bounded)
        rp_fault_stall("segment-store", e->nd.world_rank);
    if (s == RP_OK)
        s = rp_store_create(e->nd.node_comm, lay, &sp, &e->store, err);
    if (s == RP_ERR_PEER_LOST) { /* no collective on the node's ranks may follow */
        e->peer_lost = 1;
        rp_store_layout_destroy(&lay);
        free(near);
        return rp_error_set(err, RP_ERR_PEER_LOST, "rank %d, %s (its host store): other ranks "
                            "did not answer within --timeout %g s: ending the job",
                            e->nd.world_rank, SEGMENT_START, e->o->timeout_s);
    }
    rp_store_layout_destroy(&lay);
    free(near);
    if (s == RP_OK && e->o->activation_numa && rp_store_is_leader(e->store))
        log_activation_numa(e, rp_store_numa_bound(e->store), shared);
    RP_TRY(segment_agree(e, s, comm, err));
    char *base = rp_store_base(e->store);
    e->pins[e->npins_run] = (struct rp_pin){base + act, e->arena.floats * sizeof(float)};
    e->npins = e->npins_run + 1;
    e->act = (float *)(base + act);
    e->link_boards = (rp_xfer_link *)(base + links);
    e->wait_board = (rp_wait_slot *)(base + waits);
    s = rp_events_create(base + evo, rp_events_bytes(&dims), &dims, e->nd.world_rank, &e->ev,
                          err);
    if (s == RP_OK && rp_store_is_leader(e->store)) {
        rp_events_fill(e->ev, (uint64_t)(e->it_first - 1));
        if (rp_engine_resumes_pending(
                e)) { /* the weights are of the step before: its update follows */
            rp_events_fill_kind(e->ev, RP_EV_VERSION, (uint64_t)(e->it_first - 2));
            rp_events_fill_kind(e->ev, RP_EV_ROWS, (uint64_t)(e->it_first - 2));
        }
    }
    s = segment_agree(e, s, comm, err);
    if (!e->peer_lost && !bounded)
        MPI_Barrier(comm); /* counters set before anyone waits */
    else if (!e->peer_lost) {
        MPI_Request req;
        rp_error later;
        MPI_Ibarrier(comm, &req);
        rp_status b = rp_run_wait_peers(e, &req, SEGMENT_START, s == RP_OK ? err : &later);
        s = s == RP_OK ? b : s;
    }
    return s;
}

static void free_segment(rp_engine *e)
{
    e->wait_board = NULL;
    rp_events_destroy(&e->ev);
    if (e->store && !e->peer_lost) /* freeing its communicator may wait for the lost rank */
        rp_store_destroy(&e->store);
    rp_arena_free(&e->arena);
}

/* Run iterations first..last on every rank: executor here, optimizer,
 * (several nodes) node communication and (node leaders) logger and
 * checkpoint writer threads beside it. */
static rp_status run_segment(rp_engine *e, MPI_Comm comm, rp_error *err)
{
    pthread_t opt, logt, ckt, nct;
    int need_ck = e->rank == 0 && rp_checkpoint_writer_needed(e), need_nc = e->nd.nodes > 1;
    atomic_store(&e->by_optimizer.optimizer_done, 0);
    for (int l = 0; need_nc && l < e->num_layers; l++) /* nothing handed over yet */
        atomic_store(&e->by_optimizer.gather_posted[l], 0);
    int have_nc = need_nc && pthread_create(&nct, NULL, rp_engine_node_comm_main, e) == 0;
    int have_opt = pthread_create(&opt, NULL, rp_engine_optimizer_main, e) == 0;
    int have_log = e->rank == 0 && pthread_create(&logt, NULL, rp_engine_logger_main, e) == 0;
    int have_ck = need_ck && pthread_create(&ckt, NULL, rp_checkpoint_writer_main, e) == 0;
    if (!have_opt || (e->rank == 0 && !have_log) || have_ck != need_ck || have_nc != need_nc) {
        rp_error te;
        rp_error_set(&te, RP_ERR_NOMEM, "rank %d: cannot start engine threads", e->nd.world_rank);
        rp_engine_fail(e, RP_ERR_NOMEM, &te);
    } else {
        rp_engine_run_executor(e);
    }
    if (have_opt)
        pthread_join(opt, NULL);
    if (have_log)
        pthread_join(logt, NULL);
    if (have_ck)
        pthread_join(ckt, NULL);
    if (have_nc)
        pthread_join(nct, NULL);
    rp_status s = e->status;
    if (s != RP_OK)
        *err = e->err;
    /* every rank ends its segment within about an iteration of the others,
     * unless node 0's rank 0 writes a checkpoint in it (its writer may still
     * be writing): then the others wait as long as it takes */
    rp_fault_stall("segment-end", e->nd.world_rank);
    return rp_checkpoint_due_in_segment(e)
               ? rp_run_agree(e, s, comm, err)
               : rp_run_agree_within(e, s, comm, "the end of a segment", err);
}

/* Segments: with the planner's plan and exact semantics, the first
 * RP_REPLAN_AFTER iterations run under the cost model's plan, then the
 * leader re-plans from the layer times measured meanwhile; the rest runs
 * under that plan. Results do not depend on the plan. */
/* The bytes every executor's stage uploads moved, per step of the run
 * (issue 36: an FP8 base travels as e4m3 bytes and scales, half of bf16's;
 * a base read in place moves none). Collective. */
static void log_uploads(rp_engine *e, MPI_Comm comm)
{
    unsigned long long mine = e->uploaded_bytes, all = 0;
    MPI_Reduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, comm);
    const int64_t steps = e->it_last - e->resume_step;
    if (e->nd.world_rank != 0 || steps < 1)
        return;
    const char *base = !e->lora                 ? ""
                       : rp_frozen_base_fp8(e->base) && !e->base_in_place
                           ? "; the frozen base as FP8 with its scales"
                       : e->base_in_place ? "; the frozen base read where it lies, not uploaded"
                                          : "; the frozen base in the compute dtype";
    rp_log(e->lg, RP_LOG_INFO, "weights uploaded: %.1f MiB per step (%llu bytes over %lld "
           "steps, all executors%s)", (double)all / (double)steps / 1048576.0, all,
           (long long)steps, base);
}

/* The speculative update's steps (speculative.c): kept when the norm did
 * not clip, redone when it did; every rank decides that the same from the
 * same norm, so rank 0's counts are the run's. Which layers speculate is
 * each rank's own (rp_gate_speculates): rank 0's are said as its. */
static void log_speculation(const rp_engine *e)
{
    if (!e->speculative || e->nd.world_rank != 0)
        return;
    int64_t hits = e->by_optimizer.spec_hits, misses = e->by_optimizer.spec_misses;
    int64_t layers = e->by_optimizer.spec_layers, after = e->by_optimizer.spec_after;
    rp_log(e->lg, RP_LOG_INFO, "speculative update: %lld hits, %lld misses (of %lld steps "
           "that may speculate: kept as the norm did not clip, or redone as it clipped); rank 0 "
           "speculated %lld of its %lld updates of the blocks and the head in them, %lld after "
           "the norm as the backward was over", (long long)hits, (long long)misses,
           (long long)(hits + misses), (long long)layers, (long long)(layers + after),
           (long long)after);
}

rp_status rp_run_steps(rp_engine *e, MPI_Comm comm, rp_error *err)
{
    const rp_train_options *o = e->o;
    rp_status s = RP_OK;
    e->by_logger.t_logged = rp_now();
    e->by_logger.trace_step_ns = rp_trace_now_ns();
    e->by_logger.last_loss = NAN;
    e->by_optimizer.adam_step = e->resume_adam_step;
    e->by_logger.steps_logged = e->resume_step;
    for (e->it_first = e->resume_step + 1; s == RP_OK && e->it_first <= e->steps;
         e->it_first = e->it_last + 1) {
        int replan_after =
            !o->plan && !o->optimizer_lag && e->it_first == 1 && e->steps > RP_REPLAN_AFTER;
        e->it_last = replan_after ? RP_REPLAN_AFTER : e->steps;
        e->measuring = replan_after;
        if (o->eval_every > 0) { /* a segment ends on each evaluation step */
            int64_t next = (e->it_first + o->eval_every - 1) / o->eval_every * o->eval_every;
            e->it_last = next < e->it_last ? next : e->it_last;
        }
        if (e->nd.nodes > 1 && o->checkpoint_dir && o->checkpoint_every > 0) {
            /* several nodes: a checkpoint collects the nodes' slices between segments */
            int64_t every = o->checkpoint_every;
            int64_t next = (e->it_first + every - 1) / every * every;
            e->it_last = next < e->it_last ? next : e->it_last;
        }
        e->adam_first = e->by_optimizer.adam_step;
        s = build_segment(e, comm, err);
        if (s == RP_OK)
            s = run_segment(e, comm, err);
        free_segment(e);
        int64_t stop = e->stop_at ? atomic_load(e->stop_at) : 0;
        if (stop == RP_STOP_REQUESTED) /* asked too late for the chain: as between segments */
            stop = 0;
        if (s == RP_OK && stop > 0 && stop <= e->it_last) /* asked to stop after `stop` */
            e->it_last = stop;
        if (s == RP_OK && stop == 0 && e->it_last < e->steps && o->checkpoint_dir) {
            /* a request between segments: the ranks agree on it (each comes
             * from the end of the segment: at most --timeout) */
            int req = rp_checkpoint_requested() != 0, any = 0;
            MPI_Request r;
            MPI_Iallreduce(&req, &any, 1, MPI_INT, MPI_MAX, comm, &r);
            s = rp_run_wait_peers(e, &r, "the checkpoint request between segments", err);
            stop = any ? e->it_last : 0;
        }
        e->stopped_early = s == RP_OK && stop > 0 && e->it_last < e->steps;
        if (s == RP_OK && (rp_checkpoint_due(e, e->it_last) || e->stopped_early))
            s = rp_checkpoint_save(e, comm, err);
        if (s == RP_OK && e->stopped_early) {
            if (e->nd.world_rank == 0)
                rp_log(e->lg, RP_LOG_INFO, "stopped by %s after step %lld of %lld: continue with "
                       "the same command and --resume %s/step-%08lld (or --resume auto)",
                       rp_checkpoint_requested() == SIGUSR1 ? "SIGUSR1" : "SIGTERM",
                       (long long)e->it_last, (long long)e->steps, o->checkpoint_dir,
                       (long long)e->it_last);
            break;
        }
        if (s == RP_OK && rp_eval_due(e, e->it_last))
            s = rp_eval_run(e, comm, e->it_last, err);
        if (s == RP_OK && replan_after && e->it_last == RP_REPLAN_AFTER)
            s = rp_run_replan(e, comm, err);
    }
    /* whichever thread or rank noticed it first, an interrupt is reported
     * as such, with the step it stopped (rank 0 knows the steps logged) */
    if (s != RP_OK && s != RP_ERR_PEER_LOST && rp_interrupted())
        s = rp_error_set(
            err, RP_ERR_INTERRUPTED, "interrupted at step %lld of %lld",
            (long long)(e->nd.world_rank == 0 ? e->by_logger.steps_logged + 1 : e->it_first),
            (long long)e->steps);
    if (s == RP_OK) {
        log_uploads(e, comm);
        log_speculation(e);
        char kernels[2560]; /* each rank's device: the paths it took that say so */
        rp_device_kernels_summary(e->dev, kernels, sizeof kernels);
        if (kernels[0])
            rp_log(e->lg, RP_LOG_INFO, "%s", kernels);
    }
    if (s == RP_OK && e->nd.world_rank == 0)
        rp_progress_finish(&e->progress, e->stopped_early ? e->it_last : e->steps,
                           e->by_logger.last_loss);
    return s;
}

