/* The mixture-of-experts MLP (see moe.h), composed over the kernel ops. */
#include "model/moe.h"

#include <string.h>

#define OP RP_OP

void rp_moe_carve(const rp_kernel_ops *ops, const rp_model_config *cfg, size_t T, rp_carver *sv,
                  rp_carver *sc, rp_moe_bufs *b)
{
    const size_t E = (size_t)cfg->moe.num_experts, K = (size_t)cfg->moe.num_experts_per_tok,
                 H = (size_t)cfg->hidden_size, I = (size_t)cfg->moe.moe_intermediate_size;
    const int one = ops->compute_dtype == RP_F32;
    memset(b, 0, sizeof *b);
    b->probs = rp_carve_f32(sv, T * E);
    b->experts = rp_carve_bytes(sv, T * K * sizeof(int32_t));
    b->weights = rp_carve_f32(sv, T * K);
    b->offsets = rp_carve_bytes(sv, (E + 1) * sizeof(int32_t));
    b->order = rp_carve_bytes(sv, T * K * sizeof(int32_t));
    b->where = rp_carve_bytes(sv, T * K * sizeof(int32_t));
    b->g = rp_carve_f32(sv, T * K * I);
    b->u = rp_carve_f32(sv, T * K * I);
    b->m = rp_carve_compute(sv, ops, T * K * I);

    b->logits = rp_carve_f32(sc, T * E);
    b->xg = rp_carve_compute(sc, ops, T * K * H);
    b->yg = rp_carve_f32(sc, T * K * H);
    b->z = rp_carve_f32(sc, T * K * I);
    b->dg = one ? (void *)b->g : rp_carve_compute(sc, ops, T * K * I);
    b->du = one ? (void *)b->u : rp_carve_compute(sc, ops, T * K * I);
    b->dweights = rp_carve_f32(sc, T * K);
    b->dlogits = rp_carve_f32(sc, T * E);
    b->dlogits_c = one ? (void *)b->dlogits : rp_carve_compute(sc, ops, T * E);
    if (cfg->arch == RP_ARCH_GPT_OSS)
        b->bias_dot = rp_carve_f32(sc, T * K);
}

/* Expert projection i's (0 gate, 1 up, 2 down) adapters, or NULL. */
static const rp_expert_adapters *experts_of(const rp_moe_lora *lo, int i)
{
    return lo ? lo->experts[i] : NULL;
}

rp_status rp_moe_forward(const rp_kernels *k, const rp_model_config *cfg,
                         const rp_moe_weights *mw, const rp_moe_lora *lo, const void *h,
                         const float *x2, float *y, int64_t T, const rp_moe_bufs *b,
                         float *stats, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, K = cfg->moe.num_experts_per_tok,
                  H = cfg->hidden_size, I = cfg->moe.moe_intermediate_size, n = T * K;
    const rp_dtype wdt = mw->dtype;
    OP(linear_forward, h, mw->router, wdt, mw->router_bias, NULL, b->logits, NULL, T, H, E);
    if (lo && lo->router)
        RP_TRY(rp_lora_forward(k, cfg, lo->call, lo->router, h, lo->nseq, lo->seqlen, b->logits,
                               NULL, &lo->router_bufs, err));
    OP(moe_route, b->logits, T, E, K, cfg->moe.norm_topk_prob, b->probs, b->experts, b->weights);
    OP(moe_group, b->experts, T, K, E, b->offsets, b->order, b->where);
    if (stats)
        OP(moe_stats, b->probs, b->offsets, T, E, stats);
    OP(moe_gather, h, b->order, NULL, T, K, H, b->xg);
    OP(grouped_linear_forward, b->xg, mw->gate, wdt, b->offsets, E, n, H, I, b->g, NULL);
    OP(grouped_linear_forward, b->xg, mw->up, wdt, b->offsets, E, n, H, I, b->u, NULL);
    if (mw->gpt_oss) {
        OP(grouped_bias_forward, b->g, NULL, mw->bias[0], b->offsets, E, n, I);
        OP(grouped_bias_forward, b->u, NULL, mw->bias[1], b->offsets, E, n, I);
    }
    const rp_expert_adapters *gate = experts_of(lo, 0), *up = experts_of(lo, 1),
                             *down = experts_of(lo, 2);
    if (gate)
        RP_TRY(rp_moe_lora_forward(k, cfg, gate, b->xg, b->offsets, n, b->g, &lo->expert_bufs[0],
                                   err));
    if (up)
        RP_TRY(rp_moe_lora_forward(k, cfg, up, b->xg, b->offsets, n, b->u, &lo->expert_bufs[1],
                                   err));
    if (mw->gpt_oss)
        OP(swiglu_clamped_forward, b->g, b->u, (float)cfg->oss.swiglu_limit,
           (float)cfg->oss.swiglu_alpha, b->m, n * I);
    else
        OP(swiglu_forward, b->g, b->u, b->m, n * I);
    if (!y) /* what the down adapter's backward needs, without its output */
        return down ? rp_moe_lora_forward(k, cfg, down, b->m, b->offsets, n, NULL,
                                          &lo->expert_bufs[2], err)
                    : RP_OK;
    OP(grouped_linear_forward, b->m, mw->down, wdt, b->offsets, E, n, I, H, b->yg, NULL);
    if (mw->gpt_oss)
        OP(grouped_bias_forward, b->yg, NULL, mw->bias[2], b->offsets, E, n, H);
    if (down)
        RP_TRY(rp_moe_lora_forward(k, cfg, down, b->m, b->offsets, n, b->yg, &lo->expert_bufs[2],
                                   err));
    OP(moe_combine, b->yg, b->weights, b->where, x2, T, K, H, y);
    return RP_OK;
}

rp_status rp_moe_backward(const rp_kernels *k, const rp_model_config *cfg,
                          const rp_moe_weights *mw, const rp_moe_lora *lo, const void *h,
                          const void *dy_c, const float *aux_grad, float *dh, int64_t T,
                          const rp_moe_bufs *b, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, K = cfg->moe.num_experts_per_tok,
                  H = cfg->hidden_size, I = cfg->moe.moe_intermediate_size, n = T * K;
    const rp_dtype wdt = mw->dtype;
    const int grads = mw->drouter != NULL;
    const rp_expert_adapters *gate = experts_of(lo, 0), *up = experts_of(lo, 1),
                             *down = experts_of(lo, 2);
    /* down projection: z = dy Wd (dy gathered unweighted; with an adapter
     * + s (dy Bd) Ad), dWd += (w dy)^T m and the adapter's weights from w
     * dy, then the routing weights' gradient and dm = w z (in place) */
    OP(moe_gather, dy_c, b->order, NULL, T, K, H, b->xg);
    OP(grouped_linear_backward_input, b->xg, mw->down, wdt, b->offsets, E, n, I, H, b->z, NULL,
       0);
    if (down) {
        RP_TRY(rp_moe_lora_dt(k, cfg, down, b->xg, b->offsets, n, &lo->expert_bufs[2], err));
        RP_TRY(rp_moe_lora_input(k, cfg, down, b->offsets, n, b->z, &lo->expert_bufs[2], err));
    }
    /* gpt-oss: each pair's dy . bd_e (bd_e as a [1, H] matrix), while xg
     * holds the unweighted dy */
    if (mw->gpt_oss)
        OP(grouped_linear_forward, b->xg, (const void *const *)mw->bias[2], RP_F32, b->offsets,
           E, n, H, 1, b->bias_dot, NULL);
    if (grads || down)
        OP(moe_gather, dy_c, b->order, b->weights, T, K, H, b->xg);
    if (grads)
        OP(grouped_linear_backward_weight, b->xg, b->m, b->offsets, E, n, I, H, mw->ddown);
    /* the down bias's gradient: the weighted dy over the expert's rows
     * (xg is fp32 on the tables gpt-oss runs on: model/block.c) */
    if (grads && mw->gpt_oss)
        OP(grouped_bias_backward, (const float *)b->xg, b->offsets, E, n, H, mw->dbias[2]);
    if (down)
        RP_TRY(rp_moe_lora_weights(k, cfg, down, b->m, b->xg, b->offsets, n,
                                   &lo->expert_bufs[2], err));
    OP(moe_down_backward, b->z, b->m, b->weights, b->order, T, K, I, b->z, NULL, b->dweights);
    if (mw->gpt_oss) /* dweights[p] += bias_dot[where[p]] */
        OP(moe_scatter_add, b->bias_dot, b->where, n, 1, 1, b->dweights, 1);
    /* SwiGLU, then gate and up (their input gathered again) */
    if (mw->gpt_oss)
        OP(swiglu_clamped_backward, b->g, b->u, (float)cfg->oss.swiglu_limit,
           (float)cfg->oss.swiglu_alpha, b->z, b->dg, b->du, n * I);
    else
        OP(swiglu_backward, b->g, b->u, b->z, b->dg, b->du, n * I);
    if (grads || gate || up)
        OP(moe_gather, h, b->order, NULL, T, K, H, b->xg);
    if (grads) {
        OP(grouped_linear_backward_weight, b->dg, b->xg, b->offsets, E, n, H, I, mw->dgate);
        OP(grouped_linear_backward_weight, b->du, b->xg, b->offsets, E, n, H, I, mw->dup);
        if (mw->gpt_oss) {
            OP(grouped_bias_backward, (const float *)b->dg, b->offsets, E, n, I, mw->dbias[0]);
            OP(grouped_bias_backward, (const float *)b->du, b->offsets, E, n, I, mw->dbias[1]);
        }
    }
    OP(grouped_linear_backward_input, b->dg, mw->gate, wdt, b->offsets, E, n, H, I, b->yg, NULL,
       0);
    OP(grouped_linear_backward_input, b->du, mw->up, wdt, b->offsets, E, n, H, I, b->yg, NULL,
       1);
    /* the adapters: weights, then the input gradient from the dt they left */
    if (gate) {
        RP_TRY(rp_moe_lora_weights(k, cfg, gate, b->xg, b->dg, b->offsets, n,
                                   &lo->expert_bufs[0], err));
        RP_TRY(rp_moe_lora_input(k, cfg, gate, b->offsets, n, b->yg, &lo->expert_bufs[0], err));
    }
    if (up) {
        RP_TRY(rp_moe_lora_weights(k, cfg, up, b->xg, b->du, b->offsets, n, &lo->expert_bufs[1],
                                   err));
        RP_TRY(rp_moe_lora_input(k, cfg, up, b->offsets, n, b->yg, &lo->expert_bufs[1], err));
    }
    OP(moe_scatter_add, b->yg, b->where, T, K, H, dh, 0);
    /* the router: dlogits from the weights' gradient and the auxiliary loss */
    OP(moe_route_backward, b->probs, b->experts, b->dweights, aux_grad, T, E, K,
       cfg->moe.norm_topk_prob, b->dlogits, b->dlogits == b->dlogits_c ? NULL : b->dlogits_c);
    if (grads)
        OP(linear_backward_weight, b->dlogits_c, h, mw->drouter, T, H, E);
    if (grads && mw->drouter_bias)
        OP(column_sum_accumulate, b->dlogits, T, E, mw->drouter_bias, b->partial);
    OP(linear_backward_input, b->dlogits_c, mw->router, wdt, dh, NULL, T, H, E, 1);
    if (lo && lo->router) {
        RP_TRY(rp_lora_backward_weights(k, cfg, lo->call, lo->router, h, b->dlogits_c, lo->nseq,
                                        lo->seqlen, &lo->router_bufs, err));
        RP_TRY(rp_lora_backward_input(k, cfg, lo->call, lo->router, lo->nseq, lo->seqlen, dh,
                                      &lo->router_bufs, err));
    }
    return RP_OK;
}
