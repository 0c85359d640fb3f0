#include <cuda_runtime.h>

#include "kernels/cuda/cuda_probe.h"

/* A failed call's error, given back through why, is also the host
 * thread's last error until someone reads it; the kernel ops' launch checks
 * (cudaGetLastError) would report it as their own failure, and the callers
 * go on where a probe fails (a PCI bus id not known: no binding near the
 * GPU), so each failure here clears it. */
static const char *failed(cudaError_t e)
{
    cudaGetLastError();
    return cudaGetErrorString(e);
}

extern "C" int rp_cuda_device_count(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        *why = failed(e);
        return -1;
    }
    *why = n ? "" : "no CUDA device visible";
    return n;
}

extern "C" void rp_cuda_versions(int *built, int *runtime, int *driver)
{
    *built = CUDART_VERSION;
    if (cudaRuntimeGetVersion(runtime) != cudaSuccess)
        *runtime = 0;
    if (cudaDriverGetVersion(driver) != cudaSuccess)
        *driver = 0;
}

extern "C" int rp_cuda_device_info(int dev, char *name, int name_len, unsigned long long *total_mem,
                                   int *sm_major, int *sm_minor, const char **why)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess) {
        *why = failed(e);
        return -1;
    }
    int i = 0;
    for (; i < name_len - 1 && p.name[i]; i++)
        name[i] = p.name[i];
    name[i] = '\0';
    *total_mem = p.totalGlobalMem;
    *sm_major = p.major;
    *sm_minor = p.minor;
    return 0;
}

extern "C" int rp_cuda_device_free_memory(int dev, unsigned long long *free_mem, const char **why)
{
    size_t fr = 0, total = 0;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess)
        e = cudaMemGetInfo(&fr, &total);
    if (e != cudaSuccess) {
        *why = failed(e);
        return -1;
    }
    *free_mem = fr;
    return 0;
}

extern "C" int rp_cuda_device_busid(int dev, char *busid, int len, const char **why)
{
    cudaError_t e = cudaDeviceGetPCIBusId(busid, len, dev);
    if (e != cudaSuccess) {
        *why = failed(e);
        return -1;
    }
    return 0;
}

static __global__ void saxpy_kernel(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i] + y[i];
}

extern "C" int rp_cuda_saxpy_smoke(int dev, int n, float a, const float *x, float *y,
                                   const char **why)
{
    float *dx = nullptr, *dy = nullptr;
    size_t bytes = (size_t)n * sizeof(float);
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaMalloc(&dx, bytes);
    if (e == cudaSuccess) e = cudaMalloc(&dy, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        saxpy_kernel<<<(n + 255) / 256, 256>>>(n, a, dx, dy);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost);
    cudaFree(dx);
    cudaFree(dy);
    if (e != cudaSuccess) {
        *why = failed(e);
        return -1;
    }
    return 0;
}
