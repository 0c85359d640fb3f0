#include "kernels/cpu/attention.h"

#include <math.h>
#include <string.h>

#include "core/cpu_clones.h"
#include "kernels/cpu/expf_vector.h"

/* Eight partial sums in a fixed pattern, the same order on every call: one
 * vector of eight (GCC's vector extension, so both clones keep it in
 * registers: an array of eight went through the stack for its final sum,
 * and the backward of the tiny config took a quarter longer), added
 * pairwise at the end. */
typedef float rp_float8 __attribute__((vector_size(32)));
typedef float rp_float4 __attribute__((vector_size(16)));
static inline float dot(const float *restrict a, const float *restrict b, int64_t n)
{
    rp_float8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        rp_float8 x, y;
        memcpy(&x, a + i, sizeof x);
        memcpy(&y, b + i, sizeof y);
        acc += x * y;
    }
    for (; i < n; i++)
        acc[i & 7] += a[i] * b[i];
    const rp_float4 low = {acc[0], acc[1], acc[2], acc[3]}, high = {acc[4], acc[5], acc[6], acc[7]};
    const rp_float4 pair = low + high; /* acc[u] + acc[u + 4] */
    return (pair[0] + pair[1]) + (pair[2] + pair[3]);
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
            for (int64_t c = cs; c < c1; c++) {
                sc[c - c0] = scale * dot(qr, k + ((b * S + c) * nkv + g) * hd, hd);
                if (sc[c - c0] > m)
                    m = sc[c - c0];
            }
            /* the row's probabilities (before the division by the sum),
             * all exps at once: a vector exp pays; the sums below keep
             * their order */
            for (int64_t c = cs; c < c1; c++)
                sc[c - c0] -= m;
            rp_expf_array(sc + (cs - c0), c1 - cs, vector);
            /* rescale what was accumulated under the previous maximum */
            float alpha = expf(mx[rr] - m), sum = 0.0f;
            float *ar = o + ((b * S + r) * nh + h) * hd;
            scal(alpha, ar, hd);
            for (int64_t c = cs; c < c1; c++) {
                const float p = sc[c - c0];
                sum += p;
                axpy(p, v + ((b * S + c) * nkv + g) * hd, ar, hd);
            }
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
    float pr[RP_ATTN_MAX_BLOCK]; /* probabilities of up to that many keys of a row */
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
                    /* the exps of a run of keys at once (a vector exp
                     * pays), then the sums in their order */
                    for (int64_t ca = cs; ca < c1; ca += RP_ATTN_MAX_BLOCK) {
                        const int64_t cz = min64(c1, ca + RP_ATTN_MAX_BLOCK);
                        for (int64_t c = ca; c < cz; c++)
                            pr[c - ca] = scale * dot(qr, k + ((b * S + c) * nkv + g) * hd, hd) - L;
                        rp_expf_array(pr, cz - ca, vector);
                        for (int64_t c = ca; c < cz; c++) {
                            const int64_t kv = ((b * S + c) * nkv + g) * hd;
                            const float p = pr[c - ca];
                            float dp = dot(dor, v + kv, hd);
                            float ds = p * (dp - D) * scale;
                            axpy(p, dor, dv + kv, hd);
                            axpy(ds, k + kv, dqr, hd);
                            axpy(ds, qr, dk + kv, hd);
                        }
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
