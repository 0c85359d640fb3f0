/* Head (layer L+1): final RMSNorm, LM head and token cross-entropy, over
 * chunks of tokens so that only [chunk, vocab] logits exist at a time,
 * composed over the kernel ops table. The backward of a chunk follows its
 * forward at once (no recompute). The per-token losses stay on the device
 * until the end and are summed in token order on the host. */
#include <string.h>

#include "model/carve.h"

typedef struct head_ws {
    void *lm_c;      /* the LM head in the compute dtype (NULL: the GEMMs read it as it comes) */
    float *norm_f32; /* the norm weight in fp32, when it does not come in fp32 */
    void *h;         /* [C, H] normed rows, compute dtype */
    float *rstd;     /* [C] */
    float *logits;   /* [C, V], then (fp32 compute) their gradient */
    void *dlogits_c; /* their gradient in the compute dtype (NULL: fp32, in the logits) */
    float *dh;       /* [C, H] */
    double *loss;    /* [T] */
    float *partial;
    size_t total;
} head_ws;

static int64_t chunk_rows(const rp_kernel_ops *ops, const rp_model_config *cfg, int64_t T,
                          int64_t chunk)
{
    if (chunk <= 0)
        chunk = ops->logits_rows(cfg->vocab_size, 0);
    if (chunk < 1)
        chunk = 1;
    return T > 0 && T < chunk ? T : chunk;
}

static void carve(const rp_kernel_ops *ops, rp_dtype pdt, const rp_model_config *cfg, int64_t T,
                  int64_t C, float *base, head_ws *w)
{
    const size_t H = (size_t)cfg->hidden_size, V = (size_t)cfg->vocab_size, c = (size_t)C;
    const int one = ops->compute_dtype == RP_F32;
    rp_carver cv = {base, 0, 1, NULL};
    memset(w, 0, sizeof *w);
    w->lm_c = rp_kernel_reads_weights(ops, pdt) ? NULL : rp_carve_compute(&cv, ops, V * H);
    w->norm_f32 = rp_carve_f32(&cv, H); /* used when the norm does not come in fp32 */
    w->h = rp_carve_compute(&cv, ops, c * H);
    w->rstd = rp_carve_f32(&cv, c);
    w->logits = rp_carve_f32(&cv, c * V);
    w->dlogits_c = one ? NULL : rp_carve_compute(&cv, ops, c * V);
    w->dh = rp_carve_f32(&cv, c * H);
    w->loss = rp_carve_bytes(&cv, (size_t)(T > 0 ? T : 1) * sizeof(double));
    size_t n = ops->column_sum_scratch_floats((int64_t)H);
    w->partial = n ? rp_carve_f32(&cv, n) : NULL;
    w->total = cv.at;
}

size_t rp_head_workspace_floats(const rp_kernel_ops *ops, rp_dtype params_dtype,
                                const rp_model_config *cfg, int64_t T, int64_t chunk)
{
    head_ws w;
    carve(ops, params_dtype, cfg, T, chunk_rows(ops, cfg, T, chunk), NULL, &w);
    return w.total;
}

#define OP RP_OP

/* On a back end whose memory the host reads, a chunk without a counted
 * token is skipped: no loss, and no gradient flows to its rows. */
static int chunk_counts(const rp_kernel_ops *ops, const uint8_t *mask, int64_t n)
{
    if (!ops->host_addressable || !mask)
        return 1;
    for (int64_t r = 0; r < n; r++)
        if (mask[r])
            return 1;
    return 0;
}

rp_status rp_head_forward_backward(const rp_kernels *k, const rp_model_config *cfg,
                                   const void *norm_w, const void *lm_w, rp_dtype params_dtype,
                                   const float *x,
                                   const int32_t *targets, const uint8_t *mask, int64_t T,
                                   float scale, float *dx, float *dnorm_w, float *dlm_w,
                                   int64_t chunk, float *ws, double *loss_sum, rp_error *err)
{
    const int64_t H = cfg->hidden_size, V = cfg->vocab_size;
    const float eps = (float)cfg->rms_norm_eps;
    OP(check_ids, targets, mask, T, V, "head", "target");
    if (T <= 0) {
        *loss_sum = 0.0;
        return RP_OK;
    }
    const int64_t C = chunk_rows(k->ops, cfg, T, chunk);
    head_ws w;
    carve(k->ops, params_dtype, cfg, T, C, ws, &w);
    const void *lm = lm_w; /* the GEMMs read it where it lies when they can */
    rp_dtype lm_dt = params_dtype;
    if (w.lm_c) {
        OP(convert, lm_w, params_dtype, w.lm_c, k->ops->compute_dtype, V * H);
        lm = w.lm_c;
        lm_dt = k->ops->compute_dtype;
    }
    const float *norm = norm_w;
    if (params_dtype != RP_F32) {
        OP(convert, norm_w, params_dtype, w.norm_f32, RP_F32, H);
        norm = w.norm_f32;
    }
    for (int64_t c0 = 0; c0 < T; c0 += C) {
        const int64_t n = T - c0 < C ? T - c0 : C;
        const float *xc = x + c0 * H;
        float *dxc = dx ? dx + c0 * H : NULL;
        const uint8_t *counted = mask ? mask + c0 : NULL;
        if (!chunk_counts(k->ops, counted, n)) {
            memset(w.loss + c0, 0, sizeof(double) * (size_t)n);
            if (dxc)
                memset(dxc, 0, sizeof(float) * (size_t)(n * H));
            continue;
        }
        OP(rmsnorm_forward, xc, norm, NULL, w.h, w.rstd, n, H, eps);
        OP(linear_forward, w.h, lm, lm_dt, NULL, NULL, w.logits, NULL, n, H, V);
        /* the gradient leaves cross-entropy in the compute dtype: no fp32
         * gradient and no convert pass over [n, V] when they differ */
        const void *dlogits = w.dlogits_c ? w.dlogits_c : (const void *)w.logits;
        OP(cross_entropy, w.logits, n, V, targets + c0, counted, scale, w.loss + c0, dx != NULL,
           dxc ? (void *)dlogits : NULL);
        if (!dxc)
            continue;
        if (dlm_w) /* NULL: a frozen head (LoRA) */
            OP(linear_backward_weight, dlogits, w.h, dlm_w, n, H, V);
        OP(linear_backward_input, dlogits, lm, lm_dt, w.dh, NULL, n, H, V, 0);
        OP(rmsnorm_backward, xc, norm, w.rstd, w.dh, dxc, NULL, dnorm_w, n, H, 0, w.partial);
    }
    return k->ops->sum_to_host(k->state, w.loss, T, loss_sum, err);
}

size_t rp_model_workspace_floats(const rp_kernel_ops *ops, rp_dtype params_dtype,
                                 const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    size_t b = rp_block_workspace_floats(ops, params_dtype, cfg, nseq, seqlen);
    size_t h = rp_head_workspace_floats(ops, params_dtype, cfg, nseq * seqlen, 0);
    return b > h ? b : h;
}
