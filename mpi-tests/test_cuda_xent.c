/* Proves (on a GPU; exits 77 without one): the CUDA chunked cross-entropy
 * (src/kernels/cuda/xent.h) gives, for rows that count, loss =
 * logsumexp(z) - z[target] and in-place gradient scale * (softmax(z) -
 * onehot(target)) as written out directly here in double precision, and
 * exactly 0 loss and a zero gradient for masked rows; for vocabularies that
 * take the vectorised and the scalar path and one row far longer than a
 * block; every loss is poisoned with NaN first; *loss_sum grows by the
 * left-to-right row-order sum (bit-exact, as head.c sums); grad = 0 leaves
 * the logits untouched; with a bf16 gradient buffer (aligned and not) the
 * same losses, the logits untouched and each element exactly the in-place
 * gradient rounded; results are bit-reproducible; all of it with the row
 * sums in double and in float (fp32_sums, RP_ALLOW_UNPROVEN_CUDA=xent-fp32),
 * within the same bounds of the double formula; the target check finds
 * the first counted out-of-range target and ignores masked ones; bad
 * arguments are refused. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rp_check.h"
#include "xent_reference.h"

#ifdef RP_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/xent.h"

#define CK(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

static void *dev_from(const void *h, size_t bytes)
{
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 16));
    if (h)
        CK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    return p;
}

typedef struct xcase {
    int64_t rows, vocab;
    float sd, scale;
    int masked; /* every third row does not count */
} xcase;

static const xcase xcases[] = {
    {37, 1000, 3.0f, 0.37f, 1},  /* float4 path */
    {9, 1003, 3.0f, 1.0f, 1},    /* scalar path (rows not 16-byte aligned) */
    {3, 50000, 2.0f, 0.01f, 0},  /* many elements per thread, no mask */
    {5, 7, 10.0f, 2.0f, 1},      /* fewer logits than threads, peaked */
};


/* _i: the case (_i / 2) and the row sums' type (_i % 2: float) */
START_TEST(chunk_matches_direct_formula)
{
    const xcase *c = &xcases[_i / 2];
    const int f32 = _i % 2;
    const int64_t R = c->rows, V = c->vocab;
    const size_t n = (size_t)(R * V);
    float *z = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    double *g = malloc((size_t)V * sizeof(double));
    int32_t *t = malloc((size_t)R * sizeof(int32_t));
    uint8_t *mask = malloc((size_t)R);
    rp_rng_fill_normal(z, n, 42 + (uint64_t)_i, 5, 0, 0.0f, c->sd);
    for (int64_t r = 0; r < R; r++) {
        t[r] = (int32_t)((r * 7919 + 13) % V);
        mask[r] = c->masked ? (r % 3 != 1) : 1;
    }
    float *dz = dev_from(z, n * 4);
    int32_t *dt = dev_from(t, (size_t)R * 4);
    uint8_t *dm = c->masked ? dev_from(mask, (size_t)R) : NULL;
    double *dl = dev_from(NULL, (size_t)R * 8), *dsum = dev_from(NULL, 8);
    const double start = 1.5;
    CK(cudaMemcpy(dsum, &start, 8, cudaMemcpyHostToDevice));
    CK(cudaMemset(dl, 0xff, (size_t)R * 8)); /* NaN */
    const char *why = "";
    ck_assert_msg(
        rp_cuda_xent_chunk(dz, R, V, dt, dm, c->scale, 1, NULL, f32, dl, dsum, 0, &why) == 0,
        "xent: %s", why);
    CK(cudaDeviceSynchronize());
    double *loss = malloc((size_t)R * 8), sum = 0;
    CK(cudaMemcpy(loss, dl, (size_t)R * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got, dz, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&sum, dsum, 8, cudaMemcpyDeviceToHost));
    double expect_sum = start;
    for (int64_t r = 0; r < R; r++) {
        expect_sum += loss[r];
        const float *gr = got + r * V;
        if (!mask[r]) {
            ck_assert_msg(loss[r] == 0.0, "masked row %lld: loss %g", (long long)r, loss[r]);
            for (int64_t j = 0; j < V; j++)
                ck_assert_msg(gr[j] == 0.0f, "masked row %lld: grad[%lld] = %g", (long long)r,
                              (long long)j, (double)gr[j]);
            continue;
        }
        double ref;
        xent_reference(z + r * V, V, t[r], c->scale, &ref, g);
        ck_assert_msg(isfinite(loss[r]) && fabs(loss[r] - ref) <= 1e-5 * fmax(1.0, fabs(ref)),
                      "row %lld: loss %.9g, expected %.9g", (long long)r, loss[r], ref);
        double maxdiff = 0;
        for (int64_t j = 0; j < V; j++) {
            ck_assert_msg(isfinite(gr[j]), "row %lld: grad[%lld] not finite", (long long)r,
                          (long long)j);
            maxdiff = fmax(maxdiff, fabs((double)gr[j] - g[j]));
        }
        ck_assert_msg(maxdiff <= 1e-5 * c->scale, "row %lld: gradient off by %.3e (scale %g)",
                      (long long)r, maxdiff, (double)c->scale);
    }
    ck_assert_msg(sum == expect_sum, "loss_sum %.17g, row-order sum %.17g", sum, expect_sum);

    /* same input again: bit-identical losses and gradient */
    CK(cudaMemcpy(dz, z, n * 4, cudaMemcpyHostToDevice));
    ck_assert_int_eq(
        rp_cuda_xent_chunk(dz, R, V, dt, dm, c->scale, 1, NULL, f32, dl, NULL, 0, &why), 0);
    CK(cudaDeviceSynchronize());
    double *loss2 = malloc((size_t)R * 8);
    float *got2 = malloc(n * 4);
    CK(cudaMemcpy(loss2, dl, (size_t)R * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got2, dz, n * 4, cudaMemcpyDeviceToHost));
    ck_assert(memcmp(loss, loss2, (size_t)R * 8) == 0);
    ck_assert(memcmp(got, got2, n * 4) == 0);

    /* grad = 0: logits untouched, same losses */
    CK(cudaMemcpy(dz, z, n * 4, cudaMemcpyHostToDevice));
    ck_assert_int_eq(
        rp_cuda_xent_chunk(dz, R, V, dt, dm, c->scale, 0, NULL, f32, dl, NULL, 0, &why), 0);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(loss2, dl, (size_t)R * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got2, dz, n * 4, cudaMemcpyDeviceToHost));
    ck_assert(memcmp(loss, loss2, (size_t)R * 8) == 0);
    ck_assert(memcmp(z, got2, n * 4) == 0);

    /* the gradient into a bf16 buffer (the head's fused pass), 16-byte
     * aligned and 2 bytes past (the vectorised store cannot take that: the
     * scalar one must): the same losses, each element exactly the
     * in-place fp32 gradient rounded to nearest even, logits untouched */
    uint16_t *db = dev_from(NULL, n * 2 + 16), *gb = malloc(n * 2);
    for (int off = 0; off <= 1; off++) {
        CK(cudaMemcpy(dz, z, n * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(db, 0xff, n * 2 + 16));
        ck_assert_int_eq(rp_cuda_xent_chunk(dz, R, V, dt, dm, c->scale, 1, db + off, f32, dl,
                                            NULL, 0, &why),
                         0);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(loss2, dl, (size_t)R * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(got2, dz, n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gb, db + off, n * 2, cudaMemcpyDeviceToHost));
        ck_assert(memcmp(loss, loss2, (size_t)R * 8) == 0);
        ck_assert(memcmp(z, got2, n * 4) == 0);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(gb[i] == rp_f32_to_bf16(got[i]), "offset %d: bf16 gradient [%zu] "
                          "0x%04x, the fp32 one rounded 0x%04x", off, i, gb[i],
                          rp_f32_to_bf16(got[i]));
    }

    free(z), free(got), free(g), free(t), free(mask), free(loss), free(loss2), free(got2), free(gb);
    cudaFree(dz), cudaFree(dt), cudaFree(dm), cudaFree(dl), cudaFree(dsum), cudaFree(db);
}
END_TEST

START_TEST(target_check_finds_first_counted_bad)
{
    enum { T = 3000, V = 100 };
    int32_t t[T];
    uint8_t m[T];
    for (int i = 0; i < T; i++) {
        t[i] = i % V;
        m[i] = 1;
    }
    t[3] = -5, m[3] = 0; /* bad but masked: ignored */
    t[1500] = V;         /* the first counted bad one */
    t[2999] = -1;
    int32_t *dt = dev_from(t, sizeof t);
    uint8_t *dm = dev_from(m, sizeof m);
    int64_t *scratch = dev_from(NULL, 16), pos = 0;
    int32_t val = 0;
    const char *why = "";
    ck_assert_msg(rp_cuda_xent_check_targets(dt, dm, T, V, scratch, &pos, &val, 0, &why) == 0,
                  "%s", why);
    ck_assert_int_eq(pos, 1500);
    ck_assert_int_eq(val, V);
    /* without the mask position 3 is the first */
    ck_assert_int_eq(rp_cuda_xent_check_targets(dt, NULL, T, V, scratch, &pos, &val, 0, &why), 0);
    ck_assert_int_eq(pos, 3);
    ck_assert_int_eq(val, -5);
    /* all in range */
    ck_assert_int_eq(rp_cuda_xent_check_targets(dt, dm, 1000, V, scratch, &pos, &val, 0, &why), 0);
    ck_assert_int_eq(pos, -1);
    cudaFree(dt), cudaFree(dm), cudaFree(scratch);
}
END_TEST

START_TEST(bad_arguments_refused)
{
    const char *why = NULL;
    double *dl = dev_from(NULL, 8);
    float *dz = dev_from(NULL, 16);
    int32_t *dt = dev_from(NULL, 4);
    ck_assert_int_eq(
        rp_cuda_xent_chunk(dz, 1, 0, dt, NULL, 1.0f, 1, NULL, 0, dl, NULL, 0, &why), -1);
    ck_assert_ptr_nonnull(why);
    why = NULL;
    ck_assert_int_eq(
        rp_cuda_xent_chunk(dz, 1, 4, dt, NULL, 1.0f, 1, NULL, 0, NULL, NULL, 0, &why), -1);
    ck_assert_ptr_nonnull(why);
    ck_assert_int_eq(
        rp_cuda_xent_chunk(dz, 0, 4, dt, NULL, 1.0f, 1, NULL, 0, dl, NULL, 0, &why), 0);
    cudaFree(dl), cudaFree(dz), cudaFree(dt);
}
END_TEST

static Suite *cuda_xent_suite(void)
{
    Suite *s = suite_create("cuda_xent");
    TCase *tc = tcase_create("xent");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, chunk_matches_direct_formula, 0,
                        2 * (int)(sizeof xcases / sizeof xcases[0]));
    tcase_add_test(tc, target_check_finds_first_counted_bad);
    tcase_add_test(tc, bad_arguments_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, cuda_xent_suite, "serial");
    const char *why = "";
    if (rp_cuda_device_count(&why) <= 0) {
        printf("SKIP: no usable CUDA device (%s)\n", why);
        return RP_TEST_SKIP;
    }
    /* CUDA is initialised in this process now: a forked child could not use it */
    setenv("CK_FORK", "no", 1);
    return rp_check_main(argc, argv, cuda_xent_suite, "serial");
}

#else /* built without CUDA */

static Suite *cuda_xent_suite(void) { return suite_create("cuda_xent"); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, cuda_xent_suite, "serial");
    printf("SKIP: built without CUDA\n");
    return RP_TEST_SKIP;
}
#endif
