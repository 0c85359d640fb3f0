/* Shared by the .cu files of src/kernels/cuda (C++ only, never included by
 * C): the bf16 element type behind the C headers' uint16_t, stream casts
 * and launch helpers. Every entry point returns the cudaError_t of its
 * launch (cudaSuccess = 0), so a C caller needs no CUDA types. */
#ifndef RP_KERNELS_CUDA_COMMON_CUH
#define RP_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

typedef __nv_bfloat16 rp_bf16_t;

static inline cudaStream_t rp_stream(void *s)
{
    return (cudaStream_t)s;
}

/* Blocks of `threads` covering n elements with a grid-stride loop: at most
 * 65535 * 8 blocks, enough to fill any GPU. */
static inline unsigned rp_grid_for(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1)
        b = 1;
    if (b > 65535 * 8)
        b = 65535 * 8;
    return (unsigned)b;
}

static inline int rp_launch_status(void)
{
    return (int)cudaGetLastError();
}

/* Sum over the warp (all 32 lanes take part). */
__device__ __forceinline__ float rp_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Block-wide sum of one float per thread, blockDim.x a multiple of 32 and
 * at most 1024; every thread gets the result. The order of additions is
 * fixed by the launch shape, so results repeat bit for bit. */
__device__ __forceinline__ float rp_block_sum(float v, float *smem32)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = rp_warp_sum(v);
    __syncthreads(); /* smem32 may still be read from a previous call */
    if (lane == 0)
        smem32[warp] = v;
    __syncthreads();
    float t = lane < nw ? smem32[lane] : 0.0f;
    return rp_warp_sum(t);
}

#endif
