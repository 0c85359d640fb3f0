/* What a search already computed for a plan, found again by the plan's
 * stages: the partitioner's climbs and kicks revisit the same plans (about
 * two evaluations in three, for the 1.7B shape on 8 GPUs), each a full
 * simulation. Keyed by the width, the layer count and the forward and
 * backward stages (what a plan's evaluation reads; not `kept`, which the
 * evaluation chooses), compared whole, so a hit is the same plan. Values
 * are opaque bytes of the size given at creation. */
#ifndef RP_PLAN_PLAN_MEMO_H
#define RP_PLAN_PLAN_MEMO_H

#include <stddef.h>

#include "plan/plan.h"

typedef struct rp_plan_memo rp_plan_memo;

/* NULL when out of memory: a caller then evaluates every plan. */
rp_plan_memo *rp_plan_memo_create(size_t value_bytes);
void rp_plan_memo_destroy(rp_plan_memo **memo);

/* 1 and *value filled when p's stages were stored, else 0 (memo NULL: 0). */
int rp_plan_memo_find(rp_plan_memo *memo, const rp_plan *p, void *value);

/* Store p's value (replacing nothing: call after a miss). Out of memory,
 * nothing is stored and later finds miss. */
void rp_plan_memo_store(rp_plan_memo *memo, const rp_plan *p, const void *value);

#endif
