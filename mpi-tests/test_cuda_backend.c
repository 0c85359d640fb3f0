/* Proves: the model (src/model) run on the CUDA back end's kernel ops table
 * (rp_device_create with RP_DEVICE_CUDA, then rp_device_kernels) computes
 * what it computes on the CPU back end's table, on the same tiny models: a Qwen3 block (grouped KV heads, q/k
 * norm, head_dim != hidden/heads) and a Llama block (q/k/v/o biases, llama3
 * RoPE scaling): embedding forward/backward (bit for bit), block forward,
 * block backward (dx, with dx aliasing dy as the engine calls it, and every
 * parameter gradient, accumulated over two calls), and the head (loss sum,
 * dx, norm and LM-head gradients, with a loss mask), all within 1e-2
 * relative (bf16 GEMM operands; a block gradient within three times its
 * bf16 input sensitivity where that is larger, see compare_grads), with
 * outputs and workspace poisoned with
 * NaN before each call; out-of-range tokens/targets are RP_ERR_RANGE naming
 * the position and leave outputs untouched; memset0 and copies in both
 * directions work; the transfer engine over the device's asynchronous copies
 * (an upload and a download stream, an event per ticket) moves every byte
 * both ways, an upload and a download at once taking less than 0.9 of the
 * time of one after the other (full duplex), and an engine destroyed with
 * chunks in flight waits for them; ordered by events (RP_ALLOW_UNPROVEN_CUDA=
 * copies), a kernel op queued right after an upload's issue, with no host
 * wait between (rp_xfer_wait_issued, rp_device_compute_after_copy), reads
 * the uploaded bytes, a download queued right after it
 * (rp_device_copies_after_compute) brings back what it wrote, and the
 * timing marks around it give its GPU time, and a mark queried before it
 * is reached answers -1 without making the next kernel op or sync fail.
 * Blocks run with sequences of one and of several
 * attention tiles, head_dim 64 and 128, and guard bands after every slice
 * of their saved area and scratch (rp_model_guard_floats) that must keep
 * their poison.
 * Without a CUDA device only the workspace-size checks run: the CUDA
 * workspace has no seqlen^2 term and the head's logits are chunked. */
#include "config.h"

#include "rp_check.h"

#ifdef RP_HAVE_CUDA_EXECUTOR
#include <time.h>

#include "core/dtype.h"
#include "core/unproven.h"
#include "cuda_test_util.h"
#include "device/backend_impl.h"
#include "engine/transfer.h"
#include "kernels/cuda/ops.h"
#include "model/layers.h"
#include "model/layout.h"

/* The layer calls as the engine makes them: the device's kernel ops table
 * handed to the model, then the device's sync. */
static rp_status dev_block_forward(rp_device *d, const rp_model_config *cfg, const void *P,
                                   rp_dtype pdt, const float *x, float *y, int64_t nseq,
                                   int64_t S, float *saved, float *ws, rp_error *err)
{
    rp_kernels k;
    RP_TRY(rp_device_kernels(d, &k, err));
    RP_TRY(rp_block_forward(&k, cfg, P, pdt, x, y, nseq, S, NULL, saved, ws, NULL, err));
    return rp_device_sync(d, err);
}

static rp_status dev_block_backward(rp_device *d, const rp_model_config *cfg, const void *P,
                                    rp_dtype pdt, const float *x, float *saved, const float *dy,
                                    float *dx, float *D, int64_t nseq, int64_t S, float *ws,
                                    rp_error *err)
{
    rp_kernels k;
    RP_TRY(rp_device_kernels(d, &k, err));
    RP_TRY(rp_block_backward(&k, cfg, P, pdt, x, saved, dy, dx, D, nseq, S, NULL, ws, NULL, err));
    return rp_device_sync(d, err);
}

static rp_status dev_head(rp_device *d, const rp_model_config *cfg, const void *nw,
                          const void *lm, rp_dtype pdt, const float *x, const int32_t *tg,
                          const uint8_t *mask, int64_t T, float scale, float *dx, float *dn,
                          float *dl, float *ws, double *loss, rp_error *err)
{
    rp_kernels k;
    RP_TRY(rp_device_kernels(d, &k, err));
    RP_TRY(rp_head_forward_backward(&k, cfg, nw, lm, pdt, x, tg, mask, T, scale, dx, dn, dl, 0,
                                    ws, loss, err));
    return rp_device_sync(d, err);
}

static rp_status dev_embed_forward(rp_device *d, const rp_model_config *cfg, const void *W,
                                   rp_dtype pdt, const int32_t *tok, int64_t T, float *out,
                                   rp_error *err)
{
    rp_kernels k;
    RP_TRY(rp_device_kernels(d, &k, err));
    RP_TRY(rp_embed_forward(&k, cfg, W, pdt, tok, T, out, err));
    return rp_device_sync(d, err);
}

static rp_status dev_embed_backward(rp_device *d, const rp_model_config *cfg, const int32_t *tok,
                                    int64_t T, const float *dout, float *dW, rp_error *err)
{
    rp_kernels k;
    RP_TRY(rp_device_kernels(d, &k, err));
    RP_TRY(rp_embed_backward(&k, cfg, tok, T, dout, dW, err));
    return rp_device_sync(d, err);
}

static size_t kind_workspace_floats(rp_device_kind kind, rp_dtype pdt, const rp_model_config *cfg,
                                    int64_t nseq, int64_t S)
{
    return rp_model_workspace_floats(rp_device_kernel_ops(kind), pdt, cfg, nseq, S);
}

static size_t kind_saved_floats(rp_device_kind kind, rp_dtype pdt, const rp_model_config *cfg,
                                int64_t nseq, int64_t S)
{
    return rp_block_saved_floats(rp_device_kernel_ops(kind), pdt, cfg, nseq, S);
}

/* A device copy of fp32 host values in pdt (bf16: rounded to nearest even,
 * as the host store's compute copy holds them). */
static void *gup(rp_device *d, const void *h, size_t bytes);
static void *gup_as(rp_device *d, const float *h, size_t n, rp_dtype pdt)
{
    if (pdt == RP_F32)
        return gup(d, h, n * 4);
    uint16_t *b = malloc(n * 2);
    rp_f32_to_bf16_array(h, b, n);
    void *g = gup(d, b, n * 2);
    free(b);
    return g;
}

static rp_model_config qwen_cfg(void)
{
    rp_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = RP_ARCH_QWEN3;
    c.hidden_size = 128;
    c.intermediate_size = 192;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 64; /* heads * head_dim = 256 != hidden */
    c.vocab_size = 97;
    c.max_position_embeddings = 256;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1000000.0;
    c.initializer_range = 0.02;
    c.torch_dtype = RP_F32;
    return c;
}

static rp_model_config llama_cfg(void)
{
    rp_model_config c = qwen_cfg();
    c.arch = RP_ARCH_LLAMA;
    c.hidden_size = 256;
    c.intermediate_size = 320;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0;
    c.rope_scaling.type = RP_ROPE_LLAMA3;
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 64;
    c.attention_bias = 1;
    return c;
}

/* Device memory of one block layer's calls: the scratch workspace and
 * the area its forward saves for the backward (sizes need no device). */
static size_t cuda_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    return kind_workspace_floats(RP_DEVICE_CUDA, RP_BF16, cfg, nseq, seqlen) +
           kind_saved_floats(RP_DEVICE_CUDA, RP_BF16, cfg, nseq, seqlen);
}

START_TEST(workspace_linear_in_seqlen)
{
    rp_model_config cfgs[2] = {qwen_cfg(), llama_cfg()};
    for (int k = 0; k < 2; k++) {
        const rp_model_config *cfg = &cfgs[k];
        double w1 = (double)cuda_floats(cfg, 1, 1 << 14);
        double w2 = (double)cuda_floats(cfg, 1, 1 << 15);
        double w4 = (double)cuda_floats(cfg, 1, 1 << 16);
        /* linear: the increments agree (a seqlen^2 term would quadruple) */
        ck_assert_msg(fabs((w4 - w2) - 2 * (w2 - w1)) <= 1e-3 * (w4 - w2), "%g %g %g", w1, w2, w4);
        /* tokens split over sequences need no more than one long sequence */
        ck_assert(cuda_floats(cfg, 16, 1 << 12) <=
                  (size_t)w4 + 64 * 1024);
    }
    /* a large vocabulary: the head's logits are chunked (well under T x V) */
    rp_model_config big = qwen_cfg();
    big.vocab_size = 151936;
    big.hidden_size = 2048;
    big.intermediate_size = 6144;
    big.num_attention_heads = 16;
    big.num_key_value_heads = 8;
    big.head_dim = 128;
    size_t w = cuda_floats(&big, 4, 4096);
    printf("Qwen3-1.7B shape, 4 x 4096 tokens: CUDA workspace %.2f GiB\n",
           (double)w * 4 / (1 << 30));
    ck_assert(w < (size_t)16384 * 151936); /* full fp32 logits alone would be T x V */
}
END_TEST

typedef struct pair {
    rp_device *cpu, *gpu;
} pair;

static pair devices(void)
{
    pair p;
    rp_error err = {0};
    rp_device_params cp = {.kind = RP_DEVICE_CPU, .ordinal = 0, .threads = 1},
                     gp = {.kind = RP_DEVICE_CUDA, .ordinal = 0, .threads = 1};
    ck_assert_int_eq(rp_device_create(&cp, &p.cpu, &err), RP_OK);
    ck_assert_msg(rp_device_create(&gp, &p.gpu, &err) == RP_OK, "%s", err.msg);
    return p;
}

static void release(pair *p)
{
    rp_device_destroy(&p->cpu);
    rp_device_destroy(&p->gpu);
    ck_assert_ptr_null(p->gpu);
}

/* Device buffer holding a host array (through rp_device_copy). */
static void *gup(rp_device *d, const void *h, size_t bytes)
{
    void *p = NULL;
    rp_error err = {0};
    ck_assert_int_eq(rp_device_alloc(d, bytes, &p, &err), RP_OK);
    if (h)
        ck_assert_int_eq(rp_device_copy(d, p, h, bytes, &err), RP_OK);
    else
        dev_poison(p, bytes);
    return p;
}

static void gdown(rp_device *d, void *h, const void *p, size_t bytes)
{
    rp_error err = {0};
    ck_assert_int_eq(rp_device_copy(d, h, p, bytes, &err), RP_OK);
}

/* Block parameters with signal on every path: matrices N(0, 1/sqrt(in)),
 * norm weights 1 + N(0, 0.2), biases N(0, 0.2), padding 0. */
static float *block_params(const rp_model_config *cfg, size_t *numel)
{
    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(cfg, &L, &n, NULL), RP_OK);
    const rp_layer_desc *b = &L[1];
    float *p = calloc(b->numel, sizeof(float));
    for (int i = 0; i < b->nparams; i++) {
        const rp_param_desc *d = &b->params[i];
        float sd = d->ndim == 2 ? 1.0f / sqrtf((float)d->shape[1]) : 0.2f;
        float mean = (d->ndim == 1 && strstr(d->name, "norm")) ? 1.0f : 0.0f;
        rp_rng_fill_normal(p + d->offset, d->numel, 99, g_seed++, 0, mean, sd);
    }
    *numel = b->numel;
    free(L);
    return p;
}

/* Per-tensor comparison of two gradient blocks. A gradient's tolerance is
 * BF16_TOL, or three times its sensitivity when that is larger: how far the
 * CPU's fp32 result moves when only the block's inputs (weights, x, dy) are
 * rounded to bf16 (ref_rounded against ref). The GPU rounds those inputs and
 * its intermediates too, so a tensor that rounding the inputs alone moves by
 * delta cannot be expected closer than a small multiple of delta (k_proj's
 * bias gradient is a column sum that cancels: softmax ignores a shift shared
 * by all keys, and only RoPE's rotation of the bias survives). */
static void compare_grads(const rp_model_config *cfg, const float *got, const float *ref,
                          const float *ref_rounded, const char *when)
{
    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(cfg, &L, &n, NULL), RP_OK);
    const rp_layer_desc *b = &L[1];
    char what[160];
    for (int i = 0; i < b->nparams; i++) {
        const rp_param_desc *d = &b->params[i];
        double delta = rel_err(ref_rounded + d->offset, ref + d->offset, d->numel, d->name);
        double tol = 3 * delta > BF16_TOL ? 3 * delta : BF16_TOL;
        snprintf(what, sizeof what, "%s: gradient of %s (bf16 input sensitivity %.3g)", when,
                 d->name, delta);
        CHECK_REL(got + d->offset, ref + d->offset, d->numel, tol, what);
    }
    free(L);
}

/* A copy of n floats rounded to bf16. */
static float *rounded_copy(const float *a, size_t n)
{
    float *r = malloc(n * sizeof(float) + 4);
    ck_assert_ptr_nonnull(r);
    memcpy(r, a, n * sizeof(float));
    rp_f32_round_bf16(r, n);
    return r;
}

/* Every guard band of the block's saved area and scratch still holds the
 * poison (0xff bytes): no kernel wrote past its slice. */
static void check_guards(const rp_model_config *cfg, rp_dtype pdt, int64_t nseq, int64_t S,
                         const float *gsaved,
                         const float *gws, const char *when)
{
    rp_model_guards gl;
    rp_block_guards(&rp_kernel_ops_cuda, pdt, cfg, 0, nseq, S, &gl);
    ck_assert_int_gt(gl.n, 20);
    uint32_t band[64];
    ck_assert_uint_eq(rp_model_guard_floats, 64);
    for (int i = 0; i < gl.n; i++) {
        const float *base = gl.area[i] ? gws : gsaved;
        dev_download(band, base + gl.at[i], sizeof band);
        for (int k = 0; k < 64; k++)
            ck_assert_msg(band[k] == 0xffffffffu, "%s: guard band %d (%s area, float %zu) "
                          "overwritten at +%d", when, i, gl.area[i] ? "scratch" : "saved",
                          gl.at[i], k);
    }
}

/* pdt: the dtype the CUDA side's parameters come in (bf16: as the engine
 * uploads the host store's compute copy; fp32: converted by the model). */
static void block_case(const rp_model_config *cfg, int64_t nseq, int64_t S, int alias,
                       rp_dtype pdt)
{
    rp_model_guard_floats = 64; /* before anything is sized */
    pair dv = devices();
    rp_error err = {0};
    const int64_t T = nseq * S, H = cfg->hidden_size;
    const size_t nx = (size_t)(T * H);
    size_t np;
    float *P = block_params(cfg, &np);
    float *x = rand_f32(nx, 0, 1), *dy1 = rand_f32(nx, 0, 1), *dy2 = rand_f32(nx, 0, 1);
    size_t wc = kind_workspace_floats(RP_DEVICE_CPU, RP_F32, cfg, nseq, S);
    size_t wg = kind_workspace_floats(RP_DEVICE_CUDA, pdt, cfg, nseq, S);
    size_t sc = kind_saved_floats(RP_DEVICE_CPU, RP_F32, cfg, nseq, S);
    size_t sg = kind_saved_floats(RP_DEVICE_CUDA, pdt, cfg, nseq, S);
    float *ws_c = malloc(wc * 4), *y_c = malloc(nx * 4), *y_g = malloc(nx * 4);
    float *saved_c = malloc(sc * 4), *gsaved = gup(dv.gpu, NULL, sg * 4);
    float *D_c = calloc(np, 4), *D_g = malloc(np * 4), *dx_c = malloc(nx * 4), *dx_g = malloc(nx * 4);
    /* the CPU's result on bf16-rounded inputs: each gradient's sensitivity */
    float *P_r = rounded_copy(P, np), *x_r = rounded_copy(x, nx), *D_r = calloc(np, 4);

    void *gP = gup_as(dv.gpu, P, np, pdt);
    float *gx = gup(dv.gpu, x, nx * 4);
    float *gy = gup(dv.gpu, NULL, nx * 4), *gws = gup(dv.gpu, NULL, wg * 4);
    float *gD = gup(dv.gpu, NULL, np * 4), *gdy = gup(dv.gpu, dy1, nx * 4);
    float *gdx = alias ? gdy : gup(dv.gpu, NULL, nx * 4);
    ck_assert_int_eq(rp_device_memset0(dv.gpu, gD, np * 4, &err), RP_OK);

    /* forward: compare the block's contribution y - x, not just y */
    dev_block_forward(dv.cpu, cfg, P, RP_F32, x, y_c, nseq, S, saved_c, ws_c, &err);
    ck_assert_msg(dev_block_forward(dv.gpu, cfg, gP, pdt, gx, gy, nseq, S, gsaved, gws, &err) ==
                      RP_OK,
                  "%s", err.msg);
    gdown(dv.gpu, y_g, gy, nx * 4);
    check_guards(cfg, pdt, nseq, S, gsaved, gws, "forward");
    CHECK_REL(y_g, y_c, nx, BF16_TOL, "block y");
    for (size_t i = 0; i < nx; i++)
        y_g[i] -= x[i], y_c[i] -= x[i];
    CHECK_REL(y_g, y_c, nx, BF16_TOL, "block y - x");

    /* backward twice, each from a forward that keeps only what it needs (as
     * a backward stage runs it): dx each time, gradients accumulated */
    const float *dys[2] = {dy1, dy2};
    for (int call = 0; call < 2; call++) {
        const char *when = call ? "second backward" : "first backward";
        memcpy(dx_c, dys[call], nx * 4);
        dev_block_forward(dv.cpu, cfg, P, RP_F32, x, NULL, nseq, S, saved_c, ws_c, &err);
        dev_block_backward(dv.cpu, cfg, P, RP_F32, x, saved_c, dx_c, dx_c, D_c, nseq, S, ws_c,
                           &err);
        float *dy_r = rounded_copy(dys[call], nx);
        dev_block_forward(dv.cpu, cfg, P_r, RP_F32, x_r, NULL, nseq, S, saved_c, ws_c, &err);
        dev_block_backward(dv.cpu, cfg, P_r, RP_F32, x_r, saved_c, dy_r, dy_r, D_r, nseq, S, ws_c,
                                 &err);
        free(dy_r);
        ck_assert_int_eq(rp_device_copy(dv.gpu, gdy, dys[call], nx * 4, &err), RP_OK);
        if (!alias)
            dev_poison(gdx, nx * 4);
        dev_poison(gws, wg * 4);
        dev_poison(gsaved, sg * 4);
        ck_assert_msg(dev_block_forward(dv.gpu, cfg, gP, pdt, gx, NULL, nseq, S, gsaved, gws,
                                              &err) == RP_OK,
                      "%s", err.msg);
        dev_poison(gws, wg * 4); /* nothing of the forward's scratch may be read back */
        ck_assert_msg(dev_block_backward(dv.gpu, cfg, gP, pdt, gx, gsaved, gdy, gdx, gD, nseq, S,
                                               gws, &err) == RP_OK,
                      "%s", err.msg);
        gdown(dv.gpu, dx_g, gdx, nx * 4);
        check_guards(cfg, pdt, nseq, S, gsaved, gws, when);
        CHECK_REL(dx_g, dx_c, nx, BF16_TOL, when);
        gdown(dv.gpu, D_g, gD, np * 4);
        compare_grads(cfg, D_g, D_c, D_r, when);
    }
    rp_device_free(dv.gpu, gP), rp_device_free(dv.gpu, gx), rp_device_free(dv.gpu, gy);
    rp_device_free(dv.gpu, gws), rp_device_free(dv.gpu, gD), rp_device_free(dv.gpu, gdy);
    rp_device_free(dv.gpu, gsaved);
    free(saved_c);
    if (!alias)
        rp_device_free(dv.gpu, gdx);
    release(&dv);
    free(P), free(x), free(dy1), free(dy2), free(ws_c), free(y_c), free(y_g), free(D_c);
    free(D_g), free(dx_c), free(dx_g), free(P_r), free(x_r), free(D_r);
}

START_TEST(qwen3_block_matches_cpu)
{
    rp_model_config c = qwen_cfg();
    block_case(&c, 2, 24, 0, RP_F32);
    block_case(&c, 2, 24, 0, RP_BF16);
}
END_TEST

START_TEST(llama_block_matches_cpu)
{
    rp_model_config c = llama_cfg();
    block_case(&c, 3, 17, 1, RP_F32); /* dx aliasing dy, as the engine calls it */
    block_case(&c, 3, 17, 1, RP_BF16);
}
END_TEST

/* Sequences over several attention tiles, and head_dim 128 (the common
 * one; the cases above use 64) through the whole block. */
START_TEST(qwen3_block_long_hd128_matches_cpu)
{
    rp_model_config c = qwen_cfg();
    c.head_dim = 128;
    c.max_position_embeddings = 512;
    block_case(&c, 2, 300, 0, RP_BF16);
}
END_TEST

START_TEST(llama_block_long_matches_cpu)
{
    rp_model_config c = llama_cfg();
    c.max_position_embeddings = 512;
    block_case(&c, 1, 333, 1, RP_BF16);
}
END_TEST

static int32_t *rand_ids(int64_t T, int64_t V)
{
    int32_t *t = malloc((size_t)T * 4);
    uint64_t s = 777 + g_seed++;
    for (int64_t i = 0; i < T; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        t[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
    return t;
}

START_TEST(head_matches_cpu)
{
    rp_model_config cfgs[2] = {qwen_cfg(), llama_cfg()};
    for (int k = 0; k < 4; k++) { /* each model with fp32 and with bf16 parameters */
        const rp_model_config *cfg = &cfgs[k % 2];
        const rp_dtype pdt = k < 2 ? RP_F32 : RP_BF16;
        pair dv = devices();
        rp_error err = {0};
        const int64_t T = 53, H = cfg->hidden_size, V = cfg->vocab_size;
        const size_t nx = (size_t)(T * H), nl = (size_t)(V * H);
        float *x = rand_f32(nx, 0, 1), *nw = rand_f32((size_t)H, 1, 0.2f);
        float *lm = rand_f32(nl, 0, 1.0f / sqrtf((float)H));
        int32_t *tg = rand_ids(T, V);
        uint8_t *mask = malloc((size_t)T);
        int64_t count = 0;
        for (int64_t t = 0; t < T; t++)
            count += (mask[t] = (uint8_t)(t % 5 != 2));
        const float scale = 1.0f / (float)count;
        size_t wc = kind_workspace_floats(RP_DEVICE_CPU, RP_F32, cfg, 1, T);
        size_t wg = kind_workspace_floats(RP_DEVICE_CUDA, pdt, cfg, 1, T);
        float *ws_c = malloc(wc * 4), *dx_c = malloc(nx * 4), *dx_g = malloc(nx * 4);
        float *dn_c = calloc((size_t)H, 4), *dn_g = malloc((size_t)H * 4);
        float *dl_c = calloc(nl, 4), *dl_g = malloc(nl * 4);
        double loss_c = 0, loss_g = 0;
        ck_assert_int_eq(dev_head(dv.cpu, cfg, nw, lm, RP_F32, x, tg, mask, T,
                                                         scale, dx_c, dn_c, dl_c, ws_c, &loss_c,
                                                         &err),
                         RP_OK);
        float *gx = gup(dv.gpu, x, nx * 4), *gdx = gup(dv.gpu, NULL, nx * 4);
        void *gnw = gup_as(dv.gpu, nw, (size_t)H, pdt), *glm = gup_as(dv.gpu, lm, nl, pdt);
        float *gdn = gup(dv.gpu, NULL, (size_t)H * 4), *gdl = gup(dv.gpu, NULL, nl * 4);
        float *gws = gup(dv.gpu, NULL, wg * 4);
        int32_t *gtg = gup(dv.gpu, tg, (size_t)T * 4);
        uint8_t *gm = gup(dv.gpu, mask, (size_t)T);
        ck_assert_int_eq(rp_device_memset0(dv.gpu, gdn, (size_t)H * 4, &err), RP_OK);
        ck_assert_int_eq(rp_device_memset0(dv.gpu, gdl, nl * 4, &err), RP_OK);
        ck_assert_msg(dev_head(dv.gpu, cfg, gnw, glm, pdt, gx, gtg, gm, T, scale,
                                                      gdx, gdn, gdl, gws, &loss_g,
                                                      &err) == RP_OK,
                      "%s", err.msg);
        ck_assert_msg(fabs(loss_g - loss_c) <= 1e-2 * fabs(loss_c), "loss %.9g vs %.9g", loss_g,
                      loss_c);
        gdown(dv.gpu, dx_g, gdx, nx * 4);
        gdown(dv.gpu, dn_g, gdn, (size_t)H * 4);
        gdown(dv.gpu, dl_g, gdl, nl * 4);
        CHECK_REL(dx_g, dx_c, nx, BF16_TOL, "head dx");
        CHECK_REL(dn_g, dn_c, (size_t)H, BF16_TOL, "head dnorm_w");
        CHECK_REL(dl_g, dl_c, nl, BF16_TOL, "head dlm_w");
        for (int64_t t = 0; t < T; t++) /* rows that do not count get no gradient */
            if (!mask[t])
                for (int64_t j = 0; j < H; j++)
                    ck_assert(dx_g[t * H + j] == 0.0f);

        /* a bad target where the mask is 0 is ignored; where it is 1, an
         * error naming the position, before anything is written */
        tg[2] = (int32_t)V; /* mask[2] == 0 */
        rp_device_copy(dv.gpu, gtg, tg, (size_t)T * 4, &err);
        ck_assert_msg(dev_head(dv.gpu, cfg, gnw, glm, pdt, gx, gtg, gm, T, scale,
                                                      gdx, gdn, gdl, gws, &loss_g,
                                                      &err) == RP_OK,
                      "%s", err.msg);
        tg[40] = -3; /* mask[40] == 1 */
        rp_device_copy(dv.gpu, gtg, tg, (size_t)T * 4, &err);
        dev_poison(gdx, nx * 4);
        ck_assert_int_eq(dev_head(dv.gpu, cfg, gnw, glm, pdt, gx, gtg, gm, T,
                                                         scale, gdx, gdn, gdl, gws, &loss_g, &err),
                         RP_ERR_RANGE);
        ck_assert_msg(strstr(err.msg, "position 40") && strstr(err.msg, "-3"), "%s", err.msg);
        gdown(dv.gpu, dx_g, gdx, nx * 4);
        for (size_t i = 0; i < nx; i++)
            ck_assert(isnan(dx_g[i]));

        void *bufs[] = {gx, gnw, glm, gdx, gdn, gdl, gws, gtg, gm};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
            rp_device_free(dv.gpu, bufs[i]);
        release(&dv);
        free(x), free(nw), free(lm), free(tg), free(mask), free(ws_c), free(dx_c), free(dx_g);
        free(dn_c), free(dn_g), free(dl_c), free(dl_g);
    }
}
END_TEST

START_TEST(embedding_matches_cpu)
{
    rp_model_config cfg = qwen_cfg();
    pair dv = devices();
    rp_error err = {0};
    const int64_t T = 300, H = cfg.hidden_size, V = cfg.vocab_size;
    const size_t nx = (size_t)(T * H), nw = (size_t)(V * H);
    float *W = rand_f32(nw, 0, 1), *dout = rand_f32(nx, 0, 1), *dW = rand_f32(nw, 0, 1);
    int32_t *tok = rand_ids(T, V);
    float *out_c = malloc(nx * 4), *out_g = malloc(nx * 4), *dW_g = malloc(nw * 4);
    float *gW = gup(dv.gpu, W, nw * 4), *gout = gup(dv.gpu, NULL, nx * 4);
    float *gdout = gup(dv.gpu, dout, nx * 4), *gdW = gup(dv.gpu, dW, nw * 4);
    int32_t *gtok = gup(dv.gpu, tok, (size_t)T * 4);
    ck_assert_int_eq(dev_embed_forward(dv.cpu, &cfg, W, RP_F32, tok, T, out_c, &err), RP_OK);
    ck_assert_msg(dev_embed_forward(dv.gpu, &cfg, gW, RP_F32, gtok, T, gout, &err) == RP_OK, "%s",
                  err.msg);
    gdown(dv.gpu, out_g, gout, nx * 4);
    ck_assert(memcmp(out_g, out_c, nx * 4) == 0);
    /* from a bf16 table (the host store's compute copy): the rounded rows,
     * widened exactly, on both back ends */
    {
        uint16_t *Wb = malloc(nw * 2);
        rp_f32_to_bf16_array(W, Wb, nw);
        void *gWb = gup(dv.gpu, Wb, nw * 2);
        float *out_b = malloc(nx * 4);
        ck_assert_int_eq(dev_embed_forward(dv.cpu, &cfg, Wb, RP_BF16, tok, T, out_b, &err), RP_OK);
        for (size_t i = 0; i < nx; i++)
            ck_assert(out_b[i] == rp_bf16_to_f32(rp_f32_to_bf16(out_c[i])));
        ck_assert_msg(dev_embed_forward(dv.gpu, &cfg, gWb, RP_BF16, gtok, T, gout, &err) == RP_OK,
                      "%s", err.msg);
        gdown(dv.gpu, out_g, gout, nx * 4);
        ck_assert(memcmp(out_g, out_b, nx * 4) == 0);
        rp_device_free(dv.gpu, gWb);
        free(Wb), free(out_b);
    }
    ck_assert_int_eq(dev_embed_backward(dv.cpu, &cfg, tok, T, dout, dW, &err), RP_OK);
    ck_assert_msg(dev_embed_backward(dv.gpu, &cfg, gtok, T, gdout, gdW, &err) == RP_OK,
                  "%s", err.msg);
    gdown(dv.gpu, dW_g, gdW, nw * 4);
    ck_assert(memcmp(dW_g, dW, nw * 4) == 0); /* same summation order: same bits */

    tok[123] = (int32_t)V;
    rp_device_copy(dv.gpu, gtok, tok, (size_t)T * 4, &err);
    dev_poison(gout, nx * 4);
    ck_assert_int_eq(dev_embed_forward(dv.gpu, &cfg, gW, RP_F32, gtok, T, gout, &err),
                     RP_ERR_RANGE);
    ck_assert_msg(strstr(err.msg, "position 123"), "%s", err.msg);
    gdown(dv.gpu, out_g, gout, nx * 4);
    for (size_t i = 0; i < nx; i++)
        ck_assert(isnan(out_g[i]));
    ck_assert_int_eq(dev_embed_backward(dv.gpu, &cfg, gtok, T, gdout, gdW, &err),
                     RP_ERR_RANGE);
    gdown(dv.gpu, out_g, gdW, nw * 4);
    ck_assert(memcmp(out_g, dW, nw * 4) == 0); /* untouched */

    rp_device_free(dv.gpu, gW), rp_device_free(dv.gpu, gout), rp_device_free(dv.gpu, gdout);
    rp_device_free(dv.gpu, gdW), rp_device_free(dv.gpu, gtok);
    release(&dv);
    free(W), free(dout), free(dW), free(tok), free(out_c), free(out_g), free(dW_g);
}
END_TEST

START_TEST(bad_ordinal_and_huge_alloc_are_errors)
{
    rp_device *d = NULL;
    rp_error err = {0};
    rp_device_params gp = {.kind = RP_DEVICE_CUDA, .ordinal = 1000, .threads = 1};
    ck_assert_int_eq(rp_device_create(&gp, &d, &err), RP_ERR_NO_DEVICE);
    ck_assert_ptr_null(d);
    gp.ordinal = 0;
    ck_assert_int_eq(rp_device_create(&gp, &d, &err), RP_OK);
    void *p = (void *)1;
    ck_assert_int_eq(rp_device_alloc(d, (size_t)1 << 52, &p, &err), RP_ERR_DEVICE_MEMORY);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.msg, "bytes free"), "%s", err.msg);
    rp_device_destroy(&d);
}
END_TEST

/* The transfer engine's asynchronous ops on the device, as the executor
 * passes them (engine/executor.c). */
static rp_status dev_issue(void *ctx, int ticket, void *dst, const void *src, size_t bytes,
                           rp_xfer_class cls, rp_error *err)
{
    return rp_device_copy_issue(ctx, ticket, dst, src, bytes,
                                (rp_copy_direction)rp_xfer_class_direction(cls), err);
}

static rp_status dev_complete(void *ctx, int ticket, rp_error *err)
{
    return rp_device_copy_complete(ctx, ticket, err);
}

/* Seconds to submit the requests and see them all done. */
static double timed(rp_xfer *x, rp_xfer_req **r, int n)
{
    struct timespec a, b;
    rp_error err = {0};
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(rp_xfer_submit(x, r[i], &err), RP_OK);
    for (int i = 0; i < n; i++)
        ck_assert_msg(rp_xfer_wait(x, r[i], &err) == RP_OK, "%s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
}

START_TEST(transfer_engine_on_the_upload_and_download_streams)
{
    const size_t MIB = (size_t)1 << 20, n = 128 * MIB, chunk = 4 * MIB;
    rp_device *d = NULL;
    rp_error err = {0};
    rp_device_params gp = {.kind = RP_DEVICE_CUDA, .ordinal = 0, .threads = 1};
    ck_assert_msg(rp_device_create(&gp, &d, &err) == RP_OK, "%s", err.msg);
    ck_assert(rp_device_copies_asynchronous(d));
    char byte = 0; /* a ticket past the device's events is refused */
    ck_assert_int_eq(rp_device_copy_issue(d, RP_DEVICE_COPY_TICKETS, &byte, &byte, 1, RP_COPY_UP,
                                          &err), RP_ERR_INVALID_ARG);
    uint64_t *up_h = aligned_alloc(4096, n), *down_h = aligned_alloc(4096, n),
             *want = aligned_alloc(4096, n), *back = aligned_alloc(4096, n);
    ck_assert(up_h && down_h && want && back);
    for (size_t i = 0; i < n / 8; i++) {
        up_h[i] = i * 0x9E3779B97F4A7C15ull + 1;
        want[i] = ~i * 0xC2B2AE3D27D4EB4Full;
    }
    /* pinned, as the host store is */
    ck_assert_int_eq(rp_device_host_register(d, up_h, n, &err), RP_OK);
    ck_assert_int_eq(rp_device_host_register(d, down_h, n, &err), RP_OK);
    void *dA = NULL, *dB = NULL;
    ck_assert_int_eq(rp_device_alloc(d, n, &dA, &err), RP_OK);
    ck_assert_int_eq(rp_device_alloc(d, n, &dB, &err), RP_OK);
    ck_assert_int_eq(rp_device_copy(d, dB, want, n, &err), RP_OK);
    rp_xfer_params p = {.chunk_bytes = chunk,
                        .ops = {.ctx = d, .issue = dev_issue, .complete = dev_complete}};
    rp_xfer *x;
    ck_assert_msg(rp_xfer_create(&p, &x, &err) == RP_OK, "%s", err.msg);
    rp_xfer_req up = {.dst = dA, .src = up_h, .bytes = n, .cls = RP_XFER_WEIGHTS, .tag = "up"};
    rp_xfer_req down = {.dst = down_h, .src = dB, .bytes = n, .cls = RP_XFER_GRAD, .tag = "down"};
    rp_xfer_req *ru[1] = {&up}, *rd[1] = {&down}, *both[2] = {&up, &down};
    timed(x, both, 2); /* warm-up */
    double t_up = 1e9, t_down = 1e9, t_both = 1e9;
    for (int rep = 0; rep < 3; rep++) { /* the best of three */
        double a = timed(x, ru, 1), b = timed(x, rd, 1);
        memset(down_h, 0, n); /* the run at once proves its own bytes */
        double c = timed(x, both, 2);
        t_up = a < t_up ? a : t_up;
        t_down = b < t_down ? b : t_down;
        t_both = c < t_both ? c : t_both;
    }
    ck_assert_int_eq(memcmp(down_h, want, n), 0);
    ck_assert_int_eq(rp_device_copy(d, back, dA, n, &err), RP_OK);
    ck_assert_int_eq(memcmp(back, up_h, n), 0);
    printf("transfer engine, %zu MiB each way in %zu MiB chunks: upload %.2f GB/s, download %.2f "
           "GB/s one at a time; both at once %.2f GB/s, in %.2f of the time of one after the "
           "other\n", n / MIB, chunk / MIB, n / t_up / 1e9, n / t_down / 1e9, 2.0 * n / t_both / 1e9,
           t_both / (t_up + t_down));
    ck_assert_msg(t_both < 0.9 * (t_up + t_down), "both at once %.3f ms, one after the other "
                  "%.3f + %.3f ms: the directions did not overlap", t_both * 1e3, t_up * 1e3,
                  t_down * 1e3);
    rp_xfer_stats st;
    rp_xfer_get_stats(x, &st);
    ck_assert_uint_eq(st.chunks[RP_XFER_WEIGHTS], 7 * n / chunk);
    ck_assert_uint_eq(st.bytes[RP_XFER_GRAD], 7 * n);
    /* destroyed with chunks in flight: it waits for them, the rest is cancelled */
    ck_assert_int_eq(rp_xfer_submit(x, &up, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_submit(x, &down, &err), RP_OK);
    rp_xfer_destroy(&x);
    ck_assert(atomic_load(&up.state) == RP_XFER_DONE || atomic_load(&up.state) == RP_XFER_CANCELLED);
    ck_assert(atomic_load(&down.state) == RP_XFER_DONE ||
              atomic_load(&down.state) == RP_XFER_CANCELLED);
    rp_device_free(d, dA);
    rp_device_free(d, dB);
    rp_device_host_unregister(d, up_h);
    rp_device_host_unregister(d, down_h);
    rp_device_destroy(&d);
    free(up_h), free(down_h), free(want), free(back);
}
END_TEST

START_TEST(compute_and_copies_are_ordered_by_events)
{
    const size_t MIB = (size_t)1 << 20, n = 256 * MIB;
    rp_device *d = NULL;
    rp_error err = {0};
    rp_device_params gp = {.kind = RP_DEVICE_CUDA, .ordinal = 0, .threads = 1,
                           .unproven = 1u << RP_UNPROVEN_COPIES};
    ck_assert_msg(rp_device_create(&gp, &d, &err) == RP_OK, "%s", err.msg);
    ck_assert(rp_device_ordered_by_events(d));
    uint64_t *src = aligned_alloc(4096, n), *back = aligned_alloc(4096, n);
    ck_assert(src && back);
    for (size_t i = 0; i < n / 8; i++)
        src[i] = i * 0x9E3779B97F4A7C15ull + 7;
    memset(back, 0, n);
    ck_assert_int_eq(rp_device_host_register(d, src, n, &err), RP_OK);
    ck_assert_int_eq(rp_device_host_register(d, back, n, &err), RP_OK);
    void *dA = NULL, *dB = NULL;
    ck_assert_int_eq(rp_device_alloc(d, n, &dA, &err), RP_OK);
    ck_assert_int_eq(rp_device_alloc(d, n, &dB, &err), RP_OK);
    ck_assert_int_eq(rp_device_memset0(d, dA, n, &err), RP_OK); /* what a kernel too early reads */
    ck_assert_int_eq(rp_device_memset0(d, dB, n, &err), RP_OK);
    /* the memsets are on the compute stream, not waited for: the upload
     * into dA comes after them */
    ck_assert_int_eq(rp_device_copies_after_compute(d, RP_COPY_UP, &err), RP_OK);
    rp_xfer_params p = {.chunk_bytes = 64 * MIB,
                        .ops = {.ctx = d, .issue = dev_issue, .complete = dev_complete}};
    rp_xfer *x;
    ck_assert_msg(rp_xfer_create(&p, &x, &err) == RP_OK, "%s", err.msg);
    rp_xfer_req up = {.dst = dA, .src = src, .bytes = n, .cls = RP_XFER_WEIGHTS, .tag = "up"};
    rp_xfer_req down = {.dst = back, .src = dB, .bytes = n, .cls = RP_XFER_SAVE, .tag = "down"};
    ck_assert_int_eq(rp_xfer_submit(x, &up, &err), RP_OK);
    int ticket = -1;
    ck_assert_msg(rp_xfer_wait_issued(x, &up, &ticket, &err) == RP_OK, "%s", err.msg);
    int arrived = atomic_load(&up.state) == RP_XFER_DONE;
    if (ticket >= 0) /* else it has arrived: nothing to wait for */
        ck_assert_msg(rp_device_compute_after_copy(d, ticket, &err) == RP_OK, "%s", err.msg);
    rp_kernels k;
    ck_assert_int_eq(rp_device_kernels(d, &k, &err), RP_OK);
    ck_assert_int_eq(rp_device_mark(d, 0, &err), RP_OK);
    ck_assert_int_eq(k.ops->copy(k.state, dB, dA, n, &err), RP_OK); /* reads the upload */
    ck_assert_int_eq(rp_device_mark(d, 1, &err), RP_OK);
    ck_assert_int_eq(rp_device_copies_after_compute(d, RP_COPY_DOWN, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_submit(x, &down, &err), RP_OK);
    ck_assert_msg(rp_xfer_wait(x, &down, &err) == RP_OK, "%s", err.msg);
    ck_assert_msg(rp_xfer_wait(x, &up, &err) == RP_OK, "%s", err.msg);
    size_t bad = 0;
    for (size_t i = 0; i < n / 8; i++)
        bad += back[i] != src[i];
    double ms = -1;
    ck_assert_int_eq(rp_device_mark_elapsed(d, 0, 1, 1, &ms, &err), RP_OK);
    printf("ordered by events: %zu MiB uploaded, copied on the compute stream in %.3f ms (GPU "
           "time), downloaded; the upload %s when the kernel was queued; %zu of %zu words "
           "differ\n", n / MIB, ms, arrived ? "had arrived" : "was under way", bad, n / 8);
    ck_assert_msg(bad == 0, "%zu words of the download are not the upload's", bad);
    ck_assert_msg(ms > 0 && ms < 1000, "%g ms between the marks", ms);
    ck_assert_int_eq(rp_device_mark(d, RP_DEVICE_MARKS, &err), RP_ERR_INVALID_ARG);
    rp_xfer_destroy(&x);
    rp_device_free(d, dA);
    rp_device_free(d, dB);
    rp_device_host_unregister(d, src);
    rp_device_host_unregister(d, back);
    rp_device_destroy(&d);
    free(src), free(back);
}
END_TEST

/* A timing mark queried before the GPU reaches it (rp_device_mark_elapsed
 * without wait, as rp_layer_clock_settle asks after every layer) answers -1;
 * the runtime's "not ready" it was told must not then be the failure of the
 * next kernel op (whose launch check reads the thread's last error) nor of
 * rp_device_sync. The marks span several conversions of 256 MiB, a fraction
 * of a millisecond of GPU time each, so the query, microseconds after their
 * launch, finds them unfinished. */
START_TEST(a_mark_not_reached_yet_fails_no_later_op)
{
    const int64_t n = (int64_t)64 << 20; /* floats */
    rp_device *d = NULL;
    rp_error err = {0};
    rp_device_params gp = {.kind = RP_DEVICE_CUDA, .ordinal = 0, .threads = 1,
                           .unproven = 1u << RP_UNPROVEN_COPIES};
    ck_assert_msg(rp_device_create(&gp, &d, &err) == RP_OK, "%s", err.msg);
    ck_assert(rp_device_ordered_by_events(d));
    void *f = NULL, *b = NULL;
    ck_assert_int_eq(rp_device_alloc(d, (size_t)n * 4, &f, &err), RP_OK);
    ck_assert_int_eq(rp_device_alloc(d, (size_t)n * 2, &b, &err), RP_OK);
    ck_assert_int_eq(rp_device_memset0(d, f, (size_t)n * 4, &err), RP_OK);
    rp_kernels k;
    ck_assert_int_eq(rp_device_kernels(d, &k, &err), RP_OK);
    int not_reached = 0;
    for (int rep = 0; rep < 20 && !not_reached; rep++) {
        ck_assert_int_eq(rp_device_mark(d, 0, &err), RP_OK);
        for (int i = 0; i < 4; i++)
            ck_assert_msg(k.ops->convert(k.state, f, RP_F32, b, RP_BF16, n, &err) == RP_OK, "%s",
                          err.msg);
        ck_assert_int_eq(rp_device_mark(d, 1, &err), RP_OK);
        double ms = 0;
        ck_assert_msg(rp_device_mark_elapsed(d, 0, 1, 0, &ms, &err) == RP_OK, "%s", err.msg);
        not_reached = ms < 0;
        ck_assert_msg(k.ops->convert(k.state, b, RP_BF16, f, RP_F32, n, &err) == RP_OK,
                      "the kernel op after a mark not reached yet: %s", err.msg);
        ck_assert_msg(rp_device_sync(d, &err) == RP_OK, "the sync after it: %s", err.msg);
        ck_assert_msg(rp_device_mark_elapsed(d, 0, 1, 1, &ms, &err) == RP_OK, "%s", err.msg);
        ck_assert_msg(ms > 0, "%g ms between the marks", ms);
    }
    ck_assert_msg(not_reached, "the mark was reached before each query: the not-ready answer "
                  "this test is about never came");
    rp_device_free(d, f);
    rp_device_free(d, b);
    rp_device_destroy(&d);
}
END_TEST

static int g_have_device;

static Suite *cuda_backend_suite(void)
{
    Suite *s = suite_create("cuda_backend");
    TCase *tc = tcase_create("sizes");
    tcase_add_test(tc, workspace_linear_in_seqlen);
    suite_add_tcase(s, tc);
    if (g_have_device) {
        TCase *td = tcase_create("device");
        tcase_set_timeout(td, 120);
        tcase_add_test(td, bad_ordinal_and_huge_alloc_are_errors);
        tcase_add_test(td, transfer_engine_on_the_upload_and_download_streams);
        tcase_add_test(td, compute_and_copies_are_ordered_by_events);
        tcase_add_test(td, a_mark_not_reached_yet_fails_no_later_op);
        tcase_add_test(td, embedding_matches_cpu);
        tcase_add_test(td, qwen3_block_matches_cpu);
        tcase_add_test(td, llama_block_matches_cpu);
        tcase_add_test(td, qwen3_block_long_hd128_matches_cpu);
        tcase_add_test(td, llama_block_long_matches_cpu);
        tcase_add_test(td, head_matches_cpu);
        suite_add_tcase(s, td);
    }
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, cuda_backend_suite, "serial");
    const char *why = "";
    g_have_device = rp_cuda_device_count(&why) > 0;
    if (g_have_device)
        setenv("CK_FORK", "no", 1); /* CUDA is initialised: no fork */
    else
        printf("no CUDA device (%s): device checks skipped, workspace checks run\n", why);
    return rp_check_main(argc, argv, cuda_backend_suite, "serial");
}

#else /* no CUDA back end in this build */

static Suite *cuda_backend_suite(void)
{
    return suite_create("cuda_backend");
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return rp_check_main(argc, argv, cuda_backend_suite, "serial");
    return RP_TEST_SKIP;
}

#endif
