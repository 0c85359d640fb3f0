/* Proves: the CPU kernel table's GEMMs read bf16 weights where they lie
 * (kernels/ops.h weight_dtypes), for LoRA's frozen base:
 *   - linear_forward (with bias and residual) and linear_backward_input (=
 *     and +=) with W in bf16 equal a brute-force product in double of the
 *     widened weights within 1e-5 relative to the row's magnitude, on
 *     shapes whose W spans several of the kernel's widening blocks (so a
 *     block boundary that drops or repeats a row or column would show) and
 *     on a small one;
 *   - with W in fp32 holding the same (bf16-exact) values the results agree
 *     with the bf16 ones to the same tolerance (both are one dot product
 *     over the whole reduction per element);
 *   - the table says it reads F32 and BF16 weights, and F16 weights are
 *     RP_ERR_UNSUPPORTED naming the op, with nothing written. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "kernels/ops.h"
#include "rp_check.h"

static const rp_kernel_ops *cpu = &rp_kernel_ops_cpu;

static float *uniform_floats(size_t n, uint64_t stream)
{
    float *v = malloc(n * sizeof(float) + 1);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(2.0 * rp_rng_uniform(7, stream, i) - 1.0);
    return v;
}

/* W as bf16, and its exact fp32 widening (so both tables see one W). */
static uint16_t *bf16_weights(size_t n, uint64_t stream, float **widened)
{
    float *f = uniform_floats(n, stream);
    uint16_t *h = malloc(n * sizeof(uint16_t) + 1);
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < n; i++) {
        h[i] = rp_f32_to_bf16(f[i]);
        f[i] = rp_bf16_to_f32(h[i]);
    }
    *widened = f;
    return h;
}

/* |got - want| <= 1e-5 * (sum of |terms| of the element) */
static void expect_close(const float *got, const double *want, const double *mag, size_t n,
                         const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs((double)got[i] - want[i]) <= 1e-5 * mag[i] + 1e-30,
                      "%s: element %zu is %.9g, brute force %.9g", what, i, (double)got[i],
                      want[i]);
}

static void forward_case(int64_t rows, int64_t in, int64_t out)
{
    float *Wf, *x = uniform_floats((size_t)(rows * in), 1);
    uint16_t *W = bf16_weights((size_t)(out * in), 2, &Wf);
    float *bias = uniform_floats((size_t)out, 3), *res = uniform_floats((size_t)(rows * out), 4);
    size_t ny = (size_t)(rows * out);
    double *want = malloc(ny * sizeof(double)), *mag = malloc(ny * sizeof(double));
    float *y = malloc(ny * sizeof(float)), *y32 = malloc(ny * sizeof(float));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < out; j++) {
            double acc = 0, m = 0;
            for (int64_t c = 0; c < in; c++) {
                double t = (double)x[r * in + c] * Wf[j * in + c];
                acc += t, m += fabs(t);
            }
            want[r * out + j] = res[r * out + j] + (acc + bias[j]);
            mag[r * out + j] = m + fabs(bias[j]) + fabs(res[r * out + j]);
        }
    rp_error err = {0};
    ck_assert_int_eq(cpu->linear_forward(NULL, x, W, RP_BF16, bias, res, y, NULL, rows, in, out,
                                         &err), RP_OK);
    expect_close(y, want, mag, ny, "linear_forward, bf16 W");
    ck_assert_int_eq(cpu->linear_forward(NULL, x, Wf, RP_F32, bias, res, y32, NULL, rows, in, out,
                                         &err), RP_OK);
    for (size_t i = 0; i < ny; i++)
        ck_assert_msg(fabs((double)y[i] - y32[i]) <= 1e-5 * mag[i], "bf16 and fp32 W differ at %zu",
                      i);
    free(x), free(W), free(Wf), free(bias), free(res), free(want), free(mag), free(y), free(y32);
}

START_TEST(forward_reads_bf16_weights)
{
    /* 1100 x 1000 and 3000 x 700 floats exceed one widening block */
    ck_assert_uint_gt((size_t)1100 * 1000, RP_LINEAR_WIDEN_FLOATS);
    forward_case(5, 1000, 1100);
    forward_case(3, 700, 3000);
    forward_case(4, 24, 40);
}
END_TEST

static void backward_case(int64_t rows, int64_t in, int64_t out)
{
    float *Wf, *dy = uniform_floats((size_t)(rows * out), 5);
    uint16_t *W = bf16_weights((size_t)(out * in), 6, &Wf);
    float *dx0 = uniform_floats((size_t)(rows * in), 8);
    size_t nx = (size_t)(rows * in);
    double *want = malloc(nx * sizeof(double)), *mag = malloc(nx * sizeof(double));
    float *dx = malloc(nx * sizeof(float));
    for (int accumulate = 0; accumulate <= 1; accumulate++) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < in; c++) {
                double acc = 0, m = 0;
                for (int64_t o = 0; o < out; o++) {
                    double t = (double)dy[r * out + o] * Wf[o * in + c];
                    acc += t, m += fabs(t);
                }
                double base = accumulate ? dx0[r * in + c] : 0.0;
                want[r * in + c] = base + acc;
                mag[r * in + c] = m + fabs(base);
            }
        memcpy(dx, dx0, nx * sizeof(float));
        rp_error err = {0};
        ck_assert_int_eq(cpu->linear_backward_input(NULL, dy, W, RP_BF16, dx, NULL, rows, in,
                                                    out, accumulate, &err), RP_OK);
        expect_close(dx, want, mag, nx, accumulate ? "dx += dy W, bf16 W" : "dx = dy W, bf16 W");
    }
    free(dy), free(W), free(Wf), free(dx0), free(want), free(mag), free(dx);
}

START_TEST(backward_input_reads_bf16_weights)
{
    backward_case(5, 1100, 1000);
    backward_case(3, 3000, 700);
    backward_case(4, 40, 24);
}
END_TEST

START_TEST(other_weight_dtypes_are_refused)
{
    ck_assert(rp_kernel_reads_weights(cpu, RP_F32));
    ck_assert(rp_kernel_reads_weights(cpu, RP_BF16));
    ck_assert(!rp_kernel_reads_weights(cpu, RP_F16));
    float x[6] = {1, 2, 3, 4, 5, 6}, y[4] = {7, 7, 7, 7};
    uint16_t W[6] = {0};
    rp_error err = {0};
    ck_assert_int_eq(cpu->linear_forward(NULL, x, W, RP_F16, NULL, NULL, y, NULL, 2, 3, 2, &err),
                     RP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "linear_forward"));
    ck_assert_ptr_nonnull(strstr(err.msg, "F16"));
    rp_error err2 = {0};
    ck_assert_int_eq(cpu->linear_backward_input(NULL, x, W, RP_F16, y, NULL, 2, 2, 3, 0, &err2),
                     RP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err2.msg, "linear_backward_input"));
    for (int i = 0; i < 4; i++)
        ck_assert(y[i] == 7.0f);
}
END_TEST

static Suite *kernels_linear_suite(void)
{
    Suite *s = suite_create("kernels_linear");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, forward_reads_bf16_weights);
    tcase_add_test(tc, backward_input_reads_bf16_weights);
    tcase_add_test(tc, other_weight_dtypes_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(kernels_linear_suite, "serial")
