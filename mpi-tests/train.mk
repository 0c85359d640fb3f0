# Training tests: the roundpipe command end to end.
check_PROGRAMS += mpi-tests/golden_compare
mpi_tests_golden_compare_SOURCES = mpi-tests/golden_compare.c
mpi_tests_golden_compare_LDADD = librp.la
TESTS += mpi-tests/test_golden.sh
EXTRA_DIST += mpi-tests/test_golden.sh mpi-tests/testlib.sh mpi-tests/bits_lib.sh
# Qwen3-MoE against transformers (fixtures of tools/make_moe_golden.py):
# routing, the aux loss, the fused layout on load, LoRA on experts (PEFT)
TESTS += mpi-tests/test_golden_moe.sh
EXTRA_DIST += mpi-tests/test_golden_moe.sh mpi-tests/lora_moe_peft_check.py
include mpi-tests/fixtures/golden-moe/files.mk
# gpt-oss against transformers (fixtures of tools/make_gpt_oss_golden.py):
# sinks, windows, YaRN, biased router and experts, the clamped SwiGLU, MXFP4
TESTS += mpi-tests/test_golden_gpt_oss.sh
EXTRA_DIST += mpi-tests/test_golden_gpt_oss.sh mpi-tests/gpt_oss_load_check.py
include mpi-tests/fixtures/golden-gpt-oss/files.mk
# LoRA on an FP8 base against PEFT on its dequantisation (fixtures of
# tools/make_fp8_lora_golden.py), bits over 1-4 ranks, refusals
TESTS += mpi-tests/test_golden_fp8.sh
EXTRA_DIST += mpi-tests/test_golden_fp8.sh tools/make_fp8_lora_golden.py
include mpi-tests/fixtures/golden-fp8/files.mk
# FP8 checkpoints whose unquantised tensors are in odd dtypes, made from those
# (test_golden_fp8, test_memory_model)
EXTRA_DIST += tools/make_fp8_odd_fixtures.py
include mpi-tests/fixtures/fp8-odd/files.mk
# LoRA against PEFT (fixtures of tools/make_lora_golden.py), bits, bad options
TESTS += mpi-tests/test_lora.sh
EXTRA_DIST += mpi-tests/test_lora.sh mpi-tests/lora_peft_check.py mpi-tests/check_runs.py
# --save-merged: each tensor made a piece at a time (peak memory bounded), every element exact
check_PROGRAMS += mpi-tests/test_lora_merged_save
TESTS += mpi-tests/test_lora_merged_save
mpi_tests_test_lora_merged_save_SOURCES = mpi-tests/test_lora_merged_save.c
mpi_tests_test_lora_merged_save_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_lora_merged_save_LDADD = $(RP_TEST_LDADD)
# LoRA checkpoints (adapters only, exact resumes, refusals) and --eval-data
# with adapters (against the merged model and PEFT)
TESTS += mpi-tests/test_lora_checkpoint.sh
EXTRA_DIST += mpi-tests/test_lora_checkpoint.sh mpi-tests/lora_eval_check.py
# the same fixtures on a GPU (--device cuda, bf16); skips without one
TESTS += mpi-tests/test_golden_cuda.sh
EXTRA_DIST += mpi-tests/test_golden_cuda.sh
TESTS += mpi-tests/test_cli.sh
EXTRA_DIST += mpi-tests/test_cli.sh
# roundpipe version --verbose: the report for a bug, each figure against its source
TESTS += mpi-tests/test_version.sh
EXTRA_DIST += mpi-tests/test_version.sh

# every option of --help in man/roundpipe.1
TESTS += mpi-tests/test_man_options.sh
EXTRA_DIST += mpi-tests/test_man_options.sh

check_PROGRAMS += mpi-tests/test_train
TESTS += mpi-tests/test_train
mpi_tests_test_train_SOURCES = mpi-tests/test_train.c
mpi_tests_test_train_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_train_LDADD = $(RP_TEST_LDADD)

TESTS += mpi-tests/test_engine.sh
EXTRA_DIST += mpi-tests/test_engine.sh

# --recompute none, auto, stage and layer: the same bits
TESTS += mpi-tests/test_recompute_bits.sh
EXTRA_DIST += mpi-tests/test_recompute_bits.sh

# RP_TEST_STEP_BOUNDARY_BEFORE (issue 33's before, for the GPU window): the same bits
TESTS += mpi-tests/test_step_boundary_before.sh
EXTRA_DIST += mpi-tests/test_step_boundary_before.sh

# --speculative-update on and off: the same bits, hits, misses and both
TESTS += mpi-tests/test_speculative_update.sh
EXTRA_DIST += mpi-tests/test_speculative_update.sh

# the MLP's chunks of token tiles (--mlp-chunk-tokens): the same bits on 1-4 ranks
TESTS += mpi-tests/test_mlp_chunks.sh
EXTRA_DIST += mpi-tests/test_mlp_chunks.sh

# the dense MLP's gate and up as one GEMM (RP_TEST_FUSED_GATE_UP=1): within
# the golden bound, the same bits on 1-3 ranks, in chunks, kept on executors
TESTS += mpi-tests/test_fused_gate_up.sh
EXTRA_DIST += mpi-tests/test_fused_gate_up.sh

# the same bits on 1-4 ranks over odd shapes, on every OpenBLAS build found
TESTS += mpi-tests/test_rank_bits.sh
EXTRA_DIST += mpi-tests/test_rank_bits.sh tools/blas-builds.sh
# a few fixed draws of tools/random-configs.sh (its drawing shared in
# random_configs_lib.sh): the same bits on 1 rank and on 2-4
TESTS += mpi-tests/test_random_configs.sh
EXTRA_DIST += mpi-tests/test_random_configs.sh mpi-tests/random_configs_lib.sh

TESTS += mpi-tests/test_api.sh
EXTRA_DIST += mpi-tests/test_api.sh
# make install into a prefix; the API example built from roundpipe.pc runs
TESTS += mpi-tests/test_install.sh
EXTRA_DIST += mpi-tests/test_install.sh

# The Chrome trace (no overlapping slices per track, a marker per step) and
# the metrics' time and run description.
check_PROGRAMS += mpi-tests/trace_check
mpi_tests_trace_check_SOURCES = mpi-tests/trace_check.c
mpi_tests_trace_check_CFLAGS = $(AM_CFLAGS) $(JSON_CFLAGS)
mpi_tests_trace_check_LDADD = $(JSON_LIBS) -lm
TESTS += mpi-tests/test_trace.sh
EXTRA_DIST += mpi-tests/test_trace.sh
# where a traced run's steps went (tools/trace-breakdown.py)
TESTS += mpi-tests/test_trace_breakdown.sh
EXTRA_DIST += mpi-tests/test_trace_breakdown.sh tools/trace-breakdown.py tools/rp_trace.py

TESTS += mpi-tests/test_progress.sh
EXTRA_DIST += mpi-tests/test_progress.sh
# the progress lines' ETA after a resume and their closing line (stopped, nothing left)
check_PROGRAMS += mpi-tests/test_progress_lines
TESTS += mpi-tests/test_progress_lines
mpi_tests_test_progress_lines_SOURCES = mpi-tests/test_progress_lines.c
mpi_tests_test_progress_lines_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_progress_lines_LDADD = $(RP_TEST_LDADD)

# The Slurm examples: they parse, and the single-node one trains under mpirun.
TESTS += mpi-tests/test_slurm.sh
EXTRA_DIST += mpi-tests/test_slurm.sh

# the shared library exports only the public API
TESTS += mpi-tests/test_exports.sh
EXTRA_DIST += mpi-tests/test_exports.sh

# output paths, the all-or-nothing save, interrupts and stalled ranks (issue 19)
TESTS += mpi-tests/test_outputs.sh
EXTRA_DIST += mpi-tests/test_outputs.sh
TESTS += mpi-tests/test_memory_model.sh
TESTS += mpi-tests/test_grad_dtype.sh mpi-tests/test_shuffle.sh mpi-tests/test_save_companions.sh
# the residual stream in bf16 (--activation-dtype): bits on any plan and rank count (issue 34)
TESTS += mpi-tests/test_activation_dtype.sh
EXTRA_DIST += mpi-tests/test_activation_dtype.sh
# roundpipe-prepare and roundpipe-plot (Python; skipped without numpy and
# transformers, or matplotlib)
TESTS += mpi-tests/test_prepare.sh mpi-tests/test_plot.sh
EXTRA_DIST += mpi-tests/test_prepare.sh mpi-tests/test_plot.sh \
	examples/images/default-curves.png examples/images/default-timeline.png \
	examples/images/recipe-curves.png examples/recipe.sh
TESTS += mpi-tests/test_checkpoint.sh
TESTS += mpi-tests/test_checkpoint_kill.sh
EXTRA_DIST += mpi-tests/test_checkpoint_kill.sh
TESTS += mpi-tests/test_checkpoint_lag.sh
EXTRA_DIST += mpi-tests/test_checkpoint_lag.sh
# checkpoints that never lose a run nor a user's files (issue 30, part 6)
TESTS += mpi-tests/test_checkpoint_safety.sh
EXTRA_DIST += mpi-tests/test_checkpoint_safety.sh
# a resumed run saves what the uninterrupted run saves (tokenizer, dtype, rotation)
TESTS += mpi-tests/test_checkpoint_save.sh
EXTRA_DIST += mpi-tests/test_checkpoint_save.sh
TESTS += mpi-tests/test_documents.sh mpi-tests/test_eval.sh
EXTRA_DIST += mpi-tests/test_documents.sh mpi-tests/test_eval.sh
EXTRA_DIST += mpi-tests/test_checkpoint.sh mpi-tests/resume_lib.sh
EXTRA_DIST += mpi-tests/test_memory_model.sh mpi-tests/test_grad_dtype.sh mpi-tests/test_shuffle.sh \
	mpi-tests/test_save_companions.sh
# several nodes (--ranks-per-node): bit-identical to one node of as many pipelines
TESTS += mpi-tests/test_nodes.sh
EXTRA_DIST += mpi-tests/test_nodes.sh
check_PROGRAMS += mpi-tests/test_nodes_split
TESTS += mpi-tests/test_nodes_split
mpi_tests_test_nodes_split_SOURCES = mpi-tests/test_nodes_split.c
mpi_tests_test_nodes_split_CFLAGS = $(RP_TEST_CFLAGS)
mpi_tests_test_nodes_split_LDADD = $(RP_TEST_LDADD)
