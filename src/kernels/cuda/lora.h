/* The elementwise pieces of a LoRA adapter on the GPU: the scaled add of
 * its output and the dropout of its input (kernels/ops.h states what each
 * computes). Each value is one fp32 product and, when adding, one fp32 sum,
 * each rounded (__fmul_rn, __fadd_rn: never a fused multiply-add), and the
 * mask is core/philox.h's, so the results are the CPU kernels' bits
 * (kernels/cpu/lora.h). Device pointers; `stream` a cudaStream_t;
 * cudaError_t returned (0 = success). */
#ifndef RP_KERNELS_CUDA_LORA_H
#define RP_KERNELS_CUDA_LORA_H

#include <stdint.h>

#include "kernels/dropout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y = alpha * x, or y = y + alpha * x with accumulate (y may alias x), and
 * its bf16 rounding into y_bf16; y or y_bf16 may be NULL (not both;
 * accumulate needs y). */
int rp_cuda_scaled_add(const float *x, float alpha, float *y, uint16_t *y_bf16, int64_t n,
                       int accumulate, void *stream);

/* y = keep ? x * scale : 0 over fp32 [rows, cols] (y = y + that with
 * accumulate), keep drawn from `site` with its p; y may alias x. */
int rp_cuda_dropout_f32(const rp_dropout_site *site, float scale, const float *x, float *y,
                        int64_t rows, int64_t cols, int accumulate, void *stream);

/* The same over bf16 [rows, cols]: x widened exactly, the fp32 value
 * rounded to nearest even into y (no accumulate); y may alias x. */
int rp_cuda_dropout_bf16(const rp_dropout_site *site, float scale, const uint16_t *x,
                         uint16_t *y, int64_t rows, int64_t cols, void *stream);

#ifdef __cplusplus
}
#endif
#endif
