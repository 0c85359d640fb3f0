/* The layer times the re-plan reads (run_plan.c's rp_run_replan, DESIGN 8):
 * each layer call of a job, from after its weights are in to the end of its
 * kernel ops, summed per layer and kind into the engine's measurements
 * (every call of a segment's iterations after its first, which pays page
 * faults and thread start-up).
 *
 * A call is timed by two marks of the device (backend.h). Where the device
 * is ordered by events on a GPU, they are events on the compute stream: the
 * time is the GPU's, from the end of the ops before the call (and of any
 * copy the stream waited for) to the end of the call's own, read once the
 * second is reached, so nothing waits on the host for it. Elsewhere they are
 * the host's clock, the figure the engine always measured: on the CPU the
 * ops have finished when they return; on CUDA without events the engine
 * syncs before the second mark. The marks are a ring of pairs, one pair per
 * call not yet read.
 *
 * With --trace, each call read also becomes a span on the device's track
 * ("device: layer calls", io/trace.h): placed from an anchor, a mark
 * recorded with the device idle at a known host time, by the device's
 * time between the anchor and the call's first mark. On a GPU ordered by
 * events it shows when the GPU computed (from the end of its work before
 * the call, or of a copy the call waited for, to the end of the call's
 * own), so the gaps between the spans are where it waited; on the CPU the
 * spans are the host's calls. */
#include <stdio.h>

#include "device/backend.h"
#include "engine/executor_impl.h"
#include "io/trace.h"

#define PAIRS (RP_DEVICE_MARKS / 2 - 1)
#define ANCHOR (RP_DEVICE_MARKS - 1) /* a mark no pair uses */

/* a call's span on the device's track, from the anchor */
static rp_status trace_call(executor *x, int pair, double ms, rp_error *err)
{
    rp_engine *e = x->e;
    double from = -1;
    RP_TRY(rp_device_mark_elapsed(x->dev, ANCHOR, 2 * pair, 0, &from, err));
    if (from < 0) /* cannot be: the call's second mark is reached */
        return RP_OK;
    const int at = x->clock_at[pair], backward = at >= e->num_layers;
    char span[64];
    snprintf(span, sizeof span, "layer %d %s (it %lld)", at - backward * e->num_layers,
             backward ? "backward" : "forward", (long long)x->clock_it[pair]);
    const uint64_t t0 = x->clock_anchor_ns + (uint64_t)(from * 1e6);
    rp_trace_span(e->trace, RP_TRACK_DEVICE, span, t0, t0 + (uint64_t)(ms * 1e6));
    return RP_OK;
}

rp_status rp_layer_clock_anchor(executor *x, rp_error *err)
{
    if (!x->e->trace)
        return RP_OK;
    RP_TRY(rp_device_sync(x->dev, err)); /* idle: the mark is reached as it is recorded */
    RP_TRY(rp_device_mark(x->dev, ANCHOR, err));
    x->clock_anchor_ns = rp_trace_now_ns();
    return RP_OK;
}

/* Adds the oldest calls whose second mark is reached (with `wait`: every
 * call, waiting for the last). */
rp_status rp_layer_clock_settle(executor *x, int wait, rp_error *err)
{
    rp_engine *e = x->e;
    while (x->clock_n > 0) {
        const int pair = x->clock_first;
        double ms;
        RP_TRY(rp_device_mark_elapsed(x->dev, 2 * pair, 2 * pair + 1, wait, &ms, err));
        if (ms < 0) /* not reached yet: nor are the later ones */
            return RP_OK;
        if (x->clock_anchor_ns)
            RP_TRY(trace_call(x, pair, ms, err));
        e->by_executor.meas_ms[x->clock_at[pair]] += ms;
        e->by_executor.meas_n[x->clock_at[pair]] += 1;
        x->clock_first = (pair + 1) % PAIRS;
        x->clock_n--;
    }
    return RP_OK;
}

rp_status rp_layer_clock_start(executor *x, rp_error *err)
{
    if (x->clock_n == PAIRS) /* the oldest call is hundreds of layer calls back */
        RP_TRY(rp_layer_clock_settle(x, 1, err));
    const int pair = (x->clock_first + x->clock_n) % PAIRS;
    return rp_device_mark(x->dev, 2 * pair, err);
}

rp_status rp_layer_clock_stop(executor *x, int l, int backward, int64_t t, rp_error *err)
{
    rp_engine *e = x->e;
    if (t <= e->it_first) /* not counted: its pair is the next call's */
        return RP_OK;
    const int pair = (x->clock_first + x->clock_n) % PAIRS;
    RP_TRY(rp_device_mark(x->dev, 2 * pair + 1, err));
    x->clock_at[pair] = backward * e->num_layers + l;
    x->clock_it[pair] = t;
    x->clock_n++;
    return rp_layer_clock_settle(x, 0, err);
}
