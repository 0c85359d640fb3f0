# sources of src/store (and, by agreement with the lead, the engine's event
# counters and transfer engine, which are built on the store)
librp_la_SOURCES += \
	src/store/layout.c src/store/layout.h \
	src/store/shm.c src/store/shm.h \
	src/store/numa.c src/store/numa.h \
	src/store/bind.c src/store/bind.h \
	src/store/topology.c src/store/topology.h \
	src/store/store.c src/store/store.h
librp_la_SOURCES += \
	src/engine/event.c src/engine/event.h \
	src/engine/transfer.c src/engine/transfer.h
