/* The arithmetic of the counter-based generator (DESIGN 10), as static
 * inline functions the host and CUDA kernels share, so a value drawn on a
 * GPU is the value drawn on the CPU bit for bit. src/core/rng.c exports the
 * host functions of core/rng.h on top of these.
 *
 * Plain C; under nvcc (__CUDACC__) each function is also a device function.
 * Only integer arithmetic and IEEE double operations with one rounding
 * each (no contraction is possible: no product is added) are used, and the
 * GPU rounds these as the host does, so both compute the same bits. */
#ifndef RP_CORE_PHILOX_H
#define RP_CORE_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define RP_HOST_DEVICE __host__ __device__
#else
#define RP_HOST_DEVICE
#endif

#define RP_PHILOX_M0 0xD2511F53u
#define RP_PHILOX_M1 0xCD9E8D57u
#define RP_PHILOX_W0 0x9E3779B9u
#define RP_PHILOX_W1 0xBB67AE85u

/* Philox4x32-10: four 32-bit words for the counter (index, stream) under
 * the key seed. */
static inline RP_HOST_DEVICE void rp_philox4x32_10(uint64_t seed, uint64_t stream,
                                                   uint64_t index, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        const uint64_t p0 = (uint64_t)RP_PHILOX_M0 * c0, p1 = (uint64_t)RP_PHILOX_M1 * c2;
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += RP_PHILOX_W0;
        k1 += RP_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* A double in (0, 1) from two words: 53 random bits v, then (v + 0.5) /
 * 2^53. The conversion of v (< 2^53) and the division by a power of two
 * are exact; v + 0.5 is exact below 2^52 and rounds to even above (the
 * same rounding on host and GPU). */
static inline RP_HOST_DEVICE double rp_philox_open01(uint32_t a, uint32_t b)
{
    uint64_t v = ((uint64_t)a << 21) ^ (uint64_t)b;
    v &= (1ull << 53) - 1;
    return ((double)v + 0.5) / 9007199254740992.0;
}

/* rp_rng_uniform's value: the double of the first two words rounded once
 * to float. In (0, 1] as a float: the largest doubles round to 1.0f (a
 * chance of 2^-25); never 0. */
static inline RP_HOST_DEVICE float rp_philox_uniform(uint64_t seed, uint64_t stream,
                                                     uint64_t index)
{
    uint32_t w[4];
    rp_philox4x32_10(seed, stream, index, w);
    return (float)rp_philox_open01(w[0], w[1]);
}

/* FNV-1a 64-bit, as rp_rng_stream_id: one more byte into the hash h. */
static inline RP_HOST_DEVICE uint64_t rp_fnv1a_byte(uint64_t h, unsigned char byte)
{
    return (h ^ byte) * 1099511628211ull;
}

static inline RP_HOST_DEVICE uint64_t rp_fnv1a_u64le(uint64_t h, uint64_t value)
{
    for (int i = 0; i < 8; i++)
        h = rp_fnv1a_byte(h, (unsigned char)(value >> (8 * i)));
    return h;
}

/* The stream of a LoRA dropout mask: FNV-1a 64 over the ASCII bytes of
 * "lora-dropout", then the 8 little-endian bytes each of (uint64_t)step,
 * (uint64_t)sample, (uint64_t)(int64_t)layer and (uint64_t)(int64_t)proj.
 * The index within the stream is the element's index within its sample, so
 * a sample's mask does not depend on how samples are split into calls. */
static inline RP_HOST_DEVICE uint64_t rp_dropout_stream(int64_t step, int64_t sample,
                                                        int32_t layer, int32_t proj)
{
    const char tag[] = "lora-dropout";
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; tag[i] != '\0'; i++)
        h = rp_fnv1a_byte(h, (unsigned char)tag[i]);
    h = rp_fnv1a_u64le(h, (uint64_t)step);
    h = rp_fnv1a_u64le(h, (uint64_t)sample);
    h = rp_fnv1a_u64le(h, (uint64_t)(int64_t)layer);
    h = rp_fnv1a_u64le(h, (uint64_t)(int64_t)proj);
    return h;
}

#endif
