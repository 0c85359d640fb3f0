/* `roundpipe plan`'s advice: the pipeline count it proposes, the host
 * memory of a plan, and the verdict line. */
#include "cli/plan_choice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "engine/train_options.h"
#include "plan/deal.h"
#include "plan/schedule.h"

/* An FP8 config without model files (one that quantises some projection):
 * its base counted as the checkpoint would map it, on executors that take
 * FP8 as it lies (frozen_base.h's rp_frozen_base_reads). */
static int fp8_as_shipped(const rp_plan_cli *o)
{
    return !o->model_dir &&
           rp_frozen_base_takes_fp8(&o->cfg, rp_frozen_base_reads(rp_device_kernel_ops(o->device)));
}

/* LoRA's frozen base as train would open it: from --model DIR's safetensors
 * files (mapped when they hold the executors' dtype), else converted into
 * the store (--init-config, or files that cannot be read: *note says so). */
static rp_frozen_base *open_base(const rp_plan_cli *o, char *note, size_t len)
{
    rp_frozen_base *base = NULL;
    rp_error err = {0};
    const rp_kernel_ops *ops = rp_device_kernel_ops(o->device);
    const unsigned reads = rp_frozen_base_reads(ops);
    note[0] = '\0';
    if (o->model_dir &&
        rp_frozen_base_open(&o->cfg, o->model_dir, o->dtype, reads, &base, &err) == RP_OK)
        return base;
    if (o->model_dir)
        snprintf(note, len, "%s; the base counted as converted into the store", err.msg);
    else if (fp8_as_shipped(o))
        snprintf(note, len, "no model files (--init-config): the frozen base counted as an FP8 "
                 "checkpoint of this config maps it (the block projections it quantises e4m3 "
                 "with F32 scales of [%lld, %lld] blocks, the rest bf16; train with --init-config would "
                 "initialise it in the store)", (long long)o->cfg.fp8.block_rows,
                 (long long)o->cfg.fp8.block_cols);
    else
        snprintf(note, len, "no model files (--init-config): the frozen base is initialised "
                 "in the store, as train does");
    return rp_frozen_base_open(&o->cfg, NULL, o->dtype, reads, &base, &err) == RP_OK ? base : NULL;
}

/* A config's host memory for plan p of `width` executors per pipeline on
 * the node *mc, as train would allocate it (with --recompute). */
static int count_host(const rp_plan_cli *o, const rp_frozen_base *base, const rp_machine *mc,
                      int width, const rp_plan *p, rp_host_memory *hm)
{
    rp_error err = {0};
    int pipelines = mc->gpus / (width > 0 ? width : 1);
    if (pipelines < 1 || mc->microbatches % pipelines)
        pipelines = 1;
    if (rp_host_memory_count(&o->cfg, o->dtype, pipelines, mc->microbatches,
                             o->model->tokens_per_microbatch, p,
                             o->recompute == RP_RECOMPUTE_LAYER, o->activation_dtype, o->kept_floats,
                             o->model->keep_on_executor, base, hm,
                             &err) != RP_OK)
        return 0;
    if (hm->lora && fp8_as_shipped(o)) { /* mapped, not in the store */
        if (rp_frozen_base_fp8_checkpoint_bytes(&o->cfg, &hm->base_mapped, &hm->base_bf16, &err) !=
            RP_OK)
            return 0;
        hm->param_store -= hm->base_store;
        hm->pinned -= hm->base_store;
        hm->base_store = 0;
    }
    return 1;
}

/* CPU executors' buffers, host memory too (their pool of kept activations
 * included, where they keep one) */
static size_t cpu_buffers(const rp_plan_cli *o, const rp_machine *mc, const rp_plan *p)
{
    return o->device == RP_DEVICE_CPU
               ? (size_t)mc->gpus * (size_t)rp_schedule_peak_bytes(o->model, p, mc->gpus,
                                                                   mc->microbatches,
                                                                   mc->workspace_bytes, NULL)
               : 0;
}

/* --recompute auto: one kept block fewer while the host memory of plan p
 * is over the limit (counted exactly, as train holds it), re-simulated
 * when that changed it. */
static void keep_within(const rp_plan_cli *o, const rp_frozen_base *base, const rp_machine *mc,
                        int width, rp_plan *p, rp_sim_result *res, rp_host_memory *hm)
{
    if (o->recompute != RP_RECOMPUTE_AUTO || o->forced || o->host_limit <= 0)
        return;
    if (o->model->keep_on_executor && o->device != RP_DEVICE_CPU)
        return; /* GPUs keep them in their own memory: no host byte to save */
    int before = p->kept;
    while (p->kept > 0 &&
           rp_plan_choice_host_total(hm) + cpu_buffers(o, mc, p) > (size_t)o->host_limit) {
        p->kept--;
        if (!count_host(o, base, mc, width, p, hm))
            break;
    }
    rp_error ignored = {0};
    if (p->kept != before)
        rp_simulate(o->model, p, mc, res, &ignored);
}

size_t rp_plan_choice_host_total(const rp_host_memory *hm)
{
    return hm->param_store + hm->activations;
}

rp_status rp_plan_cli_choose(const rp_plan_cli *o, rp_machine *mc, rp_plan *out, rp_sim_result *res,
                             rp_plan_choice *c, rp_error *err)
{
    memset(c, 0, sizeof *c);
    const rp_machine start = *mc;
    RP_TRY(rp_plan_cli_plan(o, mc, out, res, err));
    if (!o->have_config)
        return RP_OK;
    rp_frozen_base *base = o->cfg.lora.rank > 0 ? open_base(o, c->host_note, sizeof c->host_note)
                                                 : NULL;
    c->have_host = count_host(o, base, mc, res->width, out, &c->host);
    if (c->have_host)
        keep_within(o, base, mc, res->width, out, res, &c->host);
    rp_plan *trial = malloc(sizeof *trial);
    if (!c->have_host || o->width || o->forced || !trial) {
        free(trial);
        rp_frozen_base_close(&base);
        return RP_OK;
    }
    /* fewer pipelines (wider), nearly as fast, for much less host memory:
     * the widest of the least host memory wins */
    const size_t fastest_host = rp_plan_choice_host_total(&c->host);
    size_t least = (size_t)(fastest_host * RP_PLAN_HOST_MAX);
    int chosen = 0;
    rp_sim_result chosen_res = *res;
    rp_machine chosen_mc = *mc;
    rp_host_memory chosen_host = c->host;
    for (int w = start.gpus; w >= 1; w--) {
        if (w == res->width || start.gpus % w || start.microbatches % (start.gpus / w))
            continue;
        rp_machine tm = start;
        rp_sim_result tr;
        rp_host_memory th;
        rp_error ignored = {0};
        if (rp_plan_dealt(o->model, &tm, w, NULL, o->deal, trial, &tr, &ignored) != RP_OK ||
            tr.iteration_ms > res->iteration_ms * (1 + RP_PLAN_SLOWER_MAX) ||
            !count_host(o, base, &tm, w, trial, &th))
            continue;
        keep_within(o, base, &tm, w, trial, &tr, &th);
        if (tr.iteration_ms > res->iteration_ms * (1 + RP_PLAN_SLOWER_MAX) ||
            rp_plan_choice_host_total(&th) > least)
            continue;
        if (!chosen || rp_plan_choice_host_total(&th) < rp_plan_choice_host_total(&chosen_host)) {
            chosen = w;
            chosen_res = tr;
            chosen_mc = tm;
            chosen_host = th;
            *out = *trial;
        }
    }
    if (chosen) {
        c->fastest_width = res->width;
        c->fastest_ms = res->iteration_ms;
        c->fastest_tokens_per_s = res->tokens_per_s;
        c->fastest_host = fastest_host;
        *res = chosen_res;
        *mc = chosen_mc;
        c->host = chosen_host;
    }
    free(trial);
    rp_frozen_base_close(&base);
    return RP_OK;
}

/* "12.3 GiB", or "45.6 MiB" below one GiB */
static const char *size_text(double bytes, char *buf, size_t len)
{
    if (bytes >= 1073741824.0)
        snprintf(buf, len, "%.1f GiB", bytes / 1073741824.0);
    else
        snprintf(buf, len, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

void rp_plan_verdict(const rp_plan_cli *o, const rp_sim_result *r, const rp_plan_choice *c,
                     char *buf, size_t len, int *fits)
{
    const double mib = 1048576.0;
    char s1[32], s2[32], s3[32];
    /* --eval-data: the evaluation's buffers replace the plan's between
     * segments; an executor needs the larger */
    const double peak = (double)(o->eval_bytes > r->peak_bytes ? o->eval_bytes : r->peak_bytes);
    const double host = c->have_host ? (double)rp_plan_choice_host_total(&c->host) : 0;
    char host_text[400];
    if (c->have_host)
        snprintf(host_text, sizeof host_text, "; host memory needed: %s per node",
                 size_text(host, s1, sizeof s1));
    else
        snprintf(host_text, sizeof host_text, "; host memory: not known from a layer-times file "
                 "(--init-config or --model counts it)");
    char eval_text[160] = "";
    if (o->eval_bytes > 0)
        snprintf(eval_text, sizeof eval_text, "; the buffers are the larger of the plan's %.1f "
                 "MiB and the evaluation's %.1f MiB (--eval-data)", r->peak_bytes / mib,
                 o->eval_bytes / mib);
    strncat(host_text, eval_text, sizeof host_text - strlen(host_text) - 1);
    *fits = -1;
    if (o->have_config && o->device == RP_DEVICE_CPU) {
        /* CPU executors: every rank's buffers and the store share host memory */
        rp_device_info info;
        double total = host + peak * o->mc.gpus;
        double have = rp_device_probe(RP_DEVICE_CPU, &info, NULL) == RP_OK
                          ? (double)info.memory_bytes : 0;
        if (have > 0)
            *fits = total <= have;
        snprintf(buf, len, "verdict: %s: CPU executors: %d x %.1f MiB of buffers and the host "
                 "store's %s, %s in all%s%s of memory%s",
                 *fits < 0 ? "not checked" : *fits ? "fits" : "does NOT fit", o->mc.gpus,
                 peak / mib, size_text(host, s1, sizeof s1), size_text(total, s2, sizeof s2),
                 have > 0 ? " of this machine's " : "; this machine's is not known",
                 have > 0 ? size_text(have, s3, sizeof s3) : "", eval_text);
        return;
    }
    /* the smallest GPU whose memory less the reserve holds the buffers, in
     * whole MiB: rounded up (to the nearest, 2435.1 named a GPU 0.1 MiB short) */
    const double reserve_mib = RP_CUDA_RESERVE_MIB;
    const double smallest = ceil((peak / mib + reserve_mib) * 20.0 / 19.0 - 1e-9);
    if (o->device_memory > 0 && !o->memory_limit_given) {
        double reserve = (double)rp_device_cuda_reserve_bytes(o->device_memory);
        const double cudnn = (double)o->cudnn_reserve;
        char cudnn_text[96] = "";
        if (cudnn > 0)
            snprintf(cudnn_text, sizeof cudnn_text, " + %.1f MiB kept for cuDNN's attention "
                     "(--attention)", cudnn / mib);
        *fits = peak + reserve + cudnn <= (double)o->device_memory;
        snprintf(buf, len, "verdict: %s: an executor needs %.1f MiB of buffers + %.1f MiB "
                 "reserved (CUDA context, cuBLAS workspace, scratch: 5%% + %d MiB)%s = %.1f MiB "
                 "of the GPU's %.1f MiB (%s)%s",
                 *fits ? "fits" : "does NOT fit", peak / mib, reserve / mib, RP_CUDA_RESERVE_MIB,
                 cudnn_text, (peak + reserve + cudnn) / mib, o->device_memory / mib,
                 o->device_memory_from, host_text);
    } else if (o->memory_limit_given > 0) {
        *fits = peak <= (double)o->memory_limit_given;
        snprintf(buf, len, "verdict: %s within --memory-limit-mib %.0f: an executor needs %.1f "
                 "MiB of buffers (a limit given has no reserve added: a GPU of %.0f MiB or more "
                 "holds them with the CUDA context and cuBLAS reserve)%s",
                 *fits ? "fits" : "does NOT fit", o->memory_limit_given / mib, peak / mib,
                 smallest, host_text);
    } else {
        snprintf(buf, len, "verdict: not checked against a GPU (--device-memory-mib N checks "
                 "one of N MiB): an executor needs %.1f MiB of buffers, a GPU of %.0f MiB or "
                 "more with the reserve (CUDA context, cuBLAS workspace, scratch: 5%% + %d MiB)%s",
                 peak / mib, smallest, RP_CUDA_RESERVE_MIB, host_text);
    }
}
