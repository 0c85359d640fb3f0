# sources of src/plan: cost model, layer-times files, plans, job order,
# simulator, GPipe/1F1B baselines, partitioner and what a caller lends it
librp_la_SOURCES += \
	src/plan/cost.c src/plan/cost.h \
	src/plan/layers_file.c src/plan/layers_file.h \
	src/plan/plan.c src/plan/plan.h \
	src/plan/keep.c src/plan/keep.h \
	src/plan/schedule.c src/plan/schedule.h \
	src/plan/machine.c src/plan/machine.h \
	src/plan/simulate.c src/plan/simulate.h \
	src/plan/sim_nodes.c src/plan/sim_nodes.h src/plan/sim_state.h \
	src/plan/baseline.c src/plan/baseline.h \
	src/plan/partition.c src/plan/partition.h \
	src/plan/evaluate.c src/plan/evaluate.h \
	src/plan/plan_memo.c src/plan/plan_memo.h \
	src/plan/search.c src/plan/search.h \
	src/plan/deal.c src/plan/deal.h

# `roundpipe plan` and `roundpipe simulate`; the roundpipe program lists these.
# (Not named *_SOURCES: automake -Wall -Werror rejects a _SOURCES variable
# that belongs to no program.)
RP_CLI_PLAN_SRC = src/cli/cmd_plan.c src/cli/cmd_plan.h src/cli/plan_choice.c src/cli/plan_choice.h src/cli/cmd_simulate.c \
	src/cli/plan_opts.c src/cli/plan_opts.h src/cli/plan_longest.c src/cli/plan_longest.h \
	src/cli/plan_progress.c src/cli/plan_progress.h
