/* Which layers keep their activations (see keep.h). */
#include "plan/keep.h"

#include "plan/schedule.h"

/* The job (plan/schedule.h's index) of layer l's forward, or of its
 * backward (the tail's or a backward stage's). */
static int job_of(const rp_plan *p, int l, int backward)
{
    if (!backward) {
        for (int s = 0; s < p->nfwd; s++)
            if (l >= p->fwd[s].first && l <= p->fwd[s].last)
                return s;
        return -1;
    }
    for (int s = 0; s < p->nbwd; s++)
        if (l >= p->bwd[s].first && l <= p->bwd[s].last)
            return p->nfwd + s;
    return -1;
}

int rp_plan_kept_on_one_executor(const rp_plan *p, int gpus, int l)
{
    const int jf = job_of(p, l, 0), jb = job_of(p, l, 1);
    return jf >= 0 && jb >= 0 && (jb - jf) % rp_schedule_width(p, gpus) == 0;
}

int rp_plan_choose_kept(const rp_cost_model *m, const rp_machine *mc, const rp_plan *p)
{
    if (mc->keep_budget == 0)
        return 0;
    int64_t left = mc->keep_budget, kept = 0, device_left = -1;
    const int64_t per_executor = rp_schedule_pool_microbatches(p, mc->gpus, mc->microbatches);
    if (m->keep_on_executor && mc->memory_limit > 0 && mc->keep_budget > 0) {
        rp_plan none = *p; /* the plan's peak without the pool */
        none.kept = 0;
        device_left = mc->memory_limit - rp_schedule_peak_bytes(m, &none, mc->gpus,
                                                                mc->microbatches,
                                                                mc->workspace_bytes, NULL);
    }
    for (int l = rp_plan_tail_first(p) - 1; l >= 1; l--) {
        const rp_layer_cost *c = &m->layers[l];
        int64_t bytes = c->keep_bytes * (int64_t)mc->microbatches;
        /* the nearest layers first: a kept layer that does not pay stops the
         * walk, so the kept ones stay the run just below the tail */
        if ((c->keep_bytes <= 0 && c->keep_device_bytes <= 0) ||
            (mc->keep_budget > 0 && c->fwd_ms <= 0))
            break;
        if (mc->keep_budget > 0 && bytes > left)
            break;
        if (m->keep_on_executor) {
            if (!rp_plan_kept_on_one_executor(p, mc->gpus, l))
                break;
            int64_t pool = c->keep_device_bytes * per_executor;
            if (device_left >= 0 && pool > device_left)
                break;
            device_left -= device_left >= 0 ? pool : 0;
        }
        left -= bytes;
        kept++;
    }
    return (int)kept;
}

rp_status rp_plan_check_kept(const rp_cost_model *m, const rp_plan *p, int gpus, rp_error *err)
{
    if (!m->keep_on_executor || p->kept <= 0)
        return RP_OK;
    int can = 0;
    for (int l = rp_plan_tail_first(p) - 1; l >= 1 && rp_plan_kept_on_one_executor(p, gpus, l); l--)
        can++;
    for (int l = rp_plan_tail_first(p) - 1; l >= 1; l--)
        if (rp_plan_is_kept(p, l) && !rp_plan_kept_on_one_executor(p, gpus, l))
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "plan: keep=%d, but block %d's forward (job %d) and backward "
                                "(job %d) run on different executors of a pipeline of width %d, "
                                "and the executors keep kept activations in their own memory: "
                                "this plan can keep at most %d block%s",
                                p->kept, l, job_of(p, l, 0), job_of(p, l, 1),
                                rp_schedule_width(p, gpus), can, can == 1 ? "" : "s");
    return RP_OK;
}

int64_t rp_plan_kept_bytes(const rp_cost_model *m, const rp_plan *p, int microbatches)
{
    int64_t bytes = 0;
    for (int l = 1; l < rp_plan_tail_first(p); l++)
        if (rp_plan_is_kept(p, l))
            bytes += m->layers[l].keep_bytes * (int64_t)microbatches;
    return bytes;
}

