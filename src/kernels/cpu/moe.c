#include "kernels/cpu/moe.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/linear.h"

/* Products go to a variable of their own before a sum: the build is ISO C
 * (-std=c11, GCC's -ffp-contract=off), so no fused multiply-add forms. */

/* Columns a per-row accumulator covers at once (a stack array). */
#define COL_CHUNK 256

/* Whether expert a with probability pa ranks before expert b with pb:
 * larger first, ties to the lower index, a NaN after every number. */
static int ranks_before(float pa, int64_t a, float pb, int64_t b)
{
    const int na = isnan(pa) != 0, nb = isnan(pb) != 0;
    if (na || nb)
        return na == nb ? a < b : nb;
    return pa > pb || (pa == pb && a < b);
}

void rp_moe_route(const float *logits, int64_t rows, int64_t nexperts, int64_t topk,
                  int norm_topk, float *probs, int32_t *experts, float *weights)
{
    const int64_t E = nexperts, k = topk;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < rows; t++) {
        const float *l = logits + t * E;
        float *p = probs + t * E, *w = weights + t * k;
        int32_t *ex = experts + t * k;
        float mx = l[0];
        for (int64_t e = 1; e < E; e++)
            mx = l[e] > mx ? l[e] : mx;
        float sum = 0.0f;
        for (int64_t e = 0; e < E; e++) {
            p[e] = expf(l[e] - mx);
            sum += p[e];
        }
        for (int64_t e = 0; e < E; e++)
            p[e] = p[e] / sum;
        /* repeated selection: slot s takes the best expert ranking after
         * slot s-1's, the ranking being a strict total order */
        for (int64_t s = 0; s < k; s++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                if (s > 0 && !ranks_before(p[ex[s - 1]], ex[s - 1], p[e], e))
                    continue;
                if (best < 0 || ranks_before(p[e], e, p[best], best))
                    best = e;
            }
            ex[s] = (int32_t)best;
            w[s] = p[best];
        }
        if (norm_topk) {
            float z = 0.0f;
            for (int64_t s = 0; s < k; s++)
                z += w[s];
            for (int64_t s = 0; s < k; s++)
                w[s] = w[s] / z;
        }
    }
}

int64_t rp_moe_bad_expert(const int32_t *experts, int64_t npairs, int64_t nexperts)
{
    for (int64_t p = 0; p < npairs; p++)
        if (experts[p] < 0 || experts[p] >= nexperts)
            return p;
    return -1;
}

void rp_moe_group(const int32_t *experts, int64_t npairs, int64_t nexperts, int32_t *offsets,
                  int32_t *order, int32_t *where)
{
    const int64_t E = nexperts;
    /* The count of expert e goes to offsets[e + 2] (the last expert's is
     * not needed), so the running sum leaves in offsets[e + 1] the pairs of
     * the experts below e: e's start. That entry is e's cursor while the
     * pairs are placed in pair order (which keeps the sort stable), and
     * ends at e's end, the start of e + 1. */
    memset(offsets, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int64_t p = 0; p < npairs; p++)
        if (experts[p] + 2 <= E)
            offsets[experts[p] + 2]++;
    for (int64_t e = 2; e <= E; e++)
        offsets[e] += offsets[e - 1];
    for (int64_t p = 0; p < npairs; p++) {
        const int32_t j = offsets[experts[p] + 1]++;
        order[j] = (int32_t)p;
        where[p] = j;
    }
}

int rp_moe_offsets_valid(const int32_t *offsets, int64_t nexperts, int64_t rows)
{
    if (offsets[0] != 0 || offsets[nexperts] != rows)
        return 0;
    for (int64_t e = 0; e < nexperts; e++)
        if (offsets[e + 1] < offsets[e])
            return 0;
    return 1;
}

void rp_moe_stats(const float *probs, const int32_t *offsets, int64_t rows, int64_t nexperts,
                  float *stats)
{
    const int64_t E = nexperts;
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < E; e++) {
        double acc = 0.0;
        for (int64_t t = 0; t < rows; t++)
            acc += probs[t * E + e];
        stats[e] = (float)(offsets[e + 1] - offsets[e]);
        stats[E + e] = (float)acc;
    }
}

void rp_moe_gather(const float *x, const int32_t *order, const float *weights, int64_t rows,
                   int64_t topk, int64_t cols, float *xg)
{
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < rows * topk; j++) {
        const int64_t p = order[j];
        const float *src = x + (p / topk) * cols;
        float *dst = xg + j * cols;
        if (!weights) {
            memcpy(dst, src, sizeof(float) * (size_t)cols);
            continue;
        }
        const float w = weights[p];
        for (int64_t c = 0; c < cols; c++)
            dst[c] = w * src[c];
    }
}

void rp_moe_scatter_add(const float *dxg, const int32_t *where, int64_t rows, int64_t topk,
                        int64_t cols, float *dx, int accumulate)
{
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < rows; t++) {
        for (int64_t c0 = 0; c0 < cols; c0 += COL_CHUNK) {
            const int64_t n = cols - c0 < COL_CHUNK ? cols - c0 : COL_CHUNK;
            float acc[COL_CHUNK];
            for (int64_t c = 0; c < n; c++)
                acc[c] = 0.0f;
            for (int64_t s = 0; s < topk; s++) {
                const float *src = dxg + (int64_t)where[t * topk + s] * cols + c0;
                for (int64_t c = 0; c < n; c++)
                    acc[c] += src[c];
            }
            float *dst = dx + t * cols + c0;
            for (int64_t c = 0; c < n; c++)
                dst[c] = accumulate ? dst[c] + acc[c] : acc[c];
        }
    }
}

void rp_moe_combine(const float *yg, const float *weights, const int32_t *where,
                    const float *residual, int64_t rows, int64_t topk, int64_t cols, float *y)
{
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < rows; t++) {
        for (int64_t c0 = 0; c0 < cols; c0 += COL_CHUNK) {
            const int64_t n = cols - c0 < COL_CHUNK ? cols - c0 : COL_CHUNK;
            float acc[COL_CHUNK];
            for (int64_t c = 0; c < n; c++)
                acc[c] = 0.0f;
            for (int64_t s = 0; s < topk; s++) {
                const float w = weights[t * topk + s];
                const float *src = yg + (int64_t)where[t * topk + s] * cols + c0;
                for (int64_t c = 0; c < n; c++) {
                    const float product = w * src[c];
                    acc[c] = acc[c] + product;
                }
            }
            float *dst = y + t * cols + c0;
            const float *res = residual ? residual + t * cols + c0 : NULL;
            for (int64_t c = 0; c < n; c++)
                dst[c] = res ? res[c] + acc[c] : acc[c];
        }
    }
}

void rp_moe_down_backward(const float *z, const float *m, const float *weights,
                          const int32_t *order, int64_t rows, int64_t topk, int64_t cols,
                          float *dm, float *dweights)
{
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < rows * topk; j++) {
        const int64_t p = order[j];
        const float *zr = z + j * cols, *mr = m + j * cols;
        double acc = 0.0;
        for (int64_t c = 0; c < cols; c++)
            acc += (double)zr[c] * (double)mr[c];
        dweights[p] = (float)acc;
        /* after the dot product: dm may be z */
        const float w = weights[p];
        float *dr = dm + j * cols;
        for (int64_t c = 0; c < cols; c++)
            dr[c] = w * zr[c];
    }
}

/* The gradient of a row's loss with respect to expert e's probability:
 * aux_grad[e] plus, for each slot holding e, the slot's (dw_s - s1) / z
 * (z = 1, s1 = 0 without renormalisation). */
static double prob_grad(int64_t e, const int32_t *ex, const float *dw, int64_t k, double z,
                        double s1, const float *aux_grad)
{
    double g = aux_grad ? (double)aux_grad[e] : 0.0;
    for (int64_t s = 0; s < k; s++)
        if (ex[s] == e)
            g += ((double)dw[s] - s1) / z;
    return g;
}

void rp_moe_route_backward(const float *probs, const int32_t *experts, const float *dweights,
                           const float *aux_grad, int64_t rows, int64_t nexperts, int64_t topk,
                           int norm_topk, float *dlogits)
{
    const int64_t E = nexperts, k = topk;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < rows; t++) {
        const float *p = probs + t * E, *dw = dweights + t * k;
        const int32_t *ex = experts + t * k;
        double z = 1.0, s1 = 0.0;
        if (norm_topk) {
            /* w_s = p_s / z: d/dp_s of sum dw w is (dw_s - sum dw w) / z */
            z = 0.0;
            for (int64_t s = 0; s < k; s++)
                z += p[ex[s]];
            for (int64_t s = 0; s < k; s++)
                s1 += (double)dw[s] * ((double)p[ex[s]] / z);
        }
        double dot = 0.0;
        for (int64_t e = 0; e < E; e++)
            dot += (double)p[e] * prob_grad(e, ex, dw, k, z, s1, aux_grad);
        float *dl = dlogits + t * E;
        for (int64_t e = 0; e < E; e++)
            dl[e] = (float)((double)p[e] * (prob_grad(e, ex, dw, k, z, s1, aux_grad) - dot));
    }
}

/* The grouped GEMMs cut each expert's rows into tiles of at most ROW_TILE
 * rows, fixed by the offsets alone, and run each tile as one GEMM of
 * linear.h inside this file's parallel loop, where OpenBLAS's OpenMP build
 * (the one configure asks for) computes it on the calling thread. A GEMM's
 * result depends on its shape (OpenBLAS picks kernels by it) and on its
 * thread count; here neither depends on the threads, so neither do the
 * results. Tiles write disjoint outputs, so which thread takes which tile
 * does not matter: they are handed out dynamically, as uneven experts make
 * uneven tiles. Tile q is the (q / E)-th of expert q % E: every expert's
 * first tile comes before any expert's second. */
#define ROW_TILE 128

/* Tiles per expert: enough for the expert with the most rows. */
static int64_t tiles_per_expert(const int32_t *offsets, int64_t nexperts)
{
    int64_t most = 0;
    for (int64_t e = 0; e < nexperts; e++)
        if (offsets[e + 1] - offsets[e] > most)
            most = offsets[e + 1] - offsets[e];
    return (most + ROW_TILE - 1) / ROW_TILE;
}

/* Tile q's rows: *r0 its first, the count returned (0 when expert q % E
 * has fewer tiles than q / E + 1). */
static int64_t tile_rows(const int32_t *offsets, int64_t nexperts, int64_t q, int64_t *r0)
{
    const int64_t e = q % nexperts;
    *r0 = offsets[e] + q / nexperts * ROW_TILE;
    const int64_t left = offsets[e + 1] - *r0;
    return left < ROW_TILE ? left : ROW_TILE;
}

int rp_moe_grouped_forward(const float *x, const void *const *W, int W_bf16,
                           const int32_t *offsets, int64_t nexperts, int64_t in, int64_t out,
                           float *y)
{
    const int64_t per = tiles_per_expert(offsets, nexperts);
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed)
    for (int64_t q = 0; q < nexperts * per; q++) {
        int64_t r0;
        const int64_t n = tile_rows(offsets, nexperts, q, &r0), e = q % nexperts;
        if (n <= 0)
            continue;
        if (!W_bf16)
            rp_linear_forward(x + r0 * in, W[e], NULL, y + r0 * out, n, in, out);
        else
            failed |= rp_linear_forward_bf16(x + r0 * in, W[e], NULL, y + r0 * out, n, in,
                                             out) != 0;
    }
    return failed ? -1 : 0;
}

int rp_moe_grouped_backward_input(const float *dy, const void *const *W, int W_bf16,
                                  const int32_t *offsets, int64_t nexperts, int64_t in,
                                  int64_t out, float *dx, int accumulate)
{
    const int64_t per = tiles_per_expert(offsets, nexperts);
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed)
    for (int64_t q = 0; q < nexperts * per; q++) {
        int64_t r0;
        const int64_t n = tile_rows(offsets, nexperts, q, &r0), e = q % nexperts;
        if (n <= 0)
            continue;
        if (!W_bf16)
            rp_linear_backward_input(dy + r0 * out, W[e], dx + r0 * in, n, in, out, accumulate);
        else
            failed |= rp_linear_backward_input_bf16(dy + r0 * out, W[e], dx + r0 * in, n, in,
                                                    out, accumulate) != 0;
    }
    return failed ? -1 : 0;
}

/* One GEMM per expert: its reduction runs over all the expert's rows. */
void rp_moe_grouped_backward_weight(const float *dy, const float *x, const int32_t *offsets,
                                    int64_t nexperts, int64_t in, int64_t out, float *const *dW)
{
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t e = 0; e < nexperts; e++) {
        const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n > 0)
            rp_linear_backward_weight(dy + r0 * out, x + r0 * in, dW[e], NULL, n, in, out);
    }
}

void rp_moe_grouped_bias_add(float *y, const float *const *bias, const int32_t *offsets,
                             int64_t nexperts, int64_t out)
{
    for (int64_t e = 0; e < nexperts; e++) {
        const int64_t r0 = offsets[e], r1 = offsets[e + 1];
        const float *b = bias[e];
#pragma omp parallel for schedule(static) if ((r1 - r0) * out >= 65536)
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = 0; c < out; c++)
                y[r * out + c] += b[c];
    }
}

void rp_moe_grouped_bias_backward(const float *dy, const int32_t *offsets, int64_t nexperts,
                                  int64_t out, float *const *dbias)
{
    for (int64_t e = 0; e < nexperts; e++)
        if (offsets[e + 1] > offsets[e])
            rp_colsum_accumulate(dy + (int64_t)offsets[e] * out, offsets[e + 1] - offsets[e], out,
                                 dbias[e]);
}
