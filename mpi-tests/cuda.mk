# tests of the CUDA kernels and the CUDA back end (SKIP without a device)
check_PROGRAMS += mpi-tests/test_cuda_kernels
TESTS += mpi-tests/test_cuda_kernels
mpi_tests_test_cuda_kernels_SOURCES = mpi-tests/test_cuda_kernels.c mpi-tests/cuda_test_util.h
mpi_tests_test_cuda_kernels_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_cuda_kernels_LDADD = $(RP_TEST_LDADD) -lm

check_PROGRAMS += mpi-tests/test_cuda_backend
TESTS += mpi-tests/test_cuda_backend
mpi_tests_test_cuda_backend_SOURCES = mpi-tests/test_cuda_backend.c mpi-tests/cuda_test_util.h
mpi_tests_test_cuda_backend_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_cuda_backend_LDADD = $(RP_TEST_LDADD) -lm

# every op of the CUDA kernel-ops table against the CPU table (the tables'
# own checks run everywhere; SKIP without a device or a CUDA build)
check_PROGRAMS += mpi-tests/test_kernel_ops
TESTS += mpi-tests/test_kernel_ops
mpi_tests_test_kernel_ops_SOURCES = mpi-tests/test_kernel_ops.c mpi-tests/cuda_test_util.h \
	mpi-tests/xent_reference.h
mpi_tests_test_kernel_ops_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_kernel_ops_LDADD = $(RP_TEST_LDADD) $(CUBLAS_LIBS) -lm

# every MoE op of the CUDA table against the CPU table's (SKIP without a
# device or a CUDA build)
check_PROGRAMS += mpi-tests/test_cuda_moe
TESTS += mpi-tests/test_cuda_moe
mpi_tests_test_cuda_moe_SOURCES = mpi-tests/test_cuda_moe.c mpi-tests/cuda_test_util.h
mpi_tests_test_cuda_moe_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_cuda_moe_LDADD = $(RP_TEST_LDADD) $(CUBLAS_LIBS) -lm

# the GPU window's script (bench/gpu/run.sh) ready without a GPU: it parses,
# its fixtures are there, its summary writer and its log comparison work
TESTS += mpi-tests/test_gpu_window.sh
EXTRA_DIST += mpi-tests/test_gpu_window.sh

# the parity cases' paths keep the copy ordering CUDA's default mode needs,
# checked on the CPU (RP_TEST_UNORDERED_DEVICE=1)
TESTS += mpi-tests/test_parity_unordered.sh
EXTRA_DIST += mpi-tests/test_parity_unordered.sh

# and the copy ordering by events RP_ALLOW_UNPROVEN_CUDA=copies needs
# (RP_TEST_EVENT_DEVICE=1), on the cases that move data differently
TESTS += mpi-tests/test_parity_events.sh
EXTRA_DIST += mpi-tests/test_parity_events.sh
