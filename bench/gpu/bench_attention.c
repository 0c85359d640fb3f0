/* bench_attention: causal grouped-query flash attention (src/kernels/cuda/
 * attention.h) forward, backward and forward+backward TFLOP/s with
 * Qwen3-1.7B's heads (16 query heads, 8 kv heads, head_dim 128), one
 * sequence of each length. bench/gpu/run.sh sets them against the bf16 GEMM
 * peak measured in the same run (target: fwd+bwd >= 50%).
 *
 *   bench_attention [-s "4096 8192 16384 32768"] [-i ITERS]
 *
 * The timing itself is rp_cuda_attn_bench (random inputs, one warm-up, event
 * timing of the bf16 core; FLOPs by rp_cuda_attn_flops: causal forward
 * 2*2*(S^2/2)*hd*heads, backward 2.5x that). Correctness is the business of
 * mpi-tests/test_cuda_attention (against the CPU kernel). fwd+bwd =
 * (F_fwd + F_bwd) / (t_fwd + t_bwd).
 * Output: a table, then "RESULT attention SEQ FWD BWD FWDBWD" lines.
 * In a build with cuDNN's headers, where cuDNN loads (RP_CUDNN_LIBRARY, else
 * libcudnn.so.9), the same shapes through cuDNN's fused flash SDPA
 * (kernels/cuda/cudnn_attention.h, as --attention cudnn runs it: bf16 in,
 * the statistics' transposes and the gradients' widening to fp32 timed
 * too) follow as "RESULT attention-cudnn SEQ FWD BWD FWDBWD", each after
 * "RESULT attention-cudnn-workspace SEQ FWD_BYTES BWD_BYTES RESERVED": the
 * workspace cuDNN's plans ask for against what a run reserves for it
 * (rp_attention_cudnn_workspace_budget), or a line
 * saying why not (a shape it refuses, cuDNN absent); correctness is
 * mpi-tests/test_cuda_cudnn_attention's.
 * Then documents: one sequence of SEQ tokens packed with documents of LEN
 * (4096 in 512s, 16384 in 1024s), through the own kernel's segments and
 * through cuDNN's ragged layout (kernels/attn_documents.h, the
 * cudnn-documents path), as "RESULT attention-documents SEQ LEN OWN_MS
 * CUDNN_MS": the time of a forward and a backward each (both timed as
 * above, so the ratio is the speed-up) and a line naming how cuDNN's
 * graphs were written ("cudnn documents graphs, ..."), or a line saying
 * why cuDNN did not take them.
 * Exit 77 without a GPU, 1 when a call fails. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_probe.h"
#ifdef RP_HAVE_CUDNN
#include <cuda_runtime_api.h>

#include "kernels/cuda/cudnn_attention.h"
#include "kernels/attention_choice.h"
#include "kernels/cudnn_loader.h"

/* n bf16 values uniform in [-1, 1) into device memory dst: a block of
 * them made on the host from seed, repeated. 0, or the CUDA error. */
static cudaError_t fill_random(void *dst, size_t n, uint64_t seed)
{
    enum { BLOCK = 1 << 22 };
    static uint16_t block[BLOCK];
    for (size_t i = 0; i < BLOCK; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const float f = (float)(int)(seed >> 56 & 0xff) / 128.0f - 1.0f; /* exact in bf16 */
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        block[i] = (uint16_t)(bits >> 16);
    }
    cudaError_t e = cudaSuccess;
    for (size_t at = 0; at < n && e == cudaSuccess; at += BLOCK)
        e = cudaMemcpy((uint16_t *)dst + at, block, (n - at < BLOCK ? n - at : BLOCK) * 2,
                       cudaMemcpyHostToDevice);
    return e;
}

/* TFLOP/s of cuDNN's forward and backward on one shape: one warm-up call of
 * each (the plans are built then), then `it` calls of each between events.
 * Random inputs, as rp_cuda_attn_bench's: the work does not depend on the
 * values, but a constant's bits never toggle, and a product over such data
 * can run faster (on zeros a bf16 GEMM ran 13% faster on an H200), which
 * would flatter cuDNN against the own kernel. 0; RP_CUDNN_REFUSED with why;
 * -2 with why. */
static int time_cudnn(rp_cudnn_attention *a, const rp_attn_shape *s, int it, double *f,
                      double *b, char *why, size_t why_len)
{
    size_t rows = (size_t)(s->nseq * s->seqlen), nq = rows * (size_t)(s->nheads * s->head_dim),
           nk = rows * (size_t)(s->nkv * s->head_dim), nl = rows * (size_t)s->nheads;
    void *q = NULL, *k = NULL, *v = NULL, *o = NULL, *d = NULL, *lse = NULL, *dq = NULL,
         *dk = NULL, *dv = NULL;
    cudaEvent_t ev[4] = {NULL, NULL, NULL, NULL}; /* forward from, to; backward from, to */
    int rc = -2;
    if (cudaMalloc(&q, nq * 2) || cudaMalloc(&k, nk * 2) || cudaMalloc(&v, nk * 2) ||
        cudaMalloc(&o, nq * 2) || cudaMalloc(&d, nq * 2) || cudaMalloc(&lse, nl * 4) ||
        cudaMalloc(&dq, nq * 4) || cudaMalloc(&dk, nk * 4) || cudaMalloc(&dv, nk * 4) ||
        cudaEventCreate(&ev[0]) || cudaEventCreate(&ev[1]) || cudaEventCreate(&ev[2]) ||
        cudaEventCreate(&ev[3])) {
        snprintf(why, why_len, "allocating: %s", cudaGetErrorString(cudaGetLastError()));
        goto out;
    }
    cudaError_t e = fill_random(q, nq, 1);
    if (e == cudaSuccess) e = fill_random(k, nk, 2);
    if (e == cudaSuccess) e = fill_random(v, nk, 3);
    if (e == cudaSuccess) e = fill_random(d, nq, 4);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "filling the inputs: %s", cudaGetErrorString(e));
        goto out;
    }
    for (int pass = 0; pass < 2; pass++) { /* 0: forward, 1: backward */
        for (int i = 0; i <= it; i++) {   /* call 0: the warm-up (the plan is built) */
            if (i == 1)
                cudaEventRecord(ev[2 * pass], 0);
            rc = pass == 0 ? rp_cudnn_attention_forward(a, s, q, k, v, o, lse, why, why_len)
                           : rp_cudnn_attention_backward(a, s, q, k, v, o, lse, d, dq, dk, dv,
                                                         why, why_len);
            if (rc)
                goto out;
        }
        cudaEventRecord(ev[2 * pass + 1], 0);
    }
    if (cudaEventSynchronize(ev[3]) != cudaSuccess) {
        snprintf(why, why_len, "%s", cudaGetErrorString(cudaGetLastError()));
        rc = -2;
        goto out;
    }
    float tf = 0, tb = 0;
    cudaEventElapsedTime(&tf, ev[0], ev[1]);
    cudaEventElapsedTime(&tb, ev[2], ev[3]);
    *f = rp_cuda_attn_flops(s, 0) * it / (tf * 1e-3) / 1e12;
    *b = rp_cuda_attn_flops(s, 1) * it / (tb * 1e-3) / 1e12;
    rc = 0;
out:
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(d), cudaFree(lse);
    cudaFree(dq), cudaFree(dk), cudaFree(dv);
    for (int i = 0; i < 4; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    const char *seqs = "4096 8192 16384 32768";
    int iters = 0; /* 0: by length */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc) seqs = argv[++i];
        else if (!strcmp(argv[i], "-i") && i + 1 < argc) iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-s \"SEQ ...\"] [-i ITERS]\n", argv[0]);
            return 2;
        }
    }
    const char *why = NULL;
    int n = rp_cuda_device_count(&why);
    if (n <= 0) {
        printf("bench_attention: no CUDA device (%s); nothing measured\n", n < 0 ? why : "0 devices");
        return 77;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", seqs);
    printf("%-8s %10s %10s %14s\n", "seq", "fwd TF/s", "bwd TF/s", "fwd+bwd TF/s");
    int rc = 0;
    char results[32][96];
    int nr = 0;
    for (char *tok = strtok(buf, " ,"); tok; tok = strtok(NULL, " ,")) {
        long seq = atol(tok);
        if (seq < 64) {
            fprintf(stderr, "bench_attention: sequence '%s' must be >= 64\n", tok);
            return 2;
        }
        rp_attn_shape s = {.nseq = 1, .seqlen = seq, .nheads = 16, .nkv = 8, .head_dim = 128,
                           .block = 64, .scale = (float)(1.0 / sqrt(128.0))};
        /* about 40 ms of forward per length at ~400 TFLOP/s */
        int it = iters > 0 ? iters : (int)(1.6e13 / rp_cuda_attn_flops(&s, 0)) + 1;
        if (it > 50) it = 50;
        double f = 0, b = 0;
        if (rp_cuda_attn_bench(0, &s, it, &f, &b, &why) != 0) {
            fprintf(stderr, "bench_attention: seq %ld: %s\n", seq, why);
            rc = 1;
            continue;
        }
        double ff = rp_cuda_attn_flops(&s, 0), fb = rp_cuda_attn_flops(&s, 1);
        double both = (ff + fb) / (ff / f + fb / b);
        printf("%-8ld %10.1f %10.1f %14.1f\n", seq, f, b, both);
        if (nr < 32)
            snprintf(results[nr++], sizeof results[0], "RESULT attention %ld %.2f %.2f %.2f", seq, f,
                     b, both);
    }
#ifdef RP_HAVE_CUDNN
    rp_cudnn_library lib;
    rp_cudnn_attention *a = NULL;
    char dwhy[1280];
    if (rp_cudnn_library_open(&lib, dwhy, sizeof dwhy) != 0 ||
        rp_cudnn_attention_create(&lib, 0, &a, dwhy, sizeof dwhy) != 0) {
        printf("cudnn: not timed: %s\n", dwhy);
    } else {
        printf("cudnn %zu.%zu.%zu (fused flash SDPA):\n", lib.version / 10000,
               lib.version / 100 % 100, lib.version % 100);
        snprintf(buf, sizeof buf, "%s", seqs);
        for (char *tok = strtok(buf, " ,"); tok; tok = strtok(NULL, " ,")) {
            long seq = atol(tok);
            rp_attn_shape s = {.nseq = 1, .seqlen = seq, .nheads = 16, .nkv = 8, .head_dim = 128,
                               .block = 64, .scale = (float)(1.0 / sqrt(128.0))};
            int it = iters > 0 ? iters : (int)(1.6e13 / rp_cuda_attn_flops(&s, 0)) + 1;
            if (it > 50) it = 50;
            /* what cuDNN's plans ask for against what a run reserves for
             * them (kernels/attention_choice.h): the budget's assumption,
             * 2 bytes a score, measured */
            int64_t wf = 0, wb = 0;
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            char wwhy[1280] = "", bwhy[1280] = "";
            /* a plan refused for exceeding the reservation still says what
             * it asked; a failed or otherwise refused one says nothing, and
             * its 0 bytes must not read as a workspace within the budget */
            const int rf = rp_cudnn_attention_workspace(a, &s, 0, &wf, wwhy, sizeof wwhy);
            const int rb = rp_cudnn_attention_workspace(a, &s, 1, &wb, bwhy, sizeof bwhy);
            size_t budget = rp_attention_cudnn_workspace_budget(&s, total_b);
            if ((rf == 0 || (rf == RP_CUDNN_REFUSED && wf > 0)) &&
                (rb == 0 || (rb == RP_CUDNN_REFUSED && wb > 0))) {
                printf("%-8ld workspace: forward %.1f MiB, backward %.1f MiB; a run reserves "
                       "%.1f MiB for it and %.1f MiB of buffers\n", seq, wf / 1048576.0,
                       wb / 1048576.0, budget / 1048576.0,
                       rp_attention_cudnn_buffer_bytes(&s) / 1048576.0);
                if (nr < 32)
                    snprintf(results[nr++], sizeof results[0],
                             "RESULT attention-cudnn-workspace %ld %lld %lld %zu", seq,
                             (long long)wf, (long long)wb, budget);
            } else {
                printf("%-8ld workspace not measured: forward: %s; backward: %s\n", seq,
                       rf == 0 ? "ok" : wwhy, rb == 0 ? "ok" : bwhy);
            }
            double f = 0, b = 0;
            int r = time_cudnn(a, &s, it, &f, &b, dwhy, sizeof dwhy);
            if (r == RP_CUDNN_REFUSED) {
                printf("%-8ld cudnn refuses: %s\n", seq, dwhy);
                continue;
            }
            if (r != 0) {
                fprintf(stderr, "bench_attention: cudnn seq %ld: %s\n", seq, dwhy);
                rc = 1;
                continue;
            }
            double ff = rp_cuda_attn_flops(&s, 0), fb = rp_cuda_attn_flops(&s, 1);
            double both = (ff + fb) / (ff / f + fb / b);
            printf("%-8ld %10.1f %10.1f %14.1f\n", seq, f, b, both);
            if (nr < 32)
                snprintf(results[nr++], sizeof results[0], "RESULT attention-cudnn %ld %.2f %.2f %.2f",
                         seq, f, b, both);
        }
        /* documents: the own kernel's segments against cuDNN's ragged layout */
        static const long packs[][2] = {{4096, 512}, {16384, 1024}};
        for (size_t i = 0; i < sizeof packs / sizeof packs[0]; i++) {
            const long seq = packs[i][0], len = packs[i][1];
            rp_attn_shape s = {.nseq = 1, .seqlen = seq, .nheads = 16, .nkv = 8, .head_dim = 128,
                               .block = 64, .scale = (float)(1.0 / sqrt(128.0))};
            int it = iters > 0 ? iters : (int)(4 * 1.6e13 / rp_cuda_attn_flops(&s, 0)) + 1;
            if (it > 50) it = 50;
            int32_t *seg = malloc((size_t)seq * sizeof *seg), *seg_dev = NULL;
            if (!seg || cudaMalloc((void **)&seg_dev, (size_t)seq * sizeof *seg) != cudaSuccess) {
                fprintf(stderr, "bench_attention: documents: out of memory\n");
                free(seg);
                rc = 1;
                break;
            }
            for (long t = 0; t < seq; t++)
                seg[t] = (int32_t)(t / len * len);
            cudaMemcpy(seg_dev, seg, (size_t)seq * sizeof *seg, cudaMemcpyHostToDevice);
            s.seg_start = seg_dev;
            s.seg_host = seg;
            const double ff = rp_cuda_attn_flops(&s, 0), fb = rp_cuda_attn_flops(&s, 1);
            double f = 0, b = 0, cf = 0, cb = 0;
            if (rp_cuda_attn_bench(0, &s, it, &f, &b, &why) != 0) {
                fprintf(stderr, "bench_attention: documents %ld in %ld: %s\n", len, seq, why);
                rc = 1;
            } else {
                /* the nominal (dense causal) FLOPs over each figure: times */
                const double own_ms = (ff / f + fb / b) / 1e9;
                int r = time_cudnn(a, &s, it, &cf, &cb, dwhy, sizeof dwhy);
                if (r == 0) {
                    const double cudnn_ms = (ff / cf + fb / cb) / 1e9;
                    printf("documents of %ld in %ld: own kernel %.3f ms, cuDNN %.3f ms "
                           "(forward + backward): %.2fx\n", len, seq, own_ms, cudnn_ms,
                           own_ms / cudnn_ms);
                    /* how the graphs cuDNN took are written (cudnn_attention.h) */
                    const char *gf = rp_cudnn_attention_documents_graph(a, 0);
                    const char *gb = rp_cudnn_attention_documents_graph(a, 1);
                    printf("cudnn documents graphs, %ld in %ld: forward with %s, backward with "
                           "%s\n", len, seq, gf ? gf : "?", gb ? gb : "?");
                    if (nr < 32)
                        snprintf(results[nr++], sizeof results[0],
                                 "RESULT attention-documents %ld %ld %.4f %.4f", seq, len, own_ms,
                                 cudnn_ms);
                } else {
                    printf("documents of %ld in %ld: own kernel %.3f ms; cudnn %s: %s\n", len,
                           seq, own_ms, r == RP_CUDNN_REFUSED ? "refuses" : "failed", dwhy);
                    rc = r == RP_CUDNN_REFUSED ? rc : 1;
                }
            }
            cudaFree(seg_dev);
            free(seg);
        }
        rp_cudnn_attention_destroy(&a);
    }
    rp_cudnn_library_close(&lib);
#endif
    for (int i = 0; i < nr; i++) puts(results[i]);
    return rc;
}
