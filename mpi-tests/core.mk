check_PROGRAMS += mpi-tests/test_core
TESTS += mpi-tests/test_core
mpi_tests_test_core_SOURCES = mpi-tests/test_core.c
mpi_tests_test_core_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_core_LDADD = $(RP_TEST_LDADD)
