/* bench_head: the head (final RMSNorm, LM head and token cross-entropy,
 * src/model/head.c's rp_head_forward_backward on the CUDA kernel table)
 * forward and backward over one microbatch of Qwen3-1.7B's shape (hidden
 * 2048, vocabulary 151936, 4096 tokens), against its own GEMMs timed alone
 * in the same run: issue 38 asks for the head at >= 0.8 of its GEMM time.
 *
 *   bench_head [-t TOKENS] [-r REPS]
 *
 * Six ways: chunks of 832 tokens (the fixed 2^27 logits) and of the rows
 * this GPU's whole memory gives (logits_rows, as train sizes them; the
 * microbatch at most), each with cross-entropy's gradient formed in place in
 * fp32 then converted to bf16 (the path every run takes), written in bf16
 * in the pass that forms it (RP_ALLOW_UNPROVEN_CUDA=fused-xent in a run),
 * and that with the row sums in float (fused-xent,xent-fp32). The GEMM time
 * of a chunking is the head's three GEMMs per chunk
 * through the same table on the same shapes (logits = h W^T in fp32,
 * dW += dlogits^T h, dh = dlogits W; bf16 operands holding the random
 * weights' values, never a constant), nothing else.
 * Time: median of REPS calls after one warm-up (each call ends by
 * downloading the losses, which waits for the stream).
 * Checked on the way: the loss is finite, the first two cross-entropy paths
 * give the same loss and the same input gradient bit for bit (the op
 * contract, kernels/ops.h) at each chunking, and the float sums' loss is
 * within 1e-5 of theirs (relative; its bits differ); a difference is exit 1.
 * Output: a table, then "RESULT head CHUNK PATH HEAD_MS GEMM_MS" lines
 * (PATH convert, fused or fused-fp32) that bench/gpu/run.sh reads.
 * Exit 77 without a GPU, 1 when a call fails or a check does not hold. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/unproven.h"
#include "kernels/attention_choice.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/ops.h"
#include "model/layers.h"

#define HIDDEN 2048
#define VOCAB 151936

static void die(const char *what, const char *why)
{
    fprintf(stderr, "bench_head: %s: %s\n", what, why);
    exit(1);
}

static void ck(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        die(what, cudaGetErrorString(e));
}

static void *dev(size_t bytes)
{
    void *p = NULL;
    ck(cudaMalloc(&p, bytes ? bytes : 16), "cudaMalloc");
    return p;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 11;
}

/* uniform in [-a, a) */
static float uniform(uint64_t *s, float a)
{
    return (float)((double)lcg(s) / 9007199254740992.0 * 2.0 - 1.0) * a;
}

typedef struct inputs {
    rp_model_config cfg;
    int64_t T;
    void *norm, *lm; /* bf16 */
    float *x, *dx, *dnorm, *dlm;
    int32_t *targets;
} inputs;

/* The median ms of reps head calls (after one warm-up) with chunks of C
 * rows; *loss the last call's loss, dx_out (host, T*H) its input gradient. */
static double time_head(const rp_kernels *k, inputs *in, int64_t C, float *ws, int reps,
                        double *loss, float *dx_out)
{
    rp_error err = {0};
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int i = -1; i < reps; i++) {
        const double t0 = now_ms();
        if (rp_head_forward_backward(k, &in->cfg, in->norm, in->lm, RP_BF16, in->x, in->targets,
                                     NULL, in->T, 1.0f / (float)in->T, in->dx, in->dnorm,
                                     in->dlm, C, ws, loss, &err) != RP_OK)
            die("rp_head_forward_backward", err.msg);
        ck(cudaDeviceSynchronize(), "the head");
        if (i >= 0)
            t[i] = now_ms() - t0;
    }
    ck(cudaMemcpy(dx_out, in->dx, sizeof(float) * (size_t)(in->T * HIDDEN),
                  cudaMemcpyDeviceToHost),
       "downloading dx");
    qsort(t, (size_t)reps, sizeof(double), by_value);
    const double m = t[reps / 2];
    free(t);
    return m;
}

/* n bf16 values into dst: the weights' `period` values, repeated. */
static void fill_from_weights(void *dst, size_t n, const void *weights, size_t period)
{
    for (size_t at = 0; at < n; at += period)
        ck(cudaMemcpy((uint16_t *)dst + at, weights, (n - at < period ? n - at : period) * 2,
                      cudaMemcpyDeviceToDevice),
           "filling the GEMMs' operands");
}

/* The median ms of reps rounds of the head's three GEMMs over T tokens in
 * chunks of C rows, through the table's ops on the head's shapes. */
static double time_gemms(const rp_kernels *k, const inputs *in, int64_t C, int reps)
{
    const int64_t H = HIDDEN, V = VOCAB;
    void *h = dev((size_t)(C * H) * 2), *dl = dev((size_t)(C * V) * 2);
    float *logits = dev((size_t)(C * V) * 4), *dh = dev((size_t)(C * H) * 4);
    /* the operands from the random weights' bits, not a constant whose
     * bits never toggle: like zeros (a bf16 product ran 13% faster on
     * zeros than on random data on an H200, the device notes' METHOD.md)
     * it can run faster than the head's random inputs, lowering the ratio */
    fill_from_weights(h, (size_t)(C * H), in->lm, (size_t)(V * H));
    fill_from_weights(dl, (size_t)(C * V), in->lm, (size_t)(V * H));
    rp_error err = {0};
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int i = -1; i < reps; i++) {
        ck(cudaDeviceSynchronize(), "before the GEMMs");
        const double t0 = now_ms();
        for (int64_t c0 = 0; c0 < in->T; c0 += C) {
            const int64_t n = in->T - c0 < C ? in->T - c0 : C;
            if (k->ops->linear_forward(k->state, h, in->lm, RP_BF16, NULL, NULL, logits, NULL, n,
                                       H, V, &err) != RP_OK ||
                k->ops->linear_backward_weight(k->state, dl, h, in->dlm, n, H, V, &err) !=
                    RP_OK ||
                k->ops->linear_backward_input(k->state, dl, in->lm, RP_BF16, dh, NULL, n, H, V,
                                              0, &err) != RP_OK)
                die("the head's GEMMs", err.msg);
        }
        ck(cudaDeviceSynchronize(), "the GEMMs");
        if (i >= 0)
            t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), by_value);
    const double m = t[reps / 2];
    free(t);
    cudaFree(h), cudaFree(dl), cudaFree(logits), cudaFree(dh);
    return m;
}

int main(int argc, char **argv)
{
    int64_t T = 4096;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            T = atol(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-t TOKENS] [-r REPS]\n", argv[0]);
            return 2;
        }
    }
    if (T < 1 || reps < 1) {
        fprintf(stderr, "bench_head: -t and -r must be >= 1\n");
        return 2;
    }
    const char *why = NULL;
    int ndev = rp_cuda_device_count(&why);
    if (ndev <= 0) {
        printf("bench_head: no CUDA device (%s); nothing measured\n", ndev < 0 ? why : "0 devices");
        return 77;
    }
    ck(cudaSetDevice(0), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    ck(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    cudaStream_t stream;
    ck(cudaStreamCreate(&stream), "cudaStreamCreate");
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(blas, stream) !=
                                                            CUBLAS_STATUS_SUCCESS)
        die("cuBLAS", "creating the handle");
    rp_kernels k;
    rp_error err = {0};
    if (rp_cuda_kernels_create(0, stream, blas, &k, &err) != RP_OK)
        die("rp_cuda_kernels_create", err.msg);

    const int64_t H = HIDDEN, V = VOCAB;
    inputs in;
    memset(&in, 0, sizeof in);
    in.cfg.hidden_size = H, in.cfg.vocab_size = V, in.cfg.rms_norm_eps = 1e-6;
    in.T = T;
    /* the chunks: the fixed 2^27 logits, and the rows of this GPU's memory */
    const int64_t fixed = k.ops->logits_rows(V, 0);
    const int64_t by_memory = k.ops->logits_rows(V, (int64_t)total_b);
    const int64_t chunks[2] = {fixed < T ? fixed : T, by_memory < T ? by_memory : T};
    const int nchunks = chunks[1] == chunks[0] ? 1 : 2;

    /* inputs: weights ~U(-0.03, 0.03) in bf16, activations ~U(-2, 2) */
    uint64_t s = 38;
    uint16_t *lm_h = malloc(sizeof(uint16_t) * (size_t)(V * H));
    uint16_t norm_h[HIDDEN];
    float *x_h = malloc(sizeof(float) * (size_t)(T * H));
    int32_t *tg_h = malloc(sizeof(int32_t) * (size_t)T);
    if (!lm_h || !x_h || !tg_h)
        die("host memory", "out of memory");
    for (int64_t i = 0; i < V * H; i++)
        lm_h[i] = rp_f32_to_bf16(uniform(&s, 0.03f));
    for (int64_t i = 0; i < H; i++)
        norm_h[i] = rp_f32_to_bf16(1.0f + uniform(&s, 0.1f));
    for (int64_t i = 0; i < T * H; i++)
        x_h[i] = uniform(&s, 2.0f);
    for (int64_t t = 0; t < T; t++)
        tg_h[t] = (int32_t)(lcg(&s) % (uint64_t)V);
    in.lm = dev((size_t)(V * H) * 2), in.norm = dev((size_t)H * 2);
    in.x = dev((size_t)(T * H) * 4), in.dx = dev((size_t)(T * H) * 4);
    in.dnorm = dev((size_t)H * 4), in.dlm = dev((size_t)(V * H) * 4);
    in.targets = dev((size_t)T * 4);
    ck(cudaMemcpy(in.lm, lm_h, (size_t)(V * H) * 2, cudaMemcpyHostToDevice), "upload");
    ck(cudaMemcpy(in.norm, norm_h, (size_t)H * 2, cudaMemcpyHostToDevice), "upload");
    ck(cudaMemcpy(in.x, x_h, (size_t)(T * H) * 4, cudaMemcpyHostToDevice), "upload");
    ck(cudaMemcpy(in.targets, tg_h, (size_t)T * 4, cudaMemcpyHostToDevice), "upload");
    ck(cudaMemset(in.dnorm, 0, (size_t)H * 4), "zeroing");
    ck(cudaMemset(in.dlm, 0, (size_t)(V * H) * 4), "zeroing");
    free(lm_h), free(x_h), free(tg_h);
    size_t wsf = 0;
    for (int c = 0; c < nchunks; c++) {
        size_t f = rp_head_workspace_floats(k.ops, RP_BF16, &in.cfg, T, chunks[c]);
        wsf = f > wsf ? f : wsf;
    }
    float *ws = dev(wsf * 4);

    printf("head of Qwen3-1.7B's shape: hidden %lld, vocabulary %lld, %lld tokens; GPU memory "
           "%.1f GiB (the memory chunk %lld rows, %.1f MiB of workspace at most)\n",
           (long long)H, (long long)V, (long long)T, total_b / 1073741824.0, (long long)by_memory,
           wsf * 4 / 1048576.0);
    printf("%-8s %-10s %10s %10s %8s %12s\n", "chunk", "xent", "head ms", "GEMMs ms", "ratio",
           "head TF/s");
    const double flops = 6.0 * (double)T * (double)H * (double)V; /* the three GEMMs */
    float *dx_a = malloc(sizeof(float) * (size_t)(T * H)),
          *dx_b = malloc(sizeof(float) * (size_t)(T * H));
    char results[6][96];
    int nr = 0, rc = 0;
    static const struct {
        const char *name;
        unsigned paths; /* RP_ALLOW_UNPROVEN_CUDA's, as a run would give them */
    } xent[3] = {
        {"convert", 0u},
        {"fused", 1u << RP_UNPROVEN_FUSED_XENT},
        {"fused-fp32", 1u << RP_UNPROVEN_FUSED_XENT | 1u << RP_UNPROVEN_XENT_FP32},
    };
    for (int c = 0; c < nchunks; c++) {
        const double gemm_ms = time_gemms(&k, &in, chunks[c], reps);
        double loss[3];
        for (int x = 0; x < 3; x++) {
            if (rp_cuda_kernels_choose_attention(&k, RP_ATTENTION_OWN, xent[x].paths, &err) !=
                RP_OK)
                die("rp_cuda_kernels_choose_attention", err.msg);
            const double ms = time_head(&k, &in, chunks[c], ws, reps, &loss[x],
                                        x == 0 ? dx_a : dx_b);
            const char *path = xent[x].name;
            printf("%-8lld %-10s %10.2f %10.2f %8.3f %12.1f\n", (long long)chunks[c], path, ms,
                   gemm_ms, gemm_ms / ms, flops / ms / 1e9);
            snprintf(results[nr++], sizeof results[0], "RESULT head %lld %s %.3f %.3f",
                     (long long)chunks[c], path, ms, gemm_ms);
            if (x == 1 && (!isfinite(loss[0]) || memcmp(&loss[0], &loss[1], sizeof(double)) != 0 ||
                           memcmp(dx_a, dx_b, sizeof(float) * (size_t)(T * H)) != 0)) {
                fprintf(stderr, "bench_head: chunk %lld: the fused cross-entropy differs from "
                        "the in-place one (loss %.17g vs %.17g, or dx)\n", (long long)chunks[c],
                        loss[1], loss[0]);
                rc = 1;
            }
        }
        if (!(fabs(loss[2] - loss[0]) <= 1e-5 * fabs(loss[0]))) {
            fprintf(stderr, "bench_head: chunk %lld: the float sums' loss %.17g is not within "
                    "1e-5 of the double sums' %.17g\n", (long long)chunks[c], loss[2], loss[0]);
            rc = 1;
        }
    }
    for (int i = 0; i < nr; i++)
        printf("%s\n", results[i]);
    free(dx_a), free(dx_b);
    return rc;
}
