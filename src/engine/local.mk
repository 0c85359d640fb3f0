librp_la_SOURCES += \
	src/engine/train_options.c src/engine/train_options.h
