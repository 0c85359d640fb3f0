/* The table of kernel ops the model is composed over (DESIGN 9). The
 * embedding, the decoder block and the head are written once, in src/model,
 * as calls into this table; src/kernels/cpu/ops.c and src/kernels/cuda/ops.c
 * each fill it, and src/device hands the model the table of the device it
 * drives (with the table's state: streams, handles, cached tables).
 *
 * Dtypes. Tensors typed `float *` are fp32. Tensors typed `void *` are in the
 * table's compute dtype (`compute_dtype`): GEMM operands and attention
 * inputs. On the CPU it is fp32, so a model that asks for "the fp32 value
 * and its compute-dtype copy" can pass the same buffer twice and no copy is
 * made; on CUDA it is bf16 and the producing op writes the rounded copy as
 * it goes. Where an op names an output twice (`y` and `y_compute`), the
 * entry says which is required and the other may be NULL; when both are
 * given and are the same buffer (fp32 tables only) the op writes it once.
 *
 * Layouts are row-major: activations [rows, features], Linear weights in
 * Hugging Face's [out, in]. Parameter gradients accumulate (+=): two calls
 * add in call order. Every op is deterministic for a fixed thread count.
 * Pointers are the device's (host memory for the CPU table). Ops run in
 * call order on one device; the caller waits for them with the device's
 * sync (src/device) before reading results on another stream or the host.
 * Two ops wait themselves: sum_to_host (it returns a host value) and
 * check_ids (it must know whether an id is bad before anything is written).
 *
 * Every op returns RP_OK or an error naming the op (and on a GPU the
 * device). Scratch arguments are sized by the table's size functions (0 on
 * the CPU; then NULL may be passed) and carved by the caller, so the
 * model's one sizing function covers every buffer the layers use. A
 * table's own state (CUDA: the RoPE table, the embedding sort's scratch,
 * the losses' pinned host buffer) is made on first use and grown only when
 * a shape grows: nothing is allocated in the steady state. */
#ifndef RP_KERNELS_OPS_H
#define RP_KERNELS_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/attn_shape.h"
#include "kernels/dropout.h"

typedef struct rp_kernel_ops {
    const char *name;
    rp_dtype compute_dtype;  /* of every `void *` tensor but a GEMM's weights */
    int host_addressable;    /* pointers are host memory the caller may read */
    /* the head dims attention takes: multiples of head_dim_step up to
     * head_dim_max (0: any the model allows) */
    int head_dim_step, head_dim_max;
    /* The dtypes a GEMM reads its weights W in (bit 1u << dtype each), the
     * compute dtype always among them. The CPU table also reads bf16
     * weights, widened exactly to fp32 a block of rows at a time, so a
     * frozen bf16 base is computed on where it lies, never copied whole. */
    unsigned weight_dtypes;

    /* ---- sizes (floats), from shapes only ---------------------------- */
    size_t (*attention_backward_scratch_floats)(const rp_attn_shape *s);
    size_t (*column_sum_scratch_floats)(int64_t cols);
    /* space rope_table may fill (0 when the table keeps its own: pass NULL) */
    size_t (*rope_table_floats)(int64_t seqlen, int64_t half);
    /* rows of logits the head should form at once for a vocabulary, given
     * a device memory figure in bytes (0: none); the figure must be the
     * same on every rank (never a share that depends on how many ranks
     * use the device): the chunk orders the LM head's gradient sums */
    int64_t (*logits_rows)(int64_t vocab, int64_t memory_bytes);

    /* ---- GEMMs --------------------------------------------------------- */
    /* y = residual + x W^T + bias, residual and bias optional; y_compute
     * (optional) its rounded copy. The order of the two additions is the
     * table's own (the CPU adds the bias to the product, then the
     * residual; CUDA the residual in the GEMM, beta 1, then the bias):
     * within an ulp of each other, each table deterministic. x [rows, in], W [out, in] in W_dtype (one of weight_dtypes,
     * else RP_ERR_UNSUPPORTED), y [rows, out]; y must not alias x or
     * residual. y is required but where residual and bias are NULL: then y
     * may be NULL and the product goes to y_compute alone, each element the
     * fp32 sum rounded once (the GEMM's own bf16 output on CUDA, no fp32
     * pass); a residual or bias without y, or neither output:
     * RP_ERR_INVALID_ARG. */
    rp_status (*linear_forward)(void *state, const void *x, const void *W, rp_dtype W_dtype,
                                const float *bias,
                                const float *residual, float *y, void *y_compute, int64_t rows,
                                int64_t in, int64_t out, rp_error *err);
    /* dx = dy W (dx += with accumulate), into exactly one of dx (fp32) and
     * dx_compute (accumulate needs dx). dy [rows, out], dx [rows, in]; W
     * in W_dtype as for linear_forward. */
    rp_status (*linear_backward_input)(void *state, const void *dy, const void *W,
                                       rp_dtype W_dtype, float *dx,
                                       void *dx_compute, int64_t rows, int64_t in, int64_t out,
                                       int accumulate, rp_error *err);
    /* dW += dy^T x. */
    rp_status (*linear_backward_weight)(void *state, const void *dy, const void *x, float *dW,
                                        int64_t rows, int64_t in, int64_t out, rp_error *err);
    /* dst[j] += sum over rows of src[r, j] (bias gradients), in an order
     * fixed by the shape: the CPU's rows in order, CUDA's in slices of rows
     * whose partial sums are added in slice order (deterministic, not the
     * CPU's bits); rows == 0 changes nothing. scratch: column_sum_scratch_floats(cols). */
    rp_status (*column_sum_accumulate)(void *state, const float *src, int64_t rows, int64_t cols,
                                       float *dst, float *scratch, rp_error *err);

    /* ---- norms (RMSNorm over the last dim; per head with rows = tokens *
     * heads and dim = head_dim) ---------------------------------------- */
    /* y = x * rsqrt(mean(x^2) + eps) * w into y and/or y_compute (at least
     * one), rstd (required) saved for the backward. */
    rp_status (*rmsnorm_forward)(void *state, const float *x, const float *w, float *y,
                                 void *y_compute, float *rstd, int64_t rows, int64_t dim,
                                 float eps, rp_error *err);
    /* dx (required; = or +=) the input gradient, dx_compute (optional) its
     * rounded copy, dw += the weight gradient (dw may be NULL). dx may
     * alias dy. scratch: column_sum_scratch_floats(dim). */
    rp_status (*rmsnorm_backward)(void *state, const float *x, const float *w, const float *rstd,
                                  const float *dy, float *dx, void *dx_compute, float *dw,
                                  int64_t rows, int64_t dim, int accumulate, float *scratch,
                                  rp_error *err);

    /* ---- RoPE (rotate_half layout; positions restart per sequence and
     * per segment) ---- */
    /* The cos/sin table of positions 0..seqlen-1 for inv_freq[half] (host
     * memory): written into `space` (rope_table_floats(seqlen, half) of
     * it), or a table the back end made once and keeps; *table is valid
     * until the next rope_table call with another shape or inv_freq. Either
     * is rp_rope_table_floats(seqlen, half) floats, so a scaled copy of it
     * (YaRN's attention factor) is a table rope_apply reads alike. */
    rp_status (*rope_table)(void *state, const float *inv_freq, int64_t seqlen, int64_t half,
                            float *space, const float **table, rp_error *err);
    /* Rotate x [nseq*seqlen, nheads*head_dim] in place by +angle, or by
     * -angle when inverse (the backward); x_compute (optional) gets the
     * rounded result. A token's position is its index in its sequence, or
     * with seg_start (NULL: none; see rp_attn_shape) its distance from its
     * segment's first token. */
    rp_status (*rope_apply)(void *state, float *x, void *x_compute, const float *table,
                            int64_t nseq, int64_t seqlen, const int32_t *seg_start,
                            int64_t nheads, int64_t head_dim, int inverse, rp_error *err);

    /* ---- attention ------------------------------------------------------ */
    rp_status (*attention_forward)(void *state, const rp_attn_shape *s, const void *q,
                                   const void *k, const void *v, void *o, float *lse,
                                   rp_error *err);
    /* dq, dk, dv (fp32, overwritten) from the forward's inputs, o, lse and
     * dout. */
    rp_status (*attention_backward)(void *state, const rp_attn_shape *s, const void *q,
                                    const void *k, const void *v, const void *o, const float *lse,
                                    const void *dout, float *dq, float *dk, float *dv,
                                    float *scratch, rp_error *err);

    /* The learned sinks' gradient (s->sinks != NULL; nothing otherwise):
     * dsinks[h] += -sum over rows t in order of exp(sinks[h] - lse[t, h]) *
     * (dout[t, h] . o[t, h]), from the forward's o and lse (o, dout in the
     * compute dtype; dsinks fp32 [nheads]). The CUDA table's sums each
     * row's term in double in a fixed tree (kernels/cuda/attention.h). */
    rp_status (*attention_sink_backward)(void *state, const rp_attn_shape *s, const void *o,
                                         const float *lse, const void *dout, float *dsinks,
                                         rp_error *err);

    /* ---- SwiGLU: m = silu(g) * u, elementwise over rows x cols --------- */
    /* g and u in gu_dtype: RP_F32, or the compute dtype (the GEMMs' own
     * output where nothing adds to it in fp32: model/block.c), read and
     * widened exactly, then the same fp32 math; any other dtype is
     * RP_ERR_UNSUPPORTED. g and u are `rows` rows of `cols` values at a
     * row stride ld >= cols (the dense MLP's fused gate/up GEMM writes
     * [g_row | u_row]: ld = 2 cols, u = g + cols; ld == cols: contiguous);
     * the gaps are neither read nor written. m, in the compute dtype, is
     * contiguous [rows, cols]. ld < cols is RP_ERR_INVALID_ARG. */
    rp_status (*swiglu_forward)(void *state, const void *g, const void *u, rp_dtype gu_dtype,
                                int64_t ld, void *m, int64_t rows, int64_t cols, rp_error *err);
    /* dg, du (compute dtype, at g's row stride ld) from dm in dm_dtype
     * (contiguous [rows, cols]) and the forward's g, u in gu_dtype (each
     * RP_F32 or the compute dtype, as above); dg may alias g and du may
     * alias u when the compute dtype is fp32. */
    rp_status (*swiglu_backward)(void *state, const void *g, const void *u, rp_dtype gu_dtype,
                                 int64_t ld, const void *dm, rp_dtype dm_dtype, void *dg, void *du,
                                 int64_t rows, int64_t cols, rp_error *err);

    /* gpt-oss's clamped SwiGLU (kernels/cpu/swiglu.h): gate = min(g, limit),
     * up = clamp(u, -limit, limit), m = (up + 1) * gate * sigmoid(alpha *
     * gate); the backward's clamp gradients are zero where a value was
     * clamped (beyond the bound; at it they pass, as torch's). Aliasing as
     * for swiglu. The CUDA table's are its formulas in the same fp32
     * operations (kernels/cuda/swiglu.h). */
    rp_status (*swiglu_clamped_forward)(void *state, const float *g, const float *u, float limit,
                                        float alpha, void *m, int64_t n, rp_error *err);
    rp_status (*swiglu_clamped_backward)(void *state, const float *g, const float *u,
                                         float limit, float alpha, const float *dm, void *dg,
                                         void *du, int64_t n, rp_error *err);

    /* ---- LoRA: the adapter's scaled add and its input dropout ---------- */
    /* y = alpha * x, or y = y + alpha * x with accumulate, elementwise over
     * n fp32 values, computed exactly as that fp32 product (rounded) then
     * that fp32 sum (rounded): no fused multiply-add, so every table gives
     * the same bits. y_compute (optional) gets the result's rounded copy; y
     * may be NULL without accumulate (then y_compute is required). y may
     * alias x. n == 0 does nothing. */
    rp_status (*scaled_add)(void *state, const float *x, float alpha, float *y, void *y_compute,
                            int64_t n, int accumulate, rp_error *err);
    /* Inverted dropout of x [rows, cols] into y (y may alias x): y[r, c] =
     * keep ? x[r, c] * s : 0 with s = 1 / (1 - p) in fp32, the product
     * rounded to fp32; with accumulate y[r, c] = y[r, c] + that value. keep
     * is the mask of `site` (kernels/dropout.h), the same bits on every
     * table. dtype: RP_F32 (x and y fp32, accumulate allowed) or the
     * compute dtype (x and y in it, accumulate 0; a bf16 output is the fp32
     * value rounded to nearest even); any other dtype, or accumulate into a
     * bf16 y, is RP_ERR_UNSUPPORTED. p outside [0, 1) or rows_per_sample <
     * 1 is RP_ERR_INVALID_ARG. p == 0 copies x (adds it with accumulate)
     * without drawing a mask. */
    rp_status (*dropout)(void *state, const rp_dropout_site *site, const void *x, void *y,
                         rp_dtype dtype, int64_t rows, int64_t cols, int accumulate,
                         rp_error *err);

    /* ---- mixture of experts (Qwen3-MoE; model/block_moe.c) ------------- */
    /* A token t routed to k experts makes k pairs p = t*k + s (s the slot,
     * 0..k-1). Grouping orders the pairs by expert, stably: grouped
     * position j holds pair order[j], the pairs of expert e are positions
     * offsets[e] .. offsets[e+1]-1 with their tokens ascending, and
     * where[p] is pair p's position (the inverse of order). offsets,
     * order and where are int32 in the device's memory; no op here needs
     * the experts' counts on the host. Every sum runs in a fixed order, so
     * for given offsets results do not depend on threads (a GEMM row's bits
     * may depend on how many rows its expert has: BLAS blocks by shape). */

    /* Routing of `rows` tokens over E = nexperts experts, k = topk of them
     * (1 <= k <= E): probs [rows, E] = softmax(logits [rows, E]) in fp32
     * (max subtracted, exp, sum in expert order, divided); experts
     * [rows, k] (int32) the k largest probabilities, largest first, ties
     * to the lower expert index; weights [rows, k] (fp32) their
     * probabilities, each divided by their sum (summed in slot order) when
     * norm_topk. */
    rp_status (*moe_route)(void *state, const float *logits, int64_t rows, int64_t nexperts,
                           int64_t topk, int norm_topk, float *probs, int32_t *experts,
                           float *weights, rp_error *err);
    /* offsets [E+1], order and where [rows*k] of the pairs of experts
     * [rows, k] (as above). An expert index outside [0, E) is
     * RP_ERR_RANGE. */
    rp_status (*moe_group)(void *state, const int32_t *experts, int64_t rows, int64_t topk,
                           int64_t nexperts, int32_t *offsets, int32_t *order, int32_t *where,
                           rp_error *err);
    /* The load-balancing statistics of one routing (fp32 [2E], overwritten):
     * stats[e] = offsets[e+1] - offsets[e] (pairs routed to e, exact below
     * 2^24) and stats[E + e] = sum over tokens in order of probs[t, e]
     * (accumulated in double, rounded to fp32). */
    rp_status (*moe_stats)(void *state, const float *probs, const int32_t *offsets,
                           int64_t rows, int64_t nexperts, float *stats, rp_error *err);
    /* xg[j] = x[order[j] / k] for j < rows*k (rows of `cols`, compute
     * dtype in and out); with weights != NULL (fp32 [rows*k], by pair)
     * xg[j] = weights[order[j]] * x[order[j] / k], the product in fp32
     * rounded to the compute dtype. */
    rp_status (*moe_gather)(void *state, const void *x, const int32_t *order,
                            const float *weights, int64_t rows, int64_t topk, int64_t cols,
                            void *xg, rp_error *err);
    /* The gather's backward: dx[t] = sum over s = 0..k-1 in that order of
     * dxg[where[t*k + s]] (fp32 rows of `cols`); with accumulate dx[t] +=
     * that sum (added once, after summing). */
    rp_status (*moe_scatter_add)(void *state, const float *dxg, const int32_t *where,
                                 int64_t rows, int64_t topk, int64_t cols, float *dx,
                                 int accumulate, rp_error *err);
    /* y[t] = residual[t] + (sum over s in slot order of weights[t*k+s] *
     * yg[where[t*k+s]]): the sum starts at 0 in fp32, each product is
     * rounded then added; residual may be NULL (then 0). y fp32, must not
     * alias yg. */
    rp_status (*moe_combine)(void *state, const float *yg, const float *weights,
                             const int32_t *where, const float *residual, int64_t rows,
                             int64_t topk, int64_t cols, float *y, rp_error *err);
    /* The backward of the weighted down projection y_t = sum_s w_p (m_j
     * Wd^T), given z = (dy[t] gathered, unweighted) Wd [rows*k, cols] fp32
     * and the forward's m [rows*k, cols] (compute dtype), both by grouped
     * position: dweights[order[j]] = sum over c of z[j, c] * m[j, c]
     * (accumulated in double in column order, rounded to fp32) and dm[j]
     * = weights[order[j]] * z[j] (fp32; dm may alias z), with dm_compute
     * (optional) its rounded copy. */
    rp_status (*moe_down_backward)(void *state, const float *z, const void *m,
                                   const float *weights, const int32_t *order, int64_t rows,
                                   int64_t topk, int64_t cols, float *dm, void *dm_compute,
                                   float *dweights, rp_error *err);
    /* The routing's backward: dlogits [rows, E] (fp32; dlogits_compute,
     * optional, its rounded copy) from dweights [rows, k] and the
     * forward's probs and experts: with norm_topk, w_s = p_s / Z (Z the
     * sum of the k chosen p), dp_s = (dw_s - sum_s' dw_s' w_s') / Z, else
     * dp_s = dw_s; every other expert's dp is 0; then dp[t, e] +=
     * aux_grad[e] for every e when aux_grad != NULL (fp32 [E]: the load
     * balancing loss's gradient per probability); dlogits = p * (dp -
     * sum_e p_e dp_e), sums in expert order in double. */
    rp_status (*moe_route_backward)(void *state, const float *probs, const int32_t *experts,
                                    const float *dweights, const float *aux_grad, int64_t rows,
                                    int64_t nexperts, int64_t topk, int norm_topk,
                                    float *dlogits, void *dlogits_compute, rp_error *err);
    /* Grouped GEMMs: for each expert e the rows offsets[e] ..
     * offsets[e+1]-1 of x [rows, in] times W[e]^T, W[e] [out, in] in
     * W_dtype (one of weight_dtypes), W a host array of E pointers into
     * the device's memory (an expert with no rows is never read; its
     * pointer may be NULL). rows is offsets[E]. Forward: y (fp32) and/or
     * y_compute (at least one) [rows, out]. */
    rp_status (*grouped_linear_forward)(void *state, const void *x, const void *const *W,
                                        rp_dtype W_dtype, const int32_t *offsets,
                                        int64_t nexperts, int64_t rows, int64_t in,
                                        int64_t out, float *y, void *y_compute, rp_error *err);
    /* dx = dy W[e] for each expert's rows, into exactly one of dx (fp32; +=
     * with accumulate) and dx_compute. */
    rp_status (*grouped_linear_backward_input)(void *state, const void *dy,
                                               const void *const *W, rp_dtype W_dtype,
                                               const int32_t *offsets, int64_t nexperts,
                                               int64_t rows, int64_t in, int64_t out,
                                               float *dx, void *dx_compute, int accumulate,
                                               rp_error *err);
    /* dW[e] += dy_e^T x_e over expert e's rows (dW a host array of E
     * fp32 pointers; an expert with no rows is not touched). */
    rp_status (*grouped_linear_backward_weight)(void *state, const void *dy, const void *x,
                                                const int32_t *offsets, int64_t nexperts,
                                                int64_t rows, int64_t in, int64_t out,
                                                float *const *dW, rp_error *err);

    /* gpt-oss's expert biases (issue 35), beside the grouped GEMMs: y
     * (fp32 [rows, out]) += bias[e] on each row of expert e, bias a host
     * array of E pointers to fp32 [out] (an expert with no rows is never
     * read), y_compute (optional) the result's rounded copy; and dbias[e]
     * += the column sums of dy over expert e's rows in row order (the
     * CPU column_sum_accumulate's order, in fp32; dbias a host array of E fp32
     * pointers; an expert with no rows is not touched). dy is in the
     * compute dtype: the gradients the grouped GEMMs read (bf16 on CUDA),
     * so the bias's gradient is summed from the values its weight's is.
     * The CUDA table's (kernels/cuda/grouped_bias.h) read the offsets on
     * the device and sum in the CPU's order: the same bits. */
    rp_status (*grouped_bias_forward)(void *state, float *y, void *y_compute,
                                      const float *const *bias, const int32_t *offsets,
                                      int64_t nexperts, int64_t rows, int64_t out,
                                      rp_error *err);
    rp_status (*grouped_bias_backward)(void *state, const void *dy, const int32_t *offsets,
                                       int64_t nexperts, int64_t rows, int64_t out,
                                       float *const *dbias, rp_error *err);

    /* ---- cross-entropy over a chunk of rows ---------------------------- */
    /* Row r counts when counted == NULL or counted[r] != 0: loss[r] =
     * logsumexp(z_r) - z_r[target_r] in double, else 0. With grad the
     * gradient d(scale * loss_r)/dz_r (zeros for rows that do not count)
     * goes to dlogits_compute, [rows, vocab] in compute_dtype, in the pass
     * that forms it: each element the fp32 gradient rounded once (what
     * convert of the in-place gradient gives), the fp32 logits then left
     * holding the logits or the fp32 gradient, as the table finds cheaper;
     * with dlogits_compute NULL (or logits: fp32 tables) the logits are
     * overwritten by it in fp32. Each
     * row's statistics come from one read of it, in an order fixed by
     * vocab alone (bit-reproducible, whatever rows a call holds). Targets
     * of counted rows must be in range (check_ids). */
    rp_status (*cross_entropy)(void *state, float *logits, int64_t rows, int64_t vocab,
                               const int32_t *targets, const uint8_t *counted, float scale,
                               double *loss, int grad, void *dlogits_compute, rp_error *err);
    /* *sum (host) = values[0] + values[1] + ... in index order (0 for n = 0). */
    rp_status (*sum_to_host)(void *state, const double *values, int64_t n, double *sum,
                             rp_error *err);

    /* ---- ids and the embedding ----------------------------------------- */
    /* RP_ERR_RANGE naming the first position whose id is outside [0, limit)
     * (only positions with mask != 0 when mask is given), whose message is
     * exactly "<what>: <kind> <id> at position <p> is outside the
     * vocabulary [0, <limit>)". */
    rp_status (*check_ids)(void *state, const int32_t *ids, const uint8_t *mask, int64_t n,
                           int64_t limit, const char *what, const char *kind, rp_error *err);
    /* out[t] = W[tokens[t]] (rows of `hidden`; W in fp32 or bf16, widened
     * exactly). */
    rp_status (*embed_forward)(void *state, const void *W, rp_dtype W_dtype,
                               const int32_t *tokens, int64_t n, int64_t hidden, float *out,
                               rp_error *err);
    /* dW[tokens[t]] += dout[t], tokens in order. */
    rp_status (*embed_backward)(void *state, const int32_t *tokens, int64_t n, int64_t hidden,
                                int64_t vocab, const float *dout, float *dW, rp_error *err);

    /* ---- copies -------------------------------------------------------- */
    /* dst (dtype `to`) = src (dtype `from`), n elements, fp32 and bf16 only
     * (other dtypes: RP_ERR_UNSUPPORTED): fp32 to bf16 rounds to nearest
     * even, bf16 to fp32 is exact, same dtypes copy; a NaN stays a NaN. */
    rp_status (*convert)(void *state, const void *src, rp_dtype from, void *dst, rp_dtype to,
                         int64_t n, rp_error *err);
    /* bytes from src to dst, both on the device. */
    rp_status (*copy)(void *state, void *dst, const void *src, size_t bytes, rp_error *err);
    /* An FP8 base's matrix dequantised (issue 36): dst [rows, cols] in
     * dst_dtype (fp32 or bf16) = w[r, c] x s[r / block_rows, c /
     * block_cols], weight e4m3 [rows, cols] (one byte each) and scale
     * [ceil(rows / block_rows), ceil(cols / block_cols)] in scale_dtype
     * (fp32, bf16 or f16), both on the device, any alignment; the bits of
     * core/fp8.h's rp_fp8_dequantise_rows (the product in fp32, rounded
     * once to bf16). Other dtypes, or sizes below 1: RP_ERR_UNSUPPORTED /
     * RP_ERR_INVALID_ARG naming the op. */
    rp_status (*fp8_dequantise)(void *state, const void *weight, const void *scale,
                                rp_dtype scale_dtype, int64_t rows, int64_t cols,
                                int64_t block_rows, int64_t block_cols, void *dst,
                                rp_dtype dst_dtype, rp_error *err);
} rp_kernel_ops;

/* An observer of the ops the model issues (model/carve.h's RP_OP): told
 * after each call returns, with the op's name and its call site, in issue
 * order. NULL in every run; bench/bench_block sets one to time each op of a
 * block (a mark per call: the time between two marks is the op's). */
typedef struct rp_kernel_probe {
    void (*after)(void *ctx, const char *op, const char *file, int line);
    void *ctx;
} rp_kernel_probe;

/* A table with its state: what a device hands the model. */
typedef struct rp_kernels {
    const rp_kernel_ops *ops;
    void *state;
    const rp_kernel_probe *probe; /* NULL but in a benchmark */
} rp_kernels;

/* Whether a table's GEMMs read weights in dtype dt where they lie. */
static inline int rp_kernel_reads_weights(const rp_kernel_ops *ops, rp_dtype dt)
{
    return (ops->weight_dtypes >> dt) & 1u;
}

/* Whether linear_forward's outputs are ones its contract takes: y, or
 * y_compute alone with neither a bias nor a residual to add. */
static inline int rp_linear_outputs_valid(const float *y, const void *y_compute,
                                          const float *bias, const float *residual)
{
    return y || (y_compute && !bias && !residual);
}

/* Whether swiglu_forward/backward's shape is one their contract takes: no
 * negative count, and g and u's row stride ld at least a row. */
static inline int rp_swiglu_shape_valid(int64_t ld, int64_t rows, int64_t cols)
{
    return rows >= 0 && cols >= 0 && ld >= cols;
}

/* Floats of a RoPE table of every back end (rope_table): cos and sin of
 * seqlen positions x half frequencies. */
static inline size_t rp_rope_table_floats(int64_t seqlen, int64_t half)
{
    return (size_t)(2 * seqlen * half);
}

/* Bytes of one compute-dtype element of a table. */
static inline size_t rp_kernel_compute_bytes(const rp_kernel_ops *ops)
{
    return rp_dtype_size(ops->compute_dtype);
}

#endif
