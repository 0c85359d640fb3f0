/* Proves: what a caller lends the partitioner (plan/search.h) changes no
 * plan: on 60 random instances (3-40 layers, 1-8 executors, exact and
 * lagged, with and without a memory limit) rp_partition gives the same plan
 * and modelled time with no search object, with a fresh one, and again with
 * the same one, which then simulates nothing (every width recalled); a fixed
 * width after the search of all widths (one of each instance's, each width
 * in turn) is recalled and equals its own search without the object; a
 * change to a layer's time, the model's weight buffers or the machine's
 * link is searched again; the 65th width remembered pushes out the first;
 * 1, 2, 3 and 7 threads give the same plans (24 random instances); reports
 * name a width among the widths searched, a phase of the three with its
 * step within its count, counts of simulated plans that never fall and a
 * best time that never rises within a partition and ends at the chosen
 * plan's; a report is not made before its delay; the text of a report is as
 * documented; NULL is accepted everywhere. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/partition.h"
#include "plan/plan.h"
#include "plan/search.h"
#include "rp_check.h"

#define PLAN_RANDOM_SEED 0x2545f4914f6cdd1dull
#include "plan_random.h"

static void random_machine(rp_machine *mc)
{
    static const int gpus[] = {1, 2, 3, 4, 8};
    rp_machine_defaults(mc);
    mc->gpus = gpus[irand(0, 4)];
    mc->microbatches = mc->gpus * irand(1, 3);
    mc->link_gbs = 5 + 30 * urand();
    mc->optimizer_lag = irand(0, 1);
    mc->clip = irand(0, 1);
    mc->iterations = 6;
    mc->memory_limit = urand() < 0.5 ? 0 : (int64_t)(150e6 + urand() * 200e6);
}

typedef struct outcome {
    rp_status st;
    char plan[4096];
    double ms;
} outcome;

static outcome partition(const rp_cost_model *m, const rp_machine *mc, int width)
{
    outcome o = {0};
    rp_plan *p = calloc(1, sizeof *p);
    rp_sim_result r;
    rp_error err = {0};
    o.st = rp_partition(m, mc, width, p, &r, &err);
    if (o.st == RP_OK) {
        rp_plan_format(p, o.plan, sizeof o.plan);
        o.ms = r.iteration_ms;
    }
    free(p);
    return o;
}

/* b (from `what`) as the reference a, to the bit */
static void same(const outcome *a, const outcome *b, const char *what, int i)
{
    ck_assert_msg(a->st == b->st, "instance %d, %s: status %d, the reference %d", i, what, b->st,
                  a->st);
    ck_assert_msg(!strcmp(a->plan, b->plan), "instance %d, %s: plan %s, the reference %s", i, what,
                  b->plan, a->plan);
    ck_assert_msg(a->ms == b->ms, "instance %d, %s: %.17g ms, the reference %.17g", i, what, b->ms,
                  a->ms);
}

static int widths_of(const rp_machine *mc)
{
    int n = 0;
    for (int w = 1; w <= mc->gpus; w++)
        n += mc->gpus % w == 0 && mc->microbatches % (mc->gpus / w) == 0;
    return n;
}

START_TEST(the_same_plans_with_and_without_it)
{
    for (int i = 0; i < 60; i++) {
        rp_cost_model *m = random_model(irand(3, 40));
        rp_machine mc;
        random_machine(&mc);
        outcome plain = partition(m, &mc, 0);
        rp_plan_search *search = rp_plan_search_create();
        ck_assert_ptr_nonnull(search);
        mc.search = search;
        outcome first = partition(m, &mc, 0);
        same(&plain, &first, "a fresh search object", i);
        rp_plan_search_state st = rp_plan_search_get_state(search);
        ck_assert_msg(st.recalled == 0 && (st.simulated > 0 || plain.st != RP_OK),
                      "instance %d: %lld simulated, %lld recalled", i, (long long)st.simulated,
                      (long long)st.recalled);
        outcome again = partition(m, &mc, 0);
        same(&plain, &again, "the same object again", i);
        rp_plan_search_state st2 = rp_plan_search_get_state(search);
        ck_assert_int_eq(st2.simulated, st.simulated); /* nothing searched again */
        if (st.simulated > 0) /* (a layer too large for the limit stops before any width) */
            ck_assert_int_eq(st2.recalled, widths_of(&mc));
        /* one of the instance's widths (the (i mod n)-th of its n), each
         * width tried over the instances */
        for (int w = 1, k = 0; w <= mc.gpus; w++) {
            if (mc.gpus % w || mc.microbatches % (mc.gpus / w) || k++ != i % widths_of(&mc))
                continue;
            mc.search = NULL;
            outcome own = partition(m, &mc, w);
            mc.search = search;
            outcome recalled = partition(m, &mc, w);
            same(&own, &recalled, "one width after all of them", i);
        }
        ck_assert_int_eq(rp_plan_search_get_state(search).simulated, st.simulated);
        rp_plan_search_destroy(&search);
        ck_assert_ptr_null(search);
        rp_cost_model_destroy(&m);
    }
}
END_TEST

/* The partitioner scores batches of plans on a pool of threads
 * (plan/evaluate.h): the same plans from 1, 2, 3 and 7 threads. */
/* The plan of m on mc (a copy) searched on `threads` threads, each
 * simulation however quick taken as worth them (min_ms 0). */
static outcome on_threads(const rp_cost_model *m, rp_machine mc, int threads)
{
    rp_plan_search *search = rp_plan_search_create();
    ck_assert_ptr_nonnull(search);
    rp_plan_search_set_threads(search, threads, 0);
    mc.search = search;
    outcome o = partition(m, &mc, 0);
    rp_plan_search_destroy(&search);
    return o;
}

START_TEST(the_same_plans_on_any_number_of_threads)
{
    const int threads[] = {2, 3, 7};
    for (int i = 0; i < 24; i++) {
        rp_cost_model *m = random_model(irand(3, 40));
        rp_machine mc;
        random_machine(&mc);
        outcome one = on_threads(m, mc, 1);
        for (int t = 0; t < 3; t++) {
            outcome many = on_threads(m, mc, threads[t]);
            char what[32];
            snprintf(what, sizeof what, "%d threads", threads[t]);
            same(&one, &many, what, i);
        }
        rp_cost_model_destroy(&m);
    }
}
END_TEST

/* Plans simulated by one more partition of m on mc through search. */
static int64_t simulated_by(rp_plan_search *search, const rp_cost_model *m, rp_machine *mc)
{
    int64_t before = rp_plan_search_get_state(search).simulated;
    mc->search = search;
    outcome o = partition(m, mc, 0);
    ck_assert_int_eq(o.st, RP_OK);
    return rp_plan_search_get_state(search).simulated - before;
}

START_TEST(a_changed_input_is_searched_again)
{
    rp_cost_model *m = random_model(12);
    rp_machine mc;
    rp_machine_defaults(&mc);
    mc.gpus = 4;
    mc.microbatches = 8;
    rp_plan_search *search = rp_plan_search_create();
    ck_assert_int_gt(simulated_by(search, m, &mc), 0);
    ck_assert_int_eq(simulated_by(search, m, &mc), 0);
    m->layers[5].fwd_ms *= 1.5; /* a layer's time */
    ck_assert_int_gt(simulated_by(search, m, &mc), 0);
    ck_assert_int_eq(simulated_by(search, m, &mc), 0);
    m->single_weight_buffer = 1; /* the model's buffers */
    ck_assert_int_gt(simulated_by(search, m, &mc), 0);
    mc.link_gbs = 7; /* the machine */
    ck_assert_int_gt(simulated_by(search, m, &mc), 0);
    m->layers[5].fwd_ms /= 1.5; /* back to the first inputs but the buffers and the link */
    m->single_weight_buffer = 0;
    mc.link_gbs = 25;
    ck_assert_int_eq(simulated_by(search, m, &mc), 0); /* still remembered */
    rp_plan_search_destroy(&search);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(the_oldest_width_gives_way)
{
    rp_machine mc;
    rp_machine_defaults(&mc); /* one executor: one width a partition */
    rp_plan_search *search = rp_plan_search_create();
    rp_cost_model *m = random_model(6);
    const double base = m->layers[2].fwd_ms;
    for (int i = 0; i < 65; i++) { /* 65 models, told apart by one layer's time */
        m->layers[2].fwd_ms = base + i;
        ck_assert_int_gt(simulated_by(search, m, &mc), 0);
    }
    m->layers[2].fwd_ms = base + 64; /* the newest: remembered */
    ck_assert_int_eq(simulated_by(search, m, &mc), 0);
    m->layers[2].fwd_ms = base + 1; /* the second: remembered */
    ck_assert_int_eq(simulated_by(search, m, &mc), 0);
    m->layers[2].fwd_ms = base; /* the first: pushed out by the 65th */
    ck_assert_int_gt(simulated_by(search, m, &mc), 0);
    rp_plan_search_destroy(&search);
    rp_cost_model_destroy(&m);
}
END_TEST

typedef struct heard {
    int reports;
    int widths_seen[9];
    int64_t last_simulated;
    double last_best;
    int bad;
    char why[256];
} heard;

static void listen(void *arg, const rp_plan_search_state *st)
{
    heard *h = arg;
    const char *phases[] = {"seed plans", "local search", "random restarts"};
    int known = 0;
    for (int i = 0; i < 3; i++)
        known |= st->phase && !strcmp(st->phase, phases[i]);
    if (!h->bad &&
        (!known || st->width_index < 1 || st->width_index > st->widths || st->width < 1 ||
         st->width > 8 || (st->total > 0 && st->done >= st->total) || st->done < 0 ||
         st->simulated < h->last_simulated || st->best_ms > h->last_best || st->elapsed_s < 0)) {
        h->bad = 1;
        snprintf(h->why, sizeof h->why,
                 "width %d (%d of %d), %s %d of %d, %lld simulated "
                 "(before: %lld), best %g (before: %g)",
                 st->width, st->width_index, st->widths, st->phase ? st->phase : "(none)", st->done,
                 st->total, (long long)st->simulated, (long long)h->last_simulated, st->best_ms,
                 h->last_best);
    }
    h->reports++;
    if (st->width >= 1 && st->width <= 8)
        h->widths_seen[st->width] = 1;
    h->last_simulated = st->simulated;
    h->last_best = st->best_ms;
}

/* A search object reporting to h after delay_s, lent to mc. */
static rp_plan_search *listened(heard *h, rp_machine *mc, double delay_s)
{
    *h = (heard){.last_best = INFINITY};
    rp_plan_search *search = rp_plan_search_create();
    ck_assert_ptr_nonnull(search);
    rp_plan_search_set_report(search, listen, h, delay_s, 0);
    mc->search = search;
    return search;
}

START_TEST(reports_say_where_the_search_is)
{
    for (int i = 0; i < 20; i++) {
        rp_cost_model *m = random_model(irand(8, 30));
        rp_machine mc;
        random_machine(&mc);
        mc.gpus = 8;
        mc.microbatches = 8;
        mc.memory_limit = 0;
        heard h;
        rp_plan_search *search = listened(&h, &mc, 0);
        outcome o = partition(m, &mc, 0);
        ck_assert_int_eq(o.st, RP_OK);
        ck_assert_msg(!h.bad, "instance %d: %s", i, h.why);
        ck_assert_int_gt(h.reports, 10);
        for (int w = 1; w <= 8; w *= 2)
            ck_assert_msg(h.widths_seen[w], "instance %d: width %d never reported", i, w);
        rp_plan_search_state st = rp_plan_search_get_state(search);
        ck_assert_msg(st.best_ms == o.ms, "instance %d: best %.17g, the plan's %.17g", i,
                      st.best_ms, o.ms);
        rp_plan_search_destroy(&search);
        rp_cost_model_destroy(&m);
    }
    /* not before the delay */
    rp_cost_model *m = random_model(20);
    rp_machine mc;
    rp_machine_defaults(&mc);
    mc.gpus = 4;
    mc.microbatches = 4;
    heard h;
    rp_plan_search *search = listened(&h, &mc, 3600);
    ck_assert_int_eq(partition(m, &mc, 0).st, RP_OK);
    ck_assert_int_eq(h.reports, 0);
    rp_plan_search_destroy(&search);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(a_report_reads_as_documented)
{
    rp_plan_search_state st = {.width = 4,
                               .width_index = 3,
                               .widths = 4,
                               .phase = "local search",
                               .done = 1,
                               .total = 3,
                               .simulated = 1234,
                               .best_ms = 7743.04,
                               .elapsed_s = 45.2};
    char buf[200];
    rp_plan_search_describe(&st, buf, sizeof buf);
    ck_assert_str_eq(buf, "width 4 (3 of 4), local search 2 of 3, 1234 plans simulated, best "
                          "7743.0 ms an iteration, 45 s");
    st.best_ms = INFINITY; /* no plan within the limit yet */
    st.phase = "seed plans";
    st.total = 0;
    rp_plan_search_describe(&st, buf, sizeof buf);
    ck_assert_str_eq(buf, "width 4 (3 of 4), seed plans, 1234 plans simulated, 45 s");
    char small[12];
    rp_plan_search_describe(&st, small, sizeof small); /* cut, terminated */
    ck_assert_str_eq(small, "width 4 (3 ");
}
END_TEST

START_TEST(null_is_nothing)
{
    rp_plan_search_begin(NULL);
    rp_plan_search_width(NULL, 1, 1, 1);
    rp_plan_search_phase(NULL, "seed plans", 0, 1);
    rp_plan_search_offer(NULL, 1.0);
    rp_plan_search_simulated(NULL);
    rp_cost_model *m = random_model(4);
    rp_machine mc;
    rp_machine_defaults(&mc);
    rp_plan p;
    double excess = -1, ms = -1;
    ck_assert_int_eq(rp_plan_search_recall(NULL, m, &mc, 1, &p, &excess, &ms), -1);
    rp_plan_search_remember(NULL, m, &mc, 1, NULL, 0, 0);
    rp_plan_search *search = NULL;
    rp_plan_search_destroy(&search);
    rp_plan_search_destroy(NULL);
    /* a width searched without a plan is recalled as such */
    search = rp_plan_search_create();
    ck_assert_int_eq(rp_plan_search_recall(search, m, &mc, 1, &p, &excess, &ms), -1);
    rp_plan_search_remember(search, m, &mc, 1, NULL, 0, INFINITY);
    ck_assert_int_eq(rp_plan_search_recall(search, m, &mc, 1, &p, &excess, &ms), 0);
    ck_assert_int_eq(rp_plan_search_recall(search, m, &mc, 2, &p, &excess, &ms), -1);
    rp_plan_search_destroy(&search);
    rp_cost_model_destroy(&m);
}
END_TEST

static Suite *plan_search_suite(void)
{
    Suite *s = suite_create("plan_search");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, the_same_plans_with_and_without_it);
    tcase_add_test(tc, the_same_plans_on_any_number_of_threads);
    tcase_add_test(tc, a_changed_input_is_searched_again);
    tcase_add_test(tc, the_oldest_width_gives_way);
    tcase_add_test(tc, reports_say_where_the_search_is);
    tcase_add_test(tc, a_report_reads_as_documented);
    tcase_add_test(tc, null_is_nothing);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(plan_search_suite, "serial")
