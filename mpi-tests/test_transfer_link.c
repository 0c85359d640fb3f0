/* Proves: transfer engines of one link group arbitrate across executors.
 * Two engines (or four) declared as one group share a link modelled by a
 * token bucket (one chunk on the link at a time, each taking its bytes at a
 * fixed rate, granted in the order asked). Engine A streams a 40-chunk
 * prefetch; engine B then submits an urgent weights upload of 4 chunks:
 * - with arbitration, A starts at most one more chunk (the one it had
 *   asked for) before B's 4 chunks, so B's upload ends within 5 chunk
 *   times; without it (no link), the two alternate on the link;
 * - with four members, an urgent request of any peer holds the others;
 * - under a steady stream of urgent requests from B, A's prefetch still
 *   ends (the bound releases one chunk per max wait), with the waits
 *   counted and traced;
 * - bad link membership is refused. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/transfer.h"
#include "rp_check.h"

enum { CHUNK = 4096, LOGMAX = 4096 };

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The shared link: a token bucket of one chunk, granted in request order;
 * and the order chunks started in, by engine. */
typedef struct link_model {
    pthread_mutex_t mu;
    uint64_t free_at;  /* when the link is next free */
    uint64_t chunk_ns; /* one chunk's time on it */
    int n;
    char who[LOGMAX];  /* 'A', 'B', ... per chunk, in start order */
} link_model;

typedef struct member {
    link_model *link;
    char name;
} member;

static rp_status link_copy(void *ctx, void *dst, const void *src, size_t bytes, rp_xfer_class cls,
                           rp_error *err)
{
    (void)cls, (void)err;
    member *m = ctx;
    link_model *l = m->link;
    pthread_mutex_lock(&l->mu);
    uint64_t t = now_ns(), start = l->free_at > t ? l->free_at : t;
    l->free_at = start + l->chunk_ns * bytes / CHUNK;
    if (l->n < LOGMAX)
        l->who[l->n++] = m->name;
    pthread_mutex_unlock(&l->mu);
    while (now_ns() < start + l->chunk_ns * bytes / CHUNK) {
        struct timespec tick = {0, 50000};
        nanosleep(&tick, NULL);
    }
    memcpy(dst, src, bytes);
    return RP_OK;
}

typedef struct waits {
    _Atomic int spans;
} waits;

static void on_trace(void *ctx, rp_xfer_class cls, const char *tag, size_t off, size_t bytes,
                     uint64_t t0, uint64_t t1)
{
    (void)cls, (void)off, (void)t0, (void)t1;
    waits *w = ctx;
    if (bytes == 0 && tag && strstr(tag, "peer's urgent"))
        atomic_fetch_add(&w->spans, 1);
}

static rp_xfer *engine(member *m, rp_xfer_link *board, int slot, int members, uint64_t max_wait,
                       waits *w)
{
    rp_xfer_params p;
    memset(&p, 0, sizeof p);
    p.chunk_bytes = CHUNK;
    p.ops = (rp_xfer_ops){.copy = link_copy, .ctx = m};
    p.link = board;
    p.link_member = slot;
    p.link_members = members;
    p.link_max_wait_ns = max_wait;
    p.trace = on_trace;
    p.trace_ctx = w;
    rp_xfer *x;
    rp_error err;
    ck_assert_msg(rp_xfer_create(&p, &x, &err) == RP_OK, "%s", err.msg);
    return x;
}

static void req_init(rp_xfer_req *r, void *dst, const void *src, size_t bytes, rp_xfer_class c)
{
    memset(r, 0, sizeof *r);
    r->dst = dst;
    r->src = src;
    r->bytes = bytes;
    r->cls = c;
    r->tag = "test";
}

/* A's 40-chunk prefetch, then B's 4-chunk weights upload once A has done 3
 * chunks; the link's chunk order after B's submission into *after. */
static void overtake(int arbitrate, int members, char *order, int *a_before_b_done)
{
    static char srcA[40 * CHUNK], dstA[40 * CHUNK], srcB[4 * CHUNK], dstB[4 * CHUNK];
    link_model l = {PTHREAD_MUTEX_INITIALIZER, 0, 2000000, 0, {0}};
    rp_xfer_link *board = calloc(1, sizeof *board);
    member mA = {&l, 'A'}, mB = {&l, 'B'}, mC = {&l, 'C'};
    waits w = {0};
    rp_xfer *A = engine(&mA, arbitrate ? board : NULL, 0, members, 1000000000, &w);
    rp_xfer *B = engine(&mB, arbitrate ? board : NULL, members - 1, members, 1000000000, &w);
    rp_xfer *C = members > 2 ? engine(&mC, board, 1, members, 1000000000, &w) : NULL;
    rp_xfer_req ra, rb;
    req_init(&ra, dstA, srcA, sizeof srcA, RP_XFER_PREFETCH);
    req_init(&rb, dstB, srcB, sizeof srcB, RP_XFER_WEIGHTS);
    rp_error err;
    ck_assert_int_eq(rp_xfer_submit(A, &ra, &err), RP_OK);
    for (;;) { /* A has 3 chunks on the link */
        pthread_mutex_lock(&l.mu);
        int n = l.n;
        pthread_mutex_unlock(&l.mu);
        if (n >= 3)
            break;
        struct timespec tick = {0, 100000};
        nanosleep(&tick, NULL);
    }
    pthread_mutex_lock(&l.mu);
    int from = l.n;
    pthread_mutex_unlock(&l.mu);
    ck_assert_int_eq(rp_xfer_submit(B, &rb, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_wait(B, &rb, &err), RP_OK);
    pthread_mutex_lock(&l.mu);
    int done = l.n;
    memcpy(order, l.who + from, (size_t)(done - from));
    order[done - from] = '\0';
    pthread_mutex_unlock(&l.mu);
    *a_before_b_done = 0;
    for (int i = 0; order[i]; i++)
        *a_before_b_done += order[i] == 'A';
    ck_assert_int_eq(rp_xfer_wait(A, &ra, &err), RP_OK);
    ck_assert_mem_eq(dstA, srcA, sizeof srcA);
    ck_assert_mem_eq(dstB, srcB, sizeof srcB);
    rp_xfer_destroy(&A);
    rp_xfer_destroy(&B);
    rp_xfer_destroy(&C);
    for (int i = 0; i < members; i++)
        ck_assert_int_eq(atomic_load(&board->member[i].urgent), 0);
    free(board);
}

START_TEST(urgent_work_of_a_peer_overtakes_a_prefetch)
{
    char order[LOGMAX];
    int a;
    overtake(1, 2, order, &a);
    ck_assert_msg(a <= 1, "with arbitration A started %d chunks while B's upload ran: %s", a,
                  order);
    overtake(0, 2, order, &a);
    ck_assert_msg(a >= 2, "without arbitration A and B should alternate, got %s", order);
}
END_TEST

START_TEST(four_members_hold_for_any_peer)
{
    char order[LOGMAX];
    int a;
    overtake(1, 4, order, &a);
    ck_assert_msg(a <= 1, "4 members: A started %d chunks while B's upload ran: %s", a, order);
}
END_TEST

/* One try of the test below: A's prefetch of 40 chunks against B's urgent
 * uploads, B keeping STREAM of them queued (resubmitting each as soon as it
 * ends), so that B has urgent work at every moment but when its thread is
 * descheduled for STREAM - 1 chunk times; A's transfer statistics. */
enum { STREAM = 8 };
static void steady_stream_try(rp_xfer_stats *st)
{
    static char srcA[40 * CHUNK], dstA[40 * CHUNK], srcB[CHUNK], dstB[STREAM][CHUNK];
    link_model l = {PTHREAD_MUTEX_INITIALIZER, 0, 500000, 0, {0}};
    rp_xfer_link *board = calloc(1, sizeof *board);
    member mA = {&l, 'A'}, mB = {&l, 'B'};
    waits w = {0};
    /* A may hold a chunk 3 ms at most; B's uploads keep coming */
    rp_xfer *A = engine(&mA, board, 0, 2, 3000000, &w), *B = engine(&mB, board, 1, 2, 0, &w);
    rp_xfer_req ra, rb[STREAM];
    req_init(&ra, dstA, srcA, sizeof srcA, RP_XFER_PREFETCH);
    rp_error err;
    for (int i = 0; i < STREAM; i++) {
        req_init(&rb[i], dstB[i], srcB, sizeof srcB, RP_XFER_INPUT);
        ck_assert_int_eq(rp_xfer_submit(B, &rb[i], &err), RP_OK);
    }
    ck_assert_int_eq(rp_xfer_submit(A, &ra, &err), RP_OK);
    uint64_t t0 = now_ns();
    int done = 0;
    for (int i = 0; !done && now_ns() - t0 < 10000000000ull; i = (i + 1) % STREAM) {
        ck_assert_int_eq(rp_xfer_wait(B, &rb[i], &err), RP_OK);
        done = atomic_load(&ra.state) == RP_XFER_DONE;
        if (!done)
            ck_assert_int_eq(rp_xfer_submit(B, &rb[i], &err), RP_OK);
    }
    ck_assert_msg(done, "A's prefetch did not end within 10 s of B's steady urgent stream");
    ck_assert_mem_eq(dstA, srcA, sizeof srcA);
    rp_xfer_get_stats(A, st);
    if (st->link_waits > 0)
        ck_assert_int_gt(atomic_load(&w.spans), 0); /* the waits are in the trace */
    rp_xfer_destroy(&A); /* B's requests still queued end cancelled */
    rp_xfer_destroy(&B);
    free(board);
}

/* A's prefetch ends whatever B's stream does; and when A is held, the
 * bound is what releases it. B keeps several uploads queued, so that its
 * urgent work does not stop between two of them (with one at a time, a
 * loaded machine descheduling B's thread let the link fall free before the
 * bound, and A passed without a timeout); still up to three tries, one of
 * which must see the bound fire. */
START_TEST(a_steady_urgent_stream_does_not_starve_a_prefetch)
{
    rp_xfer_stats st = {0};
    unsigned long long waits = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        steady_stream_try(&st);
        waits += (unsigned long long)st.link_waits;
        if (st.link_waits > 0 && st.link_timeouts > 0)
            break;
    }
    ck_assert_msg(st.link_waits > 0 && st.link_timeouts > 0,
                  "in 3 tries A held %llu chunks, and the last try %llu, of which %llu released "
                  "by the bound", waits, (unsigned long long)st.link_waits,
                  (unsigned long long)st.link_timeouts);
}
END_TEST

START_TEST(bad_membership_is_refused)
{
    rp_xfer_link *board = calloc(1, sizeof *board);
    rp_xfer_params p;
    memset(&p, 0, sizeof p);
    p.link = board;
    p.link_member = 2;
    p.link_members = 2;
    rp_xfer *x = NULL;
    rp_error err;
    ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_ERR_INVALID_ARG);
    ck_assert(x == NULL);
    ck_assert(strstr(err.msg, "link member 2 of 2") != NULL);
    free(board);
}
END_TEST

Suite *link_suite(void)
{
    Suite *s = suite_create("transfer_link");
    TCase *tc = tcase_create("link");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, urgent_work_of_a_peer_overtakes_a_prefetch);
    tcase_add_test(tc, four_members_hold_for_any_peer);
    tcase_add_test(tc, a_steady_urgent_stream_does_not_starve_a_prefetch);
    tcase_add_test(tc, bad_membership_is_refused);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(link_suite, "serial")
