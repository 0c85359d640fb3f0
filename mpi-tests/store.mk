# tests of store (host store, events, transfer engine)
check_PROGRAMS += mpi-tests/test_store_layout
TESTS += mpi-tests/test_store_layout
mpi_tests_test_store_layout_SOURCES = mpi-tests/test_store_layout.c
mpi_tests_test_store_layout_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_store_layout_LDADD = $(RP_TEST_LDADD)

check_PROGRAMS += mpi-tests/test_store_topology
TESTS += mpi-tests/test_store_topology
mpi_tests_test_store_topology_SOURCES = mpi-tests/test_store_topology.c
mpi_tests_test_store_topology_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_store_topology_LDADD = $(RP_TEST_LDADD)
EXTRA_DIST += mpi-tests/fixtures/store/two-packages-3gpu.xml

check_PROGRAMS += mpi-tests/test_store_shm
TESTS += mpi-tests/test_store_shm
mpi_tests_test_store_shm_SOURCES = mpi-tests/test_store_shm.c
mpi_tests_test_store_shm_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_store_shm_LDADD = $(RP_TEST_LDADD)

check_PROGRAMS += mpi-tests/test_event_pipeline
TESTS += mpi-tests/test_event_pipeline
mpi_tests_test_event_pipeline_SOURCES = mpi-tests/test_event_pipeline.c
mpi_tests_test_event_pipeline_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_event_pipeline_LDADD = $(RP_TEST_LDADD)

check_PROGRAMS += mpi-tests/test_event_deadlock
TESTS += mpi-tests/test_event_deadlock
mpi_tests_test_event_deadlock_SOURCES = mpi-tests/test_event_deadlock.c
mpi_tests_test_event_deadlock_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_event_deadlock_LDADD = $(RP_TEST_LDADD)

check_PROGRAMS += mpi-tests/test_transfer_order
TESTS += mpi-tests/test_transfer_order
mpi_tests_test_transfer_order_SOURCES = mpi-tests/test_transfer_order.c
mpi_tests_test_transfer_order_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_transfer_order_LDADD = $(RP_TEST_LDADD)

check_PROGRAMS += mpi-tests/test_transfer_bytes
TESTS += mpi-tests/test_transfer_bytes
mpi_tests_test_transfer_bytes_SOURCES = mpi-tests/test_transfer_bytes.c
mpi_tests_test_transfer_bytes_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_transfer_bytes_LDADD = $(RP_TEST_LDADD)

check_PROGRAMS += mpi-tests/event_deadlock_prog
mpi_tests_event_deadlock_prog_SOURCES = mpi-tests/event_deadlock_prog.c
mpi_tests_event_deadlock_prog_LDADD = librp.la
TESTS += mpi-tests/test_event_deadlock_exit.sh
EXTRA_DIST += mpi-tests/test_event_deadlock_exit.sh
# transfer engines of one link group arbitrate across executors (issue 18)
check_PROGRAMS += mpi-tests/test_transfer_link
TESTS += mpi-tests/test_transfer_link
mpi_tests_test_transfer_link_SOURCES = mpi-tests/test_transfer_link.c
mpi_tests_test_transfer_link_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_transfer_link_LDADD = $(RP_TEST_LDADD)
# the transfer engine over an asynchronous back end (issue 38)
check_PROGRAMS += mpi-tests/test_transfer_async
TESTS += mpi-tests/test_transfer_async
mpi_tests_test_transfer_async_SOURCES = mpi-tests/test_transfer_async.c
mpi_tests_test_transfer_async_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_transfer_async_LDADD = $(RP_TEST_LDADD)
# the CPU device's test modes see the races they check (RP_TEST_EVENT_DEVICE,
# RP_TEST_UNORDERED_DEVICE; issue 38)
check_PROGRAMS += mpi-tests/test_event_device
TESTS += mpi-tests/test_event_device
mpi_tests_test_event_device_SOURCES = mpi-tests/test_event_device.c
mpi_tests_test_event_device_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_event_device_LDADD = $(RP_TEST_LDADD) -lm
