/* bench_block: where a decoder block's time goes, op by op. One block of a
 * model (its config.json) runs forward and backward over one microbatch on
 * a device of the engine's device interface (cpu or cuda), and every op the
 * model issues (model/carve.h's RP_OP) is timed between two marks: the
 * kernels' probe (kernels/ops.h) records a mark after each call, so an op's
 * figure is the time from the op before it ending to it ending. On CUDA the
 * marks are events on the compute stream (the device is created with
 * RP_ALLOW_UNPROVEN_CUDA's copies, which orders it by events: device/
 * backend.h), so the figures are GPU time and the ops queue without a host
 * wait; on the CPU they are the host's clock, each op having finished when
 * it returns. Issue 38 asks for this breakdown of one block's forward and
 * backward on a GPU; on the CPU it shows where the executors' time goes.
 *
 *   bench_block -c CONFIG [-d cpu|cuda] [-t TOKENS] [-s SEQS] [-r REPS]
 *   (defaults: cpu, 4096 tokens in 1 sequence, 5 reps after a warm-up;
 *   the ops run in the compute dtype of the device's table: fp32 on the
 *   CPU, bf16 on CUDA; RP_ALLOW_UNPROVEN_CUDA adds its paths as in a run)
 *
 * Output: per pass, each call site (op and file:line) with its calls and
 * milliseconds (the median over the reps of its sum in a pass) and its
 * share of the pass, the median pass, then the GEMMs' share (linear_* and
 * grouped_linear_* ops), attention's (attention_*) and the rest's; then
 * "RESULT block PASS MS GEMM_SHARE ATTENTION_SHARE OTHER_SHARE" and
 * "RESULT block_op PASS OP SITE CALLS MS SHARE" lines that bench/gpu/run.sh
 * reads. Block 0's weights are random (projections normal(0, 0.02), norms
 * 1), so the figures are the op costs, not a trained model's.
 * Exit 77 when the device cannot be made (no GPU), 1 on an error. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/unproven.h"
#include "device/backend.h"
#include "io/config.h"
#include "model/layers.h"
#include "model/layout.h"

#define MAX_REPS 64
#define MAX_SITES 96

/* a call site of one pass: the op and where the model issues it */
typedef struct site {
    const char *op, *file;
    int line;
    int calls;               /* per pass */
    double ms[MAX_REPS];     /* its sum in each timed pass */
} site;

typedef struct pass_log {
    site sites[MAX_SITES];
    int nsites;
    double total[MAX_REPS];
} pass_log;

/* The probe: a mark after each op, and the op the mark ends. */
typedef struct probe_state {
    rp_device *dev;
    int marks; /* marks recorded this pass, the first before any op */
    const char *op[RP_DEVICE_MARKS];
    const char *file[RP_DEVICE_MARKS];
    int line[RP_DEVICE_MARKS];
    rp_status status;
    rp_error err;
} probe_state;

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_block: %s: %s\n", what, msg);
    exit(1);
}

static void check(rp_status s, const rp_error *err, const char *what)
{
    if (s != RP_OK)
        die(what, err->msg);
}

static void after_op(void *ctx, const char *op, const char *file, int line)
{
    probe_state *p = ctx;
    if (p->status != RP_OK)
        return;
    if (p->marks >= RP_DEVICE_MARKS) {
        p->status = rp_error_set(&p->err, RP_ERR_RANGE, "a pass issues more than %d ops",
                                 RP_DEVICE_MARKS - 1);
        return;
    }
    p->op[p->marks] = op, p->file[p->marks] = file, p->line[p->marks] = line;
    p->status = rp_device_mark(p->dev, p->marks++, &p->err);
}

static void pass_begin(probe_state *p)
{
    p->marks = 0;
    p->status = rp_device_mark(p->dev, p->marks++, &p->err);
    check(p->status, &p->err, "the first mark");
}

/* The pass's marks into rep `rep` of the log (rep < 0: the warm-up, which
 * only names the sites). */
static void pass_end(probe_state *p, pass_log *log, int rep)
{
    check(p->status, &p->err, "a mark");
    for (int i = 0; i < log->nsites; i++) {
        log->sites[i].calls = 0;
        if (rep >= 0)
            log->sites[i].ms[rep] = 0;
    }
    double total = 0;
    for (int m = 1; m < p->marks; m++) {
        double ms = 0;
        rp_error err = {0};
        check(rp_device_mark_elapsed(p->dev, m - 1, m, 1, &ms, &err), &err, "reading a mark");
        total += ms;
        site *s = NULL;
        for (int i = 0; i < log->nsites && !s; i++)
            if (log->sites[i].line == p->line[m] && !strcmp(log->sites[i].file, p->file[m]) &&
                !strcmp(log->sites[i].op, p->op[m]))
                s = &log->sites[i];
        if (!s) {
            if (log->nsites == MAX_SITES)
                die("sites", "more call sites than this program keeps");
            s = &log->sites[log->nsites++];
            memset(s, 0, sizeof *s);
            s->op = p->op[m], s->file = p->file[m], s->line = p->line[m];
        }
        s->calls++;
        if (rep >= 0)
            s->ms[rep] += ms;
    }
    if (rep >= 0)
        log->total[rep] = total;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    double t[MAX_REPS];
    memcpy(t, v, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), by_value);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void report(const char *pass, const pass_log *log, int reps)
{
    const double total = median(log->total, reps);
    double gemm = 0, attention = 0;
    printf("\n%s pass: %.3f ms (median of %d)\n", pass, total, reps);
    printf("%-28s %-18s %5s %10s %7s\n", "op", "site", "calls", "ms", "share");
    for (int i = 0; i < log->nsites; i++) {
        const site *s = &log->sites[i];
        const double ms = median(s->ms, reps);
        char where[64];
        snprintf(where, sizeof where, "%s:%d", base_name(s->file), s->line);
        printf("%-28s %-18s %5d %10.3f %6.1f%%\n", s->op, where, s->calls, ms,
               total > 0 ? 100 * ms / total : 0.0);
        if (starts(s->op, "linear_") || starts(s->op, "grouped_linear_"))
            gemm += ms;
        else if (starts(s->op, "attention_"))
            attention += ms;
    }
    const double other = total - gemm - attention;
    printf("GEMMs %.3f ms (%.1f%%), attention %.3f ms (%.1f%%), the rest %.3f ms (%.1f%%)\n",
           gemm, 100 * gemm / total, attention, 100 * attention / total, other,
           100 * other / total);
    printf("RESULT block %s %.4f %.4f %.4f %.4f\n", pass, total, gemm / total, attention / total,
           other / total);
    for (int i = 0; i < log->nsites; i++) {
        const site *s = &log->sites[i];
        const double ms = median(s->ms, reps);
        printf("RESULT block_op %s %s %s:%d %d %.4f %.4f\n", pass, s->op, base_name(s->file),
               s->line, s->calls, ms, ms / total);
    }
}

/* n values of normal(0, sd) (or all 1 with sd 0) into host memory in dt */
static void *host_fill(size_t n, rp_dtype dt, float sd, uint64_t seed)
{
    float *f = malloc(sizeof(float) * (n ? n : 1));
    if (!f)
        die("host memory", "out of memory");
    if (sd == 0)
        for (size_t i = 0; i < n; i++)
            f[i] = 1.0f;
    else
        rp_rng_fill_normal(f, n, seed, 0, 0, 0.0f, sd);
    if (dt == RP_F32)
        return f;
    uint16_t *b = malloc(sizeof(uint16_t) * (n ? n : 1));
    if (!b)
        die("host memory", "out of memory");
    for (size_t i = 0; i < n; i++)
        b[i] = rp_f32_to_bf16(f[i]);
    free(f);
    return b;
}

/* the device buffers, freed at the end */
static void *buffers[16];
static int nbuffers;

static void *device_from(rp_device *dev, const void *host, size_t bytes)
{
    void *p = NULL;
    rp_error err = {0};
    check(rp_device_alloc(dev, bytes ? bytes : 16, &p, &err), &err, "device memory");
    buffers[nbuffers++] = p;
    if (host)
        check(rp_device_copy(dev, p, host, bytes, &err), &err, "an upload");
    else
        check(rp_device_memset0(dev, p, bytes ? bytes : 16, &err), &err, "zeroing");
    return p;
}

int main(int argc, char **argv)
{
    const char *config = NULL, *device = "cpu";
    int64_t tokens = 4096, seqs = 1;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c") && i + 1 < argc)
            config = argv[++i];
        else if (!strcmp(argv[i], "-d") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            tokens = parse_count(argv[++i], "bench_block", 1);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            seqs = parse_count(argv[++i], "bench_block", 1);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            reps = (int)parse_count(argv[++i], "bench_block", 1);
        else
            config = NULL, i = argc;
    }
    if (!config || (strcmp(device, "cpu") && strcmp(device, "cuda")) || reps > MAX_REPS ||
        tokens % seqs) {
        fprintf(stderr, "usage: bench_block -c CONFIG [-d cpu|cuda] [-t TOKENS] [-s SEQS] "
                        "[-r REPS <= %d]; TOKENS a multiple of SEQS\n", MAX_REPS);
        return 2;
    }
    rp_error err = {0};
    rp_model_config cfg;
    check(rp_config_load(config, &cfg, &err), &err, config);
    check(rp_unproven_check(&err), &err, "the environment");
    const int cuda = !strcmp(device, "cuda");
    rp_device_params params = {.kind = cuda ? RP_DEVICE_CUDA : RP_DEVICE_CPU,
                               .threads = omp_get_max_threads(),
                               .unproven = rp_unproven_mask() |
                                           (cuda ? 1u << RP_UNPROVEN_COPIES : 0u)};
    rp_device *dev = NULL;
    if (rp_device_create(&params, &dev, &err) != RP_OK) {
        printf("bench_block: no %s device (%s); nothing measured\n", device, err.msg);
        return 77;
    }
    rp_kernels k;
    check(rp_device_kernels(dev, &k, &err), &err, "the kernels");
    const rp_dtype dt = k.ops->compute_dtype;
    const int64_t seqlen = tokens / seqs, H = cfg.hidden_size;

    /* block 0's weights and the microbatch's activations */
    rp_layer_desc *layers = NULL;
    int nlayers = 0;
    check(rp_model_layout(&cfg, &layers, &nlayers, &err), &err, "the layout");
    const size_t numel = layers[1].numel;
    rp_block_offsets off;
    rp_block_offsets_get(&cfg, 0, &off);
    void *w_host = host_fill(numel, dt, 0.02f, 1);
    const size_t es = rp_dtype_size(dt);
    const size_t norms[] = {off.in_norm, off.post_norm, off.q_norm, off.k_norm};
    const int64_t norm_len[] = {H, H, cfg.head_dim, cfg.head_dim};
    for (int i = 0; i < 4; i++)
        if (norms[i] != SIZE_MAX) {
            void *ones = host_fill((size_t)norm_len[i], dt, 0.0f, 0);
            memcpy((char *)w_host + norms[i] * es, ones, (size_t)norm_len[i] * es);
            free(ones);
        }
    void *w = device_from(dev, w_host, numel * es);
    float *x_host = host_fill((size_t)(tokens * H), RP_F32, 1.0f, 2);
    float *dy_host = host_fill((size_t)(tokens * H), RP_F32, 1e-3f, 3);
    float *x = device_from(dev, x_host, sizeof(float) * (size_t)(tokens * H));
    float *dy = device_from(dev, dy_host, sizeof(float) * (size_t)(tokens * H));
    float *y = device_from(dev, NULL, sizeof(float) * (size_t)(tokens * H));
    float *dx = device_from(dev, NULL, sizeof(float) * (size_t)(tokens * H));
    float *dw = device_from(dev, NULL, sizeof(float) * numel);
    const size_t saved_f = rp_block_saved_floats(k.ops, dt, &cfg, seqs, seqlen);
    const size_t ws_f = rp_block_workspace_floats(k.ops, dt, &cfg, seqs, seqlen);
    float *saved = device_from(dev, NULL, sizeof(float) * saved_f);
    float *ws = device_from(dev, NULL, sizeof(float) * ws_f);
    float *stats = NULL;
    if (rp_model_block_is_moe(&cfg, 0))
        stats = device_from(dev, NULL, sizeof(float) * 2 * (size_t)cfg.moe.num_experts);
    rp_block_call call = {.block = 0, .router_stats = stats,
                          .allow_unproven = rp_unproven_in(params.unproven,
                                                           RP_UNPROVEN_GPT_OSS)};

    printf("block 0 of %s on %s (%s weights and compute): %lld tokens in %lld sequence(s); "
           "%zu parameters, %.1f MiB saved, %.1f MiB workspace; marks: %s; %s\n", config,
           rp_device_name(dev), rp_dtype_name(dt), (long long)tokens, (long long)seqs, numel,
           saved_f * 4 / 1048576.0, ws_f * 4 / 1048576.0,
           rp_device_ordered_by_events(dev) && cuda ? "events on the compute stream"
                                                    : "the host's clock",
           rp_device_attention_note(dev));

    static probe_state probe;
    static pass_log fwd, bwd;
    probe.dev = dev;
    const rp_kernel_probe hook = {.after = after_op, .ctx = &probe};
    k.probe = &hook;
    for (int rep = -1; rep < reps; rep++) {
        pass_begin(&probe);
        check(rp_block_forward(&k, &cfg, w, dt, x, y, seqs, seqlen, NULL, saved, ws, &call, &err),
              &err, "the forward");
        pass_end(&probe, &fwd, rep);
        pass_begin(&probe);
        check(rp_block_backward(&k, &cfg, w, dt, x, saved, dy, dx, dw, seqs, seqlen, NULL, ws,
                                &call, &err),
              &err, "the backward");
        pass_end(&probe, &bwd, rep);
    }
    check(rp_device_sync(dev, &err), &err, "the last pass");
    report("forward", &fwd, reps);
    report("backward", &bwd, reps);

    free(w_host), free(x_host), free(dy_host), free(layers);
    for (int i = 0; i < nbuffers; i++)
        rp_device_free(dev, buffers[i]);
    rp_device_destroy(&dev);
    return 0;
}
