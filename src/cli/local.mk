

bin_PROGRAMS += src/roundpipe
src_roundpipe_SOURCES = src/cli/main.c src/cli/commands.h src/cli/cmd_train.c \
	src/cli/report.c src/cli/report.h \
	src/cli/cmd_topology.c src/cli/cmd_version.c $(RP_CLI_PLAN_SRC)
src_roundpipe_LDADD = librp.la
