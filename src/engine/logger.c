/* The logger thread of rank 0: once an iteration's loss (every microbatch
 * through the tail) and gradient norms (every share of every layer) are in
 * the store, it writes the metrics line, marks the step in the trace,
 * updates the progress display and calls the API's step callback, then
 * frees the iteration's slot of the loss/norm ring. A non-finite loss stops
 * the run. With several nodes every node leader runs one, and those of
 * nodes 1.. only send their node's microbatch losses to it (node_sums.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine_impl.h"
#include "engine/node_sums.h"
#include "engine/protocol.h"
#include "engine/update_gate.h"
#include "io/metrics.h"
#include "optim/clip.h"

/* One span per step on the trace's step track, from the previous step's
 * report (or the start of the run) to this one's, named "step N". */
static void trace_step(rp_engine *e, int64_t t)
{
    uint64_t now = rp_trace_now_ns();
    if (e->trace) {
        char name[32];
        snprintf(name, sizeof name, "step %lld", (long long)t);
        rp_trace_span(e->trace, RP_TRACK_STEP, name, e->by_logger.trace_step_ns, now);
    }
    e->by_logger.trace_step_ns = now;
}

static rp_status run(rp_engine *e, double *losses, rp_error *err)
{
    for (int64_t t = e->it_first; t <= e->it_last && !rp_proto_stopped(e, t); t++) {
        e->by_logger.steps_logged = t - 1;
        const char *who = "logger";
        RP_TRY(rp_proto_wait_losses(e, t, who, err));
        const double *loss = rp_engine_loss(e, t);
        const double *aux = e->raux.coef > 0 ? rp_router_aux_values(e, t) : NULL;
        if (e->nd.nodes > 1) { /* every node's, in the iteration's microbatch order */
            rp_status got = rp_node_gather_losses(e, t, loss, aux, losses, err);
            if (e->nd.node > 0) { /* sent: this node's logger is done with the step */
                rp_proto_losses_read(e, t);
                RP_TRY(got);
                continue;
            }
            RP_TRY(got);
            loss = losses;
            aux = aux ? losses + e->batch_micro : NULL;
        }
        double total = 0.0, norm = 0.0;
        RP_TRY(rp_gate_wait_global_sumsq(e, t, who, &total, err));
        int64_t counted = rp_engine_counted(e, t);
        double sum = 0.0;
        for (int64_t m = 0; m < e->batch_micro; m++)
            sum += loss[m];
        double aux_loss = NAN; /* the mean of the microbatches' aux, read before the slot goes */
        if (aux) {
            aux_loss = 0.0;
            for (int64_t mb = 0; mb < e->batch_micro; mb++)
                aux_loss += aux[mb];
            aux_loss /= (double)e->batch_micro;
        }
        float coef;
        rp_status s = rp_clip_coef(total, 0.0, &norm, &coef, err);
        rp_proto_losses_read(e, t); /* the losses' and the norms' slot (their ring) */
        double now = rp_now(), dt = now - e->by_logger.t_logged;
        e->by_logger.t_logged = now;
        rp_step_metrics m = {.step = t,
                             .loss = NAN,
                             .lr = rp_lr_at(&e->sched, t),
                             .grad_norm = NAN,
                             .tokens = e->batch_micro * e->tokens_per_micro,
                             .counted_tokens = counted,
                             .tokens_per_s = (double)(e->batch_micro * e->tokens_per_micro) /
                                             (dt > 0 ? dt : 1e-9),
                             .time = rp_wall_clock(),
                             .router_aux_loss = aux_loss};
        trace_step(e, t);
        if (counted == 0) {
            rp_log(e->lg, RP_LOG_WARN, "step %lld has no counted target (loss mask is 0 on all "
                                       "its targets): no update", (long long)t);
        } else {
            m.loss = sum / (double)counted + (e->raux.coef > 0 ? e->raux.coef * aux_loss : 0.0);
            m.grad_norm = norm;
            if (s != RP_OK || !isfinite(m.loss))
                return rp_error_set(err, RP_ERR_NUMERIC, "step %lld: loss %g, gradient norm %g: "
                                    "training diverged", (long long)t, m.loss, norm);
            e->by_logger.last_loss = m.loss;
            rp_progress_update(&e->progress, t, m.loss, m.tokens_per_s);
        }
        if (e->by_logger.log) {
            rp_metrics_write_line(e->by_logger.log, &m);
            rp_engine_log_written(e, t);
        }
        if (e->o->on_step)
            e->o->on_step(&m, e->o->on_step_arg);
    }
    return RP_OK;
}

void *rp_engine_logger_main(void *arg)
{
    rp_engine *e = arg;
    rp_error err = {0};
    /* node 0 of several: every node's losses, then their aux (node_sums.h) */
    double *losses = e->nd.nodes > 1 ? malloc(sizeof(double) * (size_t)e->batch_micro * 2) : NULL;
    rp_status s = e->nd.nodes > 1 && !losses
                      ? rp_error_set(&err, RP_ERR_NOMEM, "logger: the iteration's losses")
                      : run(e, losses, &err);
    free(losses);
    if (s != RP_OK && s != RP_STOP)
        rp_engine_fail(e, s, &err);
    return NULL;
}
