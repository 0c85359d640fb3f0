/* Proves: events order a producer/consumer pipeline over the host store
 * across processes and threads. Stage s (rank s; rank 0 also runs the last
 * stage on a second thread) waits for stage s-1's output of microbatch m
 * for iteration t, checks every byte of it (acquire makes the producer's
 * plain writes visible), writes its own output and signals; a slot is only
 * overwritten after its consumer released it (back-pressure events). Each
 * wait sees exactly the awaited value, so nothing runs ahead or out of
 * order. Run with random delays injected before every signal, several
 * seeds, and also with RP_INJECT_DELAY_US from the environment. */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/event.h"
#include "rp_check.h"
#include "store/store.h"

enum { T = 12, M = 3, WORDS = 2048 };

typedef struct pipe {
    rp_events *ev;
    uint32_t *data; /* [stage][micro][WORDS] */
    int n_stages;
    int failures;
    char first_error[RP_ERROR_MSG_MAX];
} pipe_t;

static uint32_t expect(int stage, int t, int m, int i)
{
    return (uint32_t)(stage * 1000003 + t * 7919 + m * 104729 + i * 31);
}

static void note_failure(pipe_t *p, const char *msg)
{
    if (p->failures++ == 0)
        snprintf(p->first_error, sizeof p->first_error, "%s", msg);
}

/* Stage s: consume stage s-1 (if any), produce into data[s]. */
static void run_stage(pipe_t *p, int s)
{
    rp_error err;
    char job[32];
    snprintf(job, sizeof job, "stage %d", s);
    for (int t = 1; t <= T; t++)
        for (int m = 0; m < M; m++) {
            double dl = rp_event_deadline(30);
            if (s > 0) {
                rp_event_name in = {RP_EV_FWD_OUT, s - 1, m};
                if (rp_event_wait(p->ev, in, (uint64_t)t, dl, job, &err) != RP_OK) {
                    note_failure(p, err.msg);
                    return;
                }
                if (rp_event_value(p->ev, in) != (uint64_t)t)
                    note_failure(p, "producer ran ahead of its consumer");
                const uint32_t *x = p->data + ((size_t)(s - 1) * M + (size_t)m) * WORDS;
                for (int i = 0; i < WORDS; i++)
                    if (x[i] != expect(s - 1, t, m, i)) {
                        note_failure(p, "consumer read stale data");
                        break;
                    }
                /* release the input slot for iteration t+1 */
                rp_event_signal(p->ev, (rp_event_name){RP_EV_SLOT_FREE, s - 1, m}, (uint64_t)t);
            }
            if (s == p->n_stages - 1)
                continue;
            /* wait until the consumer released our slot from iteration t-1 */
            if (t > 1 &&
                rp_event_wait(p->ev, (rp_event_name){RP_EV_SLOT_FREE, s, m}, (uint64_t)(t - 1), dl,
                              job, &err) != RP_OK) {
                note_failure(p, err.msg);
                return;
            }
            uint32_t *y = p->data + ((size_t)s * M + (size_t)m) * WORDS;
            for (int i = 0; i < WORDS; i++)
                y[i] = expect(s, t, m, i);
            rp_event_signal(p->ev, (rp_event_name){RP_EV_FWD_OUT, s, m}, (uint64_t)t);
        }
}

static void *last_stage(void *arg)
{
    pipe_t *p = arg;
    run_stage(p, p->n_stages - 1);
    return NULL;
}

static void run_pipeline(unsigned inject_us, uint64_t seed, int from_env)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int n_stages = size + 1;
    rp_event_dims dims = {{0}, {0}};
    dims.count[RP_EV_FWD_OUT] = n_stages;
    dims.micro[RP_EV_FWD_OUT] = M;
    dims.count[RP_EV_SLOT_FREE] = n_stages;
    dims.micro[RP_EV_SLOT_FREE] = M;
    rp_store_layout *l;
    rp_error err = {0};
    size_t ev_off, data_off;
    ck_assert_int_eq(rp_store_layout_create(&l, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "events", rp_events_bytes(&dims), RP_STORE_ALIGN_LINE,
                                         &ev_off, &err), RP_OK);
    size_t data_bytes = (size_t)n_stages * M * WORDS * sizeof(uint32_t);
    ck_assert_int_eq(rp_store_layout_add(l, "data", data_bytes, RP_STORE_ALIGN_PAGE, &data_off, &err),
                     RP_OK);
    rp_store *st;
    ck_assert_msg(rp_store_create(MPI_COMM_WORLD, l, NULL, &st, &err) == RP_OK, "%s", err.msg);
    pipe_t p = {0};
    p.n_stages = n_stages;
    p.data = rp_store_at(st, data_off, data_bytes);
    ck_assert_int_eq(rp_events_create(rp_store_at(st, ev_off, rp_events_bytes(&dims)),
                                      rp_events_bytes(&dims), &dims, rank, &p.ev, &err), RP_OK);
    if (!from_env)
        rp_events_set_injection(p.ev, inject_us, seed);
    if (rp_store_is_leader(st))
        rp_events_reset(p.ev);
    MPI_Barrier(MPI_COMM_WORLD);

    pthread_t th;
    if (rank == 0)
        ck_assert_int_eq(pthread_create(&th, NULL, last_stage, &p), 0);
    run_stage(&p, rank);
    if (rank == 0)
        pthread_join(th, NULL);
    ck_assert_msg(p.failures == 0, "rank %d: %d failures, first: %s", rank, p.failures, p.first_error);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int s = 0; s < n_stages - 1; s++)
        for (int m = 0; m < M; m++)
            ck_assert_uint_eq(rp_event_value(p.ev, (rp_event_name){RP_EV_FWD_OUT, s, m}), T);
    MPI_Barrier(MPI_COMM_WORLD);
    rp_events_destroy(&p.ev);
    rp_store_destroy(&st);
    rp_store_layout_destroy(&l);
}

START_TEST(pipeline_without_delays)
{
    run_pipeline(0, 0, 0);
}
END_TEST

START_TEST(pipeline_with_injected_delays)
{
    for (uint64_t seed = 1; seed <= 3; seed++)
        run_pipeline(300, seed, 0);
}
END_TEST

START_TEST(pipeline_with_environment_settings)
{
    /* Whatever RP_INJECT_DELAY_US/RP_INJECT_SEED the runner set (none in a
     * plain `make check`; CI runs it again with delays). */
    run_pipeline(0, 0, 1);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("event_pipeline");
    TCase *t = tcase_create("pipeline");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, pipeline_without_delays);
    tcase_add_test(t, pipeline_with_injected_delays);
    tcase_add_test(t, pipeline_with_environment_settings);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "1 2 3")
