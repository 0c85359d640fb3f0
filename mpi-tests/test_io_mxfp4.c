/* Proves: gpt-oss's MXFP4 experts (io/mxfp4.h) decode bit for bit as
 * transformers' convert_moe_packed_tensors does, to F32 and to BF16, in the
 * fused layout [E, in, out] (mpi-tests/fixtures/gpt-oss/mxfp4, made by
 * tools/gen_mxfp4_fixture.py: every byte value, scales 0, 1, 126-128 and
 * 254), and in the Linear layout [E, out, in] as its transpose; by hand:
 * element 2j is the low nibble, bit 3 the sign (a negative zero), the
 * value times 2^(scale - 127), 6 x 2^127 infinite; a brute force over all
 * 16 nibbles and every scale but 255; and the bad input named: blocks or
 * scales not U8 or of the wrong shape, an input width not a multiple of
 * 32, scale 255 (nothing written), an unknown dtype, and in a model's
 * files both plain and quantised experts, blocks without scales, or
 * neither. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/mxfp4.h"
#include "io/safetensors.h"
#include "io/safetensors_set.h"

#include "rp_check.h"

static const char *fixture(void)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/mpi-tests/fixtures/gpt-oss/mxfp4/model.safetensors",
             rp_test_srcdir());
    return p;
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Same value, or both NaN; -0 and +0 differ (the sign is data). */
static int same(float a, float b)
{
    return (isnan(a) && isnan(b)) || (a == b && !signbit(a) == !signbit(b));
}

START_TEST(matches_transformers)
{
    rp_safetensors *st = NULL;
    rp_error err = {0};
    ck_assert_msg(rp_safetensors_open(fixture(), &st, &err) == RP_OK, "%s", err.msg);
    static const struct { const char *proj; int64_t experts, out, in; } projs[] = {
        {"gate_up_proj", 2, 6, 64}, {"down_proj", 2, 4, 96}};
    for (int p = 0; p < 2; p++) {
        char name[128];
        rp_safetensors_tensor blocks, scales, want, want16;
        snprintf(name, sizeof name, "model.layers.0.mlp.experts.%s_blocks", projs[p].proj);
        ck_assert_int_eq(rp_safetensors_find(st, name, &blocks, &err), RP_OK);
        snprintf(name, sizeof name, "model.layers.0.mlp.experts.%s_scales", projs[p].proj);
        ck_assert_int_eq(rp_safetensors_find(st, name, &scales, &err), RP_OK);
        snprintf(name, sizeof name, "expected.%s", projs[p].proj);
        ck_assert_int_eq(rp_safetensors_find(st, name, &want, &err), RP_OK);
        snprintf(name, sizeof name, "expected.%s.bf16", projs[p].proj);
        ck_assert_int_eq(rp_safetensors_find(st, name, &want16, &err), RP_OK);
        const int64_t E = projs[p].experts, O = projs[p].out, I = projs[p].in, n = E * O * I;
        ck_assert_int_eq(want.numel, n);
        ck_assert(want.shape[0] == E && want.shape[1] == I && want.shape[2] == O);
        float *fused = malloc(sizeof(float) * n), *linear = malloc(sizeof(float) * n);
        float *ref = malloc(sizeof(float) * n);
        uint16_t *fused16 = malloc(2 * n), *ref16 = malloc(2 * n);
        memcpy(ref, want.data, sizeof(float) * n);
        memcpy(ref16, want16.data, 2 * n);
        ck_assert_msg(rp_mxfp4_decode(&blocks, &scales, "f", E, O, I, RP_MXFP4_FUSED, fused,
                                      RP_F32, &err) == RP_OK, "%s", err.msg);
        ck_assert_int_eq(rp_mxfp4_decode(&blocks, &scales, "f", E, O, I, RP_MXFP4_LINEAR, linear,
                                         RP_F32, &err), RP_OK);
        ck_assert_int_eq(rp_mxfp4_decode(&blocks, &scales, "f", E, O, I, RP_MXFP4_FUSED,
                                         fused16, RP_BF16, &err), RP_OK);
        int infinite = 0, tiny = 0, negzero = 0;
        for (int64_t e = 0; e < E; e++)
            for (int64_t i = 0; i < I; i++)
                for (int64_t o = 0; o < O; o++) {
                    const int64_t f = (e * I + i) * O + o, l = (e * O + o) * I + i;
                    ck_assert_msg(same(fused[f], ref[f]), "%s [%lld, %lld, %lld]: %a, "
                                  "transformers %a", projs[p].proj, (long long)e, (long long)i,
                                  (long long)o, fused[f], ref[f]);
                    ck_assert(same(linear[l], ref[f]));
                    ck_assert_msg(fused16[f] == ref16[f] || (isnan(bf16_to_f32(fused16[f])) &&
                                                            isnan(bf16_to_f32(ref16[f]))),
                                  "%s bf16 at %lld: %04x, transformers %04x", projs[p].proj,
                                  (long long)f, fused16[f], ref16[f]);
                    infinite += isinf(ref[f]) != 0;
                    tiny += ref[f] != 0 && fabsf(ref[f]) < 0x1p-120f;
                    negzero += ref[f] == 0 && signbit(ref[f]);
                }
        /* the fixture reaches the edges it was made for */
        ck_assert(tiny > 0 && negzero > 0);
        if (p == 0)
            ck_assert(infinite > 0);
        free(fused);
        free(linear);
        free(ref);
        free(fused16);
        free(ref16);
    }
    rp_safetensors_close(&st);
}
END_TEST

/* A hand-made tensor over `data`. */
static rp_safetensors_tensor tensor(const char *name, const char *dtype, int ndim,
                                    const int64_t *shape, const void *data)
{
    rp_safetensors_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype_name = dtype;
    t.ndim = ndim;
    t.numel = 1;
    for (int d = 0; d < ndim; d++) {
        t.shape[d] = shape[d];
        t.numel *= shape[d];
    }
    t.data = data;
    t.nbytes = (size_t)t.numel;
    return t;
}

START_TEST(by_hand)
{
    /* one expert, one row, 32 values: byte 0 = 0x21 (element 0 = +0.5,
     * element 1 = +1), byte 1 = 0x9f (element 2 = -6, element 3 = -0.5),
     * byte 2 = 0x08 (element 4 = -0, element 5 = +0); scale 128: times 2 */
    uint8_t bl[16] = {0x21, 0x9f, 0x08, 0x77};
    uint8_t sc[1] = {128};
    const int64_t bs[4] = {1, 1, 1, 16}, ss[3] = {1, 1, 1};
    rp_safetensors_tensor b = tensor("b_blocks", "U8", 4, bs, bl), s = tensor("b_scales", "U8", 3, ss, sc);
    float y[32];
    rp_error err = {0};
    ck_assert_int_eq(rp_mxfp4_decode(&b, &s, "f", 1, 1, 32, RP_MXFP4_LINEAR, y, RP_F32, &err),
                     RP_OK);
    ck_assert(same(y[0], 1.0f) && same(y[1], 2.0f) && same(y[2], -12.0f) && same(y[3], -1.0f));
    ck_assert_msg(same(y[4], -0.0f) && same(y[5], 0.0f) && same(y[6], 12.0f) && same(y[7], 12.0f),
                  "%a %a %a %a", y[4], y[5], y[6], y[7]);
    for (int k = 8; k < 32; k++)
        ck_assert(same(y[k], 0.0f));
    sc[0] = 254; /* 6 x 2^127 overflows, 0.5 x 2^127 does not */
    ck_assert_int_eq(rp_mxfp4_decode(&b, &s, "f", 1, 1, 32, RP_MXFP4_LINEAR, y, RP_F32, &err),
                     RP_OK);
    ck_assert(isinf(y[2]) && y[2] < 0 && y[0] == 0x1p126f);
    sc[0] = 0; /* 0.5 x 2^-127: a subnormal, exact in fp32 and bf16 */
    uint16_t h[32];
    ck_assert_int_eq(rp_mxfp4_decode(&b, &s, "f", 1, 1, 32, RP_MXFP4_LINEAR, h, RP_BF16, &err),
                     RP_OK);
    ck_assert(bf16_to_f32(h[0]) == 0x1p-128f && bf16_to_f32(h[3]) == -0x1p-128f);

    /* brute force: every nibble at every scale 0..254 against the formula
     * in double; two experts x two rows x two groups, fused layout */
    enum { E = 2, O = 2, I = 64, G = I / 32 };
    static uint8_t blocks[E * O * G * 16], scales[E * O * G];
    static float out[E * O * I];
    const int64_t bshape[4] = {E, O, G, 16}, sshape[3] = {E, O, G};
    rp_safetensors_tensor B = tensor("x_blocks", "U8", 4, bshape, blocks);
    rp_safetensors_tensor S = tensor("x_scales", "U8", 3, sshape, scales);
    static const double fp4[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    for (int scale = 0; scale < 255; scale++) {
        for (int i = 0; i < E * O * G * 16; i++)
            blocks[i] = (uint8_t)(i * 37 + scale); /* every byte over the scales */
        for (int i = 0; i < E * O * G; i++)
            scales[i] = (uint8_t)((scale + i) % 255);
        ck_assert_int_eq(rp_mxfp4_decode(&B, &S, "f", E, O, I, RP_MXFP4_FUSED, out, RP_F32, &err),
                         RP_OK);
        for (int e = 0; e < E; e++)
            for (int o = 0; o < O; o++)
                for (int k = 0; k < I; k++) {
                    const int g = k / 32, j = k % 32, row = e * O + o;
                    const uint8_t byte = blocks[(row * G + g) * 16 + j / 2];
                    const unsigned nib = (j % 2) ? byte >> 4 : byte & 15u;
                    double v = fp4[nib & 7] * pow(2.0, (int)scales[row * G + g] - 127);
                    if (nib & 8)
                        v = -v;
                    const float got = out[(e * I + k) * O + o];
                    ck_assert_msg(same(got, (float)v), "scale %d: %a vs %a", scale, got, v);
                }
    }
}
END_TEST

static void expect_error(rp_status got, rp_status want, const rp_error *err, const char *words)
{
    ck_assert_msg(got == want, "status %d, expected %d (%s)", got, want, err->msg);
    ck_assert_msg(strstr(err->msg, words), "message '%s' lacks '%s'", err->msg, words);
}

START_TEST(bad_tensors)
{
    uint8_t bl[2 * 3 * 2 * 16] = {0}, sc[2 * 3 * 2];
    memset(sc, 127, sizeof sc);
    float y[2 * 3 * 64];
    rp_error err = {0};
    const int64_t bs[4] = {2, 3, 2, 16}, ss[3] = {2, 3, 2};
    rp_safetensors_tensor b = tensor("e.gate_up_proj_blocks", "U8", 4, bs, bl);
    rp_safetensors_tensor s = tensor("e.gate_up_proj_scales", "U8", 3, ss, sc);
    ck_assert_int_eq(rp_mxfp4_check(&b, &s, "m.safetensors", 2, 3, 64, &err), RP_OK);
    /* wrong dtype */
    rp_safetensors_tensor t = b;
    t.dtype_name = "I8";
    expect_error(rp_mxfp4_check(&t, &s, "m.safetensors", 2, 3, 64, &err), RP_ERR_MISMATCH, &err,
                 "m.safetensors: tensor 'e.gate_up_proj_blocks': dtype I8, an MXFP4 tensor must be U8");
    t = s;
    t.dtype_name = "F32";
    expect_error(rp_mxfp4_check(&b, &t, "m.safetensors", 2, 3, 64, &err), RP_ERR_MISMATCH, &err,
                 "tensor 'e.gate_up_proj_scales': dtype F32");
    /* wrong shapes: the experts, the rows, the groups, the bytes, the rank */
    expect_error(rp_mxfp4_check(&b, &s, "m.safetensors", 3, 3, 64, &err), RP_ERR_MISMATCH, &err,
                 "m.safetensors: tensor 'e.gate_up_proj_blocks': shape [2, 3, 2, 16], expected "
                 "[3, 3, 2, 16]");
    expect_error(rp_mxfp4_check(&b, &s, "m.safetensors", 2, 3, 96, &err), RP_ERR_MISMATCH, &err,
                 "expected [2, 3, 3, 16]");
    const int64_t b8[4] = {2, 3, 4, 8}, s4[3] = {2, 3, 4}, s2[2] = {2, 6};
    t = tensor("e.gate_up_proj_blocks", "U8", 4, b8, bl);
    expect_error(rp_mxfp4_check(&t, &s, "m.safetensors", 2, 3, 64, &err), RP_ERR_MISMATCH, &err,
                 "shape [2, 3, 4, 8], expected [2, 3, 2, 16]");
    t = tensor("e.gate_up_proj_scales", "U8", 3, s4, sc);
    expect_error(rp_mxfp4_check(&b, &t, "m.safetensors", 2, 3, 64, &err), RP_ERR_MISMATCH, &err,
                 "tensor 'e.gate_up_proj_scales': shape [2, 3, 4], expected [2, 3, 2]");
    t = tensor("e.gate_up_proj_scales", "U8", 2, s2, sc);
    expect_error(rp_mxfp4_check(&b, &t, "m.safetensors", 2, 3, 64, &err), RP_ERR_MISMATCH, &err,
                 "shape [2, 6], expected [2, 3, 2]");
    expect_error(rp_mxfp4_check(&b, &s, "m.safetensors", 2, 3, 48, &err), RP_ERR_INVALID_ARG,
                 &err, "multiple of 32");
    /* scale 255, E8M0's NaN: refused and nothing written */
    for (int i = 0; i < 2 * 3 * 64; i++)
        y[i] = 42.0f;
    sc[2 * 2 + 1] = 255; /* expert 0, row 2, group 1 */
    expect_error(rp_mxfp4_decode(&b, &s, "m.safetensors", 2, 3, 64, RP_MXFP4_FUSED, y, RP_F32,
                                 &err),
                 RP_ERR_FORMAT, &err,
                 "m.safetensors: tensor 'e.gate_up_proj_scales': scale 255 (E8M0's NaN) at "
                 "[0, 2, 1]");
    for (int i = 0; i < 2 * 3 * 64; i++)
        ck_assert(y[i] == 42.0f);
    sc[5] = 127;
    expect_error(rp_mxfp4_decode(&b, &s, "m.safetensors", 2, 3, 64, RP_MXFP4_FUSED, y, RP_F16,
                                 &err),
                 RP_ERR_UNSUPPORTED, &err, "F32 or BF16, not F16");
}
END_TEST

/* A safetensors file of U8 tensors, each of `bytes` zeros, named names. */
static void write_u8_file(const char *path, const char *const *names, const char *const *shapes,
                          const int *bytes, int n)
{
    char header[2048];
    size_t len = 0, off = 0;
    len += (size_t)snprintf(header + len, sizeof header - len, "{");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(header + len, sizeof header - len,
                                "%s\"%s\":{\"dtype\":\"U8\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                                i ? "," : "", names[i], shapes[i], off, off + (size_t)bytes[i]);
        off += (size_t)bytes[i];
    }
    len += (size_t)snprintf(header + len, sizeof header - len, "}");
    while (len % 8)
        header[len++] = ' ';
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint64_t hl = len;
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(hl >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, len, f);
    for (size_t i = 0; i < off; i++)
        fputc(0, f);
    fclose(f);
}

static rp_status find_in(const char *const *names, const char *const *shapes, const int *bytes,
                         int n, int *quantised, rp_error *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", rp_test_tmpdir());
    write_u8_file(path, names, shapes, bytes, n);
    rp_safetensors_set *set = NULL;
    rp_status s = rp_safetensors_set_open_dir(rp_test_tmpdir(), &set, err);
    ck_assert_msg(s == RP_OK, "%s", err->msg);
    s = rp_mxfp4_find(set, "model.layers.0.mlp.experts", "down_proj", quantised, err);
    rp_safetensors_set_close(&set);
    return s;
}

START_TEST(which_form)
{
    rp_error err = {0};
    int q = -1;
    const char *names[] = {"model.layers.0.mlp.experts.down_proj_blocks",
                           "model.layers.0.mlp.experts.down_proj_scales",
                           "model.layers.0.mlp.experts.down_proj"};
    const char *shapes[] = {"[1,1,1,16]", "[1,1,1]", "[1,32]"};
    const int bytes[] = {16, 1, 32};
    ck_assert_msg(find_in(names, shapes, bytes, 2, &q, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(q, 1);
    ck_assert_int_eq(find_in(names + 2, shapes + 2, bytes + 2, 1, &q, &err), RP_OK);
    ck_assert_int_eq(q, 0);
    expect_error(find_in(names, shapes, bytes, 3, &q, &err), RP_ERR_MISMATCH, &err,
                 "model.safetensors: tensor 'model.layers.0.mlp.experts.down_proj' and ");
    ck_assert_msg(strstr(err.msg, "tensor 'model.layers.0.mlp.experts.down_proj_blocks': the "
                                  "experts ship both plain and MXFP4-quantised"),
                  "%s", err.msg);
    expect_error(find_in(names, shapes, bytes, 1, &q, &err), RP_ERR_MISMATCH, &err,
                 "model.safetensors: tensor 'model.layers.0.mlp.experts.down_proj_blocks' has no "
                 "'model.layers.0.mlp.experts.down_proj_scales'");
    expect_error(find_in(names + 1, shapes + 1, bytes + 1, 1, &q, &err), RP_ERR_MISMATCH, &err,
                 "tensor 'model.layers.0.mlp.experts.down_proj_scales' has no "
                 "'model.layers.0.mlp.experts.down_proj_blocks'");
    const char *other[] = {"model.norm.weight"};
    const char *oshape[] = {"[4]"};
    const int obytes[] = {4};
    expect_error(find_in(other, oshape, obytes, 1, &q, &err), RP_ERR_MISMATCH, &err,
                 "model.safetensors: neither tensor 'model.layers.0.mlp.experts.down_proj' nor "
                 "'model.layers.0.mlp.experts.down_proj_blocks' and "
                 "'model.layers.0.mlp.experts.down_proj_scales'"); /* the file named (fuzz_readers) */
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_mxfp4");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, matches_transformers);
    tcase_add_test(tc, by_hand);
    tcase_add_test(tc, bad_tensors);
    tcase_add_test(tc, which_form);
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
