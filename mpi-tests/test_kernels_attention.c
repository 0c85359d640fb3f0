/* Proves: the blocked (online-softmax) causal GQA attention equals a naive
 * O(S^2) attention written here in double precision, forward (output and
 * log-sum-exp) and backward (dq, dk, dv), for block sizes 1, 3, 4, S-1, S
 * and > S, several sequences per call and grouped kv heads; its results do
 * not depend on the thread count; the backward does not depend on the
 * block size; blocks above the cap are clamped; with document segments
 * (packed sequences) it equals the naive attention under a document mask,
 * for blocks that cut the segments anywhere and a one-token segment; its
 * bits equal those of the same blocked algorithm written here with one
 * expf per score in the order the kernel had before its exps were batched
 * (a vector exp on x86-64-v3: the batching changes no bit) and its dot
 * products' partial sums in an array, one key at a time (now in vectors,
 * four keys at a time), for rows longer than RP_ATTN_MAX_BLOCK keys too
 * and a head_dim not a multiple of 8. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cpu/attention.h"
#include "rp_check.h"

enum { NSEQ = 2, S = 11, NH = 6, NKV = 2, HD = 8, TT = NSEQ * S };

static float *rnd(size_t n, uint64_t seed, float sd)
{
    float *v = malloc(n * sizeof(float));
    rp_rng_fill_normal(v, n, seed, 3, 0, 0.0f, sd);
    return v;
}

/* Naive reference: full score matrix per (sequence, head), softmax,
 * backward through the softmax Jacobian, all in double. */
static void naive(const float *q, const float *k, const float *v, const float *dout, double scale,
                  const int32_t *seg, double *o, double *lse, double *dq, double *dk, double *dv)
{
    memset(dq, 0, sizeof(double) * TT * NH * HD);
    memset(dk, 0, sizeof(double) * TT * NKV * HD);
    memset(dv, 0, sizeof(double) * TT * NKV * HD);
    for (int b = 0; b < NSEQ; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            double P[S][S], dP[S][S];
#define Q(t, d) q[((b * S + (t)) * NH + h) * HD + (d)]
#define K(t, d) k[((b * S + (t)) * NKV + g) * HD + (d)]
#define Vv(t, d) v[((b * S + (t)) * NKV + g) * HD + (d)]
#define DO(t, d) dout[((b * S + (t)) * NH + h) * HD + (d)]
            for (int i = 0; i < S; i++) {
                double mx = -INFINITY, z = 0;
                for (int j = 0; j < S; j++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++)
                        s += (double)Q(i, d) * K(j, d);
                    int seen = j <= i && (!seg || j >= seg[b * S + i]);
                    P[i][j] = seen ? s * scale : -INFINITY;
                    mx = fmax(mx, P[i][j]);
                }
                for (int j = 0; j < S; j++)
                    z += (P[i][j] = exp(P[i][j] - mx));
                for (int j = 0; j < S; j++)
                    P[i][j] /= z;
                lse[(b * S + i) * NH + h] = mx + log(z);
                for (int d = 0; d < HD; d++) {
                    double acc = 0;
                    for (int j = 0; j < S; j++)
                        acc += P[i][j] * Vv(j, d);
                    o[((b * S + i) * NH + h) * HD + d] = acc;
                }
            }
            for (int i = 0; i < S; i++) {
                double rs = 0;
                for (int j = 0; j < S; j++) {
                    double s = 0;
                    for (int d = 0; d < HD; d++)
                        s += (double)DO(i, d) * Vv(j, d);
                    dP[i][j] = s;
                    rs += P[i][j] * s;
                }
                for (int j = 0; j < S; j++) {
                    double ds = P[i][j] * (dP[i][j] - rs) * scale;
                    for (int d = 0; d < HD; d++) {
                        dq[((b * S + i) * NH + h) * HD + d] += ds * K(j, d);
                        dk[((b * S + j) * NKV + g) * HD + d] += ds * Q(i, d);
                        dv[((b * S + j) * NKV + g) * HD + d] += P[i][j] * DO(i, d);
                    }
                }
            }
#undef Q
#undef K
#undef Vv
#undef DO
        }
}

/* fp32 kernel against a double reference: the values are O(1) sums of
 * O(10) terms, so 2e-5 absolute + 1e-5 relative is a few dozen fp32 ulps. */
static void expect_close(const float *a, const double *ref, size_t n, const char *what, int64_t B)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(a[i] - ref[i]) <= 2e-5 + 1e-5 * fabs(ref[i]),
                      "block %lld: %s[%zu] = %.8g, naive %.8g", (long long)B, what, i, a[i], ref[i]);
}

/* One problem: random inputs, the naive reference in double, and room
 * for the kernel's outputs. */
typedef struct problem {
    float *q, *k, *v, *dout;
    double scale, *o, *lse, *dq, *dk, *dv; /* naive */
    float *fo, *flse, *fdq, *fdk, *fdv;   /* the kernel's */
} problem;

static void problem_make(problem *p, uint64_t seed, float sd, const int32_t *seg)
{
    p->q = rnd(TT * NH * HD, seed, sd), p->k = rnd(TT * NKV * HD, seed + 1, sd);
    p->v = rnd(TT * NKV * HD, seed + 2, 1.0f), p->dout = rnd(TT * NH * HD, seed + 3, 1.0f);
    p->scale = 1.0 / sqrt((double)HD);
    p->o = malloc(sizeof(double) * TT * NH * HD), p->lse = malloc(sizeof(double) * TT * NH);
    p->dq = malloc(sizeof(double) * TT * NH * HD), p->dk = malloc(sizeof(double) * TT * NKV * HD);
    p->dv = malloc(sizeof(double) * TT * NKV * HD);
    naive(p->q, p->k, p->v, p->dout, p->scale, seg, p->o, p->lse, p->dq, p->dk, p->dv);
    p->fo = malloc(sizeof(float) * TT * NH * HD), p->flse = malloc(sizeof(float) * TT * NH);
    p->fdq = malloc(sizeof(float) * TT * NH * HD), p->fdk = malloc(sizeof(float) * TT * NKV * HD);
    p->fdv = malloc(sizeof(float) * TT * NKV * HD);
}

static void problem_free(problem *p)
{
    free(p->q), free(p->k), free(p->v), free(p->dout), free(p->o), free(p->lse), free(p->dq);
    free(p->dk), free(p->dv), free(p->fo), free(p->flse), free(p->fdq), free(p->fdk);
    free(p->fdv);
}

/* The kernel's forward and backward for shape s against the naive ones. */
static void check_against_naive(problem *p, const rp_attn_shape *s)
{
    rp_attn_forward(s, p->q, p->k, p->v, p->fo, p->flse);
    expect_close(p->fo, p->o, TT * NH * HD, "o", s->block);
    expect_close(p->flse, p->lse, TT * NH, "lse", s->block);
    rp_attn_backward(s, p->q, p->k, p->v, p->fo, p->flse, p->dout, p->fdq, p->fdk, p->fdv);
    expect_close(p->fdq, p->dq, TT * NH * HD, "dq", s->block);
    expect_close(p->fdk, p->dk, TT * NKV * HD, "dk", s->block);
    expect_close(p->fdv, p->dv, TT * NKV * HD, "dv", s->block);
}

START_TEST(blocked_equals_naive)
{
    /* scores of size O(3): a peaked softmax, where the online rescaling matters */
    problem p;
    problem_make(&p, 1, 1.0f, NULL);
    float *dq1 = malloc(sizeof(float) * TT * NH * HD);
    int64_t blocks[] = {1, 3, 4, S - 1, S, S + 5, 64};
    for (int bi = 0; bi < 7; bi++) {
        rp_attn_shape s = {NSEQ, S, NH, NKV, HD, blocks[bi], (float)p.scale, NULL, 0, NULL, NULL};
        check_against_naive(&p, &s);
    }
    /* the backward sums in (head, query, key) order whatever the block:
     * given the same o and lse it gives the same bits for any block size */
    rp_attn_shape s1 = {NSEQ, S, NH, NKV, HD, 1, (float)p.scale, NULL, 0, NULL};
    rp_attn_shape s7 = {NSEQ, S, NH, NKV, HD, 7, (float)p.scale, NULL, 0, NULL};
    rp_attn_backward(&s1, p.q, p.k, p.v, p.fo, p.flse, p.dout, dq1, p.fdk, p.fdv);
    rp_attn_backward(&s7, p.q, p.k, p.v, p.fo, p.flse, p.dout, p.fdq, p.fdk, p.fdv);
    ck_assert_mem_eq(dq1, p.fdq, sizeof(float) * TT * NH * HD);
    problem_free(&p);
    free(dq1);
}
END_TEST

START_TEST(segments_equal_naive_with_a_document_mask)
{
    /* documents packed into the sequences: sequence 0 has segments [0,3),
     * [3,4) (one token), [4,9), [9,11); sequence 1 [0,6), [6,11). Each query
     * sees the earlier keys of its own segment only (the naive reference
     * masks the rest), for blocks that cut segments anywhere; with and
     * without threads the same bits. */
    static const int32_t starts[2][4] = {{0, 3, 4, 9}, {0, 6, -1, -1}};
    int32_t seg[TT];
    for (int b = 0; b < NSEQ; b++)
        for (int t = 0, cur = 0; t < S; t++) {
            for (int i = 0; i < 4; i++)
                if (starts[b][i] >= 0 && starts[b][i] <= t)
                    cur = starts[b][i];
            seg[b * S + t] = cur;
        }
    problem p;
    problem_make(&p, 11, 1.5f, seg);
    float *o1 = malloc(sizeof(float) * TT * NH * HD);
    int64_t blocks[] = {1, 2, 3, 4, S};
    for (int bi = 0; bi < 5; bi++) {
        rp_attn_shape s = {NSEQ, S, NH, NKV, HD, blocks[bi], (float)p.scale, seg, 0, NULL, NULL};
        omp_set_num_threads(1);
        rp_attn_forward(&s, p.q, p.k, p.v, o1, p.flse);
        omp_set_num_threads(3);
        check_against_naive(&p, &s);
        ck_assert_mem_eq(o1, p.fo, sizeof(float) * TT * NH * HD);
    }
    problem_free(&p);
    free(o1);
}
END_TEST

START_TEST(independent_of_thread_count)
{
    float *q = rnd(TT * NH * HD, 1, 1.0f), *k = rnd(TT * NKV * HD, 2, 1.0f);
    float *v = rnd(TT * NKV * HD, 3, 1.0f), *dout = rnd(TT * NH * HD, 4, 1.0f);
    rp_attn_shape s = {NSEQ, S, NH, NKV, HD, 4, 0.35f, NULL, 0, NULL, NULL};
    float *out[2][5];
    size_t sz[5] = {TT * NH * HD, TT * NH, TT * NH * HD, TT * NKV * HD, TT * NKV * HD};
    int threads[2] = {1, 3};
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(threads[r]);
        for (int i = 0; i < 5; i++)
            out[r][i] = malloc(sizeof(float) * sz[i]);
        rp_attn_forward(&s, q, k, v, out[r][0], out[r][1]);
        rp_attn_backward(&s, q, k, v, out[r][0], out[r][1], dout, out[r][2], out[r][3], out[r][4]);
    }
    for (int i = 0; i < 5; i++) {
        ck_assert_mem_eq(out[0][i], out[1][i], sizeof(float) * sz[i]);
        free(out[0][i]);
        free(out[1][i]);
    }
    free(q), free(k), free(v), free(dout);
}
END_TEST

START_TEST(blocks_above_the_cap_are_clamped)
{
    /* a block larger than RP_ATTN_MAX_BLOCK runs as RP_ATTN_MAX_BLOCK (its
     * row state is on the stack): same bits as asking for the cap */
    enum { L = RP_ATTN_MAX_BLOCK + 40 };
    float *q = rnd(L * 2 * HD, 1, 1.0f), *k = rnd(L * HD, 2, 1.0f), *v = rnd(L * HD, 3, 1.0f);
    float *o1 = malloc(sizeof(float) * L * 2 * HD), *o2 = malloc(sizeof(float) * L * 2 * HD);
    float l1[L * 2], l2[L * 2];
    rp_attn_shape a = {1, L, 2, 1, HD, RP_ATTN_MAX_BLOCK, 0.35f, NULL, 0, NULL, NULL}, b = a;
    b.block = 100000;
    rp_attn_forward(&a, q, k, v, o1, l1);
    rp_attn_forward(&b, q, k, v, o2, l2);
    ck_assert_mem_eq(o1, o2, sizeof(float) * L * 2 * HD);
    ck_assert_mem_eq(l1, l2, sizeof l1);
    free(q), free(k), free(v), free(o1), free(o2);
}
END_TEST

/* The kernel before its exps were batched, reduced to causal attention
 * without segments, window or sinks: its dot (eight partial sums in an
 * array, added pairwise), axpy and scal and one expf per score, summed and
 * accumulated in the kernel's order. Compiled here without clones or
 * contraction (ISO C), so its roundings are the kernel's. */
static float sdot(const float *a, const float *b, int64_t n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++)
            acc[u] += a[i + u] * b[i + u];
    for (; i < n; i++)
        acc[i & 7] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void saxpy(float a, const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void sscal(float a, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] *= a;
}

static void scalar_exp_forward(const rp_attn_shape *s, const float *q, const float *k,
                               const float *v, float *o, float *lse)
{
    const int64_t S_ = s->seqlen, nh = s->nheads, nkv = s->nkv, hd = s->head_dim;
    const int64_t B = s->block > RP_ATTN_MAX_BLOCK ? RP_ATTN_MAX_BLOCK : s->block;
    const int64_t nblk = (S_ + B - 1) / B;
    static float mx[RP_ATTN_MAX_BLOCK], l[RP_ATTN_MAX_BLOCK], sc[RP_ATTN_MAX_BLOCK];
    for (int64_t b = 0; b < s->nseq; b++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < nblk; i++) {
                const int64_t g = h / (nh / nkv), r0 = i * B, r1 = r0 + B < S_ ? r0 + B : S_;
                for (int64_t r = r0; r < r1; r++) {
                    mx[r - r0] = -INFINITY, l[r - r0] = 0.0f;
                    memset(o + ((b * S_ + r) * nh + h) * hd, 0, sizeof(float) * (size_t)hd);
                }
                for (int64_t j = 0; j <= i; j++)
                    for (int64_t r = r0; r < r1; r++) {
                        const int64_t rr = r - r0, c0 = j * B;
                        const int64_t c1 = c0 + B < r + 1 ? c0 + B : r + 1;
                        if (c0 >= c1)
                            continue;
                        const float *qr = q + ((b * S_ + r) * nh + h) * hd;
                        float m = mx[rr];
                        for (int64_t c = c0; c < c1; c++) {
                            sc[c - c0] = s->scale * sdot(qr, k + ((b * S_ + c) * nkv + g) * hd, hd);
                            if (sc[c - c0] > m)
                                m = sc[c - c0];
                        }
                        float alpha = expf(mx[rr] - m), sum = 0.0f;
                        float *ar = o + ((b * S_ + r) * nh + h) * hd;
                        sscal(alpha, ar, hd);
                        for (int64_t c = c0; c < c1; c++) {
                            float p = expf(sc[c - c0] - m);
                            sum += p;
                            saxpy(p, v + ((b * S_ + c) * nkv + g) * hd, ar, hd);
                        }
                        l[rr] = l[rr] * alpha + sum;
                        mx[rr] = m;
                    }
                for (int64_t r = r0; r < r1; r++) {
                    sscal(1.0f / l[r - r0], o + ((b * S_ + r) * nh + h) * hd, hd);
                    lse[(b * S_ + r) * nh + h] = mx[r - r0] + logf(l[r - r0]);
                }
            }
}

static void scalar_exp_backward(const rp_attn_shape *s, const float *q, const float *k,
                                const float *v, const float *o, const float *lse,
                                const float *dout, float *dq, float *dk, float *dv)
{
    const int64_t S_ = s->seqlen, nh = s->nheads, nkv = s->nkv, hd = s->head_dim;
    const int64_t B = s->block, nblk = (S_ + B - 1) / B, group = nh / nkv;
    memset(dk, 0, sizeof(float) * (size_t)(s->nseq * S_ * nkv * hd));
    memset(dv, 0, sizeof(float) * (size_t)(s->nseq * S_ * nkv * hd));
    memset(dq, 0, sizeof(float) * (size_t)(s->nseq * S_ * nh * hd));
    for (int64_t b = 0; b < s->nseq; b++)
        for (int64_t g = 0; g < nkv; g++)
            for (int64_t h = g * group; h < (g + 1) * group; h++)
                for (int64_t i = 0; i < nblk; i++)
                    for (int64_t j = 0; j <= i; j++)
                        for (int64_t r = i * B; r < (i + 1) * B && r < S_; r++) {
                            const int64_t row = (b * S_ + r) * nh + h, c0 = j * B;
                            const int64_t c1 = c0 + B < r + 1 ? c0 + B : r + 1;
                            const float *qr = q + row * hd, *dor = dout + row * hd;
                            const float D = sdot(dor, o + row * hd, hd);
                            for (int64_t c = c0; c < c1; c++) {
                                const int64_t kv = ((b * S_ + c) * nkv + g) * hd;
                                float p = expf(s->scale * sdot(qr, k + kv, hd) - lse[row]);
                                float dp = sdot(dor, v + kv, hd);
                                float ds = p * (dp - D) * s->scale;
                                saxpy(p, dor, dv + kv, hd);
                                saxpy(ds, k + kv, dq + row * hd, hd);
                                saxpy(ds, qr, dk + kv, hd);
                            }
                        }
}

START_TEST(bits_equal_one_expf_per_score)
{
    /* rows of up to 300 keys: the backward exponentiates a row's keys
     * RP_ATTN_MAX_BLOCK at a time (block 300), the forward a block's */
    enum { L = RP_ATTN_MAX_BLOCK + 44, H = 4, G = 2, D = 32, N = 2 * L };
    const int64_t blocks[] = {5, 16, 300};
    float *q = rnd(N * H * D, 11, 1.5f), *k = rnd(N * G * D, 12, 1.5f);
    float *v = rnd(N * G * D, 13, 1.0f), *dout = rnd(N * H * D, 14, 1.0f);
    float *o1 = malloc(sizeof(float) * N * H * D), *o2 = malloc(sizeof(float) * N * H * D);
    float *l1 = malloc(sizeof(float) * N * H), *l2 = malloc(sizeof(float) * N * H);
    float *dq1 = malloc(sizeof(float) * N * H * D), *dq2 = malloc(sizeof(float) * N * H * D);
    float *dk1 = malloc(sizeof(float) * N * G * D), *dk2 = malloc(sizeof(float) * N * G * D);
    float *dv1 = malloc(sizeof(float) * N * G * D), *dv2 = malloc(sizeof(float) * N * G * D);
    /* head_dim 32, and 20: not a multiple of the dot's eight lanes */
    for (int bi = 0; bi < 6; bi++) {
        rp_attn_shape a = {2,    L,          H,    G, bi < 3 ? D : 20, blocks[bi % 3],
                           0.1767767f, NULL, 0, NULL, NULL};
        rp_attn_forward(&a, q, k, v, o1, l1);
        scalar_exp_forward(&a, q, k, v, o2, l2);
        const size_t hd = (size_t)a.head_dim;
        ck_assert_mem_eq(o1, o2, sizeof(float) * N * H * hd);
        ck_assert_mem_eq(l1, l2, sizeof(float) * N * H);
        rp_attn_backward(&a, q, k, v, o1, l1, dout, dq1, dk1, dv1);
        scalar_exp_backward(&a, q, k, v, o2, l2, dout, dq2, dk2, dv2);
        ck_assert_mem_eq(dq1, dq2, sizeof(float) * N * H * hd);
        ck_assert_mem_eq(dk1, dk2, sizeof(float) * N * G * hd);
        ck_assert_mem_eq(dv1, dv2, sizeof(float) * N * G * hd);
    }
    free(q), free(k), free(v), free(dout), free(o1), free(o2), free(l1), free(l2);
    free(dq1), free(dq2), free(dk1), free(dk2), free(dv1), free(dv2);
}
END_TEST

Suite *attention_suite(void)
{
    Suite *s = suite_create("kernels_attention");
    TCase *tc = tcase_create("attention");
    tcase_add_test(tc, blocked_equals_naive);
    tcase_add_test(tc, independent_of_thread_count);
    tcase_add_test(tc, segments_equal_naive_with_a_document_mask);
    tcase_add_test(tc, blocks_above_the_cap_are_clamped);
    tcase_add_test(tc, bits_equal_one_expf_per_score);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(attention_suite, "serial")
