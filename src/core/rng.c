/* The host functions of the counter-based generator; the arithmetic lives
 * in core/philox.h, which CUDA kernels share. */
#include "core/rng.h"

#include "core/philox.h"

#include <math.h>

void rp_philox4x32(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4])
{
    rp_philox4x32_10(seed, stream, index, out);
}

float rp_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return rp_philox_uniform(seed, stream, index);
}

float rp_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint32_t w[4];
    rp_philox4x32_10(seed, stream, index, w);
    double u1 = rp_philox_open01(w[0], w[1]), u2 = rp_philox_open01(w[2], w[3]);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void rp_rng_fill_normal(float *x, size_t n, uint64_t seed, uint64_t stream, uint64_t first,
                        float mean, float std)
{
#pragma omp parallel for if (n > 16384) schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = mean + std * rp_rng_normal(seed, stream, first + i);
}

uint64_t rp_rng_stream_id(const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = rp_fnv1a_byte(h, *p);
    return h;
}
