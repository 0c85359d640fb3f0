/* The validation loss (see eval.h). */
#include "engine/eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/unproven.h"
#include "device/backend.h"
#include "engine/lora_run.h"
#include "engine/memory_model.h"
#include "engine/run_impl.h"
#include "engine/stage_weights.h"
#include "engine/train_options.h"
#include "model/layers.h"
#include "model/layout.h"

/* Host memory for the activations of one group of microbatches: the
 * microbatches of a rank go through the model a group at a time, layer by
 * layer, so each layer is uploaded once per group. */
#define RP_EVAL_GROUP_BYTES ((size_t)1 << 30)

int rp_eval_due(const rp_engine *e, int64_t step)
{
    const rp_train_options *o = e->o;
    return o->eval_data && (step == e->steps || (o->eval_every > 0 && step % o->eval_every == 0));
}

/* The device buffers of one rank's evaluation. With LoRA the model is the
 * one --save writes (base + adapters), without dropout: a block's adapters
 * in `ad`, and the frozen base read as the executors read it (stage_weights.h):
 * where it lies (engine_impl.h's base_in_place: then `embed` and `w` are
 * not used, but for an FP8 block's, dequantised into `w`), or each layer's
 * copied into `w`, laid out as the base's layer (an FP8 block's through
 * `staging`, as the executors' stage buffers hold it, then dequantised). */
typedef struct evaluator {
    rp_engine *e;
    rp_kernels k;
    rp_model_config cfg;  /* the model as evaluated (LoRA: dropout 0) */
    int in_place;         /* LoRA: the base is read where it lies */
    void *embed, *w;      /* layer 0's weights (also a tied LM head); the current layer's */
    void *ad;             /* LoRA: the current block's adapters */
    void *staging;        /* LoRA on a GPU: an FP8 block's base as it travels (frozen_base.h's
                             rp_frozen_base_staged_bytes) */
    float *act, *out;     /* a microbatch's activations in and out */
    float *saved, *ws;
    int32_t *in, *tgt, *seg;
    uint8_t *mask;
    int32_t *hin, *htgt, *hseg; /* host staging */
    uint8_t *hmask;
    size_t device_bytes; /* what rp_device_alloc gave */
} evaluator;

/* A buffer of `bytes` (memory_model.h's rp_eval_memory: never 0). */
static void *dev_alloc(evaluator *v, size_t bytes, rp_status *s, rp_error *err)
{
    void *p = NULL;
    if (*s == RP_OK)
        *s = rp_device_alloc(v->e->dev, bytes, &p, err);
    if (p)
        v->device_bytes += bytes;
    return p;
}

static void evaluator_free(evaluator *v)
{
    rp_device *d = v->e->dev;
    void *dev[] = {v->embed, v->w, v->ad, v->staging, v->act, v->out, v->saved, v->ws, v->in, v->tgt, v->seg,
                   v->mask};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i])
            rp_device_free(d, dev[i]);
    free(v->hin), free(v->htgt), free(v->hseg), free(v->hmask);
}

/* Bytes of layer l's weights in `w` (LoRA: its frozen base, unless it is
 * read in place). */
static size_t weight_bytes(const evaluator *v, int l)
{
    const rp_engine *e = v->e;
    if (!e->lora)
        return rp_params_compute_bytes(e->p, l);
    return rp_stage_base_copied(e, l) || rp_stage_base_per_use(e, l)
               ? rp_frozen_base_numel(e->base, l) * rp_dtype_size(e->p->compute_dtype)
               : 0;
}

/* Layer l's weights onto the device at dst: its compute copy, or with LoRA
 * its frozen base tensor by tensor (unless read in place) and its adapters
 * (if any) into v->ad. */
static rp_status upload_layer(evaluator *v, int l, void *dst, rp_error *err)
{
    rp_engine *e = v->e;
    if (!e->lora)
        return rp_device_copy(e->dev, dst, e->p->st[l].compute, rp_params_compute_bytes(e->p, l),
                              err);
    const size_t es = rp_dtype_size(rp_frozen_base_dtype(e->base));
    const rp_weight_piece *pc;
    const int per_use = rp_stage_base_per_use(e, l);
    int n = v->in_place ? 0 : rp_frozen_base_pieces(e->base, l, &pc);
    if (v->in_place && per_use) /* an FP8 block, dequantised */
        RP_TRY(rp_frozen_base_materialise(e->base, l, &v->k, dst, e->p->compute_dtype, err));
    for (int i = 0; i < n; i++) {
        size_t at, sat;
        const rp_fp8_matrix *q =
            per_use ? rp_frozen_base_piece_staged(e->base, l, i, &at, &sat) : NULL;
        if (!q) { /* as it lies: into its block, or an FP8 block's staging */
            RP_TRY(rp_device_copy(e->dev, per_use ? (char *)v->staging + at
                                                  : (char *)dst + pc[i].at * es,
                                  pc[i].src, pc[i].numel * es, err));
            continue;
        }
        RP_TRY(rp_device_copy(e->dev, (char *)v->staging + at, q->weight,
                              (size_t)(q->rows * q->cols), err));
        RP_TRY(rp_device_copy(e->dev, (char *)v->staging + sat, q->scale,
                              (size_t)(rp_fp8_scale_rows(q) * rp_fp8_scale_cols(q)) *
                                  rp_dtype_size(q->scale_dtype), err));
    }
    if (n > 0 && per_use) /* uploaded FP8: dequantised */
        RP_TRY(rp_frozen_base_dequantise_staged(e->base, l, &v->k, v->staging, dst,
                                                e->p->compute_dtype, err));
    if (rp_params_compute_bytes(e->p, l) == 0)
        return RP_OK;
    return rp_device_copy(e->dev, v->ad, e->p->st[l].compute, rp_params_compute_bytes(e->p, l),
                          err);
}

/* The buffers' sizes: the memory model's count (memory_model.h), which
 * the start-up check held against the device memory limit; that each
 * layer fits them is checked here, so a count that fell short of what the
 * run holds is an error, never an overrun. */
static rp_status evaluator_sizes(const evaluator *v, rp_eval_memory *m, rp_error *err)
{
    const rp_engine *e = v->e;
    const rp_params *p = e->p;
    RP_TRY(rp_memory_model_eval(&p->cfg, e->device, p->compute_dtype,
                                rp_dataset_has_documents(e->eval_ds), e->samples_per_micro,
                                e->seq_len, m, err));
    for (int l = 0; l < p->nlayers; l++) {
        const size_t adapters = e->lora && l > 0 ? rp_params_compute_bytes(p, l) : 0;
        const size_t staged = e->lora && !v->in_place ? rp_frozen_base_staged_bytes(e->base, l) : 0;
        const size_t room = l == 0 ? m->embedding : m->weights;
        if (weight_bytes(v, l) > room || adapters > m->adapters || staged > m->staging)
            return rp_error_set(err, RP_ERR_INTERNAL, "evaluation: layer %d takes %zu bytes of "
                                "weights, %zu of adapters and %zu of FP8 staging; the memory "
                                "model counts %zu, %zu and %zu", l, weight_bytes(v, l), adapters,
                                staged, room, m->adapters, m->staging);
    }
    if (e->act_floats * sizeof(float) > m->activations ||
        (size_t)e->tokens_per_micro * sizeof(int32_t) > m->token_ids)
        return rp_error_set(err, RP_ERR_INTERNAL, "evaluation: a microbatch of %lld tokens over "
                            "the memory model's buffers", (long long)e->tokens_per_micro);
    return RP_OK;
}

static rp_status evaluator_init(evaluator *v, rp_engine *e, rp_error *err)
{
    memset(v, 0, sizeof *v);
    v->e = e;
    const rp_params *p = e->p;
    const int64_t T = e->tokens_per_micro;
    v->cfg = p->cfg;
    v->cfg.lora.dropout = 0; /* evaluation is inference */
    v->in_place = e->lora && e->base_in_place;
    if (e->lora && !v->in_place && rp_frozen_base_dtype(e->base) != p->compute_dtype)
        return rp_error_set(err, RP_ERR_INTERNAL, "evaluation: a frozen base in %s copied "
                            "beside adapters in %s", rp_dtype_name(rp_frozen_base_dtype(e->base)),
                            rp_dtype_name(p->compute_dtype));
    rp_eval_memory m;
    RP_TRY(evaluator_sizes(v, &m, err));
    rp_status s = rp_device_kernels(e->dev, &v->k, err);
    v->embed = dev_alloc(v, m.embedding, &s, err);
    v->w = dev_alloc(v, m.weights, &s, err);
    if (m.adapters)
        v->ad = dev_alloc(v, m.adapters, &s, err);
    if (m.staging)
        v->staging = dev_alloc(v, m.staging, &s, err);
    v->act = dev_alloc(v, m.activations, &s, err);
    v->out = dev_alloc(v, m.activations, &s, err);
    v->saved = dev_alloc(v, m.saved, &s, err);
    v->ws = dev_alloc(v, m.workspace, &s, err);
    v->in = dev_alloc(v, m.token_ids, &s, err);
    v->tgt = dev_alloc(v, m.token_ids, &s, err);
    v->mask = dev_alloc(v, m.mask, &s, err);
    if (m.segments)
        v->seg = dev_alloc(v, m.segments, &s, err);
    v->hin = malloc((size_t)T * sizeof(int32_t));
    v->htgt = malloc((size_t)T * sizeof(int32_t));
    v->hseg = malloc((size_t)T * sizeof(int32_t));
    v->hmask = malloc((size_t)T);
    if (s == RP_OK && (!v->hin || !v->htgt || !v->hseg || !v->hmask))
        s = rp_error_set(err, RP_ERR_NOMEM, "evaluation: host staging");
    if (s == RP_OK) /* the embedding stays: the first layer, and a tied LM head */
        s = upload_layer(v, 0, v->embed, err);
    if (s != RP_OK)
        evaluator_free(v);
    return s;
}

/* What of samples [first, first + n) of the evaluation set a layer reads,
 * onto the device: the embedding its token ids, a block the document
 * segments (with --eval-documents), the head the targets and their counted
 * mask (*counted: how many count). */
static rp_status load_tokens(evaluator *v, int l, int64_t first, int64_t n, int64_t *counted,
                             rp_error *err)
{
    rp_engine *e = v->e;
    const int64_t S = e->seq_len;
    const size_t T = (size_t)(n * S);
    const int head = l == e->p->nlayers - 1;
    if (l > 0 && !head) {
        if (!v->seg)
            return RP_OK;
        for (int64_t j = 0; j < n; j++)
            rp_dataset_segments(e->eval_ds, first + j, v->hseg + j * S);
        return rp_device_copy(e->dev, v->seg, v->hseg, T * sizeof(int32_t), err);
    }
    *counted = 0;
    for (int64_t j = 0; j < n; j++)
        *counted += rp_dataset_fill(e->eval_ds, first + j, v->hin + j * S, v->htgt + j * S,
                                    v->hmask + j * S);
    if (l == 0)
        return rp_device_copy(e->dev, v->in, v->hin, T * sizeof(int32_t), err);
    RP_TRY(rp_device_copy(e->dev, v->tgt, v->htgt, T * sizeof(int32_t), err));
    return rp_device_copy(e->dev, v->mask, v->hmask, T, err);
}

/* Layer l's forward for microbatch `mb` (samples [first, first + n)), its
 * activations in host memory `h` (in and out; the head's: *loss, *counted). */
static rp_status layer_forward(evaluator *v, int l, int64_t first, int64_t n, float *h,
                               double *loss, int64_t *counted, rp_error *err)
{
    rp_engine *e = v->e;
    const rp_params *p = e->p;
    const int64_t S = e->seq_len, T = n * S;
    const size_t bytes = (size_t)T * (size_t)e->hidden * sizeof(float);
    /* `w` holds layer l alone, laid out as the executors' stage buffers
     * lay out a layer (the base's layer with LoRA: at 0, beside no adapters) */
    const size_t at_start = 0;
    rp_stage_weights w = {.first = l, .buffer = v->w, .offsets = &at_start,
                          .base_offsets = &at_start, .tied_matrix = e->tied ? v->embed : NULL,
                          .base_scratch = v->w};
    w.embedding = v->in_place ? rp_frozen_base_tensor(e->base, 0, "model.embed_tokens.weight")
                              : v->embed;
    const rp_dtype dt = rp_stage_weights_dtype(e, l);
    RP_TRY(load_tokens(v, l, first, n, counted, err));
    if (l == 0) {
        RP_TRY(rp_embed_forward(&v->k, &v->cfg, rp_stage_weights_layer(e, &w, 0), dt, v->in, T,
                                v->out, err));
    } else {
        RP_TRY(rp_device_copy(e->dev, v->act, h, bytes, err));
        if (l < p->nlayers - 1) {
            rp_lora_call c; /* the adapters, without dropout (v->cfg) */
            if (e->lora)
                rp_lora_call_of(e, l, 0, first, v->ad, &c);
            rp_block_call call = {
                .block = (int32_t)(l - 1), .lora = e->lora ? &c : NULL,
                .allow_unproven = rp_unproven_in(e->unproven, RP_UNPROVEN_GPT_OSS),
                .segments_host = v->seg ? v->hseg : NULL};
            RP_TRY(rp_block_forward(&v->k, &v->cfg, rp_stage_weights_layer(e, &w, l), dt, v->act,
                                    v->out, n, S, v->seg, v->saved, v->ws, &call, err));
        } else {
            rp_head_weights hw;
            rp_stage_weights_head(e, &w, l, &hw);
            return rp_head_forward_backward(&v->k, &v->cfg, hw.norm, hw.lm, dt, v->act, v->tgt,
                                            v->mask, T, 1.0f, NULL, NULL, NULL, 0, v->ws, loss,
                                            err);
        }
    }
    RP_TRY(rp_device_sync(e->dev, err));
    RP_TRY(rp_device_copy(e->dev, h, v->out, bytes, err));
    /* the residual stream as training's forward rounds it (--activation-dtype) */
    if (e->o->activation_dtype == RP_BF16)
        rp_f32_round_bf16(h, (size_t)T * (size_t)e->hidden);
    return RP_OK;
}

/* This rank's microbatches (j with j mod ranks == rank) through the model,
 * a group at a time: per microbatch its loss sum and counted targets. */
static rp_status run_mine(evaluator *v, int64_t samples, double *loss, int64_t *counted,
                          rp_error *err)
{
    rp_engine *e = v->e;
    const int64_t spm = e->samples_per_micro, nmb = (samples + spm - 1) / spm;
    size_t per = e->act_floats * sizeof(float);
    int64_t group = (int64_t)(RP_EVAL_GROUP_BYTES / per);
    group = group < 1 ? 1 : group;
    float *h = malloc((size_t)group * per);
    if (!h)
        return rp_error_set(err, RP_ERR_NOMEM, "evaluation: %lld microbatches' activations",
                            (long long)group);
    rp_status s = RP_OK;
    /* every node holds the same weights: the deal is over all ranks */
    int rank = e->nd.world_rank, size = e->nd.world_size;
    for (int64_t j0 = rank; s == RP_OK && j0 < nmb; j0 += group * size) {
        for (int l = 0; s == RP_OK && l < e->p->nlayers; l++) {
            if (l > 0)
                s = upload_layer(v, l, v->w, err);
            for (int64_t g = 0; s == RP_OK && g < group; g++) {
                int64_t j = j0 + g * size;
                if (j >= nmb)
                    break;
                int64_t first = j * spm, n = first + spm <= samples ? spm : samples - first;
                s = layer_forward(v, l, first, n, h + (size_t)g * e->act_floats, &loss[j],
                                  &counted[j], err);
            }
        }
    }
    free(h);
    return s;
}

rp_status rp_eval_run(rp_engine *e, MPI_Comm comm, int64_t step, rp_error *err)
{
    double t0 = rp_now();
    uint64_t trace_t0 = e->trace ? rp_trace_now_ns() : 0;
    int64_t n = rp_dataset_samples(e->eval_ds);
    int64_t samples = e->o->eval_samples > 0 && e->o->eval_samples < n ? e->o->eval_samples : n;
    int64_t nmb = (samples + e->samples_per_micro - 1) / e->samples_per_micro;
    double *loss = calloc((size_t)nmb, sizeof(double));
    int64_t *counted = calloc((size_t)nmb, sizeof(int64_t));
    rp_status s = loss && counted ? RP_OK : rp_error_set(err, RP_ERR_NOMEM, "evaluation sums");
    evaluator v;
    int have = 0;
    if (s == RP_OK)
        have = (s = evaluator_init(&v, e, err)) == RP_OK;
    if (have && e->nd.world_rank == 0 && !e->eval_allocation_logged) {
        /* what it allocated, against the start-up line's count (eval_check) */
        rp_log(e->lg, RP_LOG_INFO, "evaluation buffers: %.1f MiB of device memory per executor "
               "(%zu bytes), allocated", v.device_bytes / 1048576.0, v.device_bytes);
        e->eval_allocation_logged = 1;
    }
    if (s == RP_OK)
        s = run_mine(&v, samples, loss, counted, err);
    /* its last kernel ops (a head's) finished before the training's copies
     * read the device again: on CUDA the buffers' cudaFree waits for them
     * anyway; the unordered check (RP_TEST_UNORDERED_DEVICE) holds the
     * engine to it */
    if (s == RP_OK)
        s = rp_device_sync(e->dev, err);
    if (have)
        evaluator_free(&v);
    if (e->trace) { /* on the compute track: the executors run nothing else meanwhile */
        char span[48];
        snprintf(span, sizeof span, "eval after step %lld", (long long)step);
        rp_trace_span(e->trace, RP_TRACK_COMPUTE, span, trace_t0, rp_trace_now_ns());
    }
    s = rp_run_agree(e, s, comm, err);
    if (s == RP_OK) { /* each microbatch's sums come from one rank: the others add zeros */
        MPI_Allreduce(MPI_IN_PLACE, loss, (int)nmb, MPI_DOUBLE, MPI_SUM, comm);
        MPI_Allreduce(MPI_IN_PLACE, counted, (int)nmb, MPI_INT64_T, MPI_SUM, comm);
    }
    if (s == RP_OK && e->nd.world_rank == 0) {
        double sum = 0; /* in microbatch order: the same bits on any number of ranks */
        int64_t tokens = 0;
        for (int64_t j = 0; j < nmb; j++) {
            sum += loss[j];
            tokens += counted[j];
        }
        double mean = tokens > 0 ? sum / (double)tokens : 0.0;
        if (e->by_logger.log) {
            if (tokens > 0)
                fprintf(e->by_logger.log, "{\"step\":%lld,\"eval_loss\":%.17g,\"eval_tokens\":%lld,"
                        "\"eval_samples\":%lld}\n", (long long)step, mean, (long long)tokens,
                        (long long)samples);
            else
                fprintf(e->by_logger.log, "{\"step\":%lld,\"eval_loss\":null,\"eval_tokens\":0,"
                        "\"eval_samples\":%lld}\n", (long long)step, (long long)samples);
            rp_engine_log_written(e, step);
        }
        rp_progress_eval(&e->progress, step, tokens > 0 ? mean : -1.0);
        rp_log(e->lg, RP_LOG_INFO, "eval after step %lld: eval_loss %.6f over %lld counted "
               "targets of %lld samples (%.2f s)", (long long)step, mean, (long long)tokens,
               (long long)samples, rp_now() - t0);
    }
    free(loss);
    free(counted);
    return s;
}
