/* bench_attention_documents: what packing documents costs in attention.
 *
 * One sample of S tokens holding 8 documents of S/8 tokens, against the
 * same sample as one document of S tokens (causal attention over all of
 * it), with the CPU attention kernel (src/kernels/cpu/attention.c) forward
 * and backward, in the same run. Attention that skips work outside the
 * documents costs about sum(L_d^2) / S^2 = 1/8 of the whole sample's; the
 * report gives the measured time ratio beside that ideal.
 *
 *   bench_attention_documents [-s S] [-r REPS]   (defaults: 2048 tokens, 5)
 * Shape: 16 query heads, 8 kv heads, head_dim 64 (a small Qwen3's), block
 * 64. Threads: OMP_NUM_THREADS. Each time is the best of REPS runs. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"
#include "kernels/cpu/attention.h"
#include "bench_args.h"

enum { NH = 16, NKV = 8, HD = 64, DOCS = 8 };


typedef struct bufs {
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} bufs;

/* Best forward + backward time of REPS runs, in seconds. */
static double best_time(const rp_attn_shape *s, const bufs *b, int reps)
{
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        rp_attn_forward(s, b->q, b->k, b->v, b->o, b->lse);
        rp_attn_backward(s, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv);
        double t = omp_get_wtime() - t0;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    long long S = 2048, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && argv[i][0] == '-' && argv[i][1] == 's' && !argv[i][2])
            S = parse_count(argv[++i], argv[0], DOCS);
        else if (i + 1 < argc && argv[i][0] == '-' && argv[i][1] == 'r' && !argv[i][2])
            reps = parse_count(argv[++i], argv[0], 1);
        else {
            fprintf(stderr, "usage: %s [-s TOKENS] [-r REPS]\n", argv[0]);
            return 2;
        }
    }
    if (S % DOCS) {
        fprintf(stderr, "%s: -s %lld is not a multiple of %d\n", argv[0], S, DOCS);
        return 2;
    }
    size_t nq = (size_t)S * NH * HD, nk = (size_t)S * NKV * HD;
    bufs b = {malloc(nq * 4), malloc(nk * 4), malloc(nk * 4), malloc(nq * 4),
              malloc((size_t)S * NH * 4), malloc(nq * 4), malloc(nq * 4), malloc(nk * 4),
              malloc(nk * 4)};
    int32_t *seg = malloc((size_t)S * sizeof *seg);
    if (!b.q || !b.k || !b.v || !b.o || !b.lse || !b.dout || !b.dq || !b.dk || !b.dv || !seg) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    rp_rng_fill_normal(b.q, nq, 1, 0, 0, 0.0f, 1.0f);
    rp_rng_fill_normal(b.k, nk, 2, 0, 0, 0.0f, 1.0f);
    rp_rng_fill_normal(b.v, nk, 3, 0, 0, 0.0f, 1.0f);
    rp_rng_fill_normal(b.dout, nq, 4, 0, 0, 0.0f, 1.0f);
    for (long long t = 0; t < S; t++)
        seg[t] = (int32_t)(t / (S / DOCS) * (S / DOCS));
    rp_attn_shape one = {1, S, NH, NKV, HD, 64, 0.125f, NULL, 0, NULL, NULL}, packed = one;
    packed.seg_start = seg;
    best_time(&one, &b, 1); /* warm-up: pages touched, threads started */
    double t_one = best_time(&one, &b, (int)reps);
    double t_packed = best_time(&packed, &b, (int)reps);
    double ideal = (double)DOCS * (S / DOCS) * (S / DOCS + 1) / ((double)S * (S + 1));
    printf("attention forward+backward, %lld tokens, %d heads (%d kv), head_dim %d, %d "
           "thread(s), best of %lld\n", S, NH, NKV, HD, omp_get_max_threads(), reps);
    printf("one document of %lld tokens: %.2f ms; %d documents of %lld: %.2f ms\n", S,
           t_one * 1e3, DOCS, S / DOCS, t_packed * 1e3);
    printf("RESULT attention_documents_time_ratio %.3f (ideal, by key-query pairs: %.3f)\n",
           t_packed / t_one, ideal);
    free(b.q), free(b.k), free(b.v), free(b.o), free(b.lse), free(b.dout), free(b.dq);
    free(b.dk), free(b.dv), free(seg);
    return 0;
}
