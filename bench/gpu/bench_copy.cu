/* bench_copy: host<->device GB/s per direction for the three kinds of host
 * memory the CUDA executor can meet, sizes 1 MiB .. 1 GiB:
 *   pinned      cudaHostAlloc (what a staging buffer would be)
 *   registered  malloc + cudaHostRegister (how the host store is pinned: it
 *               is shared memory that exists before CUDA sees it)
 *   pageable    plain malloc (the slow path to avoid)
 * plus both directions at once on two streams (pinned; uploads of weights
 * overlap downloads of gradients in the pipeline), and a device-to-device
 * copy, counted as bytes read + written, for the HBM ceiling.
 *
 *   bench_copy [-m MAX_MIB] [-r REPS]
 *
 * Every buffer is filled with a non-zero pattern before timing (first-touch
 * faults stay out of the numbers), and each size's round trip H2D then D2H
 * is compared word for word with the pattern that was sent. Time: median of REPS copies,
 * event-timed on one stream (a pageable copy is synchronous on the host, but
 * the events still bracket it). GB/s = 1e9 bytes per second.
 * Output: a table, then "RESULT ..." lines for bench/gpu/run.sh.
 * Exit 77 without a GPU, 1 on an error or a corrupted copy. */
#include "bench_common.cuh"

enum kind { PINNED, REGISTERED, PAGEABLE, NKIND };
static const char *kind_name[NKIND] = {"pinned", "registered", "pageable"};

static uint64_t pattern(size_t i) { return rp_bench_mix(i) | 1; }

static void *host_alloc(kind k, size_t n)
{
    void *p = NULL;
    if (k == PINNED) {
        CK(cudaHostAlloc(&p, n, cudaHostAllocDefault));
    } else {
        p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
        if (!p) {
            fprintf(stderr, "bench_copy: out of host memory (%zu bytes)\n", n);
            exit(1);
        }
        if (k == REGISTERED) CK(cudaHostRegister(p, n, cudaHostRegisterDefault));
    }
    /* non-zero, position-dependent */
    for (size_t i = 0; i < n / 8; i++) ((uint64_t *)p)[i] = pattern(i);
    return p;
}

/* Whether the first n bytes of p hold host_alloc's pattern. */
static int holds_pattern(const void *p, size_t n)
{
    for (size_t i = 0; i < n / 8; i++)
        if (((const uint64_t *)p)[i] != pattern(i)) return 0;
    return 1;
}

static void host_free(kind k, void *p)
{
    if (k == PINNED) {
        CK(cudaFreeHost(p));
    } else {
        if (k == REGISTERED) CK(cudaHostUnregister(p));
        free(p);
    }
}

/* Median GB/s of `reps` copies of n bytes. */
static double time_copy(void *dst, const void *src, size_t n, cudaMemcpyKind dir, int reps,
                        cudaStream_t st)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpyAsync(dst, src, n, dir, st)); /* warm-up */
    CK(cudaStreamSynchronize(st));
    float ms[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaMemcpyAsync(dst, src, n, dir, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return n / (rp_bench_median(ms, reps) * 1e-3) / 1e9;
}

int main(int argc, char **argv)
{
    size_t max_mib = 1024;
    int reps = 10;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) max_mib = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-m MAX_MIB] [-r REPS]\n", argv[0]);
            return 2;
        }
    }
    if (max_mib < 1 || reps < 1) {
        fprintf(stderr, "%s: -m and -r must be >= 1\n", argv[0]);
        return 2;
    }
    rp_bench_device("bench_copy");
    size_t maxb = max_mib << 20;
    cudaStream_t s0, s1;
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    void *dev, *dev2;
    CK(cudaMalloc(&dev, maxb));
    CK(cudaMalloc(&dev2, maxb));
    CK(cudaMemset(dev2, 0x5a, maxb));

    printf("\n%-11s %9s %10s %10s %9s\n", "host memory", "size MiB", "H2D GB/s", "D2H GB/s",
           "roundtrip");
    double best[NKIND][2] = {{0}};
    int bad = 0;
    for (int k = 0; k < NKIND; k++) {
        void *h = host_alloc((kind)k, maxb);
        void *back = malloc(maxb);
        if (!back) { fprintf(stderr, "bench_copy: out of host memory\n"); return 1; }
        for (size_t mib = 1; mib <= max_mib; mib *= 4) {
            size_t n = mib << 20;
            /* fewer repetitions for the big pageable copies (~0.1-0.3 s each) */
            int r = n >= (256u << 20) ? (reps < 5 ? reps : 5) : reps;
            /* each direction must deliver: the device is cleared before
             * the uploads (it holds the pattern from the kind before) and h
             * before the downloads, so a copy that moved nothing leaves
             * zeros where the pattern is checked below */
            CK(cudaMemsetAsync(dev, 0, n, s0));
            double up = time_copy(dev, h, n, cudaMemcpyHostToDevice, r, s0);
            memset(h, 0, n);
            double down = time_copy(h, dev, n, cudaMemcpyDeviceToHost, r, s0);
            CK(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
            int ok = holds_pattern(back, n) && holds_pattern(h, n);
            if (!ok) bad = 1;
            printf("%-11s %9zu %10.1f %10.1f %9s\n", kind_name[k], mib, up, down,
                   ok ? "ok" : "CORRUPT");
            printf("RESULT copy %s %zu %.2f %.2f\n", kind_name[k], mib, up, down);
            if (up > best[k][0]) best[k][0] = up;
            if (down > best[k][1]) best[k][1] = down;
        }
        free(back);
        host_free((kind)k, h);
    }

    /* Both directions at once, pinned, the largest size up to 256 MiB. */
    size_t nb = maxb < (256u << 20) ? maxb : (256u << 20);
    void *hu = host_alloc(PINNED, nb), *hd = host_alloc(PINNED, nb);
    cudaEvent_t a0, a1, b1;
    CK(cudaEventCreate(&a0));
    CK(cudaEventCreate(&a1));
    CK(cudaEventCreate(&b1));
    float ms[16];
    int rb = reps < 16 ? reps : 16;
    for (int r = -1; r < rb; r++) {
        CK(cudaEventRecord(a0, s0));
        CK(cudaStreamWaitEvent(s1, a0, 0));
        CK(cudaMemcpyAsync(dev, hu, nb, cudaMemcpyHostToDevice, s0));
        CK(cudaMemcpyAsync(hd, dev2, nb, cudaMemcpyDeviceToHost, s1));
        CK(cudaEventRecord(b1, s1));
        CK(cudaStreamWaitEvent(s0, b1, 0));
        CK(cudaEventRecord(a1, s0));
        CK(cudaEventSynchronize(a1));
        if (r >= 0) CK(cudaEventElapsedTime(&ms[r], a0, a1));
    }
    double bidir = 2.0 * nb / (rp_bench_median(ms, rb) * 1e-3) / 1e9;
    host_free(PINNED, hu);
    host_free(PINNED, hd);

    /* Device to device: bytes read + written. */
    float dms[16];
    for (int r = -1; r < rb; r++) {
        CK(cudaEventRecord(a0, s0));
        CK(cudaMemcpyAsync(dev, dev2, maxb, cudaMemcpyDeviceToDevice, s0));
        CK(cudaEventRecord(a1, s0));
        CK(cudaEventSynchronize(a1));
        if (r >= 0) CK(cudaEventElapsedTime(&dms[r], a0, a1));
    }
    double d2d = 2.0 * maxb / (rp_bench_median(dms, rb) * 1e-3) / 1e9;
    CK(cudaEventDestroy(a0));
    CK(cudaEventDestroy(a1));
    CK(cudaEventDestroy(b1));

    printf("\nbest GB/s: pinned H2D %.1f D2H %.1f; registered H2D %.1f D2H %.1f; pageable H2D %.1f "
           "D2H %.1f\nboth directions at once (pinned, %zu MiB each): %.1f GB/s total\n"
           "device to device (%zu MiB, read + write): %.1f GB/s\n",
           best[PINNED][0], best[PINNED][1], best[REGISTERED][0], best[REGISTERED][1],
           best[PAGEABLE][0], best[PAGEABLE][1], nb >> 20, bidir, max_mib, d2d);
    for (int k = 0; k < NKIND; k++)
        printf("RESULT copy_best %s %.2f %.2f\n", kind_name[k], best[k][0], best[k][1]);
    printf("RESULT copy_bidir %.2f\nRESULT copy_d2d %.2f\n", bidir, d2d);
    CK(cudaFree(dev));
    CK(cudaFree(dev2));
    CK(cudaStreamDestroy(s0));
    CK(cudaStreamDestroy(s1));
    if (bad) {
        fprintf(stderr, "bench_copy: a round trip returned different bytes\n");
        return 1;
    }
    return 0;
}
