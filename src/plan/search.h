/* What a caller lends the partitioner beyond the model and the machine
 * (rp_machine.search; NULL: nothing):
 * - Progress. A search of a large model on many GPUs takes minutes (the
 *   235B LoRA config on 8 GPUs: about 45 s of simulations on one core); the
 *   caller's report function hears which width and phase the search is in,
 *   how many plans it has simulated and the best iteration time so far, at
 *   most every `interval` seconds and not before `delay` seconds.
 * - The widths searched. A width's search is a pure function of the cost
 *   model, the machine and the width, so a later search of the same three
 *   returns the first one's best plan without searching again (`roundpipe
 *   plan` searches every width, then weighs each width's best by host
 *   memory: before this, each width was searched twice). A hit compares the
 *   model (its layers included) and the machine (but this pointer) byte for
 *   byte, so it is the same search; the plans are the same to the bit.
 * One search object serves one thread. */
#ifndef RP_PLAN_SEARCH_H
#define RP_PLAN_SEARCH_H

#include <stddef.h>
#include <stdint.h>

#include "plan/cost.h"
#include "plan/machine.h"
#include "plan/plan.h"

typedef struct rp_plan_search rp_plan_search;

/* What a report sees. */
typedef struct rp_plan_search_state {
    int width;         /* the pipeline width being searched */
    int width_index;   /* its place (1-based) among this partition's widths... */
    int widths;        /* ...to search */
    const char *phase; /* "seed plans", "local search" or "random restarts" */
    int done, total;   /* steps of the phase done, of total */
    int64_t simulated; /* plans this object's searches simulated so far */
    int64_t recalled;  /* widths found searched before (not searched again) */
    double best_ms;    /* the best plan within the memory limit this partition
                          has seen; INFINITY: none yet */
    double elapsed_s;  /* since this object's first search began */
} rp_plan_search_state;

typedef void (*rp_plan_search_report_fn)(void *arg, const rp_plan_search_state *state);

/* NULL when out of memory (a caller then searches without it). */
rp_plan_search *rp_plan_search_create(void);
void rp_plan_search_destroy(rp_plan_search **search);

/* Reports to fn(arg, state), the first not before delay_s seconds after the
 * first search began, then at most every interval_s seconds. fn NULL: none. */
void rp_plan_search_set_report(rp_plan_search *search, rp_plan_search_report_fn fn, void *arg,
                               double delay_s, double interval_s);

/* The threads a search scores plans on: `threads` (0: the default, the
 * OpenMP threads, which OMP_NUM_THREADS and train's --threads set) when one
 * simulation of the width's first plan takes min_ms or more (< 0: the
 * default, RP_PLAN_PARALLEL_MIN_MS), else the calling thread alone: waking
 * threads costs more than a quick simulation. The plans are the same. */
#define RP_PLAN_PARALLEL_MIN_MS 0.5
void rp_plan_search_set_threads(rp_plan_search *search, int threads, double min_ms);
/* What a search of mc uses (search NULL: the defaults). */
void rp_plan_search_get_threads(const rp_plan_search *search, int *threads, double *min_ms);

/* The counts so far (what a report would see; phase NULL between searches). */
rp_plan_search_state rp_plan_search_get_state(const rp_plan_search *search);

/* "width 4 (3 of 4), local search 2 of 3, 1234 plans simulated, best 7743.0
 * ms an iteration, 45 s": what a report prints. */
void rp_plan_search_describe(const rp_plan_search_state *state, char *buf, size_t len);

/* --- for the partitioner (plan/partition.c); every call accepts NULL --- */

/* A partition begins: no best plan yet. */
void rp_plan_search_begin(rp_plan_search *search);
/* It searches `width`, the index-th (from 1) of its `widths` widths. */
void rp_plan_search_width(rp_plan_search *search, int width, int index, int widths);
/* The width's search is in `phase`, done of total steps. */
void rp_plan_search_phase(rp_plan_search *search, const char *phase, int done, int total);
/* A plan within the memory limit of modelled `ms` was found. */
void rp_plan_search_offer(rp_plan_search *search, double ms);
/* One plan simulated. */
void rp_plan_search_simulated(rp_plan_search *search);

/* 1 with *plan, *excess and *ms (the search's score: bytes over the memory
 * limit, modelled ms) when this width of this model and machine was searched
 * and found a plan; 0 when it was searched and found none; -1 when it was
 * not searched (or search is NULL). */
int rp_plan_search_recall(rp_plan_search *search, const rp_cost_model *m, const rp_machine *mc,
                          int width, rp_plan *plan, double *excess, double *ms);
/* The outcome of a width's search: plan NULL when it found none. Out of memory, nothing is kept. */
void rp_plan_search_remember(rp_plan_search *search, const rp_cost_model *m, const rp_machine *mc,
                             int width, const rp_plan *plan, double excess, double ms);

#endif
