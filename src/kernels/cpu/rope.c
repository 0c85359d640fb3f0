#include "kernels/cpu/rope.h"

#include <math.h>

void rp_rope_table(float *cs, const float *inv_freq, int64_t seqlen, int64_t half)
{
    float *sn = cs + seqlen * half;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < seqlen; p++)
        for (int64_t i = 0; i < half; i++) {
            float a = (float)p * inv_freq[i];
            cs[p * half + i] = cosf(a);
            sn[p * half + i] = sinf(a);
        }
}

void rp_rope_apply(float *x, const float *cs, int64_t nseq, int64_t seqlen,
                   const int32_t *seg_start, int64_t nheads, int64_t head_dim, int inverse)
{
    const int64_t half = head_dim / 2, T = nseq * seqlen;
    const float *sn = cs + seqlen * half;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        int64_t p = t % seqlen - (seg_start ? seg_start[t] : 0);
        const float *c = cs + p * half, *s = sn + p * half;
        for (int64_t h = 0; h < nheads; h++) {
            float *a = x + (t * nheads + h) * head_dim, *b = a + half;
            for (int64_t i = 0; i < half; i++) {
                float x1 = a[i], x2 = b[i];
                if (!inverse) {
                    a[i] = x1 * c[i] - x2 * s[i];
                    b[i] = x2 * c[i] + x1 * s[i];
                } else {
                    a[i] = x1 * c[i] + x2 * s[i];
                    b[i] = x2 * c[i] - x1 * s[i];
                }
            }
        }
    }
}
