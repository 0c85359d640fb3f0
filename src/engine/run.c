/* A training run's set-up and teardown (the entry, rp_train_run, is
 * trainer.c's; the steps are step_loop.c's, the outputs outputs.c's): the
 * ranks' agreement, the model read, the run's shape checked, the data
 * opened, the node's parameter store, devices, plan and threads, and at
 * the end everything freed. */
#include "plan/partition.h" /* before model/layout.h: both know rp_layer_kind */

#include "engine/run_impl.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/slow_work.h"
#include "core/unproven.h"
#include "device/backend.h"
#include "engine/checkpoints.h"
#include "engine/engine_impl.h"
#include "engine/executor_summary.h"
#include "engine/speculative.h"
#include "engine/host_memory.h"
#include "engine/lora_run.h"
#include "engine/memory_model.h"
#include "engine/node_sums.h"
#include "engine/protocol.h"
#include "engine/update_gate.h"
#include "io/config.h"
#include "io/read_file.h"
#include "model/layers.h"
#include "model/layout.h"
#include "model/token_tiles.h"
#include "optim/adamw.h"
#include "store/bind.h"
#include "store/shm.h"

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
        /* RP_TEST_UPLOAD_BASE=1 (frozen_base.h): CPU executors take the
         * base as GPU ones do, uploaded (copied) with their stages from
         * where it lies in the compute dtype (or FP8), so that path runs here */
        e->base_in_place = rp_frozen_base_in_place(ops);
        const int test_upload = ops && ops->host_addressable && !e->base_in_place;
        s = rp_frozen_base_open(cfg, e->o->model_dir, e->o->dtype,
                                test_upload ? 1u << e->o->dtype | RP_FROZEN_BASE_READS_FP8
                                            : rp_frozen_base_reads(ops),
                                &e->base, err);
    }
    size_t base_bytes = e->base ? rp_frozen_base_store_bytes(e->base) : 0;
    if (s == RP_OK)
        s = rp_param_store_layout(cfg, e->o->dtype, e->pipelines, ntok, base_bytes, e->goff, &lay,
                                  map, err);
    e->gstride = map->gstride;
    e->emb_cap = map->emb_cap;
    e->emb_device_rows = rp_memory_embedding_rows(cfg, e->batch_micro, e->tokens_per_micro);
    rp_store_params sp;
    memset(&sp, 0, sizeof sp);
    sp.lazy = e->nd.nodes > 1; /* pages only where used: a node's own slices' state */
    rp_work_lines lines; /* node 0's leader, rank 0, says how far a long allocation is */
    sp.reserve_progress = rp_work_lines_start(&lines, e->lg, rp_engine_tells_work(e),
                                              "allocating the host store");
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

/* A random start (--init-config, neither LoRA nor a resume): every rank of
 * the node draws its part of each layer (a value depends on the seed, the
 * parameter and its index alone: the same bits for any split); rank 0 says
 * how far it is when that takes long (core/slow_work.h; --progress none:
 * nothing). */
static void init_random_part(rp_engine *e, rp_params *shared, int part, int parts)
{
    double total = 0, done = 0, t;
    for (int l = 0; l < shared->nlayers; l++)
        total += (double)shared->layers[l].numel;
    rp_slow_work slow;
    rp_slow_work_start(&slow);
    for (int l = 0; l < shared->nlayers; l++) {
        rp_params_init_random_part(shared, l, e->o->seed, part, parts);
        done += (double)shared->layers[l].numel;
        if (rp_engine_tells_work(e) && l + 1 < shared->nlayers && rp_slow_work_due(&slow, &t))
            rp_log(e->lg, RP_LOG_INFO, "initialising the parameters: %.1fM of %.1fM (%.0f%%) "
                   "drawn in %.0f s, on the node's %d rank(s)", done / 1e6, total / 1e6,
                   100.0 * done / total, t, parts);
    }
}

/* The node's ranks fill the shared parameters, each rank its part: a
 * random start's elements of every layer, a --model's or a checkpoint's
 * layers (rp_params_layer_part); a LoRA run's adapters the node leader
 * alone. A checkpoint's weights are agreed on before its AdamW state is
 * read, so that the error reported is the first in the files' order, as a
 * single reader's was. */
static rp_status load_params(rp_engine *e, rp_params *shared, const rp_store *store,
                             MPI_Comm comm, rp_error *err)
{
    const int part = rp_store_node_rank(store), parts = rp_store_node_size(store);
    if (!e->lora && !e->resume_dir) {
        if (e->o->model_dir)
            return rp_params_load_dir_part(shared, e->o->model_dir, part, parts, err);
        init_random_part(e, shared, part, parts);
        return RP_OK;
    }
    if (!e->resume_dir)
        return rp_store_is_leader(store) ? rp_lora_load_adapters(shared, e->o, err) : RP_OK;
    /* the checkpoint: its weights (LoRA: adapters), then AdamW's state */
    RP_TRY(rp_run_agree(e, rp_params_load_dir_part(shared, e->resume_dir, part, parts, err),
                        comm, err));
    if (!e->lora) /* saved as the model the run started from was stored */
        shared->loaded_dtype = e->resume_model_dtype;
    int first, end;
    rp_params_layer_part(shared, part, parts, &first, &end);
    return rp_checkpoint_load_optimizer(shared, e->resume_dir, e->resume_pending, first, end,
                                        err);
}

/* The configuration and its layout. */
static rp_status read_model(rp_engine *e, rp_run_state *r, MPI_Comm comm, rp_error *err)
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
    /* before anything is sized from the config: the MLP's tiles and chunks */
    rp_token_tiles_set(&r->cfg, o->token_tile, o->mlp_chunk_tokens);
    /* An FP8 checkpoint is a frozen LoRA base: full fine-tuning would update
     * weights whose only exact form is the e4m3 grid, and an fp32 master
     * saved back as FP8 would be re-quantised (never done silently). */
    if (!e->lora && r->cfg.fp8.on && o->model_dir)
        return rp_run_agree(e, rp_error_set(err, RP_ERR_UNSUPPORTED,
                                            "%s: field 'quantization_config': an FP8 checkpoint "
                                            "is a frozen base for LoRA (--lora-rank) only; full "
                                            "fine-tuning would re-quantise its weights",
                                            r->config_path), comm, err);
    /* a random base (LoRA without model files) holds nothing FP8: the
     * planner counts it, as the executors take it, in the store
     * (frozen_base.h's rp_frozen_base_takes_fp8) */
    if (e->lora && !o->model_dir)
        r->cfg.fp8.any = 0;
    r->probe.cfg = r->cfg;
    /* the planner sizes weights and saved areas by it before the parameters
     * are attached: the run's, not the zeroed probe's fp32 */
    r->probe.compute_dtype = e->o->dtype;
    rp_status s = rp_model_layout(&r->probe.cfg, &r->probe.layers, &r->probe.nlayers, err);
    if (s == RP_OK) /* before any work: a model the executors' kernels cannot run */
        s = rp_model_ops_check(&r->cfg, rp_device_kernel_ops(e->device),
                               rp_unproven_allowed(RP_UNPROVEN_GPT_OSS), err);
    if (s != RP_OK)
        rp_error_prefix(err, "%s", r->config_path);
    return rp_run_agree(e, s, comm, err);
}

/* The shape of the run from the options and the model, checked. */
static rp_status set_shape(rp_engine *e, rp_run_state *r, MPI_Comm comm, rp_error *err)
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
    if (s == RP_OK) /* before the host store is built */
        s = rp_run_forced_plan_check(e, err);
    if (s == RP_OK && o->optimizer_lag && e->pipelines > e->size)
        s = rp_error_set(err, RP_ERR_INVALID_ARG,
                         "--optimizer-lag 1 with --pipelines %d needs at "
                         "least %d executors (one pipeline per executor at most), not %d",
                         e->pipelines, e->pipelines, e->size);
    return rp_run_agree(e, s, comm, err);
}

/* The token data, the number of steps and the lr schedule. */
static rp_status open_data(rp_engine *e, rp_run_state *r, MPI_Comm comm, rp_error *err)
{
    const rp_train_options *o = e->o;
    rp_status s =
        rp_dataset_open(o->data, o->loss_mask, e->seq_len, r->cfg.vocab_size, &e->ds, err);
    if (s == RP_OK && o->shuffle)
        s = rp_dataset_shuffle(e->ds, o->seed, err);
    if (s == RP_OK && e->device == RP_DEVICE_CUDA)
        s = rp_train_options_documents_on_cuda(o, err);
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
static rp_status set_up_node(rp_engine *e, rp_run_state *r, MPI_Comm comm, rp_error *err)
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
    RP_TRY(rp_speculative_choose(e, comm, err)); /* its backup counts in the plan's memory */
    RP_TRY(rp_run_choose_plan(e, comm, err));
    RP_TRY(rp_run_eval_memory(e, comm, err)); /* the training's buffers fit: the evaluation's? */
    RP_TRY(rp_executor_summary(&info, o->dtype, comm, r->executors, sizeof r->executors, err));
    if (e->nd.world_rank == 0 && e->device == RP_DEVICE_CPU && strstr(r->executors, "pthread build"))
        rp_log(e->lg, RP_LOG_WARN, "the CPU executors' OpenBLAS is its pthread build, whose idle "
               "workers spin beside roundpipe's threads (1.25x slower than its openmp build in "
               "bench/README's figures); Debian: update-alternatives --config "
               "libopenblas.so.0-x86_64-linux-gnu chooses the openmp one");
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
        if (r->map.base_bytes) { /* the node's ranks convert the base into the store */
            char *at = (char *)rp_store_base(r->pstore) + r->map.base;
            s = rp_frozen_base_attach(e->base, at, rp_store_node_rank(r->pstore),
                                      rp_store_node_size(r->pstore), o->seed, err);
            e->pins[e->npins++] = (struct rp_pin){at, r->map.base_bytes};
        }
        e->npins_run = e->npins; /* the base's too: uploaded like the compute copies */
    }
    RP_TRY(rp_run_agree(e, s, comm, err));
    /* every rank, after an agreement: the load agrees within itself too */
    RP_TRY(rp_run_agree(e, load_params(e, r->shared, r->pstore, comm, err), comm, err));
    if (e->nd.nodes > 1) /* loaded whole: each node keeps its slices' optimizer state */
        rp_node_release_others(e);
    /* the executor's device, and the run's pins, once (not per segment) */
    rp_device_params dp = {e->device, e->device_ordinal, e->threads, e->o->attention,
                           e->unproven};
    s = rp_device_create(&dp, &e->dev, err);
    if (s == RP_OK && e->nd.world_rank == 0 && rp_device_attention_note(e->dev))
        rp_log(e->lg, RP_LOG_INFO, "%s", rp_device_attention_note(e->dev)); /* once a run */
    for (; s == RP_OK && e->pinned_run < e->npins_run; e->pinned_run++)
        if (e->pins[e->pinned_run].bytes > 0)
            s = rp_device_host_register(e->dev, e->pins[e->pinned_run].base,
                                        e->pins[e->pinned_run].bytes, err);
    RP_TRY(rp_run_agree(e, s, comm, err));
    e->by_executor.meas_ms = calloc(6 * (size_t)e->num_layers, sizeof(double));
    e->by_executor.meas_n =
        e->by_executor.meas_ms ? e->by_executor.meas_ms + 3 * e->num_layers : NULL;
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

void rp_run_init(rp_engine *e, rp_run_state *r, const rp_train_options *o,
                 const rp_resume *resume, const rp_nodes *nd, const rp_logger *lg)
{
    memset(e, 0, sizeof *e);
    memset(r, 0, sizeof *r);
    e->o = o;
    e->device = o->device;
    e->unproven = rp_unproven_mask();
    e->boundary_before = rp_gate_boundary_before_switch();
    e->resume_step = resume->step;
    e->resume_adam_step = resume->adam_step;
    e->resume_dir = resume->step ? resume->dir : NULL;
    e->resume_pending = resume->pending;
    e->resume_coef = resume->coef;
    e->resume_model_dtype = resume->model_dtype;
    e->lg = lg;
    pthread_mutex_init(&e->lock, NULL);
    rp_proto_read_fault(e);
    e->nd = *nd;
    e->rank = nd->rank; /* the engine's executors are the node's ranks */
    e->size = nd->size;
    e->by_node_comm.emb_base_req = MPI_REQUEST_NULL;
}

rp_status rp_run_set_up(rp_engine *e, rp_run_state *r, MPI_Comm comm, rp_error *err)
{
    /* every output can be written, before any work */
    const rp_train_options *o = e->o;
    rp_status s = rp_run_agree(e, e->nd.world_rank == 0 ? rp_engine_outputs_check(o, err) : RP_OK,
                               comm, err);
    if (s == RP_OK) {
        remove_stale_stores(e);
        if (e->nd.world_rank == 0 && o->checkpoint_dir)
            rp_checkpoint_remove_killed_writes(o, e->lg);
        s = read_model(e, r, comm, err);
        if (s == RP_OK) { /* the template of the saves and their companions, read once */
            rp_status rs = RP_OK;
            size_t len = 0;
            if (e->nd.world_rank == 0 && r->config_path)
                rs = rp_read_file(r->config_path, (size_t)16 << 20, &e->model_config_text, &len,
                                  err);
            if (rs == RP_OK && e->nd.world_rank == 0 && o->model_dir)
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
    return s;
}

void rp_run_tear_down(rp_engine *e, rp_run_state *r)
{
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
    free(e->kept_floats);
    free(e->by_node_comm.node_buf);
    free(e->by_optimizer.gather_posted);
    rp_speculative_free(e);
    if (r->pstore && !e->peer_lost)
        rp_store_destroy(&r->pstore);
    if (!e->peer_lost)
        rp_nodes_free(&e->nd);
    rp_dataset_close(&e->ds);
    rp_dataset_close(&e->eval_ds);
    pthread_mutex_destroy(&e->lock);
}
