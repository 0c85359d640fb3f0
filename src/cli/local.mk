librp_la_SOURCES += src/cli/args.c src/cli/args.h
