/* Proves (on a GPU; exits 77 without one): the CUDA flash attention
 * (src/kernels/cuda/attention.h) computes what the CPU kernel
 * (src/kernels/cpu/attention.h, itself proven against a naive attention)
 * computes: o, lse, dq, dk, dv within 1e-2 relative (max-abs error over the
 * max-abs reference value) on fresh random inputs, for sequence lengths that
 * are and are not multiples of the 64-row tiles, several sequences per call,
 * GQA ratios 1, 2, 4 and 8, head dims 64 and 128 and padded ones (32, 96),
 * peaked and flat softmaxes; every output is poisoned with NaN before each
 * run, so an element left unwritten fails; the backward is bit-reproducible;
 * the bf16 core path the CUDA back end uses (bf16 o, delta from bf16) agrees
 * too; bad shapes and small workspaces are refused with a message and
 * nothing written; the bench entry point returns finite positive TFLOP/s
 * (set RP_ATTN_BENCH=1 to print a Qwen3-1.7B-shaped measurement). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rp_check.h"

#ifdef RP_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_probe.h"

#define RTOL 1e-2

#define CK(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

static float *host_rnd(size_t n, uint64_t seed, float sd)
{
    float *v = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(v);
    rp_rng_fill_normal(v, n, seed, 11, 0, 0.0f, sd);
    rp_f32_round_bf16(v, n); /* the kernel's inputs are bf16: compare on equal inputs */
    return v;
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

static void *dev_from(const void *h, size_t bytes)
{
    void *p = dev_alloc(bytes);
    CK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    return p;
}

static void poison(void *d, size_t bytes) { CK(cudaMemset(d, 0xff, bytes)); } /* all-ones: NaN */

static float *to_host(const float *d, size_t n)
{
    float *h = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(h);
    CK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* max |got - ref| / max |ref| with every got finite. */
static void expect_close(const char *what, const rp_attn_shape *s, const float *got,
                         const float *ref, size_t n)
{
    double maxref = 0, maxdiff = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(got[i]),
                      "%s: element %zu is %f (unwritten or non-finite), shape nseq %lld seqlen "
                      "%lld heads %lld/%lld dim %lld",
                      what, i, (double)got[i], (long long)s->nseq, (long long)s->seqlen,
                      (long long)s->nheads, (long long)s->nkv, (long long)s->head_dim);
        maxref = fmax(maxref, fabs((double)ref[i]));
        maxdiff = fmax(maxdiff, fabs((double)got[i] - (double)ref[i]));
    }
    const double rel = maxref > 0 ? maxdiff / maxref : maxdiff;
    ck_assert_msg(rel <= RTOL,
                  "%s: relative error %.3e > %.0e (max diff %.3e, max ref %.3e), shape nseq %lld "
                  "seqlen %lld heads %lld/%lld dim %lld",
                  what, rel, RTOL, maxdiff, maxref, (long long)s->nseq, (long long)s->seqlen,
                  (long long)s->nheads, (long long)s->nkv, (long long)s->head_dim);
}

typedef struct cfg {
    int64_t nseq, seqlen, nheads, nkv, head_dim;
    float sd; /* input scale: 1 gives flat softmaxes, 2.5 peaked ones */
} cfg;

static const cfg cases[] = {
    {2, 64, 4, 4, 64, 1.0f},   /* ratio 1, exact tiles */
    {2, 100, 4, 2, 64, 1.0f},  /* ratio 2, partial tile */
    {1, 257, 8, 2, 128, 1.0f}, /* ratio 4, one row past a tile */
    {3, 77, 4, 1, 128, 2.5f},  /* ratio 4 (MQA), peaked */
    {1, 1, 2, 1, 64, 1.0f},    /* a single token */
    {2, 130, 6, 3, 96, 1.0f},  /* padded head dim (128 path) */
    {1, 200, 2, 2, 32, 2.5f},  /* padded head dim (64 path), peaked */
    {1, 600, 8, 1, 128, 1.0f}, /* ratio 8, several tiles of keys */
    {2, 191, 4, 2, 64, 2.5f},
};

typedef struct bufs {
    rp_attn_shape s;
    size_t nq, nk, nl;
    float *q, *k, *v, *dout;                 /* host inputs (bf16-exact) */
    float *o, *lse, *dq, *dk, *dv;           /* host CPU reference */
    float *dq_, *dk_, *dv_, *do_, *o_, *l_; /* device */
    float *q_, *k_, *v_;
} bufs;

static void setup(bufs *b, const cfg *c, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    b->s = (rp_attn_shape){.nseq = c->nseq, .seqlen = c->seqlen, .nheads = c->nheads,
                           .nkv = c->nkv, .head_dim = c->head_dim, .block = 64,
                           .scale = 1.0f / sqrtf((float)c->head_dim)};
    const size_t T = (size_t)(c->nseq * c->seqlen);
    b->nq = T * (size_t)(c->nheads * c->head_dim);
    b->nk = T * (size_t)(c->nkv * c->head_dim);
    b->nl = T * (size_t)c->nheads;
    b->q = host_rnd(b->nq, seed, c->sd);
    b->k = host_rnd(b->nk, seed + 1, c->sd);
    b->v = host_rnd(b->nk, seed + 2, 1.0f);
    b->dout = host_rnd(b->nq, seed + 3, 1.0f);
    b->o = malloc(b->nq * sizeof(float));
    b->lse = malloc(b->nl * sizeof(float));
    b->dq = malloc(b->nq * sizeof(float));
    b->dk = malloc(b->nk * sizeof(float));
    b->dv = malloc(b->nk * sizeof(float));
    rp_attn_forward(&b->s, b->q, b->k, b->v, b->o, b->lse);
    rp_attn_backward(&b->s, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv);
    b->q_ = dev_from(b->q, b->nq * 4);
    b->k_ = dev_from(b->k, b->nk * 4);
    b->v_ = dev_from(b->v, b->nk * 4);
    b->do_ = dev_from(b->dout, b->nq * 4);
    b->o_ = dev_alloc(b->nq * 4);
    b->l_ = dev_alloc(b->nl * 4);
    b->dq_ = dev_alloc(b->nq * 4);
    b->dk_ = dev_alloc(b->nk * 4);
    b->dv_ = dev_alloc(b->nk * 4);
}

static void teardown(bufs *b)
{
    free(b->q), free(b->k), free(b->v), free(b->dout);
    free(b->o), free(b->lse), free(b->dq), free(b->dk), free(b->dv);
    cudaFree(b->q_), cudaFree(b->k_), cudaFree(b->v_), cudaFree(b->do_);
    cudaFree(b->o_), cudaFree(b->l_), cudaFree(b->dq_), cudaFree(b->dk_), cudaFree(b->dv_);
}

static void check_grads(bufs *b, const char *tag, float **keep)
{
    char what[64];
    float *dq = to_host(b->dq_, b->nq), *dk = to_host(b->dk_, b->nk), *dv = to_host(b->dv_, b->nk);
    snprintf(what, sizeof what, "%s dq", tag);
    expect_close(what, &b->s, dq, b->dq, b->nq);
    snprintf(what, sizeof what, "%s dk", tag);
    expect_close(what, &b->s, dk, b->dk, b->nk);
    snprintf(what, sizeof what, "%s dv", tag);
    expect_close(what, &b->s, dv, b->dv, b->nk);
    if (keep) {
        keep[0] = dq, keep[1] = dk, keep[2] = dv;
    } else {
        free(dq), free(dk), free(dv);
    }
}

START_TEST(fp32_entry_points_match_cpu)
{
    const cfg *c = &cases[_i];
    bufs b;
    setup(&b, c, 1000 + 10 * (uint64_t)_i);
    const char *why = "";
    const size_t wsb = rp_cuda_attn_workspace_bytes(&b.s, 1);
    ck_assert_uint_gt(wsb, 0);
    ck_assert_uint_le(rp_cuda_attn_workspace_bytes(&b.s, 0), wsb);
    void *ws = dev_alloc(wsb);

    poison(b.o_, b.nq * 4);
    poison(b.l_, b.nl * 4);
    ck_assert_msg(rp_cuda_attn_forward(&b.s, b.q_, b.k_, b.v_, b.o_, b.l_, ws,
                                       rp_cuda_attn_workspace_bytes(&b.s, 0), 0, &why) == 0,
                  "forward: %s", why);
    CK(cudaDeviceSynchronize());
    float *o = to_host(b.o_, b.nq), *lse = to_host(b.l_, b.nl);
    expect_close("o", &b.s, o, b.o, b.nq);
    expect_close("lse", &b.s, lse, b.lse, b.nl);

    /* backward from the GPU's own o and lse, twice: bit-identical */
    float *first[3];
    for (int run = 0; run < 2; run++) {
        poison(b.dq_, b.nq * 4);
        poison(b.dk_, b.nk * 4);
        poison(b.dv_, b.nk * 4);
        ck_assert_msg(rp_cuda_attn_backward(&b.s, b.q_, b.k_, b.v_, b.o_, b.l_, b.do_, b.dq_,
                                            b.dk_, b.dv_, ws, wsb, 0, &why) == 0,
                      "backward: %s", why);
        CK(cudaDeviceSynchronize());
        if (run == 0) {
            check_grads(&b, "fp32", first);
        } else {
            float *dq = to_host(b.dq_, b.nq), *dk = to_host(b.dk_, b.nk), *dv = to_host(b.dv_, b.nk);
            ck_assert_msg(memcmp(dq, first[0], b.nq * 4) == 0, "dq differs between runs");
            ck_assert_msg(memcmp(dk, first[1], b.nk * 4) == 0, "dk differs between runs");
            ck_assert_msg(memcmp(dv, first[2], b.nk * 4) == 0, "dv differs between runs");
            free(dq), free(dk), free(dv);
        }
    }
    free(first[0]), free(first[1]), free(first[2]);
    free(o), free(lse);
    cudaFree(ws);
    teardown(&b);
}
END_TEST

/* The path of the CUDA back end: bf16 q, k, v in; o only as bf16; delta
 * from bf16 o and dout; bf16 backward. */
START_TEST(bf16_core_matches_cpu)
{
    const cfg *c = &cases[_i];
    bufs b;
    setup(&b, c, 5000 + 10 * (uint64_t)_i);
    const char *why = "";
    uint16_t *q16 = dev_alloc(b.nq * 2), *k16 = dev_alloc(b.nk * 2), *v16 = dev_alloc(b.nk * 2);
    uint16_t *o16 = dev_alloc(b.nq * 2), *do16 = dev_alloc(b.nq * 2);
    float *delta = dev_alloc(b.nl * 4);
    ck_assert_int_eq(rp_cuda_f32_to_bf16(b.q_, q16, b.nq, 0, &why), 0);
    ck_assert_int_eq(rp_cuda_f32_to_bf16(b.k_, k16, b.nk, 0, &why), 0);
    ck_assert_int_eq(rp_cuda_f32_to_bf16(b.v_, v16, b.nk, 0, &why), 0);
    ck_assert_int_eq(rp_cuda_f32_to_bf16(b.do_, do16, b.nq, 0, &why), 0);
    poison(o16, b.nq * 2);
    poison(b.l_, b.nl * 4);
    ck_assert_msg(rp_cuda_attn_forward_bf16(&b.s, q16, k16, v16, NULL, o16, b.l_, 0, &why) == 0,
                  "forward_bf16: %s", why);
    CK(cudaDeviceSynchronize());
    uint16_t *ho16 = malloc(b.nq * 2);
    float *o = malloc(b.nq * 4);
    CK(cudaMemcpy(ho16, o16, b.nq * 2, cudaMemcpyDeviceToHost));
    rp_bf16_to_f32_array(ho16, o, b.nq);
    expect_close("o16", &b.s, o, b.o, b.nq);
    float *lse = to_host(b.l_, b.nl);
    expect_close("lse (bf16 path)", &b.s, lse, b.lse, b.nl);

    poison(delta, b.nl * 4);
    poison(b.dq_, b.nq * 4);
    poison(b.dk_, b.nk * 4);
    poison(b.dv_, b.nk * 4);
    ck_assert_msg(rp_cuda_attn_delta_bf16(&b.s, o16, do16, delta, 0, &why) == 0, "delta: %s", why);
    ck_assert_msg(rp_cuda_attn_backward_bf16(&b.s, q16, k16, v16, do16, b.l_, delta, b.dq_, b.dk_,
                                             b.dv_, 0, &why) == 0,
                  "backward_bf16: %s", why);
    CK(cudaDeviceSynchronize());
    /* delta against the CPU formula on the CPU's o */
    float *hd = to_host(delta, b.nl), *rd = malloc(b.nl * 4);
    for (size_t r = 0; r < b.nl; r++) {
        double acc = 0;
        for (int64_t d = 0; d < b.s.head_dim; d++)
            acc += (double)b.dout[r * b.s.head_dim + d] * b.o[r * b.s.head_dim + d];
        rd[r] = (float)acc;
    }
    expect_close("delta (bf16 path)", &b.s, hd, rd, b.nl);
    check_grads(&b, "bf16", NULL);
    free(hd), free(rd), free(ho16), free(o), free(lse);
    cudaFree(q16), cudaFree(k16), cudaFree(v16), cudaFree(o16), cudaFree(do16), cudaFree(delta);
    teardown(&b);
}
END_TEST

/* Every refusal: -1, a message, no launch (outputs stay poisoned). */
START_TEST(bad_arguments_refused)
{
    const cfg c = {1, 70, 4, 2, 64, 1.0f};
    bufs b;
    setup(&b, &c, 77);
    const char *why = NULL;
    size_t wsb = rp_cuda_attn_workspace_bytes(&b.s, 1);
    void *ws = dev_alloc(wsb);
    poison(b.o_, b.nq * 4);
    poison(b.dq_, b.nq * 4);

    rp_attn_shape bad = b.s;
    bad.head_dim = 12;
    ck_assert_int_eq(rp_cuda_attn_forward(&bad, b.q_, b.k_, b.v_, b.o_, b.l_, ws, wsb, 0, &why), -1);
    ck_assert_msg(why && strstr(why, "head_dim"), "message: %s", why ? why : "(none)");
    ck_assert_uint_eq(rp_cuda_attn_workspace_bytes(&bad, 1), 0);
    bad.head_dim = 136;
    why = NULL;
    ck_assert_int_eq(rp_cuda_attn_backward(&bad, b.q_, b.k_, b.v_, b.o_, b.l_, b.do_, b.dq_, b.dk_,
                                           b.dv_, ws, wsb, 0, &why), -1);
    ck_assert_msg(why && strstr(why, "head_dim"), "message: %s", why ? why : "(none)");
    bad = b.s;
    bad.nkv = 3;
    why = NULL;
    ck_assert_int_eq(rp_cuda_attn_forward(&bad, b.q_, b.k_, b.v_, b.o_, b.l_, ws, wsb, 0, &why), -1);
    ck_assert_msg(why && strstr(why, "nkv"), "message: %s", why ? why : "(none)");
    bad = b.s;
    bad.seqlen = 0;
    ck_assert_int_eq(rp_cuda_attn_forward(&bad, b.q_, b.k_, b.v_, b.o_, b.l_, ws, wsb, 0, &why), -1);
    why = NULL;
    ck_assert_int_eq(rp_cuda_attn_backward(&b.s, b.q_, b.k_, b.v_, b.o_, b.l_, b.do_, b.dq_,
                                           b.dk_, b.dv_, ws, wsb - 1, 0, &why), -1);
    ck_assert_msg(why && strstr(why, "workspace"), "message: %s", why ? why : "(none)");
    why = NULL;
    ck_assert_int_eq(rp_cuda_attn_forward(&b.s, NULL, b.k_, b.v_, b.o_, b.l_, ws, wsb, 0, &why), -1);
    ck_assert_msg(why && strstr(why, "NULL"), "message: %s", why ? why : "(none)");
    why = NULL;
    ck_assert_int_eq(rp_cuda_attn_forward_bf16(&b.s, (const uint16_t *)((char *)ws + 2), ws, ws,
                                               b.o_, NULL, b.l_, 0, &why), -1);
    ck_assert_msg(why && strstr(why, "aligned"), "message: %s", why ? why : "(none)");

    CK(cudaDeviceSynchronize());
    float *o = to_host(b.o_, b.nq), *dq = to_host(b.dq_, b.nq);
    for (size_t i = 0; i < b.nq; i++) {
        ck_assert_msg(isnan(o[i]), "o[%zu] written by a refused call", i);
        ck_assert_msg(isnan(dq[i]), "dq[%zu] written by a refused call", i);
    }
    free(o), free(dq);
    cudaFree(ws);
    teardown(&b);
}
END_TEST

START_TEST(bench_reports_tflops)
{
    const int big = getenv("RP_ATTN_BENCH") != NULL;
    /* Qwen3-1.7B's attention at sequence 4096 when asked, else a small smoke */
    rp_attn_shape s = {.nseq = 1, .seqlen = big ? 4096 : 256, .nheads = 16, .nkv = 8,
                       .head_dim = 128, .block = 64, .scale = 1.0f / sqrtf(128.0f)};
    double f = 0, b = 0;
    const char *why = "";
    ck_assert_msg(rp_cuda_attn_bench(0, &s, big ? 20 : 2, &f, &b, &why) == 0, "bench: %s", why);
    ck_assert(isfinite(f) && f > 0);
    ck_assert(isfinite(b) && b > 0);
    printf("attention bench (seq %lld, heads %lld/%lld, dim %lld): forward %.1f TFLOP/s, "
           "backward %.1f TFLOP/s (%.3g / %.3g FLOP per call)\n",
           (long long)s.seqlen, (long long)s.nheads, (long long)s.nkv, (long long)s.head_dim, f, b,
           rp_cuda_attn_flops(&s, 0), rp_cuda_attn_flops(&s, 1));
    for (int d = 64; big && d <= 128; d += 64) {
        s.head_dim = d;
        s.scale = 1.0f / sqrtf((float)d);
        for (int64_t S = 1024; S <= 16384; S *= 2) {
            s.seqlen = S;
            s.nseq = 16384 / S;
            ck_assert_msg(rp_cuda_attn_bench(0, &s, 10, &f, &b, &why) == 0, "bench: %s", why);
            printf("  dim %d seq %6lld x %2lld: fwd %6.1f  bwd %6.1f TFLOP/s\n", d, (long long)S,
                   (long long)s.nseq, f, b);
        }
    }
}
END_TEST

static Suite *cuda_attention_suite(void)
{
    Suite *s = suite_create("cuda_attention");
    TCase *tc = tcase_create("attention");
    tcase_set_timeout(tc, 120);
    const int n = (int)(sizeof cases / sizeof cases[0]);
    tcase_add_loop_test(tc, fp32_entry_points_match_cpu, 0, n);
    tcase_add_loop_test(tc, bf16_core_matches_cpu, 0, n);
    tcase_add_test(tc, bad_arguments_refused);
    tcase_add_test(tc, bench_reports_tflops);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, cuda_attention_suite, "serial");
    const char *why = "";
    if (rp_cuda_device_count(&why) <= 0) {
        printf("SKIP: no usable CUDA device (%s)\n", why);
        return RP_TEST_SKIP;
    }
    /* CUDA is initialised in this process now: a forked child could not use it */
    setenv("CK_FORK", "no", 1);
    return rp_check_main(argc, argv, cuda_attention_suite, "serial");
}

#else /* built without CUDA */

static Suite *cuda_attention_suite(void) { return suite_create("cuda_attention"); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, cuda_attention_suite, "serial");
    printf("SKIP: built without CUDA\n");
    return RP_TEST_SKIP;
}
#endif
