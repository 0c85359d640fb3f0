/* Proves: the virtual-time simulator reproduces closed forms. One executor
 * runs the work of an iteration back to back (M x the sum of job times), and
 * an exact optimizer adds exactly layer 0's update time; G executors with
 * equal jobs keep every executor busy in lagged mode (n*M*t/G, no bubble)
 * and in exact mode lose (G-1) microbatch times plus the update of layer 0
 * per iteration (d, or d/G when the update is split over all ranks);
 * uploads slower than compute make the link the bottleneck (n x upload);
 * uploads faster than compute are hidden; GPipe and 1F1B with equal stages
 * show the (S-1)/(M+S-1) bubble; exact is never faster than lagged; the
 * device memory of a job is its weights + the next job's + gradients +
 * activations + buffers + workspace. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/baseline.h"
#include "plan/partition.h"
#include "plan/schedule.h"
#include "plan/simulate.h"
#include "rp_check.h"

static rp_cost_model *uniform(int L, double fwd, double bwd)
{
    rp_cost_model *m;
    rp_error err;
    ck_assert_int_eq(rp_cost_model_create(L, &m, &err), RP_OK);
    for (int l = 0; l < L; l++) {
        m->layers[l].fwd_ms = fwd;
        m->layers[l].bwd_ms = bwd;
    }
    return m;
}

static rp_machine machine(int G, int M, int lag)
{
    rp_machine mc;
    rp_machine_defaults(&mc);
    mc.gpus = G;
    mc.microbatches = M;
    mc.optimizer_lag = lag;
    mc.link_gbs = 1.0; /* 1e6 bytes per ms: easy arithmetic */
    mc.opt_gbs = 1.0;
    mc.opt_bytes_per_param = 1.0; /* update of p params: p / 1e6 ms */
    mc.iterations = 12;
    return mc;
}

static double sim(const rp_cost_model *m, const rp_plan *p, const rp_machine *mc, rp_sim_result *r)
{
    rp_error err;
    ck_assert_msg(rp_simulate(m, p, mc, r, &err) == RP_OK, "%s", err.msg);
    return r->iteration_ms;
}

#define CLOSE(a, b) ck_assert_msg(fabs((a) - (b)) < 1e-9 * (1 + fabs(b)), "%.12g != %.12g", (a), (b))

START_TEST(one_executor_runs_the_iteration_back_to_back)
{
    rp_cost_model *m = uniform(4, 0, 0);
    double f[4] = {1.5, 2.0, 0.5, 3.0}, b[4] = {2.5, 4.0, 1.0, 5.0};
    for (int l = 0; l < 4; l++) {
        m->layers[l].fwd_ms = f[l];
        m->layers[l].bwd_ms = b[l];
    }
    rp_plan p;
    rp_error err;
    ck_assert_int_eq(rp_plan_parse("fwd=0,1-2;bwd=3,1-2,0", 4, &p, &err), RP_OK);
    /* F0 + F1 + T + B1 + B2 per microbatch: forward of 0..2, then
     * forward+backward of every layer (tail without, the rest with recompute) */
    double work = (f[0] + f[1] + f[2]) + (f[0] + b[0] + f[1] + b[1] + f[2] + b[2] + f[3] + b[3]);
    rp_machine mc = machine(1, 3, 1);
    rp_sim_result r;
    CLOSE(sim(m, &p, &mc, &r), 3 * work);
    CLOSE(r.bubble[0], 0.0);
    /* exact: layer 0's update (0.7 ms) sits between B2's end and the next F0;
     * layer 1-2's update (0.4 ms) finishes while B2 (layer 0) still runs */
    m->layers[0].opt_params = 700000;
    m->layers[1].opt_params = 400000;
    mc.optimizer_lag = 0;
    CLOSE(sim(m, &p, &mc, &r), 3 * work + 0.7);
    CLOSE(r.bubble[0], 0.7 / (3 * work + 0.7));
    /* lagged hides it */
    mc.optimizer_lag = 1;
    CLOSE(sim(m, &p, &mc, &r), 3 * work);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(round_robin_exact_pays_fill_and_drain)
{
    /* 5 layers, fwd 1, bwd 0: every job (F, T or B over one layer) takes 1 ms
     * per microbatch; 9 jobs on 3 executors, 6 microbatches */
    rp_cost_model *m = uniform(5, 1.0, 0.0);
    rp_plan p;
    rp_plan_singletons(5, 0, &p);
    ck_assert_int_eq(rp_schedule_num_jobs(&p), 9);
    rp_machine mc = machine(3, 6, 1);
    rp_sim_result r;
    CLOSE(sim(m, &p, &mc, &r), 9.0 * 6 / 3);
    for (int e = 0; e < 3; e++)
        CLOSE(r.bubble[e], 0.0);
    /* exact, only layer 0 trainable, its update 0.5 ms: F0 of the next
     * iteration waits for the last job (G-1 microbatches after the previous
     * round's start) plus the update */
    m->layers[0].opt_params = 500000;
    mc.optimizer_lag = 0;
    CLOSE(sim(m, &p, &mc, &r), 18.0 + 2.0 + 0.5);
    CLOSE(r.bubble_mean, 2.5 / 20.5);
    /* split over the 3 ranks' optimizer threads */
    mc.opt_spread = 1;
    CLOSE(sim(m, &p, &mc, &r), 18.0 + 2.0 + 0.5 / 3);
    /* an inter-executor hand-over shorter than the slack is hidden in lagged
     * mode */
    mc.opt_spread = 0;
    mc.optimizer_lag = 1;
    mc.transfer_ms = 0.25;
    CLOSE(sim(m, &p, &mc, &r), 18.0);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(uploads_are_hidden_or_the_bottleneck)
{
    rp_cost_model *m = uniform(3, 1.0, 1.0);
    rp_plan p;
    rp_plan_singletons(3, 0, &p); /* jobs: F0 F1 T B1 B2 */
    rp_machine mc = machine(1, 4, 1);
    rp_sim_result r;
    double work = 4 * (2 * 1.0 + 3 * 2.0);
    /* 2 ms per upload against >= 4 ms of compute per job: hidden */
    for (int l = 0; l < 3; l++)
        m->layers[l].weight_bytes = 2000000;
    CLOSE(sim(m, &p, &mc, &r), work);
    /* 20 ms per upload: the link is busy all the time, 5 uploads per iteration */
    for (int l = 0; l < 3; l++)
        m->layers[l].weight_bytes = 20000000;
    CLOSE(sim(m, &p, &mc, &r), 5 * 20.0);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(bound_weights_show_the_classic_bubble)
{
    for (int S = 2; S <= 6; S++) {
        for (int M = 1; M <= 12; M += 3) {
            rp_cost_model *m = uniform(S, 0.0, 2.0);
            rp_machine mc = machine(S, M, 0);
            rp_sim_result g, f;
            rp_error err;
            ck_assert_int_eq(rp_simulate_baseline(m, &mc, RP_BASELINE_GPIPE, &g, &err), RP_OK);
            ck_assert_int_eq(rp_simulate_baseline(m, &mc, RP_BASELINE_1F1B, &f, &err), RP_OK);
            CLOSE(g.iteration_ms, (M + S - 1) * 2.0);
            CLOSE(f.iteration_ms, (M + S - 1) * 2.0);
            CLOSE(g.bubble_mean, (double)(S - 1) / (M + S - 1));
            CLOSE(f.bubble_max, (double)(S - 1) / (M + S - 1));
            rp_cost_model_destroy(&m);
        }
    }
}
END_TEST

START_TEST(exact_is_never_faster_than_lagged)
{
    uint64_t x = 88172645463325252ull;
    for (int it = 0; it < 200; it++) {
        int L = 2 + it % 9;
        rp_cost_model *m = uniform(L, 0, 0);
        for (int l = 0; l < L; l++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            m->layers[l].fwd_ms = 0.1 + (double)(x % 1000) / 300;
            m->layers[l].bwd_ms = 2 * m->layers[l].fwd_ms;
            m->layers[l].weight_bytes = (int64_t)(x % 5000000);
            m->layers[l].grad_bytes = 2 * m->layers[l].weight_bytes;
            m->layers[l].opt_params = (int64_t)(x % 3000000);
        }
        rp_plan p;
        rp_plan_singletons(L, 0, &p);
        rp_machine mc = machine(1 + it % 4, 4 * (1 + it % 4), 0);
        mc.transfer_ms = (double)(x % 7) / 10;
        rp_sim_result a, b;
        double exact = sim(m, &p, &mc, &a);
        mc.optimizer_lag = 1;
        double lagged = sim(m, &p, &mc, &b);
        ck_assert_msg(exact >= lagged * (1 - 1e-12), "instance %d: exact %g < lagged %g", it,
                      exact, lagged);
        /* and the same input gives the same answer */
        CLOSE(sim(m, &p, &mc, &a), lagged);
        rp_cost_model_destroy(&m);
    }
}
END_TEST

START_TEST(job_memory_adds_up)
{
    rp_cost_model *m = uniform(4, 1, 1);
    for (int l = 0; l < 4; l++) {
        m->layers[l].weight_bytes = 1000 * (l + 1);
        m->layers[l].grad_bytes = 10000 * (l + 1);
        m->layers[l].act_bytes = 100000 * (l + 1);
        m->layers[l].out_bytes = 7;
    }
    rp_plan p;
    rp_error err;
    ck_assert_int_eq(rp_plan_parse("fwd=0-1,2;bwd=3,1-2,0", 4, &p, &err), RP_OK);
    /* jobs: 0 F(0-1), 1 F(2), 2 T(3), 3 B(1-2), 4 B(0); with G = 2 the next
     * job on an executor is two jobs later (mod 5) */
    /* job 0: weights 1000+2000, next is job 2 (layer 3): 4000; the largest
     * layer activation 200000; 2 buffers of 7; workspace 5 */
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 0, 5), 3000 + 4000 + 200000 + 14 + 5);
    /* job 3: weights 5000, next is job 0: 3000; gradients 50000,
     * activations 500000, 3 buffers */
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 3, 5),
                     5000 + 3000 + 50000 + 500000 + 21 + 5);
    /* G = 1: the next job is the following one (job 4 -> job 0) */
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 1, 4, 0), 1000 + 3000 + 10000 + 100000 + 21);
    int worst;
    int64_t peak = rp_schedule_peak_bytes(m, &p, 2, 5, &worst);
    ck_assert_int_eq(worst, 3);
    ck_assert_int_eq(peak, 5000 + 3000 + 50000 + 500000 + 21 + 5);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(bad_machines_are_rejected)
{
    rp_cost_model *m = uniform(3, 1, 1);
    rp_plan p;
    rp_plan_singletons(3, 0, &p);
    rp_sim_result r;
    rp_error err;
    rp_machine mc = machine(2, 4, 0);
    mc.link_gbs = 0;
    ck_assert_int_eq(rp_simulate(m, &p, &mc, &r, &err), RP_ERR_INVALID_ARG);
    mc = machine(4, 6, 0);
    p.width = 2; /* two pipelines cannot split 6 microbatches... they can: 3 each */
    ck_assert_int_eq(rp_simulate(m, &p, &mc, &r, &err), RP_OK);
    ck_assert_int_eq(r.groups, 2);
    ck_assert_int_eq(r.group_microbatches, 3);
    p.width = 3; /* does not divide 4 */
    ck_assert_int_eq(rp_simulate(m, &p, &mc, &r, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "width 3") != NULL, "%s", err.msg);
    mc = machine(4, 6, 0);
    p.width = 1; /* 4 pipelines, 6 microbatches */
    ck_assert_int_eq(rp_simulate(m, &p, &mc, &r, &err), RP_ERR_INVALID_ARG);
    rp_cost_model_destroy(&m);
}
END_TEST

static Suite *plan_simulate_suite(void)
{
    Suite *s = suite_create("plan_simulate");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, one_executor_runs_the_iteration_back_to_back);
    tcase_add_test(tc, round_robin_exact_pays_fill_and_drain);
    tcase_add_test(tc, uploads_are_hidden_or_the_bottleneck);
    tcase_add_test(tc, bound_weights_show_the_classic_bubble);
    tcase_add_test(tc, exact_is_never_faster_than_lagged);
    tcase_add_test(tc, job_memory_adds_up);
    tcase_add_test(tc, bad_machines_are_rejected);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(plan_simulate_suite, "serial")
