# Test harness: every test runs through mpi-tests/run-test.sh, which reads the
# rank counts the test declares. Shell tests (*.sh) print their own
# RP-CHECK line.
check_LTLIBRARIES += mpi-tests/librpcheck.la
mpi_tests_librpcheck_la_SOURCES = mpi-tests/rp_check.c mpi-tests/rp_check.h
mpi_tests_librpcheck_la_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
mpi_tests_librpcheck_la_LIBADD = $(CHECK_LIBS)

# Link line shared by every Check test.
RP_TEST_LDADD = mpi-tests/librpcheck.la librp.la $(CHECK_LIBS)
RP_TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/mpi-tests

TEST_EXTENSIONS = .sh
LOG_COMPILER = $(SHELL) $(top_srcdir)/mpi-tests/run-test.sh
SH_LOG_COMPILER = $(SHELL)
AM_TESTS_ENVIRONMENT = \
	MPIRUN='$(MPIRUN)'; export MPIRUN; \
	RP_BUILDDIR='$(abs_top_builddir)'; export RP_BUILDDIR; \
	RP_SRCDIR='$(abs_top_srcdir)'; export RP_SRCDIR; \
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1}; export OMP_NUM_THREADS;
EXTRA_DIST += mpi-tests/run-test.sh

# run-all.sh's last lines: the skipped tests named, "N passed, N failed, N skipped"
TESTS += mpi-tests/test_suite_summary.sh
EXTRA_DIST += mpi-tests/test_suite_summary.sh mpi-tests/suite-summary.sh mpi-tests/run-all.sh
