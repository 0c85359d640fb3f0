# sources of src/model: parameter layout and the layer math (embedding,
# decoder block with its LoRA projections, head)
librp_la_SOURCES += \
	src/model/layout.c src/model/layout.h \
	src/model/layers.h src/model/carve.c src/model/carve.h \
	src/model/token_tiles.h \
	src/model/embed.c \
	src/model/block.c \
	src/model/lora.c src/model/lora.h \
	src/model/moe.c src/model/moe.h src/model/moe_lora.c \
	src/model/head.c
