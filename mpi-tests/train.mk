# Training tests: the roundpipe command end to end.
check_PROGRAMS += mpi-tests/golden_compare
mpi_tests_golden_compare_SOURCES = mpi-tests/golden_compare.c
mpi_tests_golden_compare_LDADD = librp.la
TESTS += mpi-tests/test_golden.sh
EXTRA_DIST += mpi-tests/test_golden.sh mpi-tests/testlib.sh
TESTS += mpi-tests/test_cli.sh
EXTRA_DIST += mpi-tests/test_cli.sh

check_PROGRAMS += mpi-tests/test_train
TESTS += mpi-tests/test_train
mpi_tests_test_train_SOURCES = mpi-tests/test_train.c
mpi_tests_test_train_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_train_LDADD = $(RP_TEST_LDADD)

TESTS += mpi-tests/test_engine.sh
EXTRA_DIST += mpi-tests/test_engine.sh

TESTS += mpi-tests/test_api.sh
EXTRA_DIST += mpi-tests/test_api.sh

# output paths, the all-or-nothing save, interrupts and stalled ranks (issue 19)
TESTS += mpi-tests/test_outputs.sh
EXTRA_DIST += mpi-tests/test_outputs.sh
