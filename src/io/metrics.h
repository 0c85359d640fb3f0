/* The metrics log: JSON Lines, one object per step (roundpipe-formats(5)). */
#ifndef RP_IO_METRICS_H
#define RP_IO_METRICS_H

#include <stdio.h>

#include <roundpipe.h>

#include "core/error.h"

/* Write step m's line to f: step, loss, lr, grad_norm, tokens,
 * counted_tokens, tokens_per_s, time, in that order; loss and grad_norm
 * are null when NaN (a step without counted targets); then
 * router_aux_loss unless it is NaN (a model without the load-balancing
 * loss). Newer fields come last, so the older ones keep their place. The
 * caller flushes and checks. */
void rp_metrics_write_line(FILE *f, const rp_step_metrics *m);

/* The lines of an existing metrics log at path for steps 1..last_step, in
 * order (a resumed run keeps them and appends its own): *kept (malloc'd,
 * NUL-terminated; "" when the file is missing, or holds other lines
 * first) and *steps, how many; with each step, the evaluation line after it
 * ({"step":K,"eval_loss":...}) if there is one. A line that is neither ends
 * them. */
rp_status rp_metrics_keep_steps(const char *path, int64_t last_step, char **kept, int64_t *steps,
                                rp_error *err);

#endif
