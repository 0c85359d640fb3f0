/* The logger thread of rank 0: once an iteration's loss (every microbatch
 * through the tail) and gradient norms (every share of every layer) are in the store, it
 * writes the metrics line and the progress display, then frees the
 * iteration's slot of the loss/norm ring. A non-finite loss stops the run. */
#include <math.h>
#include <stdio.h>

#include "engine/engine_impl.h"
#include "optim/clip.h"

static rp_status run(rp_engine *e, rp_error *err)
{
    for (int64_t t = e->first; t <= e->last; t++) {
        e->steps_logged = t - 1;
        const char *who = "logger";
        for (int g = 0; g < e->P; g++) /* each pipeline's tail wrote its losses */
            RP_TRY(rp_engine_wait(e, RP_EV_BWD_OUT, 0, (int)((g + 1) * e->Mg - 1), (uint64_t)t,
                                  who, 1, err));
        double total = 0.0, norm = 0.0;
        RP_TRY(rp_engine_total_sumsq(e, t, who, &total, err));
        int64_t counted = rp_engine_counted(e, t);
        const double *loss = rp_engine_loss(e, t);
        double sum = 0.0;
        for (int64_t m = 0; m < e->M; m++)
            sum += loss[m];
        float coef;
        rp_status s = rp_clip_coef(total, 0.0, &norm, &coef, err);
        rp_engine_signal(e, RP_EV_SLOT_FREE, 0, 0, (uint64_t)t);
        double lr = rp_lr_at(&e->sched, t), now = rp_now(), dt = now - e->t_logged;
        double tps = (double)(e->M * e->T) / (dt > 0 ? dt : 1e-9);
        e->t_logged = now;
        long long toks = (long long)(e->M * e->T);
        if (counted == 0) {
            rp_log(e->lg, RP_LOG_WARN, "step %lld has no counted target (loss mask is 0 on all "
                                       "its targets): no update", (long long)t);
            if (e->log)
                fprintf(e->log, "{\"step\":%lld,\"loss\":null,\"lr\":%.9g,\"grad_norm\":null,"
                                "\"tokens\":%lld,\"counted_tokens\":0,\"tokens_per_s\":%.1f}\n",
                        (long long)t, lr, toks, tps);
            rp_engine_log_written(e, t);
            continue;
        }
        double l = sum / (double)counted;
        if (s != RP_OK || !isfinite(l))
            return rp_error_set(err, RP_ERR_NUMERIC, "step %lld: loss %g, gradient norm %g: "
                                "training diverged", (long long)t, l, norm);
        if (e->log) {
            fprintf(e->log, "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,"
                            "\"tokens\":%lld,\"counted_tokens\":%lld,\"tokens_per_s\":%.1f}\n",
                    (long long)t, l, lr, norm, toks, (long long)counted, tps);
            rp_engine_log_written(e, t);
        }
        e->last_loss = l;
        rp_progress_update(&e->progress, t, l, tps);
    }
    return RP_OK;
}

void *rp_engine_logger_main(void *arg)
{
    rp_engine *e = arg;
    rp_error err = {0};
    rp_status s = run(e, &err);
    if (s != RP_OK)
        rp_engine_fail(e, s, &err);
    return NULL;
}
