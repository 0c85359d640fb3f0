/* `roundpipe simulate`: the planner and the round-robin schedule on a
 * modelled machine in virtual time, with the exact and the lagged optimizer,
 * next to GPipe and 1F1B with weights bound to GPUs. */
#include "cli/cmd_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli/plan_opts.h"
#include "plan/baseline.h"

static const char sim_usage[] =
    "usage: roundpipe simulate (--layers FILE | --init-config FILE | --model DIR) [options]\n"
    "Plans and simulates the round-robin schedule with the exact and the lagged optimizer\n"
    "(each with its own best plan unless --plan is given), and GPipe and 1F1B with weights\n"
    "bound to GPUs; prints iteration time, bubble fraction per executor and tokens/s.\n";

static const char *limit_name(rp_sim_limit l)
{
    return l == RP_LIMIT_OPTIMIZER ? "optimizer" : l == RP_LIMIT_UPLOAD ? "upload"
                                   : l == RP_LIMIT_HOST ? "host memory" : "schedule";
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Progress on stderr: planning and simulating a large model takes a minute
 * or more, so each of the four schedules reports when it is done. */
static void report(int i, const char *name, double t0)
{
    fprintf(stderr, "roundpipe simulate: %d/4 %s: done after %.1f s\n", i + 1, name,
            seconds() - t0);
    fflush(stderr);
}

typedef struct row {
    const char *name;
    rp_sim_result r;
    char plan[16384];
} row;

int rp_cli_simulate(int argc, char **argv)
{
    rp_error err = {0};
    rp_plan_cli o;
    rp_status st = rp_plan_cli_parse(argc, argv, &o, &err);
    if (st != RP_OK) {
        if (st != RP_ERR_INVALID_ARG) { /* a bad file, not a bad command line */
            fprintf(stderr, "roundpipe simulate: %s\n", err.msg);
            return 1;
        }
        fprintf(stderr, "roundpipe simulate: %s\n(try 'roundpipe simulate --help')\n", err.msg);
        return 2;
    }
    if (o.help) {
        printf("%s%s", sim_usage, rp_plan_cli_options_usage);
        return 0;
    }
    int topo = o.mc.link_groups > 0, nrows = topo ? 5 : 4;
    row *rows = calloc(5, sizeof *rows);
    rp_machine aware = o.mc; /* the deal the topology-aware planning chose */
    rp_plan *p = malloc(sizeof *p);
    if (!rows || !p)
        st = rp_error_set(&err, RP_ERR_NOMEM, "out of memory");
    double t0 = seconds();
    /* rows[0]: the mode asked for; rows[1]: the other optimizer mode */
    for (int i = 0; i < 2 && st == RP_OK; i++) {
        rp_machine mc = o.mc;
        mc.optimizer_lag = i == 0 ? o.mc.optimizer_lag : !o.mc.optimizer_lag;
        rows[i].name = mc.optimizer_lag ? "roundpipe, lagged optimizer" : "roundpipe, exact optimizer";
        st = rp_plan_cli_plan(&o, &mc, p, &rows[i].r, &err);
        if (st == RP_OK) {
            rp_plan_format(p, rows[i].plan, sizeof rows[i].plan);
            report(i, rows[i].name, t0);
        }
        if (i == 0)
            aware = mc;
    }
    if (st == RP_OK && topo) {
        /* planned as if every GPU had a link of its own, dealt in bus order,
         * and run on the real topology */
        rp_machine blind = o.mc;
        blind.link_groups = 0;
        blind.deal_set = 0;
        rows[4].name = "roundpipe, topology-blind";
        st = rp_plan_cli_plan(&o, &blind, p, &rows[4].r, &err);
        rp_machine real = o.mc;
        real.deal_set = 0;
        if (st == RP_OK)
            st = rp_simulate(o.model, p, &real, &rows[4].r, &err);
        if (st == RP_OK)
            rp_plan_format(p, rows[4].plan, sizeof rows[4].plan);
    }
    if (st == RP_OK) {
        rows[2].name = "GPipe, weights bound to GPUs";
        st = rp_simulate_baseline(o.model, &o.mc, RP_BASELINE_GPIPE, &rows[2].r, &err);
        if (st == RP_OK)
            report(2, rows[2].name, t0);
    }
    if (st == RP_OK) {
        rows[3].name = "1F1B, weights bound to GPUs";
        st = rp_simulate_baseline(o.model, &o.mc, RP_BASELINE_1F1B, &rows[3].r, &err);
        if (st == RP_OK)
            report(3, rows[3].name, t0);
    }
    if (st != RP_OK) {
        fprintf(stderr, "roundpipe simulate: %s\n", err.msg);
    } else {
        int ex = o.mc.optimizer_lag ? 1 : 0, lg = 1 - ex;
        double ratio = rows[lg].r.iteration_ms / rows[ex].r.iteration_ms;
        double aware_ratio = topo ? rows[4].r.iteration_ms / rows[0].r.iteration_ms : 0;
        char deal[4096] = "";
        if (topo)
            rp_plan_cli_deal_text(&aware, deal, sizeof deal);
        int G = o.mc.gpus;
        double efrac = rp_machine_embed_rows_frac(o.model, &o.mc, o.mc.microbatches);
        if (o.json) {
            printf("{\"model\": \"%s\", \"layers\": %d, \"gpus\": %d, \"microbatches\": %d, "
                   "\"bandwidth_gbs\": %g, \"transfer_ms\": %g, \"optimizer_gbs\": %g, "
                   "\"sparse_embedding\": %d, \"embed_rows_frac\": %.6g, "
                   "\"exact_over_lagged_throughput\": %.6g, ",
                   o.model->name, o.model->num_layers, G, o.mc.microbatches, o.mc.link_gbs,
                   o.mc.transfer_ms, o.mc.opt_gbs, o.mc.sparse_embed, efrac, ratio);
            if (topo) {
                rp_plan_cli_deal_json(&aware);
                printf("\"aware_over_blind_throughput\": %.6g, ", aware_ratio);
            }
            printf("\"schedules\": [");
            for (int i = 0; i < nrows; i++) {
                const rp_sim_result *r = &rows[i].r;
                printf("%s{\"name\": \"%s\", \"plan\": \"%s\", \"iteration_ms\": %.6g, "
                       "\"tokens_per_s\": %.6g, \"bubble_mean\": %.6g, \"bubble_max\": %.6g, "
                       "\"limited_by\": \"%s\", \"bubble\": [",
                       i ? ", " : "", rows[i].name, rows[i].plan, r->iteration_ms,
                       r->tokens_per_s, r->bubble_mean, r->bubble_max,
                       limit_name(r->limit));
                for (int e = 0; e < G; e++)
                    printf("%s%.6g", e ? ", " : "", r->bubble[e]);
                printf("]}");
            }
            printf("]}\n");
        } else {
            printf("model %s: %d layers; %d executors, %d microbatches; host-device %g GB/s, "
                   "hand-over %g ms, optimizer %g GB/s per rank\n",
                   o.model->name, o.model->num_layers, G, o.mc.microbatches, o.mc.link_gbs,
                   o.mc.transfer_ms, o.mc.opt_gbs);
            if (o.mc.sparse_embed)
                printf("embedding moved and updated by rows (as the engine does), rows "
                       "fraction %.4f per iteration%s\n",
                       efrac, o.mc.embed_rows_frac > 0 ? " (given)" : " (bound: every token distinct)");
            for (int i = 0; i < nrows; i++) /* the planned schedules (not the baselines) */
                if (rows[i].plan[0])
                    printf("plan (%s): %s (width %d: roundpipe train --pipelines %d)\n",
                           rows[i].name, rows[i].plan, rows[i].r.width, rows[i].r.groups);
            if (topo)
                printf("topology (%s): %s%s%s\n", rows[0].name, deal,
                       o.topology_warnings[0] ? "; warning: " : "", o.topology_warnings);
            printf("\n%-30s %12s %12s %12s %12s  %s\n", "schedule", "iter ms", "tokens/s",
                   "bubble mean", "bubble max", "limited by");
            for (int i = 0; i < nrows; i++) {
                const rp_sim_result *r = &rows[i].r;
                char tps[32];
                if (r->tokens_per_s > 0)
                    snprintf(tps, sizeof tps, "%.0f", r->tokens_per_s);
                else
                    snprintf(tps, sizeof tps, "n/a");
                printf("%-30s %12.1f %12s %11.2f%% %11.2f%%  %s\n", rows[i].name, r->iteration_ms,
                       tps, 100 * r->bubble_mean, 100 * r->bubble_max,
                       limit_name(r->limit));
            }
            for (int i = 0; i < nrows; i++) {
                printf("\nbubble per executor, %s:", rows[i].name);
                for (int e = 0; e < G; e++)
                    printf(" %.1f%%", 100 * rows[i].r.bubble[e]);
            }
            printf("\n\nexact / lagged throughput: %.4f\n", ratio);
            if (topo)
                printf("topology-aware / topology-blind throughput: %.4f\n", aware_ratio);
            printf("roundpipe (%s) vs GPipe: %.3fx, vs 1F1B: %.3fx\n", rows[0].name,
                   rows[2].r.iteration_ms / rows[0].r.iteration_ms,
                   rows[3].r.iteration_ms / rows[0].r.iteration_ms);
            if (o.mc.tokens_per_iteration <= 0)
                printf("(tokens/s: give --seq-len and --batch-size, or tokens_per_microbatch in "
                       "the layer file)\n");
        }
    }
    free(rows);
    free(p);
    rp_plan_cli_free(&o);
    return st == RP_OK ? 0 : 1;
}
