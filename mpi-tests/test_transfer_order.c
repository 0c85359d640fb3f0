/* Proves: the transfer engine serves the most urgent class first at chunk
 * granularity. With a deliberately slow copy and a big gradient download
 * (class 5) in flight, an input-activation upload (class 1) submitted later
 * starts after at most the one chunk that was being copied and finishes
 * before the download's remaining chunks; a queue of all five classes runs
 * in priority order, FIFO within a class; destroying the engine with work
 * pending stops after the chunk in flight and cancels the rest (callbacks
 * run, nothing is copied twice); per-class busy time and the trace hook
 * account for every chunk. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/transfer.h"
#include "rp_check.h"

enum { MAXLOG = 4096 };

typedef struct chunk_rec {
    rp_xfer_class cls;
    const char *tag;
    size_t off, bytes;
    uint64_t t0, t1;
} chunk_rec;

typedef struct trace_log {
    pthread_mutex_t mu;
    int n;
    chunk_rec e[MAXLOG];
} trace_log;

static void on_chunk(void *ctx, rp_xfer_class cls, const char *tag, size_t off, size_t bytes,
                     uint64_t t0, uint64_t t1)
{
    trace_log *l = ctx;
    pthread_mutex_lock(&l->mu);
    if (l->n < MAXLOG)
        l->e[l->n++] = (chunk_rec){cls, tag, off, bytes, t0, t1};
    pthread_mutex_unlock(&l->mu);
}

typedef struct slow {
    long delay_us;
    _Atomic int copies; /* chunks started */
    _Atomic int gate;   /* while set, copies wait (holds the worker inside a chunk) */
} slow;

static rp_status slow_copy(void *ctx, void *dst, const void *src, size_t n, rp_xfer_class cls,
                           rp_error *err)
{
    slow *s = ctx;
    atomic_fetch_add(&s->copies, 1);
    struct timespec ts = {0, s->delay_us * 1000}, tick = {0, 100000};
    nanosleep(&ts, NULL);
    while (atomic_load(&s->gate))
        nanosleep(&tick, NULL);
    memcpy(dst, src, n);
    return RP_OK;
}

static void wait_copies(slow *s, int n)
{
    while (atomic_load(&s->copies) < n) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

START_TEST(urgent_request_waits_at_most_one_chunk)
{
    enum { CHUNK = 4096, BIG = 40 * CHUNK };
    static trace_log log = {PTHREAD_MUTEX_INITIALIZER, 0, {{0}}};
    log.n = 0;
    slow s = {.delay_us = 3000};
    rp_xfer_params p = {.chunk_bytes = CHUNK, .ops = {.copy = slow_copy, .ctx = &s}, .trace = on_chunk,
                        .trace_ctx = &log};
    rp_xfer *x;
    rp_error err;
    ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_OK);
    unsigned char *src = malloc(BIG), *dst = calloc(1, BIG), in[100], out[100];
    for (int i = 0; i < BIG; i++)
        src[i] = (unsigned char)(i * 13 + 5);
    for (int i = 0; i < 100; i++)
        in[i] = (unsigned char)(255 - i);
    rp_xfer_req grad = {.dst = dst, .src = src, .bytes = BIG, .cls = RP_XFER_GRAD, .tag = "grad"};
    rp_xfer_req act = {.dst = out, .src = in, .bytes = 100, .cls = RP_XFER_INPUT, .tag = "act"};
    ck_assert_int_eq(rp_xfer_submit(x, &grad, &err), RP_OK);
    wait_copies(&s, 3); /* the download is well under way */
    ck_assert_int_eq(rp_xfer_submit(x, &act, &err), RP_OK);
    /* Chunks started by the time submit returned: the last of them was in
     * flight (or just done), so the input may follow only them. */
    int started_at_submit = atomic_load(&s.copies);
    ck_assert_int_eq(rp_xfer_wait(x, &act, &err), RP_OK);
    ck_assert_int_eq(atomic_load(&act.state), RP_XFER_DONE);
    ck_assert_int_ne(atomic_load(&grad.state), RP_XFER_DONE);
    ck_assert_int_eq(memcmp(in, out, 100), 0);
    ck_assert_int_eq(rp_xfer_wait(x, &grad, &err), RP_OK);
    ck_assert_int_eq(memcmp(src, dst, BIG), 0);

    /* In the trace, the input chunk comes right after the grad chunk that
     * was in flight when it was submitted: at most one chunk of waiting. */
    int pos = -1;
    for (int i = 0; i < log.n; i++)
        if (log.e[i].cls == RP_XFER_INPUT)
            pos = i;
    ck_assert_int_eq(log.n, 40 + 1);
    ck_assert_msg(pos <= started_at_submit, "input chunk at %d, %d chunks had started at submit", pos,
                  started_at_submit);
    ck_assert_int_lt(pos, 40); /* and grad chunks remained after it */
    for (int i = 0; i < log.n; i++)
        if (i != pos)
            ck_assert_uint_eq(log.e[i].off, (size_t)(i < pos ? i : i - 1) * CHUNK);

    rp_xfer_stats st;
    rp_xfer_get_stats(x, &st);
    ck_assert_uint_eq(st.chunks[RP_XFER_GRAD], 40);
    ck_assert_uint_eq(st.bytes[RP_XFER_GRAD], BIG);
    ck_assert_uint_eq(st.chunks[RP_XFER_INPUT], 1);
    ck_assert_uint_eq(st.requests[RP_XFER_GRAD], 1);
    /* each chunk sleeps 3 ms: busy time is at least that, and the sum of
     * the traced chunk times */
    ck_assert_uint_ge(st.busy_ns[RP_XFER_GRAD], 40ull * 3000000ull);
    ck_assert_uint_ge(st.busy_ns[RP_XFER_INPUT], 3000000ull);
    uint64_t traced = 0;
    for (int i = 0; i < log.n; i++)
        if (log.e[i].cls == RP_XFER_GRAD)
            traced += log.e[i].t1 - log.e[i].t0;
    ck_assert_uint_eq(traced, st.busy_ns[RP_XFER_GRAD]);
    ck_assert_uint_eq(st.busy_ns[RP_XFER_WEIGHTS], 0);
    rp_xfer_destroy(&x);
    ck_assert_ptr_null(x);
    free(src);
    free(dst);
}
END_TEST

static _Atomic int done_order[32], done_n;
static void record(rp_xfer_req *r, void *arg, rp_xfer_state state)
{
    done_order[atomic_fetch_add(&done_n, 1)] = (int)(intptr_t)arg;
}

START_TEST(queued_classes_run_in_priority_order)
{
    slow s = {.delay_us = 1000};
    rp_xfer_params p = {.chunk_bytes = 64, .ops = {.copy = slow_copy, .ctx = &s}};
    rp_xfer *x;
    rp_error err;
    ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_OK);
    static char src[10][256], dst[10][256];
    rp_xfer_req blocker = {.dst = dst[9], .src = src[9], .bytes = 64, .cls = RP_XFER_INPUT,
                           .done = record, .done_arg = (void *)(intptr_t)99};
    atomic_store(&done_n, 0);
    atomic_store(&s.gate, 1); /* the worker stays in the blocker's chunk while we queue */
    ck_assert_int_eq(rp_xfer_submit(x, &blocker, &err), RP_OK);
    wait_copies(&s, 1);
    /* Submitted least urgent first: grad, save, prefetch, weights, input,
     * then a second of each of grad and input. */
    rp_xfer_req r[7];
    rp_xfer_class cls[7] = {RP_XFER_GRAD, RP_XFER_SAVE, RP_XFER_PREFETCH, RP_XFER_WEIGHTS,
                            RP_XFER_INPUT, RP_XFER_GRAD, RP_XFER_INPUT};
    for (int i = 0; i < 7; i++) {
        r[i] = (rp_xfer_req){.dst = dst[i], .src = src[i], .bytes = 200, .cls = cls[i],
                             .done = record, .done_arg = (void *)(intptr_t)i};
        ck_assert_int_eq(rp_xfer_submit(x, &r[i], &err), RP_OK);
    }
    /* resubmitting a queued request is refused */
    ck_assert_int_eq(rp_xfer_submit(x, &r[0], &err), RP_ERR_INVALID_ARG);
    atomic_store(&s.gate, 0);
    rp_xfer_drain(x);
    ck_assert_int_eq(atomic_load(&done_n), 8);
    int want[8] = {99, 4, 6, 3, 2, 1, 0, 5};
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(done_order[i], want[i]);
    rp_xfer_destroy(&x);
}
END_TEST

static _Atomic int cancelled, completed;
static void count_end(rp_xfer_req *r, void *arg, rp_xfer_state s)
{
    if (s == RP_XFER_CANCELLED)
        atomic_fetch_add(&cancelled, 1);
    else if (s == RP_XFER_DONE)
        atomic_fetch_add(&completed, 1);
}

START_TEST(destroy_with_pending_work_cancels_cleanly)
{
    slow s = {.delay_us = 2000};
    rp_xfer_params p = {.chunk_bytes = 1024, .ops = {.copy = slow_copy, .ctx = &s}};
    rp_xfer *x;
    rp_error err;
    ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_OK);
    static char src[8][16384], dst[8][16384];
    rp_xfer_req r[8];
    atomic_store(&cancelled, 0);
    atomic_store(&completed, 0);
    for (int i = 0; i < 8; i++) {
        r[i] = (rp_xfer_req){.dst = dst[i], .src = src[i], .bytes = 16384,
                             .cls = (rp_xfer_class)(i % RP_XFER_NCLASS), .done = count_end};
        ck_assert_int_eq(rp_xfer_submit(x, &r[i], &err), RP_OK);
    }
    wait_copies(&s, 2);
    rp_xfer_destroy(&x);
    ck_assert_ptr_null(x);
    /* 8 x 16 chunks would take 256 ms; it stopped after a few */
    int copies = atomic_load(&s.copies);
    ck_assert_int_lt(copies, 16);
    ck_assert_int_eq(atomic_load(&cancelled) + atomic_load(&completed), 8);
    ck_assert_int_ge(atomic_load(&cancelled), 7);
    for (int i = 0; i < 8; i++) {
        int st = atomic_load(&r[i].state);
        ck_assert(st == RP_XFER_CANCELLED || st == RP_XFER_DONE);
        if (st == RP_XFER_CANCELLED)
            ck_assert_int_ne(r[i].status, RP_OK);
    }
    /* An engine with nothing to do shuts down at once, too. */
    ck_assert_int_eq(rp_xfer_create(NULL, &x, &err), RP_OK);
    ck_assert_uint_eq(rp_xfer_chunk_bytes(x), RP_XFER_DEFAULT_CHUNK);
    rp_xfer_destroy(&x);
    rp_xfer_destroy(&x); /* NULL is fine */
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("transfer_order");
    TCase *t = tcase_create("order");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, urgent_request_waits_at_most_one_chunk);
    tcase_add_test(t, queued_classes_run_in_priority_order);
    tcase_add_test(t, destroy_with_pending_work_cancels_cleanly);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "serial")
