/* Head (final RMSNorm, LM head, cross-entropy) on the CUDA back end, in the
 * chunks of src/model/head.c: only [chunk, vocab] logits exist at a time.
 * The chunk is larger than the CPU's (GEMMs want rows): as many tokens as
 * keep the fp32 logits under RP_CUDA_HEAD_LOGITS floats. Per-token losses
 * stay on the device in double and are summed on the host in token order
 * at the end, like the CPU. Tokens whose mask is 0 get zero loss and zero
 * gradient from the cross-entropy, so a chunk where nothing counts adds
 * nothing (the CPU skips it; the sums are the same). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "device/cuda_impl.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/rmsnorm.h"

#define RP_CUDA_HEAD_LOGITS ((int64_t)1 << 27) /* 512 MiB of fp32 logits */

typedef struct cuda_head_ws {
    uint16_t *lmb;   /* bf16 shadow of lm_w [vocab, hidden] */
    uint16_t *hb;    /* normed chunk [C, H] */
    float *rstd;     /* [C] */
    float *logits;   /* [C, V], becomes dlogits */
    uint16_t *dlogb; /* dlogits in bf16 for the two GEMMs */
    float *dh;       /* [C, H] */
    double *loss;    /* [T] */
    float *partial;
    size_t total;
} cuda_head_ws;

int64_t rp_cuda_be_head_chunk(const rp_model_config *cfg, int64_t T)
{
    int64_t c = RP_CUDA_HEAD_LOGITS / (cfg->vocab_size > 0 ? cfg->vocab_size : 1);
    if (c > 64)
        c = c / 64 * 64;
    if (c < 1)
        c = 1;
    return T > 0 && T < c ? T : c;
}

static void carve(const rp_model_config *cfg, int64_t T, float *base, cuda_head_ws *w)
{
    const size_t H = (size_t)cfg->hidden_size, V = (size_t)cfg->vocab_size;
    const size_t C = (size_t)rp_cuda_be_head_chunk(cfg, T), nT = (size_t)(T > 0 ? T : 1);
    size_t at = 0;
#define TAKE_B(n) (base ? (uint16_t *)(base + at) : NULL); at += rp_cuda_be_bf16_floats(n)
#define TAKE_F(n) (base ? base + at : NULL); at += rp_cuda_be_f32_floats(n)
    memset(w, 0, sizeof *w);
    w->lmb = TAKE_B(V * H);
    w->hb = TAKE_B(C * H);
    w->rstd = TAKE_F(C);
    w->logits = TAKE_F(C * V);
    w->dlogb = TAKE_B(C * V);
    w->dh = TAKE_F(C * H);
    w->loss = (double *)TAKE_F(2 * nT);
    w->partial = TAKE_F(rp_cuda_colsum_partial_floats((int64_t)H));
#undef TAKE_B
#undef TAKE_F
    w->total = at;
}

size_t rp_cuda_be_head_ws_floats(const rp_model_config *cfg, int64_t T)
{
    cuda_head_ws w;
    carve(cfg, T, NULL, &w);
    return w.total;
}

rp_status rp_cuda_be_head(cuda_impl *c, const rp_model_config *cfg, const float *norm_w,
                          const float *lm_w, const float *x, const int32_t *targets,
                          const uint8_t *mask, int64_t T, float scale, float *dx, float *dnorm_w,
                          float *dlm_w, float *ws, double *loss_sum, rp_error *err)
{
    const int64_t H = cfg->hidden_size, V = cfg->vocab_size;
    const float eps = (float)cfg->rms_norm_eps;
    RP_TRY(rp_cuda_be_enter(c, err));
    RP_TRY(rp_cuda_be_check_ids(c, targets, mask, T, V, "head", "target", err));
    if (T <= 0) {
        *loss_sum = 0.0;
        return RP_OK;
    }
    cuda_head_ws w;
    carve(cfg, T, ws, &w);
    void *st = c->compute, *hb = c->blas;
    const int64_t C = rp_cuda_be_head_chunk(cfg, T);
    RP_CK(c, rp_cuda_bf16_from_f32(lm_w, w.lmb, V * H, st), err);
    for (int64_t c0 = 0; c0 < T; c0 += C) {
        const int64_t n = T - c0 < C ? T - c0 : C;
        const float *xc = x + c0 * H;
        RP_CK(c, rp_cuda_rmsnorm_forward(xc, norm_w, NULL, w.hb, w.rstd, n, H, eps, st), err);
        RP_CKB(c, rp_cuda_linear_forward(hb, w.hb, w.lmb, w.logits, n, H, V, 0), err);
        RP_TRY(rp_cuda_be_xent(c, w.logits, n, V, targets + c0, mask ? mask + c0 : NULL, scale,
                               w.loss + c0, dx != NULL, err));
        if (!dx)
            continue;
        RP_CK(c, rp_cuda_bf16_from_f32(w.logits, w.dlogb, n * V, st), err);
        RP_CKB(c, rp_cuda_linear_backward_weight(hb, w.dlogb, w.hb, dlm_w, n, H, V), err);
        RP_CKB(c, rp_cuda_linear_backward_input(hb, w.dlogb, w.lmb, w.dh, n, H, V, 0), err);
        RP_CK(c, rp_cuda_rmsnorm_dw(xc, w.rstd, w.dh, n, H, dnorm_w, w.partial, st), err);
        RP_CK(c, rp_cuda_rmsnorm_backward(xc, norm_w, w.rstd, w.dh, dx + c0 * H, NULL, n, H, 0, st),
              err);
    }
    cudaError_t e = cudaSuccess;
    if ((size_t)T > c->head_losses_n) { /* first use, or a longer microbatch */
        e = cudaStreamSynchronize(c->compute); /* the old buffer may be in a copy */
        cudaFreeHost(c->head_losses);
        c->head_losses = NULL;
        c->head_losses_n = 0;
        if (e == cudaSuccess)
            e = cudaMallocHost((void **)&c->head_losses, sizeof(double) * (size_t)T);
        if (e != cudaSuccess)
            return rp_cuda_be_fail(c, "head: the losses' host buffer", (int)e, err);
        c->head_losses_n = (size_t)T;
    }
    double *hl = c->head_losses;
    e = cudaMemcpyAsync(hl, w.loss, sizeof(double) * (size_t)T, cudaMemcpyDeviceToHost,
                        c->compute);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->compute);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e != cudaSuccess)
        return rp_cuda_be_fail(c, "head", (int)e, err);
    double total = 0.0;
    for (int64_t t = 0; t < T; t++)
        total += hl[t]; /* token order, as the CPU */
    *loss_sum = total;
    return RP_OK;
}
