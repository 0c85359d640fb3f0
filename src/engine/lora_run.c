/* A LoRA run's set-up and outputs (lora_run.h). */
#include "engine/lora_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "engine/engine_impl.h"
#include "engine/stage_weights.h"
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
