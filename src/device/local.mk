librp_la_SOURCES += src/device/device.h src/device/probe.c \
	src/device/backend.h src/device/backend_impl.h src/device/backend.c src/device/cpu.c \
	src/device/cpu_events.c src/device/op_counter.h src/device/op_counter.c
