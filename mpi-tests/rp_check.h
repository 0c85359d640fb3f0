/* Shared main() for Check suites.
 *
 * Every test declares its rank counts next to it:
 *     RP_TEST_MAIN(suite_fn, "1 2 4")   -- an MPI test, run by the runner at
 *                                          each listed rank count
 *     RP_TEST_MAIN(suite_fn, "serial")  -- a plain test, no mpirun
 * `prog --rp-test-ranks` prints the declaration (mpi-tests/run-test.sh reads
 * it). MPI tests run Check with fork mode off (forking after MPI_Init is not
 * allowed). Rank 0 prints one summary line "RP-CHECK: passed=P failed=F"
 * that .ci/run adds up. A test that needs absent hardware exits 77 (SKIP). */
#ifndef RP_CHECK_H
#define RP_CHECK_H

#include <check.h>

#define RP_TEST_SKIP 77

int rp_check_main(int argc, char **argv, Suite *(*make_suite)(void), const char *ranks);

#define RP_TEST_MAIN(make_suite, ranks) \
    int main(int argc, char **argv) { return rp_check_main(argc, argv, make_suite, ranks); }

/* Directory holding test data (fixtures), from $srcdir or the build tree. */
const char *rp_test_srcdir(void);

/* A fresh temporary directory for this process (removed by the caller). */
const char *rp_test_tmpdir(void);

/* Teardown fixture: empty rp_test_tmpdir() after each test, and remove it
 * when the test ran in a forked child (with CK_FORK=no the next test of the
 * same process reuses it). */
void rp_test_tmpdir_clean(void);

/* kB of a line of /proc/self/status ("VmRSS", "VmHWM"), -1 when absent. */
long rp_test_status_kb(const char *key);

/* The process's peak resident size from here: reset to what is resident
 * now (Linux 4.0's clear_refs 5); where that is refused the peak so far
 * must be what is resident, or a later growth cannot be told (a failed
 * check). Returns what is resident, kB; VmHWM minus it is the growth. */
long rp_test_peak_reset(void);

#endif
