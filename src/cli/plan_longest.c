/* `roundpipe plan --seq-len max` (see plan_longest.h). */
#include "cli/plan_longest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plan_choice.h"
#include "cli/plan_opts.h"
#include "device/backend.h"
#include "engine/host_memory.h"
#include "plan/schedule.h"

int rp_plan_longest_requested(int argc, char **argv, int *joined)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "--seq-len=max")) {
            *joined = 1;
            return i;
        }
        if (!strcmp(argv[i], "--seq-len") && i + 1 < argc && !strcmp(argv[i + 1], "max")) {
            *joined = 0;
            return i + 1;
        }
    }
    return -1;
}

static void set_length(char **argv, int at, int joined, char *word, int64_t seq_len)
{
    snprintf(word, 32, "%s%lld", joined ? "--seq-len=" : "", (long long)seq_len);
    argv[at] = word;
}

/* One length: parsed as `roundpipe plan --seq-len S` would be, and planned.
 * Returns RP_OK with *fits 1 or 0 (and *bound), or an error that is not a
 * memory bound. On return *o holds the parse (the caller frees it). */
typedef struct trial {
    rp_plan_cli o;
    rp_plan plan;
    rp_sim_result res;
    rp_plan_choice choice;
    int parsed;
    int fits;
    rp_longest_bound bound;
    size_t host_total; /* store and activations, and CPU executors' buffers */
    size_t buffers;
    char msg[1100];    /* the planner's refusal */
} trial;

static int host_limit_given(const rp_plan_cli *o)
{
    return o->host_limit > 0 && o->host_limit_from &&
           !strcmp(o->host_limit_from, "--host-memory-limit-mib");
}

/* The host memory a length must fit: --host-memory-limit-mib; else, for
 * CPU executors, whose buffers are host memory too, this machine's memory
 * (as the verdict checks them); else none (0). *what names it. */
static int64_t host_bound_bytes(const rp_plan_cli *o, const char **what)
{
    if (host_limit_given(o)) {
        *what = "--host-memory-limit-mib's";
        return o->host_limit;
    }
    rp_device_info info;
    if (o->device == RP_DEVICE_CPU && rp_device_probe(RP_DEVICE_CPU, &info, NULL) == RP_OK &&
        info.memory_bytes > 0) {
        *what = "this machine's memory (CPU executors)";
        return (int64_t)info.memory_bytes;
    }
    *what = "";
    return 0;
}

static rp_status try_length(int argc, char **argv, int at, int joined, char *word,
                            int64_t seq_len, rp_plan_cli_progress *progress, trial *t,
                            rp_error *err)
{
    if (t->parsed)
        rp_plan_cli_free(&t->o);
    t->parsed = 0;
    t->fits = 0;
    set_length(argv, at, joined, word, seq_len);
    RP_TRY(rp_plan_cli_parse(argc, argv, &t->o, err));
    t->parsed = 1;
    if (!t->o.have_config) {
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--seq-len max needs a config (--init-config or --model): a "
                            "layer-times file's memory does not depend on the length");
    }
    t->o.mc = rp_machine_node(&t->o.mc);
    t->o.mc.search = progress->search;
    char context[48];
    snprintf(context, sizeof context, "--seq-len %lld", (long long)seq_len);
    rp_plan_cli_progress_context(progress, context);
    /* one layer per stage needs the least device memory of any plan (each
     * part of rp_schedule_peak_bytes is a maximum over stages, or grows
     * with a stage's layers): over the limit, no plan fits and the
     * partitioner's search need not run */
    if (!t->o.forced && t->o.mc.memory_limit > 0) {
        rp_plan one;
        rp_plan_singletons(t->o.model->num_layers, t->o.mc.gpus, &one);
        int64_t least = rp_schedule_peak_bytes(t->o.model, &one, t->o.mc.gpus,
                                               t->o.mc.microbatches, t->o.mc.workspace_bytes,
                                               NULL);
        if (least > t->o.mc.memory_limit && t->o.weight_buffers == 0) {
            /* --weight-buffers auto: one buffer, as the planner then takes */
            t->o.model->single_weight_buffer = 1;
            least = rp_schedule_peak_bytes(t->o.model, &one, t->o.mc.gpus, t->o.mc.microbatches,
                                           t->o.mc.workspace_bytes, NULL);
        }
        if (least > t->o.mc.memory_limit) {
            t->bound = RP_BOUND_DEVICE;
            t->msg[0] = '\0'; /* device_bound says it */
            return RP_OK;
        }
    }
    rp_error perr = {0};
    rp_status st = rp_plan_cli_choose(&t->o, &t->o.mc, &t->plan, &t->res, &t->choice, &perr);
    if (st == RP_ERR_DEVICE_MEMORY) {
        t->bound = RP_BOUND_DEVICE;
        snprintf(t->msg, sizeof t->msg, "%s", perr.msg);
        return RP_OK;
    }
    if (st != RP_OK) {
        *err = perr;
        return st;
    }
    t->buffers = t->o.device == RP_DEVICE_CPU /* CPU executors' buffers are host memory too */
                     ? (size_t)t->o.mc.gpus * (size_t)t->res.peak_bytes
                     : 0;
    t->host_total = rp_plan_choice_host_total(&t->choice.host) + t->buffers;
    const char *what;
    const int64_t host_limit = host_bound_bytes(&t->o, &what);
    if (host_limit > 0 && t->host_total > (size_t)host_limit) {
        t->bound = RP_BOUND_HOST;
        return RP_OK;
    }
    t->fits = 1;
    return RP_OK;
}

static const char *kind_word(rp_layer_kind k)
{
    return k == RP_LAYER_EMBED ? "embedding" : k == RP_LAYER_HEAD ? "head" : "decoder block";
}

/* "job 3 (layers 4-7), most in layer 5 (decoder block)": the layer of the
 * job whose field is largest */
static void job_words(const rp_cost_model *m, const rp_plan *p, int j, int grads, char *buf,
                      size_t len)
{
    if (j < 0) {
        snprintf(buf, len, "no job");
        return;
    }
    rp_job jb = rp_schedule_job(p, j);
    int most = jb.first;
    for (int l = jb.first; l <= jb.last; l++) {
        int64_t v = grads ? m->layers[l].grad_bytes : m->layers[l].weight_bytes;
        int64_t w = grads ? m->layers[most].grad_bytes : m->layers[most].weight_bytes;
        if (v > w)
            most = l;
    }
    if (jb.first == jb.last)
        snprintf(buf, len, "job %d: layer %d, the %s", j, most, kind_word(m->layers[most].kind));
    else
        snprintf(buf, len, "job %d: layers %d-%d, most in layer %d, the %s", j, jb.first,
                 jb.last, most, kind_word(m->layers[most].kind));
}

typedef struct part {
    const char *name;
    int64_t bytes;
    char detail[400];
} part;

static int by_size(const void *a, const void *b)
{
    const part *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

static void list_parts(part *ps, int n, rp_longest *out)
{
    char *buf = out->why;
    const size_t len = sizeof out->why;
    qsort(ps, (size_t)n, sizeof *ps, by_size);
    out->part = ps[0].name;
    out->nparts = n;
    for (int i = 0; i < n; i++) {
        out->parts[i].name = ps[i].name;
        out->parts[i].bytes = ps[i].bytes;
    }
    size_t at = strlen(buf);
    for (int i = 0; i < n && at < len; i++) {
        if (ps[i].bytes <= 0)
            continue;
        at += (size_t)snprintf(buf + at, len - at, "%s%s %.1f MiB (%s)", i ? "; " : "",
                               ps[i].name, ps[i].bytes / 1048576.0, ps[i].detail);
    }
}

/* What needs the device memory at t's length: the plan the planner would
 * have fallen back on (one layer per stage, or the forced --plan), its
 * peak in parts, largest first. */
static void device_bound(trial *t, int64_t seq_len, rp_longest *out)
{
    const rp_plan_cli *o = &t->o;
    const rp_cost_model *m = o->model;
    rp_plan p;
    if (o->forced) {
        p = *o->forced;
        if (p.kept == RP_PLAN_KEPT_CHOOSE)
            p.kept = 0;
    } else {
        rp_plan_singletons(m->num_layers, o->width > 0 ? o->width : o->mc.gpus, &p);
    }
    rp_peak_parts q;
    rp_schedule_peak_parts(m, &p, o->mc.gpus, o->mc.microbatches, o->mc.workspace_bytes, &q);
    part ps[7];
    memset(ps, 0, sizeof ps);
    /* one scratch serves a job's gradients and its own workspace, in turn
     * with the other jobs': the job needing the most sets it */
    int ws_layer = -1;
    if (q.scratch_job >= 0) {
        rp_job jb = rp_schedule_job(&p, q.scratch_job);
        for (int l = jb.first; l <= jb.last; l++)
            if (ws_layer < 0 || m->layers[l].workspace_bytes > m->layers[ws_layer].workspace_bytes)
                ws_layer = l;
    }
    ps[0].name = "workspace";
    ps[0].bytes = q.scratch_workspace;
    if (ws_layer >= 0)
        snprintf(ps[0].detail, sizeof ps[0].detail,
                 "job %d's own, beside its gradients in the scratch the jobs take in turn: "
                 "layer %d's, the %s's%s",
                 q.scratch_job, ws_layer, kind_word(m->layers[ws_layer].kind),
                 m->layers[ws_layer].kind == RP_LAYER_HEAD
                     ? " (a chunk's logits and their gradient)"
                     : m->layers[ws_layer].kind == RP_LAYER_BLOCK
                           ? " (attention's and the MLP's scratch of a chunk of tokens)"
                           : "");
    ps[5].name = "gradients";
    ps[5].bytes = q.scratch - q.scratch_workspace;
    char grads[160];
    job_words(m, &p, q.scratch_job, 1, grads, sizeof grads);
    snprintf(ps[5].detail, sizeof ps[5].detail,
             "the gradients of the job whose gradients and workspace need the most; %s",
             grads);
    ps[1].name = "saved activations";
    ps[1].bytes = q.saved;
    /* the memory model gives every layer one slot of the largest block's
     * saved area (engine/memory_model.h's act_bytes) */
    const int64_t slot = q.saved_layer >= 0 ? m->layers[q.saved_layer].act_bytes : 0;
    if (q.saved_job >= 0) {
        rp_job jb = rp_schedule_job(&p, q.saved_job);
        snprintf(ps[1].detail, sizeof ps[1].detail,
                 "what job %d (layers %d-%d) keeps for its backward: %lld slot(s) of %.1f MiB, "
                 "the largest decoder block's saved area, which every layer of a tail or "
                 "backward stage gets",
                 q.saved_job, jb.first, jb.last, (long long)(slot ? q.saved / slot : 0),
                 slot / 1048576.0);
    } else {
        snprintf(ps[1].detail, sizeof ps[1].detail,
                 "one slot, the largest decoder block's saved area");
    }
    char words[160];
    ps[2].name = "weights";
    ps[2].bytes = q.weight_buffers * q.weights;
    job_words(m, &p, q.weights_job, 0, words, sizeof words);
    snprintf(ps[2].detail, sizeof ps[2].detail,
             q.weight_buffers == 1 ? "one buffer of the largest stage's %.1f MiB "
                                     "(--weight-buffers 1); %s"
                                   : "two buffers of the largest stage's %.1f MiB, the running "
                                     "and the prefetched; %s",
             q.weights / 1048576.0, words);
    ps[3].name = "shared workspace";
    ps[3].bytes = q.workspace;
    snprintf(ps[3].detail, sizeof ps[3].detail,
             "the microbatch's token ids, targets and mask (and segment starts, router "
             "statistics; with an FP8 base, the largest block's base in the compute dtype, "
             "dequantised there for each use), or --workspace-mib");
    ps[4].name = "stage buffers";
    ps[4].bytes = (int64_t)(q.layers + 2) * q.out;
    snprintf(ps[4].detail, sizeof ps[4].detail,
             "%d x one microbatch's activations, %.1f MiB (layer %d's output)", q.layers + 2,
             q.out / 1048576.0, q.io_layer);
    ps[6].name = "kept blocks";
    ps[6].bytes = q.kept_pool;
    snprintf(ps[6].detail, sizeof ps[6].detail,
             "the executor's pool of the --plan's %d kept blocks (their inputs and saved areas, "
             "for each microbatch of its pipeline)", p.kept > 0 ? p.kept : 0);
    snprintf(out->why, sizeof out->why,
             "at %lld tokens no plan fits the device memory limit of %.1f MiB%s%s%s; %s needs "
             "%.1f MiB: ",
             (long long)seq_len, o->mc.memory_limit / 1048576.0, t->msg[0] ? " (" : "", t->msg,
             t->msg[0] ? ")" : "",
             o->forced ? "the --plan" : "even one layer per stage, the least of any plan,",
             q.total / 1048576.0);
    out->need = q.total;
    out->limit = o->mc.memory_limit;
    list_parts(ps, q.kept_pool > 0 ? 7 : 6, out);
}

/* What needs the host memory at t's length: the store's parts, largest first. */
static void host_bound(const trial *t, int64_t seq_len, rp_longest *out)
{
    const rp_host_memory *hm = &t->choice.host;
    part ps[3];
    memset(ps, 0, sizeof ps);
    ps[0].name = "activations";
    ps[0].bytes = (int64_t)hm->activations;
    snprintf(ps[0].detail, sizeof ps[0].detail,
             "the arena of the stages' outputs, saved inputs and gradients%s",
             hm->kept_layers > 0 ? ", kept blocks' included" : "");
    ps[1].name = "model state and gradients";
    ps[1].bytes = (int64_t)hm->param_store;
    snprintf(ps[1].detail, sizeof ps[1].detail, "the store's parameters, optimizer state and "
             "gradient areas");
    ps[2].name = "executor buffers";
    ps[2].bytes = (int64_t)t->buffers;
    snprintf(ps[2].detail, sizeof ps[2].detail, "%d CPU executors' device memory, which is "
             "host memory", t->o.mc.gpus);
    const char *what;
    const int64_t limit = host_bound_bytes(&t->o, &what);
    snprintf(out->why, sizeof out->why,
             "at %lld tokens a plan fits the device, but the host memory per node, %.2f GiB, is "
             "over %s %.2f GiB: ",
             (long long)seq_len, t->host_total / 1073741824.0, what, limit / 1073741824.0);
    out->need = (int64_t)t->host_total;
    out->limit = limit;
    list_parts(ps, 3, out);
}

/* "host memory per node: T GiB (store: model state and gradients S GiB,
 * activations A GiB; pinned P GiB of it[; CPU executors' buffers B GiB]),
 * within L GiB" */
static void host_words(const trial *t, char *buf, size_t len)
{
    const rp_host_memory *hm = &t->choice.host;
    const double gib = 1073741824.0;
    int at = snprintf(buf, len, "host memory per node: %.2f GiB (store: model state and "
                      "gradients %.2f GiB, activations %.2f GiB; ",
                      t->host_total / gib, hm->param_store / gib, hm->activations / gib);
    if (at > 0 && (size_t)at < len)
        at += t->o.device == RP_DEVICE_CPU
                  ? snprintf(buf + at, len - (size_t)at, "none of it pinned")
                  : snprintf(buf + at, len - (size_t)at, "pinned %.2f GiB of it",
                             hm->pinned / gib);
    if (at > 0 && (size_t)at < len && t->buffers)
        at += snprintf(buf + at, len - (size_t)at, "; CPU executors' buffers %.2f GiB",
                       t->buffers / gib);
    const char *what;
    const int64_t limit = host_bound_bytes(&t->o, &what);
    if (at > 0 && (size_t)at < len && limit > 0)
        snprintf(buf + at, len - (size_t)at, "), within %s %.2f GiB", what, limit / gib);
    else if (at > 0 && (size_t)at < len)
        snprintf(buf + at, len - (size_t)at, "); --host-memory-limit-mib not given: host "
                 "memory did not bound the search");
}

rp_status rp_plan_longest_search(int argc, char **argv, int at, int joined, char *word,
                                 rp_plan_cli_progress *progress, rp_longest *out,
                                 rp_error *err)
{
    memset(out, 0, sizeof *out);
    trial *t = calloc(1, sizeof *t);
    if (!t)
        return rp_error_set(err, RP_ERR_NOMEM, "out of memory");
    const int64_t g = RP_LONGEST_GRANULE;
    int64_t lo = 0, hi = 0; /* lo fits (0: none known), hi does not (0: none known) */
    rp_status st = RP_OK;
    /* double from one granule until a length does not fit, then halve the gap */
    for (int64_t s = g; st == RP_OK && !hi && lo < RP_LONGEST_CAP;
         s = s * 2 < RP_LONGEST_CAP ? s * 2 : RP_LONGEST_CAP) {
        st = try_length(argc, argv, at, joined, word, s, progress, t, err);
        if (st == RP_OK && t->fits)
            lo = s;
        else if (st == RP_OK)
            hi = s;
    }
    while (st == RP_OK && hi && hi - lo > g) {
        int64_t mid = lo + (hi - lo) / g / 2 * g;
        st = try_length(argc, argv, at, joined, word, mid, progress, t, err);
        if (st == RP_OK && t->fits)
            lo = mid;
        else if (st == RP_OK)
            hi = mid;
    }
    if (st == RP_OK && hi) { /* the bound, in the terms of the first length over it */
        st = try_length(argc, argv, at, joined, word, hi, progress, t, err);
        if (st == RP_OK && t->bound == RP_BOUND_DEVICE)
            device_bound(t, hi, out);
        else if (st == RP_OK)
            host_bound(t, hi, out);
        out->bound = t->bound;
        out->first_over = hi;
    } else if (st == RP_OK) {
        out->bound = RP_BOUND_CAP;
        snprintf(out->why, sizeof out->why, "--seq-len's largest value, %lld, fits",
                 (long long)RP_LONGEST_CAP);
        out->part = "";
    }
    out->longest = lo;
    if (st == RP_OK && lo) {
        st = try_length(argc, argv, at, joined, word, lo, progress, t, err);
        if (st == RP_OK)
            host_words(t, out->host, sizeof out->host);
    }
    if (t->parsed)
        rp_plan_cli_free(&t->o);
    set_length(argv, at, joined, word, lo ? lo : g);
    rp_plan_cli_progress_context(progress, "");
    free(t);
    return st;
}
