#include "kernels/cpu/linear.h"

#include <cblas.h>

void rp_linear_forward(const float *x, const float *W, const float *b, float *y, int64_t rows,
                       int64_t in, int64_t out)
{
    if (rows <= 0 || out <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)out, (int)in, 1.0f, x,
                (int)in, W, (int)in, 0.0f, y, (int)out);
    if (b) {
        /* Added after the product, as torch's addmm result is x W^T + b. */
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            float *yr = y + r * out;
            for (int64_t j = 0; j < out; j++)
                yr[j] += b[j];
        }
    }
}

void rp_linear_backward_input(const float *dy, const float *W, float *dx, int64_t rows, int64_t in,
                              int64_t out, int accumulate)
{
    if (rows <= 0 || in <= 0)
        return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)in, (int)out, 1.0f, dy,
                (int)out, W, (int)in, accumulate ? 1.0f : 0.0f, dx, (int)in);
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
