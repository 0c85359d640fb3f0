# sources of src/kernels/cpu: fp32 CPU kernels (CBLAS GEMMs, OpenMP loops)
librp_la_SOURCES += \
	src/kernels/cpu/linear.c src/kernels/cpu/linear.h \
	src/kernels/cpu/blas.c src/kernels/cpu/blas.h \
	src/kernels/cpu/rmsnorm.c src/kernels/cpu/rmsnorm.h \
	src/kernels/cpu/rope.c src/kernels/cpu/rope.h \
	src/kernels/cpu/attention.c src/kernels/cpu/attention.h \
	src/kernels/cpu/expf_vector.c src/kernels/cpu/expf_vector.h \
	src/kernels/cpu/xent.c src/kernels/cpu/xent.h \
	src/kernels/cpu/swiglu.c src/kernels/cpu/swiglu.h \
	src/kernels/cpu/lora.c src/kernels/cpu/lora.h src/kernels/dropout.h \
	src/kernels/cpu/moe.c src/kernels/cpu/moe.h \
	src/kernels/cpu/ops.c src/kernels/cpu/ops.h src/kernels/ops.h src/kernels/attn_shape.h \
	src/kernels/rope_freq.c src/kernels/rope_freq.h
