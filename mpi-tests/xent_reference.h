/* Softmax cross-entropy of one row written out in double, the brute force
 * the cross-entropy ops (CPU and CUDA) are checked against: the row's
 * log-sum-exp (max subtracted), its loss lse - z[t], and when g is not
 * NULL its gradient scale * (softmax(z) - onehot(t)). */
#ifndef RP_TEST_XENT_REFERENCE_H
#define RP_TEST_XENT_REFERENCE_H

#include <math.h>
#include <stdint.h>

static inline double xent_reference(const float *z, int64_t V, int32_t t, float scale,
                                    double *loss, double *g)
{
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; j++)
        m = fmax(m, (double)z[j]);
    for (int64_t j = 0; j < V; j++)
        s += exp((double)z[j] - m);
    const double lse = m + log(s);
    *loss = lse - (double)z[t];
    for (int64_t j = 0; g && j < V; j++)
        g[j] = scale * (exp((double)z[j] - lse) - (j == t ? 1.0 : 0.0));
    return lse;
}

#endif
