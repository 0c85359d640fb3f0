/* Proves: the vector exp the x86-64-v3 CPU kernels use (kernels/cpu/
 * expf_vector.h) gives exactly the bits of the C library's expf for every
 * float of the ranges where exp is not a constant (|x| in [2^-27, 2^7):
 * the rounding of the reduction and the polynomial, the overflow and
 * subnormal edges), for infinities and NaNs, and for one of every 16 chunks
 * of 2^16 consecutive bit patterns elsewhere, which spans every exponent:
 * 19% of the 2^32 patterns, split over the OpenMP threads;
 * RP_TEST_EXHAUSTIVE=1 checks all 2^32 (on a 2-core machine 20-30 s alone,
 * over a minute beside the rest of make check); the self-check at first use agrees with that
 * verdict, and refuses a reference that differs from expf in one output;
 * rp_expf_array gives expf's bits on either path (and the vector exp out
 * of place), for lengths that are and are not multiples of eight; the
 * SwiGLU kernels, which now compute their exps a task at a time, give the
 * bits of their formulas with one expf per element, in place too.
 *
 * Where the vector exp is expected to match: glibc's FMA expf, whose
 * algorithm it repeats (glibc on an x86-64-v3 processor). Elsewhere the C
 * library may round otherwise (glibc's non-FMA expf does at two inputs, as
 * `GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2,-FMA` shows); the test then only
 * asks that the self-check saw it (the kernels fall back to expf). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cpu/expf_vector.h"
#include "kernels/cpu/swiglu.h"
#include "rp_check.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HAVE_VECTOR 1
#else
#define HAVE_VECTOR 0
#endif

static int vector_runs_here(void)
{
#if HAVE_VECTOR
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* glibc's FMA expf, the one the vector exp repeats: glibc on an x86-64-v3
 * processor, unless told not to use FMA (GLIBC_TUNABLES): recognised by
 * its result at 0x1.04845ep+5, one of the two inputs where glibc's
 * non-FMA expf rounds the other way */
static int vector_must_match(void)
{
#if HAVE_VECTOR && defined(__GLIBC__)
    volatile float x = 0x1.04845ep+5f;
    return __builtin_cpu_supports("x86-64-v3") && expf(x) == 0x1.f93e38p+46f;
#else
    return 0;
#endif
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

START_TEST(every_float_gives_expf_bits)
{
    if (!vector_runs_here()) {
        printf("no AVX2/FMA: the vector exp does not run here, nothing to compare\n");
        return;
    }
    /* 2^16 chunks of 2^16 consecutive bit patterns; a chunk's bits 7..14
     * are its patterns' biased exponent */
    const char *env = getenv("RP_TEST_EXHAUSTIVE");
    const int exhaustive = env && atoi(env) > 0;
    int64_t differ = 0, chunks = 0;
    uint32_t first = 0;
    int have_first = 0;
#pragma omp parallel reduction(+ : differ, chunks)
    {
        float x[4096], y[4096];
#pragma omp for schedule(dynamic, 16)
        for (int64_t chunk = 0; chunk < (1 << 16); chunk++) {
            const int exponent = (int)(chunk >> 7) & 0xff;
            if (!exhaustive && !(exponent >= 100 && exponent <= 133) && exponent != 255 &&
                chunk % 16 != 0)
                continue;
            chunks++;
            for (uint32_t j0 = 0; j0 < (1u << 16); j0 += 4096) {
                const uint32_t base = (uint32_t)chunk << 16 | j0;
                for (uint32_t j = 0; j < 4096; j++) {
                    const uint32_t u = base + j;
                    memcpy(&x[j], &u, sizeof u);
                }
                /* 4091 + 5: masked tails of 3 and 5 lanes too */
                rp_expf_vector(y, x, 4091);
                rp_expf_vector(y + 4091, x + 4091, 5);
                for (uint32_t j = 0; j < 4096; j++)
                    if (bits(y[j]) != bits(expf(x[j]))) {
                        differ++;
#pragma omp critical
                        if (!have_first)
                            have_first = 1, first = base + j;
                    }
            }
        }
    }
    float check_mismatch = 0.0f;
    const int64_t checked = rp_expf_vector_check(expf, &check_mismatch);
    printf("%s: %lld of %lld inputs differ from expf%s; self-check: %s (%lld inputs)\n",
           exhaustive ? "all 2^32 bit patterns"
                      : "the ranges and one chunk in 16 (RP_TEST_EXHAUSTIVE=1: all 2^32)",
           (long long)differ, (long long)chunks << 16,
           differ ? " (the first printed below)" : "", checked ? "matches" : "differs",
           (long long)checked);
    if (differ)
        printf("first difference at bits 0x%08x\n", first);
    fflush(stdout);
    if (vector_must_match())
        ck_assert_int_eq(differ, 0);
    /* a self-check that passes where the exhaustive run differs would let
     * the kernels use a wrong exp */
    if (differ)
        ck_assert_int_eq(checked, 0);
    else
        ck_assert_int_gt(checked, 300000);
}
END_TEST

/* expf with one output, exp(-1), one bit off */
static float expf_one_bit_off(float x)
{
    float y = expf(x);
    if (x == -1.0f) {
        uint32_t u = bits(y) ^ 1u;
        memcpy(&y, &u, sizeof u);
    }
    return y;
}

START_TEST(self_check_refuses_a_differing_reference)
{
    if (!vector_runs_here())
        return;
    float mismatch = 0.0f;
    ck_assert_int_eq(rp_expf_vector_check(expf_one_bit_off, &mismatch), 0);
    ck_assert_float_eq(mismatch, -1.0f);
}
END_TEST

START_TEST(array_gives_expf_bits_on_both_paths)
{
    enum { N = 8 * 37 + 5 };
    float x[N], y[N], z[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i - 3 * N / 4) * 0.37f; /* -103 ... 34, and a few past -88 */
    x[0] = NAN, x[1] = -INFINITY, x[2] = INFINITY, x[3] = 100.0f, x[4] = -0.0f;
    const int vector = rp_expf_vector_usable();
    printf("%s\n", rp_expf_vector_note());
    fflush(stdout);
    if (vector_must_match())
        ck_assert_int_eq(vector, 1);
    for (int path = 0; path <= vector; path++)
        for (int n = 0; n <= N; n += n < 20 ? 1 : 61) {
            memcpy(y, x, sizeof(float) * (size_t)n);
            rp_expf_array(y, n, path);
            if (path)
                rp_expf_vector(z, x, n); /* out of place */
            for (int i = 0; i < n; i++) {
                ck_assert_uint_eq(bits(y[i]), bits(expf(x[i])));
                if (path)
                    ck_assert_uint_eq(bits(z[i]), bits(expf(x[i])));
            }
        }
}
END_TEST

START_TEST(swiglu_gives_the_bits_of_one_expf_per_element)
{
    /* lengths around the kernel's tasks of 512 and the vector's 8 */
    const int64_t lengths[] = {1, 7, 8, 9, 511, 512, 513, 3 * 512 + 5};
    enum { N = 3 * 512 + 5 };
    static float g[N], u[N], dm[N], m[N], dg[N], du[N], g2[N], u2[N];
    rp_rng_fill_normal(g, N, 7, 1, 0, 0.0f, 4.0f);
    rp_rng_fill_normal(u, N, 7, 2, 0, 0.0f, 1.0f);
    rp_rng_fill_normal(dm, N, 7, 3, 0, 0.0f, 1.0f);
    g[3] = -100.0f, g[4] = 95.0f, g[5] = -0.0f, g[6] = 88.5f; /* expf's slow path */
    for (int li = 0; li < 8; li++) {
        const int64_t n = lengths[li];
        rp_swiglu_forward(g, u, n, m, 1, n);
        rp_swiglu_backward(g, u, n, dm, dg, du, 1, n);
        memcpy(g2, g, sizeof g), memcpy(u2, u, sizeof u);
        rp_swiglu_backward(g2, u2, n, dm, g2, u2, 1, n); /* dg over g, du over u */
        for (int64_t i = 0; i < n; i++) {
            const float gi = g[i], ui = u[i], sg = 1.0f / (1.0f + expf(-gi));
            const float silu = gi / (1.0f + expf(-gi));
            const float want_dg = dm[i] * ui * (sg * (1.0f + gi * (1.0f - sg)));
            const float want_du = dm[i] * silu;
            ck_assert_uint_eq(bits(m[i]), bits(g[i] / (1.0f + expf(-g[i])) * u[i]));
            ck_assert_uint_eq(bits(dg[i]), bits(want_dg));
            ck_assert_uint_eq(bits(du[i]), bits(want_du));
            ck_assert_uint_eq(bits(g2[i]), bits(want_dg));
            ck_assert_uint_eq(bits(u2[i]), bits(want_du));
        }
    }
}
END_TEST

Suite *expf_vector_suite(void)
{
    Suite *s = suite_create("expf_vector");
    TCase *tc = tcase_create("expf_vector");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, every_float_gives_expf_bits);
    tcase_add_test(tc, self_check_refuses_a_differing_reference);
    tcase_add_test(tc, array_gives_expf_bits_on_both_paths);
    tcase_add_test(tc, swiglu_gives_the_bits_of_one_expf_per_element);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(expf_vector_suite, "serial")
