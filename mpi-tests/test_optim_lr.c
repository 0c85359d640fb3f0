/* Proves: rp_lr_at gives the closed-form values of the constant, cosine and
 * linear schedules at k = 1, W, W+1, the midpoint and N; handles W = 0,
 * W == N and W > N (all warmup) and clamps k outside [1, N]; parsing accepts
 * exactly "constant", "cosine", "linear"; invalid schedules are refused with
 * the offending field named. */
#include <math.h>
#include <string.h>

#include "optim/lr.h"
#include "rp_check.h"

#define CLOSE(got, want)                                                                     \
    ck_assert_msg(fabs((got) - (want)) <= 1e-14 * fabs(want) + 1e-300, "%s = %.17g, want %.17g", \
                  #got, (double)(got), (double)(want))

static rp_lr_schedule sched(rp_lr_kind kind, int64_t W, int64_t N)
{
    rp_lr_schedule s = {.kind = kind, .lr = 1.0, .min_lr = 0.1, .warmup = W, .steps = N};
    rp_error err = {0};
    ck_assert_msg(rp_lr_schedule_check(&s, &err) == RP_OK, "%s", err.msg);
    return s;
}

START_TEST(constant_schedule)
{
    rp_lr_schedule s = sched(RP_LR_CONSTANT, 4, 12);
    CLOSE(rp_lr_at(&s, 1), 0.25);
    CLOSE(rp_lr_at(&s, 4), 1.0);
    CLOSE(rp_lr_at(&s, 5), 1.0);
    CLOSE(rp_lr_at(&s, 12), 1.0);
    s = sched(RP_LR_CONSTANT, 0, 12);
    CLOSE(rp_lr_at(&s, 1), 1.0);
}
END_TEST

START_TEST(cosine_schedule)
{
    const double c8 = sqrt(2.0 + sqrt(2.0)) / 2.0;          /* cos(pi/8) */
    const double c12 = (sqrt(6.0) + sqrt(2.0)) / 4.0;       /* cos(pi/12) */
    rp_lr_schedule s = sched(RP_LR_COSINE, 4, 12);
    CLOSE(rp_lr_at(&s, 1), 0.25);
    CLOSE(rp_lr_at(&s, 4), 1.0);
    CLOSE(rp_lr_at(&s, 5), 0.1 + 0.9 * 0.5 * (1.0 + c8));
    CLOSE(rp_lr_at(&s, 8), 0.55);
    CLOSE(rp_lr_at(&s, 12), 0.1);
    s = sched(RP_LR_COSINE, 0, 12); /* no warmup: decay starts at k = 1 */
    CLOSE(rp_lr_at(&s, 1), 0.1 + 0.45 * (1.0 + c12));
    CLOSE(rp_lr_at(&s, 12), 0.1);
}
END_TEST

START_TEST(linear_schedule)
{
    rp_lr_schedule s = sched(RP_LR_LINEAR, 4, 12);
    CLOSE(rp_lr_at(&s, 1), 0.25);
    CLOSE(rp_lr_at(&s, 4), 1.0);
    CLOSE(rp_lr_at(&s, 5), 0.1 + 0.9 * 0.875);
    CLOSE(rp_lr_at(&s, 8), 0.55);
    CLOSE(rp_lr_at(&s, 12), 0.1);
    s = sched(RP_LR_LINEAR, 0, 4);
    CLOSE(rp_lr_at(&s, 1), 0.1 + 0.9 * 0.75);
    CLOSE(rp_lr_at(&s, 4), 0.1);
}
END_TEST

START_TEST(edge_cases)
{
    for (rp_lr_kind kind = RP_LR_CONSTANT; kind <= RP_LR_LINEAR; kind++) {
        rp_lr_schedule s = sched(kind, 5, 5); /* W == N: warmup only, peak at N */
        CLOSE(rp_lr_at(&s, 1), 0.2);
        CLOSE(rp_lr_at(&s, 5), 1.0);
        s = sched(kind, 10, 5); /* W > N: never reaches the peak */
        CLOSE(rp_lr_at(&s, 5), 0.5);
        s = sched(kind, 2, 6); /* k clamped to [1, N] */
        ck_assert(rp_lr_at(&s, 0) == rp_lr_at(&s, 1));
        ck_assert(rp_lr_at(&s, -3) == rp_lr_at(&s, 1));
        ck_assert(rp_lr_at(&s, 100) == rp_lr_at(&s, 6));
    }
    /* one step, no warmup: the decay ends at once */
    rp_lr_schedule s = sched(RP_LR_COSINE, 0, 1);
    CLOSE(rp_lr_at(&s, 1), 0.1);
    /* min_lr == lr: flat */
    s = (rp_lr_schedule){.kind = RP_LR_COSINE, .lr = 0.5, .min_lr = 0.5, .warmup = 0, .steps = 3};
    CLOSE(rp_lr_at(&s, 2), 0.5);
}
END_TEST

START_TEST(parse_names)
{
    rp_error err = {0};
    rp_lr_kind k = RP_LR_LINEAR;
    ck_assert_int_eq(rp_lr_kind_parse("constant", NULL, &k, &err), RP_OK);
    ck_assert_int_eq(k, RP_LR_CONSTANT);
    ck_assert_int_eq(rp_lr_kind_parse("cosine", NULL, &k, &err), RP_OK);
    ck_assert_int_eq(k, RP_LR_COSINE);
    ck_assert_int_eq(rp_lr_kind_parse("linear", NULL, &k, &err), RP_OK);
    ck_assert_int_eq(k, RP_LR_LINEAR);
    const char *bad[] = {"Cosine", "", "cos", "linear ", "warmup"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rp_error_clear(&err);
        k = RP_LR_LINEAR;
        ck_assert_int_eq(rp_lr_kind_parse(bad[i], "--lr-schedule", &k, &err), RP_ERR_INVALID_ARG);
        ck_assert_int_eq(k, RP_LR_LINEAR); /* untouched */
        ck_assert_msg(strstr(err.msg, "--lr-schedule") && strstr(err.msg, "cosine"),
                      "message: %s", err.msg);
    }
    ck_assert_int_eq(rp_lr_kind_parse(NULL, NULL, &k, &err), RP_ERR_INVALID_ARG);
    for (rp_lr_kind kind = RP_LR_CONSTANT; kind <= RP_LR_LINEAR; kind++) {
        ck_assert_int_eq(rp_lr_kind_parse(rp_lr_kind_name(kind), NULL, &k, &err), RP_OK);
        ck_assert_int_eq(k, kind);
    }
    ck_assert_str_eq(rp_lr_kind_name((rp_lr_kind)7), "?");
}
END_TEST

START_TEST(check_refuses_bad_schedules)
{
    struct { rp_lr_schedule s; const char *field; } bad[] = {
        {{RP_LR_COSINE, -1.0, 0.0, 0, 10}, "lr"},
        {{RP_LR_COSINE, NAN, 0.0, 0, 10}, "lr"},
        {{RP_LR_COSINE, 1.0, 2.0, 0, 10}, "min_lr"},
        {{RP_LR_LINEAR, 1.0, -0.1, 0, 10}, "min_lr"},
        {{RP_LR_CONSTANT, 1.0, 0.0, -1, 10}, "warmup"},
        {{RP_LR_CONSTANT, 1.0, 0.0, 0, 0}, "steps"},
        {{(rp_lr_kind)9, 1.0, 0.0, 0, 10}, "kind"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rp_error err = {0};
        ck_assert_int_eq(rp_lr_schedule_check(&bad[i].s, &err), RP_ERR_INVALID_ARG);
        ck_assert_msg(strstr(err.msg, bad[i].field), "case %zu: '%s' should name %s", i,
                      err.msg, bad[i].field);
    }
    /* constant ignores min_lr */
    rp_lr_schedule s = {RP_LR_CONSTANT, 1.0, 5.0, 0, 10};
    ck_assert_int_eq(rp_lr_schedule_check(&s, NULL), RP_OK);
}
END_TEST

static Suite *optim_lr_suite(void)
{
    Suite *s = suite_create("optim_lr");
    TCase *tc = tcase_create("lr");
    tcase_add_test(tc, constant_schedule);
    tcase_add_test(tc, cosine_schedule);
    tcase_add_test(tc, linear_schedule);
    tcase_add_test(tc, edge_cases);
    tcase_add_test(tc, parse_names);
    tcase_add_test(tc, check_refuses_bad_schedules);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(optim_lr_suite, "serial")
