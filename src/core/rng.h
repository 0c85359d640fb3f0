/* Counter-based random numbers (Philox4x32-10). A value depends only on
 * (seed, stream, index): stream is a parameter id, index an element index,
 * so initialisation is the same whatever the number of ranks or threads.
 * The arithmetic is core/philox.h's, shared with the CUDA kernels. */
#ifndef RP_CORE_RNG_H
#define RP_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Four independent 32-bit words for counter (stream, index). */
void rp_philox4x32(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]);

/* Uniform in (0, 1]: a double in (0, 1) rounded once to float, which
 * makes the largest ones 1.0f (a chance of 2^-25); never 0. */
float rp_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);

/* Standard normal via Box-Muller on the counter's words. */
float rp_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* x[i] = mean + std * normal(seed, stream, first + i). */
void rp_rng_fill_normal(float *x, size_t n, uint64_t seed, uint64_t stream, uint64_t first,
                        float mean, float std);

/* Stable 64-bit id for a parameter name, usable as a stream: FNV-1a 64
 * from the offset basis 1469598103934665603 (a digit short of FNV's own;
 * every stream and so every draw depends on it: roundpipe(1), --shuffle). */
uint64_t rp_rng_stream_id(const char *name);

#endif
