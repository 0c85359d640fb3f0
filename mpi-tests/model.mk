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

check_PROGRAMS += mpi-tests/test_kernels_attention
TESTS += mpi-tests/test_kernels_attention
mpi_tests_test_kernels_attention_SOURCES = mpi-tests/test_kernels_attention.c
mpi_tests_test_kernels_attention_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_kernels_attention_LDADD = $(RP_TEST_LDADD)
# the vector exp against expf over all 2^32 floats (serial, OpenMP threads)
check_PROGRAMS += mpi-tests/test_expf_vector
TESTS += mpi-tests/test_expf_vector
mpi_tests_test_expf_vector_SOURCES = mpi-tests/test_expf_vector.c
mpi_tests_test_expf_vector_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_expf_vector_LDADD = $(RP_TEST_LDADD) -lm
# gpt-oss's attention sinks, sliding windows and clamped SwiGLU (serial)
check_PROGRAMS += mpi-tests/test_kernels_gpt_oss
TESTS += mpi-tests/test_kernels_gpt_oss
mpi_tests_test_kernels_gpt_oss_SOURCES = mpi-tests/test_kernels_gpt_oss.c
mpi_tests_test_kernels_gpt_oss_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_kernels_gpt_oss_LDADD = $(RP_TEST_LDADD) -lm

check_PROGRAMS += mpi-tests/test_kernels_norm_rope
TESTS += mpi-tests/test_kernels_norm_rope
mpi_tests_test_kernels_norm_rope_SOURCES = mpi-tests/test_kernels_norm_rope.c mpi-tests/rope_yarn_fixture.h
mpi_tests_test_kernels_norm_rope_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_kernels_norm_rope_LDADD = $(RP_TEST_LDADD) -lm
EXTRA_DIST += tools/gen_yarn_fixture.py

check_PROGRAMS += mpi-tests/test_kernels_linear
TESTS += mpi-tests/test_kernels_linear
mpi_tests_test_kernels_linear_SOURCES = mpi-tests/test_kernels_linear.c
mpi_tests_test_kernels_linear_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_kernels_linear_LDADD = $(RP_TEST_LDADD) -lm

check_PROGRAMS += mpi-tests/test_kernels_lora
TESTS += mpi-tests/test_kernels_lora
mpi_tests_test_kernels_lora_SOURCES = mpi-tests/test_kernels_lora.c
mpi_tests_test_kernels_lora_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_kernels_lora_LDADD = $(RP_TEST_LDADD) -lm

check_PROGRAMS += mpi-tests/test_kernels_moe
TESTS += mpi-tests/test_kernels_moe
mpi_tests_test_kernels_moe_SOURCES = mpi-tests/test_kernels_moe.c
mpi_tests_test_kernels_moe_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_kernels_moe_LDADD = $(RP_TEST_LDADD) -lm

check_PROGRAMS += mpi-tests/test_model_hf
TESTS += mpi-tests/test_model_hf
mpi_tests_test_model_hf_SOURCES = mpi-tests/test_model_hf.c mpi-tests/model_hf_fixture.h
mpi_tests_test_model_hf_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_model_hf_LDADD = $(RP_TEST_LDADD)
EXTRA_DIST += mpi-tests/gen_model_hf_fixture.py

check_PROGRAMS += mpi-tests/test_model_layout
TESTS += mpi-tests/test_model_layout
mpi_tests_test_model_layout_SOURCES = mpi-tests/test_model_layout.c
mpi_tests_test_model_layout_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_model_layout_LDADD = $(RP_TEST_LDADD)
# bench/bench_block's op-by-op breakdown of a block (the kernels' probe)
TESTS += mpi-tests/test_bench_block.sh
EXTRA_DIST += mpi-tests/test_bench_block.sh
