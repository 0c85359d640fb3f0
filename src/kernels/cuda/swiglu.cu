#include "kernels/cuda/common.cuh"
#include "kernels/cuda/swiglu.h"

/* An input element as fp32: bf16 widens exactly, so a bf16 input runs the
 * same fp32 math as its fp32 value would. */
static __device__ __forceinline__ float widen(float v) { return v; }
static __device__ __forceinline__ float widen(rp_bf16_t v) { return __bfloat162float(v); }

/* Element i of the contiguous [rows, cols] m and dm is element (i / cols,
 * i % cols) of g, u, dg, du at their row stride ld: ld == cols is the
 * contiguous layout, index for index. A 64-bit division is a long software
 * sequence on the GPU, as long as the kernel's memory time per element, so
 * indices that fit in 32 bits (a chunk of 4096 tokens of I = 6144 has 25 M)
 * divide in 32 bits. */
static __device__ __forceinline__ int64_t strided(int64_t i, int64_t cols, int64_t ld)
{
    if (ld == cols)
        return i;
    if (i <= (int64_t)UINT32_MAX && cols <= (int64_t)UINT32_MAX) {
        const uint32_t row = (uint32_t)i / (uint32_t)cols;
        return (int64_t)row * ld + ((uint32_t)i - row * (uint32_t)cols);
    }
    return i / cols * ld + i % cols;
}

template <typename GU>
static __global__ void fwd_kernel(const GU *g, const GU *u, int64_t ld, float *m, rp_bf16_t *mb,
                                  int64_t cols, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = strided(i, cols, ld);
        float gi = widen(g[s]);
        float v = gi / (1.0f + expf(-gi)) * widen(u[s]);
        if (m)
            m[i] = v;
        if (mb)
            mb[i] = __float2bfloat16_rn(v);
    }
}

template <typename GU, typename DM>
static __global__ void bwd_kernel(const GU *g, const GU *u, int64_t ld, const DM *dm, float *dg,
                                  rp_bf16_t *dgb, float *du, rp_bf16_t *dub, int64_t cols,
                                  int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t s = strided(i, cols, ld);
        const float gi = widen(g[s]), ui = widen(u[s]), d = widen(dm[i]);
        const float e = expf(-gi), sg = 1.0f / (1.0f + e), silu = gi / (1.0f + e);
        const float a = d * ui * (sg * (1.0f + gi * (1.0f - sg)));
        const float b = d * silu;
        if (dg)
            dg[s] = a;
        if (dgb)
            dgb[s] = __float2bfloat16_rn(a);
        if (du)
            du[s] = b;
        if (dub)
            dub[s] = __float2bfloat16_rn(b);
    }
}

extern "C" int rp_cuda_swiglu_forward(const void *g, const void *u, int gu_bf16, int64_t ld,
                                      float *m, uint16_t *m_bf16, int64_t rows, int64_t cols,
                                      void *stream)
{
    const int64_t n = rows * cols;
    if (n <= 0)
        return 0;
    rp_bf16_t *mb = reinterpret_cast<rp_bf16_t *>(m_bf16);
    const unsigned grid = rp_grid_for(n, 256);
    if (gu_bf16)
        fwd_kernel<<<grid, 256, 0, rp_stream(stream)>>>(static_cast<const rp_bf16_t *>(g),
                                                        static_cast<const rp_bf16_t *>(u), ld, m,
                                                        mb, cols, n);
    else
        fwd_kernel<<<grid, 256, 0, rp_stream(stream)>>>(static_cast<const float *>(g),
                                                        static_cast<const float *>(u), ld, m, mb,
                                                        cols, n);
    return rp_launch_status();
}

/* The backward over g, u of type GU, dm read as dm_bf16 says. */
template <typename GU>
static void launch_bwd(const GU *g, const GU *u, int64_t ld, const void *dm, int dm_bf16,
                       float *dg, rp_bf16_t *dgb, float *du, rp_bf16_t *dub, int64_t cols,
                       int64_t n, cudaStream_t stream)
{
    const unsigned grid = rp_grid_for(n, 256);
    if (dm_bf16)
        bwd_kernel<<<grid, 256, 0, stream>>>(g, u, ld, static_cast<const rp_bf16_t *>(dm), dg,
                                             dgb, du, dub, cols, n);
    else
        bwd_kernel<<<grid, 256, 0, stream>>>(g, u, ld, static_cast<const float *>(dm), dg, dgb,
                                             du, dub, cols, n);
}

extern "C" int rp_cuda_swiglu_backward(const void *g, const void *u, int gu_bf16, int64_t ld,
                                       const void *dm, int dm_bf16, float *dg, uint16_t *dg_bf16,
                                       float *du, uint16_t *du_bf16, int64_t rows, int64_t cols,
                                       void *stream)
{
    const int64_t n = rows * cols;
    if (n <= 0)
        return 0;
    rp_bf16_t *dgb = reinterpret_cast<rp_bf16_t *>(dg_bf16),
              *dub = reinterpret_cast<rp_bf16_t *>(du_bf16);
    if (gu_bf16)
        launch_bwd(static_cast<const rp_bf16_t *>(g), static_cast<const rp_bf16_t *>(u), ld, dm,
                   dm_bf16, dg, dgb, du, dub, cols, n, rp_stream(stream));
    else
        launch_bwd(static_cast<const float *>(g), static_cast<const float *>(u), ld, dm, dm_bf16,
                   dg, dgb, du, dub, cols, n, rp_stream(stream));
    return rp_launch_status();
}

/* gpt-oss's clamped SwiGLU: the CPU op's formulas (kernels/cpu/swiglu.c) in
 * the same fp32 operations and order, none contracted; the device's expf
 * is not the C library's, so the results differ in the last bits. */
static __global__ void clamped_fwd_kernel(const float *g, const float *u, float limit, float alpha,
                                          float *m, rp_bf16_t *mb, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float gate = g[i] > limit ? limit : g[i];
        const float up = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
        const float sig = 1.0f / (1.0f + expf(-__fmul_rn(gate, alpha)));
        const float glu = __fmul_rn(gate, sig);
        const float v = __fmul_rn(__fadd_rn(up, 1.0f), glu);
        if (m)
            m[i] = v;
        if (mb)
            mb[i] = __float2bfloat16_rn(v);
    }
}

static __global__ void clamped_bwd_kernel(const float *g, const float *u, float limit, float alpha,
                                          const float *dm, float *dg, rp_bf16_t *dgb, float *du,
                                          rp_bf16_t *dub, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float gi = g[i], ui = u[i], d = dm[i];
        const float gate = gi > limit ? limit : gi;
        const float up = ui > limit ? limit : ui < -limit ? -limit : ui;
        const float sig = 1.0f / (1.0f + expf(-__fmul_rn(gate, alpha)));
        /* d(gate sig)/d gate = sig (1 + alpha gate (1 - sig)) */
        const float dglu = __fmul_rn(
            sig, __fadd_rn(1.0f, __fmul_rn(__fmul_rn(alpha, gate), __fsub_rn(1.0f, sig))));
        const float a = gi > limit ? 0.0f : __fmul_rn(__fmul_rn(d, __fadd_rn(up, 1.0f)), dglu);
        const float b = ui > limit || ui < -limit ? 0.0f : __fmul_rn(d, __fmul_rn(gate, sig));
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

extern "C" int rp_cuda_swiglu_clamped_forward(const float *g, const float *u, float limit,
                                              float alpha, float *m, uint16_t *m_bf16, int64_t n,
                                              void *stream)
{
    if (n <= 0)
        return 0;
    clamped_fwd_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(
        g, u, limit, alpha, m, reinterpret_cast<rp_bf16_t *>(m_bf16), n);
    return rp_launch_status();
}

extern "C" int rp_cuda_swiglu_clamped_backward(const float *g, const float *u, float limit,
                                               float alpha, const float *dm, float *dg,
                                               uint16_t *dg_bf16, float *du, uint16_t *du_bf16,
                                               int64_t n, void *stream)
{
    if (n <= 0)
        return 0;
    clamped_bwd_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(
        g, u, limit, alpha, dm, dg, reinterpret_cast<rp_bf16_t *>(dg_bf16), du,
        reinterpret_cast<rp_bf16_t *>(du_bf16), n);
    return rp_launch_status();
}
