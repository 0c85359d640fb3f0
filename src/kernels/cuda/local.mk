# CUDA kernels: compiled with nvcc (see the .cu.lo rule in Makefile.am).
if HAVE_CUDA
librp_la_SOURCES += src/kernels/cuda/cuda_probe.cu
# cuda-attention: flash attention and chunked cross-entropy
librp_la_SOURCES += src/kernels/cuda/attention.cu src/kernels/cuda/xent.cu
endif
noinst_HEADERS = src/kernels/cuda/cuda_probe.h
EXTRA_DIST += src/kernels/cuda/cuda_probe.cu
# cuda-attention: headers and sources for tarballs built without CUDA
noinst_HEADERS += src/kernels/cuda/attention.h src/kernels/cuda/xent.h
EXTRA_DIST += src/kernels/cuda/attention.cu src/kernels/cuda/xent.cu
