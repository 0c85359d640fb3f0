/* Element types and bf16 <-> fp32 conversion. */
#ifndef RP_CORE_DTYPE_H
#define RP_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum rp_dtype { RP_F32 = 0, RP_BF16 = 1, RP_F16 = 2 } rp_dtype;

size_t rp_dtype_size(rp_dtype t);
const char *rp_dtype_name(rp_dtype t); /* "F32", "BF16", "F16" (safetensors spelling) */

/* Round to nearest even; NaN stays NaN (quiet), infinities stay infinite. */
static inline uint16_t rp_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)     /* NaN: keep sign, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float rp_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half precision to fp32 (exact). */
float rp_f16_to_f32(uint16_t h);

/* fp32 to IEEE half precision, rounding to nearest even; NaN stays NaN. A
 * finite value of magnitude >= 65520 (beyond the largest half, 65504, by
 * half a step or more) becomes infinity: the caller reports that overflow. */
uint16_t rp_f32_to_f16(float f);

void rp_f32_to_bf16_array(const float *src, uint16_t *dst, size_t n);
void rp_bf16_to_f32_array(const uint16_t *src, float *dst, size_t n);
/* Round every element of x to the nearest bf16 value, in place. */
void rp_f32_round_bf16(float *x, size_t n);

/* buf holds n bf16 values in its first 2n bytes: widen them exactly to n
 * fp32 values over the same 4n bytes. */
void rp_bf16_widen_in_place(void *buf, size_t n);

#endif
