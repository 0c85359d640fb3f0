# tests of the CUDA attention and cross-entropy kernels (exit 77 without a GPU)
check_PROGRAMS += mpi-tests/test_cuda_attention
TESTS += mpi-tests/test_cuda_attention
mpi_tests_test_cuda_attention_SOURCES = mpi-tests/test_cuda_attention.c
mpi_tests_test_cuda_attention_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_cuda_attention_LDADD = $(RP_TEST_LDADD)

check_PROGRAMS += mpi-tests/test_cuda_xent
TESTS += mpi-tests/test_cuda_xent
mpi_tests_test_cuda_xent_SOURCES = mpi-tests/test_cuda_xent.c mpi-tests/xent_reference.h
mpi_tests_test_cuda_xent_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_cuda_xent_LDADD = $(RP_TEST_LDADD)

# cuDNN's fused flash attention through the ops table (exit 77 without a
# GPU or without a loadable cuDNN 9)
check_PROGRAMS += mpi-tests/test_cuda_cudnn_attention
TESTS += mpi-tests/test_cuda_cudnn_attention
mpi_tests_test_cuda_cudnn_attention_SOURCES = mpi-tests/test_cuda_cudnn_attention.c
mpi_tests_test_cuda_cudnn_attention_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_cuda_cudnn_attention_LDADD = $(RP_TEST_LDADD) $(CUBLAS_LIBS)

# how cuDNN attention's plans are built (the ways a documents graph is
# written, tried in turn; refusals; the cache), over a recording stand-in
# for cuDNN's backend API: runs on the CPU in a build with cuDNN's headers
check_PROGRAMS += mpi-tests/test_cudnn_graphs
TESTS += mpi-tests/test_cudnn_graphs
mpi_tests_test_cudnn_graphs_SOURCES = mpi-tests/test_cudnn_graphs.c
mpi_tests_test_cudnn_graphs_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_cudnn_graphs_LDADD = $(RP_TEST_LDADD)
