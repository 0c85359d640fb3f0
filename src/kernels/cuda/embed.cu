#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embed.h"
#include "kernels/cuda/sort.h"

static __global__ void first_bad_kernel(const int32_t *tokens, const uint8_t *mask, int64_t T,
                                        int64_t limit, unsigned long long *first_bad)
{
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < T;
         t += (int64_t)gridDim.x * blockDim.x) {
        if (mask && !mask[t])
            continue;
        int32_t v = tokens[t];
        if (v < 0 || (int64_t)v >= limit)
            atomicMin(first_bad, (unsigned long long)t);
    }
}

extern "C" int rp_cuda_tokens_first_bad(const int32_t *tokens, const uint8_t *mask, int64_t T,
                                        int64_t limit, unsigned long long *first_bad,
                                        void *stream)
{
    cudaError_t e = cudaMemsetAsync(first_bad, 0xff, sizeof *first_bad, rp_stream(stream));
    if (e != cudaSuccess || T <= 0)
        return (int)e;
    first_bad_kernel<<<rp_grid_for(T, 256), 256, 0, rp_stream(stream)>>>(tokens, mask, T, limit,
                                                                          first_bad);
    return rp_launch_status();
}

static __global__ void gather_kernel(const float *W, const int32_t *tokens, int64_t H, float *out)
{
    const int64_t t = blockIdx.x;
    const float *src = W + (int64_t)tokens[t] * H;
    float *dst = out + t * H;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
        dst[j] = src[j];
}

extern "C" int rp_cuda_embed_forward(const float *W, const int32_t *tokens, int64_t T, int64_t H,
                                     float *out, void *stream)
{
    if (T <= 0)
        return 0;
    gather_kernel<<<(unsigned)T, 256, 0, rp_stream(stream)>>>(W, tokens, H, out);
    return rp_launch_status();
}

/* the same gather from a bf16 table, widened exactly to fp32 */
static __global__ void gather_bf16_kernel(const uint16_t *W, const int32_t *tokens, int64_t H,
                                          float *out)
{
    const int64_t t = blockIdx.x;
    const uint16_t *src = W + (int64_t)tokens[t] * H;
    float *dst = out + t * H;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x)
        dst[j] = __uint_as_float((unsigned)src[j] << 16);
}

extern "C" int rp_cuda_embed_forward_bf16(const uint16_t *W, const int32_t *tokens, int64_t T,
                                          int64_t H, float *out, void *stream)
{
    if (T <= 0)
        return 0;
    gather_bf16_kernel<<<(unsigned)T, 256, 0, rp_stream(stream)>>>(W, tokens, H, out);
    return rp_launch_status();
}

/* ---- backward ------------------------------------------------------------ */

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Scratch: positions in, keys out, positions out (T int32 each), then CUB's
 * temporary storage. */
extern "C" int rp_cuda_embed_backward_scratch(int64_t T, int64_t vocab, size_t *bytes)
{
    size_t cub_bytes = 0;
    int e = rp_cuda_sort_positions_scratch(T, rp_cuda_sort_key_bits(vocab), &cub_bytes);
    *bytes = 3 * align256((size_t)(T > 0 ? T : 1) * sizeof(int32_t)) + align256(cub_bytes);
    return e;
}

/* Block i owns the run of equal keys that starts at sorted index i (other
 * blocks exit at once); threads own columns. */
static __global__ void scatter_add_kernel(const int32_t *keys, const int32_t *pos, int64_t T,
                                          int64_t H, const float *dout, float *dW)
{
    const int64_t i = blockIdx.x;
    const int32_t v = keys[i];
    if (i > 0 && keys[i - 1] == v)
        return;
    float *row = dW + (int64_t)v * H;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        float acc = row[j];
        for (int64_t k = i; k < T && keys[k] == v; k++)
            acc += dout[(int64_t)pos[k] * H + j];
        row[j] = acc;
    }
}

extern "C" int rp_cuda_embed_backward(const int32_t *tokens, int64_t T, int64_t H, int64_t vocab,
                                      const float *dout, float *dW, void *scratch,
                                      size_t scratch_bytes, void *stream)
{
    if (T <= 0)
        return 0;
    cudaStream_t st = rp_stream(stream);
    const size_t part = align256((size_t)T * sizeof(int32_t));
    if (scratch_bytes < 3 * part)
        return (int)cudaErrorInvalidValue;
    char *base = (char *)scratch;
    int32_t *pos_in = (int32_t *)base, *keys_out = (int32_t *)(base + part),
            *pos_out = (int32_t *)(base + 2 * part);
    void *tmp = base + 3 * part;
    size_t tmp_bytes = scratch_bytes - 3 * part;
    int e = rp_cuda_sort_positions(tokens, T, rp_cuda_sort_key_bits(vocab), keys_out, pos_in,
                                   pos_out, tmp, tmp_bytes, stream);
    if (e != 0)
        return e;
    scatter_add_kernel<<<(unsigned)T, 128, 0, st>>>(keys_out, pos_out, T, H, dout, dW);
    return rp_launch_status();
}
