# tests of model: CPU kernels and layer math
check_PROGRAMS += mpi-tests/test_model_block
TESTS += mpi-tests/test_model_block
mpi_tests_test_model_block_SOURCES = mpi-tests/test_model_block.c
mpi_tests_test_model_block_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_model_block_LDADD = $(RP_TEST_LDADD)

check_PROGRAMS += mpi-tests/test_model_embed_head
TESTS += mpi-tests/test_model_embed_head
mpi_tests_test_model_embed_head_SOURCES = mpi-tests/test_model_embed_head.c
mpi_tests_test_model_embed_head_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_model_embed_head_LDADD = $(RP_TEST_LDADD)
