/* FP8 e4m3 as FP8 checkpoints store their weights (safetensors "F8_E4M3",
 * PyTorch's float8_e4m3fn, issue 36): a sign bit, four exponent bits of
 * bias 7 and three mantissa bits; exponent 0 is subnormal (m/8 x 2^-6);
 * there are no infinities, and only S.1111.111 (0x7F, 0xFF) is NaN, so the
 * largest finite magnitude is 448. Every code is exact in fp32 (and bf16:
 * four significant bits at most, exponents -9 to 8), so decoding is a
 * bit assembly, not arithmetic that could round. */
#ifndef RP_CORE_FP8_H
#define RP_CORE_FP8_H

#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

static inline float rp_e4m3_to_f32(uint8_t v)
{
    const uint32_t sign = (uint32_t)(v & 0x80u) << 24, exp = (v >> 3) & 0xFu, man = v & 7u;
    uint32_t u;
    if (exp == 15 && man == 7) {
        u = sign | 0x7fc00000u; /* e4m3fn's NaN: a quiet NaN of its sign */
    } else if (exp == 0) {
        /* subnormal: man x 2^-9, as a normal fp32 (or zero) */
        float f = (float)man * 0x1p-9f;
        memcpy(&u, &f, 4);
        u |= sign;
    } else {
        u = sign | ((exp + 120u) << 23) | (man << 20); /* 2^(exp-7) (1 + man/8) */
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One block-scaled FP8 matrix where it lies (issue 36): `weight` e4m3
 * [rows, cols] and `scale` [ceil(rows / block_rows), ceil(cols /
 * block_cols)] in scale_dtype (F32, BF16 or F16), both possibly unaligned
 * (they point into a safetensors mapping). */
typedef struct rp_fp8_matrix {
    const void *weight;
    const void *scale;
    rp_dtype scale_dtype;
    int64_t rows, cols;
    int64_t block_rows, block_cols;
} rp_fp8_matrix;

/* Scale rows and columns of m: the blocks, the last one partial when the
 * block size does not divide. */
static inline int64_t rp_fp8_scale_rows(const rp_fp8_matrix *m)
{
    return (m->rows + m->block_rows - 1) / m->block_rows;
}
static inline int64_t rp_fp8_scale_cols(const rp_fp8_matrix *m)
{
    return (m->cols + m->block_cols - 1) / m->block_cols;
}

/* Scale i of m (row-major over the scale grid), as fp32 (exact). */
float rp_fp8_scale_at(const rp_fp8_matrix *m, int64_t i);

/* Rows [first, last) of m dequantised into dst (row-major [rows, cols],
 * row `first` at dst's start) in dtype (F32 or BF16): w[r, c] = fp8[r, c]
 * x s[r / block_rows, c / block_cols], the product taken in fp32 (exact
 * for BF16 and F16 scales, one rounding for F32 ones) and, for BF16,
 * rounded to nearest even once more. The CPU kernel op and the loaders
 * share it; the CUDA op computes the same bits. */
void rp_fp8_dequantise_rows(const rp_fp8_matrix *m, int64_t first, int64_t last, void *dst,
                            rp_dtype dtype);

#endif
