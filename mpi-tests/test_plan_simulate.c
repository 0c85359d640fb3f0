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
 * activations + buffers + workspace (the shared one and its layers' own
 * largest), and an executor's scratch is the largest job's gradients plus
 * own workspace, never the largest gradients plus the largest workspace of
 * two different jobs. Jobs stream versions: a job uploads
 * each layer as its version lands and its first microbatch computes each
 * layer's forward as soon as that layer is on the device (two layers,
 * hand-computed, the version or the link the gate). The speculative update
 * (a step whose norm does not clip): a block's AdamW and its backup (12
 * bytes a parameter, written in the same pass) run as its gradient lands,
 * so with clipping the step takes what it takes without clipping, unless
 * the update outlasts the backward and delays the embedding's; a layer its
 * rank would start only once the backward is over (every gradient below it
 * in) is not speculated and follows the norm without its backup
 * (hand-computed, two and three layers).
 * The sparse-embedding lever (what the engine does, --sparse-embedding 1):
 * off, it is the dense model whatever rows fraction is set; on, jobs holding
 * the embedding move only the rows' share of its weights and gradient (all
 * of it at rows fraction 1, where the optimizer's work is the dense
 * model's); the next forward waits only for the update of the rows it
 * reads, the tail (tied head, or any tail when untied) also for the rest;
 * a tied head's gradient is summed as soon as it lands; the derived rows
 * fraction is tokens over vocabulary rows.
 * PCIe link groups: two GPUs behind one switch whose uplink is one GPU link
 * upload one after the other (an upload-bound iteration takes twice as
 * long); an uplink of two GPU links carries both at once; groups of one GPU
 * each are the machine without groups, to the bit; the interleaved deal
 * visits the groups in turn; `best` deals interleaved when consecutive
 * uploads collide on a switch in bus order and keeps bus order on a tie or
 * a gain within rounding; bad groups and deals are refused. Gradient
 * downloads move grad_download_bytes (bf16 gradients' rounded copy) when it
 * is set, the device memory still counts grad_bytes.
 * Several nodes: with no compute and no optimizer work the step is the
 * network's critical path, hand-computed message by message for 2 and 3
 * nodes (chain, scatter, all-gather), with clipping too, and with a tied
 * embedding's base chain ahead of layer 0's; the busiest NIC
 * direction and the bytes a node sends are the formulas' sums over the
 * layers; one node (nodes 0 or 1) is today's machine to the bit, whatever
 * the network fields say; a network hidden behind the lagged optimizer's
 * compute costs nothing; the scaling efficiency is at most 1 and rises to 1
 * with the bandwidth; N not dividing M is refused naming both. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/baseline.h"
#include "plan/deal.h"
#include "plan/keep.h"
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

/* L layers of random times and sizes from the xorshift state *x. */
static rp_cost_model *random_model(int L, uint64_t *x)
{
    rp_cost_model *m = uniform(L, 0, 0);
    for (int l = 0; l < L; l++) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        m->layers[l].fwd_ms = 0.1 + (double)(*x % 1000) / 300;
        m->layers[l].bwd_ms = 2 * m->layers[l].fwd_ms;
        m->layers[l].weight_bytes = (int64_t)(*x % 5000000);
        m->layers[l].grad_bytes = 2 * m->layers[l].weight_bytes;
        m->layers[l].opt_params = (int64_t)(*x % 3000000);
    }
    return m;
}

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

START_TEST(jobs_stream_versions_layer_by_layer)
{
    /* two layers, the tail holds both (fwd=;bwd=0-1), one executor, M = 2,
     * exact, no clipping: fwd 1 and bwd 2 ms each, so a microbatch is
     * 1 + 1 + 2 + 2 = 6 ms; each layer uploads in 1 ms (1e6 bytes) and
     * updates in 2 ms (2e6 parameters). The job of iteration t ends at X;
     * both gradients are on the host then; layer 0 updates X..X+2, layer 1
     * X+2..X+4. Streaming: layer 0 uploads X+2..X+3, microbatch 0 runs its
     * forward X+3..X+4; layer 1 uploads X+4..X+5 (its version), forward
     * X+5..X+6; the backward X+6..X+10; microbatch 1 X+10..X+16: period 16
     * (waiting for every layer before the upload, as before: X+4, upload to
     * X+6, then 12 ms: 18) */
    rp_cost_model *m = uniform(2, 1.0, 2.0);
    for (int l = 0; l < 2; l++) {
        m->layers[l].weight_bytes = 1000000;
        m->layers[l].opt_params = 2000000;
    }
    rp_plan p;
    rp_error err;
    ck_assert_int_eq(rp_plan_parse("fwd=;bwd=0-1", 2, &p, &err), RP_OK);
    rp_machine mc = machine(1, 2, 0);
    rp_sim_result r;
    CLOSE(sim(m, &p, &mc, &r), 16.0);
    CLOSE(r.bubble[0], 4.0 / 16.0);
    CLOSE(r.upload_ms, 2.0);
    /* layer 1's update 0.5 ms (X+2..X+2.5): its upload waits for the link
     * instead, X+3..X+4; forward X+4..X+5 (layer 0's ends X+4), backward to
     * X+9, microbatch 1 to X+15: period 15 (before: X+2.5 + 2 + 12 = 16.5) */
    m->layers[1].opt_params = 500000;
    CLOSE(sim(m, &p, &mc, &r), 15.0);
    /* lagged: the versions are long in, nothing waits: 12 */
    mc.optimizer_lag = 1;
    CLOSE(sim(m, &p, &mc, &r), 12.0);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(speculative_update_overlaps_the_backward)
{
    /* two layers: 0 (fwd 0.5, bwd 1 ms) and the tail 1 (fwd 1, bwd 2);
     * fwd=0;bwd=1,0, one executor, M = 1, no transfers: F0 0.5, T 3, B0
     * (recompute and backward) 1.5: 5 ms; layer 1's gradient lands 1.5 ms
     * before layer 0's, at the end of B0 (X). AdamW moves 30 bytes a
     * parameter at 1e6 bytes/ms: layer 0 (20000) 0.6 ms, layer 1 (25000)
     * 0.75 ms, and its speculative backup, written in the same pass, 12
     * bytes a parameter more, 0.3 ms. */
    rp_cost_model *m = uniform(2, 1.0, 2.0);
    m->layers[0].fwd_ms = 0.5, m->layers[0].bwd_ms = 1.0;
    m->layers[0].opt_params = 20000;
    m->layers[1].opt_params = 25000;
    rp_plan p;
    rp_error err;
    ck_assert_int_eq(rp_plan_parse("fwd=0;bwd=1,0", 2, &p, &err), RP_OK);
    rp_machine mc = machine(1, 1, 0);
    mc.opt_bytes_per_param = 30.0;
    rp_sim_result r;
    /* lagged: nothing waits, 5 */
    mc.optimizer_lag = 1, mc.clip = 1;
    CLOSE(sim(m, &p, &mc, &r), 5.0);
    /* exact, no clipping: layer 1 updates ..X-0.75, layer 0 X..X+0.6;
     * the next F0 starts at X+0.6: 5.6 */
    mc.optimizer_lag = 0, mc.clip = 0;
    CLOSE(sim(m, &p, &mc, &r), 5.6);
    /* clipping: both after X, layer 0 first (X+0.6), layer 1 to X+1.35;
     * F0 X+0.6..X+1.1, then T waits for layer 1: 5 + 0.6 + 0.75 - 0.5 */
    mc.clip = 1;
    CLOSE(sim(m, &p, &mc, &r), 5.85);
    /* speculative: layer 1's AdamW with its backup ..X-0.45 (started
     * while layer 0's backward runs), published at X (the norm); layer 0
     * X..X+0.6: as without clipping, 5.6 */
    mc.speculative = 1;
    CLOSE(sim(m, &p, &mc, &r), 5.6);
    /* a speculative update that outlasts the backward (layer 1: 50000
     * parameters, 1.5 + 0.6 ms, X-1.5..X+0.6) holds layer 0's update behind
     * it on the one rank: X+0.6..X+1.2, F0 X+1.2..X+1.7, so 5 + 1.2 (off:
     * X+0.6, X+2.1; T at X+2.1: 6.6) */
    m->layers[1].opt_params = 50000;
    CLOSE(sim(m, &p, &mc, &r), 6.2);
    mc.speculative = 0;
    CLOSE(sim(m, &p, &mc, &r), 6.6);
    /* without clipping or with the lag the flag changes nothing */
    mc.speculative = 1, mc.clip = 0;
    CLOSE(sim(m, &p, &mc, &r), 5.6); /* layer 1 ..X, layer 0 X..X+0.6 */
    /* speculated only while it overlaps the backward: one backward stage
     * over both layers (T: 1.5 forward, 3 backward, 4.5 ms) lands both
     * gradients at once (X), so layer 1 (25000 parameters) would start only
     * once the backward is over: it waits for the norm and runs without
     * its backup, after layer 0 (X..X+0.6, X+0.6..X+1.35), as off; the next
     * T computes layer 0's forward X+0.6..X+1.1, layer 1's from X+1.35:
     * 4.5 + 1.35 - 0.5 = 5.35 (a speculation of it would have taken
     * X+0.6..X+1.65: 5.65) */
    m->layers[1].opt_params = 25000;
    ck_assert_int_eq(rp_plan_parse("fwd=;bwd=0-1", 2, &p, &err), RP_OK);
    mc.clip = 1, mc.speculative = 0;
    CLOSE(sim(m, &p, &mc, &r), 5.35);
    mc.speculative = 1;
    CLOSE(sim(m, &p, &mc, &r), 5.35);
    rp_cost_model_destroy(&m);
    /* three layers, fwd=0,1;bwd=2,1,0: layer 0 as above, layers 1 and 2
     * (the tail) fwd 1, bwd 2: F0 0.5, F1 1, T 3, B1 3, B0 1.5: layer 2's
     * gradient lands at 4.5, layer 1's at 7.5, layer 0's at 9 (X). Layer 2
     * (125000 parameters) speculates 4.5..9.75 (3.75 + 1.5 ms), past X:
     * layer 1 (25000), whose gradient landed at 7.5, would start only after
     * the backward is over, so it follows the norm without its backup:
     * layer 0 9.75..10.35, layer 1 10.35..11.1 (speculated, with its
     * backup, to 11.4); F0 10.35..10.85, F1 11.1..12.1, T (layer 2
     * published at 9.75) to 15.1, B1 18.1, B0 19.6: 10.6 (11.4: 10.9; off:
     * layers 0, 1, 2 from X to 9.6, 10.35, 14.1, T from 14.1: 12.6) */
    m = uniform(3, 1.0, 2.0);
    m->layers[0].fwd_ms = 0.5, m->layers[0].bwd_ms = 1.0;
    m->layers[0].opt_params = 20000;
    m->layers[1].opt_params = 25000;
    m->layers[2].opt_params = 125000;
    ck_assert_int_eq(rp_plan_parse("fwd=0,1;bwd=2,1,0", 3, &p, &err), RP_OK);
    mc.speculative = 1;
    CLOSE(sim(m, &p, &mc, &r), 10.6);
    mc.speculative = 0;
    CLOSE(sim(m, &p, &mc, &r), 12.6);
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
    /* one weight buffer (--weight-buffers 1): each upload waits for the job
     * before it on the executor, so the 2 ms uploads add to the compute */
    for (int l = 0; l < 3; l++)
        m->layers[l].weight_bytes = 2000000;
    m->single_weight_buffer = 1;
    CLOSE(sim(m, &p, &mc, &r), work + 5 * 2.0);
    /* and one buffer of the largest stage's weights instead of two */
    int64_t one = rp_schedule_peak_bytes(m, &p, 1, 4, 0, NULL);
    m->single_weight_buffer = 0;
    ck_assert_int_eq(rp_schedule_peak_bytes(m, &p, 1, 4, 0, NULL), one + 2000000);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(gpus_behind_one_switch_share_its_uplink)
{
    rp_cost_model *m = uniform(3, 0.001, 0.001);
    for (int l = 0; l < 3; l++)
        m->layers[l].weight_bytes = 20000000; /* 20 ms per upload on a GPU's own link */
    rp_plan p;
    rp_plan_singletons(3, 0, &p); /* 5 jobs of one layer each */
    rp_machine mc = machine(2, 4, 1);
    rp_sim_result r;
    double own = sim(m, &p, &mc, &r); /* 5 uploads over 2 links: 2.5 x 20 ms */
    CLOSE(own, 2.5 * 20.0);
    mc.link_groups = 2; /* each GPU alone: the same machine */
    mc.link_group[0] = 0, mc.link_group[1] = 1;
    mc.uplink_gbs[0] = mc.uplink_gbs[1] = 1.0;
    ck_assert(sim(m, &p, &mc, &r) == own);
    mc.link_groups = 1; /* one switch, an uplink of one GPU link: 5 x 20 ms */
    mc.link_group[1] = 0;
    CLOSE(sim(m, &p, &mc, &r), 5 * 20.0);
    mc.uplink_gbs[0] = 2.0; /* an uplink of two: both at once again */
    CLOSE(sim(m, &p, &mc, &r), own);
    mc.uplink_gbs[0] = 0.5; /* a slower uplink than a GPU's link: 40 ms each */
    CLOSE(sim(m, &p, &mc, &r), 5 * 40.0);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(downloads_move_the_download_bytes)
{
    /* bf16 gradients: 6 bytes an element on the device, 2 downloaded. With
     * one pipeline and no memory limit only the downloaded bytes count:
     * the same time as a model whose gradients are that size */
    rp_cost_model *m = uniform(3, 1.0, 1.0), *small = uniform(3, 1.0, 1.0);
    for (int l = 0; l < 3; l++) {
        m->layers[l].grad_bytes = 30000000;
        m->layers[l].grad_download_bytes = 10000000;
        small->layers[l].grad_bytes = 10000000;
        m->layers[l].opt_params = small->layers[l].opt_params = 1; /* updates wait for them */
    }
    rp_plan p;
    rp_plan_singletons(3, 0, &p);
    rp_machine mc = machine(1, 2, 0);
    rp_sim_result r;
    double t = sim(m, &p, &mc, &r);
    ck_assert(t == sim(small, &p, &mc, &r));
    for (int l = 0; l < 3; l++)
        m->layers[l].grad_download_bytes = 0; /* 0: the whole gradient travels */
    ck_assert(sim(m, &p, &mc, &r) > t);
    rp_cost_model_destroy(&m);
    rp_cost_model_destroy(&small);
}
END_TEST

START_TEST(the_interleaved_deal_visits_the_groups_in_turn)
{
    rp_machine mc = machine(8, 16, 0);
    static const int four[8] = {0, 0, 1, 1, 2, 2, 3, 3}, two[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    static const int want4[8] = {0, 2, 4, 6, 1, 3, 5, 7}, want2[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    mc.link_groups = 4;
    memcpy(mc.link_group, four, sizeof four);
    rp_machine_interleave_deal(&mc);
    ck_assert(mc.deal_set);
    ck_assert_mem_eq(mc.deal, want4, sizeof want4);
    mc.link_groups = 2;
    memcpy(mc.link_group, two, sizeof two);
    rp_machine_interleave_deal(&mc);
    ck_assert_mem_eq(mc.deal, want2, sizeof want2);
    rp_error err;
    ck_assert_int_eq(rp_machine_check(&mc, &err), RP_OK);
    mc.deal[1] = 0; /* not a permutation */
    ck_assert_int_eq(rp_machine_check(&mc, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "not a permutation") != NULL);
    rp_machine_interleave_deal(&mc);
    mc.link_group[3] = 2; /* a group index past link_groups */
    ck_assert_int_eq(rp_machine_check(&mc, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "GPU 3 in link group 2 of 2") != NULL);
}
END_TEST

/* The forced plan's simulated iteration time under deal `choice`; *mc
 * becomes the machine as dealt. */
static double dealt_ms(const rp_cost_model *m, rp_machine *mc, const rp_plan *forced,
                       rp_deal_choice choice)
{
    rp_plan p;
    rp_sim_result r;
    rp_error err;
    ck_assert_msg(rp_plan_dealt(m, mc, 0, forced, choice, &p, &r, &err) == RP_OK, "%s", err.msg);
    return r.iteration_ms;
}

START_TEST(best_keeps_the_interleaved_deal_only_for_a_real_gain)
{
    /* 4 GPUs behind two switches whose uplinks are one GPU link each, one
     * layer a job, 1 ms forward, 2 ms backward, 8 microbatches. With 8 ms
     * uploads, consecutive jobs' uploads collide on one switch in bus order
     * and not when dealt 0 2 1 3: the simulator gives 62.5 against 60 ms,
     * and best deals interleaved. With 1 ms uploads both deals hide them
     * behind compute to the same bit: a tie, and best keeps bus order. */
    static const int groups[4] = {0, 0, 1, 1};
    rp_machine mc = machine(4, 8, 1);
    mc.link_groups = 2;
    memcpy(mc.link_group, groups, sizeof groups);
    mc.uplink_gbs[0] = mc.uplink_gbs[1] = 1.0;
    rp_cost_model *m = uniform(7, 1.0, 2.0);
    for (int l = 0; l < 7; l++)
        m->layers[l].weight_bytes = 8000000;
    rp_plan forced;
    rp_plan_singletons(7, 4, &forced);
    rp_machine nat = mc, inter = mc, best = mc;
    double natural_ms = dealt_ms(m, &nat, &forced, RP_DEAL_NATURAL);
    ck_assert(!nat.deal_set);
    double interleaved_ms = dealt_ms(m, &inter, &forced, RP_DEAL_INTERLEAVED);
    ck_assert_msg(interleaved_ms < natural_ms * (1 - 10 * RP_DEAL_MIN_GAIN), "%g vs %g",
                  interleaved_ms, natural_ms);
    ck_assert(dealt_ms(m, &best, &forced, RP_DEAL_BEST) == interleaved_ms);
    ck_assert_str_eq(rp_deal_name(&best), "interleaved");
    static const int want[4] = {0, 2, 1, 3};
    ck_assert_mem_eq(best.deal, want, sizeof want);
    rp_cost_model_destroy(&m);

    m = uniform(3, 1.0, 2.0);
    for (int l = 0; l < 3; l++)
        m->layers[l].weight_bytes = 1000000;
    rp_plan_singletons(3, 4, &forced);
    nat = inter = best = mc;
    ck_assert(dealt_ms(m, &inter, &forced, RP_DEAL_INTERLEAVED) ==
              dealt_ms(m, &nat, &forced, RP_DEAL_NATURAL));
    dealt_ms(m, &best, &forced, RP_DEAL_BEST);
    ck_assert_str_eq(rp_deal_name(&best), "natural");
    rp_cost_model_destroy(&m);

    /* the margin: rounding in the last bits is not a gain (the four paper
     * models' 235B LoRA file on four 2-GPU switches gave such a "gain"),
     * half the margin is not, 1% is */
    ck_assert(!rp_deal_interleaved_wins(28237.952913922, 28237.952913922 * (1 - 1e-15)));
    ck_assert(!rp_deal_interleaved_wins(100.0, 100.0 * (1 - RP_DEAL_MIN_GAIN / 2)));
    ck_assert(rp_deal_interleaved_wins(100.0, 99.0));
    ck_assert(!rp_deal_interleaved_wins(100.0, 101.0));
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
        rp_cost_model *m = random_model(L, &x);
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

/* Four uniform layers whose bytes tell them apart: layer l (0-based)
 * weighs 1000 (l + 1), its gradient 10000 (l + 1), its saved activations
 * 100000 (l + 1), its output 7. */
static rp_cost_model *sized_model(void)
{
    rp_cost_model *m = uniform(4, 1, 1);
    for (int l = 0; l < 4; l++) {
        m->layers[l].weight_bytes = 1000 * (l + 1);
        m->layers[l].grad_bytes = 10000 * (l + 1);
        m->layers[l].act_bytes = 100000 * (l + 1);
        m->layers[l].out_bytes = 7;
    }
    return m;
}

START_TEST(job_memory_adds_up)
{
    rp_cost_model *m = sized_model();
    rp_plan p;
    rp_error err;
    ck_assert_int_eq(rp_plan_parse("fwd=0-1,2;bwd=3,1-2,0", 4, &p, &err), RP_OK);
    /* jobs: 0 F(0-1), 1 F(2), 2 T(3), 3 B(1-2), 4 B(0); with G = 2 the next
     * job on an executor is two jobs later (mod 5) */
    /* job 0: weights 1000+2000, next is job 2 (layer 3): 4000; the largest
     * layer activation 200000; 2 buffers of 7; workspace 5 */
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 4, 0, 5), 3000 + 4000 + 200000 + 14 + 5);
    /* job 3: weights 5000, next is job 0: 3000; gradients 50000,
     * activations 500000, 3 buffers */
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 4, 3, 5),
                     5000 + 3000 + 50000 + 500000 + 21 + 5);
    /* G = 1: the next job is the following one (job 4 -> job 0) */
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 1, 4, 4, 0), 1000 + 3000 + 10000 + 100000 + 21);
    /* the executor's allocation: two buffers of the largest stage (job 3:
     * 5000), the largest backward gradients (job 3: 50000), the largest
     * backward activations (job 3: 500000), (2 layers + 2) buffers of 7,
     * workspace 5; at least every job's own bytes; worst names job 3 */
    int worst;
    int64_t peak = rp_schedule_peak_bytes(m, &p, 2, 4, 5, &worst);
    ck_assert_int_eq(worst, 3);
    ck_assert_int_eq(peak, 2 * 5000 + 50000 + 500000 + 4 * 7 + 5);
    for (int j = 0; j < 5; j++)
        ck_assert_int_ge(peak, rp_schedule_job_bytes(m, &p, 2, 4, j, 5));
    /* each layer's own workspace: a job's is its layers' largest, beside
     * the shared 5, and the executor's scratch holds the largest job's
     * gradients plus own workspace, not the largest gradients plus the
     * largest workspace: layer 2's 900000 (in job 1, F, no gradients; and
     * job 3, B 1-2: 50000) against layer 3's 1000 (job 2, T: 40000) */
    m->layers[2].workspace_bytes = 900000;
    m->layers[3].workspace_bytes = 1000;
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 4, 0, 5), 3000 + 4000 + 200000 + 14 + 5);
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 4, 1, 5),
                     3000 + 5000 + 300000 + 14 + 900000 + 5);
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 4, 2, 5),
                     4000 + 1000 + 40000 + 400000 + 21 + 1000 + 5);
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 4, 3, 5),
                     5000 + 3000 + 50000 + 500000 + 21 + 900000 + 5);
    ck_assert_int_eq(rp_schedule_peak_bytes(m, &p, 2, 4, 5, &worst),
                     2 * 5000 + (50000 + 900000) + 500000 + 4 * 7 + 5);
    ck_assert_int_eq(worst, 3);
    /* the largest workspace in a job without gradients, the largest
     * gradients with a small one: the sum of the two maxima is not charged */
    m->layers[2].workspace_bytes = 0;
    m->layers[1].workspace_bytes = 0;
    m->layers[0].workspace_bytes = 0;
    m->layers[3].workspace_bytes = 1000;
    ck_assert_int_eq(rp_schedule_peak_bytes(m, &p, 2, 4, 5, NULL),
                     2 * 5000 + (50000 + 0) + 500000 + 4 * 7 + 5);
    m->layers[1].workspace_bytes = 60000; /* job 0 (F 0-1) and job 3 (B 1-2) */
    ck_assert_int_eq(rp_schedule_peak_bytes(m, &p, 2, 4, 5, NULL),
                     2 * 5000 + (50000 + 60000) + 500000 + 4 * 7 + 5);
    rp_cost_model_destroy(&m);
}
END_TEST

/* Kept activations in the executor's own memory (cost.h's keep_on_executor,
 * plan/keep.h): only blocks whose forward and backward jobs run on one
 * executor, their pool resident in every job's bytes and the executor's
 * peak (each microbatch of the pipeline), no device slot for them in their
 * backward job, no recompute time, and as many as the memory limit leaves
 * beside the rest of the plan. */
START_TEST(kept_pool_on_one_executor)
{
    rp_cost_model *m = sized_model();
    m->layers[1].keep_device_bytes = 1000000; /* the two blocks */
    m->layers[2].keep_device_bytes = 2000000;
    m->keep_on_executor = 1;
    rp_plan p;
    rp_error err;
    /* jobs: 0 F(0-1), 1 F(2), 2 T(3), 3 B(1-2), 4 B(0) */
    ck_assert_int_eq(rp_plan_parse("fwd=0-1,2;bwd=3,1-2,0", 4, &p, &err), RP_OK);
    /* with width 2 (G = 2, the plan's width 0 meaning G), layer 2 (jobs 1
     * and 3) shares an executor, layer 1 (jobs 0 and 3) does not; with
     * width 1 both do */
    ck_assert(rp_plan_kept_on_one_executor(&p, 2, 2));
    ck_assert(!rp_plan_kept_on_one_executor(&p, 2, 1));
    ck_assert(rp_plan_kept_on_one_executor(&p, 1, 1));
    p.width = 2;
    p.kept = 1; /* layer 2: 2000000 bytes a microbatch, M x W / G = 8 x 2 / 4 = 4 of them */
    ck_assert_int_eq(rp_schedule_kept_pool_bytes(m, &p, 4, 8), 4 * 2000000);
    /* job 3 (B 1-2) holds layer 1's slot only, and the pool */
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 4, 3, 5),
                     5000 + 3000 + 50000 + 200000 + 21 + 5 + 4 * 2000000);
    ck_assert_int_eq(rp_schedule_job_bytes(m, &p, 2, 4, 0, 5),
                     3000 + 4000 + 200000 + 14 + 5 + 4 * 2000000);
    rp_peak_parts q;
    rp_schedule_peak_parts(m, &p, 2, 4, 5, &q);
    ck_assert_int_eq(q.kept_pool, 4 * 2000000);
    ck_assert_int_eq(q.total, 2 * 5000 + 50000 + 400000 + 4 * 7 + 5 + 4 * 2000000);
    /* its backward skips the recompute: B(1-2) costs layer 2's bwd only */
    rp_job b = rp_schedule_job(&p, 3);
    ck_assert(fabs(rp_schedule_job_ms(m, &p, &b) - (m->layers[1].fwd_ms + m->layers[1].bwd_ms +
                                                    m->layers[2].bwd_ms)) < 1e-12);
    /* the choice: width 2 keeps layer 2 only (layer 1 is on another
     * executor); width 1 both, while the memory limit leaves room */
    rp_machine mc;
    rp_machine_defaults(&mc);
    mc.gpus = 2;
    mc.microbatches = 4;
    mc.keep_budget = 1 << 30;
    mc.workspace_bytes = 5;
    mc.memory_limit = (int64_t)1 << 40;
    p.width = 2;
    ck_assert_int_eq(rp_plan_choose_kept(m, &mc, &p), 1);
    p.width = 1; /* 2 pipelines of 2 microbatches each */
    ck_assert_int_eq(rp_plan_choose_kept(m, &mc, &p), 2);

    rp_plan none = p;
    none.kept = 0;
    const int64_t base = rp_schedule_peak_bytes(m, &none, 2, 4, 5, NULL);
    mc.memory_limit = base + 2 * 2000000 + 2 * 1000000; /* both, to the byte */
    ck_assert_int_eq(rp_plan_choose_kept(m, &mc, &p), 2);
    mc.memory_limit -= 1;
    ck_assert_int_eq(rp_plan_choose_kept(m, &mc, &p), 1);
    mc.memory_limit = base + 2 * 2000000 - 1; /* not even layer 2 */
    ck_assert_int_eq(rp_plan_choose_kept(m, &mc, &p), 0);
    mc.keep_budget = 0; /* --recompute stage */
    mc.memory_limit = 0;
    ck_assert_int_eq(rp_plan_choose_kept(m, &mc, &p), 0);
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

/* A 3-layer model on one executor, M = 1, for hand-computed schedules:
 * jobs F0 (embedding, 0 ms), F1 (block, 1 ms), T (head, 1 + 2 ms),
 * B1 (block, 1 + 2 ms), B2 (embedding, 0 ms): 7 ms of compute. No uploads;
 * the embedding has 2e6 parameters (a 2 ms update: 1e6 bytes per ms). */
static rp_cost_model *tiny_lm(int tied)
{
    rp_cost_model *m = uniform(3, 1.0, 2.0);
    m->layers[0].kind = RP_LAYER_EMBED;
    m->layers[0].fwd_ms = m->layers[0].bwd_ms = 0.0;
    m->layers[0].opt_params = 2000000;
    m->layers[1].kind = RP_LAYER_BLOCK;
    m->layers[2].kind = RP_LAYER_HEAD;
    m->layers[2].tied_to = tied ? 0 : -1;
    return m;
}

START_TEST(sparse_embedding_off_is_the_dense_model)
{
    rp_cost_model *m = tiny_lm(1);
    m->layers[2].grad_bytes = 1000000; /* the tied head's gradient: 1 ms down, 1 ms to sum */
    rp_plan p;
    rp_plan_singletons(3, 0, &p);
    rp_machine mc = machine(1, 1, 0);
    rp_sim_result r;
    /* T ends at X - 3, its gradient is on the host at X - 2; B2 ends at X;
     * layer 0's update (2 ms + the head's gradient summed in, 1 ms) runs
     * X..X+3, then the next iteration's 7 ms */
    CLOSE(sim(m, &p, &mc, &r), 10.0);
    /* a rows fraction alone changes nothing */
    mc.embed_rows_frac = 0.25;
    CLOSE(sim(m, &p, &mc, &r), 10.0);
    /* nor does the lever when layer 0 is not an embedding */
    mc.sparse_embed = 1;
    m->layers[0].kind = RP_LAYER_BLOCK;
    CLOSE(sim(m, &p, &mc, &r), 10.0);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(sparse_embedding_moves_only_the_rows_read)
{
    rp_cost_model *m = tiny_lm(0);
    m->layers[0].grad_bytes = 4000000; /* dense: a 4 ms download after B2 */
    rp_plan p;
    rp_plan_singletons(3, 0, &p);
    rp_machine mc = machine(1, 1, 0);
    rp_sim_result off, on;
    /* dense: B2 ends at X, its gradient is down at X+4, updated at X+6 */
    CLOSE(sim(m, &p, &mc, &off), 7.0 + 4.0 + 2.0);
    /* rows fraction 1: the same bytes, the same work, the same schedule */
    mc.sparse_embed = 1;
    mc.embed_rows_frac = 1.0;
    CLOSE(sim(m, &p, &mc, &on), 13.0);
    CLOSE(on.opt_ms, off.opt_ms);
    /* a quarter of the rows: download 1 ms (X+1), part (a) 0.5 ms (X+1.5),
     * F0 and F1 run X+1.5..X+2.5; part (b) 1.5 ms ends X+3, when the tail
     * (untied: it waits for (b), conservatively) may start: 3 + 6 = 9 */
    mc.embed_rows_frac = 0.25;
    CLOSE(sim(m, &p, &mc, &on), 9.0);
    /* every row is still updated: the same optimizer time */
    CLOSE(on.opt_ms, off.opt_ms);
    /* uploads: the embedding table (8 ms) goes up with F0 and B2 */
    m->layers[0].weight_bytes = 8000000;
    mc.optimizer_lag = 1; /* (uploads then overlap; only their sum is checked) */
    mc.sparse_embed = 0;
    CLOSE((sim(m, &p, &mc, &off), off.upload_ms), 16.0);
    mc.sparse_embed = 1;
    mc.embed_rows_frac = 1.0;
    CLOSE((sim(m, &p, &mc, &on), on.upload_ms), 16.0);
    mc.embed_rows_frac = 0.25;
    CLOSE((sim(m, &p, &mc, &on), on.upload_ms), 4.0);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(sparse_embedding_next_forward_waits_for_its_rows_only)
{
    rp_cost_model *m = tiny_lm(1);
    m->layers[2].grad_bytes = 1000000;
    rp_plan p;
    rp_plan_singletons(3, 0, &p);
    rp_machine mc = machine(1, 1, 0);
    mc.sparse_embed = 1;
    mc.embed_rows_frac = 0.25;
    rp_sim_result r;
    /* the head's gradient lands at X-2 and is summed X-2..X-1 (during B1);
     * part (a), 0.5 ms, runs X..X+0.5: F0 starts X+0.5, F1 ends X+1.5;
     * part (b), 1.5 ms, ends X+2, and the tied head reads the whole table:
     * T runs X+2..X+5, B1 X+5..X+8; period 8 (dense: 10) */
    CLOSE(sim(m, &p, &mc, &r), 8.0);
    /* a longer block hides part (b): F1 ends X+0.5+2.5 = X+3 > X+2, and the
     * period is 0.5 + the compute (2.5 + 1 + 2 + 2.5 + 2 + 0 = 10) */
    m->layers[1].fwd_ms = 2.5;
    CLOSE(sim(m, &p, &mc, &r), 10.5);
    /* dense for comparison: 10 + 3 */
    mc.sparse_embed = 0;
    CLOSE(sim(m, &p, &mc, &r), 13.0);
    rp_cost_model_destroy(&m);
    /* two executors, width 1: two groups of one microbatch each, side by
     * side; untied; the update split over both ranks. The rows fraction is
     * derived: out 1000 bytes per microbatch over a 4000-byte table gives
     * 0.5 for the iteration (M = 2), 0.25 for a group (0.001 ms of upload) */
    m = tiny_lm(0);
    m->layers[0].grad_bytes = 4000000;
    m->layers[0].out_bytes = 1000;
    m->layers[0].weight_bytes = 4000;
    p.width = 1;
    mc = machine(2, 2, 0);
    mc.opt_spread = 1;
    /* dense: download 4 ms (X+4); update 2 ms + the other group's copy 4 ms,
     * over two ranks: X+7; F0's upload 0.004 ms; then 7 ms */
    CLOSE(sim(m, &p, &mc, &r), 7.0 + 7.0 + 0.004);
    ck_assert_int_eq(r.groups, 2);
    /* sparse: download a quarter, 1 ms (X+1); part (a) = the other group's
     * part 1e6 + half the rows 1e6, over two ranks: X+2; F0's upload of a
     * quarter of the table 0.001 ms; F1 ends X+3.001; part (b), half the
     * rows over two ranks, ends X+2.5 and does not hold the tail */
    mc.sparse_embed = 1;
    CLOSE(sim(m, &p, &mc, &r), 7.0 + 2.001);
    CLOSE(r.upload_ms, 0.002);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(embedding_rows_fraction_bound)
{
    rp_cost_model *m = tiny_lm(1);
    m->layers[0].out_bytes = 1000;     /* 1000 bytes of hidden values per microbatch */
    m->layers[0].weight_bytes = 16000; /* 16 microbatches' worth of rows */
    rp_machine mc = machine(1, 4, 0);
    CLOSE(rp_machine_embed_rows_frac(m, &mc, 4), 0.25);
    CLOSE(rp_machine_embed_rows_frac(m, &mc, 2), 0.125);
    CLOSE(rp_machine_embed_rows_frac(m, &mc, 32), 1.0);
    mc.embed_rows_frac = 0.3; /* given: every group assumed to read all of them */
    CLOSE(rp_machine_embed_rows_frac(m, &mc, 1), 0.3);
    mc.embed_rows_frac = 0;
    m->layers[0].out_bytes = 0; /* unknown: dense */
    CLOSE(rp_machine_embed_rows_frac(m, &mc, 4), 1.0);
    m->layers[0].out_bytes = 1000;
    m->layers[0].kind = RP_LAYER_BLOCK;
    CLOSE(rp_machine_embed_rows_frac(m, &mc, 4), 1.0);
    /* out of range is refused, naming the field */
    rp_error err;
    mc.embed_rows_frac = 1.5;
    ck_assert_int_eq(rp_machine_check(&mc, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "embedding rows fraction") != NULL, "%s", err.msg);
    mc.embed_rows_frac = -0.1;
    ck_assert_int_eq(rp_machine_check(&mc, &err), RP_ERR_INVALID_ARG);
    rp_cost_model_destroy(&m);
}
END_TEST

/* Several nodes. The network: 8 Gb/s = 1e6 bytes per ms, 5 us a message
 * (RP_SIM_NET_LATENCY_MS). A model with no compute, no PCIe bytes and no
 * optimizer work, whose only trainable layer 0 has 1e6 parameters: its
 * gradient G = 4e6 bytes (4 ms a hop), its compute copy W = 2e6 bytes. */
#define LAT 0.005

static rp_machine net_machine(int N, int M, int lag)
{
    rp_machine mc = machine(1, M, lag);
    mc.nodes = N;
    mc.network_gbs = 8.0;
    mc.compute_bytes_per_param = 2.0;
    mc.opt_bytes_per_param = 0.0;
    return mc;
}

START_TEST(nodes_step_is_the_hand_computed_network_path)
{
    rp_cost_model *m = uniform(3, 0.0, 0.0);
    m->layers[0].opt_params = 1000000;
    rp_plan p;
    rp_plan_singletons(3, 0, &p);
    rp_sim_result r;
    /* N = 2: chain 0->1 [0, h]; node 1 scatters slice 0 (G/2) [h, h+s] and
     * its update (0 ms) is done at h, but its gather to node 0 (W/2) queues
     * behind the scatter on its send direction: [h+s, h+s+g]; node 0's slice
     * is there at h+s, its gather to node 1 [h+s, h+s+g]. The next step's
     * F0 waits for it: the step is h + s + g. Node 0's send direction is the
     * busiest: chain + gather. */
    double h = LAT + 4.0, s2 = LAT + 2.0, g2 = LAT + 1.0;
    rp_machine mc = net_machine(2, 2, 0);
    CLOSE(sim(m, &p, &mc, &r), h + s2 + g2);
    ck_assert_int_eq(r.nodes, 2);
    ck_assert_int_eq(r.group_microbatches, 1); /* M/N per node */
    CLOSE(r.net_ms, h + g2);
    ck_assert_int_eq(r.limit, RP_LIMIT_SCHEDULE);
    /* N = 3: chain [0, h], [h, 2h]; node 2 scatters to node 0 [2h, 2h+s]
     * then node 1 [2h+s, 2h+2s]; node 0 gathers to node 2 as soon as its
     * slice is there [2h+s, 2h+s+g] (to node 1 it waits for node 1's receive
     * direction); at 2h+2s: 2->0, 0->1, 1->2 all at once, then 2->1 and
     * 1->0: 2h + 2s + 2g. The busiest direction is node 1's receive: chain,
     * scatter and two gathers. */
    double s3 = LAT + 4.0 / 3, g3 = LAT + 2.0 / 3;
    mc = net_machine(3, 3, 0);
    CLOSE(sim(m, &p, &mc, &r), 2 * h + 2 * s3 + 2 * g3);
    CLOSE(r.net_ms, h + s3 + 2 * g3);
    /* with twice the bandwidth every transfer halves, the latencies stay */
    mc.network_gbs = 16.0;
    CLOSE(sim(m, &p, &mc, &r), 2 * (LAT + 2.0) + 2 * (LAT + 2.0 / 3) + 2 * (LAT + 1.0 / 3));
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(nodes_clip_waits_for_every_slice)
{
    /* two trainable layers of 1e6 parameters, N = 2, both gradients land at
     * 0; layer 0's chain is posted first */
    rp_cost_model *m = uniform(3, 0.0, 0.0);
    m->layers[0].opt_params = m->layers[1].opt_params = 1000000;
    rp_plan p;
    rp_plan_singletons(3, 0, &p);
    rp_sim_result r;
    double h = LAT + 4.0, s = LAT + 2.0, g = LAT + 1.0;
    rp_machine mc = net_machine(2, 2, 0);
    /* chain 0 [0, h], chain 1 [h, 2h] (node 0's send); scatter 0 [h, h+s];
     * gathers of layer 0: 1->0 [h+s, h+s+g], 0->1 waits for node 0's send
     * [2h, 2h+g]; scatter 1 [2h, 2h+s]; gathers of layer 1 [2h+s, 2h+s+g]:
     * the step is 2h + s + g */
    CLOSE(sim(m, &p, &mc, &r), 2 * h + s + g);
    /* clip: node 1 updates both at 2h (its last slice), node 0 at 2h+s
     * (scatter 1 [2h, 2h+s]); then each sends two gathers back to back:
     * 2h + s + 2g */
    mc.clip = 1;
    CLOSE(sim(m, &p, &mc, &r), 2 * h + s + 2 * g);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(nodes_tied_embedding_base_has_its_own_chain)
{
    /* tiny_lm's embedding with 1e6 parameters (G_0 = 4e6, W_0 = 2e6 bytes),
     * sparse, every row read (one part), the head tied to it; no compute,
     * no optimizer work. N = 2: the head's sum goes 0 -> 1 [0, h] and back
     * as the final base 1 -> 0 [h, 2h]; layer 0's chain starts from it
     * [2h, 3h]; then the scatter and the gathers as without a tie: 3h + s +
     * g (untied: h + s + g) */
    rp_cost_model *m = tiny_lm(1);
    for (int l = 0; l < 3; l++)
        m->layers[l].fwd_ms = m->layers[l].bwd_ms = 0.0;
    m->layers[0].opt_params = 1000000;
    rp_plan p;
    rp_plan_singletons(3, 0, &p);
    rp_sim_result r;
    double h = LAT + 4.0, s = LAT + 2.0, g = LAT + 1.0;
    rp_machine mc = net_machine(2, 2, 0);
    mc.sparse_embed = 1;
    mc.embed_rows_frac = 1.0;
    CLOSE(sim(m, &p, &mc, &r), 3 * h + s + g);
    /* node 0 sends the base, the chain and a gather: T + G + W/2 */
    CLOSE(r.net_base_bytes, 4e6);
    CLOSE(r.net_send_bytes, 4e6 + 4e6 + 1e6);
    mc = net_machine(3, 3, 0); /* T + G + 2/3 W */
    mc.sparse_embed = 1;
    mc.embed_rows_frac = 1.0;
    sim(m, &p, &mc, &r);
    CLOSE(r.net_send_bytes, 4e6 + 4e6 + 2.0 / 3 * 2e6);
    /* untied, or a dense embedding (the head's gradient summed into layer
     * 0's before its chain): no base */
    mc = net_machine(2, 2, 0);
    mc.sparse_embed = 0;
    CLOSE(sim(m, &p, &mc, &r), h + s + g);
    ck_assert(r.net_base_bytes == 0);
    m->layers[2].tied_to = -1;
    mc.sparse_embed = 1;
    mc.embed_rows_frac = 1.0;
    CLOSE(sim(m, &p, &mc, &r), h + s + g);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(nodes_send_the_formula_bytes)
{
    /* G = 4 B and W = 2 B per trainable parameter, summed over the layers;
     * nodes 0..N-2 send G + (N-1)/N W, node N-1 (N-1)/N (G + W): the most is
     * the first */
    rp_cost_model *m = uniform(5, 1.0, 2.0);
    int64_t params[5] = {3000, 0, 125000, 70000, 1000};
    double P = 0;
    for (int l = 0; l < 5; l++) {
        m->layers[l].opt_params = params[l];
        m->layers[l].weight_bytes = 2 * params[l];
        P += (double)params[l];
    }
    rp_plan p;
    rp_plan_singletons(5, 0, &p);
    rp_sim_result r;
    for (int N = 2; N <= 5; N++) {
        rp_machine mc = machine(2, 4 * N, 0);
        mc.nodes = N;
        mc.network_gbs = 1.0;
        sim(m, &p, &mc, &r);
        CLOSE(r.net_grad_bytes, 4 * P);
        CLOSE(r.net_weight_bytes, 2 * P);
        CLOSE(r.net_send_bytes, 4 * P + (double)(N - 1) / N * 2 * P);
    }
    /* a lagged run, an fp32 compute copy, the optimizer spread or not: the
     * same bytes (W = 4 B a parameter now) */
    rp_machine mc = machine(2, 6, 1);
    mc.nodes = 3;
    mc.compute_bytes_per_param = 4.0;
    mc.opt_spread = 1;
    sim(m, &p, &mc, &r);
    CLOSE(r.net_send_bytes, 4 * P + 2.0 / 3 * 4 * P);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(one_node_is_todays_machine)
{
    /* nodes 0 and 1 are the single-node simulator to the bit, whatever the
     * network fields hold */
    uint64_t x = 88172645463325252ull;
    for (int it = 0; it < 60; it++) {
        int L = 2 + it % 7;
        rp_cost_model *m = random_model(L, &x);
        rp_plan p;
        rp_plan_singletons(L, 0, &p);
        rp_machine mc = machine(1 + it % 4, 4 * (1 + it % 4), it % 2);
        mc.clip = it % 3 == 0;
        mc.opt_spread = it % 5 < 2;
        rp_sim_result a, b, c;
        sim(m, &p, &mc, &a);
        mc.nodes = 0;
        mc.network_gbs = 0.5;
        sim(m, &p, &mc, &b);
        mc.nodes = 1;
        mc.compute_bytes_per_param = 0;
        sim(m, &p, &mc, &c);
        ck_assert(a.iteration_ms == b.iteration_ms && a.iteration_ms == c.iteration_ms);
        ck_assert(a.opt_ms == c.opt_ms && a.bubble_mean == c.bubble_mean);
        ck_assert_int_eq(c.nodes, 0);
        ck_assert(c.net_send_bytes == 0 && c.net_ms == 0);
        rp_cost_model_destroy(&m);
    }
}
END_TEST

START_TEST(nodes_hide_the_network_behind_lagged_compute)
{
    /* 5 layers, 1 ms a job per microbatch, 9 jobs on 3 executors, 6
     * microbatches per node: one node's lagged step is 9 x 6 / 3 = 18 ms
     * (round_robin_exact_pays_fill_and_drain). Each layer's exchange (1e5
     * parameters at 100 Gb/s: well under a millisecond) finishes long
     * before the step after next needs it: N nodes take the same 18 ms. */
    rp_cost_model *m = uniform(5, 1.0, 0.0);
    for (int l = 0; l < 5; l++)
        m->layers[l].opt_params = 100000;
    rp_plan p;
    rp_plan_singletons(5, 0, &p);
    rp_sim_result r;
    for (int N = 1; N <= 4; N++) {
        rp_machine mc = machine(3, 6 * N, 1);
        mc.nodes = N;
        mc.network_gbs = 100.0;
        CLOSE(sim(m, &p, &mc, &r), 18.0);
    }
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(nodes_scaling_efficiency_rises_to_one)
{
    /* efficiency = N nodes' tokens/s / (N x one node's at M/N microbatches),
     * the same tokens per node: one node's step / N nodes' step. No
     * optimizer work, so the network can only add time. */
    rp_cost_model *m = uniform(6, 1.0, 2.0);
    for (int l = 0; l < 6; l++) {
        m->layers[l].opt_params = 2000000;
        m->layers[l].weight_bytes = 4000000;
        m->layers[l].grad_bytes = 8000000;
    }
    m->tokens_per_microbatch = 1000;
    rp_plan p;
    rp_plan_singletons(6, 0, &p);
    for (int lag = 0; lag <= 1; lag++) {
        for (int N = 2; N <= 8; N *= 2) {
            rp_machine mc = machine(2, 4 * N, lag);
            mc.link_gbs = 100.0;
            mc.opt_bytes_per_param = 0.0;
            mc.nodes = N;
            mc.tokens_per_iteration = 1000 * 4 * N;
            rp_machine node = rp_machine_node(&mc);
            ck_assert_int_eq(node.nodes, 1);
            ck_assert_int_eq(node.microbatches, 4);
            ck_assert_int_eq(node.tokens_per_iteration, 4000);
            rp_sim_result one, r;
            sim(m, &p, &node, &one);
            double prev = 0;
            for (double gbs = 1; gbs <= 1e7; gbs *= 10) {
                mc.network_gbs = gbs;
                sim(m, &p, &mc, &r);
                double eff = r.tokens_per_s / (N * one.tokens_per_s);
                CLOSE(eff, one.iteration_ms / r.iteration_ms);
                ck_assert_msg(eff <= 1 + 1e-12, "lag %d, %d nodes, %g Gb/s: %g", lag, N, gbs, eff);
                ck_assert_msg(eff >= prev * (1 - 1e-12), "lag %d, %d nodes, %g Gb/s: %g < %g", lag,
                              N, gbs, eff, prev);
                prev = eff;
            }
            /* at 1e7 Gb/s only the 5 us latencies are left: for exact, about 3(N-1)
             * of them on a step of some 50 ms */
            ck_assert_msg(prev > 0.995, "lag %d, %d nodes: %g", lag, N, prev);
            mc.network_gbs = 1;
            ck_assert(sim(m, &p, &mc, &r) > one.iteration_ms * 1.5); /* 1 Gb/s: a real cost */
        }
    }
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(nodes_must_divide_the_microbatches)
{
    rp_cost_model *m = uniform(3, 1, 1);
    rp_plan p;
    rp_plan_singletons(3, 0, &p);
    rp_sim_result r;
    rp_error err;
    rp_machine mc = machine(2, 8, 0);
    mc.nodes = 3;
    ck_assert_int_eq(rp_simulate(m, &p, &mc, &r, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "8 microbatches do not split evenly over 3 nodes") != NULL,
                  "%s", err.msg);
    mc.nodes = 4; /* 2 per node: fine, one per pipeline of width 1 */
    p.width = 1;
    ck_assert_int_eq(rp_simulate(m, &p, &mc, &r, &err), RP_OK);
    ck_assert_int_eq(r.group_microbatches, 1);
    mc.nodes = 8; /* 1 per node cannot feed two pipelines */
    ck_assert_int_eq(rp_simulate(m, &p, &mc, &r, &err), RP_ERR_INVALID_ARG);
    mc.nodes = 2;
    mc.network_gbs = 0;
    ck_assert_int_eq(rp_machine_check(&mc, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "network") != NULL, "%s", err.msg);
    mc.network_gbs = 100;
    mc.nodes = RP_SIM_MAX_NODES + 1;
    ck_assert_int_eq(rp_machine_check(&mc, &err), RP_ERR_INVALID_ARG);
    rp_cost_model_destroy(&m);
}
END_TEST

static Suite *plan_simulate_suite(void)
{
    Suite *s = suite_create("plan_simulate");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, one_executor_runs_the_iteration_back_to_back);
    tcase_add_test(tc, kept_pool_on_one_executor);
    tcase_add_test(tc, round_robin_exact_pays_fill_and_drain);
    tcase_add_test(tc, jobs_stream_versions_layer_by_layer);
    tcase_add_test(tc, speculative_update_overlaps_the_backward);
    tcase_add_test(tc, uploads_are_hidden_or_the_bottleneck);
    tcase_add_test(tc, bound_weights_show_the_classic_bubble);
    tcase_add_test(tc, gpus_behind_one_switch_share_its_uplink);
    tcase_add_test(tc, the_interleaved_deal_visits_the_groups_in_turn);
    tcase_add_test(tc, best_keeps_the_interleaved_deal_only_for_a_real_gain);
    tcase_add_test(tc, downloads_move_the_download_bytes);
    tcase_add_test(tc, exact_is_never_faster_than_lagged);
    tcase_add_test(tc, job_memory_adds_up);
    tcase_add_test(tc, bad_machines_are_rejected);
    tcase_add_test(tc, sparse_embedding_off_is_the_dense_model);
    tcase_add_test(tc, sparse_embedding_moves_only_the_rows_read);
    tcase_add_test(tc, sparse_embedding_next_forward_waits_for_its_rows_only);
    tcase_add_test(tc, embedding_rows_fraction_bound);
    tcase_add_test(tc, nodes_step_is_the_hand_computed_network_path);
    tcase_add_test(tc, nodes_clip_waits_for_every_slice);
    tcase_add_test(tc, nodes_tied_embedding_base_has_its_own_chain);
    tcase_add_test(tc, nodes_send_the_formula_bytes);
    tcase_add_test(tc, one_node_is_todays_machine);
    tcase_add_test(tc, nodes_hide_the_network_behind_lagged_compute);
    tcase_add_test(tc, nodes_scaling_efficiency_rises_to_one);
    tcase_add_test(tc, nodes_must_divide_the_microbatches);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(plan_simulate_suite, "serial")
