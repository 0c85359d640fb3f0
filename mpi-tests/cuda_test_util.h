/* Helpers of the CUDA tests (header-only, static): device buffers, NaN
 * poisoning, fresh random inputs, the relative error used throughout
 *     rel(a, ref) = ||a - ref||_2 / ||ref||_2   (0 when both are 0)
 * and the SKIP (exit 77) when no CUDA device is usable. Only included when
 * RP_HAVE_CUDA_EXECUTOR is defined. */
#ifndef RP_CUDA_TEST_UTIL_H
#define RP_CUDA_TEST_UTIL_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "kernels/cuda/cuda_probe.h"
#include "rp_check.h"

/* Relative error bound for results computed from bf16 GEMM operands
 * (the acceptance figure); kernels that stay in fp32 are held to
 * FP32_TOL. */
#define BF16_TOL 1e-2
#define FP32_TOL 1e-5

static uint64_t g_seed = 1; /* each test draws from fresh streams */

static inline void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    ck_assert_msg(e == cudaSuccess, "cudaMalloc %zu: %s", bytes, cudaGetErrorString(e));
    return p;
}

/* Every byte 0xff: a NaN in fp32 and in bf16, so an element a kernel
 * forgot to write fails the NaN check. */
static inline void dev_poison(void *p, size_t bytes)
{
    ck_assert(cudaMemset(p, 0xff, bytes) == cudaSuccess);
    /* the back end computes on a non-blocking stream, which does not wait
     * for the legacy default stream: finish here */
    ck_assert(cudaDeviceSynchronize() == cudaSuccess);
}

static inline void *dev_upload(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    ck_assert(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    ck_assert(cudaDeviceSynchronize() == cudaSuccess); /* pageable copies may still be in flight */
    return d;
}

static inline void dev_download(void *h, const void *d, size_t bytes)
{
    cudaError_t e = cudaDeviceSynchronize();
    ck_assert_msg(e == cudaSuccess, "kernel failed: %s", cudaGetErrorString(e));
    ck_assert(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
}

static inline float *rand_f32(size_t n, float mean, float sd)
{
    float *x = malloc(n * sizeof(float) + 4);
    ck_assert_ptr_nonnull(x);
    rp_rng_fill_normal(x, n, 20240611u, g_seed++, 0, mean, sd);
    return x;
}

static inline double rel_err(const float *a, const float *ref, size_t n, const char *what)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(a[i]), "%s: element %zu is %f (not written, or NaN)", what, i,
                      (double)a[i]);
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    if (den == 0.0)
        return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

#define CHECK_REL(a, ref, n, tol, what)                                                    \
    do {                                                                                   \
        double r_ = rel_err((a), (ref), (n), (what));                                     \
        ck_assert_msg(r_ <= (tol), "%s: relative error %.3g > %.3g", (what), r_, (double)(tol)); \
    } while (0)

static inline int cuda_test_main(int argc, char **argv, Suite *(*make_suite)(void))
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, make_suite, "serial");
    const char *why = "";
    if (rp_cuda_device_count(&why) <= 0) {
        printf("SKIP: no usable CUDA device (%s)\n", why);
        return RP_TEST_SKIP;
    }
    /* the probe above initialised CUDA in this process, and a forked child
     * cannot use it: run the tests without Check's fork */
    setenv("CK_FORK", "no", 1);
    return rp_check_main(argc, argv, make_suite, "serial");
}

#endif
