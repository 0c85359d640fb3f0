/* LoRA on a mixture of experts' experts (model/moe.h): model/lora.h's
 * adapter steps, each expert's A and B over its grouped rows by the
 * grouped GEMMs. */
#include "io/config_lora.h"
#include "model/moe.h"

#define OP RP_OP

static float scaling_of(const rp_model_config *cfg)
{
    return (float)rp_lora_scaling(&cfg->lora);
}

rp_status rp_moe_lora_forward(const rp_kernels *k, const rp_model_config *cfg,
                              const rp_expert_adapters *a, const void *x, const int32_t *offsets,
                              int64_t n, float *y, const rp_lora_bufs *b, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, r = cfg->lora.rank;
    const rp_dtype cdt = k->ops->compute_dtype; /* the adapters' */
    OP(grouped_linear_forward, x, a->A, cdt, offsets, E, n, a->in, r, b->t, NULL);
    OP(scaled_add, b->t, scaling_of(cfg), NULL, b->ts, n * r, 0);
    if (!y)
        return RP_OK;
    OP(grouped_linear_forward, b->ts, a->B, cdt, offsets, E, n, r, a->out, b->u, NULL);
    OP(scaled_add, b->u, 1.0f, y, NULL, n * a->out, 1);
    return RP_OK;
}

rp_status rp_moe_lora_dt(const rp_kernels *k, const rp_model_config *cfg,
                         const rp_expert_adapters *a, const void *dy, const int32_t *offsets,
                         int64_t n, const rp_lora_bufs *b, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, r = cfg->lora.rank;
    const rp_dtype cdt = k->ops->compute_dtype;
    OP(grouped_linear_backward_input, dy, a->B, cdt, offsets, E, n, r, a->out, b->t, NULL, 0);
    OP(scaled_add, b->t, scaling_of(cfg), NULL, b->dt, n * r, 0);
    return RP_OK;
}

rp_status rp_moe_lora_weights(const rp_kernels *k, const rp_model_config *cfg,
                              const rp_expert_adapters *a, const void *x, const void *dy,
                              const int32_t *offsets, int64_t n, const rp_lora_bufs *b,
                              rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, r = cfg->lora.rank;
    OP(grouped_linear_backward_weight, dy, b->ts, offsets, E, n, r, a->out, a->dB);
    RP_TRY(rp_moe_lora_dt(k, cfg, a, dy, offsets, n, b, err));
    OP(grouped_linear_backward_weight, b->dt, x, offsets, E, n, a->in, r, a->dA);
    return RP_OK;
}

rp_status rp_moe_lora_input(const rp_kernels *k, const rp_model_config *cfg,
                            const rp_expert_adapters *a, const int32_t *offsets, int64_t n,
                            float *dx, const rp_lora_bufs *b, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, r = cfg->lora.rank;
    const rp_dtype cdt = k->ops->compute_dtype;
    OP(grouped_linear_backward_input, b->dt, a->A, cdt, offsets, E, n, a->in, r, dx, NULL, 1);
    return RP_OK;
}
