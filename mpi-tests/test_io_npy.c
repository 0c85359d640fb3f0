/* Proves: .npy files written by roundpipe (and hand-built headers in the
 * numpy 1.0, 2.0 and 3.0 layouts) read back with the right length, dtype and
 * values; token ids outside [0, vocab) and loss masks of the wrong length or
 * with values other than 0/1 are refused naming the index and both files;
 * and each kind of malformed file (bad magic, unsupported version,
 * big-endian, 2-D, fortran order, unknown dtype, truncated data, header
 * problems) is refused with the right status and a message naming the file
 * and the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
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

/* A .npy file from its parts: version major, the dict text, and data. */
static void write_npy(const char *path, int major, const char *dict, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    size_t hl = strlen(dict);
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0};
    pre[8] = (unsigned char)hl;
    pre[9] = (unsigned char)(hl >> 8);
    fwrite(pre, 1, major == 1 ? 10 : 12, f);
    fwrite(dict, 1, hl, f);
    if (n)
        fwrite(data, 1, n, f);
    fclose(f);
}

static void expect_bad_file(const char *path, rp_status code, const char *word)
{
    rp_npy *np = (rp_npy *)1;
    rp_error err = {0};
    rp_status s = rp_npy_open(path, &np, &err);
    ck_assert_msg(s == code, "%s: status %d, expected %d (%s)", path, s, code, err.msg);
    ck_assert_ptr_null(np);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, word), "message '%s' lacks '%s'",
                  err.msg, word);
}

static void expect_bad(const char *name, int major, const char *dict, size_t ndata,
                       rp_status code, const char *word)
{
    static const unsigned char zeros[64];
    char *p = tmp_path(name);
    write_npy(p, major, dict, zeros, ndata);
    expect_bad_file(p, code, word);
}

START_TEST(roundtrip_writers)
{
    rp_error err = {0};
    rp_npy *np;
    int32_t a[5] = {0, 7, -3, 2147483647, 42};
    char *p = tmp_path("a.npy");
    ck_assert_int_eq(rp_npy_write_i32(p, a, 5, &err), RP_OK);
    ck_assert_int_eq(rp_npy_open(p, &np, &err), RP_OK);
    ck_assert_int_eq(rp_npy_length(np), 5);
    ck_assert_int_eq(rp_npy_get_dtype(np), RP_NPY_I32);
    int32_t b[5];
    ck_assert_int_eq(rp_npy_read_i32(np, 0, 5, b, &err), RP_OK);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_int_eq(rp_npy_get(np, 2), -3);
    int64_t c[2];
    ck_assert_int_eq(rp_npy_read_i64(np, 3, 2, c, &err), RP_OK);
    ck_assert_int_eq(c[0], 2147483647);
    ck_assert_int_eq(c[1], 42);
    ck_assert_int_eq(rp_npy_read_i64(np, 4, 2, c, &err), RP_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, p));
    rp_npy_close(&np);
    ck_assert_ptr_null(np);

    /* header is padded so data starts at a multiple of 64, as numpy does */
    FILE *f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    ck_assert_int_eq((ftell(f) - 20) % 64, 0);
    fclose(f);

    uint16_t u[3] = {0, 65535, 300};
    p = tmp_path("u.npy");
    ck_assert_int_eq(rp_npy_write_u16(p, u, 3, &err), RP_OK);
    ck_assert_int_eq(rp_npy_open(p, &np, &err), RP_OK);
    ck_assert_int_eq(rp_npy_get_dtype(np), RP_NPY_U16);
    ck_assert_int_eq(rp_npy_get(np, 1), 65535);
    rp_npy_close(&np);

    uint8_t m[3] = {1, 0, 1};
    p = tmp_path("m.npy");
    ck_assert_int_eq(rp_npy_write_u8(p, m, 3, &err), RP_OK);
    ck_assert_int_eq(rp_npy_open(p, &np, &err), RP_OK);
    ck_assert_int_eq(rp_npy_get_dtype(np), RP_NPY_U8);
    ck_assert_int_eq(rp_npy_get(np, 2), 1);
    rp_npy_close(&np);

    p = tmp_path("empty.npy");
    ck_assert_int_eq(rp_npy_write_i32(p, NULL, 0, &err), RP_OK);
    ck_assert_int_eq(rp_npy_open(p, &np, &err), RP_OK);
    ck_assert_int_eq(rp_npy_length(np), 0);
    rp_npy_close(&np);
}
END_TEST

START_TEST(versions_and_dtypes)
{
    rp_error err = {0};
    rp_npy *np;
    int64_t big[2] = {5, 3000000000LL};
    char *p = tmp_path("v2.npy");
    write_npy(p, 2, "{\"descr\": \"<i8\", \"shape\": (2,), \"fortran_order\": False}\n", big,
              sizeof big);
    ck_assert_int_eq(rp_npy_open(p, &np, &err), RP_OK);
    ck_assert_int_eq(rp_npy_get(np, 1), 3000000000LL);
    int32_t d[2];
    ck_assert_int_eq(rp_npy_read_i32(np, 0, 2, d, &err), RP_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "element 1 = 3000000000"));
    rp_npy_close(&np);

    uint32_t u[1] = {4000000000u};
    p = tmp_path("v3.npy");
    write_npy(p, 3, "{'descr': '<u4', 'fortran_order': False, 'shape': (1,), }   \n", u, 4);
    ck_assert_int_eq(rp_npy_open(p, &np, &err), RP_OK);
    ck_assert_int_eq(rp_npy_get(np, 0), 4000000000LL);
    rp_npy_close(&np);

    unsigned char bools[2] = {1, 0};
    p = tmp_path("b.npy");
    write_npy(p, 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }\n", bools, 2);
    ck_assert_int_eq(rp_npy_open(p, &np, &err), RP_OK);
    ck_assert_int_eq(rp_npy_get_dtype(np), RP_NPY_BOOL);
    ck_assert_int_eq(rp_npy_get(np, 0), 1);
    rp_npy_close(&np);
}
END_TEST

#define D(descr, shape) "{'descr': '" descr "', 'fortran_order': False, 'shape': " shape ", }\n"

START_TEST(bad_files)
{
    char *p = tmp_path("magic.npy");
    FILE *f = fopen(p, "wb");
    fputs("PK\x03\x04 not numpy at all", f);
    fclose(f);
    expect_bad_file(p, RP_ERR_FORMAT, "bad magic");
    p = tmp_path("zero.npy");
    f = fopen(p, "wb");
    fclose(f);
    expect_bad_file(p, RP_ERR_FORMAT, "empty");

    expect_bad("version.npy", 4, D("<i4", "(1,)"), 4, RP_ERR_UNSUPPORTED, "version 4.0");
    expect_bad("bigendian.npy", 1, D(">i4", "(1,)"), 4, RP_ERR_UNSUPPORTED,
               "field 'descr': big-endian");
    expect_bad("twod.npy", 1, D("<i4", "(2, 2)"), 16, RP_ERR_FORMAT, "field 'shape': 2-D");
    expect_bad("zerod.npy", 1, D("<i4", "()"), 4, RP_ERR_FORMAT, "field 'shape': 0-D");
    expect_bad("fortran.npy", 1, "{'descr': '<i4', 'fortran_order': True, 'shape': (1,), }\n", 4,
               RP_ERR_UNSUPPORTED, "field 'fortran_order'");
    expect_bad("float.npy", 1, D("<f4", "(1,)"), 4, RP_ERR_UNSUPPORTED,
               "field 'descr': unsupported dtype '<f4'");
    expect_bad("trunc.npy", 1, D("<i4", "(10,)"), 8, RP_ERR_FORMAT, "truncated");
    expect_bad("long.npy", 1, D("<i4", "(1,)"), 8, RP_ERR_FORMAT, "data is 8 bytes");
    expect_bad("nodescr.npy", 1, "{'fortran_order': False, 'shape': (1,), }\n", 4, RP_ERR_FORMAT,
               "missing key 'descr'");
    expect_bad("extra.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
               4, RP_ERR_FORMAT, "unexpected key 'x'");
    expect_bad("dupkey.npy", 1,
               "{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (1,)}", 4,
               RP_ERR_FORMAT, "'descr' appears twice");
    expect_bad("notdict.npy", 1, "[1, 2]\n", 0, RP_ERR_FORMAT, "expected '{'");
    expect_bad("hdrtrunc.npy", 1, "", 0, RP_ERR_FORMAT, "header");
    /* header length field larger than the file */
    p = tmp_path("hlen.npy");
    f = fopen(p, "wb");
    fwrite("\x93NUMPY\x01\x00\xff\x7f{}", 1, 12, f);
    fclose(f);
    expect_bad_file(p, RP_ERR_FORMAT, "truncated");
    /* version 2 header length above the limit */
    p = tmp_path("hbig.npy");
    f = fopen(p, "wb");
    fwrite("\x93NUMPY\x02\x00\x00\x00\x00\x10{}", 1, 14, f);
    fclose(f);
    expect_bad_file(p, RP_ERR_FORMAT, "limit");
}
END_TEST

START_TEST(token_and_mask_checks)
{
    rp_error err = {0};
    rp_npy *tok, *mask;
    int32_t t[4] = {0, 5, 9, 3};
    char *tp = tmp_path("tok.npy");
    ck_assert_int_eq(rp_npy_write_i32(tp, t, 4, &err), RP_OK);
    ck_assert_int_eq(rp_npy_open(tp, &tok, &err), RP_OK);
    ck_assert_int_eq(rp_npy_check_tokens(tok, 10, &err), RP_OK);
    ck_assert_int_eq(rp_npy_check_tokens(tok, 9, &err), RP_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, tp));
    ck_assert_ptr_nonnull(strstr(err.msg, "index 2 is 9"));
    int32_t neg[2] = {1, -1};
    char *np2 = tmp_path("neg.npy");
    rp_npy *n;
    ck_assert_int_eq(rp_npy_write_i32(np2, neg, 2, &err), RP_OK);
    ck_assert_int_eq(rp_npy_open(np2, &n, &err), RP_OK);
    ck_assert_int_eq(rp_npy_check_tokens(n, 10, &err), RP_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "index 1 is -1"));
    rp_npy_close(&n);

    uint8_t m[4] = {1, 1, 0, 1};
    char *mp = tmp_path("mask.npy");
    ck_assert_int_eq(rp_npy_write_u8(mp, m, 4, &err), RP_OK);
    ck_assert_int_eq(rp_npy_open_mask(mp, tok, &mask, &err), RP_OK);
    ck_assert_int_eq(rp_npy_get(mask, 2), 0);
    rp_npy_close(&mask);

    ck_assert_int_eq(rp_npy_write_u8(mp, m, 3, &err), RP_OK);
    ck_assert_int_eq(rp_npy_open_mask(mp, tok, &mask, &err), RP_ERR_MISMATCH);
    ck_assert_ptr_null(mask);
    ck_assert_ptr_nonnull(strstr(err.msg, mp));
    ck_assert_ptr_nonnull(strstr(err.msg, tp));
    ck_assert_ptr_nonnull(strstr(err.msg, "3 elements"));
    ck_assert_ptr_nonnull(strstr(err.msg, "have 4"));

    m[3] = 2;
    ck_assert_int_eq(rp_npy_write_u8(mp, m, 4, &err), RP_OK);
    ck_assert_int_eq(rp_npy_open_mask(mp, tok, &mask, &err), RP_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, mp));
    ck_assert_ptr_nonnull(strstr(err.msg, "index 3 is 2"));

    /* a token file is not a mask */
    ck_assert_int_eq(rp_npy_open_mask(tp, tok, &mask, &err), RP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "field 'descr'"));
    rp_npy_close(&tok);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_npy");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, roundtrip_writers);
    tcase_add_test(tc, versions_and_dtypes);
    tcase_add_test(tc, bad_files);
    tcase_add_test(tc, token_and_mask_checks);
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
