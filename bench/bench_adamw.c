/* bench_adamw: AdamW throughput against the host-memory bandwidth measured
 * in the same run.
 *
 * AdamW is memory bound: per parameter it reads p, g, m, v (16 B) and writes
 * p, m, v (12 B), plus 2 B when it also writes the bf16 compute copy. The
 * ceiling is the best of four bandwidth kernels over the same memory
 * (memcpy, STREAM triad, an in-place read-modify-write, and AdamW's own
 * access pattern with trivial arithmetic), bytes
 * counted the same way: every byte read plus every byte written once, no
 * write-allocate traffic. The report gives parameters/s and the fraction of
 * the memcpy bandwidth and of the best kernel.
 *
 *   bench_adamw [-n PARAMS] [-r REPS] [-g RANKS]   (defaults: 64Mi parameters, 5)
 * Threads: OMP_NUM_THREADS. Each figure is the best of REPS runs. With -g,
 * also the `roundpipe simulate --optimizer-gbs` value for RANKS ranks that
 * share the threads' memory system (the AdamW + bf16 copy rate / RANKS). */
#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/adamw.h"
#include "bench_args.h"

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [-n PARAMS] [-r REPS] [-g RANKS]\n", prog);
    exit(2);
}


/* This thread's contiguous share of [0, n), the way rp_adamw_step splits. */
static void my_range(size_t n, size_t *lo, size_t *hi)
{
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
    *lo = t * chunk < n ? t * chunk : n;
    *hi = *lo + chunk < n ? *lo + chunk : n;
}

/* Fill with valid optimizer state; also the first touch, so pages land on
 * the NUMA node of the thread that will stream them. a[0..3]: p, g, m, v. */
static void init_state(float *const a[4], uint16_t *bf, size_t n)
{
#pragma omp parallel
    {
        size_t lo, hi;
        my_range(n, &lo, &hi);
        for (size_t i = lo; i < hi; i++) {
            float x = (float)((i * 2654435761u) % 1000u) * 1e-3f - 0.5f;
            a[0][i] = x;         /* p */
            a[1][i] = 1e-3f * x; /* g */
            a[2][i] = 1e-4f * x; /* m */
            a[3][i] = 1e-6f;     /* v */
            bf[i] = 0;
        }
    }
}

typedef enum { K_COPY, K_TRIAD, K_RMW, K_STREAMS } bw_kernel;

/* One pass of a bandwidth kernel over the four arrays; returns seconds.
 *   copy:  a2 = a0, a3 = a1                     16 B per element
 *   triad: a0 = a1 + s*a2                       12 B per element
 *   rmw:   a0 = a0*s + a1                       12 B per element
 *   streams: AdamW's access pattern with trivial arithmetic (read p, g, m,
 *          v; write p, m, v)                   28 B per element */
static double run_bw(bw_kernel k, float *const a[4], size_t n, double *bytes)
{
    double t0 = omp_get_wtime();
    if (k == K_COPY) {
#pragma omp parallel
        {
            size_t lo, hi;
            my_range(n, &lo, &hi);
            if (hi > lo) {
                memcpy(a[2] + lo, a[0] + lo, (hi - lo) * sizeof(float));
                memcpy(a[3] + lo, a[1] + lo, (hi - lo) * sizeof(float));
            }
        }
        *bytes = 16.0 * (double)n;
    } else if (k == K_TRIAD) {
        const float s = 0.5f;
#pragma omp parallel
        {
            size_t lo, hi;
            my_range(n, &lo, &hi);
            float *restrict ar = a[0];
            const float *restrict br = a[1], *restrict cr = a[2];
#pragma omp simd
            for (size_t i = lo; i < hi; i++)
                ar[i] = br[i] + s * cr[i];
        }
        *bytes = 12.0 * (double)n;
    } else if (k == K_STREAMS) {
#pragma omp parallel
        {
            size_t lo, hi;
            my_range(n, &lo, &hi);
            float *restrict p = a[0], *restrict m = a[2], *restrict v = a[3];
            const float *restrict g = a[1];
#pragma omp simd
            for (size_t i = lo; i < hi; i++) {
                p[i] = p[i] * 0.999f + g[i];
                m[i] = m[i] * 0.9f + g[i];
                v[i] = v[i] * 0.95f + g[i];
            }
        }
        *bytes = 28.0 * (double)n;
    } else {
        const float s = 0.999f;
#pragma omp parallel
        {
            size_t lo, hi;
            my_range(n, &lo, &hi);
            float *restrict ar = a[0];
            const float *restrict br = a[1];
#pragma omp simd
            for (size_t i = lo; i < hi; i++)
                ar[i] = ar[i] * s + br[i];
        }
        *bytes = 12.0 * (double)n;
    }
    return omp_get_wtime() - t0;
}

static double best_bw(bw_kernel k, float *const a[4], size_t n, int reps)
{
    double best = 0, bytes;
    run_bw(k, a, n, &bytes); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t = run_bw(k, a, n, &bytes);
        if (bytes / t > best)
            best = bytes / t;
    }
    return best;
}

static double best_adamw(float *const a[4], uint16_t *bf, size_t n, int reps, int64_t *step)
{
    const rp_adamw_params hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                .weight_decay = 0.1};
    double best = 1e300;
    for (int r = 0; r <= reps; r++) { /* r == 0 is the warm-up */
        double t0 = omp_get_wtime();
        rp_adamw_step(a[0], a[1], a[2], a[3], n, ++*step, &hp, 1, 0.75f, bf);
        double t = omp_get_wtime() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)64 << 20;
    int reps = 5, ranks = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            n = (size_t)parse_count(argv[++i], argv[0], 1024);
        else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            reps = (int)parse_count(argv[++i], argv[0], 1);
        else if (strcmp(argv[i], "-g") == 0 && i + 1 < argc)
            ranks = (int)parse_count(argv[++i], argv[0], 1);
        else
            usage(argv[0]);
    }
    n = (n + 15) / 16 * 16;

    /* the four arrays back to back at the stride the engine's host store
     * uses (rp_adamw_array_bytes), not at a bare n * 4 bytes: 64 Mi floats
     * are exactly 256 MiB, a stride some memory systems serve at a fraction
     * of their bandwidth */
    size_t stride = rp_adamw_array_bytes(n);
    char *blk = NULL;
    uint16_t *bf = NULL;
    if (stride == SIZE_MAX || posix_memalign((void **)&blk, 4096, 4 * stride) ||
        posix_memalign((void **)&bf, 64, n * sizeof(uint16_t))) {
        fprintf(stderr, "bench_adamw: cannot allocate %.2f GB\n", 18.0 * (double)n / 1e9);
        return 1;
    }
    float *const a[4] = {(float *)blk, (float *)(blk + stride), (float *)(blk + 2 * stride),
                         (float *)(blk + 3 * stride)};
    init_state(a, bf, n);

    int threads = omp_get_max_threads();
    printf("bench_adamw: %zu parameters (%.2f GB of fp32 state), %d thread%s, best of %d\n", n,
           16.0 * (double)n / 1e9, threads, threads == 1 ? "" : "s", reps);

    double bw_copy = best_bw(K_COPY, a, n, reps);
    double bw_triad = best_bw(K_TRIAD, a, n, reps);
    double bw_rmw = best_bw(K_RMW, a, n, reps);
    double bw_streams = best_bw(K_STREAMS, a, n, reps);
    double bw_best = bw_copy;
    if (bw_streams > bw_best)
        bw_best = bw_streams;
    if (bw_triad > bw_best)
        bw_best = bw_triad;
    if (bw_rmw > bw_best)
        bw_best = bw_rmw;
    printf("  bandwidth (read + written bytes): memcpy %.2f GB/s, triad %.2f GB/s, "
           "in-place a=a*s+b %.2f GB/s, AdamW's 4 reads + 3 writes %.2f GB/s\n",
           bw_copy / 1e9, bw_triad / 1e9, bw_rmw / 1e9, bw_streams / 1e9);

    init_state(a, bf, n); /* the kernels above overwrote m and v */
    int64_t step = 0;
    const struct { const char *name; uint16_t *copy; double bytes; } runs[] = {
        {"adamw          ", NULL, 28.0},
        {"adamw + bf16 cp", bf, 30.0},
    };
    double node_bw = 0.0;
    for (int k = 0; k < 2; k++) {
        double t = best_adamw(a, runs[k].copy, n, reps, &step);
        double pps = (double)n / t, bw = runs[k].bytes * pps;
        node_bw = bw; /* the last run is what the engine does: 30 B/param */
        printf("  %s %8.1f Mparam/s  %7.2f GB/s (%2.0f B/param)  %5.1f%% of memcpy  %5.1f%% of "
               "best\n",
               runs[k].name, pps / 1e6, bw / 1e9, runs[k].bytes, 100.0 * bw / bw_copy,
               100.0 * bw / bw_best);
    }
    if (ranks > 0)
        /* `roundpipe simulate --optimizer-gbs` is one rank's share of the
         * host's optimizer bandwidth: run this with all the cores the ranks
         * of a node will use, and split what they achieve among the ranks */
        printf("  roundpipe simulate --optimizer-gbs %.1f   (%d ranks sharing these %d thread%s)\n",
               node_bw / 1e9 / ranks, ranks, threads, threads == 1 ? "" : "s");
    free(blk);
    free(bf);
    return 0;
}
