/* Progress display of rank 0: a live line on a terminal (step, loss,
 * tokens/s, ETA), otherwise one line every few seconds. */
#ifndef RP_ENGINE_PROGRESS_H
#define RP_ENGINE_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

typedef struct rp_progress {
    FILE *out;        /* NULL: silent */
    int live;         /* redraw one line with \r */
    double interval;  /* seconds between lines when not live */
    double t_start, t_last;
    int64_t steps;
    int drawn;
} rp_progress;

void rp_progress_start(rp_progress *pr, FILE *out, int live, double interval, int64_t steps);
void rp_progress_update(rp_progress *pr, int64_t step, double loss, double tokens_per_s);
void rp_progress_finish(rp_progress *pr, int64_t steps, double last_loss);

/* Monotonic seconds. */
double rp_now(void);

#endif
