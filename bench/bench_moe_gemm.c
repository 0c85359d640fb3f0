/* bench_moe_gemm: the CPU table's grouped expert GEMMs against one dense
 * GEMM of the same total shape, in the same run.
 *
 * TOKENS tokens routed to K of E experts make rows = TOKENS * K grouped rows
 * of width IN, each expert projecting its rows to OUT (an expert's gate or
 * up projection: hidden -> expert width). The grouped ops
 * (grouped_linear_forward, _backward_input, _backward_weight of
 * src/kernels/cpu/ops.c) run over two splits of the rows: "routed", the
 * counts a router gives (moe_route over logits of normal(0, 1) noise plus a
 * per-expert bias of normal(0, 0.5), then moe_group), and "even", rows / E
 * each; the dense ops (linear_forward, _backward_input, _backward_weight)
 * do the same rows against one [OUT, IN] weight. Each is timed as the best
 * of REPS runs after a warm-up, the three taking turns; GFLOP/s counts 2 *
 * rows * IN * OUT per op; ratio is the grouped time over the dense.
 *
 *   bench_moe_gemm [-t TOKENS] [-k K] [-e E] [-i IN] [-o OUT] [-r REPS] [-b]
 *   (defaults: 512 tokens, top-8 of 64 experts, 1024 -> 256, 10 reps, fp32
 *   weights; -b: bf16 weights, widened by the GEMMs)
 * Threads: OMP_NUM_THREADS. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/cpu/ops.h"
#include "bench_args.h"

static const rp_kernel_ops *cpu = &rp_kernel_ops_cpu;

typedef struct {
    int64_t rows, in, out, E;
    rp_dtype wdt;
    const float *x, *dy;
    const void *W;           /* E weights back to back, in wdt */
    const void *const *Wp;   /* E pointers into W */
    float *y, *dx, *dW, **dWp;
} problem;

enum { FWD, BWD_IN, BWD_W, NOPS };
static const char *const op_names[NOPS] = {"forward", "backward input", "backward weight"};

static void check(rp_status s, const rp_error *err)
{
    if (s != RP_OK) {
        fprintf(stderr, "bench_moe_gemm: %s\n", err->msg);
        exit(1);
    }
}

/* One op, grouped over offsets or (offsets NULL) dense with expert 0's W. */
static void run_op(const problem *p, int op, const int32_t *offsets)
{
    rp_error err = {0};
    const int64_t r = p->rows, in = p->in, out = p->out;
    if (op == FWD && offsets)
        check(cpu->grouped_linear_forward(NULL, p->x, p->Wp, p->wdt, offsets, p->E, r, in, out,
                                          p->y, NULL, &err), &err);
    else if (op == FWD)
        check(cpu->linear_forward(NULL, p->x, p->W, p->wdt, NULL, NULL, p->y, NULL, r, in, out,
                                  &err), &err);
    else if (op == BWD_IN && offsets)
        check(cpu->grouped_linear_backward_input(NULL, p->dy, p->Wp, p->wdt, offsets, p->E, r, in,
                                                 out, p->dx, NULL, 0, &err), &err);
    else if (op == BWD_IN)
        check(cpu->linear_backward_input(NULL, p->dy, p->W, p->wdt, p->dx, NULL, r, in, out, 0,
                                         &err), &err);
    else if (offsets)
        check(cpu->grouped_linear_backward_weight(NULL, p->dy, p->x, offsets, p->E, r, in, out,
                                                  p->dWp, &err), &err);
    else
        check(cpu->linear_backward_weight(NULL, p->dy, p->x, p->dW, r, in, out, &err), &err);
}

/* The best of reps runs of an op dense, routed and even (after a warm-up
 * of each), the three taking turns so that a slow spell of a shared
 * machine hits them alike. */
static void best_times(const problem *p, int op, const int32_t *const offsets[3], int reps,
                       double best[3])
{
    for (int v = 0; v < 3; v++)
        best[v] = 1e300;
    for (int i = 0; i <= reps; i++)
        for (int v = 0; v < 3; v++) {
            double t0 = omp_get_wtime();
            run_op(p, op, offsets[v]);
            double t = omp_get_wtime() - t0;
            if (i > 0 && t < best[v])
                best[v] = t;
        }
}

static void *must_alloc(size_t bytes)
{
    void *v = malloc(bytes);
    if (!v) {
        fprintf(stderr, "bench_moe_gemm: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    return v;
}

static float *normal_floats(size_t n, uint64_t stream, float std)
{
    float *v = must_alloc(n * sizeof(float));
    rp_rng_fill_normal(v, n, 5, stream, 0, 0.0f, std);
    return v;
}

/* The offsets a router gives: moe_route over noisy logits with a bias per
 * expert (some experts popular, some not), grouped by moe_group. */
static int32_t *routed_offsets(int64_t tokens, int64_t k, int64_t E)
{
    float *logits = normal_floats((size_t)(tokens * E), 1, 1.0f);
    float *bias = normal_floats((size_t)E, 2, 0.5f);
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t e = 0; e < E; e++)
            logits[t * E + e] += bias[e];
    float *probs = must_alloc(sizeof(float) * (size_t)(tokens * E));
    float *weights = must_alloc(sizeof(float) * (size_t)(tokens * k));
    int32_t *experts = must_alloc(sizeof(int32_t) * (size_t)(tokens * k));
    int32_t *order = must_alloc(sizeof(int32_t) * (size_t)(tokens * k));
    int32_t *where = must_alloc(sizeof(int32_t) * (size_t)(tokens * k));
    int32_t *offsets = must_alloc(sizeof(int32_t) * (size_t)(E + 1));
    rp_error err = {0};
    check(cpu->moe_route(NULL, logits, tokens, E, k, 1, probs, experts, weights, &err), &err);
    check(cpu->moe_group(NULL, experts, tokens, k, E, offsets, order, where, &err), &err);
    free(logits), free(bias), free(probs), free(weights), free(experts), free(order), free(where);
    return offsets;
}

static void usage(const char *prog)
{
    fprintf(stderr, "usage: %s [-t TOKENS] [-k K] [-e E] [-i IN] [-o OUT] [-r REPS] [-b]\n",
            prog);
    exit(2);
}

int main(int argc, char **argv)
{
    int64_t tokens = 512, k = 8, E = 64, in = 1024, out = 256;
    int reps = 10, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-b") == 0)
            bf16 = 1;
        else if (i + 1 >= argc || a[0] != '-' || !a[1] || a[2])
            usage(argv[0]);
        else if (a[1] == 't')
            tokens = parse_count(argv[++i], argv[0], 1);
        else if (a[1] == 'k')
            k = parse_count(argv[++i], argv[0], 1);
        else if (a[1] == 'e')
            E = parse_count(argv[++i], argv[0], 1);
        else if (a[1] == 'i')
            in = parse_count(argv[++i], argv[0], 1);
        else if (a[1] == 'o')
            out = parse_count(argv[++i], argv[0], 1);
        else if (a[1] == 'r')
            reps = (int)parse_count(argv[++i], argv[0], 1);
        else
            usage(argv[0]);
    }
    if (k > E) {
        fprintf(stderr, "%s: top-%lld of %lld experts\n", argv[0], (long long)k, (long long)E);
        return 2;
    }
    const int64_t rows = tokens * k, nw = in * out;
    problem p = {.rows = rows, .in = in, .out = out, .E = E, .wdt = bf16 ? RP_BF16 : RP_F32};
    p.x = normal_floats((size_t)(rows * in), 3, 1.0f);
    p.dy = normal_floats((size_t)(rows * out), 4, 1.0f);
    float *Wf = normal_floats((size_t)(E * nw), 5, 0.02f);
    const void **Wp = must_alloc(sizeof(void *) * (size_t)E);
    p.dWp = must_alloc(sizeof(float *) * (size_t)E);
    p.dW = calloc((size_t)(E * nw), sizeof(float));
    p.y = must_alloc(sizeof(float) * (size_t)(rows * out));
    p.dx = must_alloc(sizeof(float) * (size_t)(rows * in));
    if (!p.dW) {
        fprintf(stderr, "bench_moe_gemm: cannot allocate the weight gradients\n");
        return 1;
    }
    uint16_t *Wh = NULL;
    if (bf16) {
        Wh = must_alloc(sizeof(uint16_t) * (size_t)(E * nw));
        rp_f32_to_bf16_array(Wf, Wh, (size_t)(E * nw));
    }
    for (int64_t e = 0; e < E; e++) {
        Wp[e] = bf16 ? (const void *)(Wh + e * nw) : (const void *)(Wf + e * nw);
        p.dWp[e] = p.dW + e * nw;
    }
    p.W = Wp[0], p.Wp = Wp;

    int32_t *routed = routed_offsets(tokens, k, E);
    int32_t *even = must_alloc(sizeof(int32_t) * (size_t)(E + 1));
    for (int64_t e = 0; e <= E; e++)
        even[e] = (int32_t)(e * rows / E);
    int64_t lo = rows, hi = 0, empty = 0;
    double sq = 0, mean = (double)rows / (double)E;
    for (int64_t e = 0; e < E; e++) {
        const int64_t c = routed[e + 1] - routed[e];
        lo = c < lo ? c : lo, hi = c > hi ? c : hi, empty += c == 0;
        sq += ((double)c - mean) * ((double)c - mean);
    }

    const int threads = omp_get_max_threads();
    printf("bench_moe_gemm: %lld tokens x top-%lld of %lld experts = %lld rows, %lld -> %lld, "
           "%s weights, %d thread%s, best of %d\n", (long long)tokens, (long long)k, (long long)E,
           (long long)rows, (long long)in, (long long)out, bf16 ? "bf16" : "fp32", threads,
           threads == 1 ? "" : "s", reps);
    printf("  routed rows per expert: min %lld, max %lld, mean %.1f, std %.1f, %lld empty; "
           "even: %lld-%lld\n", (long long)lo, (long long)hi, mean, sqrt(sq / (double)E),
           (long long)empty, (long long)(rows / E), (long long)((rows + E - 1) / E));
    printf("  %-16s %9s %8s | %9s %8s %6s | %9s %8s %6s\n", "op", "dense ms", "GFLOP/s",
           "routed ms", "GFLOP/s", "ratio", "even ms", "GFLOP/s", "ratio");
    const double flop = 2.0 * (double)rows * (double)in * (double)out;
    const int32_t *const variants[3] = {NULL, routed, even};
    for (int op = 0; op < NOPS; op++) {
        double t[3];
        best_times(&p, op, variants, reps, t);
        printf("  %-16s %9.2f %8.1f | %9.2f %8.1f %6.3f | %9.2f %8.1f %6.3f\n", op_names[op],
               t[0] * 1e3, flop / t[0] / 1e9, t[1] * 1e3, flop / t[1] / 1e9, t[1] / t[0],
               t[2] * 1e3, flop / t[2] / 1e9, t[2] / t[0]);
    }
    free((void *)p.x), free((void *)p.dy), free(Wf), free(Wh), free(Wp), free(p.dWp);
    free(p.dW), free(p.y), free(p.dx), free(routed), free(even);
    return 0;
}
