check_PROGRAMS += mpi-tests/test_core
TESTS += mpi-tests/test_core
mpi_tests_test_core_SOURCES = mpi-tests/test_core.c
mpi_tests_test_core_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_core_LDADD = $(RP_TEST_LDADD)

# no call circle between the library's source files (tools/call-circles.py)
TESTS += mpi-tests/test_layering.sh
EXTRA_DIST += mpi-tests/test_layering.sh tools/call-circles.py

# worker threads that wait without spinning (the planner's)
check_PROGRAMS += mpi-tests/test_core_pool
TESTS += mpi-tests/test_core_pool
mpi_tests_test_core_pool_SOURCES = mpi-tests/test_core_pool.c
mpi_tests_test_core_pool_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_core_pool_LDADD = $(RP_TEST_LDADD)
