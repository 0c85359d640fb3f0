# Training tests: the roundpipe command end to end.
check_PROGRAMS += mpi-tests/golden_compare
mpi_tests_golden_compare_SOURCES = mpi-tests/golden_compare.c
mpi_tests_golden_compare_LDADD = librp.la
TESTS += mpi-tests/test_golden.sh
EXTRA_DIST += mpi-tests/test_golden.sh
