# GPU benchmarks (bench/README.md, "GPU machine"): built by nvcc when CUDA is
# configured, never run by make check; bench/gpu/run.sh runs them on the GPU
# machine. Without a GPU they print a message and exit 77.
if HAVE_CUDA
noinst_PROGRAMS += bench/gpu/bench_gemm bench/gpu/bench_copy bench/gpu/bench_attention \
	bench/gpu/bench_head
endif
bench_gpu_bench_gemm_SOURCES = bench/gpu/bench_gemm.cu
# and cuBLASLt's residual GEMM of src/kernels/cuda/gemm_lt.c, through librp
bench_gpu_bench_gemm_LDADD = librp.la $(CUBLAS_LIBS) $(CUDA_LIBS)
bench_gpu_bench_copy_SOURCES = bench/gpu/bench_copy.cu
bench_gpu_bench_copy_LDADD = $(CUDA_LIBS)
# the attention kernels of src/kernels/cuda, through librp
bench_gpu_bench_attention_SOURCES = bench/gpu/bench_attention.c
bench_gpu_bench_attention_LDADD = librp.la
# the head (src/model/head.c) on the CUDA kernel table against its GEMMs, through librp
bench_gpu_bench_head_SOURCES = bench/gpu/bench_head.c
bench_gpu_bench_head_LDADD = librp.la $(CUBLAS_LIBS)
EXTRA_DIST += bench/gpu/bench_common.cuh bench/gpu/run.sh bench/gpu/qwen3-1.7b-config.json \
	bench/gpu/parity.sh bench/gpu/compare.py bench/gpu/torch_peer.py bench/gpu/tree-digest.sh \
	bench/gpu/carried-programs.txt

# CUDA programs (the .cu.lo rule in Makefile.am makes library objects; a
# program's object is a plain .o).
.cu.o:
	$(AM_V_CC)$(NVCC) $(NVCC_ARCH_FLAGS) -std=c++17 -O3 -I$(top_srcdir)/include \
	  -I$(top_srcdir)/src -I$(top_builddir) -c -o $@ $<
