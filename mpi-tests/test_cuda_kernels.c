/* Proves (on a machine with a CUDA device; SKIP, exit 77, elsewhere): every
 * kernel of src/kernels/cuda written for the CUDA back end agrees with its
 * CPU counterpart (src/kernels/cpu, src/model) on fresh random inputs, with
 * every output poisoned with NaN before the run so an unwritten element
 * fails:
 *   - fp32 -> bf16 rounds exactly like rp_f32_to_bf16, bf16 -> fp32 exact;
 *   - embedding gather equals rp_embed_forward; the sorted scatter-add
 *     equals rp_embed_backward bit for bit (same summation order), repeats
 *     included; the token check finds the first bad position (mask honoured);
 *   - RMSNorm forward/backward (fp32 and bf16 outputs, accumulate, dx
 *     aliasing dy, per-head shape, dim not a multiple of 32) and its weight
 *     gradient match kernels/cpu/rmsnorm within 1e-5;
 *   - column sums match rp_colsum_accumulate; two runs give the same bits;
 *   - RoPE table and rotation (forward, inverse, llama3 inv_freq from
 *     rp_model_rope_inv_freq) match kernels/cpu/rope;
 *   - SwiGLU forward/backward match a double-precision evaluation of the
 *     formulas; residual and bias adds match plain loops;
 *   - the three Linear GEMMs (bf16 operands, fp32 accumulate, accumulate
 *     flags, bf16 output) match kernels/cpu/linear within 1e-2 on fp32
 *     inputs and within 1e-4 on inputs already rounded to bf16. */
#include "config.h"

#include "rp_check.h"

#ifdef RP_HAVE_CUDA_EXECUTOR
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embed.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/cpu/ops.h"
#include "model/layers.h"

static const rp_kernels cpu_k = {.ops = &rp_kernel_ops_cpu};

START_TEST(convert_matches_host_rounding)
{
    const int64_t n = 10007;
    float *x = rand_f32((size_t)n, 0.0f, 3.0f);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-40f, x[3] = 3.0e38f, x[4] = INFINITY;
    uint16_t *want = malloc((size_t)n * 2), *got = malloc((size_t)n * 2);
    float *back = malloc((size_t)n * 4), *wantf = malloc((size_t)n * 4);
    rp_f32_to_bf16_array(x, want, (size_t)n);
    rp_bf16_to_f32_array(want, wantf, (size_t)n);
    float *dx = dev_upload(x, (size_t)n * 4), *df = dev_alloc((size_t)n * 4);
    uint16_t *db = dev_alloc((size_t)n * 2);
    dev_poison(db, (size_t)n * 2);
    dev_poison(df, (size_t)n * 4);
    ck_assert_int_eq(rp_cuda_bf16_from_f32(dx, db, n, NULL), 0);
    ck_assert_int_eq(rp_cuda_f32_from_bf16(db, df, n, NULL), 0);
    dev_download(got, db, (size_t)n * 2);
    dev_download(back, df, (size_t)n * 4);
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(got[i] == want[i], "element %lld: %f -> 0x%04x, want 0x%04x", (long long)i,
                      (double)x[i], got[i], want[i]);
        ck_assert(memcmp(&back[i], &wantf[i], 4) == 0);
    }
    cudaFree(dx), cudaFree(df), cudaFree(db);
    free(x), free(want), free(got), free(back), free(wantf);
}
END_TEST

static rp_model_config embed_cfg(int64_t V, int64_t H)
{
    rp_model_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = V;
    c.hidden_size = H;
    return c;
}

START_TEST(embed_forward_backward_match_cpu)
{
    const int64_t V = 301, H = 200, T = 777; /* H not a multiple of the block */
    rp_model_config cfg = embed_cfg(V, H);
    float *W = rand_f32((size_t)(V * H), 0.0f, 1.0f);
    float *dout = rand_f32((size_t)(T * H), 0.0f, 1.0f);
    float *dW0 = rand_f32((size_t)(V * H), 0.0f, 1.0f);
    int32_t *tok = malloc((size_t)T * 4);
    uint64_t lcg = 12345 + g_seed++;
    for (int64_t t = 0; t < T; t++) { /* many repeats, and the last vocabulary row */
        lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[t] = (int32_t)((lcg >> 33) % 40);
    }
    tok[5] = (int32_t)(V - 1), tok[T - 1] = 0;
    float *ref = malloc((size_t)(T * H) * 4), *got = malloc((size_t)(T * H) * 4);
    ck_assert_int_eq(rp_embed_forward(&cpu_k, &cfg, W, RP_F32, tok, T, ref, NULL), RP_OK);
    float *dW_ref = malloc((size_t)(V * H) * 4), *dW_got = malloc((size_t)(V * H) * 4);
    memcpy(dW_ref, dW0, (size_t)(V * H) * 4);
    ck_assert_int_eq(rp_embed_backward(&cpu_k, &cfg, tok, T, dout, dW_ref, NULL), RP_OK);

    float *dW = dev_upload(W, (size_t)(V * H) * 4), *dout_d = dev_upload(dout, (size_t)(T * H) * 4);
    float *ddW = dev_upload(dW0, (size_t)(V * H) * 4), *dout_y = dev_alloc((size_t)(T * H) * 4);
    int32_t *dtok = dev_upload(tok, (size_t)T * 4);
    dev_poison(dout_y, (size_t)(T * H) * 4);
    ck_assert_int_eq(rp_cuda_embed_forward(dW, dtok, T, H, dout_y, NULL), 0);
    dev_download(got, dout_y, (size_t)(T * H) * 4);
    ck_assert(memcmp(got, ref, (size_t)(T * H) * 4) == 0);

    size_t bytes = 0;
    ck_assert_int_eq(rp_cuda_embed_backward_scratch(T, V, &bytes), 0);
    void *scratch = dev_alloc(bytes);
    dev_poison(scratch, bytes);
    ck_assert_int_eq(rp_cuda_embed_backward(dtok, T, H, V, dout_d, ddW, scratch, bytes, NULL), 0);
    dev_download(dW_got, ddW, (size_t)(V * H) * 4);
    for (int64_t i = 0; i < V * H; i++)
        ck_assert_msg(memcmp(&dW_got[i], &dW_ref[i], 4) == 0, "dW[%lld]: %.9g vs %.9g",
                      (long long)i, (double)dW_got[i], (double)dW_ref[i]);

    /* the range check: first bad position, masked positions ignored */
    tok[100] = (int32_t)V, tok[50] = -1, tok[10] = (int32_t)(V + 5);
    uint8_t *mask = malloc((size_t)T);
    memset(mask, 1, (size_t)T);
    mask[10] = 0;
    cudaMemcpy(dtok, tok, (size_t)T * 4, cudaMemcpyHostToDevice);
    uint8_t *dmask = dev_upload(mask, (size_t)T);
    unsigned long long *bad = dev_alloc(8), hb = 0;
    ck_assert_int_eq(rp_cuda_tokens_first_bad(dtok, dmask, T, V, bad, NULL), 0);
    dev_download(&hb, bad, 8);
    ck_assert_uint_eq(hb, 50);
    ck_assert_int_eq(rp_cuda_tokens_first_bad(dtok, NULL, T, V, bad, NULL), 0);
    dev_download(&hb, bad, 8);
    ck_assert_uint_eq(hb, 10);
    tok[100] = tok[50] = tok[10] = 0;
    cudaMemcpy(dtok, tok, (size_t)T * 4, cudaMemcpyHostToDevice);
    ck_assert_int_eq(rp_cuda_tokens_first_bad(dtok, NULL, T, V, bad, NULL), 0);
    dev_download(&hb, bad, 8);
    ck_assert(hb == ~0ULL);

    cudaFree(dW), cudaFree(dout_d), cudaFree(ddW), cudaFree(dout_y), cudaFree(dtok);
    cudaFree(scratch), cudaFree(dmask), cudaFree(bad);
    free(W), free(dout), free(dW0), free(tok), free(ref), free(got), free(dW_ref), free(dW_got);
    free(mask);
}
END_TEST

/* rows x dim: the block norm (dim 200) and the per-head q/k norm (dim 16). */
static void rmsnorm_case(int64_t rows, int64_t dim)
{
    const size_t n = (size_t)(rows * dim);
    const float eps = 1e-6f;
    float *x = rand_f32(n, 0.0f, 2.0f), *w = rand_f32((size_t)dim, 1.0f, 0.3f);
    float *dy = rand_f32(n, 0.0f, 1.0f), *dx0 = rand_f32(n, 0.0f, 1.0f);
    float *dw0 = rand_f32((size_t)dim, 0.0f, 1.0f);
    float *y_ref = malloc(n * 4), *rstd_ref = malloc((size_t)rows * 4);
    float *dx_ref = malloc(n * 4), *dxa_ref = malloc(n * 4), *dw_ref = malloc((size_t)dim * 4);
    rp_rmsnorm_forward(x, w, y_ref, rstd_ref, rows, dim, eps);
    memcpy(dw_ref, dw0, (size_t)dim * 4);
    rp_rmsnorm_backward(x, w, rstd_ref, dy, dx_ref, dw_ref, rows, dim, 0);
    memcpy(dxa_ref, dx0, n * 4);
    rp_rmsnorm_backward(x, w, rstd_ref, dy, dxa_ref, NULL, rows, dim, 1);

    float *d_x = dev_upload(x, n * 4), *d_w = dev_upload(w, (size_t)dim * 4);
    float *d_dy = dev_upload(dy, n * 4), *d_y = dev_alloc(n * 4), *d_r = dev_alloc((size_t)rows * 4);
    uint16_t *d_yb = dev_alloc(n * 2);
    float *d_dw = dev_upload(dw0, (size_t)dim * 4);
    float *d_part = dev_alloc(rp_cuda_colsum_partial_floats(dim) * 4);
    float *got = malloc(n * 4), *got_r = malloc((size_t)rows * 4);
    uint16_t *gotb = malloc(n * 2);
    dev_poison(d_y, n * 4), dev_poison(d_r, (size_t)rows * 4), dev_poison(d_yb, n * 2);
    dev_poison(d_part, rp_cuda_colsum_partial_floats(dim) * 4);
    ck_assert_int_eq(rp_cuda_rmsnorm_forward(d_x, d_w, d_y, d_yb, d_r, rows, dim, eps, NULL), 0);
    dev_download(got, d_y, n * 4);
    dev_download(got_r, d_r, (size_t)rows * 4);
    dev_download(gotb, d_yb, n * 2);
    CHECK_REL(got, y_ref, n, FP32_TOL, "rmsnorm y");
    CHECK_REL(got_r, rstd_ref, (size_t)rows, FP32_TOL, "rmsnorm rstd");
    for (size_t i = 0; i < n; i++) /* the bf16 output is the fp32 one rounded */
        ck_assert_uint_eq(gotb[i], rp_f32_to_bf16(got[i]));

    /* weight gradient first (the layer order: dx may alias dy) */
    ck_assert_int_eq(rp_cuda_rmsnorm_dw(d_x, d_r, d_dy, rows, dim, d_dw, d_part, NULL), 0);
    float *got_dw = malloc((size_t)dim * 4);
    dev_download(got_dw, d_dw, (size_t)dim * 4);
    CHECK_REL(got_dw, dw_ref, (size_t)dim, FP32_TOL, "rmsnorm dw");

    /* dx overwritten, in place over dy, with its bf16 copy */
    ck_assert_int_eq(rp_cuda_rmsnorm_backward(d_x, d_w, d_r, d_dy, d_dy, d_yb, rows, dim, 0, NULL),
                     0);
    dev_download(got, d_dy, n * 4);
    dev_download(gotb, d_yb, n * 2);
    CHECK_REL(got, dx_ref, n, FP32_TOL, "rmsnorm dx (aliasing dy)");
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(gotb[i], rp_f32_to_bf16(got[i]));
    /* accumulate into an existing dx */
    cudaMemcpy(d_dy, dy, n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_y, dx0, n * 4, cudaMemcpyHostToDevice);
    ck_assert_int_eq(rp_cuda_rmsnorm_backward(d_x, d_w, d_r, d_dy, d_y, NULL, rows, dim, 1, NULL),
                     0);
    dev_download(got, d_y, n * 4);
    CHECK_REL(got, dxa_ref, n, FP32_TOL, "rmsnorm dx accumulate");

    cudaFree(d_x), cudaFree(d_w), cudaFree(d_dy), cudaFree(d_y), cudaFree(d_r), cudaFree(d_yb);
    cudaFree(d_dw), cudaFree(d_part);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(y_ref), free(rstd_ref), free(dx_ref);
    free(dxa_ref), free(dw_ref), free(got), free(got_r), free(gotb), free(got_dw);
}

START_TEST(rmsnorm_matches_cpu)
{
    rmsnorm_case(37, 200);
    rmsnorm_case(300, 16);
    rmsnorm_case(5, 1000);
}
END_TEST

START_TEST(colsum_matches_cpu_and_repeats)
{
    const int64_t rows = 333, cols = 70;
    float *src = rand_f32((size_t)(rows * cols), 0.0f, 1.0f), *d0 = rand_f32((size_t)cols, 0, 1);
    float *ref = malloc((size_t)cols * 4), *got = malloc((size_t)cols * 4), *got2 = malloc(cols * 4);
    memcpy(ref, d0, (size_t)cols * 4);
    rp_colsum_accumulate(src, rows, cols, ref);
    float *d_src = dev_upload(src, (size_t)(rows * cols) * 4), *d_dst = dev_upload(d0, cols * 4);
    float *d_part = dev_alloc(rp_cuda_colsum_partial_floats(cols) * 4);
    dev_poison(d_part, rp_cuda_colsum_partial_floats(cols) * 4);
    ck_assert_int_eq(rp_cuda_colsum_accumulate(d_src, rows, cols, d_dst, d_part, NULL), 0);
    dev_download(got, d_dst, (size_t)cols * 4);
    CHECK_REL(got, ref, (size_t)cols, FP32_TOL, "colsum");
    cudaMemcpy(d_dst, d0, (size_t)cols * 4, cudaMemcpyHostToDevice);
    ck_assert_int_eq(rp_cuda_colsum_accumulate(d_src, rows, cols, d_dst, d_part, NULL), 0);
    dev_download(got2, d_dst, (size_t)cols * 4);
    ck_assert(memcmp(got, got2, (size_t)cols * 4) == 0);
    /* fewer rows than slices: empty slices add nothing */
    memcpy(ref, d0, (size_t)cols * 4);
    rp_colsum_accumulate(src, 3, cols, ref);
    cudaMemcpy(d_dst, d0, (size_t)cols * 4, cudaMemcpyHostToDevice);
    ck_assert_int_eq(rp_cuda_colsum_accumulate(d_src, 3, cols, d_dst, d_part, NULL), 0);
    dev_download(got, d_dst, (size_t)cols * 4);
    CHECK_REL(got, ref, (size_t)cols, FP32_TOL, "colsum, 3 rows");
    cudaFree(d_src), cudaFree(d_dst), cudaFree(d_part);
    free(src), free(d0), free(ref), free(got), free(got2);
}
END_TEST

START_TEST(rope_matches_cpu)
{
    rp_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.head_dim = 64;
    cfg.rope_theta = 500000.0;
    cfg.rope_scaling.type = RP_ROPE_LLAMA3;
    cfg.rope_scaling.factor = 8.0;
    cfg.rope_scaling.low_freq_factor = 1.0;
    cfg.rope_scaling.high_freq_factor = 4.0;
    cfg.rope_scaling.original_max_position_embeddings = 64;
    const int64_t hd = 64, half = 32, nseq = 3, S = 50, nh = 5, T = nseq * S;
    const size_t n = (size_t)(T * nh * hd), ncs = (size_t)(2 * S * half);
    float inv[32];
    rp_model_rope_inv_freq(&cfg, inv);
    float *cs_ref = malloc(ncs * 4), *cs_got = malloc(ncs * 4);
    rp_rope_table(cs_ref, inv, S, half);
    float *d_inv = dev_upload(inv, sizeof inv), *d_cs = dev_alloc(ncs * 4);
    dev_poison(d_cs, ncs * 4);
    ck_assert_int_eq(rp_cuda_rope_table(d_cs, d_inv, S, half, NULL), 0);
    dev_download(cs_got, d_cs, ncs * 4);
    CHECK_REL(cs_got, cs_ref, ncs, FP32_TOL, "rope table");

    for (int inverse = 0; inverse <= 1; inverse++) {
        float *x = rand_f32(n, 0.0f, 1.0f), *ref = malloc(n * 4), *got = malloc(n * 4);
        uint16_t *gotb = malloc(n * 2);
        memcpy(ref, x, n * 4);
        rp_rope_apply(ref, cs_ref, nseq, S, NULL, nh, hd, inverse);
        float *d_x = dev_upload(x, n * 4);
        uint16_t *d_xb = dev_alloc(n * 2);
        dev_poison(d_xb, n * 2);
        ck_assert_int_eq(rp_cuda_rope_apply(d_x, d_xb, d_cs, nseq, S, NULL, nh, hd, inverse, NULL), 0);
        dev_download(got, d_x, n * 4);
        dev_download(gotb, d_xb, n * 2);
        CHECK_REL(got, ref, n, FP32_TOL, inverse ? "rope inverse" : "rope forward");
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(gotb[i], rp_f32_to_bf16(got[i]));
        /* the inverse undoes the forward */
        if (!inverse) {
            ck_assert_int_eq(rp_cuda_rope_apply(d_x, NULL, d_cs, nseq, S, NULL, nh, hd, 1, NULL), 0);
            dev_download(got, d_x, n * 4);
            CHECK_REL(got, x, n, FP32_TOL, "rope inverse(forward)");
        }
        cudaFree(d_x), cudaFree(d_xb);
        free(x), free(ref), free(got), free(gotb);
    }
    cudaFree(d_inv), cudaFree(d_cs);
    free(cs_ref), free(cs_got);
}
END_TEST

START_TEST(swiglu_and_adds_match_formulas)
{
    const int64_t n = 5003, rows = 41, cols = 37;
    float *g = rand_f32((size_t)n, 0.0f, 3.0f), *u = rand_f32((size_t)n, 0.0f, 1.0f);
    float *dm = rand_f32((size_t)n, 0.0f, 1.0f);
    float *m_ref = malloc(n * 4), *dg_ref = malloc(n * 4), *du_ref = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i], sg = 1.0 / (1.0 + exp(-gi));
        m_ref[i] = (float)(gi * sg * u[i]);
        dg_ref[i] = (float)(dm[i] * u[i] * (sg + gi * sg * (1.0 - sg)));
        du_ref[i] = (float)(dm[i] * gi * sg);
    }
    float *d_g = dev_upload(g, n * 4), *d_u = dev_upload(u, n * 4), *d_dm = dev_upload(dm, n * 4);
    float *d_m = dev_alloc(n * 4), *d_dg = dev_alloc(n * 4), *d_du = dev_alloc(n * 4);
    uint16_t *d_mb = dev_alloc(n * 2), *d_dgb = dev_alloc(n * 2), *d_dub = dev_alloc(n * 2);
    dev_poison(d_m, n * 4), dev_poison(d_dg, n * 4), dev_poison(d_du, n * 4);
    dev_poison(d_mb, n * 2), dev_poison(d_dgb, n * 2), dev_poison(d_dub, n * 2);
    ck_assert_int_eq(rp_cuda_swiglu_forward(d_g, d_u, 0, n, d_m, d_mb, 1, n, NULL), 0);
    ck_assert_int_eq(rp_cuda_swiglu_backward(d_g, d_u, 0, n, d_dm, 0, d_dg, d_dgb, d_du, d_dub, 1,
                                             n, NULL), 0);
    float *got = malloc(n * 4);
    uint16_t *gotb = malloc(n * 2);
    const float *refs[3] = {m_ref, dg_ref, du_ref};
    float *outs[3] = {d_m, d_dg, d_du};
    uint16_t *outsb[3] = {d_mb, d_dgb, d_dub};
    const char *names[3] = {"swiglu m", "swiglu dg", "swiglu du"};
    for (int k = 0; k < 3; k++) {
        dev_download(got, outs[k], n * 4);
        CHECK_REL(got, refs[k], (size_t)n, FP32_TOL, names[k]);
        dev_download(gotb, outsb[k], n * 2);
        for (int64_t i = 0; i < n; i++)
            ck_assert_uint_eq(gotb[i], rp_f32_to_bf16(got[i]));
    }

    /* residual add and bias add */
    float *a = rand_f32((size_t)(rows * cols), 0, 1), *b = rand_f32((size_t)(rows * cols), 0, 1);
    float *bias = rand_f32((size_t)cols, 0, 1), *ref = malloc((size_t)(rows * cols) * 4);
    float *d_a = dev_upload(a, (size_t)(rows * cols) * 4), *d_b = dev_upload(b, rows * cols * 4);
    float *d_bias = dev_upload(bias, (size_t)cols * 4), *d_y = dev_alloc(rows * cols * 4);
    uint16_t *d_yb = dev_alloc((size_t)(rows * cols) * 2);
    dev_poison(d_y, (size_t)(rows * cols) * 4), dev_poison(d_yb, (size_t)(rows * cols) * 2);
    ck_assert_int_eq(rp_cuda_add(d_a, d_b, d_y, rows * cols, NULL), 0);
    for (int64_t i = 0; i < rows * cols; i++)
        ref[i] = a[i] + b[i];
    float *got2 = malloc((size_t)(rows * cols) * 4);
    dev_download(got2, d_y, (size_t)(rows * cols) * 4);
    ck_assert(memcmp(got2, ref, (size_t)(rows * cols) * 4) == 0);
    ck_assert_int_eq(rp_cuda_bias_add(d_y, d_yb, d_bias, rows, cols, NULL), 0);
    for (int64_t i = 0; i < rows * cols; i++)
        ref[i] += bias[i % cols];
    uint16_t *gotb2 = malloc((size_t)(rows * cols) * 2);
    dev_download(got2, d_y, (size_t)(rows * cols) * 4);
    dev_download(gotb2, d_yb, (size_t)(rows * cols) * 2);
    ck_assert(memcmp(got2, ref, (size_t)(rows * cols) * 4) == 0);
    for (int64_t i = 0; i < rows * cols; i++)
        ck_assert_uint_eq(gotb2[i], rp_f32_to_bf16(ref[i]));

    cudaFree(d_g), cudaFree(d_u), cudaFree(d_dm), cudaFree(d_m), cudaFree(d_dg), cudaFree(d_du);
    cudaFree(d_mb), cudaFree(d_dgb), cudaFree(d_dub), cudaFree(d_a), cudaFree(d_b);
    cudaFree(d_bias), cudaFree(d_y), cudaFree(d_yb);
    free(g), free(u), free(dm), free(m_ref), free(dg_ref), free(du_ref), free(got), free(gotb);
    free(a), free(b), free(bias), free(ref), free(got2), free(gotb2);
}
END_TEST

static uint16_t *to_bf16_dev(const float *x, size_t n)
{
    uint16_t *h = malloc(n * 2);
    rp_f32_to_bf16_array(x, h, n);
    uint16_t *d = dev_upload(h, n * 2);
    free(h);
    return d;
}

/* One shape of the three Linear products; `rounded` feeds the CPU the
 * bf16-rounded operands (so only the summation order differs). */
static void linear_case(cublasHandle_t hb, int64_t rows, int64_t in, int64_t out, int rounded)
{
    /* rounded operands: only the summation order (and the tensor cores'
     * fp32 accumulation) differ, so 1e-4; the bf16 rounding itself is ~4e-3 */
    const double tol = rounded ? 1e-4 : BF16_TOL;
    float *x = rand_f32((size_t)(rows * in), 0, 1), *W = rand_f32((size_t)(out * in), 0, 0.1f);
    float *dy = rand_f32((size_t)(rows * out), 0, 1), *dW0 = rand_f32((size_t)(out * in), 0, 1);
    float *acc0 = rand_f32((size_t)(rows * out), 0, 1), *dx0 = rand_f32((size_t)(rows * in), 0, 1);
    if (rounded) {
        rp_f32_round_bf16(x, (size_t)(rows * in));
        rp_f32_round_bf16(W, (size_t)(out * in));
        rp_f32_round_bf16(dy, (size_t)(rows * out));
    }
    uint16_t *d_x = to_bf16_dev(x, (size_t)(rows * in)), *d_W = to_bf16_dev(W, out * in);
    uint16_t *d_dy = to_bf16_dev(dy, (size_t)(rows * out));
    float *ref = malloc((size_t)(rows * out * 4 + in * out * 4 + rows * in * 4));
    float *got = malloc((size_t)(rows * out * 4 + in * out * 4 + rows * in * 4));
    float *d_y = dev_alloc((size_t)(rows * out) * 4), *d_dx = dev_alloc((size_t)(rows * in) * 4);
    float *d_dW = dev_upload(dW0, (size_t)(out * in) * 4);

    /* y = x W^T, then y += x W^T over acc0 */
    rp_linear_forward(x, W, NULL, ref, rows, in, out);
    dev_poison(d_y, (size_t)(rows * out) * 4);
    ck_assert_int_eq(rp_cuda_linear_forward(hb, d_x, d_W, d_y, rows, in, out, 0), 0);
    dev_download(got, d_y, (size_t)(rows * out) * 4);
    CHECK_REL(got, ref, (size_t)(rows * out), tol, "linear forward");
    cudaMemcpy(d_y, acc0, (size_t)(rows * out) * 4, cudaMemcpyHostToDevice);
    ck_assert_int_eq(rp_cuda_linear_forward(hb, d_x, d_W, d_y, rows, in, out, 1), 0);
    for (int64_t i = 0; i < rows * out; i++)
        ref[i] += acc0[i];
    dev_download(got, d_y, (size_t)(rows * out) * 4);
    CHECK_REL(got, ref, (size_t)(rows * out), tol, "linear forward accumulate");

    /* dx = dy W, dx += dy W */
    rp_linear_backward_input(dy, W, ref, rows, in, out, 0);
    dev_poison(d_dx, (size_t)(rows * in) * 4);
    ck_assert_int_eq(rp_cuda_linear_backward_input(hb, d_dy, d_W, d_dx, rows, in, out, 0), 0);
    dev_download(got, d_dx, (size_t)(rows * in) * 4);
    CHECK_REL(got, ref, (size_t)(rows * in), tol, "linear backward input");
    memcpy(ref, dx0, (size_t)(rows * in) * 4);
    rp_linear_backward_input(dy, W, ref, rows, in, out, 1);
    cudaMemcpy(d_dx, dx0, (size_t)(rows * in) * 4, cudaMemcpyHostToDevice);
    ck_assert_int_eq(rp_cuda_linear_backward_input(hb, d_dy, d_W, d_dx, rows, in, out, 1), 0);
    dev_download(got, d_dx, (size_t)(rows * in) * 4);
    CHECK_REL(got, ref, (size_t)(rows * in), tol, "linear backward input accumulate");

    /* dW += dy^T x, checked as the increment (dW0 would hide errors) */
    memcpy(ref, dW0, (size_t)(out * in) * 4);
    rp_linear_backward_weight(dy, x, ref, NULL, rows, in, out);
    ck_assert_int_eq(rp_cuda_linear_backward_weight(hb, d_dy, d_x, d_dW, rows, in, out), 0);
    dev_download(got, d_dW, (size_t)(out * in) * 4);
    for (int64_t i = 0; i < out * in; i++) {
        ref[i] -= dW0[i];
        got[i] -= dW0[i];
    }
    CHECK_REL(got, ref, (size_t)(out * in), rounded ? 1e-4 : BF16_TOL, "linear backward weight");

    /* bf16 output of the general GEMM: the attention's dout path */
    uint16_t *d_yb = dev_alloc((size_t)(rows * out) * 2), *gotb = malloc((size_t)(rows * out) * 2);
    dev_poison(d_yb, (size_t)(rows * out) * 2);
    ck_assert_int_eq(
        rp_cuda_gemm(hb, 0, 1, rows, out, in, 1.0f, d_x, in, d_W, in, 0.0f, d_yb, 1, out), 0);
    dev_download(gotb, d_yb, (size_t)(rows * out) * 2);
    rp_linear_forward(x, W, NULL, ref, rows, in, out);
    for (int64_t i = 0; i < rows * out; i++)
        got[i] = rp_bf16_to_f32(gotb[i]);
    CHECK_REL(got, ref, (size_t)(rows * out), BF16_TOL, "gemm bf16 output");

    cudaFree(d_x), cudaFree(d_W), cudaFree(d_dy), cudaFree(d_y), cudaFree(d_dx), cudaFree(d_dW);
    cudaFree(d_yb);
    free(x), free(W), free(dy), free(dW0), free(acc0), free(dx0), free(ref), free(got), free(gotb);
}

START_TEST(linear_gemms_match_cpu)
{
    /* the GEMMs' entry points, as the CUDA executor opens them */
    char why[1024];
    ck_assert_msg(rp_cublas_open(why, sizeof why) == 0, "rp_cublas_open: %s", why);
    cublasHandle_t hb;
    ck_assert_int_eq(rp_cublas.create(&hb), CUBLAS_STATUS_SUCCESS);
    for (int rounded = 0; rounded <= 1; rounded++) {
        linear_case(hb, 96, 64, 160, rounded);
        linear_case(hb, 37, 24, 40, rounded); /* odd sizes */
        linear_case(hb, 1, 128, 7, rounded);
    }
    rp_cublas.destroy(hb);
}
END_TEST

static Suite *cuda_kernels_suite(void)
{
    Suite *s = suite_create("cuda_kernels");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, convert_matches_host_rounding);
    tcase_add_test(tc, embed_forward_backward_match_cpu);
    tcase_add_test(tc, rmsnorm_matches_cpu);
    tcase_add_test(tc, colsum_matches_cpu_and_repeats);
    tcase_add_test(tc, rope_matches_cpu);
    tcase_add_test(tc, swiglu_and_adds_match_formulas);
    tcase_add_test(tc, linear_gemms_match_cpu);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    return cuda_test_main(argc, argv, cuda_kernels_suite);
}

#else /* no CUDA back end in this build */

static Suite *cuda_kernels_suite(void)
{
    return suite_create("cuda_kernels");
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return rp_check_main(argc, argv, cuda_kernels_suite, "serial");
    return RP_TEST_SKIP;
}

#endif
