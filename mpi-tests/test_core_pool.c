/* Proves: a pool of worker threads (core/pool.h) runs every item of a loop
 * exactly once and returns only after the last (counted per item, 3,000
 * loops of 0 to 300 items, some items slow), for pools of 2, 3, 4 and 9
 * threads and for none (NULL: the caller alone, in order); a pool of one
 * thread is NULL; a pool used for loops after a long idle wait still runs
 * them; destroying NULL is nothing. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pool.h"
#include "rp_check.h"

typedef struct loop {
    atomic_int *ran; /* per item */
    int slow;        /* every slow-th item sleeps 50 us (0: none) */
    atomic_int last; /* the item run last (the order matters in serial loops only) */
} loop;

static void item(void *arg, int i)
{
    loop *l = arg;
    if (l->slow && i % l->slow == 0)
        nanosleep(&(struct timespec){0, 50000}, NULL);
    atomic_fetch_add(&l->ran[i], 1);
    atomic_store(&l->last, i);
}

static void check_loops(rp_pool *pool, int loops)
{
    atomic_int *ran = malloc(sizeof *ran * 300);
    unsigned seed = 7;
    for (int k = 0; k < loops; k++) {
        seed = seed * 1103515245u + 12345u;
        int n = (int)(seed >> 8) % 301;
        for (int i = 0; i < n; i++)
            atomic_init(&ran[i], 0);
        loop l = {.ran = ran, .slow = k % 3 == 0 ? 37 : 0};
        atomic_init(&l.last, -1);
        rp_pool_for(pool, n, item, &l);
        for (int i = 0; i < n; i++)
            ck_assert_msg(atomic_load(&ran[i]) == 1, "loop %d of %d items: item %d ran %d times", k,
                          n, i, atomic_load(&ran[i]));
        if (!pool && n > 0)
            ck_assert_int_eq(atomic_load(&l.last), n - 1); /* the caller alone, in order */
    }
    free(ran);
}

START_TEST(every_item_once)
{
    const int threads[] = {2, 3, 4, 9};
    for (int t = 0; t < 4; t++) {
        rp_pool *pool = rp_pool_create(threads[t]);
        ck_assert_ptr_nonnull(pool);
        ck_assert_int_eq(rp_pool_threads(pool), threads[t]);
        check_loops(pool, 3000);
        rp_pool_destroy(&pool);
        ck_assert_ptr_null(pool);
    }
    check_loops(NULL, 300);
    ck_assert_int_eq(rp_pool_threads(NULL), 1);
}
END_TEST

START_TEST(none_for_one_thread_and_after_idle)
{
    ck_assert_ptr_null(rp_pool_create(1));
    ck_assert_ptr_null(rp_pool_create(0));
    rp_pool_destroy(NULL);
    rp_pool *none = NULL;
    rp_pool_destroy(&none);
    rp_pool *pool = rp_pool_create(3);
    nanosleep(&(struct timespec){0, 200000000}, NULL); /* workers asleep on the condition */
    check_loops(pool, 50);
    rp_pool_destroy(&pool);
    pool = rp_pool_create(4); /* destroyed without a loop */
    rp_pool_destroy(&pool);
}
END_TEST

static Suite *core_pool_suite(void)
{
    Suite *s = suite_create("core_pool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_item_once);
    tcase_add_test(tc, none_for_one_thread_and_after_idle);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(core_pool_suite, "serial")
