/* Proves, on any machine with the CUDA toolkit (no GPU needed): the library
 * does not load cuBLAS or cuBLASLt until rp_cublas_open (a process linked
 * with it, as this test is, has neither in its address space at start),
 * and rp_cublas_open then loads both from the toolkit, resolves every
 * entry of the table, and the entries call into the libraries; a
 * RP_CUBLAS_LIBRARY naming a missing file, or a library that is not
 * cuBLAS, is refused naming the variable, the path and what is missing,
 * and a later call gives the same answer. Each test runs in its own
 * process (Check's fork mode), as the table is opened once per process. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cublas_api.h"
#include "rp_check.h"

/* Whether a file whose name contains `name` is mapped into this process. */
static int mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}

START_TEST(opened_only_when_asked)
{
    ck_assert_msg(!mapped("libcublas"), "cuBLAS is loaded before rp_cublas_open");
    char why[1024] = "";
    ck_assert_msg(rp_cublas_open(why, sizeof why) == 0, "rp_cublas_open: %s", why);
    ck_assert(mapped("libcublas.so."));
    ck_assert(mapped("libcublasLt.so."));
#define NON_NULL(field, symbol, library) ck_assert_msg(rp_cublas.field, "%s", #symbol);
    RP_CUBLAS_FUNCTIONS(NON_NULL)
#undef NON_NULL
    ck_assert_msg(strstr(rp_cublas_path(0), "libcublas.so."), "%s", rp_cublas_path(0));
    ck_assert_msg(strstr(rp_cublas_path(1), "libcublasLt.so."), "%s", rp_cublas_path(1));
    /* calls that need no GPU reach the libraries */
    const char *a = rp_cublas.get_status_string(CUBLAS_STATUS_NOT_INITIALIZED);
    const char *b = rp_cublas.lt_get_status_string(CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_msg(a && strstr(a, "not initialized"), "%s", a ? a : "NULL");
    ck_assert_msg(b && strstr(b, "unsupported value"), "%s", b ? b : "NULL");
    ck_assert_int_eq(rp_cublas_open(why, sizeof why), 0); /* once: the same answer */
}
END_TEST

/* With `var`=`value`, rp_cublas_open fails saying `expected` (in `why`). */
static void refused(const char *var, const char *value, const char *expected, char *why,
                    size_t why_len)
{
    setenv(var, value, 1);
    why[0] = '\0';
    ck_assert_int_eq(rp_cublas_open(why, why_len), -1);
    ck_assert_msg(strstr(why, expected), "message: %s", why);
}

START_TEST(missing_library_reported_by_its_path)
{
    char why[1024], again[1024] = "";
    refused("RP_CUBLAS_LIBRARY", "/nonexistent/libcublas.so.13",
            "RP_CUBLAS_LIBRARY=/nonexistent/libcublas.so.13 cannot be loaded", why, sizeof why);
    ck_assert(!mapped("libcublas"));
    ck_assert_str_eq(rp_cublas_path(0), "");
    ck_assert_int_eq(rp_cublas_open(again, sizeof again), -1);
    ck_assert_str_eq(again, why);
}
END_TEST

START_TEST(a_library_that_is_not_cublas_refused)
{
    char why[1024];
    refused("RP_CUBLAS_LIBRARY", "libc.so.6",
            "libc.so.6 has no symbol cublasCreate_v2: not the cuBLAS ", why, sizeof why);
    ck_assert_ptr_null(rp_cublas.create);
}
END_TEST

START_TEST(cublaslt_named_apart)
{
    char why[1024];
    refused("RP_CUBLASLT_LIBRARY", "/nonexistent/libcublasLt.so.13",
            "RP_CUBLASLT_LIBRARY=/nonexistent/libcublasLt.so.13 cannot be loaded", why,
            sizeof why);
}
END_TEST

static Suite *cublas_suite(void)
{
    Suite *s = suite_create("cublas_api");
    TCase *tc = tcase_create("open");
    tcase_add_test(tc, opened_only_when_asked);
    tcase_add_test(tc, missing_library_reported_by_its_path);
    tcase_add_test(tc, a_library_that_is_not_cublas_refused);
    tcase_add_test(tc, cublaslt_named_apart);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(cublas_suite, "serial")
