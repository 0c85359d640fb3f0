# tests of src/plan (serial: the planner needs no MPI)
check_PROGRAMS += mpi-tests/test_plan_partition
TESTS += mpi-tests/test_plan_partition
mpi_tests_test_plan_partition_SOURCES = mpi-tests/test_plan_partition.c mpi-tests/plan_random.h
mpi_tests_test_plan_partition_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_plan_partition_LDADD = $(RP_TEST_LDADD)

# the RoundPipe paper's per-layer times (read by the CLI test and by hand)
EXTRA_DIST += bench/paper/qwen3-1.7b.txt bench/paper/llama3.1-8b.txt \
	bench/paper/qwen3-32b.txt bench/paper/qwen3-235b-a22b-lora.txt
# the H100's measured layer times of the 1.7B shape (read by the CLI test)
EXTRA_DIST += bench/gpu/h100-qwen3-1.7b-layers.txt bench/gpu/h200-qwen3-1.7b-layers.txt

check_PROGRAMS += mpi-tests/test_plan_simulate
TESTS += mpi-tests/test_plan_simulate
mpi_tests_test_plan_simulate_SOURCES = mpi-tests/test_plan_simulate.c
mpi_tests_test_plan_simulate_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_plan_simulate_LDADD = $(RP_TEST_LDADD)

check_PROGRAMS += mpi-tests/test_plan_cost
TESTS += mpi-tests/test_plan_cost
mpi_tests_test_plan_cost_SOURCES = mpi-tests/test_plan_cost.c
mpi_tests_test_plan_cost_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_plan_cost_LDADD = $(RP_TEST_LDADD)

# the plan/simulate commands, called as functions
check_PROGRAMS += mpi-tests/test_plan_cli
TESTS += mpi-tests/test_plan_cli
mpi_tests_test_plan_cli_SOURCES = mpi-tests/test_plan_cli.c $(RP_CLI_PLAN_SRC)
mpi_tests_test_plan_cli_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_plan_cli_LDADD = $(RP_TEST_LDADD)
# the PCIe topology as link groups, `roundpipe topology`, plan --topology (issue 18)
TESTS += mpi-tests/test_topology.sh
EXTRA_DIST += mpi-tests/test_topology.sh tools/make_topology_fixtures.py \
	bench/paper/simulate-topology.sh bench/numa/activation-placement.sh \
	mpi-tests/fixtures/topology/8gpu-4switch.xml mpi-tests/fixtures/topology/8gpu-2switch.xml \
	mpi-tests/fixtures/topology/4gpu-1switch.xml mpi-tests/fixtures/topology/4gpu-rootports.xml \
	mpi-tests/fixtures/topology/4gpu-1switch-x8.xml \
	mpi-tests/fixtures/topology/partial-nobridge.xml \
	mpi-tests/fixtures/topology/partial-nobusid.xml mpi-tests/fixtures/topology/noGPU.xml \
	mpi-tests/fixtures/topology/notxml.xml
# plan's verdict (fits or not, with the reserve), its host-memory choice, --pipelines, --recompute
TESTS += mpi-tests/test_plan_verdict.sh
EXTRA_DIST += mpi-tests/test_plan_verdict.sh
# plan --seq-len max: the longest length and what bounds it; train runs it
TESTS += mpi-tests/test_plan_longest.sh
EXTRA_DIST += mpi-tests/test_plan_longest.sh bench/paper/max-seq.sh \
	bench/paper/llama3.1-8b-config.json bench/paper/qwen3-32b-config.json \
	mpi-tests/fixtures/wide/config.json
# the partitioner's memo of evaluated plans
check_PROGRAMS += mpi-tests/test_plan_memo
TESTS += mpi-tests/test_plan_memo
mpi_tests_test_plan_memo_SOURCES = mpi-tests/test_plan_memo.c
mpi_tests_test_plan_memo_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_plan_memo_LDADD = $(RP_TEST_LDADD)
# what a caller lends the partitioner: progress reports, the widths searched
check_PROGRAMS += mpi-tests/test_plan_search
TESTS += mpi-tests/test_plan_search
mpi_tests_test_plan_search_SOURCES = mpi-tests/test_plan_search.c mpi-tests/plan_random.h
mpi_tests_test_plan_search_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_plan_search_LDADD = $(RP_TEST_LDADD)
