/* The monotonic clock, in nanoseconds (CLOCK_MONOTONIC): for time spent,
 * never for dates. Header-only. */
#ifndef RP_CORE_CLOCK_H
#define RP_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t rp_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
