#include <math.h>

#include "kernels/cpu/swiglu.h"

void rp_swiglu_forward(const float *g, const float *u, float *m, int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        m[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void rp_swiglu_backward(const float *g, const float *u, const float *dm, float *dg, float *du,
                        int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i], ui = u[i], sg = 1.0f / (1.0f + expf(-gi));
        float silu = gi / (1.0f + expf(-gi));
        dg[i] = dm[i] * ui * (sg * (1.0f + gi * (1.0f - sg)));
        du[i] = dm[i] * silu;
    }
}
