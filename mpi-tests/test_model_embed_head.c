/* Proves: the embedding gathers rows and its backward scatters gradients
 * (repeated tokens summed); the head's loss equals a direct double-precision
 * log-softmax cross-entropy over counted targets, whatever the chunk size;
 * its gradients for the input, the final norm and the LM head (untied) or
 * the shared embedding (tied: both paths summed) are the derivatives of
 * scale * loss (finite differences), with masked targets contributing
 * nothing; out-of-vocabulary tokens and targets are clean errors; results
 * are bit-identical run to run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cpu/ops.h"
#include "model/layers.h"
#include "model/layout.h"
#include "rp_check.h"

/* the CPU kernel ops table the layers run on here */
static const rp_kernels cpu_k = {.ops = &rp_kernel_ops_cpu};

enum { T = 13, H = 16, V = 37 };

static rp_model_config cfg_tiny(int tied)
{
    rp_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = RP_ARCH_QWEN3;
    c.hidden_size = H;
    c.intermediate_size = 24;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.vocab_size = V;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000;
    c.initializer_range = 0.02;
    c.tie_word_embeddings = tied;
    return c;
}

static float *rnd(size_t n, uint64_t seed, float mean, float sd)
{
    float *v = malloc(n * sizeof(float));
    rp_rng_fill_normal(v, n, seed, 77, 0, mean, sd);
    return v;
}

static int32_t tokens[T] = {3, 0, 36, 5, 3, 17, 22, 3, 9, 1, 30, 12, 3};
static int32_t targets[T] = {0, 36, 5, 3, 17, 22, 3, 9, 1, 30, 12, 3, 8};
static uint8_t mask[T] = {1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0};

/* Direct reference: loss in double from the definition. */
static double ref_loss(const float *x, const float *nw, const float *lw, const uint8_t *m, float eps)
{
    double total = 0;
    for (int t = 0; t < T; t++) {
        if (m && !m[t])
            continue;
        double ss = 0, h[H], z[V], mx = -1e300, se = 0;
        for (int j = 0; j < H; j++)
            ss += (double)x[t * H + j] * x[t * H + j];
        double r = 1 / sqrt(ss / H + eps);
        for (int j = 0; j < H; j++)
            h[j] = nw[j] * x[t * H + j] * r;
        for (int v = 0; v < V; v++) {
            z[v] = 0;
            for (int j = 0; j < H; j++)
                z[v] += (double)lw[v * H + j] * h[j];
            mx = fmax(mx, z[v]);
        }
        for (int v = 0; v < V; v++)
            se += exp(z[v] - mx);
        total += mx + log(se) - z[targets[t]];
    }
    return total;
}

START_TEST(embedding_gather_scatter)
{
    rp_model_config c = cfg_tiny(0);
    float *W = rnd(V * H, 1, 0, 1), *out = malloc(T * H * sizeof(float));
    ck_assert_int_eq(rp_embed_forward(&cpu_k, &c, W, RP_F32, tokens, T, out, NULL), RP_OK);
    for (int t = 0; t < T; t++)
        ck_assert_mem_eq(out + t * H, W + tokens[t] * H, H * sizeof(float));
    float *d = rnd(T * H, 2, 0, 1), *dW = calloc(V * H, sizeof(float));
    for (int i = 0; i < V * H; i++)
        dW[i] = 0.5f; /* backward accumulates onto what is there */
    ck_assert_int_eq(rp_embed_backward(&cpu_k, &c, tokens, T, d, dW, NULL), RP_OK);
    for (int v = 0; v < V; v++)
        for (int j = 0; j < H; j++) {
            float s = 0.5f; /* tokens in order, as documented */
            for (int t = 0; t < T; t++)
                if (tokens[t] == v)
                    s += d[t * H + j];
            ck_assert_float_eq(dW[v * H + j], s);
        }
    free(W);
    free(out);
    free(d);
    free(dW);
}
END_TEST

START_TEST(embedding_rejects_bad_tokens)
{
    rp_model_config c = cfg_tiny(0);
    float *W = rnd(V * H, 1, 0, 1), *out = calloc(T * H, sizeof(float));
    int32_t bad[T];
    memcpy(bad, tokens, sizeof bad);
    bad[7] = V;
    rp_error err = {0};
    ck_assert_int_eq(rp_embed_forward(&cpu_k, &c, W, RP_F32, bad, T, out, &err), RP_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "position 7"));
    for (int i = 0; i < T * H; i++)
        ck_assert_float_eq(out[i], 0.0f); /* untouched */
    bad[7] = -1;
    ck_assert_int_eq(rp_embed_backward(&cpu_k, &c, bad, T, out, W, &err), RP_ERR_RANGE);
    free(W);
    free(out);
}
END_TEST

typedef struct head_fx {
    rp_model_config cfg;
    float *x, *nw, *lw, *ws;
    const uint8_t *mask;
    int64_t chunk;
} head_fx;

static double head_loss(head_fx *f)
{
    double loss;
    ck_assert_int_eq(rp_head_forward_backward(&cpu_k, &f->cfg, f->nw, f->lw, RP_F32, f->x, targets, f->mask, T, 1,
                                              NULL, NULL, NULL, f->chunk, f->ws, &loss, NULL),
                     RP_OK);
    return loss;
}

START_TEST(head_loss_matches_direct_formula_any_chunk)
{
    head_fx f = {.cfg = cfg_tiny(0)};
    f.x = rnd(T * H, 3, 0, 1);
    f.nw = rnd(H, 4, 1, 0.2f);
    f.lw = rnd(V * H, 5, 0, 0.5f);
    f.ws = malloc(rp_head_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &f.cfg, T, 64) * sizeof(float));
    const uint8_t *masks[2] = {NULL, mask};
    for (int mi = 0; mi < 2; mi++) {
        f.mask = masks[mi];
        double ref = ref_loss(f.x, f.nw, f.lw, f.mask, 1e-6f);
        int64_t chunks[] = {1, 4, 5, 13, 64};
        for (int ci = 0; ci < 5; ci++) {
            f.chunk = chunks[ci];
            double loss;
            ck_assert_int_eq(rp_head_forward_backward(&cpu_k, &f.cfg, f.nw, f.lw, RP_F32, f.x, targets, f.mask, T,
                                                      1, NULL, NULL, NULL, f.chunk, f.ws, &loss, NULL),
                             RP_OK);
            /* fp32 logits: a few 1e-7 relative per token */
            ck_assert_msg(fabs(loss - ref) <= 1e-5 * fabs(ref), "chunk %lld: %.9g vs %.9g",
                          (long long)f.chunk, loss, ref);
        }
    }
    /* nothing counts: zero loss and zero input gradient */
    uint8_t none[T] = {0};
    float *dx = rnd(T * H, 9, 0, 1), *dn = calloc(H, sizeof(float)),
          *dl = calloc(V * H, sizeof(float));
    double loss = -1;
    ck_assert_int_eq(rp_head_forward_backward(&cpu_k, &f.cfg, f.nw, f.lw, RP_F32, f.x, targets, none, T, 1, dx,
                                              dn, dl, 4, f.ws, &loss, NULL),
                     RP_OK);
    ck_assert(loss == 0.0);
    for (int i = 0; i < T * H; i++)
        ck_assert_float_eq(dx[i], 0.0f);
    free(dx);
    free(dn);
    free(dl);
    free(f.x);
    free(f.nw);
    free(f.lw);
    free(f.ws);
}
END_TEST

/* Central differences of the loss along a unit direction. The loss is a
 * double sum of <= 13 per-token terms computed from fp32 logits, so its
 * noise is ~1e-6; over 2h = 2e-2 that is 5e-5, and the O(h^2) truncation
 * error is ~1e-5: tolerance 2e-3 * |g| + 2e-4. */
static void fd_check(double (*loss)(void *), void *ctx, float *v, size_t n, const float *g,
                     double scale, uint64_t seed, const char *what)
{
    const double h = 1e-2;
    for (int rep = 0; rep < 3; rep++) {
        float *d = rnd(n, seed * 10 + (uint64_t)rep, 0, 1), *save = malloc(n * sizeof(float));
        double nd = 0, gd = 0, gn = 0;
        for (size_t i = 0; i < n; i++)
            nd += (double)d[i] * d[i];
        for (size_t i = 0; i < n; i++) {
            d[i] = (float)(d[i] / sqrt(nd));
            gd += (double)g[i] * d[i];
            gn += (double)g[i] * g[i];
        }
        gn = sqrt(gn);
        memcpy(save, v, n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            v[i] = save[i] + (float)h * d[i];
        double lp = scale * loss(ctx);
        for (size_t i = 0; i < n; i++)
            v[i] = save[i] - (float)h * d[i];
        double lm = scale * loss(ctx);
        memcpy(v, save, n * sizeof(float));
        double fd = (lp - lm) / (2 * h);
        ck_assert_msg(fabs(fd - gd) <= 2e-3 * gn + 2e-4, "%s: fd %.8g vs backward %.8g (|g| %.3g)",
                      what, fd, gd, gn);
        ck_assert_msg(gn > 1e-3, "%s: vanishing gradient", what);
        free(d);
        free(save);
    }
}

static double head_loss_v(void *p) { return head_loss(p); }

START_TEST(head_gradients_untied_masked)
{
    head_fx f = {.cfg = cfg_tiny(0), .mask = mask, .chunk = 5};
    f.x = rnd(T * H, 3, 0, 1);
    f.nw = rnd(H, 4, 1, 0.2f);
    f.lw = rnd(V * H, 5, 0, 0.5f);
    f.ws = malloc(rp_head_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &f.cfg, T, 5) * sizeof(float));
    const float scale = 0.37f;
    float *dx = malloc(T * H * sizeof(float)), *dn = calloc(H, sizeof(float)),
          *dl = calloc(V * H, sizeof(float));
    double loss;
    ck_assert_int_eq(rp_head_forward_backward(&cpu_k, &f.cfg, f.nw, f.lw, RP_F32, f.x, targets, mask, T, scale,
                                              dx, dn, dl, 5, f.ws, &loss, NULL),
                     RP_OK);
    fd_check(head_loss_v, &f, f.x, T * H, dx, scale, 1, "dx");
    fd_check(head_loss_v, &f, f.nw, H, dn, scale, 2, "model.norm.weight");
    fd_check(head_loss_v, &f, f.lw, V * H, dl, scale, 3, "lm_head.weight");
    /* masked rows receive exactly nothing */
    for (int t = 0; t < T; t++)
        if (!mask[t])
            for (int j = 0; j < H; j++)
                ck_assert_float_eq(dx[t * H + j], 0.0f);

    /* same call again: same bits; dnorm/dlm accumulate (+=) */
    float *dx2 = malloc(T * H * sizeof(float)), *dn2 = malloc(H * sizeof(float)),
          *dl2 = malloc(V * H * sizeof(float));
    memcpy(dn2, dn, H * sizeof(float));
    memcpy(dl2, dl, V * H * sizeof(float));
    double loss2;
    ck_assert_int_eq(rp_head_forward_backward(&cpu_k, &f.cfg, f.nw, f.lw, RP_F32, f.x, targets, mask, T, scale,
                                              dx2, dn2, dl2, 5, f.ws, &loss2, NULL),
                     RP_OK);
    ck_assert(loss2 == loss);
    ck_assert_mem_eq(dx, dx2, T * H * sizeof(float));
    for (int j = 0; j < H; j++)
        ck_assert_float_eq_tol(dn2[j], 2 * dn[j], 1e-5f * fabsf(dn[j]) + 1e-7f);
    free(dx2);
    free(dn2);
    free(dl2);
    free(dx);
    free(dn);
    free(dl);
    free(f.x);
    free(f.nw);
    free(f.lw);
    free(f.ws);
}
END_TEST

/* Tied: L(W) = loss(head(embed(W)[tokens]; lm_w = W)); the trainer adds
 * the head's dlm_w and the embedding backward into the same buffer. */
typedef struct tied_fx {
    rp_model_config cfg;
    float *W, *nw, *x, *ws;
} tied_fx;

static double tied_loss(void *p)
{
    tied_fx *f = p;
    double loss;
    ck_assert_int_eq(rp_embed_forward(&cpu_k, &f->cfg, f->W, RP_F32, tokens, T, f->x, NULL), RP_OK);
    ck_assert_int_eq(rp_head_forward_backward(&cpu_k, &f->cfg, f->nw, f->W, RP_F32, f->x, targets, mask, T, 1,
                                              NULL, NULL, NULL, 4, f->ws, &loss, NULL),
                     RP_OK);
    return loss;
}

START_TEST(head_gradients_tied)
{
    tied_fx f = {.cfg = cfg_tiny(1)};
    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(&f.cfg, &L, &n, NULL), RP_OK);
    ck_assert_int_eq(L[n - 1].nparams, 1); /* only model.norm.weight */
    free(L);
    f.W = rnd(V * H, 6, 0, 0.7f);
    f.nw = rnd(H, 4, 1, 0.2f);
    f.x = malloc(T * H * sizeof(float));
    f.ws = malloc(rp_head_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &f.cfg, T, 4) * sizeof(float));
    float *dx = malloc(T * H * sizeof(float)), *dn = calloc(H, sizeof(float)),
          *dW = calloc(V * H, sizeof(float));
    double loss;
    ck_assert_int_eq(rp_embed_forward(&cpu_k, &f.cfg, f.W, RP_F32, tokens, T, f.x, NULL), RP_OK);
    ck_assert_int_eq(rp_head_forward_backward(&cpu_k, &f.cfg, f.nw, f.W, RP_F32, f.x, targets, mask, T, 1, dx, dn,
                                              dW, 4, f.ws, &loss, NULL),
                     RP_OK);
    ck_assert_int_eq(rp_embed_backward(&cpu_k, &f.cfg, tokens, T, dx, dW, NULL), RP_OK);
    fd_check(tied_loss, &f, f.W, V * H, dW, 1, 4, "tied embedding");
    fd_check(tied_loss, &f, f.nw, H, dn, 1, 5, "model.norm.weight (tied)");
    free(dx);
    free(dn);
    free(dW);
    free(f.W);
    free(f.nw);
    free(f.x);
    free(f.ws);
}
END_TEST

START_TEST(head_rejects_bad_targets)
{
    rp_model_config c = cfg_tiny(0);
    float *x = rnd(T * H, 3, 0, 1), *nw = rnd(H, 4, 1, 0.2f), *lw = rnd(V * H, 5, 0, 0.5f);
    float *ws = malloc(rp_head_workspace_floats(&rp_kernel_ops_cpu, RP_F32, &c, T, 4) * sizeof(float));
    float *dx = calloc(T * H, sizeof(float)), *dn = calloc(H, sizeof(float));
    int32_t bad[T];
    memcpy(bad, targets, sizeof bad);
    bad[4] = -100;
    double loss = 42;
    rp_error err = {0};
    ck_assert_int_eq(rp_head_forward_backward(&cpu_k, &c, nw, lw, RP_F32, x, bad, NULL, T, 1, dx, dn, lw, 4, ws,
                                              &loss, &err),
                     RP_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "position 4"));
    ck_assert(loss == 42);
    for (int i = 0; i < T * H; i++)
        ck_assert_float_eq(dx[i], 0.0f);
    /* a masked-out target is never looked at */
    uint8_t m[T];
    memset(m, 1, sizeof m);
    m[4] = 0;
    ck_assert_int_eq(rp_head_forward_backward(&cpu_k, &c, nw, lw, RP_F32, x, bad, m, T, 1, NULL, NULL, NULL, 4, ws,
                                              &loss, &err),
                     RP_OK);
    free(x);
    free(nw);
    free(lw);
    free(ws);
    free(dx);
    free(dn);
}
END_TEST

Suite *embed_head_suite(void)
{
    Suite *s = suite_create("model_embed_head");
    TCase *tc = tcase_create("embed_head");
    tcase_add_test(tc, embedding_gather_scatter);
    tcase_add_test(tc, embedding_rejects_bad_tokens);
    tcase_add_test(tc, head_loss_matches_direct_formula_any_chunk);
    tcase_add_test(tc, head_gradients_untied_masked);
    tcase_add_test(tc, head_gradients_tied);
    tcase_add_test(tc, head_rejects_bad_targets);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(embed_head_suite, "serial")
