/* Proves: safetensors files written by roundpipe read back with the same
 * names, shapes and values (F32 exact; BF16 rounded to nearest even, checked
 * against hand-computed bit patterns; F16 likewise, and a value beyond the
 * F16 range fails the write naming the tensor and leaves no file); F16
 * files decode; a model directory
 * opens from model.safetensors or from a sharded index; and every kind of
 * malformed file (truncated, oversized or non-JSON header, missing fields,
 * offsets past the end, overlap, shape/bytes mismatch, unknown dtype,
 * duplicate names, bad index) is refused with the right status and a
 * message naming the file and the field or tensor. Qwen3-MoE experts
 * (io/expert_layout.h): a directory in transformers 5's fused layout
 * answers every per-expert name with the right slice (gate rows, then up
 * rows; down per expert), bit for bit the values of the per-expert file;
 * a set holding both layouts does not open, naming both tensors; a fused
 * tensor of the wrong rank, or without the asked expert, is RP_ERR_MISMATCH
 * naming the file and the tensor; a missing expert names itself. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/name_index.h"
#include "io/safetensors.h"
#include "io/safetensors_set.h"
#include "io/safetensors_writer.h"
#include <unistd.h>

#include "rp_check.h"

static char *tmp_path(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", rp_test_tmpdir(), name);
    return p;
}

/* A safetensors file from a header text and raw data; hlen_override != 0
 * writes that value as the header length instead of the true one. */
static void write_raw(const char *path, const char *header, const void *data, size_t n,
                      uint64_t hlen_override)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint64_t hl = hlen_override ? hlen_override : strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hl >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (n)
        fwrite(data, 1, n, f);
    fclose(f);
}

static void assert_msg_has(const rp_error *err, const char *a, const char *b)
{
    if (!strstr(err->msg, a) || (b && !strstr(err->msg, b)))
        ck_abort_msg("message '%s' lacks '%s'%s%s", err->msg, a, b ? " or " : "", b ? b : "");
}

/* Open a file made from header+data; expect failure code and words in the message. */
static void expect_bad(const char *file, const char *header, size_t ndata, uint64_t hl,
                       rp_status code, const char *word)
{
    static unsigned char zeros[256];
    char *p = tmp_path(file);
    write_raw(p, header, zeros, ndata, hl);
    rp_safetensors *st = (rp_safetensors *)1;
    rp_error err = {0};
    rp_status s = rp_safetensors_open(p, &st, &err);
    ck_assert_msg(s == code, "%s: status %d, expected %d (%s)", file, s, code, err.msg);
    ck_assert_ptr_null(st);
    assert_msg_has(&err, p, word);
}

START_TEST(roundtrip_f32_bf16)
{
    float a[6] = {1.0f, -2.5f, 0.15625f, 3e-3f, 1e30f, -0.0f};
    /* bf16 cases: 1+2^-8 is a tie between 1.0 and 1+2^-7 -> even (1.0);
     * 1+3*2^-9 is above halfway -> 1+2^-7; 1.5 is exact */
    float b[3] = {1.00390625f, 1.005859375f, 1.5f};
    uint16_t b_expect[3] = {0x3f80, 0x3f81, 0x3fc0};
    int64_t sa[2] = {2, 3}, sb[1] = {3}, s0[1] = {0};
    rp_safetensors_writer *w;
    rp_error err = {0};
    ck_assert_int_eq(rp_safetensors_writer_create(&w, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "b.weight", RP_BF16, RP_F32, 1, sb, b, &err),
                     RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "a \"quoted\"\\name", RP_F32, RP_F32, 2, sa, a,
                                               &err),
                     RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "empty", RP_F32, RP_F32, 1, s0, NULL, &err),
                     RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "b.weight", RP_F32, RP_F32, 1, sb, b, &err),
                     RP_ERR_INVALID_ARG);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "x", RP_F16, RP_BF16, 1, sb, b, &err),
                     RP_ERR_UNSUPPORTED);
    char *p = tmp_path("rt.safetensors");
    ck_assert_int_eq(rp_safetensors_writer_write(w, p, &err), RP_OK);
    rp_safetensors_writer_destroy(&w);
    ck_assert_ptr_null(w);

    /* data starts at a multiple of 8 */
    FILE *f = fopen(p, "rb");
    unsigned char len8[8];
    ck_assert_int_eq(fread(len8, 1, 8, f), 8);
    fclose(f);
    ck_assert_int_eq(len8[0] % 8, 0);

    rp_safetensors *st;
    ck_assert_int_eq(rp_safetensors_open(p, &st, &err), RP_OK);
    ck_assert_uint_eq(rp_safetensors_count(st), 3);
    ck_assert_str_eq(rp_safetensors_name(st, 0), "a \"quoted\"\\name"); /* sorted order */
    ck_assert_str_eq(rp_safetensors_name(st, 1), "b.weight");
    ck_assert_str_eq(rp_safetensors_metadata(st, "format"), "pt");
    rp_safetensors_tensor t;
    ck_assert_int_eq(rp_safetensors_find(st, "b.weight", &t, &err), RP_OK);
    ck_assert_str_eq(t.dtype_name, "BF16");
    ck_assert_int_eq(t.dtype, RP_BF16);
    ck_assert_uint_eq(t.nbytes, 6);
    for (int i = 0; i < 3; i++) {
        uint16_t h;
        memcpy(&h, (const char *)t.data + 2 * i, 2);
        ck_assert_uint_eq(h, b_expect[i]);
    }
    float out[6];
    ck_assert_int_eq(rp_safetensors_read_f32(st, "a \"quoted\"\\name", 2, sa, out, &err), RP_OK);
    ck_assert_mem_eq(out, a, sizeof a);
    ck_assert_int_eq(rp_safetensors_read_f32(st, "b.weight", 1, sb, out, &err), RP_OK);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], 1.0078125f);
    ck_assert_float_eq(out[2], 1.5f);
    ck_assert_int_eq(rp_safetensors_find(st, "empty", &t, &err), RP_OK);
    ck_assert_int_eq(t.numel, 0);

    /* wrong expected shape names file, tensor, both shapes */
    int64_t wrong[2] = {3, 2};
    ck_assert_int_eq(rp_safetensors_read_f32(st, "a \"quoted\"\\name", 2, wrong, out, &err),
                     RP_ERR_MISMATCH);
    assert_msg_has(&err, p, "expected shape [3, 2], found [2, 3]");
    ck_assert_int_eq(rp_safetensors_read_f32(st, "nope", 1, sb, out, &err), RP_ERR_MISMATCH);
    assert_msg_has(&err, p, "'nope'");
    rp_safetensors_close(&st);
    ck_assert_ptr_null(st);

    /* BF16 -> F32 on write is exact */
    uint16_t hb[2] = {0x3f81, 0xc000};
    int64_t s2[1] = {2};
    ck_assert_int_eq(rp_safetensors_writer_create(&w, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "h", RP_F32, RP_BF16, 1, s2, hb, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_write(w, p, &err), RP_OK);
    rp_safetensors_writer_destroy(&w);
    ck_assert_int_eq(rp_safetensors_open(p, &st, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_read_f32(st, "h", 1, s2, out, &err), RP_OK);
    ck_assert_float_eq(out[0], 1.0078125f);
    ck_assert_float_eq(out[1], -2.0f);
    rp_safetensors_close(&st);
}
END_TEST

START_TEST(writes_f16_nearest_even)
{
    /* hand-computed: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 -> even (1.0);
     * 1 + 3*2^-11 ties up to 1 + 2^-9; 65504 is the largest half; 2^-24 the
     * smallest subnormal, 2^-25 a tie -> 0; 3*2^-25 -> 2^-23; -2 exact */
    float x[8] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 0x1p-24f,
                  0x1p-25f, 3 * 0x1p-25f, -2.0f, 65519.0f};
    uint16_t want[8] = {0x3c00, 0x3c02, 0x7bff, 0x0001, 0x0000, 0x0002, 0xc000, 0x7bff};
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(rp_f32_to_f16(x[i]), want[i]);
    ck_assert_uint_eq(rp_f32_to_f16(65520.0f), 0x7c00);
    ck_assert_uint_eq(rp_f32_to_f16(-1e9f), 0xfc00);
    int64_t s8[1] = {8};
    rp_safetensors_writer *w;
    rp_error err = {0};
    ck_assert_int_eq(rp_safetensors_writer_create(&w, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "h", RP_F16, RP_F32, 1, s8, x, &err), RP_OK);
    char *p = tmp_path("f16.safetensors");
    ck_assert_int_eq(rp_safetensors_writer_write(w, p, &err), RP_OK);
    rp_safetensors_writer_destroy(&w);
    rp_safetensors *st = NULL;
    ck_assert_int_eq(rp_safetensors_open(p, &st, &err), RP_OK);
    float back[8];
    int64_t shape[1] = {8};
    ck_assert_int_eq(rp_safetensors_read_f32(st, "h", 1, shape, back, &err), RP_OK);
    for (int i = 0; i < 8; i++)
        ck_assert_float_eq(back[i], rp_f16_to_f32(want[i]));
    rp_safetensors_close(&st);

    /* 70000 does not fit: the tensor is named, nothing is written */
    float big[2] = {1.0f, 70000.0f};
    int64_t s2[1] = {2};
    char *q = tmp_path("f16-overflow.safetensors");
    ck_assert_int_eq(rp_safetensors_writer_create(&w, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "layers.0.w", RP_F16, RP_F32, 1, s2, big, &err),
                     RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_write(w, q, &err), RP_ERR_RANGE);
    assert_msg_has(&err, "layers.0.w", "fp16");
    ck_assert_int_eq(access(q, F_OK), -1);
    rp_safetensors_writer_destroy(&w);
}
END_TEST

START_TEST(writer_leaves_no_temp_files)
{
    char *dir = tmp_path("wdir");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    float x = 1.0f;
    int64_t s1[1] = {1};
    rp_safetensors_writer *w;
    rp_error err = {0};
    ck_assert_int_eq(rp_safetensors_writer_create(&w, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "x", RP_F32, RP_F32, 1, s1, &x, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_write(w, path, &err), RP_OK);
    /* a write that cannot happen (no such directory) fails cleanly */
    char bad[700];
    snprintf(bad, sizeof bad, "%s/missing/m.safetensors", dir);
    ck_assert_int_eq(rp_safetensors_writer_write(w, bad, &err), RP_ERR_IO);
    assert_msg_has(&err, bad, NULL);
    rp_safetensors_writer_destroy(&w);
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') {
            ck_assert_str_eq(de->d_name, "m.safetensors");
            n++;
        }
    closedir(d);
    ck_assert_int_eq(n, 1);
}
END_TEST

START_TEST(reads_f16_and_refuses_i64_on_request)
{
    uint16_t h[2] = {0x3c00, 0xc000}; /* 1.0, -2.0 */
    unsigned char data[4 + 8];
    memcpy(data, h, 4);
    memset(data + 4, 0, 8);
    char *p = tmp_path("f16.safetensors");
    write_raw(p,
              "{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
              "\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[4,12]},"
              "\"__metadata__\":{\"format\":\"pt\"}}   ",
              data, sizeof data, 0);
    rp_safetensors *st;
    rp_error err = {0};
    ck_assert_int_eq(rp_safetensors_open(p, &st, &err), RP_OK);
    float out[2];
    int64_t s2[1] = {2}, s1[1] = {1};
    ck_assert_int_eq(rp_safetensors_read_f32(st, "h", 1, s2, out, &err), RP_OK);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], -2.0f);
    ck_assert_int_eq(rp_safetensors_read_f32(st, "ids", 1, s1, out, &err), RP_ERR_UNSUPPORTED);
    assert_msg_has(&err, p, "'ids': dtype I64");
    rp_safetensors_close(&st);
}
END_TEST

#define T(dtype, shape, offs) \
    "{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

START_TEST(bad_files)
{
    expect_bad("emptyheader", "", 0, 0, RP_ERR_FORMAT, "not a JSON object");
    expect_bad("trunc", "{\"a\":" T("F32", "[1]", "[0,4]") "}", 4, 5000, RP_ERR_FORMAT,
               "truncated");
    expect_bad("huge", "{}", 0, (uint64_t)1 << 40, RP_ERR_FORMAT, "limit");
    expect_bad("notjson", "{\"a\":{\"dtype\":\"F32\",", 0, 0, RP_ERR_FORMAT, "not valid JSON");
    expect_bad("notobj", "[1, 2]", 0, 0, RP_ERR_FORMAT, "not a JSON object");
    expect_bad("trailing", "{} x", 0, 0, RP_ERR_FORMAT, "trailing");
    expect_bad("nodtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, RP_ERR_FORMAT,
               "'a': missing field 'dtype'");
    expect_bad("noshape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, 0,
               RP_ERR_FORMAT, "'a': missing field 'shape'");
    expect_bad("nooffs", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, 0, RP_ERR_FORMAT,
               "'a': missing field 'data_offsets'");
    expect_bad("pasteof", "{\"a\":" T("F32", "[4]", "[0,16]") "}", 8, 0, RP_ERR_FORMAT,
               "'a': field 'data_offsets': end 16 is past the end");
    expect_bad("overlap",
               "{\"a\":" T("F32", "[2]", "[0,8]") ",\"b\":" T("F32", "[2]", "[4,12]") "}", 12, 0,
               RP_ERR_FORMAT, "overlap");
    expect_bad("sizemismatch", "{\"w\":" T("F32", "[2,3]", "[0,20]") "}", 24, 0, RP_ERR_FORMAT,
               "'w': field 'shape'");
    expect_bad("unknowndtype", "{\"w\":" T("Q4", "[1]", "[0,1]") "}", 1, 0, RP_ERR_FORMAT,
               "unknown dtype 'Q4'");
    expect_bad("dup", "{\"w\":" T("F32", "[1]", "[0,4]") ",\"w\":" T("F32", "[1]", "[4,8]") "}",
               8, 0, RP_ERR_FORMAT, "'w' appears twice");
    expect_bad("negshape", "{\"w\":" T("F32", "[-1]", "[0,4]") "}", 4, 0, RP_ERR_FORMAT,
               "'w': field 'shape': negative");
    expect_bad("floatoff", "{\"w\":" T("F32", "[1]", "[0,4.0]") "}", 4, 0, RP_ERR_FORMAT,
               "'data_offsets'");
    expect_bad("threeoffs", "{\"w\":" T("F32", "[1]", "[0,4,8]") "}", 8, 0, RP_ERR_FORMAT,
               "'data_offsets'");
    expect_bad("backwards", "{\"w\":" T("F32", "[0]", "[4,0]") "}", 4, 0, RP_ERR_FORMAT,
               "begin 4 > end 0");
    expect_bad("metanum", "{\"__metadata__\":{\"format\":1}}", 0, 0, RP_ERR_FORMAT,
               "'__metadata__'");
    expect_bad("dtypetype", "{\"w\":" T("F32", "[1]", "[0,4]") ",\"v\":{\"dtype\":5}}", 4, 0,
               RP_ERR_FORMAT, "'v': field 'dtype'");
    expect_bad("badutf8", "{\"\xff\":{}}", 0, 0, RP_ERR_FORMAT, "UTF-8");
    expect_bad("overflow", "{\"w\":" T("F32", "[4294967296,4294967296]", "[0,4]") "}", 4, 0,
               RP_ERR_FORMAT, "'w': field 'shape'");
}
END_TEST

START_TEST(in_memory_image)
{
    static const char img[] = "\x02\0\0\0\0\0\0\0{}";
    rp_safetensors *st;
    rp_error err = {0};
    ck_assert_int_eq(rp_safetensors_open_memory(img, 10, "mem", &st, &err), RP_OK);
    ck_assert_uint_eq(rp_safetensors_count(st), 0);
    rp_safetensors_close(&st);
    ck_assert_int_eq(rp_safetensors_open_memory(img, 9, "mem", &st, &err), RP_ERR_FORMAT);
    assert_msg_has(&err, "mem", "truncated");
    /* a file shorter than the length prefix */
    char *p = tmp_path("short");
    FILE *f = fopen(p, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    ck_assert_int_eq(rp_safetensors_open(p, &st, &err), RP_ERR_FORMAT);
    assert_msg_has(&err, p, "truncated");
}
END_TEST

static void write_shard(const char *path, const char *const *names, int n, float base)
{
    rp_safetensors_writer *w;
    rp_error err = {0};
    float vals[8];
    int64_t s[1] = {2};
    ck_assert_int_eq(rp_safetensors_writer_create(&w, &err), RP_OK);
    for (int i = 0; i < n; i++) {
        vals[2 * i] = base + (float)i;
        vals[2 * i + 1] = -(base + (float)i);
        ck_assert_int_eq(rp_safetensors_writer_add(w, names[i], RP_F32, RP_F32, 1, s,
                                                   &vals[2 * i], &err),
                         RP_OK);
    }
    ck_assert_int_eq(rp_safetensors_writer_write(w, path, &err), RP_OK);
    rp_safetensors_writer_destroy(&w);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(model_dir_single_and_sharded)
{
    char p[700];
    rp_error err = {0};
    rp_safetensors_set *set;
    float out[2];
    int64_t s2[1] = {2};
    const char *names1[] = {"model.embed_tokens.weight", "model.norm.weight"};
    const char *names2[] = {"lm_head.weight"};

    char *single = tmp_path("single");
    mkdir(single, 0755);
    ck_assert_int_eq(rp_safetensors_set_open_dir(single, &set, &err), RP_ERR_IO);
    assert_msg_has(&err, single, "model.safetensors");
    snprintf(p, sizeof p, "%s/model.safetensors", single);
    write_shard(p, names1, 2, 10.0f);
    ck_assert_int_eq(rp_safetensors_set_open_dir(single, &set, &err), RP_OK);
    ck_assert_uint_eq(rp_safetensors_set_count(set), 2);
    ck_assert_int_eq(rp_safetensors_set_read_f32(set, "model.norm.weight", 1, s2, out, &err),
                     RP_OK);
    ck_assert_float_eq(out[0], 11.0f);
    rp_safetensors_set_close(&set);
    ck_assert_ptr_null(set);

    char *sh = tmp_path("sharded");
    mkdir(sh, 0755);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", sh);
    write_shard(p, names1, 2, 10.0f);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", sh);
    write_shard(p, names2, 1, 20.0f);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", sh);
    write_text(p, "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {"
                  "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
                  "\"model.norm.weight\": \"model-00001-of-00002.safetensors\","
                  "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}");
    ck_assert_int_eq(rp_safetensors_set_open_dir(sh, &set, &err), RP_OK);
    ck_assert_uint_eq(rp_safetensors_set_count(set), 3);
    ck_assert_str_eq(rp_safetensors_set_name(set, 0), "lm_head.weight");
    ck_assert_int_eq(rp_safetensors_set_read_f32(set, "lm_head.weight", 1, s2, out, &err), RP_OK);
    ck_assert_float_eq(out[0], 20.0f);
    ck_assert_float_eq(out[1], -20.0f);
    ck_assert_int_eq(rp_safetensors_set_read_f32(set, "model.embed_tokens.weight", 1, s2, out,
                                                 &err),
                     RP_OK);
    ck_assert_float_eq(out[0], 10.0f);
    ck_assert_int_eq(rp_safetensors_set_read_f32(set, "absent", 1, s2, out, &err),
                     RP_ERR_MISMATCH);
    assert_msg_has(&err, "'absent'", NULL);
    rp_safetensors_set_close(&set);

    /* index pointing at the wrong shard */
    write_text(p, "{\"weight_map\": {\"lm_head.weight\": \"model-00001-of-00002.safetensors\"}}");
    ck_assert_int_eq(rp_safetensors_set_open_dir(sh, &set, &err), RP_ERR_FORMAT);
    assert_msg_has(&err, p, "'lm_head.weight'");
    /* shard outside the directory */
    write_text(p, "{\"weight_map\": {\"lm_head.weight\": \"../x.safetensors\"}}");
    ck_assert_int_eq(rp_safetensors_set_open_dir(sh, &set, &err), RP_ERR_FORMAT);
    assert_msg_has(&err, p, "not a plain file name");
    /* missing shard file */
    write_text(p, "{\"weight_map\": {\"lm_head.weight\": \"gone.safetensors\"}}");
    ck_assert_int_eq(rp_safetensors_set_open_dir(sh, &set, &err), RP_ERR_IO);
    assert_msg_has(&err, "gone.safetensors", NULL);
    assert_msg_has(&err, p, "field 'weight_map'"); /* the index that names it, too */
    /* no weight_map, not JSON */
    write_text(p, "{\"metadata\": {}}");
    ck_assert_int_eq(rp_safetensors_set_open_dir(sh, &set, &err), RP_ERR_FORMAT);
    assert_msg_has(&err, p, "'weight_map'");
    write_text(p, "{\"weight_map\": ");
    ck_assert_int_eq(rp_safetensors_set_open_dir(sh, &set, &err), RP_ERR_FORMAT);
    assert_msg_has(&err, p, "not valid JSON");
    /* the same tensor in two shards */
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", sh);
    write_shard(p, names1, 1, 30.0f);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", sh);
    write_text(p, "{\"weight_map\": {"
                  "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
                  "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"}}");
    ck_assert_int_eq(rp_safetensors_set_open_dir(sh, &set, &err), RP_ERR_FORMAT);
    assert_msg_has(&err, "'model.embed_tokens.weight' appears in both", NULL);
    ck_assert_ptr_null(set);
}
END_TEST

/* Per-expert values: expert e, part p (0 gate, 1 up, 2 down), element i. */
static float expert_value(int e, int p, int i) { return (float)(1000 * e + 100 * p + i); }

START_TEST(experts_fused_layout)
{
    enum { E = 3, I = 2, H = 4 };
    rp_error err = {0};
    float gate_up[E][2 * I][H], down[E][H][I];
    for (int e = 0; e < E; e++)
        for (int i = 0; i < I * H; i++) {
            gate_up[e][i / H][i % H] = expert_value(e, 0, i);
            gate_up[e][I + i / H][i % H] = expert_value(e, 1, i);
            down[e][i / I][i % I] = expert_value(e, 2, i);
        }
    char *dir = tmp_path("fused-experts");
    mkdir(dir, 0755);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rp_safetensors_writer *w;
    const int64_t sgu[3] = {E, 2 * I, H}, sd[3] = {E, H, I}, s2[2] = {I, H};
    ck_assert_int_eq(rp_safetensors_writer_create(&w, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "model.layers.0.mlp.experts.gate_up_proj", RP_F32,
                                               RP_F32, 3, sgu, gate_up, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "model.layers.0.mlp.experts.down_proj", RP_F32,
                                               RP_F32, 3, sd, down, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_write(w, path, &err), RP_OK);
    rp_safetensors_writer_destroy(&w);
    rp_safetensors_set *set;
    ck_assert_int_eq(rp_safetensors_set_open_dir(dir, &set, &err), RP_OK);
    static const char *const part[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int e = 0; e < E; e++)
        for (int p = 0; p < 3; p++) {
            char name[128];
            snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.%s.weight", e, part[p]);
            const int64_t shape[2] = {p == 2 ? H : I, p == 2 ? I : H};
            float got[I * H];
            ck_assert_int_eq(rp_safetensors_set_read_f32(set, name, 2, shape, got, &err), RP_OK);
            for (int i = 0; i < I * H; i++)
                ck_assert_msg(got[i] == expert_value(e, p, i), "%s[%d] = %g", name, i, got[i]);
        }
    /* no such expert, and a missing expert of a per-expert file */
    const int64_t shape[2] = {I, H};
    float got[I * H];
    ck_assert_int_eq(rp_safetensors_set_read_f32(set, "model.layers.0.mlp.experts.3.gate_proj.weight",
                                                 2, shape, got, &err), RP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "gate_up_proj"));
    ck_assert_ptr_nonnull(strstr(err.msg, "model.safetensors"));
    ck_assert_int_eq(rp_safetensors_set_read_f32(set, "model.layers.1.mlp.experts.0.up_proj.weight",
                                                 2, shape, got, &err), RP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.layers.1.mlp.experts.0.up_proj.weight"));
    /* an expert's number spelled otherwise names no module (io/name_index.h) */
    ck_assert_int_ne(rp_safetensors_set_read_f32(set, "model.layers.0.mlp.experts.01.gate_proj.weight",
                                                 2, shape, got, &err), RP_OK);
    ck_assert_int_ne(rp_safetensors_set_read_f32(set, "model.layers.0.mlp.experts.+1.gate_proj.weight",
                                                 2, shape, got, &err), RP_OK);
    rp_safetensors_set_close(&set);

    /* a fused tensor of the wrong rank */
    ck_assert_int_eq(rp_safetensors_writer_create(&w, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "model.layers.0.mlp.experts.down_proj", RP_F32,
                                               RP_F32, 2, s2, down, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_write(w, path, &err), RP_OK);
    rp_safetensors_writer_destroy(&w);
    ck_assert_int_eq(rp_safetensors_set_open_dir(dir, &set, &err), RP_OK);
    const int64_t sdn[2] = {H, I};
    ck_assert_int_eq(rp_safetensors_set_read_f32(set, "model.layers.0.mlp.experts.0.down_proj.weight",
                                                 2, sdn, got, &err), RP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.layers.0.mlp.experts.down_proj"));
    rp_safetensors_set_close(&set);

    /* both layouts */
    ck_assert_int_eq(rp_safetensors_writer_create(&w, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "model.layers.0.mlp.experts.gate_up_proj", RP_F32,
                                               RP_F32, 3, sgu, gate_up, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_add(w, "model.layers.0.mlp.experts.0.gate_proj.weight",
                                               RP_F32, RP_F32, 2, s2, gate_up, &err), RP_OK);
    ck_assert_int_eq(rp_safetensors_writer_write(w, path, &err), RP_OK);
    rp_safetensors_writer_destroy(&w);
    ck_assert_int_eq(rp_safetensors_set_open_dir(dir, &set, &err), RP_ERR_FORMAT);
    ck_assert_ptr_null(set);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.layers.0.mlp.experts.gate_up_proj"));
    ck_assert_ptr_nonnull(strstr(err.msg, "model.layers.0.mlp.experts.0.gate_proj.weight"));
}
END_TEST

/* The one spelling of a block's or an expert's number in a name. */
START_TEST(name_index_form)
{
    const char *end;
    ck_assert_int_eq(rp_name_index("0.mlp", &end, 9), 0);
    ck_assert_str_eq(end, ".mlp");
    ck_assert_int_eq(rp_name_index("27.self_attn", &end, 27), 27);
    ck_assert_str_eq(end, ".self_attn");
    ck_assert_int_eq(rp_name_index("9223372036854775807.", &end, INT64_MAX), INT64_MAX);
    static const char *const bad[] = {"05.", "00", "+5.", "-5.", " 5.", "", ".5",
                                      "9223372036854775808."};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(rp_name_index(bad[i], &end, INT64_MAX) == -1, "'%s'", bad[i]);
        ck_assert_ptr_eq(end, bad[i]);
    }
    ck_assert_int_eq(rp_name_index("28.", &end, 27), -1); /* above the limit */
    ck_assert_int_eq(rp_name_index("4.", &end, 3), -1);
    ck_assert_int_eq(rp_name_index("1", &end, 0), -1);
    ck_assert_int_eq(rp_name_index("0", &end, 0), 0);
    ck_assert_int_eq(rp_name_index("28.", NULL, 28), 28);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_safetensors");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, roundtrip_f32_bf16);
    tcase_add_test(tc, writes_f16_nearest_even);
    tcase_add_test(tc, writer_leaves_no_temp_files);
    tcase_add_test(tc, reads_f16_and_refuses_i64_on_request);
    tcase_add_test(tc, bad_files);
    tcase_add_test(tc, in_memory_image);
    tcase_add_test(tc, model_dir_single_and_sharded);
    tcase_add_test(tc, experts_fused_layout);
    tcase_add_test(tc, name_index_form);
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
