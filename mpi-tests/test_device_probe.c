/* Proves: the device probe answers cleanly everywhere: the CPU is always
 * found; CUDA is either usable (and then a kernel launched through the
 * libtool-built .cu object computes the right saxpy, on a GPU of sm_80 or
 * newer) or reported as RP_ERR_NO_DEVICE / RP_ERR_UNSUPPORTED with a
 * message (an older GPU by name and compute capability), never a crash. */
#include "config.h"

#include <string.h>

#include "device/device.h"
#include "rp_check.h"
#ifdef RP_HAVE_CUDA
#include "kernels/cuda/cuda_probe.h"
#endif

START_TEST(cpu_always_present)
{
    rp_device_info info;
    rp_error err = {0};
    ck_assert_int_eq(rp_device_probe(RP_DEVICE_CPU, &info, &err), RP_OK);
    ck_assert_int_eq(info.kind, RP_DEVICE_CPU);
    ck_assert_uint_gt(info.memory_bytes, 0);
    ck_assert_msg(info.name[0] != '\0', "the CPU has no name");
}
END_TEST

START_TEST(cuda_present_or_clean_error)
{
    rp_device_info info;
    rp_error err = {0};
    rp_status s = rp_device_probe(RP_DEVICE_CUDA, &info, &err);
#ifdef RP_HAVE_CUDA
    if (s == RP_OK) {
        ck_assert_int_gt(info.count, 0);
        ck_assert_int_ge(info.sm, RP_CUDA_MIN_SM);
        float x[1000], y[1000];
        for (int i = 0; i < 1000; i++) {
            x[i] = (float)i;
            y[i] = 1.0f;
        }
        const char *why = "";
        ck_assert_msg(rp_cuda_saxpy_smoke(0, 1000, 2.0f, x, y, &why) == 0, "%s", why);
        for (int i = 0; i < 1000; i++)
            ck_assert_float_eq(y[i], 2.0f * (float)i + 1.0f);
    } else if (s == RP_ERR_UNSUPPORTED) {
        ck_assert_msg(strstr(err.msg, "has compute capability") && strstr(err.msg, "needs 8.0"),
                      "message: %s", err.msg);
    } else {
        ck_assert_int_eq(s, RP_ERR_NO_DEVICE);
        ck_assert_msg(strstr(err.msg, "no CUDA device") != NULL, "message: %s", err.msg);
    }
#else
    ck_assert_int_eq(s, RP_ERR_UNSUPPORTED);
    ck_assert(strstr(err.msg, "without CUDA") != NULL);
#endif
}
END_TEST

START_TEST(auto_falls_back_and_bad_names_rejected)
{
    rp_device_info info;
    rp_error err = {0};
    ck_assert_int_eq(rp_device_probe(RP_DEVICE_AUTO, &info, &err), RP_OK);
    ck_assert(info.kind == RP_DEVICE_CPU || info.kind == RP_DEVICE_CUDA);
    rp_device_kind k;
    ck_assert_int_eq(rp_device_kind_parse("gpu", &k, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "'gpu'") != NULL);
    ck_assert_int_eq(rp_device_kind_parse("cuda", &k, &err), RP_OK);
    ck_assert_int_eq(k, RP_DEVICE_CUDA);
}
END_TEST

static Suite *device_suite(void)
{
    Suite *s = suite_create("device_probe");
    TCase *tc = tcase_create("probe");
    tcase_add_test(tc, cpu_always_present);
    tcase_add_test(tc, cuda_present_or_clean_error);
    tcase_add_test(tc, auto_falls_back_and_bad_names_rejected);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(device_suite, "serial")
