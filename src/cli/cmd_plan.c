/* `roundpipe plan`: print the stage plan for a model and settings. */
#include "cli/cmd_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/statvfs.h>

#include "cli/plan_choice.h"
#include "cli/plan_longest.h"
#include "cli/plan_opts.h"
#include "cli/plan_progress.h"
#include "core/unproven.h"
#include "device/backend.h"
#include "engine/host_memory.h"
#include "engine/train_options.h"
#include "plan/schedule.h"
#include "store/shm.h"

static const char plan_usage[] =
    "usage: roundpipe plan (--layers FILE | --init-config FILE | --model DIR) [options]\n"
    "Prints the forward and backward stages (tail first) the planner chooses, each job's\n"
    "per-microbatch time, weights and peak device memory, and the modelled iteration.\n";

/* Free bytes where the host store goes (/dev/shm), 0 when unknown. */
static unsigned long long shm_free(void)
{
    struct statvfs v;
    if (statvfs(RP_SHM_DEFAULT_DIR, &v) != 0)
        return 0;
    return (unsigned long long)v.f_bavail * v.f_frsize;
}

/* --seq-len max's answer, after the plan of the longest length */
static void print_longest(const rp_plan_cli *o, const rp_longest *lg)
{
    static const char *bounds[] = {"device memory", "host memory", "--seq-len's range"};
    printf("\nlongest sequence: %lld tokens a sample (lengths tried in steps of %d, %lld "
           "tokens a microbatch)\n", (long long)lg->longest, RP_LONGEST_GRANULE,
           (long long)o->model->tokens_per_microbatch);
    printf("bounded by %s%s%s: %s\n", bounds[lg->bound], lg->part && lg->part[0] ? ", " : "",
           lg->part ? lg->part : "", lg->why);
    printf("at %lld tokens: %s\n", (long long)lg->longest, lg->host);
}

/* The head's chunk in tokens as train runs it (rp_head_forward_backward
 * clamps it to the microbatch) and the head's workspace in bytes. */
static int64_t head_chunk(const rp_plan_cli *o)
{
    const int64_t T = o->model->tokens_per_microbatch;
    return T > 0 && T < o->head_rows ? T : o->head_rows;
}

static int64_t head_workspace(const rp_plan_cli *o)
{
    const rp_kernel_ops *ops = rp_device_kernel_ops(o->device);
    return ops ? 4 * (int64_t)rp_head_workspace_floats(ops, o->dtype, &o->cfg,
                                                       o->model->tokens_per_microbatch,
                                                       o->head_rows)
               : 0;
}

static const char *kind_name(rp_job_kind k)
{
    return k == RP_JOB_FWD ? "F" : k == RP_JOB_TAIL ? "T" : "B";
}

/* s as a JSON string's contents */
static void print_json_text(const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        if ((unsigned char)*s >= 0x20)
            putchar(*s);
    }
}

/* A job's FP8 dequantisations over its microbatches (0 without an FP8
 * base: plan/schedule.h's rp_schedule_job_dequant). */
static double job_dequant_ms(const rp_cost_model *m, const rp_plan *p, const rp_job *job,
                             int microbatches)
{
    double first, later;
    rp_schedule_job_dequant(m, p, job, &first, &later);
    return first + (microbatches - 1) * later;
}

static void print_json(const rp_plan_cli *o, const rp_plan *p, const rp_sim_result *r,
                       const rp_plan_choice *c, const rp_longest *lg)
{
    const rp_cost_model *m = o->model;
    char buf[16384];
    rp_plan_format(p, buf, sizeof buf);
    printf("{\"model\": \"%s\", \"layers\": %d, \"gpus\": %d, \"microbatches\": %d, "
           "\"width\": %d, \"optimizer_lag\": %d, \"plan\": \"%s\", \"iteration_ms\": %.6g, "
           "\"bubble_mean\": %.6g, \"bubble_max\": %.6g, \"tokens_per_s\": %.6g, "
           "\"peak_bytes\": %lld, \"eval_bytes\": %lld, \"memory_limit_bytes\": %lld, "
           "\"cudnn_reserve_bytes\": %lld, ",
           m->name, m->num_layers, o->mc.gpus, o->mc.microbatches, r->width,
           o->mc.optimizer_lag, buf, r->iteration_ms, r->bubble_mean, r->bubble_max,
           r->tokens_per_s, (long long)r->peak_bytes, (long long)o->eval_bytes,
           (long long)o->mc.memory_limit, (long long)o->cudnn_reserve);
    rp_plan_cli_deal_json(&o->mc);
    const rp_host_memory hm = c->host;
    if (c->have_host) {
        printf("\"device\": \"%s\", \"dtype\": \"%s\", \"host_param_store_bytes\": %zu, "
               "\"host_activation_bytes\": %zu, \"host_pinned_bytes\": %zu, ",
               rp_device_kind_name(o->device), o->dtype == RP_BF16 ? "bf16" : "fp32",
               hm.param_store, hm.activations, hm.pinned);
        printf("\"head_chunk_rows\": %lld, \"head_workspace_bytes\": %lld, ",
               (long long)head_chunk(o), (long long)head_workspace(o));
        if (hm.lora)
            printf("\"lora_rank\": %d, \"host_base_mapped_bytes\": %zu, "
                   "\"host_base_store_bytes\": %zu, ", o->cfg.lora.rank, hm.base_mapped,
                   hm.base_store);
    }
    if (c->fastest_width)
        printf("\"fastest_width\": %d, \"fastest_iteration_ms\": %.6g, "
               "\"fastest_host_bytes\": %zu, ", c->fastest_width, c->fastest_ms, c->fastest_host);
    char verdict[1024];
    int fits;
    rp_plan_verdict(o, r, c, verdict, sizeof verdict, &fits);
    printf("\"weight_buffers\": %d, ", o->model->single_weight_buffer ? 1 : 2);
    printf("\"recompute\": \"%s\", \"kept_blocks\": %d, \"kept_pool_bytes\": %lld, "
           "\"device_memory_bytes\": %lld, "
           "\"fits\": %s, \"host_bytes\": %zu, \"verdict\": \"%s\", ",
           rp_recompute_name(o->recompute), p->kept > 0 ? p->kept : 0,
           (long long)rp_schedule_kept_pool_bytes(o->model, p, o->mc.gpus, o->mc.microbatches),
           (long long)o->device_memory,
           fits < 0 ? "null" : fits ? "true" : "false",
           c->have_host ? rp_plan_choice_host_total(&c->host) : 0, verdict);
    if (lg) {
        static const char *bounds[] = {"device", "host", "none"};
        printf("\"seq_len\": %lld, \"longest_seq_len\": %lld, \"first_over_seq_len\": %lld, "
               "\"bound\": \"%s\", \"bound_part\": \"%s\", \"bound_text\": \"",
               (long long)o->seq_len, (long long)lg->longest, (long long)lg->first_over,
               bounds[lg->bound], lg->part ? lg->part : "");
        print_json_text(lg->why);
        printf("\", \"host_text\": \"");
        print_json_text(lg->host);
        printf("\", \"bound_need_bytes\": %lld, \"bound_limit_bytes\": %lld, \"bound_parts\": [",
               (long long)lg->need, (long long)lg->limit);
        for (int i = 0; i < lg->nparts; i++)
            printf("%s{\"part\": \"%s\", \"bytes\": %lld}", i ? ", " : "", lg->parts[i].name,
                   (long long)lg->parts[i].bytes);
        printf("], ");
    }
    printf("\"jobs\": [");
    for (int j = 0; j < rp_schedule_num_jobs(p); j++) {
        rp_job jb = rp_schedule_job(p, j);
        printf("%s{\"job\": %d, \"kind\": \"%s\", \"first\": %d, \"last\": %d, "
               "\"ms_per_microbatch\": %.6g, \"weight_bytes\": %lld, \"grad_bytes\": %lld, "
               "\"peak_bytes\": %lld, \"dequant_ms\": %.6g}",
               j ? ", " : "", j, kind_name(jb.kind), jb.first, jb.last,
               rp_schedule_job_ms(m, p, &jb), (long long)rp_cost_weight_bytes(m, jb.first, jb.last),
               (long long)(jb.kind == RP_JOB_FWD ? 0 : rp_cost_grad_bytes(m, jb.first, jb.last)),
               (long long)rp_schedule_job_bytes(m, p, o->mc.gpus, o->mc.microbatches, j, o->mc.workspace_bytes),
               job_dequant_ms(m, p, &jb, r->group_microbatches));
    }
    printf("]}\n");
}

static void print_table(const rp_plan_cli *o, const rp_plan *p, const rp_sim_result *r,
                        const rp_plan_choice *c, const rp_longest *lg)
{
    const rp_cost_model *m = o->model;
    char buf[16384];
    rp_plan_format(p, buf, sizeof buf);
    printf("model %s: %d layers; %d executors, %d microbatches, %s optimizer\n", m->name,
           m->num_layers, o->mc.gpus, o->mc.microbatches,
           o->mc.optimizer_lag ? "lagged (one step stale)" : "exact");
    printf("pipeline width %d: %d pipeline(s) of %d microbatches (roundpipe train "
           "--pipelines %d)\n", r->width, r->groups, r->group_microbatches, r->groups);
    if (c->fastest_width) {
        const double gib = 1073741824.0;
        printf("chosen for host memory: %.1f%% slower than the fastest, %d pipeline(s) of width "
               "%d (--pipelines %d: %.1f ms an iteration), but %.2f GiB of host memory instead "
               "of %.2f GiB\n",
               100 * (r->iteration_ms / c->fastest_ms - 1), o->mc.gpus / c->fastest_width,
               c->fastest_width, o->mc.gpus / c->fastest_width, c->fastest_ms,
               rp_plan_choice_host_total(&c->host) / gib, c->fastest_host / gib);
    }
    printf("plan: %s\n", buf);
    if (o->mc.link_groups) {
        char deal[4096];
        rp_plan_cli_deal_text(&o->mc, deal, sizeof deal);
        printf("topology: %s%s%s\n", deal, o->topology_warnings[0] ? "; warning: " : "",
               o->topology_warnings);
    }
    printf("\n");
    printf("%4s %4s %9s %10s %10s %11s %10s %10s\n", "job", "kind", "layers", "ms/mb", "job ms",
           "weight MiB", "grad MiB", "peak MiB");
    for (int j = 0; j < rp_schedule_num_jobs(p); j++) {
        rp_job jb = rp_schedule_job(p, j);
        char lay[32];
        snprintf(lay, sizeof lay, "%d-%d", jb.first, jb.last);
        double ms = rp_schedule_job_ms(m, p, &jb);
        printf("%4d %4s %9s %10.2f %10.1f %11.1f %10.1f %10.1f\n", j, kind_name(jb.kind), lay, ms,
               ms * r->group_microbatches + job_dequant_ms(m, p, &jb, r->group_microbatches),
               rp_cost_weight_bytes(m, jb.first, jb.last) / 1048576.0,
               (jb.kind == RP_JOB_FWD ? 0 : rp_cost_grad_bytes(m, jb.first, jb.last)) / 1048576.0,
               rp_schedule_job_bytes(m, p, o->mc.gpus, o->mc.microbatches, j, o->mc.workspace_bytes) / 1048576.0);
    }
    printf("\nmodelled iteration %.1f ms, bubble %.2f%% mean, %.2f%% max", r->iteration_ms,
           100 * r->bubble_mean, 100 * r->bubble_max);
    if (r->tokens_per_s > 0)
        printf(", %.0f tokens/s", r->tokens_per_s);
    printf("\ndevice memory per executor %.1f MiB (its buffers, sized for the largest jobs; "
           "job %d alone needs the most)", r->peak_bytes / 1048576.0, r->worst_job);
    if (o->mc.memory_limit > 0)
        printf(" of %.1f MiB allowed", o->mc.memory_limit / 1048576.0);
    const int64_t pool = rp_schedule_kept_pool_bytes(m, p, o->mc.gpus, o->mc.microbatches);
    if (pool > 0) /* GPUs' kept blocks (plan/keep.h) */
        printf(", of them %.1f MiB the pool of the %d kept blocks (their inputs and saved areas, "
               "for each microbatch of the executor's pipeline)", pool / 1048576.0, p->kept);
    printf("\n");
    if (m->single_weight_buffer)
        printf("weight buffers: one per executor (--weight-buffers %s): each job's upload waits "
               "for the job before it on the executor\n",
               o->weight_buffers == 1 ? "1" : "auto: no plan fits with two");
    if (o->eval_bytes > 0)
        printf("evaluation (--eval-data): %.1f MiB of device memory per executor (%lld bytes), "
               "in place of those buffers between segments\n", o->eval_bytes / 1048576.0,
               (long long)o->eval_bytes);
    rp_host_memory hm = c->host;
    if (o->mc.speculative && o->mc.clip && !o->mc.optimizer_lag) {
        /* train's backup (engine/speculative.c): master, m and v of every
         * trained layer but the embedding, each node its slices */
        double params = 0;
        for (int l = 1; l < o->model->num_layers; l++)
            params += (double)o->model->layers[l].opt_params;
        hm.speculative_backup = (size_t)(12.0 * params / rp_machine_nodes(&o->mc));
    }
    const char *note = c->host_note;
    char text[512];
    if (c->have_host) {
        const double gib = 1073741824.0;
        size_t total = hm.param_store + hm.activations;
        unsigned long long fr = shm_free();
        printf("for %s executors, %s%s", rp_device_kind_name(o->device),
               o->dtype == RP_BF16 ? "bf16" : "fp32",
               o->device_chosen ? " (what train would use here; --device to choose)" : "");
        if (hm.lora)
            printf("; LoRA rank %d: adapters trained, the rest frozen", o->cfg.lora.rank);
        printf("\nhead: the LM head and loss in chunks of %lld of a microbatch's %lld tokens "
               "(%s), %.1f MiB of workspace\n", (long long)head_chunk(o),
               (long long)o->model->tokens_per_microbatch,
               o->head_memory <= 0 ? "the back end's chunk"
               : o->memory_limit_given ? "sized from --memory-limit-mib"
                                       : "sized from the GPU's whole memory",
               head_workspace(o) / 1048576.0);
        if (note[0])
            printf("note: %s\n", note);
        rp_host_memory_format(&hm, text, sizeof text);
        printf("%s; each rank maps the store; ", text);
        if (o->device == RP_DEVICE_CUDA)
            printf("%.2f GiB of it pinned for copies\n", hm.pinned / gib);
        else
            printf("none of it pinned (CPU executors)\n");
        if (fr > 0 && total > fr)
            printf("warning: %s has %.2f GiB free: train would stop (as root: mount -o "
                   "remount,size=%.0fG %s)\n",
                   RP_SHM_DEFAULT_DIR, fr / gib, total / gib + 1, RP_SHM_DEFAULT_DIR);
    }
    char verdict[1024];
    int fits;
    rp_plan_verdict(o, r, c, verdict, sizeof verdict, &fits);
    printf("%s\n", verdict);
    if (lg)
        print_longest(o, lg);
}

/* --seq-len max: the search, then argv names the longest length (or, when
 * none fits, the first tried, whose plan fails as a plain one would) */
static rp_status search_longest(int argc, char **argv, int at, int joined, char *word,
                                rp_plan_cli_progress *progress, rp_longest *lg, rp_error *err)
{
    rp_plan_cli o;
    snprintf(word, 32, "%s%d", joined ? "--seq-len=" : "", RP_LONGEST_GRANULE);
    argv[at] = word;
    rp_status st = rp_plan_cli_parse(argc, argv, &o, err); /* the options' errors first */
    int help = st == RP_OK && o.help; /* argv as it is then prints the help */
    if (st == RP_OK) {
        rp_plan_cli_progress_start(progress, "roundpipe plan", o.progress);
        rp_plan_cli_free(&o);
    }
    if (st == RP_OK && !help)
        st = rp_plan_longest_search(argc, argv, at, joined, word, progress, lg, err);
    return st;
}

int rp_cli_plan(int argc, char **argv)
{
    rp_error err = {0};
    rp_plan_cli o;
    rp_longest longest;
    const rp_longest *lg = NULL;
    rp_plan_cli_progress progress = {0}; /* started once the options are read */
    char word[32];
    char **args = malloc(sizeof *args * (size_t)(argc + 1));
    if (!args) {
        fprintf(stderr, "roundpipe plan: out of memory\n");
        return 1;
    }
    memcpy(args, argv, sizeof *args * (size_t)(argc + 1));
    int joined = 0, at = rp_plan_longest_requested(argc, args, &joined);
    rp_status st = rp_unproven_check(&err); /* it decides what an FP8 base uploads */
    if (st == RP_OK && at >= 0)
        st = search_longest(argc, args, at, joined, word, &progress, &longest, &err);
    if (st == RP_OK) {
        lg = at >= 0 && args[at] == word ? &longest : NULL;
        st = rp_plan_cli_parse(argc, args, &o, &err);
    }
    free(args);
    rp_plan_cli_progress_end(&progress);
    if (st != RP_OK) {
        rp_plan_cli_progress_stop(&progress);
        if (st != RP_ERR_INVALID_ARG) { /* a bad file, not a bad command line */
            fprintf(stderr, "roundpipe plan: %s\n", err.msg);
            return 1;
        }
        fprintf(stderr, "roundpipe plan: %s\n(try 'roundpipe plan --help')\n", err.msg);
        return 2;
    }
    if (o.help) {
        fputs(plan_usage, stdout);
        rp_plan_cli_usage(stdout);
        rp_plan_cli_free(&o);
        rp_plan_cli_progress_stop(&progress);
        return 0;
    }
    if (lg && !lg->longest) {
        rp_plan_cli_progress_stop(&progress);
        fprintf(stderr, "roundpipe plan: --seq-len max: not even %d tokens fit; bounded by %s: "
                "%s\n", RP_LONGEST_GRANULE,
                lg->bound == RP_BOUND_DEVICE ? "device memory" : "host memory", lg->why);
        rp_plan_cli_free(&o);
        return 1;
    }
    char warning[512];
    if (o.have_config && rp_config_seq_len_warning(&o.cfg, o.seq_len, warning, sizeof warning))
        fprintf(stderr, "roundpipe plan: warning: %s\n", warning);
    rp_plan *p = malloc(sizeof *p);
    rp_sim_result r;
    rp_plan_choice choice;
    o.mc = rp_machine_node(&o.mc); /* with --nodes: the plan of one node, M/N microbatches */
    if (!progress.label) /* not started by --seq-len max's search */
        rp_plan_cli_progress_start(&progress, "roundpipe plan", o.progress);
    o.mc.search = progress.search;
    if (!p)
        st = rp_error_set(&err, RP_ERR_NOMEM, "out of memory");
    else
        st = rp_plan_cli_choose(&o, &o.mc, p, &r, &choice, &err);
    rp_plan_cli_progress_stop(&progress);
    if (st == RP_OK) {
        if (o.json)
            print_json(&o, p, &r, &choice, lg);
        else
            print_table(&o, p, &r, &choice, lg);
    } else if (o.mc.memory_limit > 0 && !o.memory_limit_given && o.device_memory > 0) {
        /* the planner kept to the GPU's memory less the reserve: no plan fits it */
        fprintf(stderr, "roundpipe plan: verdict: does NOT fit the GPU's %.1f MiB (%s; %.1f MiB "
                "after the reserve for the CUDA context, cuBLAS and scratch): %s\n",
                o.device_memory / 1048576.0, o.device_memory_from,
                o.mc.memory_limit / 1048576.0, err.msg);
    } else {
        fprintf(stderr, "roundpipe plan: %s\n", err.msg);
    }
    free(p);
    rp_plan_cli_free(&o);
    return st == RP_OK ? 0 : 1;
}
