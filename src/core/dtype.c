#include "core/dtype.h"

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

void rp_f32_round_bf16(float *x, size_t n)
{
#pragma omp parallel for simd if (n > 65536) schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = rp_bf16_to_f32(rp_f32_to_bf16(x[i]));
}
