/* Decoder block of Llama / Qwen3 (transformers LlamaDecoderLayer,
 * Qwen3DecoderLayer):
 *   h1 = rmsnorm(x) * input_layernorm
 *   q, k, v = h1 Wq^T (+bq), h1 Wk^T (+bk), h1 Wv^T (+bv)
 *   Qwen3: q, k = per-head rmsnorm * q_norm, k_norm     (before RoPE)
 *   q, k = rope(q), rope(k)
 *   o = causal GQA softmax(q k^T / sqrt(head_dim)) v
 *   x2 = x + (o Wo^T (+bo))
 *   h2 = rmsnorm(x2) * post_attention_layernorm
 *   y = x2 + (silu(h2 Wg^T) * (h2 Wu^T)) Wd^T
 * The forward keeps what the backward needs in the caller's `saved` area;
 * the backward goes back through the same steps from it, never running the
 * forward again. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "model/layers.h"

/* Every intermediate: what the forward keeps for the backward, carved out
 * of the caller's saved area, and the scratch, out of the workspace.
 * Buffers that only Qwen3 needs are NULL for Llama. */
typedef struct block_ws {
    /* saved */
    float *h1, *rstd1, *qraw, *rstdq, *q, *kraw, *rstdk, *k, *v, *o, *lse;
    float *x2, *rstd2, *h2, *g, *u, *m;
    float *rope, *inv_freq;
    /* scratch */
    float *tmp, *dm, *dout, *dq, *dk, *dv;
    size_t saved_total, scratch_total;
} block_ws;

/* With base == NULL only counts; the size function and the users share this
 * code so they cannot disagree. Each buffer starts on a 64-byte boundary
 * relative to the workspace start. */
static float *take(float *base, size_t *at, size_t n)
{
    float *p = base ? base + *at : NULL;
    *at += (n + 15) / 16 * 16;
    return p;
}

static rp_attn_shape attn_shape(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    rp_attn_shape s = {.nseq = nseq,
                       .seqlen = seqlen,
                       .nheads = cfg->num_attention_heads,
                       .nkv = cfg->num_key_value_heads,
                       .head_dim = cfg->head_dim,
                       .block = RP_ATTN_BLOCK,
                       .scale = 1.0f / sqrtf((float)cfg->head_dim)};
    return s;
}

static void carve(const rp_model_config *cfg, int64_t nseq, int64_t seqlen, float *base,
                  float *scratch, block_ws *w)
{
    const size_t T = (size_t)(nseq * seqlen), H = (size_t)cfg->hidden_size,
                 I = (size_t)cfg->intermediate_size, hd = (size_t)cfg->head_dim,
                 nh = (size_t)cfg->num_attention_heads, nkv = (size_t)cfg->num_key_value_heads;
    const size_t QD = nh * hd, KD = nkv * hd;
    const int qk = cfg->arch == RP_ARCH_QWEN3;
    size_t at = 0;
    memset(w, 0, sizeof *w);
    w->h1 = take(base, &at, T * H);
    w->rstd1 = take(base, &at, T);
    if (qk) {
        w->qraw = take(base, &at, T * QD);
        w->rstdq = take(base, &at, T * nh);
        w->kraw = take(base, &at, T * KD);
        w->rstdk = take(base, &at, T * nkv);
    }
    w->q = take(base, &at, T * QD);
    w->k = take(base, &at, T * KD);
    w->v = take(base, &at, T * KD);
    w->o = take(base, &at, T * QD);
    w->lse = take(base, &at, T * nh);
    w->x2 = take(base, &at, T * H);
    w->rstd2 = take(base, &at, T);
    w->h2 = take(base, &at, T * H);
    w->g = take(base, &at, T * I);
    w->u = take(base, &at, T * I);
    w->m = take(base, &at, T * I);
    w->rope = take(base, &at, (size_t)seqlen * hd);
    w->inv_freq = take(base, &at, hd / 2);
    w->saved_total = at;
    at = 0;
    w->tmp = take(scratch, &at, T * H);
    w->dm = w->m; /* m is dead once dWd += dy^T m has run */
    w->dout = take(scratch, &at, T * QD);
    w->dq = take(scratch, &at, T * QD);
    w->dk = take(scratch, &at, T * KD);
    w->dv = take(scratch, &at, T * KD);
    w->scratch_total = at;
}

size_t rp_block_saved_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    block_ws w;
    carve(cfg, nseq, seqlen, NULL, NULL, &w);
    return w.saved_total;
}

size_t rp_block_workspace_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    block_ws w;
    carve(cfg, nseq, seqlen, NULL, NULL, &w);
    return w.scratch_total;
}

void rp_model_rope_inv_freq(const rp_model_config *cfg, float *inv_freq)
{
    rp_rope_llama3 l3 = {0};
    const rp_rope_llama3 *p = NULL;
    if (cfg->rope_scaling.type == RP_ROPE_LLAMA3) {
        l3.factor = cfg->rope_scaling.factor;
        l3.low_freq_factor = cfg->rope_scaling.low_freq_factor;
        l3.high_freq_factor = cfg->rope_scaling.high_freq_factor;
        l3.original_max_position_embeddings =
            (double)cfg->rope_scaling.original_max_position_embeddings;
        p = &l3;
    }
    rp_rope_inv_freq(inv_freq, cfg->head_dim, cfg->rope_theta, p);
}

#define PARAM(P, field) ((P) + off.field)
#define OPT(P, field) (off.field == SIZE_MAX ? NULL : (P) + off.field)

/* Forward into the saved area. When y != NULL the block output is written
 * there; without it (a backward stage's last layer, whose output nobody
 * reads) the down projection is skipped. */
static void forward_ws(const rp_model_config *cfg, const float *P, const float *x, float *y,
                       int64_t nseq, int64_t seqlen, block_ws *w)
{
    rp_block_offsets off;
    rp_block_offsets_get(cfg, &off);
    const int64_t T = nseq * seqlen, H = cfg->hidden_size, I = cfg->intermediate_size;
    const int64_t hd = cfg->head_dim, nh = cfg->num_attention_heads,
                  nkv = cfg->num_key_value_heads;
    const int64_t QD = nh * hd, KD = nkv * hd;
    const float eps = (float)cfg->rms_norm_eps;
    const int qk = cfg->arch == RP_ARCH_QWEN3;

    rp_rmsnorm_forward(x, PARAM(P, in_norm), w->h1, w->rstd1, T, H, eps);
    rp_linear_forward(w->h1, PARAM(P, wq), OPT(P, bq), qk ? w->qraw : w->q, T, H, QD);
    rp_linear_forward(w->h1, PARAM(P, wk), OPT(P, bk), qk ? w->kraw : w->k, T, H, KD);
    rp_linear_forward(w->h1, PARAM(P, wv), OPT(P, bv), w->v, T, H, KD);
    if (qk) {
        rp_rmsnorm_forward(w->qraw, PARAM(P, q_norm), w->q, w->rstdq, T * nh, hd, eps);
        rp_rmsnorm_forward(w->kraw, PARAM(P, k_norm), w->k, w->rstdk, T * nkv, hd, eps);
    }
    rp_model_rope_inv_freq(cfg, w->inv_freq);
    rp_rope_table(w->rope, w->inv_freq, seqlen, hd / 2);
    rp_rope_apply(w->q, w->rope, nseq, seqlen, nh, hd, 0);
    rp_rope_apply(w->k, w->rope, nseq, seqlen, nkv, hd, 0);

    rp_attn_shape s = attn_shape(cfg, nseq, seqlen);
    rp_attn_forward(&s, w->q, w->k, w->v, w->o, w->lse);

    rp_linear_forward(w->o, PARAM(P, wo), OPT(P, bo), w->tmp, T, QD, H);
    float *x2 = w->x2, *tmp = w->tmp;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * H; i++)
        x2[i] = x[i] + tmp[i];

    rp_rmsnorm_forward(x2, PARAM(P, post_norm), w->h2, w->rstd2, T, H, eps);
    rp_linear_forward(w->h2, PARAM(P, w_gate), NULL, w->g, T, H, I);
    rp_linear_forward(w->h2, PARAM(P, w_up), NULL, w->u, T, H, I);
    float *g = w->g, *u = w->u, *m = w->m;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * I; i++)
        m[i] = g[i] / (1.0f + expf(-g[i])) * u[i]; /* torch silu: x / (1 + exp(-x)) */

    if (y) {
        rp_linear_forward(m, PARAM(P, w_down), NULL, tmp, T, I, H);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < T * H; i++)
            y[i] = x2[i] + tmp[i];
    }
}

void rp_block_forward(const rp_model_config *cfg, const float *params, const float *x, float *y,
                      int64_t nseq, int64_t seqlen, float *saved, float *ws)
{
    if (nseq <= 0 || seqlen <= 0)
        return;
    block_ws w;
    carve(cfg, nseq, seqlen, saved, ws, &w);
    forward_ws(cfg, params, x, y, nseq, seqlen, &w);
}

void rp_block_backward(const rp_model_config *cfg, const float *params, const float *x,
                       float *saved, const float *dy, float *dx, float *dparams, int64_t nseq,
                       int64_t seqlen, float *ws)
{
    if (nseq <= 0 || seqlen <= 0)
        return;
    block_ws w;
    carve(cfg, nseq, seqlen, saved, ws, &w);

    rp_block_offsets off;
    rp_block_offsets_get(cfg, &off);
    const float *P = params;
    float *D = dparams;
    const int64_t T = nseq * seqlen, H = cfg->hidden_size, I = cfg->intermediate_size;
    const int64_t hd = cfg->head_dim, nh = cfg->num_attention_heads,
                  nkv = cfg->num_key_value_heads;
    const int64_t QD = nh * hd, KD = nkv * hd;
    const int qk = cfg->arch == RP_ARCH_QWEN3;

    /* MLP: y = x2 + m Wd^T, m = silu(g) * u. dm overwrites m, so the
     * weight gradient must come first. */
    rp_linear_backward_weight(dy, w.m, PARAM(D, w_down), NULL, T, I, H);
    rp_linear_backward_input(dy, PARAM(P, w_down), w.dm, T, I, H, 0);
    float *g = w.g, *u = w.u, *dm = w.dm;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < T * I; i++) {
        /* g becomes dL/dg and u becomes dL/du, in place */
        float gi = g[i], sg = 1.0f / (1.0f + expf(-gi));
        float silu = gi / (1.0f + expf(-gi));
        g[i] = dm[i] * u[i] * (sg * (1.0f + gi * (1.0f - sg)));
        u[i] = dm[i] * silu;
    }
    rp_linear_backward_weight(g, w.h2, PARAM(D, w_gate), NULL, T, H, I);
    rp_linear_backward_weight(u, w.h2, PARAM(D, w_up), NULL, T, H, I);
    rp_linear_backward_input(g, PARAM(P, w_gate), w.tmp, T, H, I, 0);
    rp_linear_backward_input(u, PARAM(P, w_up), w.tmp, T, H, I, 1);
    /* dx2 = dy + rmsnorm backward; kept in dx (dy is no longer read after
     * this, so dx may alias dy) */
    if (dx != dy)
        memcpy(dx, dy, sizeof(float) * (size_t)(T * H));
    rp_rmsnorm_backward(w.x2, PARAM(P, post_norm), w.rstd2, w.tmp, dx, PARAM(D, post_norm), T, H,
                        1);

    /* attention output projection */
    rp_linear_backward_weight(dx, w.o, PARAM(D, wo), OPT(D, bo), T, QD, H);
    rp_linear_backward_input(dx, PARAM(P, wo), w.dout, T, QD, H, 0);
    rp_attn_shape s = attn_shape(cfg, nseq, seqlen);
    rp_attn_backward(&s, w.q, w.k, w.v, w.o, w.lse, w.dout, w.dq, w.dk, w.dv);
    rp_rope_apply(w.dq, w.rope, nseq, seqlen, nh, hd, 1);
    rp_rope_apply(w.dk, w.rope, nseq, seqlen, nkv, hd, 1);
    if (qk) {
        rp_rmsnorm_backward(w.qraw, PARAM(P, q_norm), w.rstdq, w.dq, w.dq, PARAM(D, q_norm),
                            T * nh, hd, 0);
        rp_rmsnorm_backward(w.kraw, PARAM(P, k_norm), w.rstdk, w.dk, w.dk, PARAM(D, k_norm),
                            T * nkv, hd, 0);
    }
    rp_linear_backward_weight(w.dq, w.h1, PARAM(D, wq), OPT(D, bq), T, H, QD);
    rp_linear_backward_weight(w.dk, w.h1, PARAM(D, wk), OPT(D, bk), T, H, KD);
    rp_linear_backward_weight(w.dv, w.h1, PARAM(D, wv), OPT(D, bv), T, H, KD);
    rp_linear_backward_input(w.dq, PARAM(P, wq), w.tmp, T, H, QD, 0);
    rp_linear_backward_input(w.dk, PARAM(P, wk), w.tmp, T, H, KD, 1);
    rp_linear_backward_input(w.dv, PARAM(P, wv), w.tmp, T, H, KD, 1);
    rp_rmsnorm_backward(x, PARAM(P, in_norm), w.rstd1, w.tmp, dx, PARAM(D, in_norm), T, H, 1);
}
