/* SwiGLU on CPU, fp32, elementwise: m = silu(g) * u with torch's
 * silu(x) = x / (1 + exp(-x)). */
#ifndef RP_KERNELS_CPU_SWIGLU_H
#define RP_KERNELS_CPU_SWIGLU_H

#include <stdint.h>

/* g and u (and the backward's dg, du): `rows` rows of `cols` values at a row
 * stride ld >= cols (the dense MLP's fused gate/up GEMM writes [g_row |
 * u_row]: ld = 2 cols, u = g + cols); the gaps are neither read nor
 * written. m and dm are contiguous [rows, cols]. ld == cols is the
 * contiguous case, with the bits it always had. */
void rp_swiglu_forward(const float *g, const float *u, int64_t ld, float *m, int64_t rows,
                       int64_t cols);

/* dg = dm * u * silu'(g), du = dm * silu(g); dg may alias g and du may
 * alias u (each element is read before it is written). */
void rp_swiglu_backward(const float *g, const float *u, int64_t ld, const float *dm, float *dg,
                        float *du, int64_t rows, int64_t cols);

/* gpt-oss's clamped SwiGLU (issue 35), elementwise over n, as transformers'
 * GptOssExperts._apply_gate computes it in fp32: gate = min(g, limit),
 * up = clamp(u, -limit, limit), m = (up + 1) * (gate * sigmoid(gate *
 * alpha)), sigmoid(x) = 1 / (1 + exp(-x)), each operation rounded to fp32
 * in that order. */
void rp_swiglu_clamped_forward(const float *g, const float *u, float limit, float alpha, float *m,
                               int64_t n);

/* Its backward, with torch's clamp gradient (passed where the input lies
 * within the bounds, the bounds included; zero where it was clamped):
 * dg = dm * (up + 1) * sig * (1 + alpha * gate * (1 - sig)) for g <= limit,
 * du = dm * gate * sig for |u| <= limit. dg may alias g and du may alias u. */
void rp_swiglu_clamped_backward(const float *g, const float *u, float limit, float alpha,
                                const float *dm, float *dg, float *du, int64_t n);

#endif
