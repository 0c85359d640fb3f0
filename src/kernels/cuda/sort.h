/* The one radix sort the CUDA kernels use: int32 keys sorted with their
 * positions, for the embedding's backward (tokens) and the mixture of
 * experts' grouping (experts). CUB's DeviceRadixSort is instantiated here
 * alone, once: each instantiation costs about 15 s of nvcc per GPU
 * architecture. Device pointers; `stream` is a cudaStream_t; functions
 * return a cudaError_t (0 = success). */
#ifndef RP_KERNELS_CUDA_SORT_H
#define RP_KERNELS_CUDA_SORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The fewest low bits (at least 1, at most 31) that hold every value of
 * 0..count-1: the bits the sort looks at for keys below count. */
int rp_cuda_sort_key_bits(int64_t count);

/* Bytes of CUB's temporary storage for n keys on end_bit bits (asks CUB,
 * so it needs a CUDA device). */
int rp_cuda_sort_positions_scratch(int64_t n, int end_bit, size_t *bytes);

/* keys_out = keys [n] in increasing order of their bits [0, end_bit),
 * positions_out[i] = the index in keys of keys_out[i]; the sort is stable,
 * so equal keys keep increasing positions. positions_in [n] is scratch
 * (it receives 0..n-1); tmp holds tmp_bytes of CUB's storage (at least
 * rp_cuda_sort_positions_scratch's). */
int rp_cuda_sort_positions(const int32_t *keys, int64_t n, int end_bit, int32_t *keys_out,
                           int32_t *positions_in, int32_t *positions_out, void *tmp,
                           size_t tmp_bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif
