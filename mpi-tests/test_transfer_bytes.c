/* Proves: whatever the request and chunk sizes (random, non-multiples,
 * 1-byte chunks, zero-byte requests), many requests of all classes
 * submitted from two threads at once arrive byte-exact, with no byte
 * written outside the destination; every request completes once and its
 * callback runs once; a failing copy fails only its request, with the back
 * end's message, and the engine carries on; bad requests are refused. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "engine/transfer.h"
#include "rp_check.h"

enum { N = 60, GUARD = 64 };

typedef struct side {
    rp_xfer *x;
    unsigned seed;
    int fails;
} side;

static _Atomic int callbacks;
static void on_done(rp_xfer_req *r, void *arg, rp_xfer_state state) { atomic_fetch_add(&callbacks, 1); }

static void *submit_many(void *arg)
{
    side *sd = arg;
    unsigned char *src[N], *dst[N];
    rp_xfer_req req[N];
    size_t n[N];
    for (int i = 0; i < N; i++) {
        uint32_t w[4];
        rp_philox4x32(sd->seed, 1, (uint64_t)i, w);
        n[i] = i % 10 == 0 ? 0 : w[0] % 70000; /* some zero-size */
        src[i] = malloc(n[i] + 1);
        dst[i] = malloc(n[i] + 2 * GUARD);
        for (size_t k = 0; k < n[i]; k++)
            src[i][k] = (unsigned char)(w[1] + k * 131 + (k >> 8));
        memset(dst[i], 0xA5, n[i] + 2 * GUARD);
        req[i] = (rp_xfer_req){.dst = dst[i] + GUARD, .src = src[i], .bytes = n[i],
                               .cls = (rp_xfer_class)(w[2] % RP_XFER_NCLASS), .done = on_done};
        rp_error err;
        if (rp_xfer_submit(sd->x, &req[i], &err) != RP_OK)
            sd->fails++;
    }
    for (int i = 0; i < N; i++) {
        rp_error err;
        if (rp_xfer_wait(sd->x, &req[i], &err) != RP_OK || atomic_load(&req[i].state) != RP_XFER_DONE)
            sd->fails++;
        if (memcmp(dst[i] + GUARD, src[i], n[i]) != 0)
            sd->fails++;
        for (int g = 0; g < GUARD; g++)
            if (dst[i][g] != 0xA5 || dst[i][GUARD + n[i] + g] != 0xA5)
                sd->fails++;
        free(src[i]);
        free(dst[i]);
    }
    return NULL;
}

START_TEST(random_sizes_arrive_byte_exact)
{
    size_t chunks[] = {1, 7, 4096, 10007, 65536, 1 << 20};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
        if (chunks[c] == 1) {
            /* 1-byte chunks: a few small requests only, to stay fast */
            rp_xfer_params p = {.chunk_bytes = 1};
            rp_xfer *x;
            rp_error err;
            ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_OK);
            char a[37], b[37] = {0};
            for (int i = 0; i < 37; i++)
                a[i] = (char)(i * 3);
            rp_xfer_req r = {.dst = b, .src = a, .bytes = 37, .cls = RP_XFER_SAVE};
            ck_assert_int_eq(rp_xfer_submit(x, &r, &err), RP_OK);
            ck_assert_int_eq(rp_xfer_wait(x, &r, &err), RP_OK);
            ck_assert_int_eq(memcmp(a, b, 37), 0);
            rp_xfer_stats st;
            rp_xfer_get_stats(x, &st);
            ck_assert_uint_eq(st.chunks[RP_XFER_SAVE], 37);
            /* a finished request can be submitted again */
            memset(b, 0, sizeof b);
            ck_assert_int_eq(rp_xfer_submit(x, &r, &err), RP_OK);
            ck_assert_int_eq(rp_xfer_wait(x, &r, &err), RP_OK);
            ck_assert_int_eq(memcmp(a, b, 37), 0);
            rp_xfer_destroy(&x);
            continue;
        }
        rp_xfer_params p = {.chunk_bytes = chunks[c]};
        rp_xfer *x;
        rp_error err;
        ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_OK);
        atomic_store(&callbacks, 0);
        side a = {x, 11u + (unsigned)c, 0}, b = {x, 97u + (unsigned)c, 0};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, submit_many, &a);
        pthread_create(&tb, NULL, submit_many, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        ck_assert_msg(a.fails == 0 && b.fails == 0, "chunk %zu: %d + %d failures", chunks[c], a.fails,
                      b.fails);
        ck_assert_int_eq(atomic_load(&callbacks), 2 * N);
        rp_xfer_stats st;
        rp_xfer_get_stats(x, &st);
        uint64_t reqs = 0;
        for (int k = 0; k < RP_XFER_NCLASS; k++)
            reqs += st.requests[k];
        ck_assert_uint_eq(reqs, 2 * N);
        rp_xfer_destroy(&x);
    }
}
END_TEST

static rp_status picky_copy(void *ctx, void *dst, const void *src, size_t n, rp_xfer_class cls,
                            rp_error *err)
{
    if (cls == RP_XFER_PREFETCH)
        return rp_error_set(err, RP_ERR_CUDA, "cudaMemcpyAsync: invalid argument (simulated)");
    memcpy(dst, src, n);
    return RP_OK;
}

START_TEST(a_failing_copy_fails_only_its_request)
{
    rp_xfer_params p = {.chunk_bytes = 16, .ops = {.copy = picky_copy}};
    rp_xfer *x;
    rp_error err;
    ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_OK);
    char a[100], b[100], c[100] = {0};
    memset(a, 7, sizeof a);
    rp_xfer_req bad = {.dst = b, .src = a, .bytes = 100, .cls = RP_XFER_PREFETCH, .tag = "pf"};
    rp_xfer_req good = {.dst = c, .src = a, .bytes = 100, .cls = RP_XFER_GRAD};
    ck_assert_int_eq(rp_xfer_submit(x, &bad, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_submit(x, &good, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_wait(x, &bad, &err), RP_ERR_CUDA);
    ck_assert_str_eq(err.msg, "cudaMemcpyAsync: invalid argument (simulated)");
    ck_assert_int_eq(atomic_load(&bad.state), RP_XFER_FAILED);
    ck_assert_int_eq(rp_xfer_wait(x, &good, &err), RP_OK);
    ck_assert_int_eq(memcmp(a, c, 100), 0);
    /* bad requests */
    rp_xfer_req nul = {.dst = NULL, .src = a, .bytes = 5, .cls = RP_XFER_SAVE};
    ck_assert_int_eq(rp_xfer_submit(x, &nul, &err), RP_ERR_INVALID_ARG);
    rp_xfer_req badcls = {.dst = b, .src = a, .bytes = 5, .cls = (rp_xfer_class)7};
    ck_assert_int_eq(rp_xfer_submit(x, &badcls, &err), RP_ERR_INVALID_ARG);
    rp_xfer_req zero = {.dst = NULL, .src = NULL, .bytes = 0, .cls = RP_XFER_INPUT};
    ck_assert_int_eq(rp_xfer_submit(x, &zero, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_wait(x, &zero, &err), RP_OK);
    /* a request never submitted returns at once */
    rp_xfer_req idle = {0};
    ck_assert_int_eq(rp_xfer_wait(x, &idle, &err), RP_OK);
    ck_assert_str_eq(rp_xfer_class_name(RP_XFER_WEIGHTS), "weights");
    rp_xfer_destroy(&x);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("transfer_bytes");
    TCase *t = tcase_create("bytes");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, random_sizes_arrive_byte_exact);
    tcase_add_test(t, a_failing_copy_fails_only_its_request);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "serial")
