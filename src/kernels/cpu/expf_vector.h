/* exp of a float array, eight at a time (AVX2 + FMA), with exactly the bits
 * of the C library's expf. The CPU kernels' bits are a contract (the same on
 * any rank count, and unchanged by a faster build), so a vector exp is only
 * worth having if it cannot be told apart from the scalar call the kernels
 * made before: it runs the algorithm of glibc's x86-64 FMA expf
 * (sysdeps/ieee754/flt-32/e_expf.c built with -mfma: 32-entry table of
 * 2^(i/32), degree-3 polynomial in double, the fused multiply-adds where
 * that build has them), and hands every input with |x| >= 88 or NaN to
 * expf itself.
 *
 * Another C library, or a CPU that makes glibc pick its non-FMA expf, may
 * round differently: rp_expf_vector_usable() compares the vector exp with
 * expf once per process on a fixed spread of inputs and says no if one bit
 * differs; callers then keep calling expf. */
#ifndef RP_KERNELS_CPU_EXPF_VECTOR_H
#define RP_KERNELS_CPU_EXPF_VECTOR_H

#include <stdint.h>

/* 1 when the processor has x86-64-v3 (the level whose clones call the
 * vector exp, core/cpu_clones.h) and the vector exp matched expf bit for
 * bit in the self-check; 0 otherwise. The check runs once, at the first
 * call, whichever thread makes it (the others wait for its answer). */
int rp_expf_vector_usable(void);

/* One line on what the self-check found, for a log: the exp the CPU
 * kernels use and, when it is expf, why. Runs the check if not yet run. */
const char *rp_expf_vector_note(void);

/* out[i] = expf(in[i]) for i < n; out may be in. Vector code: call it only
 * after rp_expf_vector_usable() said 1. */
void rp_expf_vector(float *out, const float *in, int64_t n);

/* x[i] = expf(x[i]) for i < n, through the vector exp when vector is
 * nonzero (the caller's answer of rp_expf_vector_usable()), else through
 * expf. */
void rp_expf_array(float *x, int64_t n, int vector);

/* The self-check against reference (expf in the library; a test passes a
 * function that differs to see the check refuse): returns the number of
 * inputs checked when every output matched bit for bit, else 0 with the
 * first input that differed in *mismatch (when not NULL). Needs AVX2 and
 * FMA. */
int64_t rp_expf_vector_check(float (*reference)(float), float *mismatch);

#endif
