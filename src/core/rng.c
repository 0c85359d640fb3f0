#include "core/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void rp_philox4x32(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

static inline double u32_to_open01(uint32_t a, uint32_t b)
{
    /* 53 random bits, shifted off 0 by half an ulp. */
    uint64_t v = ((uint64_t)a << 21) ^ (uint64_t)b;
    v &= (1ull << 53) - 1;
    return ((double)v + 0.5) / 9007199254740992.0;
}

float rp_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint32_t w[4];
    rp_philox4x32(seed, stream, index, w);
    return (float)u32_to_open01(w[0], w[1]);
}

float rp_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint32_t w[4];
    rp_philox4x32(seed, stream, index, w);
    double u1 = u32_to_open01(w[0], w[1]), u2 = u32_to_open01(w[2], w[3]);
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
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}
