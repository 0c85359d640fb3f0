/* Proves that the CPU device's test modes see what they are to check
 * (device/backend.h): under RP_TEST_EVENT_DEVICE=1 the CPU device is
 * ordered by events and offers asynchronous copies; an upload's destination
 * holds NaN bytes until the compute stream is made to wait for it
 * (rp_device_compute_after_copy) or its completion is seen, and a host
 * source changed after the copy read it and before its completion was seen
 * fails that completion; a download reads the device as it was at the last
 * rp_device_copies_after_compute(download), so one issued after a kernel op
 * with no such call between fails its completion, as does one whose source
 * a kernel op overwrote before its completion was seen, while one ordered
 * right lands the op's result (its host destination NaN until then); a
 * ticket is refused while its copy's completion was not seen; the mode
 * and RP_TEST_UNORDERED_DEVICE together are refused. Without the
 * variables the CPU device is as before (no asynchronous copies). Under
 * RP_TEST_UNORDERED_DEVICE=1 a kernel op issued through a table taken
 * before the last sync (as the evaluator holds its table) makes a copy
 * reading device memory fail: the ops are counted, not the table's taking. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "rp_check.h"

enum { N = 64 };

static rp_device *make(const char *events, const char *unordered)
{
    if (events)
        setenv("RP_TEST_EVENT_DEVICE", events, 1);
    else
        unsetenv("RP_TEST_EVENT_DEVICE");
    if (unordered)
        setenv("RP_TEST_UNORDERED_DEVICE", unordered, 1);
    else
        unsetenv("RP_TEST_UNORDERED_DEVICE");
    rp_device_params p = {.kind = RP_DEVICE_CPU, .threads = 1};
    rp_device *d = NULL;
    rp_error err = {0};
    ck_assert_msg(rp_device_create(&p, &d, &err) == RP_OK, "%s", err.msg);
    return d;
}

static float *dalloc(rp_device *d)
{
    void *p = NULL;
    rp_error err = {0};
    ck_assert_msg(rp_device_alloc(d, N * sizeof(float), &p, &err) == RP_OK, "%s", err.msg);
    return p;
}

static void fill(float *h, float base)
{
    for (int i = 0; i < N; i++)
        h[i] = base + (float)i;
}

/* dst = 2 * src on the device, a kernel op */
static void twice(rp_device *d, float *dst, const float *src)
{
    rp_kernels k;
    rp_error err = {0};
    ck_assert(rp_device_kernels(d, &k, &err) == RP_OK);
    ck_assert(k.ops->scaled_add(k.state, src, 2.0f, dst, NULL, N, 0, &err) == RP_OK);
}

START_TEST(test_plain_cpu_unchanged)
{
    rp_device *d = make(NULL, NULL);
    ck_assert(!rp_device_copies_asynchronous(d));
    ck_assert(rp_device_ordered_by_events(d));
    rp_device_destroy(&d);
}
END_TEST

START_TEST(test_both_modes_refused)
{
    setenv("RP_TEST_EVENT_DEVICE", "1", 1);
    setenv("RP_TEST_UNORDERED_DEVICE", "1", 1);
    rp_device_params p = {.kind = RP_DEVICE_CPU, .threads = 1};
    rp_device *d = NULL;
    rp_error err = {0};
    ck_assert(rp_device_create(&p, &d, &err) != RP_OK);
    ck_assert_ptr_null(d);
    ck_assert_ptr_nonnull(strstr(err.msg, "RP_TEST_EVENT_DEVICE"));
    unsetenv("RP_TEST_UNORDERED_DEVICE");
}
END_TEST

START_TEST(test_upload_lands_when_ordered)
{
    rp_device *d = make("1", NULL);
    ck_assert(rp_device_copies_asynchronous(d));
    ck_assert(rp_device_ordered_by_events(d));
    float *dev = dalloc(d), h[N];
    fill(h, 1.0f);
    rp_error err = {0};
    ck_assert(rp_device_copy_issue(d, 0, dev, h, sizeof h, RP_COPY_UP, &err) == RP_OK);
    ck_assert(isnan(dev[0]) && isnan(dev[N - 1])); /* what a kernel op would read now */
    /* the ticket is the copy's until its completion is seen */
    ck_assert(rp_device_copy_issue(d, 0, dev, h, sizeof h, RP_COPY_UP, &err) != RP_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "ticket 0"));
    ck_assert(rp_device_compute_after_copy(d, 0, &err) == RP_OK);
    ck_assert(dev[0] == 1.0f && dev[N - 1] == (float)N);
    ck_assert(rp_device_copy_complete(d, 0, &err) == RP_OK);
    rp_device_free(d, dev);
    rp_device_destroy(&d);
}
END_TEST

START_TEST(test_upload_source_kept_until_complete)
{
    rp_device *d = make("1", NULL);
    float *dev = dalloc(d), h[N];
    fill(h, 1.0f);
    rp_error err = {0};
    ck_assert(rp_device_copy_issue(d, 1, dev, h, sizeof h, RP_COPY_UP, &err) == RP_OK);
    ck_assert(rp_device_compute_after_copy(d, 1, &err) == RP_OK);
    h[3] = -7.0f; /* the host reuses its buffer before the completion */
    ck_assert(rp_device_copy_complete(d, 1, &err) != RP_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "host source"));
    /* waited for first, the host may reuse it */
    ck_assert(rp_device_copy_issue(d, 1, dev, h, sizeof h, RP_COPY_UP, &err) == RP_OK);
    ck_assert(rp_device_copy_complete(d, 1, &err) == RP_OK);
    h[3] = 5.0f;
    ck_assert(dev[3] == -7.0f);
    rp_device_free(d, dev);
    rp_device_destroy(&d);
}
END_TEST

/* An upload the compute stream waited for has finished reading its source
 * once the host has seen a download complete that was ordered after that
 * wait (on a GPU the download's event follows the upload's): the host may
 * reuse the source then, before the upload's own completion is seen. Not
 * before that download is seen, nor after one ordered before the wait. */
START_TEST(test_upload_source_free_after_ordered_download)
{
    rp_device *d = make("1", NULL);
    float *dev = dalloc(d), *b = dalloc(d), h[N], out[N];
    rp_error err = {0};
    for (int kind = 0; kind < 3; kind++) {
        fill(h, 1.0f);
        if (kind == 2) /* the download stream ordered before the wait */
            ck_assert(rp_device_copies_after_compute(d, RP_COPY_DOWN, &err) == RP_OK);
        ck_assert(rp_device_copy_issue(d, 1, dev, h, sizeof h, RP_COPY_UP, &err) == RP_OK);
        ck_assert(rp_device_compute_after_copy(d, 1, &err) == RP_OK);
        twice(d, b, dev);
        if (kind != 2)
            ck_assert(rp_device_copies_after_compute(d, RP_COPY_DOWN, &err) == RP_OK);
        ck_assert(rp_device_copy_issue(d, 2, out, b, sizeof out, RP_COPY_DOWN, &err) == RP_OK);
        if (kind == 1) /* before the download is seen */
            h[3] = -7.0f;
        rp_status s2 = rp_device_copy_complete(d, 2, &err);
        if (kind != 2)
            ck_assert_msg(s2 == RP_OK && out[5] == 2.0f * 6.0f, "%s", err.msg);
        h[3] = -7.0f;
        rp_status s1 = rp_device_copy_complete(d, 1, &err);
        if (kind == 0)
            ck_assert_msg(s1 == RP_OK, "kind %d: %s", kind, err.msg);
        else
            ck_assert_msg(s1 != RP_OK && strstr(err.msg, "host source"), "kind %d: %s", kind,
                          s1 == RP_OK ? "the change was not caught" : err.msg);
    }
    rp_device_free(d, dev);
    rp_device_free(d, b);
    rp_device_destroy(&d);
}
END_TEST

START_TEST(test_download_ordered_after_ops)
{
    rp_device *d = make("1", NULL);
    float *a = dalloc(d), *b = dalloc(d), h[N], out[N];
    fill(h, 1.0f);
    rp_error err = {0};
    ck_assert(rp_device_copy(d, a, h, sizeof h, &err) == RP_OK);
    twice(d, b, a);
    ck_assert(rp_device_copies_after_compute(d, RP_COPY_DOWN, &err) == RP_OK);
    ck_assert(rp_device_copy_issue(d, 2, out, b, sizeof out, RP_COPY_DOWN, &err) == RP_OK);
    ck_assert(isnan(out[0])); /* the host's view until the completion */
    ck_assert(rp_device_copy_complete(d, 2, &err) == RP_OK);
    ck_assert(out[0] == 2.0f && out[N - 1] == 2.0f * (float)N);
    rp_device_free(d, a);
    rp_device_free(d, b);
    rp_device_destroy(&d);
}
END_TEST

START_TEST(test_download_not_ordered_fails)
{
    rp_device *d = make("1", NULL);
    float *a = dalloc(d), *b = dalloc(d), h[N], out[N];
    fill(h, 1.0f);
    rp_error err = {0};
    ck_assert(rp_device_copy(d, a, h, sizeof h, &err) == RP_OK);
    ck_assert(rp_device_copies_after_compute(d, RP_COPY_DOWN, &err) == RP_OK);
    twice(d, b, a); /* after the download stream's last ordering */
    ck_assert(rp_device_copy_issue(d, 2, out, b, sizeof out, RP_COPY_DOWN, &err) == RP_OK);
    ck_assert(rp_device_copy_complete(d, 2, &err) != RP_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "copies_after_compute"));
    rp_device_free(d, a);
    rp_device_free(d, b);
    rp_device_destroy(&d);
}
END_TEST

START_TEST(test_download_source_overwritten_fails)
{
    rp_device *d = make("1", NULL);
    float *a = dalloc(d), *b = dalloc(d), h[N], out[N];
    fill(h, 1.0f);
    rp_error err = {0};
    ck_assert(rp_device_copy(d, a, h, sizeof h, &err) == RP_OK);
    twice(d, b, a);
    ck_assert(rp_device_copies_after_compute(d, RP_COPY_DOWN, &err) == RP_OK);
    ck_assert(rp_device_copy_issue(d, 3, out, b, sizeof out, RP_COPY_DOWN, &err) == RP_OK);
    twice(d, b, b); /* before the completion was seen */
    ck_assert(rp_device_copy_complete(d, 3, &err) != RP_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "download of"));
    rp_device_free(d, a);
    rp_device_free(d, b);
    rp_device_destroy(&d);
}
END_TEST

START_TEST(test_unordered_counts_ops)
{
    rp_device *d = make(NULL, "1");
    ck_assert(!rp_device_ordered_by_events(d));
    float *a = dalloc(d), *b = dalloc(d), h[N], out[N];
    fill(h, 1.0f);
    rp_error err = {0};
    ck_assert(rp_device_copy(d, a, h, sizeof h, &err) == RP_OK);
    rp_kernels k;
    ck_assert(rp_device_kernels(d, &k, &err) == RP_OK); /* taken once, held */
    ck_assert(rp_device_sync(d, &err) == RP_OK);
    ck_assert(rp_device_copy(d, out, a, sizeof out, &err) == RP_OK); /* nothing issued since */
    ck_assert(k.ops->scaled_add(k.state, a, 2.0f, b, NULL, N, 0, &err) == RP_OK);
    ck_assert(rp_device_copy(d, out, b, sizeof out, &err) != RP_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "before rp_device_sync"));
    ck_assert(rp_device_sync(d, &err) == RP_OK);
    ck_assert(rp_device_copy(d, out, b, sizeof out, &err) == RP_OK);
    ck_assert(out[1] == 4.0f);
    rp_device_free(d, a);
    rp_device_free(d, b);
    rp_device_destroy(&d);
    unsetenv("RP_TEST_UNORDERED_DEVICE");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("event_device");
    TCase *tc = tcase_create("modes");
    tcase_add_test(tc, test_plain_cpu_unchanged);
    tcase_add_test(tc, test_both_modes_refused);
    tcase_add_test(tc, test_upload_lands_when_ordered);
    tcase_add_test(tc, test_upload_source_kept_until_complete);
    tcase_add_test(tc, test_upload_source_free_after_ordered_download);
    tcase_add_test(tc, test_download_ordered_after_ops);
    tcase_add_test(tc, test_download_not_ordered_fails);
    tcase_add_test(tc, test_download_source_overwritten_fails);
    tcase_add_test(tc, test_unordered_counts_ops);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
