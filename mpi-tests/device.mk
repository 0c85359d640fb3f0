check_PROGRAMS += mpi-tests/test_device_probe
TESTS += mpi-tests/test_device_probe
mpi_tests_test_device_probe_SOURCES = mpi-tests/test_device_probe.c
mpi_tests_test_device_probe_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_device_probe_LDADD = $(RP_TEST_LDADD)
# the shell tests' answer to "can --device cuda run here?" (testlib.sh)
check_PROGRAMS += mpi-tests/cuda_usable
mpi_tests_cuda_usable_SOURCES = mpi-tests/cuda_usable.c
mpi_tests_cuda_usable_LDADD = librp.la
# the attention choice and cuDNN's run-time loader (no GPU needed)
check_PROGRAMS += mpi-tests/test_attention_choice
TESTS += mpi-tests/test_attention_choice
mpi_tests_test_attention_choice_SOURCES = mpi-tests/test_attention_choice.c
mpi_tests_test_attention_choice_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_attention_choice_LDADD = $(RP_TEST_LDADD)
if HAVE_CUDA
# cuBLAS opened at run time, not linked (no GPU needed)
check_PROGRAMS += mpi-tests/test_cublas_api
TESTS += mpi-tests/test_cublas_api
mpi_tests_test_cublas_api_SOURCES = mpi-tests/test_cublas_api.c
mpi_tests_test_cublas_api_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_cublas_api_LDADD = $(RP_TEST_LDADD)
endif
EXTRA_DIST += mpi-tests/test_cublas_api.c
