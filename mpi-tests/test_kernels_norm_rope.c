/* Proves: RMSNorm equals the direct formula w * x / sqrt(mean(x^2) + eps)
 * and its backward the finite-difference derivative (dx, dw; accumulate and
 * in-place modes); its bits are those of one row at a time (the kernel
 * takes rows four together), for row counts around four and a dim that is
 * not a multiple of eight, in place and accumulating; RoPE inverse frequencies equal the closed forms (plain
 * theta^(-2i/d), and Llama 3.1 scaling: kept, divided, interpolated bands);
 * RoPE rotates pairs (i, i + d/2) by position * frequency, restarts
 * positions per sequence, makes q.k depend only on the position difference,
 * and its inverse is its transpose. YaRN (gpt-oss, issue 35): the inverse
 * frequencies bit for bit and the attention factor exactly as transformers'
 * _compute_yarn_parameters returns them (its one power correctly rounded:
 * torch's own is SLEEF's, within 1 ulp, also checked), over cases that reach every
 * branch (truncated or not, defaults, mscale ratio, a given factor, the
 * range clamped at 0, low == high, factor 1; mpi-tests/rope_yarn_fixture.h
 * from tools/gen_yarn_fixture.py), and the CPU cos/sin table times the
 * factor equal to GptOssRotaryEmbedding's scaled tables for gpt-oss-20b. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/rope_freq.h"
#include "rope_yarn_fixture.h"
#include "rp_check.h"

static float *rnd(size_t n, uint64_t seed, float mean, float sd)
{
    float *v = malloc(n * sizeof(float));
    rp_rng_fill_normal(v, n, seed, 4, 0, mean, sd);
    return v;
}

enum { R = 5, D = 24 };

START_TEST(rmsnorm_direct_formula)
{
    float *x = rnd(R * D, 1, 0, 2), *w = rnd(D, 2, 1, 0.3f), y[R * D], rstd[R];
    const float eps = 1e-5f;
    rp_rmsnorm_forward(x, w, y, rstd, R, D, eps);
    for (int r = 0; r < R; r++) {
        double ms = 0;
        for (int j = 0; j < D; j++)
            ms += (double)x[r * D + j] * x[r * D + j] / D;
        double inv = 1 / sqrt(ms + eps);
        ck_assert_double_eq_tol(rstd[r], inv, 1e-6 * inv);
        for (int j = 0; j < D; j++) {
            double ref = w[j] * x[r * D + j] * inv;
            ck_assert_double_eq_tol(y[r * D + j], ref, 1e-6 * (fabs(ref) + 1e-3));
        }
    }
    /* in place */
    float z[R * D];
    memcpy(z, x, sizeof z);
    rp_rmsnorm_forward(z, w, z, NULL, R, D, eps);
    ck_assert_mem_eq(z, y, sizeof z);
    free(x);
    free(w);
}
END_TEST

static double norm_loss(const float *x, const float *w, const float *c, float eps)
{
    float y[R * D];
    rp_rmsnorm_forward(x, w, y, NULL, R, D, eps);
    double s = 0;
    for (int i = 0; i < R * D; i++)
        s += (double)c[i] * y[i];
    return s;
}

START_TEST(rmsnorm_backward_finite_differences)
{
    float *x = rnd(R * D, 1, 0, 2), *w = rnd(D, 2, 1, 0.3f), *c = rnd(R * D, 3, 0, 1);
    const float eps = 1e-5f;
    float rstd[R], y[R * D], dx[R * D], dw[D];
    rp_rmsnorm_forward(x, w, y, rstd, R, D, eps);
    for (int j = 0; j < D; j++)
        dw[j] = 1.0f; /* dw accumulates */
    rp_rmsnorm_backward(x, w, rstd, c, dx, dw, R, D, 0);
    /* elementwise central differences: L = sum c*y is O(10) with fp32 noise
     * ~1e-6; h = 1e-2 gives noise 5e-5 and O(h^2) truncation ~1e-5 */
    const float h = 1e-2f;
    for (int i = 0; i < R * D; i++) {
        float s = x[i];
        x[i] = s + h;
        double lp = norm_loss(x, w, c, eps);
        x[i] = s - h;
        double lm = norm_loss(x, w, c, eps);
        x[i] = s;
        ck_assert_msg(fabs((lp - lm) / (2 * h) - dx[i]) <= 1e-3 * fabs(dx[i]) + 3e-4, "dx[%d]", i);
    }
    for (int j = 0; j < D; j++) {
        float s = w[j];
        w[j] = s + h;
        double lp = norm_loss(x, w, c, eps);
        w[j] = s - h;
        double lm = norm_loss(x, w, c, eps);
        w[j] = s;
        ck_assert_msg(fabs((lp - lm) / (2 * h) - (dw[j] - 1.0)) <= 1e-3 * fabs(dw[j] - 1) + 3e-4,
                      "dw[%d]", j);
    }
    /* accumulate mode adds; in-place (dx aliasing dy) gives the same bits */
    float acc[R * D], inplace[R * D];
    for (int i = 0; i < R * D; i++)
        acc[i] = 0.25f;
    rp_rmsnorm_backward(x, w, rstd, c, acc, NULL, R, D, 1);
    for (int i = 0; i < R * D; i++)
        ck_assert_float_eq(acc[i], 0.25f + dx[i]);
    memcpy(inplace, c, sizeof inplace);
    rp_rmsnorm_backward(x, w, rstd, inplace, inplace, NULL, R, D, 0);
    ck_assert_mem_eq(inplace, dx, sizeof dx);
    free(x);
    free(w);
    free(c);
}
END_TEST

/* RMSNorm one row at a time, as the kernel had it before rows went in groups */
static void rmsnorm_row_by_row(const float *x, const float *w, float *y, float *rstd,
                               const float *dy, float *dx, int64_t rows, int64_t dim, float eps)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim, *dyr = dy + r * dim;
        double ss = 0.0;
        for (int64_t j = 0; j < dim; j++)
            ss += (double)xr[j] * (double)xr[j];
        float var = (float)(ss / (double)dim);
        const float s = 1.0f / sqrtf(var + eps);
        rstd[r] = s;
        for (int64_t j = 0; j < dim; j++)
            y[r * dim + j] = w[j] * (xr[j] * s);
        double dot = 0.0;
        for (int64_t j = 0; j < dim; j++)
            dot += (double)(w[j] * dyr[j]) * (double)xr[j];
        float c = (float)(dot / (double)dim) * s * s * s;
        for (int64_t j = 0; j < dim; j++)
            dx[r * dim + j] = s * (w[j] * dyr[j]) - c * xr[j];
    }
}

START_TEST(rmsnorm_bits_of_one_row_at_a_time)
{
    enum { MAXR = 9, MAXD = 37 };
    const int64_t dims[] = {32, 37};
    float x[MAXR * MAXD], w[MAXD], dy[MAXR * MAXD], y[MAXR * MAXD], dx[MAXR * MAXD];
    float ry[MAXR * MAXD], rdx[MAXR * MAXD], rstd[MAXR], rrstd[MAXR], z[MAXR * MAXD];
    rp_rng_fill_normal(x, MAXR * MAXD, 21, 1, 0, 0.0f, 2.0f);
    rp_rng_fill_normal(w, MAXD, 21, 2, 0, 1.0f, 0.3f);
    rp_rng_fill_normal(dy, MAXR * MAXD, 21, 3, 0, 0.0f, 1.0f);
    for (int di = 0; di < 2; di++)
        for (int64_t rows = 1; rows <= MAXR; rows++) {
            const int64_t d = dims[di];
            const size_t bytes = sizeof(float) * (size_t)(rows * d);
            rmsnorm_row_by_row(x, w, ry, rrstd, dy, rdx, rows, d, 1e-6f);
            rp_rmsnorm_forward(x, w, y, rstd, rows, d, 1e-6f);
            ck_assert_mem_eq(y, ry, bytes);
            ck_assert_mem_eq(rstd, rrstd, sizeof(float) * (size_t)rows);
            memcpy(z, x, bytes);
            rp_rmsnorm_forward(z, w, z, NULL, rows, d, 1e-6f); /* y over x */
            ck_assert_mem_eq(z, ry, bytes);
            rp_rmsnorm_backward(x, w, rstd, dy, dx, NULL, rows, d, 0);
            ck_assert_mem_eq(dx, rdx, bytes);
            memcpy(z, dy, bytes);
            rp_rmsnorm_backward(x, w, rstd, z, z, NULL, rows, d, 0); /* dx over dy */
            ck_assert_mem_eq(z, rdx, bytes);
            for (int64_t i = 0; i < rows * d; i++)
                z[i] = 0.25f;
            rp_rmsnorm_backward(x, w, rstd, dy, z, NULL, rows, d, 1); /* dx += */
            for (int64_t i = 0; i < rows * d; i++) {
                const float want = 0.25f + rdx[i];
                ck_assert_mem_eq(&z[i], &want, sizeof want);
            }
        }
}
END_TEST

START_TEST(inv_freq_plain_closed_form)
{
    float f[64];
    rp_rope_inv_freq(f, 128, 500000.0, NULL);
    for (int i = 0; i < 64; i++) {
        double ref = pow(500000.0, -2.0 * i / 128.0);
        ck_assert_double_eq_tol(f[i], ref, 2e-6 * ref);
    }
    ck_assert_float_eq(f[0], 1.0f);
}
END_TEST

START_TEST(inv_freq_llama3_bands)
{
    /* Llama 3.1 8B: theta 500000, head_dim 128, factor 8, low 1, high 4,
     * original context 8192. Wavelength 2 pi / f: below 8192/4 = 2048 kept,
     * above 8192 divided by 8, between: (1 - s) f / 8 + s f with
     * s = (8192 / wavelength - 1) / (4 - 1). */
    rp_rope_llama3 l3 = {8.0, 1.0, 4.0, 8192.0};
    float f[64];
    rp_rope_inv_freq(f, 128, 500000.0, &l3);
    int kept = 0, divided = 0, mixed = 0;
    for (int i = 0; i < 64; i++) {
        double base = pow(500000.0, -2.0 * i / 128.0), wl = 2 * M_PI / base, ref;
        if (wl < 2048) {
            ref = base;
            kept++;
        } else if (wl > 8192) {
            ref = base / 8;
            divided++;
        } else {
            double s = (8192 / wl - 1) / 3;
            ref = (1 - s) * base / 8 + s * base;
            mixed++;
        }
        ck_assert_msg(fabs(f[i] - ref) <= 1e-5 * ref, "inv_freq[%d] = %.9g, closed form %.9g", i,
                      f[i], ref);
    }
    ck_assert(kept > 0 && divided > 0 && mixed > 0);
    /* a published value: the highest frequency is untouched, the lowest
     * is theta^(-126/128) / 8 */
    ck_assert_float_eq(f[0], 1.0f);
    ck_assert_double_eq_tol(f[63], pow(500000.0, -126.0 / 128.0) / 8, 1e-12);
}
END_TEST

enum { NS = 2, SL = 9, NHEAD = 3, HD = 8, HALF = HD / 2 };

START_TEST(rope_rotates_pairs)
{
    float inv[HALF], cs[2 * SL * HALF];
    rp_rope_inv_freq(inv, HD, 10000.0, NULL);
    rp_rope_table(cs, inv, SL, HALF);
    float *x = rnd(NS * SL * NHEAD * HD, 5, 0, 1), *y = malloc(sizeof(float) * NS * SL * NHEAD * HD);
    memcpy(y, x, sizeof(float) * NS * SL * NHEAD * HD);
    rp_rope_apply(y, cs, NS, SL, NULL, NHEAD, HD, 0);
    for (int b = 0; b < NS; b++)
        for (int p = 0; p < SL; p++) /* position restarts in each sequence */
            for (int h = 0; h < NHEAD; h++)
                for (int i = 0; i < HALF; i++) {
                    size_t o = ((size_t)(b * SL + p) * NHEAD + h) * HD;
                    double a = p * pow(10000.0, -2.0 * i / HD);
                    double x1 = x[o + i], x2 = x[o + i + HALF];
                    ck_assert_double_eq_tol(y[o + i], x1 * cos(a) - x2 * sin(a), 1e-5);
                    ck_assert_double_eq_tol(y[o + i + HALF], x2 * cos(a) + x1 * sin(a), 1e-5);
                }
    /* inverse undoes it (rotation transpose) */
    rp_rope_apply(y, cs, NS, SL, NULL, NHEAD, HD, 1);
    for (int i = 0; i < NS * SL * NHEAD * HD; i++)
        ck_assert_float_eq_tol(y[i], x[i], 1e-5f);
    free(x);
    free(y);
}
END_TEST

START_TEST(rope_positions_restart_at_segments)
{
    /* documents packed into a sequence: rotating with segment starts equals
     * rotating each segment as a sequence of its own (positions from 0),
     * bit for bit; segments [0,4), [4,5) (one token), [5,9) */
    float inv[HALF], cs[2 * SL * HALF];
    rp_rope_inv_freq(inv, HD, 10000.0, NULL);
    rp_rope_table(cs, inv, SL, HALF);
    const int32_t seg[SL] = {0, 0, 0, 0, 4, 5, 5, 5, 5};
    const int bounds[4] = {0, 4, 5, 9};
    const size_t row = NHEAD * HD;
    float *x = rnd(SL * row, 8, 0, 1), *packed = malloc(sizeof(float) * SL * row);
    float *alone = malloc(sizeof(float) * SL * row);
    for (int inverse = 0; inverse < 2; inverse++) {
        memcpy(packed, x, sizeof(float) * SL * row);
        memcpy(alone, x, sizeof(float) * SL * row);
        rp_rope_apply(packed, cs, 1, SL, seg, NHEAD, HD, inverse);
        for (int i = 0; i < 3; i++) { /* a table of the segment's length */
            int L = bounds[i + 1] - bounds[i];
            float csl[2 * SL * HALF];
            rp_rope_table(csl, inv, L, HALF);
            rp_rope_apply(alone + bounds[i] * row, csl, 1, L, NULL, NHEAD, HD, inverse);
        }
        ck_assert_mem_eq(packed, alone, sizeof(float) * SL * row);
    }
    free(x);
    free(packed);
    free(alone);
}
END_TEST

START_TEST(rope_relative_positions)
{
    /* the same q and k vectors at every position: after RoPE, q_m . k_n is a
     * function of m - n only */
    float inv[HALF], cs[2 * SL * HALF], q[SL * HD], k[SL * HD];
    rp_rope_llama3 l3 = {8.0, 1.0, 4.0, 64.0};
    rp_rope_inv_freq(inv, HD, 10000.0, &l3);
    rp_rope_table(cs, inv, SL, HALF);
    float *q0 = rnd(HD, 6, 0, 1), *k0 = rnd(HD, 7, 0, 1);
    for (int p = 0; p < SL; p++) {
        memcpy(q + p * HD, q0, sizeof(float) * HD);
        memcpy(k + p * HD, k0, sizeof(float) * HD);
    }
    rp_rope_apply(q, cs, 1, SL, NULL, 1, HD, 0);
    rp_rope_apply(k, cs, 1, SL, NULL, 1, HD, 0);
    for (int d = 0; d < SL - 2; d++) {
        double first = 0;
        for (int m = d; m < SL; m++) {
            double s = 0;
            for (int j = 0; j < HD; j++)
                s += (double)q[m * HD + j] * k[(m - d) * HD + j];
            if (m == d)
                first = s;
            ck_assert_double_eq_tol(s, first, 1e-5);
        }
    }
    free(q0);
    free(k0);
}
END_TEST

START_TEST(yarn_matches_transformers)
{
    const int ncases = (int)(sizeof yarn_cases / sizeof yarn_cases[0]);
    for (int c = 0; c < ncases; c++) {
        const yarn_case *k = &yarn_cases[c];
        rp_rope_yarn y = {k->factor, k->beta_fast, k->beta_slow,
                          k->original_max_position_embeddings, k->truncate,
                          k->attention_factor, k->mscale, k->mscale_all_dim};
        float f[64];
        double a = rp_rope_yarn_inv_freq(f, k->head_dim, k->theta, &y);
        ck_assert_msg(a == k->attention, "%s: attention factor %.17g, transformers %.17g",
                      k->name, a, k->attention);
        for (int i = 0; i < k->head_dim / 2; i++) {
            /* bit for bit: every fp32 step as transformers takes it */
            ck_assert_msg(f[i] == k->inv_freq_exact[i],
                          "%s: inv_freq[%d] = %a, transformers (exact power) %a", k->name, i,
                          f[i], k->inv_freq_exact[i]);
            /* and within SLEEF's 1 ulp of transformers' own fp32 output */
            ck_assert_msg(f[i] == k->inv_freq[i] || nextafterf(f[i], INFINITY) == k->inv_freq[i] ||
                              nextafterf(f[i], -INFINITY) == k->inv_freq[i],
                          "%s: inv_freq[%d] = %a, transformers %a", k->name, i, f[i],
                          k->inv_freq[i]);
        }
    }
    /* the cases reach the branches they are named for */
    ck_assert(yarn_cases[0].attention > 1.34 && yarn_cases[0].attention < 1.35); /* 0.1 ln 32 + 1 */
    ck_assert_double_eq(yarn_cases[4].attention, 1.5);
    ck_assert_double_eq(yarn_cases[6].attention, 1.0);
}
END_TEST

/* cos and sin as the model would form them: the CPU table of the YaRN
 * frequencies, each entry times the attention factor in fp32. libm's and
 * torch's cosf/sinf may differ in the last place; the products are
 * compared to 2 ulp of their magnitude (4 ulp near 0, the angle's own
 * rounding dominating there). */
START_TEST(yarn_cos_sin_tables)
{
    const yarn_case *k = &yarn_cases[0];
    rp_rope_yarn y = {k->factor, k->beta_fast, k->beta_slow, k->original_max_position_embeddings,
                      k->truncate, k->attention_factor, k->mscale, k->mscale_all_dim};
    float inv[32];
    const float a = (float)rp_rope_yarn_inv_freq(inv, 64, k->theta, &y);
    const int npos = (int)(sizeof yarn_positions / sizeof yarn_positions[0]);
    const int64_t seqlen = yarn_positions[npos - 1] + 1;
    float *cs = malloc(sizeof(float) * 2 * (size_t)seqlen * 32);
    ck_assert_ptr_nonnull(cs);
    rp_rope_table(cs, inv, seqlen, 32);
    const float *sn = cs + seqlen * 32;
    double worst = 0;
    for (int p = 0; p < npos; p++)
        for (int i = 0; i < 32; i++) {
            const int64_t at = (int64_t)yarn_positions[p] * 32 + i;
            const float c = cs[at] * a, s = sn[at] * a;
            const double dc = fabs((double)c - yarn_cos[p][i]), ds = fabs((double)s - yarn_sin[p][i]);
            const double uc = fmax(fabs(yarn_cos[p][i]), 0.5) * 0x1p-23 * 2;
            const double us = fmax(fabs(yarn_sin[p][i]), 0.5) * 0x1p-23 * 2;
            ck_assert_msg(dc <= uc && ds <= us, "position %d, i %d: cos %a vs %a, sin %a vs %a",
                          yarn_positions[p], i, c, yarn_cos[p][i], s, yarn_sin[p][i]);
            worst = fmax(worst, fmax(dc, ds));
        }
    /* the factor is there: at position 0 cos is a, not 1 */
    ck_assert_float_eq(yarn_cos[0][0], a);
    free(cs);
}
END_TEST

Suite *norm_rope_suite(void)
{
    Suite *s = suite_create("kernels_norm_rope");
    TCase *tc = tcase_create("norm_rope");
    tcase_add_test(tc, rmsnorm_direct_formula);
    tcase_add_test(tc, rmsnorm_backward_finite_differences);
    tcase_add_test(tc, rmsnorm_bits_of_one_row_at_a_time);
    tcase_add_test(tc, inv_freq_plain_closed_form);
    tcase_add_test(tc, inv_freq_llama3_bands);
    tcase_add_test(tc, yarn_matches_transformers);
    tcase_add_test(tc, yarn_cos_sin_tables);
    tcase_add_test(tc, rope_rotates_pairs);
    tcase_add_test(tc, rope_relative_positions);
    tcase_add_test(tc, rope_positions_restart_at_segments);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(norm_rope_suite, "serial")
