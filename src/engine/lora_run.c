/* A LoRA run's set-up and outputs (lora_run.h). */
#include "engine/lora_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "engine/engine_impl.h"
#include "engine/stage_weights.h"
#include "io/expert_layout.h"
#include "io/gpt_oss_experts.h"
#include "io/model_dir.h"
#include "io/peft.h"

rp_status rp_lora_resolve(const rp_train_options *o, rp_model_config *cfg, rp_error *err)
{
    memset(&cfg->lora, 0, sizeof cfg->lora);
    if (o->lora_rank < 1)
        return RP_OK;
    rp_lora_config *c = &cfg->lora;
    c->rank = (int)o->lora_rank;
    c->alpha = (o->lora_given & RP_LORA_GIVEN_ALPHA) ? o->lora_alpha : (double)o->lora_rank;
    c->dropout = o->lora_dropout;
    c->use_rslora = o->use_rslora;
    c->targets = RP_LORA_ALL_LINEAR;
    if (o->lora_targets) {
        RP_TRY(rp_lora_targets_parse(o->lora_targets, "--lora-targets", &c->targets, err));
        const char *why = c->targets == RP_LORA_ALL_LINEAR
                              ? NULL
                              : rp_lora_refused_targets(cfg, c->targets);
        if (why)
            return rp_error_set(err, RP_ERR_UNSUPPORTED, "--lora-targets %s: %s",
                                o->lora_targets, why);
    }
    /* a dense model has no router: its targets stay the seven projections */
    c->targets = rp_lora_model_targets(cfg, c->targets);
    if (c->targets == 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--lora-targets %s: the model has none of "
                            "these (gate, the router, is a mixture of experts')",
                            o->lora_targets ? o->lora_targets : "");
    if (!o->lora_init)
        return RP_OK;
    rp_model_config base = *cfg;
    memset(&base.lora, 0, sizeof base.lora);
    rp_lora_config a;
    RP_TRY(rp_peft_read(o->lora_init, &base, &a, err));
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", o->lora_init);
    if (a.rank != c->rank)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: field \"r\" is %d, --lora-rank is %d",
                            path, a.rank, c->rank);
    if ((o->lora_given & RP_LORA_GIVEN_TARGETS) && a.targets != c->targets)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: field \"target_modules\" names other "
                            "projections than --lora-targets %s", path, o->lora_targets);
    if ((o->lora_given & RP_LORA_GIVEN_ALPHA) && a.alpha != c->alpha)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: field \"lora_alpha\" is %g, "
                            "--lora-alpha is %g", path, a.alpha, c->alpha);
    if ((o->lora_given & RP_LORA_GIVEN_RSLORA) && a.use_rslora != c->use_rslora)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: field \"use_rslora\" is %s, "
                            "--use-rslora is %s", path, a.use_rslora ? "true" : "false",
                            c->use_rslora ? "given" : "not given");
    c->targets = a.targets;
    c->alpha = a.alpha;
    c->use_rslora = a.use_rslora;
    if (!(o->lora_given & RP_LORA_GIVEN_DROPOUT))
        c->dropout = a.dropout;
    return RP_OK;
}

static float *adapter_place(void *arg, int block, int expert, rp_lora_proj proj, int b);

rp_status rp_lora_load_adapters(rp_params *p, const rp_train_options *o, rp_error *err)
{
    if (!o->lora_init) {
        rp_params_init_random(p, o->seed);
        return RP_OK;
    }
    if (p->cfg.arch == RP_ARCH_GPT_OSS) { /* its experts' adapters: fused tensors */
        RP_TRY(rp_peft_load(o->lora_init, &p->cfg, &p->cfg.lora, adapter_place, p, err));
        for (int l = 0; l < p->nlayers; l++)
            rp_params_sync_compute(p, l);
        return RP_OK;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", o->lora_init);
    return rp_params_load_file(p, path, err);
}

void rp_lora_call_of(const rp_engine *e, int l, int64_t t, int64_t first_sample,
                     const void *adapters, rp_lora_call *c)
{
    memset(c, 0, sizeof *c);
    c->adapters = adapters;
    if (!rp_stage_base_copied(e, l) && !rp_stage_base_per_use(e, l)) { /* read where it lies */
        c->nbase = rp_frozen_base_pieces(e->base, l, &c->base);
        c->base_dtype = rp_frozen_base_dtype(e->base);
    }
    c->seed = e->o->seed;
    c->step = t;
    c->layer = (int32_t)(l - 1);
    c->first_sample = first_sample;
}

/* The adapter's tensor (block, expert or -1, projection, A or B) in the
 * masters. */
static float *adapter_place(void *arg, int block, int expert, rp_lora_proj proj, int b)
{
    const rp_params *p = arg;
    rp_lora_offsets off;
    rp_lora_offsets_get(&p->cfg, block, &off);
    const size_t at = (b ? off.b[proj] : off.a[proj]) +
                      (expert > 0 ? (size_t)expert * off.expert_stride[proj] : 0);
    return p->st[1 + block].master + at;
}

static const float *adapter_tensor(void *arg, int block, int expert, rp_lora_proj proj, int b)
{
    return adapter_place(arg, block, expert, proj, b);
}

rp_status rp_lora_save_adapter(const rp_params *p, const rp_train_options *o, rp_error *err)
{
    return rp_peft_write(o->save_dir, &p->cfg, &p->cfg.lora, o->model_dir, adapter_tensor,
                         (void *)p, err);
}

/* W (out x in, fp32) += scaling * B A, in double per element. */
static void merge(float *W, const float *A, const float *B, int64_t in, int64_t out, int r,
                  double scaling)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < out; i++)
        for (int64_t j = 0; j < in; j++) {
            double s = 0.0;
            for (int k = 0; k < r; k++)
                s += (double)B[i * r + k] * (double)A[(int64_t)k * in + j];
            W[i * in + j] = (float)((double)W[i * in + j] + scaling * s);
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
                              rp_error *err)
{
    rp_model_config cfg = p->cfg;
    memset(&cfg.lora, 0, sizeof cfg.lora);
    rp_layer_desc *L = NULL;
    int nl = 0;
    RP_TRY(rp_model_base_layout(&cfg, &L, &nl, err));
    size_t total = 0;
    int count = 0;
    for (int l = 0; l < nl; l++) {
        total += L[l].numel;
        count += L[l].nparams;
    }
    float *w = malloc((total ? total : 1) * sizeof(float));
    rp_tensor_ref *t = calloc((size_t)(count ? count : 1), sizeof *t);
    rp_status s = w && t ? RP_OK
                         : rp_error_set(err, RP_ERR_NOMEM, "--save-merged: %zu MiB of weights",
                                        total * sizeof(float) >> 20);
    const double scaling = rp_lora_scaling(&p->cfg.lora);
    size_t at = 0;
    int k = 0;
    rp_lora_offsets off;
    for (int l = 0; s == RP_OK && l < nl; l++, at += L[l - 1].numel) {
        if (L[l].kind == RP_LAYER_BLOCK)
            rp_lora_offsets_get(&p->cfg, L[l].block, &off);
        for (int i = 0; i < L[l].nparams; i++, k++) {
            const rp_param_desc *d = &L[l].params[i];
            float *dst = w + at + d->offset;
            s = rp_frozen_base_tensor_f32(base, l, d->name, dst, err);
            if (s != RP_OK)
                break;
            int64_t expert = 0, row = 0;
            int proj = L[l].kind == RP_LAYER_BLOCK ? proj_of(&cfg, d->name, &expert, &row) : -1;
            if (proj >= 0 && off.a[proj] != SIZE_MAX) { /* targeted, per expert or not */
                const float *ad = p->st[l].master;
                const size_t e = (size_t)expert * off.expert_stride[proj];
                merge(dst, ad + off.a[proj] + e,
                      ad + off.b[proj] + e + (size_t)(row * p->cfg.lora.rank), d->shape[1],
                      d->shape[0], p->cfg.lora.rank, scaling);
            }
            t[k] = (rp_tensor_ref){d->name, d->ndim, {d->shape[0], d->shape[1]}, dst, NULL};
        }
    }
    if (s == RP_OK)
        s = rp_model_dir_save(o->save_merged, t, count, dtype, &cfg, template_config,
                              companions, err);
    free(w);
    free(t);
    free(L);
    return s;
}
