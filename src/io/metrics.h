/* The metrics log: JSON Lines, one object per step (roundpipe-formats(5)). */
#ifndef RP_IO_METRICS_H
#define RP_IO_METRICS_H

#include <stdio.h>

#include <roundpipe.h>

/* Write step m's line to f: step, loss, lr, grad_norm, tokens,
 * counted_tokens, tokens_per_s, time, in that order; loss and grad_norm
 * are null when NaN (a step without counted targets). "time" comes last,
 * so the older fields keep their place. The caller flushes and checks. */
void rp_metrics_write_line(FILE *f, const rp_step_metrics *m);

#endif
