/* Proves: a planted deadlock (a wait for an event whose producer never
 * signals) ends at its deadline, never before it, on every rank, with
 * RP_ERR_TIMEOUT and one message naming the rank, the job, the event, its
 * current value and the awaited value (text asserted); a value already
 * reached returns at once; bad RP_INJECT_* settings are clear errors; a
 * counter never goes back; injected delays last what the generator says; a
 * sleeping waiter wakes promptly after a late signal.
 *
 * Wall-clock bounds hold on a loaded machine (ranks oversubscribed on two
 * shared cores): lower bounds are exact (a sleep never ends early), upper
 * bounds leave RP_SLACK_S for the scheduler, and the wake-up latency is the
 * best of a few tries. A wait that never times out hangs until Check's
 * tcase timeout, which fails the test. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "engine/event.h"
#include "engine/wait_board.h"
#include "rp_check.h"
#include "store/store.h"

/* Scheduling delay a loaded machine may add to a timed operation: far above
 * what a correct implementation needs, far below a wait that never ends. */
#define RP_SLACK_S 5.0

static rp_event_dims dims(void)
{
    rp_event_dims d = {{0}, {0}};
    d.count[RP_EV_GRAD] = 4;
    d.micro[RP_EV_GRAD] = 1;
    d.count[RP_EV_FWD_OUT] = 2;
    d.micro[RP_EV_FWD_OUT] = 3;
    d.count[RP_EV_VERSION] = 4;
    return d;
}

START_TEST(planted_deadlock_names_the_event_on_every_rank)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    rp_event_dims d = dims();
    rp_store_layout *l;
    rp_error err = {0};
    size_t off;
    ck_assert_int_eq(rp_store_layout_create(&l, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "events", rp_events_bytes(&d), 64, &off, &err), RP_OK);
    rp_store *st;
    ck_assert_int_eq(rp_store_create(MPI_COMM_WORLD, l, NULL, &st, &err), RP_OK);
    rp_events *ev;
    ck_assert_int_eq(rp_events_create(rp_store_at(st, off, rp_events_bytes(&d)), rp_events_bytes(&d),
                                      &d, rank, &ev, &err), RP_OK);
    MPI_Barrier(MPI_COMM_WORLD);
    /* Rank 0 "produces" fwd_out[stage 1, microbatch 2] up to iteration 6
     * but never 7; every rank waits for 7. */
    rp_event_name e = {RP_EV_FWD_OUT, 1, 2};
    if (rank == 0)
        rp_event_signal(ev, e, 6);
    MPI_Barrier(MPI_COMM_WORLD);
    ck_assert_int_eq(rp_event_wait(ev, e, 6, rp_event_deadline(5), "B1 (iteration 7)", &err), RP_OK);
    const double deadline_s = 0.25;
    double t0 = rp_event_now();
    rp_status s = rp_event_wait(ev, e, 7, t0 + deadline_s, "B1 (iteration 7)", &err);
    double waited = rp_event_now() - t0;
    ck_assert_int_eq(s, RP_ERR_TIMEOUT);
    ck_assert_int_eq(err.code, RP_ERR_TIMEOUT);
    char want[256];
    snprintf(want, sizeof want,
             "rank %d, job B1 (iteration 7): timed out waiting for event fwd_out[stage 1, "
             "microbatch 2]: value 6, awaited 7", rank);
    ck_assert_str_eq(err.msg, want);
    ck_assert_msg(waited >= deadline_s && waited < deadline_s + RP_SLACK_S,
                  "waited %.3f s for a %.2f s deadline", waited, deadline_s);

    /* A kind without microbatches is named without one. */
    s = rp_event_wait(ev, (rp_event_name){RP_EV_VERSION, 3, 0}, 1, rp_event_deadline(0.01), NULL, &err);
    ck_assert_int_eq(s, RP_ERR_TIMEOUT);
    snprintf(want, sizeof want,
             "rank %d, job -: timed out waiting for event version[layer 3]: value 0, awaited 1", rank);
    ck_assert_str_eq(err.msg, want);
    /* A name outside the table is an error, not a wild read. */
    s = rp_event_wait(ev, (rp_event_name){RP_EV_GRAD, 4, 0}, 1, rp_event_deadline(1), "x", &err);
    ck_assert_int_eq(s, RP_ERR_INTERNAL);
    ck_assert(strstr(err.msg, "no such event grad[layer 4]"));

    MPI_Barrier(MPI_COMM_WORLD);
    rp_events_destroy(&ev);
    rp_store_destroy(&st);
    rp_store_layout_destroy(&l);
}
END_TEST

/* The wait board (engine/wait_board.h) in a store shared by every rank:
 * each rank posts a wait (two threads of the last rank post the same one);
 * each rank's message then names every other rank's wait, with the event's
 * value now and the value awaited, the twin once, never its own; a given
 * back slot is no longer named; a rank's slots run out at
 * RP_WAIT_BOARD_SLOTS; a message that does not fit ends in "...". */
START_TEST(the_wait_board_names_every_other_wait)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    rp_event_dims d = dims();
    rp_store_layout *l;
    rp_error err = {0};
    size_t off, boff;
    ck_assert_int_eq(rp_store_layout_create(&l, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "events", rp_events_bytes(&d), 64, &off, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "waits", rp_wait_board_bytes(size), 64, &boff, &err),
                     RP_OK);
    rp_store *st;
    ck_assert_int_eq(rp_store_create(MPI_COMM_WORLD, l, NULL, &st, &err), RP_OK);
    rp_events *ev;
    ck_assert_int_eq(rp_events_create(rp_store_at(st, off, rp_events_bytes(&d)), rp_events_bytes(&d),
                                      &d, rank, &ev, &err), RP_OK);
    rp_wait_slot *board = rp_store_at(st, boff, rp_wait_board_bytes(size));
    int world_of[64];
    for (int r = 0; r < size && r < 64; r++)
        world_of[r] = 10 + r; /* world ranks told apart from node-local ones */
    if (rank == 0)
        rp_event_signal(ev, (rp_event_name){RP_EV_FWD_OUT, 1, 1}, 3);
    MPI_Barrier(MPI_COMM_WORLD);
    /* rank r waits for fwd_out[stage 1, microbatch r % 3] to reach 4 + r */
    rp_event_name mine = {RP_EV_FWD_OUT, 1, rank % 3};
    int slot = rp_wait_board_post(board, rank, mine, 4 + (uint64_t)rank);
    ck_assert_int_eq(slot, 0);
    int twin = -1;
    if (rank == size - 1)
        ck_assert_int_eq(twin = rp_wait_board_post(board, rank, mine, 4 + (uint64_t)rank), 1);
    MPI_Barrier(MPI_COMM_WORLD);
    char msg[1024] = "own";
    rp_wait_board_append(board, size, world_of, rank, slot, ev, msg, sizeof msg);
    char want[1024];
    int n = snprintf(want, sizeof want, "own");
    for (int r = 0; r < size; r++) {
        if (r == rank) /* its own wait, and its twin, are not restated */
            continue;
        n += snprintf(want + n, sizeof want - n,
                      "%s rank %d for fwd_out[stage 1, microbatch %d]: value %d, awaited %d",
                      n == 3 ? "; waiting on this node too:" : ";", 10 + r, r % 3,
                      r % 3 == 1 ? 3 : 0, 4 + r);
    }
    ck_assert_str_eq(msg, want);
    MPI_Barrier(MPI_COMM_WORLD);
    rp_wait_board_clear(board, rank, twin);
    if (rank != 0)
        rp_wait_board_clear(board, rank, slot);
    MPI_Barrier(MPI_COMM_WORLD);
    /* only rank 0's wait is left: the others name it alone, rank 0 nothing */
    snprintf(msg, sizeof msg, "own");
    rp_wait_board_append(board, size, world_of, rank, rank == 0 ? slot : -1, ev, msg, sizeof msg);
    if (rank == 0 || size == 1)
        ck_assert_str_eq(msg, "own");
    else
        ck_assert_str_eq(msg, "own; waiting on this node too: rank 10 for fwd_out[stage 1, "
                              "microbatch 0]: value 0, awaited 4");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        rp_wait_board_clear(board, 0, slot);
        /* slots run out; what does not fit is cut, and says so */
        int got[RP_WAIT_BOARD_SLOTS + 1];
        for (int i = 0; i <= RP_WAIT_BOARD_SLOTS; i++)
            got[i] = rp_wait_board_post(board, 0, (rp_event_name){RP_EV_GRAD, i % 4, 0}, 9);
        for (int i = 0; i < RP_WAIT_BOARD_SLOTS; i++)
            ck_assert_int_eq(got[i], i);
        ck_assert_int_eq(got[RP_WAIT_BOARD_SLOTS], -1);
        /* an event the board cannot hold is not posted */
        ck_assert_int_eq(rp_wait_board_post(board, 0, (rp_event_name){RP_EV_GRAD, -1, 0}, 1), -1);
        char small[48] = "own";
        rp_wait_board_append(board, size, world_of, 1, -1, ev, small, sizeof small);
        ck_assert_str_eq(small, "own; waiting on this node too: ...");
        char medium[130] = "own";
        rp_wait_board_append(board, size, world_of, 1, -1, ev, medium, sizeof medium);
        ck_assert_str_eq(medium, "own; waiting on this node too: rank 10 for grad[layer 0]: value 0, "
                                 "awaited 9; rank 10 for grad[layer 1]: value 0, awaited 9; ...");
        for (int i = 0; i < RP_WAIT_BOARD_SLOTS; i++)
            rp_wait_board_clear(board, 0, got[i]);
        snprintf(small, sizeof small, "own");
        rp_wait_board_append(board, size, world_of, 1, -1, ev, small, sizeof small);
        ck_assert_str_eq(small, "own");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    rp_events_destroy(&ev);
    rp_store_destroy(&st);
    rp_store_layout_destroy(&l);
}
END_TEST

START_TEST(bad_injection_settings_are_errors)
{
    rp_event_dims d = dims();
    static char mem[64 * 64] __attribute__((aligned(64)));
    ck_assert_uint_le(rp_events_bytes(&d), sizeof mem);
    rp_events *ev;
    rp_error err = {0};
    setenv("RP_INJECT_DELAY_US", "12x", 1);
    ck_assert_int_eq(rp_events_create(mem, sizeof mem, &d, 0, &ev, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "RP_INJECT_DELAY_US='12x'"));
    setenv("RP_INJECT_DELAY_US", "250", 1);
    setenv("RP_INJECT_SEED", "-1", 1);
    ck_assert_int_eq(rp_events_create(mem, sizeof mem, &d, 0, &ev, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "RP_INJECT_SEED"));
    setenv("RP_INJECT_SEED", "9", 1);
    ck_assert_int_eq(rp_events_create(mem, sizeof mem, &d, 0, &ev, &err), RP_OK);
    ck_assert_uint_eq(rp_events_injection(ev), 250);
    rp_events_destroy(&ev);
    unsetenv("RP_INJECT_DELAY_US");
    unsetenv("RP_INJECT_SEED");
    ck_assert_int_eq(rp_events_create(mem + 8, sizeof mem - 8, &d, 0, &ev, &err), RP_ERR_INVALID_ARG);
    ck_assert_int_eq(rp_events_create(mem, 64, &d, 0, &ev, &err), RP_ERR_RANGE);
}
END_TEST

START_TEST(signals_are_monotonic_and_injected_delays_bounded)
{
    rp_event_dims d = dims();
    static char mem[64 * 64] __attribute__((aligned(64)));
    rp_events *ev;
    rp_error err = {0};
    ck_assert_int_eq(rp_events_create(mem, sizeof mem, &d, 0, &ev, &err), RP_OK);
    rp_events_reset(ev);
    const unsigned max_us = 2000;
    const uint64_t seed = 5;
    rp_events_set_injection(ev, max_us, seed);
    rp_event_name e = {RP_EV_GRAD, 2, 0};
    /* the delays the generator draws for rank 0's signals 0..39, as
     * rp_event_signal computes them */
    double planned = 0;
    for (uint64_t n = 0; n < 40; n++)
        planned += 1e-9 * (double)(long)(rp_rng_uniform(seed, 0, n) * (float)max_us * 1000.0f);
    double t0 = rp_event_now();
    for (uint64_t v = 1; v <= 20; v++) {
        rp_event_signal(ev, e, v);
        rp_event_signal(ev, e, v); /* the same value again is allowed */
        ck_assert_uint_eq(rp_event_value(ev, e), v);
    }
    double took = rp_event_now() - t0;
    /* 40 delays uniform in 0..2 ms, about 40 ms: never less than planned
     * (the delays really happen), and not much more */
    ck_assert_msg(planned > 0.005, "planned delays %.4f s", planned);
    ck_assert_msg(took >= planned && took < planned + RP_SLACK_S,
                  "40 injected delays took %.4f s, planned %.4f s", took, planned);
    /* other counters untouched */
    ck_assert_uint_eq(rp_event_value(ev, (rp_event_name){RP_EV_GRAD, 1, 0}), 0);
    ck_assert_uint_eq(rp_event_value(ev, (rp_event_name){RP_EV_GRAD, 3, 0}), 0);
    rp_events_destroy(&ev);
}
END_TEST

typedef struct late { rp_events *ev; double at; } late;
static void *signal_late(void *arg)
{
    late *l = arg;
    struct timespec ts = {0, 40 * 1000000};
    nanosleep(&ts, NULL);
    l->at = rp_event_now();
    rp_event_signal(l->ev, (rp_event_name){RP_EV_VERSION, 1, 0}, 3);
    return NULL;
}

START_TEST(sleeping_waiter_wakes_promptly)
{
    rp_event_dims d = dims();
    static char mem[64 * 64] __attribute__((aligned(64)));
    rp_events *ev;
    rp_error err = {0};
    ck_assert_int_eq(rp_events_create(mem, sizeof mem, &d, 0, &ev, &err), RP_OK);
    rp_events_reset(ev);
    rp_events_set_injection(ev, 0, 0);
    /* backoff after 40 ms of waiting is 1 ms at most; 20 ms leaves room
     * for timer slack but catches a waiter that sleeps too long. The best
     * of five tries: a load spike delays one wake-up, not five. */
    double best = 1e9;
    for (int attempt = 0; attempt < 5 && best >= 0.020; attempt++) {
        rp_events_reset(ev);
        late l = {ev, 0};
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, signal_late, &l), 0);
        ck_assert_int_eq(rp_event_wait(ev, (rp_event_name){RP_EV_VERSION, 1, 0}, 3,
                                       rp_event_deadline(10), "opt", &err), RP_OK);
        double woke = rp_event_now();
        pthread_join(th, NULL);
        if (woke - l.at < best)
            best = woke - l.at;
    }
    ck_assert_msg(best < 0.020, "woke %.4f s after the signal (best of five)", best);
    rp_events_destroy(&ev);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("event_deadlock");
    TCase *t = tcase_create("deadlock");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, planted_deadlock_names_the_event_on_every_rank);
    tcase_add_test(t, the_wait_board_names_every_other_wait);
    tcase_add_test(t, bad_injection_settings_are_errors);
    tcase_add_test(t, signals_are_monotonic_and_injected_delays_bounded);
    tcase_add_test(t, sleeping_waiter_wakes_promptly);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "1 2 3")
