/* A plan: the forward stages, the backward stages (tail first) and the
 * pipeline width. It is plain data of fixed size, so the leader can
 * broadcast it as bytes and every rank holds an identical copy.
 *
 * Forward stages cover layers 0..k-1 in order. The tail stage, bwd[0],
 * covers k..L-1 and runs forward, loss and backward per microbatch without
 * recompute. bwd[1..] cover k-1 down to 0 in descending order. k = 0 (no
 * forward stage) is allowed: the tail then holds the whole model.
 *
 * `kept` blocks just below the tail (layers k-kept .. k-1) keep their
 * activations (DESIGN 4): their forward job stores each microbatch's input
 * and what the block's backward needs in the host store, and their backward
 * reads them instead of running the forward again; the other layers below
 * the tail are recomputed from their stage's checkpoint. The embedding
 * keeps nothing (its backward needs only the tokens), so kept <= k-1. */
#ifndef RP_PLAN_PLAN_H
#define RP_PLAN_PLAN_H

#include <stddef.h>

#include "core/error.h"

#define RP_PLAN_MAX_STAGES 1024

typedef struct rp_stage {
    int first, last; /* inclusive layer range */
} rp_stage;

typedef struct rp_plan {
    int num_layers;
    int width; /* executors per round-robin pipeline (DESIGN.md 5a); the G
                  executors form G/width groups, each with M*width/G
                  microbatches */
    int nfwd, nbwd;
    int kept; /* blocks below the tail whose activations are kept; 0: none, or
                 RP_PLAN_KEPT_CHOOSE from rp_plan_parse when the text names none */
    rp_stage fwd[RP_PLAN_MAX_STAGES];
    rp_stage bwd[RP_PLAN_MAX_STAGES];
} rp_plan;

/* A forced plan that leaves the kept layers to --recompute's choice. */
#define RP_PLAN_KEPT_CHOOSE (-1)

/* First layer of the tail stage (= layers covered by forward stages). */
static inline int rp_plan_tail_first(const rp_plan *p) { return p->bwd[0].first; }

/* The most blocks a plan can keep: every layer below the tail but the
 * embedding. */
static inline int rp_plan_max_kept(const rp_plan *p)
{
    return rp_plan_tail_first(p) > 1 ? rp_plan_tail_first(p) - 1 : 0;
}

/* Does layer l keep its activations (a block below the tail among the
 * `kept` nearest it)? */
static inline int rp_plan_is_kept(const rp_plan *p, int l)
{
    int k = rp_plan_tail_first(p);
    return p->kept > 0 && l > 0 && l < k && l >= k - p->kept;
}

/* Check coverage and order for a model of num_layers layers, and kept
 * (0..rp_plan_max_kept, or RP_PLAN_KEPT_CHOOSE). */
rp_status rp_plan_validate(const rp_plan *p, int num_layers, rp_error *err);

/* Parse a forced plan:
 *     fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2[;width=W][;keep=N]
 * Ranges are inclusive 0-based layer indices ("5" is short for "5-5"); the
 * first bwd range is the tail and must end at the last layer; "fwd=" may be
 * empty. width defaults to 0 (= the number of executors); keep=N keeps the N
 * blocks below the tail (kept), and without it kept is RP_PLAN_KEPT_CHOOSE
 * (the caller chooses, as --recompute says). Errors name the
 * offending position of the text. */
rp_status rp_plan_parse(const char *text, int num_layers, rp_plan *p, rp_error *err);

/* Format in the syntax rp_plan_parse reads. Returns the length it needed
 * (like snprintf). */
size_t rp_plan_format(const rp_plan *p, char *buf, size_t size);

/* Plan with one layer per stage (tail = the last layer). */
void rp_plan_singletons(int num_layers, int width, rp_plan *p);

#endif
