librp_la_SOURCES += \
	src/core/error.c src/core/error.h src/core/interrupt.c \
	src/core/dtype.c src/core/dtype.h src/core/fp8.c src/core/fp8.h src/core/cpu_clones.h \
	src/core/rng.c src/core/rng.h src/core/philox.h \
	src/core/log.c src/core/log.h \
	src/core/layer_kind.h \
	src/core/args.c src/core/args.h \
	src/core/unproven.c src/core/unproven.h \
	src/core/pool.c src/core/pool.h src/core/clock.h src/core/mpi_wait.h \
	src/core/slow_work.c src/core/slow_work.h
