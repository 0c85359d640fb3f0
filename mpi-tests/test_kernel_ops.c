/* Proves: the two tables of kernel ops (src/kernels/ops.h) are complete and
 * agree.
 *   Always (no device needed): every member of rp_kernel_ops_cpu, and of
 *   rp_kernel_ops_cuda in a CUDA build, is set (listed by name; a static
 *   assertion fails when a member is added to the struct and not here); the
 *   CPU table computes in fp32 on host memory (compute_dtype RP_F32,
 *   host_addressable 1, no scratch, a RoPE table written into the caller's
 *   space) and rp_cpu_kernels() is it with a NULL state; the CUDA table
 *   computes in bf16 on device memory (RP_BF16, host_addressable 0); both
 *   ask for at least one row of logits. The CPU's linear_forward into
 *   y_compute alone (y NULL: what the dense MLP's g and u take on a bf16
 *   table) equals the product summed in double within 1e-5 and the same
 *   bits as into y; a bias or residual without y, or no output, is refused
 *   naming the op; the CPU's SwiGLU takes fp32 g, u, dm and refuses bf16
 *   ones (its compute dtype is fp32) naming the op; over rows at a row
 *   stride ld > cols (the fused gate/up GEMM's [g_row | u_row | gap]) it
 *   gives the bits of the formula written out per element with expf,
 *   forward and backward (into buffers of their own and in place), leaves
 *   the gap columns untouched, equals the contiguous call bit for bit and
 *   refuses ld < cols naming the op.
 *   On a CUDA device: every op of the CUDA table, called through the table
 *   with the state of rp_cuda_kernels_create, agrees with the same op of the
 *   CPU table on fresh random inputs. Compute-dtype inputs are drawn in
 *   fp32 and rounded to bf16 first, the CUDA op gets the bf16 bits and the
 *   CPU op the same rounded values as floats, so the comparison measures the
 *   op and not the input rounding. Every CUDA output and scratch is poisoned
 *   with NaN before the call, so an element left unwritten fails:
 *   - linear_forward, with and without bias and residual, into y alone and
 *     into y and y_compute (odd shapes, rows not a multiple of 8), by
 *     cuBLAS with the residual copied first and the bias kernel and by
 *     cuBLASLt with both in the epilogue (gemm-lt): y within 1e-4 (same
 *     operands, only the summation order differs), y_compute exactly
 *     rp_f32_to_bf16(y), and a second call the same bits; into y_compute
 *     alone (y NULL: cuBLAS's bf16 output, with and without gemm-lt, which
 *     then computes none of them) within the bf16 rounding of 1e-4 of the
 *     CPU's y, a second call the same bits;
 *     linear_backward_input into dx (= and +=) and into dx_compute;
 *     linear_backward_weight accumulated over two calls;
 *   - column_sum_accumulate (1000 and 3 rows, scratch from
 *     column_sum_scratch_floats) within 1e-5, and the same bits twice;
 *   - rmsnorm_forward (y, y_compute, both; per-token and per-head shapes,
 *     dim not a multiple of 32) and rmsnorm_backward (accumulate 0/1, dw
 *     NULL or not, dx aliasing dy or not, dx_compute or not) within 1e-5,
 *     with every rounded copy exactly the rounded fp32 result;
 *   - rope_table (head_dim 64 and 128, plain and llama3 inv_freq from
 *     rp_rope_inv_freq, seqlen 200): its cos/sin entries, read back through
 *     rope_apply, and rope_apply forward and inverse, with and without
 *     x_compute, within 1e-5;
 *   - attention_forward (o within 1e-2, lse within 1e-4) and
 *     attention_backward (dq, dk, dv within 1e-2; the same bits twice) for 2
 *     sequences of 200 and of 17 tokens, 4 query heads over 2 and 4 kv heads,
 *     head_dim 64 and 128, with and without document segments (a one-token
 *     document, one on a tile boundary, the last token alone);
 *   - swiglu_forward/backward within the bf16 rounding of a 1e-5 result,
 *     from fp32 g, u, dm and from bf16 ones (each of g and u, and dm, in
 *     either dtype: bf16-mlp's inputs; the CPU op gets the same rounded
 *     values in fp32), a second call the same bits; contiguous and at a
 *     row stride (rows of [g_row | u_row | gap], the fused gate/up GEMM's
 *     layout, against the CPU op at the same stride), the gaps of the
 *     poisoned dg/du buffer left NaN;
 *   - gpt-oss's clamped SwiGLU (limit 1.5, alpha 1.3, over a tenth of the
 *     gates and ups past the clamps) forward and backward within the bf16
 *     rounding of a 1e-5 result, the gradient exactly 0 past a clamp; its
 *     expert biases (4 experts, one empty, whose NaN bias and gradient are
 *     never read or touched): the forward's y and the backward's dbias
 *     (from a bf16 dy, as the grouped GEMMs' gradients come) bit for bit
 *     the CPU's, y_compute exactly the rounded y, with and without
 *     it; attention with windows (5, 70 and 400 keys: within a tile, across
 *     tiles, beyond the sequence) with and without sinks and segments, as
 *     attention_forward/backward above, and the sinks' gradient added onto
 *     a non-zero one within 1e-4 of the CPU's;
 *   - scaled_add (= and +=, y aliasing x, y NULL with y_compute) bit for
 *     bit, its y_compute exactly the rounded fp32 result; n == 0 writes
 *     nothing, and accumulate without y is refused;
 *   - dropout (p 0.1 and 0.5, samples split across rows, a call starting
 *     inside a sample, the same mask as the CPU's): fp32 (= and +=, in
 *     place) bit for bit, bf16 exactly the CPU's fp32 result on the same
 *     rounded inputs rounded to bf16; p == 0 a copy (or sum); a bf16
 *     accumulate, an f16 dtype and p outside [0, 1) refused with the op
 *     named;
 *   - cross_entropy with a counted mask (uncounted rows with out-of-range
 *     targets) and without, grad 0 and 1: counted losses within 1e-5, the
 *     others exactly 0, the gradient within 1e-5 * scale, logits untouched
 *     without grad; with the gradient into a bf16 dlogits_compute (the
 *     head's), by the convert after the in-place pass and by the fused
 *     store (fused-xent): the losses bit for bit the in-place pass's, each
 *     bf16 element exactly rp_f32_to_bf16 of the in-place fp32 gradient
 *     (and so within bf16 rounding of the CPU's), the fused store leaving
 *     the fp32 logits untouched; with the row sums in float (xent-fp32),
 *     in place: within the same 1e-5 of the CPU's;
 *   - sum_to_host equals the host's in-order sum bit for bit, waiting for
 *     the op queued before it;
 *   - check_ids: the same RP_ERR_RANGE at the same first bad position (mask
 *     honoured, masked-out bad ids ignored), the message naming id and
 *     position;
 *   - embed_forward from fp32 and bf16 tables (rows widened exactly) and
 *     embed_backward (repeated tokens, two calls) bit for bit;
 *   - convert fp32 -> bf16 bit for bit against rp_f32_to_bf16 (zeros,
 *     subnormals, ties, infinities, overflow; a NaN stays a NaN), bf16 ->
 *     fp32 exact for all 65536 patterns, same-dtype conversions copies, on
 *     both tables; copy exact, byte-offset and odd-sized, with nothing
 *     written outside;
 *   - fp8_dequantise (issue 36): the CPU op, everywhere, equals the brute
 *     force w[r, c] = e4m3(fp8[r, c]) s[r / BR, c / BC] from the definition
 *     (every e4m3 code, the NaNs NaN; partial edge blocks both ways, blocks
 *     wider than the matrix; F32, BF16 and F16 scales at an odd address;
 *     fp32 and bf16 outputs) and refuses bad sizes and dtypes naming the
 *     op; on a device the CUDA op gives the CPU op's bits (NaN codes NaN).
 * Without a CUDA device, or in a build without the CUDA back end, only the
 * table checks run and the test then reports SKIP (exit 77). */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/unproven.h"
#include "core/rng.h"
#include "kernels/cpu/ops.h"
#include "kernels/ops.h"
#include "rp_check.h"
#include "xent_reference.h"

#ifdef RP_HAVE_CUDA_EXECUTOR
#include <cublas_v2.h>

#include "cuda_test_util.h"
#include "kernels/cpu/rope.h"
#include "kernels/attention_choice.h"
#include "kernels/cuda/ops.h"
#endif

/* ---- the tables themselves (no device) ---------------------------------- */

/* The function pointers of rp_kernel_ops, which check_complete names one by
 * one: a member added to the struct must be added there too. */
#define RP_KERNEL_OPS_FUNCTIONS 42
_Static_assert(sizeof(rp_kernel_ops) ==
                   offsetof(rp_kernel_ops, attention_backward_scratch_floats) +
                       RP_KERNEL_OPS_FUNCTIONS * sizeof(void (*)(void)),
               "rp_kernel_ops changed: list every member in check_complete and update the count");

#define EXPECT_FN(t, f) ck_assert_msg((t)->f != NULL, "table \"%s\": %s is NULL", (t)->name, #f)

static void check_complete(const rp_kernel_ops *t)
{
    ck_assert_ptr_nonnull(t->name);
    ck_assert_msg(t->name[0] != '\0', "a table without a name");
    EXPECT_FN(t, attention_backward_scratch_floats);
    EXPECT_FN(t, column_sum_scratch_floats);
    EXPECT_FN(t, rope_table_floats);
    EXPECT_FN(t, logits_rows);
    EXPECT_FN(t, linear_forward);
    EXPECT_FN(t, linear_backward_input);
    EXPECT_FN(t, linear_backward_weight);
    EXPECT_FN(t, column_sum_accumulate);
    EXPECT_FN(t, rmsnorm_forward);
    EXPECT_FN(t, rmsnorm_backward);
    EXPECT_FN(t, rope_table);
    EXPECT_FN(t, rope_apply);
    EXPECT_FN(t, attention_forward);
    EXPECT_FN(t, attention_backward);
    EXPECT_FN(t, attention_sink_backward);
    EXPECT_FN(t, swiglu_forward);
    EXPECT_FN(t, swiglu_backward);
    EXPECT_FN(t, swiglu_clamped_forward);
    EXPECT_FN(t, swiglu_clamped_backward);
    EXPECT_FN(t, scaled_add);
    EXPECT_FN(t, dropout);
    EXPECT_FN(t, moe_route);
    EXPECT_FN(t, moe_group);
    EXPECT_FN(t, moe_stats);
    EXPECT_FN(t, moe_gather);
    EXPECT_FN(t, moe_scatter_add);
    EXPECT_FN(t, moe_combine);
    EXPECT_FN(t, moe_down_backward);
    EXPECT_FN(t, moe_route_backward);
    EXPECT_FN(t, grouped_linear_forward);
    EXPECT_FN(t, grouped_linear_backward_input);
    EXPECT_FN(t, grouped_linear_backward_weight);
    EXPECT_FN(t, grouped_bias_forward);
    EXPECT_FN(t, grouped_bias_backward);
    EXPECT_FN(t, cross_entropy);
    EXPECT_FN(t, sum_to_host);
    EXPECT_FN(t, check_ids);
    EXPECT_FN(t, embed_forward);
    EXPECT_FN(t, embed_backward);
    EXPECT_FN(t, convert);
    EXPECT_FN(t, copy);
    EXPECT_FN(t, fp8_dequantise);
    /* the head loops over chunks of logits_rows rows: at least one */
    const int64_t vocabs[] = {1, 97, 1000, 151936};
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++)
        ck_assert_msg(t->logits_rows(vocabs[i], 0) >= 1, "table \"%s\": logits_rows(%lld) = %lld",
                      t->name, (long long)vocabs[i], (long long)t->logits_rows(vocabs[i], 0));
}

/* ---- fp8_dequantise's inputs and its brute force ------------------------ */

typedef struct fp8_case {
    int64_t rows, cols, br, bc;
    rp_dtype scale_dtype;
    uint8_t *w;
    unsigned char *scale_buf; /* the scales start at scale_buf + 1: unaligned */
    size_t scale_bytes;
} fp8_case;

static const int64_t fp8_shapes[][4] = {{13, 22, 4, 8}, {64, 96, 24, 40}, {5, 7, 3, 128},
                                        {300, 17, 128, 16}, {16, 16, 8, 8}};

/* Case i of the shapes x scale dtypes: every e4m3 code among the weights,
 * scales of several binades (F32 ones with low bits set). */
static fp8_case fp8_make(int i)
{
    fp8_case c;
    const int64_t *sh = fp8_shapes[i / 3];
    c.rows = sh[0], c.cols = sh[1], c.br = sh[2], c.bc = sh[3];
    c.scale_dtype = (rp_dtype)(i % 3);
    c.w = malloc((size_t)(c.rows * c.cols));
    for (int64_t k = 0; k < c.rows * c.cols; k++)
        c.w[k] = (uint8_t)((k * 37 + i) & 0xff);
    const int64_t g = ((c.rows + c.br - 1) / c.br) * ((c.cols + c.bc - 1) / c.bc);
    const size_t es = rp_dtype_size(c.scale_dtype);
    c.scale_bytes = (size_t)g * es;
    c.scale_buf = malloc(c.scale_bytes + 1);
    for (int64_t k = 0; k < g; k++) {
        float v = ldexpf(1.0f + (float)(k % 7) / 8.0f, (int)(k % 9) - 14);
        if (c.scale_dtype == RP_F32)
            v *= 1.0f + 0x1p-21f * (float)(k + 1);
        if (k % 5 == 4)
            v = -v;
        uint16_t h = c.scale_dtype == RP_BF16 ? rp_f32_to_bf16(v) : rp_f32_to_f16(v);
        memcpy(c.scale_buf + 1 + (size_t)k * es, c.scale_dtype == RP_F32 ? (void *)&v : (void *)&h,
               es);
    }
    return c;
}

static void fp8_free(fp8_case *c)
{
    free(c->w);
    free(c->scale_buf);
}

/* Scale k of the case as fp32 (exact). */
static double fp8_scale(const fp8_case *c, int64_t k)
{
    const unsigned char *p = c->scale_buf + 1 + (size_t)k * rp_dtype_size(c->scale_dtype);
    if (c->scale_dtype == RP_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return c->scale_dtype == RP_BF16 ? rp_bf16_to_f32(h) : rp_f16_to_f32(h);
}

/* e4m3 code v from the definition: (-1)^s 2^(e-7) (1 + m/8), subnormals
 * m/8 2^-6, S.1111.111 NaN. */
static double e4m3_value(uint8_t v)
{
    const int e = (v >> 3) & 15, m = v & 7;
    if (e == 15 && m == 7)
        return NAN;
    const double mag = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return (v & 0x80) ? -mag : mag;
}

START_TEST(fp8_dequantise_cpu_brute_force)
{
    const int ncases = (int)(sizeof fp8_shapes / sizeof fp8_shapes[0]) * 3;
    rp_error err = {0};
    for (int i = 0; i < ncases; i++) {
        fp8_case c = fp8_make(i);
        const int64_t n = c.rows * c.cols, scale_cols = (c.cols + c.bc - 1) / c.bc;
        float *f = malloc((size_t)n * 4);
        uint16_t *h = malloc((size_t)n * 2);
        ck_assert_int_eq(rp_kernel_ops_cpu.fp8_dequantise(NULL, c.w, c.scale_buf + 1,
                                                          c.scale_dtype, c.rows, c.cols, c.br,
                                                          c.bc, f, RP_F32, &err), RP_OK);
        ck_assert_int_eq(rp_kernel_ops_cpu.fp8_dequantise(NULL, c.w, c.scale_buf + 1,
                                                          c.scale_dtype, c.rows, c.cols, c.br,
                                                          c.bc, h, RP_BF16, &err), RP_OK);
        for (int64_t r = 0; r < c.rows; r++)
            for (int64_t k = 0; k < c.cols; k++) {
                const int64_t at = r * c.cols + k;
                /* exact in double: a 4-bit significand times a 24-bit one */
                const double want = e4m3_value(c.w[at]) *
                                    fp8_scale(&c, (r / c.br) * scale_cols + k / c.bc);
                if (isnan(want)) {
                    ck_assert(isnan(f[at]) && isnan(rp_bf16_to_f32(h[at])));
                    continue;
                }
                ck_assert_msg(f[at] == (float)want, "case %d [%lld, %lld]: %a, the definition "
                              "%a", i, (long long)r, (long long)k, (double)f[at], want);
                ck_assert_uint_eq(h[at], rp_f32_to_bf16((float)want));
            }
        free(f), free(h);
        fp8_free(&c);
    }
    uint8_t w = 0x38;
    float one = 1.0f, out;
    ck_assert_int_eq(rp_kernel_ops_cpu.fp8_dequantise(NULL, &w, &one, RP_F32, 0, 1, 1, 1, &out,
                                                      RP_F32, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "fp8_dequantise"));
    ck_assert_int_eq(rp_kernel_ops_cpu.fp8_dequantise(NULL, &w, &one, RP_F32, 1, 1, 1, 1, &out,
                                                      RP_F16, &err), RP_ERR_UNSUPPORTED);
    ck_assert(strstr(err.msg, "fp8_dequantise"));
    ck_assert_int_eq(rp_kernel_ops_cpu.fp8_dequantise(NULL, &w, &one, RP_F32, 1, 1, 1, 1, &out,
                                                      RP_F32, &err), RP_OK);
    ck_assert(out == 1.0f);
}
END_TEST

/* The CPU linear_forward into y_compute alone against the product summed
 * in double (1e-5 relative: fp32 sums of 96 terms of O(0.1)), and the
 * same bits as the call into y; the contract's refusals. */
START_TEST(linear_forward_compute_only_cpu_brute_force)
{
    const int64_t rows = 7, in = 96, out = 33;
    const size_t nx = (size_t)(rows * in), nw = (size_t)(out * in), ny = (size_t)(rows * out);
    float *x = malloc(nx * 4), *W = malloc(nw * 4), *y = malloc(ny * 4), *yc = malloc(ny * 4);
    double *want = malloc(ny * sizeof(double));
    rp_rng_fill_normal(x, nx, 77, 1, 0, 0.0f, 1.0f);
    rp_rng_fill_normal(W, nw, 77, 2, 0, 0.0f, 0.1f);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double a = 0;
            for (int64_t i = 0; i < in; i++)
                a += (double)x[r * in + i] * W[o * in + i];
            want[r * out + o] = a;
        }
    rp_error err = {0};
    memset(yc, 0xff, ny * 4);
    ck_assert_int_eq(rp_kernel_ops_cpu.linear_forward(NULL, x, W, RP_F32, NULL, NULL, NULL, yc,
                                                      rows, in, out, &err), RP_OK);
    ck_assert_int_eq(rp_kernel_ops_cpu.linear_forward(NULL, x, W, RP_F32, NULL, NULL, y, NULL,
                                                      rows, in, out, &err), RP_OK);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < ny; i++) {
        ck_assert_msg(memcmp(&y[i], &yc[i], 4) == 0, "[%zu]: into y_compute %a, into y %a", i,
                      (double)yc[i], (double)y[i]);
        worst = fmax(worst, fabs(yc[i] - want[i]));
        scale = fmax(scale, fabs(want[i]));
    }
    ck_assert_msg(worst <= 1e-5 * scale, "y_compute off the double sum by %g (largest %g)", worst,
                  scale);
    /* what a table cannot add without y, and a call with no output */
    float bias[33] = {0};
    ck_assert_int_eq(rp_kernel_ops_cpu.linear_forward(NULL, x, W, RP_F32, bias, NULL, NULL, yc,
                                                      rows, in, out, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "linear_forward"), "%s", err.msg);
    ck_assert_int_eq(rp_kernel_ops_cpu.linear_forward(NULL, x, W, RP_F32, NULL, y, NULL, yc, rows,
                                                      in, out, &err), RP_ERR_INVALID_ARG);
    ck_assert_int_eq(rp_kernel_ops_cpu.linear_forward(NULL, x, W, RP_F32, NULL, NULL, NULL, NULL,
                                                      rows, in, out, &err), RP_ERR_INVALID_ARG);
    free(x), free(W), free(y), free(yc), free(want);
}
END_TEST

/* The CPU SwiGLU reads fp32 inputs (its compute dtype) and refuses bf16
 * ones, naming the op, rather than reading their bytes as floats. */
START_TEST(swiglu_cpu_input_dtypes)
{
    float g[3] = {0.5f, -1.0f, 2.0f}, u[3] = {1.0f, 2.0f, -0.5f}, dm[3] = {1.0f, 1.0f, 1.0f};
    float m[3], dg[3], du[3];
    rp_error err = {0};
    ck_assert_int_eq(rp_kernel_ops_cpu.swiglu_forward(NULL, g, u, RP_F32, 3, m, 1, 3, &err),
                     RP_OK);
    ck_assert(m[0] == 0.5f / (1.0f + expf(-0.5f)) * 1.0f);
    ck_assert_int_eq(rp_kernel_ops_cpu.swiglu_backward(NULL, g, u, RP_F32, 3, dm, RP_F32, dg, du,
                                                       1, 3, &err), RP_OK);
    ck_assert_int_eq(rp_kernel_ops_cpu.swiglu_forward(NULL, g, u, RP_BF16, 3, m, 1, 3, &err),
                     RP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "swiglu_forward") && strstr(err.msg, "BF16"), "%s", err.msg);
    ck_assert_int_eq(rp_kernel_ops_cpu.swiglu_backward(NULL, g, u, RP_F32, 3, dm, RP_BF16, dg, du,
                                                       1, 3, &err), RP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "swiglu_backward") && strstr(err.msg, "dm"), "%s", err.msg);
}
END_TEST

static uint32_t f32_bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

/* The CPU SwiGLU over rows at a row stride ld > cols, as the dense MLP's
 * fused gate/up GEMM lays them out ([g_row | u_row | gap], u = g + cols),
 * against the formula written out per element with expf: the same bits,
 * forward and backward, into dg/du buffers of their own and in place; the
 * gap columns are neither written nor (in place) changed; the contiguous
 * call (ld == cols) on the same values gives the same bits; ld < cols is
 * refused naming the op. 1100 columns: two whole tasks of 512 and a part
 * in every row. */
START_TEST(swiglu_cpu_strided_brute_force)
{
    enum { ROWS = 5, COLS = 1100, LD = 2 * COLS + 7, SPAN = ROWS * LD };
    static float gu[SPAN], dm[ROWS * COLS], m[ROWS * COLS], out[SPAN], in_place[SPAN];
    static float g_c[ROWS * COLS], u_c[ROWS * COLS], m_c[ROWS * COLS], dg_c[ROWS * COLS],
        du_c[ROWS * COLS];
    const float sentinel = nanf("0x1234");
    rp_rng_fill_normal(gu, SPAN, 11, 1, 0, 0.0f, 3.0f);
    rp_rng_fill_normal(dm, ROWS * COLS, 11, 2, 0, 0.0f, 1.0f);
    gu[4] = -100.0f, gu[5] = 95.0f, gu[COLS + 6] = -0.0f; /* expf's slow path, a negative zero */
    for (int r = 0; r < ROWS; r++)
        for (int c = 2 * COLS; c < LD; c++)
            gu[r * LD + c] = sentinel;
    for (int i = 0; i < SPAN; i++)
        out[i] = sentinel;
    memcpy(in_place, gu, sizeof gu);
    rp_error err = {0};
    const rp_kernel_ops *t = &rp_kernel_ops_cpu;
    ck_assert_int_eq(t->swiglu_forward(NULL, gu, gu + COLS, RP_F32, LD, m, ROWS, COLS, &err),
                     RP_OK);
    ck_assert_int_eq(t->swiglu_backward(NULL, gu, gu + COLS, RP_F32, LD, dm, RP_F32, out,
                                        out + COLS, ROWS, COLS, &err), RP_OK);
    ck_assert_int_eq(t->swiglu_backward(NULL, in_place, in_place + COLS, RP_F32, LD, dm, RP_F32,
                                        in_place, in_place + COLS, ROWS, COLS, &err), RP_OK);
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            const int at = r * LD + c, i = r * COLS + c;
            const float gi = gu[at], ui = gu[at + COLS], sg = 1.0f / (1.0f + expf(-gi));
            const float silu = gi / (1.0f + expf(-gi));
            const float want_dg = dm[i] * ui * (sg * (1.0f + gi * (1.0f - sg)));
            const float want_du = dm[i] * silu;
            ck_assert_msg(f32_bits(m[i]) == f32_bits(gi / (1.0f + expf(-gi)) * ui),
                          "m[%d, %d]", r, c);
            ck_assert_msg(f32_bits(out[at]) == f32_bits(want_dg), "dg[%d, %d]", r, c);
            ck_assert_msg(f32_bits(out[at + COLS]) == f32_bits(want_du), "du[%d, %d]", r, c);
            ck_assert_msg(f32_bits(in_place[at]) == f32_bits(want_dg), "dg over g [%d, %d]", r,
                          c);
            ck_assert_msg(f32_bits(in_place[at + COLS]) == f32_bits(want_du),
                          "du over u [%d, %d]", r, c);
            g_c[i] = gi, u_c[i] = ui;
        }
    for (int r = 0; r < ROWS; r++)
        for (int c = 2 * COLS; c < LD; c++) {
            ck_assert_msg(f32_bits(out[r * LD + c]) == f32_bits(sentinel), "gap [%d, %d] "
                          "written", r, c);
            ck_assert_msg(f32_bits(in_place[r * LD + c]) == f32_bits(sentinel), "gap [%d, %d] "
                          "written in place", r, c);
        }
    /* the contiguous call on the same values: the same bits */
    ck_assert_int_eq(t->swiglu_forward(NULL, g_c, u_c, RP_F32, COLS, m_c, ROWS, COLS, &err),
                     RP_OK);
    ck_assert_int_eq(t->swiglu_backward(NULL, g_c, u_c, RP_F32, COLS, dm, RP_F32, dg_c, du_c,
                                        ROWS, COLS, &err), RP_OK);
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            const int at = r * LD + c, i = r * COLS + c;
            ck_assert_msg(f32_bits(m_c[i]) == f32_bits(m[i]), "contiguous m[%d, %d]", r, c);
            ck_assert_msg(f32_bits(dg_c[i]) == f32_bits(out[at]), "contiguous dg[%d, %d]", r, c);
            ck_assert_msg(f32_bits(du_c[i]) == f32_bits(out[at + COLS]), "contiguous du[%d, %d]",
                          r, c);
        }
    ck_assert_int_eq(t->swiglu_forward(NULL, gu, gu + COLS, RP_F32, COLS - 1, m, ROWS, COLS,
                                       &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "swiglu_forward") && strstr(err.msg, "stride"), "%s", err.msg);
    ck_assert_int_eq(t->swiglu_backward(NULL, gu, gu + COLS, RP_F32, COLS - 1, dm, RP_F32, out,
                                        out + COLS, ROWS, COLS, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "swiglu_backward") && strstr(err.msg, "stride"), "%s",
                  err.msg);
}
END_TEST

/* The CPU cross_entropy against softmax written out in double, with the
 * gradient in place (dlogits_compute NULL), into a buffer of its own, and
 * into the logits given as that buffer: the same bits all three ways, the
 * logits only read when the buffer is their own, nothing written without
 * grad. */
START_TEST(cross_entropy_cpu_brute_force)
{
    static const struct {
        int64_t rows, vocab;
        float sd, scale;
    } cases[] = {{6, 1003, 3.0f, 0.37f}, {5, 7, 10.0f, 2.0f}, {3, 4096, 1.0f, 1.0f}};
    rp_error err = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t R = cases[c].rows, V = cases[c].vocab;
        const float scale = cases[c].scale;
        const size_t n = (size_t)(R * V);
        float *z = malloc(n * 4), *in_place = malloc(n * 4), *logits = malloc(n * 4);
        float *out = malloc(n * 4), *aliased = malloc(n * 4);
        int32_t *tg = malloc((size_t)R * 4);
        uint8_t *counted = malloc((size_t)R);
        double *l_in = malloc((size_t)R * 8), *l_out = malloc((size_t)R * 8);
        double *l_alias = malloc((size_t)R * 8);
        rp_rng_fill_normal(z, n, 4242 + c, 5, 0, 0.0f, cases[c].sd);
        for (int64_t r = 0; r < R; r++) {
            counted[r] = (uint8_t)(r % 3 != 1);
            tg[r] = counted[r] ? (int32_t)((r * 7919 + 13) % V) : -5; /* never read */
        }
        for (int grad = 0; grad <= 1; grad++) {
            memcpy(in_place, z, n * 4);
            memcpy(logits, z, n * 4);
            memcpy(aliased, z, n * 4);
            memset(out, 0xff, n * 4); /* NaNs: every element must be written */
            ck_assert_int_eq(rp_kernel_ops_cpu.cross_entropy(NULL, in_place, R, V, tg, counted,
                                                             scale, l_in, grad, NULL, &err),
                             RP_OK);
            ck_assert_int_eq(rp_kernel_ops_cpu.cross_entropy(NULL, logits, R, V, tg, counted,
                                                             scale, l_out, grad, out, &err),
                             RP_OK);
            ck_assert_int_eq(rp_kernel_ops_cpu.cross_entropy(NULL, aliased, R, V, tg, counted,
                                                             scale, l_alias, grad, aliased,
                                                             &err),
                             RP_OK);
            ck_assert(memcmp(l_in, l_out, (size_t)R * 8) == 0);
            ck_assert(memcmp(l_in, l_alias, (size_t)R * 8) == 0);
            ck_assert_msg(memcmp(logits, z, n * 4) == 0, "case %zu grad %d: the logits were "
                          "written with a dlogits_compute of their own", c, grad);
            if (!grad) {
                ck_assert(memcmp(in_place, z, n * 4) == 0);
                ck_assert(memcmp(aliased, z, n * 4) == 0);
                for (size_t i = 0; i < n; i++)
                    ck_assert_msg(isnan(out[i]), "case %zu: grad 0 wrote [%zu]", c, i);
            } else {
                ck_assert(memcmp(in_place, out, n * 4) == 0);
                ck_assert(memcmp(in_place, aliased, n * 4) == 0);
            }
            for (int64_t r = 0; r < R; r++) {
                const float *zr = z + r * V;
                if (!counted[r]) {
                    ck_assert(l_in[r] == 0.0);
                    for (int64_t j = 0; grad && j < V; j++)
                        ck_assert(in_place[r * V + j] == 0.0f);
                    continue;
                }
                double want_loss;
                const double lse = xent_reference(zr, V, tg[r], scale, &want_loss, NULL);
                /* expf's <= 2 ulps and the float argument move the loss by
                 * ~1e-7 and each gradient element by ~2e-6 relative at
                 * |z - lse| ~ 30 */
                ck_assert_msg(fabs(l_in[r] - want_loss) <= 1e-6,
                              "case %zu row %lld: loss %.12g, brute force %.12g", c,
                              (long long)r, l_in[r], want_loss);
                for (int64_t j = 0; grad && j < V; j++) {
                    const double want = scale * (exp((double)zr[j] - lse) - (j == tg[r]));
                    const double got = in_place[r * V + j];
                    ck_assert_msg(fabs(got - want) <= 4e-6 * fabs(want) + 1e-7 * scale,
                                  "case %zu [%lld, %lld]: gradient %.9g, brute force %.9g", c,
                                  (long long)r, (long long)j, got, want);
                }
            }
        }
        free(z), free(in_place), free(logits), free(out), free(aliased), free(tg), free(counted);
        free(l_in), free(l_out), free(l_alias);
    }
}
END_TEST

START_TEST(tables_complete_and_typed)
{
    const rp_kernel_ops *cpu = &rp_kernel_ops_cpu;
    check_complete(cpu);
    ck_assert_int_eq(cpu->compute_dtype, RP_F32);
    ck_assert_int_eq(cpu->host_addressable, 1);
    ck_assert_uint_eq(rp_kernel_compute_bytes(cpu), 4);
    rp_kernels kc = rp_cpu_kernels();
    ck_assert_ptr_eq(kc.ops, cpu);
    ck_assert_ptr_null(kc.state);
    /* no scratch on the CPU; and with no state it keeps no RoPE table, so
     * it asks for the whole [2, seqlen, half] one */
    const rp_attn_shape shapes[] = {
        {.nseq = 2, .seqlen = 200, .nheads = 4, .nkv = 2, .head_dim = 64, .block = 64,
         .scale = 0.125f},
        {.nseq = 1, .seqlen = 17, .nheads = 4, .nkv = 4, .head_dim = 128, .block = 64,
         .scale = 0.0883883476f},
        {.nseq = 3, .seqlen = 4096, .nheads = 32, .nkv = 8, .head_dim = 128, .block = 64,
         .scale = 0.0883883476f},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        ck_assert_uint_eq(cpu->attention_backward_scratch_floats(&shapes[i]), 0);
    const int64_t cols[] = {1, 64, 200, 4096, 151936};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        ck_assert_uint_eq(cpu->column_sum_scratch_floats(cols[i]), 0);
    ck_assert_uint_ge(cpu->rope_table_floats(200, 32), 2 * 200 * 32);
    ck_assert_uint_ge(cpu->rope_table_floats(4096, 64), 2 * 4096 * 64);
#ifdef RP_HAVE_CUDA_EXECUTOR
    /* the symbol links in a CUDA build with or without a device; the size
     * functions are "from shapes only", so they need none either */
    const rp_kernel_ops *cuda = &rp_kernel_ops_cuda;
    check_complete(cuda);
    ck_assert_int_eq(cuda->compute_dtype, RP_BF16);
    ck_assert_int_eq(cuda->host_addressable, 0);
    ck_assert_uint_eq(rp_kernel_compute_bytes(cuda), 2);
    ck_assert_str_ne(cuda->name, cpu->name);
#endif
}
END_TEST

#ifdef RP_HAVE_CUDA_EXECUTOR

/* ---- tolerances ---------------------------------------------------------
 * Relative errors are rel_err's ||got - ref||_2 / ||ref||_2.
 *
 * GEMM_TOL: both tables multiply the same bf16 values (the CPU gets them
 * widened) and accumulate in fp32, so only the summation order differs
 * (plus the tensor cores' accumulation, which truncates). With K <= 200
 * terms that is ~sqrt(K) * 2^-24 ~ 1e-6 for random signs and K * 2^-24 ~
 * 1.2e-5 even for a biased (truncating) accumulation: 1e-4 has a margin of
 * 8x over that and is the figure test_cuda_kernels holds the same GEMMs to
 * on rounded operands. (BF16_TOL = 1e-2 is the figure for fp32 operands,
 * where the bf16 rounding of the operands themselves, ~4e-3, dominates.)
 *
 * bf16 outputs: rounding v to bf16 (8 significant bits) moves it by at most
 * half an ulp, |rnd(v) - v| <= 2^-8 |v|, so a bf16 output of a value held to
 * relative t is within 2^-8 ||g|| + t ||ref|| <= 2^-8 (1 + t) + t of the
 * reference (triangle inequality; ||g|| <= (1 + t) ||ref||): bf16_tol(t).
 *
 * LSE_TOL: lse is fp32 arithmetic on identical bf16 q, k. A score's error
 * is at most hd * 2^-24 * sum|q_i k_i| * scale ~ 128 * 6e-8 * (0.64 * 128) *
 * 0.088 = 5.5e-5 (worst case, head_dim 128), and lse moves by at most the
 * largest score error (plus ~1e-6 from exp/log); the rms lse is >= 2.7
 * (log of 9 keys on average plus the score variance, seqlen 17), so the
 * relative error is <= 2e-5 even in that worst case: 1e-4.
 *
 * Attention o, dq, dk, dv: BF16_TOL. The CUDA kernel rounds P and dS to
 * bf16 before their second product (relative 2^-8 per element, ~2.3e-3 rms
 * on a sum with random signs) and o itself is a bf16 output (<= 3.9e-3).
 *
 * Everything else is fp32 arithmetic on identical inputs: FP32_TOL, or an
 * exact comparison where the op is a copy, a gather, an in-order sum or a
 * rounding. */
#define GEMM_TOL 1e-4
#define LSE_TOL 1e-4
#define BF16_U 0x1p-8 /* unit roundoff of bf16 */

static double bf16_tol(double t)
{
    return BF16_U * (1.0 + t) + t;
}

/* ---- the CUDA table's state (one per test) ------------------------------ */

static int g_have_device;
static cudaStream_t g_stream;
static cublasHandle_t g_blas;
static rp_kernels g_k;
static rp_error g_err;

static void setup(void)
{
    ck_assert(cudaSetDevice(0) == cudaSuccess);
    /* non-blocking, as the CUDA back end makes it: the helpers' copies on the
     * legacy stream do not order against it, so the test synchronises */
    ck_assert(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) == cudaSuccess);
    ck_assert(cublasCreate(&g_blas) == CUBLAS_STATUS_SUCCESS);
    ck_assert(cublasSetStream(g_blas, g_stream) == CUBLAS_STATUS_SUCCESS);
    memset(&g_err, 0, sizeof g_err);
    memset(&g_k, 0, sizeof g_k);
    rp_status s = rp_cuda_kernels_create(0, g_stream, g_blas, &g_k, &g_err);
    ck_assert_msg(s == RP_OK, "rp_cuda_kernels_create: %d: %s", (int)s, g_err.msg);
    ck_assert_ptr_eq(g_k.ops, &rp_kernel_ops_cuda);
}

static void teardown(void)
{
    rp_cuda_kernels_destroy(&g_k);
    ck_assert_ptr_null(g_k.state);
    cublasDestroy(g_blas);
    cudaStreamDestroy(g_stream);
}

/* An op of each table, the status checked: the CUDA one through the table
 * with its state, the CPU one through its table with state NULL. */
#define RUN(label, call)                                                                   \
    do {                                                                                   \
        memset(&g_err, 0, sizeof g_err);                                                   \
        rp_status run_s_ = (call);                                                         \
        ck_assert_msg(run_s_ == RP_OK, "%s: status %d: %s", (label), (int)run_s_,          \
                      g_err.msg);                                                          \
    } while (0)
#define GPU_OP(op, ...) RUN("cuda " #op, g_k.ops->op(g_k.state, __VA_ARGS__, &g_err))
#define CPU_OP(op, ...) RUN("cpu " #op, rp_kernel_ops_cpu.op(NULL, __VA_ARGS__, &g_err))

/* ---- host and device buffers -------------------------------------------- */

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *host_nan(size_t n) /* all bits set: NaN */
{
    float *p = xmalloc(n * 4);
    memset(p, 0xff, n * 4);
    return p;
}

static float *dup_f(const float *x, size_t n)
{
    float *p = xmalloc(n * 4);
    memcpy(p, x, n * 4);
    return p;
}

static float *dev_nan(size_t n) /* fp32, poisoned */
{
    float *d = dev_alloc(n * 4);
    dev_poison(d, n * 4);
    return d;
}

static void *dev_nan_c(size_t n) /* compute dtype (bf16), poisoned */
{
    void *d = dev_alloc(n * 2);
    dev_poison(d, n * 2);
    return d;
}

static void dev_set(void *d, const void *h, size_t bytes)
{
    ck_assert(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    ck_assert(cudaDeviceSynchronize() == cudaSuccess);
}

/* Waits for the ops queued on the table's stream (and reports a kernel's
 * failure). */
static void sync_ops(void)
{
    cudaError_t e = cudaStreamSynchronize(g_stream);
    ck_assert_msg(e == cudaSuccess, "the ops' stream: %s", cudaGetErrorString(e));
}

static float *get_f(const float *d, size_t n)
{
    float *h = xmalloc(n * 4);
    sync_ops();
    dev_download(h, d, n * 4);
    return h;
}

static uint16_t *get_bits(const void *d, size_t n)
{
    uint16_t *h = xmalloc(n * 2);
    sync_ops();
    dev_download(h, d, n * 2);
    return h;
}

/* A compute-dtype output of the CUDA op, widened to fp32 (exact). */
static float *get_c(const void *d, size_t n)
{
    uint16_t *b = get_bits(d, n);
    float *f = xmalloc(n * 4);
    rp_bf16_to_f32_array(b, f, n);
    free(b);
    return f;
}

/* A compute-dtype input: f holds the bf16-rounded values as floats (the CPU
 * op's input), d the same bf16 bits on the device (the CUDA op's). */
typedef struct cin {
    float *f;
    void *d;
} cin;

static cin cin_from(const float *x, size_t n)
{
    cin c;
    c.f = xmalloc(n * 4);
    uint16_t *b = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        b[i] = rp_f32_to_bf16(x[i]);
        c.f[i] = rp_bf16_to_f32(b[i]);
    }
    c.d = dev_upload(b, n * 2);
    free(b);
    return c;
}

static cin cin_rand(size_t n, float mean, float sd)
{
    float *x = rand_f32(n, mean, sd);
    cin c = cin_from(x, n);
    free(x);
    return c;
}

static void cin_free(cin *c)
{
    free(c->f);
    cudaFree(c->d);
}

/* A draw in [0, m) from a 64-bit LCG. */
static uint32_t draw(uint64_t *s, uint32_t m)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)((*s >> 33) % m);
}

/* ---- comparisons ---------------------------------------------------------- */

/* The CUDA op's compute-dtype copy d is exactly its fp32 result y rounded. */
static void check_rounded_copy(const void *d, const float *y, size_t n, const char *what)
{
    uint16_t *b = get_bits(d, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(b[i] == rp_f32_to_bf16(y[i]),
                      "%s: rounded copy [%zu] = 0x%04x, rp_f32_to_bf16(%.9g) = 0x%04x", what, i,
                      b[i], (double)y[i], rp_f32_to_bf16(y[i]));
    free(b);
}

/* got and ref as increments over init (an accumulated result is checked on
 * what was added, which init would otherwise dilute). */
static void check_increment(const float *got, const float *ref, const float *init, size_t n,
                            double tol, const char *what)
{
    float *a = xmalloc(n * 4), *b = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        a[i] = got[i] - init[i];
        b[i] = ref[i] - init[i];
    }
    CHECK_REL(a, b, n, tol, what);
    free(a), free(b);
}

static void check_same_bits(const void *a, const void *b, size_t n_words, const char *what)
{
    const uint32_t *x = a, *y = b;
    for (size_t i = 0; i < n_words; i++)
        ck_assert_msg(x[i] == y[i], "%s: [%zu] 0x%08x vs 0x%08x", what, i, x[i], y[i]);
}

/* ---- GEMMs ---------------------------------------------------------------- */

static void linear_forward_case(int64_t rows, int64_t in, int64_t out)
{
    const size_t nx = (size_t)(rows * in), nw = (size_t)(out * in), ny = (size_t)(rows * out);
    cin x = cin_rand(nx, 0.0f, 1.0f), W = cin_rand(nw, 0.0f, 0.1f);
    float *bias = rand_f32((size_t)out, 0.0f, 1.0f), *res = rand_f32(ny, 0.0f, 1.0f);
    float *d_bias = dev_upload(bias, (size_t)out * 4), *d_res = dev_upload(res, ny * 4);
    float *d_y = dev_alloc(ny * 4);
    void *d_yc = dev_alloc(ny * 2);
    /* lt 0: the residual copied into y, cuBLAS with beta 1, the bias kernel;
     * lt 1: cuBLASLt, the residual as C and the bias in the epilogue
     * (RP_ALLOW_UNPROVEN_CUDA=gemm-lt, given with the attention choice) */
    for (int lt = 0; lt <= 1; lt++) {
        ck_assert_int_eq(rp_cuda_kernels_choose_attention(
                             &g_k, RP_ATTENTION_OWN, lt ? 1u << RP_UNPROVEN_GEMM_LT : 0u, &g_err),
                         RP_OK);
        const int64_t products = rp_cuda_kernels_gemm_lt_products(&g_k);
        for (int with_bias = 0; with_bias <= 1; with_bias++)
            for (int with_res = 0; with_res <= 1; with_res++)
                for (int want_c = 0; want_c <= 1; want_c++) { /* y is required */
                    char what[200];
                    snprintf(what, sizeof what,
                             "linear_forward %lldx%lld -> %lld, bias %d, residual %d, into %s, %s",
                             (long long)rows, (long long)in, (long long)out, with_bias, with_res,
                             want_c ? "y and y_compute" : "y", lt ? "cuBLASLt" : "cuBLAS");
                    float *y_ref = host_nan(ny), *yc_ref = host_nan(ny);
                    CPU_OP(linear_forward, x.f, W.f, RP_F32, with_bias ? bias : NULL,
                           with_res ? res : NULL, y_ref, want_c ? (void *)yc_ref : NULL, rows,
                           in, out);
                    if (want_c) /* fp32 compute dtype: the copy is the value */
                        check_same_bits(yc_ref, y_ref, ny, what);

                    dev_poison(d_y, ny * 4);
                    dev_poison(d_yc, ny * 2);
                    GPU_OP(linear_forward, x.d, W.d, RP_BF16, with_bias ? d_bias : NULL,
                           with_res ? d_res : NULL, d_y, want_c ? d_yc : NULL, rows, in, out);
                    float *y = get_f(d_y, ny);
                    CHECK_REL(y, y_ref, ny, GEMM_TOL, what);
                    if (want_c)
                        check_rounded_copy(d_yc, y, ny, what);
                    /* deterministic: the same call again, the same bits */
                    dev_poison(d_y, ny * 4);
                    dev_poison(d_yc, ny * 2);
                    GPU_OP(linear_forward, x.d, W.d, RP_BF16, with_bias ? d_bias : NULL,
                           with_res ? d_res : NULL, d_y, want_c ? d_yc : NULL, rows, in, out);
                    float *y2 = get_f(d_y, ny);
                    check_same_bits(y2, y, ny, what);
                    if (want_c)
                        check_rounded_copy(d_yc, y2, ny, what);
                    free(y), free(y2), free(y_ref), free(yc_ref);
                }
        /* into y_compute alone (y NULL, nothing to add): cuBLAS's bf16
         * output, not cuBLASLt's (counted below: it adds nothing to the 16) */
        {
            char what[200];
            snprintf(what, sizeof what, "linear_forward %lldx%lld -> %lld into y_compute alone, "
                     "%s", (long long)rows, (long long)in, (long long)out,
                     lt ? "gemm-lt allowed" : "cuBLAS");
            float *y_ref = host_nan(ny);
            CPU_OP(linear_forward, x.f, W.f, RP_F32, NULL, NULL, y_ref, NULL, rows, in, out);
            dev_poison(d_yc, ny * 2);
            GPU_OP(linear_forward, x.d, W.d, RP_BF16, NULL, NULL, NULL, d_yc, rows, in, out);
            uint16_t *b1 = get_bits(d_yc, ny);
            float *yc = get_c(d_yc, ny);
            CHECK_REL(yc, y_ref, ny, bf16_tol(GEMM_TOL), what);
            dev_poison(d_yc, ny * 2);
            GPU_OP(linear_forward, x.d, W.d, RP_BF16, NULL, NULL, NULL, d_yc, rows, in, out);
            uint16_t *b2 = get_bits(d_yc, ny);
            ck_assert_msg(memcmp(b1, b2, ny * 2) == 0, "%s: a second call, other bits", what);
            free(y_ref), free(b1), free(b2), free(yc);
        }
        /* the path was the one asked for: cuBLASLt ran all 16 calls where in
         * and out are multiples of 8 (every engine shape; for others it may
         * have no algorithm and cuBLAS computes them), none without gemm-lt */
        const int64_t ran = rp_cuda_kernels_gemm_lt_products(&g_k) - products;
        if (!lt)
            ck_assert_int_eq(ran, 0);
        else if (in % 8 == 0 && out % 8 == 0)
            ck_assert_int_eq(ran, 16);
    }
    ck_assert_int_eq(rp_cuda_kernels_choose_attention(&g_k, RP_ATTENTION_OWN, 0u, &g_err), RP_OK);
    cin_free(&x), cin_free(&W);
    cudaFree(d_bias), cudaFree(d_res), cudaFree(d_y), cudaFree(d_yc);
    free(bias), free(res);
}

START_TEST(linear_forward_matches_cpu)
{
    linear_forward_case(77, 96, 200);
    linear_forward_case(37, 24, 40);
    linear_forward_case(3, 50, 17);
}
END_TEST

static void linear_backward_input_case(int64_t rows, int64_t in, int64_t out)
{
    const size_t ndy = (size_t)(rows * out), nw = (size_t)(out * in), ndx = (size_t)(rows * in);
    cin dy = cin_rand(ndy, 0.0f, 1.0f), W = cin_rand(nw, 0.0f, 0.1f);
    float *dx0 = rand_f32(ndx, 0.0f, 1.0f);
    static const char *const mode_name[3] = {"dx =", "dx +=", "dx_compute ="};
    for (int mode = 0; mode < 3; mode++) {
        char what[200];
        snprintf(what, sizeof what, "linear_backward_input %lldx%lld <- %lld, %s",
                 (long long)rows, (long long)in, (long long)out, mode_name[mode]);
        const int acc = mode == 1, to_c = mode == 2;
        float *ref = acc ? dup_f(dx0, ndx) : host_nan(ndx);
        CPU_OP(linear_backward_input, dy.f, W.f, RP_F32, to_c ? NULL : ref, to_c ? (void *)ref : NULL,
               rows, in, out, acc);

        float *d_dx = acc ? dev_upload(dx0, ndx * 4) : dev_nan(ndx);
        void *d_dxc = dev_nan_c(ndx);
        GPU_OP(linear_backward_input, dy.d, W.d, RP_BF16, to_c ? NULL : d_dx, to_c ? d_dxc : NULL, rows,
               in, out, acc);
        float *got = to_c ? get_c(d_dxc, ndx) : get_f(d_dx, ndx);
        if (acc)
            check_increment(got, ref, dx0, ndx, GEMM_TOL, what);
        else
            CHECK_REL(got, ref, ndx, to_c ? bf16_tol(GEMM_TOL) : GEMM_TOL, what);
        free(got), free(ref);
        cudaFree(d_dx), cudaFree(d_dxc);
    }
    cin_free(&dy), cin_free(&W);
    free(dx0);
}

START_TEST(linear_backward_input_matches_cpu)
{
    linear_backward_input_case(77, 96, 200);
    linear_backward_input_case(37, 24, 40);
    linear_backward_input_case(3, 50, 17);
}
END_TEST

static void linear_backward_weight_case(int64_t rows, int64_t in, int64_t out)
{
    const size_t ndy = (size_t)(rows * out), nx = (size_t)(rows * in), nw = (size_t)(out * in);
    cin dy1 = cin_rand(ndy, 0.0f, 1.0f), x1 = cin_rand(nx, 0.0f, 1.0f);
    cin dy2 = cin_rand(ndy, 0.0f, 1.0f), x2 = cin_rand(nx, 0.0f, 1.0f);
    float *dW0 = rand_f32(nw, 0.0f, 1.0f), *ref = dup_f(dW0, nw);
    /* two calls with different operands: dW0 + dy1^T x1 + dy2^T x2 */
    CPU_OP(linear_backward_weight, dy1.f, x1.f, ref, rows, in, out);
    CPU_OP(linear_backward_weight, dy2.f, x2.f, ref, rows, in, out);
    float *d_dW = dev_upload(dW0, nw * 4);
    GPU_OP(linear_backward_weight, dy1.d, x1.d, d_dW, rows, in, out);
    GPU_OP(linear_backward_weight, dy2.d, x2.d, d_dW, rows, in, out);
    float *got = get_f(d_dW, nw);
    char what[160];
    snprintf(what, sizeof what, "linear_backward_weight %lld rows, %lldx%lld, two calls",
             (long long)rows, (long long)out, (long long)in);
    check_increment(got, ref, dW0, nw, GEMM_TOL, what);
    cin_free(&dy1), cin_free(&x1), cin_free(&dy2), cin_free(&x2);
    cudaFree(d_dW);
    free(dW0), free(ref), free(got);
}

START_TEST(linear_backward_weight_accumulates_like_cpu)
{
    linear_backward_weight_case(77, 96, 200);
    linear_backward_weight_case(37, 24, 40);
    linear_backward_weight_case(3, 50, 17);
}
END_TEST

/* ---- column sums ------------------------------------------------------------ */

START_TEST(column_sum_matches_cpu)
{
    const int64_t cols = 200, rows_list[2] = {1000, 3}; /* 3: fewer rows than slices */
    for (int c = 0; c < 2; c++) {
        const int64_t rows = rows_list[c];
        const size_t n = (size_t)(rows * cols);
        char what[120];
        snprintf(what, sizeof what, "column_sum_accumulate %lld x %lld", (long long)rows,
                 (long long)cols);
        float *src = rand_f32(n, 0.0f, 1.0f), *dst0 = rand_f32((size_t)cols, 0.0f, 1.0f);
        float *ref = dup_f(dst0, (size_t)cols);
        size_t ncpu = rp_kernel_ops_cpu.column_sum_scratch_floats(cols);
        float *cpu_scr = ncpu ? host_nan(ncpu) : NULL;
        CPU_OP(column_sum_accumulate, src, rows, cols, ref, cpu_scr);

        size_t nscr = g_k.ops->column_sum_scratch_floats(cols);
        float *d_scr = nscr ? dev_nan(nscr) : NULL;
        float *d_src = dev_upload(src, n * 4), *d_dst = dev_upload(dst0, (size_t)cols * 4);
        GPU_OP(column_sum_accumulate, d_src, rows, cols, d_dst, d_scr);
        float *got = get_f(d_dst, (size_t)cols);
        check_increment(got, ref, dst0, (size_t)cols, FP32_TOL, what);
        /* deterministic: the same bits from a fresh start */
        dev_set(d_dst, dst0, (size_t)cols * 4);
        if (d_scr)
            dev_poison(d_scr, nscr * 4);
        GPU_OP(column_sum_accumulate, d_src, rows, cols, d_dst, d_scr);
        float *again = get_f(d_dst, (size_t)cols);
        check_same_bits(again, got, (size_t)cols, what);
        cudaFree(d_scr), cudaFree(d_src), cudaFree(d_dst);
        free(src), free(dst0), free(ref), free(cpu_scr), free(got), free(again);
    }
}
END_TEST

/* ---- RMSNorm ------------------------------------------------------------------ */

static void rmsnorm_forward_case(int64_t rows, int64_t dim)
{
    const size_t n = (size_t)(rows * dim);
    const float eps = 1e-6f;
    float *x = rand_f32(n, 0.0f, 2.0f), *w = rand_f32((size_t)dim, 1.0f, 0.3f);
    float *d_x = dev_upload(x, n * 4), *d_w = dev_upload(w, (size_t)dim * 4);
    float *d_y = dev_alloc(n * 4), *d_r = dev_alloc((size_t)rows * 4);
    void *d_yc = dev_alloc(n * 2);
    static const char *const outs_name[3] = {"y", "y_compute", "y and y_compute"};
    for (int outs = 0; outs < 3; outs++) {
        char what[160];
        snprintf(what, sizeof what, "rmsnorm_forward %lld x %lld into %s", (long long)rows,
                 (long long)dim, outs_name[outs]);
        const int want_y = outs != 1, want_c = outs != 0;
        float *y_ref = host_nan(n), *yc_ref = host_nan(n), *r_ref = host_nan((size_t)rows);
        CPU_OP(rmsnorm_forward, x, w, want_y ? y_ref : NULL, want_c ? (void *)yc_ref : NULL,
               r_ref, rows, dim, eps);
        if (outs == 2)
            check_same_bits(yc_ref, y_ref, n, what);
        const float *ref = want_y ? y_ref : yc_ref;

        dev_poison(d_y, n * 4), dev_poison(d_yc, n * 2), dev_poison(d_r, (size_t)rows * 4);
        GPU_OP(rmsnorm_forward, d_x, d_w, want_y ? d_y : NULL, want_c ? d_yc : NULL, d_r, rows,
               dim, eps);
        float *r = get_f(d_r, (size_t)rows);
        CHECK_REL(r, r_ref, (size_t)rows, FP32_TOL, what);
        if (want_y) {
            float *y = get_f(d_y, n);
            CHECK_REL(y, ref, n, FP32_TOL, what);
            if (want_c)
                check_rounded_copy(d_yc, y, n, what);
            free(y);
        } else {
            float *yc = get_c(d_yc, n);
            CHECK_REL(yc, ref, n, bf16_tol(FP32_TOL), what);
            free(yc);
        }
        free(y_ref), free(yc_ref), free(r_ref), free(r);
    }
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_y), cudaFree(d_r), cudaFree(d_yc);
    free(x), free(w);
}

START_TEST(rmsnorm_forward_matches_cpu)
{
    rmsnorm_forward_case(77, 200);     /* per token */
    rmsnorm_forward_case(77 * 4, 64);  /* per head: 77 tokens x 4 heads */
    rmsnorm_forward_case(41, 100);     /* dim not a multiple of 32 */
    rmsnorm_forward_case(5, 1000);
}
END_TEST

static void rmsnorm_backward_case(int64_t rows, int64_t dim)
{
    const size_t n = (size_t)(rows * dim), nd = (size_t)dim;
    const float eps = 1e-6f;
    float *x = rand_f32(n, 0.0f, 2.0f), *w = rand_f32(nd, 1.0f, 0.3f);
    float *dy = rand_f32(n, 0.0f, 1.0f), *dx0 = rand_f32(n, 0.0f, 1.0f);
    float *dw0 = rand_f32(nd, 0.0f, 1.0f);
    /* both tables get the same rstd (the CPU forward's) */
    float *rstd = host_nan((size_t)rows), *y = host_nan(n);
    CPU_OP(rmsnorm_forward, x, w, y, NULL, rstd, rows, dim, eps);
    float *d_x = dev_upload(x, n * 4), *d_w = dev_upload(w, nd * 4);
    float *d_r = dev_upload(rstd, (size_t)rows * 4);
    /* the weight gradient's reduction is a column sum over dim columns */
    const size_t ncpu = rp_kernel_ops_cpu.column_sum_scratch_floats(dim);
    const size_t nscr = g_k.ops->column_sum_scratch_floats(dim);
    for (int acc = 0; acc <= 1; acc++)
        for (int alias = 0; alias <= 1; alias++)
            for (int with_dw = 0; with_dw <= 1; with_dw++)
                for (int with_c = 0; with_c <= 1; with_c++) {
                    char what[200];
                    snprintf(what, sizeof what,
                             "rmsnorm_backward %lld x %lld, accumulate %d, dx %s dy, dw %s, "
                             "dx_compute %s",
                             (long long)rows, (long long)dim, acc,
                             alias ? "aliasing" : "apart from", with_dw ? "given" : "NULL",
                             with_c ? "given" : "NULL");
                    /* what dx holds before the call */
                    const float *init = alias ? dy : dx0;
                    float *dy_ref = dup_f(dy, n);
                    float *dx_ref = alias ? dy_ref : (acc ? dup_f(dx0, n) : host_nan(n));
                    float *dxc_ref = with_c ? host_nan(n) : NULL;
                    float *dw_ref = with_dw ? dup_f(dw0, nd) : NULL;
                    float *cpu_scr = ncpu ? host_nan(ncpu) : NULL;
                    CPU_OP(rmsnorm_backward, x, w, rstd, dy_ref, dx_ref, dxc_ref, dw_ref, rows,
                           dim, acc, cpu_scr);
                    if (with_c)
                        check_same_bits(dxc_ref, dx_ref, n, what);

                    float *d_dy = dev_upload(dy, n * 4);
                    float *d_dx = alias ? d_dy : (acc ? dev_upload(dx0, n * 4) : dev_nan(n));
                    void *d_dxc = with_c ? dev_nan_c(n) : NULL;
                    float *d_dw = with_dw ? dev_upload(dw0, nd * 4) : NULL;
                    float *d_scr = nscr ? dev_nan(nscr) : NULL;
                    GPU_OP(rmsnorm_backward, d_x, d_w, d_r, d_dy, d_dx, d_dxc, d_dw, rows, dim,
                           acc, d_scr);
                    float *got = get_f(d_dx, n);
                    if (acc)
                        check_increment(got, dx_ref, init, n, FP32_TOL, what);
                    else
                        CHECK_REL(got, dx_ref, n, FP32_TOL, what);
                    if (with_c)
                        check_rounded_copy(d_dxc, got, n, what);
                    if (with_dw) {
                        float *got_dw = get_f(d_dw, nd);
                        check_increment(got_dw, dw_ref, dw0, nd, FP32_TOL, what);
                        free(got_dw);
                    }
                    free(got), free(dy_ref), free(dxc_ref), free(dw_ref), free(cpu_scr);
                    if (!alias)
                        free(dx_ref), cudaFree(d_dx);
                    cudaFree(d_dy), cudaFree(d_dxc), cudaFree(d_dw), cudaFree(d_scr);
                }
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_r);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(rstd), free(y);
}

START_TEST(rmsnorm_backward_matches_cpu)
{
    rmsnorm_backward_case(77, 200);
    rmsnorm_backward_case(77 * 4, 64);
    rmsnorm_backward_case(41, 100);
}
END_TEST

/* Document segments of the two sequences (segmented cases): starts at 0,
 * a few inside, a one-token document, one on a 64-token tile boundary and
 * the last token alone. */
static int32_t *segments(int64_t seqlen)
{
    int32_t *seg = malloc(sizeof(int32_t) * (size_t)(2 * seqlen));
    const int64_t starts[2][6] = {{0, 5, 6, 64, 130, seqlen - 1}, {0, seqlen / 3, seqlen / 2, -1, -1, -1}};
    for (int b = 0; b < 2; b++)
        for (int64_t t = 0, cur = 0; t < seqlen; t++) {
            for (int i = 0; i < 6; i++)
                if (starts[b][i] >= 0 && starts[b][i] < seqlen && starts[b][i] <= t &&
                    starts[b][i] > cur)
                    cur = starts[b][i];
            seg[b * seqlen + t] = (int32_t)cur;
        }
    return seg;
}

/* ---- RoPE ---------------------------------------------------------------------- */

/* x rotated by both tables (x_compute when with_c), compared. */
static void rope_run(const float *x, const float *cpu_tab, const float *gpu_tab, int64_t nseq,
                     int64_t S, const int32_t *seg, int64_t nh, int64_t hd, int inverse,
                     int with_c, const char *what)
{
    const size_t n = (size_t)(nseq * S * nh * hd);
    float *ref = dup_f(x, n), *ref_c = with_c ? host_nan(n) : NULL;
    int32_t *d_seg = seg ? dev_upload(seg, sizeof(int32_t) * (size_t)(nseq * S)) : NULL;
    CPU_OP(rope_apply, ref, ref_c, cpu_tab, nseq, S, seg, nh, hd, inverse);
    if (with_c)
        check_same_bits(ref_c, ref, n, what);
    float *d_x = dev_upload(x, n * 4);
    void *d_xc = with_c ? dev_nan_c(n) : NULL;
    GPU_OP(rope_apply, d_x, d_xc, gpu_tab, nseq, S, d_seg, nh, hd, inverse);
    float *got = get_f(d_x, n);
    CHECK_REL(got, ref, n, FP32_TOL, what);
    if (with_c)
        check_rounded_copy(d_xc, got, n, what);
    cudaFree(d_x), cudaFree(d_xc), cudaFree(d_seg);
    free(ref), free(ref_c), free(got);
}

static void rope_case(int64_t hd, double theta, const rp_rope_llama3 *l3)
{
    const int64_t half = hd / 2, nseq = 2, S = 200, nh = 3;
    const size_t n = (size_t)(nseq * S * nh * hd);
    float inv[64];
    ck_assert_int_le(half, 64);
    rp_rope_inv_freq(inv, hd, theta, l3);

    size_t ncpu = rp_kernel_ops_cpu.rope_table_floats(S, half);
    float *cpu_space = ncpu ? host_nan(ncpu) : NULL;
    const float *cpu_tab = NULL;
    CPU_OP(rope_table, inv, S, half, cpu_space, &cpu_tab);
    ck_assert_ptr_nonnull(cpu_tab);
    size_t ngpu = g_k.ops->rope_table_floats(S, half);
    float *gpu_space = ngpu ? dev_nan(ngpu) : NULL; /* 0: the state keeps its table */
    const float *gpu_tab = NULL;
    GPU_OP(rope_table, inv, S, half, gpu_space, &gpu_tab);
    ck_assert_ptr_nonnull(gpu_tab);

    char what[160];
    /* The table's entries, whatever its layout: a head of x = (1, ..., 1,
     * 0, ..., 0) turns into x'_i = 1 c_i - 0 s_i = c_i and x'_{half+i} =
     * 0 c_i + 1 s_i = s_i exactly (with or without fused multiply-adds), so
     * every (position, frequency) entry of both tables is compared. */
    float *e = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        e[i] = (int64_t)(i % (size_t)hd) < half ? 1.0f : 0.0f;
    snprintf(what, sizeof what, "rope_table head_dim %lld, %s: cos and sin", (long long)hd,
             l3 ? "llama3" : "plain");
    rope_run(e, cpu_tab, gpu_tab, nseq, S, NULL, nh, hd, 0, 0, what);
    free(e);

    float *x = rand_f32(n, 0.0f, 1.0f);
    for (int inverse = 0; inverse <= 1; inverse++)
        for (int with_c = 0; with_c <= 1; with_c++) {
            snprintf(what, sizeof what, "rope_apply head_dim %lld, %s, %s, x_compute %s",
                     (long long)hd, l3 ? "llama3" : "plain", inverse ? "inverse" : "forward",
                     with_c ? "given" : "NULL");
            rope_run(x, cpu_tab, gpu_tab, nseq, S, NULL, nh, hd, inverse, with_c, what);
        }
    int32_t *seg = segments(S); /* positions restarting at document starts */
    snprintf(what, sizeof what, "rope_apply head_dim %lld, %s, document segments", (long long)hd,
             l3 ? "llama3" : "plain");
    rope_run(x, cpu_tab, gpu_tab, nseq, S, seg, nh, hd, 0, 1, what);
    free(seg);
    free(x), free(cpu_space);
    cudaFree(gpu_space);
}

START_TEST(rope_matches_cpu)
{
    /* Llama 3.1's scaling: with head_dim 64 and 128 its frequencies fall in
     * all three bands (kept, interpolated, divided by the factor) */
    const rp_rope_llama3 l3 = {.factor = 8.0,
                               .low_freq_factor = 1.0,
                               .high_freq_factor = 4.0,
                               .original_max_position_embeddings = 8192.0};
    rope_case(64, 10000.0, NULL);
    rope_case(128, 1000000.0, NULL);
    rope_case(64, 500000.0, &l3);
    rope_case(128, 500000.0, &l3);
}
END_TEST

/* ---- attention ------------------------------------------------------------------- */

/* window > 0 and sinks: gpt-oss's (issue 35); 0 and 0 the others' */
static void attention_case_oss(int64_t seqlen, int64_t nheads, int64_t nkv, int64_t hd,
                               int segmented, int64_t window, int sinked)
{
    int32_t *seg = segmented ? segments(seqlen) : NULL;
    int32_t *d_seg = seg ? dev_upload(seg, sizeof(int32_t) * (size_t)(2 * seqlen)) : NULL;
    /* sinks of the order of the scores: some rows' weight mostly on them */
    float *sinks = sinked ? rand_f32((size_t)nheads, 0.5f, 1.5f) : NULL;
    float *d_sinks = sinks ? dev_upload(sinks, (size_t)nheads * 4) : NULL;
    const rp_attn_shape s = {.nseq = 2,
                             .seqlen = seqlen,
                             .nheads = nheads,
                             .nkv = nkv,
                             .head_dim = hd,
                             .block = 64,
                             .scale = (float)(1.0 / sqrt((double)hd)),
                             .seg_start = seg,
                             .window = window,
                             .sinks = sinks};
    rp_attn_shape gs = s; /* the GPU's: the segments and sinks in device memory */
    gs.seg_start = d_seg;
    gs.sinks = d_sinks;
    const int64_t T = s.nseq * seqlen;
    const size_t nq = (size_t)(T * s.nheads * hd), nk = (size_t)(T * nkv * hd);
    const size_t nl = (size_t)(T * s.nheads);
    char what[200];
    snprintf(what, sizeof what, "attention 2 x %lld tokens, %lld heads over %lld, head_dim %lld%s, "
             "window %lld%s", (long long)seqlen, (long long)nheads, (long long)nkv, (long long)hd,
             segmented ? ", document segments" : "", (long long)window, sinks ? ", sinks" : "");
    char w2[260];
    cin q = cin_rand(nq, 0.0f, 1.0f), k = cin_rand(nk, 0.0f, 1.0f), v = cin_rand(nk, 0.0f, 1.0f);
    cin dout = cin_rand(nq, 0.0f, 1.0f);

    /* forward: o (compute dtype) and lse */
    float *o_ref = host_nan(nq), *lse_ref = host_nan(nl);
    CPU_OP(attention_forward, &s, q.f, k.f, v.f, o_ref, lse_ref);
    void *d_o = dev_nan_c(nq);
    float *d_lse = dev_nan(nl);
    GPU_OP(attention_forward, &gs, q.d, k.d, v.d, d_o, d_lse);
    float *o = get_c(d_o, nq), *lse = get_f(d_lse, nl);
    snprintf(w2, sizeof w2, "%s: forward o", what);
    CHECK_REL(o, o_ref, nq, BF16_TOL, w2);
    snprintf(w2, sizeof w2, "%s: forward lse", what);
    CHECK_REL(lse, lse_ref, nl, LSE_TOL, w2);

    /* backward: both tables get the same o (the CPU's, rounded to bf16) and
     * lse (the CPU's), so only the backward is compared */
    cin oc = cin_from(o_ref, nq);
    float *d_lse_in = dev_upload(lse_ref, nl * 4);
    float *dq_ref = host_nan(nq), *dk_ref = host_nan(nk), *dv_ref = host_nan(nk);
    size_t ncpu = rp_kernel_ops_cpu.attention_backward_scratch_floats(&s);
    float *cpu_scr = ncpu ? host_nan(ncpu) : NULL;
    CPU_OP(attention_backward, &s, q.f, k.f, v.f, oc.f, lse_ref, dout.f, dq_ref, dk_ref, dv_ref,
           cpu_scr);
    size_t nscr = g_k.ops->attention_backward_scratch_floats(&gs);
    float *d_scr = nscr ? dev_nan(nscr) : NULL;
    float *d_dq = dev_nan(nq), *d_dk = dev_nan(nk), *d_dv = dev_nan(nk);
    GPU_OP(attention_backward, &gs, q.d, k.d, v.d, oc.d, d_lse_in, dout.d, d_dq, d_dk, d_dv,
           d_scr);
    float *dq = get_f(d_dq, nq), *dk = get_f(d_dk, nk), *dv = get_f(d_dv, nk);
    snprintf(w2, sizeof w2, "%s: backward dq", what);
    CHECK_REL(dq, dq_ref, nq, BF16_TOL, w2);
    snprintf(w2, sizeof w2, "%s: backward dk", what);
    CHECK_REL(dk, dk_ref, nk, BF16_TOL, w2);
    snprintf(w2, sizeof w2, "%s: backward dv", what);
    CHECK_REL(dv, dv_ref, nk, BF16_TOL, w2);

    /* deterministic: the same bits over fresh poison */
    dev_poison(d_dq, nq * 4), dev_poison(d_dk, nk * 4), dev_poison(d_dv, nk * 4);
    if (d_scr)
        dev_poison(d_scr, nscr * 4);
    GPU_OP(attention_backward, &gs, q.d, k.d, v.d, oc.d, d_lse_in, dout.d, d_dq, d_dk, d_dv,
           d_scr);
    float *dq2 = get_f(d_dq, nq), *dk2 = get_f(d_dk, nk), *dv2 = get_f(d_dv, nk);
    snprintf(w2, sizeof w2, "%s: backward run twice", what);
    check_same_bits(dq2, dq, nq, w2);
    check_same_bits(dk2, dk, nk, w2);
    check_same_bits(dv2, dv, nk, w2);

    /* the sinks' gradient, onto a non-zero one, from the same o and lse */
    if (sinks) {
        const size_t nh = (size_t)nheads;
        float *ds0 = rand_f32(nh, 0.0f, 1.0f), *ds_ref = dup_f(ds0, nh);
        CPU_OP(attention_sink_backward, &s, oc.f, lse_ref, dout.f, ds_ref);
        float *d_ds = dev_upload(ds0, nh * 4);
        GPU_OP(attention_sink_backward, &gs, oc.d, d_lse_in, dout.d, d_ds);
        float *ds = get_f(d_ds, nh);
        snprintf(w2, sizeof w2, "%s: the sinks' gradient", what);
        /* fp32 dot products of the same bf16 values in another order,
         * summed in double: GEMM_TOL */
        check_increment(ds, ds_ref, ds0, nh, GEMM_TOL, w2);
        cudaFree(d_ds);
        free(ds0), free(ds_ref), free(ds);
    }
    cudaFree(d_sinks);
    free(sinks);

    cin_free(&q), cin_free(&k), cin_free(&v), cin_free(&dout), cin_free(&oc);
    cudaFree(d_o), cudaFree(d_lse), cudaFree(d_lse_in), cudaFree(d_scr), cudaFree(d_seg);
    free(seg);
    cudaFree(d_dq), cudaFree(d_dk), cudaFree(d_dv);
    free(o_ref), free(lse_ref), free(o), free(lse), free(dq_ref), free(dk_ref), free(dv_ref);
    free(cpu_scr), free(dq), free(dk), free(dv), free(dq2), free(dk2), free(dv2);
}

static void attention_case(int64_t seqlen, int64_t nkv, int64_t hd, int segmented)
{
    attention_case_oss(seqlen, 4, nkv, hd, segmented, 0, 0);
}

START_TEST(attention_matches_cpu)
{
    const int64_t seqlens[2] = {200, 17}; /* several 64-row tiles and a partial one */
    for (int a = 0; a < 2; a++)
        for (int64_t nkv = 2; nkv <= 4; nkv += 2)
            for (int64_t hd = 64; hd <= 128; hd += 64)
                for (int segmented = 0; segmented < 2; segmented++)
                    attention_case(seqlens[a], nkv, hd, segmented);
}
END_TEST

/* ---- SwiGLU ---------------------------------------------------------------------- */

/* The inputs of one SwiGLU case: fp32 draws, or their bf16 rounding (the
 * CPU op then gets the rounded values). */
static void *swiglu_input(const float *x, float *rounded, int64_t n, int bf16)
{
    if (!bf16) {
        memcpy(rounded, x, (size_t)n * 4);
        return dev_upload(x, (size_t)n * 4);
    }
    cin c = cin_from(x, (size_t)n);
    memcpy(rounded, c.f, (size_t)n * 4);
    free(c.f);
    return c.d;
}

/* The values of a [rows, cols] matrix at a row stride ld from x + off,
 * contiguous. */
static float *packed(const float *x, int64_t off, int64_t ld, int64_t rows, int64_t cols)
{
    float *p = xmalloc((size_t)(rows * cols) * 4);
    for (int64_t r = 0; r < rows; r++)
        memcpy(p + r * cols, x + off + r * ld, (size_t)cols * 4);
    return p;
}

/* gu_bf16, dm_bf16: g and u, and dm, in bf16 (bf16-mlp's inputs) or fp32;
 * strided: g and u as the fused gate/up GEMM lays them out, rows of [g_row
 * | u_row | gap] (ld = 2 cols + 3, u = g + cols), else contiguous one
 * after the other (the two GEMMs' outputs). The gaps of the poisoned dg/du
 * buffer must stay NaN. */
static void swiglu_case(int gu_bf16, int dm_bf16, int strided)
{
    const int64_t rows = strided ? 37 : 1, cols = strided ? 135 : 5003; /* not a block multiple */
    const int64_t ld = strided ? 2 * cols + 3 : cols, uoff = cols;
    const int64_t n = rows * cols, span = (rows - 1) * ld + uoff + cols;
    char what[160];
    snprintf(what, sizeof what, "swiglu, g and u %s%s, dm %s", gu_bf16 ? "bf16" : "fp32",
             strided ? " at a row stride" : "", dm_bf16 ? "bf16" : "fp32");
    float *gu0 = rand_f32((size_t)span, 0.0f, 2.0f), *dm0 = rand_f32((size_t)n, 0.0f, 1.0f);
    float *gu = xmalloc((size_t)span * 4), *dm = xmalloc((size_t)n * 4);
    void *d_gu = swiglu_input(gu0, gu, span, gu_bf16), *d_dm = swiglu_input(dm0, dm, n, dm_bf16);
    void *d_u = (char *)d_gu + (size_t)uoff * (gu_bf16 ? 2 : 4);
    const rp_dtype gu_dt = gu_bf16 ? RP_BF16 : RP_F32, dm_dt = dm_bf16 ? RP_BF16 : RP_F32;
    float *m_ref = host_nan((size_t)n), *dgu_ref = host_nan((size_t)span);
    CPU_OP(swiglu_forward, gu, gu + uoff, RP_F32, ld, m_ref, rows, cols);
    CPU_OP(swiglu_backward, gu, gu + uoff, RP_F32, ld, dm, RP_F32, dgu_ref, dgu_ref + uoff, rows,
           cols);
    void *d_m = dev_nan_c((size_t)n), *d_dgu = dev_nan_c((size_t)span);
    void *d_du = (char *)d_dgu + (size_t)uoff * 2;
    uint16_t *first[2] = {NULL, NULL};
    for (int call = 0; call < 2; call++) {
        dev_poison(d_m, (size_t)n * 2), dev_poison(d_dgu, (size_t)span * 2);
        GPU_OP(swiglu_forward, d_gu, d_u, gu_dt, ld, d_m, rows, cols);
        GPU_OP(swiglu_backward, d_gu, d_u, gu_dt, ld, d_dm, dm_dt, d_dgu, d_du, rows, cols);
        void *outs[2] = {d_m, d_dgu};
        const size_t len[2] = {(size_t)n, (size_t)span};
        for (int o = 0; o < 2; o++) {
            uint16_t *b = get_bits(outs[o], len[o]);
            if (!call)
                first[o] = b;
            else {
                ck_assert_msg(memcmp(b, first[o], len[o] * 2) == 0,
                              "%s: output %d, a second call, other bits", what, o);
                free(b);
            }
        }
    }
    /* fp32 arithmetic on the same inputs (FP32_TOL), then a bf16 output */
    float *m = get_c(d_m, (size_t)n), *dgu = get_c(d_dgu, (size_t)span);
    float *dg = packed(dgu, 0, ld, rows, cols), *du = packed(dgu, uoff, ld, rows, cols);
    float *dg_ref = packed(dgu_ref, 0, ld, rows, cols), *du_ref = packed(dgu_ref, uoff, ld, rows,
                                                                          cols);
    CHECK_REL(m, m_ref, (size_t)n, bf16_tol(FP32_TOL), what);
    CHECK_REL(dg, dg_ref, (size_t)n, bf16_tol(FP32_TOL), what);
    CHECK_REL(du, du_ref, (size_t)n, bf16_tol(FP32_TOL), what);
    for (int64_t r = 0; r + 1 < rows; r++)
        for (int64_t c = uoff + cols; c < ld; c++)
            ck_assert_msg(isnan(dgu[r * ld + c]), "%s: gap [%lld, %lld] written", what,
                          (long long)r, (long long)c);
    cudaFree(d_gu), cudaFree(d_dm), cudaFree(d_m), cudaFree(d_dgu);
    free(gu0), free(dm0), free(gu), free(dm), free(m_ref), free(dgu_ref), free(m), free(dgu);
    free(dg), free(du), free(dg_ref), free(du_ref);
    for (int o = 0; o < 2; o++)
        free(first[o]);
}

START_TEST(swiglu_matches_cpu)
{
    for (int gu_bf16 = 0; gu_bf16 <= 1; gu_bf16++)
        for (int dm_bf16 = 0; dm_bf16 <= 1; dm_bf16++)
            for (int strided = 0; strided <= 1; strided++)
                swiglu_case(gu_bf16, dm_bf16, strided);
}
END_TEST

/* ---- LoRA: scaled add and dropout ------------------------------------------------- */

START_TEST(scaled_add_bit_identical)
{
    const int64_t n = 10007;
    const float alpha = 0.6180339f;
    float *x = rand_f32((size_t)n, 0.0f, 2.0f), *y0 = rand_f32((size_t)n, 0.0f, 2.0f);
    float *d_x = dev_upload(x, (size_t)n * 4), *d_y = dev_alloc((size_t)n * 4);
    void *d_yc = dev_nan_c((size_t)n);
    for (int accumulate = 0; accumulate <= 1; accumulate++) {
        float *ref = dup_f(y0, (size_t)n);
        CPU_OP(scaled_add, x, alpha, ref, NULL, n, accumulate);
        if (accumulate)
            dev_set(d_y, y0, (size_t)n * 4);
        else
            dev_poison(d_y, (size_t)n * 4);
        GPU_OP(scaled_add, d_x, alpha, d_y, d_yc, n, accumulate);
        float *y = get_f(d_y, (size_t)n);
        check_same_bits(y, ref, (size_t)n, accumulate ? "scaled_add y +=" : "scaled_add y =");
        check_rounded_copy(d_yc, ref, (size_t)n, "scaled_add y_compute");
        /* y aliasing x */
        float *xy = dup_f(x, (size_t)n);
        CPU_OP(scaled_add, xy, alpha, xy, NULL, n, accumulate);
        dev_set(d_y, x, (size_t)n * 4);
        GPU_OP(scaled_add, d_y, alpha, d_y, NULL, n, accumulate);
        float *got = get_f(d_y, (size_t)n);
        check_same_bits(got, xy, (size_t)n, "scaled_add y = x");
        free(ref), free(y), free(xy), free(got);
    }
    /* y NULL: only the rounded copy */
    float *ref = host_nan((size_t)n);
    CPU_OP(scaled_add, x, alpha, ref, NULL, n, 0);
    dev_poison(d_yc, (size_t)n * 2);
    GPU_OP(scaled_add, d_x, alpha, NULL, d_yc, n, 0);
    check_rounded_copy(d_yc, ref, (size_t)n, "scaled_add y NULL, y_compute");
    /* n == 0 writes nothing; accumulate without y is refused */
    dev_set(d_y, y0, (size_t)n * 4);
    GPU_OP(scaled_add, d_x, alpha, d_y, NULL, 0, 1);
    float *same = get_f(d_y, (size_t)n);
    check_same_bits(same, y0, (size_t)n, "scaled_add n == 0");
    ck_assert_int_eq(g_k.ops->scaled_add(g_k.state, d_x, alpha, NULL, d_yc, n, 1, &g_err),
                     RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(g_err.msg, "scaled_add") != NULL, "message: %s", g_err.msg);
    cudaFree(d_x), cudaFree(d_y), cudaFree(d_yc);
    free(x), free(y0), free(ref), free(same);
}
END_TEST

/* 300 rows of samples of 128 rows, starting 50 rows into a sample (a
 * tile of the MLP's): a sample split across calls' ends */
static void dropout_case(float p)
{
    const int64_t rows = 300, cols = 257, n = rows * cols;
    const rp_dropout_site site = {.seed = 2024, .step = 17, .layer = 9, .proj = 4,
                                  .first_sample = 3, .rows_per_sample = 128, .first_row = 50,
                                  .p = p};
    char what[64];
    /* fp32, = and += and in place */
    float *x = rand_f32((size_t)n, 0.0f, 1.0f), *y0 = rand_f32((size_t)n, 0.0f, 1.0f);
    float *d_x = dev_upload(x, (size_t)n * 4), *d_y = dev_alloc((size_t)n * 4);
    for (int accumulate = 0; accumulate <= 1; accumulate++) {
        float *ref = dup_f(y0, (size_t)n);
        CPU_OP(dropout, &site, x, ref, RP_F32, rows, cols, accumulate);
        if (accumulate)
            dev_set(d_y, y0, (size_t)n * 4);
        else
            dev_poison(d_y, (size_t)n * 4);
        GPU_OP(dropout, &site, d_x, d_y, RP_F32, rows, cols, accumulate);
        float *y = get_f(d_y, (size_t)n);
        snprintf(what, sizeof what, "dropout p %g fp32%s", (double)p, accumulate ? " +=" : "");
        check_same_bits(y, ref, (size_t)n, what);
        dev_set(d_y, accumulate ? y0 : x, (size_t)n * 4);
        if (accumulate) /* y += dropout(y) against the CPU's */
            memcpy(ref, y0, (size_t)n * 4);
        else
            memcpy(ref, x, (size_t)n * 4);
        CPU_OP(dropout, &site, ref, ref, RP_F32, rows, cols, accumulate);
        GPU_OP(dropout, &site, d_y, d_y, RP_F32, rows, cols, accumulate);
        free(y);
        y = get_f(d_y, (size_t)n);
        snprintf(what, sizeof what, "dropout p %g fp32 in place%s", (double)p,
                 accumulate ? " +=" : "");
        check_same_bits(y, ref, (size_t)n, what);
        free(ref), free(y);
    }
    /* bf16: the CPU's fp32 result on the same rounded inputs, rounded */
    cin xc = cin_from(x, (size_t)n);
    float *ref = host_nan((size_t)n);
    CPU_OP(dropout, &site, xc.f, ref, RP_F32, rows, cols, 0);
    void *d_yc = dev_nan_c((size_t)n);
    GPU_OP(dropout, &site, xc.d, d_yc, RP_BF16, rows, cols, 0);
    snprintf(what, sizeof what, "dropout p %g bf16", (double)p);
    check_rounded_copy(d_yc, ref, (size_t)n, what);
    GPU_OP(dropout, &site, xc.d, xc.d, RP_BF16, rows, cols, 0);
    snprintf(what, sizeof what, "dropout p %g bf16 in place", (double)p);
    check_rounded_copy(xc.d, ref, (size_t)n, what);
    cin_free(&xc);
    cudaFree(d_x), cudaFree(d_y), cudaFree(d_yc);
    free(x), free(y0), free(ref);
}

START_TEST(dropout_bit_identical)
{
    dropout_case(0.1f);
    dropout_case(0.5f);
    dropout_case(0.0f); /* a copy or a sum */
    /* refused, naming the op */
    const rp_dropout_site site = {.seed = 1, .rows_per_sample = 1, .p = 0.5f};
    rp_dropout_site bad_p = site;
    bad_p.p = 1.0f;
    void *d = dev_alloc(64 * 4);
    const struct {
        const rp_dropout_site *site;
        rp_dtype dtype;
        int accumulate;
        rp_status want;
    } refused[] = {
        {&site, RP_BF16, 1, RP_ERR_UNSUPPORTED},
        {&site, RP_F16, 0, RP_ERR_UNSUPPORTED},
        {&bad_p, RP_F32, 0, RP_ERR_INVALID_ARG},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        memset(&g_err, 0, sizeof g_err);
        rp_status s = g_k.ops->dropout(g_k.state, refused[i].site, d, d, refused[i].dtype, 8, 8,
                                       refused[i].accumulate, &g_err);
        ck_assert_int_eq(s, refused[i].want);
        ck_assert_msg(strstr(g_err.msg, "dropout") != NULL, "message: %s", g_err.msg);
    }
    cudaFree(d);
}
END_TEST

/* ---- cross-entropy and the loss sum ------------------------------------------------ */

START_TEST(cross_entropy_matches_cpu)
{
    const int64_t rows = 50, vocab = 1000;
    const float scale = 0.25f;
    const size_t n = (size_t)(rows * vocab);
    float *z = rand_f32(n, 0.0f, 3.0f);
    int32_t *tg_all = xmalloc((size_t)rows * 4), *tg_mask = xmalloc((size_t)rows * 4);
    uint8_t *counted = xmalloc((size_t)rows);
    uint64_t lcg = 777 + g_seed++;
    for (int64_t r = 0; r < rows; r++) {
        tg_all[r] = (int32_t)draw(&lcg, (uint32_t)vocab);
        counted[r] = (uint8_t)(r % 7 != 3); /* rows 3, 10, 17, ... do not count */
        /* an uncounted row's target may be anything: it must not be read */
        tg_mask[r] = counted[r] ? tg_all[r] : (r % 2 ? -7 : (int32_t)vocab + 11);
    }
    tg_all[0] = 0, tg_all[rows - 1] = (int32_t)vocab - 1;
    float *d_z = dev_alloc(n * 4);
    double *d_loss = dev_alloc((size_t)rows * 8);
    int32_t *d_tg_all = dev_upload(tg_all, (size_t)rows * 4);
    int32_t *d_tg_mask = dev_upload(tg_mask, (size_t)rows * 4);
    uint8_t *d_counted = dev_upload(counted, (size_t)rows);
    double *loss_ref = xmalloc((size_t)rows * 8), *loss = xmalloc((size_t)rows * 8);
    double *loss_fp32 = xmalloc((size_t)rows * 8);
    void *d_gc = dev_alloc(n * 2); /* the gradient in the compute dtype (bf16) */
    float *zg_fp32 = NULL;         /* grad 1's in-place fp32 gradient, for grad 2 */
    /* grad 2 and 3: the gradient into dlogits_compute (bf16) instead of in
     * place, 2 by the proven path (in place, then the convert kernel), 3 by
     * the fused store RP_ALLOW_UNPROVEN_CUDA=fused-xent enables (given to
     * the table with the attention choice); grad 4: in place, the row sums
     * in float (xent-fp32): other bits, within the same bounds of the CPU's
     * (a sum of <= 2 terms a thread and a 9-level tree: |error| of lse <~
     * 1e-6, and z - lse rounded once more: ~2e-6 of each gradient term) */
    for (int masked = 0; masked <= 1; masked++)
        for (int grad = 0; grad <= 4; grad++) {
            char what[120];
            snprintf(what, sizeof what, "cross_entropy %lld x %lld, counted %s, grad %d",
                     (long long)rows, (long long)vocab, masked ? "mask" : "NULL", grad);
            const int32_t *tg = masked ? tg_mask : tg_all;
            const uint8_t *cnt = masked ? counted : NULL;
            float *z_ref = dup_f(z, n);
            memset(loss_ref, 0xff, (size_t)rows * 8);
            CPU_OP(cross_entropy, z_ref, rows, vocab, tg, cnt, scale, loss_ref, grad != 0, NULL);
            dev_set(d_z, z, n * 4);
            dev_poison(d_loss, (size_t)rows * 8);
            dev_poison(d_gc, n * 2);
            const unsigned paths = grad == 3   ? 1u << RP_UNPROVEN_FUSED_XENT
                                   : grad == 4 ? 1u << RP_UNPROVEN_XENT_FP32
                                               : 0u;
            const int into_compute = grad == 2 || grad == 3;
            ck_assert_int_eq(rp_cuda_kernels_choose_attention(&g_k, RP_ATTENTION_OWN, paths,
                                                              &g_err),
                             RP_OK);
            GPU_OP(cross_entropy, d_z, rows, vocab, masked ? d_tg_mask : d_tg_all,
                   masked ? d_counted : NULL, scale, d_loss, grad != 0,
                   into_compute ? d_gc : NULL);
            sync_ops();
            dev_download(loss, d_loss, (size_t)rows * 8);
            float *zg = get_f(d_z, n);
            if (grad == 1)
                memcpy(loss_fp32, loss, (size_t)rows * 8);
            if (into_compute) {
                /* the same statistics bit for bit, each bf16 element exactly
                 * the rounding of the fp32 gradient grad 1 wrote in place,
                 * and the fused pass only reads the fp32 logits */
                if (grad == 3)
                    check_same_bits(zg, z, n, what);
                for (int64_t r = 0; r < rows; r++)
                    ck_assert_msg(memcmp(&loss[r], &loss_fp32[r], 8) == 0,
                                  "%s: row %lld loss %.17g, in-place pass %.17g", what,
                                  (long long)r, loss[r], loss_fp32[r]);
                uint16_t *gc = get_bits(d_gc, n);
                for (size_t i = 0; i < n; i++)
                    ck_assert_msg(gc[i] == rp_f32_to_bf16(zg_fp32[i]),
                                  "%s: bf16 gradient [%zu] 0x%04x, the fp32 one rounded 0x%04x",
                                  what, i, gc[i], rp_f32_to_bf16(zg_fp32[i]));
                free(gc);
                free(zg);
                zg = get_c(d_gc, n); /* widened: the checks against the CPU below */
            }
            /* loss: lse - z_t in double over expf terms; expf differs by <= 2
             * ulps between the two, which moves the loss by ~3e-7 absolute */
            for (int64_t r = 0; r < rows; r++) {
                const int counts = !cnt || cnt[r];
                if (!counts) {
                    ck_assert_msg(loss[r] == 0.0 && loss_ref[r] == 0.0,
                                  "%s: uncounted row %lld has loss %g (cpu %g)", what,
                                  (long long)r, loss[r], loss_ref[r]);
                    continue;
                }
                ck_assert_msg(isfinite(loss[r]) &&
                                  fabs(loss[r] - loss_ref[r]) <=
                                      FP32_TOL * fmax(1.0, fabs(loss_ref[r])),
                              "%s: row %lld loss %.10g vs cpu %.10g", what, (long long)r,
                              loss[r], loss_ref[r]);
            }
            if (!grad) { /* the logits stay as they were */
                check_same_bits(zg, z, n, what);
                check_same_bits(z_ref, z, n, what);
            } else {
                /* scale * expf(z - lse): the argument moves by ~3e-7 and
                 * expf by 2 ulps, so each element by <= ~6e-7 * scale */
                for (int64_t r = 0; r < rows; r++) {
                    const int counts = !cnt || cnt[r];
                    for (int64_t j = 0; j < vocab; j++) {
                        const size_t i = (size_t)(r * vocab + j);
                        ck_assert_msg(isfinite(zg[i]), "%s: gradient [%lld, %lld] is %f", what,
                                      (long long)r, (long long)j, (double)zg[i]);
                        if (!counts)
                            ck_assert_msg(zg[i] == 0.0f && z_ref[i] == 0.0f,
                                          "%s: uncounted row %lld: gradient %g (cpu %g)", what,
                                          (long long)r, (double)zg[i], (double)z_ref[i]);
                        else
                            ck_assert_msg(fabs((double)zg[i] - (double)z_ref[i]) <=
                                              (into_compute ? bf16_tol(FP32_TOL) : FP32_TOL) *
                                                  scale,
                                          "%s: gradient [%lld, %lld] %.9g vs cpu %.9g", what,
                                          (long long)r, (long long)j, (double)zg[i],
                                          (double)z_ref[i]);
                    }
                }
            }
            free(z_ref);
            if (grad == 1) {
                free(zg_fp32);
                zg_fp32 = zg;
            } else {
                free(zg);
            }
        }
    ck_assert_int_eq(rp_cuda_kernels_choose_attention(&g_k, RP_ATTENTION_OWN, 0, &g_err), RP_OK);
    cudaFree(d_z), cudaFree(d_loss), cudaFree(d_tg_all), cudaFree(d_tg_mask), cudaFree(d_counted);
    cudaFree(d_gc);
    free(z), free(tg_all), free(tg_mask), free(counted), free(loss_ref), free(loss);
    free(loss_fp32), free(zg_fp32);
}
END_TEST

START_TEST(sum_to_host_is_in_order)
{
    const int64_t n = 1000;
    float *r = rand_f32((size_t)n, 0.0f, 1.0f);
    double *v = xmalloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) /* magnitudes 1e-4 .. 1e4: the order shows in the bits */
        v[i] = (double)r[i] * pow(10.0, (double)(i % 9) - 4.0);
    v[10] = 1e17, v[600] = -1e17; /* what lies between is rounded into 1e17 */
    double want = 0.0;
    for (int64_t i = 0; i < n; i++)
        want += v[i];
    double cpu = -1.0, got = -1.0;
    CPU_OP(sum_to_host, v, n, &cpu);
    ck_assert_msg(memcmp(&cpu, &want, 8) == 0, "cpu sum_to_host %.17g, in order %.17g", cpu, want);
    double *d_src = dev_upload(v, (size_t)n * 8), *d_v = dev_alloc((size_t)n * 8);
    dev_poison(d_v, (size_t)n * 8);
    /* queued right before the sum on the same stream: the sum must wait */
    GPU_OP(copy, d_v, d_src, (size_t)n * 8);
    GPU_OP(sum_to_host, d_v, n, &got);
    ck_assert_msg(memcmp(&got, &want, 8) == 0, "cuda sum_to_host %.17g, in order %.17g", got,
                  want);
    /* no values: 0 */
    cpu = got = -1.0;
    CPU_OP(sum_to_host, v, 0, &cpu);
    GPU_OP(sum_to_host, d_v, 0, &got);
    ck_assert(cpu == 0.0 && got == 0.0);
    sync_ops();
    cudaFree(d_src), cudaFree(d_v);
    free(r), free(v);
}
END_TEST

/* ---- ids and the embedding ---------------------------------------------------------- */

/* Both tables' check_ids on ids (mask optional): RP_OK when bad_pos < 0,
 * else RP_ERR_RANGE whose message names the id at bad_pos and bad_pos. */
static void ids_case(const int32_t *ids, const uint8_t *mask, int64_t n, int64_t limit,
                     int64_t bad_pos, const char *label)
{
    int32_t *d_ids = dev_upload(ids, (size_t)n * 4);
    uint8_t *d_mask = mask ? dev_upload(mask, (size_t)n) : NULL;
    const char *what = "microbatch 3", *kind = "target";
    rp_error ec, eg;
    memset(&ec, 0, sizeof ec), memset(&eg, 0, sizeof eg);
    rp_status sc = rp_kernel_ops_cpu.check_ids(NULL, ids, mask, n, limit, what, kind, &ec);
    rp_status sg = g_k.ops->check_ids(g_k.state, d_ids, d_mask, n, limit, what, kind, &eg);
    if (bad_pos < 0) {
        ck_assert_msg(sc == RP_OK, "%s: cpu check_ids %d: %s", label, (int)sc, ec.msg);
        ck_assert_msg(sg == RP_OK, "%s: cuda check_ids %d: %s", label, (int)sg, eg.msg);
    } else {
        char want[256];
        snprintf(want, sizeof want,
                 "%s: %s %d at position %lld is outside the vocabulary [0, %lld)", what, kind,
                 (int)ids[bad_pos], (long long)bad_pos, (long long)limit);
        ck_assert_msg(sc == RP_ERR_RANGE, "%s: cpu check_ids %d (%s)", label, (int)sc, ec.msg);
        ck_assert_msg(sg == RP_ERR_RANGE, "%s: cuda check_ids %d (%s)", label, (int)sg, eg.msg);
        ck_assert_msg(strstr(ec.msg, want), "%s: cpu says \"%s\", want \"%s\"", label, ec.msg,
                      want);
        ck_assert_msg(strstr(eg.msg, want), "%s: cuda says \"%s\", want \"%s\"", label, eg.msg,
                      want);
    }
    sync_ops();
    cudaFree(d_ids), cudaFree(d_mask);
}

START_TEST(check_ids_matches_cpu)
{
    const int64_t n = 500, limit = 1000;
    int32_t *ids = xmalloc((size_t)n * 4);
    uint8_t *mask = xmalloc((size_t)n);
    uint64_t lcg = 4242 + g_seed++;
    for (int64_t t = 0; t < n; t++)
        ids[t] = (int32_t)draw(&lcg, (uint32_t)limit);
    ids[7] = 0, ids[8] = (int32_t)limit - 1; /* the edges are in range */
    memset(mask, 1, (size_t)n);
    mask[20] = mask[21] = 0;
    ids_case(ids, NULL, n, limit, -1, "all in range");
    ids_case(ids, mask, n, limit, -1, "all in range, masked");
    ids[300] = -1;
    ids[123] = (int32_t)limit; /* the first bad one */
    ids_case(ids, NULL, n, limit, 123, "two bad ids");
    mask[123] = 0;
    ids_case(ids, mask, n, limit, 300, "the first bad id masked out");
    mask[300] = 0;
    ids_case(ids, mask, n, limit, -1, "both bad ids masked out");
    ids[123] = ids[300] = 5;
    ids[n - 1] = INT32_MAX;
    ids_case(ids, mask, n, limit, n - 1, "the last id bad");
    ids[0] = INT32_MIN;
    ids_case(ids, NULL, n, limit, 0, "the first id bad");
    free(ids), free(mask);
}
END_TEST

START_TEST(embed_bit_identical)
{
    const int64_t V = 301, H = 200, n = 777; /* H not a multiple of a block */
    const size_t nw = (size_t)(V * H), no = (size_t)(n * H);
    float *W = rand_f32(nw, 0.0f, 1.0f), *dW0 = rand_f32(nw, 0.0f, 1.0f);
    float *dout1 = rand_f32(no, 0.0f, 1.0f), *dout2 = rand_f32(no, 0.0f, 1.0f);
    uint16_t *Wb = xmalloc(nw * 2);
    rp_f32_to_bf16_array(W, Wb, nw);
    int32_t *tok = xmalloc((size_t)n * 4);
    uint64_t lcg = 12345 + g_seed++;
    for (int64_t t = 0; t < n; t++) /* many repeats of 40 tokens, and the last row */
        tok[t] = (int32_t)draw(&lcg, 40);
    tok[5] = (int32_t)V - 1, tok[n - 1] = 0;
    int32_t *d_tok = dev_upload(tok, (size_t)n * 4);

    /* forward from an fp32 and from a bf16 table: the rows, widened exactly */
    float *want = xmalloc(no * 4);
    for (int bf = 0; bf <= 1; bf++) {
        const char *what = bf ? "embed_forward, bf16 W" : "embed_forward, fp32 W";
        const rp_dtype dt = bf ? RP_BF16 : RP_F32;
        const void *Wh = bf ? (const void *)Wb : (const void *)W;
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < H; j++) {
                const size_t src = (size_t)(tok[t] * H + j);
                want[t * H + j] = bf ? rp_bf16_to_f32(Wb[src]) : W[src];
            }
        float *out_ref = host_nan(no);
        CPU_OP(embed_forward, Wh, dt, tok, n, H, out_ref);
        check_same_bits(out_ref, want, no, what);
        void *d_W = dev_upload(Wh, nw * (bf ? 2 : 4));
        float *d_out = dev_nan(no);
        GPU_OP(embed_forward, d_W, dt, d_tok, n, H, d_out);
        float *out = get_f(d_out, no);
        check_same_bits(out, want, no, what);
        cudaFree(d_W), cudaFree(d_out);
        free(out_ref), free(out);
    }

    /* two backward calls: dW0 + (the tokens of dout1 in order) + (of dout2) */
    float *dW_ref = dup_f(dW0, nw);
    CPU_OP(embed_backward, tok, n, H, V, dout1, dW_ref);
    CPU_OP(embed_backward, tok, n, H, V, dout2, dW_ref);
    float *d_dW = dev_upload(dW0, nw * 4), *d_d1 = dev_upload(dout1, no * 4);
    float *d_d2 = dev_upload(dout2, no * 4);
    GPU_OP(embed_backward, d_tok, n, H, V, d_d1, d_dW);
    GPU_OP(embed_backward, d_tok, n, H, V, d_d2, d_dW);
    float *dW = get_f(d_dW, nw);
    check_same_bits(dW, dW_ref, nw, "embed_backward, two calls");

    cudaFree(d_tok), cudaFree(d_dW), cudaFree(d_d1), cudaFree(d_d2);
    free(W), free(Wb), free(dW0), free(dout1), free(dout2), free(tok), free(want);
    free(dW_ref), free(dW);
}
END_TEST

/* ---- copies ---------------------------------------------------------------------------- */

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int is_nan_elem(const void *p, size_t i, rp_dtype t)
{
    return t == RP_F32 ? isnan(((const float *)p)[i])
                       : isnan(rp_bf16_to_f32(((const uint16_t *)p)[i]));
}

/* Both tables convert src (n elements of `from`, host) to `to`; every
 * element must have the bits of want, except that a NaN converted to
 * another dtype need only stay a NaN (rp_f32_to_bf16 keeps the payload,
 * __float2bfloat16_rn gives its canonical NaN). Each table runs twice, over
 * outputs poisoned with all-ones bytes (NaN) and with zero bytes, so that no
 * unwritten element can pass as a NaN or as a zero. */
static void convert_case(const void *src, rp_dtype from, rp_dtype to, int64_t n,
                         const char *what)
{
    const size_t sz_from = rp_dtype_size(from), sz_to = rp_dtype_size(to);
    const size_t sb = (size_t)n * sz_from, db = (size_t)n * sz_to;
    unsigned char *want = xmalloc(db), *got = xmalloc(db);
    for (size_t i = 0; i < (size_t)n; i++) {
        if (from == to)
            memcpy(want + i * sz_to, (const unsigned char *)src + i * sz_from, sz_to);
        else if (from == RP_F32) {
            uint16_t b = rp_f32_to_bf16(((const float *)src)[i]);
            memcpy(want + i * 2, &b, 2);
        } else {
            float f = rp_bf16_to_f32(((const uint16_t *)src)[i]);
            memcpy(want + i * 4, &f, 4);
        }
    }
    void *d_src = dev_upload(src, sb), *d_dst = dev_alloc(db);
    const int fill[2] = {0xff, 0x00};
    for (int table = 0; table < 2; table++)
        for (int p = 0; p < 2; p++) {
            if (table == 0) {
                memset(got, fill[p], db);
                CPU_OP(convert, src, from, got, to, n);
            } else {
                ck_assert(cudaMemset(d_dst, fill[p], db) == cudaSuccess);
                ck_assert(cudaDeviceSynchronize() == cudaSuccess);
                GPU_OP(convert, d_src, from, d_dst, to, n);
                sync_ops();
                dev_download(got, d_dst, db);
            }
            for (size_t i = 0; i < (size_t)n; i++) {
                if (from != to && is_nan_elem(src, i, from)) {
                    ck_assert_msg(is_nan_elem(got, i, to), "%s (%s, poison 0x%02x): NaN [%zu] "
                                  "is no longer a NaN", what, table ? "cuda" : "cpu", fill[p], i);
                    continue;
                }
                uint32_t g = 0, w = 0;
                memcpy(&g, got + i * sz_to, sz_to);
                memcpy(&w, want + i * sz_to, sz_to);
                ck_assert_msg(g == w, "%s (%s, poison 0x%02x): [%zu] is 0x%0*x, want 0x%0*x",
                              what, table ? "cuda" : "cpu", fill[p], i, (int)(2 * sz_to), g,
                              (int)(2 * sz_to), w);
            }
        }
    cudaFree(d_src), cudaFree(d_dst);
    free(want), free(got);
}

START_TEST(convert_matches_host)
{
    const int64_t n = 10007;
    float *x = rand_f32((size_t)n, 0.0f, 3.0f);
    const float special[] = {
        0.0f, -0.0f, 1e-40f, -1e-40f,  /* zeros, subnormals */
        3.0e38f, bits_f(0x7f7fffffu),  /* large; FLT_MAX rounds up to infinity */
        INFINITY, -INFINITY,
        bits_f(0x3f808000u),           /* a tie: to the even 0x3f80 */
        bits_f(0x3f818000u),           /* a tie: to the even 0x3f82 */
        bits_f(0xbf808001u),           /* just above a tie: away */
        bits_f(0x00008000u),           /* a subnormal tie */
        NAN, bits_f(0xffa12345u),      /* a quiet NaN; a signalling one with a payload */
    };
    memcpy(x, special, sizeof special);
    /* every bf16 bit pattern: zeros, subnormals, normals, infinities, NaNs */
    const int64_t nb = 65536;
    uint16_t *b = xmalloc((size_t)nb * 2);
    for (int64_t i = 0; i < nb; i++)
        b[i] = (uint16_t)i;
    convert_case(x, RP_F32, RP_BF16, n, "convert fp32 -> bf16");
    convert_case(b, RP_BF16, RP_F32, nb, "convert bf16 -> fp32");
    convert_case(x, RP_F32, RP_F32, n, "convert fp32 -> fp32");
    convert_case(b, RP_BF16, RP_BF16, nb, "convert bf16 -> bf16");
    free(x), free(b);
}
END_TEST

START_TEST(copy_is_exact)
{
    const size_t bytes = 10007, pad = 16, src_off = 3, dst_off = 5;
    const size_t total = bytes + 2 * pad;
    float *r = rand_f32((total + 3) / 4, 0.0f, 1.0f);
    const unsigned char *src = (const unsigned char *)r;
    unsigned char *want = xmalloc(total), *cpu = xmalloc(total), *got = xmalloc(total);
    memset(want, 0xff, total);
    memcpy(want + dst_off, src + src_off, bytes);
    memset(cpu, 0xff, total);
    CPU_OP(copy, cpu + dst_off, src + src_off, bytes);
    ck_assert(memcmp(cpu, want, total) == 0);
    unsigned char *d_src = dev_upload(src, total), *d_dst = dev_alloc(total);
    dev_poison(d_dst, total);
    GPU_OP(copy, d_dst + dst_off, d_src + src_off, bytes);
    sync_ops();
    dev_download(got, d_dst, total);
    for (size_t i = 0; i < total; i++)
        ck_assert_msg(got[i] == want[i], "copy: byte %zu is 0x%02x, want 0x%02x", i, got[i],
                      want[i]);
    cudaFree(d_src), cudaFree(d_dst);
    free(r), free(want), free(cpu), free(got);
}
END_TEST

START_TEST(fp8_dequantise_bit_identical)
{
    const int ncases = (int)(sizeof fp8_shapes / sizeof fp8_shapes[0]) * 3;
    for (int i = 0; i < ncases; i++) {
        fp8_case c = fp8_make(i);
        const int64_t n = c.rows * c.cols;
        uint8_t *dw = dev_upload(c.w, (size_t)n);
        unsigned char *ds = dev_upload(c.scale_buf, c.scale_bytes + 1);
        for (int bf16 = 0; bf16 < 2; bf16++) {
            const rp_dtype dt = bf16 ? RP_BF16 : RP_F32;
            const size_t bytes = (size_t)n * rp_dtype_size(dt);
            unsigned char *want = xmalloc(bytes), *got = xmalloc(bytes);
            void *dd = dev_alloc(bytes);
            dev_poison(dd, bytes);
            CPU_OP(fp8_dequantise, c.w, c.scale_buf + 1, c.scale_dtype, c.rows, c.cols, c.br,
                   c.bc, want, dt);
            GPU_OP(fp8_dequantise, dw, ds + 1, c.scale_dtype, c.rows, c.cols, c.br, c.bc, dd, dt);
            sync_ops();
            dev_download(got, dd, bytes);
            for (int64_t k = 0; k < n; k++) {
                const int nan = (c.w[k] & 0x7f) == 0x7f;
                float a, b;
                if (bf16) {
                    uint16_t x, y;
                    memcpy(&x, got + 2 * k, 2), memcpy(&y, want + 2 * k, 2);
                    a = rp_bf16_to_f32(x), b = rp_bf16_to_f32(y);
                    ck_assert_msg(nan ? isnan(a) && isnan(b) : x == y, "case %d %s element %lld: "
                                  "0x%04x, the CPU's 0x%04x", i, rp_dtype_name(dt), (long long)k,
                                  x, y);
                } else {
                    memcpy(&a, got + 4 * k, 4), memcpy(&b, want + 4 * k, 4);
                    ck_assert_msg(nan ? isnan(a) && isnan(b) : memcmp(&a, &b, 4) == 0,
                                  "case %d element %lld: %a, the CPU's %a", i, (long long)k,
                                  (double)a, (double)b);
                }
            }
            cudaFree(dd);
            free(want), free(got);
        }
        cudaFree(dw), cudaFree(ds);
        fp8_free(&c);
    }
}
END_TEST

/* ---- gpt-oss's ops (issue 35) ----------------------------------------------------- */

START_TEST(swiglu_clamped_matches_cpu)
{
    const int64_t n = 5003;
    const float limit = 1.5f, alpha = 1.3f;
    /* about a third of g above the limit, of u beyond +-limit */
    float *g = rand_f32((size_t)n, 0.5f, 2.0f), *u = rand_f32((size_t)n, 0.0f, 2.0f);
    float *dm = rand_f32((size_t)n, 0.0f, 1.0f);
    int64_t gate_cut = 0, up_cut = 0;
    for (int64_t i = 0; i < n; i++)
        gate_cut += g[i] > limit, up_cut += u[i] > limit || u[i] < -limit;
    ck_assert_msg(gate_cut > n / 10 && up_cut > n / 10, "clamped: gate %lld, up %lld of %lld",
                  (long long)gate_cut, (long long)up_cut, (long long)n);
    float *m_ref = host_nan((size_t)n), *dg_ref = host_nan((size_t)n), *du_ref = host_nan(n);
    CPU_OP(swiglu_clamped_forward, g, u, limit, alpha, m_ref, n);
    CPU_OP(swiglu_clamped_backward, g, u, limit, alpha, dm, dg_ref, du_ref, n);
    float *d_g = dev_upload(g, (size_t)n * 4), *d_u = dev_upload(u, (size_t)n * 4);
    float *d_dm = dev_upload(dm, (size_t)n * 4);
    void *d_m = dev_nan_c((size_t)n), *d_dg = dev_nan_c((size_t)n), *d_du = dev_nan_c(n);
    GPU_OP(swiglu_clamped_forward, d_g, d_u, limit, alpha, d_m, n);
    GPU_OP(swiglu_clamped_backward, d_g, d_u, limit, alpha, d_dm, d_dg, d_du, n);
    float *m = get_c(d_m, (size_t)n), *dg = get_c(d_dg, (size_t)n), *du = get_c(d_du, n);
    CHECK_REL(m, m_ref, (size_t)n, bf16_tol(FP32_TOL), "swiglu_clamped_forward m");
    CHECK_REL(dg, dg_ref, (size_t)n, bf16_tol(FP32_TOL), "swiglu_clamped_backward dg");
    CHECK_REL(du, du_ref, (size_t)n, bf16_tol(FP32_TOL), "swiglu_clamped_backward du");
    /* no gradient through a clamped value, exactly */
    for (int64_t i = 0; i < n; i++) {
        if (g[i] > limit)
            ck_assert_msg(dg[i] == 0.0f, "dg[%lld] = %g past the clamp", (long long)i, dg[i]);
        if (u[i] > limit || u[i] < -limit)
            ck_assert_msg(du[i] == 0.0f, "du[%lld] = %g past the clamp", (long long)i, du[i]);
    }
    cudaFree(d_g), cudaFree(d_u), cudaFree(d_dm), cudaFree(d_m), cudaFree(d_dg), cudaFree(d_du);
    free(g), free(u), free(dm), free(m_ref), free(dg_ref), free(du_ref), free(m), free(dg);
    free(du);
}
END_TEST

START_TEST(grouped_bias_bit_identical)
{
    /* 4 experts, one of them empty, over 53 rows of 70 columns */
    enum { E = 4, ROWS = 53, OUT = 70 };
    const int32_t offsets[E + 1] = {0, 17, 17, 44, ROWS};
    const size_t ny = (size_t)ROWS * OUT;
    int32_t *d_off = dev_upload(offsets, sizeof offsets);
    float *bias[E], *d_bias[E], *db0[E], *db_ref[E], *d_db[E];
    for (int e = 0; e < E; e++) {
        bias[e] = rand_f32(OUT, 0.0f, 1.0f);
        d_bias[e] = dev_upload(bias[e], OUT * 4);
        db0[e] = rand_f32(OUT, 0.0f, 1.0f);
        db_ref[e] = dup_f(db0[e], OUT);
        d_db[e] = dev_upload(db0[e], OUT * 4);
    }
    /* the empty expert's bias and gradient are never read or touched: NaN */
    memset(bias[1], 0xff, OUT * 4), memset(db0[1], 0xff, OUT * 4), memset(db_ref[1], 0xff, OUT * 4);
    dev_set(d_bias[1], bias[1], OUT * 4), dev_set(d_db[1], db0[1], OUT * 4);
    float *y0 = rand_f32(ny, 0.0f, 1.0f), *y_ref = dup_f(y0, ny);
    /* dy in the compute dtype, as the grouped GEMMs' gradients come */
    cin dy = cin_rand(ny, 0.0f, 1.0f);
    CPU_OP(grouped_bias_forward, y_ref, NULL, (const float *const *)bias, offsets, E, ROWS, OUT);
    CPU_OP(grouped_bias_backward, dy.f, offsets, E, ROWS, OUT, db_ref);
    float *d_y = dev_upload(y0, ny * 4);
    void *d_yc = dev_nan_c(ny);
    GPU_OP(grouped_bias_forward, d_y, d_yc, (const float *const *)d_bias, d_off, E, ROWS, OUT);
    GPU_OP(grouped_bias_backward, dy.d, d_off, E, ROWS, OUT, d_db);
    float *y = get_f(d_y, ny);
    check_same_bits(y, y_ref, ny, "grouped_bias_forward y");
    check_rounded_copy(d_yc, y_ref, ny, "grouped_bias_forward y_compute");
    for (int e = 0; e < E; e++) {
        float *db = get_f(d_db[e], OUT);
        check_same_bits(db, db_ref[e], OUT, e == 1 ? "grouped_bias_backward: the empty expert's "
                                                     "dbias"
                                                   : "grouped_bias_backward dbias");
        free(db);
    }
    /* y alone, without its copy */
    float *d_y2 = dev_upload(y0, ny * 4);
    GPU_OP(grouped_bias_forward, d_y2, NULL, (const float *const *)d_bias, d_off, E, ROWS, OUT);
    float *y2 = get_f(d_y2, ny);
    check_same_bits(y2, y_ref, ny, "grouped_bias_forward y without y_compute");
    for (int e = 0; e < E; e++) {
        cudaFree(d_bias[e]), cudaFree(d_db[e]);
        free(bias[e]), free(db0[e]), free(db_ref[e]);
    }
    cudaFree(d_off), cudaFree(d_y), cudaFree(d_yc), cudaFree(d_y2);
    cin_free(&dy);
    free(y0), free(y_ref), free(y), free(y2);
}
END_TEST

/* gpt-oss's attention: windows shorter than a tile, across tiles and
 * longer than the sequence, with and without sinks and segments */
START_TEST(attention_gpt_oss_matches_cpu)
{
    const int64_t windows[3] = {5, 70, 400};
    for (int w = 0; w < 3; w++)
        for (int sinked = 0; sinked < 2; sinked++) {
            attention_case_oss(200, 4, 2, 64, 0, windows[w], sinked);
            attention_case_oss(17, 4, 4, 128, 1, windows[w], sinked);
        }
    attention_case_oss(200, 4, 4, 64, 1, 0, 1); /* sinks alone */
    /* past one tile with head_dim 128 (its 32-row dq and dk/dv tiles), a
     * window of one tile (64), and gpt-oss's own shape: 64 heads over 8 of
     * 64, a window of 128 (two tiles), sinks, over document segments */
    attention_case_oss(200, 4, 2, 128, 1, 70, 1);
    attention_case_oss(200, 8, 2, 64, 1, 64, 0);
    attention_case_oss(300, 64, 8, 64, 1, 128, 1);
}
END_TEST

#endif /* RP_HAVE_CUDA_EXECUTOR */

#ifndef RP_HAVE_CUDA_EXECUTOR
static int g_have_device; /* no CUDA back end in this build */
#endif

static Suite *kernel_ops_suite(void)
{
    Suite *s = suite_create("kernel_ops");
    TCase *tc = tcase_create("tables");
    tcase_add_test(tc, tables_complete_and_typed);
    tcase_add_test(tc, fp8_dequantise_cpu_brute_force);
    tcase_add_test(tc, cross_entropy_cpu_brute_force);
    tcase_add_test(tc, linear_forward_compute_only_cpu_brute_force);
    tcase_add_test(tc, swiglu_cpu_input_dtypes);
    tcase_add_test(tc, swiglu_cpu_strided_brute_force);
    suite_add_tcase(s, tc);
#ifdef RP_HAVE_CUDA_EXECUTOR
    if (g_have_device) {
        TCase *td = tcase_create("cuda_vs_cpu");
        tcase_set_timeout(td, 300);
        tcase_add_checked_fixture(td, setup, teardown);
        tcase_add_test(td, linear_forward_matches_cpu);
        tcase_add_test(td, linear_backward_input_matches_cpu);
        tcase_add_test(td, linear_backward_weight_accumulates_like_cpu);
        tcase_add_test(td, column_sum_matches_cpu);
        tcase_add_test(td, rmsnorm_forward_matches_cpu);
        tcase_add_test(td, rmsnorm_backward_matches_cpu);
        tcase_add_test(td, rope_matches_cpu);
        tcase_add_test(td, attention_matches_cpu);
        tcase_add_test(td, swiglu_matches_cpu);
        tcase_add_test(td, scaled_add_bit_identical);
        tcase_add_test(td, dropout_bit_identical);
        tcase_add_test(td, cross_entropy_matches_cpu);
        tcase_add_test(td, sum_to_host_is_in_order);
        tcase_add_test(td, check_ids_matches_cpu);
        tcase_add_test(td, embed_bit_identical);
        tcase_add_test(td, convert_matches_host);
        tcase_add_test(td, copy_is_exact);
        tcase_add_test(td, swiglu_clamped_matches_cpu);
        tcase_add_test(td, grouped_bias_bit_identical);
        tcase_add_test(td, attention_gpt_oss_matches_cpu);
        tcase_add_test(td, fp8_dequantise_bit_identical);
        suite_add_tcase(s, td);
    }
#endif
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, kernel_ops_suite, "serial");
#ifdef RP_HAVE_CUDA_EXECUTOR
    const char *why = "";
    g_have_device = rp_cuda_device_count(&why) > 0;
    if (g_have_device)
        setenv("CK_FORK", "no", 1); /* CUDA is initialised: a forked child cannot use it */
    else
        printf("no usable CUDA device (%s): only the table checks run, then SKIP\n", why);
#else
    printf("no CUDA back end in this build: only the table checks run, then SKIP\n");
#endif
    int rc = rp_check_main(argc, argv, kernel_ops_suite, "serial");
    /* the CPU-only checks passed but the CUDA ones could not run */
    if (rc == EXIT_SUCCESS && !g_have_device)
        return RP_TEST_SKIP;
    return rc;
}
