/* Proves (on a GPU with cuDNN 9 loadable; exits 77 without either, saying
 * which): the CUDA ops table with --attention cudnn runs attention through
 * cuDNN's fused flash SDPA (kernels/cuda/cudnn_attention.h) and computes
 * what the CPU op (kernels/cpu/attention.h) computes: o, lse, dq, dk, dv
 * within the attention tests' 1e-2 relative (max-abs error over the max-abs
 * reference) on random bf16-exact inputs, causal, 4 query heads over 2 kv
 * heads (and 4/4, 8/1), head dims 64 and 128, sequence lengths that are not
 * multiples of any tile, several sequences a call; every output is poisoned
 * with NaN first, so an element left unwritten fails; forward and backward
 * give the same bits when run twice (the deterministic engine choice); the
 * choice's log line names cuDNN. Document segments with their host copy
 * (the cudnn-documents path, kernels/attn_documents.h) go through cuDNN's
 * ragged layout under --attention cudnn, where a refusal fails the call:
 * documents of 1 to 103 tokens, empty padding entries, GQA, held to the
 * CPU op with the same segments, twice for the bits; documents whose
 * padding cuDNN is not given take the own kernel under auto, and segments
 * without their host copy take it even under --attention cudnn, both
 * agreeing with the CPU op. The dense cases first ran on the H200 of
 * 2026-11-30; the documents cases are written without a GPU (the next
 * window's). bench/gpu/run.sh runs it in its check phase. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rp_check.h"

#if defined(RP_HAVE_CUDA) && defined(RP_HAVE_CUDNN)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/unproven.h"
#include "kernels/attention_choice.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/ops.h"
#include "kernels/cudnn_loader.h"

#define RTOL 1e-2

#define CK(call) ck_assert_msg((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))

static cudaStream_t g_stream;
static cublasHandle_t g_blas;
static rp_kernels g_k;
static rp_error g_err;

static void setup_table(void)
{
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    ck_assert(cublasCreate(&g_blas) == CUBLAS_STATUS_SUCCESS);
    ck_assert(cublasSetStream(g_blas, g_stream) == CUBLAS_STATUS_SUCCESS);
    rp_status s = rp_cuda_kernels_create(0, g_stream, g_blas, &g_k, &g_err);
    ck_assert_msg(s == RP_OK, "rp_cuda_kernels_create: %s", g_err.msg);
    s = rp_cuda_kernels_choose_attention(&g_k, RP_ATTENTION_CUDNN, (1u << RP_UNPROVEN_COUNT) - 1,
                                         &g_err);
    ck_assert_msg(s == RP_OK, "--attention cudnn: %s", g_err.msg);
    const char *note = rp_cuda_kernels_attention_note(&g_k);
    ck_assert_msg(note && strncmp(note, "attention: cudnn 9.", 19) == 0, "note: %s",
                  note ? note : "(none)");
    printf("%s\n", note);
}

static void teardown_table(void)
{
    rp_cuda_kernels_destroy(&g_k);
    cublasDestroy(g_blas);
    cudaStreamDestroy(g_stream);
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

/* host floats (bf16-exact) to device bf16 */
static uint16_t *dev_bf16(const float *h, size_t n)
{
    uint16_t *t = malloc(n * 2);
    ck_assert_ptr_nonnull(t);
    rp_f32_to_bf16_array(h, t, n);
    uint16_t *d = dev_alloc(n * 2);
    CK(cudaMemcpy(d, t, n * 2, cudaMemcpyHostToDevice));
    free(t);
    /* a pageable upload may still be in flight when cudaMemcpy returns, and
     * the ops' stream is non-blocking (it does not wait for the legacy
     * stream the copy is on): finish it here */
    CK(cudaDeviceSynchronize());
    return d;
}

static float *host_rnd(size_t n, uint64_t seed, float sd)
{
    float *v = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(v);
    rp_rng_fill_normal(v, n, seed, 11, 0, 0.0f, sd);
    rp_f32_round_bf16(v, n);
    return v;
}

static float *to_host_f32(const float *d, size_t n)
{
    float *h = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(h);
    CK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

static float *to_host_bf16(const uint16_t *d, size_t n)
{
    uint16_t *t = malloc(n * 2);
    float *h = malloc(n * sizeof(float));
    ck_assert(t && h);
    CK(cudaMemcpy(t, d, n * 2, cudaMemcpyDeviceToHost));
    rp_bf16_to_f32_array(t, h, n);
    free(t);
    return h;
}

static void expect_close(const char *what, const rp_attn_shape *s, const float *got,
                         const float *ref, size_t n)
{
    double maxref = 0, maxdiff = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(got[i]), "%s: element %zu is %f (unwritten or non-finite)", what,
                      i, (double)got[i]);
        maxref = fmax(maxref, fabs((double)ref[i]));
        maxdiff = fmax(maxdiff, fabs((double)got[i] - (double)ref[i]));
    }
    const double rel = maxref > 0 ? maxdiff / maxref : maxdiff;
    ck_assert_msg(rel <= RTOL,
                  "%s: relative error %.3e > %.0e, shape nseq %lld seqlen %lld heads %lld/%lld "
                  "dim %lld",
                  what, rel, RTOL, (long long)s->nseq, (long long)s->seqlen,
                  (long long)s->nheads, (long long)s->nkv, (long long)s->head_dim);
}

typedef struct cfg {
    int64_t nseq, seqlen, nheads, nkv, head_dim;
} cfg;

static const cfg cases[] = {
    {2, 100, 4, 2, 64},  /* the shape: 4 q / 2 kv heads, head_dim 64 */
    {1, 257, 4, 2, 128}, /* head_dim 128, one row past a tile */
    {3, 77, 4, 4, 64},   /* no grouping */
    {1, 200, 8, 1, 128}, /* 8 heads over one kv head */
};

/* One shape against the CPU op, twice: o, lse, dq, dk, dv within RTOL, the
 * same bits both runs. seg (host memory, or NULL): documents packed into
 * the sequences, given to the CPU op as seg_start and to the CUDA op as a
 * device seg_start with seg (its host copy). */
static void check_case(const cfg *c, const int32_t *seg, uint64_t seed)
{
    rp_attn_shape s = {.nseq = c->nseq, .seqlen = c->seqlen, .nheads = c->nheads, .nkv = c->nkv,
                       .head_dim = c->head_dim, .block = 64,
                       .scale = 1.0f / sqrtf((float)c->head_dim), .seg_start = seg};
    const size_t T = (size_t)(c->nseq * c->seqlen);
    const size_t nq = T * (size_t)(c->nheads * c->head_dim), nk = T * (size_t)(c->nkv * c->head_dim),
                 nl = T * (size_t)c->nheads;
    float *q = host_rnd(nq, seed, 1.0f), *k = host_rnd(nk, seed + 1, 1.0f),
          *v = host_rnd(nk, seed + 2, 1.0f), *dout = host_rnd(nq, seed + 3, 1.0f);
    float *o = malloc(nq * 4), *lse = malloc(nl * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4),
          *dv = malloc(nk * 4);
    rp_attn_forward(&s, q, k, v, o, lse);
    rp_attn_backward(&s, q, k, v, o, lse, dout, dq, dk, dv);
    int32_t *seg_ = NULL;
    if (seg) {
        seg_ = dev_alloc(T * sizeof *seg);
        CK(cudaMemcpy(seg_, seg, T * sizeof *seg, cudaMemcpyHostToDevice));
        CK(cudaDeviceSynchronize()); /* as dev_bf16 */
        s.seg_start = seg_;
        s.seg_host = seg;
    }
    uint16_t *q_ = dev_bf16(q, nq), *k_ = dev_bf16(k, nk), *v_ = dev_bf16(v, nk),
             *do_ = dev_bf16(dout, nq), *o_ = dev_alloc(nq * 2);
    float *l_ = dev_alloc(nl * 4), *dq_ = dev_alloc(nq * 4), *dk_ = dev_alloc(nk * 4),
          *dv_ = dev_alloc(nk * 4);
    size_t scratch_floats = g_k.ops->attention_backward_scratch_floats(&s);
    float *scratch = dev_alloc(scratch_floats * 4);
    const rp_kernel_ops *ops = g_k.ops;
    float *first[5] = {0};
    for (int run = 0; run < 2; run++) {
        CK(cudaMemset(o_, 0xff, nq * 2));
        CK(cudaMemset(l_, 0xff, nl * 4));
        CK(cudaMemset(dq_, 0xff, nq * 4));
        CK(cudaMemset(dk_, 0xff, nk * 4));
        CK(cudaMemset(dv_, 0xff, nk * 4));
        /* the poison is on the legacy stream, the ops on a non-blocking one:
         * without this the memsets may land after (or during) the run */
        CK(cudaDeviceSynchronize());
        rp_status st = ops->attention_forward(g_k.state, &s, q_, k_, v_, o_, l_, &g_err);
        if (st == RP_OK)
            st = ops->attention_backward(g_k.state, &s, q_, k_, v_, o_, l_, do_, dq_, dk_, dv_,
                                         scratch, &g_err);
        ck_assert_msg(st == RP_OK, "forward and backward: %s", g_err.msg);
        CK(cudaStreamSynchronize(g_stream));
        float *got[5] = {to_host_bf16(o_, nq), to_host_f32(l_, nl), to_host_f32(dq_, nq),
                         to_host_f32(dk_, nk), to_host_f32(dv_, nk)};
        expect_close("o", &s, got[0], o, nq);
        expect_close("lse", &s, got[1], lse, nl);
        expect_close("dq", &s, got[2], dq, nq);
        expect_close("dk", &s, got[3], dk, nk);
        expect_close("dv", &s, got[4], dv, nk);
        const size_t n[5] = {nq, nl, nq, nk, nk};
        const char *names[5] = {"o", "lse", "dq", "dk", "dv"};
        for (int i = 0; i < 5; i++) {
            if (run == 0) {
                first[i] = got[i];
            } else {
                ck_assert_msg(memcmp(first[i], got[i], n[i] * sizeof(float)) == 0,
                              "%s differs between two runs: not deterministic", names[i]);
                free(first[i]);
                free(got[i]);
            }
        }
    }
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
    cudaFree(q_), cudaFree(k_), cudaFree(v_), cudaFree(do_), cudaFree(o_);
    cudaFree(l_), cudaFree(dq_), cudaFree(dk_), cudaFree(dv_), cudaFree(scratch), cudaFree(seg_);
}

START_TEST(cudnn_matches_cpu_and_repeats)
{
    check_case(&cases[_i], NULL, 500 + 10 * (uint64_t)_i);
}
END_TEST

/* Shapes with documents: each sequence's document starts, -1 ending each
 * sequence's list */
typedef struct documents_case {
    cfg shape;
    int starts[2][8];
} documents_case;

static const documents_case documents_cases[] = {
    /* 4 documents of 40 to 103 tokens: 4 entries of 128 */
    {{1, 257, 4, 2, 128}, {{0, 40, 97, 200, -1}}},
    /* 12 documents of 1 to 64 tokens over two sequences: 16 entries of 64,
     * 4 of them empty */
    {{2, 300, 4, 2, 64}, {{0, 1, 3, 64, 128, 190, 254, -1}, {0, 64, 128, 192, 256, -1}}},
    /* 8 query heads over one kv head, 2 documents of 100 */
    {{1, 200, 8, 1, 128}, {{0, 100, -1}}},
};

/* seg_start [nseq * seqlen] of a case's starts */
static int32_t *segments_of(const documents_case *c)
{
    int32_t *seg = malloc((size_t)(c->shape.nseq * c->shape.seqlen) * sizeof *seg);
    ck_assert_ptr_nonnull(seg);
    for (int64_t j = 0; j < c->shape.nseq; j++) {
        int cur = 0;
        for (int64_t t = 0; t < c->shape.seqlen; t++) {
            for (int i = 0; i < 8 && c->starts[j][i] >= 0; i++)
                cur = t >= c->starts[j][i] ? c->starts[j][i] : cur;
            seg[j * c->shape.seqlen + t] = cur;
        }
    }
    return seg;
}

/* Documents through cuDNN's ragged layout under --attention cudnn (a
 * refusal fails the call): as the CPU op, twice the same bits */
START_TEST(documents_through_cudnn)
{
    int32_t *seg = segments_of(&documents_cases[_i]);
    check_case(&documents_cases[_i].shape, seg, 700 + 10 * (uint64_t)_i);
    free(seg);
    /* which way of writing the graph cuDNN took, for the GPU window's row */
    rp_cuda_documents_report d;
    rp_cuda_kernels_documents_calls(&g_k, &d);
    ck_assert_msg(d.graph[0] && d.graph[1], "cuDNN ran the documents' calls: their graphs named");
    printf("CUDNN DOCUMENTS GRAPHS: case %d: forward with %s, backward with %s\n", _i, d.graph[0],
           d.graph[1]);
    fflush(stdout);
}
END_TEST

/* Documents of 48, 52 and 924 tokens in 1024: four entries of 1024 would
 * hold four times the dense call's scores, past the twice a run reserves,
 * so cuDNN is not given them (rp_attn_documents_refusal) and under auto
 * the own kernel runs them */
START_TEST(uneven_documents_take_the_own_kernel_under_auto)
{
    rp_status st = rp_cuda_kernels_choose_attention(&g_k, RP_ATTENTION_AUTO,
                                                    (1u << RP_UNPROVEN_COUNT) - 1, &g_err);
    ck_assert_msg(st == RP_OK, "--attention auto: %s", g_err.msg);
    const documents_case uneven = {{1, 1024, 4, 2, 64}, {{0, 48, 100, -1}}};
    int32_t *seg = segments_of(&uneven);
    rp_cuda_documents_report before, after;
    rp_cuda_kernels_documents_calls(&g_k, &before);
    check_case(&uneven.shape, seg, 800);
    free(seg);
    /* the run's last line counts them: 2 runs of a forward and a backward,
     * none through cuDNN, and says why the first was refused */
    ck_assert_msg(rp_cuda_kernels_documents_calls(&g_k, &after),
                  "the cudnn-documents path is on under auto with every path allowed");
    ck_assert_int_eq(after.calls - before.calls, 4);
    ck_assert_int_eq(after.through_cudnn - before.through_cudnn, 0);
    ck_assert_msg(strstr(after.first_refused, "too uneven for cuDNN's padded layout") != NULL,
                  "the first refusal kept: '%s'", after.first_refused);
    st = rp_cuda_kernels_choose_attention(&g_k, RP_ATTENTION_CUDNN, (1u << RP_UNPROVEN_COUNT) - 1,
                                          &g_err);
    ck_assert_msg(st == RP_OK, "--attention cudnn: %s", g_err.msg);
}
END_TEST

/* Segments without their host copy never reach cuDNN, even under
 * --attention cudnn with every CUDA path on: the own kernel runs them and
 * agrees with the CPU op */
START_TEST(segments_take_the_own_kernel)
{
    rp_status st = rp_cuda_kernels_choose_attention(&g_k, RP_ATTENTION_CUDNN,
                                                    (1u << RP_UNPROVEN_COUNT) - 1, &g_err);
    ck_assert_msg(st == RP_OK, "--attention cudnn: %s", g_err.msg);
    rp_attn_shape s = {.nseq = 1, .seqlen = 96, .nheads = 4, .nkv = 2, .head_dim = 64,
                       .block = 64, .scale = 0.125f};
    const size_t T = 96, nq = T * 256, nk = T * 128, nl = T * 4;
    int32_t starts[96];
    for (int t = 0; t < 96; t++)
        starts[t] = t < 40 ? 0 : 40;
    float *q = host_rnd(nq, 7, 1.0f), *k = host_rnd(nk, 8, 1.0f), *v = host_rnd(nk, 9, 1.0f);
    float *o = malloc(nq * 4), *lse = malloc(nl * 4);
    s.seg_start = starts;
    rp_attn_forward(&s, q, k, v, o, lse);
    int32_t *starts_ = dev_alloc(sizeof starts);
    CK(cudaMemcpy(starts_, starts, sizeof starts, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* as dev_bf16 */
    s.seg_start = starts_;
    uint16_t *q_ = dev_bf16(q, nq), *k_ = dev_bf16(k, nk), *v_ = dev_bf16(v, nk),
             *o_ = dev_alloc(nq * 2);
    float *l_ = dev_alloc(nl * 4);
    /* NaN first, as check_case's outputs: an element left unwritten fails */
    CK(cudaMemset(o_, 0xff, nq * 2));
    CK(cudaMemset(l_, 0xff, nl * 4));
    CK(cudaDeviceSynchronize());
    st = g_k.ops->attention_forward(g_k.state, &s, q_, k_, v_, o_, l_, &g_err);
    ck_assert_msg(st == RP_OK, "forward with segments: %s", g_err.msg);
    CK(cudaStreamSynchronize(g_stream));
    float *got = to_host_bf16(o_, nq), *gl = to_host_f32(l_, nl);
    expect_close("o (segments)", &s, got, o, nq);
    expect_close("lse (segments)", &s, gl, lse, nl);
    free(got), free(gl), free(q), free(k), free(v), free(o), free(lse);
    cudaFree(starts_), cudaFree(q_), cudaFree(k_), cudaFree(v_), cudaFree(o_), cudaFree(l_);
    /* back to the fixture's choice for whatever runs next */
    st = rp_cuda_kernels_choose_attention(&g_k, RP_ATTENTION_CUDNN, (1u << RP_UNPROVEN_COUNT) - 1,
                                          &g_err);
    ck_assert_msg(st == RP_OK, "--attention cudnn: %s", g_err.msg);
}
END_TEST

static Suite *cudnn_suite(void)
{
    Suite *s = suite_create("cuda_cudnn_attention");
    TCase *tc = tcase_create("cudnn");
    tcase_set_timeout(tc, 300); /* plans are built (and compiled) on first use */
    tcase_add_unchecked_fixture(tc, setup_table, teardown_table);
    tcase_add_loop_test(tc, cudnn_matches_cpu_and_repeats, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, documents_through_cudnn, 0,
                        (int)(sizeof documents_cases / sizeof documents_cases[0]));
    tcase_add_test(tc, uneven_documents_take_the_own_kernel_under_auto);
    tcase_add_test(tc, segments_take_the_own_kernel);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, cudnn_suite, "serial");
    const char *why = "";
    if (rp_cuda_device_count(&why) <= 0) {
        printf("SKIP: no usable CUDA device (%s)\n", why);
        return RP_TEST_SKIP;
    }
    rp_cudnn_library lib;
    char lwhy[640];
    if (rp_cudnn_library_open(&lib, lwhy, sizeof lwhy) != 0) {
        printf("SKIP: cuDNN cannot be loaded: %s\n", lwhy);
        return RP_TEST_SKIP;
    }
    rp_cudnn_library_close(&lib);
    setenv("CK_FORK", "no", 1); /* CUDA is initialised in this process now */
    return rp_check_main(argc, argv, cudnn_suite, "serial");
}

#else /* built without CUDA or without cuDNN's headers */

static Suite *cudnn_suite(void) { return suite_create("cuda_cudnn_attention"); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, cudnn_suite, "serial");
    printf("SKIP: built without CUDA or without cuDNN's headers\n");
    return RP_TEST_SKIP;
}
#endif
