#include "kernels/cpu/attention.h"

#include <math.h>
#include <string.h>

#include "core/cpu_clones.h"
#include "kernels/cpu/expf_vector.h"

typedef float rp_float8 __attribute__((vector_size(32)));
typedef float rp_float4 __attribute__((vector_size(16)));

/* Eight partial sums in a fixed pattern (acc[i & 7] += a[i] * b[i]), added
 * pairwise at the end: the same order on every call. This is the form for
 * any n; dot below takes it only for a head_dim not a multiple of 8. */
static inline float dot_any(const float *restrict a, const float *restrict b, int64_t n)
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

/* acc[l] + acc[l + 4], l < 4, of an rp_float8: the first step of the final
 * sum (a macro: a function taking a 32-byte vector draws GCC's ABI note) */
#define FOLD8(acc) \
    (__builtin_shufflevector((acc), (acc), 0, 1, 2, 3) + \
     __builtin_shufflevector((acc), (acc), 4, 5, 6, 7))

/* dot_any's sums, with the eight partial sums in one vector (GCC's vector
 * extension) where n is a multiple of 8: both clones keep it in registers,
 * where the array went through the stack for its final sum and the tiny
 * config's attention backward took a quarter longer. A tail would index
 * the vector by a variable, which puts it in memory: n % 8 goes to
 * dot_any. */
static inline float dot(const float *restrict a, const float *restrict b, int64_t n)
{
    if (n % 8)
        return dot_any(a, b, n);
    rp_float8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; i += 8) {
        rp_float8 x, y;
        memcpy(&x, a + i, sizeof x);
        memcpy(&y, b + i, sizeof y);
        acc += x * y;
    }
    const rp_float4 pair = FOLD8(acc);
    return (pair[0] + pair[1]) + (pair[2] + pair[3]);
}

/* dot(a, b[u], n) for u < 4, into out: the same partial sums and the same
 * final pairwise order per product, four at once (a loaded once, four
 * independent chains, the four final sums side by side in one vector). */
static inline void dot4(const float *restrict a, const float *const b[4], int64_t n,
                        float out[4])
{
    if (n % 8) {
        for (int u = 0; u < 4; u++)
            out[u] = dot_any(a, b[u], n);
        return;
    }
    rp_float8 acc0 = {0, 0, 0, 0, 0, 0, 0, 0}, acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t i = 0; i < n; i += 8) {
        rp_float8 x, y0, y1, y2, y3;
        memcpy(&x, a + i, sizeof x);
        memcpy(&y0, b[0] + i, sizeof y0);
        memcpy(&y1, b[1] + i, sizeof y1);
        memcpy(&y2, b[2] + i, sizeof y2);
        memcpy(&y3, b[3] + i, sizeof y3);
        acc0 += x * y0, acc1 += x * y1, acc2 += x * y2, acc3 += x * y3;
    }
    const rp_float4 p0 = FOLD8(acc0), p1 = FOLD8(acc1), p2 = FOLD8(acc2), p3 = FOLD8(acc3);
    /* {p0 + p1, p2 + p3} of two products, then of those: (p0 + p1) + (p2 + p3) */
    const rp_float4 h01 = __builtin_shufflevector(p0, p1, 0, 2, 4, 6) +
                          __builtin_shufflevector(p0, p1, 1, 3, 5, 7);
    const rp_float4 h23 = __builtin_shufflevector(p2, p3, 0, 2, 4, 6) +
                          __builtin_shufflevector(p2, p3, 1, 3, 5, 7);
    const rp_float4 sums = __builtin_shufflevector(h01, h23, 0, 2, 4, 6) +
                           __builtin_shufflevector(h01, h23, 1, 3, 5, 7);
    memcpy(out, &sums, sizeof sums);
}

static inline void axpy(float a, const float *restrict x, float *restrict y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++)
            y[i + u] += a * x[i + u];
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* y += coef[c] * x_c for c < count in that order, x_c = x + c * stride: the
 * additions of count axpy calls, per element in their order, with y in
 * registers over them where n is a multiple of 8 (else those calls). */
static inline void axpy_rows(const float *coef, const float *x, int64_t stride, int64_t count,
                             float *restrict y, int64_t n)
{
    if (n % 8) {
        for (int64_t c = 0; c < count; c++)
            axpy(coef[c], x + c * stride, y, n);
        return;
    }
    for (int64_t d = 0; d < n; d += 8) {
        rp_float8 acc, xc;
        memcpy(&acc, y + d, sizeof acc);
        for (int64_t c = 0; c < count; c++) {
            memcpy(&xc, x + c * stride + d, sizeof xc);
            acc += coef[c] * xc;
        }
        memcpy(y + d, &acc, sizeof acc);
    }
}

static inline void scal(float a, float *restrict y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++)
            y[i + u] *= a;
    for (; i < n; i++)
        y[i] *= a;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The earliest key query row r sees: its segment's first token, or with a
 * window W the key W-1 before it when that is later. */
static int64_t row_first_key(const int32_t *seg, int64_t window, int64_t r)
{
    int64_t lo = seg ? seg[r] : 0;
    if (window > 0 && r - window + 1 > lo)
        lo = r - window + 1;
    return lo;
}

/* The earliest key any of query rows [r0, r1) sees. */
static int64_t first_key(const int32_t *seg, int64_t window, int64_t r0, int64_t r1)
{
    int64_t lo = r1;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t f = row_first_key(seg, window, r);
        lo = f < lo ? f : lo;
    }
    return lo;
}

static int64_t forward_block(const rp_attn_shape *s)
{
    return s->block < 1 ? 1 : s->block > RP_ATTN_MAX_BLOCK ? RP_ATTN_MAX_BLOCK : s->block;
}

/* One (sequence, head, query block) of the forward. vector: the answer of
 * rp_expf_vector_usable(), yes only where the x86-64-v3 clone runs. */
RP_CPU_CLONES
static void forward_task(const rp_attn_shape *s, const float *q, const float *k, const float *v,
                         float *o, float *lse, int64_t task, int vector)
{
    const int64_t S = s->seqlen, nh = s->nheads, nkv = s->nkv, hd = s->head_dim;
    const int64_t B = forward_block(s);
    const int64_t group = nh / nkv, nblk = (S + B - 1) / B;
    const float scale = s->scale;
    const int64_t i = task % nblk, h = (task / nblk) % nh, b = task / (nblk * nh);
    const int64_t g = h / group;
    /* per-row running max and sum, and one row of scores; the output
     * rows of this (sequence, head, block) serve as the accumulator, so
     * no workspace depends on the thread count */
    float mx[RP_ATTN_MAX_BLOCK], l[RP_ATTN_MAX_BLOCK], sc[RP_ATTN_MAX_BLOCK];
    const int64_t r0 = i * B, r1 = min64(S, r0 + B);
    const int32_t *seg = s->seg_start ? s->seg_start + b * S : NULL;
    const int64_t W = s->window;
    for (int64_t r = r0; r < r1; r++) {
        /* a sink is a key of logit sinks[h] and value 0 seen first */
        mx[r - r0] = s->sinks ? s->sinks[h] : -INFINITY;
        l[r - r0] = s->sinks ? 1.0f : 0.0f;
        memset(o + ((b * S + r) * nh + h) * hd, 0, sizeof(float) * (size_t)hd);
    }
    /* key blocks from the one holding the block's earliest visible key */
    for (int64_t j = seg || W > 0 ? first_key(seg, W, r0, r1) / B : 0; j <= i; j++) {
        const int64_t c0 = j * B;
        for (int64_t r = r0; r < r1; r++) {
            const int64_t rr = r - r0, c1 = min64(min64(S, c0 + B), r + 1);
            const int64_t lo = row_first_key(seg, W, r), cs = lo > c0 ? lo : c0;
            if (cs >= c1)
                continue; /* no key of this block is in the row's segment */
            const float *qr = q + ((b * S + r) * nh + h) * hd;
            float m = mx[rr];
            int64_t c = cs;
            for (; c + 4 <= c1; c += 4) {
                const float *kc[4];
                float d[4];
                for (int u = 0; u < 4; u++)
                    kc[u] = k + ((b * S + c + u) * nkv + g) * hd;
                dot4(qr, kc, hd, d);
                for (int u = 0; u < 4; u++)
                    sc[c + u - c0] = scale * d[u];
            }
            for (; c < c1; c++)
                sc[c - c0] = scale * dot(qr, k + ((b * S + c) * nkv + g) * hd, hd);
            for (c = cs; c < c1; c++)
                if (sc[c - c0] > m)
                    m = sc[c - c0];
            /* the row's probabilities (before the division by the sum),
             * all exps at once: a vector exp pays; the sums below keep
             * their order */
            for (c = cs; c < c1; c++)
                sc[c - c0] -= m;
            rp_expf_array(sc + (cs - c0), c1 - cs, vector);
            /* rescale what was accumulated under the previous maximum */
            float alpha = expf(mx[rr] - m), sum = 0.0f;
            float *ar = o + ((b * S + r) * nh + h) * hd;
            scal(alpha, ar, hd);
            for (c = cs; c < c1; c++)
                sum += sc[c - c0];
            axpy_rows(sc + (cs - c0), v + ((b * S + cs) * nkv + g) * hd, nkv * hd, c1 - cs, ar, hd);
            l[rr] = l[rr] * alpha + sum;
            mx[rr] = m;
        }
    }
    for (int64_t r = r0; r < r1; r++) {
        const int64_t rr = r - r0;
        scal(1.0f / l[rr], o + ((b * S + r) * nh + h) * hd, hd);
        lse[(b * S + r) * nh + h] = mx[rr] + logf(l[rr]);
    }
}

void rp_attn_forward(const rp_attn_shape *s, const float *q, const float *k, const float *v,
                     float *o, float *lse)
{
    const int64_t B = forward_block(s), nblk = (s->seqlen + B - 1) / B;
    const int64_t ntask = s->nseq * s->nheads * nblk;
    const int vector = rp_expf_vector_usable();
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < ntask; task++)
        forward_task(s, q, k, v, o, lse, task, vector);
}

/* One (sequence, kv head) of the backward: its query heads, all blocks.
 * vector as in forward_task. */
RP_CPU_CLONES
static void backward_task(const rp_attn_shape *s, const float *q, const float *k, const float *v,
                          const float *o, const float *lse, const float *dout, float *dq,
                          float *dk, float *dv, int64_t task, int vector)
{
    const int64_t S = s->seqlen, nh = s->nheads, nkv = s->nkv, hd = s->head_dim, B = s->block;
    const int64_t group = nh / nkv, nblk = (S + B - 1) / B;
    const float scale = s->scale;
    const int64_t g = task % nkv, b = task / nkv;
    const int32_t *seg = s->seg_start ? s->seg_start + b * S : NULL;
    const int64_t W = s->window;
    /* probabilities and dP = dO . v of up to that many keys of a row */
    float pr[RP_ATTN_MAX_BLOCK], dpr[RP_ATTN_MAX_BLOCK];
    for (int64_t c = 0; c < S; c++) {
        memset(dk + ((b * S + c) * nkv + g) * hd, 0, sizeof(float) * (size_t)hd);
        memset(dv + ((b * S + c) * nkv + g) * hd, 0, sizeof(float) * (size_t)hd);
    }
    for (int64_t h = g * group; h < (g + 1) * group; h++) {
        for (int64_t i = 0; i < nblk; i++) {
            const int64_t r0 = i * B, r1 = min64(S, r0 + B);
            for (int64_t r = r0; r < r1; r++)
                memset(dq + ((b * S + r) * nh + h) * hd, 0, sizeof(float) * (size_t)hd);
            /* key blocks outer, query rows inner: a key block stays in cache */
            for (int64_t j = seg || W > 0 ? first_key(seg, W, r0, r1) / B : 0; j <= i; j++) {
                const int64_t c0 = j * B;
                for (int64_t r = r0; r < r1; r++) {
                    const int64_t row = (b * S + r) * nh + h, c1 = min64(min64(S, c0 + B), r + 1);
                    const int64_t lo = row_first_key(seg, W, r), cs = lo > c0 ? lo : c0;
                    if (cs >= c1)
                        continue;
                    const float *qr = q + row * hd, *dor = dout + row * hd;
                    float *dqr = dq + row * hd;
                    const float L = lse[row];
                    /* D = rowsum(dO * O) = sum_c P_c dP_c */
                    const float D = dot(dor, o + row * hd, hd);
                    /* the scores and dP of a run of keys first (four keys
                     * a dot4), their exps at once (a vector exp pays),
                     * then the sums in their order */
                    for (int64_t ca = cs; ca < c1; ca += RP_ATTN_MAX_BLOCK) {
                        const int64_t cz = min64(c1, ca + RP_ATTN_MAX_BLOCK);
                        int64_t c = ca;
                        for (; c + 4 <= cz; c += 4) {
                            const float *kc[4], *vc[4];
                            float d[4];
                            for (int u = 0; u < 4; u++) {
                                kc[u] = k + ((b * S + c + u) * nkv + g) * hd;
                                vc[u] = v + ((b * S + c + u) * nkv + g) * hd;
                            }
                            dot4(qr, kc, hd, d);
                            for (int u = 0; u < 4; u++)
                                pr[c + u - ca] = scale * d[u] - L;
                            dot4(dor, vc, hd, dpr + (c - ca));
                        }
                        for (; c < cz; c++) {
                            const int64_t kv = ((b * S + c) * nkv + g) * hd;
                            pr[c - ca] = scale * dot(qr, k + kv, hd) - L;
                            dpr[c - ca] = dot(dor, v + kv, hd);
                        }
                        rp_expf_array(pr, cz - ca, vector);
                        for (c = ca; c < cz; c++) {
                            const int64_t kv = ((b * S + c) * nkv + g) * hd;
                            const float p = pr[c - ca];
                            float dp = dpr[c - ca];
                            float ds = p * (dp - D) * scale;
                            dpr[c - ca] = ds;
                            axpy(p, dor, dv + kv, hd);
                            axpy(ds, qr, dk + kv, hd);
                        }
                        /* dq's additions, key by key as before, after dk's
                         * and dv's: other rows */
                        axpy_rows(dpr, k + ((b * S + ca) * nkv + g) * hd, nkv * hd, cz - ca, dqr,
                                  hd);
                    }
                }
            }
        }
    }
}

void rp_attn_backward(const rp_attn_shape *s, const float *q, const float *k, const float *v,
                      const float *o, const float *lse, const float *dout, float *dq, float *dk,
                      float *dv)
{
    const int64_t ntask = s->nseq * s->nkv;
    const int vector = rp_expf_vector_usable();
#pragma omp parallel for schedule(static)
    for (int64_t task = 0; task < ntask; task++)
        backward_task(s, q, k, v, o, lse, dout, dq, dk, dv, task, vector);
}

void rp_attn_sink_backward(const rp_attn_shape *s, const float *o, const float *lse,
                           const float *dout, float *dsinks)
{
    const int64_t nh = s->nheads, hd = s->head_dim, T = s->nseq * s->seqlen;
    if (!s->sinks)
        return;
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < nh; h++) {
        double acc = 0;
        for (int64_t t = 0; t < T; t++) {
            const int64_t row = t * nh + h;
            /* D = dout . o: the row's expected dP, the sink's dP being 0 */
            const float D = dot(dout + row * hd, o + row * hd, hd);
            acc += (double)expf(s->sinks[h] - lse[row]) * (double)D;
        }
        dsinks[h] += (float)-acc;
    }
}
