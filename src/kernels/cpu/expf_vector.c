#include "kernels/cpu/expf_vector.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

void rp_expf_array(float *x, int64_t n, int vector)
{
    if (vector) {
        rp_expf_vector(x, x, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = expf(x[i]);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

#include <immintrin.h>

/* glibc's __exp2f_data (sysdeps/ieee754/flt-32/e_exp2f_data.c), the parts
 * expf reads: tab[i] = bits of 2^(i/32) minus i << 47, so that adding k << 47
 * to tab[k % 32] puts k / 32 into the exponent; the polynomial's
 * coefficients pre-scaled by 1/32^j; 32/ln2; the shift that rounds a
 * double to an integer in its low mantissa bits. */
static const uint64_t exp2f_table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
#define EXP_INV_LN2_32 0x1.71547652b82fep+5 /* 32 / ln 2 */
#define EXP_SHIFT 0x1.8p+52
#define EXP_C0 (0x1.c6af84b912394p-5 / 32 / 32 / 32)
#define EXP_C1 (0x1.ebfce50fac4f3p-3 / 32 / 32)
#define EXP_C2 (0x1.62e42ff0c52d6p-1 / 32)
/* top 12 bits of |x| at or above those of 88.0f (and NaN, inf): expf's
 * slow path (overflow, underflow, errno), left to expf */
#define EXP_SLOW_TOP12 0x42b

/* Four of expf's results, still in double. The order of operations and
 * where a multiply-add is fused are those of glibc 2.36's __expf_fma (read
 * from its machine code): z = 32/ln2 * x, fused with the shift's add and,
 * again, with the subtraction of the rounded k. */
__attribute__((target("avx2,fma"))) static inline __m256d exp4(__m128 x)
{
    const __m256d xd = _mm256_cvtps_pd(x);
    const __m256d inv_ln2_32 = _mm256_set1_pd(EXP_INV_LN2_32), shift = _mm256_set1_pd(EXP_SHIFT);
    __m256d kd = _mm256_fmadd_pd(inv_ln2_32, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    const __m256d r = _mm256_fmsub_pd(inv_ln2_32, xd, kd);
    const __m256i index = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    __m256i t = _mm256_i64gather_epi64((const long long *)exp2f_table, index, 8);
    t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
    const __m256d s = _mm256_castsi256_pd(t);
    const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(EXP_C0), r, _mm256_set1_pd(EXP_C1));
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(EXP_C2), r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_mul_pd(y, s);
}

/* expf of eight floats of in into out, or with partial of the first few,
 * those where lanes has its sign bit set (masked loads read nothing past
 * them and masked stores write nothing: slower than plain ones, so only
 * for a tail); lanes on expf's slow path go to expf. */
__attribute__((target("avx2,fma"))) static inline void exp8(float *out, const float *in,
                                                            int partial, __m256i lanes)
{
    /* 0 in the lanes left out */
    const __m256 x = partial ? _mm256_maskload_ps(in, lanes) : _mm256_loadu_ps(in);
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20),
                                         _mm256_set1_epi32(0x7ff));
    const int slow = _mm256_movemask_ps(_mm256_castsi256_ps(
        _mm256_cmpgt_epi32(top, _mm256_set1_epi32(EXP_SLOW_TOP12 - 1))));
    const __m128 lo = _mm256_cvtpd_ps(exp4(_mm256_castps256_ps128(x)));
    const __m128 hi = _mm256_cvtpd_ps(exp4(_mm256_extractf128_ps(x, 1)));
    if (partial)
        _mm256_maskstore_ps(out, lanes, _mm256_set_m128(hi, lo));
    else
        _mm256_storeu_ps(out, _mm256_set_m128(hi, lo));
    if (!slow)
        return;
    float x8[8];
    _mm256_storeu_ps(x8, x);
    for (int i = 0; i < 8; i++)
        if (slow >> i & 1)
            out[i] = expf(x8[i]); /* a lane past the first few holds 0: never slow */
}

__attribute__((target("avx2,fma"))) void rp_expf_vector(float *out, const float *in, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        exp8(out + i, in + i, 0, _mm256_setzero_si256());
    if (i < n) /* lanes below n - i */
        exp8(out + i, in + i, 1,
             _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Compares one batch; returns 0 and sets *mismatch at the first difference. */
static int check_batch(float (*reference)(float), const float *x, int64_t n, float *mismatch)
{
    float y[1024];
    for (int64_t i0 = 0; i0 < n; i0 += 1024) {
        const int64_t m = n - i0 < 1024 ? n - i0 : 1024;
        rp_expf_vector(y, x + i0, m);
        for (int64_t i = 0; i < m; i++)
            if (float_bits(y[i]) != float_bits(reference(x[i0 + i]))) {
                if (mismatch)
                    *mismatch = x[i0 + i];
                return 0;
            }
    }
    return 1;
}

int64_t rp_expf_vector_check(float (*reference)(float), float *mismatch)
{
    /* the edges: zeros, infinities, NaNs (quiet, signalling, negative),
     * subnormals, the largest floats, 88.0f where the slow path starts,
     * the overflow bound log(0x1p128) and the underflow bounds
     * log(0x1p-150) and log(0x1p-149), each with its neighbours; and the
     * only two of all 2^32 inputs where glibc's expf without FMA (the one
     * it picks on a processor without FMA) rounds otherwise than its FMA
     * expf, which this vector exp repeats (found by an exhaustive run) */
    static const uint32_t edges[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7fa00000,
        0x7f800001, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x00800000, 0x80800000,
        0x7f7fffff, 0xff7fffff, 0x42b00000, 0x42afffff, 0x42b00001, 0xc2b00000, 0xc2afffff,
        0xc2b00001, 0x42b17217, 0x42b17218, 0x42b17216, 0xc2cff1b4, 0xc2cff1b5, 0xc2cff1b3,
        0xc2ce8ecf, 0xc2ce8ed0, 0xc2ce8ece, 0x3f800000, 0xbf800000, 0x33800000, 0xb3800000,
        0x4202422f, 0xc27c65d9,
    };
    float x[4096];
    int64_t checked = 0;
    const int64_t nedges = (int64_t)(sizeof edges / sizeof edges[0]);
    for (int64_t i = 0; i < nedges; i++)
        x[i] = bits_float(edges[i]);
    if (!check_batch(reference, x, nedges, mismatch))
        return 0;
    checked += nedges;
    /* 2^18 bit patterns spread evenly over all 2^32 (every exponent, both
     * signs), each moved by a scrambled offset inside its stride so the
     * low mantissa bits vary too */
    for (uint32_t j0 = 0; j0 < (1u << 18); j0 += 4096) {
        for (uint32_t j = 0; j < 4096; j++) {
            const uint32_t step = j0 + j;
            x[j] = bits_float(step << 14 | ((step * 2654435761u) >> 18));
        }
        if (!check_batch(reference, x, 4096, mismatch))
            return 0;
        checked += 4096;
    }
    /* every float in [-1, -1 + 2^16 ulp) and in [0.5, 0.5 + 2^16 ulp):
     * dense runs where the softmax and SiLU spend their inputs */
    const uint32_t runs[2] = {0xbf800000, 0x3f000000};
    for (int run = 0; run < 2; run++)
        for (uint32_t j0 = 0; j0 < (1u << 16); j0 += 4096) {
            for (uint32_t j = 0; j < 4096; j++)
                x[j] = bits_float(runs[run] + j0 + j);
            if (!check_batch(reference, x, 4096, mismatch))
                return 0;
            checked += 4096;
        }
    return checked;
}

static int vector_usable;
static char vector_note[192];
static pthread_once_t vector_once = PTHREAD_ONCE_INIT;

static void vector_decide(void)
{
    float mismatch = 0.0f;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("x86-64-v3")) {
        snprintf(vector_note, sizeof vector_note,
                 "CPU kernels (attention, SwiGLU): exps through expf (the processor is not "
                 "x86-64-v3: no vector exp)");
        return;
    }
    const int64_t checked = rp_expf_vector_check(expf, &mismatch);
    if (!checked) {
        snprintf(vector_note, sizeof vector_note,
                 "CPU kernels (attention, SwiGLU): exps through expf (the vector exp differs "
                 "from this C library's expf at x = %a)",
                 (double)mismatch);
        return;
    }
    vector_usable = 1;
    snprintf(vector_note, sizeof vector_note,
             "CPU kernels (attention, SwiGLU): exps through the vector exp (AVX2, FMA), bit for "
             "bit expf on %lld checked inputs",
             (long long)checked);
}

int rp_expf_vector_usable(void)
{
    pthread_once(&vector_once, vector_decide);
    return vector_usable;
}

const char *rp_expf_vector_note(void)
{
    pthread_once(&vector_once, vector_decide);
    return vector_note;
}

#else /* not x86-64 with GCC: no vector exp, expf everywhere */

void rp_expf_vector(float *out, const float *in, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = expf(in[i]);
}

int64_t rp_expf_vector_check(float (*reference)(float), float *mismatch)
{
    (void)reference;
    if (mismatch)
        *mismatch = 0.0f;
    return 0;
}

int rp_expf_vector_usable(void) { return 0; }

const char *rp_expf_vector_note(void)
{
    return "CPU kernels (attention, SwiGLU): exps through expf (no vector exp for this "
           "processor or compiler)";
}

#endif
