/* Progress lines for long work (see slow_work.h). */
#include "core/slow_work.h"

#include <stdlib.h>

#include "core/clock.h"

void rp_slow_work_start(rp_slow_work *w)
{
    w->t0_ns = rp_clock_ns();
    w->next_s = RP_SLOW_WORK_DELAY_S;
    const char *v = getenv("RP_TEST_PROGRESS_DELAY_S");
    char *end = NULL;
    const double d = v && *v ? strtod(v, &end) : -1;
    if (v && *v && end && !*end && d >= 0)
        w->next_s = d;
}

int rp_slow_work_due(rp_slow_work *w, double *elapsed_s)
{
    const double t = (double)(rp_clock_ns() - w->t0_ns) * 1e-9;
    *elapsed_s = t;
    if (t < w->next_s)
        return 0;
    w->next_s = t + RP_SLOW_WORK_INTERVAL_S;
    return 1;
}
