# CUDA kernels: compiled with nvcc (see the .cu.lo rule in Makefile.am).
if HAVE_CUDA
librp_la_SOURCES += src/kernels/cuda/cuda_probe.cu
endif
noinst_HEADERS = src/kernels/cuda/cuda_probe.h
EXTRA_DIST += src/kernels/cuda/cuda_probe.cu
