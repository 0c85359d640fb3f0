/* fp32 <-> bf16 conversion on the GPU (device pointers; bf16 is carried as
 * uint16_t in C). fp32 -> bf16 rounds to nearest even like rp_f32_to_bf16.
 * `stream` is a cudaStream_t (NULL = the default stream). Each returns the
 * cudaError_t of the launch (0 = success). (attention.h has its own
 * rp_cuda_f32_to_bf16 with a size_t count and an error string; hence the
 * names here.) */
#ifndef RP_KERNELS_CUDA_CONVERT_H
#define RP_KERNELS_CUDA_CONVERT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int rp_cuda_bf16_from_f32(const float *src, uint16_t *dst, int64_t n, void *stream);
int rp_cuda_f32_from_bf16(const uint16_t *src, float *dst, int64_t n, void *stream);

#ifdef __cplusplus
}
#endif
#endif
