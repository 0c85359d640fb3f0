/* FP8 e4m3 block-scaled matrices dequantised (core/fp8.h). */
#include "core/fp8.h"

float rp_fp8_scale_at(const rp_fp8_matrix *m, int64_t i)
{
    const unsigned char *s = m->scale;
    if (m->scale_dtype == RP_F32) {
        float f;
        memcpy(&f, s + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, s + 2 * i, 2);
    return m->scale_dtype == RP_BF16 ? rp_bf16_to_f32(h) : rp_f16_to_f32(h);
}

void rp_fp8_dequantise_rows(const rp_fp8_matrix *m, int64_t first, int64_t last, void *dst,
                            rp_dtype dtype)
{
    const uint8_t *w = m->weight;
    const int64_t scale_cols = rp_fp8_scale_cols(m);
    for (int64_t r = first; r < last; r++) {
        const int64_t srow = (r / m->block_rows) * scale_cols;
        const uint8_t *in = w + r * m->cols;
        const size_t at = (size_t)(r - first) * (size_t)m->cols;
        for (int64_t c0 = 0; c0 < m->cols; c0 += m->block_cols) {
            const float s = rp_fp8_scale_at(m, srow + c0 / m->block_cols);
            const int64_t c1 = c0 + m->block_cols < m->cols ? c0 + m->block_cols : m->cols;
            if (dtype == RP_F32) {
                float *out = (float *)dst + at;
                for (int64_t c = c0; c < c1; c++)
                    out[c] = rp_e4m3_to_f32(in[c]) * s;
            } else {
                uint16_t *out = (uint16_t *)dst + at;
                for (int64_t c = c0; c < c1; c++)
                    out[c] = rp_f32_to_bf16(rp_e4m3_to_f32(in[c]) * s);
            }
        }
    }
}
