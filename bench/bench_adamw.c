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
 *   bench_adamw [-n PARAMS] [-r REPS]     (defaults: 64Mi parameters, 5)
 * Threads: OMP_NUM_THREADS. Each figure is the best of REPS runs. */
#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/adamw.h"

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [-n PARAMS] [-r REPS]\n", prog);
    exit(2);
}

static long long parse_count(const char *s, const char *prog, long long min)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min) {
        fprintf(stderr, "%s: bad count '%s' (integer >= %lld expected)\n", prog, s, min);
        exit(2);
    }
    return v;
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
 * the NUMA node of the thread that will stream them. */
static void init_state(float *blk, uint16_t *bf, size_t n)
{
#pragma omp parallel
    {
        size_t lo, hi;
        my_range(n, &lo, &hi);
        for (size_t i = lo; i < hi; i++) {
            float x = (float)((i * 2654435761u) % 1000u) * 1e-3f - 0.5f;
            blk[i] = x;                 /* p */
            blk[n + i] = 1e-3f * x;     /* g */
            blk[2 * n + i] = 1e-4f * x; /* m */
            blk[3 * n + i] = 1e-6f;     /* v */
            bf[i] = 0;
        }
    }
}

typedef enum { K_COPY, K_TRIAD, K_RMW, K_STREAMS } bw_kernel;

/* One pass of a bandwidth kernel over the 4n floats of blk; returns seconds.
 *   copy:  blk[2n..4n) = blk[0..2n)           8 B per element of 2n
 *   triad: a = b + s*c on thirds of blk       12 B per element
 *   rmw:   a = a*s + b on halves of blk       12 B per element
 *   streams: AdamW's access pattern with trivial arithmetic (read p, g, m,
 *          v; write p, m, v)                   28 B per element of n */
static double run_bw(bw_kernel k, float *blk, size_t n, double *bytes)
{
    double t0 = omp_get_wtime();
    if (k == K_COPY) {
        size_t len = 2 * n;
#pragma omp parallel
        {
            size_t lo, hi;
            my_range(len, &lo, &hi);
            if (hi > lo)
                memcpy(blk + len + lo, blk + lo, (hi - lo) * sizeof(float));
        }
        *bytes = 8.0 * (double)len;
    } else if (k == K_TRIAD) {
        size_t len = 4 * n / 3;
        float *a = blk, *b = blk + len, *c = blk + 2 * len;
        const float s = 0.5f;
#pragma omp parallel
        {
            size_t lo, hi;
            my_range(len, &lo, &hi);
            float *restrict ar = a;
            const float *restrict br = b, *restrict cr = c;
#pragma omp simd
            for (size_t i = lo; i < hi; i++)
                ar[i] = br[i] + s * cr[i];
        }
        *bytes = 12.0 * (double)len;
    } else if (k == K_STREAMS) {
#pragma omp parallel
        {
            size_t lo, hi;
            my_range(n, &lo, &hi);
            float *restrict p = blk, *restrict m = blk + 2 * n, *restrict v = blk + 3 * n;
            const float *restrict g = blk + n;
#pragma omp simd
            for (size_t i = lo; i < hi; i++) {
                p[i] = p[i] * 0.999f + g[i];
                m[i] = m[i] * 0.9f + g[i];
                v[i] = v[i] * 0.95f + g[i];
            }
        }
        *bytes = 28.0 * (double)n;
    } else {
        size_t len = 2 * n;
        float *a = blk, *b = blk + len;
        const float s = 0.999f;
#pragma omp parallel
        {
            size_t lo, hi;
            my_range(len, &lo, &hi);
            float *restrict ar = a;
            const float *restrict br = b;
#pragma omp simd
            for (size_t i = lo; i < hi; i++)
                ar[i] = ar[i] * s + br[i];
        }
        *bytes = 12.0 * (double)len;
    }
    return omp_get_wtime() - t0;
}

static double best_bw(bw_kernel k, float *blk, size_t n, int reps)
{
    double best = 0, bytes;
    run_bw(k, blk, n, &bytes); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t = run_bw(k, blk, n, &bytes);
        if (bytes / t > best)
            best = bytes / t;
    }
    return best;
}

static double best_adamw(float *blk, uint16_t *bf, size_t n, int reps, int64_t *step)
{
    const rp_adamw_params hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                .weight_decay = 0.1};
    double best = 1e300;
    for (int r = 0; r <= reps; r++) { /* r == 0 is the warm-up */
        double t0 = omp_get_wtime();
        rp_adamw_step(blk, blk + n, blk + 2 * n, blk + 3 * n, n, ++*step, &hp, 1, 0.75f, bf);
        double t = omp_get_wtime() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)64 << 20;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            n = (size_t)parse_count(argv[++i], argv[0], 1024);
        else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            reps = (int)parse_count(argv[++i], argv[0], 1);
        else
            usage(argv[0]);
    }
    n = (n + 15) / 16 * 16;

    float *blk = NULL;
    uint16_t *bf = NULL;
    if (posix_memalign((void **)&blk, 64, 4 * n * sizeof(float)) ||
        posix_memalign((void **)&bf, 64, n * sizeof(uint16_t))) {
        fprintf(stderr, "bench_adamw: cannot allocate %.2f GB\n", 18.0 * (double)n / 1e9);
        return 1;
    }
    init_state(blk, bf, n);

    int threads = omp_get_max_threads();
    printf("bench_adamw: %zu parameters (%.2f GB of fp32 state), %d thread%s, best of %d\n", n,
           16.0 * (double)n / 1e9, threads, threads == 1 ? "" : "s", reps);

    double bw_copy = best_bw(K_COPY, blk, n, reps);
    double bw_triad = best_bw(K_TRIAD, blk, n, reps);
    double bw_rmw = best_bw(K_RMW, blk, n, reps);
    double bw_streams = best_bw(K_STREAMS, blk, n, reps);
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

    init_state(blk, bf, n); /* the kernels above overwrote m and v */
    int64_t step = 0;
    const struct { const char *name; uint16_t *copy; double bytes; } runs[] = {
        {"adamw          ", NULL, 28.0},
        {"adamw + bf16 cp", bf, 30.0},
    };
    for (int k = 0; k < 2; k++) {
        double t = best_adamw(blk, runs[k].copy, n, reps, &step);
        double pps = (double)n / t, bw = runs[k].bytes * pps;
        printf("  %s %8.1f Mparam/s  %7.2f GB/s (%2.0f B/param)  %5.1f%% of memcpy  %5.1f%% of "
               "best\n",
               runs[k].name, pps / 1e6, bw / 1e9, runs[k].bytes, 100.0 * bw / bw_copy,
               100.0 * bw / bw_best);
    }
    free(blk);
    free(bf);
    return 0;
}
