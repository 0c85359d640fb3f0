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

void rp_swiglu_clamped_forward(const float *g, const float *u, float limit, float alpha, float *m,
                               int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float gate = g[i] > limit ? limit : g[i];
        const float up = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
        const float sig = 1.0f / (1.0f + expf(-(gate * alpha)));
        const float glu = gate * sig;
        m[i] = (up + 1.0f) * glu;
    }
}

void rp_swiglu_clamped_backward(const float *g, const float *u, float limit, float alpha,
                                const float *dm, float *dg, float *du, int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i], ui = u[i];
        const float gate = gi > limit ? limit : gi;
        const float up = ui > limit ? limit : ui < -limit ? -limit : ui;
        const float sig = 1.0f / (1.0f + expf(-(gate * alpha)));
        const float dglu = sig * (1.0f + alpha * gate * (1.0f - sig)); /* d(gate sig)/d gate */
        dg[i] = gi > limit ? 0.0f : dm[i] * (up + 1.0f) * dglu;
        du[i] = ui > limit || ui < -limit ? 0.0f : dm[i] * (gate * sig);
    }
}
