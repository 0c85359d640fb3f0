/* Proves: bf16 conversion rounds to nearest even and keeps NaN/Inf; bf16
 * widens in place exactly (every bit pattern); fp16 decoding is exact; the counter-based RNG is a pure function of
 * (seed, stream, index) with normal moments; every status has a name. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "rp_check.h"

static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

START_TEST(bf16_rounds_to_nearest_even)
{
    ck_assert_uint_eq(rp_f32_to_bf16(1.0f), 0x3f80);
    /* exactly halfway between 0x3f80 and 0x3f81: ties to even (0x3f80) */
    ck_assert_uint_eq(rp_f32_to_bf16(from_bits(0x3f808000u)), 0x3f80);
    /* halfway between 0x3f81 and 0x3f82: ties to even (0x3f82) */
    ck_assert_uint_eq(rp_f32_to_bf16(from_bits(0x3f818000u)), 0x3f82);
    /* just above halfway rounds up */
    ck_assert_uint_eq(rp_f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
    ck_assert_uint_eq(rp_f32_to_bf16(-2.0f), 0xc000);
    /* largest finite rounds to infinity when it overflows */
    ck_assert_uint_eq(rp_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);
    ck_assert_uint_eq(rp_f32_to_bf16(INFINITY), 0x7f80);
    ck_assert_float_eq(rp_bf16_to_f32(0x3f80), 1.0f);
}
END_TEST

START_TEST(bf16_keeps_nan)
{
    /* a NaN whose payload lives only in the low bits must not become Inf */
    uint16_t h = rp_f32_to_bf16(from_bits(0x7f800001u));
    ck_assert(isnan(rp_bf16_to_f32(h)));
    h = rp_f32_to_bf16(from_bits(0xffffffffu));
    ck_assert(isnan(rp_bf16_to_f32(h)));
    ck_assert_uint_eq(h & 0x8000, 0x8000);
}
END_TEST

/* bf16 values in the first half of a buffer widen in place to the same
 * values as the scalar conversion, for every bf16 bit pattern (NaN
 * patterns compared bitwise after the scalar's widening). */
START_TEST(bf16_widens_in_place)
{
    const size_t n = 65536;
    float *buf = malloc(n * sizeof(float));
    uint16_t *h = (uint16_t *)buf;
    for (size_t i = 0; i < n; i++)
        h[i] = (uint16_t)(n - 1 - i); /* descending, so no element meets itself */
    rp_bf16_widen_in_place(buf, n);
    for (size_t i = 0; i < n; i++) {
        float want = rp_bf16_to_f32((uint16_t)(n - 1 - i));
        ck_assert_msg(memcmp(&buf[i], &want, 4) == 0, "element %zu", i);
    }
    free(buf);
    rp_bf16_widen_in_place(NULL, 0); /* nothing to do */
}
END_TEST

START_TEST(f16_decodes_exactly)
{
    ck_assert_float_eq(rp_f16_to_f32(0x3c00), 1.0f);
    ck_assert_float_eq(rp_f16_to_f32(0xc000), -2.0f);
    ck_assert_float_eq(rp_f16_to_f32(0x7bff), 65504.0f);
    ck_assert_float_eq(rp_f16_to_f32(0x0001), ldexpf(1.0f, -24)); /* smallest subnormal */
    ck_assert_float_eq(rp_f16_to_f32(0x0200), ldexpf(1.0f, -15));
    ck_assert(isinf(rp_f16_to_f32(0x7c00)));
    ck_assert(isnan(rp_f16_to_f32(0x7e00)));
}
END_TEST

START_TEST(rng_is_counter_based)
{
    uint32_t a[4], b[4], c[4];
    rp_philox4x32(42, 7, 1000, a);
    rp_philox4x32(42, 7, 1000, b);
    rp_philox4x32(42, 7, 1001, c);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert(memcmp(a, c, sizeof a) != 0);
    /* filling a range equals element-by-element draws: rank-independent */
    float x[64];
    rp_rng_fill_normal(x, 64, 5, rp_rng_stream_id("w"), 100, 0.0f, 1.0f);
    for (int i = 0; i < 64; i++)
        ck_assert_float_eq(x[i], rp_rng_normal(5, rp_rng_stream_id("w"), 100 + (uint64_t)i));
}
END_TEST

START_TEST(rng_normal_moments)
{
    const int n = 200000;
    double s = 0, s2 = 0, s4 = 0;
    for (int i = 0; i < n; i++) {
        double v = rp_rng_normal(1, 2, (uint64_t)i);
        s += v;
        s2 += v * v;
        s4 += v * v * v * v;
    }
    double mean = s / n, var = s2 / n - mean * mean, kurt = s4 / n;
    ck_assert_double_lt(fabs(mean), 0.01);
    ck_assert_double_lt(fabs(var - 1.0), 0.02);
    ck_assert_double_lt(fabs(kurt - 3.0), 0.1);
}
END_TEST

START_TEST(status_strings_named)
{
    const rp_status all[] = {RP_OK, RP_ERR_INVALID_ARG, RP_ERR_NOMEM, RP_ERR_UNSUPPORTED,
                             RP_ERR_IO, RP_ERR_FORMAT, RP_ERR_RANGE, RP_ERR_MISMATCH,
                             RP_ERR_MPI, RP_ERR_NO_DEVICE, RP_ERR_CUDA,
                             RP_ERR_DEVICE_MEMORY, RP_ERR_TIMEOUT, RP_ERR_NUMERIC,
                             RP_ERR_INTERNAL};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ck_assert_str_ne(rp_status_string(all[i]), "unknown status");
    ck_assert_str_eq(rp_status_string((rp_status)-12345), "unknown status");
    rp_error e;
    ck_assert_int_eq(rp_error_set(&e, RP_ERR_FORMAT, "field %s", "x"), RP_ERR_FORMAT);
    rp_error_prefix(&e, "file %s", "a.json");
    ck_assert_str_eq(e.msg, "file a.json: field x");
    /* a prefixed message longer than the buffer ends in "..." */
    char longer[RP_ERROR_MSG_MAX];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    rp_error_set(&e, RP_ERR_FORMAT, "%s", longer + 10);
    ck_assert_uint_eq(strlen(e.msg), RP_ERROR_MSG_MAX - 11);
    ck_assert_int_eq(rp_error_prefix(&e, "file %s", "a.json"), RP_ERR_FORMAT);
    ck_assert_uint_eq(strlen(e.msg), RP_ERROR_MSG_MAX - 1);
    ck_assert(strncmp(e.msg, "file a.json: xxx", 16) == 0);
    ck_assert_str_eq(e.msg + RP_ERROR_MSG_MAX - 4, "...");
}
END_TEST

static Suite *core_suite(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, bf16_rounds_to_nearest_even);
    tcase_add_test(tc, bf16_keeps_nan);
    tcase_add_test(tc, bf16_widens_in_place);
    tcase_add_test(tc, f16_decodes_exactly);
    tcase_add_test(tc, rng_is_counter_based);
    tcase_add_test(tc, rng_normal_moments);
    tcase_add_test(tc, status_strings_named);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(core_suite, "serial")
