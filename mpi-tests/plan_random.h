/* The planner tests' random instances: their own xorshift generator, seeded
 * by the including test (PLAN_RANDOM_SEED, defined before the include, so
 * each test's sequence is fixed), and random cost models of L layers (an
 * embedding, blocks and a head; random times, bytes and activations; the
 * head tied to the embedding three times in ten). Header-only: static
 * functions for one test file each. */
#ifndef RP_TEST_PLAN_RANDOM_H
#define RP_TEST_PLAN_RANDOM_H

#include <stdint.h>

#include "plan/cost.h"
#include "rp_check.h"

static uint64_t rs = PLAN_RANDOM_SEED;

static double urand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

static int irand(int lo, int hi)
{
    return lo + (int)(urand() * (hi - lo + 1));
}

static rp_cost_model *random_model(int L)
{
    rp_cost_model *m;
    rp_error err;
    ck_assert_int_eq(rp_cost_model_create(L, &m, &err), RP_OK);
    for (int l = 0; l < L; l++) {
        rp_layer_cost *c = &m->layers[l];
        c->kind = l == 0 ? RP_LAYER_EMBED : l == L - 1 ? RP_LAYER_HEAD : RP_LAYER_BLOCK;
        c->fwd_ms = 0.2 + 3 * urand();
        c->bwd_ms = c->fwd_ms * (1 + 2 * urand());
        c->wgrad_ms = c->bwd_ms * 0.5 * urand();
        c->weight_bytes = (int64_t)(urand() * 40e6);
        c->grad_bytes = urand() < 0.2 ? 0 : c->weight_bytes * 2;
        c->opt_params = c->grad_bytes / 4;
        c->act_bytes = (int64_t)(urand() * 20e6);
        c->out_bytes = 1 << 20;
    }
    if (L > 2 && urand() < 0.3)
        m->layers[L - 1].tied_to = 0;
    return m;
}

#endif
