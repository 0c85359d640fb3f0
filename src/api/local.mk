librp_la_SOURCES += src/api/train.c
