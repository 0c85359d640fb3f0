#include "kernels/cpu/linear.h"

#include <cblas.h>
#include <stdlib.h>

#include "core/dtype.h"

/* b[i] += bias, row by row (torch's addmm adds the bias after the product). */
static void add_bias(float *y, const float *b, int64_t rows, int64_t out)
{
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * out;
        for (int64_t j = 0; j < out; j++)
            yr[j] += b[j];
    }
}

/* This thread's block for widened weights (made once, kept: a GEMM runs
 * every layer, and its size does not depend on the shape). */
static float *widen_block(void)
{
    static _Thread_local float *block;
    if (!block)
        block = malloc(RP_LINEAR_WIDEN_FLOATS * sizeof(float));
    return block;
}

void rp_linear_forward(const float *x, const float *W, const float *b, float *y, int64_t rows,
                       int64_t in, int64_t out)
{
    if (rows <= 0 || out <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)out, (int)in, 1.0f, x,
                (int)in, W, (int)in, 0.0f, y, (int)out);
    if (b)
        add_bias(y, b, rows, out);
}

int rp_linear_forward_bf16(const float *x, const uint16_t *W, const float *b, float *y,
                           int64_t rows, int64_t in, int64_t out)
{
    if (rows <= 0 || out <= 0)
        return 0;
    float *wf = widen_block();
    if (!wf)
        return -1;
    int64_t step = (int64_t)RP_LINEAR_WIDEN_FLOATS / (in > 0 ? in : 1);
    step = step < 1 ? 1 : step; /* in never exceeds the block in a real model */
    for (int64_t j0 = 0; j0 < out; j0 += step) { /* rows j0.. of W: columns j0.. of y */
        int64_t n = out - j0 < step ? out - j0 : step;
        rp_bf16_to_f32_array(W + j0 * in, wf, (size_t)(n * in));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n, (int)in, 1.0f, x,
                    (int)in, wf, (int)in, 0.0f, y + j0, (int)out);
    }
    if (b)
        add_bias(y, b, rows, out);
    return 0;
}

void rp_linear_backward_input(const float *dy, const float *W, float *dx, int64_t rows, int64_t in,
                              int64_t out, int accumulate)
{
    if (rows <= 0 || in <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)in, (int)out, 1.0f, dy,
                (int)out, W, (int)in, accumulate ? 1.0f : 0.0f, dx, (int)in);
}

int rp_linear_backward_input_bf16(const float *dy, const uint16_t *W, float *dx, int64_t rows,
                                  int64_t in, int64_t out, int accumulate)
{
    if (rows <= 0 || in <= 0)
        return 0;
    float *wf = widen_block();
    if (!wf)
        return -1;
    int64_t step = (int64_t)RP_LINEAR_WIDEN_FLOATS / (out > 0 ? out : 1);
    step = step < 1 ? 1 : step;
    for (int64_t c0 = 0; c0 < in; c0 += step) { /* columns c0.. of W and of dx */
        int64_t n = in - c0 < step ? in - c0 : step;
        if (n == in) /* the whole of W: one widening */
            rp_bf16_to_f32_array(W, wf, (size_t)(out * in));
        else /* columns c0.. of each row (a call per row would enter a parallel region each) */
            for (int64_t o = 0; o < out; o++)
                for (int64_t i = 0; i < n; i++)
                    wf[o * n + i] = rp_bf16_to_f32(W[o * in + c0 + i]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)n, (int)out, 1.0f,
                    dy, (int)out, wf, (int)n, accumulate ? 1.0f : 0.0f, dx + c0, (int)in);
    }
    return 0;
}

void rp_linear_backward_weight(const float *dy, const float *x, float *dW, float *db, int64_t rows,
                               int64_t in, int64_t out)
{
    if (rows <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)out, (int)in, (int)rows, 1.0f, dy,
                (int)out, x, (int)in, 1.0f, dW, (int)in);
    if (db)
        rp_colsum_accumulate(dy, rows, out, db);
}

/* Columns are dealt to threads in fixed chunks; each thread sums its columns
 * over all rows in row order, so the result does not depend on scheduling. */
void rp_colsum_accumulate(const float *src, int64_t rows, int64_t cols, float *dst)
{
    const int64_t cw = 64;
    const int64_t nchunks = (cols + cw - 1) / cw;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t j0 = c * cw, j1 = j0 + cw < cols ? j0 + cw : cols;
        float acc[64];
        for (int64_t j = j0; j < j1; j++)
            acc[j - j0] = dst[j];
        for (int64_t r = 0; r < rows; r++) {
            const float *s = src + r * cols;
            for (int64_t j = j0; j < j1; j++)
                acc[j - j0] += s[j];
        }
        for (int64_t j = j0; j < j1; j++)
            dst[j] = acc[j - j0];
    }
}
