/* The counting kernel ops table (op_counter.h). One wrapper per op of
 * kernels/ops.h; the static assertion below fails when an entry is added
 * there, so that a new op is wrapped (an op left unwrapped would be called
 * with this file's state instead of its own). */
#include "device/op_counter.h"

#include <stddef.h>

_Static_assert(sizeof(rp_kernel_ops) == offsetof(rp_kernel_ops, attention_backward_scratch_floats) +
                                            42 * sizeof(void (*)(void)),
               "kernels/ops.h's table has 4 size functions and 38 ops: a new entry is wrapped "
               "here (an op taking the state) and counted in this assertion");

static inline void count_op(rp_op_counter *c)
{
    atomic_fetch_add_explicit(&c->issued, 1, memory_order_relaxed);
}

static rp_status counted_linear_forward(void *state, const void *x, const void *W, rp_dtype W_dtype,
                                        const float *bias, const float *residual, float *y,
                                        void *y_compute, int64_t rows, int64_t in, int64_t out,
                                        rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->linear_forward(c->inner.state, x, W, W_dtype, bias, residual, y, y_compute,
                                        rows, in, out, err);
}

static rp_status counted_linear_backward_input(void *state, const void *dy, const void *W,
                                               rp_dtype W_dtype, float *dx, void *dx_compute,
                                               int64_t rows, int64_t in, int64_t out,
                                               int accumulate, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->linear_backward_input(c->inner.state, dy, W, W_dtype, dx, dx_compute, rows,
                                               in, out, accumulate, err);
}

static rp_status counted_linear_backward_weight(void *state, const void *dy, const void *x,
                                                float *dW, int64_t rows, int64_t in, int64_t out,
                                                rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->linear_backward_weight(c->inner.state, dy, x, dW, rows, in, out, err);
}

static rp_status counted_column_sum_accumulate(void *state, const float *src, int64_t rows,
                                               int64_t cols, float *dst, float *scratch,
                                               rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->column_sum_accumulate(c->inner.state, src, rows, cols, dst, scratch, err);
}

static rp_status counted_rmsnorm_forward(void *state, const float *x, const float *w, float *y,
                                         void *y_compute, float *rstd, int64_t rows, int64_t dim,
                                         float eps, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->rmsnorm_forward(c->inner.state, x, w, y, y_compute, rstd, rows, dim, eps,
                                         err);
}

static rp_status counted_rmsnorm_backward(void *state, const float *x, const float *w,
                                          const float *rstd, const float *dy, float *dx,
                                          void *dx_compute, float *dw, int64_t rows, int64_t dim,
                                          int accumulate, float *scratch, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->rmsnorm_backward(c->inner.state, x, w, rstd, dy, dx, dx_compute, dw, rows,
                                          dim, accumulate, scratch, err);
}

static rp_status counted_rope_table(void *state, const float *inv_freq, int64_t seqlen,
                                    int64_t half, float *space, const float **table, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->rope_table(c->inner.state, inv_freq, seqlen, half, space, table, err);
}

static rp_status counted_rope_apply(void *state, float *x, void *x_compute, const float *table,
                                    int64_t nseq, int64_t seqlen, const int32_t *seg_start,
                                    int64_t nheads, int64_t head_dim, int inverse, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->rope_apply(c->inner.state, x, x_compute, table, nseq, seqlen, seg_start,
                                    nheads, head_dim, inverse, err);
}

static rp_status counted_attention_forward(void *state, const rp_attn_shape *s, const void *q,
                                           const void *k, const void *v, void *o, float *lse,
                                           rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->attention_forward(c->inner.state, s, q, k, v, o, lse, err);
}

static rp_status counted_attention_backward(void *state, const rp_attn_shape *s, const void *q,
                                            const void *k, const void *v, const void *o,
                                            const float *lse, const void *dout, float *dq,
                                            float *dk, float *dv, float *scratch, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->attention_backward(c->inner.state, s, q, k, v, o, lse, dout, dq, dk, dv,
                                            scratch, err);
}

static rp_status counted_attention_sink_backward(void *state, const rp_attn_shape *s, const void *o,
                                                 const float *lse, const void *dout, float *dsinks,
                                                 rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->attention_sink_backward(c->inner.state, s, o, lse, dout, dsinks, err);
}

static rp_status counted_swiglu_forward(void *state, const void *g, const void *u,
                                        rp_dtype gu_dtype, int64_t ld, void *m, int64_t rows,
                                        int64_t cols, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->swiglu_forward(c->inner.state, g, u, gu_dtype, ld, m, rows, cols, err);
}

static rp_status counted_swiglu_backward(void *state, const void *g, const void *u,
                                         rp_dtype gu_dtype, int64_t ld, const void *dm,
                                         rp_dtype dm_dtype, void *dg, void *du, int64_t rows,
                                         int64_t cols, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->swiglu_backward(c->inner.state, g, u, gu_dtype, ld, dm, dm_dtype, dg, du,
                                         rows, cols, err);
}

static rp_status counted_swiglu_clamped_forward(void *state, const float *g, const float *u,
                                                float limit, float alpha, void *m, int64_t n,
                                                rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->swiglu_clamped_forward(c->inner.state, g, u, limit, alpha, m, n, err);
}

static rp_status counted_swiglu_clamped_backward(void *state, const float *g, const float *u,
                                                 float limit, float alpha, const float *dm,
                                                 void *dg, void *du, int64_t n, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->swiglu_clamped_backward(c->inner.state, g, u, limit, alpha, dm, dg, du, n,
                                                 err);
}

static rp_status counted_scaled_add(void *state, const float *x, float alpha, float *y,
                                    void *y_compute, int64_t n, int accumulate, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->scaled_add(c->inner.state, x, alpha, y, y_compute, n, accumulate, err);
}

static rp_status counted_dropout(void *state, const rp_dropout_site *site, const void *x, void *y,
                                 rp_dtype dtype, int64_t rows, int64_t cols, int accumulate,
                                 rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->dropout(c->inner.state, site, x, y, dtype, rows, cols, accumulate, err);
}

static rp_status counted_moe_route(void *state, const float *logits, int64_t rows, int64_t nexperts,
                                   int64_t topk, int norm_topk, float *probs, int32_t *experts,
                                   float *weights, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->moe_route(c->inner.state, logits, rows, nexperts, topk, norm_topk, probs,
                                   experts, weights, err);
}

static rp_status counted_moe_group(void *state, const int32_t *experts, int64_t rows, int64_t topk,
                                   int64_t nexperts, int32_t *offsets, int32_t *order,
                                   int32_t *where, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->moe_group(c->inner.state, experts, rows, topk, nexperts, offsets, order,
                                   where, err);
}

static rp_status counted_moe_stats(void *state, const float *probs, const int32_t *offsets,
                                   int64_t rows, int64_t nexperts, float *stats, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->moe_stats(c->inner.state, probs, offsets, rows, nexperts, stats, err);
}

static rp_status counted_moe_gather(void *state, const void *x, const int32_t *order,
                                    const float *weights, int64_t rows, int64_t topk, int64_t cols,
                                    void *xg, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->moe_gather(c->inner.state, x, order, weights, rows, topk, cols, xg, err);
}

static rp_status counted_moe_scatter_add(void *state, const float *dxg, const int32_t *where,
                                         int64_t rows, int64_t topk, int64_t cols, float *dx,
                                         int accumulate, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->moe_scatter_add(c->inner.state, dxg, where, rows, topk, cols, dx,
                                         accumulate, err);
}

static rp_status counted_moe_combine(void *state, const float *yg, const float *weights,
                                     const int32_t *where, const float *residual, int64_t rows,
                                     int64_t topk, int64_t cols, float *y, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->moe_combine(c->inner.state, yg, weights, where, residual, rows, topk, cols,
                                     y, err);
}

static rp_status counted_moe_down_backward(void *state, const float *z, const void *m,
                                           const float *weights, const int32_t *order, int64_t rows,
                                           int64_t topk, int64_t cols, float *dm, void *dm_compute,
                                           float *dweights, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->moe_down_backward(c->inner.state, z, m, weights, order, rows, topk, cols,
                                           dm, dm_compute, dweights, err);
}

static rp_status counted_moe_route_backward(void *state, const float *probs, const int32_t *experts,
                                            const float *dweights, const float *aux_grad,
                                            int64_t rows, int64_t nexperts, int64_t topk,
                                            int norm_topk, float *dlogits, void *dlogits_compute,
                                            rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->moe_route_backward(c->inner.state, probs, experts, dweights, aux_grad,
                                            rows, nexperts, topk, norm_topk, dlogits,
                                            dlogits_compute, err);
}

static rp_status counted_grouped_linear_forward(void *state, const void *x, const void *const *W,
                                                rp_dtype W_dtype, const int32_t *offsets,
                                                int64_t nexperts, int64_t rows, int64_t in,
                                                int64_t out, float *y, void *y_compute,
                                                rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->grouped_linear_forward(c->inner.state, x, W, W_dtype, offsets, nexperts,
                                                rows, in, out, y, y_compute, err);
}

static rp_status counted_grouped_linear_backward_input(void *state, const void *dy,
                                                       const void *const *W, rp_dtype W_dtype,
                                                       const int32_t *offsets, int64_t nexperts,
                                                       int64_t rows, int64_t in, int64_t out,
                                                       float *dx, void *dx_compute, int accumulate,
                                                       rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->grouped_linear_backward_input(c->inner.state, dy, W, W_dtype, offsets,
                                                       nexperts, rows, in, out, dx, dx_compute,
                                                       accumulate, err);
}

static rp_status counted_grouped_linear_backward_weight(void *state, const void *dy, const void *x,
                                                        const int32_t *offsets, int64_t nexperts,
                                                        int64_t rows, int64_t in, int64_t out,
                                                        float *const *dW, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->grouped_linear_backward_weight(c->inner.state, dy, x, offsets, nexperts,
                                                        rows, in, out, dW, err);
}

static rp_status counted_grouped_bias_forward(void *state, float *y, void *y_compute,
                                              const float *const *bias, const int32_t *offsets,
                                              int64_t nexperts, int64_t rows, int64_t out,
                                              rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->grouped_bias_forward(c->inner.state, y, y_compute, bias, offsets, nexperts,
                                              rows, out, err);
}

static rp_status counted_grouped_bias_backward(void *state, const void *dy, const int32_t *offsets,
                                               int64_t nexperts, int64_t rows, int64_t out,
                                               float *const *dbias, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->grouped_bias_backward(c->inner.state, dy, offsets, nexperts, rows, out,
                                               dbias, err);
}

static rp_status counted_cross_entropy(void *state, float *logits, int64_t rows, int64_t vocab,
                                       const int32_t *targets, const uint8_t *counted, float scale,
                                       double *loss, int grad, void *dlogits_compute, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->cross_entropy(c->inner.state, logits, rows, vocab, targets, counted, scale,
                                       loss, grad, dlogits_compute, err);
}

static rp_status counted_sum_to_host(void *state, const double *values, int64_t n, double *sum,
                                     rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->sum_to_host(c->inner.state, values, n, sum, err);
}

static rp_status counted_check_ids(void *state, const int32_t *ids, const uint8_t *mask, int64_t n,
                                   int64_t limit, const char *what, const char *kind, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->check_ids(c->inner.state, ids, mask, n, limit, what, kind, err);
}

static rp_status counted_embed_forward(void *state, const void *W, rp_dtype W_dtype,
                                       const int32_t *tokens, int64_t n, int64_t hidden, float *out,
                                       rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->embed_forward(c->inner.state, W, W_dtype, tokens, n, hidden, out, err);
}

static rp_status counted_embed_backward(void *state, const int32_t *tokens, int64_t n,
                                        int64_t hidden, int64_t vocab, const float *dout, float *dW,
                                        rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->embed_backward(c->inner.state, tokens, n, hidden, vocab, dout, dW, err);
}

static rp_status counted_convert(void *state, const void *src, rp_dtype from, void *dst,
                                 rp_dtype to, int64_t n, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->convert(c->inner.state, src, from, dst, to, n, err);
}

static rp_status counted_copy(void *state, void *dst, const void *src, size_t bytes, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->copy(c->inner.state, dst, src, bytes, err);
}

static rp_status counted_fp8_dequantise(void *state, const void *weight, const void *scale,
                                        rp_dtype scale_dtype, int64_t rows, int64_t cols,
                                        int64_t block_rows, int64_t block_cols, void *dst,
                                        rp_dtype dst_dtype, rp_error *err)
{
    rp_op_counter *c = state;
    count_op(c);
    return c->inner.ops->fp8_dequantise(c->inner.state, weight, scale, scale_dtype, rows, cols,
                                        block_rows, block_cols, dst, dst_dtype, err);
}

rp_kernels rp_op_counter_wrap(rp_op_counter *c, rp_kernels inner)
{
    c->inner = inner;
    c->table = *inner.ops; /* the name, dtypes, sizes and flags as they are */
    rp_kernel_ops *t = &c->table;
    t->linear_forward = counted_linear_forward;
    t->linear_backward_input = counted_linear_backward_input;
    t->linear_backward_weight = counted_linear_backward_weight;
    t->column_sum_accumulate = counted_column_sum_accumulate;
    t->rmsnorm_forward = counted_rmsnorm_forward;
    t->rmsnorm_backward = counted_rmsnorm_backward;
    t->rope_table = counted_rope_table;
    t->rope_apply = counted_rope_apply;
    t->attention_forward = counted_attention_forward;
    t->attention_backward = counted_attention_backward;
    t->attention_sink_backward = counted_attention_sink_backward;
    t->swiglu_forward = counted_swiglu_forward;
    t->swiglu_backward = counted_swiglu_backward;
    t->swiglu_clamped_forward = counted_swiglu_clamped_forward;
    t->swiglu_clamped_backward = counted_swiglu_clamped_backward;
    t->scaled_add = counted_scaled_add;
    t->dropout = counted_dropout;
    t->moe_route = counted_moe_route;
    t->moe_group = counted_moe_group;
    t->moe_stats = counted_moe_stats;
    t->moe_gather = counted_moe_gather;
    t->moe_scatter_add = counted_moe_scatter_add;
    t->moe_combine = counted_moe_combine;
    t->moe_down_backward = counted_moe_down_backward;
    t->moe_route_backward = counted_moe_route_backward;
    t->grouped_linear_forward = counted_grouped_linear_forward;
    t->grouped_linear_backward_input = counted_grouped_linear_backward_input;
    t->grouped_linear_backward_weight = counted_grouped_linear_backward_weight;
    t->grouped_bias_forward = counted_grouped_bias_forward;
    t->grouped_bias_backward = counted_grouped_bias_backward;
    t->cross_entropy = counted_cross_entropy;
    t->sum_to_host = counted_sum_to_host;
    t->check_ids = counted_check_ids;
    t->embed_forward = counted_embed_forward;
    t->embed_backward = counted_embed_backward;
    t->convert = counted_convert;
    t->copy = counted_copy;
    t->fp8_dequantise = counted_fp8_dequantise;
    return (rp_kernels){.ops = t, .state = c, .probe = inner.probe};
}
