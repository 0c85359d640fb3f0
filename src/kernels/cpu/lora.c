#include "kernels/cpu/lora.h"

#include "core/philox.h"

/* The product goes to a variable of its own before the sum: ISO C allows
 * no contraction across statements, and the build is ISO C (-std=c11, where
 * GCC's default is -ffp-contract=off), so no fused multiply-add forms. */

void rp_scaled_add(const float *x, float alpha, float *y, int64_t n, int accumulate)
{
    if (accumulate) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            const float product = alpha * x[i];
            y[i] = y[i] + product;
        }
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = alpha * x[i];
    }
}

void rp_dropout_f32(const rp_dropout_site *site, float scale, const float *x, float *y,
                    int64_t rows, int64_t cols, int accumulate)
{
    const float p = site->p;
    const int64_t per_sample = site->rows_per_sample;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t row = site->first_row + r; /* from the start of first_sample */
        const int64_t sample = site->first_sample + row / per_sample;
        const uint64_t stream = rp_dropout_stream(site->step, sample, site->layer, site->proj);
        const uint64_t first = (uint64_t)((row % per_sample) * cols);
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        for (int64_t c = 0; c < cols; c++) {
            const int keep = rp_philox_uniform(site->seed, stream, first + (uint64_t)c) >= p;
            const float value = keep ? xr[c] * scale : 0.0f;
            yr[c] = accumulate ? yr[c] + value : value;
        }
    }
}
