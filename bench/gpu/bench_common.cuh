/* Shared helpers of the GPU benchmarks: error checks that stop the program
 * with the failing call named, a device summary, a no-GPU exit (77, the
 * automake "skipped" status, so scripts can tell "no GPU" from "broken"),
 * event timing with medians, and a hash-based fill that makes random-looking
 * values the host can recompute for any index (no host copy of the inputs is
 * needed to check a result). */
#ifndef RP_BENCH_GPU_COMMON_CUH
#define RP_BENCH_GPU_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RP_BENCH_NO_GPU 77

#define CK(call)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorString(e_));                                            \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

/* After a kernel launch: the launch error, then (debug) nothing else. */
#define CK_LAUNCH() CK(cudaGetLastError())

/* Selects device 0 and prints one line about it; exits 77 when there is none. */
static inline cudaDeviceProp rp_bench_device(const char *prog)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("%s: no CUDA device (%s); nothing measured\n", prog,
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        exit(RP_BENCH_NO_GPU);
    }
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    CK(cudaSetDevice(0));
    size_t fr = 0, tot = 0;
    CK(cudaMemGetInfo(&fr, &tot));
    printf("%s: device 0: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f free), L2 %.0f MB\n", prog, p.name,
           p.major, p.minor, p.multiProcessorCount, tot / 1073741824.0, fr / 1073741824.0,
           p.l2CacheSize / 1e6);
    return p;
}

/* splitmix64 finaliser: a good 64-bit mix, cheap on both sides. */
__host__ __device__ static inline uint64_t rp_bench_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Value i of stream `seed`, uniform in [-1, 1) and exactly representable in
 * bf16 (8 significant bits), so host and device agree bit for bit. */
__host__ __device__ static inline float rp_bench_value(uint64_t seed, uint64_t i)
{
    uint64_t h = rp_bench_mix(seed * 0x100000001b3ull ^ rp_bench_mix(i));
    int q = (int)(h >> 56) - 128;  /* -128..127 */
    return (float)q / 128.0f;
}

__global__ static void rp_bench_fill_bf16(__nv_bfloat16 *x, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16(rp_bench_value(seed, i));
}

static inline void rp_bench_fill(__nv_bfloat16 *x, size_t n, uint64_t seed)
{
    rp_bench_fill_bf16<<<1024, 256>>>(x, n, seed);
    CK_LAUNCH();
}

static int rp_bench_cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static inline float rp_bench_median(float *v, int n)
{
    qsort(v, n, sizeof *v, rp_bench_cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

#endif
