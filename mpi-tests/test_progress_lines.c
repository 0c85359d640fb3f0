/* Proves: the progress display's lines say what is true of the run:
 * - a resumed run's ETA counts the time per step over its own steps (the
 *   checkpoint's steps took no time of it): one step taking a second with
 *   three to go shows at least 0:03, where counting from step 1 gave 0:00;
 * - the closing line: "done: N steps" after a whole run, "done: steps K-N of
 *   N" after a resumed one, "stopped at step K of N" when it stopped early
 *   (fresh or resumed), and "done: nothing left to train" without a loss
 *   (never "nan") when a resume had no step left. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/progress.h"
#include "rp_check.h"

/* Everything the display printed into a temporary file, as a string. */
static char g_text[1024];

static const char *printed(FILE *f)
{
    rewind(f);
    size_t n = fread(g_text, 1, sizeof g_text - 1, f);
    g_text[n] = '\0';
    fclose(f);
    return g_text;
}

/* A run of steps first+1 .. steps that closes after step `last`: its
 * closing line. */
static const char *closing(int64_t first, int64_t steps, int64_t last, double loss)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    rp_progress pr;
    rp_progress_start(&pr, f, 0, 1000.0, first, steps);
    rp_progress_finish(&pr, last, loss);
    rp_progress_stop(&pr);
    return printed(f);
}

START_TEST(resumed_eta_counts_this_runs_steps)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    rp_progress pr;
    rp_progress_start(&pr, f, 0, 1000.0, 36, 40);
    usleep(1000000); /* step 37 takes (at least) a second */
    rp_progress_update(&pr, 37, 1.5, 100.0);
    rp_progress_stop(&pr);
    const char *line = printed(f);
    int minutes = -1, seconds = -1;
    const char *eta = strstr(line, "ETA ");
    ck_assert_msg(strstr(line, "step 37/40") && eta && sscanf(eta, "ETA %d:%d", &minutes,
                                                               &seconds) == 2,
                  "the first line of a resumed run: '%s'", line);
    ck_assert_msg(minutes * 60 + seconds >= 3, "3 steps to go at a second each, but '%s'", line);
}
END_TEST

START_TEST(closing_lines)
{
    const char *s = closing(0, 8, 8, 1.25);
    ck_assert_msg(strstr(s, "roundpipe: done: 8 steps in 0:00, final loss 1.2500\n"), "%s", s);
    s = closing(4, 8, 8, 1.0);
    ck_assert_msg(strstr(s, "roundpipe: done: steps 5-8 of 8 in 0:00, final loss 1.0000\n"), "%s",
                  s);
    s = closing(0, 400, 26, 2.5);
    ck_assert_msg(strstr(s, "roundpipe: stopped at step 26 of 400 after 0:00, last loss 2.5000\n"),
                  "%s", s);
    s = closing(4, 60, 10, 3.0);
    ck_assert_msg(strstr(s, "roundpipe: stopped at step 10 of 60 after"), "%s", s);
    s = closing(8, 8, 8, NAN);
    ck_assert_msg(strstr(s, "roundpipe: done: nothing left to train (all 8 steps were done before "
                            "this run)\n") && !strstr(s, "nan"), "%s", s);
}
END_TEST

static Suite *progress_suite(void)
{
    Suite *s = suite_create("progress");
    TCase *tc = tcase_create("lines");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, resumed_eta_counts_this_runs_steps);
    tcase_add_test(tc, closing_lines);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(progress_suite, "serial")
