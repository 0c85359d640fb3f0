/* Chunked softmax cross-entropy on the GPU; see xent.h for the contract. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "kernels/cuda/xent.h"

namespace {

constexpr int kThreads = 512; /* one block per row */
constexpr int kWarps = kThreads / 32;

/* Running (max, sum of exp(x - max)) of one thread; the sum in S: double
 * as in the CPU kernel, or float (xent.h's fp32_sums: no double arithmetic
 * per logit, which GeForce cards run at 1/64 of the float rate). -inf
 * entries add nothing; NaN entries make the sum NaN (the CPU kernel's loss
 * is NaN then too). */
template <typename S> struct lse_acc {
    float m;
    S s;
};

template <typename S> __device__ __forceinline__ void lse_add(lse_acc<S> &a, float x)
{
    if (x > a.m) {
        a.s = a.s * (S)expf(a.m - x) + (S)1; /* a.m = -inf: 0 * 0 + 1 */
        a.m = x;
    } else if (!(x == -INFINITY)) {
        a.s += (S)expf(x - a.m);
    }
}

template <typename S> __device__ __forceinline__ lse_acc<S> lse_merge(lse_acc<S> a, lse_acc<S> b)
{
    const float m = fmaxf(a.m, b.m);
    lse_acc<S> r;
    r.m = m;
    r.s = (a.m == -INFINITY ? (S)0 : a.s * (S)expf(a.m - m)) +
          (b.m == -INFINITY ? (S)0 : b.s * (S)expf(b.m - m));
    return r;
}

/* scale * softmax term of one logit; j == t also subtracts scale, in the
 * CPU kernel's order (multiply, then subtract; no fused multiply-add).
 * With double sums z - lse is formed in double as the CPU kernel forms it;
 * with float sums in float, lse rounded once per row. */
__device__ __forceinline__ float grad_of(float z, double lse, float scale, bool target)
{
    const float g = __fmul_rn(scale, expf((float)((double)z - lse)));
    return target ? __fsub_rn(g, scale) : g;
}

__device__ __forceinline__ float grad_of(float z, float lse, float scale, bool target)
{
    const float g = __fmul_rn(scale, expf(__fsub_rn(z, lse)));
    return target ? __fsub_rn(g, scale) : g;
}

/* Four bf16 in one 8-byte store. */
__device__ __forceinline__ void store_bf16x4(__nv_bfloat16 *p, float a, float b, float c,
                                             float d)
{
    __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
    uint2 v;
    v.x = *reinterpret_cast<uint32_t *>(&lo);
    v.y = *reinterpret_cast<uint32_t *>(&hi);
    *reinterpret_cast<uint2 *>(p) = v;
}

/* gb != NULL: the gradient goes there in bf16 (each fp32 value rounded to
 * nearest even, as the convert kernel rounds) and the fp32 row is only
 * read; else it overwrites the row in fp32. */
template <typename S>
__global__ void __launch_bounds__(kThreads)
    xent_rows_kernel(float *logits, int64_t vocab, const int32_t *targets, const uint8_t *counted,
                     float scale, int grad, double *loss_rows, __nv_bfloat16 *gb)
{
    const int64_t r = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float *z = logits + r * vocab;
    __nv_bfloat16 *zb = gb ? gb + r * vocab : NULL;
    if (counted && !counted[r]) {
        if (tid == 0)
            loss_rows[r] = 0.0;
        if (grad && zb)
            for (int64_t j = tid; j < vocab; j += kThreads)
                zb[j] = __float2bfloat16_rn(0.0f);
        else if (grad)
            for (int64_t j = tid; j < vocab; j += kThreads)
                z[j] = 0.0f;
        return;
    }
    const int32_t t = targets[r];
    const bool tok = t >= 0 && t < vocab;
    /* the order of the sums depends on this choice: it follows from vocab
     * and the logits' alignment alone, never from the row count; the
     * gradient is per element, the same bits by either path */
    const bool vec = (vocab & 3) == 0 && ((uintptr_t)z & 15) == 0;
    const bool vec_grad = vec && ((uintptr_t)zb & 7) == 0;
    const int64_t nv = vocab / 4;

    lse_acc<S> a = {-INFINITY, (S)0};
    if (vec) {
        const float4 *z4 = reinterpret_cast<const float4 *>(z);
        for (int64_t j = tid; j < nv; j += kThreads) {
            const float4 x = z4[j];
            lse_add(a, x.x);
            lse_add(a, x.y);
            lse_add(a, x.z);
            lse_add(a, x.w);
        }
    } else {
        for (int64_t j = tid; j < vocab; j += kThreads)
            lse_add(a, z[j]);
    }
    /* fixed reduction tree: warps by shuffles, then warp 0 over the warps */
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        lse_acc<S> b;
        b.m = __shfl_xor_sync(0xffffffffu, a.m, off);
        b.s = __shfl_xor_sync(0xffffffffu, a.s, off);
        a = lse_merge(a, b);
    }
    __shared__ float sm[kWarps];
    __shared__ S ss[kWarps];
    __shared__ S s_lse;
    if (lane == 0) {
        sm[warp] = a.m;
        ss[warp] = a.s;
    }
    __syncthreads();
    if (warp == 0) {
        lse_acc<S> w = {-INFINITY, (S)0};
        if (lane < kWarps) {
            w.m = sm[lane];
            w.s = ss[lane];
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            lse_acc<S> b;
            b.m = __shfl_xor_sync(0xffffffffu, w.m, off);
            b.s = __shfl_xor_sync(0xffffffffu, w.s, off);
            w = lse_merge(w, b);
        }
        if (lane == 0) {
            /* the row's loss in double either way (one per row) */
            const double lse = (double)w.m + log((double)w.s);
            s_lse = (S)lse;
            /* z[t] is read here, before the barrier that precedes any write */
            loss_rows[r] = tok ? lse - (double)z[t] : (double)NAN;
        }
    }
    __syncthreads();
    if (!grad)
        return;
    const S lse = s_lse;
    if (vec_grad) {
        float4 *z4 = reinterpret_cast<float4 *>(z);
        for (int64_t j = tid; j < nv; j += kThreads) {
            float4 x = z4[j];
            const int64_t j0 = 4 * j;
            x.x = grad_of(x.x, lse, scale, tok && j0 == t);
            x.y = grad_of(x.y, lse, scale, tok && j0 + 1 == t);
            x.z = grad_of(x.z, lse, scale, tok && j0 + 2 == t);
            x.w = grad_of(x.w, lse, scale, tok && j0 + 3 == t);
            if (zb)
                store_bf16x4(zb + j0, x.x, x.y, x.z, x.w);
            else
                z4[j] = x;
        }
    } else if (zb) {
        for (int64_t j = tid; j < vocab; j += kThreads)
            zb[j] = __float2bfloat16_rn(grad_of(z[j], lse, scale, tok && j == t));
    } else {
        for (int64_t j = tid; j < vocab; j += kThreads)
            z[j] = grad_of(z[j], lse, scale, tok && j == t);
    }
}

/* *sum += rows[0] + rows[1] + ... left to right (one thread: the order is
 * head.c's token order). */
__global__ void ordered_sum_kernel(const double *rows, int64_t n, double *sum)
{
    double acc = *sum;
    for (int64_t i = 0; i < n; i++)
        acc += rows[i];
    *sum = acc;
}

constexpr int kCheckThreads = 1024;

__global__ void __launch_bounds__(kCheckThreads)
    check_targets_kernel(const int32_t *targets, const uint8_t *mask, int64_t T, int64_t vocab,
                         int64_t *out)
{
    __shared__ int64_t best[kCheckThreads / 32];
    const int tid = threadIdx.x;
    int64_t mine = INT64_MAX;
    for (int64_t t = tid; t < T; t += kCheckThreads) {
        if (mask && !mask[t])
            continue;
        const int32_t x = targets[t];
        if (x < 0 || x >= vocab) {
            mine = t; /* the first of this thread's positions */
            break;
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const int64_t o = __shfl_xor_sync(0xffffffffu, mine, off);
        mine = o < mine ? o : mine;
    }
    if ((tid & 31) == 0)
        best[tid >> 5] = mine;
    __syncthreads();
    if (tid == 0) {
        int64_t b = INT64_MAX;
        for (int w = 0; w < kCheckThreads / 32; w++)
            b = best[w] < b ? best[w] : b;
        out[0] = b == INT64_MAX ? -1 : b;
        out[1] = b == INT64_MAX ? 0 : (int64_t)targets[b];
    }
}

int fail(const char **why, const char *msg)
{
    if (why)
        *why = msg;
    return -1;
}

int cuda_fail(const char **why, cudaError_t e)
{
    if (why)
        *why = cudaGetErrorString(e);
    return -2;
}

} // namespace

extern "C" int rp_cuda_xent_chunk(float *logits, int64_t rows, int64_t vocab,
                                  const int32_t *targets, const uint8_t *counted, float scale,
                                  int grad, void *dlogits_bf16, int fp32_sums,
                                  double *loss_rows, double *loss_sum, cudaStream_t stream,
                                  const char **why)
{
    if (rows < 0 || rows > INT32_MAX || vocab < 1)
        return fail(why, "xent: rows must be in [0, 2^31) and vocab >= 1");
    if (rows == 0)
        return 0;
    if (!logits || !targets || !loss_rows)
        return fail(why, "xent: logits, targets and loss_rows must be set");
    __nv_bfloat16 *gb = grad ? static_cast<__nv_bfloat16 *>(dlogits_bf16) : NULL;
    if (fp32_sums)
        xent_rows_kernel<float><<<(unsigned)rows, kThreads, 0, stream>>>(
            logits, vocab, targets, counted, scale, grad, loss_rows, gb);
    else
        xent_rows_kernel<double><<<(unsigned)rows, kThreads, 0, stream>>>(
            logits, vocab, targets, counted, scale, grad, loss_rows, gb);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && loss_sum) {
        ordered_sum_kernel<<<1, 1, 0, stream>>>(loss_rows, rows, loss_sum);
        e = cudaGetLastError();
    }
    return e == cudaSuccess ? 0 : cuda_fail(why, e);
}

extern "C" int rp_cuda_xent_check_targets(const int32_t *targets, const uint8_t *mask, int64_t T,
                                          int64_t vocab, int64_t *scratch, int64_t *bad_pos,
                                          int32_t *bad_target, cudaStream_t stream,
                                          const char **why)
{
    if (T < 0 || vocab < 1 || !bad_pos || !bad_target)
        return fail(why, "xent check: T must be >= 0, vocab >= 1, results set");
    *bad_pos = -1;
    *bad_target = 0;
    if (T == 0)
        return 0;
    if (!targets || !scratch)
        return fail(why, "xent check: targets and scratch must be set");
    int64_t host[2] = {-1, 0};
    check_targets_kernel<<<1, kCheckThreads, 0, stream>>>(targets, mask, T, vocab, scratch);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(host, scratch, sizeof host, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        return cuda_fail(why, e);
    *bad_pos = host[0];
    *bad_target = (int32_t)host[1];
    return 0;
}
