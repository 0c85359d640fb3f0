# tests of io: safetensors, config.json, .npy (serial; bad files are made at run time)
check_PROGRAMS += mpi-tests/test_io_safetensors mpi-tests/test_io_config mpi-tests/test_io_npy
TESTS += mpi-tests/test_io_safetensors mpi-tests/test_io_config mpi-tests/test_io_npy
mpi_tests_test_io_safetensors_SOURCES = mpi-tests/test_io_safetensors.c
mpi_tests_test_io_safetensors_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_io_safetensors_LDADD = $(RP_TEST_LDADD)
mpi_tests_test_io_config_SOURCES = mpi-tests/test_io_config.c
mpi_tests_test_io_config_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_io_config_LDADD = $(RP_TEST_LDADD)
mpi_tests_test_io_npy_SOURCES = mpi-tests/test_io_npy.c
mpi_tests_test_io_npy_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_io_npy_LDADD = $(RP_TEST_LDADD)
# the file set that saves a model all or nothing (serial)
check_PROGRAMS += mpi-tests/test_io_file_set
TESTS += mpi-tests/test_io_file_set
mpi_tests_test_io_file_set_SOURCES = mpi-tests/test_io_file_set.c
mpi_tests_test_io_file_set_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_io_file_set_LDADD = $(RP_TEST_LDADD)
# the training contract's sample order, with and without --shuffle (serial)
check_PROGRAMS += mpi-tests/test_io_dataset
TESTS += mpi-tests/test_io_dataset
mpi_tests_test_io_dataset_SOURCES = mpi-tests/test_io_dataset.c
mpi_tests_test_io_dataset_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_io_dataset_LDADD = $(RP_TEST_LDADD)
# PEFT LoRA adapter directories (io/peft.h), on the parity fixtures' adapters
check_PROGRAMS += mpi-tests/test_io_peft
TESTS += mpi-tests/test_io_peft
mpi_tests_test_io_peft_SOURCES = mpi-tests/test_io_peft.c
mpi_tests_test_io_peft_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_io_peft_LDADD = $(RP_TEST_LDADD)
# the Hub's gpt-oss-20b config.json (test_io_config, test_cli)
EXTRA_DIST += mpi-tests/fixtures/gpt-oss/gpt-oss-20b-config.json
# gpt-oss's MXFP4 experts decoded as transformers does (serial; fixture of tools/gen_mxfp4_fixture.py)
check_PROGRAMS += mpi-tests/test_io_mxfp4
TESTS += mpi-tests/test_io_mxfp4
mpi_tests_test_io_mxfp4_SOURCES = mpi-tests/test_io_mxfp4.c
mpi_tests_test_io_mxfp4_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_io_mxfp4_LDADD = $(RP_TEST_LDADD) -lm
EXTRA_DIST += mpi-tests/fixtures/gpt-oss/mxfp4/model.safetensors tools/gen_mxfp4_fixture.py
# gpt-oss's save: the fused experts written a piece at a time, its peak memory bounded (serial)
check_PROGRAMS += mpi-tests/test_io_gpt_oss_save
TESTS += mpi-tests/test_io_gpt_oss_save
mpi_tests_test_io_gpt_oss_save_SOURCES = mpi-tests/test_io_gpt_oss_save.c
mpi_tests_test_io_gpt_oss_save_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_io_gpt_oss_save_LDADD = $(RP_TEST_LDADD) -lm
# FP8 e4m3 weights with block scales: decoding, dequantising, and the files' bad input (serial)
check_PROGRAMS += mpi-tests/test_io_fp8
TESTS += mpi-tests/test_io_fp8
mpi_tests_test_io_fp8_SOURCES = mpi-tests/test_io_fp8.c
mpi_tests_test_io_fp8_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_io_fp8_LDADD = $(RP_TEST_LDADD) -lm
# every reader of a user file fed deterministic mutations of the fixtures: no crash, hang or
# nameless refusal (fuzz_readers.c; long campaigns on a sanitizer build, a few hundred inputs
# per reader in the suite)
check_PROGRAMS += mpi-tests/fuzz_readers
mpi_tests_fuzz_readers_SOURCES = mpi-tests/fuzz_readers.c
mpi_tests_fuzz_readers_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_fuzz_readers_LDADD = $(RP_TEST_LDADD)
TESTS += mpi-tests/test_fuzz_readers.sh
EXTRA_DIST += mpi-tests/test_fuzz_readers.sh
