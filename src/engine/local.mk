librp_la_SOURCES += \
	src/engine/train_options.c src/engine/train_options.h src/engine/train_set.c \
	src/engine/params.c src/engine/params.h \
	src/engine/frozen_base.c src/engine/frozen_base.h \
	src/engine/lora_run.c src/engine/lora_run.h src/engine/lora_merged.c \
	src/engine/lora_checkpoint.c src/engine/lora_checkpoint.h \
	src/engine/progress.c src/engine/progress.h \
	src/engine/arena.c src/engine/arena.h \
	src/engine/arena_numa.c src/engine/arena_numa.h \
	src/engine/engine_impl.h \
	src/engine/protocol.c src/engine/protocol.h src/engine/shared.c src/engine/batch.c \
	src/engine/wait_board.c src/engine/wait_board.h \
	src/engine/executor.c src/engine/executor_impl.h src/engine/stage_buffers.c \
	src/engine/stage_weights.c src/engine/stage_weights.h src/engine/padding.h \
	src/engine/stage_compute.c src/engine/gradient_download.c src/engine/layer_clock.c \
	src/engine/staged_saves.c \
	src/engine/optimizer.c src/engine/optimizer_impl.h src/engine/grad_completion.c \
	src/engine/adamw_share.c src/engine/speculative.c src/engine/speculative.h \
	src/engine/update_gate.c src/engine/update_gate.h src/engine/checkpoint_steps.h \
	src/engine/logger.c \
	src/engine/run.c src/engine/agree.c src/engine/step_loop.c src/engine/run_impl.h \
	src/engine/run_plan.c \
	src/engine/outputs.c \
	src/engine/run_info.c src/engine/run_info.h \
	src/engine/trainer.c src/engine/trainer.h \
	src/engine/executor_summary.c src/engine/executor_summary.h \
	src/engine/memory_model.c src/engine/memory_model.h \
	src/engine/checkpoint_write.c src/engine/checkpoint_resume.c src/engine/checkpoints.h \
	src/engine/checkpoint_contents.c src/engine/checkpoint_contents.h \
	src/engine/eval.c src/engine/eval.h \
	src/engine/router_aux.c src/engine/router_aux.h \
	src/engine/link_groups.c \
	src/engine/nodes.c src/engine/nodes.h src/engine/node_sums.c src/engine/node_sums.h \
	src/engine/node_comm.c src/engine/node_comm_impl.h src/engine/node_failure.c \
	src/engine/node_collect.c src/engine/node_losses.c src/engine/node_report.c \
	src/engine/host_memory.c src/engine/host_memory.h
