/* Work long enough to look hung without a word (a model's random start, a
 * checkpoint written while training waits): a progress line once it has
 * run RP_SLOW_WORK_DELAY_S, then every RP_SLOW_WORK_INTERVAL_S, as the
 * planner's search says how far it is. The caller writes the line (rank 0,
 * not under --progress none). RP_TEST_PROGRESS_DELAY_S in the environment
 * (seconds, 0 or more) replaces the first delay: a test hook, so that a
 * tiny run shows the line. */
#ifndef RP_CORE_SLOW_WORK_H
#define RP_CORE_SLOW_WORK_H

#include <stdint.h>

#define RP_SLOW_WORK_DELAY_S 10.0
#define RP_SLOW_WORK_INTERVAL_S 15.0

/* How far long work is, told to a caller that may say it (a module below
 * the logger: io, the store): fn(arg, done, total), in the work's units
 * (bytes). */
typedef struct rp_progress_hook {
    void (*fn)(void *arg, uint64_t done, uint64_t total);
    void *arg;
} rp_progress_hook;

typedef struct rp_slow_work {
    int64_t t0_ns; /* the work began (rp_clock_ns) */
    double next_s; /* the next line is due after this many seconds */
} rp_slow_work;

/* The work begins now. */
void rp_slow_work_start(rp_slow_work *w);

/* Whether a line is due now (then the next one is an interval later);
 * *elapsed_s gets the seconds since the start either way. */
int rp_slow_work_due(rp_slow_work *w, double *elapsed_s);

#endif
