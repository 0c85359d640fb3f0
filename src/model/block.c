/* Decoder block of Llama / Qwen3 (transformers LlamaDecoderLayer,
 * Qwen3DecoderLayer), composed once over the kernel ops table
 * (kernels/ops.h) of whatever back end runs it:
 *   h1 = rmsnorm(x) * input_layernorm
 *   q, k, v = h1 Wq^T (+bq), h1 Wk^T (+bk), h1 Wv^T (+bv)
 *   Qwen3: q, k = per-head rmsnorm * q_norm, k_norm     (before RoPE)
 *   q, k = rope(q), rope(k)
 *   o = causal GQA softmax(q k^T / sqrt(head_dim)) v
 *   x2 = x + (o Wo^T (+bo))
 *   h2 = rmsnorm(x2) * post_attention_layernorm
 *   y = x2 + (silu(h2 Wg^T) * (h2 Wu^T)) Wd^T
 * Dtypes: what a GEMM or the attention reads (the weights, h1, q/k/v after
 * RoPE, o, h2, m, and the gradients fed to GEMMs) is in the table's compute
 * dtype; everything else (residual stream, norms' statistics, pre-RoPE
 * q/k, every gradient that accumulates) is fp32. The dense MLP's g, u and
 * dm, which only the SwiGLU reads, are fp32 where an adapter adds into them
 * (LoRA on gate or up: g and u; on down: dm), else in what their GEMM
 * writes straight: the compute dtype (on CUDA only with bf16-mlp: see
 * mlp_dtypes). On a table whose compute dtype is fp32 the two names of a
 * value are one buffer. Gate and up may run as one GEMM, g and u side by
 * side in its rows (mlp_fused_gate_up).
 * The forward keeps what the backward needs in the caller's `saved` area;
 * the backward goes back through the same steps from it, never running the
 * forward again, except the dense MLP's of a microbatch longer than one
 * chunk: it walks the tokens in chunks of whole tiles (model/token_tiles.h)
 * and keeps nothing of the intermediate width, so the backward makes a
 * chunk's g, u and m again from the saved h2 (the same tile GEMMs, so the
 * same bits) before going back through it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/unproven.h"
#include "io/config_lora.h"
#include "kernels/rope_freq.h"
#include "model/carve.h"
#include "model/lora.h"
#include "model/moe.h"
#include "model/token_tiles.h"

/* The block's one-dimensional tensors (norm weights, biases): the fp32 ops
 * read them, whatever dtype the parameters come in. */
enum { SMALL_IN_NORM, SMALL_POST_NORM, SMALL_Q_NORM, SMALL_K_NORM, SMALL_BQ, SMALL_BK, SMALL_BV,
       SMALL_BO, SMALL_SINKS, SMALL_ROUTER_BIAS, SMALL_COUNT };

/* Offset (SIZE_MAX: absent) and length of small tensor i. */
static size_t small_tensor(const rp_model_config *cfg, const rp_block_offsets *off, int i,
                           size_t *numel)
{
    const size_t H = (size_t)cfg->hidden_size, hd = (size_t)cfg->head_dim;
    const size_t QD = (size_t)cfg->num_attention_heads * hd,
                 KD = (size_t)cfg->num_key_value_heads * hd;
    const size_t at[SMALL_COUNT] = {off->in_norm, off->post_norm, off->q_norm, off->k_norm,
                                    off->bq,      off->bk,        off->bv,     off->bo,
                                    off->sinks,   off->router_bias};
    const size_t n[SMALL_COUNT] = {H,  H,  hd, hd, QD, KD, KD, H, (size_t)cfg->num_attention_heads,
                                   (size_t)cfg->moe.num_experts};
    *numel = n[i];
    return at[i];
}

/* Every intermediate: what the forward keeps for the backward, carved out
 * of the caller's saved area, and the scratch, out of the workspace.
 * Buffers that only Qwen3 needs are NULL for Llama; `void *` ones are in
 * the compute dtype. */
typedef struct block_ws {
    /* saved */
    void *wc; /* the layer's parameters in the compute dtype (NULL: the GEMMs read
               * them as they come) */
    float *small[SMALL_COUNT]; /* fp32 copies of the 1-D tensors, when neither the
                                * weights nor wc are fp32 */
    float *expert_bias; /* gpt-oss: the experts' biases' fp32 copy, likewise */
    void *h1, *q_c, *k_c, *v_c, *o, *h2;
    float *rstd1, *qraw, *rstdq, *kraw, *rstdk, *lse, *x2, *rstd2;
    /* scratch (q, k, v: saved when they are their own compute copies) */
    float *q, *k, *v, *tmp, *dq, *dk, *dv, *rope_space, *partial, *attn_scratch;
    void *dy_c, *dout, *dq_c, *dk_c, *dv_c;
    /* the dense MLP's scratch for one chunk of tokens (model/token_tiles.h);
     * g, u, m saved instead when the microbatch is one chunk (mlp_kept: the
     * forward makes them, the backward reads them); g and u in gu_dtype, dm
     * in dm_dtype (mlp_dtypes), m, dg, du in the compute dtype; g, u, dg and
     * du are rows at the row stride gu_ld: I, or with the fused gate/up
     * GEMM (mlp_fused_gate_up) 2 I, one [chunk, 2I] buffer of rows [g_row |
     * u_row] (u = g + I) and one of [dg_row | du_row] */
    void *g, *u, *dm, *m, *dg, *du;
    rp_dtype gu_dtype, dm_dtype;
    int mlp_kept, fused_gate_up;
    int64_t gu_ld;
    /* LoRA: the adapters in the compute dtype (saved; NULL: they come in
     * it), each projection's ts (saved; the dense MLP's with g, u and m,
     * a chunk's rows; an expert projection's are the experts' own:
     * rp_moe_bufs) and the shared scratch (T rows; one tile's rows for the
     * dense MLP's) */
    void *adapters_c;
    void *lora_ts[RP_LORA_NPROJ];
    rp_lora_bufs lora;
    /* a mixture-of-experts block's MLP (g, u, m, dm, dg, du are then NULL) */
    int moe;
    rp_block_offsets off; /* the block's tensors (rp_block_offsets_get) */
    rp_moe_bufs experts;
    size_t saved_total, scratch_total;
} block_ws;

/* Block `block`'s attention: gpt-oss's sliding blocks see a window of
 * keys (its sinks are set by the calls, from the weights). */
rp_attn_shape rp_block_attn_shape(const rp_model_config *cfg, int block, int64_t nseq,
                                  int64_t seqlen)
{
    rp_attn_shape s = {.nseq = nseq,
                       .window = cfg->arch == RP_ARCH_GPT_OSS &&
                                         rp_gpt_oss_block_is_sliding(&cfg->oss, block)
                                     ? cfg->oss.sliding_window
                                     : 0,
                       .seqlen = seqlen,
                       .nheads = cfg->num_attention_heads,
                       .nkv = cfg->num_key_value_heads,
                       .head_dim = cfg->head_dim,
                       .block = RP_ATTN_BLOCK,
                       .scale = 1.0f / sqrtf((float)cfg->head_dim)};
    return s;
}

static size_t max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* Whether projection p is one of a dense block's MLP (gate, up, down):
 * its adapter runs over the MLP's tiles, its ts kept for one chunk. */
static int dense_mlp_adapter(const block_ws *w, rp_lora_proj p)
{
    return !w->moe && (p == RP_LORA_GATE_PROJ || p == RP_LORA_UP_PROJ || p == RP_LORA_DOWN_PROJ);
}

/* Whether the table of ops is one the CUDA paths govern (core/unproven.h): a GPU's,
 * which computes in bf16 or reads no host memory (the CPU table does both). */
static int unproven_table(const rp_kernel_ops *ops)
{
    return ops->compute_dtype != RP_F32 || !ops->host_addressable;
}

/* The dtypes of the dense MLP's g and u (*gu) and of dm (*dm): the compute
 * dtype, what their GEMMs write and the SwiGLU reads, unless an adapter adds
 * into them in fp32 (adapted[p]: projection p has one). On a bf16 table
 * that rounds g and u before the SwiGLU (as PyTorch's bf16 models do), so
 * the CUDA table takes it where the bf16-mlp path is on (core/unproven.h:
 * proven on the H200 of 2026-11-30); with it off g, u and dm stay fp32.
 * Read here alone: the carving below both sizes the plan and the
 * executors' buffers and lays out the calls' buffers, so the memory model
 * and the run cannot choose apart (on fp32 tables both are fp32). */
static void mlp_dtypes(const rp_kernel_ops *ops, const int adapted[RP_LORA_NPROJ], rp_dtype *gu,
                       rp_dtype *dm)
{
    const int narrow = ops->compute_dtype != RP_F32 && rp_unproven_allowed(RP_UNPROVEN_BF16_MLP);
    *gu = narrow && !adapted[RP_LORA_GATE_PROJ] && !adapted[RP_LORA_UP_PROJ] ? ops->compute_dtype
                                                                               : RP_F32;
    *dm = narrow && !adapted[RP_LORA_DOWN_PROJ] ? ops->compute_dtype : RP_F32;
}

/* Whether block `block`'s dense MLP runs its gate and up projections as one
 * GEMM, g and u one [rows, 2I] output (the matrices [Wg; Wu] read as one
 * [2I, H] matrix), and their backward as one weight-gradient and one
 * input-gradient GEMM (K = 2I). The input gradient then sums over 2I in
 * one order rather than two GEMMs' I each then added, so its bits are not
 * the two GEMMs': the CPU executors keep the two unless a test sets
 * RP_TEST_FUSED_GATE_UP=1 (the path runs there so), and the CUDA table
 * takes it where the fused-gate-up path is on (core/unproven.h: proven on
 * the H200 of 2026-11-30). Taken only where the two matrices and their
 * gradients are adjacent by the block layout alone, so that every
 * executor, whichever job it runs, decides alike from the config (the
 * saved g and u of a kept MLP travel from the forward job to the backward
 * job through the host store in this layout): a dense block, the up
 * matrix right after the gate's (model/layout.c pads each tensor to
 * RP_PARAM_ALIGN elements, so I * H must be a multiple of it), and no
 * LoRA. With LoRA the frozen base comes as pieces, each where its
 * safetensors file, the store or an upload put it (engine/frozen_base.c),
 * not adjacent by layout: mapped files order their tensors as they were
 * written, shards map apart; and an adapter on gate or up adds into g or
 * u apart. Read here alone: carve sizes the plan and lays out the calls'
 * buffers from it, as for mlp_dtypes. */
static int mlp_fused_gate_up(const rp_kernel_ops *ops, const rp_model_config *cfg, int block,
                             const rp_block_offsets *off)
{
    const size_t I = (size_t)cfg->intermediate_size, H = (size_t)cfg->hidden_size;
    if (rp_model_block_is_moe(cfg, block) || cfg->lora.rank > 0 || off->w_gate == SIZE_MAX ||
        off->w_up != off->w_gate + I * H)
        return 0;
    if (unproven_table(ops))
        return rp_unproven_allowed(RP_UNPROVEN_FUSED_GATE_UP);
    return rp_block_test_fused_gate_up();
}

int rp_block_test_fused_gate_up(void)
{
    const char *test = getenv("RP_TEST_FUSED_GATE_UP");
    return test && strcmp(test, "1") == 0;
}

/* The dense MLP's pair of `bytes` each (g and u, or dg and du): two
 * buffers, or (fused) one of 2 x bytes whose rows are [first_row |
 * second_row], *second `half` bytes after *first. The carver moves on by
 * what two buffers take either way, so no area's size depends on the
 * path. */
static void carve_pair(rp_carver *c, size_t bytes, int fused, size_t half, void **first,
                       void **second)
{
    if (!fused) {
        *first = rp_carve_bytes(c, bytes);
        *second = rp_carve_bytes(c, bytes);
        return;
    }
    rp_carver two = {NULL, 0, 0, NULL}, one = two;
    (void)rp_carve_bytes(&two, bytes);
    (void)rp_carve_bytes(&two, bytes);
    (void)rp_carve_bytes(&one, 2 * bytes);
    *first = rp_carve_bytes(c, 2 * bytes);
    c->at += two.at - one.at;
    *second = *first ? (char *)*first + half : NULL;
}

/* The buffers of block `block` (its kind: dense or mixture of experts). */
static void carve(const rp_kernel_ops *ops, rp_dtype pdt, const rp_model_config *cfg, int block,
                  int64_t nseq, int64_t seqlen, float *saved, float *scratch,
                  rp_model_guards *guards, block_ws *w)
{
    const size_t T = (size_t)(nseq * seqlen), H = (size_t)cfg->hidden_size,
                 I = (size_t)cfg->intermediate_size, hd = (size_t)cfg->head_dim,
                 nh = (size_t)cfg->num_attention_heads, nkv = (size_t)cfg->num_key_value_heads;
    const size_t QD = nh * hd, KD = nkv * hd;
    const int qk = rp_model_has_qk_norm(cfg);
    const int one = ops->compute_dtype == RP_F32; /* a value and its compute copy are one */
    rp_carver sv = {saved, 0, 0, guards}, sc = {scratch, 0, 1, guards};
    memset(w, 0, sizeof *w);
    rp_block_offsets_get(cfg, block, &w->off);
    const rp_block_offsets off = w->off;

    /* weights the GEMMs cannot read as they come are converted whole */
    w->wc = rp_kernel_reads_weights(ops, pdt) ? NULL : rp_carve_compute(&sv, ops, off.numel);
    /* the 1-D tensors are widened when the weights are not fp32 (with LoRA
     * the frozen ones may come in another dtype than params_dtype) */
    if ((pdt != RP_F32 && !(w->wc && one)) || cfg->lora.rank > 0)
        for (int i = 0; i < SMALL_COUNT; i++) {
            size_t n;
            if (small_tensor(cfg, &off, i, &n) != SIZE_MAX)
                w->small[i] = rp_carve_f32(&sv, n);
        }
    if (off.expert_bias != SIZE_MAX && pdt != RP_F32 && !(w->wc && one))
        w->expert_bias =
            rp_carve_f32(&sv, (size_t)cfg->moe.num_experts * off.expert_bias_stride);
    w->h1 = rp_carve_compute(&sv, ops, T * H);
    w->rstd1 = rp_carve_f32(&sv, T);
    if (qk) {
        w->qraw = rp_carve_f32(&sv, T * QD);
        w->rstdq = rp_carve_f32(&sv, T * nh);
        w->kraw = rp_carve_f32(&sv, T * KD);
        w->rstdk = rp_carve_f32(&sv, T * nkv);
    }
    if (one) {
        w->q = w->q_c = rp_carve_f32(&sv, T * QD);
        w->k = w->k_c = rp_carve_f32(&sv, T * KD);
        w->v = w->v_c = rp_carve_f32(&sv, T * KD);
    } else {
        w->q_c = rp_carve_compute(&sv, ops, T * QD);
        w->k_c = rp_carve_compute(&sv, ops, T * KD);
        w->v_c = rp_carve_compute(&sv, ops, T * KD);
    }
    w->o = rp_carve_compute(&sv, ops, T * QD);
    w->lse = rp_carve_f32(&sv, T * nh);
    w->x2 = rp_carve_f32(&sv, T * H);
    w->rstd2 = rp_carve_f32(&sv, T);
    w->h2 = rp_carve_compute(&sv, ops, T * H);
    w->moe = rp_model_block_is_moe(cfg, block);
    /* a RoPE table the table does not keep is made by the forward and kept
     * for the backward; one it keeps is copied here where YaRN scales it
     * (rope_of) */
    size_t n = ops->rope_table_floats((int64_t)seqlen, (int64_t)hd / 2);
    if (n == 0 && rp_model_rope_attention_factor(cfg) != 1.0)
        n = rp_rope_table_floats((int64_t)seqlen, (int64_t)hd / 2);
    w->rope_space = n ? rp_carve_f32(&sv, n) : NULL;
    const rp_lora_config *lc = &cfg->lora;
    /* the dense MLP's tokens at once: a chunk of whole tiles */
    const size_t tile = (size_t)rp_token_tile(cfg, (int64_t)T),
                 chunk = (size_t)rp_chunk_tokens(cfg, (int64_t)T);
    /* the widest input or output of a projection over T rows, and of the
     * dense MLP's adapters (over a tile's rows); the experts' adapters have
     * their own buffers (rp_moe_carve) */
    size_t wide = max3(H, QD, KD), mlp_wide = 0;
    int mlp_adapter[RP_LORA_NPROJ] = {0};
    if (lc->rank > 0) {
        rp_lora_offsets lo;
        rp_lora_offsets_get(cfg, block, &lo);
        w->adapters_c = pdt == ops->compute_dtype ? NULL : rp_carve_compute(&sv, ops, lo.numel);
        for (int p = 0; p < RP_LORA_NPROJ; p++) {
            if (lo.a[p] == SIZE_MAX || rp_lora_per_expert(cfg, block, (rp_lora_proj)p))
                continue;
            int64_t in, out;
            rp_lora_features(cfg, block, (rp_lora_proj)p, &in, &out);
            if (dense_mlp_adapter(w, (rp_lora_proj)p)) { /* ts with g, u, m below */
                mlp_adapter[p] = 1;
                mlp_wide = max3(mlp_wide, (size_t)in, (size_t)out);
                continue;
            }
            wide = max3(wide, (size_t)in, (size_t)out);
            w->lora_ts[p] = rp_carve_compute(&sv, ops, T * (size_t)lc->rank);
        }
    }
    if (w->moe)
        rp_moe_carve(ops, cfg, block, T, &sv, &sc, &w->experts);
    /* the dense MLP's chunk: saved when it is the whole microbatch, else
     * scratch (below); fp32 tables: dm overwrites m (a tile's m is dead
     * once its dWd += dy^T m has run), and dg, du overwrite g, u (the
     * SwiGLU backward works in place) */
    w->mlp_kept = !w->moe && chunk >= T;
    rp_carver *mlp = w->mlp_kept ? &sv : &sc;
    mlp_dtypes(ops, mlp_adapter, &w->gu_dtype, &w->dm_dtype);
    w->fused_gate_up = mlp_fused_gate_up(ops, cfg, block, &off);
    w->gu_ld = (int64_t)(w->fused_gate_up ? 2 * I : I);
    const size_t gu_bytes = chunk * I * rp_dtype_size(w->gu_dtype);
    if (!w->moe && w->mlp_kept) {
        carve_pair(mlp, gu_bytes, w->fused_gate_up, I * rp_dtype_size(w->gu_dtype), &w->g, &w->u);
        w->m = rp_carve_compute(mlp, ops, chunk * I);
        for (int p = 0; p < RP_LORA_NPROJ; p++)
            if (mlp_adapter[p])
                w->lora_ts[p] = rp_carve_compute(mlp, ops, chunk * (size_t)lc->rank);
    }
    w->saved_total = sv.at;

    if (!one) {
        w->q = rp_carve_f32(&sc, T * QD);
        w->k = rp_carve_f32(&sc, T * KD);
        w->v = rp_carve_f32(&sc, T * KD);
    }
    w->tmp = rp_carve_f32(&sc, T * H);
    if (!w->moe && !w->mlp_kept) {
        carve_pair(mlp, gu_bytes, w->fused_gate_up, I * rp_dtype_size(w->gu_dtype), &w->g, &w->u);
        w->m = rp_carve_compute(mlp, ops, chunk * I);
        for (int p = 0; p < RP_LORA_NPROJ; p++)
            if (mlp_adapter[p])
                w->lora_ts[p] = rp_carve_compute(mlp, ops, chunk * (size_t)lc->rank);
    }
    if (!w->moe) {
        w->dm = one ? w->m : rp_carve_bytes(&sc, chunk * I * rp_dtype_size(w->dm_dtype));
        if (one)
            w->dg = w->g, w->du = w->u;
        else
            carve_pair(&sc, chunk * I * rp_kernel_compute_bytes(ops), w->fused_gate_up,
                       I * rp_kernel_compute_bytes(ops), &w->dg, &w->du);
    }
    w->dy_c = one ? NULL : rp_carve_compute(&sc, ops, T * H); /* NULL: dy itself */
    w->dout = rp_carve_compute(&sc, ops, T * QD);
    w->dq = rp_carve_f32(&sc, T * QD);
    w->dk = rp_carve_f32(&sc, T * KD);
    w->dv = rp_carve_f32(&sc, T * KD);
    if (!one) {
        w->dq_c = rp_carve_compute(&sc, ops, T * QD);
        w->dk_c = rp_carve_compute(&sc, ops, T * KD);
        w->dv_c = rp_carve_compute(&sc, ops, T * KD);
    } else {
        w->dq_c = w->dq, w->dk_c = w->dk, w->dv_c = w->dv;
    }
    /* column sums of up to max(H, QD, KD) columns, and of the router's E
     * (gpt-oss's router bias) */
    n = ops->column_sum_scratch_floats(
        (int64_t)max3(max3(H, QD, KD), off.router_bias != SIZE_MAX ? (size_t)cfg->moe.num_experts
                                                                   : 0, 0));
    w->partial = n ? rp_carve_f32(&sc, n) : NULL;
    rp_attn_shape s = rp_block_attn_shape(cfg, block, nseq, seqlen);
    n = ops->attention_backward_scratch_floats(&s);
    w->attn_scratch = n ? rp_carve_f32(&sc, n) : NULL;
    if (lc->rank > 0) {
        /* the dense MLP's adapters run over one tile (tile <= T rows) */
        const size_t u = T * wide > tile * mlp_wide ? T * wide : tile * mlp_wide;
        w->lora.t = rp_carve_f32(&sc, T * (size_t)lc->rank);
        w->lora.u = rp_carve_f32(&sc, u);
        w->lora.dt = rp_carve_compute(&sc, ops, T * (size_t)lc->rank);
        if (lc->dropout > 0) { /* never on experts (model/layout.h): T rows */
            const size_t x = T * wide > tile * mlp_wide ? T * wide : tile * mlp_wide;
            w->lora.xd = rp_carve_compute(&sc, ops, x);
            w->lora.dxd = rp_carve_f32(&sc, x);
        }
    }
    w->scratch_total = sc.at;
}

/* A dense block and a mixture-of-experts block of the model, or -1 where
 * it has none of that kind. */
static void block_kinds(const rp_model_config *cfg, int *dense, int *moe)
{
    *dense = *moe = -1;
    for (int i = 0; i < cfg->num_hidden_layers && (*dense < 0 || *moe < 0); i++) {
        int *kind = rp_model_block_is_moe(cfg, i) ? moe : dense;
        if (*kind < 0)
            *kind = i;
    }
    if (*dense < 0 && *moe < 0)
        *dense = 0; /* a model without blocks: size as a dense one */
}

/* The larger of a dense and a mixture-of-experts block's areas (the
 * executors hold one size for every block). */
static void carve_sizes(const rp_kernel_ops *ops, rp_dtype pdt, const rp_model_config *cfg,
                        int64_t nseq, int64_t seqlen, size_t *saved, size_t *scratch)
{
    int kind[2];
    block_kinds(cfg, &kind[0], &kind[1]);
    *saved = *scratch = 0;
    for (int i = 0; i < 2; i++) {
        if (kind[i] < 0)
            continue;
        block_ws w;
        carve(ops, pdt, cfg, kind[i], nseq, seqlen, NULL, NULL, NULL, &w);
        *saved = w.saved_total > *saved ? w.saved_total : *saved;
        *scratch = w.scratch_total > *scratch ? w.scratch_total : *scratch;
    }
}

size_t rp_block_saved_floats(const rp_kernel_ops *ops, rp_dtype params_dtype,
                             const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    size_t saved, scratch;
    carve_sizes(ops, params_dtype, cfg, nseq, seqlen, &saved, &scratch);
    return saved;
}

size_t rp_block_saved_floats_of(const rp_kernel_ops *ops, rp_dtype params_dtype,
                                const rp_model_config *cfg, int block, int64_t nseq,
                                int64_t seqlen)
{
    block_ws w;
    carve(ops, params_dtype, cfg, block, nseq, seqlen, NULL, NULL, NULL, &w);
    return w.saved_total;
}

size_t rp_block_workspace_floats(const rp_kernel_ops *ops, rp_dtype params_dtype,
                                 const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    size_t saved, scratch;
    carve_sizes(ops, params_dtype, cfg, nseq, seqlen, &saved, &scratch);
    return scratch;
}

void rp_block_guards(const rp_kernel_ops *ops, rp_dtype params_dtype, const rp_model_config *cfg,
                     int block, int64_t nseq, int64_t seqlen, rp_model_guards *out)
{
    block_ws w;
    memset(out, 0, sizeof *out);
    carve(ops, params_dtype, cfg, block, nseq, seqlen, NULL, NULL, out, &w);
}

/* YaRN's settings as kernels/rope_freq.h takes them. */
static rp_rope_yarn yarn_of(const rp_model_config *cfg)
{
    const rp_rope_scaling *r = &cfg->rope_scaling;
    rp_rope_yarn y = {.factor = r->factor,
                      .beta_fast = r->beta_fast,
                      .beta_slow = r->beta_slow,
                      .original_max_position_embeddings =
                          (double)r->original_max_position_embeddings,
                      .truncate = r->truncate,
                      .attention_factor = r->attention_factor,
                      .mscale = r->mscale,
                      .mscale_all_dim = r->mscale_all_dim};
    return y;
}

double rp_model_rope_attention_factor(const rp_model_config *cfg)
{
    if (cfg->rope_scaling.type != RP_ROPE_YARN)
        return 1.0;
    float inv_freq[RP_MODEL_MAX_HEAD_DIM / 2];
    rp_rope_yarn y = yarn_of(cfg);
    return rp_rope_yarn_inv_freq(inv_freq, cfg->head_dim, cfg->rope_theta, &y);
}

rp_status rp_model_ops_check(const rp_model_config *cfg, const rp_kernel_ops *ops,
                             int allow_unproven, rp_error *err)
{
    /* the CUDA table's gpt-oss ops (sinks, windows, clamped SwiGLU, expert
     * biases) were written without a GPU and have not run on one yet; the
     * block reads only what a bf16 table gives (model/moe.c), so the
     * maintainer's switch lets a GPU session prove them */
    if ((ops->head_dim_step > 0 && cfg->head_dim % ops->head_dim_step != 0) ||
        (ops->head_dim_max > 0 && cfg->head_dim > ops->head_dim_max))
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "head_dim %lld: %s executors' attention takes multiples of %d up to "
                            "%d (use --device cpu)", (long long)cfg->head_dim, ops->name,
                            ops->head_dim_step, ops->head_dim_max);
    if (cfg->arch == RP_ARCH_GPT_OSS && !allow_unproven && unproven_table(ops))
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "gpt-oss on %s executors: its attention sinks and windows, clamped "
                            "SwiGLU and expert biases are turned off (RP_DISABLE_CUDA_PATHS "
                            "names gpt-oss); use --device cpu, or leave them on", ops->name);
    return RP_OK;
}

void rp_model_rope_inv_freq(const rp_model_config *cfg, float *inv_freq)
{
    if (cfg->rope_scaling.type == RP_ROPE_YARN) {
        rp_rope_yarn y = yarn_of(cfg);
        (void)rp_rope_yarn_inv_freq(inv_freq, cfg->head_dim, cfg->rope_theta, &y);
        return;
    }
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

/* The RoPE table for this shape: from the back end (which may keep it), or
 * in the saved area, where the forward made it for the backward. */
static rp_status rope_of(const rp_kernels *k, const rp_model_config *cfg, int64_t seqlen,
                         block_ws *w, int forward, const float **table, rp_error *err)
{
    if (!forward && w->rope_space) {
        *table = w->rope_space;
        return RP_OK;
    }
    float inv_freq[RP_MODEL_MAX_HEAD_DIM / 2];
    rp_model_rope_inv_freq(cfg, inv_freq);
    const int64_t half = cfg->head_dim / 2;
    float *space = k->ops->rope_table_floats(seqlen, half) ? w->rope_space : NULL;
    RP_OP(rope_table, inv_freq, seqlen, half, space, table);
    /* YaRN scales cos and sin by its attention factor (in fp32, as
     * transformers' rotary embedding); the forward scales the table it
     * made, or a copy of the one the back end keeps (which other calls
     * read unscaled), and keeps it for the backward (rotating by the
     * scaled table's transpose is the scaled rotation's gradient) */
    const double a = rp_model_rope_attention_factor(cfg);
    if (a == 1.0)
        return RP_OK;
    if (!w->rope_space) /* carve makes room wherever the factor is not 1 */
        return rp_error_set(err, RP_ERR_INTERNAL, "%s kernels: no room for YaRN's scaled RoPE "
                            "table", k->ops->name);
    RP_OP(scaled_add, *table, (float)a, w->rope_space, NULL,
          (int64_t)rp_rope_table_floats(seqlen, half), 0);
    *table = w->rope_space;
    return RP_OK;
}

/* The weights as the ops read them: the matrices where they lie (the
 * parameters, one block or tensor by tensor, or their copy in wc made by
 * the forward) in `wdt`, the 1-D tensors in fp32 (the weights, the
 * widened copy, or the small copies made by the forward). */
typedef struct block_params {
    const void *W;                /* the block, or NULL: */
    const rp_weight_piece *piece; /* tensor by tensor (LoRA's base in place) */
    int npieces;
    rp_dtype wdt;                 /* of the matrices */
    const float *f[SMALL_COUNT];
    const float *expert_bias; /* gpt-oss: the experts' biases, fp32 (else NULL) */
    int block;            /* model.layers.{block} */
    const void *adapters; /* LoRA, in the compute dtype (NULL without LoRA) */
    rp_lora_offsets lora_off; /* their layout */
} block_params;

#define OP RP_OP

/* The weights' tensor at element `at` of the block layout, in dtype dt. */
static const void *tensor_at(const void *W, const rp_weight_piece *piece, int npieces, size_t at,
                             rp_dtype dt)
{
    if (W)
        return (const char *)W + at * rp_dtype_size(dt);
    for (int i = 0; i < npieces; i++)
        if (piece[i].at == at)
            return piece[i].src;
    return NULL;
}

/* Matrix `at` as the GEMMs read it (dtype bp->wdt). */
static const void *matrix(const block_params *bp, size_t at)
{
    return tensor_at(bp->W, bp->piece, bp->npieces, at, bp->wdt);
}

static rp_status params_view(const rp_kernels *k, const rp_model_config *cfg, int block,
                             const rp_block_offsets *off, const void *P, rp_dtype pdt,
                             const rp_lora_call *lora, const block_ws *w, int convert,
                             block_params *v, rp_error *err)
{
    const int lora_on = cfg->lora.rank > 0;
    const rp_weight_piece *piece = lora_on && lora ? lora->base : NULL;
    const int npieces = piece ? lora->nbase : 0;
    const rp_dtype fdt = piece ? lora->base_dtype : pdt; /* the frozen weights' dtype */
    if (piece && (P || !rp_kernel_reads_weights(k->ops, fdt)))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "block: frozen weights given both ways, "
                            "or in pieces of %s, which %s GEMMs do not read",
                            rp_dtype_name(fdt), k->ops->name);
    if (!piece && !P)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "block: no weights given");
    if (convert && w->wc)
        OP(convert, P, pdt, w->wc, k->ops->compute_dtype, (int64_t)off->numel);
    v->W = w->wc ? w->wc : P;
    v->piece = piece;
    v->npieces = npieces;
    v->wdt = w->wc ? k->ops->compute_dtype : fdt;
    v->block = block;
    v->adapters = NULL;
    if (lora_on) {
        if (!lora || !lora->adapters)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "LoRA block: no adapters given");
        rp_lora_offsets_get(cfg, block, &v->lora_off);
        if (convert && w->adapters_c)
            OP(convert, lora->adapters, pdt, w->adapters_c, k->ops->compute_dtype,
               (int64_t)v->lora_off.numel);
        v->adapters = w->adapters_c ? w->adapters_c : lora->adapters;
    }
    /* fp32 1-D tensors where they lie: the weights themselves when they
     * come in fp32 (not wc, which holds them in the compute dtype: bf16 on
     * CUDA), or wc when that is fp32; else widened into w->small */
    const int f32 = fdt == RP_F32 || (w->wc && k->ops->compute_dtype == RP_F32);
    const void *f32_base = fdt == RP_F32 ? P : w->wc;
    const rp_weight_piece *f32_piece = fdt == RP_F32 ? piece : NULL;
    const int f32_npieces = fdt == RP_F32 ? npieces : 0;
    for (int i = 0; i < SMALL_COUNT; i++) {
        size_t n, at = small_tensor(cfg, off, i, &n);
        if (at == SIZE_MAX) {
            v->f[i] = NULL;
            continue;
        }
        const void *src = f32 ? tensor_at(f32_base, f32_piece, f32_npieces, at, RP_F32)
                              : tensor_at(P, piece, npieces, at, fdt);
        if (!src)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "block: no frozen tensor at %zu", at);
        if (f32)
            v->f[i] = (const float *)src;
        else {
            if (convert)
                OP(convert, src, fdt, w->small[i], RP_F32, (int64_t)n);
            v->f[i] = w->small[i];
        }
    }
    v->expert_bias = NULL;
    if (off->expert_bias != SIZE_MAX) {
        if (f32) {
            v->expert_bias = (const float *)tensor_at(f32_base, f32_piece, f32_npieces,
                                                      off->expert_bias, RP_F32);
        } else {
            if (convert)
                OP(convert, tensor_at(P, piece, npieces, off->expert_bias, fdt), fdt,
                   w->expert_bias, RP_F32,
                   (int64_t)((size_t)cfg->moe.num_experts * off->expert_bias_stride));
            v->expert_bias = w->expert_bias;
        }
    }
    /* every matrix is there (a mixture of experts' router and experts in
     * moe_view) */
    const size_t at[7] = {off->wq, off->wk, off->wv, off->wo, off->w_gate, off->w_up, off->w_down};
    for (int i = 0; i < 7; i++)
        if (at[i] != SIZE_MAX && !matrix(v, at[i]))
            return rp_error_set(err, RP_ERR_INVALID_ARG, "block: no frozen matrix at %zu", at[i]);
    return RP_OK;
}

/* A mixture-of-experts block's router and experts as the GEMMs read them,
 * and (D != NULL: the backward of trainable weights) their gradients. */
static rp_status moe_view(const rp_model_config *cfg, const rp_block_offsets *off,
                          const block_params *bp, float *D, rp_moe_weights *mw, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts;
    const size_t st = off->expert_stride;
    mw->dtype = bp->wdt;
    mw->router = matrix(bp, off->router);
    mw->drouter = D ? D + off->router : NULL;
    int ok = mw->router != NULL;
    for (int64_t e = 0; e < E; e++) {
        const size_t at = off->experts + 3 * (size_t)e * st;
        mw->gate[e] = matrix(bp, at);
        mw->up[e] = matrix(bp, at + st);
        mw->down[e] = matrix(bp, at + 2 * st);
        ok &= mw->gate[e] && mw->up[e] && mw->down[e];
        mw->dgate[e] = D ? D + at : NULL;
        mw->dup[e] = D ? D + at + st : NULL;
        mw->ddown[e] = D ? D + at + 2 * st : NULL;
    }
    if (!ok)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "block: a router or expert matrix is "
                            "missing");
    /* gpt-oss: the router's and the experts' biases and the clamped SwiGLU */
    mw->gpt_oss = cfg->arch == RP_ARCH_GPT_OSS;
    mw->router_bias = bp->f[SMALL_ROUTER_BIAS];
    mw->drouter_bias = D && off->router_bias != SIZE_MAX ? D + off->router_bias : NULL;
    /* the biases in the GEMMs' dtype, where the matrices are read */
    const char *wbias = off->expert_bias != SIZE_MAX ? matrix(bp, off->expert_bias) : NULL;
    if (off->expert_bias != SIZE_MAX && !wbias)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "block: the experts' biases are missing");
    for (int64_t e = 0; e < E && off->expert_bias != SIZE_MAX; e++) {
        /* gate, up and down of expert e, each padded to RP_PARAM_ALIGN */
        const size_t aI = ((size_t)cfg->moe.moe_intermediate_size + RP_PARAM_ALIGN - 1) /
                          RP_PARAM_ALIGN * RP_PARAM_ALIGN;
        const size_t b = (size_t)e * off->expert_bias_stride, at[3] = {b, b + aI, b + 2 * aI};
        for (int p = 0; p < 3; p++) {
            mw->bias[p][e] = bp->expert_bias + at[p];
            mw->dbias[p][e] = D ? D + off->expert_bias + at[p] : NULL;
        }
        mw->down_bias[e] = wbias + at[2] * rp_dtype_size(bp->wdt);
    }
    return RP_OK;
}

#define PF(P, field) ((P) + off.field)                              /* fp32 gradient */
#define PC(field) matrix(&bp, off.field), bp.wdt                    /* a GEMM's W and its dtype */
#define F(i) (bp.f[SMALL_##i])                                      /* fp32, or NULL */

/* What both calls start with: the buffers carved from saved/ws, the
 * offsets, and the parameters as the ops read them (the forward makes the
 * converted copies, the backward finds them in the saved area). */
static rp_status block_begin(const rp_kernels *k, const rp_model_config *cfg, const void *params,
                             rp_dtype pdt, const rp_block_call *call, int64_t nseq,
                             int64_t seqlen, float *saved, float *ws, int forward, block_ws *w,
                             rp_block_offsets *off, block_params *bp, rp_error *err)
{
    if (!call && (cfg->lora.rank > 0 || rp_model_has_moe(cfg)))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "block: a model with %s needs the call's "
                            "block index", cfg->lora.rank > 0 ? "LoRA" : "experts");
    const int block = call ? call->block : 0;
    if (block < 0 || block >= cfg->num_hidden_layers)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "block: index %d outside [0, %lld)", block,
                            (long long)cfg->num_hidden_layers);
    if (rp_model_block_is_moe(cfg, block) && !k->ops->moe_route)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "block %d: the %s kernels have no "
                            "mixture-of-experts ops", block, k->ops->name);
    RP_TRY(rp_model_ops_check(cfg, k->ops, call && call->allow_unproven, err));
    carve(k->ops, pdt, cfg, block, nseq, seqlen, saved, ws, NULL, w);
    *off = w->off;
    return params_view(k, cfg, block, off, params, pdt, call ? call->lora : NULL, w, forward, bp,
                       err);
}

/* Projection p's adapter, or NULL when p has none (or there is no LoRA,
 * or p's adapters are per expert: expert_adapters). dparams: the
 * adapters' gradient (backward), or NULL. */
static const rp_lora_adapter *adapter(const rp_kernels *k, const rp_model_config *cfg,
                                      const block_params *bp, float *dparams, rp_lora_proj p,
                                      rp_lora_adapter *a)
{
    if (cfg->lora.rank <= 0 || bp->lora_off.a[p] == SIZE_MAX ||
        rp_lora_per_expert(cfg, bp->block, p))
        return NULL;
    const rp_lora_offsets lo = bp->lora_off;
    const size_t cb = rp_kernel_compute_bytes(k->ops);
    a->A = (const char *)bp->adapters + lo.a[p] * cb;
    a->B = (const char *)bp->adapters + lo.b[p] * cb;
    a->dA = dparams ? dparams + lo.a[p] : NULL;
    a->dB = dparams ? dparams + lo.b[p] : NULL;
    a->proj = p;
    rp_lora_features(cfg, bp->block, p, &a->in, &a->out);
    return a;
}

/* A mixture-of-experts block's expert projection p's adapters, one per
 * expert, or NULL when p is not targeted. gpt-oss's gate_up_proj adapter
 * (gate_proj's offsets: A_e [r, H], B_e [2I, r], gate's rows then up's)
 * is two adapters that share A_e and its gradient: gate's, B_e's first I
 * rows, and up's, the other I. Each forms x A_e^T on its own (r columns:
 * small beside the experts' own GEMMs) and adds its part of dA_e, so the
 * grouped GEMM steps of moe_lora.c apply unchanged; dA_e is the sum PEFT's
 * one A gets. */
static const rp_expert_adapters *expert_adapters(const rp_kernels *k, const rp_model_config *cfg,
                                                 const block_params *bp, float *dparams,
                                                 rp_lora_proj p, rp_expert_adapters *ea)
{
    const rp_lora_offsets *lo = &bp->lora_off;
    const int oss = cfg->arch == RP_ARCH_GPT_OSS;
    const rp_lora_proj held = oss && p == RP_LORA_UP_PROJ ? RP_LORA_GATE_PROJ : p;
    if (cfg->lora.rank <= 0 || lo->a[held] == SIZE_MAX ||
        !rp_lora_per_expert(cfg, bp->block, held))
        return NULL;
    const size_t cb = rp_kernel_compute_bytes(k->ops);
    const int64_t I = cfg->moe.moe_intermediate_size;
    /* up's rows of gate_up_proj's B_e */
    const size_t rows = oss && p == RP_LORA_UP_PROJ ? (size_t)(I * cfg->lora.rank) : 0;
    for (int64_t e = 0; e < cfg->moe.num_experts; e++) {
        const size_t a = lo->a[held] + (size_t)e * lo->expert_stride[held],
                     b = lo->b[held] + (size_t)e * lo->expert_stride[held] + rows;
        ea->A[e] = (const char *)bp->adapters + a * cb;
        ea->B[e] = (const char *)bp->adapters + b * cb;
        ea->dA[e] = dparams ? dparams + a : NULL;
        ea->dB[e] = dparams ? dparams + b : NULL;
    }
    rp_lora_features(cfg, bp->block, held, &ea->in, &ea->out);
    if (oss && held == RP_LORA_GATE_PROJ)
        ea->out = I;
    return ea;
}

/* The buffers of projection p's adapter. */
static rp_lora_bufs lora_bufs(const block_ws *w, rp_lora_proj p)
{
    rp_lora_bufs b = w->lora;
    b.ts = w->lora_ts[p];
    return b;
}

/* A mixture-of-experts block's adapters (NULL without LoRA), made in ml
 * from the router's and the experts' views (router, ex: the caller's). */
static const rp_moe_lora *moe_adapters(const rp_kernels *k, const rp_model_config *cfg,
                                       const rp_lora_call *lc, const block_params *bp,
                                       const block_ws *w, float *dparams, int64_t nseq,
                                       int64_t seqlen, rp_lora_adapter *router,
                                       rp_expert_adapters ex[3], rp_moe_lora *ml)
{
    static const rp_lora_proj proj[3] = {RP_LORA_GATE_PROJ, RP_LORA_UP_PROJ, RP_LORA_DOWN_PROJ};
    if (!bp->adapters)
        return NULL;
    memset(ml, 0, sizeof *ml);
    ml->call = lc;
    ml->nseq = nseq;
    ml->seqlen = seqlen;
    ml->router = adapter(k, cfg, bp, dparams, RP_LORA_ROUTER, router);
    ml->router_bufs = lora_bufs(w, RP_LORA_ROUTER);
    for (int i = 0; i < 3; i++)
        ml->experts[i] = expert_adapters(k, cfg, bp, dparams, proj[i], &ex[i]);
    return ml;
}

/* A mixture-of-experts block's weights and adapters as rp_moe_forward and
 * rp_moe_backward take them. */
typedef struct moe_parts {
    rp_moe_weights mw;
    rp_lora_adapter router;
    rp_expert_adapters ex[3];
    rp_moe_lora ml;
    const rp_moe_lora *lora; /* &ml, or NULL without LoRA */
} moe_parts;

/* D and dparams: the weights' and the adapters' gradients (the backward),
 * or NULL. */
static rp_status moe_parts_of(const rp_kernels *k, const rp_model_config *cfg,
                              const rp_lora_call *lc, const block_params *bp, const block_ws *w,
                              float *D, float *dparams, int64_t nseq, int64_t seqlen,
                              moe_parts *mp, rp_error *err)
{
    RP_TRY(moe_view(cfg, &w->off, bp, D, &mp->mw, err));
    mp->lora = moe_adapters(k, cfg, lc, bp, w, dparams, nseq, seqlen, &mp->router, mp->ex,
                            &mp->ml);
    return RP_OK;
}

/* Row `row` of a [rows, width] matrix of `bytes`-byte elements at p. */
static void *row_at(const void *p, int64_t row, int64_t width, size_t bytes)
{
    return (char *)p + (size_t)row * (size_t)width * bytes;
}

/* y (+ its compute copy) += projection p's adapter on x, when it has one:
 * rows [row0, row0 + rows) of the microbatch (x, y there), its ts at row
 * `ts_row` of the projection's ts. */
static rp_status lora_add(const rp_kernels *k, const rp_model_config *cfg, const rp_lora_call *lc,
                          const block_params *bp, const block_ws *w, rp_lora_proj p,
                          const void *x, int64_t row0, int64_t rows, int64_t ts_row,
                          int64_t seqlen, float *y, void *y_compute, rp_error *err)
{
    rp_lora_adapter a;
    if (!adapter(k, cfg, bp, NULL, p, &a))
        return RP_OK;
    rp_lora_bufs b = lora_bufs(w, p);
    b.ts = row_at(b.ts, ts_row, cfg->lora.rank, rp_kernel_compute_bytes(k->ops));
    return rp_lora_forward_rows(k, cfg, lc, &a, x, row0, rows, seqlen, y, y_compute, &b, err);
}

/* Projection p's adapter gradients from dy, then dx += its input gradient
 * (dx NULL: only the weights, rp_lora_backward_input_rows follows later);
 * rows and ts_row as for lora_add. */
static rp_status lora_grad(const rp_kernels *k, const rp_model_config *cfg, const rp_lora_call *lc,
                           const block_params *bp, const block_ws *w, float *dparams,
                           rp_lora_proj p, const void *x, const void *dy, int64_t row0,
                           int64_t rows, int64_t ts_row, int64_t seqlen, float *dx, rp_error *err)
{
    rp_lora_adapter a;
    if (!adapter(k, cfg, bp, dparams, p, &a))
        return RP_OK;
    rp_lora_bufs b = lora_bufs(w, p);
    b.ts = row_at(b.ts, ts_row, cfg->lora.rank, rp_kernel_compute_bytes(k->ops));
    RP_TRY(rp_lora_backward_weights_rows(k, cfg, lc, &a, x, dy, row0, rows, seqlen, &b, err));
    return dx ? rp_lora_backward_input_rows(k, cfg, lc, &a, row0, rows, seqlen, dx, &b, err)
              : RP_OK;
}

/* The dense MLP, y = x2 + m Wd^T with m = silu(g) * u, g = h2 Wg^T,
 * u = h2 Wu^T (each with its adapter), walks the microbatch's T tokens in
 * chunks of whole tiles (model/token_tiles.h): every GEMM reads one tile,
 * a weight gradient adds the tiles' in token order, and only a chunk's
 * g, u, m (w->g, w->u, w->m from their first row) are alive at once. */
typedef struct mlp_walk {
    const rp_kernels *k;
    const rp_model_config *cfg;
    const rp_lora_call *lora;
    const block_params *bp;
    const block_ws *w;
    const rp_block_offsets *o;
    int64_t T, seqlen, tile, chunk, H, I;
    size_t cb; /* bytes of the compute dtype */
} mlp_walk;

static mlp_walk mlp_walk_of(const rp_kernels *k, const rp_model_config *cfg,
                            const rp_lora_call *lora, const block_params *bp, const block_ws *w,
                            const rp_block_offsets *o, int64_t nseq, int64_t seqlen)
{
    const int64_t T = nseq * seqlen;
    mlp_walk mw = {.k = k, .cfg = cfg, .lora = lora, .bp = bp, .w = w, .o = o, .T = T,
                   .seqlen = seqlen, .tile = rp_token_tile(cfg, T),
                   .chunk = rp_chunk_tokens(cfg, T), .H = cfg->hidden_size,
                   .I = cfg->intermediate_size, .cb = rp_kernel_compute_bytes(k->ops)};
    return mw;
}

static int64_t tile_rows(const mlp_walk *mw, int64_t n, int64_t j)
{
    return n - j < mw->tile ? n - j : mw->tile;
}

/* The fused gate/up GEMM reads [Wg; Wu] as one matrix: the up matrix must
 * lie right after the gate's where the GEMMs read them. mlp_fused_gate_up
 * takes the path only where the layout makes it so (the block's weights
 * or their compute copy, in one piece); this checks that invariant. */
static rp_status fused_weights_adjacent(const mlp_walk *mw, rp_error *err)
{
    if (!mw->w->fused_gate_up)
        return RP_OK;
    const char *gate = matrix(mw->bp, mw->o->w_gate), *up = matrix(mw->bp, mw->o->w_up);
    const size_t gap = (size_t)(mw->I * mw->H) * rp_dtype_size(mw->bp->wdt);
    if (gate && up == gate + gap)
        return RP_OK;
    return rp_error_set(err, RP_ERR_INTERNAL, "block %d: the fused gate/up GEMM's up matrix is "
                        "not right after the gate's (%p, %p)", mw->bp->block, (const void *)gate,
                        (const void *)up);
}

/* g, u and m of the chunk of n tokens from token c0, with the gate's and
 * the up projection's adapters and (down_ts) the down projection's ts,
 * which only its backward reads. */
static rp_status mlp_chunk_forward(const mlp_walk *mw, int64_t c0, int64_t n, int down_ts,
                                   rp_error *err)
{
    const rp_kernels *k = mw->k;
    const block_ws *w = mw->w;
    const block_params *bp = mw->bp;
    const int64_t H = mw->H, I = mw->I;
    /* fp32 g, u (the adapters add into them) are y, else the GEMMs' own
     * output in the compute dtype */
    const int gu_f32 = w->gu_dtype == RP_F32;
    const size_t gub = rp_dtype_size(w->gu_dtype);
    const int64_t ld = w->gu_ld;
    RP_TRY(fused_weights_adjacent(mw, err));
    for (int64_t j = 0; j < n; j += mw->tile) {
        const int64_t rows = tile_rows(mw, n, j);
        const void *h2 = row_at(w->h2, c0 + j, H, mw->cb);
        void *g = row_at(w->g, j, ld, gub), *u = row_at(w->u, j, ld, gub);
        if (w->fused_gate_up) { /* [g_row | u_row] = h2 [Wg; Wu]^T; no adapter on either */
            OP(linear_forward, h2, matrix(bp, mw->o->w_gate), bp->wdt, NULL, NULL,
               gu_f32 ? g : NULL, gu_f32 ? NULL : g, rows, H, 2 * I);
            continue;
        }
        OP(linear_forward, h2, matrix(bp, mw->o->w_gate), bp->wdt, NULL, NULL,
           gu_f32 ? g : NULL, gu_f32 ? NULL : g, rows, H, I);
        OP(linear_forward, h2, matrix(bp, mw->o->w_up), bp->wdt, NULL, NULL, gu_f32 ? u : NULL,
           gu_f32 ? NULL : u, rows, H, I);
        RP_TRY(lora_add(k, mw->cfg, mw->lora, bp, w, RP_LORA_GATE_PROJ, h2, c0 + j, rows, j,
                        mw->seqlen, g, NULL, err));
        RP_TRY(lora_add(k, mw->cfg, mw->lora, bp, w, RP_LORA_UP_PROJ, h2, c0 + j, rows, j,
                        mw->seqlen, u, NULL, err));
    }
    OP(swiglu_forward, w->g, w->u, w->gu_dtype, ld, w->m, n, I);
    for (int64_t j = 0; down_ts && j < n; j += mw->tile)
        RP_TRY(lora_add(k, mw->cfg, mw->lora, bp, w, RP_LORA_DOWN_PROJ,
                        row_at(w->m, j, I, mw->cb), c0 + j, tile_rows(mw, n, j), j, mw->seqlen,
                        NULL, NULL, err));
    return RP_OK;
}

/* y = x2 + the MLP of h2. Without y (a layer run only for its backward)
 * only a kept MLP has work: its g, u, m for the backward; one of several
 * chunks has none, the backward makes its chunks again from h2. */
static rp_status mlp_forward(const mlp_walk *mw, const float *x2, float *y, rp_error *err)
{
    const rp_kernels *k = mw->k;
    const block_ws *w = mw->w;
    const int64_t H = mw->H, I = mw->I;
    if (!y && w->mlp_kept)
        return mlp_chunk_forward(mw, 0, mw->T, 1, err);
    for (int64_t c0 = 0; y && c0 < mw->T; c0 += mw->chunk) {
        const int64_t n = mw->T - c0 < mw->chunk ? mw->T - c0 : mw->chunk;
        RP_TRY(mlp_chunk_forward(mw, c0, n, 0, err));
        for (int64_t j = 0; j < n; j += mw->tile) {
            const int64_t rows = tile_rows(mw, n, j), t = c0 + j;
            const void *m = row_at(w->m, j, I, mw->cb);
            OP(linear_forward, m, matrix(mw->bp, mw->o->w_down), mw->bp->wdt, NULL, x2 + t * H,
               y + t * H, NULL, rows, I, H);
            RP_TRY(lora_add(k, mw->cfg, mw->lora, mw->bp, w, RP_LORA_DOWN_PROJ, m, t, rows, j,
                            mw->seqlen, y + t * H, NULL, err));
        }
    }
    return RP_OK;
}

/* The dense MLP's backward: w->tmp = dL/dh2 from dy_c, and (D != NULL)
 * the weights' gradients, chunk by chunk. On fp32 tables a tile's dm
 * overwrites its m, so its weight gradients come first (the adapter's
 * input gradient after dm). */
static rp_status mlp_backward(const mlp_walk *mw, float *D, float *dparams, const void *dy_c,
                              rp_error *err)
{
    const rp_kernels *k = mw->k;
    const rp_model_config *cfg = mw->cfg;
    const block_ws *w = mw->w;
    const block_params *bp = mw->bp;
    const rp_block_offsets *o = mw->o;
    const int64_t H = mw->H, I = mw->I;
    rp_lora_adapter down;
    const int down_adapted = adapter(k, cfg, bp, dparams, RP_LORA_DOWN_PROJ, &down) != NULL;
    RP_TRY(fused_weights_adjacent(mw, err)); /* a kept chunk's backward makes no forward */
    for (int64_t c0 = 0; c0 < mw->T; c0 += mw->chunk) {
        const int64_t n = mw->T - c0 < mw->chunk ? mw->T - c0 : mw->chunk;
        if (!w->mlp_kept) /* kept: the forward's are in the saved area */
            RP_TRY(mlp_chunk_forward(mw, c0, n, 1, err));
        for (int64_t j = 0; j < n; j += mw->tile) {
            const int64_t rows = tile_rows(mw, n, j), t = c0 + j;
            const void *dy = row_at(dy_c, t, H, mw->cb), *m = row_at(w->m, j, I, mw->cb);
            if (D)
                OP(linear_backward_weight, dy, m, D + o->w_down, rows, I, H);
            RP_TRY(lora_grad(k, cfg, mw->lora, bp, w, dparams, RP_LORA_DOWN_PROJ, m, dy, t, rows,
                             j, mw->seqlen, NULL, err));
            /* fp32 dm (the adapter adds its input gradient into it) is
             * dx, else the GEMM's own output in the compute dtype */
            float *dm = row_at(w->dm, j, I, rp_dtype_size(w->dm_dtype));
            const int dm_f32 = w->dm_dtype == RP_F32;
            OP(linear_backward_input, dy, matrix(bp, o->w_down), bp->wdt, dm_f32 ? dm : NULL,
               dm_f32 ? NULL : dm, rows, I, H, 0);
            if (down_adapted) {
                rp_lora_bufs b = lora_bufs(w, RP_LORA_DOWN_PROJ);
                RP_TRY(rp_lora_backward_input_rows(k, cfg, mw->lora, &down, t, rows, mw->seqlen,
                                                   dm, &b, err));
            }
        }
        OP(swiglu_backward, w->g, w->u, w->gu_dtype, w->gu_ld, w->dm, w->dm_dtype, w->dg, w->du,
           n, I);
        for (int64_t j = 0; j < n; j += mw->tile) {
            const int64_t rows = tile_rows(mw, n, j), t = c0 + j;
            const void *h2 = row_at(w->h2, t, H, mw->cb),
                       *dg = row_at(w->dg, j, w->gu_ld, mw->cb),
                       *du = row_at(w->du, j, w->gu_ld, mw->cb);
            float *tmp = w->tmp + t * H;
            if (w->fused_gate_up) {
                /* [dg_row | du_row] against h2 into the [2I, H] gradient of
                 * [Wg; Wu] (D's w_up follows its w_gate as the weights'
                 * does), and dL/dh2 over K = 2I; no adapter on either */
                if (D)
                    OP(linear_backward_weight, dg, h2, D + o->w_gate, rows, H, 2 * I);
                OP(linear_backward_input, dg, matrix(bp, o->w_gate), bp->wdt, tmp, NULL, rows, H,
                   2 * I, 0);
                continue;
            }
            if (D) {
                OP(linear_backward_weight, dg, h2, D + o->w_gate, rows, H, I);
                OP(linear_backward_weight, du, h2, D + o->w_up, rows, H, I);
            }
            OP(linear_backward_input, dg, matrix(bp, o->w_gate), bp->wdt, tmp, NULL, rows, H, I,
               0);
            OP(linear_backward_input, du, matrix(bp, o->w_up), bp->wdt, tmp, NULL, rows, H, I,
               1);
            RP_TRY(lora_grad(k, cfg, mw->lora, bp, w, dparams, RP_LORA_GATE_PROJ, h2, dg, t, rows,
                             j, mw->seqlen, tmp, err));
            RP_TRY(lora_grad(k, cfg, mw->lora, bp, w, dparams, RP_LORA_UP_PROJ, h2, du, t, rows,
                             j, mw->seqlen, tmp, err));
        }
    }
    return RP_OK;
}

rp_status rp_block_forward(const rp_kernels *k, const rp_model_config *cfg, const void *params,
                           rp_dtype params_dtype, const float *x, float *y, int64_t nseq,
                           int64_t seqlen, const int32_t *seg_start, float *saved, float *ws,
                           const rp_block_call *call, rp_error *err)
{
    if (nseq <= 0 || seqlen <= 0)
        return RP_OK;
    block_ws w;
    rp_block_offsets off;
    block_params bp;
    RP_TRY(block_begin(k, cfg, params, params_dtype, call, nseq, seqlen, saved, ws, 1, &w, &off,
                       &bp, err));
    const rp_lora_call *lora = call ? call->lora : NULL;
    const int64_t T = nseq * seqlen, H = cfg->hidden_size;
    const int64_t hd = cfg->head_dim, nh = cfg->num_attention_heads,
                  nkv = cfg->num_key_value_heads;
    const int64_t QD = nh * hd, KD = nkv * hd;
    const float eps = (float)cfg->rms_norm_eps;
    const int qk = rp_model_has_qk_norm(cfg);

    OP(rmsnorm_forward, x, F(IN_NORM), NULL, w.h1, w.rstd1, T, H, eps);
    OP(linear_forward, w.h1, PC(wq), F(BQ), NULL, qk ? w.qraw : w.q, NULL, T, H, QD);
    OP(linear_forward, w.h1, PC(wk), F(BK), NULL, qk ? w.kraw : w.k, NULL, T, H, KD);
    const int v_adapted = bp.adapters && (cfg->lora.targets & (1u << RP_LORA_V_PROJ));
    OP(linear_forward, w.h1, PC(wv), F(BV), NULL, w.v, v_adapted ? NULL : w.v_c, T, H, KD);
    /* the adapters add to the frozen outputs (v's compute copy made then) */
#define LORA_ADD(p, x, y, y_c)                                                                   \
    RP_TRY(lora_add(k, cfg, lora, &bp, &w, RP_LORA_##p, x, 0, T, 0, seqlen, y, y_c, err))
    LORA_ADD(Q_PROJ, w.h1, qk ? w.qraw : w.q, NULL);
    LORA_ADD(K_PROJ, w.h1, qk ? w.kraw : w.k, NULL);
    LORA_ADD(V_PROJ, w.h1, w.v, w.v_c);
    if (qk) {
        OP(rmsnorm_forward, w.qraw, F(Q_NORM), w.q, NULL, w.rstdq, T * nh, hd, eps);
        OP(rmsnorm_forward, w.kraw, F(K_NORM), w.k, NULL, w.rstdk, T * nkv, hd, eps);
    }
    const float *rope = NULL;
    RP_TRY(rope_of(k, cfg, seqlen, &w, 1, &rope, err));
    OP(rope_apply, w.q, w.q_c, rope, nseq, seqlen, seg_start, nh, hd, 0);
    OP(rope_apply, w.k, w.k_c, rope, nseq, seqlen, seg_start, nkv, hd, 0);

    rp_attn_shape s = rp_block_attn_shape(cfg, bp.block, nseq, seqlen);
    s.seg_start = seg_start;
    s.seg_host = seg_start && call ? call->segments_host : NULL;
    s.sinks = F(SINKS);
    OP(attention_forward, &s, w.q_c, w.k_c, w.v_c, w.o, w.lse);

    OP(linear_forward, w.o, PC(wo), F(BO), x, w.x2, NULL, T, QD, H);
    LORA_ADD(O_PROJ, w.o, w.x2, NULL);
    OP(rmsnorm_forward, w.x2, F(POST_NORM), NULL, w.h2, w.rstd2, T, H, eps);
    if (w.moe) {
        moe_parts mp;
        RP_TRY(moe_parts_of(k, cfg, lora, &bp, &w, NULL, NULL, nseq, seqlen, &mp, err));
        w.experts.partial = w.partial;
        return rp_moe_forward(k, cfg, &mp.mw, mp.lora, w.h2, w.x2, y, T, &w.experts,
                              call->router_stats, err);
    }
#undef LORA_ADD
    const mlp_walk mw = mlp_walk_of(k, cfg, lora, &bp, &w, &off, nseq, seqlen);
    return mlp_forward(&mw, w.x2, y, err);
}

rp_status rp_block_backward(const rp_kernels *k, const rp_model_config *cfg, const void *params,
                            rp_dtype params_dtype, const float *x, float *saved, const float *dy,
                            float *dx, float *dparams, int64_t nseq, int64_t seqlen,
                            const int32_t *seg_start, float *ws, const rp_block_call *call,
                            rp_error *err)
{
    if (nseq <= 0 || seqlen <= 0)
        return RP_OK;
    block_ws w;
    rp_block_offsets off;
    block_params bp;
    RP_TRY(block_begin(k, cfg, params, params_dtype, call, nseq, seqlen, saved, ws, 0, &w, &off,
                       &bp, err));
    const rp_lora_call *lora = call ? call->lora : NULL;
    /* the frozen weights of LoRA get no gradient; its adapters' is dparams */
    const int base = cfg->lora.rank <= 0;
    float *D = base ? dparams : NULL;
    const int64_t T = nseq * seqlen, H = cfg->hidden_size;
    const int64_t hd = cfg->head_dim, nh = cfg->num_attention_heads,
                  nkv = cfg->num_key_value_heads;
    const int64_t QD = nh * hd, KD = nkv * hd;
    const int qk = rp_model_has_qk_norm(cfg);
    const float *rope = NULL;
    RP_TRY(rope_of(k, cfg, seqlen, &w, 0, &rope, err));
#define DW(...) if (base) OP(linear_backward_weight, __VA_ARGS__)
#define DSUM(field, ...) if (base && off.field != SIZE_MAX) OP(column_sum_accumulate, __VA_ARGS__)
#define DN(field) (base ? PF(D, field) : NULL)
#define LORA_GRAD(p, x, dy, dx)                                                                  \
    RP_TRY(lora_grad(k, cfg, lora, &bp, &w, dparams, RP_LORA_##p, x, dy, 0, T, 0, seqlen, dx, err))

    /* the MLP's input gradient into w.tmp */
    const void *dy_c = dy;
    if (w.dy_c) {
        OP(convert, dy, RP_F32, w.dy_c, k->ops->compute_dtype, T * H);
        dy_c = w.dy_c;
    }
    if (w.moe) {
        moe_parts mp;
        RP_TRY(moe_parts_of(k, cfg, lora, &bp, &w, D, dparams, nseq, seqlen, &mp, err));
        w.experts.partial = w.partial;
        RP_TRY(rp_moe_backward(k, cfg, &mp.mw, mp.lora, w.h2, dy_c, call->router_aux_grad, w.tmp,
                               T, &w.experts, err));
    } else {
        const mlp_walk mw = mlp_walk_of(k, cfg, lora, &bp, &w, &off, nseq, seqlen);
        RP_TRY(mlp_backward(&mw, D, dparams, dy_c, err));
    }
    /* dx2 = dy + rmsnorm backward, kept in dx (dy is not read after this,
     * so dx may alias dy); its compute copy reuses dy's, dead since dm */
    if (dx != dy)
        OP(copy, dx, dy, sizeof(float) * (size_t)(T * H));
    void *dx2_c = w.dy_c ? w.dy_c : (void *)dx;
    OP(rmsnorm_backward, w.x2, F(POST_NORM), w.rstd2, w.tmp, dx, dx2_c, DN(post_norm), T, H, 1,
       w.partial);

    /* attention output projection; with an adapter, do (its gradient into
     * dout) is summed in fp32 in dq, free until the attention's backward */
    DW(dx2_c, w.o, PF(D, wo), T, QD, H);
    DSUM(bo, dx, T, H, PF(D, bo), w.partial);
    if (bp.adapters && (cfg->lora.targets & (1u << RP_LORA_O_PROJ))) {
        OP(linear_backward_input, dx2_c, PC(wo), w.dq, NULL, T, QD, H, 0);
        LORA_GRAD(O_PROJ, w.o, dx2_c, w.dq);
        OP(convert, w.dq, RP_F32, w.dout, k->ops->compute_dtype, T * QD);
    } else {
        OP(linear_backward_input, dx2_c, PC(wo), NULL, w.dout, T, QD, H, 0);
    }
    rp_attn_shape s = rp_block_attn_shape(cfg, bp.block, nseq, seqlen);
    s.seg_start = seg_start;
    s.seg_host = seg_start && call ? call->segments_host : NULL;
    s.sinks = F(SINKS);
    /* the sinks' gradient, from the forward's o and lse and dout */
    if (base && off.sinks != SIZE_MAX)
        OP(attention_sink_backward, &s, w.o, w.lse, w.dout, PF(D, sinks));
    OP(attention_backward, &s, w.q_c, w.k_c, w.v_c, w.o, w.lse, w.dout, w.dq, w.dk, w.dv,
       w.attn_scratch);
    /* with Qwen3's norms the compute copies come from the norms' backward */
    OP(rope_apply, w.dq, qk ? NULL : w.dq_c, rope, nseq, seqlen, seg_start, nh, hd, 1);
    OP(rope_apply, w.dk, qk ? NULL : w.dk_c, rope, nseq, seqlen, seg_start, nkv, hd, 1);
    if (qk) {
        OP(rmsnorm_backward, w.qraw, F(Q_NORM), w.rstdq, w.dq, w.dq, w.dq_c, DN(q_norm), T * nh,
           hd, 0, w.partial);
        OP(rmsnorm_backward, w.kraw, F(K_NORM), w.rstdk, w.dk, w.dk, w.dk_c, DN(k_norm),
           T * nkv, hd, 0, w.partial);
    }
    OP(convert, w.dv, RP_F32, w.dv_c, k->ops->compute_dtype, T * KD);
    DSUM(bq, w.dq, T, QD, PF(D, bq), w.partial);
    DSUM(bk, w.dk, T, KD, PF(D, bk), w.partial);
    DSUM(bv, w.dv, T, KD, PF(D, bv), w.partial);
    DW(w.dq_c, w.h1, PF(D, wq), T, H, QD);
    DW(w.dk_c, w.h1, PF(D, wk), T, H, KD);
    DW(w.dv_c, w.h1, PF(D, wv), T, H, KD);
    OP(linear_backward_input, w.dq_c, PC(wq), w.tmp, NULL, T, H, QD, 0);
    OP(linear_backward_input, w.dk_c, PC(wk), w.tmp, NULL, T, H, KD, 1);
    OP(linear_backward_input, w.dv_c, PC(wv), w.tmp, NULL, T, H, KD, 1);
    LORA_GRAD(Q_PROJ, w.h1, w.dq_c, w.tmp);
    LORA_GRAD(K_PROJ, w.h1, w.dk_c, w.tmp);
    LORA_GRAD(V_PROJ, w.h1, w.dv_c, w.tmp);
    OP(rmsnorm_backward, x, F(IN_NORM), w.rstd1, w.tmp, dx, NULL, DN(in_norm), T, H, 1,
       w.partial);
#undef DW
#undef DSUM
#undef DN
#undef LORA_GRAD
    return RP_OK;
}
