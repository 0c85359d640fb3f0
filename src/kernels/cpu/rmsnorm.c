#include "kernels/cpu/rmsnorm.h"

#include <math.h>

/* Row sums of squares are taken in double: cheap next to the GEMMs, and it
 * makes the result independent of vectorisation width. Rows go in groups
 * of ROWS_TOGETHER: each row's sum is one chain of additions in its order,
 * and chains of different rows side by side overlap where one row's chain
 * would wait on each addition (the per-head norms' rows are 32 long). The
 * bits are those of one row at a time. */
#define ROWS_TOGETHER 4

static int64_t group_count(int64_t rows) { return (rows + ROWS_TOGETHER - 1) / ROWS_TOGETHER; }

/* rstd of the n <= ROWS_TOGETHER rows at x */
static void rows_rstd(const float *x, int64_t n, int64_t dim, float eps, float *rstd)
{
    double ss[ROWS_TOGETHER] = {0.0, 0.0, 0.0, 0.0};
    if (n == ROWS_TOGETHER) {
        const float *x0 = x, *x1 = x + dim, *x2 = x + 2 * dim, *x3 = x + 3 * dim;
        for (int64_t j = 0; j < dim; j++) {
            ss[0] += (double)x0[j] * (double)x0[j];
            ss[1] += (double)x1[j] * (double)x1[j];
            ss[2] += (double)x2[j] * (double)x2[j];
            ss[3] += (double)x3[j] * (double)x3[j];
        }
    } else {
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < dim; j++)
                ss[t] += (double)x[t * dim + j] * (double)x[t * dim + j];
    }
    for (int64_t t = 0; t < n; t++) {
        float var = (float)(ss[t] / (double)dim);
        rstd[t] = 1.0f / sqrtf(var + eps);
    }
}

void rp_rmsnorm_forward(const float *x, const float *w, float *y, float *rstd, int64_t rows,
                        int64_t dim, float eps)
{
#pragma omp parallel for schedule(static)
    for (int64_t group = 0; group < group_count(rows); group++) {
        const int64_t r0 = group * ROWS_TOGETHER;
        const int64_t n = rows - r0 < ROWS_TOGETHER ? rows - r0 : ROWS_TOGETHER;
        float s[ROWS_TOGETHER];
        rows_rstd(x + r0 * dim, n, dim, eps, s); /* before y: y may alias x */
        for (int64_t t = 0; t < n; t++) {
            const float *xr = x + (r0 + t) * dim;
            float *yr = y + (r0 + t) * dim;
            if (rstd)
                rstd[r0 + t] = s[t];
            for (int64_t j = 0; j < dim; j++)
                yr[j] = w[j] * (xr[j] * s[t]);
        }
    }
}

/* sum over j of (w*dy)_j * x_j for the n <= ROWS_TOGETHER rows at dy and
 * x, in double, each row's sum in its order */
static void rows_weighted_dot(const float *w, const float *dy, const float *x, int64_t n,
                           int64_t dim, double *dot)
{
    for (int64_t t = 0; t < ROWS_TOGETHER; t++)
        dot[t] = 0.0;
    if (n == ROWS_TOGETHER) {
        for (int64_t j = 0; j < dim; j++) {
            dot[0] += (double)(w[j] * dy[j]) * (double)x[j];
            dot[1] += (double)(w[j] * dy[dim + j]) * (double)x[dim + j];
            dot[2] += (double)(w[j] * dy[2 * dim + j]) * (double)x[2 * dim + j];
            dot[3] += (double)(w[j] * dy[3 * dim + j]) * (double)x[3 * dim + j];
        }
    } else {
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < dim; j++)
                dot[t] += (double)(w[j] * dy[t * dim + j]) * (double)x[t * dim + j];
    }
}

void rp_rmsnorm_backward(const float *x, const float *w, const float *rstd, const float *dy,
                         float *dx, float *dw, int64_t rows, int64_t dim, int accumulate)
{
    if (dw) {
        /* Before dx: dx may alias dy. Columns are owned by threads. */
        const int64_t cw = 32;
        const int64_t nchunks = (dim + cw - 1) / cw;
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t j0 = c * cw, j1 = j0 + cw < dim ? j0 + cw : dim;
            float acc[32];
            for (int64_t j = j0; j < j1; j++)
                acc[j - j0] = 0.0f;
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = x + r * dim, *dyr = dy + r * dim;
                float s = rstd[r];
                for (int64_t j = j0; j < j1; j++)
                    acc[j - j0] += dyr[j] * (xr[j] * s);
            }
            for (int64_t j = j0; j < j1; j++)
                dw[j] += acc[j - j0];
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t group = 0; group < group_count(rows); group++) {
        const int64_t r0 = group * ROWS_TOGETHER;
        const int64_t n = rows - r0 < ROWS_TOGETHER ? rows - r0 : ROWS_TOGETHER;
        double dot[ROWS_TOGETHER];
        /* every row's reduction before any row is written: dx may alias dy */
        rows_weighted_dot(w, dy + r0 * dim, x + r0 * dim, n, dim, dot);
        for (int64_t t = 0; t < n; t++) {
            const int64_t r = r0 + t;
            const float *xr = x + r * dim, *dyr = dy + r * dim;
            float *dxr = dx + r * dim;
            float s = rstd[r];
            float c = (float)(dot[t] / (double)dim) * s * s * s;
            if (accumulate)
                for (int64_t j = 0; j < dim; j++)
                    dxr[j] += s * (w[j] * dyr[j]) - c * xr[j];
            else
                for (int64_t j = 0; j < dim; j++)
                    dxr[j] = s * (w[j] * dyr[j]) - c * xr[j];
        }
    }
}
