#include "core/dtype.h"

#include <math.h>

size_t rp_dtype_size(rp_dtype t)
{
    return t == RP_F32 ? 4 : 2;
}

const char *rp_dtype_name(rp_dtype t)
{
    switch (t) {
    case RP_F32: return "F32";
    case RP_BF16: return "BF16";
    case RP_F16: return "F16";
    }
    return "?";
}

float rp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t rp_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep it quiet and non-zero */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 (and infinity) */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half, in units of 2^-24 */
        float mag;
        memcpy(&mag, &a, 4);
        /* exact scaling by a power of two, then nearest-even rounding
         * (1024 is the smallest normal's encoding, as it should be) */
        return (uint16_t)(sign | (uint16_t)lrintf(mag * 16777216.0f));
    }
    uint32_t h = ((a >> 23) - 127 + 15) << 10 | ((a >> 13) & 0x3ffu);
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the right result */
    return (uint16_t)(sign | h);
}

void rp_f32_to_bf16_array(const float *src, uint16_t *dst, size_t n)
{
#pragma omp parallel for simd if (n > 65536) schedule(static)
    for (size_t i = 0; i < n; i++)
        dst[i] = rp_f32_to_bf16(src[i]);
}

void rp_bf16_to_f32_array(const uint16_t *src, float *dst, size_t n)
{
#pragma omp parallel for simd if (n > 65536) schedule(static)
    for (size_t i = 0; i < n; i++)
        dst[i] = rp_bf16_to_f32(src[i]);
}

void rp_bf16_widen_in_place(void *buf, size_t n)
{
    /* from the last element down: float i covers bf16 2i and 2i+1, which
     * (for i > 0) were widened already; bf16 0 is read before float 0 is
     * written. memcpy keeps the two views of the bytes alias-safe. */
    unsigned char *b = buf;
    for (size_t i = n; i-- > 0;) {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        float f = rp_bf16_to_f32(h);
        memcpy(b + 4 * i, &f, 4);
    }
}

void rp_f32_round_bf16(float *x, size_t n)
{
#pragma omp parallel for simd if (n > 65536) schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = rp_bf16_to_f32(rp_f32_to_bf16(x[i]));
}
