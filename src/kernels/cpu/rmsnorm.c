#include "kernels/cpu/rmsnorm.h"

#include <math.h>

/* Row sums of squares are taken in double: cheap next to the GEMMs, and it
 * makes the result independent of vectorisation width. */
static float row_rstd(const float *x, int64_t dim, float eps)
{
    double ss = 0.0;
    for (int64_t j = 0; j < dim; j++)
        ss += (double)x[j] * (double)x[j];
    float var = (float)(ss / (double)dim);
    return 1.0f / sqrtf(var + eps);
}

void rp_rmsnorm_forward(const float *x, const float *w, float *y, float *rstd, int64_t rows,
                        int64_t dim, float eps)
{
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        float s = row_rstd(xr, dim, eps);
        if (rstd)
            rstd[r] = s;
        for (int64_t j = 0; j < dim; j++)
            yr[j] = w[j] * (xr[j] * s);
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
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim, *dyr = dy + r * dim;
        float *dxr = dx + r * dim;
        float s = rstd[r];
        double dot = 0.0;
        for (int64_t j = 0; j < dim; j++)
            dot += (double)(w[j] * dyr[j]) * (double)xr[j];
        float c = (float)(dot / (double)dim) * s * s * s;
        if (accumulate)
            for (int64_t j = 0; j < dim; j++)
                dxr[j] += s * (w[j] * dyr[j]) - c * xr[j];
        else
            for (int64_t j = 0; j < dim; j++)
                dxr[j] = s * (w[j] * dyr[j]) - c * xr[j];
    }
}
