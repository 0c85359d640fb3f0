/* Proves: the partitioner's memo of evaluated plans (plan/plan_memo.h)
 * gives back, for 20,000 distinct random plans stored (the table grows
 * from 1,024 slots many times over), each one's own value, and misses a
 * plan that differs from a stored one in one stage boundary, in the width,
 * in the layer count or by one stage more; `kept` is not part of the key;
 * a NULL memo (out of memory) finds nothing and stores nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_memo.h"
#include "rp_check.h"

typedef struct value {
    double a;
    int b;
} value;

/* Plan number i: up to 5 + 6 stages, distinct for distinct i (i itself is
 * the tail's last layer: the memo reads stages as numbers, not layouts). */
static void plan_of(int i, rp_plan *p)
{
    memset(p, 0, sizeof *p);
    p->num_layers = 40;
    p->width = 1 + i % 4;
    p->nfwd = 1 + i / 4 % 5;
    p->nbwd = 2 + i / 20 % 5;
    for (int s = 0; s < p->nfwd; s++)
        p->fwd[s] = (rp_stage){s * 3, s * 3 + 1 + (i >> s) % 2};
    for (int s = 1; s < p->nbwd; s++)
        p->bwd[s] = (rp_stage){20 + s * 3, 20 + s * 3 + 1 + (i >> (s + 5)) % 2};
    p->bwd[0] = (rp_stage){39, 1000 + i};
}

START_TEST(stored_plans_found_with_their_values)
{
    rp_plan_memo *memo = rp_plan_memo_create(sizeof(value));
    ck_assert_ptr_nonnull(memo);
    rp_plan *p = malloc(sizeof *p);
    const int n = 20000;
    for (int i = 0; i < n; i++) {
        plan_of(i, p);
        value v;
        ck_assert_msg(!rp_plan_memo_find(memo, p, &v), "plan %d found before it was stored", i);
        rp_plan_memo_store(memo, p, &(value){i * 0.5, i});
    }
    for (int i = 0; i < n; i++) {
        plan_of(i, p);
        p->kept = i % 7; /* not part of the key */
        value v = {-1, -1};
        ck_assert_msg(rp_plan_memo_find(memo, p, &v), "plan %d not found", i);
        ck_assert(v.a == i * 0.5 && v.b == i);
    }
    free(p);
    rp_plan_memo_destroy(&memo);
    ck_assert_ptr_null(memo);
}
END_TEST

START_TEST(a_plan_that_differs_misses)
{
    rp_plan_memo *memo = rp_plan_memo_create(sizeof(value));
    rp_plan *p = malloc(sizeof *p), *q = malloc(sizeof *q);
    plan_of(12345, p);
    rp_plan_memo_store(memo, p, &(value){1.0, 1});
    value v;
    *q = *p;
    q->fwd[0].last++;
    ck_assert(!rp_plan_memo_find(memo, q, &v));
    *q = *p;
    q->bwd[q->nbwd - 1].first--;
    ck_assert(!rp_plan_memo_find(memo, q, &v));
    *q = *p;
    q->width++;
    ck_assert(!rp_plan_memo_find(memo, q, &v));
    *q = *p;
    q->num_layers++;
    ck_assert(!rp_plan_memo_find(memo, q, &v));
    *q = *p;
    q->bwd[q->nbwd++] = (rp_stage){38, 39};
    ck_assert(!rp_plan_memo_find(memo, q, &v));
    /* stages past nfwd/nbwd are not read */
    *q = *p;
    q->fwd[q->nfwd] = (rp_stage){7, 9};
    ck_assert(rp_plan_memo_find(memo, q, &v));
    /* no memo */
    ck_assert(!rp_plan_memo_find(NULL, p, &v));
    rp_plan_memo_store(NULL, p, &(value){2.0, 2});
    free(p), free(q);
    rp_plan_memo_destroy(&memo);
    rp_plan_memo_destroy(&memo); /* twice: harmless */
}
END_TEST

static Suite *memo_suite(void)
{
    Suite *s = suite_create("plan_memo");
    TCase *tc = tcase_create("memo");
    tcase_add_test(tc, stored_plans_found_with_their_values);
    tcase_add_test(tc, a_plan_that_differs_misses);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(memo_suite, "serial")
