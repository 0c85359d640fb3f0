/* Decoder block on the CUDA back end, step for step the composition of
 * src/model/block.c (same parameter offsets from rp_block_offsets_get, same
 * recompute-from-input backward), with bf16 GEMM operands and fp32
 * everything else:
 *   fp32: x, rstd, q/k/v before attention, x2, g, u, dm, dq/dk/dv, tmp, y
 *   bf16: the weight shadow, h1, h2, q/k/v/o for attention, m, dy/dx2,
 *         dout, dg/du, dq/dk/dv for the weight GEMMs
 * Differences from the CPU order that only move rounding: x2 = (x + o Wo^T)
 * + bo and y = x2 + m Wd^T are formed by GEMMs accumulating onto a copy of
 * the residual (beta = 1), sums of squares are fp32 warp sums.
 * The forward keeps what the backward reads in the caller's `saved` area
 * (the bf16 weight shadow among it: the backward's input-gradient GEMMs
 * read it); the rest is scratch. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda_impl.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"

typedef uint16_t bf16;

typedef struct cuda_block_ws {
    /* saved */
    bf16 *pb;                         /* bf16 shadow of the whole layer block */
    bf16 *h1b, *qb, *kb, *vb, *ob, *h2b, *mb;
    float *rstd1, *qraw, *rstdq, *kraw, *rstdk, *q, *k, *v, *lse, *x2, *rstd2, *g, *u;
    const float *rope; /* the device's table (rp_cuda_be_rope), not in the workspace */
    /* scratch */
    bf16 *dyb, *doutb, *dgb, *dub, *dqb, *dkb, *dvb;
    float *tmp, *dm, *dq, *dk, *dv, *partial, *attn_scratch;
    size_t saved_total, scratch_total;
    rp_cuda_guards *guards; /* where the guard bands go, when listing them */
} cuda_block_ws;

size_t rp_cuda_be_guard_floats = 0;

/* With base == NULL only counts, so the size and the users cannot disagree;
 * every buffer starts on a 64-byte boundary, and is followed by
 * rp_cuda_be_guard_floats untouched floats (area 0: saved, 1: scratch). */
static void guard(cuda_block_ws *w, int area, size_t *at)
{
    if (rp_cuda_be_guard_floats == 0)
        return;
    if (w->guards && w->guards->n < RP_CUDA_MAX_GUARDS) {
        w->guards->area[w->guards->n] = area;
        w->guards->at[w->guards->n++] = *at;
    }
    *at += rp_cuda_be_guard_floats;
}

static float *take_f(cuda_block_ws *w, int area, float *base, size_t *at, size_t n)
{
    float *p = base ? base + *at : NULL;
    *at += rp_cuda_be_f32_floats(n);
    guard(w, area, at);
    return p;
}

static bf16 *take_b(cuda_block_ws *w, int area, float *base, size_t *at, size_t n)
{
    bf16 *p = base ? (bf16 *)(base + *at) : NULL;
    *at += rp_cuda_be_bf16_floats(n);
    guard(w, area, at);
    return p;
}

static size_t max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

static void carve(const rp_model_config *cfg, int64_t nseq, int64_t seqlen, float *base,
                  float *scratch, cuda_block_ws *w)
{
    const size_t T = (size_t)(nseq * seqlen), H = (size_t)cfg->hidden_size,
                 I = (size_t)cfg->intermediate_size, hd = (size_t)cfg->head_dim,
                 nh = (size_t)cfg->num_attention_heads, nkv = (size_t)cfg->num_key_value_heads;
    const size_t QD = nh * hd, KD = nkv * hd;
    const int qk = cfg->arch == RP_ARCH_QWEN3;
    rp_block_offsets off;
    rp_block_offsets_get(cfg, &off);
    size_t at = 0;
    rp_cuda_guards *guards = w->guards;
    memset(w, 0, sizeof *w);
    w->guards = guards;
    w->pb = take_b(w, 0, base, &at, off.numel);
    w->h1b = take_b(w, 0, base, &at, T * H);
    w->rstd1 = take_f(w, 0, base, &at, T);
    if (qk) {
        w->qraw = take_f(w, 0, base, &at, T * QD);
        w->rstdq = take_f(w, 0, base, &at, T * nh);
        w->kraw = take_f(w, 0, base, &at, T * KD);
        w->rstdk = take_f(w, 0, base, &at, T * nkv);
    }
    w->q = take_f(w, 0, base, &at, T * QD);
    w->k = take_f(w, 0, base, &at, T * KD);
    w->v = take_f(w, 0, base, &at, T * KD);
    w->qb = take_b(w, 0, base, &at, T * QD);
    w->kb = take_b(w, 0, base, &at, T * KD);
    w->vb = take_b(w, 0, base, &at, T * KD);
    w->ob = take_b(w, 0, base, &at, T * QD);
    w->lse = take_f(w, 0, base, &at, T * nh);
    w->x2 = take_f(w, 0, base, &at, T * H);
    w->rstd2 = take_f(w, 0, base, &at, T);
    w->h2b = take_b(w, 0, base, &at, T * H);
    w->g = take_f(w, 0, base, &at, T * I);
    w->u = take_f(w, 0, base, &at, T * I);
    w->mb = take_b(w, 0, base, &at, T * I);
    w->saved_total = at;
    at = 0;
    w->tmp = take_f(w, 1, scratch, &at, T * H);
    w->dyb = take_b(w, 1, scratch, &at, T * H);
    w->dm = take_f(w, 1, scratch, &at, T * I);
    w->dgb = take_b(w, 1, scratch, &at, T * I);
    w->dub = take_b(w, 1, scratch, &at, T * I);
    w->doutb = take_b(w, 1, scratch, &at, T * QD);
    w->dq = take_f(w, 1, scratch, &at, T * QD);
    w->dk = take_f(w, 1, scratch, &at, T * KD);
    w->dv = take_f(w, 1, scratch, &at, T * KD);
    w->dqb = take_b(w, 1, scratch, &at, T * QD);
    w->dkb = take_b(w, 1, scratch, &at, T * KD);
    w->dvb = take_b(w, 1, scratch, &at, T * KD);
    w->partial = take_f(w, 1, scratch, &at, rp_cuda_colsum_partial_floats((int64_t)max3(H, QD, KD)));
    w->attn_scratch = take_f(w, 1, scratch, &at, rp_cuda_be_attn_scratch_floats(cfg, nseq, seqlen));
    w->scratch_total = at;
}

size_t rp_cuda_be_block_ws_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    cuda_block_ws w = {0};
    carve(cfg, nseq, seqlen, NULL, NULL, &w);
    return w.scratch_total;
}

size_t rp_cuda_be_block_saved_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    cuda_block_ws w = {0};
    carve(cfg, nseq, seqlen, NULL, NULL, &w);
    return w.saved_total;
}

void rp_cuda_be_block_guards(const rp_model_config *cfg, int64_t nseq, int64_t seqlen,
                             rp_cuda_guards *out)
{
    cuda_block_ws w;
    memset(out, 0, sizeof *out);
    w.guards = out;
    carve(cfg, nseq, seqlen, NULL, NULL, &w);
}

#define PF(P, field) ((P) + off.field)                                /* fp32 parameter */
#define PB(field) (w->pb + off.field)                                 /* bf16 shadow */
#define OPT(P, field) (off.field == SIZE_MAX ? NULL : (P) + off.field) /* optional fp32 */

/* Forward into the saved area; y == NULL (a layer run only for its
 * backward) skips the down projection. */
static rp_status forward_ws(cuda_impl *c, const rp_model_config *cfg, const float *P,
                            const float *x, float *y, int64_t nseq, int64_t seqlen,
                            cuda_block_ws *w, rp_error *err)
{
    rp_block_offsets off;
    rp_block_offsets_get(cfg, &off);
    const int64_t T = nseq * seqlen, H = cfg->hidden_size, I = cfg->intermediate_size;
    const int64_t hd = cfg->head_dim, nh = cfg->num_attention_heads,
                  nkv = cfg->num_key_value_heads;
    const int64_t QD = nh * hd, KD = nkv * hd;
    const float eps = (float)cfg->rms_norm_eps;
    const int qk = cfg->arch == RP_ARCH_QWEN3;
    void *st = c->compute, *hb = c->blas;

    RP_CK(c, rp_cuda_bf16_from_f32(P, w->pb, (int64_t)off.numel, st), err);
    RP_CK(c, rp_cuda_rmsnorm_forward(x, PF(P, in_norm), NULL, w->h1b, w->rstd1, T, H, eps, st),
          err);
    float *qo = qk ? w->qraw : w->q, *ko = qk ? w->kraw : w->k;
    RP_CKB(c, rp_cuda_linear_forward(hb, w->h1b, PB(wq), qo, T, H, QD, 0), err);
    RP_CKB(c, rp_cuda_linear_forward(hb, w->h1b, PB(wk), ko, T, H, KD, 0), err);
    RP_CKB(c, rp_cuda_linear_forward(hb, w->h1b, PB(wv), w->v, T, H, KD, 0), err);
    if (off.bq != SIZE_MAX)
        RP_CK(c, rp_cuda_bias_add(qo, NULL, PF(P, bq), T, QD, st), err);
    if (off.bk != SIZE_MAX)
        RP_CK(c, rp_cuda_bias_add(ko, NULL, PF(P, bk), T, KD, st), err);
    if (off.bv != SIZE_MAX)
        RP_CK(c, rp_cuda_bias_add(w->v, w->vb, PF(P, bv), T, KD, st), err);
    else
        RP_CK(c, rp_cuda_bf16_from_f32(w->v, w->vb, T * KD, st), err);
    if (qk) {
        RP_CK(c,
              rp_cuda_rmsnorm_forward(w->qraw, PF(P, q_norm), w->q, NULL, w->rstdq, T * nh, hd,
                                      eps, st),
              err);
        RP_CK(c,
              rp_cuda_rmsnorm_forward(w->kraw, PF(P, k_norm), w->k, NULL, w->rstdk, T * nkv, hd,
                                      eps, st),
              err);
    }
    RP_TRY(rp_cuda_be_rope(c, cfg, seqlen, &w->rope, err));
    RP_CK(c, rp_cuda_rope_apply(w->q, w->qb, w->rope, nseq, seqlen, nh, hd, 0, st), err);
    RP_CK(c, rp_cuda_rope_apply(w->k, w->kb, w->rope, nseq, seqlen, nkv, hd, 0, st), err);

    RP_TRY(rp_cuda_be_attn_forward(c, cfg, nseq, seqlen, w->qb, w->kb, w->vb, w->ob, w->lse, err));

    cudaError_t e = cudaMemcpyAsync(w->x2, x, sizeof(float) * (size_t)(T * H), cudaMemcpyDeviceToDevice,
                        c->compute);
    if (e != cudaSuccess)
        return rp_cuda_be_fail(c, "copying the residual", (int)e, err);
    RP_CKB(c, rp_cuda_linear_forward(hb, w->ob, PB(wo), w->x2, T, QD, H, 1), err);
    if (off.bo != SIZE_MAX)
        RP_CK(c, rp_cuda_bias_add(w->x2, NULL, PF(P, bo), T, H, st), err);

    RP_CK(c,
          rp_cuda_rmsnorm_forward(w->x2, PF(P, post_norm), NULL, w->h2b, w->rstd2, T, H, eps, st),
          err);
    RP_CKB(c, rp_cuda_linear_forward(hb, w->h2b, PB(w_gate), w->g, T, H, I, 0), err);
    RP_CKB(c, rp_cuda_linear_forward(hb, w->h2b, PB(w_up), w->u, T, H, I, 0), err);
    RP_CK(c, rp_cuda_swiglu_forward(w->g, w->u, NULL, w->mb, T * I, st), err);
    if (y) {
        e = cudaMemcpyAsync(y, w->x2, sizeof(float) * (size_t)(T * H), cudaMemcpyDeviceToDevice,
                            c->compute);
        if (e != cudaSuccess)
            return rp_cuda_be_fail(c, "copying the residual", (int)e, err);
        RP_CKB(c, rp_cuda_linear_forward(hb, w->mb, PB(w_down), y, T, I, H, 1), err);
    }
    return RP_OK;
}

rp_status rp_cuda_be_block_forward(cuda_impl *c, const rp_model_config *cfg, const float *params,
                                   const float *x, float *y, int64_t nseq, int64_t seqlen,
                                   float *saved, float *ws, rp_error *err)
{
    if (nseq <= 0 || seqlen <= 0)
        return RP_OK;
    RP_TRY(rp_cuda_be_enter(c, err));
    cuda_block_ws w = {0};
    carve(cfg, nseq, seqlen, saved, ws, &w);
    RP_TRY(forward_ws(c, cfg, params, x, y, nseq, seqlen, &w, err));
    return rp_cuda_be_sync(c, "block forward", err);
}

static rp_status backward_steps(cuda_impl *c, const rp_model_config *cfg, const float *P,
                                const float *x, const float *dy, float *dx, float *D,
                                int64_t nseq, int64_t seqlen, cuda_block_ws *w, rp_error *err)
{
    rp_block_offsets off;
    rp_block_offsets_get(cfg, &off);
    const int64_t T = nseq * seqlen, H = cfg->hidden_size, I = cfg->intermediate_size;
    const int64_t hd = cfg->head_dim, nh = cfg->num_attention_heads,
                  nkv = cfg->num_key_value_heads;
    const int64_t QD = nh * hd, KD = nkv * hd;
    const int qk = cfg->arch == RP_ARCH_QWEN3;
    void *st = c->compute, *hb = c->blas;
    RP_TRY(rp_cuda_be_rope(c, cfg, seqlen, &w->rope, err));

    /* MLP: y = x2 + m Wd^T, m = silu(g) * u */
    RP_CK(c, rp_cuda_bf16_from_f32(dy, w->dyb, T * H, st), err);
    RP_CKB(c, rp_cuda_linear_backward_weight(hb, w->dyb, w->mb, PF(D, w_down), T, I, H), err);
    RP_CKB(c, rp_cuda_linear_backward_input(hb, w->dyb, PB(w_down), w->dm, T, I, H, 0), err);
    RP_CK(c, rp_cuda_swiglu_backward(w->g, w->u, w->dm, NULL, w->dgb, NULL, w->dub, T * I, st),
          err);
    RP_CKB(c, rp_cuda_linear_backward_weight(hb, w->dgb, w->h2b, PF(D, w_gate), T, H, I), err);
    RP_CKB(c, rp_cuda_linear_backward_weight(hb, w->dub, w->h2b, PF(D, w_up), T, H, I), err);
    RP_CKB(c, rp_cuda_linear_backward_input(hb, w->dgb, PB(w_gate), w->tmp, T, H, I, 0), err);
    RP_CKB(c, rp_cuda_linear_backward_input(hb, w->dub, PB(w_up), w->tmp, T, H, I, 1), err);
    /* dx2 = dy + rmsnorm backward, kept in dx (dy is not read after this, so
     * dx may alias dy); its bf16 copy reuses dyb, dead since dm */
    if (dx != dy) {
        cudaError_t e = cudaMemcpyAsync(dx, dy, sizeof(float) * (size_t)(T * H),
                                        cudaMemcpyDeviceToDevice, c->compute);
        if (e != cudaSuccess)
            return rp_cuda_be_fail(c, "copying dy", (int)e, err);
    }
    bf16 *dx2b = w->dyb;
    RP_CK(c, rp_cuda_rmsnorm_dw(w->x2, w->rstd2, w->tmp, T, H, PF(D, post_norm), w->partial, st),
          err);
    RP_CK(c,
          rp_cuda_rmsnorm_backward(w->x2, PF(P, post_norm), w->rstd2, w->tmp, dx, dx2b, T, H, 1,
                                   st),
          err);

    /* attention output projection: dout = dx2 Wo, in bf16 for the kernel */
    RP_CKB(c, rp_cuda_linear_backward_weight(hb, dx2b, w->ob, PF(D, wo), T, QD, H), err);
    if (off.bo != SIZE_MAX)
        RP_CK(c, rp_cuda_colsum_accumulate(dx, T, H, PF(D, bo), w->partial, st), err);
    RP_CKB(c, rp_cuda_gemm(hb, 0, 0, T, QD, H, 1.0f, dx2b, H, PB(wo), QD, 0.0f, w->doutb, 1, QD),
           err);
    RP_TRY(rp_cuda_be_attn_backward(c, cfg, nseq, seqlen, w->qb, w->kb, w->vb, w->ob, w->lse,
                                    w->doutb, w->dq, w->dk, w->dv, w->attn_scratch, err));
    RP_CK(c, rp_cuda_rope_apply(w->dq, qk ? NULL : w->dqb, w->rope, nseq, seqlen, nh, hd, 1, st),
          err);
    RP_CK(c, rp_cuda_rope_apply(w->dk, qk ? NULL : w->dkb, w->rope, nseq, seqlen, nkv, hd, 1, st),
          err);
    if (qk) {
        RP_CK(c,
              rp_cuda_rmsnorm_dw(w->qraw, w->rstdq, w->dq, T * nh, hd, PF(D, q_norm), w->partial,
                                 st),
              err);
        RP_CK(c,
              rp_cuda_rmsnorm_backward(w->qraw, PF(P, q_norm), w->rstdq, w->dq, w->dq, w->dqb,
                                       T * nh, hd, 0, st),
              err);
        RP_CK(c,
              rp_cuda_rmsnorm_dw(w->kraw, w->rstdk, w->dk, T * nkv, hd, PF(D, k_norm), w->partial,
                                 st),
              err);
        RP_CK(c,
              rp_cuda_rmsnorm_backward(w->kraw, PF(P, k_norm), w->rstdk, w->dk, w->dk, w->dkb,
                                       T * nkv, hd, 0, st),
              err);
    }
    RP_CK(c, rp_cuda_bf16_from_f32(w->dv, w->dvb, T * KD, st), err);
    if (off.bq != SIZE_MAX)
        RP_CK(c, rp_cuda_colsum_accumulate(w->dq, T, QD, PF(D, bq), w->partial, st), err);
    if (off.bk != SIZE_MAX)
        RP_CK(c, rp_cuda_colsum_accumulate(w->dk, T, KD, PF(D, bk), w->partial, st), err);
    if (off.bv != SIZE_MAX)
        RP_CK(c, rp_cuda_colsum_accumulate(w->dv, T, KD, PF(D, bv), w->partial, st), err);
    RP_CKB(c, rp_cuda_linear_backward_weight(hb, w->dqb, w->h1b, PF(D, wq), T, H, QD), err);
    RP_CKB(c, rp_cuda_linear_backward_weight(hb, w->dkb, w->h1b, PF(D, wk), T, H, KD), err);
    RP_CKB(c, rp_cuda_linear_backward_weight(hb, w->dvb, w->h1b, PF(D, wv), T, H, KD), err);
    RP_CKB(c, rp_cuda_linear_backward_input(hb, w->dqb, PB(wq), w->tmp, T, H, QD, 0), err);
    RP_CKB(c, rp_cuda_linear_backward_input(hb, w->dkb, PB(wk), w->tmp, T, H, KD, 1), err);
    RP_CKB(c, rp_cuda_linear_backward_input(hb, w->dvb, PB(wv), w->tmp, T, H, KD, 1), err);
    RP_CK(c, rp_cuda_rmsnorm_dw(x, w->rstd1, w->tmp, T, H, PF(D, in_norm), w->partial, st), err);
    RP_CK(c,
          rp_cuda_rmsnorm_backward(x, PF(P, in_norm), w->rstd1, w->tmp, dx, NULL, T, H, 1, st),
          err);
    return RP_OK;
}

rp_status rp_cuda_be_block_backward(cuda_impl *c, const rp_model_config *cfg,
                                    const float *params, const float *x, float *saved,
                                    const float *dy, float *dx, float *dparams, int64_t nseq,
                                    int64_t seqlen, float *ws, rp_error *err)
{
    if (nseq <= 0 || seqlen <= 0)
        return RP_OK;
    RP_TRY(rp_cuda_be_enter(c, err));
    cuda_block_ws w = {0};
    carve(cfg, nseq, seqlen, saved, ws, &w);
    RP_TRY(backward_steps(c, cfg, params, x, dy, dx, dparams, nseq, seqlen, &w, err));
    return rp_cuda_be_sync(c, "block backward", err);
}
