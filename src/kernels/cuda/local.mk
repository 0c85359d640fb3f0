# CUDA kernels: compiled with nvcc (see the .cu.lo rule in Makefile.am).
# What the CUDA back end allocates is plain C, built with or without CUDA
# (sizes.h), so plans for CUDA executors are the same from any build.
librp_la_SOURCES += src/kernels/cuda/sizes.c src/kernels/cuda/sizes.h
# The attention choice (--attention) and cuDNN's run-time loader: plain C,
# built with or without CUDA, so both are tested on any machine.
librp_la_SOURCES += src/kernels/attention_choice.c src/kernels/attention_choice.h \
	src/kernels/attn_documents.c src/kernels/attn_documents.h \
	src/kernels/cudnn_loader.c src/kernels/cudnn_loader.h \
	src/kernels/dynlib.c src/kernels/dynlib.h
if HAVE_CUDA
# cuBLAS and cuBLASLt, opened at run time (cublas_api.h)
librp_la_SOURCES += src/kernels/cuda/cublas_api.c
librp_la_SOURCES += src/kernels/cuda/cuda_probe.cu
# cuda-core kernels and the CUDA back end of src/device (C, compiled by the C
# compiler; RP_HAVE_CUDA_EXECUTOR makes backend.c and the tests see it)
librp_la_SOURCES += src/kernels/cuda/convert.cu src/kernels/cuda/embed.cu \
	src/kernels/cuda/sort.cu src/kernels/cuda/rmsnorm.cu src/kernels/cuda/reduce.cu \
	src/kernels/cuda/rope.cu \
	src/kernels/cuda/swiglu.cu src/kernels/cuda/elementwise.cu src/kernels/cuda/gemm.c \
	src/kernels/cuda/lora.cu src/kernels/cuda/fp8.cu src/kernels/cuda/ops.c src/device/cuda.c
# the Linear forward through cuBLASLt (issue 38; plain C on cuBLASLt's API)
librp_la_SOURCES += src/kernels/cuda/gemm_lt.c
AM_CPPFLAGS += -DRP_HAVE_CUDA_EXECUTOR
# cuda-attention: flash attention and chunked cross-entropy
librp_la_SOURCES += src/kernels/cuda/attention.cu src/kernels/cuda/xent.cu
# cuda-moe: routing, grouping and the grouped expert GEMMs
librp_la_SOURCES += src/kernels/cuda/moe.cu src/kernels/cuda/grouped_gemm.cu
# gpt-oss's expert biases beside the grouped GEMMs (issue 35)
librp_la_SOURCES += src/kernels/cuda/grouped_bias.cu
# cuDNN's fused flash attention (issue 38): its headers at build time, the
# library opened at run time
if HAVE_CUDNN
librp_la_SOURCES += src/kernels/cuda/cudnn_attention.c src/kernels/cuda/cudnn_layout.cu
endif
endif
noinst_HEADERS = src/kernels/cuda/cuda_probe.h src/kernels/cuda/cublas_api.h
EXTRA_DIST += src/kernels/cuda/cuda_probe.cu src/kernels/cuda/cublas_api.c
# cuda-core: headers and sources for tarballs built without CUDA
noinst_HEADERS += src/kernels/cuda/common.cuh src/kernels/cuda/convert.h \
	src/kernels/cuda/embed.h src/kernels/cuda/sort.h src/kernels/cuda/rmsnorm.h \
	src/kernels/cuda/reduce.h \
	src/kernels/cuda/rope.h src/kernels/cuda/swiglu.h src/kernels/cuda/elementwise.h \
	src/kernels/cuda/gemm.h src/kernels/cuda/gemm_lt.h src/kernels/cuda/lora.h src/kernels/cuda/fp8.h src/kernels/cuda/ops.h
EXTRA_DIST += src/kernels/cuda/convert.cu src/kernels/cuda/embed.cu src/kernels/cuda/sort.cu \
	src/kernels/cuda/rmsnorm.cu \
	src/kernels/cuda/reduce.cu src/kernels/cuda/rope.cu src/kernels/cuda/swiglu.cu \
	src/kernels/cuda/elementwise.cu src/kernels/cuda/gemm.c src/kernels/cuda/lora.cu \
	src/kernels/cuda/fp8.cu src/kernels/cuda/ops.c src/device/cuda.c src/kernels/cuda/gemm_lt.c
# cuda-attention: headers and sources for tarballs built without CUDA
noinst_HEADERS += src/kernels/cuda/attention.h src/kernels/cuda/xent.h
EXTRA_DIST += src/kernels/cuda/attention.cu src/kernels/cuda/xent.cu
# cuda-moe: headers and sources for tarballs built without CUDA
noinst_HEADERS += src/kernels/cuda/moe.h src/kernels/cuda/grouped_gemm.h \
	src/kernels/cuda/grouped_bias.h
EXTRA_DIST += src/kernels/cuda/moe.cu src/kernels/cuda/grouped_gemm.cu \
	src/kernels/cuda/grouped_bias.cu
# cuDNN attention: header and sources for tarballs built without it
noinst_HEADERS += src/kernels/cuda/cudnn_attention.h
EXTRA_DIST += src/kernels/cuda/cudnn_attention.c src/kernels/cuda/cudnn_layout.cu
