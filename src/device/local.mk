librp_la_SOURCES += src/device/device.h src/device/probe.c \
	src/device/backend.h src/device/cpu.c
