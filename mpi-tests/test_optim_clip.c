/* Proves: rp_clip_sumsq equals a brute-force long-double sum of squares to
 * 1e-12 relative for sizes around the block boundaries and for a tensor of
 * millions of elements, and is bit-identical for 1, 2 and 3 threads;
 * rp_clip_coef gives torch's clip_grad_norm_ coefficient (same fp32 arithmetic)
 * max_norm / (norm + 1e-6), clamped to 1, is 1 with clipping off, and
 * reports NaN/Inf gradients (RP_ERR_NUMERIC) and a bad max norm. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "optim/clip.h"
#include "rp_check.h"

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65536.0f) * 2.0f - 1.0f;
}

/* values over several decades, so ordering errors would show */
static float *make_grad(size_t n, unsigned seed)
{
    float *g = malloc((n ? n : 1) * sizeof *g);
    ck_assert(g);
    for (size_t i = 0; i < n; i++)
        g[i] = frand(&seed) * ldexpf(1.0f, (int)(i % 23) - 11);
    return g;
}

static long double brute(const float *g, size_t n)
{
    long double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (long double)g[i] * (long double)g[i];
    return s;
}

START_TEST(sumsq_matches_brute_force)
{
    const size_t sizes[] = {0, 1, 7, 8, 9, 16383, 16384, 16385, 100001, 5000011};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        float *g = make_grad(n, (unsigned)k + 1);
        double got = rp_clip_sumsq(g, n);
        long double want = brute(g, n);
        if (n == 0)
            ck_assert(got == 0.0);
        else
            ck_assert_msg(fabsl((long double)got - want) <= 1e-12L * want,
                          "n=%zu: %.17g vs brute force %.17Lg", n, got, want);
        free(g);
    }
}
END_TEST

START_TEST(sumsq_thread_count_independent)
{
    const size_t n = 3000017;
    float *g = make_grad(n, 5);
    omp_set_num_threads(1);
    double s1 = rp_clip_sumsq(g, n);
    omp_set_num_threads(2);
    double s2 = rp_clip_sumsq(g, n);
    omp_set_num_threads(3);
    double s3 = rp_clip_sumsq(g, n);
    ck_assert_msg(memcmp(&s1, &s2, sizeof s1) == 0 && memcmp(&s1, &s3, sizeof s1) == 0,
                  "sums differ: %a %a %a", s1, s2, s3);
    free(g);
}
END_TEST

START_TEST(coef_follows_torch)
{
    rp_error err = {0};
    double norm;
    float coef;
    /* norm 5 above max_norm 1: coef = 1 / (5 + 1e-6) */
    ck_assert_int_eq(rp_clip_coef(25.0, 1.0, &norm, &coef, &err), RP_OK);
    ck_assert(norm == 5.0);
    ck_assert(coef == 1.0f / (5.0f + 1e-6f));
    /* within the limit: torch clamps the coefficient to 1 */
    ck_assert_int_eq(rp_clip_coef(25.0, 10.0, &norm, &coef, &err), RP_OK);
    ck_assert(coef == 1.0f);
    /* exactly at the limit: 5 / (5 + 1e-6) < 1, torch scales (barely) */
    ck_assert_int_eq(rp_clip_coef(25.0, 5.0, &norm, &coef, &err), RP_OK);
    ck_assert(coef == 5.0f / (5.0f + 1e-6f) && coef < 1.0f);
    /* clipping off still reports the norm */
    ck_assert_int_eq(rp_clip_coef(4.0, 0.0, &norm, &coef, &err), RP_OK);
    ck_assert(norm == 2.0 && coef == 1.0f);
    /* zero gradient: nothing to clip */
    ck_assert_int_eq(rp_clip_coef(0.0, 1.0, &norm, &coef, &err), RP_OK);
    ck_assert(norm == 0.0 && coef == 1.0f);
    /* end to end over two "tensors": [3, 4] and [12] -> norm 13 */
    float a[] = {3, 4}, b[] = {12};
    double ss = rp_clip_sumsq(a, 2) + rp_clip_sumsq(b, 1);
    ck_assert_int_eq(rp_clip_coef(ss, 6.5, &norm, &coef, &err), RP_OK);
    ck_assert(norm == 13.0 && coef == 6.5f / (13.0f + 1e-6f));
    /* a norm that is not a round number, value from torch 2.x:
     * t = torch.tensor(0.7); (0.3 / (t + 1e-6)).item() == 0x1.b6db46p-2 */
    ck_assert_int_eq(rp_clip_coef(0.49, 0.3, &norm, &coef, &err), RP_OK);
    ck_assert_msg(coef == 0x1.b6db46p-2f, "coef %a", coef);
}
END_TEST

START_TEST(coef_reports_non_finite)
{
    rp_error err = {0};
    double norm;
    float coef = 0;
    float g[] = {1, 2, NAN, 3};
    ck_assert_int_eq(rp_clip_coef(rp_clip_sumsq(g, 4), 1.0, &norm, &coef, &err), RP_ERR_NUMERIC);
    ck_assert(isnan(norm) && coef == 1.0f);
    ck_assert_msg(strstr(err.msg, "not finite"), "message: %s", err.msg);
    g[2] = -INFINITY;
    rp_error_clear(&err);
    /* reported even with clipping off: the update would poison the weights */
    ck_assert_int_eq(rp_clip_coef(rp_clip_sumsq(g, 4), 0.0, &norm, &coef, &err), RP_ERR_NUMERIC);
    ck_assert(isinf(norm));
    /* a gradient too large for fp32 squares still has a finite double norm */
    float big[] = {3e38f, 3e38f};
    ck_assert_int_eq(rp_clip_coef(rp_clip_sumsq(big, 2), 1.0, &norm, &coef, &err), RP_OK);
    ck_assert(isfinite(norm) && coef < 1e-38f);
    rp_error_clear(&err);
    ck_assert_int_eq(rp_clip_coef(1.0, NAN, &norm, &coef, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "max norm"), "message: %s", err.msg);
    ck_assert_int_eq(rp_clip_coef(-1.0, 1.0, &norm, &coef, &err), RP_ERR_INVALID_ARG);
}
END_TEST

static Suite *optim_clip_suite(void)
{
    Suite *s = suite_create("optim_clip");
    TCase *tc = tcase_create("clip");
    tcase_add_test(tc, sumsq_matches_brute_force);
    tcase_add_test(tc, sumsq_thread_count_independent);
    tcase_add_test(tc, coef_follows_torch);
    tcase_add_test(tc, coef_reports_non_finite);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(optim_clip_suite, "serial")
