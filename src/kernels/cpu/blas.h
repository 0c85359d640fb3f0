/* The CPU kernels' BLAS (OpenBLAS): how many threads its GEMMs use, and
 * which build and kernels it is.
 *
 * Why this matters for the bits: OpenBLAS blocks a GEMM's reduction
 * differently on one thread than on several (level3.c against
 * level3_thread.c), so the thread count a GEMM runs on is part of its result.
 * Debian ships OpenBLAS in three builds behind one soname, chosen by
 * update-alternatives (installing libopenblas0-pthread, as python3-numpy may,
 * switches to it). The OpenMP build follows the calling thread's
 * omp_set_num_threads; the pthread build ignores it and starts as many
 * threads as the process may run on, which under mpirun depends on the rank
 * count (Open MPI binds 1-2 ranks to a core each and leaves 3 or more
 * unbound). rp_cpu_blas_threads sets the count on every build, so it is
 * --threads whatever the build and the binding. */
#ifndef RP_KERNELS_CPU_BLAS_H
#define RP_KERNELS_CPU_BLAS_H

#include <stddef.h>

/* Let the BLAS's GEMMs use `threads` threads (at least 1). */
void rp_cpu_blas_threads(int threads);

/* "OpenBLAS 0.3.21, SkylakeX kernels, openmp build" into out (truncated to
 * len). The kernels and the build are part of the CPU executor's bits. */
void rp_cpu_blas_describe(char *out, size_t len);

#endif
