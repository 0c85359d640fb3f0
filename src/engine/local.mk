librp_la_SOURCES += \
	src/engine/train_options.c src/engine/train_options.h \
	src/engine/params.c src/engine/params.h \
	src/engine/dataset.c src/engine/dataset.h \
	src/engine/step.c src/engine/step.h \
	src/engine/progress.c src/engine/progress.h \
	src/engine/trainer.c src/engine/trainer.h
