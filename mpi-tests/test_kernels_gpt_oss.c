/* Proves (gpt-oss's kernels on the CPU table, issue 35):
 *   - attention with a learned sink logit per head and a sliding window
 *     (query i sees key j iff i - W < j <= i), alone and together, with
 *     and without document segments, equals a naive attention written here
 *     in double (forward o and lse, backward dq, dk, dv and the sinks'
 *     gradient) for block sizes 1, 3, 4 and S, windows 1, 3, 5 and S,
 *     sinks of both signs and one far above every score;
 *   - the naive backward is the gradient: central finite differences of
 *     the naive forward's sum(o * dout) in double for q, k, v and the sinks;
 *   - the results do not depend on the thread count (bits); a window of at
 *     least S with no sinks gives the bits of no window, and sinks NULL
 *     leaves the sinks' gradient untouched;
 *   - the clamped SwiGLU (values below, at and past both clamps) equals the
 *     formula in double forward and backward, its backward is the finite
 *     difference of the double formula off the clamps and zero past them
 *     (passing at the bound, as torch's clamp), in place too;
 *   - the experts' biases: grouped_bias_forward adds expert e's bias to
 *     exactly its rows (an expert with no rows never read, its pointer
 *     NULL), y_compute the same values; grouped_bias_backward equals the
 *     column sums in double within fp32 rounding, bit for bit the dense
 *     bias gradient's order (rp_colsum_accumulate on the expert's rows),
 *     accumulates, leaves an empty expert's gradient untouched, and bad
 *     offsets are refused naming the op;
 *   - gpt-oss's router (top k of the biased logits, a softmax over those k
 *     only) is the existing moe_route with norm_topk: the same experts in
 *     the same order and weights within fp32 rounding of the double
 *     formula, so the model needs no new routing op;
 *   - the ops table's entries call these kernels. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/ops.h"
#include "rp_check.h"

enum { NSEQ = 2, S = 11, NH = 4, NKV = 2, HD = 8, TT = NSEQ * S };

static float *rnd(size_t n, uint64_t seed, float sd)
{
    float *v = malloc(n * sizeof(float));
    rp_rng_fill_normal(v, n, seed, 35, 0, 0.0f, sd);
    return v;
}

/* Whether query i of sequence b sees key j. */
static int seen(int b, int i, int j, const int32_t *seg, int window)
{
    return j <= i && (!seg || j >= seg[b * S + i]) && (window <= 0 || j > i - window);
}

/* The naive forward in double of inputs given in double; o, lse out. */
static void naive_forward(const double *q, const double *k, const double *v, const double *sinks,
                          double scale, const int32_t *seg, int window, double *o, double *lse)
{
    for (int b = 0; b < NSEQ; b++)
        for (int h = 0; h < NH; h++) {
            const int g = h / (NH / NKV);
            for (int i = 0; i < S; i++) {
                double z[S], mx = sinks ? sinks[h] : -INFINITY, sum = 0;
                for (int j = 0; j < S; j++) {
                    double d = 0;
                    for (int e = 0; e < HD; e++)
                        d += q[((b * S + i) * NH + h) * HD + e] * k[((b * S + j) * NKV + g) * HD + e];
                    z[j] = seen(b, i, j, seg, window) ? d * scale : -INFINITY;
                    mx = fmax(mx, z[j]);
                }
                for (int j = 0; j < S; j++)
                    sum += z[j] = exp(z[j] - mx);
                if (sinks)
                    sum += exp(sinks[h] - mx);
                lse[(b * S + i) * NH + h] = mx + log(sum);
                for (int e = 0; e < HD; e++) {
                    double acc = 0;
                    for (int j = 0; j < S; j++)
                        acc += z[j] / sum * v[((b * S + j) * NKV + g) * HD + e];
                    o[((b * S + i) * NH + h) * HD + e] = acc;
                }
            }
        }
}

/* The naive backward in double through the softmax with the sink. */
static void naive_backward(const double *q, const double *k, const double *v, const double *sinks,
                           const double *dout, double scale, const int32_t *seg, int window,
                           const double *o, const double *lse, double *dq, double *dk, double *dv,
                           double *dsinks)
{
    memset(dq, 0, sizeof(double) * TT * NH * HD);
    memset(dk, 0, sizeof(double) * TT * NKV * HD);
    memset(dv, 0, sizeof(double) * TT * NKV * HD);
    memset(dsinks, 0, sizeof(double) * NH);
    for (int b = 0; b < NSEQ; b++)
        for (int h = 0; h < NH; h++) {
            const int g = h / (NH / NKV);
            for (int i = 0; i < S; i++) {
                const int row = (b * S + i) * NH + h;
                double D = 0;
                for (int e = 0; e < HD; e++)
                    D += dout[row * HD + e] * o[row * HD + e];
                if (sinks)
                    dsinks[h] -= exp(sinks[h] - lse[row]) * D;
                for (int j = 0; j < S; j++) {
                    if (!seen(b, i, j, seg, window))
                        continue;
                    const int kv = ((b * S + j) * NKV + g) * HD;
                    double s = 0, dp = 0;
                    for (int e = 0; e < HD; e++) {
                        s += q[row * HD + e] * k[kv + e];
                        dp += dout[row * HD + e] * v[kv + e];
                    }
                    const double p = exp(s * scale - lse[row]), ds = p * (dp - D) * scale;
                    for (int e = 0; e < HD; e++) {
                        dq[row * HD + e] += ds * k[kv + e];
                        dk[kv + e] += ds * q[row * HD + e];
                        dv[kv + e] += p * dout[row * HD + e];
                    }
                }
            }
        }
}

static double *widen(const float *x, size_t n)
{
    double *d = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static void expect_close(const float *a, const double *ref, size_t n, const char *what,
                         const char *where)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(a[i] - ref[i]) <= 2e-5 + 1e-5 * fabs(ref[i]), "%s: %s[%zu] = %.8g, "
                      "naive %.8g", where, what, i, a[i], ref[i]);
}

typedef struct problem {
    float *q, *k, *v, *dout, sinks[NH];
    double *qd, *kd, *vd, *doutd, sinksd[NH];
    double o[TT * NH * HD], lse[TT * NH], dq[TT * NH * HD], dk[TT * NKV * HD], dv[TT * NKV * HD];
    double dsinks[NH];
    float fo[TT * NH * HD], flse[TT * NH], fdq[TT * NH * HD], fdk[TT * NKV * HD];
    float fdv[TT * NKV * HD], fds[NH];
} problem;

static problem *problem_make(uint64_t seed, float sd)
{
    problem *p = calloc(1, sizeof *p);
    p->q = rnd(TT * NH * HD, seed, sd), p->k = rnd(TT * NKV * HD, seed + 1, sd);
    p->v = rnd(TT * NKV * HD, seed + 2, 1.0f), p->dout = rnd(TT * NH * HD, seed + 3, 1.0f);
    /* both signs, and one sink far above every score (the row's softmax
     * is nearly all sink) */
    const float sinks[NH] = {0.7f, -1.3f, 9.0f, 0.0f};
    memcpy(p->sinks, sinks, sizeof sinks);
    p->qd = widen(p->q, TT * NH * HD), p->kd = widen(p->k, TT * NKV * HD);
    p->vd = widen(p->v, TT * NKV * HD), p->doutd = widen(p->dout, TT * NH * HD);
    for (int h = 0; h < NH; h++)
        p->sinksd[h] = p->sinks[h];
    return p;
}

static void problem_free(problem *p)
{
    free(p->q), free(p->k), free(p->v), free(p->dout);
    free(p->qd), free(p->kd), free(p->vd), free(p->doutd);
    free(p);
}

/* The kernels for shape s against the naive attention. */
static void check(problem *p, const rp_attn_shape *s)
{
    char where[96];
    snprintf(where, sizeof where, "block %lld, window %lld, sinks %s, segments %s",
             (long long)s->block, (long long)s->window, s->sinks ? "yes" : "no",
             s->seg_start ? "yes" : "no");
    const double *sk = s->sinks ? p->sinksd : NULL;
    naive_forward(p->qd, p->kd, p->vd, sk, s->scale, s->seg_start, (int)s->window, p->o, p->lse);
    naive_backward(p->qd, p->kd, p->vd, sk, p->doutd, s->scale, s->seg_start, (int)s->window,
                   p->o, p->lse, p->dq, p->dk, p->dv, p->dsinks);
    rp_attn_forward(s, p->q, p->k, p->v, p->fo, p->flse);
    expect_close(p->fo, p->o, TT * NH * HD, "o", where);
    expect_close(p->flse, p->lse, TT * NH, "lse", where);
    rp_attn_backward(s, p->q, p->k, p->v, p->fo, p->flse, p->dout, p->fdq, p->fdk, p->fdv);
    expect_close(p->fdq, p->dq, TT * NH * HD, "dq", where);
    expect_close(p->fdk, p->dk, TT * NKV * HD, "dk", where);
    expect_close(p->fdv, p->dv, TT * NKV * HD, "dv", where);
    for (int h = 0; h < NH; h++)
        p->fds[h] = 0.5f; /* accumulates */
    rp_attn_sink_backward(s, p->fo, p->flse, p->dout, p->fds);
    for (int h = 0; h < NH; h++) {
        const double want = s->sinks ? 0.5 + p->dsinks[h] : 0.5;
        ck_assert_msg(fabs(p->fds[h] - want) <= 1e-4 + 1e-5 * fabs(want),
                      "%s: dsinks[%d] = %.8g, naive %.8g", where, h, p->fds[h], want);
    }
}

static const int32_t documents[TT] = {0, 0, 0, 3, 3, 5, 5, 5, 5, 5, 10, /* a one-token doc */
                                      0, 0, 2, 2, 2, 2, 2, 2, 2, 9, 9};

START_TEST(sinks_and_windows_equal_naive)
{
    problem *p = problem_make(11, 0.8f);
    /* one thread: the grid's many small calls stay fast on a loaded machine
     * (bits_and_neutral_settings shows threads do not change the result) */
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const int64_t blocks[] = {1, 3, 4, S}, windows[] = {0, 1, 3, 5, S};
    for (int seg = 0; seg < 2; seg++)
        for (int with_sinks = 0; with_sinks < 2; with_sinks++)
            for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
                for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
                    if (!with_sinks && windows[w] == 0)
                        continue; /* test_kernels_attention's */
                    rp_attn_shape s = {.nseq = NSEQ, .seqlen = S, .nheads = NH, .nkv = NKV,
                                       .head_dim = HD, .block = blocks[bi],
                                       .scale = 1.0f / sqrtf(HD),
                                       .seg_start = seg ? documents : NULL,
                                       .window = windows[w],
                                       .sinks = with_sinks ? p->sinks : NULL};
                    check(p, &s);
                }
    omp_set_num_threads(threads);
    problem_free(p);
}
END_TEST

/* sum(o * dout) of the naive forward, for finite differences. */
static double loss(problem *p, const double *sinks, int window)
{
    naive_forward(p->qd, p->kd, p->vd, sinks, 1.0 / sqrt(HD), documents, window, p->o, p->lse);
    double l = 0;
    for (int i = 0; i < TT * NH * HD; i++)
        l += p->o[i] * p->doutd[i];
    return l;
}

static void fd_check(problem *p, double *x, const double *grad, int n, int stride, int window,
                     const char *what)
{
    const double eps = 1e-6;
    for (int i = 0; i < n; i += stride) {
        const double keep = x[i];
        x[i] = keep + eps;
        const double up = loss(p, p->sinksd, window);
        x[i] = keep - eps;
        const double down = loss(p, p->sinksd, window);
        x[i] = keep;
        const double fd = (up - down) / (2 * eps);
        ck_assert_msg(fabs(fd - grad[i]) <= 1e-7 + 1e-6 * fabs(fd), "%s[%d]: naive %.12g, finite "
                      "difference %.12g", what, i, grad[i], fd);
    }
}

START_TEST(naive_gradient_is_finite_difference)
{
    problem *p = problem_make(23, 0.8f);
    const int window = 3;
    double gq[TT * NH * HD], gk[TT * NKV * HD], gv[TT * NKV * HD], gs[NH];
    loss(p, p->sinksd, window);
    naive_backward(p->qd, p->kd, p->vd, p->sinksd, p->doutd, 1.0 / sqrt(HD), documents, window,
                   p->o, p->lse, gq, gk, gv, gs);
    fd_check(p, p->qd, gq, TT * NH * HD, 7, window, "dq");
    fd_check(p, p->kd, gk, TT * NKV * HD, 5, window, "dk");
    fd_check(p, p->vd, gv, TT * NKV * HD, 5, window, "dv");
    fd_check(p, p->sinksd, gs, NH, 1, window, "dsinks");
    /* the sinks do receive a gradient */
    for (int h = 0; h < NH; h++)
        ck_assert(fabs(gs[h]) > 1e-6);
    problem_free(p);
}
END_TEST

START_TEST(bits_and_neutral_settings)
{
    problem *p = problem_make(31, 1.0f);
    rp_attn_shape s = {.nseq = NSEQ, .seqlen = S, .nheads = NH, .nkv = NKV, .head_dim = HD,
                       .block = 3, .scale = 0.35f, .seg_start = documents, .window = 4,
                       .sinks = p->sinks};
    float o1[TT * NH * HD], l1[TT * NH], dq1[TT * NH * HD], dk1[TT * NKV * HD];
    float dv1[TT * NKV * HD], ds1[NH] = {0};
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    rp_attn_forward(&s, p->q, p->k, p->v, o1, l1);
    rp_attn_backward(&s, p->q, p->k, p->v, o1, l1, p->dout, dq1, dk1, dv1);
    rp_attn_sink_backward(&s, o1, l1, p->dout, ds1);
    omp_set_num_threads(3);
    rp_attn_forward(&s, p->q, p->k, p->v, p->fo, p->flse);
    rp_attn_backward(&s, p->q, p->k, p->v, p->fo, p->flse, p->dout, p->fdq, p->fdk, p->fdv);
    memset(p->fds, 0, sizeof p->fds);
    rp_attn_sink_backward(&s, p->fo, p->flse, p->dout, p->fds);
    omp_set_num_threads(threads);
    ck_assert_mem_eq(o1, p->fo, sizeof o1);
    ck_assert_mem_eq(l1, p->flse, sizeof l1);
    ck_assert_mem_eq(dq1, p->fdq, sizeof dq1);
    ck_assert_mem_eq(dk1, p->fdk, sizeof dk1);
    ck_assert_mem_eq(dv1, p->fdv, sizeof dv1);
    ck_assert_mem_eq(ds1, p->fds, sizeof ds1);

    /* a window of S or more and no sinks: the bits of plain attention */
    rp_attn_shape plain = s, wide = s;
    plain.window = 0, plain.sinks = NULL;
    wide.window = S, wide.sinks = NULL;
    rp_attn_forward(&plain, p->q, p->k, p->v, o1, l1);
    rp_attn_backward(&plain, p->q, p->k, p->v, o1, l1, p->dout, dq1, dk1, dv1);
    rp_attn_forward(&wide, p->q, p->k, p->v, p->fo, p->flse);
    rp_attn_backward(&wide, p->q, p->k, p->v, p->fo, p->flse, p->dout, p->fdq, p->fdk, p->fdv);
    ck_assert_mem_eq(o1, p->fo, sizeof o1);
    ck_assert_mem_eq(l1, p->flse, sizeof l1);
    ck_assert_mem_eq(dq1, p->fdq, sizeof dq1);
    ck_assert_mem_eq(dk1, p->fdk, sizeof dk1);
    ck_assert_mem_eq(dv1, p->fdv, sizeof dv1);
    /* no sinks: their gradient is not touched */
    for (int h = 0; h < NH; h++)
        ds1[h] = 2.5f;
    rp_attn_sink_backward(&plain, o1, l1, p->dout, ds1);
    for (int h = 0; h < NH; h++)
        ck_assert(ds1[h] == 2.5f);
    problem_free(p);
}
END_TEST

/* ---- the clamped SwiGLU -------------------------------------------------- */

static double clamped_glu(double g, double u, double limit, double alpha)
{
    const double gate = fmin(g, limit), up = fmax(fmin(u, limit), -limit);
    return (up + 1) * gate / (1 + exp(-alpha * gate));
}

START_TEST(clamped_swiglu_equals_formula)
{
    const float limit = 7.0f, alpha = 1.702f;
    enum { N = 64 };
    float g[N], u[N], m[N], dm[N], dg[N], du[N];
    float *rg = rnd(N, 41, 6.0f), *ru = rnd(N, 42, 6.0f), *rd = rnd(N, 43, 1.0f);
    memcpy(g, rg, sizeof g), memcpy(u, ru, sizeof u), memcpy(dm, rd, sizeof dm);
    /* past, at and inside both clamps */
    g[0] = 9.5f, u[0] = 0.3f;
    g[1] = 7.0f, u[1] = 7.0f;
    g[2] = -12.0f, u[2] = -7.0f;
    g[3] = 2.0f, u[3] = 8.25f;
    g[4] = 0.5f, u[4] = -30.0f;
    int clamped_g = 0, clamped_u = 0;
    rp_swiglu_clamped_forward(g, u, limit, alpha, m, N);
    rp_swiglu_clamped_backward(g, u, limit, alpha, dm, dg, du, N);
    for (int i = 0; i < N; i++) {
        const double want = clamped_glu(g[i], u[i], limit, alpha);
        ck_assert_msg(fabs(m[i] - want) <= 1e-6 + 2e-6 * fabs(want), "m[%d] = %.8g, formula %.8g",
                      i, m[i], want);
        /* the derivative in double: analytic where not clamped ... */
        const double gate = fmin(g[i], limit), up = fmax(fmin(u[i], limit), -limit);
        const double sg = 1 / (1 + exp(-alpha * gate));
        const double wg = g[i] > limit ? 0 : dm[i] * (up + 1) * sg * (1 + alpha * gate * (1 - sg));
        const double wu = fabs(u[i]) > limit ? 0 : dm[i] * gate * sg;
        ck_assert_msg(fabs(dg[i] - wg) <= 1e-5 + 1e-5 * fabs(wg), "dg[%d] = %.8g, want %.8g", i,
                      dg[i], wg);
        ck_assert_msg(fabs(du[i] - wu) <= 1e-5 + 1e-5 * fabs(wu), "du[%d] = %.8g, want %.8g", i,
                      du[i], wu);
        /* ... and it is the finite difference of the formula off the bounds */
        const double eps = 1e-6;
        if (fabs(g[i] - limit) > 1e-3) {
            const double fd = dm[i] * (clamped_glu(g[i] + eps, u[i], limit, alpha) -
                                       clamped_glu(g[i] - eps, u[i], limit, alpha)) / (2 * eps);
            ck_assert_msg(fabs(fd - wg) <= 1e-6 + 1e-6 * fabs(fd), "dg[%d]: %.10g vs fd %.10g", i,
                          wg, fd);
        }
        if (fabs(fabs(u[i]) - limit) > 1e-3) {
            const double fd = dm[i] * (clamped_glu(g[i], u[i] + eps, limit, alpha) -
                                       clamped_glu(g[i], u[i] - eps, limit, alpha)) / (2 * eps);
            ck_assert_msg(fabs(fd - wu) <= 1e-6 + 1e-6 * fabs(fd), "du[%d]: %.10g vs fd %.10g", i,
                          wu, fd);
        }
        clamped_g += g[i] > limit;
        clamped_u += fabsf(u[i]) > limit;
    }
    /* past the clamps: zero; at them: passed */
    ck_assert(dg[0] == 0.0f && du[3] == 0.0f && du[4] == 0.0f);
    ck_assert(dg[1] != 0.0f && du[1] != 0.0f && du[2] != 0.0f);
    ck_assert(clamped_g >= 2 && clamped_u >= 3); /* random values past them too */
    /* in place: dg over g, du over u */
    float g2[N], u2[N];
    memcpy(g2, g, sizeof g), memcpy(u2, u, sizeof u);
    rp_swiglu_clamped_backward(g2, u2, limit, alpha, dm, g2, u2, N);
    ck_assert_mem_eq(g2, dg, sizeof dg);
    ck_assert_mem_eq(u2, du, sizeof du);
    free(rg), free(ru), free(rd);
}
END_TEST

/* The CPU table's entries are these kernels. */
START_TEST(table_entries)
{
    const rp_kernel_ops *t = &rp_kernel_ops_cpu;
    rp_error err = {0};
    enum { N = 16 };
    float g[N], u[N], dm[N], m1[N], m2[N], a1[N], a2[N], b1[N], b2[N];
    for (int i = 0; i < N; i++)
        g[i] = (float)i - 5.5f, u[i] = 9.0f - (float)i, dm[i] = 0.25f * (float)i;
    rp_swiglu_clamped_forward(g, u, 7.0f, 1.702f, m1, N);
    ck_assert_int_eq(t->swiglu_clamped_forward(NULL, g, u, 7.0f, 1.702f, m2, N, &err), RP_OK);
    ck_assert_mem_eq(m1, m2, sizeof m1);
    rp_swiglu_clamped_backward(g, u, 7.0f, 1.702f, dm, a1, b1, N);
    ck_assert_int_eq(t->swiglu_clamped_backward(NULL, g, u, 7.0f, 1.702f, dm, a2, b2, N, &err),
                     RP_OK);
    ck_assert_mem_eq(a1, a2, sizeof a1);
    ck_assert_mem_eq(b1, b2, sizeof b1);
    problem *p = problem_make(51, 1.0f);
    rp_attn_shape s = {.nseq = NSEQ, .seqlen = S, .nheads = NH, .nkv = NKV, .head_dim = HD,
                       .block = 4, .scale = 0.35f, .window = 2, .sinks = p->sinks};
    float ds1[NH] = {0}, ds2[NH] = {0};
    ck_assert_int_eq(t->attention_forward(NULL, &s, p->q, p->k, p->v, p->fo, p->flse, &err), RP_OK);
    rp_attn_sink_backward(&s, p->fo, p->flse, p->dout, ds1);
    ck_assert_int_eq(t->attention_sink_backward(NULL, &s, p->fo, p->flse, p->dout, ds2, &err),
                     RP_OK);
    ck_assert_mem_eq(ds1, ds2, sizeof ds1);
    problem_free(p);
}
END_TEST

START_TEST(grouped_biases)
{
    const rp_kernel_ops *t = &rp_kernel_ops_cpu;
    rp_error err = {0};
    enum { E = 4, R = 13, OUT = 70 }; /* 70 columns: two of colsum's chunks */
    const int32_t offsets[E + 1] = {0, 5, 5, 12, 13}; /* expert 1 has no rows */
    float *b0 = rnd(OUT, 61, 1.0f), *b2 = rnd(OUT, 62, 1.0f), *b3 = rnd(OUT, 63, 1.0f);
    const float *bias[E] = {b0, NULL, b2, b3};
    float *y = rnd(R * OUT, 64, 1.0f), *y0 = malloc(sizeof(float) * R * OUT);
    float *yc = malloc(sizeof(float) * R * OUT);
    memcpy(y0, y, sizeof(float) * R * OUT);
    ck_assert_int_eq(t->grouped_bias_forward(NULL, y, yc, bias, offsets, E, R, OUT, &err), RP_OK);
    for (int e = 0; e < E; e++)
        for (int r = offsets[e]; r < offsets[e + 1]; r++)
            for (int c = 0; c < OUT; c++) {
                const float want = y0[r * OUT + c] + bias[e][c];
                ck_assert(y[r * OUT + c] == want && yc[r * OUT + c] == want);
            }
    /* backward: accumulates onto 0.25, in the dense bias's order */
    float *dy = rnd(R * OUT, 65, 1.0f);
    float g0[OUT], g2[OUT], g3[OUT], untouched[OUT], ref[OUT];
    for (int c = 0; c < OUT; c++)
        g0[c] = g2[c] = g3[c] = 0.25f, untouched[c] = 7.0f;
    float *dbias[E] = {g0, untouched, g2, g3};
    ck_assert_int_eq(t->grouped_bias_backward(NULL, dy, offsets, E, R, OUT, dbias, &err), RP_OK);
    for (int e = 0; e < E; e++) {
        if (e == 1) {
            for (int c = 0; c < OUT; c++)
                ck_assert(untouched[c] == 7.0f);
            continue;
        }
        for (int c = 0; c < OUT; c++)
            ref[c] = 0.25f;
        rp_colsum_accumulate(dy + offsets[e] * OUT, offsets[e + 1] - offsets[e], OUT, ref);
        ck_assert_mem_eq(dbias[e], ref, sizeof ref);
        for (int c = 0; c < OUT; c++) {
            double want = 0.25;
            for (int r = offsets[e]; r < offsets[e + 1]; r++)
                want += dy[r * OUT + c];
            ck_assert_msg(fabs(dbias[e][c] - want) <= 1e-5 * (1 + fabs(want)),
                          "dbias[%d][%d] = %.8g, sum %.8g", e, c, dbias[e][c], want);
        }
    }
    const int32_t bad[E + 1] = {0, 6, 5, 12, 13};
    ck_assert_int_eq(t->grouped_bias_forward(NULL, y, NULL, bias, bad, E, R, OUT, &err),
                     RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "grouped_bias_forward"), "%s", err.msg);
    ck_assert_int_eq(t->grouped_bias_backward(NULL, dy, offsets, E, R + 1, OUT, dbias, &err),
                     RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "grouped_bias_backward"), "%s", err.msg);
    free(b0), free(b2), free(b3), free(y), free(y0), free(yc), free(dy);
}
END_TEST

START_TEST(router_is_moe_route_renormalised)
{
    const rp_kernel_ops *t = &rp_kernel_ops_cpu;
    rp_error err = {0};
    enum { ROWS = 40, E = 32, K = 4 };
    float *logits = rnd(ROWS * E, 71, 3.0f), probs[ROWS * E], weights[ROWS * K];
    int32_t experts[ROWS * K];
    ck_assert_int_eq(t->moe_route(NULL, logits, ROWS, E, K, 1, probs, experts, weights, &err),
                     RP_OK);
    for (int r = 0; r < ROWS; r++) {
        const float *z = logits + r * E;
        /* GptOssTopKRouter: torch.topk of the logits, softmax over them */
        int chosen[K], used[E] = {0};
        for (int s = 0; s < K; s++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!used[e] && (best < 0 || z[e] > z[best]))
                    best = e;
            used[best] = 1, chosen[s] = best;
        }
        double mx = z[chosen[0]], sum = 0, w[K];
        for (int s = 0; s < K; s++)
            sum += w[s] = exp((double)z[chosen[s]] - mx);
        for (int s = 0; s < K; s++) {
            ck_assert_int_eq(experts[r * K + s], chosen[s]);
            ck_assert_msg(fabs(weights[r * K + s] - w[s] / sum) <= 1e-6,
                          "row %d slot %d: %.8g, softmax over the k %.8g", r, s,
                          weights[r * K + s], w[s] / sum);
        }
    }
    free(logits);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("kernels_gpt_oss");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, sinks_and_windows_equal_naive);
    tcase_add_test(tc, naive_gradient_is_finite_difference);
    tcase_add_test(tc, bits_and_neutral_settings);
    tcase_add_test(tc, clamped_swiglu_equals_formula);
    tcase_add_test(tc, grouped_biases);
    tcase_add_test(tc, router_is_moe_route_renormalised);
    tcase_add_test(tc, table_entries);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
