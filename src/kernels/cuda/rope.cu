#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.h"

static __global__ void table_kernel(float *cs, const float *inv_freq, int64_t seqlen, int64_t half)
{
    const int64_t n = seqlen * half;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = k / half, i = k % half;
        /* the angle rounded as the CPU's; cosf and sinf are the device's */
        float a = __fmul_rn((float)p, inv_freq[i]);
        cs[k] = cosf(a);
        cs[n + k] = sinf(a);
    }
}

extern "C" int rp_cuda_rope_table(float *cs, const float *inv_freq, int64_t seqlen, int64_t half,
                                  void *stream)
{
    if (seqlen <= 0 || half <= 0)
        return 0;
    table_kernel<<<rp_grid_for(seqlen * half, 256), 256, 0, rp_stream(stream)>>>(cs, inv_freq,
                                                                                  seqlen, half);
    return rp_launch_status();
}

/* One thread per (token, head, i < half) pair. */
static __global__ void apply_kernel(float *x, rp_bf16_t *xb, const float *cs, int64_t T,
                                    int64_t seqlen, const int32_t *seg_start, int64_t nheads,
                                    int64_t head_dim, int inverse)
{
    const int64_t half = head_dim / 2, n = T * nheads * half;
    const float *sn = cs + seqlen * half;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = k % half, th = k / half; /* th = t * nheads + h */
        const int64_t t = th / nheads;
        const int64_t p = t % seqlen - (seg_start ? seg_start[t] : 0);
        const float c = cs[p * half + i], s = sn[p * half + i];
        const int64_t a = th * head_dim + i, b = a + half;
        const float x1 = x[a], x2 = x[b];
        float y1, y2;
        if (!inverse) {
            y1 = x1 * c - x2 * s;
            y2 = x2 * c + x1 * s;
        } else {
            y1 = x1 * c + x2 * s;
            y2 = x2 * c - x1 * s;
        }
        x[a] = y1;
        x[b] = y2;
        if (xb) {
            xb[a] = __float2bfloat16_rn(y1);
            xb[b] = __float2bfloat16_rn(y2);
        }
    }
}

extern "C" int rp_cuda_rope_apply(float *x, uint16_t *x_bf16, const float *cs, int64_t nseq,
                                  int64_t seqlen, const int32_t *seg_start, int64_t nheads,
                                  int64_t head_dim, int inverse, void *stream)
{
    const int64_t n = nseq * seqlen * nheads * (head_dim / 2);
    if (n <= 0)
        return 0;
    apply_kernel<<<rp_grid_for(n, 256), 256, 0, rp_stream(stream)>>>(
        x, reinterpret_cast<rp_bf16_t *>(x_bf16), cs, nseq * seqlen, seqlen, seg_start, nheads,
        head_dim, inverse);
    return rp_launch_status();
}
