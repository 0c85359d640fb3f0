/* The optimizer thread of a rank. Every rank owns a share of every layer
 * (whole clip blocks, rp_engine_share), so each layer's update is spread
 * over all the node's ranks and their cores. For its share of a layer, as
 * soon as every pipeline's gradient has landed, it sums them in pipeline
 * order (with a tied embedding, each pipeline's part is its embedding
 * gradient plus its LM-head gradient), writes the block norms, and runs
 * AdamW. Then the share's version is raised; a job uses a layer once all
 * shares are at the version it needs.
 * Order: gradients are summed as they land (top down); the updates follow
 * in the order the update gate's waits allow (update_gate.h: at once
 * without clipping, by need with clipping, top down with a lagged
 * optimizer), and each waits at the gate before it changes the layer.
 * With clipping and --speculative-update, a block's AdamW runs as soon as
 * it is summed, its state backed up and its version held; after the norm
 * it is published, or redone from its backup when clipping clips
 * (speculative.c).
 * Every step is elementwise or per block, so the bits depend neither on the
 * number of ranks nor on which rank did what. This file runs the updates;
 * grad_completion.c sums the gradients; update_gate.c decides when. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_impl.h"
#include "engine/optimizer_impl.h"
#include "engine/protocol.h"
#include "engine/speculative.h"
#include "engine/update_gate.h"
#include "optim/adamw.h"
#include "optim/clip.h"

/* Update the whole share of layer l (with several nodes: this node's slice
 * of it, then gather the other nodes' slices) and raise its version (for
 * the embedding: its rows' too). */
static rp_status update_layer(rp_engine *e, int l, int64_t t, float coef, int skip,
                              const char *who, rp_error *err)
{
    RP_TRY(rp_gate_wait_update(e, l, t, who, err));
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    size_t b0, b1, lo, hi;
    rp_engine_slice(e, l, e->rank, e->nd.node, &b0, &b1, &lo, &hi);
    if (!skip)
        rp_optimizer_update_share(e, l, t, coef, lo, hi);
    if (hi > lo)
        rp_optimizer_trace(e, "adamw layer", l, t, t0);
    rp_gate_update_done(e, l, t, !skip);
    return RP_OK;
}

/* Elements of this rank's share (its node's slice) of layer l. */
static size_t share_size(const rp_engine *e, int l)
{
    size_t b0, b1, lo, hi;
    rp_engine_slice(e, l, e->rank, e->nd.node, &b0, &b1, &lo, &hi);
    return hi - lo;
}

/* The speculative update of this rank's share of layer l (update_gate.h's
 * rp_gate_speculates), as soon as its gradient is summed: AdamW with
 * coefficient 1.0f, writing the compute copy and, in the same pass, the
 * backup of the master, m and v it read; its version waits for the global
 * norm (settle_layer). */
static rp_status speculate_layer(rp_engine *e, int l, int64_t t, const char *who, rp_error *err)
{
    RP_TRY(rp_gate_wait_update(e, l, t, who, err));
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    size_t b0, b1, lo, hi;
    rp_engine_slice(e, l, e->rank, e->nd.node, &b0, &b1, &lo, &hi);
    if (hi == lo)
        return RP_OK;
    rp_optimizer_update_share_backup(e, l, t, 1.0f, lo, hi, rp_speculative_part(e, l), 0);
    rp_optimizer_trace(e, "adamw speculative layer", l, t, t0);
    return RP_OK;
}

/* A speculated layer once the norm is known: with coefficient 1.0f (the
 * norm did not clip) the update made is the step's, bit for bit; else the
 * update is redone with coef from the state in the backup, read in place
 * (the bits of a restore and a redo; the same adam_step: bias correction
 * counts the step once). Then the version
 * is raised (several nodes: the slice goes to the all-gather only now). */
static void settle_layer(rp_engine *e, int l, int64_t t, float coef)
{
    if (coef != 1.0f) {
        uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
        size_t b0, b1, lo, hi;
        rp_engine_slice(e, l, e->rank, e->nd.node, &b0, &b1, &lo, &hi);
        if (hi > lo) {
            rp_optimizer_update_share_backup(e, l, t, coef, lo, hi, rp_speculative_part(e, l), 1);
            rp_optimizer_trace(e, "adamw redo layer", l, t, t0);
        }
    }
    rp_gate_update_done(e, l, t, 1);
}

/* A step that ends before its norm is known (`why`: RP_STOP, the run stops
 * after an earlier step; else a failure): the speculated layers' state as
 * it was, their compute copy too, no version raised (the step never
 * happened, and a stop's checkpoint reads them). Said, with the count of
 * this rank's layers restored: a stop reaches it only through the test hook
 * RP_FAULT_STOP_BEFORE_NORM (protocol.h), whose tests look for the line. */
static void abandon_speculation(rp_engine *e, int64_t t, const unsigned char *speculated,
                                rp_status why)
{
    int restored = 0;
    for (int l = 1; l < e->num_layers; l++) {
        if (!speculated[l])
            continue;
        size_t b0, b1, lo, hi;
        rp_engine_slice(e, l, e->rank, e->nd.node, &b0, &b1, &lo, &hi);
        rp_speculative_restore(e, l, lo, hi);
        rp_params_sync_compute_range(e->p, l, lo, hi);
        restored += hi > lo;
    }
    if (restored)
        rp_log(e->lg, RP_LOG_INFO, "speculative update: step %lld ended before its gradient "
               "norm was known (%s): this rank's speculative updates of %d layer%s restored "
               "from their backup, no version raised", (long long)t,
               why == RP_STOP ? "the run stops after an earlier step" : "a failure", restored,
               restored == 1 ? "" : "s");
}

/* The embedding rows iteration t+1 reads (every pipeline's), sorted and
 * distinct, into ids (M*T entries); none after the last step. */
static rp_status next_rows(rp_engine *e, int64_t t, int32_t *ids, int64_t *n, rp_error *err)
{
    *n = 0;
    if (t >= e->steps)
        return RP_OK;
    for (int g = 0; g < e->pipelines; g++) {
        int64_t k = rp_engine_rows(e, t + 1, g, ids + *n);
        if (k < 0)
            return rp_error_set(err, RP_ERR_NOMEM, "optimizer: embedding rows of step %lld",
                                (long long)(t + 1));
        *n += k;
    }
    if (e->pipelines > 1) /* the pipelines' lists overlap */
        *n = rp_engine_sort_unique(ids, *n);
    return RP_OK;
}

/* The element ranges of this rank's share of the embedding that
 * update_rows updates: the listed rows (listed = 1), neighbouring rows
 * coalesced into runs, or the rows between them (listed = 0). At most
 * n + 1 ranges. */
static size_t row_ranges(rp_engine *e, const int32_t *ids, int64_t n, int listed,
                         rp_adamw_range *r)
{
    size_t b0, b1, lo, hi, H = (size_t)e->hidden, k = 0;
    rp_engine_share(e, 0, e->rank, &b0, &b1, &lo, &hi);
    size_t cur = lo;
    for (int64_t i = 0; i < n && cur < hi; i++) {
        size_t a = (size_t)ids[i] * H, b = a + H;
        if (b <= cur)
            continue;
        if (a >= hi)
            break;
        a = a < cur ? cur : a;
        b = b < hi ? b : hi;
        if (listed) {
            while (i + 1 < n && (size_t)ids[i + 1] * H == b && b < hi) { /* a run of rows */
                i++;
                b = (size_t)ids[i] * H + H < hi ? (size_t)ids[i] * H + H : hi;
            }
            r[k++] = (rp_adamw_range){a, b};
        } else if (a > cur) {
            r[k++] = (rp_adamw_range){cur, a};
        }
        cur = b;
    }
    if (!listed && cur < hi)
        r[k++] = (rp_adamw_range){cur, hi};
    return k;
}

/* The rows step t+1 reads (next_rows) and room for update_rows' ranges. */
typedef struct embedding_rows {
    int32_t *ids;           /* M*T entries */
    int64_t n;              /* ids in use */
    rp_adamw_range *ranges; /* M*T + 1 entries */
} embedding_rows;

/* AdamW on the listed rows of this rank's share of the embedding (listed =
 * 1) or on the others (listed = 0). The runs of rows and the gaps are short
 * (a run of rows is rarely 32,768 elements), so one update per run would
 * keep to one thread; the ranges are collected first and their elements
 * split evenly over the optimizer's threads together (rp_optimizer_update_ranges):
 * the rows reach the parameters/s of a dense tensor of their size
 * (bench_adamw's rows case), with the same bits (AdamW is elementwise). */
static void update_rows(rp_engine *e, int64_t t, float coef, embedding_rows *rows, int listed)
{
    size_t k = row_ranges(e, rows->ids, rows->n, listed, rows->ranges);
    rp_optimizer_update_ranges(e, 0, t, coef, rows->ranges, k);
}

/* The embedding by need: update_embedding_rows first updates the rows the
 * next step's tokens read (the next forward jobs wait only for these,
 * rows events); update_embedding_rest, which the caller may defer behind the
 * other layers' updates, does the remaining rows (a tied LM head and the
 * next update wait for all, the version). Every row is updated every
 * step: AdamW moves rows with a zero gradient too. With several nodes the
 * whole slice goes at once (update_layer: its all-gather raises both
 * events) and the rest is nothing. */
static rp_status update_embedding_rows(rp_engine *e, int64_t t, float coef, int skip,
                                       embedding_rows *rows, rp_error *err)
{
    if (e->nd.nodes > 1)
        return update_layer(e, 0, t, coef, skip, "optimizer, embedding", err);
    RP_TRY(next_rows(e, t, rows->ids, &rows->n, err));
    RP_TRY(rp_gate_wait_update(e, 0, t, "optimizer, embedding rows", err));
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    if (!skip)
        update_rows(e, t, coef, rows, 1);
    rp_optimizer_trace(e, "adamw rows of layer", 0, t, t0);
    rp_proto_publish_rows(e, t);
    return RP_OK;
}

static void update_embedding_rest(rp_engine *e, int64_t t, float coef, int skip,
                                  embedding_rows *rows)
{
    if (e->nd.nodes > 1)
        return;
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    if (!skip)
        update_rows(e, t, coef, rows, 0);
    rp_optimizer_trace(e, "adamw rest of layer", 0, t, t0);
    rp_proto_publish_version(e, 0, t);
}

/* Every layer's update of step t top down, with a lagged optimizer: each
 * after step t+1's jobs uploaded the layer (rp_gate_wait_update). */
static rp_status update_lagged(rp_engine *e, int64_t t, float coef, int skip, const char *who,
                               rp_error *err)
{
    for (int l = e->num_layers - 1; l >= 0; l--)
        RP_TRY(update_layer(e, l, t, coef, skip, who, err));
    return RP_OK;
}

static rp_status run(rp_engine *e, rp_error *err)
{
    char who[64];
    rp_gate_order order = rp_gate_order_of(e);
    int clip = e->o->grad_clip > 0, lag = order == RP_GATE_LAGGED;
    /* rows first, except with a lagged optimizer, whose update of a step
     * follows the next step's uploads anyway */
    int by_rows = !lag;
    size_t tokens = (size_t)(e->microbatches * e->tokens_per_micro);
    embedding_rows rows = {0};
    if (by_rows) {
        rows.ids = malloc(sizeof(int32_t) * tokens);
        rows.ranges = malloc(sizeof(rp_adamw_range) * (tokens + 1));
        if (!rows.ids || !rows.ranges) {
            free(rows.ids);
            free(rows.ranges);
            return rp_error_set(err, RP_ERR_NOMEM, "optimizer: embedding row list");
        }
    }
    unsigned char *speculated = calloc((size_t)e->num_layers, 1); /* this step's */
    if (!speculated) {
        free(rows.ids);
        free(rows.ranges);
        return rp_error_set(err, RP_ERR_NOMEM, "optimizer: speculated layers");
    }
    rp_status s = RP_OK;
    int64_t adam_before = e->by_optimizer.adam_step;
    if (rp_engine_resumes_pending(e)) {
        /* a checkpoint's pending update: its gradient loaded, its
         * coefficient saved; applied as the run that wrote it would have */
        int64_t t = e->resume_step;
        snprintf(who, sizeof who, "optimizer, pending update of step %lld", (long long)t);
        int skip = rp_engine_counted(e, t) == 0;
        if (!skip)
            e->by_optimizer.adam_step++;
        s = update_lagged(e, t, e->resume_coef, skip, who, err);
    }
    for (int64_t t = e->it_first; s == RP_OK && t <= e->it_last && !rp_proto_stopped(e, t); t++) {
        snprintf(who, sizeof who, "optimizer, iteration %lld", (long long)t);
        int skip = rp_engine_counted(e, t) == 0; /* nothing counted: no update */
        adam_before = e->by_optimizer.adam_step;
        if (!skip)
            e->by_optimizer.adam_step++;
        rows.n = 0;
        memset(speculated, 0, (size_t)e->num_layers);
        int speculating = 0;
        /* this step's speculated and normal updates of the blocks and the
         * head, counted for the summary once the step is not abandoned */
        int64_t spec_layers = 0, spec_after = 0;
        /* gradients land top down (the tail first) */
        for (int l = e->num_layers - 1; s == RP_OK && l >= 0; l--) {
            /* the test hook's stop: the blocks and the head summed, not the
             * embedding, which the global norm waits for */
            if (l == 0 && (s = rp_proto_fault_stop(e, t, err)) != RP_OK)
                break;
            /* without clipping a block's update needs nothing else: fused */
            int fuse = rp_gate_fused(e, l, skip);
            s = rp_grad_sum_share(e, l, t, fuse, who, err);
            if (s == RP_OK && rp_gate_speculates(e, l, t, skip)) {
                s = speculate_layer(e, l, t, who, err);
                if (s == RP_OK) /* changed: restored if the step ends before its norm */
                    speculated[l] = speculating = 1;
            }
            if (s == RP_OK && l > 0 && rp_gate_may_speculate(e, skip) && share_size(e, l) > 0)
                speculated[l] ? spec_layers++ : spec_after++;
            if (s != RP_OK || order != RP_GATE_AS_SUMMED)
                continue;
            if (fuse) {
                rp_gate_update_done(e, l, t, 1);
            } else if (l == 0) {
                s = update_embedding_rows(e, t, 1.0f, skip, &rows, err);
                if (s == RP_OK)
                    update_embedding_rest(e, t, 1.0f, skip, &rows);
            } else {
                s = update_layer(e, l, t, 1.0f, skip, who, err);
            }
        }
        double total, norm;
        float coef = 1.0f;
        if (s == RP_OK && clip && order != RP_GATE_AS_SUMMED) {
            s = rp_gate_wait_global_sumsq(e, t, who, &total, err);
            if (s == RP_OK && rp_clip_coef(total, e->o->grad_clip, &norm, &coef, err) != RP_OK)
                s = rp_error_prefix(err, "step %lld: gradient norm", (long long)t);
        }
        if (s != RP_OK && speculating)
            abandon_speculation(e, t, speculated, s);
        if (s != RP_OK)
            break;
        if (order == RP_GATE_AS_SUMMED)
            continue;
        /* hit: every speculative update stands; miss: redone (counted on
         * every rank alike, whatever each speculated) */
        if (rp_gate_may_speculate(e, skip)) {
            coef == 1.0f ? e->by_optimizer.spec_hits++ : e->by_optimizer.spec_misses++;
            e->by_optimizer.spec_layers += spec_layers;
            e->by_optimizer.spec_after += spec_after;
        }
        if (lag) { /* every gradient summed first: a stop leaves them for its checkpoint */
            e->by_optimizer.lag_coef = coef;
            s = update_lagged(e, t, coef, skip, who, err);
            continue;
        }
        /* by need: the rows the next forward reads, the blocks from the
         * bottom, then the rest of the embedding */
        s = update_embedding_rows(e, t, coef, skip, &rows, err);
        for (int l = 1; s == RP_OK && l < e->num_layers; l++)
            if (speculated[l])
                settle_layer(e, l, t, coef);
            else
                s = update_layer(e, l, t, coef, skip, who, err);
        if (s == RP_OK)
            update_embedding_rest(e, t, coef, skip, &rows);
    }
    free(rows.ids);
    free(rows.ranges);
    free(speculated);
    if (s == RP_STOP) /* stopped inside a step past the last: it never happened */
        e->by_optimizer.adam_step = adam_before;
    return s;
}

void *rp_engine_optimizer_main(void *arg)
{
    rp_engine *e = arg;
    /* The rank's cores: with a GPU the executor thread mostly waits on the
     * device, so the optimizer takes them all (its threads take chunks as
     * they come free, so the executor's thread spinning on the device slows
     * no update by more than its share of a core); a CPU executor computes
     * on all of them, and the optimizer beside it keeps to one thread, so a
     * node never runs more busy threads than it has cores (plus one per
     * rank). Measured (issue 33, bench/README.md): on the 25M config, 1
     * rank x 2 threads, with clipping, the optimizer on both threads gave
     * a median 0.86x the tokens/s of one thread over 7 interleaved rounds
     * (0.44-1.08): its updates overlap the next forward, whose GEMMs split
     * their work statically over the executor's threads, while AdamW is
     * under 1% of such a step. Its results do not depend on the thread
     * count. */
    omp_set_num_threads(e->device == RP_DEVICE_CPU ? 1 : e->threads);
    rp_error err = {0};
    rp_status s = run(e, &err);
    if (s != RP_OK && s != RP_STOP)
        rp_engine_fail(e, s, &err);
    atomic_store(&e->by_optimizer.optimizer_done, 1); /* the node communication thread may finish */
    return NULL;
}
