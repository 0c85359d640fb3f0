/* SwiGLU of the Llama/Qwen3 MLP on the GPU: m = silu(g) * u with torch's
 * silu(x) = x / (1 + exp(-x)), and its backward
 *     dg = dm * u * sg * (1 + g * (1 - sg)),  sg = sigmoid(g);  du = dm * silu(g)
 * (the formulas of src/model/block.c). Elementwise; each
 * output may be fp32 and/or bf16 (NULL = not wanted); fp32 outputs may alias
 * the inputs of the same index. Device pointers; `stream` a cudaStream_t;
 * cudaError_t returned. */
#ifndef RP_KERNELS_CUDA_SWIGLU_H
#define RP_KERNELS_CUDA_SWIGLU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* g and u are bf16 when gu_bf16, else fp32 (dm likewise by dm_bf16): a
 * bf16 input is widened exactly and goes through the same fp32 math. g, u,
 * dg and du are `rows` rows of `cols` values at a row stride ld >= cols
 * (kernels/ops.h: the fused gate/up GEMM's [g_row | u_row]); m and dm are
 * contiguous [rows, cols]. */
int rp_cuda_swiglu_forward(const void *g, const void *u, int gu_bf16, int64_t ld, float *m,
                           uint16_t *m_bf16, int64_t rows, int64_t cols, void *stream);

int rp_cuda_swiglu_backward(const void *g, const void *u, int gu_bf16, int64_t ld,
                            const void *dm, int dm_bf16, float *dg, uint16_t *dg_bf16, float *du,
                            uint16_t *du_bf16, int64_t rows, int64_t cols, void *stream);

/* gpt-oss's clamped SwiGLU (kernels/ops.h swiglu_clamped_*, the CPU op's
 * formulas in the same fp32 operations, without contraction; the device's
 * expf differs from the C library's in the last bits): gate = min(g, limit), up =
 * clamp(u, -limit, limit), m = (up + 1) gate sigmoid(alpha gate); dg and du
 * zero where g or u was beyond its bound. Outputs and aliasing as above. */
int rp_cuda_swiglu_clamped_forward(const float *g, const float *u, float limit, float alpha,
                                   float *m, uint16_t *m_bf16, int64_t n, void *stream);

int rp_cuda_swiglu_clamped_backward(const float *g, const float *u, float limit, float alpha,
                                    const float *dm, float *dg, uint16_t *dg_bf16, float *du,
                                    uint16_t *du_bf16, int64_t n, void *stream);

#ifdef __cplusplus
}
#endif
#endif
