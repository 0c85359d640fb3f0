/* Worker threads for a loop of independent items: rp_pool_for runs
 * fn(arg, i) for every i in [0, n) on the workers and the calling thread
 * (each item once, taken in turn from a shared counter) and returns when
 * every item is done. Idle workers wait on a condition variable and never
 * spin, so on a machine whose cores are busy with other work they cost
 * nothing (OpenMP's default waiting spins, and there made the planner three
 * times slower than one thread). A pool serves one calling thread. */
#ifndef RP_CORE_POOL_H
#define RP_CORE_POOL_H

typedef struct rp_pool rp_pool;

/* A pool of `threads` threads counting the caller (threads - 1 workers).
 * NULL when threads <= 1 or the workers cannot start: rp_pool_for then runs
 * the loop on the caller alone. */
rp_pool *rp_pool_create(int threads);

/* Stops and joins the workers; *pool set to NULL (NULL accepted). */
void rp_pool_destroy(rp_pool **pool);

/* The threads that run a loop: the workers and the caller (1 for NULL). */
int rp_pool_threads(const rp_pool *pool);

/* fn(arg, i) for i in [0, n), in any order and on any of the threads;
 * returns after the last. */
void rp_pool_for(rp_pool *pool, int n, void (*fn)(void *arg, int i), void *arg);

#endif
