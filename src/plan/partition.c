/* Partitioner search (see partition.h). */
#include "plan/partition.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "plan/baseline.h"
#include "plan/evaluate.h"
#include "plan/keep.h"
#include "plan/plan_memo.h"
#include "plan/schedule.h"
#include "plan/search.h"

#define SEED_DENSE 12 /* every count (and tail size) up to this is a seed */
#define N_CLIMB 8       /* seeds the local search starts from, up to 12 layers */
#define N_CLIMB_LARGE 3 /* beyond */
#define KICKS_SMALL 64 /* random restarts of the local search, up to 12 layers */
#define KICKS_LARGE 4
#define MAX_PASSES 200

double rp_partition_objective(const rp_cost_model *m, const rp_machine *mc, const rp_plan *p)
{
    rp_error e;
    rp_sim_result r;
    rp_plan *q = NULL;
    if (rp_plan_choose_kept(m, mc, p) != p->kept) { /* as the search scores it (evaluate) */
        q = malloc(sizeof *q);
        if (!q)
            return INFINITY;
        *q = *p;
        q->kept = rp_plan_choose_kept(m, mc, p);
        p = q;
    }
    double ms = INFINITY;
    if (!(mc->memory_limit > 0 &&
          rp_schedule_peak_bytes(m, p, mc->gpus, mc->microbatches, mc->workspace_bytes, NULL) > mc->memory_limit) &&
        rp_simulate(m, p, mc, &r, &e) == RP_OK)
        ms = r.iteration_ms;
    free(q);
    return ms;
}

/* Search score (plan/evaluate.h): plans over the memory limit rank below
 * every plan within it, by how far over they are, so the search can walk
 * from an infeasible seed into the feasible region; within it, by modelled
 * time. */
typedef rp_plan_score score;

static int feasible(score a) { return a.excess == 0 && isfinite(a.time); }

/* Tell the caller's search object (plan/search.h) where the search is. */
static void progress(const rp_machine *mc, const char *phase, int done, int total, score best)
{
    if (feasible(best))
        rp_plan_search_offer(mc->search, best.time);
    rp_plan_search_phase(mc->search, phase, done, total);
}

static int better(score a, const rp_plan *pa, score b, const rp_plan *pb)
{
    if (a.excess != b.excess)
        return a.excess < b.excess;
    if (a.time < b.time * (1 - 1e-12))
        return 1;
    if (a.time <= b.time * (1 + 1e-12) && isfinite(a.time))
        return rp_schedule_num_jobs(pa) < rp_schedule_num_jobs(pb);
    return 0;
}

typedef struct cand {
    score sc;
    rp_plan *plan;
} cand;

/* 16, 24, 32, 48, 64, 96...: the sparse seed values beyond SEED_DENSE */
static int in_geometric(int c)
{
    for (int g = 16; g <= c; g *= 2)
        if (c == g || c == g + g / 2)
            return 1;
    return 0;
}

/* Build a plan with tail start k, forward layers 0..k-1 cut into about pf
 * balanced runs and backward layers into about pb. */
static void seed_plan(const double *fc, const double *bc, int L, int k, int pf, int pb, int width,
                      rp_plan *p, int *cut)
{
    memset(p, 0, sizeof *p);
    p->num_layers = L;
    p->width = width;
    if (k > 0) {
        int nf = rp_split_minmax(fc, k, pf < 1 ? 1 : pf, cut);
        cut[nf] = k;
        p->nfwd = nf;
        for (int i = 0; i < nf; i++) {
            p->fwd[i].first = cut[i];
            p->fwd[i].last = cut[i + 1] - 1;
        }
    }
    p->bwd[0].first = k;
    p->bwd[0].last = L - 1;
    p->nbwd = 1;
    if (k > 0) {
        int nb = rp_split_minmax(bc, k, pb < 1 ? 1 : pb, cut);
        cut[nb] = k;
        for (int i = nb - 1; i >= 0; i--) {
            p->bwd[p->nbwd].first = cut[i];
            p->bwd[p->nbwd].last = cut[i + 1] - 1;
            p->nbwd++;
        }
    }
}

/* Neighbours of p, written one at a time into c->q (for CLIMB_IMPROVE each
 * in its place in the batch, scored when the batch is full). The moves:
 * shift a forward or backward boundary by one, move the tail's first layer
 * by one, split a stage in two, merge two neighbours. */
typedef struct climb {
    const rp_cost_model *m;
    const rp_machine *mc;
    rp_plan *best;
    score best_sc;
    rp_plan *q;
    int improved;
    int mode;          /* CLIMB_IMPROVE, CLIMB_COUNT or CLIMB_PICK */
    int counter, pick; /* for counting neighbours and picking one */
    rp_plan *picked;
    rp_plan_memo *memo;   /* the search's evaluations (may be NULL) */
    rp_plan_batch *batch; /* CLIMB_IMPROVE: the neighbours scored together */
} climb;

enum { CLIMB_IMPROVE = 0, CLIMB_COUNT = 1, CLIMB_PICK = 2 };

/* The neighbours collected, scored together (plan/evaluate.h); the first
 * better than the best, in the order they were made, is the improvement,
 * as when each is scored in turn. */
static void score_batch(climb *c)
{
    rp_plan_batch *b = c->batch;
    rp_plan_batch_evaluate(c->m, c->mc, b, c->memo);
    for (int i = 0; i < b->n && !c->improved; i++)
        if (better(b->scores[i], &b->plans[i], c->best_sc, c->best)) {
            *c->best = b->plans[i];
            c->best_sc = b->scores[i];
            c->improved = 1;
        }
    b->n = 0;
    c->q = &b->plans[0]; /* where the next neighbour is made */
}

static void consider(climb *c)
{
    if (rp_plan_validate(c->q, c->m->num_layers, NULL) != RP_OK)
        return;
    if (c->mode == CLIMB_IMPROVE && c->improved)
        return; /* first improvement: the next pass starts from it */
    if (c->mode != CLIMB_IMPROVE) {
        if (c->mode == CLIMB_PICK && c->counter == c->pick)
            *c->picked = *c->q;
        c->counter++;
        return;
    }
    c->batch->n++; /* c->q was its next place */
    if (c->batch->n == c->batch->cap)
        score_batch(c);
    else
        c->q = &c->batch->plans[c->batch->n];
}

static void remove_at(rp_stage *a, int *n, int i)
{
    memmove(a + i, a + i + 1, sizeof *a * (size_t)(*n - i - 1));
    (*n)--;
}

static void insert_at(rp_stage *a, int *n, int i, rp_stage s)
{
    memmove(a + i + 1, a + i, sizeof *a * (size_t)(*n - i));
    a[i] = s;
    (*n)++;
}

static void neighbours(climb *c, const rp_plan *p)
{
    /* forward boundaries */
    for (int i = 0; i + 1 < p->nfwd; i++) {
        for (int d = -1; d <= 1; d += 2) {
            *c->q = *p;
            c->q->fwd[i].last += d;
            c->q->fwd[i + 1].first += d;
            if (c->q->fwd[i].last >= c->q->fwd[i].first && c->q->fwd[i + 1].last >= c->q->fwd[i + 1].first)
                consider(c);
        }
    }
    /* backward boundaries below the tail (bwd[i] above bwd[i+1]) */
    for (int i = 1; i + 1 < p->nbwd; i++) {
        for (int d = -1; d <= 1; d += 2) {
            *c->q = *p;
            c->q->bwd[i].first += d;
            c->q->bwd[i + 1].last += d;
            if (c->q->bwd[i].last >= c->q->bwd[i].first && c->q->bwd[i + 1].last >= c->q->bwd[i + 1].first)
                consider(c);
        }
    }
    int k = rp_plan_tail_first(p);
    /* tail grows down by one layer */
    if (k > 0) {
        *c->q = *p;
        c->q->bwd[0].first = k - 1;
        if (--c->q->fwd[c->q->nfwd - 1].last < c->q->fwd[c->q->nfwd - 1].first)
            c->q->nfwd--;
        if (--c->q->bwd[1].last < c->q->bwd[1].first)
            remove_at(c->q->bwd, &c->q->nbwd, 1);
        consider(c);
    }
    /* tail shrinks by one layer */
    if (p->bwd[0].last > k && p->nfwd < RP_PLAN_MAX_STAGES && p->nbwd < RP_PLAN_MAX_STAGES) {
        *c->q = *p;
        c->q->bwd[0].first = k + 1;
        if (c->q->nfwd == 0)
            c->q->fwd[c->q->nfwd++] = (rp_stage){k, k};
        else
            c->q->fwd[c->q->nfwd - 1].last = k;
        if (c->q->nbwd == 1)
            c->q->bwd[c->q->nbwd++] = (rp_stage){k, k};
        else
            c->q->bwd[1].last = k;
        consider(c);
        /* or the freed layer becomes a stage of its own, both ways */
        *c->q = *p;
        c->q->bwd[0].first = k + 1;
        c->q->fwd[c->q->nfwd++] = (rp_stage){k, k};
        insert_at(c->q->bwd, &c->q->nbwd, 1, (rp_stage){k, k});
        consider(c);
    }
    /* splits and merges */
    for (int i = 0; i < p->nfwd; i++) {
        if (p->fwd[i].last > p->fwd[i].first && p->nfwd < RP_PLAN_MAX_STAGES) {
            *c->q = *p;
            int mid = (p->fwd[i].first + p->fwd[i].last + 1) / 2;
            c->q->fwd[i].last = mid - 1;
            insert_at(c->q->fwd, &c->q->nfwd, i + 1, (rp_stage){mid, p->fwd[i].last});
            consider(c);
        }
        if (i + 1 < p->nfwd) {
            *c->q = *p;
            c->q->fwd[i].last = p->fwd[i + 1].last;
            remove_at(c->q->fwd, &c->q->nfwd, i + 1);
            consider(c);
        }
    }
    for (int i = 1; i < p->nbwd; i++) {
        if (p->bwd[i].last > p->bwd[i].first && p->nbwd < RP_PLAN_MAX_STAGES) {
            *c->q = *p;
            int mid = (p->bwd[i].first + p->bwd[i].last + 1) / 2;
            c->q->bwd[i].first = mid;
            insert_at(c->q->bwd, &c->q->nbwd, i + 1, (rp_stage){p->bwd[i].first, mid - 1});
            consider(c);
        }
        if (i + 1 < p->nbwd) {
            *c->q = *p;
            c->q->bwd[i].first = p->bwd[i + 1].first;
            remove_at(c->q->bwd, &c->q->nbwd, i + 1);
            consider(c);
        }
    }
}

static score hill_climb(const rp_cost_model *m, const rp_machine *mc, rp_plan *p, score obj,
                        rp_plan *scratch1, rp_plan_memo *memo, rp_plan_batch *batch)
{
    /* each neighbour is made in its place in the batch (c.q) */
    climb c = {m, mc, scratch1, obj, &batch->plans[batch->n], 0, CLIMB_IMPROVE, 0, 0, NULL, memo,
               batch};
    *scratch1 = *p;
    for (int pass = 0; pass < MAX_PASSES; pass++) {
        c.improved = 0;
        rp_plan *cur = p;
        *cur = *c.best;
        neighbours(&c, cur);
        if (!c.improved)
            score_batch(&c); /* the last neighbours collected */
        if (!c.improved)
            break;
    }
    *p = *c.best;
    return c.best_sc;
}

/* Replace p by a random neighbour (deterministic generator state *rng, so
 * every rank computes the same plan). Returns 0 when p has none. */
static int random_move(const rp_cost_model *m, const rp_machine *mc, rp_plan *p, uint64_t *rng,
                       rp_plan *scratch)
{
    climb c = {m, mc, NULL, {0, 0}, scratch, 0, CLIMB_COUNT, 0, 0, NULL, NULL, NULL};
    rp_plan *cur = malloc(sizeof *cur);
    if (!cur)
        return 0;
    *cur = *p;
    neighbours(&c, cur);
    int n = c.counter;
    if (n > 0) {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        c.mode = CLIMB_PICK;
        c.counter = 0;
        c.pick = (int)(*rng % (uint64_t)n);
        c.picked = p;
        neighbours(&c, cur);
    }
    free(cur);
    return n > 0;
}

/* Iterated local search: from the best plan, make two random moves, climb
 * again, keep the result when it is better. Escapes the local optima that
 * the modular round-robin pattern makes common. */
static score kick_search(const rp_cost_model *m, const rp_machine *mc, rp_plan *best, score sc,
                         int kicks, rp_plan *t, rp_plan *s1, rp_plan *s2, rp_plan_memo *memo,
                         rp_plan_batch *batch)
{
    uint64_t rng = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < kicks; i++) {
        progress(mc, "random restarts", i, kicks, sc);
        *t = *best;
        if (!random_move(m, mc, t, &rng, s2) || !random_move(m, mc, t, &rng, s2))
            break;
        score o = hill_climb(m, mc, t, rp_plan_evaluate(m, mc, t, memo), s1, memo, batch);
        if (better(o, t, sc, best)) {
            *best = *t;
            sc = o;
        }
    }
    return sc;
}

/* Smallest device memory a layer can need (rp_schedule_peak_bytes of a
 * plan where it is a backward stage of its own): two weight buffers (one
 * with single_weight_buffer) at least its size, its gradients, its activations, three activation buffers
 * and the workspace (the shared one and its own). */
static rp_status check_layers_fit(const rp_cost_model *m, const rp_machine *mc, rp_error *err)
{
    if (mc->memory_limit <= 0)
        return RP_OK;
    for (int l = 0; l < m->num_layers; l++) {
        const rp_layer_cost *c = &m->layers[l];
        int64_t io = l > 0 ? m->layers[l - 1].out_bytes : 0;
        if (c->out_bytes > io)
            io = c->out_bytes;
        const int64_t workspace = mc->workspace_bytes + c->workspace_bytes;
        const int buffers = m->single_weight_buffer ? 1 : 2;
        int64_t need = buffers * c->weight_bytes + c->grad_bytes + c->act_bytes + 3 * io + workspace;
        if (need > mc->memory_limit) {
            static const char *kinds[] = {"embedding", "decoder block", "head"};
            return rp_error_set(err, RP_ERR_DEVICE_MEMORY,
                                "layer %d (%s) alone needs %" PRId64 " bytes of device memory "
                                "(weights %" PRId64 " in %s + gradients %" PRId64
                                " + activations %" PRId64 " + buffers %" PRId64
                                " + workspace %" PRId64 "), more than the limit of %" PRId64
                                " bytes",
                                l, kinds[c->kind], need, c->weight_bytes,
                                buffers == 1 ? "one buffer" : "each of two buffers", c->grad_bytes,
                                c->act_bytes, 3 * io, workspace, mc->memory_limit);
        }
    }
    return RP_OK;
}

/* Keep the N_CLIMB best distinct plans seen, best first. */
static void keep_top(cand *top, const rp_plan *trial, score o)
{
    for (int i = 0; i < N_CLIMB; i++) {
        if (!memcmp(trial, top[i].plan, sizeof *trial))
            return;
        if (better(o, trial, top[i].sc, top[i].plan)) {
            rp_plan *spare = top[N_CLIMB - 1].plan;
            memmove(top + i + 1, top + i, sizeof *top * (N_CLIMB - 1 - i));
            top[i].plan = spare;
            *spare = *trial;
            top[i].sc = o;
            return;
        }
    }
}

/* The seeds collected in batch, scored together (plan/evaluate.h) and
 * kept in the order they were made, as when each is scored in turn. */
static void keep_batch(const rp_cost_model *m, const rp_machine *mc, rp_plan_batch *batch,
                       rp_plan_memo *memo, cand *top)
{
    rp_plan_batch_evaluate(m, mc, batch, memo);
    for (int i = 0; i < batch->n; i++)
        keep_top(top, &batch->plans[i], batch->scores[i]);
    batch->n = 0;
}

static double now_ms(void)
{
    return 1e-6 * (double)rp_clock_ns();
}

/* The plans a batch holds: the search's threads when one simulation (of the
 * width's first plan, first_ms) takes long enough to be worth waking them
 * (plan/search.h), the workers started on first use; else one, the calling
 * thread alone. Either way the same plans. */
static int batch_cap(const rp_machine *mc, double first_ms, rp_pool **workers)
{
    int threads;
    double min_ms;
    rp_plan_search_get_threads(mc->search, &threads, &min_ms);
    if (threads <= 1 || first_ms < min_ms)
        return 1;
    if (!*workers)
        *workers = rp_pool_create(threads);
    return rp_pool_threads(*workers);
}

/* The best plan of one width (on workers' threads, started here when they
 * are worth it): *found 1 with *best and *best_sc, or 0 when no seed could
 * run. */
static rp_status search_width(const rp_cost_model *m, const rp_machine *mc, int width,
                              rp_pool **workers, rp_plan *best, score *best_sc, int *found)
{
    *found = 0;
    int L = m->num_layers, Mg = mc->microbatches * width / mc->gpus;
    double *fc = malloc(sizeof(double) * L), *bc = malloc(sizeof(double) * L);
    int *cut = malloc(sizeof(int) * (L + 1)), *ks = malloc(sizeof(int) * (L + 1));
    int *cnt = malloc(sizeof(int) * (L + 2));
    rp_plan *pool = malloc(sizeof(rp_plan) * (N_CLIMB + 3));
    rp_plan_memo *memo = rp_plan_memo_create(sizeof(rp_plan_scored)); /* NULL: none, same plans */
    rp_plan_batch batch = {0};
    rp_status st = RP_OK;
    if (!fc || !bc || !cut || !ks || !cnt || !pool) {
        st = RP_ERR_NOMEM;
        goto done;
    }
    cand top[N_CLIMB];
    rp_plan *trial = &pool[N_CLIMB], *s1 = &pool[N_CLIMB + 1], *s2 = &pool[N_CLIMB + 2];
    for (int i = 0; i < N_CLIMB; i++) {
        top[i].sc = (score){INFINITY, INFINITY};
        top[i].plan = &pool[i];
        memset(top[i].plan, 0, sizeof *top[i].plan);
    }
    /* upload-aware per-layer costs: a stage's upload is hidden only behind
     * about as much compute, so balance the larger of the two per microbatch */
    double link = mc->link_gbs * 1e6;
    for (int l = 0; l < L; l++) {
        const rp_layer_cost *c = &m->layers[l];
        double up = (double)rp_cost_upload_bytes(m, l, l) / link / Mg;
        fc[l] = fmax(c->fwd_ms, up);
        bc[l] = fmax(c->fwd_ms + c->bwd_ms,
                     up + (double)rp_cost_grad_download_bytes(m, l, l) / link / Mg);
    }
    rp_plan_singletons(L, width, trial);
    const double t0 = now_ms();
    keep_top(top, trial, rp_plan_evaluate(m, mc, trial, memo));
    const int cap = batch_cap(mc, now_ms() - t0, workers); /* may start *workers: before */
    if (rp_plan_batch_init(&batch, cap, *workers) != RP_OK) {
        st = RP_ERR_NOMEM;
        goto done;
    }
    /* seeds: tail sizes 1..SEED_DENSE and sparser beyond; for each, forward
     * and backward stage counts likewise, each split min-max balanced */
    int nk = 0;
    for (int k = L - 1; k >= 0; k--)
        if (L - 1 - k < SEED_DENSE || k == 0 || in_geometric(L - 1 - k))
            ks[nk++] = k;
    for (int ik = 0; ik < nk; ik++) {
        int k = ks[ik], nc = 0;
        progress(mc, "seed plans", ik, nk, top[0].sc);
        for (int c = 1; c <= k; c++)
            if (c <= SEED_DENSE || c == k || in_geometric(c))
                cnt[nc++] = c;
        if (k == 0)
            cnt[nc++] = 0;
        for (int a = 0; a < nc; a++)
            for (int b = 0; b < nc; b++) {
                seed_plan(fc, bc, L, k, cnt[a], cnt[b], width, rp_plan_batch_add(&batch), cut);
                if (batch.n == batch.cap)
                    keep_batch(m, mc, &batch, memo, top);
            }
    }
    keep_batch(m, mc, &batch, memo, top);
    int bi = -1;
    score bs = {INFINITY, INFINITY};
    int nclimb = L <= 12 ? N_CLIMB : N_CLIMB_LARGE;
    for (int i = 0; i < nclimb; i++) {
        progress(mc, "local search", i, nclimb, bs);
        if (!isfinite(top[i].sc.excess) || top[i].plan->num_layers == 0)
            continue;
        top[i].sc = hill_climb(m, mc, top[i].plan, top[i].sc, s1, memo, &batch);
        if (bi < 0 || better(top[i].sc, top[i].plan, bs, top[bi].plan)) {
            bi = i;
            bs = top[i].sc;
        }
    }
    if (bi >= 0) {
        bs = kick_search(m, mc, top[bi].plan, bs, L <= 12 ? KICKS_SMALL : KICKS_LARGE, trial,
                         s1, s2, memo, &batch);
        *best = *top[bi].plan;
        *best_sc = bs;
        *found = 1;
    }
done:
    rp_plan_batch_free(&batch);
    rp_plan_memo_destroy(&memo);
    free(fc); free(bc); free(cut); free(ks); free(cnt); free(pool);
    return st;
}

/* Whether rp_partition searches width w (width > 0: that one only): it must
 * split the executors into pipelines and the microbatches over them. */
static int searchable(const rp_machine *mc, int width, int w)
{
    return (width <= 0 || w == width) && mc->gpus % w == 0 &&
           mc->microbatches % (mc->gpus / w) == 0;
}

rp_status rp_partition(const rp_cost_model *m, const rp_machine *mc, int width, rp_plan *out,
                       rp_sim_result *res, rp_error *err)
{
    RP_TRY(rp_machine_check(mc, err));
    if (m->num_layers > RP_PLAN_MAX_STAGES)
        return rp_error_set(err, RP_ERR_RANGE, "partition: %d layers (at most %d supported)",
                            m->num_layers, RP_PLAN_MAX_STAGES);
    RP_TRY(check_layers_fit(m, mc, err));
    rp_plan *best = calloc(1, sizeof *best);
    if (!best)
        return rp_error_set(err, RP_ERR_NOMEM, "partition: out of memory");
    rp_plan *mine = malloc(sizeof *mine);
    if (!mine) {
        free(best);
        return rp_error_set(err, RP_ERR_NOMEM, "partition: out of memory");
    }
    score best_sc = {INFINITY, INFINITY};
    rp_pool *workers = NULL; /* started by the first width worth threads */
    int tried = 0, widths = 0;
    rp_status st = RP_OK;
    for (int w = 1; w <= mc->gpus; w++)
        widths += searchable(mc, width, w);
    rp_plan_search_begin(mc->search);
    for (int w = 1; w <= mc->gpus && st == RP_OK; w++) {
        if (!searchable(mc, width, w))
            continue;
        tried++;
        rp_plan_search_width(mc->search, w, tried, widths);
        score sc;
        int found = rp_plan_search_recall(mc->search, m, mc, w, mine, &sc.excess, &sc.time);
        if (found < 0) {
            if (search_width(m, mc, w, &workers, mine, &sc, &found) != RP_OK) {
                st = rp_error_set(err, RP_ERR_NOMEM, "partition: out of memory");
                break;
            }
            rp_plan_search_remember(mc->search, m, mc, w, found ? mine : NULL, sc.excess,
                                    sc.time);
        }
        if (found && better(sc, mine, best_sc, best)) {
            *best = *mine;
            best_sc = sc;
            if (feasible(sc))
                rp_plan_search_offer(mc->search, sc.time);
        }
    }
    free(mine);
    rp_pool_destroy(&workers);
    if (st == RP_OK && !tried)
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          width > 0 ? "partition: width %d does not divide %d executors with %d "
                                      "microbatches split evenly over the pipelines"
                                    : "partition: no pipeline width %d..%d splits %d microbatches "
                                      "evenly",
                          width > 0 ? width : 1, mc->gpus, mc->microbatches);
    if (st == RP_OK && !feasible(best_sc)) {
        rp_plan_singletons(m->num_layers, width > 0 ? width : mc->gpus, best);
        int worst = 0;
        int64_t peak = rp_schedule_peak_bytes(m, best, mc->gpus, mc->microbatches, mc->workspace_bytes, &worst);
        rp_job j = rp_schedule_job(best, worst);
        st = rp_error_set(err, RP_ERR_DEVICE_MEMORY,
                          "partition: no plan fits the memory limit of %" PRId64
                          " bytes; even with one layer per stage job %d (layers %d-%d) needs %"
                          PRId64 " bytes",
                          mc->memory_limit, worst, j.first, j.last, peak);
    }
    if (st == RP_OK) {
        *out = *best;
        if (res)
            st = rp_simulate(m, best, mc, res, err);
    }
    free(best);
    return st;
}
