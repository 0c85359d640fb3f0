#include "kernels/cpu/xent.h"

#include <math.h>
#include <string.h>

void rp_xent_rows(float *logits, int64_t rows, int64_t vocab, const int32_t *targets,
                  const uint8_t *counted, float scale, double *loss, int grad, float *dlogits)
{
    if (!dlogits)
        dlogits = logits;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *z = logits + r * vocab;
        float *g = dlogits + r * vocab; /* may be z: each z[j] is read before g[j] is written */
        if (counted && !counted[r]) {
            loss[r] = 0.0;
            if (grad)
                memset(g, 0, sizeof(float) * (size_t)vocab);
            continue;
        }
        float m = z[0];
        for (int64_t j = 1; j < vocab; j++)
            if (z[j] > m)
                m = z[j];
        double sum = 0.0;
        for (int64_t j = 0; j < vocab; j++)
            sum += (double)expf(z[j] - m);
        const double lse = (double)m + log(sum);
        const int32_t t = targets[r];
        loss[r] = lse - (double)z[t];
        if (grad) {
            for (int64_t j = 0; j < vocab; j++)
                g[j] = scale * expf((float)((double)z[j] - lse));
            g[t] -= scale;
        }
    }
}
