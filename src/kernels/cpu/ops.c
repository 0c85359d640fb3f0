/* The CPU table of kernel ops: each entry is the fp32 kernel of this
 * directory. The compute dtype is fp32, so a "rounded copy" is the same
 * values: it is written only when the caller gave a separate buffer. */
#include <string.h>

#include "core/fp8.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/lora.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/xent.h"

/* the second name of an output, when it is a different buffer */
static void also(float *copy, const float *value, int64_t n)
{
    if (copy && copy != value)
        memcpy(copy, value, sizeof(float) * (size_t)n);
}

static size_t no_scratch_attn(const rp_attn_shape *s)
{
    (void)s;
    return 0;
}

static size_t no_scratch_cols(int64_t cols)
{
    (void)cols;
    return 0;
}

static size_t rope_table_floats(int64_t seqlen, int64_t half)
{
    return rp_rope_table_floats(seqlen, half);
}

static int64_t logits_rows(int64_t vocab, int64_t memory_bytes)
{
    (void)vocab, (void)memory_bytes;
    return 64; /* a [64, vocab] chunk stays in cache-sized pieces for the GEMMs */
}

/* W in a dtype the table reads (weight_dtypes), or an error naming the op. */
static rp_status weights_readable(const char *op, rp_dtype W_dtype, rp_error *err)
{
    if (W_dtype == RP_F32 || W_dtype == RP_BF16)
        return RP_OK;
    return rp_error_set(err, RP_ERR_UNSUPPORTED, "cpu kernels: %s reads weights in F32 or BF16, "
                        "not %s", op, rp_dtype_name(W_dtype));
}

static rp_status widen_failed(const char *op, rp_error *err)
{
    return rp_error_set(err, RP_ERR_NOMEM, "cpu kernels: %s: the block for widened bf16 weights "
                        "(%zu MiB)", op, RP_LINEAR_WIDEN_FLOATS * sizeof(float) >> 20);
}

static rp_status linear_forward(void *state, const void *x, const void *W, rp_dtype W_dtype,
                                const float *bias, const float *residual, float *y,
                                void *y_compute, int64_t rows, int64_t in, int64_t out,
                                rp_error *err)
{
    (void)state;
    RP_TRY(weights_readable("linear_forward", W_dtype, err));
    if (!rp_linear_outputs_valid(y, y_compute, bias, residual))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cpu kernels: linear_forward without y "
                            "writes y_compute alone, with neither a bias nor a residual");
    float *dst = y ? y : y_compute;
    if (W_dtype == RP_F32)
        rp_linear_forward(x, W, bias, dst, rows, in, out);
    else if (rp_linear_forward_bf16(x, W, bias, dst, rows, in, out) != 0)
        return widen_failed("linear_forward", err);
    if (residual) {
        /* residual + product, the order the block has always added in */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < rows * out; i++)
            dst[i] = residual[i] + dst[i];
    }
    if (y)
        also(y_compute, y, rows * out);
    return RP_OK;
}

static rp_status linear_backward_input(void *state, const void *dy, const void *W,
                                       rp_dtype W_dtype, float *dx, void *dx_compute,
                                       int64_t rows, int64_t in, int64_t out, int accumulate,
                                       rp_error *err)
{
    (void)state;
    RP_TRY(weights_readable("linear_backward_input", W_dtype, err));
    float *dst = dx ? dx : dx_compute;
    if (W_dtype == RP_F32)
        rp_linear_backward_input(dy, W, dst, rows, in, out, accumulate);
    else if (rp_linear_backward_input_bf16(dy, W, dst, rows, in, out, accumulate) != 0)
        return widen_failed("linear_backward_input", err);
    return RP_OK;
}

static rp_status linear_backward_weight(void *state, const void *dy, const void *x, float *dW,
                                        int64_t rows, int64_t in, int64_t out, rp_error *err)
{
    (void)state, (void)err;
    rp_linear_backward_weight(dy, x, dW, NULL, rows, in, out);
    return RP_OK;
}

static rp_status column_sum_accumulate(void *state, const float *src, int64_t rows, int64_t cols,
                                       float *dst, float *scratch, rp_error *err)
{
    (void)state, (void)scratch, (void)err;
    if (rows > 0)
        rp_colsum_accumulate(src, rows, cols, dst);
    return RP_OK;
}

static rp_status rmsnorm_forward(void *state, const float *x, const float *w, float *y,
                                 void *y_compute, float *rstd, int64_t rows, int64_t dim,
                                 float eps, rp_error *err)
{
    (void)state, (void)err;
    float *dst = y ? y : y_compute;
    rp_rmsnorm_forward(x, w, dst, rstd, rows, dim, eps);
    if (y)
        also(y_compute, y, rows * dim);
    return RP_OK;
}

static rp_status rmsnorm_backward(void *state, const float *x, const float *w, const float *rstd,
                                  const float *dy, float *dx, void *dx_compute, float *dw,
                                  int64_t rows, int64_t dim, int accumulate, float *scratch,
                                  rp_error *err)
{
    (void)state, (void)scratch, (void)err;
    rp_rmsnorm_backward(x, w, rstd, dy, dx, dw, rows, dim, accumulate);
    also(dx_compute, dx, rows * dim);
    return RP_OK;
}

static rp_status rope_table(void *state, const float *inv_freq, int64_t seqlen, int64_t half,
                            float *space, const float **table, rp_error *err)
{
    (void)state, (void)err;
    rp_rope_table(space, inv_freq, seqlen, half);
    *table = space;
    return RP_OK;
}

static rp_status rope_apply(void *state, float *x, void *x_compute, const float *table,
                            int64_t nseq, int64_t seqlen, const int32_t *seg_start,
                            int64_t nheads, int64_t head_dim, int inverse, rp_error *err)
{
    (void)state, (void)err;
    rp_rope_apply(x, table, nseq, seqlen, seg_start, nheads, head_dim, inverse);
    also(x_compute, x, nseq * seqlen * nheads * head_dim);
    return RP_OK;
}

static rp_status attention_forward(void *state, const rp_attn_shape *s, const void *q,
                                   const void *k, const void *v, void *o, float *lse,
                                   rp_error *err)
{
    (void)state, (void)err;
    rp_attn_forward(s, q, k, v, o, lse);
    return RP_OK;
}

static rp_status attention_backward(void *state, const rp_attn_shape *s, const void *q,
                                    const void *k, const void *v, const void *o, const float *lse,
                                    const void *dout, float *dq, float *dk, float *dv,
                                    float *scratch, rp_error *err)
{
    (void)state, (void)scratch, (void)err;
    rp_attn_backward(s, q, k, v, o, lse, dout, dq, dk, dv);
    return RP_OK;
}

static rp_status attention_sink_backward(void *state, const rp_attn_shape *s, const void *o,
                                         const float *lse, const void *dout, float *dsinks,
                                         rp_error *err)
{
    (void)state, (void)err;
    rp_attn_sink_backward(s, o, lse, dout, dsinks);
    return RP_OK;
}

static rp_status swiglu_clamped_forward(void *state, const float *g, const float *u, float limit,
                                        float alpha, void *m, int64_t n, rp_error *err)
{
    (void)state, (void)err;
    rp_swiglu_clamped_forward(g, u, limit, alpha, m, n);
    return RP_OK;
}

static rp_status swiglu_clamped_backward(void *state, const float *g, const float *u,
                                         float limit, float alpha, const float *dm, void *dg,
                                         void *du, int64_t n, rp_error *err)
{
    (void)state, (void)err;
    rp_swiglu_clamped_backward(g, u, limit, alpha, dm, dg, du, n);
    return RP_OK;
}

/* The SwiGLU's inputs are fp32 here: the compute dtype is too. */
static rp_status swiglu_inputs_f32(const char *op, const char *what, rp_dtype dtype,
                                   rp_error *err)
{
    if (dtype == RP_F32)
        return RP_OK;
    return rp_error_set(err, RP_ERR_UNSUPPORTED, "cpu kernels: %s reads %s in F32, not %s", op,
                        what, rp_dtype_name(dtype));
}

/* g and u's row stride: at least a row (kernels/ops.h). */
static rp_status swiglu_stride(const char *op, int64_t ld, int64_t rows, int64_t cols,
                               rp_error *err)
{
    if (rp_swiglu_shape_valid(ld, rows, cols))
        return RP_OK;
    return rp_error_set(err, RP_ERR_INVALID_ARG, "cpu kernels: %s: row stride %lld for %lld rows "
                        "of %lld", op, (long long)ld, (long long)rows, (long long)cols);
}

static rp_status swiglu_forward(void *state, const void *g, const void *u, rp_dtype gu_dtype,
                                int64_t ld, void *m, int64_t rows, int64_t cols, rp_error *err)
{
    (void)state;
    RP_TRY(swiglu_inputs_f32("swiglu_forward", "g and u", gu_dtype, err));
    RP_TRY(swiglu_stride("swiglu_forward", ld, rows, cols, err));
    rp_swiglu_forward(g, u, ld, m, rows, cols);
    return RP_OK;
}

static rp_status swiglu_backward(void *state, const void *g, const void *u, rp_dtype gu_dtype,
                                 int64_t ld, const void *dm, rp_dtype dm_dtype, void *dg, void *du,
                                 int64_t rows, int64_t cols, rp_error *err)
{
    (void)state;
    RP_TRY(swiglu_inputs_f32("swiglu_backward", "g and u", gu_dtype, err));
    RP_TRY(swiglu_inputs_f32("swiglu_backward", "dm", dm_dtype, err));
    RP_TRY(swiglu_stride("swiglu_backward", ld, rows, cols, err));
    rp_swiglu_backward(g, u, ld, dm, dg, du, rows, cols);
    return RP_OK;
}

static rp_status scaled_add(void *state, const float *x, float alpha, float *y, void *y_compute,
                            int64_t n, int accumulate, rp_error *err)
{
    (void)state;
    if (n == 0)
        return RP_OK;
    const char *why = rp_scaled_add_refusal(n, y, y_compute, accumulate);
    if (why)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cpu kernels: scaled_add: %s", why);
    rp_scaled_add(x, alpha, y ? y : y_compute, n, accumulate);
    if (y)
        also(y_compute, y, n);
    return RP_OK;
}

static rp_status dropout(void *state, const rp_dropout_site *site, const void *x, void *y,
                         rp_dtype dtype, int64_t rows, int64_t cols, int accumulate,
                         rp_error *err)
{
    (void)state;
    /* the compute dtype is fp32, so fp32 is the one dtype either way */
    if (dtype != RP_F32)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "cpu kernels: dropout: dtype %s (fp32 only)",
                            rp_dtype_name(dtype));
    const char *why = rp_dropout_refusal(site, rows, cols);
    if (why)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cpu kernels: dropout: %s (p %g, rows "
                            "%lld, cols %lld, rows_per_sample %lld, first_row %lld)", why,
                            (double)site->p, (long long)rows, (long long)cols,
                            (long long)site->rows_per_sample, (long long)site->first_row);
    const int64_t n = rows * cols;
    if (n == 0)
        return RP_OK;
    if (site->p == 0.0f) { /* everything kept at scale 1: a copy or a sum, no mask */
        if (accumulate)
            rp_scaled_add(x, 1.0f, y, n, 1);
        else if (x != y)
            memcpy(y, x, sizeof(float) * (size_t)n);
        return RP_OK;
    }
    rp_dropout_f32(site, 1.0f / (1.0f - site->p), x, y, rows, cols, accumulate);
    return RP_OK;
}

/* ---- mixture of experts ---- */

static rp_status moe_route(void *state, const float *logits, int64_t rows, int64_t nexperts,
                           int64_t topk, int norm_topk, float *probs, int32_t *experts,
                           float *weights, rp_error *err)
{
    (void)state;
    if (topk < 1 || topk > nexperts)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cpu kernels: moe_route: top-%lld of %lld "
                            "experts", (long long)topk, (long long)nexperts);
    rp_moe_route(logits, rows, nexperts, topk, norm_topk, probs, experts, weights);
    return RP_OK;
}

static rp_status moe_group(void *state, const int32_t *experts, int64_t rows, int64_t topk,
                           int64_t nexperts, int32_t *offsets, int32_t *order, int32_t *where,
                           rp_error *err)
{
    (void)state;
    if (topk < 1 || nexperts < 1 || rows < 0 || rows > INT32_MAX / topk)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cpu kernels: moe_group: %lld rows of "
                            "top-%lld over %lld experts (pairs must fit int32)", (long long)rows,
                            (long long)topk, (long long)nexperts);
    const int64_t bad = rp_moe_bad_expert(experts, rows * topk, nexperts);
    if (bad >= 0)
        return rp_error_set(err, RP_ERR_RANGE, "cpu kernels: moe_group: expert %d at position "
                            "%lld (token %lld, slot %lld) is outside [0, %lld)", (int)experts[bad],
                            (long long)bad, (long long)(bad / topk), (long long)(bad % topk),
                            (long long)nexperts);
    rp_moe_group(experts, rows * topk, nexperts, offsets, order, where);
    return RP_OK;
}

static rp_status moe_stats(void *state, const float *probs, const int32_t *offsets,
                           int64_t rows, int64_t nexperts, float *stats, rp_error *err)
{
    (void)state, (void)err;
    rp_moe_stats(probs, offsets, rows, nexperts, stats);
    return RP_OK;
}

static rp_status moe_gather(void *state, const void *x, const int32_t *order,
                            const float *weights, int64_t rows, int64_t topk, int64_t cols,
                            void *xg, rp_error *err)
{
    (void)state, (void)err;
    rp_moe_gather(x, order, weights, rows, topk, cols, xg);
    return RP_OK;
}

static rp_status moe_scatter_add(void *state, const float *dxg, const int32_t *where,
                                 int64_t rows, int64_t topk, int64_t cols, float *dx,
                                 int accumulate, rp_error *err)
{
    (void)state, (void)err;
    rp_moe_scatter_add(dxg, where, rows, topk, cols, dx, accumulate);
    return RP_OK;
}

static rp_status moe_combine(void *state, const float *yg, const float *weights,
                             const int32_t *where, const float *residual, int64_t rows,
                             int64_t topk, int64_t cols, float *y, rp_error *err)
{
    (void)state, (void)err;
    rp_moe_combine(yg, weights, where, residual, rows, topk, cols, y);
    return RP_OK;
}

static rp_status moe_down_backward(void *state, const float *z, const void *m,
                                   const float *weights, const int32_t *order, int64_t rows,
                                   int64_t topk, int64_t cols, float *dm, void *dm_compute,
                                   float *dweights, rp_error *err)
{
    (void)state, (void)err;
    rp_moe_down_backward(z, m, weights, order, rows, topk, cols, dm, dweights);
    also(dm_compute, dm, rows * topk * cols);
    return RP_OK;
}

static rp_status moe_route_backward(void *state, const float *probs, const int32_t *experts,
                                    const float *dweights, const float *aux_grad, int64_t rows,
                                    int64_t nexperts, int64_t topk, int norm_topk,
                                    float *dlogits, void *dlogits_compute, rp_error *err)
{
    (void)state, (void)err;
    rp_moe_route_backward(probs, experts, dweights, aux_grad, rows, nexperts, topk, norm_topk,
                          dlogits);
    also(dlogits_compute, dlogits, rows * nexperts);
    return RP_OK;
}

/* offsets that start at 0, never decrease and end at rows, or an error
 * naming the op */
static rp_status offsets_usable(const char *op, const int32_t *offsets, int64_t nexperts,
                                int64_t rows, rp_error *err)
{
    if (nexperts >= 1 && rp_moe_offsets_valid(offsets, nexperts, rows))
        return RP_OK;
    return rp_error_set(err, RP_ERR_INVALID_ARG, "cpu kernels: %s: the offsets of %lld experts "
                        "do not split %lld rows (0 first, rows last, never decreasing)", op,
                        (long long)nexperts, (long long)rows);
}

static rp_status grouped_linear_forward(void *state, const void *x, const void *const *W,
                                        rp_dtype W_dtype, const int32_t *offsets,
                                        int64_t nexperts, int64_t rows, int64_t in,
                                        int64_t out, float *y, void *y_compute, rp_error *err)
{
    (void)state;
    RP_TRY(weights_readable("grouped_linear_forward", W_dtype, err));
    RP_TRY(offsets_usable("grouped_linear_forward", offsets, nexperts, rows, err));
    float *dst = y ? y : y_compute;
    if (rp_moe_grouped_forward(x, W, W_dtype == RP_BF16, offsets, nexperts, in, out, dst) != 0)
        return widen_failed("grouped_linear_forward", err);
    if (y)
        also(y_compute, y, rows * out);
    return RP_OK;
}

static rp_status grouped_linear_backward_input(void *state, const void *dy,
                                               const void *const *W, rp_dtype W_dtype,
                                               const int32_t *offsets, int64_t nexperts,
                                               int64_t rows, int64_t in, int64_t out,
                                               float *dx, void *dx_compute, int accumulate,
                                               rp_error *err)
{
    (void)state;
    RP_TRY(weights_readable("grouped_linear_backward_input", W_dtype, err));
    RP_TRY(offsets_usable("grouped_linear_backward_input", offsets, nexperts, rows, err));
    float *dst = dx ? dx : dx_compute;
    if (rp_moe_grouped_backward_input(dy, W, W_dtype == RP_BF16, offsets, nexperts, in, out, dst,
                                      accumulate) != 0)
        return widen_failed("grouped_linear_backward_input", err);
    return RP_OK;
}

static rp_status grouped_linear_backward_weight(void *state, const void *dy, const void *x,
                                                const int32_t *offsets, int64_t nexperts,
                                                int64_t rows, int64_t in, int64_t out,
                                                float *const *dW, rp_error *err)
{
    (void)state;
    RP_TRY(offsets_usable("grouped_linear_backward_weight", offsets, nexperts, rows, err));
    rp_moe_grouped_backward_weight(dy, x, offsets, nexperts, in, out, dW);
    return RP_OK;
}

static rp_status grouped_bias_forward(void *state, float *y, void *y_compute,
                                      const float *const *bias, const int32_t *offsets,
                                      int64_t nexperts, int64_t rows, int64_t out,
                                      rp_error *err)
{
    (void)state;
    RP_TRY(offsets_usable("grouped_bias_forward", offsets, nexperts, rows, err));
    rp_moe_grouped_bias_add(y, bias, offsets, nexperts, out);
    also(y_compute, y, rows * out);
    return RP_OK;
}

static rp_status grouped_bias_backward(void *state, const void *dy, const int32_t *offsets,
                                       int64_t nexperts, int64_t rows, int64_t out,
                                       float *const *dbias, rp_error *err)
{
    (void)state;
    RP_TRY(offsets_usable("grouped_bias_backward", offsets, nexperts, rows, err));
    rp_moe_grouped_bias_backward((const float *)dy, offsets, nexperts, out, dbias);
    return RP_OK;
}

static rp_status cross_entropy(void *state, float *logits, int64_t rows, int64_t vocab,
                               const int32_t *targets, const uint8_t *counted, float scale,
                               double *loss, int grad, void *dlogits_compute, rp_error *err)
{
    (void)state, (void)err;
    /* the compute dtype is fp32: the gradient goes out as it is formed */
    rp_xent_rows(logits, rows, vocab, targets, counted, scale, loss, grad, dlogits_compute);
    return RP_OK;
}

static rp_status sum_to_host(void *state, const double *values, int64_t n, double *sum,
                             rp_error *err)
{
    (void)state, (void)err;
    double total = 0.0;
    for (int64_t i = 0; i < n; i++)
        total += values[i];
    *sum = total;
    return RP_OK;
}

static rp_status check_ids(void *state, const int32_t *ids, const uint8_t *mask, int64_t n,
                           int64_t limit, const char *what, const char *kind, rp_error *err)
{
    (void)state;
    for (int64_t t = 0; t < n; t++) {
        if (mask && !mask[t])
            continue;
        if (ids[t] < 0 || ids[t] >= limit)
            return rp_error_set(err, RP_ERR_RANGE,
                                "%s: %s %d at position %lld is outside the vocabulary [0, %lld)",
                                what, kind, (int)ids[t], (long long)t, (long long)limit);
    }
    return RP_OK;
}

static rp_status embed_forward(void *state, const void *W, rp_dtype W_dtype,
                               const int32_t *tokens, int64_t n, int64_t hidden, float *out,
                               rp_error *err)
{
    (void)state, (void)err;
    if (W_dtype == RP_BF16) {
        const uint16_t *table = W;
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < n; t++)
            rp_bf16_to_f32_array(table + (int64_t)tokens[t] * hidden, out + t * hidden,
                                 (size_t)hidden);
        return RP_OK;
    }
    const float *table = W;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; t++)
        memcpy(out + t * hidden, table + (int64_t)tokens[t] * hidden,
               sizeof(float) * (size_t)hidden);
    return RP_OK;
}

static rp_status embed_backward(void *state, const int32_t *tokens, int64_t n, int64_t hidden,
                                int64_t vocab, const float *dout, float *dW, rp_error *err)
{
    (void)state, (void)vocab, (void)err;
    const int64_t cw = 64, nchunks = (hidden + cw - 1) / cw;
    /* Each thread owns a slice of columns and adds the tokens in order, so a
     * token that occurs twice is summed in the same order on every run. */
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t j0 = c * cw, j1 = j0 + cw < hidden ? j0 + cw : hidden;
        for (int64_t t = 0; t < n; t++) {
            float *row = dW + (int64_t)tokens[t] * hidden;
            const float *d = dout + t * hidden;
            for (int64_t j = j0; j < j1; j++)
                row[j] += d[j];
        }
    }
    return RP_OK;
}

static rp_status convert(void *state, const void *src, rp_dtype from, void *dst, rp_dtype to,
                         int64_t n, rp_error *err)
{
    (void)state;
    if (n <= 0 || src == dst)
        return RP_OK;
    if (from == to && (to == RP_F32 || to == RP_BF16))
        memcpy(dst, src, (size_t)n * rp_dtype_size(to));
    else if (from == RP_BF16 && to == RP_F32)
        rp_bf16_to_f32_array(src, dst, (size_t)n);
    else if (from == RP_F32 && to == RP_BF16)
        rp_f32_to_bf16_array(src, dst, (size_t)n);
    else
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "cpu kernels: no conversion %s -> %s",
                            rp_dtype_name(from), rp_dtype_name(to));
    return RP_OK;
}

static rp_status copy(void *state, void *dst, const void *src, size_t bytes, rp_error *err)
{
    (void)state, (void)err;
    if (dst != src && bytes)
        memcpy(dst, src, bytes);
    return RP_OK;
}

/* Rows in parallel, each row's bits those of rp_fp8_dequantise_rows. */
static rp_status fp8_dequantise(void *state, const void *weight, const void *scale,
                                rp_dtype scale_dtype, int64_t rows, int64_t cols,
                                int64_t block_rows, int64_t block_cols, void *dst,
                                rp_dtype dst_dtype, rp_error *err)
{
    (void)state;
    if (rows < 1 || cols < 1 || block_rows < 1 || block_cols < 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cpu kernels: fp8_dequantise of [%lld, "
                            "%lld] in blocks of [%lld, %lld]", (long long)rows, (long long)cols,
                            (long long)block_rows, (long long)block_cols);
    if ((dst_dtype != RP_F32 && dst_dtype != RP_BF16) || scale_dtype < RP_F32 ||
        scale_dtype > RP_F16)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "cpu kernels: fp8_dequantise with %s "
                            "scales into %s", rp_dtype_name(scale_dtype),
                            rp_dtype_name(dst_dtype));
    const rp_fp8_matrix m = {weight, scale, scale_dtype, rows, cols, block_rows, block_cols};
    const size_t row_bytes = (size_t)cols * rp_dtype_size(dst_dtype);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        rp_fp8_dequantise_rows(&m, r, r + 1, (char *)dst + (size_t)r * row_bytes, dst_dtype);
    return RP_OK;
}

const rp_kernel_ops rp_kernel_ops_cpu = {
    .name = "cpu",
    .compute_dtype = RP_F32,
    .host_addressable = 1,
    .weight_dtypes = 1u << RP_F32 | 1u << RP_BF16,
    .attention_backward_scratch_floats = no_scratch_attn,
    .column_sum_scratch_floats = no_scratch_cols,
    .rope_table_floats = rope_table_floats,
    .logits_rows = logits_rows,
    .linear_forward = linear_forward,
    .linear_backward_input = linear_backward_input,
    .linear_backward_weight = linear_backward_weight,
    .column_sum_accumulate = column_sum_accumulate,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .rope_table = rope_table,
    .rope_apply = rope_apply,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attention_sink_backward = attention_sink_backward,
    .swiglu_clamped_forward = swiglu_clamped_forward,
    .swiglu_clamped_backward = swiglu_clamped_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .scaled_add = scaled_add,
    .dropout = dropout,
    .moe_route = moe_route,
    .moe_group = moe_group,
    .moe_stats = moe_stats,
    .moe_gather = moe_gather,
    .moe_scatter_add = moe_scatter_add,
    .moe_combine = moe_combine,
    .moe_down_backward = moe_down_backward,
    .moe_route_backward = moe_route_backward,
    .grouped_linear_forward = grouped_linear_forward,
    .grouped_linear_backward_input = grouped_linear_backward_input,
    .grouped_linear_backward_weight = grouped_linear_backward_weight,
    .grouped_bias_forward = grouped_bias_forward,
    .grouped_bias_backward = grouped_bias_backward,
    .cross_entropy = cross_entropy,
    .sum_to_host = sum_to_host,
    .check_ids = check_ids,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .convert = convert,
    .copy = copy,
    .fp8_dequantise = fp8_dequantise,
};
