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
 * Exit 77 without a GPU, 1 when a call fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_probe.h"

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
    char results[16][96];
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
        if (nr < 16)
            snprintf(results[nr++], sizeof results[0], "RESULT attention %ld %.2f %.2f %.2f", seq, f,
                     b, both);
    }
    for (int i = 0; i < nr; i++) puts(results[i]);
    return rc;
}
