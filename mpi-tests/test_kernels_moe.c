/* Proves: the mixture-of-experts ops of the CPU kernel table (kernels/ops.h),
 * called through the table, against brute force in double written here
 * (nothing of src/kernels/cpu/moe.c is called directly), on random inputs,
 * every output poisoned (NaN, or an impossible index) before the call so
 * an element left unwritten fails. Shapes: 37 tokens top-2 of 8 experts, 29
 * top-3 of 5, 13 top-5 of 5 (k = E), 1 token top-1 of 3; routing logits
 * push some experts (the last among them) out of every token's top-k, and
 * the grouped GEMMs run on splits whose first, last and middle experts have
 * no rows (their weights NULL, so a read would crash).
 *   - moe_route: probs within 2e-6 relative of a double softmax (plus the
 *     error exp makes of fp32's rounded logit - max); experts exactly the
 *     first k of the kernel's own probabilities sorted (larger first, lower
 *     index first among equals); weights those probabilities, divided by
 *     their double sum within 1e-6 with norm_topk; exact ties
 *     (equal logits) go to the lower index, with k < E and k = E; NaN
 *     logits still give k distinct experts in range;
 *   - moe_group equals a per-expert scan of the pairs in pair order
 *     (offsets, order, where; also 0 tokens), with experts drawn so that
 *     the first and the last have no pairs; an expert index E or -1 is
 *     RP_ERR_RANGE naming the op, the expert and the first bad position,
 *     with nothing written;
 *   - moe_stats: counts exactly, probability sums exactly the double sum
 *     in token order rounded;
 *   - moe_gather bit for bit (a copy, or the fp32 product with the pair's
 *     weight); moe_scatter_add (= and +=) and moe_combine (with and without
 *     a residual) within 1e-6 of the double sums;
 *   - moe_down_backward: dweights exactly the double dot product rounded,
 *     dm exactly the fp32 product (also in place over z), dm_compute a copy;
 *   - the backward ops against central finite differences, in double, of
 *     the forward they differentiate: scatter_add of the gather; the down
 *     projection's dweights and dm of L = sum c * combine(m Wd^T);
 *     moe_route_backward of L = sum c * weights + sum aux * probs (with and
 *     without norm_topk, with and without aux_grad); the grouped GEMMs'
 *     input and weight gradients of L = sum c * grouped_forward(x, W);
 *   - the grouped GEMMs against brute force per expert's rows, fp32 and
 *     bf16 weights, into y, y_compute or both, dx = and +=, dx_compute, dW
 *     accumulated over two calls; an empty expert's dW left untouched;
 *   - route, group, gather, grouped forward and combine composed give a
 *     brute-force MoE layer's output;
 *   - results are bit-identical with 1, 2 and 3 OpenMP threads (grouped
 *     GEMMs with fp32 and bf16 weights, combine, scatter_add, route and its
 *     backward, stats, down_backward), on 4 experts of over 100 rows of 160
 *     -> 136 each, where OpenBLAS left to thread each expert's GEMM itself
 *     gives other bits with 2 threads than with 1;
 *   - F16 weights are RP_ERR_UNSUPPORTED naming the op, offsets that do not
 *     split the rows and top-k outside [1, E] RP_ERR_INVALID_ARG, each with
 *     nothing written. */
#include <math.h>
#include <omp.h>
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

#define POISON_INDEX ((int32_t)-123456)

typedef struct {
    int64_t rows, E, k;
} shape;

static const shape shapes[] = {{37, 8, 2}, {29, 5, 3}, {13, 5, 5}, {1, 3, 1}};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static void *alloc(size_t bytes)
{
    void *p = malloc(bytes + 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *uniform_floats(size_t n, uint64_t stream, float lo, float hi)
{
    float *v = alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * rp_rng_uniform(29, stream, i);
    return v;
}

static float *nan_floats(size_t n)
{
    float *v = alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = NAN;
    return v;
}

static int32_t *poison_ints(size_t n)
{
    int32_t *v = alloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++)
        v[i] = POISON_INDEX;
    return v;
}

static double *doubles_of(const float *x, size_t n)
{
    double *d = alloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
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
        ck_assert_msg(bits(got[i]) == bits(want[i]), "%s: element %zu is %a, want %a", what, i,
                      (double)got[i], (double)want[i]);
}

/* |got - want| <= tol * mag (mag: the sum of the element's |terms|) */
static void expect_near(float got, double want, double mag, double tol, const char *what,
                        int64_t i)
{
    ck_assert_msg(fabs((double)got - want) <= tol * mag + 1e-30, "%s: element %lld is %.9g, "
                  "want %.9g (tolerance %.3g)", what, (long long)i, (double)got, want, tol * mag);
}

/* Logits whose experts 1 and E-1 (as far as k leaves room) are pushed far
 * below the rest, so that no token picks them. */
static float *routing_logits(const shape *s, uint64_t stream)
{
    float *l = uniform_floats((size_t)(s->rows * s->E), stream, -3.0f, 3.0f);
    for (int64_t t = 0; t < s->rows; t++) {
        if (s->E - s->k >= 1)
            l[t * s->E + s->E - 1] -= 40.0f;
        if (s->E - s->k >= 2)
            l[t * s->E + 1] -= 40.0f;
    }
    return l;
}

static void softmax_double(const double *l, int64_t E, double *p)
{
    double mx = l[0], sum = 0;
    for (int64_t e = 1; e < E; e++)
        mx = fmax(mx, l[e]);
    for (int64_t e = 0; e < E; e++)
        sum += p[e] = exp(l[e] - mx);
    for (int64_t e = 0; e < E; e++)
        p[e] /= sum;
}

/* The first k of 0..E-1 sorted by p descending, lower index first among
 * equals (an insertion sort, a different algorithm from the kernel's). */
static void top_k_sorted(const float *p, int64_t E, int64_t k, int32_t *out)
{
    int32_t idx[64];
    ck_assert_int_le(E, 64);
    for (int64_t e = 0; e < E; e++) {
        int64_t i = e;
        while (i > 0 && p[idx[i - 1]] < p[e])
            idx[i] = idx[i - 1], i--;
        idx[i] = (int32_t)e;
    }
    memcpy(out, idx, sizeof(int32_t) * (size_t)k);
}

/* Central difference of loss() with respect to *v. */
static double central_diff(double (*loss)(const void *), const void *ctx, double *v, double h)
{
    const double v0 = *v;
    *v = v0 + h;
    const double lp = loss(ctx);
    *v = v0 - h;
    const double lm = loss(ctx);
    *v = v0;
    return (lp - lm) / (2 * h);
}

/* ---- routing ------------------------------------------------------------- */

static void route(const shape *s, const float *logits, int norm, float **probs,
                  int32_t **experts, float **weights)
{
    *probs = nan_floats((size_t)(s->rows * s->E));
    *experts = poison_ints((size_t)(s->rows * s->k));
    *weights = nan_floats((size_t)(s->rows * s->k));
    rp_error err = {0};
    ck_assert_int_eq(cpu->moe_route(NULL, logits, s->rows, s->E, s->k, norm, *probs, *experts,
                                    *weights, &err), RP_OK);
}

START_TEST(route_matches_brute_force)
{
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        const int64_t E = s->E, k = s->k;
        float *logits = routing_logits(s, 100 + i);
        for (int norm = 0; norm <= 1; norm++) {
            float *probs, *weights;
            int32_t *experts;
            route(s, logits, norm, &probs, &experts, &weights);
            int used[64] = {0};
            for (int64_t t = 0; t < s->rows; t++) {
                double l[64], p[64];
                for (int64_t e = 0; e < E; e++)
                    l[e] = logits[t * E + e];
                softmax_double(l, E, p);
                double mx = l[0];
                for (int64_t e = 1; e < E; e++)
                    mx = fmax(mx, l[e]);
                /* fp32's l - max is off by up to 2^-24 |l - max|, which exp
                 * turns into a relative error */
                for (int64_t e = 0; e < E; e++)
                    expect_near(probs[t * E + e], p[e], p[e] * (1 + 0.06 * fabs(l[e] - mx)),
                                2e-6, "probs", t * E + e);
                int32_t want[64];
                top_k_sorted(probs + t * E, E, k, want);
                double z = 0;
                for (int64_t j = 0; j < k; j++) {
                    ck_assert_msg(experts[t * k + j] == want[j], "token %lld slot %lld: expert "
                                  "%d, want %d", (long long)t, (long long)j,
                                  (int)experts[t * k + j], (int)want[j]);
                    used[want[j]] = 1;
                    z += probs[t * E + want[j]];
                }
                for (int64_t j = 0; j < k; j++) {
                    const float pj = probs[t * E + want[j]];
                    if (norm)
                        expect_near(weights[t * k + j], pj / z, pj / z, 1e-6, "weights", t * k + j);
                    else
                        ck_assert(bits(weights[t * k + j]) == bits(pj));
                }
            }
            /* the pushed-down experts got no token: later tests rely on it */
            if (E - k >= 1 && s->rows > 1)
                ck_assert(!used[E - 1]);
            free(probs), free(experts), free(weights);
        }
        free(logits);
    }
}
END_TEST

START_TEST(route_ties_go_to_the_lower_index)
{
    const float rows[][6] = {
        {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f},
        {1, 3, 3, 1, 3, 0},
        {2, 0, 2, 0, 2, 2},
        {-1, 4, -1, -1, 4, 4},
    };
    const int32_t want3[][3] = {{0, 1, 2}, {1, 2, 4}, {0, 2, 4}, {1, 4, 5}};
    const int32_t want6[][6] = {{0, 1, 2, 3, 4, 5}, {1, 2, 4, 0, 3, 5}, {0, 2, 4, 5, 1, 3},
                                {1, 4, 5, 0, 2, 3}};
    const shape s3 = {4, 6, 3}, s6 = {4, 6, 6};
    for (int norm = 0; norm <= 1; norm++) {
        float *probs, *weights;
        int32_t *experts;
        route(&s3, &rows[0][0], norm, &probs, &experts, &weights);
        for (int t = 0; t < 4; t++)
            for (int j = 0; j < 3; j++)
                ck_assert_msg(experts[t * 3 + j] == want3[t][j], "top-3, row %d slot %d: %d",
                              t, j, (int)experts[t * 3 + j]);
        if (norm) /* three equal probabilities: a third each */
            for (int j = 0; j < 3; j++)
                ck_assert_float_eq_tol(weights[j], 1.0f / 3.0f, 1e-7f);
        free(probs), free(experts), free(weights);
        route(&s6, &rows[0][0], norm, &probs, &experts, &weights);
        for (int t = 0; t < 4; t++)
            for (int j = 0; j < 6; j++)
                ck_assert_msg(experts[t * 6 + j] == want6[t][j], "top-6, row %d slot %d: %d",
                              t, j, (int)experts[t * 6 + j]);
        free(probs), free(experts), free(weights);
    }
    /* NaN logits: still k distinct experts in range */
    const float nan_rows[2][4] = {{NAN, 1, 2, 3}, {0, NAN, NAN, 1}};
    const shape sn = {2, 4, 3};
    float *probs, *weights;
    int32_t *experts;
    route(&sn, &nan_rows[0][0], 1, &probs, &experts, &weights);
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 3; j++) {
            const int32_t e = experts[t * 3 + j];
            ck_assert(e >= 0 && e < 4);
            for (int i = 0; i < j; i++)
                ck_assert(experts[t * 3 + i] != e);
        }
    free(probs), free(experts), free(weights);
}
END_TEST

/* ---- grouping ------------------------------------------------------------ */

/* Experts of pairs drawn from `allowed` (so the others get no pairs). */
static int32_t *drawn_experts(int64_t npairs, const int32_t *allowed, int nallowed,
                              uint64_t stream)
{
    int32_t *ex = alloc(sizeof(int32_t) * (size_t)(npairs + 1));
    for (int64_t p = 0; p < npairs; p++) {
        int i = (int)(rp_rng_uniform(31, stream, (uint64_t)p) * nallowed);
        ex[p] = allowed[i < nallowed ? i : nallowed - 1];
    }
    return ex;
}

static void group_case(const int32_t *experts, int64_t rows, int64_t k, int64_t E)
{
    const int64_t n = rows * k;
    int32_t *offsets = poison_ints((size_t)E + 1), *order = poison_ints((size_t)n);
    int32_t *where = poison_ints((size_t)n);
    rp_error err = {0};
    ck_assert_int_eq(cpu->moe_group(NULL, experts, rows, k, E, offsets, order, where, &err),
                     RP_OK);
    int64_t j = 0;
    for (int64_t e = 0; e < E; e++) {
        ck_assert_int_eq(offsets[e], j);
        for (int64_t p = 0; p < n; p++)
            if (experts[p] == e) {
                ck_assert_msg(order[j] == p, "expert %lld: position %lld holds pair %d, want "
                              "%lld", (long long)e, (long long)j, (int)order[j], (long long)p);
                ck_assert_int_eq(where[p], j);
                j++;
            }
    }
    ck_assert_int_eq(offsets[E], n);
    free(offsets), free(order), free(where);
}

START_TEST(group_is_a_stable_sort_by_expert)
{
    for (size_t i = 0; i < NSHAPES; i++) {
        const shape *s = &shapes[i];
        float *logits = routing_logits(s, 200 + i), *probs, *weights;
        int32_t *experts;
        route(s, logits, 1, &probs, &experts, &weights);
        group_case(experts, s->rows, s->k, s->E);
        free(logits), free(probs), free(experts), free(weights);
    }
    /* the first and the last expert empty, repeats within a token */
    const int32_t allowed8[] = {2, 3, 5}, allowed5[] = {1, 2, 3};
    int32_t *ex = drawn_experts(37 * 2, allowed8, 3, 1);
    group_case(ex, 37, 2, 8);
    free(ex);
    ex = drawn_experts(29 * 3, allowed5, 3, 2);
    group_case(ex, 29, 3, 5);
    free(ex);
    group_case(NULL, 0, 2, 8);
}
END_TEST

START_TEST(group_refuses_experts_out_of_range)
{
    const int64_t rows = 9, k = 2, E = 4, n = rows * k;
    const int32_t bad[] = {4, -1, 1000};
    for (int b = 0; b < 3; b++) {
        int32_t ex[18];
        for (int p = 0; p < n; p++)
            ex[p] = p % E;
        ex[11] = bad[b];
        ex[15] = -7; /* a later bad one: the first is named */
        int32_t *offsets = poison_ints(E + 1), *order = poison_ints(n), *where = poison_ints(n);
        rp_error err = {0};
        ck_assert_int_eq(cpu->moe_group(NULL, ex, rows, k, E, offsets, order, where, &err),
                         RP_ERR_RANGE);
        char want[64];
        snprintf(want, sizeof want, "expert %d at position 11", (int)bad[b]);
        ck_assert_msg(strstr(err.msg, "moe_group") && strstr(err.msg, want), "message: %s",
                      err.msg);
        for (int64_t p = 0; p < n; p++)
            ck_assert(order[p] == POISON_INDEX && where[p] == POISON_INDEX);
        for (int64_t e = 0; e <= E; e++)
            ck_assert(offsets[e] == POISON_INDEX);
        free(offsets), free(order), free(where);
    }
}
END_TEST

/* A routing of shape s, grouped: the common input of the tests below. */
typedef struct {
    shape s;
    float *logits, *probs, *weights;
    int32_t *experts, *offsets, *order, *where;
} routing;

static routing routed(const shape *s, uint64_t stream, int norm)
{
    routing r = {.s = *s};
    r.logits = routing_logits(s, stream);
    route(s, r.logits, norm, &r.probs, &r.experts, &r.weights);
    const int64_t n = s->rows * s->k;
    r.offsets = poison_ints((size_t)s->E + 1), r.order = poison_ints((size_t)n);
    r.where = poison_ints((size_t)n);
    rp_error err = {0};
    ck_assert_int_eq(cpu->moe_group(NULL, r.experts, s->rows, s->k, s->E, r.offsets, r.order,
                                    r.where, &err), RP_OK);
    return r;
}

static void routing_free(routing *r)
{
    free(r->logits), free(r->probs), free(r->weights), free(r->experts), free(r->offsets);
    free(r->order), free(r->where);
}

START_TEST(stats_count_and_sum_exactly)
{
    for (size_t i = 0; i < NSHAPES; i++) {
        routing r = routed(&shapes[i], 300 + i, 1);
        const int64_t E = r.s.E;
        float *stats = nan_floats((size_t)(2 * E));
        rp_error err = {0};
        ck_assert_int_eq(cpu->moe_stats(NULL, r.probs, r.offsets, r.s.rows, E, stats, &err),
                         RP_OK);
        for (int64_t e = 0; e < E; e++) {
            int64_t count = 0;
            double sum = 0;
            for (int64_t p = 0; p < r.s.rows * r.s.k; p++)
                count += r.experts[p] == e;
            for (int64_t t = 0; t < r.s.rows; t++)
                sum += r.probs[t * E + e];
            ck_assert(stats[e] == (float)count);
            ck_assert(bits(stats[E + e]) == bits((float)sum));
        }
        free(stats);
        routing_free(&r);
    }
}
END_TEST

/* ---- gather, scatter_add, combine ------------------------------------------ */

START_TEST(gather_copies_or_weights_rows)
{
    const int64_t cols = 19;
    for (size_t i = 0; i < NSHAPES; i++) {
        routing r = routed(&shapes[i], 400 + i, 0);
        const int64_t rows = r.s.rows, k = r.s.k, n = rows * k;
        float *x = uniform_floats((size_t)(rows * cols), 1, -2, 2);
        float *xg = nan_floats((size_t)(n * cols)), *xw = nan_floats((size_t)(n * cols));
        rp_error err = {0};
        ck_assert_int_eq(cpu->moe_gather(NULL, x, r.order, NULL, rows, k, cols, xg, &err), RP_OK);
        ck_assert_int_eq(cpu->moe_gather(NULL, x, r.order, r.weights, rows, k, cols, xw, &err),
                         RP_OK);
        for (int64_t t = 0; t < rows; t++)
            for (int64_t s = 0; s < k; s++) {
                const int64_t j = r.where[t * k + s];
                const float w = r.weights[t * k + s];
                expect_same_bits(xg + j * cols, x + t * cols, (size_t)cols, "gather");
                for (int64_t c = 0; c < cols; c++)
                    ck_assert(bits(xw[j * cols + c]) ==
                              bits((float)((double)w * x[t * cols + c])));
            }
        free(x), free(xg), free(xw);
        routing_free(&r);
    }
}
END_TEST

/* L = sum c * gather(x), the forward scatter_add differentiates. */
typedef struct {
    const routing *r;
    int64_t cols;
    double *x;
    const double *c;
} gather_ctx;

static double gather_loss(const void *p)
{
    const gather_ctx *g = p;
    const int64_t n = g->r->s.rows * g->r->s.k;
    double L = 0;
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < g->cols; c++)
            L += g->c[j * g->cols + c] * g->x[(g->r->order[j] / g->r->s.k) * g->cols + c];
    return L;
}

START_TEST(scatter_add_sums_slots)
{
    const int64_t cols = 270; /* more than one of the kernel's column blocks */
    for (size_t i = 0; i < NSHAPES; i++) {
        routing r = routed(&shapes[i], 500 + i, 0);
        const int64_t rows = r.s.rows, k = r.s.k, n = rows * k;
        float *dxg = uniform_floats((size_t)(n * cols), 2, -1, 1);
        float *dx0 = uniform_floats((size_t)(rows * cols), 3, -1, 1);
        for (int acc = 0; acc <= 1; acc++) {
            float *dx = nan_floats((size_t)(rows * cols));
            if (acc)
                memcpy(dx, dx0, sizeof(float) * (size_t)(rows * cols));
            rp_error err = {0};
            ck_assert_int_eq(cpu->moe_scatter_add(NULL, dxg, r.where, rows, k, cols, dx, acc,
                                                  &err), RP_OK);
            for (int64_t t = 0; t < rows; t++)
                for (int64_t c = 0; c < cols; c++) {
                    double want = acc ? dx0[t * cols + c] : 0, mag = fabs(want);
                    for (int64_t s = 0; s < k; s++) {
                        const double v = dxg[(int64_t)r.where[t * k + s] * cols + c];
                        want += v, mag += fabs(v);
                    }
                    expect_near(dx[t * cols + c], want, mag, 1e-6, "scatter_add", t * cols + c);
                }
            free(dx);
        }
        /* the gather's backward: finite differences of sum c * gather(x),
         * on the first 3 columns (the ops are per column) */
        const int64_t fc = 3;
        float *c = uniform_floats((size_t)(n * fc), 4, -1, 1), *dx = nan_floats(rows * fc);
        rp_error err = {0};
        ck_assert_int_eq(cpu->moe_scatter_add(NULL, c, r.where, rows, k, fc, dx, 0, &err), RP_OK);
        double *cd = doubles_of(c, (size_t)(n * fc)), *xd = alloc(sizeof(double) * rows * fc);
        for (int64_t q = 0; q < rows * fc; q++)
            xd[q] = 0.25 * (double)q;
        const gather_ctx g = {&r, fc, xd, cd};
        for (int64_t q = 0; q < rows * fc; q++)
            expect_near(dx[q], central_diff(gather_loss, &g, &xd[q], 0.5), k, 1e-6,
                        "scatter_add against finite differences", q);
        free(c), free(dx), free(cd), free(xd), free(dxg), free(dx0);
        routing_free(&r);
    }
}
END_TEST

START_TEST(combine_weights_and_sums_slots)
{
    const int64_t cols = 261;
    for (size_t i = 0; i < NSHAPES; i++) {
        routing r = routed(&shapes[i], 600 + i, 1);
        const int64_t rows = r.s.rows, k = r.s.k, n = rows * k;
        float *yg = uniform_floats((size_t)(n * cols), 5, -2, 2);
        float *res = uniform_floats((size_t)(rows * cols), 6, -2, 2);
        for (int with_res = 0; with_res <= 1; with_res++) {
            float *y = nan_floats((size_t)(rows * cols));
            rp_error err = {0};
            ck_assert_int_eq(cpu->moe_combine(NULL, yg, r.weights, r.where, with_res ? res : NULL,
                                              rows, k, cols, y, &err), RP_OK);
            for (int64_t t = 0; t < rows; t++)
                for (int64_t c = 0; c < cols; c++) {
                    double want = with_res ? res[t * cols + c] : 0, mag = fabs(want);
                    for (int64_t s = 0; s < k; s++) {
                        const double v = (double)r.weights[t * k + s] *
                                         yg[(int64_t)r.where[t * k + s] * cols + c];
                        want += v, mag += fabs(v);
                    }
                    expect_near(y[t * cols + c], want, mag, 1e-6, "combine", t * cols + c);
                }
            free(y);
        }
        free(yg), free(res);
        routing_free(&r);
    }
}
END_TEST

/* ---- the down projection's backward -------------------------------------- */

/* L = sum_t sum_h c[t, h] y_t[h], y_t = sum_s w_p (m_where[p] Wd^T). */
typedef struct {
    const routing *r;
    int64_t F, H;
    double *m, *w;
    const double *Wd, *c;
} down_ctx;

static double down_loss(const void *p)
{
    const down_ctx *d = p;
    const int64_t k = d->r->s.k;
    double L = 0;
    for (int64_t t = 0; t < d->r->s.rows; t++)
        for (int64_t s = 0; s < k; s++) {
            const double *mj = d->m + (int64_t)d->r->where[t * k + s] * d->F;
            for (int64_t h = 0; h < d->H; h++) {
                double y = 0;
                for (int64_t f = 0; f < d->F; f++)
                    y += mj[f] * d->Wd[h * d->F + f];
                L += d->c[t * d->H + h] * d->w[t * k + s] * y;
            }
        }
    return L;
}

START_TEST(down_backward_matches_brute_force_and_differences)
{
    const int64_t F = 7, H = 6;
    for (size_t i = 0; i < NSHAPES; i++) {
        routing r = routed(&shapes[i], 700 + i, 1);
        const int64_t rows = r.s.rows, k = r.s.k, n = rows * k;
        float *m = uniform_floats((size_t)(n * F), 7, -1, 1);
        float *Wd = uniform_floats((size_t)(H * F), 8, -1, 1);
        float *c = uniform_floats((size_t)(rows * H), 9, -1, 1);
        /* z = (c[t] gathered) Wd, by grouped position */
        float *z = alloc(sizeof(float) * (size_t)(n * F));
        for (int64_t j = 0; j < n; j++)
            for (int64_t f = 0; f < F; f++) {
                double acc = 0;
                for (int64_t h = 0; h < H; h++)
                    acc += (double)c[(r.order[j] / k) * H + h] * Wd[h * F + f];
                z[j * F + f] = (float)acc;
            }
        float *dm = nan_floats((size_t)(n * F)), *dmc = nan_floats((size_t)(n * F));
        float *dw = nan_floats((size_t)n);
        rp_error err = {0};
        ck_assert_int_eq(cpu->moe_down_backward(NULL, z, m, r.weights, r.order, rows, k, F, dm,
                                                dmc, dw, &err), RP_OK);
        expect_same_bits(dmc, dm, (size_t)(n * F), "dm_compute");
        for (int64_t j = 0; j < n; j++) {
            const int64_t p = r.order[j];
            double dot = 0;
            for (int64_t f = 0; f < F; f++) {
                dot += (double)z[j * F + f] * m[j * F + f];
                const float want = (float)((double)r.weights[p] * z[j * F + f]);
                ck_assert(bits(dm[j * F + f]) == bits(want));
            }
            ck_assert_msg(bits(dw[p]) == bits((float)dot), "dweights[%lld]", (long long)p);
        }
        /* dm in place over z */
        float *zz = alloc(sizeof(float) * (size_t)(n * F)), *dw2 = nan_floats((size_t)n);
        memcpy(zz, z, sizeof(float) * (size_t)(n * F));
        ck_assert_int_eq(cpu->moe_down_backward(NULL, zz, m, r.weights, r.order, rows, k, F, zz,
                                                NULL, dw2, &err), RP_OK);
        expect_same_bits(zz, dm, (size_t)(n * F), "dm in place over z");
        expect_same_bits(dw2, dw, (size_t)n, "dweights with dm over z");
        /* finite differences of the forward */
        double *md = doubles_of(m, (size_t)(n * F)), *wd = doubles_of(r.weights, (size_t)n);
        double *Wdd = doubles_of(Wd, (size_t)(H * F)), *cd = doubles_of(c, (size_t)(rows * H));
        const down_ctx d = {&r, F, H, md, wd, Wdd, cd};
        for (int64_t p = 0; p < n; p++) {
            double mag = 0;
            for (int64_t f = 0; f < F; f++)
                mag += fabs((double)z[r.where[p] * F + f] * m[r.where[p] * F + f]);
            expect_near(dw[p], central_diff(down_loss, &d, &wd[p], 1e-2), mag + 1e-3, 1e-6,
                        "dweights against finite differences", p);
        }
        for (int64_t q = 0; q < n * F; q++)
            expect_near(dm[q], central_diff(down_loss, &d, &md[q], 1e-2), 1 + fabs(dm[q]), 1e-6,
                        "dm against finite differences", q);
        free(m), free(Wd), free(c), free(z), free(dm), free(dmc), free(dw), free(zz), free(dw2);
        free(md), free(wd), free(Wdd), free(cd);
        routing_free(&r);
    }
}
END_TEST

/* ---- the routing's backward ---------------------------------------------- */

/* One token's L = sum_s c_s w_s + sum_e aux_e p_e, the experts fixed. */
typedef struct {
    int64_t E, k;
    int norm;
    double *l;
    const int32_t *ex;
    const double *c, *aux;
} route_ctx;

static double route_loss(const void *p)
{
    const route_ctx *r = p;
    double prob[64], z = 0, L = 0;
    softmax_double(r->l, r->E, prob);
    for (int64_t s = 0; s < r->k; s++)
        z += prob[r->ex[s]];
    for (int64_t s = 0; s < r->k; s++)
        L += r->c[s] * prob[r->ex[s]] / (r->norm ? z : 1.0);
    for (int64_t e = 0; r->aux && e < r->E; e++)
        L += r->aux[e] * prob[e];
    return L;
}

START_TEST(route_backward_matches_differences)
{
    for (size_t i = 0; i < NSHAPES; i++)
        for (int norm = 0; norm <= 1; norm++)
            for (int with_aux = 0; with_aux <= 1; with_aux++) {
                const shape *s = &shapes[i];
                const int64_t rows = s->rows, E = s->E, k = s->k;
                float *logits = uniform_floats((size_t)(rows * E), 800 + i, -2, 2);
                float *probs, *experts_w;
                int32_t *experts;
                route(s, logits, norm, &probs, &experts, &experts_w);
                float *dw = uniform_floats((size_t)(rows * k), 10, -1, 1);
                float *aux = uniform_floats((size_t)E, 11, -1, 1);
                float *dl = nan_floats((size_t)(rows * E)), *dlc = nan_floats((size_t)(rows * E));
                rp_error err = {0};
                ck_assert_int_eq(cpu->moe_route_backward(NULL, probs, experts, dw,
                                                         with_aux ? aux : NULL, rows, E, k, norm,
                                                         dl, dlc, &err), RP_OK);
                expect_same_bits(dlc, dl, (size_t)(rows * E), "dlogits_compute");
                double *cd = doubles_of(dw, (size_t)(rows * k)), *auxd = doubles_of(aux, E);
                for (int64_t t = 0; t < rows; t++) {
                    double *ld = doubles_of(logits + t * E, (size_t)E);
                    const route_ctx rc = {E, k, norm, ld, experts + t * k, cd + t * k,
                                          with_aux ? auxd : NULL};
                    for (int64_t e = 0; e < E; e++)
                        expect_near(dl[t * E + e], central_diff(route_loss, &rc, &ld[e], 1e-5),
                                    1, 2e-6, "dlogits against finite differences", t * E + e);
                    free(ld);
                }
                free(logits), free(probs), free(experts_w), free(experts), free(dw), free(aux);
                free(dl), free(dlc), free(cd), free(auxd);
            }
}
END_TEST

/* ---- grouped GEMMs ------------------------------------------------------- */

/* A split of rows over experts with empty ones: the first, the last and
 * some in between; one expert with a single row. */
typedef struct {
    int64_t E, in, out;
    int32_t counts[8];
} gemm_shape;

static const gemm_shape gemm_shapes[] = {
    {8, 13, 11, {0, 11, 0, 5, 1, 9, 0, 3}},
    {5, 9, 17, {4, 0, 0, 17, 0}},
    {3, 7, 5, {2, 3, 4}},
};

typedef struct {
    int64_t E, in, out, rows;
    int32_t offsets[9];
    float *x, *dy, *Wf[8]; /* Wf: the fp32 weights, or the bf16 ones widened */
    uint16_t *Wh[8];
    const void *W32[8], *W16[8]; /* what the ops get; NULL for empty experts */
} gemm_case;

static gemm_case gemm_case_of(const gemm_shape *g, uint64_t stream)
{
    gemm_case c = {.E = g->E, .in = g->in, .out = g->out};
    for (int64_t e = 0; e < g->E; e++)
        c.offsets[e + 1] = c.offsets[e] + g->counts[e];
    c.rows = c.offsets[g->E];
    c.x = uniform_floats((size_t)(c.rows * c.in), stream, -1, 1);
    c.dy = uniform_floats((size_t)(c.rows * c.out), stream + 1, -1, 1);
    for (int64_t e = 0; e < c.E; e++) {
        const size_t nw = (size_t)(c.in * c.out);
        c.Wf[e] = uniform_floats(nw, stream + 2 + (uint64_t)e, -1, 1);
        c.Wh[e] = alloc(nw * sizeof(uint16_t));
        for (size_t q = 0; q < nw; q++) {
            c.Wh[e][q] = rp_f32_to_bf16(c.Wf[e][q]);
            c.Wf[e][q] = rp_bf16_to_f32(c.Wh[e][q]); /* bf16-exact: one W for both dtypes */
        }
        c.W32[e] = g->counts[e] ? c.Wf[e] : NULL;
        c.W16[e] = g->counts[e] ? c.Wh[e] : NULL;
    }
    return c;
}

static void gemm_case_free(gemm_case *c)
{
    free(c->x), free(c->dy);
    for (int64_t e = 0; e < c->E; e++)
        free(c->Wf[e]), free(c->Wh[e]);
}

static int64_t expert_of_row(const gemm_case *c, int64_t r)
{
    int64_t e = 0;
    while (c->offsets[e + 1] <= r)
        e++;
    return e;
}

/* L = sum c * grouped_forward(x, W) in double. */
typedef struct {
    const gemm_case *g;
    double *x, **W;
    const double *c;
} glin_ctx;

static double glin_loss(const void *p)
{
    const glin_ctx *q = p;
    const int64_t in = q->g->in, out = q->g->out;
    double L = 0;
    for (int64_t r = 0; r < q->g->rows; r++) {
        const double *W = q->W[expert_of_row(q->g, r)];
        for (int64_t o = 0; o < out; o++) {
            double y = 0;
            for (int64_t i = 0; i < in; i++)
                y += q->x[r * in + i] * W[o * in + i];
            L += q->c[r * out + o] * y;
        }
    }
    return L;
}

START_TEST(grouped_forward_matches_brute_force)
{
    for (size_t gi = 0; gi < sizeof gemm_shapes / sizeof gemm_shapes[0]; gi++) {
        gemm_case c = gemm_case_of(&gemm_shapes[gi], 1000 + 20 * gi);
        const int64_t in = c.in, out = c.out, ny = c.rows * out;
        for (int bf = 0; bf <= 1; bf++)
            for (int into = 0; into < 3; into++) { /* y, y_compute, both */
                float *y = into != 1 ? nan_floats((size_t)ny) : NULL;
                float *yc = into != 0 ? nan_floats((size_t)ny) : NULL;
                rp_error err = {0};
                ck_assert_int_eq(cpu->grouped_linear_forward(NULL, c.x, bf ? c.W16 : c.W32,
                                                             bf ? RP_BF16 : RP_F32, c.offsets,
                                                             c.E, c.rows, in, out, y, yc, &err),
                                 RP_OK);
                const float *got = y ? y : yc;
                if (y && yc)
                    expect_same_bits(yc, y, (size_t)ny, "y_compute");
                for (int64_t r = 0; r < c.rows; r++) {
                    const float *W = c.Wf[expert_of_row(&c, r)];
                    for (int64_t o = 0; o < out; o++) {
                        double want = 0, mag = 0;
                        for (int64_t i = 0; i < in; i++) {
                            const double v = (double)c.x[r * in + i] * W[o * in + i];
                            want += v, mag += fabs(v);
                        }
                        expect_near(got[r * out + o], want, mag, 1e-5, "grouped forward",
                                    r * out + o);
                    }
                }
                free(y), free(yc);
            }
        gemm_case_free(&c);
    }
}
END_TEST

START_TEST(grouped_backward_input_matches_brute_force_and_differences)
{
    for (size_t gi = 0; gi < sizeof gemm_shapes / sizeof gemm_shapes[0]; gi++) {
        gemm_case c = gemm_case_of(&gemm_shapes[gi], 2000 + 20 * gi);
        const int64_t in = c.in, out = c.out, nx = c.rows * in;
        float *dx0 = uniform_floats((size_t)nx, 3000 + gi, -1, 1);
        double *xd = doubles_of(c.x, (size_t)nx), *cd = doubles_of(c.dy, (size_t)(c.rows * out));
        double *Wd[8];
        for (int64_t e = 0; e < c.E; e++)
            Wd[e] = doubles_of(c.Wf[e], (size_t)(in * out));
        const glin_ctx q = {&c, xd, Wd, cd};
        for (int bf = 0; bf <= 1; bf++)
            for (int mode = 0; mode < 3; mode++) { /* dx =, dx +=, dx_compute */
                float *dx = mode == 2 ? NULL : nan_floats((size_t)nx);
                float *dxc = mode == 2 ? nan_floats((size_t)nx) : NULL;
                if (mode == 1)
                    memcpy(dx, dx0, sizeof(float) * (size_t)nx);
                rp_error err = {0};
                ck_assert_int_eq(cpu->grouped_linear_backward_input(
                                     NULL, c.dy, bf ? c.W16 : c.W32, bf ? RP_BF16 : RP_F32,
                                     c.offsets, c.E, c.rows, in, out, dx, dxc, mode == 1, &err),
                                 RP_OK);
                const float *got = dx ? dx : dxc;
                for (int64_t r = 0; r < c.rows; r++) {
                    const float *W = c.Wf[expert_of_row(&c, r)];
                    for (int64_t i = 0; i < in; i++) {
                        double want = mode == 1 ? dx0[r * in + i] : 0, mag = fabs(want);
                        for (int64_t o = 0; o < out; o++) {
                            const double v = (double)c.dy[r * out + o] * W[o * in + i];
                            want += v, mag += fabs(v);
                        }
                        expect_near(got[r * in + i], want, mag, 1e-5, "grouped dx", r * in + i);
                        if (mode == 0) /* dL/dx of sum dy * forward(x) */
                            expect_near(got[r * in + i],
                                        central_diff(glin_loss, &q, &xd[r * in + i], 0.5), mag,
                                        1e-5, "grouped dx against finite differences",
                                        r * in + i);
                    }
                }
                free(dx), free(dxc);
            }
        for (int64_t e = 0; e < c.E; e++)
            free(Wd[e]);
        free(dx0), free(xd), free(cd);
        gemm_case_free(&c);
    }
}
END_TEST

START_TEST(grouped_backward_weight_matches_brute_force_and_differences)
{
    for (size_t gi = 0; gi < sizeof gemm_shapes / sizeof gemm_shapes[0]; gi++) {
        gemm_case c = gemm_case_of(&gemm_shapes[gi], 4000 + 20 * gi);
        const int64_t in = c.in, out = c.out, nw = in * out;
        float *dW[8], *dW0[8];
        int first_empty = 1;
        for (int64_t e = 0; e < c.E; e++) {
            dW0[e] = uniform_floats((size_t)nw, 5000 + (uint64_t)e, -1, 1);
            dW[e] = alloc(sizeof(float) * (size_t)nw);
            memcpy(dW[e], dW0[e], sizeof(float) * (size_t)nw);
            if (gemm_shapes[gi].counts[e] == 0) {
                for (int64_t q = 0; q < nw; q++)
                    dW[e][q] = NAN;
                if (first_empty) /* "not touched": one empty expert's dW is NULL */
                    free(dW[e]), dW[e] = NULL;
                first_empty = 0;
            }
        }
        rp_error err = {0};
        for (int call = 0; call < 2; call++) /* dW += twice */
            ck_assert_int_eq(cpu->grouped_linear_backward_weight(NULL, c.dy, c.x, c.offsets, c.E,
                                                                 c.rows, in, out, dW, &err),
                             RP_OK);
        double *xd = doubles_of(c.x, (size_t)(c.rows * in));
        double *cd = doubles_of(c.dy, (size_t)(c.rows * out)), *Wd[8];
        for (int64_t e = 0; e < c.E; e++)
            Wd[e] = doubles_of(c.Wf[e], (size_t)nw);
        const glin_ctx q = {&c, xd, Wd, cd};
        for (int64_t e = 0; e < c.E; e++) {
            if (gemm_shapes[gi].counts[e] == 0) {
                for (int64_t k = 0; dW[e] && k < nw; k++)
                    ck_assert_msg(isnan(dW[e][k]), "empty expert %lld's dW was written",
                                  (long long)e);
                continue;
            }
            for (int64_t o = 0; o < out; o++)
                for (int64_t i = 0; i < in; i++) {
                    double g = 0, mag = 0;
                    for (int64_t r = c.offsets[e]; r < c.offsets[e + 1]; r++) {
                        const double v = (double)c.dy[r * out + o] * c.x[r * in + i];
                        g += v, mag += fabs(v);
                    }
                    const int64_t k = o * in + i;
                    expect_near(dW[e][k], dW0[e][k] + 2 * g, fabs(dW0[e][k]) + 2 * mag, 1e-5,
                                "grouped dW", k);
                    const double fd = central_diff(glin_loss, &q, &Wd[e][k], 0.5);
                    expect_near(dW[e][k], dW0[e][k] + 2 * fd, fabs(dW0[e][k]) + 2 * mag, 1e-5,
                                "grouped dW against finite differences", k);
                }
        }
        for (int64_t e = 0; e < c.E; e++)
            free(dW[e]), free(dW0[e]), free(Wd[e]);
        free(xd), free(cd);
        gemm_case_free(&c);
    }
}
END_TEST

/* ---- composition ---------------------------------------------------------- */

START_TEST(ops_compose_into_a_moe_layer)
{
    const int64_t H = 12, O = 10;
    for (size_t i = 0; i < NSHAPES; i++) {
        routing r = routed(&shapes[i], 900 + i, 1);
        const int64_t rows = r.s.rows, k = r.s.k, E = r.s.E, n = rows * k;
        float *x = uniform_floats((size_t)(rows * H), 12, -1, 1);
        float *res = uniform_floats((size_t)(rows * O), 13, -1, 1);
        float *W = uniform_floats((size_t)(E * O * H), 14, -1, 1);
        const void *Wp[8];
        for (int64_t e = 0; e < E; e++)
            Wp[e] = W + e * O * H;
        float *xg = nan_floats((size_t)(n * H)), *yg = nan_floats((size_t)(n * O));
        float *y = nan_floats((size_t)(rows * O));
        rp_error err = {0};
        ck_assert_int_eq(cpu->moe_gather(NULL, x, r.order, NULL, rows, k, H, xg, &err), RP_OK);
        ck_assert_int_eq(cpu->grouped_linear_forward(NULL, xg, Wp, RP_F32, r.offsets, E, n, H, O,
                                                     yg, NULL, &err), RP_OK);
        ck_assert_int_eq(cpu->moe_combine(NULL, yg, r.weights, r.where, res, rows, k, O, y, &err),
                         RP_OK);
        for (int64_t t = 0; t < rows; t++)
            for (int64_t o = 0; o < O; o++) {
                double want = res[t * O + o], mag = fabs(want);
                for (int64_t s = 0; s < k; s++) {
                    const float *We = W + (int64_t)r.experts[t * k + s] * O * H;
                    for (int64_t h = 0; h < H; h++) {
                        const double v =
                            (double)r.weights[t * k + s] * x[t * H + h] * We[o * H + h];
                        want += v, mag += fabs(v);
                    }
                }
                expect_near(y[t * O + o], want, mag, 1e-5, "MoE layer", t * O + o);
            }
        free(x), free(res), free(W), free(xg), free(yg), free(y);
        routing_free(&r);
    }
}
END_TEST

/* ---- threads ------------------------------------------------------------- */

enum { NOUT = 13, TR = 301, TK = 2, TE = 6, TIN = 160, TO = 136 };

/* The sizes of run_threaded's outputs, in its order. */
static void threaded_sizes(size_t sizes[NOUT])
{
    const size_t n = TR * TK;
    const size_t v[NOUT] = {n * TO, n * TO, n * TIN, n * TIN, TE * TO * TIN, TR * TO, TR * TO,
                            TR * TE, TR * TK, TR * TE, 2 * TE, n * TO, n};
    memcpy(sizes, v, sizeof v);
}

/* Every output of the ops whose loops or GEMMs are split over threads, on
 * a shape big enough for OpenBLAS to thread each expert's GEMM. */
static void run_threaded(float *out[NOUT])
{
    const shape s = {TR, TE, TK};
    const int64_t rows = TR, k = TK, E = TE, n = rows * k, in = TIN, o = TO;
    routing r = routed(&s, 77, 1);
    float *x = uniform_floats((size_t)(n * in), 15, -1, 1);
    float *dy = uniform_floats((size_t)(n * o), 16, -1, 1);
    float *Wf = uniform_floats((size_t)(E * o * in), 17, -1, 1);
    uint16_t *Wh = alloc(sizeof(uint16_t) * (size_t)(E * o * in));
    rp_f32_to_bf16_array(Wf, Wh, (size_t)(E * o * in));
    const void *W32[TE], *W16[TE];
    float *dW[TE];
    size_t sizes[NOUT];
    threaded_sizes(sizes);
    for (int q = 0; q < NOUT; q++)
        out[q] = nan_floats(sizes[q]);
    memset(out[4], 0, sizeof(float) * sizes[4]);
    for (int64_t e = 0; e < E; e++)
        W32[e] = Wf + e * o * in, W16[e] = Wh + e * o * in, dW[e] = out[4] + e * o * in;
    int32_t *ex = poison_ints((size_t)(rows * k));
    rp_error err = {0};
    ck_assert_int_eq(cpu->grouped_linear_forward(NULL, x, W32, RP_F32, r.offsets, E, n, in, o,
                                                 out[0], NULL, &err), RP_OK);
    ck_assert_int_eq(cpu->grouped_linear_forward(NULL, x, W16, RP_BF16, r.offsets, E, n, in, o,
                                                 out[1], NULL, &err), RP_OK);
    ck_assert_int_eq(cpu->grouped_linear_backward_input(NULL, dy, W32, RP_F32, r.offsets, E, n,
                                                        in, o, out[2], NULL, 0, &err), RP_OK);
    ck_assert_int_eq(cpu->grouped_linear_backward_input(NULL, dy, W16, RP_BF16, r.offsets, E, n,
                                                        in, o, out[3], NULL, 0, &err), RP_OK);
    ck_assert_int_eq(cpu->grouped_linear_backward_weight(NULL, dy, x, r.offsets, E, n, in, o, dW,
                                                         &err), RP_OK);
    ck_assert_int_eq(cpu->moe_combine(NULL, out[0], r.weights, r.where, dy, rows, k, o, out[5],
                                      &err), RP_OK);
    ck_assert_int_eq(cpu->moe_scatter_add(NULL, dy, r.where, rows, k, o, out[6], 0, &err), RP_OK);
    ck_assert_int_eq(cpu->moe_route(NULL, r.logits, rows, E, k, 1, out[7], ex, out[8], &err),
                     RP_OK);
    ck_assert_int_eq(cpu->moe_route_backward(NULL, r.probs, r.experts, dy, dy, rows, E, k, 1,
                                             out[9], NULL, &err), RP_OK);
    ck_assert_int_eq(cpu->moe_stats(NULL, r.probs, r.offsets, rows, E, out[10], &err), RP_OK);
    ck_assert_int_eq(cpu->moe_down_backward(NULL, dy, out[0], r.weights, r.order, rows, k, o,
                                            out[11], NULL, out[12], &err), RP_OK);
    free(ex), free(x), free(dy), free(Wf), free(Wh);
    routing_free(&r);
}

START_TEST(results_do_not_depend_on_threads)
{
    const int saved = omp_get_max_threads();
    float *one[NOUT], *more[NOUT];
    size_t sizes[NOUT];
    threaded_sizes(sizes);
    omp_set_num_threads(1);
    run_threaded(one);
    for (int threads = 2; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        run_threaded(more);
        for (int q = 0; q < NOUT; q++) {
            char what[64];
            snprintf(what, sizeof what, "output %d with %d threads", q, threads);
            expect_same_bits(more[q], one[q], sizes[q], what);
            free(more[q]);
        }
    }
    for (int q = 0; q < NOUT; q++)
        free(one[q]);
    omp_set_num_threads(saved);
}
END_TEST

/* ---- refusals ------------------------------------------------------------ */

START_TEST(bad_arguments_are_refused)
{
    gemm_case c = gemm_case_of(&gemm_shapes[0], 6000);
    const int64_t ny = c.rows * c.out, nx = c.rows * c.in;
    float *y = nan_floats((size_t)ny), *dx = nan_floats((size_t)nx);
    rp_error err = {0};
    ck_assert_int_eq(cpu->grouped_linear_forward(NULL, c.x, c.W16, RP_F16, c.offsets, c.E, c.rows,
                                                 c.in, c.out, y, NULL, &err), RP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "grouped_linear_forward") && strstr(err.msg, "F16"), "%s",
                  err.msg);
    ck_assert_int_eq(cpu->grouped_linear_backward_input(NULL, c.dy, c.W16, RP_F16, c.offsets, c.E,
                                                        c.rows, c.in, c.out, dx, NULL, 0, &err),
                     RP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "grouped_linear_backward_input") && strstr(err.msg, "F16"),
                  "%s", err.msg);
    /* offsets that do not end at rows, or decrease */
    int32_t bad[9];
    memcpy(bad, c.offsets, sizeof bad);
    ck_assert_int_eq(cpu->grouped_linear_forward(NULL, c.x, c.W32, RP_F32, bad, c.E, c.rows + 1,
                                                 c.in, c.out, y, NULL, &err), RP_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "grouped_linear_forward"));
    bad[2] = bad[3] + 1;
    ck_assert_int_eq(cpu->grouped_linear_backward_input(NULL, c.dy, c.W32, RP_F32, bad, c.E,
                                                        c.rows, c.in, c.out, dx, NULL, 0, &err),
                     RP_ERR_INVALID_ARG);
    float *dW[8] = {0};
    ck_assert_int_eq(cpu->grouped_linear_backward_weight(NULL, c.dy, c.x, bad, c.E, c.rows, c.in,
                                                         c.out, dW, &err), RP_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "grouped_linear_backward_weight"));
    for (int64_t q = 0; q < ny; q++)
        ck_assert(isnan(y[q]));
    for (int64_t q = 0; q < nx; q++)
        ck_assert(isnan(dx[q]));
    /* top-k outside [1, E] */
    float l[4] = {1, 2, 3, 4}, p[4] = {NAN, NAN, NAN, NAN}, w[5];
    int32_t ex[5];
    ck_assert_int_eq(cpu->moe_route(NULL, l, 1, 4, 5, 0, p, ex, w, &err), RP_ERR_INVALID_ARG);
    ck_assert_int_eq(cpu->moe_route(NULL, l, 1, 4, 0, 0, p, ex, w, &err), RP_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.msg, "moe_route"));
    for (int e = 0; e < 4; e++)
        ck_assert(isnan(p[e]));
    free(y), free(dx);
    gemm_case_free(&c);
}
END_TEST

static Suite *kernels_moe_suite(void)
{
    Suite *s = suite_create("kernels_moe");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, route_matches_brute_force);
    tcase_add_test(tc, route_ties_go_to_the_lower_index);
    tcase_add_test(tc, group_is_a_stable_sort_by_expert);
    tcase_add_test(tc, group_refuses_experts_out_of_range);
    tcase_add_test(tc, stats_count_and_sum_exactly);
    tcase_add_test(tc, gather_copies_or_weights_rows);
    tcase_add_test(tc, scatter_add_sums_slots);
    tcase_add_test(tc, combine_weights_and_sums_slots);
    tcase_add_test(tc, down_backward_matches_brute_force_and_differences);
    tcase_add_test(tc, route_backward_matches_differences);
    tcase_add_test(tc, grouped_forward_matches_brute_force);
    tcase_add_test(tc, grouped_backward_input_matches_brute_force_and_differences);
    tcase_add_test(tc, grouped_backward_weight_matches_brute_force_and_differences);
    tcase_add_test(tc, ops_compose_into_a_moe_layer);
    tcase_add_test(tc, results_do_not_depend_on_threads);
    tcase_add_test(tc, bad_arguments_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(kernels_moe_suite, "serial")
