#include "core/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/lora.h"

static __global__ void scaled_add_kernel(const float *x, float alpha, float *y, rp_bf16_t *yb,
                                         int64_t n, int accumulate)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float product = __fmul_rn(alpha, x[i]);
        const float v = accumulate ? __fadd_rn(y[i], product) : product;
        if (y)
            y[i] = v;
        if (yb)
            yb[i] = __float2bfloat16_rn(v);
    }
}

/* a value of x or y as fp32 (bf16 widens exactly), and back */
static __device__ __forceinline__ float load_f32(const float *p)
{
    return *p;
}
static __device__ __forceinline__ float load_f32(const rp_bf16_t *p)
{
    return __bfloat162float(*p);
}
static __device__ __forceinline__ void store_f32(float *p, float v)
{
    *p = v;
}
static __device__ __forceinline__ void store_f32(rp_bf16_t *p, float v)
{
    *p = __float2bfloat16_rn(v);
}

/* One block per row at a time (grid-stride over rows): a row lies in one
 * sample, so its stream is hashed once per thread and row. */
template <typename T>
static __global__ void dropout_kernel(rp_dropout_site site, float scale, const T *x, T *y,
                                      int64_t rows, int64_t cols, int accumulate)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t row = site.first_row + r; /* from the start of first_sample */
        const int64_t sample = site.first_sample + row / site.rows_per_sample;
        const uint64_t stream = rp_dropout_stream(site.step, sample, site.layer, site.proj);
        const uint64_t first = (uint64_t)((row % site.rows_per_sample) * cols);
        const T *xr = x + r * cols;
        T *yr = y + r * cols;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const int keep = rp_philox_uniform(site.seed, stream, first + (uint64_t)c) >= site.p;
            const float value = keep ? __fmul_rn(load_f32(xr + c), scale) : 0.0f;
            store_f32(yr + c, accumulate ? __fadd_rn(load_f32(yr + c), value) : value);
        }
    }
}

static unsigned rows_grid(int64_t rows)
{
    return (unsigned)(rows < 65535 * 8 ? rows : 65535 * 8);
}

extern "C" int rp_cuda_scaled_add(const float *x, float alpha, float *y, uint16_t *y_bf16,
                                  int64_t n, int accumulate, void *stream)
{
    if (n <= 0)
        return 0;
    scaled_add_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(
        x, alpha, y, reinterpret_cast<rp_bf16_t *>(y_bf16), n, accumulate);
    return rp_launch_status();
}

extern "C" int rp_cuda_dropout_f32(const rp_dropout_site *site, float scale, const float *x,
                                   float *y, int64_t rows, int64_t cols, int accumulate,
                                   void *stream)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    dropout_kernel<float><<<rows_grid(rows), 256, 0, rp_stream(stream)>>>(*site, scale, x, y,
                                                                          rows, cols, accumulate);
    return rp_launch_status();
}

extern "C" int rp_cuda_dropout_bf16(const rp_dropout_site *site, float scale, const uint16_t *x,
                                    uint16_t *y, int64_t rows, int64_t cols, void *stream)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    dropout_kernel<rp_bf16_t><<<rows_grid(rows), 256, 0, rp_stream(stream)>>>(
        *site, scale, reinterpret_cast<const rp_bf16_t *>(x), reinterpret_cast<rp_bf16_t *>(y),
        rows, cols, 0);
    return rp_launch_status();
}
