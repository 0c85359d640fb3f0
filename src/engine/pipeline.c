/* Setting up and running the pipeline engine (see pipeline.h). */
#include "plan/partition.h" /* before model/layout.h: both know rp_layer_kind */

#include "engine/pipeline.h"
#include "engine/run_info.h"
#include "engine/trainer.h"
#include "engine/run_impl.h"
#include "engine/checkpoints.h"
#include "engine/checkpoint_steps.h"
#include "engine/eval.h"

#include <errno.h>
#include <signal.h>
#include <math.h>
#include <time.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/backend.h"
#include "engine/arena_numa.h"
#include "engine/engine_impl.h"
#include "engine/executor_summary.h"
#include "engine/host_memory.h"
#include "engine/lora_run.h"
#include "engine/node_sums.h"
#include "engine/protocol.h"
#include "io/config.h"
#include "io/read_file.h"
#include "io/metrics.h"
#include "model/layers.h"
#include "model/layout.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "store/bind.h"
#include "store/shm.h"

/* ---- setup ---------------------------------------------------------------- */

/* Iterations run under the cost model's plan before re-planning from
 * measured layer times (the first of them is not measured). */
#define RP_REPLAN_AFTER 2

/* Make a status collective: every rank learns whether any rank failed. The
 * failing rank keeps its message; the others name the lowest failing rank.
 * A rank that failed (a deadline passed, a file was bad) waits at most
 * --timeout for the others to join the agreement, so a rank that stopped
 * answering (SIGSTOP, stuck in a driver) cannot hang the job: the status
 * becomes RP_ERR_PEER_LOST, and no collective may be called on comm after
 * that (the CLI ends the job with MPI_Abort). A pending interrupt
 * (rp_interrupt) counts as a failure, so a start-up stops at the next
 * agreement. Every rank uses the non-blocking reduction: blocking and
 * non-blocking collectives do not match each other. */
rp_status rp_run_agree(rp_engine *e, rp_status s, MPI_Comm comm, rp_error *err)
{
    if (e->peer_lost)
        return RP_ERR_PEER_LOST;
    if (s == RP_OK && rp_interrupted())
        s = rp_error_set(err, RP_ERR_INTERRUPTED, "interrupted before step %lld",
                         (long long)(e->it_first > 0 ? e->it_first : 1));
    int mine = s == RP_OK ? INT32_MAX : e->nd.world_rank, first = INT32_MAX, done = 0;
    MPI_Request req;
    MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &req);
    if (s == RP_OK) {
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        double deadline = rp_event_deadline(e->o->timeout_s);
        const struct timespec pause = {0, 1000000};
        while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
               rp_event_now() < deadline)
            nanosleep(&pause, NULL);
        if (!done) {
            e->peer_lost = 1;
            char own[RP_ERROR_MSG_MAX];
            snprintf(own, sizeof own, "%s", err->msg);
            return rp_error_set(err, RP_ERR_PEER_LOST, "%.900s; then other ranks did not answer "
                                "within --timeout %g s: ending the job", own, e->o->timeout_s);
        }
    }
    if (first == INT32_MAX)
        return RP_OK;
    int code = (int)s;
    MPI_Bcast(&code, 1, MPI_INT, first, comm);
    if (s == RP_OK)
        rp_error_echo(err, (rp_status)code, "rank %d failed (see its message)", first);
    return (rp_status)code;
}

/* Bind this rank to its share of the node's physical cores (near its
 * device; disjoint from the other ranks') and choose its thread count:
 * --threads, else OMP_NUM_THREADS, else the cores it was given, so the
 * ranks of a node together use no more threads than physical cores. */
static rp_status bind_and_threads(rp_engine *e, rp_error *err)
{
    const rp_train_options *o = e->o;
    int ncores = 1, bound = 0;
    char busid[32];
    int near_gpu =
        e->device == RP_DEVICE_CUDA &&
        rp_device_busid(e->device, e->device_ordinal, busid, sizeof busid, NULL) == RP_OK;
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return rp_error_set(err, RP_ERR_INTERNAL, "hwloc: cannot initialise a topology");
    if (near_gpu) /* PCI devices are needed to find the GPU's locality */
        hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return rp_error_set(err, RP_ERR_INTERNAL, "hwloc: cannot load the topology");
    }
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    rp_status s = rp_bind_node(rp_store_node_comm(e->store), topo, near_gpu ? busid : NULL,
                               o->bind, set, &ncores, &bound, err);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(topo);
    RP_TRY(s);
    const char *env = getenv("OMP_NUM_THREADS");
    e->threads = o->threads > 0 ? o->threads : (env && atoi(env) > 0) ? atoi(env) : ncores;
    if (e->threads < 1)
        e->threads = 1;
    omp_set_num_threads(e->threads);
    return RP_OK;
}

/* The store that lives for the whole run: parameters and optimizer state,
 * the tied head's gradient part, and the abort flag. */
static rp_status build_param_store(rp_engine *e, MPI_Comm comm, const rp_model_config *cfg,
                                   rp_store **out, rp_param_store_map *map, rp_error *err)
{
    rp_store_layout *lay = NULL;
    int64_t ntok = e->micro_per_pipeline * e->tokens_per_micro;
    rp_status s = RP_OK;
    if (e->lora) { /* the frozen base: mapped in place, or converted into the store */
        const rp_kernel_ops *ops = rp_device_kernel_ops(e->device);
        s = rp_frozen_base_open(cfg, e->o->model_dir, e->o->dtype, ops ? ops->weight_dtypes : 0,
                                &e->base, err);
        e->base_in_place = rp_frozen_base_in_place(ops);
    }
    size_t base_bytes = e->base ? rp_frozen_base_store_bytes(e->base) : 0;
    if (s == RP_OK)
        s = rp_param_store_layout(cfg, e->o->dtype, e->pipelines, ntok, base_bytes, e->goff, &lay,
                                  map, err);
    e->gstride = map->gstride;
    e->emb_cap = map->emb_cap;
    rp_store_params sp;
    memset(&sp, 0, sizeof sp);
    sp.lazy = e->nd.nodes > 1; /* pages only where used: a node's own slices' state */
    if (s == RP_OK)
        s = rp_store_create(e->nd.node_comm, lay, &sp, out, err);
    rp_store_layout_destroy(&lay);
    RP_TRY(rp_run_agree(e, s, comm, err));
    char *base = rp_store_base(*out);
    e->param_store = *out;
    e->param_store_bytes = rp_store_bytes(*out);
    e->pins = calloc(2 * (size_t)e->num_layers + 6, sizeof *e->pins);
    if (!e->pins)
        return rp_run_agree(e, rp_error_set(err, RP_ERR_NOMEM, "pinned ranges"), comm, err);
    e->pins[e->npins++] = (struct rp_pin){base + map->tied, map->tied_bytes};
    e->pins[e->npins++] = (struct rp_pin){base + map->group, map->group_bytes};
    e->pins[e->npins++] = (struct rp_pin){base + map->emb_rows, map->emb_rows_bytes};
    e->tied_grad = e->tied ? (float *)(base + map->tied) : NULL;
    e->group_grad = (float *)(base + map->group);
    e->emb_ids_base = (int32_t *)(base + map->emb_ids);
    e->emb_rows_base = (float *)(base + map->emb_rows);
    e->emb_n = (int64_t *)(base + map->emb_n);
    e->abort_flag = (_Atomic int64_t *)(base + map->ctrl);
    e->stop_at = e->abort_flag + 1;
    e->started = e->abort_flag + 2;
    return RP_OK;
}

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

/* The store of one segment (iterations first..last under one plan): the
 * activation arena and the events, every counter starting at first - 1 as if
 * the earlier iterations had run under this plan. */
static rp_status build_segment(rp_engine *e, MPI_Comm comm, rp_error *err)
{
    rp_arena_spec as = {e->num_layers, (int)e->microbatches, e->act_floats, e->o->recompute_layer,
                        e->raux.floats};
    e->jobs_per_it = rp_schedule_num_jobs(&e->plan);
    if (rp_arena_init(&e->arena, &e->plan, &as) != 0)
        return rp_run_agree(e, rp_error_set(err, RP_ERR_NOMEM, "arena index"), comm, err);
    rp_event_dims dims;
    rp_proto_dims(e, &dims);
    rp_store_layout *lay = NULL;
    RP_TRY(rp_run_agree(e, rp_store_layout_create(&lay, err), comm, err));
    size_t act, evo, links;
    rp_status s = rp_store_layout_add(lay, "activations", e->arena.floats * sizeof(float),
                                      RP_STORE_ALIGN_PAGE, &act, err);
    if (s == RP_OK) /* the link groups' arbitration boards (zeroed: nothing urgent) */
        s = rp_store_layout_add(lay, "link boards", (size_t)e->size * sizeof(rp_xfer_link),
                                RP_STORE_ALIGN_LINE, &links, err);
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
    if (s == RP_OK)
        s = rp_store_create(e->nd.node_comm, lay, &sp, &e->store, err);
    rp_store_layout_destroy(&lay);
    free(near);
    if (s == RP_OK && e->o->activation_numa && rp_store_is_leader(e->store))
        log_activation_numa(e, rp_store_numa_bound(e->store), shared);
    RP_TRY(rp_run_agree(e, s, comm, err));
    char *base = rp_store_base(e->store);
    e->pins[e->npins_run] = (struct rp_pin){base + act, e->arena.floats * sizeof(float)};
    e->npins = e->npins_run + 1;
    e->act = (float *)(base + act);
    e->link_boards = (rp_xfer_link *)(base + links);
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
    s = rp_run_agree(e, s, comm, err);
    if (!e->peer_lost)
        MPI_Barrier(comm); /* counters set before anyone waits */
    return s;
}

static void free_segment(rp_engine *e)
{
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
    return rp_run_agree(e, s, comm, err);
}

/* Outputs are written independently: the first failure becomes the run's
 * error, a later one is reported through the logger. */
static void keep_first(rp_engine *e, rp_status s, const rp_error *one, rp_status *out,
                       rp_error *err)
{
    if (s == RP_OK)
        return;
    if (*out == RP_OK) {
        *out = s;
        *err = *one;
    } else {
        rp_log(e->lg, RP_LOG_ERROR, "%s", one->msg);
    }
}

/* Host-store names left in /dev/shm by runs of this user that were killed
 * before they could remove them (SIGKILL, a node crash): removed now. */
static void remove_stale_stores(rp_engine *e)
{
    char removed[8][RP_SHM_NAME_MAX + 64];
    int n = rp_shm_remove_stale(NULL, removed, 8);
    for (int i = 0; i < n && i < 8; i++)
        rp_log(e->lg, RP_LOG_WARN, "removed %s, a host store left by a killed run", removed[i]);
    if (n > 8)
        rp_log(e->lg, RP_LOG_WARN, "removed %d more host stores left by killed runs", n - 8);
}

/* The node leader fills the shared parameters. */
static rp_status load_params(rp_engine *e, rp_params *shared, rp_error *err)
{
    if (e->lora && !e->resume_dir)
        return rp_lora_load_adapters(shared, e->o, err);
    if (e->resume_dir) /* the checkpoint: its weights (LoRA: adapters), then AdamW's state */
        RP_TRY(rp_params_load_dir(shared, e->resume_dir, err));
    if (e->resume_dir && !e->lora) /* saved as the model the run started from was stored */
        shared->loaded_dtype = e->resume_model_dtype;
    if (e->resume_dir)
        return rp_checkpoint_load_optimizer(shared, e->resume_dir, e->resume_pending, err);
    if (e->o->model_dir)
        return rp_params_load_dir(shared, e->o->model_dir, err);
    rp_params_init_random(shared, e->o->seed);
    return RP_OK;
}

/* What one call of rp_train_run holds beyond the engine: the model's
 * configuration and layout, the parameter store and the start-up facts. */
typedef struct run {
    rp_model_config cfg;
    const char *config_path; /* the config.json read (named in messages and saved) */
    char path[4096];
    rp_params probe;         /* the layout alone (sizes, names) until the store exists */
    rp_store *pstore;        /* parameters and optimizer state, for the whole run */
    rp_param_store_map map;
    rp_params *shared;       /* attached to pstore */
    char executors[512];     /* the start-up line's executor summary */
    rp_logger live_lg;       /* the logger, printing through the live progress line */
} run;

/* The configuration and its layout. */
static rp_status read_model(rp_engine *e, run *r, MPI_Comm comm, rp_error *err)
{
    const rp_train_options *o = e->o;
    if (o->model_dir) {
        snprintf(r->path, sizeof r->path, "%s/config.json", o->model_dir);
        r->config_path = r->path;
    } else {
        r->config_path = o->init_config;
    }
    RP_TRY(rp_run_agree(e, rp_config_load(r->config_path, &r->cfg, err), comm, err));
    RP_TRY(rp_run_agree(e, rp_lora_resolve(o, &r->cfg, err), comm, err));
    e->lora = r->cfg.lora.rank > 0;
    r->probe.cfg = r->cfg;
    rp_status s = rp_model_layout(&r->probe.cfg, &r->probe.layers, &r->probe.nlayers, err);
    if (s != RP_OK)
        rp_error_prefix(err, "%s", r->config_path);
    return rp_run_agree(e, s, comm, err);
}

/* The shape of the run from the options and the model, checked. */
static rp_status set_shape(rp_engine *e, run *r, MPI_Comm comm, rp_error *err)
{
    const rp_train_options *o = e->o;
    e->p = &r->probe;
    e->num_layers = r->probe.nlayers;
    e->hidden = r->cfg.hidden_size;
    /* with LoRA the head is a layer of its own whose frozen matrix is the
     * embedding's bytes (engine/frozen_base.h): nothing tied trains */
    e->tied = r->cfg.tie_word_embeddings && !e->lora;
    e->batch_micro = o->microbatches ? o->microbatches : o->batch_size;
    e->samples_per_micro = o->batch_size / e->batch_micro;
    /* node n runs microbatches n x M/N .. of every iteration (node_sums.h) */
    e->microbatches = e->batch_micro / e->nd.nodes;
    e->micro_base = e->nd.node * e->microbatches;
    e->seq_len = o->seq_len;
    e->tokens_per_micro = e->samples_per_micro * e->seq_len;
    e->act_floats = (size_t)(e->tokens_per_micro * e->hidden);
    e->pipelines = o->pipelines > 0 ? o->pipelines : 1;
    e->virtual_executors = e->size > e->pipelines ? e->size : e->pipelines;
    e->micro_per_pipeline = e->microbatches / e->pipelines;
    e->goff = calloc((size_t)e->num_layers, sizeof(size_t));
    rp_status s = e->goff ? RP_OK : rp_error_set(err, RP_ERR_NOMEM, "pipeline gradient offsets");
    if (s == RP_OK && e->batch_micro % ((int64_t)e->nd.nodes * e->pipelines) != 0)
        s = rp_error_set(err, RP_ERR_INVALID_ARG, "%d nodes x --pipelines %d = %d pipelines must "
                         "divide the %lld microbatches (--microbatches)", e->nd.nodes,
                         e->pipelines, e->nd.nodes * e->pipelines, (long long)e->batch_micro);
    if (s == RP_OK && (e->microbatches % e->pipelines != 0 || e->virtual_executors % e->size != 0 ||
                       e->virtual_executors % e->pipelines != 0))
        s = rp_error_set(err, RP_ERR_INVALID_ARG,
                         "--pipelines %d: needs a divisor of the %lld "
                         "microbatches that divides, or is a multiple of, the %d executors",
                         e->pipelines, (long long)e->microbatches, e->size);
    if (s == RP_OK && o->optimizer_lag && e->nd.nodes > 1 && o->checkpoint_dir &&
        o->checkpoint_every > 0)
        s = rp_error_set(err, RP_ERR_UNSUPPORTED, "--checkpoint-every with --optimizer-lag 1 on "
                         "%d nodes: not supported yet (a lagged optimizer's checkpoint holds a "
                         "pending update; on several nodes only the last step's checkpoint "
                         "is written)", e->nd.nodes);
    if (s == RP_OK && e->lora && e->nd.nodes > 1)
        s = rp_error_set(err, RP_ERR_UNSUPPORTED, "--lora-rank on %d nodes: LoRA on several "
                         "nodes is not supported yet", e->nd.nodes);
    if (s == RP_OK)
        s = rp_router_aux_init(&e->raux, &r->cfg, o, e->num_layers, err);
    if (s == RP_OK && o->optimizer_lag && e->pipelines > e->size)
        s = rp_error_set(err, RP_ERR_INVALID_ARG,
                         "--optimizer-lag 1 with --pipelines %d needs at "
                         "least %d executors (one pipeline per executor at most), not %d",
                         e->pipelines, e->pipelines, e->size);
    return rp_run_agree(e, s, comm, err);
}

/* The token data, the number of steps and the lr schedule. */
static rp_status open_data(rp_engine *e, run *r, MPI_Comm comm, rp_error *err)
{
    const rp_train_options *o = e->o;
    rp_status s =
        rp_dataset_open(o->data, o->loss_mask, e->seq_len, r->cfg.vocab_size, &e->ds, err);
    if (s == RP_OK && o->shuffle)
        s = rp_dataset_shuffle(e->ds, o->seed, err);
    if (s == RP_OK && (o->documents || o->eval_documents) && e->device == RP_DEVICE_CUDA &&
        !rp_unproven_cuda_allowed())
        s = rp_error_set(err, RP_ERR_UNSUPPORTED, RP_DOCUMENTS_NOT_ON_CUDA);
    if (s == RP_OK && o->documents)
        s = rp_dataset_set_documents(e->ds, o->documents, err);
    if (s == RP_OK && o->eval_data) /* checked now: a bad file fails before training */
        s = rp_dataset_open(o->eval_data, o->eval_mask, e->seq_len, r->cfg.vocab_size,
                            &e->eval_ds, err);
    if (s == RP_OK && o->eval_documents)
        s = rp_dataset_set_documents(e->eval_ds, o->eval_documents, err);
    if (s == RP_OK) {
        int64_t n = rp_dataset_samples(e->ds);
        e->steps = o->steps ? o->steps : (n + o->batch_size - 1) / o->batch_size;
        e->sched = (rp_lr_schedule){o->schedule, o->lr, o->min_lr, o->warmup_steps, e->steps};
        s = rp_lr_schedule_check(&e->sched, err);
    }
    return rp_run_agree(e, s, comm, err);
}

/* The node: the parameter store, each rank's device and the plan that fits
 * its memory, the ranks' cores, the parameters loaded by the node leader. */
static rp_status set_up_node(rp_engine *e, run *r, MPI_Comm comm, rp_error *err)
{
    const rp_train_options *o = e->o;
    RP_TRY(build_param_store(e, comm, &r->cfg, &r->pstore, &r->map, err));
    rp_device_info info;
    memset(&info, 0, sizeof info);
    /* node-local rank to device, several ranks per device allowed */
    rp_status s = rp_device_probe_ordinal(e->device, rp_store_node_rank(r->pstore), &info, err);
    if (s == RP_OK)
        e->device_ordinal = info.ordinal;
    RP_TRY(rp_run_agree(e, s, comm, err));
    RP_TRY(rp_run_agree(e, rp_run_link_groups(e, rp_store_node_comm(r->pstore), err), comm, err));
    RP_TRY(rp_run_memory_limit(e, &info, rp_store_node_size(r->pstore), comm));
    RP_TRY(rp_run_choose_plan(e, comm, err));
    RP_TRY(rp_executor_summary(&info, o->dtype, comm, r->executors, sizeof r->executors, err));
    e->store = r->pstore; /* for the node communicator while binding */
    s = rp_run_agree(e, bind_and_threads(e, err), comm, err);
    e->store = NULL;
    RP_TRY(s);
    s = rp_params_attach(&r->cfg, o->dtype, (char *)rp_store_base(r->pstore) + r->map.params,
                         rp_params_bytes(&r->cfg, o->dtype), &r->shared, err);
    if (s == RP_OK) {
        e->p = r->shared;
        /* arrays of 16 KiB multiples: whole pages. The embedding travels as
         * gathered rows (pinned buffers of their own) except as a tied
         * head's matrix, and its gradient as rows into their area. */
        for (int l = 0; l < e->num_layers; l++) {
            size_t lb = rp_adamw_array_bytes(e->p->layers[l].numel);
            if (rp_pin_layer_compute(l, e->tied))
                e->pins[e->npins++] =
                    (struct rp_pin){e->p->st[l].compute, rp_params_compute_bytes(e->p, l)};
            if (rp_pin_layer_grad(l))
                e->pins[e->npins++] = (struct rp_pin){e->p->st[l].grad, lb};
        }
        if (r->map.base_bytes) { /* the leader converts the base into the store */
            char *at = (char *)rp_store_base(r->pstore) + r->map.base;
            s = rp_frozen_base_attach(e->base, at, rp_store_is_leader(r->pstore), o->seed, err);
            e->pins[e->npins++] = (struct rp_pin){at, r->map.base_bytes};
        }
        e->npins_run = e->npins; /* the base's too: uploaded like the compute copies */
        if (s == RP_OK && rp_store_is_leader(r->pstore))
            s = load_params(e, r->shared, err);
    }
    RP_TRY(rp_run_agree(e, s, comm, err));
    if (e->nd.nodes > 1) /* loaded whole: each node keeps its slices' optimizer state */
        rp_node_release_others(e);
    /* the executor's device, and the run's pins, once (not per segment) */
    rp_device_params dp = {e->device, e->device_ordinal, e->threads};
    s = rp_device_create(&dp, &e->dev, err);
    for (; s == RP_OK && e->pinned_run < e->npins_run; e->pinned_run++)
        if (e->pins[e->pinned_run].bytes > 0)
            s = rp_device_host_register(e->dev, e->pins[e->pinned_run].base,
                                        e->pins[e->pinned_run].bytes, err);
    RP_TRY(rp_run_agree(e, s, comm, err));
    e->by_executor.meas_ms = calloc(4 * (size_t)e->num_layers, sizeof(double));
    e->by_executor.meas_n =
        e->by_executor.meas_ms ? e->by_executor.meas_ms + 2 * e->num_layers : NULL;
    s = e->by_executor.meas_ms ? RP_OK : rp_error_set(err, RP_ERR_NOMEM, "measurements");
    if (s == RP_OK && e->nd.nodes > 1) { /* a partial sum from the node before (node_sums.h) */
        size_t most = 0, b0, b1, lo, hi;
        for (int l = 0; l < e->num_layers; l++) {
            rp_engine_share(e, l, e->rank, &b0, &b1, &lo, &hi);
            most = hi - lo > most ? hi - lo : most;
        }
        e->by_node_comm.node_buf = malloc((most ? most : 1) * sizeof(float));
        e->by_optimizer.gather_posted =
            calloc((size_t)e->num_layers, sizeof *e->by_optimizer.gather_posted);
        if (!e->by_node_comm.node_buf || !e->by_optimizer.gather_posted)
            s = rp_error_set(err, RP_ERR_NOMEM, "a partial gradient sum from the node before "
                             "(%zu MiB)", most * sizeof(float) >> 20);
    }
    return rp_run_agree(e, s, comm, err);
}

/* The host memory the run needs, as `roundpipe plan` prints it
 * (host_memory.h): the store and, with LoRA, where the frozen base lies. */
static void log_host_memory(rp_engine *e, const rp_model_config *cfg)
{
    rp_host_memory hm;
    rp_error err = {0};
    char text[512];
    if (rp_host_memory_count(cfg, e->o->dtype, e->pipelines, (int)e->microbatches,
                             e->tokens_per_micro, &e->plan, e->o->recompute_layer, e->base, &hm,
                             &err) != RP_OK) {
        rp_log(e->lg, RP_LOG_WARN, "host memory not counted: %s", err.msg);
        return;
    }
    rp_host_memory_format(&hm, text, sizeof text);
    rp_log(e->lg, RP_LOG_INFO, "%s", text);
}

/* The metrics log and its run description, the trace, the start-up line
 * and the progress display. */
static rp_status start_outputs(rp_engine *e, run *r, MPI_Comm comm, rp_error *err)
{
    const rp_train_options *o = e->o;
    rp_status s = RP_OK;
    char plan_text[512];
    rp_plan_format(&e->plan, plan_text, sizeof plan_text);
    int root = e->nd.world_rank == 0;
    if (root && !o->save_dir && !o->checkpoint_dir)
        rp_log(e->lg, RP_LOG_INFO, "neither --save nor --checkpoint-dir given: nothing this run "
               "learns will be kept");
    /* a resumed run keeps the log's lines of the steps before it */
    char *kept = NULL;
    int64_t kept_steps = 0;
    if (root && o->log_path && e->resume_step > 0)
        s = rp_metrics_keep_steps(o->log_path, e->resume_step, &kept, &kept_steps, err);
    if (s == RP_OK && root && o->log_path && !(e->by_logger.log = fopen(o->log_path, "w")))
        s = rp_error_set(err, RP_ERR_IO, "--log %s: cannot open for writing: %s", o->log_path,
                         strerror(errno));
    if (s == RP_OK && e->by_logger.log && kept && kept[0]) {
        fputs(kept, e->by_logger.log);
        rp_log(e->lg, RP_LOG_INFO, "--log %s: kept the lines of steps 1-%lld, the resumed steps "
               "follow", o->log_path, (long long)kept_steps);
    }
    free(kept);
    if (s == RP_OK && e->by_logger.log) { /* the run's description beside the metrics */
        rp_run_info info = {.o = o,
                            .device = rp_device_kind_name(e->device),
                            .ranks = e->nd.world_size,
                            .nodes = e->nd.nodes,
                            .threads_per_rank = e->threads,
                            .layers = e->num_layers,
                            .parameters = r->shared->total_numel,
                            .plan = plan_text,
                            .deal = e->deal,
                            .executors = e->size,
                            .start_time = rp_wall_clock()};
        s = rp_run_info_write(&info, o->log_path, err);
    }
    if (s == RP_OK && o->trace)
        s = rp_trace_create(&e->trace, err);
    RP_TRY(rp_run_agree(e, s, comm, err));
    if (!root)
        return RP_OK;
    const rp_logger *lg = e->lg;
    rp_log(lg, RP_LOG_INFO,
           "%s: %lld blocks, %.2fM parameters; %lld samples of %lld tokens; %lld steps of "
           "%lld samples in %lld microbatches; %d executor(s) x %d thread(s); %d pipeline(s) "
           "of %lld microbatches; plan %s; executors: %s",
           o->model_dir ? o->model_dir : o->init_config, (long long)r->cfg.num_hidden_layers,
           (double)r->shared->total_numel / 1e6, (long long)rp_dataset_samples(e->ds),
           (long long)e->seq_len, (long long)e->steps, (long long)o->batch_size,
           (long long)e->batch_micro, e->size, e->threads, e->pipelines,
           (long long)e->micro_per_pipeline, plan_text, r->executors);
    log_host_memory(e, &r->cfg);
    if (e->nd.nodes > 1)
        rp_log(lg, RP_LOG_INFO, "%d nodes of %d ranks: node n runs microbatches n x %lld .. of "
               "each step, %d pipelines in all; gradients summed across nodes in pipeline order",
               e->nd.nodes, e->size, (long long)e->microbatches, e->nd.nodes * e->pipelines);
    /* A live line goes to standard output (a terminal, also under
     * mpirun), periodic lines to standard error. While the line is
     * live, rank 0's messages go through it so they never share a line. */
    int live = o->progress == RP_PROGRESS_AUTO && lg->stream && rp_progress_live_default();
    FILE *out = o->progress == RP_PROGRESS_NONE ? NULL : live ? stdout : stderr;
    rp_progress_start(&e->progress, out, live, o->progress_interval_s, e->resume_step, e->steps);
    if (live) {
        r->live_lg = *lg;
        r->live_lg.sink = rp_progress_log_sink;
        r->live_lg.sink_arg = &e->progress;
        e->lg = &r->live_lg;
    }
    return RP_OK;
}

/* Segments: with the planner's plan and exact semantics, the first
 * RP_REPLAN_AFTER iterations run under the cost model's plan, then the
 * leader re-plans from the layer times measured meanwhile; the rest runs
 * under that plan. Results do not depend on the plan. */
static rp_status run_segments(rp_engine *e, MPI_Comm comm, rp_error *err)
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
            /* a request between segments: the ranks agree on it */
            int req = rp_checkpoint_requested() != 0, any = 0;
            MPI_Allreduce(&req, &any, 1, MPI_INT, MPI_MAX, comm);
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
    if (s == RP_OK && e->nd.world_rank == 0)
        rp_progress_finish(&e->progress, e->stopped_early ? e->it_last : e->steps,
                           e->by_logger.last_loss);
    return s;
}

/* The outputs, the model first: a failure writing one never prevents the
 * others. The first failure is returned, later ones are logged. */
static rp_status write_outputs(rp_engine *e, run *r, rp_status trained, MPI_Comm comm,
                               rp_error *err)
{
    const rp_train_options *o = e->o;
    rp_status out = RP_OK;
    int root = e->nd.world_rank == 0; /* every node holds the same model: node 0's */
    if (trained == RP_OK && o->save_dir && e->stopped_early && root)
        rp_log(e->lg, RP_LOG_INFO, "--save %s not written: the run stopped early (its checkpoint "
               "holds the model)", o->save_dir);
    if (trained == RP_OK && o->save_dir && !e->stopped_early) {
        rp_error one = {0};
        rp_status st = RP_OK;
        /* several nodes keep the masters by slices (unless they are the compute copy) */
        if (e->nd.nodes > 1 && r->shared->compute_dtype != RP_F32)
            st = rp_run_agree(e, rp_node_collect(e, 0, 0, &one), comm, &one);
        if (root && st == RP_OK && e->lora)
            st = rp_lora_save_adapter(r->shared, o, &one);
        else if (root && st == RP_OK)
            st = rp_params_save_dir(r->shared, o->save_dir,
                                    o->save_dtype_set ? o->save_dtype : r->shared->loaded_dtype,
                                    e->model_config_text, e->companions, &one);
        st = rp_run_agree(e, st, comm, &one);
        if (st == RP_OK && root)
            rp_log(e->lg, RP_LOG_INFO, "saved %s/%s%s", o->save_dir,
                   e->lora ? "adapter_model.safetensors (PEFT)" : "model.safetensors",
                   !e->lora && rp_companions_count(e->companions)
                       ? " with the model's tokenizer and generation files" : "");
        keep_first(e, st, &one, &out, err);
    }
    if (trained == RP_OK && o->save_merged && !e->stopped_early) {
        rp_error one = {0};
        rp_status st = RP_OK;
        rp_dtype dt = o->save_dtype_set ? o->save_dtype : rp_frozen_base_file_dtype(e->base);
        if (root)
            st = rp_lora_save_merged(r->shared, e->base, o, dt, e->model_config_text,
                                     e->companions, &one);
        st = rp_run_agree(e, st, comm, &one);
        if (st == RP_OK && root)
            rp_log(e->lg, RP_LOG_INFO, "saved the merged model to %s/model.safetensors",
                   o->save_merged);
        keep_first(e, st, &one, &out, err);
    }
    if (trained == RP_OK && o->trace && !e->peer_lost) {
        rp_error one = {0};
        rp_status st = rp_run_agree(e, rp_trace_write(e->trace, comm, o->trace, &one), comm, &one);
        if (st == RP_OK && root)
            rp_log(e->lg, RP_LOG_INFO, "trace written to %s", o->trace);
        keep_first(e, st, &one, &out, err);
    }
    if (trained == RP_OK && o->checkpoint_dir) { /* one not written, said when it failed */
        rp_error one = {0};
        rp_status st = rp_run_agree(e, rp_checkpoint_failures(e, &one), comm, &one);
        keep_first(e, st, &one, &out, err);
    }
    if (e->by_logger.log) {
        rp_error one = {0};
        keep_first(e, rp_engine_log_close(e, &one), &one, &out, err);
    }
    return trained == RP_OK ? out : trained;
}

rp_status rp_train_run(const rp_train_options *given, MPI_Comm comm, const rp_logger *lg,
                       rp_error *err)
{
    rp_train_options resolved;
    RP_TRY(rp_train_resolve(given, comm, lg, &resolved, err));
    rp_nodes nd;
    RP_TRY(rp_nodes_split(comm, resolved.ranks_per_node, &nd, err));
    resolved.nodes = nd.nodes;
    rp_checkpoint_lock *lock = NULL; /* held for the run: before --resume auto reads it */
    rp_resume resume;
    rp_status rs = rp_checkpoint_dir_lock(&resolved, comm, &lock, err);
    if (rs == RP_OK)
        rs = rp_checkpoint_resolve(&resolved, comm, lg, &resume, err);
    if (rs != RP_OK) {
        rp_checkpoint_lock_release(&lock);
        rp_nodes_free(&nd);
        return rs;
    }
    const rp_train_options *o = &resolved;
    rp_device_kind device = resolved.device;
    rp_engine E, *e = &E;
    memset(e, 0, sizeof E);
    run R, *r = &R;
    memset(r, 0, sizeof R);
    e->o = o;
    e->device = device;
    e->resume_step = resume.step;
    e->resume_adam_step = resume.adam_step;
    e->resume_dir = resume.step ? resume.dir : NULL;
    e->resume_pending = resume.pending;
    e->resume_coef = resume.coef;
    e->resume_model_dtype = resume.model_dtype;
    e->lg = lg;
    pthread_mutex_init(&e->lock, NULL);
    rp_proto_read_fault(e);
    e->nd = nd;
    e->rank = nd.rank; /* the engine's executors are the node's ranks */
    e->size = nd.size;
    e->by_node_comm.emb_base_req = MPI_REQUEST_NULL;

    /* every output can be written, before any work */
    rp_status s = rp_run_agree(e, nd.world_rank == 0 ? rp_engine_outputs_check(o, err) : RP_OK,
                               comm, err);
    if (s == RP_OK) {
        remove_stale_stores(e);
        if (nd.world_rank == 0 && o->checkpoint_dir)
            rp_checkpoint_remove_killed_writes(o, lg);
        s = read_model(e, r, comm, err);
        if (s == RP_OK) { /* the template of the saves and their companions, read once */
            rp_status rs = RP_OK;
            size_t len = 0;
            if (nd.world_rank == 0 && r->config_path)
                rs = rp_read_file(r->config_path, (size_t)16 << 20, &e->model_config_text, &len,
                                  err);
            if (rs == RP_OK && nd.world_rank == 0 && o->model_dir)
                rs = rp_companions_read(o->model_dir, &e->companions, err);
            s = rp_run_agree(e, rs, comm, err);
        }
    }
    if (s == RP_OK)
        s = set_shape(e, r, comm, err);
    if (s == RP_OK)
        s = open_data(e, r, comm, err);
    if (s == RP_OK)
        s = set_up_node(e, r, comm, err);
    if (s == RP_OK)
        s = start_outputs(e, r, comm, err);
    if (s == RP_OK) {
        s = run_segments(e, comm, err);
        if (s == RP_OK && (o->ranks_per_node > 0 || e->nd.nodes > 1))
            rp_node_report(e, comm, (e->stopped_early ? e->it_last : e->steps) - e->resume_step);
        s = write_outputs(e, r, s, comm, err);
    }
    rp_trace_destroy(&e->trace);
    if (e->by_logger.log) /* a start that failed after opening it */
        fclose(e->by_logger.log);
    rp_progress_stop(&e->progress); /* an error printed next starts on a line of its own */
    for (int i = 0; i < e->pinned_run; i++) /* before the store they are in goes */
        if (e->pins[i].bytes > 0)
            rp_device_host_unregister(e->dev, e->pins[i].base);
    rp_device_destroy(&e->dev);
    rp_params_destroy(&r->shared);
    rp_frozen_base_close(&e->base);
    free(r->probe.layers);
    free(e->by_executor.meas_ms);
    rp_router_aux_free(&e->raux);
    free(e->link_of);
    free(e->deal);
    free(e->pins);
    free(e->model_config_text);
    rp_companions_destroy(&e->companions);
    free(e->goff);
    free(e->by_node_comm.node_buf);
    free(e->by_optimizer.gather_posted);
    if (r->pstore && !e->peer_lost)
        rp_store_destroy(&r->pstore);
    if (!e->peer_lost)
        rp_nodes_free(&e->nd);
    rp_dataset_close(&e->ds);
    rp_dataset_close(&e->eval_ds);
    pthread_mutex_destroy(&e->lock);
    rp_checkpoint_lock_release(&lock);
    return s;
}
