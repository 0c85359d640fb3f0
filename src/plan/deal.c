/* The deal chosen with the plan (deal.h). */
#include "plan/deal.h"

#include <stdlib.h>
#include <string.h>

#include "plan/keep.h"
#include "plan/partition.h"

rp_status rp_deal_parse(const char *text, const char *option, rp_deal_choice *out, rp_error *err)
{
    if (!strcmp(text, "natural"))
        *out = RP_DEAL_NATURAL;
    else if (!strcmp(text, "interleaved"))
        *out = RP_DEAL_INTERLEAVED;
    else if (!strcmp(text, "best"))
        *out = RP_DEAL_BEST;
    else
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "%s: '%s' is not natural, interleaved or best", option, text);
    return RP_OK;
}

const char *rp_deal_name(const rp_machine *mc)
{
    return mc->deal_set ? "interleaved" : "natural";
}

int rp_deal_interleaved_wins(double natural_ms, double interleaved_ms)
{
    return interleaved_ms < natural_ms * (1.0 - RP_DEAL_MIN_GAIN);
}

static rp_status plan_one(const rp_cost_model *m, const rp_machine *mc, int width,
                          const rp_plan *forced, rp_plan *out, rp_sim_result *res, rp_error *err)
{
    if (!forced)
        return rp_partition(m, mc, width, out, res, err);
    *out = *forced;
    if (out->kept == RP_PLAN_KEPT_CHOOSE)
        out->kept = rp_plan_choose_kept(m, mc, out);
    RP_TRY(rp_plan_check_kept(m, out, mc->gpus, err));
    RP_TRY(rp_simulate(m, out, mc, res, err));
    if (mc->memory_limit > 0 && res->peak_bytes > mc->memory_limit)
        return rp_error_set(err, RP_ERR_DEVICE_MEMORY,
                            "--plan: job %d needs %lld bytes of device memory, more than the "
                            "limit of %lld",
                            res->worst_job, (long long)res->peak_bytes,
                            (long long)mc->memory_limit);
    return RP_OK;
}

rp_status rp_plan_dealt(const rp_cost_model *m, rp_machine *mc, int width, const rp_plan *forced,
                        rp_deal_choice choice, rp_plan *out, rp_sim_result *res, rp_error *err)
{
    rp_sim_result *mine = res ? NULL : malloc(sizeof *mine), *ares = malloc(sizeof *ares);
    rp_plan *alt = malloc(sizeof *alt);
    rp_machine *inter = malloc(sizeof *inter);
    rp_status st = (res || mine) && ares && alt && inter
                       ? RP_OK : rp_error_set(err, RP_ERR_NOMEM, "plan: out of memory");
    if (!res)
        res = mine;
    if (st == RP_OK) {
        *inter = *mc;
        rp_machine_interleave_deal(inter);
        mc->deal_set = 0;
        if (!mc->link_groups || choice == RP_DEAL_NATURAL) {
            st = plan_one(m, mc, width, forced, out, res, err);
        } else if (choice == RP_DEAL_INTERLEAVED) {
            *mc = *inter;
            st = plan_one(m, mc, width, forced, out, res, err);
        } else { /* best: both, interleaved kept only for a real gain */
            st = plan_one(m, mc, width, forced, out, res, err);
            if (st == RP_OK && plan_one(m, inter, width, forced, alt, ares, NULL) == RP_OK &&
                rp_deal_interleaved_wins(res->iteration_ms, ares->iteration_ms)) {
                *mc = *inter;
                *out = *alt;
                *res = *ares;
            }
        }
    }
    free(mine);
    free(ares);
    free(alt);
    free(inter);
    return st;
}

rp_status rp_plan_dealt_buffers(rp_cost_model *m, rp_machine *mc, int width, const rp_plan *forced,
                                rp_deal_choice choice, int auto_buffers, rp_plan *out,
                                rp_sim_result *res, rp_error *err)
{
    rp_status s = rp_plan_dealt(m, mc, width, forced, choice, out, res, err);
    if (s != RP_ERR_DEVICE_MEMORY || !auto_buffers || forced || m->single_weight_buffer)
        return s;
    m->single_weight_buffer = 1;
    *err = (rp_error){0};
    return rp_plan_dealt(m, mc, width, forced, choice, out, res, err);
}
