/* A plan: the forward stages, the backward stages (tail first) and the
 * pipeline width. It is plain data of fixed size, so the leader can
 * broadcast it as bytes and every rank holds an identical copy.
 *
 * Forward stages cover layers 0..k-1 in order. The tail stage, bwd[0],
 * covers k..L-1 and runs forward, loss and backward per microbatch without
 * recompute. bwd[1..] cover k-1 down to 0 in descending order. k = 0 (no
 * forward stage) is allowed: the tail then holds the whole model. */
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
    rp_stage fwd[RP_PLAN_MAX_STAGES];
    rp_stage bwd[RP_PLAN_MAX_STAGES];
} rp_plan;

/* First layer of the tail stage (= layers covered by forward stages). */
static inline int rp_plan_tail_first(const rp_plan *p) { return p->bwd[0].first; }

/* Check coverage and order for a model of num_layers layers. */
rp_status rp_plan_validate(const rp_plan *p, int num_layers, rp_error *err);

/* Parse a forced plan:
 *     fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2[;width=W]
 * Ranges are inclusive 0-based layer indices ("5" is short for "5-5"); the
 * first bwd range is the tail and must end at the last layer; "fwd=" may be
 * empty. width defaults to 0 (= the number of executors). Errors name the
 * offending position of the text. */
rp_status rp_plan_parse(const char *text, int num_layers, rp_plan *p, rp_error *err);

/* Format in the syntax rp_plan_parse reads. Returns the length it needed
 * (like snprintf). */
size_t rp_plan_format(const rp_plan *p, char *buf, size_t size);

/* Plan with one layer per stage (tail = the last layer). */
void rp_plan_singletons(int num_layers, int width, rp_plan *p);

#endif
