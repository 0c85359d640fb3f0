/* `roundpipe simulate`: the planner and the round-robin schedule on a
 * modelled machine in virtual time, with the exact and the lagged optimizer,
 * next to GPipe and 1F1B with weights bound to GPUs. */
#include "cli/cmd_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/plan_opts.h"
#include "cli/plan_progress.h"
#include "plan/baseline.h"

static const char sim_usage[] =
    "usage: roundpipe simulate (--layers FILE | --init-config FILE | --model DIR) [options]\n"
    "Plans and simulates the round-robin schedule with the exact and the lagged optimizer\n"
    "(each with its own best plan unless --plan is given), and GPipe and 1F1B with weights\n"
    "bound to GPUs; prints iteration time, bubble fraction per executor and tokens/s.\n";

static const char *limit_name(rp_sim_limit l)
{
    return l == RP_LIMIT_OPTIMIZER ? "optimizer" : l == RP_LIMIT_UPLOAD ? "upload"
                                   : l == RP_LIMIT_HOST ? "host memory"
                                   : l == RP_LIMIT_NETWORK ? "network" : "schedule";
}

/* Plan for one node of *mc (M/N microbatches: the planner's machine, its
 * deal written into *mc) and, with several nodes, run that plan on all of
 * them; *one gets the one node's result (the scaling efficiency's
 * reference). With one node, the plan and *r only. */
static rp_status plan_nodes(const rp_plan_cli *o, rp_machine *mc, rp_plan *p, rp_sim_result *r,
                            rp_sim_result *one, rp_error *err)
{
    if (rp_machine_nodes(mc) == 1)
        return rp_plan_cli_plan(o, mc, p, r, err);
    rp_machine node = rp_machine_node(mc);
    RP_TRY(rp_plan_cli_plan(o, &node, p, one, err));
    mc->deal_set = node.deal_set;
    memcpy(mc->deal, node.deal, sizeof mc->deal);
    return rp_simulate(o->model, p, mc, r, err);
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Progress on stderr: planning and simulating a large model takes a minute
 * or more, so each of the four schedules reports when it is done. */
static void report(rp_plan_cli_progress *progress, int i, const char *name, double t0)
{
    rp_plan_cli_progress_end(progress); /* its live line, if drawn */
    fprintf(stderr, "roundpipe simulate: %d/4 %s: done after %.1f s\n", i + 1, name,
            seconds() - t0);
    fflush(stderr);
}

typedef struct row {
    const char *name;
    rp_sim_result r;
    rp_sim_result one; /* with several nodes: the plan on one node of M/N microbatches */
    char plan[16384];
} row;

/* N nodes' throughput over N times one node's, at the same per-node work:
 * one node's step time over N nodes' (both steps hold M/N microbatches per
 * node). */
static double efficiency(const row *w)
{
    return w->r.iteration_ms > 0 ? w->one.iteration_ms / w->r.iteration_ms : 0.0;
}

static void tokens_text(double tps, char *buf, size_t len)
{
    if (tps > 0)
        snprintf(buf, len, "%.0f", tps);
    else
        snprintf(buf, len, "n/a");
}

/* The lines --nodes adds to the table: per planned row the N nodes'
 * throughput and efficiency, then the network per step. */
static void print_nodes(const rp_machine *mc, const row *rows, int nrows)
{
    int N = mc->nodes;
    printf("\n");
    for (int i = 0; i < nrows; i++) {
        const row *w = &rows[i];
        if (!w->plan[0])
            continue;
        char all[32], one[32];
        tokens_text(w->r.tokens_per_s, all, sizeof all);
        tokens_text(w->one.tokens_per_s, one, sizeof one);
        printf("nodes: %d x %d GPUs at %g Gb/s (%s): %s tokens/s, scaling efficiency %.4f; "
               "step %.1f ms, limited by %s\n",
               N, mc->gpus, mc->network_gbs, w->name, all, efficiency(w), w->r.iteration_ms,
               limit_name(w->r.limit));
        printf("one node (%s): %d microbatches, %s tokens/s, step %.1f ms (the efficiency's "
               "reference, x %d nodes)\n",
               w->name, mc->microbatches / N, one, w->one.iteration_ms, N);
    }
    const rp_sim_result *r = &rows[0].r;
    double f = (double)(N - 1) / N, G = r->net_grad_bytes / 1e9, T = r->net_base_bytes / 1e9;
    double W = r->net_weight_bytes / 1e9;
    printf("network per step: each node sends at most %.4g GB = G + T + (N-1)/N x W = %.4g + %.4g "
           "+ %.4g x %.4g GB (node N-1: (N-1)/N x G + T + (N-1)/N x W = %.4g GB); G = fp32 "
           "gradients (%d B per trainable parameter, the chain), T = the tied embedding's base "
           "chain (%d B per parameter of the embedding; 0 untied), W = compute weights (%g B, the "
           "all-gather); busiest NIC direction %.1f ms per step (%s)\n",
           r->net_send_bytes / 1e9, G, T, f, W, f * G + T + f * W, RP_SIM_NET_GRAD_BYTES,
           RP_SIM_NET_GRAD_BYTES, mc->compute_bytes_per_param, r->net_ms, rows[0].name);
    printf("(GPipe and 1F1B: each node M/N microbatches, the network not modelled)\n");
}

/* What the layers' weights, gradients and updates amount to: a LoRA model
 * uploads its frozen weights but downloads and updates only its adapters. */
static void print_traffic(const rp_cost_model *m)
{
    int64_t params = 0, frozen = 0;
    for (int l = 0; l < m->num_layers; l++) {
        params += m->layers[l].opt_params;
        frozen += m->layers[l].opt_params == 0 && m->layers[l].weight_bytes > 0;
    }
    const int last = m->num_layers - 1;
    printf("layers: weights %.4g GiB (uploaded with their stages), gradients %.4g GiB "
           "(downloaded), %.4gM parameters updated by AdamW%s\n",
           rp_cost_weight_bytes(m, 0, last) / 1073741824.0,
           rp_cost_grad_download_bytes(m, 0, last) / 1073741824.0, params / 1e6,
           frozen ? "; frozen weights in it, never downloaded or updated (as with LoRA)" : "");
}

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
        fputs(sim_usage, stdout);
        rp_plan_cli_usage(stdout);
        return 0;
    }
    rp_plan_cli_progress progress; /* one search object: a width searched twice is not */
    rp_plan_cli_progress_start(&progress, "roundpipe simulate", o.progress);
    o.mc.search = progress.search;
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
        rows[i].name =
            mc.optimizer_lag ? "roundpipe, lagged optimizer" : "roundpipe, exact optimizer";
        st = plan_nodes(&o, &mc, p, &rows[i].r, &rows[i].one, &err);
        if (st == RP_OK) {
            rp_plan_format(p, rows[i].plan, sizeof rows[i].plan);
            report(&progress, i, rows[i].name, t0);
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
        rp_machine node = rp_machine_node(&blind); /* blind itself with one node */
        st = rp_plan_cli_plan(&o, &node, p, &rows[4].r, &err);
        rp_machine real = o.mc;
        real.deal_set = 0;
        if (st == RP_OK && rp_machine_nodes(&real) > 1) {
            rp_machine one = rp_machine_node(&real);
            st = rp_simulate(o.model, p, &one, &rows[4].one, &err);
        }
        if (st == RP_OK)
            st = rp_simulate(o.model, p, &real, &rows[4].r, &err);
        if (st == RP_OK)
            rp_plan_format(p, rows[4].plan, sizeof rows[4].plan);
    }
    /* the baselines: one node's M/N microbatches, all N nodes' tokens (no
     * network: one node as before) */
    rp_machine base = rp_machine_node(&o.mc);
    base.tokens_per_iteration = o.mc.tokens_per_iteration;
    if (st == RP_OK) {
        rows[2].name = "GPipe, weights bound to GPUs";
        st = rp_simulate_baseline(o.model, &base, RP_BASELINE_GPIPE, &rows[2].r, &err);
        if (st == RP_OK)
            report(&progress, 2, rows[2].name, t0);
    }
    if (st == RP_OK) {
        rows[3].name = "1F1B, weights bound to GPUs";
        st = rp_simulate_baseline(o.model, &base, RP_BASELINE_1F1B, &rows[3].r, &err);
        if (st == RP_OK)
            report(&progress, 3, rows[3].name, t0);
    }
    rp_plan_cli_progress_stop(&progress);
    if (st != RP_OK) {
        fprintf(stderr, "roundpipe simulate: %s\n", err.msg);
    } else {
        int ex = o.mc.optimizer_lag ? 1 : 0, lg = 1 - ex;
        double ratio = rows[lg].r.iteration_ms / rows[ex].r.iteration_ms;
        double aware_ratio = topo ? rows[4].r.iteration_ms / rows[0].r.iteration_ms : 0;
        char deal[4096] = "";
        if (topo)
            rp_plan_cli_deal_text(&aware, deal, sizeof deal);
        int G = o.mc.gpus, N = rp_machine_nodes(&o.mc);
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
            if (N > 1)
                printf("\"nodes\": %d, \"network_gbits\": %g, \"node_microbatches\": %d, "
                       "\"net_grad_bytes\": %.6g, \"net_base_bytes\": %.6g, "
                       "\"net_weight_bytes\": %.6g, ",
                       N, o.mc.network_gbs, o.mc.microbatches / N, rows[0].r.net_grad_bytes,
                       rows[0].r.net_base_bytes, rows[0].r.net_weight_bytes);
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
                printf("]");
                if (N > 1 && rows[i].plan[0])
                    printf(", \"scaling_efficiency\": %.6g, \"one_node_iteration_ms\": %.6g, "
                           "\"one_node_tokens_per_s\": %.6g, \"network_ms\": %.6g, "
                           "\"send_bytes_per_node\": %.6g",
                           efficiency(&rows[i]), rows[i].one.iteration_ms,
                           rows[i].one.tokens_per_s, r->net_ms, r->net_send_bytes);
                printf("}");
            }
            printf("]}\n");
        } else {
            printf("model %s: %d layers; %d executors, %d microbatches; host-device %g GB/s, "
                   "hand-over %g ms, optimizer %g GB/s per rank\n",
                   o.model->name, o.model->num_layers, G, o.mc.microbatches, o.mc.link_gbs,
                   o.mc.transfer_ms, o.mc.opt_gbs);
            if (N > 1)
                printf("several nodes: %d nodes of %d executors, the %d microbatches split %d per "
                       "node; network %g Gb/s (%g GB/s) per direction, %g us per message; the "
                       "plans are one node's; the table is the %d nodes'\n",
                       N, G, o.mc.microbatches, o.mc.microbatches / N, o.mc.network_gbs,
                       o.mc.network_gbs / 8, RP_SIM_NET_LATENCY_MS * 1e3, N);
            print_traffic(o.model);
            if (o.mc.sparse_embed)
                printf("embedding %s by rows (as the engine does), rows "
                       "fraction %.4f per iteration%s\n",
                       o.model->layers[0].opt_params > 0 ? "moved and updated" : "(frozen) moved",
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
            if (N > 1)
                print_nodes(&o.mc, rows, nrows);
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
