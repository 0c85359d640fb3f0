/* LoRA-augmented projections over the kernel ops (model/lora.h). */
#include "model/lora.h"

#include "io/config_lora.h"
#include "model/carve.h"

#define OP RP_OP

/* The dropout key of this call's projection (kernels/ops.h), for rows
 * from row0 of the microbatch on. */
static rp_dropout_site site_of(const rp_model_config *cfg, const rp_lora_call *lc,
                               const rp_lora_adapter *a, int64_t row0, int64_t seqlen)
{
    rp_dropout_site s = {.seed = lc->seed,
                         .step = lc->step,
                         .layer = lc->layer,
                         .proj = (int32_t)a->proj,
                         .first_sample = lc->first_sample + row0 / seqlen,
                         .rows_per_sample = seqlen,
                         .first_row = row0 % seqlen,
                         .p = (float)cfg->lora.dropout};
    return s;
}

/* The adapter's input: x, or dropout(x) made into b->xd. */
static rp_status input_of(const rp_kernels *k, const rp_model_config *cfg, const rp_lora_call *lc,
                          const rp_lora_adapter *a, const void *x, int64_t row0, int64_t T,
                          int64_t seqlen, const rp_lora_bufs *b, const void **in, rp_error *err)
{
    *in = x;
    if (cfg->lora.dropout > 0) {
        rp_dropout_site s = site_of(cfg, lc, a, row0, seqlen);
        OP(dropout, &s, x, b->xd, k->ops->compute_dtype, T, a->in, 0);
        *in = b->xd;
    }
    return RP_OK;
}

static float scaling_of(const rp_model_config *cfg)
{
    return (float)rp_lora_scaling(&cfg->lora);
}

rp_status rp_lora_forward_rows(const rp_kernels *k, const rp_model_config *cfg,
                               const rp_lora_call *lc, const rp_lora_adapter *a, const void *x,
                               int64_t row0, int64_t T, int64_t seqlen, float *y,
                               void *y_compute, const rp_lora_bufs *b, rp_error *err)
{
    const int64_t r = cfg->lora.rank;
    const rp_dtype cdt = k->ops->compute_dtype; /* the adapters' */
    const void *in;
    RP_TRY(input_of(k, cfg, lc, a, x, row0, T, seqlen, b, &in, err));
    OP(linear_forward, in, a->A, cdt, NULL, NULL, b->t, NULL, T, a->in, r);
    OP(scaled_add, b->t, scaling_of(cfg), NULL, b->ts, T * r, 0);
    if (!y)
        return RP_OK;
    OP(linear_forward, b->ts, a->B, cdt, NULL, NULL, b->u, NULL, T, r, a->out);
    OP(scaled_add, b->u, 1.0f, y, y_compute, T * a->out, 1);
    return RP_OK;
}

rp_status rp_lora_backward_weights_rows(const rp_kernels *k, const rp_model_config *cfg,
                                        const rp_lora_call *lc, const rp_lora_adapter *a,
                                        const void *x, const void *dy, int64_t row0, int64_t T,
                                        int64_t seqlen, const rp_lora_bufs *b, rp_error *err)
{
    const int64_t r = cfg->lora.rank;
    const rp_dtype cdt = k->ops->compute_dtype; /* the adapters' */
    OP(linear_backward_weight, dy, b->ts, a->dB, T, r, a->out);
    OP(linear_backward_input, dy, a->B, cdt, b->t, NULL, T, r, a->out, 0);
    OP(scaled_add, b->t, scaling_of(cfg), NULL, b->dt, T * r, 0);
    const void *in;
    RP_TRY(input_of(k, cfg, lc, a, x, row0, T, seqlen, b, &in, err));
    OP(linear_backward_weight, b->dt, in, a->dA, T, a->in, r);
    return RP_OK;
}

rp_status rp_lora_backward_input_rows(const rp_kernels *k, const rp_model_config *cfg,
                                      const rp_lora_call *lc, const rp_lora_adapter *a,
                                      int64_t row0, int64_t T, int64_t seqlen, float *dx,
                                      const rp_lora_bufs *b, rp_error *err)
{
    const int64_t r = cfg->lora.rank;
    const rp_dtype cdt = k->ops->compute_dtype; /* the adapters' */
    if (cfg->lora.dropout > 0) {
        rp_dropout_site s = site_of(cfg, lc, a, row0, seqlen);
        OP(linear_backward_input, b->dt, a->A, cdt, b->dxd, NULL, T, a->in, r, 0);
        OP(dropout, &s, b->dxd, dx, RP_F32, T, a->in, 1);
    } else {
        OP(linear_backward_input, b->dt, a->A, cdt, dx, NULL, T, a->in, r, 1);
    }
    return RP_OK;
}

rp_status rp_lora_forward(const rp_kernels *k, const rp_model_config *cfg, const rp_lora_call *lc,
                          const rp_lora_adapter *a, const void *x, int64_t nseq, int64_t seqlen,
                          float *y, void *y_compute, const rp_lora_bufs *b, rp_error *err)
{
    return rp_lora_forward_rows(k, cfg, lc, a, x, 0, nseq * seqlen, seqlen, y, y_compute, b,
                                err);
}

rp_status rp_lora_backward_weights(const rp_kernels *k, const rp_model_config *cfg,
                                   const rp_lora_call *lc, const rp_lora_adapter *a,
                                   const void *x, const void *dy, int64_t nseq, int64_t seqlen,
                                   const rp_lora_bufs *b, rp_error *err)
{
    return rp_lora_backward_weights_rows(k, cfg, lc, a, x, dy, 0, nseq * seqlen, seqlen, b, err);
}

rp_status rp_lora_backward_input(const rp_kernels *k, const rp_model_config *cfg,
                                 const rp_lora_call *lc, const rp_lora_adapter *a, int64_t nseq,
                                 int64_t seqlen, float *dx, const rp_lora_bufs *b, rp_error *err)
{
    return rp_lora_backward_input_rows(k, cfg, lc, a, 0, nseq * seqlen, seqlen, dx, b, err);
}
