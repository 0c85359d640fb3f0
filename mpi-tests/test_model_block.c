/* Proves: the decoder block's backward is the derivative of its forward
 * (finite differences for every parameter tensor and for the input, in a
 * Llama variant with q/k/v/o biases and llama3 RoPE scaling and a Qwen3
 * variant with q/k norms, head_dim != hidden/heads and grouped KV heads);
 * the forward matches an independent double-precision implementation of
 * the transformers math; sequences in a batch are independent (positions
 * restart, no attention across sequences); results are bit-identical run to
 * run; gradients of two microbatches accumulate in call order; the
 * workspace is linear in the sequence length (no S x S buffer); the MLP's
 * chunks of tiles (model/token_tiles.h) never change a bit, tiles cut
 * across samples compute the same function, and no buffer of tokens x
 * intermediate width is kept or taken (the per-token memory does not grow
 * with intermediate_size). A mixture-of-experts block (Qwen3-MoE with and
 * without LoRA on its router and experts, gpt-oss) gives the same bits,
 * outputs, router statistics, input and parameter gradients, whether its
 * MLP runs the microbatch's token tiles one, two or all at a time, and its
 * memory per token grows neither with the experts' width when a chunk is
 * one tile nor with the dense MLPs' width. gpt-oss's block with bf16
 * weights runs on a table whose GEMMs read bf16 weights only (as CUDA's)
 * and gives the fp32 run's numbers on the same weights. fp32 weights on a
 * table that computes in bf16 (as CUDA's) give the norms their fp32
 * weights where they lie, not the bf16 compute copy. With
 * RP_ALLOW_UNPROVEN_CUDA=bf16-mlp (or 1) the CUDA back end's sizes of a
 * dense block shrink by exactly the bf16 halves of g and u (saved or
 * scratch, as the chunk is kept or not) and of dm (scratch), except where
 * LoRA adds into them (gate or up: g and u stay fp32; down: dm does); the
 * CPU table's sizes and other names leave them as they were. With gate and
 * up as one GEMM (RP_TEST_FUSED_GATE_UP=1) the backward is still the
 * derivative, the path is taken and within 1e-5 of the two GEMMs', chunks
 * keep its bits, and no size changes (CPU table, CUDA sizes under
 * fused-gate-up with and without bf16-mlp). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/unproven.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/sizes.h"
#include "model/layers.h"
#include "model/layout.h"
#include "rp_check.h"

/* the CPU kernel ops table the layers run on here */
static const rp_kernels cpu_k = {.ops = &rp_kernel_ops_cpu};

static rp_model_config llama_cfg(void)
{
    rp_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = RP_ARCH_LLAMA;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.vocab_size = 37;
    c.max_position_embeddings = 128;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.initializer_range = 0.02;
    /* with head_dim 8 the wavelengths are 6.3, 63, 628, 6283: with these
     * numbers one frequency is kept, one interpolated, two divided */
    c.rope_scaling.type = RP_ROPE_LLAMA3;
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 64;
    c.attention_bias = 1;
    c.torch_dtype = RP_F32;
    return c;
}

static rp_model_config qwen_cfg(void)
{
    rp_model_config c = llama_cfg();
    c.arch = RP_ARCH_QWEN3;
    c.hidden_size = 24; /* heads * head_dim = 32 != hidden */
    c.intermediate_size = 40;
    c.num_key_value_heads = 1;
    c.rope_theta = 1000000.0;
    c.rope_scaling.type = RP_ROPE_DEFAULT;
    c.attention_bias = 0;
    c.rms_norm_eps = 1e-6;
    return c;
}

/* Block 0's tensors of a layout (the full model's or LoRA's adapters), far
 * from the tiny init so every path carries signal: matrices N(0, 0.3),
 * norm weights 1 + N(0, 0.2), biases N(0, 0.2). */
static float *random_block(const rp_model_config *cfg, int base, uint64_t seed, size_t *numel)
{
    rp_layer_desc *L;
    int n;
    rp_error err = {0};
    ck_assert_msg((base ? rp_model_base_layout : rp_model_layout)(cfg, &L, &n, &err) == RP_OK,
                  "%s", err.msg);
    const rp_layer_desc *b = &L[1];
    float *p = calloc(b->numel, sizeof(float));
    for (int i = 0; i < b->nparams; i++) {
        const rp_param_desc *d = &b->params[i];
        float sd = d->ndim == 2 ? 0.3f : 0.2f;
        rp_rng_fill_normal(p + d->offset, d->numel, seed, (uint64_t)i, 0, 0.0f, sd);
        if (d->ndim == 1 && strstr(d->name, "norm"))
            for (size_t j = 0; j < d->numel; j++)
                p[d->offset + j] += 1.0f;
    }
    *numel = b->numel;
    free(L);
    return p;
}

/* Block 0's parameters of the full model, as random_block gives them. */
static float *random_params(const rp_model_config *cfg, uint64_t seed)
{
    size_t numel;
    return random_block(cfg, 0, seed, &numel);
}

static float *random_vec(size_t n, uint64_t seed, float sd)
{
    float *v = malloc(n * sizeof(float));
    rp_rng_fill_normal(v, n, seed, 999, 0, 0.0f, sd);
    return v;
}

typedef struct fixture {
    rp_model_config cfg;
    int64_t nseq, S, T, H;
    float *P, *x, *wy, *y, *ws;
    float *saved; /* what the forward keeps for the backward */
    size_t np;
} fixture;

static void fx_init(fixture *f, rp_model_config cfg, int64_t nseq, int64_t S)
{
    f->cfg = cfg;
    f->nseq = nseq;
    f->S = S;
    f->T = nseq * S;
    f->H = cfg.hidden_size;
    rp_block_offsets off;
    rp_block_offsets_get(&cfg, 0, &off);
    f->np = off.numel;
    f->P = random_params(&cfg, 7);
    f->x = random_vec((size_t)(f->T * f->H), 11, 1.0f);
    f->wy = random_vec((size_t)(f->T * f->H), 13, 1.0f);
    f->y = malloc((size_t)(f->T * f->H) * sizeof(float));
    f->ws = malloc(rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &cfg, nseq, S) * sizeof(float));
    f->saved = malloc(rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &cfg, nseq, S) * sizeof(float));
}

static void fx_free(fixture *f)
{
    free(f->P);
    free(f->x);
    free(f->wy);
    free(f->y);
    free(f->ws);
    free(f->saved);
}

/* The backward of x with upstream gradient dy, as the engine runs it: a
 * forward that keeps only what the backward needs, then the backward. */
static void block_backward(fixture *f, const rp_model_config *cfg, const float *x,
                           const float *dy, float *dx, float *dP, int64_t nseq, int64_t S)
{
    ck_assert_int_eq(rp_block_forward(&cpu_k, cfg, f->P, RP_F32, x, NULL, nseq, S, NULL, f->saved, f->ws, NULL, NULL), RP_OK);
    ck_assert_int_eq(rp_block_backward(&cpu_k, cfg, f->P, RP_F32, x, f->saved, dy, dx, dP, nseq, S, NULL, f->ws, NULL, NULL), RP_OK);
}

/* L = sum(wy * y), accumulated in double */
static double fx_loss(fixture *f)
{
    ck_assert_int_eq(rp_block_forward(&cpu_k, &f->cfg, f->P, RP_F32, f->x, f->y, f->nseq, f->S, NULL, f->saved, f->ws, NULL, NULL), RP_OK);
    double s = 0;
    for (int64_t i = 0; i < f->T * f->H; i++)
        s += (double)f->wy[i] * (double)f->y[i];
    return s;
}

/* Central difference of L along unit direction d over n elements of v.
 * Tolerance, why: L is a sum of T*H = O(100) fp32 outputs of size O(1), so
 * its fp32 rounding noise is about 1e-6 absolute; divided by 2h = 2e-2 that
 * is 5e-5. The truncation error h^2/6 * L''' is O(1e-5) at h = 1e-2 for a
 * unit direction. We allow 2e-3 relative to the gradient's norm plus 2e-4,
 * both far above those, and far below what a wrong term would produce (a
 * missing bias, norm or RoPE gradient changes g.d by >= 1e-2 * |g| for
 * random d, and typically by O(|g|)). */
static void check_direction(fixture *f, float *v, size_t n, const float *g, uint64_t seed,
                            const char *what)
{
    const double h = 1e-2;
    float *d = random_vec(n, seed, 1.0f), *save = malloc(n * sizeof(float));
    double nd = 0, gd = 0, gn = 0;
    for (size_t i = 0; i < n; i++)
        nd += (double)d[i] * d[i];
    nd = sqrt(nd);
    for (size_t i = 0; i < n; i++) {
        d[i] = (float)(d[i] / nd);
        gd += (double)g[i] * d[i];
        gn += (double)g[i] * g[i];
    }
    gn = sqrt(gn);
    memcpy(save, v, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = save[i] + (float)h * d[i];
    double lp = fx_loss(f);
    for (size_t i = 0; i < n; i++)
        v[i] = save[i] - (float)h * d[i];
    double lm = fx_loss(f);
    memcpy(v, save, n * sizeof(float));
    double fd = (lp - lm) / (2 * h);
    double tol = 2e-3 * gn + 2e-4;
    ck_assert_msg(fabs(fd - gd) <= tol, "%s: finite difference %.8g vs backward %.8g (|g| %.4g)",
                  what, fd, gd, gn);
    ck_assert_msg(gn > 1e-3, "%s: gradient vanishes (%.3g): the check would prove nothing", what,
                  gn);
    free(d);
    free(save);
}

/* Same for single elements (catches index mistakes a direction might average
 * out). Same tolerance argument with a unit step on one element. */
static void check_elements(fixture *f, float *v, size_t n, const float *g, uint64_t seed,
                           const char *what)
{
    const double h = 1e-2;
    double gn = 0;
    for (size_t i = 0; i < n; i++)
        gn += (double)g[i] * g[i];
    gn = sqrt(gn / (double)n);
    for (int k = 0; k < 4; k++) {
        uint32_t r[4];
        rp_philox4x32(seed, 5, (uint64_t)k, r);
        size_t i = r[0] % n;
        float s = v[i];
        v[i] = s + (float)h;
        double lp = fx_loss(f);
        v[i] = s - (float)h;
        double lm = fx_loss(f);
        v[i] = s;
        double fd = (lp - lm) / (2 * h);
        ck_assert_msg(fabs(fd - g[i]) <= 2e-3 * (fabs(g[i]) + gn) + 2e-4,
                      "%s[%zu]: finite difference %.8g vs backward %.8g", what, i, fd, g[i]);
    }
}

static void gradcheck(rp_model_config cfg, int64_t nseq, int64_t S)
{
    fixture f;
    fx_init(&f, cfg, nseq, S);
    float *dP = calloc(f.np, sizeof(float));
    float *dx = malloc((size_t)(f.T * f.H) * sizeof(float));
    block_backward(&f, &f.cfg, f.x, f.wy, dx, dP, nseq, S);

    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(&cfg, &L, &n, NULL), RP_OK);
    for (int i = 0; i < L[1].nparams; i++) {
        const rp_param_desc *d = &L[1].params[i];
        check_direction(&f, f.P + d->offset, d->numel, dP + d->offset, 100 + (uint64_t)i, d->name);
        check_direction(&f, f.P + d->offset, d->numel, dP + d->offset, 200 + (uint64_t)i, d->name);
        check_elements(&f, f.P + d->offset, d->numel, dP + d->offset, 300 + (uint64_t)i, d->name);
    }
    check_direction(&f, f.x, (size_t)(f.T * f.H), dx, 1, "input x");
    check_direction(&f, f.x, (size_t)(f.T * f.H), dx, 2, "input x");
    check_elements(&f, f.x, (size_t)(f.T * f.H), dx, 3, "input x");
    /* padding between tensors never receives gradient */
    for (size_t j = 0; j < f.np; j++) {
        int inside = 0;
        for (int i = 0; i < L[1].nparams; i++)
            inside |= j >= L[1].params[i].offset &&
                      j < L[1].params[i].offset + L[1].params[i].numel;
        if (!inside)
            ck_assert_float_eq(dP[j], 0.0f);
    }
    free(L);
    free(dP);
    free(dx);
    fx_free(&f);
}

START_TEST(llama_bias_llama3_gradients) { gradcheck(llama_cfg(), 2, 7); }
END_TEST

START_TEST(qwen3_qknorm_gqa_gradients) { gradcheck(qwen_cfg(), 2, 9); }
END_TEST

START_TEST(qwen3_gradients_long_sequence)
{
    /* longer than the attention block: several key blocks, online softmax
     * rescaling exercised (RP_ATTN_BLOCK = 64) */
    gradcheck(qwen_cfg(), 1, 2 * RP_ATTN_BLOCK + 5);
}
END_TEST

START_TEST(sequences_are_independent)
{
    /* the output for sequence 1 of a batch equals the output of that
     * sequence alone: positions restart and nothing leaks across */
    fixture f;
    fx_init(&f, qwen_cfg(), 3, 6);
    ck_assert_int_eq(rp_block_forward(&cpu_k, &f.cfg, f.P, RP_F32, f.x, f.y, 3, 6, NULL, f.saved, f.ws, NULL, NULL), RP_OK);
    float *y1 = malloc((size_t)(6 * f.H) * sizeof(float));
    float *ws1 = malloc(rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &f.cfg, 1, 6) * sizeof(float));
    float *saved1 = malloc(rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &f.cfg, 1, 6) * sizeof(float));
    ck_assert_int_eq(rp_block_forward(&cpu_k, &f.cfg, f.P, RP_F32, f.x + 6 * f.H, y1, 1, 6, NULL, saved1, ws1, NULL, NULL), RP_OK);
    for (int64_t i = 0; i < 6 * f.H; i++)
        ck_assert_msg(fabsf(y1[i] - f.y[6 * f.H + i]) <= 1e-5f * (1 + fabsf(y1[i])),
                      "element %lld: %g vs %g", (long long)i, y1[i], f.y[6 * f.H + i]);
    free(y1);
    free(ws1);
    free(saved1);
    fx_free(&f);
}
END_TEST

START_TEST(bitwise_deterministic_and_accumulating)
{
    fixture f;
    rp_model_config cfg = llama_cfg();
    fx_init(&f, cfg, 2, 5);
    const size_t n = (size_t)(f.T * f.H);
    float *y2 = malloc(n * sizeof(float));
    ck_assert_int_eq(rp_block_forward(&cpu_k, &cfg, f.P, RP_F32, f.x, f.y, 2, 5, NULL, f.saved, f.ws, NULL, NULL), RP_OK);
    ck_assert_int_eq(rp_block_forward(&cpu_k, &cfg, f.P, RP_F32, f.x, y2, 2, 5, NULL, f.saved, f.ws, NULL, NULL), RP_OK);
    ck_assert_mem_eq(f.y, y2, n * sizeof(float));

    /* two microbatches: A = backward(mb1) into zeros, then backward(mb2)
     * into A. Repeating gives the same bits; and the sum equals the
     * separately computed g1 + g2 to rounding (GEMMs accumulate with
     * beta = 1, so the bits of dW may differ from a separate add) */
    float *x2 = random_vec(n, 21, 1.0f), *dy2 = random_vec(n, 22, 1.0f);
    float *dx = malloc(n * sizeof(float));
    float *acc1 = calloc(f.np, sizeof(float)), *acc2 = calloc(f.np, sizeof(float));
    float *g1 = calloc(f.np, sizeof(float)), *g2 = calloc(f.np, sizeof(float));
    float *dxa = malloc(n * sizeof(float)), *dxb = malloc(n * sizeof(float));
    for (int rep = 0; rep < 2; rep++) {
        float *acc = rep ? acc2 : acc1;
        block_backward(&f, &cfg, f.x, f.wy, rep ? dxb : dxa, acc, 2, 5);
        block_backward(&f, &cfg, x2, dy2, dx, acc, 2, 5);
    }
    ck_assert_mem_eq(acc1, acc2, f.np * sizeof(float));
    ck_assert_mem_eq(dxa, dxb, n * sizeof(float));
    block_backward(&f, &cfg, f.x, f.wy, dx, g1, 2, 5);
    ck_assert_mem_eq(dx, dxa, n * sizeof(float));
    block_backward(&f, &cfg, x2, dy2, dx, g2, 2, 5);
    /* acc = (0 + g1) + g2 with the second sum inside the GEMM: equal to
     * g1 + g2 up to the rounding of a K-term dot product, i.e. a few fp32
     * ulps of the tensor's largest contributions */
    rp_layer_desc *L;
    int nl;
    ck_assert_int_eq(rp_model_layout(&cfg, &L, &nl, NULL), RP_OK);
    for (int t = 0; t < L[1].nparams; t++) {
        const rp_param_desc *d = &L[1].params[t];
        float scale = 0;
        for (size_t j = d->offset; j < d->offset + d->numel; j++)
            scale = fmaxf(scale, fabsf(g1[j]) + fabsf(g2[j]));
        for (size_t j = d->offset; j < d->offset + d->numel; j++) {
            float s = g1[j] + g2[j];
            ck_assert_msg(fabsf(acc1[j] - s) <= 1e-5f * scale, "%s[%zu]: accumulated %g vs g1+g2 %g",
                          d->name, j - d->offset, acc1[j], s);
        }
    }
    free(L);
    /* dx may alias dy */
    float *alias = malloc(n * sizeof(float));
    memcpy(alias, f.wy, n * sizeof(float));
    float *dz = calloc(f.np, sizeof(float));
    block_backward(&f, &cfg, f.x, alias, alias, dz, 2, 5);
    ck_assert_mem_eq(alias, dxa, n * sizeof(float));
    ck_assert_mem_eq(dz, g1, f.np * sizeof(float));
    free(alias);
    free(dz);
    free(y2);
    free(x2);
    free(dy2);
    free(dx);
    free(dxa);
    free(dxb);
    free(acc1);
    free(acc2);
    free(g1);
    free(g2);
    fx_free(&f);
}
END_TEST

/* The workspace of sequences of S tokens minus that of S/2 (both past one
 * MLP chunk, so the chunk's scratch cancels), and likewise the saved area. */
static void per_token_growth(const rp_model_config *cfg, int64_t nseq, int64_t S, size_t *ws,
                             size_t *saved)
{
    *ws = rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, cfg, nseq, S) -
          rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, cfg, nseq, S / 2);
    *saved = rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, cfg, nseq, S) -
             rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, cfg, nseq, S / 2);
}

START_TEST(workspace_linear_in_seqlen)
{
    rp_model_config cfgs[2] = {llama_cfg(), qwen_cfg()};
    for (int c = 0; c < 2; c++) {
        for (int64_t nseq = 1; nseq <= 3; nseq++) {
            /* multiples of the 16-float alignment keep the rounding exact;
             * every length is longer than one default MLP chunk
             * (RP_CHUNK_WHOLE_TOKENS: shorter ones keep g, u, m) */
            size_t a = rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &cfgs[c], nseq, 16384);
            size_t b = rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &cfgs[c], nseq, 32768);
            size_t d = rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &cfgs[c], nseq, 49152);
            ck_assert_uint_eq(b - a, d - b);
            a = rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &cfgs[c], nseq, 16384);
            b = rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &cfgs[c], nseq, 32768);
            d = rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &cfgs[c], nseq, 49152);
            ck_assert_uint_eq(b - a, d - b);
            /* nothing of tokens x intermediate width: a 4x wider MLP takes
             * the same memory per token, saved and scratch */
            rp_model_config wide = cfgs[c];
            wide.intermediate_size *= 4;
            size_t ws_narrow, saved_narrow, ws_wide, saved_wide;
            per_token_growth(&cfgs[c], nseq, 32768, &ws_narrow, &saved_narrow);
            per_token_growth(&wide, nseq, 32768, &ws_wide, &saved_wide);
            ck_assert_uint_eq(ws_wide, ws_narrow);
            ck_assert_uint_eq(saved_wide, saved_narrow);
            /* a 4096-token sequence needs less than one 4096^2 score matrix */
            ck_assert_uint_lt(rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &cfgs[c], 1, 4096) +
                                  rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &cfgs[c], 1, 4096),
                              (size_t)4096 * 4096);
        }
        /* a microbatch of one chunk keeps g, u and m for its backward:
         * its saved area grows with the width, by 3 floats a token per
         * column of I on the fp32 table (g, u, m) */
        rp_model_config wide = cfgs[c];
        wide.intermediate_size *= 4;
        const size_t T = 4096, dI = (size_t)(wide.intermediate_size - cfgs[c].intermediate_size);
        ck_assert_uint_ge(rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &wide, 1, (int64_t)T) -
                              rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &cfgs[c], 1,
                                                    (int64_t)T),
                          3 * T * dI);
    }
}
END_TEST

/* A table's saved area and workspace (floats) for cfg over 2 sequences of
 * 32 tokens, with only the CUDA paths `allow` names on (RP_ALLOW_UNPROVEN_CUDA's
 * words; NULL: none): every other one, proven or not, named by
 * RP_DISABLE_CUDA_PATHS. */
static void mlp_sizes(const rp_kernel_ops *ops, const rp_model_config *cfg, const char *allow,
                      size_t *saved, size_t *ws)
{
    unsigned on = 0;
    rp_error err = {0};
    ck_assert_int_eq(rp_unproven_parse(allow, &on, &err), RP_OK);
    char off[256];
    ck_assert_uint_lt(rp_unproven_list(~on & ((1u << RP_UNPROVEN_COUNT) - 1), off, sizeof off),
                      sizeof off);
    setenv("RP_DISABLE_CUDA_PATHS", off, 1);
    *saved = rp_block_saved_floats(ops, RP_BF16, cfg, 2, 32);
    *ws = rp_block_workspace_floats(ops, RP_BF16, cfg, 2, 32);
    unsetenv("RP_DISABLE_CUDA_PATHS");
}

/* bf16-mlp's bytes, derived by hand: T = 64 tokens, I = 40 (qwen_cfg), so
 * each of g, u, dm is T I = 2560 fp32 values, 10240 bytes, or 5120 bytes in
 * bf16; both are multiples of the carving's 64-byte alignment, so each
 * buffer narrowed frees exactly T I / 2 = 1280 floats. Kept (the default
 * chunk holds all 64 tokens): g and u are saved (-2560 saved), dm scratch
 * (-1280 scratch). In chunks of one 16-token tile: g, u and dm are a
 * chunk's, all scratch: 3 x 16 x 40 / 2 = -960 scratch, nothing saved. */
START_TEST(dense_mlp_bf16_sizes)
{
    static const struct {
        unsigned lora;       /* LoRA's targets (rank 2), 0: none */
        int chunked;         /* chunks of one 16-token tile */
        size_t saved, ws;    /* floats freed */
    } cases[] = {
        {0, 0, 2560, 1280},
        {0, 1, 0, 960},
        /* the adapters add in fp32: gate or up keeps g and u, down dm */
        {1u << RP_LORA_GATE_PROJ, 0, 0, 1280},
        {1u << RP_LORA_UP_PROJ, 1, 0, 320},
        {1u << RP_LORA_DOWN_PROJ, 0, 2560, 0},
        {RP_LORA_ALL_LINEAR, 0, 0, 0},
        {RP_LORA_ALL_LINEAR, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rp_model_config cfg = qwen_cfg();
        if (cases[i].lora) {
            cfg.lora.rank = 2;
            cfg.lora.alpha = 4;
            cfg.lora.targets = cases[i].lora;
        }
        if (cases[i].chunked) {
            cfg.token_tile = 16;
            cfg.chunk_tiles = 1;
        }
        size_t s0, w0, s1, w1, s2, w2, s3, w3;
        mlp_sizes(&rp_kernel_ops_cuda_sizes, &cfg, NULL, &s0, &w0);
        mlp_sizes(&rp_kernel_ops_cuda_sizes, &cfg, "gemm-lt, bf16-mlp", &s1, &w1);
        ck_assert_msg(s0 - s1 == cases[i].saved && w0 - w1 == cases[i].ws,
                      "case %zu: bf16-mlp freed %zd saved and %zd scratch floats, not %zu and %zu",
                      i, (ssize_t)(s0 - s1), (ssize_t)(w0 - w1), cases[i].saved, cases[i].ws);
        mlp_sizes(&rp_kernel_ops_cuda_sizes, &cfg, "1", &s2, &w2);
        ck_assert(s2 == s1 && w2 == w1);
        mlp_sizes(&rp_kernel_ops_cuda_sizes, &cfg, "gemm-lt,fused-xent", &s2, &w2);
        ck_assert(s2 == s0 && w2 == w0);
        /* the CPU table computes in fp32: nothing to narrow */
        mlp_sizes(&rp_kernel_ops_cpu, &cfg, NULL, &s2, &w2);
        mlp_sizes(&rp_kernel_ops_cpu, &cfg, "bf16-mlp", &s3, &w3);
        ck_assert(s2 == s3 && w2 == w3);
    }
}
END_TEST

/* One run's forward output, input gradient and parameter gradient. */
typedef struct block_run {
    float *y, *dx, *dP;
} block_run;

static block_run run_block(fixture *f, const rp_model_config *cfg)
{
    const size_t n = (size_t)(f->T * f->H);
    block_run r = {malloc(n * sizeof(float)), malloc(n * sizeof(float)),
                   calloc(f->np, sizeof(float))};
    float *ws = malloc(rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, cfg, f->nseq, f->S) *
                       sizeof(float));
    float *saved =
        malloc(rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, cfg, f->nseq, f->S) *
               sizeof(float));
    ck_assert_int_eq(rp_block_forward(&cpu_k, cfg, f->P, RP_F32, f->x, r.y, f->nseq, f->S, NULL,
                                      saved, ws, NULL, NULL),
                     RP_OK);
    ck_assert_int_eq(rp_block_backward(&cpu_k, cfg, f->P, RP_F32, f->x, saved, f->wy, r.dx, r.dP,
                                       f->nseq, f->S, NULL, ws, NULL, NULL),
                     RP_OK);
    free(ws);
    free(saved);
    return r;
}

static void free_run(block_run *r)
{
    free(r->y), free(r->dx), free(r->dP);
}

/* Largest |a - b| over n values, relative to the largest |b|. */
static double relative_difference(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

/* The dense MLP's gate and up as one GEMM (RP_TEST_FUSED_GATE_UP=1 on the
 * CPU table, model/block.c's mlp_fused_gate_up; both configs' I x H are
 * multiples of the layout's alignment, so their matrices are adjacent):
 * the backward is still the forward's derivative (gradcheck, every
 * parameter tensor and the input); the path is taken (the input gradient,
 * summed over 2I in one GEMM, is not the two GEMMs' bits) and within 1e-5
 * of the two GEMMs' output and gradients (sums in another order); a
 * microbatch in chunks of one tile gives the bits of one chunk (g and u
 * made again by the backward, or kept in the saved area); the saved area
 * and workspace keep their sizes, on the CPU table with the hook and on
 * the CUDA table's sizes with fused-gate-up, with and without bf16-mlp
 * (dg and du carved as one buffer there), kept or in chunks, and where a
 * buffer of g is not a whole number of the carving's 64 bytes (7 tokens,
 * I = 44: one buffer of 2 x 1232 bytes would take 16 floats fewer than
 * two of 1232). */
START_TEST(fused_gate_up_is_the_derivative_and_takes_no_memory)
{
    rp_model_config cfgs[2] = {llama_cfg(), qwen_cfg()};
    for (int c = 0; c < 2; c++) {
        fixture f;
        fx_init(&f, cfgs[c], 3, 7);
        const size_t n = (size_t)(f.T * f.H);
        block_run two = run_block(&f, &f.cfg);
        setenv("RP_TEST_FUSED_GATE_UP", "1", 1);
        block_run one = run_block(&f, &f.cfg);
        ck_assert_msg(memcmp(one.dx, two.dx, n * sizeof(float)) != 0,
                      "config %d: the hook changed no bit of dx (the path was not taken)", c);
        ck_assert_double_le(relative_difference(one.y, two.y, n), 1e-5);
        ck_assert_double_le(relative_difference(one.dx, two.dx, n), 1e-5);
        ck_assert_double_le(relative_difference(one.dP, two.dP, f.np), 1e-5);
        rp_model_config tiled = f.cfg;
        tiled.token_tile = 4;
        block_run all = run_block(&f, &tiled);
        tiled.chunk_tiles = 1;
        block_run chunks = run_block(&f, &tiled);
        ck_assert(memcmp(all.y, chunks.y, n * sizeof(float)) == 0);
        ck_assert(memcmp(all.dx, chunks.dx, n * sizeof(float)) == 0);
        ck_assert(memcmp(all.dP, chunks.dP, f.np * sizeof(float)) == 0);
        unsetenv("RP_TEST_FUSED_GATE_UP");
        free_run(&two), free_run(&one), free_run(&all), free_run(&chunks);
        fx_free(&f);
    }
    setenv("RP_TEST_FUSED_GATE_UP", "1", 1);
    gradcheck(llama_cfg(), 2, 7);
    gradcheck(qwen_cfg(), 2, 9);
    unsetenv("RP_TEST_FUSED_GATE_UP");
    for (int chunked = 0; chunked <= 1; chunked++) {
        rp_model_config cfg = qwen_cfg();
        if (chunked) {
            cfg.token_tile = 16;
            cfg.chunk_tiles = 1;
        }
        size_t s0, w0, s1, w1;
        rp_model_config odd = qwen_cfg();
        odd.intermediate_size = 44; /* I x H = 1056: still a multiple of the alignment */
        const size_t odd_saved = rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &odd, 1, 7),
                     odd_ws = rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &odd, 1, 7);
        setenv("RP_TEST_FUSED_GATE_UP", "1", 1);
        ck_assert_uint_eq(rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &odd, 1, 7),
                          odd_saved);
        ck_assert_uint_eq(rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &odd, 1, 7),
                          odd_ws);
        unsetenv("RP_TEST_FUSED_GATE_UP");
        static const char *const pairs[][2] = {{NULL, "fused-gate-up"},
                                               {"bf16-mlp", "bf16-mlp,fused-gate-up"}};
        for (int p = 0; p < 2; p++) {
            mlp_sizes(&rp_kernel_ops_cuda_sizes, &cfg, pairs[p][0], &s0, &w0);
            mlp_sizes(&rp_kernel_ops_cuda_sizes, &cfg, pairs[p][1], &s1, &w1);
            ck_assert_msg(s0 == s1 && w0 == w1, "%s, chunked %d: %zu and %zu floats, not %zu "
                          "and %zu", pairs[p][1], chunked, s1, w1, s0, w0);
        }
        mlp_sizes(&rp_kernel_ops_cpu, &cfg, NULL, &s0, &w0);
        setenv("RP_TEST_FUSED_GATE_UP", "1", 1);
        mlp_sizes(&rp_kernel_ops_cpu, &cfg, NULL, &s1, &w1);
        unsetenv("RP_TEST_FUSED_GATE_UP");
        ck_assert(s0 == s1 && w0 == w1);
    }
}
END_TEST

/* 3 sequences of 7 tokens, tiles of 4 (cut inside sequences, the last
 * tile 1 token): chunks of 1, 2, 3 and all tiles give the same bits, with
 * and without the forward's output (the backward of a layer whose forward
 * ran only for it); the tiles compute what one tile does, within fp32
 * rounding of sums in another order (1e-5 of the largest value; a wrong
 * row, tile or missing term is O(1) off). */
START_TEST(mlp_chunks_keep_bits)
{
    rp_model_config cfgs[2] = {llama_cfg(), qwen_cfg()};
    for (int c = 0; c < 2; c++) {
        fixture f;
        fx_init(&f, cfgs[c], 3, 7);
        const size_t n = (size_t)(f.T * f.H);
        rp_model_config one_tile = cfgs[c];
        block_run whole = run_block(&f, &one_tile);
        rp_model_config tiled = cfgs[c];
        tiled.token_tile = 4;
        tiled.chunk_tiles = 6; /* all of them */
        block_run all = run_block(&f, &tiled);
        for (int tiles = 1; tiles <= 3; tiles++) {
            tiled.chunk_tiles = tiles;
            block_run r = run_block(&f, &tiled);
            ck_assert_mem_eq(r.y, all.y, n * sizeof(float));
            ck_assert_mem_eq(r.dx, all.dx, n * sizeof(float));
            ck_assert_mem_eq(r.dP, all.dP, f.np * sizeof(float));
            float *dx = malloc(n * sizeof(float)), *dP = calloc(f.np, sizeof(float));
            float *saved = f.saved, *ws = f.ws;
            f.saved = malloc(rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &tiled, 3, 7) *
                             sizeof(float));
            f.ws = malloc(rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &tiled, 3, 7) *
                          sizeof(float));
            block_backward(&f, &tiled, f.x, f.wy, dx, dP, 3, 7);
            ck_assert_mem_eq(dx, all.dx, n * sizeof(float));
            ck_assert_mem_eq(dP, all.dP, f.np * sizeof(float));
            free(f.saved), free(f.ws);
            f.saved = saved, f.ws = ws;
            free(dx), free(dP);
            free_run(&r);
        }
        ck_assert_double_le(relative_difference(all.y, whole.y, n), 1e-5);
        ck_assert_double_le(relative_difference(all.dx, whole.dx, n), 1e-5);
        ck_assert_double_le(relative_difference(all.dP, whole.dP, f.np), 1e-5);
        free_run(&whole), free_run(&all);
        fx_free(&f);
    }
}
END_TEST

/* ---- the mixture-of-experts MLP over token tiles and chunks ------------ */

/* A Qwen3-MoE block (4 experts, 2 per token, width 12) and a gpt-oss one
 * (router and expert biases, sinks, a sliding window of 4, clamped SwiGLU),
 * with tiles of 8 tokens (cfg.chunk_tiles set by each run). */
static rp_model_config qwen_moe_cfg(void)
{
    rp_model_config c = qwen_cfg();
    c.arch = RP_ARCH_QWEN3_MOE;
    c.moe.num_experts = 4;
    c.moe.num_experts_per_tok = 2;
    c.moe.moe_intermediate_size = 12;
    c.moe.decoder_sparse_step = 1;
    c.moe.norm_topk_prob = 1;
    c.token_tile = 8;
    return c;
}

static rp_model_config gpt_oss_cfg(void)
{
    rp_model_config c = qwen_moe_cfg();
    c.arch = RP_ARCH_GPT_OSS;
    c.moe.moe_intermediate_size = 16;
    c.intermediate_size = 16;
    c.attention_bias = 1;
    c.oss.swiglu_limit = 7.0;
    c.oss.swiglu_alpha = 1.702;
    c.oss.sliding_window = 4;
    c.oss.sliding[0] = 1u << 0; /* block 0 slides */
    return c;
}

/* What one run of the block gives: the forward's y and router statistics,
 * and the backward's dx and trainable gradient (the tail's order, forward
 * then backward, and the recompute's, a forward without y then backward,
 * must agree to the bit). */
typedef struct moe_result {
    float *y, *stats, *dx, *grad;
} moe_result;

static moe_result moe_block_run_on(const rp_kernels *k, const rp_model_config *cfg,
                                   const float *P, const float *A, size_t ntrain, const float *x,
                                   const float *dy, const float *aux, int64_t nseq, int64_t S)
{
    const size_t n = (size_t)(nseq * S * cfg->hidden_size), E = (size_t)cfg->moe.num_experts;
    float *ws = malloc(rp_block_workspace_floats(k->ops, RP_F32, cfg, nseq, S) * sizeof(float));
    float *saved = malloc(rp_block_saved_floats(k->ops, RP_F32, cfg, nseq, S) * sizeof(float));
    moe_result r = {malloc(n * sizeof(float)), calloc(2 * E, sizeof(float)),
                    malloc(n * sizeof(float)), calloc(ntrain, sizeof(float))};
    float *dx2 = malloc(n * sizeof(float)), *grad2 = calloc(ntrain, sizeof(float));
    rp_lora_call lc = {.adapters = A, .base_dtype = RP_F32, .seed = 5, .layer = 0};
    rp_block_call call = {.block = 0, .lora = A ? &lc : NULL, .router_stats = r.stats,
                          .router_aux_grad = aux};
    rp_error err = {0};
    ck_assert_msg(rp_block_forward(k, cfg, P, RP_F32, x, r.y, nseq, S, NULL, saved, ws, &call, &err) == RP_OK, "%s", err.msg);
    ck_assert_msg(rp_block_backward(k, cfg, P, RP_F32, x, saved, dy, r.dx, r.grad, nseq, S, NULL, ws, &call, &err) == RP_OK, "%s", err.msg);
    call.router_stats = NULL;
    ck_assert_msg(rp_block_forward(k, cfg, P, RP_F32, x, NULL, nseq, S, NULL, saved, ws, &call, &err) == RP_OK, "%s", err.msg);
    ck_assert_msg(rp_block_backward(k, cfg, P, RP_F32, x, saved, dy, dx2, grad2, nseq, S, NULL, ws, &call, &err) == RP_OK, "%s", err.msg);
    ck_assert_mem_eq(dx2, r.dx, n * sizeof(float));
    ck_assert_mem_eq(grad2, r.grad, ntrain * sizeof(float));
    free(dx2);
    free(grad2);
    free(ws);
    free(saved);
    return r;
}

static moe_result moe_block_run(const rp_model_config *cfg, const float *P, const float *A,
                                size_t ntrain, const float *x, const float *dy,
                                const float *aux, int64_t nseq, int64_t S)
{
    return moe_block_run_on(&cpu_k, cfg, P, A, ntrain, x, dy, aux, nseq, S);
}

static void moe_result_free(moe_result *r)
{
    free(r->y);
    free(r->stats);
    free(r->dx);
    free(r->grad);
}

/* got equals want to fp32 rounding: within 1e-4 of each element plus 1e-6
 * of the largest (a tile left out or added twice moves elements by O(1) of
 * their size). */
static void expect_close(const float *got, const float *want, size_t n, const char *what)
{
    float scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmaxf(scale, fabsf(want[i]));
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-4f * fabsf(want[i]) + 1e-6f * scale,
                      "%s[%zu]: %g vs %g", what, i, got[i], want[i]);
}

/* The outputs, router statistics, input gradients and every trainable
 * gradient of the block with chunks of 1, 2 and all of its tiles are
 * the same bits: 3 sequences of 7 tokens are tiles of 8, 8 and 5 tokens,
 * so a chunk of 2 leaves a last chunk of one short tile. */
static void moe_chunks_agree(rp_model_config cfg)
{
    const int64_t nseq = 3, S = 7;
    const size_t n = (size_t)(nseq * S * cfg.hidden_size), E = (size_t)cfg.moe.num_experts;
    size_t np, na = 0;
    float *P = random_block(&cfg, 1, 7, &np), *A = NULL;
    if (cfg.lora.rank > 0)
        A = random_block(&cfg, 0, 8, &na);
    float *x = random_vec(n, 11, 1.0f), *dy = random_vec(n, 13, 1.0f);
    float *aux = random_vec(E, 17, 0.1f);
    const size_t ntrain = A ? na : np;
    cfg.chunk_tiles = 0; /* the whole microbatch */
    moe_result whole = moe_block_run(&cfg, P, A, ntrain, x, dy, aux, nseq, S);
    /* the routing spreads the tokens: every expert has pairs */
    for (size_t e = 0; e < E; e++)
        ck_assert_msg(whole.stats[e] > 0, "expert %zu has no tokens", e);
    for (int64_t chunk = 1; chunk <= 2; chunk++) {
        cfg.chunk_tiles = chunk;
        moe_result r = moe_block_run(&cfg, P, A, ntrain, x, dy, aux, nseq, S);
        ck_assert_mem_eq(r.y, whole.y, n * sizeof(float));
        ck_assert_mem_eq(r.stats, whole.stats, 2 * E * sizeof(float));
        ck_assert_mem_eq(r.dx, whole.dx, n * sizeof(float));
        for (size_t i = 0; i < ntrain; i++)
            ck_assert_msg(memcmp(&r.grad[i], &whole.grad[i], sizeof(float)) == 0,
                          "chunk of %lld tiles: gradient element %zu: %a vs %a (whole)",
                          (long long)chunk, i, r.grad[i], whole.grad[i]);
        moe_result_free(&r);
    }
    /* and they are the numbers of one tile over all the tokens (the
     * microbatch's GEMMs before tiles), to the rounding of a reordered sum */
    cfg.token_tile = nseq * S;
    cfg.chunk_tiles = 0;
    moe_result one = moe_block_run(&cfg, P, A, ntrain, x, dy, aux, nseq, S);
    expect_close(one.y, whole.y, n, "one tile vs tiles of 8: y");
    expect_close(one.dx, whole.dx, n, "one tile vs tiles of 8: dx");
    expect_close(one.grad, whole.grad, ntrain, "one tile vs tiles of 8: gradient");
    moe_result_free(&one);
    moe_result_free(&whole);
    free(P);
    free(A);
    free(x);
    free(dy);
    free(aux);
}

START_TEST(qwen3_moe_bits_do_not_depend_on_the_chunk) { moe_chunks_agree(qwen_moe_cfg()); }
END_TEST

START_TEST(qwen3_moe_lora_bits_do_not_depend_on_the_chunk)
{
    /* adapters on the router and on every expert's gate, up and down */
    rp_model_config c = qwen_moe_cfg();
    c.lora.rank = 2;
    c.lora.alpha = 4;
    c.lora.targets = RP_LORA_ALL_LINEAR;
    moe_chunks_agree(c);
}
END_TEST

START_TEST(gpt_oss_bits_do_not_depend_on_the_chunk) { moe_chunks_agree(gpt_oss_cfg()); }
END_TEST

/* The CPU table, but its GEMMs read bf16 weights only, as the CUDA
 * table's (cuBLAS): a GEMM asked for weights in another dtype fails, as
 * there. */
static rp_kernel_ops bf16_weights_ops;

static rp_status weights_read(rp_dtype W_dtype, const char *op, rp_error *err)
{
    if (rp_kernel_reads_weights(&bf16_weights_ops, W_dtype))
        return RP_OK;
    return rp_error_set(err, RP_ERR_UNSUPPORTED, "bf16-weights table: %s asked for %s weights",
                        op, rp_dtype_name(W_dtype));
}

static rp_status strict_linear_forward(void *state, const void *x, const void *W, rp_dtype W_dtype,
                                       const float *bias, const float *residual, float *y,
                                       void *y_compute, int64_t rows, int64_t in, int64_t out,
                                       rp_error *err)
{
    RP_TRY(weights_read(W_dtype, "linear_forward", err));
    return rp_kernel_ops_cpu.linear_forward(state, x, W, W_dtype, bias, residual, y, y_compute,
                                            rows, in, out, err);
}

static rp_status strict_grouped_forward(void *state, const void *x, const void *const *W,
                                        rp_dtype W_dtype, const int32_t *offsets,
                                        int64_t nexperts, int64_t rows, int64_t in, int64_t out,
                                        float *y, void *y_compute, rp_error *err)
{
    RP_TRY(weights_read(W_dtype, "grouped_linear_forward", err));
    return rp_kernel_ops_cpu.grouped_linear_forward(state, x, W, W_dtype, offsets, nexperts,
                                                    rows, in, out, y, y_compute, err);
}

START_TEST(gpt_oss_block_reads_weights_as_the_cuda_table_does)
{
    /* gpt-oss's block with bf16 weights on a table whose GEMMs read bf16
     * only (the routing weights' gradient's dy . bd_e reads the down
     * biases as the experts' matrices are read, not as fp32): it runs, and
     * gives the fp32 run's numbers on the same (bf16-exact) weights */
    bf16_weights_ops = rp_kernel_ops_cpu;
    bf16_weights_ops.weight_dtypes = 1u << RP_BF16;
    bf16_weights_ops.linear_forward = strict_linear_forward;
    bf16_weights_ops.grouped_linear_forward = strict_grouped_forward;
    const rp_kernels strict = {.ops = &bf16_weights_ops};
    rp_model_config cfg = gpt_oss_cfg();
    const int64_t nseq = 3, S = 7;
    const size_t n = (size_t)(nseq * S * cfg.hidden_size), E = (size_t)cfg.moe.num_experts;
    size_t np;
    float *P = random_block(&cfg, 1, 7, &np);
    uint16_t *Pb = malloc(np * sizeof(uint16_t));
    rp_f32_to_bf16_array(P, Pb, np);
    for (size_t i = 0; i < np; i++) /* the fp32 run's weights: the same values */
        P[i] = rp_bf16_to_f32(Pb[i]);
    float *x = random_vec(n, 11, 1.0f), *dy = random_vec(n, 13, 1.0f);
    float *aux = random_vec(E, 17, 0.1f);
    moe_result want = moe_block_run(&cfg, P, NULL, np, x, dy, aux, nseq, S);
    float *ws = malloc(rp_block_workspace_floats(&bf16_weights_ops, RP_BF16, &cfg, nseq, S) *
                       sizeof(float));
    float *saved = malloc(rp_block_saved_floats(&bf16_weights_ops, RP_BF16, &cfg, nseq, S) *
                          sizeof(float));
    float *y = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float));
    float *grad = calloc(np, sizeof(float)), *stats = calloc(2 * E, sizeof(float));
    rp_block_call call = {.block = 0, .router_stats = stats, .router_aux_grad = aux};
    rp_error err = {0};
    ck_assert_msg(rp_block_forward(&strict, &cfg, Pb, RP_BF16, x, y, nseq, S, NULL, saved, ws,
                                   &call, &err) == RP_OK, "%s", err.msg);
    ck_assert_msg(rp_block_backward(&strict, &cfg, Pb, RP_BF16, x, saved, dy, dx, grad, nseq, S,
                                    NULL, ws, &call, &err) == RP_OK, "%s", err.msg);
    expect_close(y, want.y, n, "bf16 weights vs fp32: y");
    expect_close(dx, want.dx, n, "bf16 weights vs fp32: dx");
    expect_close(grad, want.grad, np, "bf16 weights vs fp32: gradient");
    moe_result_free(&want);
    free(P), free(Pb), free(x), free(dy), free(aux), free(ws), free(saved), free(y), free(dx);
    free(grad), free(stats);
}
END_TEST

/* A table that computes in bf16 (as CUDA's) and reads bf16 weights only:
 * fp32 parameters are converted whole into the compute copy, and the 1-D
 * tensors must still be read as fp32 where they lie, not from that bf16
 * copy. Its rmsnorm records the norm weights it is given and stops the
 * forward there (the CPU ops cannot run on bf16 buffers). */
static rp_kernel_ops bf16_compute_ops;
static const float *seen_norm_w;
static rp_status recording_rmsnorm(void *state, const float *x, const float *w, float *y,
                                   void *y_compute, float *rstd, int64_t rows, int64_t dim,
                                   float eps, rp_error *err)
{
    (void)state, (void)x, (void)y, (void)y_compute, (void)rstd, (void)rows, (void)dim, (void)eps;
    seen_norm_w = w;
    return rp_error_set(err, RP_ERR_UNSUPPORTED, "recorded");
}

START_TEST(fp32_weights_on_a_bf16_table_read_their_norms_as_fp32)
{
    bf16_compute_ops = rp_kernel_ops_cpu;
    bf16_compute_ops.compute_dtype = RP_BF16;
    bf16_compute_ops.weight_dtypes = 1u << RP_BF16;
    bf16_compute_ops.rmsnorm_forward = recording_rmsnorm;
    const rp_kernels k = {.ops = &bf16_compute_ops};
    rp_model_config cfg = qwen_cfg();
    const int64_t nseq = 2, S = 5;
    size_t np;
    float *P = random_block(&cfg, 1, 3, &np);
    rp_block_offsets off;
    rp_block_offsets_get(&cfg, 0, &off);
    float *x = random_vec((size_t)(nseq * S * cfg.hidden_size), 5, 1.0f);
    float *ws = malloc(rp_block_workspace_floats(&bf16_compute_ops, RP_F32, &cfg, nseq, S) *
                       sizeof(float));
    float *saved = malloc(rp_block_saved_floats(&bf16_compute_ops, RP_F32, &cfg, nseq, S) *
                          sizeof(float));
    rp_error err = {0};
    seen_norm_w = NULL;
    ck_assert_int_eq(rp_block_forward(&k, &cfg, P, RP_F32, x, NULL, nseq, S, NULL, saved, ws,
                                      NULL, &err),
                     RP_ERR_UNSUPPORTED);
    ck_assert_str_eq(err.msg, "recorded");
    ck_assert_msg(seen_norm_w == P + off.in_norm, "the input norm's weights were read at %p, "
                  "not in the fp32 parameters at %p (inside the saved area: %d)",
                  (const void *)seen_norm_w, (const void *)(P + off.in_norm),
                  seen_norm_w >= saved && seen_norm_w < saved + rp_block_saved_floats(
                      &bf16_compute_ops, RP_F32, &cfg, nseq, S));
    free(P), free(x), free(ws), free(saved);
}
END_TEST

/* A CPU table that keeps its own RoPE table, as the CUDA table does
 * (rope_table_floats 0: the block gives it no space). */
static float *kept_rope;
static size_t kept_rope_floats;

static rp_status keeping_rope_table(void *state, const float *inv_freq, int64_t seqlen,
                                    int64_t half, float *space, const float **table,
                                    rp_error *err)
{
    (void)state;
    if (space)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "rope_table: space given to a table that "
                            "keeps its own");
    kept_rope_floats = rp_rope_table_floats(seqlen, half);
    kept_rope = realloc(kept_rope, kept_rope_floats * sizeof(float));
    rp_rope_table(kept_rope, inv_freq, seqlen, half);
    *table = kept_rope;
    return RP_OK;
}

static size_t no_rope_space(int64_t seqlen, int64_t half)
{
    (void)seqlen, (void)half;
    return 0;
}

START_TEST(yarn_scales_a_copy_of_a_kept_rope_table)
{
    /* gpt-oss's YaRN (attention factor about 1.2) on a table that keeps
     * its RoPE table: the block scales a copy in its saved area, so the
     * result is the CPU table's to the bit and the kept table stays as
     * made (before: refused, "keep their own RoPE table") */
    rp_kernel_ops keeping = rp_kernel_ops_cpu;
    keeping.rope_table = keeping_rope_table;
    keeping.rope_table_floats = no_rope_space;
    const rp_kernels keep_k = {.ops = &keeping};
    rp_model_config cfg = gpt_oss_cfg();
    cfg.rope_scaling.type = RP_ROPE_YARN;
    cfg.rope_scaling.factor = 8;
    cfg.rope_scaling.original_max_position_embeddings = 4;
    ck_assert(rp_model_rope_attention_factor(&cfg) > 1.1);
    const int64_t nseq = 2, S = 7, half = cfg.head_dim / 2;
    ck_assert_uint_eq(rp_block_saved_floats(&keeping, RP_F32, &cfg, nseq, S),
                      rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, &cfg, nseq, S));
    const size_t n = (size_t)(nseq * S * cfg.hidden_size), E = (size_t)cfg.moe.num_experts;
    size_t np;
    float *P = random_block(&cfg, 0, 7, &np);
    float *x = random_vec(n, 11, 1.0f), *dy = random_vec(n, 13, 1.0f);
    float *aux = random_vec(E, 17, 0.1f);
    moe_result want = moe_block_run(&cfg, P, NULL, np, x, dy, aux, nseq, S);
    moe_result got = moe_block_run_on(&keep_k, &cfg, P, NULL, np, x, dy, aux, nseq, S);
    ck_assert_mem_eq(got.y, want.y, n * sizeof(float));
    ck_assert_mem_eq(got.dx, want.dx, n * sizeof(float));
    ck_assert_mem_eq(got.grad, want.grad, np * sizeof(float));
    float inv_freq[RP_MODEL_MAX_HEAD_DIM / 2], *fresh = malloc(kept_rope_floats * sizeof(float));
    rp_model_rope_inv_freq(&cfg, inv_freq);
    rp_rope_table(fresh, inv_freq, S, half);
    ck_assert_mem_eq(kept_rope, fresh, kept_rope_floats * sizeof(float));
    moe_result_free(&want);
    moe_result_free(&got);
    free(P), free(x), free(dy), free(aux), free(fresh);
    free(kept_rope);
    kept_rope = NULL;
}
END_TEST

START_TEST(head_dims_the_cuda_attention_refuses_are_refused_up_front)
{
    /* CUDA's attention takes head dims that are multiples of 8 up to 128:
     * any other is refused before any work, naming the dim (the golden
     * gpt-oss model's 12 used to fail at its first attention call) */
    rp_model_config cfg = gpt_oss_cfg();
    rp_error err = {0};
    for (int64_t hd = 4; hd <= 256; hd += 4) {
        cfg.head_dim = hd;
        const int usable = hd % 8 == 0 && hd <= 128;
        const rp_status s = rp_model_ops_check(&cfg, &rp_kernel_ops_cuda_sizes, 1, &err);
        ck_assert_msg(usable ? s == RP_OK : s == RP_ERR_UNSUPPORTED, "head_dim %lld: %d (%s)",
                      (long long)hd, s, err.msg);
        if (!usable) {
            char want[64];
            snprintf(want, sizeof want, "head_dim %lld: cuda executors' attention", (long long)hd);
            ck_assert_msg(strstr(err.msg, want), "%s", err.msg);
        }
        ck_assert_int_eq(rp_model_ops_check(&cfg, &rp_kernel_ops_cpu, 1, &err), RP_OK);
    }
}
END_TEST

/* Saved + scratch floats of block 0 for T2 tokens minus those for T1. */
static size_t growth(const rp_model_config *cfg, int64_t T1, int64_t T2)
{
    const rp_kernel_ops *o = &rp_kernel_ops_cpu;
    return rp_block_saved_floats(o, RP_F32, cfg, 1, T2) + rp_block_workspace_floats(o, RP_F32, cfg, 1, T2) -
           rp_block_saved_floats(o, RP_F32, cfg, 1, T1) - rp_block_workspace_floats(o, RP_F32, cfg, 1, T1);
}

START_TEST(moe_memory_is_bounded_per_token_not_per_width)
{
    /* with chunks of one tile, a token more costs the same whatever the
     * experts' width (their rows live for a chunk only), LoRA on the
     * experts included; with the whole microbatch as one chunk each token
     * holds its k rows of gathered input, outputs (H each) and g, u, m, z
     * (I each; dg and du are g and u on fp32 tables) */
    rp_model_config cfgs[3] = {qwen_moe_cfg(), qwen_moe_cfg(), gpt_oss_cfg()};
    cfgs[1].lora.rank = 2;
    cfgs[1].lora.alpha = 4;
    cfgs[1].lora.targets = RP_LORA_ALL_LINEAR;
    for (int c = 0; c < 3; c++) {
        rp_model_config narrow = cfgs[c], wide = cfgs[c];
        wide.moe.moe_intermediate_size *= 4;
        if (wide.arch == RP_ARCH_GPT_OSS)
            wide.intermediate_size = wide.moe.moe_intermediate_size;
        narrow.chunk_tiles = wide.chunk_tiles = 1;
        ck_assert_uint_eq(growth(&narrow, 1024, 2048), growth(&wide, 1024, 2048));
        rp_model_config whole = narrow;
        whole.chunk_tiles = 0;
        const size_t K = (size_t)whole.moe.num_experts_per_tok, H = (size_t)whole.hidden_size,
                     I = (size_t)whole.moe.moe_intermediate_size;
        ck_assert_uint_ge(growth(&whole, 1024, 2048) - growth(&narrow, 1024, 2048),
                          1024 * K * (2 * H + 4 * I));
        /* nor with the width of the model's dense MLPs, which an expert
         * block has none of (LoRA's shared scratch is as wide as its
         * block's projections) */
        rp_model_config dense_wide = narrow;
        dense_wide.intermediate_size *= 4;
        if (dense_wide.arch != RP_ARCH_GPT_OSS) /* gpt-oss: one width, the experts' */
            ck_assert_uint_eq(growth(&narrow, 1024, 2048), growth(&dense_wide, 1024, 2048));
    }
}
END_TEST

Suite *block_suite(void)
{
    Suite *s = suite_create("model_block");
    TCase *tc = tcase_create("block");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, llama_bias_llama3_gradients);
    tcase_add_test(tc, qwen3_qknorm_gqa_gradients);
    tcase_add_test(tc, qwen3_gradients_long_sequence);
    tcase_add_test(tc, sequences_are_independent);
    tcase_add_test(tc, bitwise_deterministic_and_accumulating);
    tcase_add_test(tc, workspace_linear_in_seqlen);
    tcase_add_test(tc, dense_mlp_bf16_sizes);
    tcase_add_test(tc, mlp_chunks_keep_bits);
    tcase_add_test(tc, fused_gate_up_is_the_derivative_and_takes_no_memory);
    tcase_add_test(tc, qwen3_moe_bits_do_not_depend_on_the_chunk);
    tcase_add_test(tc, qwen3_moe_lora_bits_do_not_depend_on_the_chunk);
    tcase_add_test(tc, gpt_oss_bits_do_not_depend_on_the_chunk);
    tcase_add_test(tc, gpt_oss_block_reads_weights_as_the_cuda_table_does);
    tcase_add_test(tc, fp32_weights_on_a_bf16_table_read_their_norms_as_fp32);
    tcase_add_test(tc, yarn_scales_a_copy_of_a_kept_rope_table);
    tcase_add_test(tc, head_dims_the_cuda_attention_refuses_are_refused_up_front);
    tcase_add_test(tc, moe_memory_is_bounded_per_token_not_per_width);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(block_suite, "serial")
