/* Proves: the LoRA ops of the CPU kernel table (kernels/ops.h), called
 * through the table:
 *   - scaled_add is y = alpha * x (or y + alpha * x with accumulate) with
 *     the product and the sum each rounded to fp32, checked bit for bit
 *     against the same arithmetic in double rounded once (double rounding
 *     through double is exact for one fp32 operation, so a fused
 *     multiply-add would be caught); also with y aliasing x, with y NULL and
 *     y_compute given, a separate y_compute a copy of y, n == 0 writing
 *     nothing, and a missing y named in the error;
 *   - dropout keeps a fraction within 5 standard deviations of 1 - p over
 *     1e5 elements (p = 0.1, 0.5); a kept value is exactly x * (1 / (1 -
 *     p)) in fp32 (plus y with accumulate, the product rounded first), a
 *     dropped one exactly +0 (y unchanged but for y + 0); y may alias x;
 *   - the mask of a sample is the same whether its rows come in one call
 *     with another sample or in a call of their own, and equals a mask
 *     built here from rp_rng_uniform and this file's own FNV-1a over the
 *     key bytes the op table documents ("lora-dropout", then step, sample,
 *     layer, proj as 8 little-endian bytes each, the int32 fields sign
 *     extended); changing any field of the key changes the mask;
 *   - p == 0 copies x bit for bit (NaN payloads and -0 included) or adds it;
 *   - p outside [0, 1) (and NaN) and rows_per_sample < 1 are
 *     RP_ERR_INVALID_ARG, a dtype other than fp32 RP_ERR_UNSUPPORTED, each
 *     naming the op and writing nothing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/cpu/ops.h"
#include "kernels/ops.h"
#include "rp_check.h"

static const rp_kernel_ops *cpu = &rp_kernel_ops_cpu;

static float *uniform_floats(size_t n, uint64_t stream, float lo, float hi)
{
    float *v = malloc(n * sizeof(float) + 1);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * rp_rng_uniform(17, stream, i);
    return v;
}

static float *copy_floats(const float *x, size_t n)
{
    float *v = malloc(n * sizeof(float) + 1);
    ck_assert_ptr_nonnull(v);
    memcpy(v, x, n * sizeof(float));
    return v;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void expect_same_bits(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(bits(got[i]) == bits(want[i]), "%s: element %zu is %a (0x%08x), want %a "
                      "(0x%08x)", what, i, (double)got[i], bits(got[i]), (double)want[i],
                      bits(want[i]));
}

/* ---- scaled_add ---------------------------------------------------------- */

/* One fp32 operation is correctly rounded when done in double and rounded
 * to float once (53 >= 2 * 24 + 2), so these are the unfused results. */
static float unfused_product(float alpha, float x)
{
    return (float)((double)alpha * (double)x);
}

static float unfused_axpy(float y, float alpha, float x)
{
    return (float)((double)y + (double)unfused_product(alpha, x));
}

enum { N = 4099 };

START_TEST(scaled_add_is_unfused_fp32)
{
    rp_error err = {0};
    const float alpha = 0.3713f;
    float *x = uniform_floats(N, 1, -3.0f, 3.0f), *y0 = uniform_floats(N, 2, -3.0f, 3.0f);
    float *want = malloc(N * sizeof(float)), *want_acc = malloc(N * sizeof(float));
    int differs_from_fma = 0;
    for (int i = 0; i < N; i++) {
        want[i] = unfused_product(alpha, x[i]);
        want_acc[i] = unfused_axpy(y0[i], alpha, x[i]);
        differs_from_fma |= want_acc[i] != fmaf(alpha, x[i], y0[i]);
    }
    /* the inputs are ones where fusing would show */
    ck_assert(differs_from_fma);

    float *y = copy_floats(y0, N), *yc = uniform_floats(N, 3, 0, 1);
    ck_assert_int_eq(cpu->scaled_add(NULL, x, alpha, y, NULL, N, 0, &err), RP_OK);
    expect_same_bits(y, want, N, "y = alpha x");
    memcpy(y, y0, N * sizeof(float));
    ck_assert_int_eq(cpu->scaled_add(NULL, x, alpha, y, yc, N, 1, &err), RP_OK);
    expect_same_bits(y, want_acc, N, "y += alpha x");
    expect_same_bits(yc, want_acc, N, "y_compute of y += alpha x");
    /* the same buffer named twice is written once, with the result */
    memcpy(y, y0, N * sizeof(float));
    ck_assert_int_eq(cpu->scaled_add(NULL, x, alpha, y, y, N, 1, &err), RP_OK);
    expect_same_bits(y, want_acc, N, "y += alpha x, y_compute = y");

    /* y aliasing x */
    float *xy = copy_floats(x, N);
    ck_assert_int_eq(cpu->scaled_add(NULL, xy, alpha, xy, NULL, N, 0, &err), RP_OK);
    expect_same_bits(xy, want, N, "x = alpha x");
    memcpy(xy, x, N * sizeof(float));
    ck_assert_int_eq(cpu->scaled_add(NULL, xy, alpha, xy, NULL, N, 1, &err), RP_OK);
    for (int i = 0; i < N; i++)
        want_acc[i] = unfused_axpy(x[i], alpha, x[i]);
    expect_same_bits(xy, want_acc, N, "x += alpha x");

    /* y NULL: the result goes to y_compute */
    ck_assert_int_eq(cpu->scaled_add(NULL, x, alpha, NULL, yc, N, 0, &err), RP_OK);
    expect_same_bits(yc, want, N, "y_compute = alpha x");

    /* n == 0 writes nothing, whatever the pointers */
    memcpy(y, y0, N * sizeof(float));
    ck_assert_int_eq(cpu->scaled_add(NULL, x, alpha, y, NULL, 0, 1, &err), RP_OK);
    ck_assert_int_eq(cpu->scaled_add(NULL, NULL, alpha, NULL, NULL, 0, 1, &err), RP_OK);
    expect_same_bits(y, y0, N, "n == 0");

    /* accumulate needs y; without accumulate y or y_compute */
    ck_assert_int_eq(cpu->scaled_add(NULL, x, alpha, NULL, yc, N, 1, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "scaled_add") != NULL, "message: %s", err.msg);
    ck_assert_int_eq(cpu->scaled_add(NULL, x, alpha, NULL, NULL, N, 0, &err),
                     RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "scaled_add") != NULL, "message: %s", err.msg);
    free(x), free(y0), free(want), free(want_acc), free(y), free(yc), free(xy);
}
END_TEST

/* ---- dropout ------------------------------------------------------------- */

/* FNV-1a 64 over the key bytes, written out here from the definition in
 * kernels/ops.h and core/philox.h rather than by calling the library's. */
static uint64_t key_stream(int64_t step, int64_t sample, int32_t layer, int32_t proj)
{
    unsigned char bytes[12 + 4 * 8];
    memcpy(bytes, "lora-dropout", 12);
    const uint64_t fields[4] = {(uint64_t)step, (uint64_t)sample, (uint64_t)(int64_t)layer,
                                (uint64_t)(int64_t)proj};
    for (int f = 0; f < 4; f++)
        for (int b = 0; b < 8; b++)
            bytes[12 + 8 * f + b] = (unsigned char)(fields[f] >> (8 * b));
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof bytes; i++) {
        h ^= bytes[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int reference_keep(const rp_dropout_site *site, int64_t r, int64_t cols, int64_t c)
{
    const int64_t row = site->first_row + r;
    const int64_t sample = site->first_sample + row / site->rows_per_sample;
    const uint64_t element = (uint64_t)((row % site->rows_per_sample) * cols + c);
    const uint64_t stream = key_stream(site->step, sample, site->layer, site->proj);
    return rp_rng_uniform(site->seed, stream, element) >= site->p;
}

static void run_dropout(const rp_dropout_site *site, const float *x, float *y, int64_t rows,
                        int64_t cols, int accumulate)
{
    rp_error err = {0};
    rp_status s = cpu->dropout(NULL, site, x, y, RP_F32, rows, cols, accumulate, &err);
    ck_assert_msg(s == RP_OK, "dropout: %d: %s", (int)s, err.msg);
}

/* x in [1, 2): never 0, so y == 0 means dropped */
START_TEST(dropout_keeps_one_minus_p)
{
    const int64_t rows = 100, cols = 1000, n = rows * cols;
    float *x = uniform_floats((size_t)n, 4, 1.0f, 2.0f), *y = malloc((size_t)n * 4);
    const float ps[] = {0.1f, 0.5f};
    for (int k = 0; k < 2; k++) {
        const rp_dropout_site site = {.seed = 1234, .step = 7, .layer = 2, .proj = 1,
                                      .first_sample = 0, .rows_per_sample = 25, .p = ps[k]};
        run_dropout(&site, x, y, rows, cols, 0);
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++)
            kept += y[i] != 0.0f;
        const double q = 1.0 - ps[k], sd = sqrt(q * (1.0 - q) / (double)n);
        const double fraction = (double)kept / (double)n;
        ck_assert_msg(fabs(fraction - q) <= 5.0 * sd, "p = %g: kept %.5f, want %.5f +- 5 * %.5f",
                      (double)ps[k], fraction, q, sd);
    }
    free(x), free(y);
}
END_TEST

START_TEST(dropout_scales_kept_and_zeroes_dropped)
{
    const int64_t rows = 37, cols = 129, n = rows * cols;
    float *x = uniform_floats((size_t)n, 5, -2.0f, 2.0f), *y0 = uniform_floats(n, 6, -1, 1);
    float *y = malloc((size_t)n * 4), *acc = malloc((size_t)n * 4), *xy = malloc((size_t)n * 4);
    const float ps[] = {0.1f, 0.3f, 0.5f, 0.9f};
    for (int k = 0; k < 4; k++) {
        const rp_dropout_site site = {.seed = 99, .step = 3, .layer = 5, .proj = 6,
                                      .first_sample = 11, .rows_per_sample = 10, .p = ps[k]};
        const float scale = 1.0f / (1.0f - ps[k]);
        run_dropout(&site, x, y, rows, cols, 0);
        memcpy(acc, y0, (size_t)n * 4);
        run_dropout(&site, x, acc, rows, cols, 1);
        memcpy(xy, x, (size_t)n * 4);
        run_dropout(&site, xy, xy, rows, cols, 0);
        expect_same_bits(xy, y, (size_t)n, "dropout in place");
        int64_t kept = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                const int64_t i = r * cols + c;
                const int keep = reference_keep(&site, r, cols, c);
                const float value = keep ? unfused_product(x[i], scale) : 0.0f;
                ck_assert_msg(bits(y[i]) == bits(value), "p %g (%lld, %lld): %a, want %a",
                              (double)ps[k], (long long)r, (long long)c, (double)y[i],
                              (double)value);
                const float sum = (float)((double)y0[i] + (double)value);
                ck_assert_msg(bits(acc[i]) == bits(sum), "p %g (%lld, %lld) +=: %a, want %a",
                              (double)ps[k], (long long)r, (long long)c, (double)acc[i],
                              (double)sum);
                kept += keep;
            }
        ck_assert(kept > 0 && kept < n); /* both kinds were checked */
    }
    free(x), free(y0), free(y), free(acc), free(xy);
}
END_TEST

/* Two samples of R rows: one call from sample 4, or a call per sample. */
START_TEST(dropout_mask_is_per_sample)
{
    enum { R = 3, COLS = 41 };
    const int64_t n = 2 * R * COLS;
    float *x = uniform_floats((size_t)n, 7, 1.0f, 2.0f);
    float *whole = malloc((size_t)n * 4), *split = malloc((size_t)n * 4);
    /* a negative layer and proj check the sign extension of the key */
    const rp_dropout_site sites[] = {
        {.seed = 5, .step = 12, .layer = 3, .proj = 2, .first_sample = 4, .rows_per_sample = R,
         .p = 0.5f},
        {.seed = 0xfeedfacecafebeefull, .step = (int64_t)1 << 40, .layer = -1, .proj = -7,
         .first_sample = 4, .rows_per_sample = R, .p = 0.25f},
    };
    for (int k = 0; k < 2; k++) {
        rp_dropout_site site = sites[k];
        run_dropout(&site, x, whole, 2 * R, COLS, 0);
        run_dropout(&site, x, split, R, COLS, 0);
        site.first_sample = 5;
        run_dropout(&site, x + R * COLS, split + R * COLS, R, COLS, 0);
        expect_same_bits(split, whole, (size_t)n, "two calls against one");
        for (int64_t r = 0; r < 2 * R; r++)
            for (int64_t c = 0; c < COLS; c++) {
                const int keep = reference_keep(&sites[k], r, COLS, c);
                ck_assert_msg((whole[r * COLS + c] != 0.0f) == keep,
                              "site %d (%lld, %lld): kept %d, the key says %d", k, (long long)r,
                              (long long)c, whole[r * COLS + c] != 0.0f, keep);
            }
    }
    /* every field of the key matters */
    rp_dropout_site changed[6];
    for (int f = 0; f < 6; f++)
        changed[f] = sites[0];
    changed[0].seed++;
    changed[1].step++;
    changed[2].layer++;
    changed[3].proj++;
    changed[4].first_sample++;
    changed[5].rows_per_sample = 2 * R; /* element indices run on across the rows */
    run_dropout(&sites[0], x, whole, 2 * R, COLS, 0);
    for (int f = 0; f < 6; f++) {
        run_dropout(&changed[f], x, split, 2 * R, COLS, 0);
        int64_t differ = 0;
        for (int64_t i = R * COLS; i < n; i++) /* the second sample's rows */
            differ += (whole[i] != 0.0f) != (split[i] != 0.0f);
        ck_assert_msg(differ > 0, "changing key field %d left the mask as it was", f);
    }
    free(x), free(whole), free(split);
}
END_TEST

/* Three samples of R rows cut at every row into two calls, the second
 * starting inside its sample (first_row), as the MLP's tiles cut a
 * microbatch: the same mask as one call, and as the key says. */
START_TEST(dropout_calls_start_inside_a_sample)
{
    enum { R = 5, COLS = 23 };
    const int64_t rows = 3 * R, n = rows * COLS;
    float *x = uniform_floats((size_t)n, 12, 1.0f, 2.0f);
    float *whole = malloc((size_t)n * 4), *split = malloc((size_t)n * 4);
    const rp_dropout_site site = {.seed = 77, .step = 9, .layer = 4, .proj = 5,
                                  .first_sample = 6, .rows_per_sample = R, .p = 0.5f};
    run_dropout(&site, x, whole, rows, COLS, 0);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < COLS; c++)
            ck_assert_msg((whole[r * COLS + c] != 0.0f) == reference_keep(&site, r, COLS, c),
                          "(%lld, %lld): not the key's mask", (long long)r, (long long)c);
    for (int64_t cut = 1; cut < rows; cut++) {
        rp_dropout_site second = site;
        second.first_sample = site.first_sample + cut / R;
        second.first_row = cut % R;
        memset(split, 0, (size_t)n * 4);
        run_dropout(&site, x, split, cut, COLS, 0);
        run_dropout(&second, x + cut * COLS, split + cut * COLS, rows - cut, COLS, 0);
        char what[64];
        snprintf(what, sizeof what, "calls cut at row %lld", (long long)cut);
        expect_same_bits(split, whole, (size_t)n, what);
    }
    free(x), free(whole), free(split);
}
END_TEST

START_TEST(dropout_p0_copies_or_adds)
{
    const int64_t rows = 9, cols = 31, n = rows * cols;
    float *x = uniform_floats((size_t)n, 8, -2.0f, 2.0f), *y0 = uniform_floats(n, 9, -1, 1);
    float *y = malloc((size_t)n * 4), *special_x = copy_floats(x, (size_t)n);
    /* a NaN with a payload, a signalling NaN, -0 and an infinity stay as they are */
    const uint32_t special[] = {0x7fc12345u, 0xff812345u, 0x80000000u, 0xff800000u};
    memcpy(special_x, special, sizeof special);
    const rp_dropout_site site = {.seed = 1, .step = 0, .layer = 0, .proj = 0,
                                  .first_sample = 0, .rows_per_sample = 1, .p = 0.0f};
    run_dropout(&site, special_x, y, rows, cols, 0);
    ck_assert(memcmp(y, special_x, (size_t)n * 4) == 0);
    memcpy(y, y0, (size_t)n * 4);
    run_dropout(&site, x, y, rows, cols, 1);
    for (int64_t i = 0; i < n; i++) {
        const float sum = (float)((double)y0[i] + (double)x[i]);
        ck_assert_msg(bits(y[i]) == bits(sum), "p = 0, +=: element %lld", (long long)i);
    }
    free(x), free(y0), free(y), free(special_x);
}
END_TEST

START_TEST(dropout_refuses_bad_arguments)
{
    const int64_t rows = 4, cols = 8, n = rows * cols;
    float *x = uniform_floats((size_t)n, 10, 1.0f, 2.0f), *y = uniform_floats(n, 11, 1, 2);
    float *y0 = copy_floats(y, (size_t)n);
    rp_dropout_site site = {.seed = 1, .step = 0, .layer = 0, .proj = 0, .first_sample = 0,
                            .rows_per_sample = 2, .p = 0.5f};
    rp_error err = {0};
    const float bad_p[] = {1.0f, 1.5f, -0.1f, -1e-30f, NAN, INFINITY};
    for (size_t k = 0; k < sizeof bad_p / sizeof bad_p[0]; k++) {
        site.p = bad_p[k];
        ck_assert_int_eq(cpu->dropout(NULL, &site, x, y, RP_F32, rows, cols, 0, &err),
                         RP_ERR_INVALID_ARG);
        ck_assert_msg(strstr(err.msg, "dropout") != NULL, "message: %s", err.msg);
    }
    site.p = 0.5f;
    site.rows_per_sample = 0;
    ck_assert_int_eq(cpu->dropout(NULL, &site, x, y, RP_F32, rows, cols, 0, &err),
                     RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "dropout") != NULL, "message: %s", err.msg);
    site.rows_per_sample = 2;
    const int64_t bad_first_row[] = {-1, 2, 3};
    for (size_t k = 0; k < sizeof bad_first_row / sizeof bad_first_row[0]; k++) {
        site.first_row = bad_first_row[k];
        ck_assert_int_eq(cpu->dropout(NULL, &site, x, y, RP_F32, rows, cols, 0, &err),
                         RP_ERR_INVALID_ARG);
        ck_assert_msg(strstr(err.msg, "first_row") != NULL, "message: %s", err.msg);
    }
    site.first_row = 1;
    /* the CPU's compute dtype is fp32: bf16 and f16 are not its dtypes */
    const rp_dtype bad_dtype[] = {RP_BF16, RP_F16, (rp_dtype)7};
    for (size_t k = 0; k < sizeof bad_dtype / sizeof bad_dtype[0]; k++) {
        ck_assert_int_eq(cpu->dropout(NULL, &site, x, y, bad_dtype[k], rows, cols, 0, &err),
                         RP_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.msg, "dropout") != NULL, "message: %s", err.msg);
        ck_assert_int_eq(cpu->dropout(NULL, &site, x, y, bad_dtype[k], rows, cols, 1, &err),
                         RP_ERR_UNSUPPORTED);
    }
    expect_same_bits(y, y0, (size_t)n, "y after refused calls");
    free(x), free(y), free(y0);
}
END_TEST

static Suite *kernels_lora_suite(void)
{
    Suite *s = suite_create("kernels_lora");
    TCase *tc = tcase_create("cpu");
    tcase_add_test(tc, scaled_add_is_unfused_fp32);
    tcase_add_test(tc, dropout_keeps_one_minus_p);
    tcase_add_test(tc, dropout_scales_kept_and_zeroes_dropped);
    tcase_add_test(tc, dropout_mask_is_per_sample);
    tcase_add_test(tc, dropout_calls_start_inside_a_sample);
    tcase_add_test(tc, dropout_p0_copies_or_adds);
    tcase_add_test(tc, dropout_refuses_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(kernels_lora_suite, "serial")
