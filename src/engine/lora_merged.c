/* --save-merged (lora_run.h): the base with each targeted W replaced by
 * W + scaling B A, written a piece at a time. Every tensor of the file is a
 * source (io/model_dir.h) that the safetensors writer asks for a bounded
 * run of elements: the run is read from the frozen base where it lies
 * (mapped bf16 or fp32, FP8 dequantised, or converted into the store:
 * gpt-oss's MXFP4 experts) and the adapter's product added to it. The
 * merged model is never held whole: for Qwen3-235B-A22B it is 940 GB in
 * fp32, for gpt-oss-20b 84 GB, more than the hosts that train them have.
 * gpt-oss's fused experts read these sources through io/saved_tensors.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "engine/lora_run.h"
#include "io/config_lora.h"
#include "io/expert_layout.h"
#include "io/gpt_oss_experts.h"
#include "io/model_dir.h"

/* One tensor of the merged model: piece `piece` of the base's layer
 * `layer`, and, when a projection is targeted, its adapter: a [rank, in],
 * b the first of b's rows that are this weight's [out, rank] (both in the
 * masters, which outlive the save). */
typedef struct merged_tensor {
    const rp_frozen_base *base;
    int layer, piece;
    const float *a, *b; /* NULL: not targeted */
    int64_t in;
    int rank;
    double scaling;
} merged_tensor;

/* Elements [first, first + count) of W + scaling B A: each in double over
 * the rank, then rounded once, so every element has the bits the whole
 * matrix merged at once gave it, however the file's pieces fall. */
static void fill_merged(const void *ctx, int64_t first, size_t count, float *dst)
{
    const merged_tensor *m = ctx;
    rp_frozen_base_piece_f32(m->base, m->layer, m->piece, first, count, dst);
    if (!m->a)
        return;
    const float *A = m->a, *B = m->b;
    const int64_t in = m->in;
    const int r = m->rank;
    const double scaling = m->scaling;
    /* threads for a file's piece; a strip of gpt-oss's fused experts (a
     * few values a row) is not worth starting them */
#pragma omp parallel for schedule(static) if (count >= 4096)
    for (int64_t k = 0; k < (int64_t)count; k++) {
        const int64_t at = first + k, i = at / in, j = at % in;
        double s = 0.0;
        for (int q = 0; q < r; q++)
            s += (double)B[i * r + q] * (double)A[(int64_t)q * in + j];
        dst[k] = (float)((double)dst[k] + scaling * s);
    }
}

/* The projection a base tensor is the weight of (-1: none), and the
 * expert whose it is (*expert, 0 when it is not an expert's); *row: the
 * first row of the adapter's B that is this weight's (gpt-oss's up, whose
 * adapter is gate_up_proj's: B_e's rows I .. 2I - 1; else 0). */
static int proj_of(const rp_model_config *cfg, const char *name, int64_t *expert, int64_t *row)
{
    char fused[256];
    int part, bias;
    *row = 0;
    if (cfg->arch == RP_ARCH_GPT_OSS) { /* io/gpt_oss_experts.h's names, mlp.router */
        static const char router[] = ".mlp.router.weight";
        const size_t n = strlen(name), m = sizeof router - 1;
        if (rp_gpt_oss_expert_name(name, fused, sizeof fused, expert, &part, &bias)) {
            if (bias)
                return -1;
            *row = part == 1 ? cfg->moe.moe_intermediate_size : 0;
            return part == 2 ? RP_LORA_DOWN_PROJ : RP_LORA_GATE_PROJ;
        }
        *expert = 0;
        if (n >= m && strcmp(name + n - m, router) == 0)
            return RP_LORA_ROUTER;
        for (int p = 0; p <= RP_LORA_O_PROJ; p++) {
            char suffix[64];
            snprintf(suffix, sizeof suffix, ".%s.weight", rp_lora_proj_name((rp_lora_proj)p));
            const size_t b = strlen(suffix);
            if (n >= b && strcmp(name + n - b, suffix) == 0)
                return p;
        }
        return -1;
    }
    if (!rp_expert_fused_name(name, fused, sizeof fused, expert, &part)) /* io/expert_layout.h */
        *expert = 0;
    for (int p = 0; p < RP_LORA_NPROJ; p++) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, ".%s.weight", rp_lora_proj_name((rp_lora_proj)p));
        size_t a = strlen(name), b = strlen(suffix);
        if (a >= b && strcmp(name + a - b, suffix) == 0)
            return p;
    }
    return -1;
}

rp_status rp_lora_save_merged(const rp_params *p, const rp_frozen_base *base,
                              const rp_train_options *o, rp_dtype dtype,
                              const char *template_config, const rp_companions *companions,
                              const rp_progress_hook *progress, rp_error *err)
{
    rp_model_config cfg = p->cfg;
    memset(&cfg.lora, 0, sizeof cfg.lora);
    rp_layer_desc *L = NULL;
    int nl = 0;
    RP_TRY(rp_model_base_layout(&cfg, &L, &nl, err));
    int count = 0;
    for (int l = 0; l < nl; l++)
        count += L[l].nparams;
    const size_t slots = (size_t)(count ? count : 1);
    rp_tensor_ref *t = calloc(slots, sizeof *t);
    merged_tensor *m = calloc(slots, sizeof *m);
    rp_tensor_source *sources = calloc(slots, sizeof *sources);
    rp_status s = t && m && sources
                      ? RP_OK
                      : rp_error_set(err, RP_ERR_NOMEM, "--save-merged: the table of %d tensors",
                                     count);
    const double scaling = rp_lora_scaling(&p->cfg.lora);
    const int rank = p->cfg.lora.rank;
    int k = 0;
    rp_lora_offsets off;
    for (int l = 0; s == RP_OK && l < nl; l++) {
        if (L[l].kind == RP_LAYER_BLOCK)
            rp_lora_offsets_get(&p->cfg, L[l].block, &off);
        for (int i = 0; i < L[l].nparams; i++, k++) {
            const rp_param_desc *d = &L[l].params[i];
            const int piece = rp_frozen_base_piece_of(base, l, d->name);
            if (piece < 0) {
                s = rp_error_set(err, RP_ERR_INTERNAL, "--save-merged: the frozen base's layer "
                                 "%d has no tensor '%s'", l, d->name);
                break;
            }
            m[k] = (merged_tensor){base, l, piece, NULL, NULL, d->shape[1], rank, scaling};
            int64_t expert = 0, row = 0;
            int proj = L[l].kind == RP_LAYER_BLOCK ? proj_of(&cfg, d->name, &expert, &row) : -1;
            if (proj >= 0 && off.a[proj] != SIZE_MAX) { /* targeted, per expert or not */
                const float *ad = p->st[l].master;
                const size_t e = (size_t)expert * off.expert_stride[proj];
                m[k].a = ad + off.a[proj] + e;
                m[k].b = ad + off.b[proj] + e + (size_t)(row * rank);
            }
            sources[k] = (rp_tensor_source){fill_merged, &m[k]};
            t[k] = (rp_tensor_ref){d->name, d->ndim, {d->shape[0], d->shape[1]}, NULL,
                                   &sources[k]};
        }
    }
    if (s == RP_OK)
        s = rp_model_dir_save(o->save_merged, t, count, dtype, &cfg, template_config,
                              companions, progress, err);
    free(sources);
    free(m);
    free(t);
    free(L);
    return s;
}
