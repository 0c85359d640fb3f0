/* SwiGLU on CPU, fp32, elementwise: m = silu(g) * u with torch's
 * silu(x) = x / (1 + exp(-x)). */
#ifndef RP_KERNELS_CPU_SWIGLU_H
#define RP_KERNELS_CPU_SWIGLU_H

#include <stdint.h>

void rp_swiglu_forward(const float *g, const float *u, float *m, int64_t n);

/* dg = dm * u * silu'(g), du = dm * silu(g); dg may alias g and du may
 * alias u (each element is read before it is written). */
void rp_swiglu_backward(const float *g, const float *u, const float *dm, float *dg, float *du,
                        int64_t n);

#endif
