/* MXFP4 experts decoded on load (io/mxfp4.h). */
#include "io/mxfp4.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* E2M1 magnitudes by bits 0-2 of a nibble */
static const float fp4_values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

static float fp4(unsigned nibble, int exponent)
{
    float v = ldexpf(fp4_values[nibble & 7u], exponent);
    return (nibble & 8u) ? -v : v;
}

static rp_status expect(const rp_safetensors_tensor *t, const char *file, int ndim,
                        const int64_t *shape, rp_error *err)
{
    char want[96], got[96];
    if (strcmp(t->dtype_name, "U8") != 0)
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: tensor '%s': dtype %s, an MXFP4 tensor must be U8", file,
                            t->name, t->dtype_name);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->shape[d] == shape[d];
    if (!same)
        return rp_error_set(err, RP_ERR_MISMATCH, "%s: tensor '%s': shape %s, expected %s", file,
                            t->name, rp_safetensors_shape_str(t->ndim, t->shape, got, sizeof got),
                            rp_safetensors_shape_str(ndim, shape, want, sizeof want));
    return RP_OK;
}

rp_status rp_mxfp4_check(const rp_safetensors_tensor *blocks, const rp_safetensors_tensor *scales,
                         const char *file, int64_t experts, int64_t out, int64_t in,
                         rp_error *err)
{
    if (experts < 1 || out < 1 || in < 1 || in % RP_MXFP4_GROUP != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "%s: tensor '%s': MXFP4 needs positive sizes and an input width that "
                            "is a multiple of %d (experts %lld, out %lld, in %lld)",
                            file, blocks->name, RP_MXFP4_GROUP, (long long)experts,
                            (long long)out, (long long)in);
    const int64_t groups = in / RP_MXFP4_GROUP;
    const int64_t bshape[4] = {experts, out, groups, RP_MXFP4_GROUP / 2};
    RP_TRY(expect(blocks, file, 4, bshape, err));
    return expect(scales, file, 3, bshape, err);
}

rp_status rp_mxfp4_decode(const rp_safetensors_tensor *blocks,
                          const rp_safetensors_tensor *scales, const char *file, int64_t experts,
                          int64_t out, int64_t in, rp_mxfp4_layout layout, void *dst,
                          rp_dtype dtype, rp_error *err)
{
    RP_TRY(rp_mxfp4_check(blocks, scales, file, experts, out, in, err));
    if (dtype != RP_F32 && dtype != RP_BF16)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "%s: tensor '%s': MXFP4 decodes to F32 or BF16, not %s", file,
                            blocks->name, rp_dtype_name(dtype));
    if (layout != RP_MXFP4_FUSED && layout != RP_MXFP4_LINEAR)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: tensor '%s': unknown MXFP4 layout %d",
                            file, blocks->name, (int)layout);
    const int64_t groups = in / RP_MXFP4_GROUP, rows = experts * out;
    const uint8_t *sc = scales->data, *bl = blocks->data;
    /* refuse before writing anything */
    for (int64_t i = 0; i < rows * groups; i++)
        if (sc[i] == 255) {
            const int64_t r = i / groups;
            return rp_error_set(err, RP_ERR_FORMAT,
                                "%s: tensor '%s': scale 255 (E8M0's NaN) at [%lld, %lld, %lld]",
                                file, scales->name, (long long)(r / out), (long long)(r % out),
                                (long long)(i % groups));
        }
    float *f32 = dtype == RP_F32 ? dst : NULL;
    uint16_t *b16 = dtype == RP_BF16 ? dst : NULL;
    /* rows are independent: any thread count gives the same bits; a small
     * tensor is not worth waking threads for */
#pragma omp parallel for schedule(static) if (rows * in >= 65536)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t e = r / out, o = r % out;
        for (int64_t g = 0; g < groups; g++) {
            const int exponent = (int)sc[r * groups + g] - 127;
            const uint8_t *bytes = bl + (r * groups + g) * (RP_MXFP4_GROUP / 2);
            for (int j = 0; j < RP_MXFP4_GROUP; j++) {
                const unsigned nibble = (j & 1) ? bytes[j / 2] >> 4 : bytes[j / 2] & 0xfu;
                const int64_t k = g * RP_MXFP4_GROUP + j;
                const int64_t at =
                    layout == RP_MXFP4_LINEAR ? r * in + k : (e * in + k) * out + o;
                const float v = fp4(nibble, exponent);
                if (f32)
                    f32[at] = v;
                else
                    b16[at] = rp_f32_to_bf16(v);
            }
        }
    }
    return RP_OK;
}

rp_status rp_mxfp4_find(const rp_safetensors_set *set, const char *experts, const char *proj,
                        int *quantised, rp_error *err)
{
    char plain[256], blocks[272], scales[272];
    snprintf(plain, sizeof plain, "%s.%s", experts, proj);
    snprintf(blocks, sizeof blocks, "%s_blocks", plain);
    snprintf(scales, sizeof scales, "%s_scales", plain);
    const int has_plain = rp_safetensors_set_has(set, plain);
    const int has_blocks = rp_safetensors_set_has(set, blocks);
    const int has_scales = rp_safetensors_set_has(set, scales);
    rp_safetensors_tensor t;
    const char *file_a = NULL, *file_b = NULL;
    if (has_plain && (has_blocks || has_scales)) {
        const char *q = has_blocks ? blocks : scales;
        RP_TRY(rp_safetensors_set_find(set, plain, &t, &file_a, err));
        RP_TRY(rp_safetensors_set_find(set, q, &t, &file_b, err));
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: tensor '%s' and %s: tensor '%s': the experts ship both plain and "
                            "MXFP4-quantised; keep one",
                            file_a, plain, file_b, q);
    }
    if (has_blocks != has_scales) {
        const char *here = has_blocks ? blocks : scales, *missing = has_blocks ? scales : blocks;
        RP_TRY(rp_safetensors_set_find(set, here, &t, &file_a, err));
        return rp_error_set(err, RP_ERR_MISMATCH,
                            "%s: tensor '%s' has no '%s' beside it (MXFP4 needs both)", file_a,
                            here, missing);
    }
    if (!has_plain && !has_blocks) {
        char where[4352];
        rp_safetensors_set_where(set, where, sizeof where);
        return rp_error_set(err, RP_ERR_MISMATCH, "%s: neither tensor '%s' nor '%s' and '%s'",
                            where, plain, blocks, scales);
    }
    *quantised = has_blocks;
    return RP_OK;
}
