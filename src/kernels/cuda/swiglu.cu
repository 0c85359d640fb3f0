#include "kernels/cuda/common.cuh"
#include "kernels/cuda/swiglu.h"

static __global__ void fwd_kernel(const float *g, const float *u, float *m, rp_bf16_t *mb,
                                  int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float v = gi / (1.0f + expf(-gi)) * u[i];
        if (m)
            m[i] = v;
        if (mb)
            mb[i] = __float2bfloat16_rn(v);
    }
}

static __global__ void bwd_kernel(const float *g, const float *u, const float *dm, float *dg,
                                  rp_bf16_t *dgb, float *du, rp_bf16_t *dub, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float gi = g[i], ui = u[i], d = dm[i];
        const float e = expf(-gi), sg = 1.0f / (1.0f + e), silu = gi / (1.0f + e);
        const float a = d * ui * (sg * (1.0f + gi * (1.0f - sg)));
        const float b = d * silu;
        if (dg)
            dg[i] = a;
        if (dgb)
            dgb[i] = __float2bfloat16_rn(a);
        if (du)
            du[i] = b;
        if (dub)
            dub[i] = __float2bfloat16_rn(b);
    }
}

extern "C" int rp_cuda_swiglu_forward(const float *g, const float *u, float *m, uint16_t *m_bf16,
                                      int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    fwd_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(
        g, u, m, reinterpret_cast<rp_bf16_t *>(m_bf16), n);
    return rp_launch_status();
}

extern "C" int rp_cuda_swiglu_backward(const float *g, const float *u, const float *dm, float *dg,
                                       uint16_t *dg_bf16, float *du, uint16_t *du_bf16, int64_t n,
                                       void *stream)
{
    if (n <= 0)
        return 0;
    bwd_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(
        g, u, dm, dg, reinterpret_cast<rp_bf16_t *>(dg_bf16), du,
        reinterpret_cast<rp_bf16_t *>(du_bf16), n);
    return rp_launch_status();
}
