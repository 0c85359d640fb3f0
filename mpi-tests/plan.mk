# tests of src/plan (serial: the planner needs no MPI)
check_PROGRAMS += mpi-tests/test_plan_partition
TESTS += mpi-tests/test_plan_partition
mpi_tests_test_plan_partition_SOURCES = mpi-tests/test_plan_partition.c
mpi_tests_test_plan_partition_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_plan_partition_LDADD = $(RP_TEST_LDADD)

# the RoundPipe paper's per-layer times (read by the CLI test and by hand)
EXTRA_DIST += bench/paper/qwen3-1.7b.txt bench/paper/llama3.1-8b.txt \
	bench/paper/qwen3-32b.txt bench/paper/qwen3-235b-a22b-lora.txt
