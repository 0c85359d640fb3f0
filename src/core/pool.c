/* Worker threads that wait without spinning (pool.h). */
#include "core/pool.h"

#include "core/clock.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* How long a thread with nothing to do looks for work before it sleeps:
 * the planner's loops come back to back, and waking a sleeping thread
 * takes longer on a VM than an item; while it looks, it yields the core to
 * anything else runnable, so a busy machine loses little to it. */
#define SPIN_NS 200000


struct rp_pool {
    pthread_mutex_t lock;
    pthread_cond_t work; /* a loop began, or stop */
    pthread_cond_t done; /* a loop's last item finished */
    pthread_t *workers;
    int nworkers;
    /* the loop under way: set by rp_pool_for under the lock */
    _Atomic uint32_t generation; /* loops begun */
    atomic_int stop;
    void (*fn)(void *arg, int i);
    void *arg;
    int n;
    /* taking items: the loop's generation (high 32 bits) and its next item
     * (low 32), so a worker that wakes after its loop ended takes nothing
     * from the next one; and the items not finished yet */
    _Atomic uint64_t ticket;
    atomic_int remaining;
};

/* The next item of loop `generation`, or -1 when it has none left (or is
 * over). */
static int take(rp_pool *pool, uint32_t generation, int n)
{
    uint64_t t = atomic_load(&pool->ticket);
    for (;;) {
        if ((uint32_t)(t >> 32) != generation || (int)(uint32_t)t >= n)
            return -1;
        if (atomic_compare_exchange_weak(&pool->ticket, &t, t + 1))
            return (int)(uint32_t)t;
    }
}

/* Items of the loop until none is left; whoever finishes the last wakes
 * the caller (the caller itself needs no signal: it looks before waiting). */
static void run_items(rp_pool *pool, uint32_t generation, void (*fn)(void *, int), void *arg, int n,
                      int caller)
{
    for (int i = take(pool, generation, n); i >= 0; i = take(pool, generation, n)) {
        fn(arg, i);
        if (atomic_fetch_sub(&pool->remaining, 1) == 1 && !caller) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
    }
}

static void *worker(void *p)
{
    rp_pool *pool = p;
    uint32_t seen = 0;
    for (;;) {
        const int64_t until = rp_clock_ns() + SPIN_NS;
        while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop) &&
               rp_clock_ns() < until)
            sched_yield();
        pthread_mutex_lock(&pool->lock);
        while (pool->generation == seen && !pool->stop)
            pthread_cond_wait(&pool->work, &pool->lock);
        if (pool->stop)
            break;
        seen = pool->generation;
        void (*fn)(void *, int) = pool->fn;
        void *arg = pool->arg;
        int n = pool->n;
        pthread_mutex_unlock(&pool->lock);
        run_items(pool, seen, fn, arg, n, 0); /* fn and arg live while an item is unfinished */
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

rp_pool *rp_pool_create(int threads)
{
    if (threads <= 1)
        return NULL;
    rp_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return NULL;
    pool->workers = malloc(sizeof *pool->workers * (size_t)(threads - 1));
    if (!pool->workers) {
        free(pool);
        return NULL;
    }
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_cond_init(&pool->done, NULL);
    atomic_init(&pool->ticket, 0);
    atomic_init(&pool->remaining, 0);
    for (int t = 0; t < threads - 1; t++) {
        if (pthread_create(&pool->workers[t], NULL, worker, pool) != 0)
            break;
        pool->nworkers++;
    }
    if (pool->nworkers == 0)
        rp_pool_destroy(&pool);
    return pool;
}

void rp_pool_destroy(rp_pool **pool)
{
    if (!pool || !*pool)
        return;
    rp_pool *p = *pool;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int t = 0; t < p->nworkers; t++)
        pthread_join(p->workers[t], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p->workers);
    free(p);
    *pool = NULL;
}

int rp_pool_threads(const rp_pool *pool)
{
    return pool ? pool->nworkers + 1 : 1;
}

void rp_pool_for(rp_pool *pool, int n, void (*fn)(void *arg, int i), void *arg)
{
    if (!pool || n <= 1) {
        for (int i = 0; i < n; i++)
            fn(arg, i);
        return;
    }
    pthread_mutex_lock(&pool->lock);
    uint32_t generation = ++pool->generation;
    pool->fn = fn;
    pool->arg = arg;
    pool->n = n;
    atomic_store(&pool->remaining, n);
    atomic_store(&pool->ticket, (uint64_t)generation << 32);
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    run_items(pool, generation, fn, arg, n, 1);
    /* wait for the items the workers took, not for workers still waking:
     * one that wakes after the loop ended finds its generation over */
    const int64_t until = rp_clock_ns() + SPIN_NS;
    while (atomic_load(&pool->remaining) > 0 && rp_clock_ns() < until)
        sched_yield();
    pthread_mutex_lock(&pool->lock);
    while (atomic_load(&pool->remaining) > 0)
        pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}
