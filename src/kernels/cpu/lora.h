/* The elementwise pieces of a LoRA adapter on the CPU, fp32: the scaled
 * add of its output and the dropout of its input (kernels/ops.h states
 * what each computes). Every value is one fp32 product and, when adding,
 * one fp32 sum, each rounded: the CUDA kernels compute the same bits. */
#ifndef RP_KERNELS_CPU_LORA_H
#define RP_KERNELS_CPU_LORA_H

#include <stdint.h>

#include "kernels/dropout.h"

/* y = alpha * x, or y = y + alpha * x with accumulate; y may alias x. */
void rp_scaled_add(const float *x, float alpha, float *y, int64_t n, int accumulate);

/* y = keep ? x * scale : 0 over [rows, cols] (y = y + that with
 * accumulate), keep drawn from `site` with its p; y may alias x. */
void rp_dropout_f32(const rp_dropout_site *site, float scale, const float *x, float *y,
                    int64_t rows, int64_t cols, int accumulate);

#endif
