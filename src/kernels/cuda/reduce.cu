#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.h"

#define COLS 32 /* columns per block (one warp wide) */
#define LANES_Y 8

/* Block (cx, s): columns cx*32.. of rows in slice s; thread (tx, ty) sums
 * rows r0+ty, r0+ty+8, ...; then ty = 0 adds the 8 partial sums in order.
 * x/rstd NULL: a plain column sum. */
static __global__ void colsum_pass1(const float *a, const float *x, const float *rstd,
                                    int64_t rows, int64_t cols, float *partial)
{
    __shared__ float acc[LANES_Y][COLS + 1];
    const int64_t c = blockIdx.x * (int64_t)COLS + threadIdx.x;
    const int64_t per = (rows + RP_CUDA_COLSUM_SLICES - 1) / RP_CUDA_COLSUM_SLICES;
    const int64_t r0 = blockIdx.y * per, r1 = r0 + per < rows ? r0 + per : rows;
    float sum = 0.0f;
    if (c < cols)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += LANES_Y) {
            float v = a[r * cols + c];
            if (x)
                v = v * (x[r * cols + c] * rstd[r]);
            sum += v;
        }
    acc[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = 0.0f;
        for (int k = 0; k < LANES_Y; k++)
            t += acc[k][threadIdx.x];
        partial[(int64_t)blockIdx.y * cols + c] = t;
    }
}

static __global__ void colsum_pass2(const float *partial, int64_t cols, float *dst)
{
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols;
         c += (int64_t)gridDim.x * blockDim.x) {
        float t = 0.0f;
        for (int s = 0; s < RP_CUDA_COLSUM_SLICES; s++)
            t += partial[(int64_t)s * cols + c];
        dst[c] += t;
    }
}

static int run(const float *a, const float *x, const float *rstd, int64_t rows, int64_t cols,
               float *dst, float *partial, void *stream)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    dim3 grid((unsigned)((cols + COLS - 1) / COLS), RP_CUDA_COLSUM_SLICES);
    dim3 block(COLS, LANES_Y);
    colsum_pass1<<<grid, block, 0, rp_stream(stream)>>>(a, x, rstd, rows, cols, partial);
    int e = rp_launch_status();
    if (e)
        return e;
    colsum_pass2<<<rp_grid_for(cols, 256), 256, 0, rp_stream(stream)>>>(partial, cols, dst);
    return rp_launch_status();
}

extern "C" int rp_cuda_colsum_accumulate(const float *src, int64_t rows, int64_t cols, float *dst,
                                         float *partial, void *stream)
{
    return run(src, NULL, NULL, rows, cols, dst, partial, stream);
}

extern "C" int rp_cuda_rmsnorm_dw(const float *x, const float *rstd, const float *dy, int64_t rows,
                                  int64_t dim, float *dw, float *partial, void *stream)
{
    return run(dy, x, rstd, rows, dim, dw, partial, stream);
}
