/* Proves: FP8 checkpoints' weights (issue 36). e4m3 decoding (core/fp8.h)
 * is exact for all 256 codes against the definition (-1)^s 2^(e-7) (1 +
 * m/8), subnormals m/8 2^-6, as e4m3fn: no infinities, 0x7F and 0xFF NaN,
 * 0x80 a negative zero, 448 the largest. Dequantising (rp_fp8_dequantise_rows)
 * equals the brute force w[r, c] = fp8[r, c] x s[r / BR, c / BC] from the
 * definition with partial edge blocks in both directions, for F32, BF16
 * and F16 scales, to F32 and to BF16, for any range of rows. And a model's
 * files (io/fp8.h): F8_E4M3 with its weight_scale_inv is found and
 * described, a plain tensor is not FP8, and the bad input is
 * refused naming the file and the tensor: a missing or wrongly shaped
 * scale (the block size named), an F8_E5M2 weight, scales of an
 * unsupported dtype or not finite, a scale beside a plain tensor, FP8 in
 * a model whose config has no FP8 quantization_config, a 1-D FP8 tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/fp8.h"
#include "io/fp8.h"
#include "io/safetensors_set.h"

#include "rp_check.h"

/* The value of code v from the definition, in double. */
static double e4m3_definition(unsigned v)
{
    const int s = (v >> 7) & 1, e = (v >> 3) & 15, m = v & 7;
    const double mag = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -mag : mag;
}

START_TEST(e4m3_all_codes)
{
    int nans = 0;
    for (unsigned v = 0; v < 256; v++) {
        const float f = rp_e4m3_to_f32((uint8_t)v);
        if ((v & 0x7f) == 0x7f) {
            ck_assert_msg(isnan(f), "code 0x%02x decodes to %a, not NaN", v, f);
            nans++;
            continue;
        }
        ck_assert_msg(!isnan(f) && !isinf(f), "code 0x%02x: %a", v, f);
        ck_assert_msg((double)f == e4m3_definition(v), "code 0x%02x: %a, the definition %a", v,
                      f, e4m3_definition(v));
        ck_assert_int_eq(!!signbit(f), (int)(v >> 7)); /* 0x80 is -0 */
        /* exact in bf16 too: at most four significant bits */
        ck_assert(rp_bf16_to_f32(rp_f32_to_bf16(f)) == f);
    }
    ck_assert_int_eq(nans, 2);
    ck_assert(rp_e4m3_to_f32(0x7e) == 448.0f && rp_e4m3_to_f32(0xfe) == -448.0f);
    ck_assert(rp_e4m3_to_f32(0x01) == 0x1p-9f);
}
END_TEST

/* Scales of dtype dt in bytes, from values v (chosen exact in every dtype
 * for BF16/F16; F32 ones arbitrary). */
static void put_scale(void *dst, rp_dtype dt, int64_t i, float v)
{
    if (dt == RP_F32)
        memcpy((char *)dst + 4 * i, &v, 4);
    else {
        uint16_t h = dt == RP_BF16 ? rp_f32_to_bf16(v) : rp_f32_to_f16(v);
        memcpy((char *)dst + 2 * i, &h, 2);
    }
}

START_TEST(dequantise_brute_force)
{
    /* shapes with partial edge blocks both ways, one exact, one block
     * wider than the matrix */
    static const int64_t shapes[][4] = {{13, 22, 4, 8}, {16, 16, 8, 8}, {5, 7, 3, 128},
                                        {9, 3, 128, 2}};
    const rp_dtype sdt[3] = {RP_F32, RP_BF16, RP_F16};
    uint64_t x = 12345;
    for (int sh = 0; sh < 4; sh++)
        for (int k = 0; k < 3; k++) {
            const int64_t R = shapes[sh][0], C = shapes[sh][1];
            rp_fp8_matrix m = {0};
            m.rows = R;
            m.cols = C;
            m.block_rows = shapes[sh][2];
            m.block_cols = shapes[sh][3];
            m.scale_dtype = sdt[k];
            const int64_t G = rp_fp8_scale_rows(&m) * rp_fp8_scale_cols(&m);
            uint8_t *w = malloc((size_t)(R * C));
            char *sc = malloc((size_t)(G * 4) + 1);
            double *want = malloc(sizeof(double) * (size_t)(R * C));
            float *got = malloc(sizeof(float) * (size_t)(R * C));
            uint16_t *got16 = malloc(2 * (size_t)(R * C));
            for (int64_t i = 0; i < R * C; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                w[i] = (uint8_t)(x >> 56);
                if ((w[i] & 0x7f) == 0x7f)
                    w[i] ^= 1; /* NaN codes are tested above */
            }
            /* unaligned scales, as a mapping may hold them */
            for (int64_t i = 0; i < G; i++)
                put_scale(sc + 1, sdt[k], i, (float)ldexp(1.0 + (double)(i % 7) / 8.0,
                                                          (int)(i % 5) - 12) *
                                                 (k == 0 ? 1.0f + 0x1p-20f * (float)i : 1.0f));
            m.weight = w;
            m.scale = sc + 1;
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++) {
                    const int64_t g = (r / m.block_rows) * rp_fp8_scale_cols(&m) + c / m.block_cols;
                    want[r * C + c] = e4m3_definition(w[r * C + c]) * (double)rp_fp8_scale_at(&m, g);
                }
            rp_fp8_dequantise_rows(&m, 0, R, got, RP_F32);
            /* a range of rows lands at dst's start */
            rp_fp8_dequantise_rows(&m, R / 2, R, got16, RP_BF16);
            for (int64_t i = 0; i < R * C; i++) {
                ck_assert_msg(got[i] == (float)want[i], "shape %d scale %s at %lld: %a, the "
                              "definition %a", sh, rp_dtype_name(sdt[k]), (long long)i,
                              got[i], want[i]);
                if (i >= (R / 2) * C)
                    ck_assert(got16[i - (R / 2) * C] == rp_f32_to_bf16((float)want[i]));
            }
            free(w);
            free(sc);
            free(want);
            free(got);
            free(got16);
        }
}
END_TEST

/* A safetensors file of n tensors (dtype, shape as JSON, byte count): the
 * F32 and BF16 scales scale_value, every other byte e4m3's 1.0. */
static void write_file(const char *const *names, const char *const *dtypes,
                       const char *const *shapes, const int *bytes, int n, float scale_value)
{
    char path[512], header[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", rp_test_tmpdir());
    size_t len = 0, off = 0;
    len += (size_t)snprintf(header + len, sizeof header - len, "{");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(header + len, sizeof header - len,
                                "%s\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                                i ? "," : "", names[i], dtypes[i], shapes[i], off,
                                off + (size_t)bytes[i]);
        off += (size_t)bytes[i];
    }
    len += (size_t)snprintf(header + len, sizeof header - len, "}");
    while (len % 8)
        header[len++] = ' ';
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)len >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, len, f);
    for (int i = 0; i < n; i++) {
        const int scale = strstr(names[i], "_scale_inv") != NULL;
        for (int b = 0; b < bytes[i];) {
            if (scale && strcmp(dtypes[i], "F32") == 0) {
                fwrite(&scale_value, 4, 1, f);
                b += 4;
            } else if (scale && strcmp(dtypes[i], "BF16") == 0) {
                uint16_t h = rp_f32_to_bf16(scale_value);
                fwrite(&h, 2, 1, f);
                b += 2;
            } else {
                fputc(0x38, f); /* e4m3 1.0 */
                b++;
            }
        }
    }
    fclose(f);
}

static rp_status find(const rp_fp8_config *fp8, const char *name, int64_t rows, int64_t cols,
                      int *quantised, rp_fp8_matrix *m, rp_error *err)
{
    rp_safetensors_set *set = NULL;
    rp_status s = rp_safetensors_set_open_dir(rp_test_tmpdir(), &set, err);
    ck_assert_msg(s == RP_OK, "%s", err->msg);
    s = rp_fp8_find(set, "dir/config.json", fp8, name, rows, cols, quantised, m, err);
    rp_safetensors_set_close(&set);
    return s;
}

static void expect(rp_status got, rp_status want, const rp_error *err, const char *a,
                   const char *b)
{
    ck_assert_msg(got == want, "status %d, expected %d (%s)", got, want, err->msg);
    ck_assert_msg(strstr(err->msg, a) && (!b || strstr(err->msg, b)),
                  "message '%s' lacks '%s' or '%s'", err->msg, a, b ? b : "");
}

#define W "model.layers.0.mlp.down_proj.weight"
#define S W "_scale_inv"

START_TEST(files)
{
    const rp_fp8_config on = {.on = 1, .block_rows = 4, .block_cols = 8}, off = {.on = 0};
    rp_error err = {0};
    rp_fp8_matrix m;
    int q = -1;
    /* [10, 20] in blocks of [4, 8]: a scale grid of [3, 3] */
    const char *names[] = {W, S};
    const char *f8[] = {"F8_E4M3", "BF16"}, *f32s[] = {"F8_E4M3", "F32"};
    const char *shapes[] = {"[10,20]", "[3,3]"};
    const int bytes[] = {200, 18}, bytes32[] = {200, 36};
    write_file(names, f8, shapes, bytes, 2, 0.5f);
    ck_assert_msg(find(&on, W, 10, 20, &q, &m, &err) == RP_OK, "%s", err.msg);
    ck_assert(q == 1 && m.rows == 10 && m.cols == 20 && m.block_rows == 4 &&
              m.block_cols == 8 && m.scale_dtype == RP_BF16);
    write_file(names, f32s, shapes, bytes32, 2, 2.0f);
    ck_assert_int_eq(find(&on, W, 10, 20, &q, &m, &err), RP_OK);
    ck_assert(q == 1 && m.scale_dtype == RP_F32);
    /* a plain tensor */
    const char *plain[] = {"BF16"};
    const int pbytes[] = {400};
    write_file(names, plain, shapes, pbytes, 1, 1);
    ck_assert_int_eq(find(&on, W, 10, 20, &q, &m, &err), RP_OK);
    ck_assert_int_eq(q, 0);
    ck_assert_int_eq(find(&off, W, 10, 20, &q, &m, &err), RP_OK);
    /* bad input */
    write_file(names, f8, shapes, bytes, 1, 1);
    expect(find(&on, W, 10, 20, &q, &m, &err), RP_ERR_MISMATCH, &err,
           "model.safetensors: tensor '" W "' is F8_E4M3 and has no '" S "'", NULL);
    const char *wrong[] = {"[10,20]", "[2,3]"};
    const int wbytes[] = {200, 12};
    write_file(names, f8, wrong, wbytes, 2, 1);
    expect(find(&on, W, 10, 20, &q, &m, &err), RP_ERR_MISMATCH, &err,
           "model.safetensors: tensor '" S "' has shape [2, 3]; weight [10, 20] in blocks of "
           "[4, 8] (quantization_config.weight_block_size) needs [3, 3]", NULL);
    /* a block size that does not fit the grid the file has */
    const rp_fp8_config big = {.on = 1, .block_rows = 128, .block_cols = 128};
    write_file(names, f8, shapes, bytes, 2, 1);
    expect(find(&big, W, 10, 20, &q, &m, &err), RP_ERR_MISMATCH, &err, "'" S "' has shape [3, 3]",
           "in blocks of [128, 128] (quantization_config.weight_block_size) needs [1, 1]");
    const char *e5[] = {"F8_E5M2", "BF16"};
    write_file(names, e5, shapes, bytes, 2, 1);
    expect(find(&on, W, 10, 20, &q, &m, &err), RP_ERR_UNSUPPORTED, &err,
           "model.safetensors: tensor '" W "' has dtype F8_E5M2; FP8 weights must be F8_E4M3",
           NULL);
    const char *i32[] = {"F8_E4M3", "I32"};
    write_file(names, i32, shapes, bytes32, 2, 1);
    expect(find(&on, W, 10, 20, &q, &m, &err), RP_ERR_UNSUPPORTED, &err,
           "model.safetensors: tensor '" S "' has dtype I32; FP8 scales must be F32, BF16 or F16",
           NULL);
    write_file(names, f32s, shapes, bytes32, 2, INFINITY);
    expect(find(&on, W, 10, 20, &q, &m, &err), RP_ERR_FORMAT, &err,
           "model.safetensors: tensor '" S "': scale [0, 0] is inf", NULL);
    const char *plain_scaled[] = {"BF16", "BF16"};
    const int psbytes[] = {400, 18};
    write_file(names, plain_scaled, shapes, psbytes, 2, 1);
    expect(find(&on, W, 10, 20, &q, &m, &err), RP_ERR_MISMATCH, &err,
           "model.safetensors: tensor '" S "' scales '" W "', which is BF16, not F8_E4M3", NULL);
    write_file(names, f8, shapes, bytes, 2, 1);
    expect(find(&off, W, 10, 20, &q, &m, &err), RP_ERR_FORMAT, &err,
           "model.safetensors: tensor '" W "' is F8_E4M3, but dir/config.json has no "
           "quantization_config with quant_method \"fp8\"", NULL);
    const char *vec[] = {"[200]", "[3,3]"};
    write_file(names, f8, vec, bytes, 2, 1);
    expect(find(&on, W, 200, 0, &q, &m, &err), RP_ERR_UNSUPPORTED, &err,
           "model.safetensors: tensor '" W "' is F8_E4M3; only matrices", NULL);
    write_file(names, f8, shapes, bytes, 2, 1);
    expect(find(&on, W, 20, 10, &q, &m, &err), RP_ERR_MISMATCH, &err,
           "model.safetensors: tensor '" W "' has shape [10, 20], the model needs [20, 10]", NULL);
}
END_TEST

/* The files agree with the config's modules_to_not_convert, else the
 * tensor, the file and the entry (or its absence) are named (issue 36). */
static rp_status agree(const rp_model_config *cfg, const char *config, const char *name,
                       rp_error *err)
{
    rp_safetensors_set *set = NULL;
    rp_status s = rp_safetensors_set_open_dir(rp_test_tmpdir(), &set, err);
    ck_assert_msg(s == RP_OK, "%s", err->msg);
    s = rp_fp8_expect(set, config, cfg, name, err);
    rp_safetensors_set_close(&set);
    return s;
}

START_TEST(config_agrees)
{
    char config[512];
    snprintf(config, sizeof config, "%s/config.json", rp_test_tmpdir());
    FILE *f = fopen(config, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 20, \"num_hidden_layers\": 1, "
          "\"num_attention_heads\": 2, \"vocab_size\": 30, \"num_experts\": 2, "
          "\"num_experts_per_tok\": 1, \"moe_intermediate_size\": 10, "
          "\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [4, 8], "
          "\"modules_to_not_convert\": [\"lm_head\", \"model.layers.0.mlp.experts\", "
          "\"model.layers.0.self_attn.q_proj\"]}}", f);
    fclose(f);
    rp_model_config cfg;
    rp_error err = {0};
    ck_assert_msg(rp_config_load(config, &cfg, &err) == RP_OK, "%s", err.msg);
    /* the one rule: q_proj and the experts kept, k_proj quantised, never
     * the router, the norms or what is no block's */
    ck_assert(!rp_fp8_tensor_converted(&cfg, "model.layers.0.self_attn.q_proj.weight"));
    ck_assert(rp_fp8_tensor_converted(&cfg, "model.layers.0.self_attn.k_proj.weight"));
    ck_assert(!rp_fp8_tensor_converted(&cfg, "model.layers.0.mlp.experts.1.up_proj.weight"));
    ck_assert(!rp_fp8_tensor_converted(&cfg, "model.layers.0.mlp.gate.weight"));
    ck_assert(!rp_fp8_tensor_converted(&cfg, "model.layers.0.input_layernorm.weight"));
    ck_assert(!rp_fp8_tensor_converted(&cfg, "lm_head.weight"));
    /* block numbers only as transformers writes them (io/name_index.h) */
    ck_assert(!rp_fp8_tensor_converted(&cfg, "model.layers.00.self_attn.k_proj.weight"));
    ck_assert(!rp_fp8_tensor_converted(&cfg, "model.layers. 0.self_attn.k_proj.weight"));
    ck_assert(!rp_fp8_tensor_converted(&cfg, "model.layers.-0.self_attn.k_proj.weight"));
#define K "model.layers.0.self_attn.k_proj.weight"
#define Q "model.layers.0.self_attn.q_proj.weight"
#define U "model.layers.0.mlp.experts.1.up_proj.weight"
#define R "model.layers.0.mlp.gate.weight"
    const char *names[] = {K, K "_scale_inv", Q, Q "_scale_inv", U, U "_scale_inv", R,
                           R "_scale_inv"};
    const char *dtypes[] = {"F8_E4M3", "BF16", "F8_E4M3", "BF16", "F8_E4M3", "BF16",
                            "F8_E4M3", "BF16"};
    const char *shapes[] = {"[20,20]", "[5,3]", "[20,20]", "[5,3]", "[10,20]", "[3,3]",
                            "[2,20]", "[1,3]"};
    const int bytes[] = {400, 30, 400, 30, 200, 18, 40, 6};
    write_file(names, dtypes, shapes, bytes, 8, 1);
    ck_assert_msg(agree(&cfg, config, K, &err) == RP_OK, "%s", err.msg);
    expect(agree(&cfg, config, Q, &err), RP_ERR_MISMATCH, &err,
           "model.safetensors: tensor '" Q "' is F8_E4M3, but ",
           "config.json's quantization_config.modules_to_not_convert entry 2 "
           "\"model.layers.0.self_attn.q_proj\" keeps module 'model.layers.0.self_attn.q_proj' "
           "unquantised");
    /* an expert kept by the pattern of the block's experts */
    expect(agree(&cfg, config, U, &err), RP_ERR_MISMATCH, &err, "tensor '" U "' is F8_E4M3",
           "entry 1 \"model.layers.0.mlp.experts\" keeps module "
           "'model.layers.0.mlp.experts.1.up_proj' unquantised");
    expect(agree(&cfg, config, R, &err), RP_ERR_MISMATCH, &err,
           "model.safetensors: tensor '" R "' is F8_E4M3; a router (mlp.gate) is never FP8", NULL);
    /* the other way: a quantised projection shipped plain; a kept one with
     * a scale beside it */
    const char *pnames[] = {K, Q, Q "_scale_inv"}, *plain[] = {"BF16", "BF16", "BF16"};
    const char *pshapes[] = {"[20,20]", "[20,20]", "[5,3]"};
    const int pbytes[] = {800, 800, 30};
    write_file(pnames, plain, pshapes, pbytes, 3, 1);
    expect(agree(&cfg, config, K, &err), RP_ERR_MISMATCH, &err,
           "model.safetensors: tensor '" K "' is BF16, but no entry of ",
           "config.json's quantization_config.modules_to_not_convert matches module "
           "'model.layers.0.self_attn.k_proj': the config says it ships F8_E4M3 with '" K
           "_scale_inv'");
    expect(agree(&cfg, config, Q, &err), RP_ERR_MISMATCH, &err,
           "tensor '" Q "' is BF16 with a '" Q "_scale_inv', but ", "entry 2");
#undef K
#undef Q
#undef U
#undef R
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_fp8");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, e4m3_all_codes);
    tcase_add_test(tc, dequantise_brute_force);
    tcase_add_test(tc, files);
    tcase_add_test(tc, config_agrees);
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
