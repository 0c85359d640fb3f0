/* The load-balancing loss (see router_aux.h). */
#include "engine/router_aux.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"

double rp_router_aux_coef(const rp_model_config *cfg, const rp_train_options *o)
{
    if (o->router_aux_coef_set || o->router_aux_coef > 0)
        return o->router_aux_coef;
    return cfg->moe.output_router_logits ? cfg->moe.router_aux_loss_coef : 0.0;
}

rp_status rp_router_aux_init(rp_router_aux *a, const rp_model_config *cfg,
                             const rp_train_options *o, int layers, rp_error *err)
{
    memset(a, 0, sizeof *a);
    if (!rp_model_has_moe(cfg)) {
        if (o->router_aux_coef > 0)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "--router-aux-coef: the model has no "
                                "mixture-of-experts block");
        return RP_OK;
    }
    a->coef = rp_router_aux_coef(cfg, o);
    if (a->coef <= 0)
        return RP_OK;
    a->experts = cfg->moe.num_experts;
    a->moe_index = malloc(sizeof(int) * (size_t)layers);
    if (!a->moe_index)
        return rp_error_set(err, RP_ERR_NOMEM, "router statistics: %d layers", layers);
    for (int l = 0; l < layers; l++) /* layer l is block l - 1 */
        a->moe_index[l] = l >= 1 && rp_model_block_is_moe(cfg, l - 1) ? a->nmoe++ : -1;
    a->floats = (size_t)a->nmoe * 2 * (size_t)a->experts;
    return RP_OK;
}

void rp_router_aux_free(rp_router_aux *a)
{
    free(a->moe_index);
    memset(a, 0, sizeof *a);
}

/* Microbatch m's statistics of iteration t: nmoe blocks of [2E]. */
static float *slot(const rp_engine *e, int64_t t, int64_t m)
{
    return e->act + e->arena.router +
           ((size_t)(t % RP_ARENA_RING) * (size_t)e->microbatches + (size_t)m) * e->raux.floats;
}

float *rp_router_stats_slot(const rp_engine *e, int64_t t, int64_t m, int l)
{
    const rp_router_aux *a = &e->raux;
    if (a->coef <= 0 || a->moe_index[l] < 0)
        return NULL;
    return slot(e, t, m) + (size_t)a->moe_index[l] * 2 * (size_t)a->experts;
}

void rp_router_aux_of(const rp_engine *e, int64_t t, int64_t m, double *aux, float *grad)
{
    const rp_router_aux *a = &e->raux;
    const int64_t E = a->experts;
    const float *st = slot(e, t, m);
    const double N = (double)a->nmoe * (double)e->tokens_per_micro;
    double sum = 0.0;
    for (int64_t x = 0; x < E; x++) {
        double c = 0.0, p = 0.0; /* blocks in order */
        for (int b = 0; b < a->nmoe; b++) {
            c += st[(size_t)b * 2 * (size_t)E + (size_t)x];
            p += st[(size_t)b * 2 * (size_t)E + (size_t)(E + x)];
        }
        sum += (c / N) * (p / N);
        if (grad)
            grad[x] = (float)(a->coef * (double)E * c / ((double)e->batch_micro * N * N));
    }
    if (aux)
        *aux = (double)E * sum;
}

double *rp_router_aux_values(const rp_engine *e, int64_t t)
{
    return (double *)(e->act + e->arena.aux) + (t % RP_ARENA_RING) * e->microbatches;
}
