/* Closed-form cost model and range sums over a layer list. */
#include "plan/cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rp_status rp_cost_model_create(int n, rp_cost_model **out, rp_error *err)
{
    *out = NULL;
    if (n < 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cost model: %d layers (need at least 1)", n);
    rp_cost_model *m = calloc(1, sizeof *m);
    if (!m || !(m->layers = calloc((size_t)n, sizeof *m->layers))) {
        free(m);
        return rp_error_set(err, RP_ERR_NOMEM, "cost model: cannot allocate %d layers", n);
    }
    m->num_layers = n;
    for (int i = 0; i < n; i++) {
        m->layers[i].kind = RP_LAYER_BLOCK;
        m->layers[i].tied_to = -1;
    }
    *out = m;
    return RP_OK;
}

void rp_cost_model_destroy(rp_cost_model **m)
{
    if (!m || !*m)
        return;
    free((*m)->layers);
    free(*m);
    *m = NULL;
}

int64_t rp_cost_block_params(const rp_model_shape *s)
{
    int64_t q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim;
    int64_t attn = s->hidden * q + 2 * s->hidden * kv + q * s->hidden;
    if (s->attention_bias)
        attn += q + 2 * kv;
    int64_t mlp = 3 * s->hidden * s->intermediate;
    /* two RMSNorm weights; Qwen3's per-head q/k norms are too small to matter
     * for time and are left out of the GEMM count, not of the bytes */
    return attn + mlp + 2 * s->hidden + 2 * s->head_dim;
}

int64_t rp_cost_embed_params(const rp_model_shape *s) { return s->vocab * s->hidden; }

int64_t rp_cost_head_params(const rp_model_shape *s)
{
    return s->hidden + (s->tied ? 0 : s->vocab * s->hidden);
}

/* LoRA's projections, in the order of rp_model_shape.lora_targets' bits:
 * q, k, v, o, then the MLP's gate, up and down. */
#define LORA_NPROJ 7
#define LORA_GATE 4
#define LORA_DOWN 6

/* in and out features of projection p (q, k, v, o, gate, up, down). */
static void proj_features(const rp_model_shape *s, int p, int64_t *in, int64_t *out)
{
    const int64_t h = s->hidden, q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim,
                  i = s->intermediate;
    const int64_t ins[LORA_NPROJ] = {h, h, h, q, h, h, i};
    const int64_t outs[LORA_NPROJ] = {q, kv, kv, h, i, i, h};
    *in = ins[p];
    *out = outs[p];
}

int64_t rp_cost_adapter_params(const rp_model_shape *s)
{
    int64_t n = 0;
    for (int p = 0; s->lora_rank > 0 && p < LORA_NPROJ; p++)
        if (s->lora_targets & (1u << p)) {
            int64_t in, out;
            proj_features(s, p, &in, &out);
            n += s->lora_rank * (in + out);
        }
    return n;
}

/* The weights a token of a dense block passes through again in the
 * backward when its MLP keeps none of g, u, m (mlp_remade): the gate and
 * up GEMMs, their adapters whole and the down adapter's A (x -> A x, the
 * input its weight gradient reads). */
static double dense_remade_params(const rp_model_shape *s)
{
    if (!s->mlp_remade)
        return 0;
    double n = 2.0 * (double)(s->hidden * s->intermediate);
    for (int p = LORA_GATE; s->lora_rank > 0 && p <= LORA_DOWN; p++)
        if (s->lora_targets & (1u << p)) {
            int64_t in, out;
            proj_features(s, p, &in, &out);
            n += (double)s->lora_rank * (double)(p == LORA_DOWN ? in : in + out);
        }
    return n;
}

static int lora_targets_count(const rp_model_shape *s)
{
    int n = 0;
    for (int p = 0; p < LORA_NPROJ; p++)
        n += (s->lora_targets >> p) & 1u;
    return n;
}

/* QK^T and AV: 2 * d FLOPs each per key a query sees; causal, query i of a
 * sequence sees keys 0..i, (S + 1) / 2 on average, and the engine's
 * attention visits exactly those (kernels/cpu/attention.c; model/layout.c's
 * rp_block_work_get counts them alike) */
static double attn_flops_per_token(const rp_model_shape *s, int64_t seq_len)
{
    return 4.0 * (double)(seq_len + 1) / 2.0 * (double)(s->heads * s->head_dim);
}

double rp_cost_block_fwd_flops_per_token(const rp_model_shape *s, int64_t seq_len)
{
    int64_t q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim;
    double gemm_params = (double)(s->hidden * q + 2 * s->hidden * kv + q * s->hidden +
                                  3 * s->hidden * s->intermediate);
    return 2.0 * gemm_params + attn_flops_per_token(s, seq_len);
}

/* Roofline: a kernel takes at least its FLOPs at the achieved rate and at
 * least the time to read its weights once. */
static double roof_ms(double flops, double bytes, const rp_device_spec *d)
{
    double tc = flops / (d->tflops * 1e12), tm = bytes / (d->mem_gbs * 1e9);
    return 1e3 * (tc > tm ? tc : tm);
}

/* The closed-form model, per microbatch of T tokens at sequence length S,
 * multiply-add = 2 FLOPs (h hidden, q = heads x head_dim, kv = kv_heads x
 * head_dim, I intermediate, V vocabulary, P a block's parameters, cb and gb
 * the bytes of a weight and of a gradient element; a time is the roofline's
 * larger of FLOPs at --tflops and bytes at --device-gbs):
 *   embedding: a gather forward (T h cb bytes), a scatter-add backward
 *     (2 T h gb bytes), which is all weight gradient; V h parameters.
 *   block: forward F = T (2 G + 2 (S + 1) q) with G the GEMM weights (P
 *     less the norms and biases), 2 (S + 1) q the causal attention ((S +
 *     1) / 2 keys a query on average); reads P cb bytes.
 *     Backward 2 x 2 T G + 2.5 x 2 T (S + 1) q + R reading 2 P cb bytes:
 *     two products a GEMM (input and weight gradients) and five attention
 *     products where the forward has two (the scores again, dV, dP, dQ and
 *     dK: kernels/cpu/attention.c's backward, flash attention's); the
 *     weight-gradient part is 2 T G (biases included); R = 2 T Gr, the
 *     MLP's forward the backward makes again: with mlp_remade (a
 *     microbatch of several MLP chunks) Gr = 2 h I, the gate and up GEMMs,
 *     and with LoRA their adapters' r (h + I) each and the down adapter's
 *     r I (its A x).
 *   head: forward 2 T V h (the logits), backward twice that (input and
 *     weight gradients), half of it weight gradient; the device holds the
 *     norm and the V x h matrix (the embedding's when tied).
 *   weights, gradients and optimizer work: every parameter of the layer.
 * A block given by the caller (rp_block_shape: a mixture of experts, an
 *   adapter on its router or experts) has its own P, Pa, the GEMM weights a
 *   token passes through in place of G (the router and k experts of all E
 *   held), the adapter weights a token passes through in place of Pa in
 *   Fa (an expert's adapter k times), its keys a query sees in place of
 *   (S + 1)/2 (4 q keys per token for the attention) and the GEMM and
 *   adapter weights its backward passes a token through again in place of
 *   Gr.
 * LoRA of rank r (lora_rank > 0) on targeted projections with in and out
 * features: Pa = sum of r (in + out) adapter parameters per block.
 *   An adapter's forward is x -> A x -> B (A x): Fa = 2 T Pa; its backward
 *   dB, d(A x), dA and dx: 2 Fa, of which Fa (dA, dB) is weight gradient.
 *   block: forward F + Fa; backward 2 T G (input gradients of the frozen
 *     GEMMs, none of their weights') + 2.5 x 2 T (S + 1) q (attention) +
 *     2 Fa + R, whose weight-gradient part is Fa; it reads (P + Pa) cb bytes forward
 *     and (P + Pa) cb + Pa gb backward (the adapters' gradients written).
 *     Uploads (P + Pa) cb bytes, downloads Pa gb, AdamW updates Pa; keeps
 *     r cb bytes a token per targeted projection (A x) beyond the full
 *     model's activations.
 *   embedding: frozen, forward as above, no backward, nothing downloaded
 *     or updated.
 *   head: frozen, forward as above, backward 2 T V h (the input gradient
 *     only), no weight gradient; never tied for the planner (nothing
 *     trains). */
static void embed_layer(const rp_model_shape *s, const rp_device_spec *d, int lora,
                        rp_layer_cost *e)
{
    double tok = (double)d->tokens_per_mb;
    int cb = d->compute_bytes, gb = d->grad_bytes;
    int64_t h = s->hidden, ep = rp_cost_embed_params(s);
    e->kind = RP_LAYER_EMBED;
    e->fwd_ms = roof_ms(0, tok * (double)h * cb, d);
    e->bwd_ms = lora ? 0.0 : roof_ms(0, tok * (double)h * gb * 2.0, d);
    e->wgrad_ms = e->bwd_ms;
    e->weight_bytes = ep * cb;
    e->grad_bytes = lora ? 0 : ep * gb;
    e->opt_params = lora ? 0 : ep;
    e->out_bytes = (int64_t)(tok * (double)h * cb);
}

static void block_layer(const rp_model_shape *s, const rp_device_spec *d, int64_t block,
                        rp_layer_cost *b)
{
    double tok = (double)d->tokens_per_mb;
    int cb = d->compute_bytes, gb = d->grad_bytes;
    int64_t h = s->hidden, q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim;
    const rp_block_shape *own = s->blocks && s->blocks[block].params ? &s->blocks[block] : NULL;
    int64_t bp = own ? own->params : rp_cost_block_params(s);
    double attn = (own ? 4.0 * (double)q * own->attention_keys
                       : attn_flops_per_token(s, d->seq_len)) * tok;
    double ff = own ? 2.0 * own->gemm_params * tok + attn
                    : rp_cost_block_fwd_flops_per_token(s, d->seq_len) * tok;
    double gemm = own ? 2.0 * own->gemm_params * tok
                      : 2.0 * (double)(bp - 2 * h - 2 * s->head_dim) * tok;
    /* the MLP's forward the backward makes again (model/block.c) */
    double remade = 2.0 * tok *
                    (own ? own->remade_gemm_params +
                               (s->lora_rank > 0 ? own->remade_adapter_gemm_params : 0.0)
                         : dense_remade_params(s));
    /* activations kept for backward, per token (bf16 unless compute is fp32):
     * two norm inputs, q/k/v, attention output, o-proj input, MLP input,
     * gate/up and the activation product; softmax statistics in fp32 (a
     * dense block's; plan replaces every layer's with what the executors
     * allocate, engine/memory_model.h) */
    double act_tok = (double)cb * (double)(5 * h + 2 * q + 2 * kv + 3 * s->intermediate) +
                     4.0 * (double)s->heads;
    b->kind = RP_LAYER_BLOCK;
    b->out_bytes = (int64_t)(tok * (double)h * cb);
    if (s->lora_rank < 1) {
        b->fwd_ms = roof_ms(ff, (double)bp * cb, d);
        const double bwd = 2.0 * (ff - attn) + 2.5 * attn + remade;
        b->bwd_ms = roof_ms(bwd, 2.0 * (double)bp * cb, d);
        b->wgrad_ms = b->bwd_ms * (gemm / bwd);
        b->weight_bytes = bp * cb;
        b->grad_bytes = bp * gb;
        b->opt_params = bp;
        b->act_bytes = (int64_t)(act_tok * tok);
        return;
    }
    int64_t ap = own ? own->adapter_params : rp_cost_adapter_params(s);
    double adapter = 2.0 * (own ? own->adapter_gemm_params : (double)ap) * tok;
    double fwd = ff + adapter, bwd = (ff - attn) + 2.5 * attn + 2.0 * adapter + remade;
    b->fwd_ms = roof_ms(fwd, (double)(bp + ap) * cb, d);
    b->bwd_ms = roof_ms(bwd, (double)(bp + ap) * cb + (double)ap * gb, d);
    b->wgrad_ms = b->bwd_ms * (adapter / bwd);
    b->weight_bytes = (bp + ap) * cb;
    b->grad_bytes = ap * gb;
    b->opt_params = ap;
    b->act_bytes = (int64_t)((act_tok + (double)cb * (double)s->lora_rank *
                                            (double)lora_targets_count(s)) * tok);
}

/* head: final norm + LM head GEMM + cross-entropy over chunks of 1024
 * tokens (the logits of one chunk and their gradient, fp32) */
static void head_layer(const rp_model_shape *s, const rp_device_spec *d, int lora,
                       rp_layer_cost *hd)
{
    double tok = (double)d->tokens_per_mb;
    int cb = d->compute_bytes, gb = d->grad_bytes;
    int64_t h = s->hidden;
    int64_t hp = s->hidden + s->vocab * s->hidden; /* what the device holds */
    double hf = 2.0 * (double)(s->vocab * h) * tok;
    double chunk = tok < 1024 ? tok : 1024;
    hd->kind = RP_LAYER_HEAD;
    hd->fwd_ms = roof_ms(hf, (double)hp * cb, d);
    hd->bwd_ms = lora ? roof_ms(hf, (double)hp * cb, d)
                      : roof_ms(2.0 * hf, 2.0 * (double)hp * cb, d);
    hd->wgrad_ms = lora ? 0.0 : hd->bwd_ms / 2.0;
    hd->weight_bytes = hp * cb;
    hd->grad_bytes = lora ? 0 : hp * gb;
    hd->opt_params = lora ? 0 : rp_cost_head_params(s);
    hd->act_bytes = (int64_t)(tok * (double)h * cb + chunk * (double)s->vocab * 8.0);
    hd->out_bytes = 0;
    hd->tied_to = s->tied && !lora ? 0 : -1;
}

rp_status rp_cost_from_shape(const rp_model_shape *s, const rp_device_spec *d, rp_cost_model **out,
                             rp_error *err)
{
    *out = NULL;
    if (s->hidden < 1 || s->intermediate < 1 || s->heads < 1 || s->kv_heads < 1 ||
        s->head_dim < 1 || s->vocab < 1 || s->layers < 1 || s->layers > 100000)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "cost model: model shape has a non-positive or absurd field");
    if (s->lora_rank < 0 || s->lora_rank > 65536 ||
        (s->lora_rank > 0 &&
         ((s->lora_targets == 0 && !s->blocks) || s->lora_targets >> LORA_NPROJ)))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "cost model: LoRA rank %lld outside [0, 65536] or targets 0x%x not a "
                            "non-empty set of the 7 projections",
                            (long long)s->lora_rank, s->lora_targets);
    if (!(d->tflops > 0) || !(d->mem_gbs > 0) || d->compute_bytes < 1 || d->grad_bytes < 1 ||
        d->seq_len < 1 || d->tokens_per_mb < 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "cost model: device TFLOP/s, GB/s, dtype sizes, sequence length and "
                            "tokens per microbatch must be positive");
    rp_cost_model *m;
    RP_TRY(rp_cost_model_create((int)s->layers + 2, &m, err));
    const int lora = s->lora_rank > 0;
    embed_layer(s, d, lora, &m->layers[0]);
    for (int64_t i = 1; i <= s->layers; i++)
        block_layer(s, d, i - 1, &m->layers[i]);
    head_layer(s, d, lora, &m->layers[s->layers + 1]);
    m->tokens_per_microbatch = d->tokens_per_mb;
    *out = m;
    return RP_OK;
}

rp_status rp_cost_from_work(const rp_layer_work *work, int n, double flops_per_ms,
                            int64_t tokens_per_mb, const double *fwd_ms, const double *bwd_ms,
                            rp_cost_model **out, rp_error *err)
{
    *out = NULL;
    if (!(flops_per_ms > 0) || tokens_per_mb < 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "cost model: the rate and the tokens per microbatch must be positive");
    rp_cost_model *m;
    RP_TRY(rp_cost_model_create(n, &m, err));
    snprintf(m->name, sizeof m->name, "model");
    m->tokens_per_microbatch = tokens_per_mb;
    for (int l = 0; l < n; l++) {
        const rp_layer_work *w = &work[l];
        rp_layer_cost *c = &m->layers[l];
        c->kind = w->kind;
        c->fwd_ms = w->fwd_flops_per_token * (double)tokens_per_mb / flops_per_ms + 1e-3;
        c->bwd_ms = (w->bwd_flops_per_token - w->fwd_flops_per_token) * (double)tokens_per_mb /
                        flops_per_ms +
                    1e-3;
        if (fwd_ms && fwd_ms[l] >= 0)
            c->fwd_ms = fwd_ms[l];
        if (bwd_ms && bwd_ms[l] >= 0)
            c->bwd_ms = bwd_ms[l];
        c->opt_params = w->params;
        c->tied_to = w->tied_to;
    }
    *out = m;
    return RP_OK;
}

void rp_cost_price_dequant(rp_cost_model *m, double mem_gbs)
{
    for (int l = 0; l < m->num_layers; l++)
        m->layers[l].dequant_ms = 1e3 * (double)m->layers[l].dequant_bytes / (mem_gbs * 1e9);
}

#define RANGE_SUM(T, expr)                                   \
    T sum = 0;                                               \
    for (int i = first; i <= last; i++) {                    \
        const rp_layer_cost *L = &m->layers[i];              \
        sum += (expr);                                       \
    }                                                        \
    return sum

double rp_cost_fwd_ms(const rp_cost_model *m, int first, int last) { RANGE_SUM(double, L->fwd_ms); }
double rp_cost_bwd_ms(const rp_cost_model *m, int first, int last)
{
    RANGE_SUM(double, L->fwd_ms + L->bwd_ms);
}
double rp_cost_wgrad_ms(const rp_cost_model *m, int first, int last)
{
    RANGE_SUM(double, L->wgrad_ms);
}
int64_t rp_cost_weight_bytes(const rp_cost_model *m, int first, int last)
{
    RANGE_SUM(int64_t, L->weight_bytes);
}
int64_t rp_cost_upload_bytes(const rp_cost_model *m, int first, int last)
{
    RANGE_SUM(int64_t, L->upload_bytes ? L->upload_bytes : L->weight_bytes);
}
int64_t rp_cost_grad_bytes(const rp_cost_model *m, int first, int last)
{
    RANGE_SUM(int64_t, L->grad_bytes);
}

int64_t rp_cost_grad_download_bytes(const rp_cost_model *m, int first, int last)
{
    RANGE_SUM(int64_t, L->grad_download_bytes ? L->grad_download_bytes : L->grad_bytes);
}
int64_t rp_cost_act_bytes(const rp_cost_model *m, int first, int last)
{
    RANGE_SUM(int64_t, L->act_bytes);
}

int64_t rp_cost_max_act_bytes(const rp_cost_model *m, int first, int last)
{
    int64_t mx = 0;
    for (int i = first; i <= last; i++)
        if (m->layers[i].act_bytes > mx)
            mx = m->layers[i].act_bytes;
    return mx;
}
