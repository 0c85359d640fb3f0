/* Head (layer L+1): final RMSNorm, LM head and token cross-entropy, over
 * chunks of tokens so that only [chunk, vocab] logits exist at a time. The
 * backward of a chunk follows its forward at once (no recompute). */
#include <string.h>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/xent.h"
#include "model/layers.h"

typedef struct head_ws {
    float *h, *rstd, *logits, *dh;
    double *loss;
    uint8_t *counted;
    size_t total;
} head_ws;

static float *take(float *base, size_t *at, size_t n)
{
    float *p = base ? base + *at : NULL;
    *at += (n + 15) / 16 * 16;
    return p;
}

static int64_t chunk_rows(int64_t T, int64_t chunk)
{
    if (chunk < 1)
        chunk = 1;
    return T > 0 && T < chunk ? T : chunk;
}

static void carve(const rp_model_config *cfg, int64_t C, float *base, head_ws *w)
{
    const size_t H = (size_t)cfg->hidden_size, V = (size_t)cfg->vocab_size, c = (size_t)C;
    size_t at = 0;
    w->h = take(base, &at, c * H);
    w->rstd = take(base, &at, c);
    w->logits = take(base, &at, c * V);
    w->dh = take(base, &at, c * H);
    w->loss = (double *)take(base, &at, 2 * c);
    w->counted = (uint8_t *)take(base, &at, c / sizeof(float) + 1);
    w->total = at;
}

size_t rp_head_workspace_floats(const rp_model_config *cfg, int64_t T, int64_t chunk)
{
    head_ws w;
    carve(cfg, chunk_rows(T, chunk), NULL, &w);
    return w.total;
}

rp_status rp_head_forward_backward(const rp_model_config *cfg, const float *norm_w,
                                   const float *lm_w, const float *x, const int32_t *targets,
                                   const uint8_t *mask, int64_t T, float scale, float *dx,
                                   float *dnorm_w, float *dlm_w, int64_t chunk, float *ws,
                                   double *loss_sum, int64_t *ncounted, rp_error *err)
{
    const int64_t H = cfg->hidden_size, V = cfg->vocab_size;
    int64_t count = 0;
    for (int64_t t = 0; t < T; t++) {
        if (mask && !mask[t])
            continue;
        if (targets[t] < 0 || targets[t] >= V)
            return rp_error_set(err, RP_ERR_RANGE,
                                "head: target %d at position %lld is outside the vocabulary "
                                "[0, %lld)",
                                (int)targets[t], (long long)t, (long long)V);
        count++;
    }
    const int64_t C = chunk_rows(T, chunk);
    head_ws w;
    carve(cfg, C, ws, &w);
    const float eps = (float)cfg->rms_norm_eps;
    double total = 0.0;
    for (int64_t c0 = 0; c0 < T; c0 += C) {
        const int64_t n = T - c0 < C ? T - c0 : C;
        const float *xc = x + c0 * H;
        float *dxc = dx ? dx + c0 * H : NULL;
        int any = 0;
        for (int64_t r = 0; r < n; r++) {
            w.counted[r] = mask ? (mask[c0 + r] != 0) : 1;
            any |= w.counted[r];
        }
        if (!any) {
            /* nothing counts: no loss and no gradient flows to these rows */
            if (dxc)
                memset(dxc, 0, sizeof(float) * (size_t)(n * H));
            continue;
        }
        rp_rmsnorm_forward(xc, norm_w, w.h, w.rstd, n, H, eps);
        rp_linear_forward(w.h, lm_w, NULL, w.logits, n, H, V);
        rp_xent_rows(w.logits, n, V, targets + c0, w.counted, scale, w.loss, dx != NULL);
        for (int64_t r = 0; r < n; r++)
            total += w.loss[r]; /* token order: deterministic */
        if (dxc) {
            rp_linear_backward_weight(w.logits, w.h, dlm_w, NULL, n, H, V);
            rp_linear_backward_input(w.logits, lm_w, w.dh, n, H, V, 0);
            rp_rmsnorm_backward(xc, norm_w, w.rstd, w.dh, dxc, dnorm_w, n, H, 0);
        }
    }
    *loss_sum = total;
    if (ncounted)
        *ncounted = count;
    return RP_OK;
}
