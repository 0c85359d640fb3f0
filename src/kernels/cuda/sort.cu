/* CUB's radix sort of (key, position) pairs, instantiated once (sort.h). */
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sort.h"

extern "C" int rp_cuda_sort_key_bits(int64_t count)
{
    int b = 1;
    while (b < 31 && ((int64_t)1 << b) < count)
        b++;
    return b;
}

extern "C" int rp_cuda_sort_positions_scratch(int64_t n, int end_bit, size_t *bytes)
{
    *bytes = 0;
    return (int)cub::DeviceRadixSort::SortPairs(
        nullptr, *bytes, (const int32_t *)nullptr, (int32_t *)nullptr, (const int32_t *)nullptr,
        (int32_t *)nullptr, (int)(n > 0 ? n : 1), 0, end_bit);
}

static __global__ void iota_kernel(int32_t *v, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        v[i] = (int32_t)i;
}

extern "C" int rp_cuda_sort_positions(const int32_t *keys, int64_t n, int end_bit,
                                      int32_t *keys_out, int32_t *positions_in,
                                      int32_t *positions_out, void *tmp, size_t tmp_bytes,
                                      void *stream)
{
    if (n <= 0)
        return 0;
    if (n > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    cudaStream_t st = rp_stream(stream);
    iota_kernel<<<rp_grid_for(n, 256), 256, 0, st>>>(positions_in, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return (int)e;
    return (int)cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, keys, keys_out, positions_in,
                                                positions_out, (int)n, 0, end_bit, st);
}
