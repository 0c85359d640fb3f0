/* Proves: on hundreds of small random instances (2-7 layers, 1-4 executors,
 * random times, bytes and memory limits, exact and lagged optimizer) the
 * partitioner's modelled iteration time is within 5% of the optimum found by
 * brute force over every plan (every tail start, every forward and backward
 * partition, every pipeline width); every plan it returns fits the memory
 * limit; a layer too large for the limit on its own is reported by index
 * with its bytes; forced plans parse, round-trip and reject bad text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/partition.h"
#include "plan/plan.h"
#include "plan/schedule.h"
#include "rp_check.h"

#define PLAN_RANDOM_SEED 0x9e3779b97f4a7c15ull
#include "plan_random.h"


/* Enumerate all compositions of [lo, hi) into consecutive runs: bit i of
 * mask set = a cut before layer lo+i+1. */
static int fill_runs(int lo, int hi, unsigned mask, rp_stage *out)
{
    int n = 0, start = lo;
    for (int l = lo; l < hi; l++) {
        if (l == hi - 1 || (mask >> (l - lo)) & 1u) {
            out[n].first = start;
            out[n].last = l;
            n++;
            start = l + 1;
        }
    }
    return n;
}

static double brute_force(const rp_cost_model *m, const rp_machine *mc, rp_plan *p)
{
    int L = m->num_layers;
    double best = INFINITY;
    for (int w = 1; w <= mc->gpus; w++) {
        if (mc->gpus % w || mc->microbatches % (mc->gpus / w))
            continue;
        for (int k = 0; k < L; k++) {
            unsigned nm = k > 0 ? 1u << (k - 1) : 1u;
            for (unsigned fm = 0; fm < nm; fm++) {
                for (unsigned bm = 0; bm < nm; bm++) {
                    memset(p, 0, sizeof *p);
                    p->num_layers = L;
                    p->width = w;
                    p->nfwd = k ? fill_runs(0, k, fm, p->fwd) : 0;
                    rp_stage tmp[64];
                    int nb = k ? fill_runs(0, k, bm, tmp) : 0;
                    p->bwd[0] = (rp_stage){k, L - 1};
                    p->nbwd = 1 + nb;
                    for (int i = 0; i < nb; i++)
                        p->bwd[1 + i] = tmp[nb - 1 - i];
                    double o = rp_partition_objective(m, mc, p);
                    if (o < best)
                        best = o;
                }
            }
        }
    }
    return best;
}

START_TEST(partitioner_matches_brute_force)
{
    rp_plan *p = malloc(sizeof *p), *scratch = malloc(sizeof *scratch);
    int instances = 0, feasible = 0;
    double worst = 0;
    /* RP_PLAN_INSTANCES / RP_PLAN_SEED: a longer or different sweep by hand */
    int count = getenv("RP_PLAN_INSTANCES") ? atoi(getenv("RP_PLAN_INSTANCES")) : 260;
    if (getenv("RP_PLAN_SEED"))
        rs = strtoull(getenv("RP_PLAN_SEED"), NULL, 10) | 1;
    for (int it = 0; it < count; it++) {
        int L = irand(2, 7);
        rp_cost_model *m = random_model(L);
        rp_machine mc;
        rp_machine_defaults(&mc);
        mc.gpus = irand(1, 4);
        mc.microbatches = mc.gpus * irand(1, 3);
        mc.iterations = 6;
        mc.link_gbs = 2 + 30 * urand(); /* uploads sometimes uncovered */
        mc.transfer_ms = urand() < 0.5 ? 0 : urand();
        mc.opt_gbs = 1 + 10 * urand();
        mc.optimizer_lag = irand(0, 1);
        mc.clip = urand() < 0.3;
        mc.defer_wgrad = irand(0, 1);
        mc.opt_spread = irand(0, 1);
        mc.workspace_bytes = 1 << 20;
        /* a limit between "everything fits" and "only small stages fit" */
        int64_t maxw = 0;
        for (int l = 0; l < L; l++)
            if (m->layers[l].weight_bytes + m->layers[l].grad_bytes + m->layers[l].act_bytes > maxw)
                maxw = m->layers[l].weight_bytes + m->layers[l].grad_bytes +
                       m->layers[l].act_bytes;
        mc.memory_limit = urand() < 0.3 ? 0 : (int64_t)((1.0 + 3 * urand()) * (double)maxw);
        rp_error err;
        rp_sim_result r;
        double bf = brute_force(m, &mc, scratch);
        rp_status st = rp_partition(m, &mc, 0, p, &r, &err);
        instances++;
        if (!isfinite(bf)) {
            ck_assert_msg(st == RP_ERR_DEVICE_MEMORY, "instance %d: brute force finds no plan, "
                          "partitioner returned %d", it, st);
            rp_cost_model_destroy(&m);
            continue;
        }
        feasible++;
        ck_assert_msg(st == RP_OK, "instance %d: %s", it, err.msg);
        double o = rp_partition_objective(m, &mc, p);
        ck_assert_msg(fabs(o - r.iteration_ms) < 1e-9 * o, "objective and result disagree");
        ck_assert_msg(o <= bf * 1.05, "instance %d (L=%d G=%d M=%d lag=%d): partitioner %.4f vs "
                      "brute force %.4f", it, L, mc.gpus, mc.microbatches, mc.optimizer_lag, o, bf);
        ck_assert_msg(o >= bf * (1 - 1e-9), "partitioner beat brute force: enumeration is wrong");
        if (mc.memory_limit > 0)
            ck_assert(rp_schedule_peak_bytes(m, p, mc.gpus, mc.microbatches, mc.workspace_bytes, NULL) <=
                      mc.memory_limit);
        if (o / bf - 1 > worst)
            worst = o / bf - 1;
        rp_cost_model_destroy(&m);
    }
    fprintf(stderr, "partition vs brute force: %d instances, %d feasible, worst gap %.3f%%\n",
            instances, feasible, 100 * worst);
    /* a sweep where memory limits leave few plans would prove little */
    ck_assert_int_gt(feasible, instances * 3 / 5);
    free(p);
    free(scratch);
}
END_TEST

START_TEST(layer_too_large_is_named)
{
    rp_cost_model *m = random_model(5);
    m->layers[3].weight_bytes = 900000000;
    rp_machine mc;
    rp_machine_defaults(&mc);
    mc.memory_limit = 500000000;
    rp_plan *p = malloc(sizeof *p);
    rp_error err;
    ck_assert_int_eq(rp_partition(m, &mc, 0, p, NULL, &err), RP_ERR_DEVICE_MEMORY);
    ck_assert_msg(strstr(err.msg, "layer 3 (decoder block)") != NULL, "%s", err.msg);
    ck_assert_msg(strstr(err.msg, "weights 900000000") != NULL, "%s", err.msg);
    ck_assert_msg(strstr(err.msg, "limit of 500000000") != NULL, "%s", err.msg);
    free(p);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(width_that_cannot_split_is_an_error)
{
    rp_cost_model *m = random_model(4);
    rp_machine mc;
    rp_machine_defaults(&mc);
    mc.gpus = 4;
    mc.microbatches = 3; /* no width but 4 splits 3 microbatches evenly */
    rp_plan *p = malloc(sizeof *p);
    rp_error err;
    ck_assert_int_eq(rp_partition(m, &mc, 2, p, NULL, &err), RP_ERR_INVALID_ARG);
    ck_assert_int_eq(rp_partition(m, &mc, 0, p, NULL, &err), RP_OK);
    ck_assert_int_eq(p->width, 4);
    free(p);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(forced_plans_parse)
{
    rp_plan *p = malloc(sizeof *p), *q = malloc(sizeof *q);
    rp_error err;
    ck_assert_int_eq(rp_plan_parse("fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2", 10, p, &err), RP_OK);
    ck_assert_int_eq(p->nfwd, 2);
    ck_assert_int_eq(p->nbwd, 4);
    ck_assert_int_eq(rp_plan_tail_first(p), 8);
    ck_assert_int_eq(p->bwd[2].first, 3);
    ck_assert_int_eq(p->bwd[2].last, 5);
    ck_assert_int_eq(p->width, 0);
    char buf[256];
    rp_plan_format(p, buf, sizeof buf);
    ck_assert_str_eq(buf, "fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2");
    ck_assert_int_eq(rp_plan_parse("fwd=0,1;bwd=2,1,0;width=2", 3, q, &err), RP_OK);
    ck_assert_int_eq(q->width, 2);
    rp_plan_format(q, buf, sizeof buf);
    ck_assert_str_eq(buf, "fwd=0,1;bwd=2,1,0;width=2");
    /* the whole model in the tail */
    ck_assert_int_eq(rp_plan_parse("fwd=;bwd=0-4", 5, q, &err), RP_OK);
    ck_assert_int_eq(q->nfwd, 0);
    /* keep=N: the blocks below the tail that keep their activations; without
     * it the caller chooses; 0 is not printed (old strings stay as they were) */
    ck_assert_int_eq(p->kept, RP_PLAN_KEPT_CHOOSE);
    ck_assert_int_eq(rp_plan_parse("fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2;keep=3", 10, q, &err), RP_OK);
    ck_assert_int_eq(q->kept, 3);
    ck_assert(!rp_plan_is_kept(q, 4) && rp_plan_is_kept(q, 5) && rp_plan_is_kept(q, 7) &&
              !rp_plan_is_kept(q, 8));
    rp_plan_format(q, buf, sizeof buf);
    ck_assert_str_eq(buf, "fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2;keep=3");
    ck_assert_int_eq(rp_plan_parse("fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2;keep=7", 10, q, &err), RP_OK);
    ck_assert(rp_plan_is_kept(q, 1) && !rp_plan_is_kept(q, 0));
    ck_assert_int_eq(rp_plan_parse("fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2;keep=0", 10, q, &err), RP_OK);
    rp_plan_format(q, buf, sizeof buf);
    ck_assert_str_eq(buf, "fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2");
    /* a short buffer: the length needed comes back, the text is cut */
    ck_assert_uint_eq(rp_plan_format(p, buf, 8), strlen("fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2"));

    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"fwd=0-3;bwd=4-8,0-3", "expected 4-9"},        /* tail does not end at the last layer */
        {"fwd=0-3,5-7;bwd=8-9,0-7", "forward stage 1"},  /* gap */
        {"fwd=0-7;bwd=8-9,4-7", "uncovered"},           /* backward leaves 0-3 */
        {"fwd=0-7;bwd=8-9,0-3,4-7", "backward stage 1"}, /* wrong order */
        {"fwd=0-x;bwd=9", "offset 6"},
        {"fwd=0-8;bwd=9;depth=3", "offset 14"},
        {"fwd=0-8", "no 'bwd='"},
        {"fwd=0-8;bwd=9;width=0", "width"},
        {"fwd=0-9;bwd=", "backward stages"},
        {"fwd=0-7;bwd=8-9,0-7;keep=8", "only the 7 blocks below the tail"}, /* the embedding */
        {"fwd=0-7;bwd=8-9,0-7;keep=-1", "keep must be"},
        {"fwd=0-7;bwd=8-9,0-7;keep=2x", "keep must be"},
        {"fwd=0-7;bwd=8-9,0-7;keep=1;keep=2", "each once"},
        {"fwd=0-7;bwd=8-9,0-7;width=1;width=2", "each once"},
        {"fwd=0-8;bwd=9;width= 2", "width must be"}, /* strtol's blanks and signs: not numbers */
        {"fwd=0-8;bwd=9;width=+2", "width must be"},
        {"fwd=0-8;bwd=9;keep=+1", "keep must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rp_error e2 = {0};
        ck_assert_int_ne(rp_plan_parse(bad[i].text, 10, q, &e2), RP_OK);
        ck_assert_msg(strstr(e2.msg, bad[i].needle) != NULL, "'%s': %s", bad[i].text, e2.msg);
    }
    free(p);
    free(q);
}
END_TEST

static Suite *plan_partition_suite(void)
{
    Suite *s = suite_create("plan_partition");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, partitioner_matches_brute_force);
    tcase_add_test(tc, layer_too_large_is_named);
    tcase_add_test(tc, width_that_cannot_split_is_an_error);
    tcase_add_test(tc, forced_plans_parse);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(plan_partition_suite, "serial")
