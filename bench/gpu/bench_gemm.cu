/* bench_gemm: bf16 cuBLAS GEMM TFLOP/s (bf16 in and out, fp32 compute, as the
 * CUDA executor calls it) at the shapes of a Qwen3-1.7B microbatch, against
 * the bf16 matrix peak measured in the same run: the best of the large square
 * products (the ceiling every ratio is taken against, and what the
 * end-to-end MFU of bench/gpu/run.sh divides by).
 *
 *   bench_gemm [-t TOKENS] [-r REPS] [-s "4096 8192 16384"] [-q]
 *
 * Each linear layer (out N, in K) over T tokens is timed as the three
 * products of a training step, in cuBLAS column-major terms:
 *   fwd    Y^T = W X^T     op TN  m=N n=T k=K
 *   dgrad  dX^T = W^T dY^T op NN  m=K n=T k=N
 *   wgrad  dW^T = X^T dY   op NT  m=K n=N k=T
 * Inputs are random (never zeros: zeros run faster than data), several input
 * sets rotate so small shapes do not run out of L2, and every shape is checked
 * once: C is poisoned with NaN, and sampled elements are compared with a
 * float64 dot product recomputed on the host from the fill's hash (relative
 * error over the samples must be under 1e-2, the bf16 output rounding is
 * ~2e-3). Time: median of REPS event-timed batches after a warm-up.
 *
 * The fused projections of issue 38 are timed too: q, k, v as one product
 * and gate and up as one, against their parts (the time they would save;
 * "RESULT gemm_fusion NAME PARTS_MS FUSED_MS RATIO", outside the step mix).
 *
 * Then (not with -q) the engine's residual GEMM, issue 38: the down
 * projection at T tokens (6144 -> 2048), fp32 y = residual + x W^T, as the
 * CUDA table's linear_forward runs it by default (the residual copied into
 * y, then cublasGemmEx with beta = 1) and through cuBLASLt with the
 * residual as C (kernels/cuda/gemm_lt.h, RP_ALLOW_UNPROVEN_CUDA=gemm-lt),
 * both timed in the same run; the two results must agree within 1e-4
 * (fp32 sums of 6144 terms in two orders).
 * Output: a table, then "RESULT ..." lines that bench/gpu/run.sh reads.
 * Exit 77 without a GPU, 1 on an error or a wrong result. */
#include "bench_common.cuh"
#include <cublas_v2.h>
#include <math.h>

#include "kernels/cuda/gemm_lt.h"

#define CKB(call)                                                                        \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call,  \
                    (int)s_);                                                            \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

struct shape {
    char name[32];
    cublasOperation_t opa, opb;
    long m, n, k;
};

static double flops_of(const shape &s) { return 2.0 * s.m * s.n * s.k; }

/* Rows and columns of the stored A (m x k after op) and B (k x n after op). */
static void dims(const shape &s, long *ar, long *ac, long *br, long *bc)
{
    *ar = s.opa == CUBLAS_OP_N ? s.m : s.k;
    *ac = s.opa == CUBLAS_OP_N ? s.k : s.m;
    *br = s.opb == CUBLAS_OP_N ? s.k : s.n;
    *bc = s.opb == CUBLAS_OP_N ? s.n : s.k;
}

static void gemm(cublasHandle_t h, const shape &s, const __nv_bfloat16 *a,
                 const __nv_bfloat16 *b, __nv_bfloat16 *c)
{
    long ar, ac, br, bc;
    dims(s, &ar, &ac, &br, &bc);
    const float one = 1.0f, zero = 0.0f;
    CKB(cublasGemmEx(h, s.opa, s.opb, (int)s.m, (int)s.n, (int)s.k, &one, a, CUDA_R_16BF,
                     (int)ar, b, CUDA_R_16BF, (int)br, &zero, c, CUDA_R_16BF, (int)s.m,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static float bf16_to_float(__nv_bfloat16 v)
{
    uint16_t u;
    memcpy(&u, &v, 2);
    uint32_t w = (uint32_t)u << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
}

/* Runs once on poisoned C (set 0) and compares 16 sampled elements with a
 * float64 reference; returns the relative error over the samples. */
static double check(cublasHandle_t h, const shape &s, const __nv_bfloat16 *a,
                    const __nv_bfloat16 *b, __nv_bfloat16 *c, uint64_t seed_a, uint64_t seed_b)
{
    long ar, ac, br, bc;
    dims(s, &ar, &ac, &br, &bc);
    CK(cudaMemset(c, 0xff, (size_t)s.m * s.n * 2)); /* 0xffff is a bf16 NaN */
    gemm(h, s, a, b, c);
    CK(cudaDeviceSynchronize());
    double num = 0, den = 0;
    for (int t = 0; t < 16; t++) {
        /* corners and hashed interior points */
        long i = t == 0 ? 0 : t == 1 ? s.m - 1 : (long)(rp_bench_mix(77 + t) % s.m);
        long j = t == 0 ? 0 : t == 1 ? s.n - 1 : (long)(rp_bench_mix(99 + t) % s.n);
        double ref = 0;
        for (long p = 0; p < s.k; p++) {
            long ia = s.opa == CUBLAS_OP_N ? i + p * ar : p + i * ar;
            long ib = s.opb == CUBLAS_OP_N ? p + j * br : j + p * br;
            ref += (double)rp_bench_value(seed_a, ia) * rp_bench_value(seed_b, ib);
        }
        __nv_bfloat16 got;
        CK(cudaMemcpy(&got, c + i + j * s.m, 2, cudaMemcpyDeviceToHost));
        double g = bf16_to_float(got);
        if (isnan(g)) return INFINITY;
        num += (g - ref) * (g - ref);
        den += ref * ref;
    }
    return sqrt(num / (den > 0 ? den : 1));
}

struct result {
    shape s;
    double tflops, err;
};

static result run(cublasHandle_t h, const shape &s, int reps)
{
    long ar, ac, br, bc;
    dims(s, &ar, &ac, &br, &bc);
    size_t na = (size_t)ar * ac, nb = (size_t)br * bc, nc = (size_t)s.m * s.n;
    size_t set_bytes = 2 * (na + nb + nc);
    int nsets = (int)((256ull << 20) / set_bytes) + 1;
    if (nsets > 8) nsets = 8;
    __nv_bfloat16 *a[8], *b[8], *c[8];
    for (int i = 0; i < nsets; i++) {
        CK(cudaMalloc(&a[i], na * 2));
        CK(cudaMalloc(&b[i], nb * 2));
        CK(cudaMalloc(&c[i], nc * 2));
        rp_bench_fill(a[i], na, 1000 + 2 * i);
        rp_bench_fill(b[i], nb, 1001 + 2 * i);
    }
    result r;
    r.s = s;
    r.err = check(h, s, a[0], b[0], c[0], 1000, 1001);
    /* a batch of about 2 ms at 500 TFLOP/s, so launch gaps do not count */
    int inner = (int)ceil(1e12 / flops_of(s));
    if (inner < 1) inner = 1;
    if (inner > 200) inner = 200;
    for (int w = 0; w < 3; w++) gemm(h, s, a[w % nsets], b[w % nsets], c[w % nsets]);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * reps);
    int it = 0;
    for (int rep = 0; rep < reps; rep++) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < inner; i++, it++)
            gemm(h, s, a[it % nsets], b[it % nsets], c[it % nsets]);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[rep], e0, e1));
    }
    double med = rp_bench_median(ms, reps) / inner;
    r.tflops = flops_of(s) / (med * 1e-3) / 1e12;
    free(ms);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    for (int i = 0; i < nsets; i++) {
        CK(cudaFree(a[i]));
        CK(cudaFree(b[i]));
        CK(cudaFree(c[i]));
    }
    return r;
}

__global__ static void fill_f32(float *x, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = rp_bench_value(seed, i);
}

/* The residual GEMM both ways: y = residual + x W^T, x [t, in], W [out, in]
 * (row-major, as linear_forward). Prints its line and RESULT gemm_residual
 * COPY_BETA1_MS LT_MS RATIO; returns 0, or 1 when cuBLASLt took no
 * algorithm or the two disagree. */
static int residual_gemm(cublasHandle_t h, long t, long in, long out, int reps)
{
    const size_t nx = (size_t)t * in, nw = (size_t)out * in, ny = (size_t)t * out;
    __nv_bfloat16 *x, *w;
    float *res, *y0, *y1;
    CK(cudaMalloc(&x, nx * 2));
    CK(cudaMalloc(&w, nw * 2));
    CK(cudaMalloc(&res, ny * 4));
    CK(cudaMalloc(&y0, ny * 4));
    CK(cudaMalloc(&y1, ny * 4));
    rp_bench_fill(x, nx, 2001);
    rp_bench_fill(w, nw, 2002);
    fill_f32<<<1024, 256>>>(res, ny, 2003);
    CK(cudaGetLastError());
    rp_cuda_gemm_lt *lt = NULL;
    char why[256] = "";
    if (rp_cuda_gemm_lt_create(&lt, why, sizeof why) != 0) {
        fprintf(stderr, "bench_gemm: cuBLASLt: %s\n", why);
        exit(1);
    }
    const float one = 1.0f;
    int taken = 1;
    auto copy_beta1 = [&]() { /* linear_forward without gemm-lt */
        CK(cudaMemcpyAsync(y0, res, ny * 4, cudaMemcpyDeviceToDevice, 0));
        CKB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)t, (int)in, &one, w,
                         CUDA_R_16BF, (int)in, x, CUDA_R_16BF, (int)in, &one, y0, CUDA_R_32F,
                         (int)out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto lt_epilogue = [&]() { /* with gemm-lt: the residual as C */
        int took = 0;
        CKB((cublasStatus_t)rp_cuda_gemm_lt_linear_forward(
            lt, 0, (const uint16_t *)x, (const uint16_t *)w, NULL, res, y1, t, in, out, &took));
        taken &= took;
    };
    copy_beta1();
    lt_epilogue();
    CK(cudaDeviceSynchronize());
    float *h0 = (float *)malloc(ny * 4), *h1 = (float *)malloc(ny * 4);
    CK(cudaMemcpy(h0, y0, ny * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h1, y1, ny * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < ny; i++) {
        num += ((double)h1[i] - h0[i]) * ((double)h1[i] - h0[i]);
        den += (double)h0[i] * h0[i];
    }
    const double err = sqrt(num / (den > 0 ? den : 1));
    free(h0), free(h1);
    double ms[2] = {0, 0};
    if (taken) {
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        float *m = (float *)malloc(sizeof(float) * reps);
        const int inner = 20;
        float *m1 = (float *)malloc(sizeof(float) * reps);
        for (int rep = 0; rep < reps; rep++) /* interleaved: drift affects both alike */
            for (int way = 0; way < 2; way++) {
                CK(cudaEventRecord(e0));
                for (int i = 0; i < inner; i++)
                    way ? lt_epilogue() : copy_beta1();
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(way ? &m1[rep] : &m[rep], e0, e1));
            }
        ms[0] = rp_bench_median(m, reps) / inner;
        ms[1] = rp_bench_median(m1, reps) / inner;
        free(m), free(m1);
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
    }
    rp_cuda_gemm_lt_destroy(&lt);
    CK(cudaFree(x));
    CK(cudaFree(w));
    CK(cudaFree(res));
    CK(cudaFree(y0));
    CK(cudaFree(y1));
    if (!taken) {
        fprintf(stderr, "bench_gemm: cuBLASLt has no algorithm for the residual GEMM\n");
        return 1;
    }
    printf("\nresidual GEMM (fp32 y = residual + x W^T, %ld x %ld -> %ld): copy + beta=1 %.3f ms, "
           "cuBLASLt with the residual as C %.3f ms: %.3fx; rel. difference %.1e%s\n", t, in, out,
           ms[0], ms[1], ms[0] / ms[1], err, err < 1e-4 ? "" : "  WRONG");
    printf("RESULT gemm_residual %.4f %.4f %.4f\n", ms[0], ms[1], ms[0] / ms[1]);
    return err < 1e-4 ? 0 : 1;
}

static shape mk(const char *name, cublasOperation_t oa, cublasOperation_t ob, long m, long n,
                long k)
{
    shape s;
    snprintf(s.name, sizeof s.name, "%s", name);
    s.opa = oa;
    s.opb = ob;
    s.m = m;
    s.n = n;
    s.k = k;
    return s;
}

static const char *opname(const shape &s)
{
    static char b[3];
    b[0] = s.opa == CUBLAS_OP_N ? 'N' : 'T';
    b[1] = s.opb == CUBLAS_OP_N ? 'N' : 'T';
    b[2] = 0;
    return b;
}

int main(int argc, char **argv)
{
    long tokens = 4096;
    int reps = 20;
    const char *squares = "4096 8192 16384";
    static const char quick[] = "8192"; /* -q: the peak alone */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) tokens = atol(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) squares = argv[++i];
        else if (!strcmp(argv[i], "-q")) { reps = 5; squares = quick; }
        else {
            fprintf(stderr, "usage: %s [-t TOKENS] [-r REPS] [-s \"SQUARE SIZES\"] [-q]\n",
                    argv[0]);
            return 2;
        }
    }
    if (tokens < 16 || reps < 1) {
        fprintf(stderr, "%s: -t must be >= 16 and -r >= 1\n", argv[0]);
        return 2;
    }
    rp_bench_device("bench_gemm");
    cublasHandle_t h;
    CKB(cublasCreate(&h));

    /* Qwen3-1.7B: hidden 2048, q 16x128, kv 8x128, intermediate 6144, vocab
     * 151936; the LM head runs on token chunks of 1024. */
    struct layer { const char *name; long n, k, t; } layers[] = {
        {"q/o", 2048, 2048, tokens},      {"k/v", 1024, 2048, tokens},
        {"gate/up", 6144, 2048, tokens},  {"down", 2048, 6144, tokens},
        {"head", 151936, 2048, tokens < 1024 ? tokens : 1024},
        /* issue 38's fused projections, timed beside their parts (not in
         * the step mix): q, k, v as one product (2048 + 1024 + 1024 wide),
         * gate and up as one (2 x 6144) */
        {"qkv", 4096, 2048, tokens},      {"gateup", 12288, 2048, tokens},
    };
    const int nl = sizeof layers / sizeof layers[0];
    shape shapes[64];
    int ns = 0;
    char sq[256];
    snprintf(sq, sizeof sq, "%s", squares);
    for (char *tok = strtok(sq, " ,"); tok && ns < 16; tok = strtok(NULL, " ,")) {
        long n = atol(tok);
        if (n < 16) continue;
        char nm[32];
        snprintf(nm, sizeof nm, "square%ld", n);
        shapes[ns++] = mk(nm, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n);
    }
    int nsq = ns;
    if (nsq == 0) {
        fprintf(stderr, "bench_gemm: -s names no square size >= 16\n");
        return 2;
    }
    for (int l = 0; l < nl; l++) {
        char nm[32];
        snprintf(nm, sizeof nm, "%s.fwd", layers[l].name);
        shapes[ns++] = mk(nm, CUBLAS_OP_T, CUBLAS_OP_N, layers[l].n, layers[l].t, layers[l].k);
        snprintf(nm, sizeof nm, "%s.dgrad", layers[l].name);
        shapes[ns++] = mk(nm, CUBLAS_OP_N, CUBLAS_OP_N, layers[l].k, layers[l].t, layers[l].n);
        snprintf(nm, sizeof nm, "%s.wgrad", layers[l].name);
        shapes[ns++] = mk(nm, CUBLAS_OP_N, CUBLAS_OP_T, layers[l].k, layers[l].n, layers[l].t);
    }

    result res[64];
    double peak = 0;
    int bad = 0;
    for (int i = 0; i < ns; i++) {
        res[i] = run(h, shapes[i], reps);
        if (!(res[i].err < 1e-2)) bad = 1;
        /* only a square that computed the right product sets the ceiling:
         * run.sh reads -q's peak without its exit status */
        else if (i < nsq && res[i].tflops > peak) peak = res[i].tflops;
    }
    printf("\n%-14s %2s %7s %7s %6s %9s %6s %8s\n", "gemm (bf16)", "op", "m", "n", "k",
           "TFLOP/s", "%peak", "rel.err");
    for (int i = 0; i < ns; i++)
        printf("%-14s %2s %7ld %7ld %6ld %9.1f %6.1f %8.1e%s\n", res[i].s.name, opname(res[i].s),
               res[i].s.m, res[i].s.n, res[i].s.k, res[i].tflops, 100 * res[i].tflops / peak,
               res[i].err, res[i].err < 1e-2 ? "" : "  WRONG");
    /* The time-weighted rate of a whole training step's linear layers: 28
     * blocks (q and o, k and v, gate and up twice each; down once) and the
     * head over all token chunks. */
    double fl = 0, tm = 0;
    for (int i = nsq; i < ns; i++) {
        const char *nm = res[i].s.name;
        double mult = !strncmp(nm, "head", 4)     ? ceil(tokens / 1024.0)
                      : !strncmp(nm, "down", 4)   ? 28
                      : !strncmp(nm, "qkv", 3)    ? 0
                      : !strncmp(nm, "gateup", 6) ? 0
                                                  : 2 * 28;
        fl += mult * flops_of(res[i].s);
        tm += mult * flops_of(res[i].s) / (res[i].tflops * 1e12);
    }
    printf("\npeak (best square): %.1f TFLOP/s; Qwen3-1.7B step mix at %ld tokens: %.1f TFLOP/s "
           "(%.1f%% of peak)\n", peak, tokens, fl / tm / 1e12, 100 * fl / tm / 1e12 / peak);
    if (peak > 0) /* no line without a checked square: no ratio against a wrong one */
        printf("RESULT gemm_peak %.2f\n", peak);
    printf("RESULT gemm_mix %.2f %.4f\n", fl / tm / 1e12, fl / tm / 1e12 / peak);
    for (int i = nsq; i < ns; i++)
        printf("RESULT gemm %s %.2f %.4f\n", res[i].s.name, res[i].tflops, res[i].tflops / peak);
    /* What fusing would gain: the parts' time over the fused product's, per
     * pass (fwd, dgrad, wgrad) and over the three; > 1 is a gain */
    const char *pass[3] = {"fwd", "dgrad", "wgrad"};
    const struct { const char *fused; const char *part[2]; int times[2]; } fusion[2] = {
        {"qkv", {"q/o", "k/v"}, {1, 2}},
        {"gateup", {"gate/up", NULL}, {2, 0}},
    };
    for (int f = 0; f < 2; f++) {
        double parts_all = 0, fused_all = 0;
        for (int p = 0; p < 3; p++) {
            double parts = 0, fused = 0;
            for (int i = nsq; i < ns; i++) {
                char nm[32];
                snprintf(nm, sizeof nm, "%s.%s", fusion[f].fused, pass[p]);
                const double ms = flops_of(res[i].s) / (res[i].tflops * 1e9);
                if (!strcmp(res[i].s.name, nm))
                    fused += ms;
                for (int q = 0; q < 2; q++) {
                    if (!fusion[f].part[q])
                        continue;
                    snprintf(nm, sizeof nm, "%s.%s", fusion[f].part[q], pass[p]);
                    if (!strcmp(res[i].s.name, nm))
                        parts += fusion[f].times[q] * ms;
                }
            }
            printf("fusion %-6s %-5s: parts %.3f ms, fused %.3f ms, %.3fx\n", fusion[f].fused,
                   pass[p], parts, fused, parts / fused);
            parts_all += parts, fused_all += fused;
        }
        printf("RESULT gemm_fusion %s %.4f %.4f %.4f\n", fusion[f].fused, parts_all, fused_all,
               parts_all / fused_all);
    }
    /* the down projection's residual GEMM (Qwen3-1.7B: 6144 -> 2048) */
    if (squares != quick && residual_gemm(h, tokens, 6144, 2048, reps))
        bad = 1;
    CKB(cublasDestroy(h));
    if (bad) {
        fprintf(stderr, "bench_gemm: a product disagreed with the float64 reference\n");
        return 1;
    }
    return 0;
}
