/* Proves, with a fake asynchronous back end (`issue` queues a chunk for a
 * performer thread of its direction, which copies it after a delay;
 * `complete` waits for it), what the transfer engine promises an
 * asynchronous back end such as the CUDA streams (transfer.h):
 * every byte arrives, with nothing written outside its destination, and
 * requests of a class complete in the order submitted; no more than
 * RP_XFER_DEPTH chunks of a direction are ever in flight and no ticket is
 * reused before its completion was seen; an urgent upload submitted behind
 * a long prefetch waits for at most the chunks in flight when it came
 * (counted in chunks), and not for downloads at all; an upload and a
 * download are in flight, and copied, at the same time (full duplex); a
 * copy that fails, at issue or at completion, fails its request alone, and
 * only once none of its chunks is still in flight; destroying the engine
 * with chunks in flight waits for them and cancels the rest; on a link
 * shared with a peer that has urgent work, prefetch chunks are held (up to
 * the bound) and downloads, which go the other way, are not;
 * rp_xfer_wait_issued returns once a request's last chunk is issued, before
 * it is copied, with that chunk's ticket (what the executor orders the
 * device's compute after), reports a failed issue, and on a synchronous
 * engine (or for a request already finished) waits for the bytes and gives
 * no ticket. The CPU back end offers no asynchronous copies (its engine
 * keeps the synchronous path, bits and order as before) and refuses a
 * ticket; it is ordered by events by construction, its ordering calls do
 * nothing, and its timing marks are its clock (a mark pair around a sleep
 * spans it; a mark out of range is refused). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "device/backend.h"
#include "engine/transfer.h"
#include "rp_check.h"

enum { MAXPERF = 8192 };

typedef struct job {
    void *dst;
    const void *src;
    size_t n;
    int ticket;
} job;

typedef struct perf_rec {
    const void *src; /* the chunk's first source byte */
} perf_rec;

typedef struct fake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long delay_us;
    int gate;    /* while set, the performers start no copy */
    int stop;
    struct {
        job q[64];
        int first, n;
        pthread_t th;
        int active;             /* copying a chunk now */
        int issued, completed;  /* chunks issued; of them, completions seen */
        int max_in_flight;
        perf_rec perf[MAXPERF]; /* chunks in the order copied */
        int nperf;
    } dir[RP_XFER_NDIR];
    int ticket_state[RP_XFER_TICKETS]; /* 0 free, 1 issued, 2 copied */
    int ticket_dir[RP_XFER_TICKETS];
    rp_status ticket_result[RP_XFER_TICKETS];
    const void *ticket_src[RP_XFER_TICKETS];
    size_t ticket_n[RP_XFER_TICKETS];
    int violations;     /* a ticket out of range or issued while in use */
    int both_in_flight; /* issues while the other direction had a chunk in flight */
    int both_copying;   /* copies started while the other direction was copying */
    /* chunks whose source lies in [lo, hi) fail: at issue or when copied */
    const char *fail_issue_lo, *fail_issue_hi, *fail_copy_lo, *fail_copy_hi;
} fake;

static int in_range(const void *p, const char *lo, const char *hi)
{
    return lo && (const char *)p >= lo && (const char *)p < hi;
}

static void *performer(void *arg);
typedef struct perf_arg {
    fake *f;
    int d;
} perf_arg;
static perf_arg perf_args[RP_XFER_NDIR];

static void fake_start(fake *f, long delay_us)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->delay_us = delay_us;
    for (int d = 0; d < RP_XFER_NDIR; d++) {
        perf_args[d] = (perf_arg){f, d};
        pthread_create(&f->dir[d].th, NULL, performer, &perf_args[d]);
    }
}

static void fake_stop(fake *f)
{
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    f->gate = 0;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    for (int d = 0; d < RP_XFER_NDIR; d++)
        pthread_join(f->dir[d].th, NULL);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

static void set_gate(fake *f, int closed)
{
    pthread_mutex_lock(&f->mu);
    f->gate = closed;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void *performer(void *arg)
{
    perf_arg *a = arg;
    fake *f = a->f;
    const int d = a->d;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->stop && (f->gate || f->dir[d].n == 0))
            pthread_cond_wait(&f->cv, &f->mu);
        if (f->stop && f->dir[d].n == 0)
            break;
        job j = f->dir[d].q[f->dir[d].first];
        f->dir[d].first = (f->dir[d].first + 1) % 64;
        f->dir[d].n--;
        f->dir[d].active = 1;
        if (f->dir[1 - d].active)
            f->both_copying++;
        pthread_mutex_unlock(&f->mu);
        struct timespec ts = {0, f->delay_us * 1000};
        nanosleep(&ts, NULL);
        const int fails = in_range(j.src, f->fail_copy_lo, f->fail_copy_hi);
        if (!fails)
            memcpy(j.dst, j.src, j.n);
        pthread_mutex_lock(&f->mu);
        f->dir[d].active = 0;
        if (f->dir[d].nperf < MAXPERF)
            f->dir[d].perf[f->dir[d].nperf++] = (perf_rec){j.src};
        f->ticket_result[j.ticket] = fails ? RP_ERR_CUDA : RP_OK;
        f->ticket_state[j.ticket] = 2;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static rp_status fake_issue(void *ctx, int ticket, void *dst, const void *src, size_t n,
                            rp_xfer_class cls, rp_error *err)
{
    fake *f = ctx;
    const int d = (int)rp_xfer_class_direction(cls);
    pthread_mutex_lock(&f->mu);
    if (ticket < 0 || ticket >= RP_XFER_TICKETS || f->ticket_state[ticket] != 0 || n == 0) {
        f->violations++;
        pthread_mutex_unlock(&f->mu);
        return rp_error_set(err, RP_ERR_INTERNAL, "fake: ticket %d misused", ticket);
    }
    if (in_range(src, f->fail_issue_lo, f->fail_issue_hi)) {
        pthread_mutex_unlock(&f->mu);
        return rp_error_set(err, RP_ERR_CUDA, "fake issue: invalid argument (simulated)");
    }
    f->ticket_state[ticket] = 1;
    f->ticket_dir[ticket] = d;
    f->ticket_src[ticket] = src;
    f->ticket_n[ticket] = n;
    f->dir[d].issued++;
    int in_flight = f->dir[d].issued - f->dir[d].completed;
    if (in_flight > f->dir[d].max_in_flight)
        f->dir[d].max_in_flight = in_flight;
    if (f->dir[1 - d].issued > f->dir[1 - d].completed)
        f->both_in_flight++;
    int at = (f->dir[d].first + f->dir[d].n) % 64;
    f->dir[d].q[at] = (job){dst, src, n, ticket};
    f->dir[d].n++;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return RP_OK;
}

static rp_status fake_complete(void *ctx, int ticket, rp_error *err)
{
    fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    if (ticket < 0 || ticket >= RP_XFER_TICKETS || f->ticket_state[ticket] == 0) {
        f->violations++;
        pthread_mutex_unlock(&f->mu);
        return rp_error_set(err, RP_ERR_INTERNAL, "fake: ticket %d completed twice", ticket);
    }
    while (f->ticket_state[ticket] != 2)
        pthread_cond_wait(&f->cv, &f->mu);
    f->ticket_state[ticket] = 0;
    f->dir[f->ticket_dir[ticket]].completed++;
    rp_status st = f->ticket_result[ticket];
    pthread_mutex_unlock(&f->mu);
    if (st != RP_OK)
        return rp_error_set(err, st, "fake copy: unspecified launch failure (simulated)");
    return RP_OK;
}

/* Chunks of [src, src + n) issued and not yet seen complete. */
static int chunks_in_flight(fake *f, const void *src, size_t n)
{
    int k = 0;
    pthread_mutex_lock(&f->mu);
    for (int t = 0; t < RP_XFER_TICKETS; t++)
        if (f->ticket_state[t] != 0 && (const char *)f->ticket_src[t] >= (const char *)src &&
            (const char *)f->ticket_src[t] < (const char *)src + n)
            k++;
    pthread_mutex_unlock(&f->mu);
    return k;
}

static rp_xfer *engine(fake *f, size_t chunk)
{
    rp_xfer_params p = {.chunk_bytes = chunk,
                        .ops = {.ctx = f, .issue = fake_issue, .complete = fake_complete}};
    rp_xfer *x;
    rp_error err;
    ck_assert_msg(rp_xfer_create(&p, &x, &err) == RP_OK, "%s", err.msg);
    ck_assert(rp_xfer_asynchronous(x));
    return x;
}

static void wait_issued(fake *f, int d, int n)
{
    pthread_mutex_lock(&f->mu);
    while (f->dir[d].issued < n)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    struct timespec ts = {0, 20000000}; /* the worker is now in complete */
    nanosleep(&ts, NULL);
}

/* ---- every byte, in order ---------------------------------------------- */

enum { N = 80, GUARD = 64 };
static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static int order_seen[RP_XFER_NCLASS][N], order_n[RP_XFER_NCLASS], callbacks[N];
static fake *order_fake;
static _Atomic int finished_with_chunks_in_flight;

static void on_order(rp_xfer_req *r, void *arg, rp_xfer_state state)
{
    int i = (int)(intptr_t)arg;
    if (chunks_in_flight(order_fake, r->src, r->bytes) != 0)
        atomic_fetch_add(&finished_with_chunks_in_flight, 1);
    pthread_mutex_lock(&order_mu);
    order_seen[r->cls][order_n[r->cls]++] = i;
    callbacks[i]++;
    pthread_mutex_unlock(&order_mu);
}

START_TEST(every_byte_arrives_in_order_with_bounded_chunks_in_flight)
{
    static fake f;
    fake_start(&f, 50);
    order_fake = &f;
    rp_xfer *x = engine(&f, 4096);
    static unsigned char *src[N], *dst[N];
    static rp_xfer_req req[N];
    size_t n[N];
    memset(order_n, 0, sizeof order_n);
    memset(callbacks, 0, sizeof callbacks);
    atomic_store(&finished_with_chunks_in_flight, 0);
    for (int i = 0; i < N; i++) {
        uint32_t w[4];
        rp_philox4x32(38, 2, (uint64_t)i, w);
        n[i] = i % 9 == 0 ? 0 : w[0] % 30000; /* some zero-size, most several chunks */
        src[i] = malloc(n[i] + 1);
        dst[i] = malloc(n[i] + 2 * GUARD);
        for (size_t k = 0; k < n[i]; k++)
            src[i][k] = (unsigned char)(w[1] + k * 131 + (k >> 8));
        memset(dst[i], 0xA5, n[i] + 2 * GUARD);
        req[i] = (rp_xfer_req){.dst = dst[i] + GUARD, .src = src[i], .bytes = n[i],
                               .cls = (rp_xfer_class)(w[2] % RP_XFER_NCLASS), .done = on_order,
                               .done_arg = (void *)(intptr_t)i};
        rp_error err;
        ck_assert_int_eq(rp_xfer_submit(x, &req[i], &err), RP_OK);
    }
    rp_xfer_drain(x);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(atomic_load(&req[i].state), RP_XFER_DONE);
        ck_assert_int_eq(req[i].status, RP_OK);
        ck_assert_uint_eq(req[i].offset, n[i]);
        ck_assert_int_eq(callbacks[i], 1);
        ck_assert_msg(memcmp(dst[i] + GUARD, src[i], n[i]) == 0, "request %d's bytes", i);
        for (int g = 0; g < GUARD; g++)
            ck_assert(dst[i][g] == 0xA5 && dst[i][GUARD + n[i] + g] == 0xA5);
    }
    /* per class, completions in submission order */
    for (int c = 0; c < RP_XFER_NCLASS; c++)
        for (int k = 1; k < order_n[c]; k++)
            ck_assert_msg(order_seen[c][k - 1] < order_seen[c][k], "class %s: request %d before %d",
                          rp_xfer_class_name((rp_xfer_class)c), order_seen[c][k],
                          order_seen[c][k - 1]);
    ck_assert_int_eq(atomic_load(&finished_with_chunks_in_flight), 0);
    ck_assert_int_eq(f.violations, 0);
    for (int d = 0; d < RP_XFER_NDIR; d++) {
        ck_assert_int_le(f.dir[d].max_in_flight, RP_XFER_DEPTH);
        ck_assert_int_eq(f.dir[d].issued, f.dir[d].completed);
    }
    /* the link was kept busy: the next chunk was issued while one copied */
    ck_assert_int_eq(f.dir[RP_XFER_UP].max_in_flight, RP_XFER_DEPTH);
    rp_xfer_stats st;
    rp_xfer_get_stats(x, &st);
    uint64_t bytes = 0, want = 0;
    for (int c = 0; c < RP_XFER_NCLASS; c++)
        bytes += st.bytes[c];
    for (int i = 0; i < N; i++)
        want += n[i];
    ck_assert_uint_eq(bytes, want);
    rp_xfer_destroy(&x);
    fake_stop(&f);
    for (int i = 0; i < N; i++) {
        free(src[i]);
        free(dst[i]);
    }
}
END_TEST

/* ---- priority, counted in chunks ---------------------------------------- */

START_TEST(urgent_upload_waits_at_most_the_chunks_in_flight)
{
    enum { CHUNK = 4096, BIG = 40 * CHUNK };
    static fake f;
    fake_start(&f, 200);
    rp_xfer *x = engine(&f, CHUNK);
    char *pf_src = malloc(BIG), *pf_dst = malloc(BIG), *gr_src = malloc(BIG), *gr_dst = malloc(BIG);
    char in[100], out[100];
    for (int i = 0; i < BIG; i++)
        pf_src[i] = (char)(i * 7), gr_src[i] = (char)(i * 3 + 1);
    for (int i = 0; i < 100; i++)
        in[i] = (char)(200 - i);
    rp_xfer_req pf = {.dst = pf_dst, .src = pf_src, .bytes = BIG, .cls = RP_XFER_PREFETCH};
    rp_xfer_req gr = {.dst = gr_dst, .src = gr_src, .bytes = BIG, .cls = RP_XFER_GRAD};
    rp_xfer_req act = {.dst = out, .src = in, .bytes = 100, .cls = RP_XFER_INPUT};
    rp_error err;
    set_gate(&f, 1); /* nothing is copied: chunks pile up in flight */
    ck_assert_int_eq(rp_xfer_submit(x, &pf, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_submit(x, &gr, &err), RP_OK);
    wait_issued(&f, RP_XFER_UP, RP_XFER_DEPTH);
    wait_issued(&f, RP_XFER_DOWN, RP_XFER_DEPTH);
    pthread_mutex_lock(&f.mu);
    const int up_in_flight = f.dir[RP_XFER_UP].issued - f.dir[RP_XFER_UP].completed;
    ck_assert_int_eq(f.dir[RP_XFER_UP].issued, RP_XFER_DEPTH); /* no more while none completes */
    ck_assert_int_eq(f.dir[RP_XFER_DOWN].issued, RP_XFER_DEPTH);
    pthread_mutex_unlock(&f.mu);
    ck_assert_int_eq(rp_xfer_submit(x, &act, &err), RP_OK);
    set_gate(&f, 0);
    ck_assert_int_eq(rp_xfer_wait(x, &act, &err), RP_OK);
    ck_assert_int_eq(memcmp(in, out, 100), 0);
    ck_assert_int_ne(atomic_load(&pf.state), RP_XFER_DONE);
    ck_assert_int_eq(rp_xfer_wait(x, &pf, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_wait(x, &gr, &err), RP_OK);
    ck_assert_int_eq(memcmp(pf_src, pf_dst, BIG), 0);
    ck_assert_int_eq(memcmp(gr_src, gr_dst, BIG), 0);
    /* In the upload performer's order, the input's chunk follows only the
     * prefetch chunks that were in flight when it came. */
    int pos = -1;
    for (int i = 0; i < f.dir[RP_XFER_UP].nperf; i++)
        if (f.dir[RP_XFER_UP].perf[i].src == in)
            pos = i;
    ck_assert_int_eq(f.dir[RP_XFER_UP].nperf, 41);
    ck_assert_msg(pos >= 0 && pos <= up_in_flight, "input copied as chunk %d, %d were in flight",
                  pos, up_in_flight);
    /* the downloads were never copied by the upload performer */
    ck_assert_int_eq(f.dir[RP_XFER_DOWN].nperf, 40);
    ck_assert_int_eq(f.violations, 0);
    rp_xfer_destroy(&x);
    fake_stop(&f);
    free(pf_src), free(pf_dst), free(gr_src), free(gr_dst);
}
END_TEST

/* ---- full duplex ---------------------------------------------------------- */

START_TEST(upload_and_download_are_copied_at_once)
{
    enum { CHUNK = 4096, BIG = 32 * CHUNK };
    static fake f;
    fake_start(&f, 1000);
    rp_xfer *x = engine(&f, CHUNK);
    char *a = calloc(1, BIG), *b = calloc(1, BIG), *c = calloc(1, BIG), *d = calloc(1, BIG);
    rp_xfer_req up = {.dst = b, .src = a, .bytes = BIG, .cls = RP_XFER_WEIGHTS};
    rp_xfer_req down = {.dst = d, .src = c, .bytes = BIG, .cls = RP_XFER_SAVE};
    rp_error err;
    ck_assert_int_eq(rp_xfer_submit(x, &up, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_submit(x, &down, &err), RP_OK);
    rp_xfer_drain(x);
    /* 32 chunks each way, 1 ms apiece: nearly every copy overlaps one of
     * the other direction; one at a time none would */
    ck_assert_int_ge(f.both_in_flight, 16);
    ck_assert_int_ge(f.both_copying, 8);
    ck_assert_int_eq(f.violations, 0);
    rp_xfer_destroy(&x);
    fake_stop(&f);
    free(a), free(b), free(c), free(d);
}
END_TEST

/* ---- failures ------------------------------------------------------------- */

static _Atomic int ended_with_chunks;
static fake *fail_fake;
static void on_end_check(rp_xfer_req *r, void *arg, rp_xfer_state state)
{
    if (chunks_in_flight(fail_fake, r->src, r->bytes) != 0)
        atomic_fetch_add(&ended_with_chunks, 1);
}

START_TEST(a_failing_copy_fails_only_its_request)
{
    enum { CHUNK = 1024, BIG = 12 * CHUNK };
    static fake f;
    fake_start(&f, 300);
    fail_fake = &f;
    atomic_store(&ended_with_chunks, 0);
    static char src[4][BIG], dst[4][BIG];
    for (int i = 0; i < 4; i++)
        memset(src[i], 'a' + i, BIG);
    /* request 0's fifth chunk fails when copied, request 2's third at issue */
    f.fail_copy_lo = src[0] + 4 * CHUNK, f.fail_copy_hi = src[0] + 5 * CHUNK;
    f.fail_issue_lo = src[2] + 2 * CHUNK, f.fail_issue_hi = src[2] + 3 * CHUNK;
    rp_xfer *x = engine(&f, CHUNK);
    rp_xfer_class cls[4] = {RP_XFER_GRAD, RP_XFER_GRAD, RP_XFER_PREFETCH, RP_XFER_PREFETCH};
    rp_xfer_req r[4];
    rp_error err;
    for (int i = 0; i < 4; i++) {
        r[i] = (rp_xfer_req){.dst = dst[i], .src = src[i], .bytes = BIG, .cls = cls[i],
                             .done = on_end_check, .tag = "t"};
        ck_assert_int_eq(rp_xfer_submit(x, &r[i], &err), RP_OK);
    }
    ck_assert_int_eq(rp_xfer_wait(x, &r[0], &err), RP_ERR_CUDA);
    ck_assert_str_eq(err.msg, "fake copy: unspecified launch failure (simulated)");
    ck_assert_int_eq(rp_xfer_wait(x, &r[2], &err), RP_ERR_CUDA);
    ck_assert_str_eq(err.msg, "fake issue: invalid argument (simulated)");
    ck_assert_int_eq(atomic_load(&r[0].state), RP_XFER_FAILED);
    ck_assert_int_eq(atomic_load(&r[2].state), RP_XFER_FAILED);
    for (int i = 1; i < 4; i += 2) {
        ck_assert_int_eq(rp_xfer_wait(x, &r[i], &err), RP_OK);
        ck_assert_int_eq(memcmp(src[i], dst[i], BIG), 0);
    }
    /* the failed request ended only after its last chunk in flight did,
     * and nothing past the failure was issued */
    ck_assert_int_eq(atomic_load(&ended_with_chunks), 0);
    ck_assert_uint_le(r[0].offset, 4 * CHUNK);
    int after = 0;
    for (int i = 0; i < f.dir[RP_XFER_DOWN].nperf; i++)
        if ((const char *)f.dir[RP_XFER_DOWN].perf[i].src >= src[0] + 5 * CHUNK &&
            (const char *)f.dir[RP_XFER_DOWN].perf[i].src < src[0] + BIG)
            after++;
    ck_assert_int_le(after, RP_XFER_DEPTH - 1);
    ck_assert_int_eq(f.violations, 0);
    rp_xfer_destroy(&x);
    fake_stop(&f);
    /* one of issue and complete alone is refused */
    rp_xfer_params p = {.ops = {.ctx = &f, .issue = fake_issue}};
    ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_ERR_INVALID_ARG);
    ck_assert_ptr_null(x);
}
END_TEST

/* ---- waiting for the issue alone ------------------------------------------ */

START_TEST(wait_issued_returns_the_last_chunks_ticket_before_the_copy)
{
    enum { CHUNK = 1024 };
    static fake f;
    fake_start(&f, 0);
    static char src[3][2 * CHUNK], dst[3][2 * CHUNK];
    for (int i = 0; i < 3; i++)
        memset(src[i], 'k' + i, sizeof src[i]);
    f.fail_issue_lo = src[2] + CHUNK, f.fail_issue_hi = src[2] + 2 * CHUNK;
    set_gate(&f, 1); /* nothing is copied until it opens */
    rp_xfer *x = engine(&f, CHUNK);
    rp_error err;
    rp_xfer_req r = {.dst = dst[0], .src = src[0], .bytes = 2 * CHUNK, .cls = RP_XFER_WEIGHTS};
    ck_assert_int_eq(rp_xfer_submit(x, &r, &err), RP_OK);
    int ticket = -2;
    ck_assert_int_eq(rp_xfer_wait_issued(x, &r, &ticket, &err), RP_OK);
    ck_assert_int_ge(ticket, 0);
    ck_assert_int_lt(ticket, RP_XFER_TICKETS);
    pthread_mutex_lock(&f.mu); /* that ticket holds the last chunk, issued, not copied */
    ck_assert_ptr_eq(f.ticket_src[ticket], src[0] + CHUNK);
    ck_assert_int_eq(f.ticket_state[ticket], 1);
    ck_assert_int_eq(f.ticket_dir[ticket], RP_XFER_UP);
    pthread_mutex_unlock(&f.mu);
    ck_assert_int_eq(atomic_load(&r.state), RP_XFER_RUNNING);
    set_gate(&f, 0);
    ck_assert_int_eq(rp_xfer_wait(x, &r, &err), RP_OK);
    ck_assert_int_eq(memcmp(src[0], dst[0], sizeof src[0]), 0);
    /* finished already: no ticket (the copy has arrived) */
    ck_assert_int_eq(rp_xfer_wait_issued(x, &r, &ticket, &err), RP_OK);
    ck_assert_int_eq(ticket, -1);
    /* a zero-byte request has no chunk: it is waited for */
    rp_xfer_req z = {.dst = dst[1], .src = src[1], .bytes = 0, .cls = RP_XFER_INPUT};
    ck_assert_int_eq(rp_xfer_submit(x, &z, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_wait_issued(x, &z, &ticket, &err), RP_OK);
    ck_assert_int_eq(ticket, -1);
    ck_assert_int_eq(atomic_load(&z.state), RP_XFER_DONE);
    /* a refused issue of the last chunk is the request's failure */
    rp_xfer_req bad = {.dst = dst[2], .src = src[2], .bytes = 2 * CHUNK, .cls = RP_XFER_INPUT};
    ck_assert_int_eq(rp_xfer_submit(x, &bad, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_wait_issued(x, &bad, &ticket, &err), RP_ERR_CUDA);
    ck_assert_int_eq(ticket, -1);
    ck_assert_str_eq(err.msg, "fake issue: invalid argument (simulated)");
    ck_assert_int_eq(atomic_load(&bad.state), RP_XFER_FAILED);
    ck_assert_int_eq(f.violations, 0);
    rp_xfer_destroy(&x);
    fake_stop(&f);
    /* a synchronous engine waits for the bytes: no ticket */
    rp_xfer_params p = {.chunk_bytes = CHUNK};
    ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_OK);
    memset(dst[0], 0, sizeof dst[0]);
    r = (rp_xfer_req){.dst = dst[0], .src = src[0], .bytes = 2 * CHUNK, .cls = RP_XFER_WEIGHTS};
    ck_assert_int_eq(rp_xfer_submit(x, &r, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_wait_issued(x, &r, &ticket, &err), RP_OK);
    ck_assert_int_eq(ticket, -1);
    ck_assert_int_eq(atomic_load(&r.state), RP_XFER_DONE);
    ck_assert_int_eq(memcmp(src[0], dst[0], sizeof src[0]), 0);
    rp_xfer_destroy(&x);
}
END_TEST

/* ---- destroy -------------------------------------------------------------- */

static _Atomic int cancelled, completed;
static void count_end(rp_xfer_req *r, void *arg, rp_xfer_state s)
{
    if (s == RP_XFER_CANCELLED)
        atomic_fetch_add(&cancelled, 1);
    else if (s == RP_XFER_DONE)
        atomic_fetch_add(&completed, 1);
    if (chunks_in_flight(fail_fake, r->src, r->bytes) != 0)
        atomic_fetch_add(&ended_with_chunks, 1);
}

static void *open_gate_later(void *arg)
{
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    set_gate(arg, 0);
    return NULL;
}

START_TEST(destroy_with_chunks_in_flight_waits_for_them_and_cancels_the_rest)
{
    static fake f;
    fake_start(&f, 500);
    fail_fake = &f;
    rp_xfer *x = engine(&f, 1024);
    static char src[8][16384], dst[8][16384];
    rp_xfer_req r[8];
    rp_error err;
    atomic_store(&cancelled, 0);
    atomic_store(&completed, 0);
    atomic_store(&ended_with_chunks, 0);
    set_gate(&f, 1);
    for (int i = 0; i < 8; i++) {
        r[i] = (rp_xfer_req){.dst = dst[i], .src = src[i], .bytes = 16384,
                             .cls = (rp_xfer_class)(i % RP_XFER_NCLASS), .done = count_end};
        ck_assert_int_eq(rp_xfer_submit(x, &r[i], &err), RP_OK);
    }
    wait_issued(&f, RP_XFER_UP, RP_XFER_DEPTH);
    wait_issued(&f, RP_XFER_DOWN, RP_XFER_DEPTH);
    pthread_t opener;
    pthread_create(&opener, NULL, open_gate_later, &f);
    rp_xfer_destroy(&x); /* returns only once the chunks in flight are copied */
    ck_assert_ptr_null(x);
    pthread_join(opener, NULL);
    pthread_mutex_lock(&f.mu);
    for (int d = 0; d < RP_XFER_NDIR; d++) {
        ck_assert_int_eq(f.dir[d].issued, f.dir[d].completed);
        ck_assert_int_le(f.dir[d].issued, 2 * RP_XFER_DEPTH); /* stopped after a few */
    }
    pthread_mutex_unlock(&f.mu);
    ck_assert_int_eq(atomic_load(&cancelled) + atomic_load(&completed), 8);
    ck_assert_int_eq(atomic_load(&cancelled), 8);
    ck_assert_int_eq(atomic_load(&ended_with_chunks), 0);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(atomic_load(&r[i].state), RP_XFER_CANCELLED);
        ck_assert_int_ne(r[i].status, RP_OK);
    }
    ck_assert_int_eq(f.violations, 0);
    fake_stop(&f);
}
END_TEST

START_TEST(a_link_peer_holds_prefetch_not_downloads)
{
    static fake f;
    fake_start(&f, 100);
    static rp_xfer_link board; /* zeroed: a peer (member 1) with urgent work from now on */
    atomic_store(&board.member[1].urgent, 1);
    rp_xfer_params p = {.chunk_bytes = 1024,
                        .ops = {.ctx = &f, .issue = fake_issue, .complete = fake_complete},
                        .link = &board, .link_member = 0, .link_members = 2,
                        .link_max_wait_ns = 2000000};
    rp_xfer *x;
    rp_error err;
    ck_assert_int_eq(rp_xfer_create(&p, &x, &err), RP_OK);
    static char a[8192], b[8192], c[8192], d[8192];
    memset(a, 3, sizeof a), memset(c, 4, sizeof c);
    rp_xfer_req down = {.dst = d, .src = c, .bytes = sizeof c, .cls = RP_XFER_GRAD};
    ck_assert_int_eq(rp_xfer_submit(x, &down, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_wait(x, &down, &err), RP_OK);
    rp_xfer_stats st;
    rp_xfer_get_stats(x, &st);
    ck_assert_uint_eq(st.link_waits, 0); /* the other direction: not held */
    rp_xfer_req pf = {.dst = b, .src = a, .bytes = sizeof a, .cls = RP_XFER_PREFETCH};
    ck_assert_int_eq(rp_xfer_submit(x, &pf, &err), RP_OK);
    ck_assert_int_eq(rp_xfer_wait(x, &pf, &err), RP_OK);
    rp_xfer_get_stats(x, &st);
    ck_assert_uint_eq(st.link_waits, 8); /* each of its 8 chunks, released by the bound */
    ck_assert_uint_eq(st.link_timeouts, 8);
    ck_assert_uint_ge(st.link_wait_ns, 8ull * 2000000ull);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    ck_assert_int_eq(memcmp(c, d, sizeof c), 0);
    rp_xfer_destroy(&x);
    fake_stop(&f);
}
END_TEST

START_TEST(the_cpu_back_end_copies_synchronously)
{
    rp_device *d = NULL;
    rp_error err = {0};
    rp_device_params cp = {.kind = RP_DEVICE_CPU, .threads = 1};
    ck_assert_int_eq(rp_device_create(&cp, &d, &err), RP_OK);
    ck_assert(!rp_device_copies_asynchronous(d));
    char a = 1, b = 0;
    ck_assert_int_eq(rp_device_copy_issue(d, 0, &b, &a, 1, RP_COPY_UP, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "no asynchronous copy"), "%s", err.msg);
    ck_assert_int_eq(rp_device_copy_complete(d, 0, &err), RP_ERR_INVALID_ARG);
    ck_assert_int_eq(b, 0);
    /* ordered by construction: its ordering calls do nothing */
    ck_assert(rp_device_ordered_by_events(d));
    ck_assert_int_eq(rp_device_copies_after_compute(d, RP_COPY_UP, &err), RP_OK);
    ck_assert_int_eq(rp_device_copies_after_compute(d, RP_COPY_DOWN, &err), RP_OK);
    ck_assert_int_eq(rp_device_compute_after_copy(d, 0, &err), RP_OK);
    /* its marks are its clock: two around 20 ms of sleep span them */
    ck_assert_int_eq(rp_device_mark(d, 4, &err), RP_OK);
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    ck_assert_int_eq(rp_device_mark(d, RP_DEVICE_MARKS - 1, &err), RP_OK);
    double ms = 0;
    ck_assert_int_eq(rp_device_mark_elapsed(d, 4, RP_DEVICE_MARKS - 1, 0, &ms, &err), RP_OK);
    ck_assert_msg(ms >= 20 && ms < 2000, "%g ms between the marks", ms);
    ck_assert_int_eq(rp_device_mark(d, RP_DEVICE_MARKS, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "no mark"), "%s", err.msg);
    ck_assert_int_eq(rp_device_mark_elapsed(d, -1, 4, 1, &ms, &err), RP_ERR_INVALID_ARG);
    ck_assert(ms == -1);
    rp_device_destroy(&d);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("transfer_async");
    TCase *t = tcase_create("async");
    tcase_set_timeout(t, 30);
    tcase_add_test(t, every_byte_arrives_in_order_with_bounded_chunks_in_flight);
    tcase_add_test(t, urgent_upload_waits_at_most_the_chunks_in_flight);
    tcase_add_test(t, upload_and_download_are_copied_at_once);
    tcase_add_test(t, a_failing_copy_fails_only_its_request);
    tcase_add_test(t, destroy_with_chunks_in_flight_waits_for_them_and_cancels_the_rest);
    tcase_add_test(t, a_link_peer_holds_prefetch_not_downloads);
    tcase_add_test(t, wait_issued_returns_the_last_chunks_ticket_before_the_copy);
    tcase_add_test(t, the_cpu_back_end_copies_synchronously);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "serial")
