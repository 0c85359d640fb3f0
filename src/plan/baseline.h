/* GPipe and 1F1B with weights bound to GPUs, for comparison: the layers are
 * cut into min(G, L) consecutive stages that balance forward + backward
 * time, each GPU holds its stage for good, every iteration ends with a flush.
 * Both charge backward with recompute like roundpipe's backward stages (the
 * last stage skips it, as roundpipe's tail does), so the comparison isolates
 * the schedule. They are given free weight updates and no memory limit: the
 * figures are upper bounds for what those schedules could reach. The bubble
 * ((G-1)/(M+G-1) for equal stages) is not written in: it comes out of the
 * same dependency rules as rp_simulate's. */
#ifndef RP_PLAN_BASELINE_H
#define RP_PLAN_BASELINE_H

#include "plan/simulate.h"

typedef enum rp_baseline { RP_BASELINE_GPIPE = 0, RP_BASELINE_1F1B = 1 } rp_baseline;

rp_status rp_simulate_baseline(const rp_cost_model *m, const rp_machine *mc, rp_baseline kind,
                               rp_sim_result *r, rp_error *err);

/* Cut per-layer costs c[0..n-1] into at most parts consecutive groups
 * minimising the largest group sum; cut[i] is the first layer of group i,
 * returns the number of groups. Exact for this min-max problem. */
int rp_split_minmax(const double *c, int n, int parts, int *cut);

#endif
