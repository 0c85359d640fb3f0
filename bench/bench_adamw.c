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
 * The speculative update's kernels (--speculative-update): AdamW that also
 * writes the old p, m, v into a backup in the same pass
 * (rp_adamw_step_backup, 42 B/param with the bf16 copy), the former way (a
 * copy of p, m, v into the backup, then AdamW: 24 + 30 B/param), and the
 * redo from the backup (rp_adamw_step_from_backup, 30 B/param); each as
 * its bandwidth and its time against the plain AdamW + bf16 copy's of the
 * same run.
 *
 *   bench_adamw [-n PARAMS] [-r REPS] [-g RANKS]   (defaults: 64Mi parameters, 5)
 *               [-e ROWSxHIDDEN|0] [-t TOKENS.npy] [-s SEQ] [-b BATCH] [-R ROUNDS]
 *               [-T TORCH_HELPER|none]
 * Threads: OMP_NUM_THREADS. Each figure is the best of REPS runs. With -g,
 * also the `roundpipe simulate --optimizer-gbs` value for RANKS ranks that
 * share the threads' memory system (the AdamW + bf16 copy rate / RANKS).
 *
 * The rows case: a step's update of an embedding table of ROWSxHIDDEN
 * (default 151936x1024) as the optimizer thread does it (optimizer.c,
 * update_rows): the rows a batch of BATCH x SEQ tokens of TOKENS reads
 * (sorted, distinct; runs of neighbouring rows coalesced), then the rows
 * between them, each set through rp_adamw_ranges_split, against one dense
 * rp_adamw_step over the same elements, both writing the bf16 copy; also
 * the former way (one rp_adamw_step per run or gap) and torch's fused
 * AdamW over as many parameters (the Python helper TORCH_HELPER, skipped
 * with its message without torch). ROUNDS rounds, each running every case
 * in an order rotated by one, report each round's figures, the ratios
 * between them and the cores the rest of the machine kept busy. */
#include <errno.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "io/dataset.h"
#include "optim/adamw.h"
#include "bench_args.h"

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [-n PARAMS] [-r REPS] [-g RANKS] [-e ROWSxHIDDEN|0] [-t TOKENS.npy]\n"
            "       [-s SEQ] [-b BATCH] [-R ROUNDS] [-T TORCH_HELPER|none]\n",
            prog);
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

/* AdamW's hyperparameters here (and in torch_adamw_peer.py) */
static const rp_adamw_params bench_hp = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                         .weight_decay = 0.1};

/* The dense kernels: plain AdamW; with the backup written in the same
 * pass; a copy into the backup, then AdamW; the redo from the backup. */
enum { A_PLAIN, A_BACKUP, A_COPY_THEN, A_FROM_BACKUP };

/* A copy of n floats, split over the threads as rp_adamw_step splits (the
 * engine's former backup, speculative.c's copy). */
static void copy_floats(float *to, const float *from, size_t n)
{
#pragma omp parallel
    {
        size_t lo, hi;
        my_range(n, &lo, &hi);
        if (hi > lo)
            memcpy(to + lo, from + lo, (hi - lo) * sizeof(float));
    }
}

static double best_adamw(float *const a[4], uint16_t *bf, float *const old[3], int kind,
                         size_t n, int reps, int64_t *step)
{
    double best = 1e300;
    for (int r = 0; r <= reps; r++) { /* r == 0 is the warm-up */
        double t0 = omp_get_wtime();
        ++*step;
        if (kind == A_BACKUP) {
            rp_adamw_step_backup(a[0], a[1], a[2], a[3], n, *step, &bench_hp, 1, 0.75f, bf,
                                 old[0], old[1], old[2]);
        } else if (kind == A_FROM_BACKUP) {
            rp_adamw_step_from_backup(a[0], a[1], a[2], a[3], n, *step, &bench_hp, 1, 0.75f, bf,
                                      old[0], old[1], old[2]);
        } else {
            if (kind == A_COPY_THEN) {
                copy_floats(old[0], a[0], n);
                copy_floats(old[1], a[2], n);
                copy_floats(old[2], a[3], n);
            }
            rp_adamw_step(a[0], a[1], a[2], a[3], n, *step, &bench_hp, 1, 0.75f, bf);
        }
        double t = omp_get_wtime() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    return best;
}

/* ---- the rows case ------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The rows step 1's batch reads: sorted, distinct. With a byte-level file
 * (every id below 256) and a table of more than 65536 rows, a stand-in for
 * a large tokenizer's ids: each byte with the two before it in its sample
 * (a BPE token is a few bytes), hashed over the table, so that the rows
 * are about as many as a real batch's and spread as its ids are; ids at or
 * above `rows` wrap. Returns the count, *how says which. */
static int64_t batch_rows(const char *path, int64_t seq, int64_t batch, int64_t rows,
                          int64_t **out, const char **how)
{
    rp_error err = {0};
    rp_dataset *ds = NULL;
    if (rp_dataset_open(path, NULL, seq, (int64_t)1 << 30, &ds, &err) != RP_OK) {
        fprintf(stderr, "bench_adamw: %s\n", err.msg);
        exit(1);
    }
    int32_t *in = malloc(sizeof(int32_t) * (size_t)seq), *tg = malloc(sizeof(int32_t) * (size_t)seq);
    uint8_t *mask = malloc((size_t)seq);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(seq * batch));
    if (!in || !tg || !mask || !ids) {
        fprintf(stderr, "bench_adamw: out of memory for the batch's rows\n");
        exit(1);
    }
    int32_t top = 0;
    for (int64_t j = 0; j < batch; j++) {
        rp_dataset_fill(ds, rp_dataset_sample_of(ds, 1, batch, j), in, tg, mask);
        for (int64_t i = 0; i < seq; i++) {
            ids[j * seq + i] = in[i];
            top = in[i] > top ? in[i] : top;
        }
    }
    int triples = top < 256 && rows > 65536;
    *how = triples ? "byte triples hashed over the table, a large tokenizer's stand-in"
                   : "token ids";
    for (int64_t j = 0; j < batch && triples; j++)
        for (int64_t i = seq - 1; i >= 0; i--) {
            uint64_t key = (uint64_t)ids[j * seq + i] | (uint64_t)1 << 24;
            if (i >= 1)
                key |= (uint64_t)ids[j * seq + i - 1] << 8;
            if (i >= 2)
                key |= (uint64_t)ids[j * seq + i - 2] << 16;
            ids[j * seq + i] = (int64_t)((key * 0x9E3779B97F4A7C15ull) >> 20);
        }
    int64_t n = seq * batch, k = 0;
    for (int64_t i = 0; i < n; i++)
        ids[i] %= rows;
    qsort(ids, (size_t)n, sizeof *ids, cmp_i64);
    for (int64_t i = 0; i < n; i++)
        if (k == 0 || ids[i] != ids[k - 1])
            ids[k++] = ids[i];
    free(in), free(tg), free(mask);
    rp_dataset_close(&ds);
    *out = ids;
    return k;
}

/* The listed rows as ranges of elements, neighbours coalesced (listed = 1),
 * or the rows between them (listed = 0), as update_rows makes them. */
static size_t row_ranges(const int64_t *ids, int64_t n, int64_t rows, size_t hidden, int listed,
                         rp_adamw_range *r)
{
    size_t k = 0, cur = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t a = (size_t)ids[i] * hidden, b = a + hidden;
        while (i + 1 < n && (size_t)ids[i + 1] * hidden == b) /* a run of rows */
            b = (size_t)ids[++i] * hidden + hidden;
        if (listed)
            r[k++] = (rp_adamw_range){a, b};
        else if (a > cur)
            r[k++] = (rp_adamw_range){cur, a};
        cur = b;
    }
    if (!listed && cur < (size_t)rows * hidden)
        r[k++] = (rp_adamw_range){cur, (size_t)rows * hidden};
    return k;
}

typedef struct step_ctx {
    float *const *a;
    uint16_t *bf;
    int64_t step;
} step_ctx;

static void step_piece(void *ctx, size_t lo, size_t hi)
{
    const step_ctx *c = ctx;
    rp_adamw_step(c->a[0] + lo, c->a[1] + lo, c->a[2] + lo, c->a[3] + lo, hi - lo, c->step,
                  &bench_hp, 1, 0.75f, c->bf ? c->bf + lo : NULL);
}

enum { C_DENSE, C_ROWS, C_PER_RUN, C_DENSE_NO_COPY, C_TORCH, C_CASES };
static const char *const case_name[C_CASES] = {
    "dense + bf16 copy", "rows + bf16 copy (split)", "rows + bf16 copy, one call per run",
    "dense, no copy", "torch fused AdamW"};

/* One update of the table's e elements by case c; returns seconds. */
static double run_case(int c, float *const a[4], uint16_t *bf, size_t e, const rp_adamw_range *rl,
                       size_t nl, const rp_adamw_range *rr, size_t nr, int64_t *step)
{
    step_ctx ctx = {a, c == C_DENSE_NO_COPY ? NULL : bf, ++*step};
    double t0 = omp_get_wtime();
    if (c == C_DENSE || c == C_DENSE_NO_COPY) {
        step_piece(&ctx, 0, e);
    } else if (c == C_ROWS) {
        rp_adamw_ranges_split(rl, nl, step_piece, &ctx);
        rp_adamw_ranges_split(rr, nr, step_piece, &ctx);
    } else {
        for (size_t i = 0; i < nl; i++)
            step_piece(&ctx, rl[i].lo, rl[i].hi);
        for (size_t i = 0; i < nr; i++)
            step_piece(&ctx, rr[i].lo, rr[i].hi);
    }
    return omp_get_wtime() - t0;
}

/* torch's figure in Mparam/s from the helper, 0 when skipped or failed
 * (then its first other line is in why, when given). */
static double run_torch(const char *helper, size_t e, int reps, int threads, char *why,
                        size_t why_len)
{
    char cmd[4096], line[512];
    snprintf(cmd, sizeof cmd, "python3 '%s' -n %zu -r %d --threads %d 2>&1", helper, e, reps,
             threads);
    FILE *f = popen(cmd, "r");
    double mps = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        double v;
        if (sscanf(line, "torch fused AdamW: %lf Mparam/s", &v) == 1)
            mps = v;
        else if (why && !*why)
            snprintf(why, why_len, "%s", line);
    }
    pclose(f);
    return mps;
}

/* Busy seconds of the whole machine (/proc/stat) and this process's CPU
 * seconds with its finished children: the rest of the machine's busy
 * cores over an interval are their differences over its wall time. */
static double machine_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long u = 0, ni = 0, sy = 0, id = 0, io = 0, irq = 0, sirq = 0;
    if (!f)
        return 0;
    int ok = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &u, &ni, &sy, &id, &io, &irq,
                    &sirq) == 7;
    fclose(f);
    return ok ? (double)(u + ni + sy + irq + sirq) / (double)sysconf(_SC_CLK_TCK) : 0;
}

static double own_cpu_s(void)
{
    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    return (double)(self.ru_utime.tv_sec + self.ru_stime.tv_sec + kids.ru_utime.tv_sec +
                    kids.ru_stime.tv_sec) +
           1e-6 * (double)(self.ru_utime.tv_usec + self.ru_stime.tv_usec + kids.ru_utime.tv_usec +
                           kids.ru_stime.tv_usec);
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: a few rounds */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double x = v[j];
            v[j] = v[j - 1], v[j - 1] = x;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void ratio_line(const char *what, double *r, int n)
{
    double lo = 1e300, hi = 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (r[i] > 0) {
            r[k++] = r[i];
            lo = r[i] < lo ? r[i] : lo;
            hi = r[i] > hi ? r[i] : hi;
        }
    if (k)
        printf("  %-44s median %.3f, range %.3f-%.3f over %d round%s\n", what, median(r, k), lo,
               hi, k, k == 1 ? "" : "s");
}

static void rows_case(float *const a[4], uint16_t *bf, int64_t rows, size_t hidden,
                      const char *tokens, int64_t seq, int64_t batch, int rounds, int reps,
                      const char *helper)
{
    const char *how;
    int64_t *ids, n = batch_rows(tokens, seq, batch, rows, &ids, &how);
    size_t e = (size_t)rows * hidden;
    rp_adamw_range *rl = malloc(sizeof *rl * (size_t)(n + 1)),
                   *rr = malloc(sizeof *rr * (size_t)(n + 1));
    if (!rl || !rr) {
        fprintf(stderr, "bench_adamw: out of memory for the row ranges\n");
        exit(1);
    }
    size_t nl = row_ranges(ids, n, rows, hidden, 1, rl), nr = row_ranges(ids, n, rows, hidden, 0, rr);
    size_t longest = 0;
    for (size_t i = 0; i < nl; i++)
        longest = rl[i].hi - rl[i].lo > longest ? rl[i].hi - rl[i].lo : longest;
    for (size_t i = 0; i < nr; i++)
        longest = rr[i].hi - rr[i].lo > longest ? rr[i].hi - rr[i].lo : longest;
    int threads = omp_get_max_threads();
    printf("rows: a %lldx%zu table (%zu parameters), the rows of %lld x %lld tokens of %s (%s):"
           " %lld rows in %zu runs, %zu gaps; longest run or gap %zu elements\n",
           (long long)rows, hidden, e, (long long)batch, (long long)seq, tokens, how,
           (long long)n, nl, nr, longest);
    int have_torch = 0;
    if (helper) { /* a small run first: is torch there? */
        char why[512] = "";
        have_torch = run_torch(helper, 4096, 1, threads, why, sizeof why) > 0;
        if (!have_torch)
            printf("  torch fused AdamW: not run (%s): %s", helper, *why ? why : "no output\n");
    }
    double *mps = calloc((size_t)rounds * C_CASES, sizeof *mps);
    if (!mps)
        exit(1);
    int64_t step = 0;
    run_case(C_DENSE, a, bf, e, rl, nl, rr, nr, &step); /* first touch of the table's tail */
    for (int r = 0; r < rounds; r++) {
        double b0 = machine_busy_s(), c0 = own_cpu_s(), w0 = omp_get_wtime();
        printf("  round %d:", r + 1);
        for (int k = 0; k < C_CASES; k++) {
            int c = (k + r) % C_CASES;
            if (c == C_TORCH) {
                if (have_torch)
                    mps[r * C_CASES + c] = run_torch(helper, e, reps, threads, NULL, 0);
                continue;
            }
            double best = 1e300;
            for (int i = 0; i <= reps; i++) { /* i == 0 is the warm-up */
                double t = run_case(c, a, bf, e, rl, nl, rr, nr, &step);
                if (i > 0 && t < best)
                    best = t;
            }
            mps[r * C_CASES + c] = (double)e / best / 1e6;
        }
        double others = (machine_busy_s() - b0 - (own_cpu_s() - c0)) / (omp_get_wtime() - w0);
        for (int c = 0; c < C_CASES; c++)
            if (mps[r * C_CASES + c] > 0)
                printf(" %s %.1f;", case_name[c], mps[r * C_CASES + c]);
        printf(" Mparam/s (others %.1f cores)\n", others < 0 ? 0 : others);
        fflush(stdout);
    }
    double *q = malloc(sizeof *q * (size_t)rounds);
    const struct { const char *what; int num, den; } ratios[] = {
        {"rows (split) / dense:", C_ROWS, C_DENSE},
        {"rows, one call per run / dense:", C_PER_RUN, C_DENSE},
        {"dense, no copy / torch fused AdamW:", C_DENSE_NO_COPY, C_TORCH},
    };
    for (size_t k = 0; q && k < sizeof ratios / sizeof ratios[0]; k++) {
        for (int r = 0; r < rounds; r++) {
            double num = mps[r * C_CASES + ratios[k].num], den = mps[r * C_CASES + ratios[k].den];
            q[r] = num > 0 && den > 0 ? num / den : 0;
        }
        ratio_line(ratios[k].what, q, rounds);
    }
    free(q), free(mps), free(rl), free(rr), free(ids);
}

int main(int argc, char **argv)
{
    size_t n = (size_t)64 << 20;
    int reps = 5, ranks = 0, rounds = 3;
    long long erows = 151936, ehidden = 1024, seq = 4096, batch = 8;
    const char *tokens = "examples/data/gnu-licenses.npy", *helper = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            n = (size_t)parse_count(argv[++i], argv[0], 1024);
        else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            reps = (int)parse_count(argv[++i], argv[0], 1);
        else if (strcmp(argv[i], "-g") == 0 && i + 1 < argc)
            ranks = (int)parse_count(argv[++i], argv[0], 1);
        else if (strcmp(argv[i], "-e") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            char tail;
            if (strcmp(v, "0") == 0)
                erows = 0;
            else if (sscanf(v, "%lldx%lld%c", &erows, &ehidden, &tail) != 2 || erows < 1 ||
                     ehidden < 1) {
                fprintf(stderr, "%s: -e wants ROWSxHIDDEN (e.g. 151936x1024) or 0, got '%s'\n",
                        argv[0], v);
                return 2;
            }
        } else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc)
            tokens = argv[++i];
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
            seq = parse_count(argv[++i], argv[0], 1);
        else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc)
            batch = parse_count(argv[++i], argv[0], 1);
        else if (strcmp(argv[i], "-R") == 0 && i + 1 < argc)
            rounds = (int)parse_count(argv[++i], argv[0], 1);
        else if (strcmp(argv[i], "-T") == 0 && i + 1 < argc)
            helper = argv[++i];
        else
            usage(argv[0]);
    }
    n = (n + 15) / 16 * 16;
    if (helper && strcmp(helper, "none") == 0)
        helper = NULL;
    else if (!helper) /* run from the build tree of an out-of-tree build, or the source tree */
        helper = access("../bench/torch_adamw_peer.py", R_OK) == 0 ? "../bench/torch_adamw_peer.py"
                                                                    : "bench/torch_adamw_peer.py";
    /* the rows case uses the first ROWS x HIDDEN elements of the arrays */
    size_t table = (size_t)erows * (size_t)ehidden, alloc = table > n ? table : n;
    if (erows > 0 && access(tokens, R_OK) != 0) {
        fprintf(stderr, "%s: -t %s: cannot read it: %s (run from the build tree, or give -t, "
                "or -e 0 for no rows case)\n", argv[0], tokens, strerror(errno));
        return 1;
    }

    /* the four arrays back to back at the stride the engine's host store
     * uses (rp_adamw_array_bytes), not at a bare n * 4 bytes: 64 Mi floats
     * are exactly 256 MiB, a stride some memory systems serve at a fraction
     * of their bandwidth */
    size_t stride = rp_adamw_array_bytes(alloc);
    char *blk = NULL;
    uint16_t *bf = NULL;
    if (stride == SIZE_MAX || posix_memalign((void **)&blk, 4096, 4 * stride) ||
        posix_memalign((void **)&bf, 64, alloc * sizeof(uint16_t))) {
        fprintf(stderr, "bench_adamw: cannot allocate %.2f GB\n", 18.0 * (double)alloc / 1e9);
        return 1;
    }
    float *const a[4] = {(float *)blk, (float *)(blk + stride), (float *)(blk + 2 * stride),
                         (float *)(blk + 3 * stride)};
    init_state(a, bf, alloc);
    /* the speculative update's backup of p, m, v: n floats each, at the
     * same stride (without room for it, those cases are left out) */
    size_t old_stride = rp_adamw_array_bytes(n);
    char *old_blk = NULL;
    if (posix_memalign((void **)&old_blk, 4096, 3 * old_stride))
        old_blk = NULL;
    float *const old[3] = {old_blk ? (float *)old_blk : NULL,
                           old_blk ? (float *)(old_blk + old_stride) : NULL,
                           old_blk ? (float *)(old_blk + 2 * old_stride) : NULL};
    if (old_blk) {
        float *const first_touch[4] = {old[0], old[1], old[2], old[0]};
        init_state(first_touch, bf, n);
    } else {
        printf("bench_adamw: no memory for the backup (%.2f GB): its cases are left out\n",
               12.0 * (double)n / 1e9);
    }

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
    const struct { const char *name; uint16_t *copy; int kind; double bytes; } runs[] = {
        {"adamw          ", NULL, A_PLAIN, 28.0},
        {"adamw + bf16 cp", bf, A_PLAIN, 30.0},
        {"  + backup in the same pass", bf, A_BACKUP, 42.0},
        {"  copy to backup, then adamw", bf, A_COPY_THEN, 54.0},
        {"  redo from the backup", bf, A_FROM_BACKUP, 30.0},
    };
    double node_bw = 0.0, plain_bw = 0.0, plain_t = 0.0;
    for (int k = 0; k < 5; k++) {
        if (runs[k].kind != A_PLAIN && !old[0])
            break;
        double t = best_adamw(a, runs[k].copy, old, runs[k].kind, n, reps, &step);
        double pps = (double)n / t, bw = runs[k].bytes * pps;
        if (runs[k].kind == A_PLAIN)
            node_bw = plain_bw = bw, plain_t = t; /* what the engine does: 30 B/param */
        printf("  %-28s %8.1f Mparam/s  %7.2f GB/s (%2.0f B/param)  %5.1f%% of memcpy  %5.1f%% "
               "of best",
               runs[k].name, pps / 1e6, bw / 1e9, runs[k].bytes, 100.0 * bw / bw_copy,
               100.0 * bw / bw_best);
        if (runs[k].kind != A_PLAIN)
            printf("; bandwidth %.3fx, time %.3fx adamw + bf16 cp's", bw / plain_bw,
                   t / plain_t);
        printf("\n");
    }
    if (ranks > 0)
        /* `roundpipe simulate --optimizer-gbs` is one rank's share of the
         * host's optimizer bandwidth: run this with all the cores the ranks
         * of a node will use, and split what they achieve among the ranks */
        printf("  roundpipe simulate --optimizer-gbs %.1f   (%d ranks sharing these %d thread%s)\n",
               node_bw / 1e9 / ranks, ranks, threads, threads == 1 ? "" : "s");
    if (erows > 0)
        rows_case(a, bf, erows, (size_t)ehidden, tokens, seq, batch, rounds, reps, helper);
    free(blk);
    free(old_blk);
    free(bf);
    return 0;
}
