/* The attention choice (attention_choice.h). */
#include "config.h"

#include "kernels/attention_choice.h"
#include "kernels/attn_documents.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

const char *const rp_attention_mode_words[] = {"auto", "cudnn", "own", NULL};

rp_status rp_attention_choose(int mode, const char *cudnn_problem, size_t cudnn_version,
                              int sm_major, int sm_minor, int unproven_ok, int *use_cudnn,
                              char *note, size_t note_len, rp_error *err)
{
    *use_cudnn = 0;
    if (mode != RP_ATTENTION_AUTO && mode != RP_ATTENTION_CUDNN && mode != RP_ATTENTION_OWN)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--attention: mode %d is not auto, cudnn "
                            "or own", mode);
    if (mode == RP_ATTENTION_OWN) {
        snprintf(note, note_len, "attention: own kernel (--attention own)");
        return RP_OK;
    }
    char why[640];
    why[0] = '\0';
    if (cudnn_problem)
        snprintf(why, sizeof why, "%s", cudnn_problem);
    else if (sm_major < 8)
        snprintf(why, sizeof why, "cuDNN's fused flash SDPA needs sm_80 or newer; this GPU is "
                 "sm_%d%d", sm_major, sm_minor);
    else if (cudnn_version == 91000 || cudnn_version == 91001)
        snprintf(why, sizeof why, "cuDNN %zu.%zu.%zu's bf16 SDPA backward has known bugs (NVIDIA's "
                 "cudnn-frontend refuses 9.10.0 and 9.10.1): use another cuDNN 9 "
                 "(RP_CUDNN_LIBRARY)", cudnn_version / 10000, cudnn_version / 100 % 100,
                 cudnn_version % 100);
    else if (sm_major == 10)
        snprintf(why, sizeof why, "on sm_%d%d cuDNN's deterministic SDPA backward needs an engine "
                 "and knobs chosen by hand (cudnn-frontend's override for Blackwell), which this "
                 "build does not choose", sm_major, sm_minor);
    if (why[0]) {
        if (mode == RP_ATTENTION_CUDNN)
            return rp_error_set(err, RP_ERR_UNSUPPORTED, "--attention cudnn: %s", why);
        snprintf(note, note_len, "attention: own kernel (%s)", why);
        return RP_OK;
    }
    if (mode == RP_ATTENTION_AUTO && !unproven_ok) {
        snprintf(note, note_len, "attention: own kernel (cuDNN %zu.%zu.%zu's fused flash SDPA is "
                 "turned off: RP_DISABLE_CUDA_PATHS names cudnn; --attention cudnn takes it)",
                 cudnn_version / 10000, cudnn_version / 100 % 100, cudnn_version % 100);
        return RP_OK;
    }
    *use_cudnn = 1;
    snprintf(note, note_len, "attention: cudnn %zu.%zu.%zu (fused flash SDPA)",
             cudnn_version / 10000, cudnn_version / 100 % 100, cudnn_version % 100);
    return RP_OK;
}

const char *rp_attention_cudnn_refusal(const rp_attn_shape *s)
{
    if (s->nseq < 1 || s->seqlen < 1 || s->nheads < 1 || s->nkv < 1 || s->head_dim < 1 ||
        s->nheads % s->nkv != 0)
        return "an empty or inconsistent shape";
    if (s->seg_start && !s->seg_host)
        return "document segments without their host copy (cuDNN's ragged layout needs their "
               "count and lengths before the call)";
    if (s->window > 0)
        return "a sliding window (gpt-oss)";
    if (s->sinks)
        return "attention sinks (gpt-oss)";
    if (s->head_dim % 8 != 0 || s->head_dim > 128)
        return "a head_dim that is not a multiple of 8 up to 128";
    if (s->seqlen < 2)
        return "a sequence of one token (cuDNN's SDPA backward does not take it)";
    return NULL;
}

size_t rp_attention_cudnn_row_bytes(const rp_attn_shape *s)
{
    return RP_CUDNN_WORKSPACE_ROW_BYTES + 4 * (size_t)s->head_dim;
}

size_t rp_attention_cudnn_workspace_want(const rp_attn_shape *s)
{
    if (rp_attention_cudnn_refusal(s))
        return 0;
    /* dP in bf16 over the lengths padded to the engine's tiles, dQ's fp32
     * accumulator and a few fp32 values a padded row, and room for what
     * else a plan asks */
    const double tile = RP_CUDNN_WORKSPACE_TILE;
    const double padded = ceil((double)s->seqlen / tile) * tile;
    const double rows = (double)s->nseq * (double)s->nheads * padded;
    const double want = 2.0 * rows * padded + (double)rp_attention_cudnn_row_bytes(s) * rows +
                        (double)RP_CUDNN_WORKSPACE_SLACK;
    return want < (double)SIZE_MAX / 2 ? (size_t)want : SIZE_MAX / 2;
}

size_t rp_attention_cudnn_workspace_cap(size_t device_total) { return device_total / 4; }

size_t rp_attention_cudnn_workspace_budget(const rp_attn_shape *s, size_t device_total)
{
    /* over the cap a plan would not fit what a run can spare: reserving the
     * cap would only take it from the planner, for the own kernel to run */
    const size_t want = rp_attention_cudnn_workspace_want(s);
    return want <= rp_attention_cudnn_workspace_cap(device_total) ? want : 0;
}

static size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

size_t rp_attention_cudnn_call_buffer_bytes(const rp_attn_shape *s, size_t stats_rows)
{
    if (rp_attention_cudnn_refusal(s))
        return 0;
    size_t rows = (size_t)(s->nseq * s->seqlen);
    size_t stats = round_up(stats_rows * (size_t)s->nheads * sizeof(float));
    size_t nq = rows * (size_t)(s->nheads * s->head_dim), nk = rows * (size_t)(s->nkv * s->head_dim);
    return 2 * stats + round_up(nq * 2) + 2 * round_up(nk * 2);
}

size_t rp_attention_cudnn_buffer_bytes(const rp_attn_shape *s)
{
    return rp_attention_cudnn_call_buffer_bytes(s, (size_t)(s->nseq * s->seqlen));
}

size_t rp_attention_cudnn_documents_budget(const rp_attn_shape *s, size_t device_total)
{
    const double want =
        (double)RP_ATTN_DOCUMENTS_WORKSPACE_FACTOR * (double)rp_attention_cudnn_workspace_want(s);
    return want <= (double)rp_attention_cudnn_workspace_cap(device_total) ? (size_t)want : 0;
}

size_t rp_attention_cudnn_documents_buffer_bytes(const rp_attn_shape *s)
{
    return rp_attention_cudnn_call_buffer_bytes(
        s, (size_t)(RP_ATTN_DOCUMENTS_MAX_PADDING * s->nseq * s->seqlen));
}

size_t rp_attention_cudnn_reserve_bytes(const rp_attn_shape *s, size_t device_total)
{
    size_t ws = rp_attention_cudnn_workspace_budget(s, device_total);
    return ws ? ws + rp_attention_cudnn_buffer_bytes(s) : 0;
}

int rp_attention_run_documents(int train_documents, int eval_documents, int cudnn_documents_on)
{
    if (cudnn_documents_on && (train_documents || eval_documents))
        return RP_ATTENTION_DOCUMENTS_CUDNN;
    return train_documents ? RP_ATTENTION_DOCUMENTS_OWN : RP_ATTENTION_NO_DOCUMENTS;
}

size_t rp_attention_run_reserve_bytes(int mode, int cudnn_unproven_ok, int sm, int documents,
                                      int gpt_oss, const rp_attn_shape *s, size_t device_total)
{
#ifdef RP_HAVE_CUDNN
    if (mode == RP_ATTENTION_OWN || (mode == RP_ATTENTION_AUTO && !cudnn_unproven_ok) ||
        (sm > 0 && sm < 80) || documents == RP_ATTENTION_DOCUMENTS_OWN || gpt_oss)
        return 0;
    if (documents == RP_ATTENTION_DOCUMENTS_CUDNN) {
        size_t ws = rp_attention_cudnn_documents_budget(s, device_total);
        return ws ? ws + rp_attention_cudnn_documents_buffer_bytes(s) : 0;
    }
    return rp_attention_cudnn_reserve_bytes(s, device_total);
#else
    (void)mode, (void)cudnn_unproven_ok, (void)sm, (void)documents, (void)gpt_oss, (void)s,
        (void)device_total;
    return 0;
#endif
}
