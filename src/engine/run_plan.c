/* The plan of a run: the device memory an executor may use, the first
 * plan (from the model's FLOPs and the executors' memory, or --plan) and
 * the re-plan from the layer times the executors measured; the leader
 * plans and every rank gets its plan. */
#include "plan/partition.h" /* before model/layout.h: both know rp_layer_kind */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "core/slow_work.h"
#include "core/unproven.h"
#include "device/backend.h"
#include "engine/engine_impl.h"
#include "engine/host_memory.h"
#include "engine/memory_model.h"
#include "kernels/attention_choice.h"
#include "plan/keep.h"
#include "engine/run_impl.h"
#include "plan/deal.h"
#include "plan/search.h"
#include "model/layers.h"
#include "model/layout.h"

/* What a CUDA executor of this run keeps beside its plan for cuDNN's
 * attention (kernels/attention_choice.h's rule, which plan applies too). */
static size_t cudnn_reserve(const rp_engine *e, const rp_device_info *info)
{
    const rp_model_config *cfg = &e->p->cfg;
    rp_attn_shape s = rp_block_attn_shape(cfg, 0, e->samples_per_micro, e->seq_len);
    return rp_attention_run_reserve_bytes(e->o->attention,
                                          rp_unproven_in(e->unproven, RP_UNPROVEN_CUDNN), info->sm,
                                          rp_attention_run_documents(
                                              e->o->documents != NULL,
                                              e->o->eval_documents != NULL,
                                              rp_unproven_in(e->unproven,
                                                             RP_UNPROVEN_CUDNN_DOCUMENTS)),
                                          cfg->arch == RP_ARCH_GPT_OSS, &s,
                                          (size_t)info->memory_bytes);
}

/* Device memory an executor may allocate, the smallest over the ranks:
 * --memory-limit-mib when given; else, on a CUDA device, its free memory
 * when probed shared by the node's ranks on it, less the reserve for what
 * the planner does not count (rp_device_cuda_reserve_bytes: the CUDA
 * contexts, cuBLAS, the back end's own scratch) and what cuDNN's attention
 * may take (cudnn_reserve); else no limit. And the head's chunk
 * (memory_model.h's rp_memory_head_rows) from a figure every rank shares:
 * --memory-limit-mib, else the GPU's whole memory, the smallest over the
 * ranks (never the free share above, which depends on how many ranks use a
 * GPU: the chunk orders the head's gradient sums). */
rp_status rp_run_memory_limit(rp_engine *e, const rp_device_info *info, int node_size,
                              MPI_Comm comm)
{
    int64_t mine = 0, head_memory = 0;
    if (e->o->memory_limit_mib > 0) {
        mine = head_memory = (int64_t)(e->o->memory_limit_mib * 1048576.0);
    } else if (e->device == RP_DEVICE_CUDA && info->count > 0) {
        head_memory = (int64_t)info->memory_bytes;
        int sharers = 0;
        for (int r = 0; r < node_size; r++)
            sharers += r % info->count == info->ordinal;
        int64_t share = (int64_t)info->free_bytes / (sharers > 0 ? sharers : 1);
        size_t cudnn = cudnn_reserve(e, info);
        mine = share - rp_device_cuda_reserve_bytes(share) - (int64_t)cudnn;
        if (cudnn && e->nd.world_rank == 0)
            rp_log(e->lg, RP_LOG_INFO, "--attention: each executor keeps %.1f MiB of its GPU "
                   "beside the plan for cuDNN's attention (workspace of 2 bytes a score of a "
                   "microbatch's heads over lengths padded to 128 where that is at most a "
                   "quarter of the GPU, and its buffers); a cuDNN plan asking more takes the own "
                   "kernel", cudnn / 1048576.0);
        if (mine < 1)
            mine = 1; /* nothing fits: the planner says which layer */
    }
    int64_t lim[2] = {mine > 0 ? mine : INT64_MAX, head_memory > 0 ? head_memory : INT64_MAX};
    MPI_Allreduce(MPI_IN_PLACE, lim, 2, MPI_INT64_T, MPI_MIN, comm);
    e->memory_limit = lim[0] == INT64_MAX ? 0 : lim[0];
    e->head_rows = rp_memory_head_rows(rp_device_kernel_ops(e->device), &e->p->cfg,
                                       lim[1] == INT64_MAX ? 0 : lim[1]);
    return RP_OK;
}

rp_status rp_run_eval_memory(rp_engine *e, MPI_Comm comm, rp_error *err)
{
    if (!e->o->eval_data)
        return RP_OK;
    /* between segments, in place of the executor buffers (which the
     * planner keeps under the limit): the whole embedding and the largest
     * layer beside one microbatch's activations, saved area and workspace */
    rp_eval_memory m;
    rp_status s = rp_memory_model_eval(&e->p->cfg, e->device, e->o->dtype,
                                       rp_dataset_has_documents(e->eval_ds), e->samples_per_micro,
                                       e->seq_len, &m, err);
    if (s == RP_OK && e->memory_limit > 0 && (int64_t)m.total > e->memory_limit)
        s = rp_error_set(err, RP_ERR_INVALID_ARG, "--eval-data: an evaluation needs %.1f MiB of "
                         "device memory per executor (%zu bytes: the whole embedding, the largest "
                         "layer, a microbatch's activations, saved area and workspace), more than "
                         "the limit of %.1f MiB (%lld bytes, %s); fewer samples per "
                         "microbatch (more --microbatches) need less",
                         m.total / 1048576.0, m.total, e->memory_limit / 1048576.0,
                         (long long)e->memory_limit,
                         e->o->memory_limit_mib > 0 ? "--memory-limit-mib"
                                                    : "the GPU's free memory less the reserve");
    if (s == RP_OK && e->nd.world_rank == 0) {
        char lim[64] = "no limit";
        if (e->memory_limit > 0)
            snprintf(lim, sizeof lim, "limit %.1f MiB", e->memory_limit / 1048576.0);
        rp_log(e->lg, RP_LOG_INFO, "evaluation (--eval-data): %.1f MiB of device memory per "
               "executor (%zu bytes; %s), allocated for each evaluation in place of the executor "
               "buffers", m.total / 1048576.0, m.total, lim);
    }
    return rp_run_agree(e, s, comm, err);
}

/* The machine the leader plans for: the node's executors at nominal CPU
 * rates (only ratios matter), under the run's device memory limit, with
 * the ranks' PCIe link groups. */
static void machine_of(const rp_engine *e, rp_machine *mc)
{
    memset(mc, 0, sizeof *mc);
    mc->gpus = e->virtual_executors;
    mc->microbatches = (int)e->microbatches;
    mc->link_gbs = 10.0;
    mc->transfer_ms = 0.01;
    mc->opt_gbs = 10.0;
    mc->opt_bytes_per_param = 28.0;
    mc->opt_spread = 1; /* every rank updates a share of every layer (optimizer.c) */
    mc->optimizer_lag = e->o->optimizer_lag;
    mc->clip = e->o->grad_clip > 0;
    mc->speculative = e->speculative; /* chosen before the first plan (speculative.c) */
    mc->iterations = 6;
    mc->memory_limit = e->memory_limit;
    if (e->link_of && e->virtual_executors == e->size) {
        /* ranks sharing a PCIe link: the planner prices their uploads on
         * it (the group's uplink over a GPU's own link, as the topology
         * says) and may deal consecutive jobs to different groups; a rank
         * in none is alone */
        int next = 0, shared = 0; /* groups are numbered densely from 0 */
        for (int r = 0; r < e->size; r++)
            next = e->link_of[r].group + 1 > next ? e->link_of[r].group + 1 : next;
        for (int r = 0; r < e->size; r++) {
            int k = e->link_of[r].group >= 0 ? e->link_of[r].group : next++;
            mc->link_group[r] = k;
            mc->uplink_gbs[k] = mc->link_gbs * e->link_of[r].uplink;
            for (int q = 0; q < r; q++)
                shared |= mc->link_group[q] == k;
        }
        if (shared)
            mc->link_groups = next;
    }
}

/* Cost model of this model for the partitioner: per-layer times measured
 * on the executors when given (ms per microbatch; < 0 where a layer was not
 * measured), otherwise FLOPs at a nominal CPU rate (only ratios matter);
 * bytes moved at memcpy speed; device memory as the executor allocates it
 * (memory_model.h), under the run's device memory limit. */
static rp_status cost_of(const rp_engine *e, const double *fwd_ms, const double *bwd_ms,
                         rp_cost_model **cm, int64_t *workspace, rp_error *err)
{
    const double flops_per_ms = 2e7; /* ~20 GFLOP/s per executor */
    /* the model's layers as the planner's work items (plan/cost.h) */
    rp_layer_work *work = calloc((size_t)e->num_layers, sizeof *work);
    if (!work)
        return rp_error_set(err, RP_ERR_NOMEM, "the layers' cost");
    for (int l = 0; l < e->num_layers; l++) {
        rp_layer_flops f;
        rp_layer_flops_get(&e->p->cfg, &e->p->layers[l], e->samples_per_micro, e->seq_len, &f);
        work[l] = (rp_layer_work){
            l == 0 ? RP_LAYER_EMBED : l == e->num_layers - 1 ? RP_LAYER_HEAD : RP_LAYER_BLOCK,
            f.fwd_flops_per_token, f.bwd_flops_per_token, (int64_t)f.param_numel,
            (l == e->num_layers - 1 && e->tied) ? 0 : -1};
    }
    *cm = NULL;
    *workspace = 0;
    rp_status s = rp_cost_from_work(work, e->num_layers, flops_per_ms, e->tokens_per_micro, fwd_ms,
                                    bwd_ms, cm, err);
    free(work);
    if (s == RP_OK) /* and the bytes: what the executors allocate */
        s = rp_memory_model_fill(&e->p->cfg, e->device, e->p->compute_dtype, e->o->grad_dtype,
                                 e->o->activation_dtype, e->o->documents != NULL, e->batch_micro,
                                 e->samples_per_micro, e->seq_len, e->head_rows, *cm,
                                 workspace, err);
    if (s == RP_OK) {
        (*cm)->saved_by_layer = e->o->recompute == RP_RECOMPUTE_LAYER;
        (*cm)->single_weight_buffer = e->o->weight_buffers == 1; /* auto: see plan_auto */
    }
    if (s != RP_OK)
        rp_cost_model_destroy(cm);
    return s;
}

/* The host bytes a node's run may use: --host-memory-limit-mib, else the
 * leader's MemAvailable now (what the run has written of its store already
 * is no longer in it, and is counted again below: an error on the side of
 * keeping less); 0 when unknown. */
static int64_t host_limit(const rp_engine *e, const char **from)
{
    return rp_host_memory_limit(e->o->host_memory_limit_mib, from);
}

/* What a node's run needs of host memory under plan p (host_memory.h),
 * with the speculative update's backups when it is on (speculative.c). */
static rp_status host_need(const rp_engine *e, const rp_plan *p, int64_t *bytes, rp_error *err)
{
    rp_host_memory hm;
    RP_TRY(rp_host_memory_count(&e->p->cfg, e->o->dtype, e->pipelines, (int)e->microbatches,
                                e->tokens_per_micro, p, e->o->recompute == RP_RECOMPUTE_LAYER,
                                e->o->activation_dtype, e->kept_floats,
                                rp_kept_on_executor(e->device), e->base, &hm, err));
    *bytes = (int64_t)(hm.param_store + hm.activations) +
             (e->speculative ? (int64_t)e->spec_backup_node_bytes : 0);
    return RP_OK;
}

rp_status rp_run_host_model_state(const rp_engine *e, int64_t *bytes, rp_error *err)
{
    rp_plan none;
    rp_plan_singletons(e->num_layers, 0, &none);
    none.nfwd = 0, none.nbwd = 1, none.bwd[0].first = 0; /* no arena buffer at all */
    return host_need(e, &none, bytes, err);
}

/* The partitioner's budget for kept activations (machine.h's keep_budget)
 * under --recompute: stage and layer keep none, none keeps every block,
 * auto what the host limit leaves beside the model state (the arena's
 * other buffers are counted exactly when the kept are trimmed, keep_fit).
 * Executors that keep them in their own pool (GPUs) keep what their
 * memory limit leaves beside the plan (plan/keep.h). */
static void keep_budget(const rp_engine *e, rp_machine *mc)
{
    mc->keep_budget = 0;
    if (e->o->recompute == RP_RECOMPUTE_NONE) {
        mc->keep_budget = -1;
    } else if (e->o->recompute == RP_RECOMPUTE_AUTO) {
        const char *from;
        int64_t limit = host_limit(e, &from), store = 0;
        rp_error ignored = {0};
        if (rp_run_host_model_state(e, &store, &ignored) == RP_OK && limit > store)
            mc->keep_budget = limit - store;
    }
    /* GPUs keep them in their own memory: without a known size of it, none */
    const rp_kernel_ops *ops = rp_device_kernel_ops(e->device);
    if (rp_kept_on_executor(e->device) && !(ops && ops->host_addressable) &&
        e->memory_limit <= 0 && mc->keep_budget > 0)
        mc->keep_budget = 0;
}

/* The plan's kept blocks, as --recompute says: a forced plan's keep=N
 * stands; else the choice for the budget (plan/keep.h), then, under
 * --recompute auto, one fewer while the run would not fit the host limit,
 * counted exactly (host_memory.h, and on CPU executors their buffers);
 * --recompute none is refused when it does not fit. */
static rp_status keep_fit(const rp_engine *e, const rp_cost_model *cm, const rp_machine *mc,
                          int forced_keep, rp_plan *p, rp_error *err)
{
    if (forced_keep != RP_PLAN_KEPT_CHOOSE) {
        p->kept = forced_keep;
        return rp_plan_check_kept(cm, p, mc->gpus, err);
    }
    p->kept = rp_plan_choose_kept(cm, mc, p);
    const int auto_mode = e->o->recompute == RP_RECOMPUTE_AUTO;
    if (!auto_mode && e->o->recompute != RP_RECOMPUTE_NONE)
        return RP_OK;
    const rp_kernel_ops *ops = rp_device_kernel_ops(e->device);
    if (rp_kept_on_executor(e->device) && !(ops && ops->host_addressable)) {
        /* no host byte for them: chosen within the device's memory */
        if (auto_mode)
            rp_log(e->lg, RP_LOG_INFO, "--recompute auto: %d of the %d blocks below the tail keep "
                   "their activations in the executors' own memory (only blocks whose forward "
                   "and backward jobs share an executor, as many as its memory limit allows)",
                   p->kept, rp_plan_max_kept(p));
        return RP_OK;
    }
    const char *from;
    int64_t limit = host_limit(e, &from), need = 0, buffers = 0;
    if (limit <= 0) {
        if (auto_mode && p->kept > 0)
            rp_log(e->lg, RP_LOG_INFO, "--recompute auto: the host's available memory is not "
                   "known: every block below the tail is recomputed");
        if (auto_mode)
            p->kept = 0;
        return RP_OK;
    }
    for (;;) {
        /* CPU executors' buffers are host memory too: the node's ranks' */
        buffers = ops && ops->host_addressable
                      ? (int64_t)e->size * rp_schedule_peak_bytes(cm, p, mc->gpus, mc->microbatches,
                                                                   mc->workspace_bytes, NULL)
                      : 0;
        RP_TRY(host_need(e, p, &need, err));
        need += buffers;
        if (need <= limit || p->kept == 0)
            break;
        if (!auto_mode)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "--recompute none: keeping the activations of all %d blocks "
                                "below the tail needs %.1f MiB of host memory per node, more "
                                "than the %.1f MiB of %s; use --recompute auto (keeps what "
                                "fits) or stage",
                                p->kept, need / 1048576.0, limit / 1048576.0, from);
        p->kept--;
    }
    if (auto_mode)
        rp_log(e->lg, RP_LOG_INFO, "--recompute auto: %d of the %d blocks below the tail keep "
               "their activations, the run needing %.1f MiB of host memory per node (the store%s); "
               "the limit: %.1f MiB, %s",
               p->kept, rp_plan_max_kept(p), need / 1048576.0,
               buffers ? " and the CPU executors' buffers" : "", limit / 1048576.0, from);
    return RP_OK;
}

/* A long plan search (plan/search.h) reports to the log, as other long
 * work does (core/slow_work.h's delay and interval): none for --progress
 * none. */

static void plan_report(void *arg, const rp_plan_search_state *state)
{
    const rp_engine *e = arg;
    char text[200];
    rp_plan_search_describe(state, text, sizeof text);
    rp_log(e->lg, RP_LOG_INFO, "planning: %s", text);
}

/* The planner's choice from the nominal rates (fwd_ms NULL) or from the
 * measured layer times, an FP8 base's dequantisations included where they
 * were measured (dequant_ms[l] >= 0: a use of block l that dequantised it;
 * at the nominal rates they are not priced: nothing says how a device's
 * memory compares with its compute); *weight_buffers: the stage weight
 * buffers it planned with. */
static rp_status plan_auto(const rp_engine *e, const double *fwd_ms, const double *bwd_ms,
                           const double *dequant_ms, rp_plan *plan, rp_machine *mc,
                           int *weight_buffers, rp_error *err)
{
    rp_cost_model *cm = NULL;
    int64_t workspace = 0;
    RP_TRY(cost_of(e, fwd_ms, bwd_ms, &cm, &workspace, err));
    for (int l = 0; dequant_ms && l < cm->num_layers; l++)
        if (dequant_ms[l] >= 0 && cm->layers[l].dequant_bytes > 0)
            cm->layers[l].dequant_ms = dequant_ms[l];
    machine_of(e, mc);
    mc->workspace_bytes = workspace;
    keep_budget(e, mc);
    rp_plan_search *search = rp_plan_search_create();
    if (search && e->o->progress != RP_PROGRESS_NONE)
        rp_plan_search_set_report(search, plan_report, (void *)e, RP_SLOW_WORK_DELAY_S,
                                  RP_SLOW_WORK_INTERVAL_S);
    mc->search = search;
    rp_status s = rp_plan_dealt_buffers(cm, mc, e->virtual_executors / e->pipelines, NULL,
                                        (rp_deal_choice)e->o->deal, e->o->weight_buffers == 0,
                                        plan, NULL, err);
    mc->search = NULL;
    rp_plan_search_destroy(&search);
    if (s == RP_OK && cm->single_weight_buffer && e->o->weight_buffers == 0)
        rp_log(e->lg, RP_LOG_INFO, "--weight-buffers auto: no plan fits the device memory with "
               "two stage weight buffers per executor; one (each job's upload waits for the job "
               "before it on the executor)");
    *weight_buffers = cm->single_weight_buffer ? 1 : 2;
    if (s == RP_OK)
        s = keep_fit(e, cm, mc, RP_PLAN_KEPT_CHOOSE, plan, err);
    rp_cost_model_destroy(&cm);
    return s;
}

/* A forced plan's kept blocks: its keep=N, else --recompute's choice. */
static rp_status plan_forced_keep(const rp_engine *e, rp_plan *plan, rp_machine *mc,
                                  rp_error *err)
{
    rp_cost_model *cm = NULL;
    int64_t workspace = 0;
    RP_TRY(cost_of(e, NULL, NULL, &cm, &workspace, err));
    rp_machine own;
    machine_of(e, &own);
    keep_budget(e, &own);
    if (mc)
        mc->keep_budget = own.keep_budget;
    rp_status s = keep_fit(e, cm, &own, plan->kept, plan, err);
    rp_cost_model_destroy(&cm);
    return s;
}

/* A forced plan's buffers within the run's device memory limit (when
 * there is one): the bytes the executors will allocate (plan == allocation,
 * engine/memory_model.h), else refused before anything is allocated. */
static rp_status forced_plan_fits(const rp_engine *e, const rp_plan *plan, rp_error *err)
{
    if (e->memory_limit <= 0)
        return RP_OK;
    rp_cost_model *cm = NULL;
    int64_t workspace = 0;
    RP_TRY(cost_of(e, NULL, NULL, &cm, &workspace, err));
    cm->single_weight_buffer = e->weight_buffers == 1;
    int worst = -1;
    int64_t peak = rp_schedule_peak_bytes(cm, plan, e->virtual_executors, (int)e->microbatches,
                                          workspace, &worst);
    rp_cost_model_destroy(&cm);
    if (peak <= e->memory_limit)
        return RP_OK;
    return rp_error_set(err, RP_ERR_INVALID_ARG,
                        "--plan: its executor buffers need %.1f MiB of device memory per "
                        "executor (%lld bytes; job %d needs the most), more than the limit of "
                        "%.1f MiB (%lld bytes, %s); without --plan the planner chooses one "
                        "that fits (roundpipe plan shows it)",
                        peak / 1048576.0, (long long)peak, worst, e->memory_limit / 1048576.0,
                        (long long)e->memory_limit,
                        e->o->memory_limit_mib > 0 ? "--memory-limit-mib"
                                                   : "the GPU's free memory less the reserve");
}

/* MPI_Bcast from the leader, waiting at most --timeout (rp_run_wait_peers):
 * every rank comes to it from the agreement just before. */
static rp_status bcast(rp_engine *e, void *buf, int count, MPI_Datatype type, MPI_Comm comm,
                       const char *what, rp_error *err)
{
    MPI_Request req;
    MPI_Ibcast(buf, count, type, 0, comm, &req);
    return rp_run_wait_peers(e, &req, what, err);
}

/* The leader's plan and deal are everyone's: e->deal[x] is the node rank
 * that runs executor x (NULL when that is rank x), logged when the run
 * has link groups. deal: room for e->size ints, kept or freed. `what`
 * names the exchange when a rank does not come. */
static rp_status share_plan(rp_engine *e, const rp_machine *mc, int *deal, MPI_Comm comm,
                            const char *what, rp_error *err)
{
    int natural = 1;
    for (int x = 0; x < e->size; x++)
        deal[x] = mc && x < mc->gpus ? rp_machine_gpu_of(mc, x) : x;
    rp_status s = bcast(e, &e->plan, (int)sizeof e->plan, MPI_BYTE, comm, what, err);
    if (s == RP_OK)
        s = bcast(e, &e->weight_buffers, 1, MPI_INT, comm, what, err);
    if (s == RP_OK)
        s = bcast(e, deal, e->size, MPI_INT, comm, what, err);
    if (s != RP_OK) {
        free(deal);
        return s;
    }
    for (int x = 0; x < e->size; x++)
        natural &= deal[x] == x;
    int changed = e->deal ? memcmp(e->deal, deal, sizeof(int) * (size_t)e->size) != 0 : !natural;
    if (mc && mc->link_groups && (changed || !e->plan_shared)) {
        char text[2048];
        size_t at = (size_t)snprintf(text, sizeof text, "%s deal over %d PCIe link group%s: "
                                     "executor -> node rank", rp_deal_name(mc), mc->link_groups,
                                     mc->link_groups == 1 ? "" : "s");
        for (int x = 0; x < e->size && at < sizeof text; x++)
            at += (size_t)snprintf(text + at, sizeof text - at, " %d", deal[x]);
        rp_log(e->lg, RP_LOG_INFO, "%s", text);
    }
    free(e->deal);
    e->deal = natural ? NULL : deal;
    if (natural)
        free(deal);
    e->plan_shared = 1;
    return RP_OK;
}

/* The leader's machine (NULL elsewhere) and every rank's deal buffer,
 * allocated before the ranks agree on a plan. */
static rp_status plan_buffers(const rp_engine *e, rp_machine **mc, int **deal, rp_error *err)
{
    *mc = e->nd.world_rank == 0 ? malloc(sizeof **mc) : NULL;
    *deal = malloc(sizeof(int) * (size_t)e->size);
    if ((e->nd.world_rank == 0 && !*mc) || !*deal)
        return rp_error_set(err, RP_ERR_NOMEM, "the plan's machine");
    return RP_OK;
}

/* Every rank learns whether the leader planned; if so the plan and deal
 * are shared. The buffers of plan_buffers are given back. `within`: the
 * re-plan's agreement, bounded by --timeout on every rank
 * (rp_run_agree_within). */
static rp_status agree_and_share(rp_engine *e, rp_status s, rp_machine *mc, int *deal,
                                 MPI_Comm comm, const char *within, rp_error *err)
{
    s = within ? rp_run_agree_within(e, s, comm, within, err) : rp_run_agree(e, s, comm, err);
    if (s == RP_OK)
        s = share_plan(e, mc, deal, comm, within ? within : "sharing the plan", err);
    else
        free(deal);
    free(mc);
    return s;
}

rp_status rp_run_plan_width(const rp_engine *e, rp_plan *plan, rp_error *err)
{
    /* --pipelines P fixes the width: G/P executors per pipeline (one when
     * there are fewer executors than pipelines: then several pipelines
     * share an executor, one after the other) */
    int width = e->virtual_executors / e->pipelines;
    if (plan->width == 0 && width != e->virtual_executors)
        plan->width = width;
    if ((plan->width == 0 ? e->virtual_executors : plan->width) != width)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--plan: width %d, but %d pipeline(s) on %d "
                            "executor(s) have width %d (set by --pipelines)",
                            plan->width, e->pipelines, e->size, width);
    return RP_OK;
}

rp_status rp_run_forced_plan_check(const rp_engine *e, rp_error *err)
{
    if (!e->o->plan)
        return RP_OK;
    rp_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return rp_error_set(err, RP_ERR_NOMEM, "--plan");
    rp_status s = rp_plan_parse(e->o->plan, e->num_layers, plan, err);
    if (s == RP_OK)
        s = rp_run_plan_width(e, plan, err);
    if (s == RP_OK)
        s = rp_plan_validate(plan, e->num_layers, err);
    free(plan);
    return s;
}

rp_status rp_run_choose_plan(rp_engine *e, MPI_Comm comm, rp_error *err)
{
    rp_machine *mc;
    int *deal;
    char warning[512];
    if (!e->kept_floats)
        /* in the store's compute dtype, which the executors' calls carve
         * their saved areas by (the parameters are attached after the plan) */
        RP_TRY(rp_run_agree(e, rp_host_kept_floats(e->device, e->o->dtype, &e->p->cfg,
                                                   e->samples_per_micro, e->seq_len,
                                                   &e->kept_floats, err),
                            comm, err));
    if (e->nd.world_rank == 0 && rp_config_seq_len_warning(&e->p->cfg, e->seq_len, warning,
                                                           sizeof warning))
        rp_log(e->lg, RP_LOG_WARN, "%s", warning);
    rp_status s = plan_buffers(e, &mc, &deal, err);
    if (s == RP_OK && e->o->plan) {
        s = rp_plan_parse(e->o->plan, e->num_layers, &e->plan, err);
        if (s == RP_OK && mc)
            s = plan_forced_keep(e, &e->plan, mc, err);
        e->weight_buffers = e->o->weight_buffers == 1 ? 1 : 2; /* auto: two with a --plan */
        if (mc) { /* a forced plan is not simulated: its deal is as --deal names it */
            machine_of(e, mc);
            if (e->o->deal == RP_DEAL_INTERLEAVED)
                rp_machine_interleave_deal(mc);
        }
    } else if (s == RP_OK && mc) {
        s = plan_auto(e, NULL, NULL, NULL, &e->plan, mc, &e->weight_buffers, err);
    }
    if (s == RP_OK)
        s = rp_run_plan_width(e, &e->plan, err);
    if (s == RP_OK && e->o->plan && mc)
        s = forced_plan_fits(e, &e->plan, err);
    RP_TRY(agree_and_share(e, s, mc, deal, comm, NULL, err));
    RP_TRY(rp_run_agree(e, rp_plan_validate(&e->plan, e->num_layers, err), comm, err));
    return RP_OK;
}

/* Re-plan from the layer times the executors measured (summed over ranks),
 * on the leader, and share the plan. Every rank comes to it from the end of
 * the first segment, so each of its exchanges waits at most --timeout
 * (agree.c); RP_FAULT_STALL=replan:RANK stops that rank here (a test). */
rp_status rp_run_replan(rp_engine *e, MPI_Comm comm, rp_error *err)
{
    int L = e->num_layers;
    const char *what = "re-plan after the first steps";
    MPI_Request req[2];
    double *ms = e->by_executor.meas_ms, *n = e->by_executor.meas_n;
    MPI_Iallreduce(MPI_IN_PLACE, ms, 3 * L, MPI_DOUBLE, MPI_SUM, comm, &req[0]);
    MPI_Iallreduce(MPI_IN_PLACE, n, 3 * L, MPI_DOUBLE, MPI_SUM, comm, &req[1]);
    RP_TRY(rp_run_wait_peers(e, &req[0], what, err));
    RP_TRY(rp_run_wait_peers(e, &req[1], what, err));
    rp_fault_stall("replan", e->nd.world_rank);
    rp_plan old = e->plan;
    rp_machine *mc;
    int *deal;
    rp_status s = plan_buffers(e, &mc, &deal, err);
    if (s == RP_OK && mc) {
        double *fwd = malloc(sizeof(double) * 3 * (size_t)L), *bwd = fwd + L, *deq = bwd + L;
        for (int l = 0; l < 3 * L; l++) /* forward, backward, dequantisation */
            fwd[l] = e->by_executor.meas_n[l] > 0 ? e->by_executor.meas_ms[l] /
                                                        e->by_executor.meas_n[l]
                                                  : -1;
        double head_ms = bwd[L - 1];
        /* the head runs forward and backward in one call: split it 1:2 */
        if (bwd[L - 1] >= 0) {
            fwd[L - 1] = bwd[L - 1] / 3;
            bwd[L - 1] -= fwd[L - 1];
        }
        s = plan_auto(e, fwd, bwd, deq, &e->plan, mc, &e->weight_buffers, err);
        if (s == RP_OK) {
            char a[512], b[512], d[96] = "";
            rp_plan_format(&old, a, sizeof a);
            rp_plan_format(&e->plan, b, sizeof b);
            if (L > 2 && deq[1] >= 0) /* an FP8 base's */
                snprintf(d, sizeof d, "; block 1's base dequantised in %.3g ms a use", deq[1]);
            rp_log(e->lg, RP_LOG_INFO, "re-planned from measured layer times (block: %.3g ms "
                   "forward, %.3g ms backward; head: %.3g ms forward and backward; per "
                   "microbatch%s): %s", L > 2 ? fwd[1] : 0.0, L > 2 ? bwd[1] : 0.0, head_ms, d,
                   strcmp(a, b) ? b : "plan unchanged");
        }
        free(fwd);
    }
    return agree_and_share(e, s, mc, deal, comm, what, err);
}

