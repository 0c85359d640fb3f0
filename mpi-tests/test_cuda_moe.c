/* Proves (on a machine with a CUDA device; SKIP, exit 77, elsewhere): every
 * mixture-of-experts op of the CUDA kernel-ops table (kernels/ops.h), called
 * through the table with the state of rp_cuda_kernels_create, agrees with
 * the same op of the CPU table (rp_kernel_ops_cpu) on fresh random inputs.
 * Compute-dtype inputs are drawn in fp32 and rounded to bf16 first; the CUDA
 * op gets the bf16 bits, the CPU op the same values as floats. Every CUDA
 * output is poisoned (all bits set: NaN, or -1 for int32) before the call,
 * so an element left unwritten fails:
 *   - moe_route (E 128 / 60 / 40 / 1, k 8 / 4 / 40 / 1, norm_topk 0 and 1):
 *     the same experts in the same slots on logits without near ties, rows
 *     of exact ties (broken to the lower index) and a row with a NaN logit
 *     (experts 0..k-1, as the CPU); probs and weights within 1e-5 per
 *     element (expf differs from the C library's in the last bits); top-0
 *     and top-(E+1) refused with the op named;
 *   - moe_group (up to 160000 pairs, E up to 256, many experts empty,
 *     experts repeated within a token, 0 rows): offsets, order and where
 *     exactly the CPU's stable counting sort, and the same bits twice;
 *     an expert outside [0, E) is RP_ERR_RANGE naming the first bad
 *     position, and the table works on afterwards;
 *   - moe_stats, moe_gather (with and without weights; rows of whole 16-byte
 *     vectors and odd rows), moe_scatter_add (= and +=), moe_combine (with
 *     and without residual), moe_down_backward (dm apart from and aliasing
 *     z, with and without dm_compute) and moe_route_backward (norm_topk 0/1,
 *     aux_grad or not, dlogits_compute or not): bit for bit, as both
 *     tables run the same operations in the order the contracts fix and
 *     round each product and sum separately; every rounded copy exactly the
 *     rounded fp32 value;
 *   - grouped_linear_forward, _backward_input (=, += and into dx_compute)
 *     and _backward_weight (two accumulating calls) with experts that have
 *     no rows (first, middle and last; their W pointers NULL, their dW
 *     pointers NULL or poisoned buffers that stay untouched), rows on and
 *     across the 64-row tiles, 1 and 256 experts, dimensions multiples of 8
 *     and odd: within GEMM_TOL of the CPU (the same bf16 values, fp32
 *     accumulation; only the summation order differs), rounded copies
 *     exact, the same bits on a second run; 257 experts and fp32 weights
 *     refused with the op named;
 *   - grouped_bias_forward (with and without y's rounded copy) and
 *     grouped_bias_backward (gpt-oss's expert biases), experts without rows
 *     (a NULL bias; dbias NULL or poisoned and left so), 1, 29, 40 and 90
 *     columns: bit for bit;
 *   - the forward chain route -> group -> gather -> grouped forward ->
 *     combine with every intermediate on the device matches the CPU chain
 *     within GEMM_TOL. */
#include "config.h"

#include "rp_check.h"

#ifdef RP_HAVE_CUDA_EXECUTOR
#include <cublas_v2.h>

#include "core/dtype.h"
#include "cuda_test_util.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/ops.h"

/* GEMM_TOL: both tables multiply the same bf16 values and accumulate in
 * fp32, so only the summation order differs (and the tensor cores'
 * accumulation): with K <= 200 terms ~ K * 2^-24 ~ 1.2e-5 even when biased;
 * 1e-4 is test_kernel_ops's figure for the dense GEMMs. ROUTE_TOL: the
 * softmax's expf differs by a few ulps between the GPU and the C library,
 * and the division and sum carry it: 1e-5 per element is > 40 ulps. */
#define GEMM_TOL 1e-4
#define ROUTE_TOL 1e-5

/* ---- the CUDA table's state (one per test) ------------------------------ */

static cudaStream_t g_stream;
static cublasHandle_t g_blas;
static rp_kernels g_k;
static rp_error g_err;

static void setup(void)
{
    ck_assert(cudaSetDevice(0) == cudaSuccess);
    ck_assert(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) == cudaSuccess);
    ck_assert(cublasCreate(&g_blas) == CUBLAS_STATUS_SUCCESS);
    ck_assert(cublasSetStream(g_blas, g_stream) == CUBLAS_STATUS_SUCCESS);
    memset(&g_err, 0, sizeof g_err);
    memset(&g_k, 0, sizeof g_k);
    rp_status s = rp_cuda_kernels_create(0, g_stream, g_blas, &g_k, &g_err);
    ck_assert_msg(s == RP_OK, "rp_cuda_kernels_create: %d: %s", (int)s, g_err.msg);
}

static void teardown(void)
{
    rp_cuda_kernels_destroy(&g_k);
    cublasDestroy(g_blas);
    cudaStreamDestroy(g_stream);
}

#define RUN(label, call)                                                                   \
    do {                                                                                   \
        memset(&g_err, 0, sizeof g_err);                                                   \
        rp_status run_s_ = (call);                                                         \
        ck_assert_msg(run_s_ == RP_OK, "%s: status %d: %s", (label), (int)run_s_,          \
                      g_err.msg);                                                          \
    } while (0)
#define GPU_OP(op, ...) RUN("cuda " #op, g_k.ops->op(g_k.state, __VA_ARGS__, &g_err))
#define CPU_OP(op, ...) RUN("cpu " #op, rp_kernel_ops_cpu.op(NULL, __VA_ARGS__, &g_err))
/* the CUDA op's status, its message in g_err */
#define GPU_TRY(op, ...) (memset(&g_err, 0, sizeof g_err), g_k.ops->op(g_k.state, __VA_ARGS__, &g_err))

/* ---- host and device buffers -------------------------------------------- */

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *host_nan(size_t n)
{
    float *p = xmalloc(n * 4);
    memset(p, 0xff, n * 4);
    return p;
}

static float *dup_f(const float *x, size_t n)
{
    float *p = xmalloc(n * 4);
    memcpy(p, x, n * 4);
    return p;
}

static void *dev_nan_bytes(size_t bytes) /* all bits set: NaN, or -1 for int32 */
{
    void *d = dev_alloc(bytes);
    dev_poison(d, bytes);
    return d;
}

static void sync_ops(void)
{
    cudaError_t e = cudaStreamSynchronize(g_stream);
    ck_assert_msg(e == cudaSuccess, "the ops' stream: %s", cudaGetErrorString(e));
}

static void *get_bytes(const void *d, size_t bytes)
{
    void *h = xmalloc(bytes);
    sync_ops();
    dev_download(h, d, bytes);
    return h;
}

static float *get_f(const float *d, size_t n)
{
    return get_bytes(d, n * 4);
}

static int32_t *get_i(const int32_t *d, size_t n)
{
    return get_bytes(d, n * 4);
}

static uint16_t *get_bits(const void *d, size_t n)
{
    return get_bytes(d, n * 2);
}

/* A compute-dtype input: f the bf16-rounded values as floats (the CPU op's),
 * d the same bf16 bits on the device (the CUDA op's). */
typedef struct cin {
    float *f;
    void *d;
} cin;

static cin cin_from(const float *x, size_t n)
{
    cin c;
    c.f = xmalloc(n * 4);
    uint16_t *b = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        b[i] = rp_f32_to_bf16(x[i]);
        c.f[i] = rp_bf16_to_f32(b[i]);
    }
    c.d = dev_upload(b, n * 2);
    free(b);
    return c;
}

static cin cin_rand(size_t n, float mean, float sd)
{
    float *x = rand_f32(n, mean, sd);
    cin c = cin_from(x, n);
    free(x);
    return c;
}

static void cin_free(cin *c)
{
    free(c->f);
    cudaFree(c->d);
}

/* A draw in [0, m) from a 64-bit LCG. */
static uint32_t draw(uint64_t *s, uint32_t m)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)((*s >> 33) % m);
}

/* ---- comparisons ---------------------------------------------------------- */

static void check_same_bits(const void *a, const void *b, size_t n_words, const char *what)
{
    const uint32_t *x = a, *y = b;
    for (size_t i = 0; i < n_words; i++)
        ck_assert_msg(x[i] == y[i], "%s: [%zu] 0x%08x vs 0x%08x", what, i, x[i], y[i]);
}

static void check_same_ints(const int32_t *a, const int32_t *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == b[i], "%s: [%zu] %d vs the CPU's %d", what, i, (int)a[i],
                      (int)b[i]);
}

/* The CUDA op's bf16 output d is exactly the fp32 values y rounded. */
static void check_rounded(const void *d, const float *y, size_t n, const char *what)
{
    uint16_t *b = get_bits(d, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(b[i] == rp_f32_to_bf16(y[i]),
                      "%s: [%zu] = 0x%04x, rp_f32_to_bf16(%.9g) = 0x%04x", what, i, b[i],
                      (double)y[i], rp_f32_to_bf16(y[i]));
    free(b);
}

/* Element by element: |got - ref| <= tol * |ref| (both finite). */
static void check_close_each(const float *got, const float *ref, size_t n, double tol,
                             const char *what)
{
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(got[i]) && isfinite(ref[i]), "%s: [%zu] %g vs the CPU's %g",
                      what, i, (double)got[i], (double)ref[i]);
        const double d = fabs((double)got[i] - (double)ref[i]);
        ck_assert_msg(d <= tol * fabs((double)ref[i]), "%s: [%zu] %.9g vs the CPU's %.9g", what,
                      i, (double)got[i], (double)ref[i]);
    }
}

static void check_increment(const float *got, const float *ref, const float *init, size_t n,
                            double tol, const char *what)
{
    float *a = xmalloc(n * 4), *b = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        a[i] = got[i] - init[i];
        b[i] = ref[i] - init[i];
    }
    CHECK_REL(a, b, n, tol, what);
    free(a), free(b);
}

static void check_refused(rp_status s, rp_status want, const char *needle, const char *what)
{
    ck_assert_msg(s == want, "%s: status %d, want %d (%s)", what, (int)s, (int)want, g_err.msg);
    ck_assert_msg(strstr(g_err.msg, needle) != NULL, "%s: \"%s\" does not name \"%s\"", what,
                  g_err.msg, needle);
}

/* ---- inputs --------------------------------------------------------------- */

/* Logits [rows, E] without near ties: each row a shuffled ladder of steps of
 * 0.05 (probabilities 5% apart, far beyond expf's last bits) plus a shift;
 * row 1 (when rows > 1) exact ties: e % 4 * 0.5; row 2 (when rows > 2) a
 * NaN at expert min(5, E-1). */
static float *route_logits(int64_t rows, int64_t E)
{
    float *l = xmalloc((size_t)(rows * E) * 4);
    int32_t *perm = xmalloc((size_t)E * 4);
    uint64_t lcg = 777 + g_seed++;
    for (int64_t t = 0; t < rows; t++) {
        for (int64_t e = 0; e < E; e++)
            perm[e] = (int32_t)e;
        for (int64_t e = E - 1; e > 0; e--) {
            const int64_t j = draw(&lcg, (uint32_t)(e + 1));
            const int32_t tmp = perm[e];
            perm[e] = perm[j];
            perm[j] = tmp;
        }
        const float shift = (float)draw(&lcg, 400) * 0.01f - 2.0f;
        for (int64_t e = 0; e < E; e++)
            l[t * E + e] = (float)perm[e] * 0.05f + shift;
    }
    if (rows > 1)
        for (int64_t e = 0; e < E; e++)
            l[E + e] = (float)(e % 4) * 0.5f;
    if (rows > 2)
        l[2 * E + (E > 5 ? 5 : E - 1)] = NAN;
    free(perm);
    return l;
}

/* Offsets [E+1] of counts[E]. */
static int32_t *offsets_of(const int32_t *counts, int64_t E)
{
    int32_t *o = xmalloc((size_t)(E + 1) * 4);
    o[0] = 0;
    for (int64_t e = 0; e < E; e++)
        o[e + 1] = o[e] + counts[e];
    return o;
}

/* A random grouping of rows * k pairs over E experts (through the CPU
 * table): the host offsets, order and where. */
typedef struct grouping {
    int32_t *experts, *offsets, *order, *where;
} grouping;

static grouping random_grouping(int64_t rows, int64_t k, int64_t E)
{
    const size_t n = (size_t)(rows * k);
    grouping g;
    g.experts = xmalloc(n * 4);
    g.offsets = xmalloc((size_t)(E + 1) * 4);
    g.order = xmalloc(n * 4);
    g.where = xmalloc(n * 4);
    uint64_t lcg = 99 + g_seed++;
    for (size_t p = 0; p < n; p++)
        g.experts[p] = (int32_t)draw(&lcg, (uint32_t)E);
    CPU_OP(moe_group, g.experts, rows, k, E, g.offsets, g.order, g.where);
    return g;
}

static void grouping_free(grouping *g)
{
    free(g->experts), free(g->offsets), free(g->order), free(g->where);
}

/* ---- routing -------------------------------------------------------------- */

static void route_case(int64_t rows, int64_t E, int64_t k, int norm)
{
    char what[200];
    snprintf(what, sizeof what, "moe_route %lld rows, top-%lld of %lld, norm %d",
             (long long)rows, (long long)k, (long long)E, norm);
    const size_t np = (size_t)(rows * E), nk = (size_t)(rows * k);
    float *logits = route_logits(rows, E);
    float *probs = host_nan(np), *weights = host_nan(nk);
    int32_t *experts = xmalloc(nk * 4);
    CPU_OP(moe_route, logits, rows, E, k, norm, probs, experts, weights);

    float *d_logits = dev_upload(logits, np * 4);
    float *d_probs = dev_nan_bytes(np * 4), *d_weights = dev_nan_bytes(nk * 4);
    int32_t *d_experts = dev_nan_bytes(nk * 4);
    GPU_OP(moe_route, d_logits, rows, E, k, norm, d_probs, d_experts, d_weights);
    float *g_probs = get_f(d_probs, np), *g_weights = get_f(d_weights, nk);
    int32_t *g_experts = get_i(d_experts, nk);

    check_same_ints(g_experts, experts, nk, what);
    for (int64_t t = 0; t < rows; t++) {
        if (t == 2) { /* the NaN row: every probability NaN, experts by index */
            for (int64_t e = 0; e < E; e++)
                ck_assert_msg(isnan(g_probs[t * E + e]), "%s: NaN row, prob %lld is %g", what,
                              (long long)e, (double)g_probs[t * E + e]);
            for (int64_t s = 0; s < k; s++)
                ck_assert_msg(g_experts[t * k + s] == (int32_t)s, "%s: NaN row, slot %lld: %d",
                              what, (long long)s, (int)g_experts[t * k + s]);
            continue;
        }
        check_close_each(g_probs + t * E, probs + t * E, (size_t)E, ROUTE_TOL, what);
        check_close_each(g_weights + t * k, weights + t * k, (size_t)k, ROUTE_TOL, what);
    }
    if (rows > 1) /* the tie row: the largest value 1.5 at 3, 7, 11, ...: lower index first */
        for (int64_t s = 0; s < k && 4 * s + 3 < E; s++)
            ck_assert_msg(g_experts[k + s] == (int32_t)(4 * s + 3), "%s: tie row, slot %lld: %d",
                          what, (long long)s, (int)g_experts[k + s]);
    cudaFree(d_logits), cudaFree(d_probs), cudaFree(d_weights), cudaFree(d_experts);
    free(logits), free(probs), free(weights), free(experts);
    free(g_probs), free(g_weights), free(g_experts);
}

START_TEST(route_matches_cpu)
{
    route_case(257, 128, 8, 1);
    route_case(257, 128, 8, 0);
    route_case(100, 60, 4, 0);
    route_case(50, 40, 40, 1);
    route_case(33, 1, 1, 1);
    /* top-0 and top-(E+1) */
    float *d = dev_alloc(64 * 4);
    int32_t *di = dev_alloc(64 * 4);
    check_refused(GPU_TRY(moe_route, d, 2, 8, 0, 1, d, di, d), RP_ERR_INVALID_ARG, "moe_route",
                  "moe_route top-0");
    check_refused(GPU_TRY(moe_route, d, 2, 8, 9, 1, d, di, d), RP_ERR_INVALID_ARG, "moe_route",
                  "moe_route top-9 of 8");
    cudaFree(d), cudaFree(di);
}
END_TEST

/* ---- grouping ------------------------------------------------------------- */

/* experts [rows*k]: sparse draws only experts 1, 4, 7, ... below E - 2, so
 * the first, many middle and the last two experts are empty. */
static void group_case(int64_t rows, int64_t k, int64_t E, int sparse)
{
    char what[200];
    snprintf(what, sizeof what, "moe_group %lld rows, top-%lld over %lld experts%s",
             (long long)rows, (long long)k, (long long)E, sparse ? ", sparse" : "");
    const size_t n = (size_t)(rows * k), no = (size_t)(E + 1);
    int32_t *experts = xmalloc(n * 4 + 4);
    uint64_t lcg = 31337 + g_seed++;
    const int64_t used = sparse ? (E - 2 + 1) / 3 : E; /* experts 1, 4, ..., < E - 2 */
    for (size_t p = 0; p < n; p++)
        experts[p] = sparse ? (int32_t)(1 + 3 * draw(&lcg, (uint32_t)(used > 0 ? used : 1)))
                            : (int32_t)draw(&lcg, (uint32_t)E);
    int32_t *offsets = xmalloc(no * 4), *order = xmalloc(n * 4 + 4), *where = xmalloc(n * 4 + 4);
    CPU_OP(moe_group, experts, rows, k, E, offsets, order, where);

    int32_t *d_experts = dev_upload(experts, n * 4 + 4);
    int32_t *first[3] = {NULL, NULL, NULL};
    for (int run = 0; run < 2; run++) {
        int32_t *d_off = dev_nan_bytes(no * 4), *d_order = dev_nan_bytes(n * 4 + 4),
                *d_where = dev_nan_bytes(n * 4 + 4);
        GPU_OP(moe_group, d_experts, rows, k, E, d_off, d_order, d_where);
        int32_t *g_off = get_i(d_off, no), *g_order = get_i(d_order, n),
                *g_where = get_i(d_where, n);
        check_same_ints(g_off, offsets, no, what);
        check_same_ints(g_order, order, n, what);
        check_same_ints(g_where, where, n, what);
        if (run == 0) {
            first[0] = g_off, first[1] = g_order, first[2] = g_where;
        } else {
            check_same_bits(g_off, first[0], no, what);
            check_same_bits(g_order, first[1], n, what);
            check_same_bits(g_where, first[2], n, what);
            free(g_off), free(g_order), free(g_where);
        }
        cudaFree(d_off), cudaFree(d_order), cudaFree(d_where);
    }
    free(first[0]), free(first[1]), free(first[2]);
    cudaFree(d_experts);
    free(experts), free(offsets), free(order), free(where);
}

START_TEST(group_matches_cpu)
{
    group_case(1000, 8, 64, 1);
    group_case(20000, 8, 128, 0); /* 160000 pairs: many tiles of the sort */
    group_case(300, 4, 256, 1);
    group_case(7, 1, 1, 0);
    group_case(0, 8, 16, 0); /* no rows: offsets all 0 */
}
END_TEST

static void bad_expert_case(const int32_t *experts, int64_t rows, int64_t k, int64_t E,
                            const char *needle, const char *what)
{
    const size_t n = (size_t)(rows * k);
    int32_t *d_experts = dev_upload(experts, n * 4);
    int32_t *d_off = dev_nan_bytes((size_t)(E + 1) * 4), *d_order = dev_nan_bytes(n * 4),
            *d_where = dev_nan_bytes(n * 4);
    check_refused(GPU_TRY(moe_group, d_experts, rows, k, E, d_off, d_order, d_where),
                  RP_ERR_RANGE, needle, what);
    ck_assert_msg(strstr(g_err.msg, "moe_group") != NULL, "%s: \"%s\" does not name the op",
                  what, g_err.msg);
    cudaFree(d_experts), cudaFree(d_off), cudaFree(d_order), cudaFree(d_where);
}

START_TEST(group_rejects_bad_experts)
{
    const int64_t rows = 100, k = 8, E = 64, n = rows * k;
    int32_t *experts = xmalloc((size_t)n * 4);
    uint64_t lcg = 2024 + g_seed++;
    for (int64_t p = 0; p < n; p++)
        experts[p] = (int32_t)draw(&lcg, (uint32_t)E);
    experts[500] = -1;
    experts[123] = (int32_t)E; /* the first bad one: token 15, slot 3 */
    bad_expert_case(experts, rows, k, E, "expert 64 at position 123 (token 15, slot 3)",
                    "expert E at 123, -1 at 500");
    experts[123] = 0;
    bad_expert_case(experts, rows, k, E, "expert -1 at position 500", "expert -1 at 500");
    experts[500] = 0;
    experts[n - 1] = INT32_MAX;
    bad_expert_case(experts, rows, k, E, "at position 799", "the last expert bad");
    /* the table works on: a good grouping after the refusals */
    experts[n - 1] = 5;
    int32_t *offsets = xmalloc((size_t)(E + 1) * 4), *order = xmalloc((size_t)n * 4),
            *where = xmalloc((size_t)n * 4);
    CPU_OP(moe_group, experts, rows, k, E, offsets, order, where);
    int32_t *d_experts = dev_upload(experts, (size_t)n * 4);
    int32_t *d_off = dev_nan_bytes((size_t)(E + 1) * 4), *d_order = dev_nan_bytes((size_t)n * 4),
            *d_where = dev_nan_bytes((size_t)n * 4);
    GPU_OP(moe_group, d_experts, rows, k, E, d_off, d_order, d_where);
    int32_t *g_order = get_i(d_order, (size_t)n);
    check_same_ints(g_order, order, (size_t)n, "moe_group after refusals");
    cudaFree(d_experts), cudaFree(d_off), cudaFree(d_order), cudaFree(d_where);
    free(experts), free(offsets), free(order), free(where), free(g_order);
}
END_TEST

/* ---- statistics, gathers and sums ----------------------------------------- */

START_TEST(stats_bit_identical)
{
    const int64_t rows = 3000, k = 8, E = 128;
    grouping g = random_grouping(rows, k, E);
    float *probs = rand_f32((size_t)(rows * E), 0.0f, 1.0f);
    for (int64_t i = 0; i < rows * E; i++)
        probs[i] = fabsf(probs[i]) * 0.01f;
    float *stats = host_nan((size_t)(2 * E));
    CPU_OP(moe_stats, probs, g.offsets, rows, E, stats);
    float *d_probs = dev_upload(probs, (size_t)(rows * E) * 4);
    int32_t *d_off = dev_upload(g.offsets, (size_t)(E + 1) * 4);
    float *d_stats = dev_nan_bytes((size_t)(2 * E) * 4);
    GPU_OP(moe_stats, d_probs, d_off, rows, E, d_stats);
    float *got = get_f(d_stats, (size_t)(2 * E));
    check_same_bits(got, stats, (size_t)(2 * E), "moe_stats");
    cudaFree(d_probs), cudaFree(d_off), cudaFree(d_stats);
    free(probs), free(stats), free(got);
    grouping_free(&g);
}
END_TEST

static void gather_case(int64_t rows, int64_t k, int64_t cols)
{
    const int64_t E = 16, n = rows * k;
    grouping g = random_grouping(rows, k, E);
    cin x = cin_rand((size_t)(rows * cols), 0.0f, 1.0f);
    float *w = rand_f32((size_t)n, 0.5f, 0.3f);
    float *d_w = dev_upload(w, (size_t)n * 4);
    int32_t *d_order = dev_upload(g.order, (size_t)n * 4);
    for (int weighted = 0; weighted <= 1; weighted++) {
        char what[200];
        snprintf(what, sizeof what, "moe_gather %lld rows, top-%lld, %lld cols, %s",
                 (long long)rows, (long long)k, (long long)cols,
                 weighted ? "weighted" : "unweighted");
        float *ref = host_nan((size_t)(n * cols));
        CPU_OP(moe_gather, x.f, g.order, weighted ? w : NULL, rows, k, cols, ref);
        void *d_xg = dev_nan_bytes((size_t)(n * cols) * 2);
        GPU_OP(moe_gather, x.d, d_order, weighted ? d_w : NULL, rows, k, cols, d_xg);
        check_rounded(d_xg, ref, (size_t)(n * cols), what);
        cudaFree(d_xg);
        free(ref);
    }
    cin_free(&x);
    cudaFree(d_w), cudaFree(d_order);
    free(w);
    grouping_free(&g);
}

START_TEST(gather_bit_identical)
{
    gather_case(50, 4, 72); /* whole 16-byte vectors */
    gather_case(37, 3, 45); /* odd rows */
}
END_TEST

static void scatter_add_case(int64_t rows, int64_t k, int64_t cols)
{
    const int64_t E = 16, n = rows * k, nx = rows * cols;
    grouping g = random_grouping(rows, k, E);
    float *dxg = rand_f32((size_t)(n * cols), 0.0f, 1.0f), *dx0 = rand_f32((size_t)nx, 0.0f, 1.0f);
    float *d_dxg = dev_upload(dxg, (size_t)(n * cols) * 4);
    int32_t *d_where = dev_upload(g.where, (size_t)n * 4);
    for (int acc = 0; acc <= 1; acc++) {
        char what[200];
        snprintf(what, sizeof what, "moe_scatter_add %lld rows, top-%lld, %lld cols, %s",
                 (long long)rows, (long long)k, (long long)cols, acc ? "+=" : "=");
        float *ref = acc ? dup_f(dx0, (size_t)nx) : host_nan((size_t)nx);
        CPU_OP(moe_scatter_add, dxg, g.where, rows, k, cols, ref, acc);
        float *d_dx = acc ? dev_upload(dx0, (size_t)nx * 4) : dev_nan_bytes((size_t)nx * 4);
        GPU_OP(moe_scatter_add, d_dxg, d_where, rows, k, cols, d_dx, acc);
        float *got = get_f(d_dx, (size_t)nx);
        check_same_bits(got, ref, (size_t)nx, what);
        cudaFree(d_dx);
        free(ref), free(got);
    }
    cudaFree(d_dxg), cudaFree(d_where);
    free(dxg), free(dx0);
    grouping_free(&g);
}

START_TEST(scatter_add_bit_identical)
{
    scatter_add_case(50, 4, 72);
    scatter_add_case(37, 3, 300);
}
END_TEST

static void combine_case(int64_t rows, int64_t k, int64_t cols)
{
    const int64_t E = 16, n = rows * k, ny = rows * cols;
    grouping g = random_grouping(rows, k, E);
    float *yg = rand_f32((size_t)(n * cols), 0.0f, 1.0f), *res = rand_f32((size_t)ny, 0.0f, 1.0f);
    float *w = rand_f32((size_t)n, 0.3f, 0.2f);
    float *d_yg = dev_upload(yg, (size_t)(n * cols) * 4), *d_res = dev_upload(res, (size_t)ny * 4);
    float *d_w = dev_upload(w, (size_t)n * 4);
    int32_t *d_where = dev_upload(g.where, (size_t)n * 4);
    for (int with_res = 0; with_res <= 1; with_res++) {
        char what[200];
        snprintf(what, sizeof what, "moe_combine %lld rows, top-%lld, %lld cols, residual %d",
                 (long long)rows, (long long)k, (long long)cols, with_res);
        float *ref = host_nan((size_t)ny);
        CPU_OP(moe_combine, yg, w, g.where, with_res ? res : NULL, rows, k, cols, ref);
        float *d_y = dev_nan_bytes((size_t)ny * 4);
        GPU_OP(moe_combine, d_yg, d_w, d_where, with_res ? d_res : NULL, rows, k, cols, d_y);
        float *got = get_f(d_y, (size_t)ny);
        check_same_bits(got, ref, (size_t)ny, what);
        cudaFree(d_y);
        free(ref), free(got);
    }
    cudaFree(d_yg), cudaFree(d_res), cudaFree(d_w), cudaFree(d_where);
    free(yg), free(res), free(w);
    grouping_free(&g);
}

START_TEST(combine_bit_identical)
{
    combine_case(50, 4, 72);
    combine_case(37, 8, 45);
}
END_TEST

/* ---- backwards ------------------------------------------------------------ */

static void down_backward_case(int64_t rows, int64_t k, int64_t cols)
{
    const int64_t E = 16, n = rows * k;
    const size_t nz = (size_t)(n * cols);
    grouping g = random_grouping(rows, k, E);
    float *z = rand_f32(nz, 0.0f, 1.0f), *w = rand_f32((size_t)n, 0.3f, 0.2f);
    cin m = cin_rand(nz, 0.0f, 1.0f);
    float *dm = host_nan(nz), *dw = host_nan((size_t)n);
    CPU_OP(moe_down_backward, z, m.f, w, g.order, rows, k, cols, dm, NULL, dw);
    float *d_z = dev_upload(z, nz * 4), *d_w = dev_upload(w, (size_t)n * 4);
    int32_t *d_order = dev_upload(g.order, (size_t)n * 4);
    for (int mode = 0; mode < 3; mode++) { /* dm apart; dm apart with dm_compute; dm aliasing z */
        char what[200];
        snprintf(what, sizeof what, "moe_down_backward %lld rows, top-%lld, %lld cols, %s",
                 (long long)rows, (long long)k, (long long)cols,
                 mode == 0 ? "dm" : mode == 1 ? "dm and dm_compute" : "dm = z");
        float *d_dm = mode == 2 ? dev_upload(z, nz * 4) : dev_nan_bytes(nz * 4);
        float *d_dw = dev_nan_bytes((size_t)n * 4);
        void *d_dmc = mode == 1 ? dev_nan_bytes(nz * 2) : NULL;
        GPU_OP(moe_down_backward, mode == 2 ? d_dm : d_z, m.d, d_w, d_order, rows, k, cols, d_dm,
               d_dmc, d_dw);
        float *got_dm = get_f(d_dm, nz), *got_dw = get_f(d_dw, (size_t)n);
        check_same_bits(got_dm, dm, nz, what);
        check_same_bits(got_dw, dw, (size_t)n, what);
        if (d_dmc)
            check_rounded(d_dmc, dm, nz, what);
        cudaFree(d_dm), cudaFree(d_dw), cudaFree(d_dmc);
        free(got_dm), free(got_dw);
    }
    cin_free(&m);
    cudaFree(d_z), cudaFree(d_w), cudaFree(d_order);
    free(z), free(w), free(dm), free(dw);
    grouping_free(&g);
}

START_TEST(down_backward_bit_identical)
{
    down_backward_case(50, 4, 72);
    down_backward_case(37, 8, 45);
    down_backward_case(5, 2, 768);
}
END_TEST

static void route_backward_case(int64_t rows, int64_t E, int64_t k)
{
    const size_t np = (size_t)(rows * E), nk = (size_t)(rows * k);
    float *logits = route_logits(rows, E);
    if (rows > 2)
        logits[2 * E + (E > 5 ? 5 : E - 1)] = 0.0f; /* no NaN row here */
    float *probs = host_nan(np), *weights = host_nan(nk);
    int32_t *experts = xmalloc(nk * 4);
    CPU_OP(moe_route, logits, rows, E, k, 1, probs, experts, weights);
    float *dweights = rand_f32(nk, 0.0f, 1.0f), *aux = rand_f32((size_t)E, 0.0f, 0.01f);
    float *d_probs = dev_upload(probs, np * 4), *d_dweights = dev_upload(dweights, nk * 4),
          *d_aux = dev_upload(aux, (size_t)E * 4);
    int32_t *d_experts = dev_upload(experts, nk * 4);
    for (int norm = 0; norm <= 1; norm++)
        for (int with_aux = 0; with_aux <= 1; with_aux++) {
            char what[200];
            snprintf(what, sizeof what,
                     "moe_route_backward %lld rows, top-%lld of %lld, norm %d, aux %d",
                     (long long)rows, (long long)k, (long long)E, norm, with_aux);
            float *ref = host_nan(np);
            CPU_OP(moe_route_backward, probs, experts, dweights, with_aux ? aux : NULL, rows, E,
                   k, norm, ref, NULL);
            float *d_dl = dev_nan_bytes(np * 4);
            void *d_dlc = with_aux ? dev_nan_bytes(np * 2) : NULL; /* the copy in half the cases */
            GPU_OP(moe_route_backward, d_probs, d_experts, d_dweights, with_aux ? d_aux : NULL,
                   rows, E, k, norm, d_dl, d_dlc);
            float *got = get_f(d_dl, np);
            check_same_bits(got, ref, np, what);
            if (d_dlc)
                check_rounded(d_dlc, got, np, what);
            cudaFree(d_dl), cudaFree(d_dlc);
            free(ref), free(got);
        }
    cudaFree(d_probs), cudaFree(d_dweights), cudaFree(d_aux), cudaFree(d_experts);
    free(logits), free(probs), free(weights), free(experts), free(dweights), free(aux);
}

START_TEST(route_backward_bit_identical)
{
    route_backward_case(200, 128, 8);
    route_backward_case(60, 45, 5);
    route_backward_case(10, 1, 1);
}
END_TEST

/* ---- grouped GEMMs -------------------------------------------------------- */

/* Experts with no rows get a NULL W on both tables and, for dW, alternately
 * NULL and a poisoned buffer that must stay poisoned. */
static void grouped_case(const int32_t *counts, int64_t E, int64_t in, int64_t out)
{
    char what[240];
    int32_t *offsets = offsets_of(counts, E);
    const int64_t rows = offsets[E];
    const size_t nw = (size_t)(out * in), nx = (size_t)(rows * in), ny = (size_t)(rows * out);
    int32_t *d_off = dev_upload(offsets, (size_t)(E + 1) * 4);
    cin x = cin_rand(nx, 0.0f, 1.0f), dy = cin_rand(ny, 0.0f, 1.0f);
    cin *W = xmalloc((size_t)E * sizeof(cin));
    const void **Wd = xmalloc((size_t)E * sizeof(void *)), **Wf = xmalloc((size_t)E * sizeof(void *));
    for (int64_t e = 0; e < E; e++) {
        if (counts[e] > 0) {
            W[e] = cin_rand(nw, 0.0f, 0.1f);
            Wd[e] = W[e].d, Wf[e] = W[e].f;
        } else {
            W[e].f = NULL, W[e].d = NULL;
            Wd[e] = Wf[e] = NULL;
        }
    }

    /* forward: y and y_compute; y_compute alone; y again (the same bits) */
    snprintf(what, sizeof what, "grouped_linear_forward %lld experts, %lld rows, %lld -> %lld",
             (long long)E, (long long)rows, (long long)in, (long long)out);
    float *y_ref = host_nan(ny);
    CPU_OP(grouped_linear_forward, x.f, Wf, RP_F32, offsets, E, rows, in, out, y_ref, NULL);
    float *d_y = dev_nan_bytes(ny * 4);
    void *d_yc = dev_nan_bytes(ny * 2);
    GPU_OP(grouped_linear_forward, x.d, Wd, RP_BF16, d_off, E, rows, in, out, d_y, d_yc);
    float *y = get_f(d_y, ny);
    CHECK_REL(y, y_ref, ny, GEMM_TOL, what);
    check_rounded(d_yc, y, ny, what);
    dev_poison(d_yc, ny * 2);
    GPU_OP(grouped_linear_forward, x.d, Wd, RP_BF16, d_off, E, rows, in, out, NULL, d_yc);
    check_rounded(d_yc, y, ny, what);
    dev_poison(d_y, ny * 4);
    GPU_OP(grouped_linear_forward, x.d, Wd, RP_BF16, d_off, E, rows, in, out, d_y, NULL);
    float *y2 = get_f(d_y, ny);
    check_same_bits(y2, y, ny, what);

    /* backward input: dx =, dx +=, dx_compute = */
    float *dx0 = rand_f32(nx, 0.0f, 1.0f);
    float *dx_ref = host_nan(nx), *dxa_ref = dup_f(dx0, nx);
    CPU_OP(grouped_linear_backward_input, dy.f, Wf, RP_F32, offsets, E, rows, in, out, dx_ref,
           NULL, 0);
    CPU_OP(grouped_linear_backward_input, dy.f, Wf, RP_F32, offsets, E, rows, in, out, dxa_ref,
           NULL, 1);
    snprintf(what, sizeof what,
             "grouped_linear_backward_input %lld experts, %lld rows, %lld <- %lld", (long long)E,
             (long long)rows, (long long)in, (long long)out);
    float *d_dx = dev_nan_bytes(nx * 4);
    GPU_OP(grouped_linear_backward_input, dy.d, Wd, RP_BF16, d_off, E, rows, in, out, d_dx, NULL,
           0);
    float *dx = get_f(d_dx, nx);
    CHECK_REL(dx, dx_ref, nx, GEMM_TOL, what);
    void *d_dxc = dev_nan_bytes(nx * 2);
    GPU_OP(grouped_linear_backward_input, dy.d, Wd, RP_BF16, d_off, E, rows, in, out, NULL, d_dxc,
           0);
    check_rounded(d_dxc, dx, nx, what);
    cudaFree(d_dx);
    d_dx = dev_upload(dx0, nx * 4);
    GPU_OP(grouped_linear_backward_input, dy.d, Wd, RP_BF16, d_off, E, rows, in, out, d_dx, NULL,
           1);
    float *dxa = get_f(d_dx, nx);
    check_increment(dxa, dxa_ref, dx0, nx, GEMM_TOL, what);

    /* backward weight: two accumulating calls (dy, then a second draw dy2,
     * both against x), run twice from the same start for the bits */
    cin dy2 = cin_rand(ny, 0.0f, 1.0f);
    float **dW_ref = xmalloc((size_t)E * sizeof(float *)), **dW0 = xmalloc((size_t)E * sizeof(float *));
    for (int64_t e = 0; e < E; e++) {
        dW0[e] = rand_f32(nw, 0.0f, 1.0f);
        dW_ref[e] = dup_f(dW0[e], nw);
    }
    CPU_OP(grouped_linear_backward_weight, dy.f, x.f, offsets, E, rows, in, out, dW_ref);
    CPU_OP(grouped_linear_backward_weight, dy2.f, x.f, offsets, E, rows, in, out, dW_ref);
    snprintf(what, sizeof what,
             "grouped_linear_backward_weight %lld experts, %lld rows, %lld x %lld", (long long)E,
             (long long)rows, (long long)out, (long long)in);
    float **first = xmalloc((size_t)E * sizeof(float *));
    for (int run = 0; run < 2; run++) {
        float **d_dW = xmalloc((size_t)E * sizeof(float *));
        int empty_seen = 0;
        for (int64_t e = 0; e < E; e++) {
            if (counts[e] > 0)
                d_dW[e] = dev_upload(dW0[e], nw * 4);
            else /* alternately NULL and a poisoned buffer */
                d_dW[e] = (empty_seen++ % 2) ? NULL : dev_nan_bytes(nw * 4);
        }
        GPU_OP(grouped_linear_backward_weight, dy.d, x.d, d_off, E, rows, in, out, d_dW);
        GPU_OP(grouped_linear_backward_weight, dy2.d, x.d, d_off, E, rows, in, out, d_dW);
        for (int64_t e = 0; e < E; e++) {
            if (!d_dW[e])
                continue;
            float *got = get_f(d_dW[e], nw);
            if (counts[e] == 0) {
                for (size_t i = 0; i < nw; i++)
                    ck_assert_msg(isnan(got[i]), "%s: expert %lld has no rows but its dW[%zu] "
                                  "was written", what, (long long)e, i);
                free(got);
            } else {
                check_increment(got, dW_ref[e], dW0[e], nw, GEMM_TOL, what);
                if (run == 0) {
                    first[e] = got;
                } else {
                    check_same_bits(got, first[e], nw, what);
                    free(got);
                    free(first[e]);
                }
            }
            cudaFree(d_dW[e]);
        }
        free(d_dW);
    }

    cudaFree(d_off), cudaFree(d_y), cudaFree(d_yc), cudaFree(d_dx), cudaFree(d_dxc);
    cin_free(&x), cin_free(&dy), cin_free(&dy2);
    for (int64_t e = 0; e < E; e++) {
        if (counts[e] > 0)
            cin_free(&W[e]);
        free(dW0[e]), free(dW_ref[e]);
    }
    free(W), free(Wd), free(Wf), free(dW0), free(dW_ref), free(first);
    free(offsets), free(y_ref), free(y), free(y2), free(dx0), free(dx_ref), free(dxa_ref),
        free(dx), free(dxa);
}

START_TEST(grouped_gemms_match_cpu)
{
    /* empty first, middle and last experts; 1 row; 64 rows (one whole tile);
     * 65 and 130 rows (across tiles) */
    const int32_t counts[] = {0, 37, 64, 0, 1, 130, 65, 3, 0};
    grouped_case(counts, 9, 72, 40);  /* multiples of 8: 16-byte copies */
    grouped_case(counts, 9, 45, 29);  /* odd: element copies */
    grouped_case(counts, 9, 200, 96); /* several k steps and column tiles */
    const int32_t one[] = {200};
    grouped_case(one, 1, 128, 96);
    int32_t many[256];
    uint64_t lcg = 5150 + g_seed++;
    for (int e = 0; e < 256; e++)
        many[e] = draw(&lcg, 10) < 3 ? 0 : (int32_t)draw(&lcg, 21);
    many[255] = 70;
    grouped_case(many, 256, 64, 48);
}
END_TEST

START_TEST(grouped_gemms_refuse)
{
    const void *W[257] = {NULL};
    float *dW[257] = {NULL};
    int32_t *d_off = dev_alloc(258 * 4);
    float *d = dev_alloc(64);
    check_refused(GPU_TRY(grouped_linear_forward, d, W, RP_BF16, d_off, 257, 0, 8, 8, d, NULL),
                  RP_ERR_UNSUPPORTED, "grouped_linear_forward", "257 experts, forward");
    check_refused(GPU_TRY(grouped_linear_backward_input, d, W, RP_BF16, d_off, 257, 0, 8, 8, d,
                          NULL, 0),
                  RP_ERR_UNSUPPORTED, "grouped_linear_backward_input", "257 experts, input");
    check_refused(GPU_TRY(grouped_linear_backward_weight, d, d, d_off, 257, 0, 8, 8, dW),
                  RP_ERR_UNSUPPORTED, "grouped_linear_backward_weight", "257 experts, weight");
    check_refused(GPU_TRY(grouped_linear_forward, d, W, RP_F32, d_off, 4, 0, 8, 8, d, NULL),
                  RP_ERR_UNSUPPORTED, "grouped_linear_forward", "fp32 weights, forward");
    check_refused(GPU_TRY(grouped_linear_backward_input, d, W, RP_F32, d_off, 4, 0, 8, 8, d, NULL,
                          0),
                  RP_ERR_UNSUPPORTED, "grouped_linear_backward_input", "fp32 weights, input");
    cudaFree(d_off), cudaFree(d);
}
END_TEST

/* ---- gpt-oss's expert biases ------------------------------------------------ */

/* grouped_bias_forward (y += bias[e] on expert e's rows, with and without
 * y's rounded copy) and grouped_bias_backward (dbias[e] += the column sums
 * of the bf16 dy over e's rows, in row order): bit for bit, as both tables
 * add the same fp32 values in the same order. Experts without rows get a
 * NULL bias, and for dbias alternately NULL and a poisoned buffer that must
 * stay poisoned. */
static void grouped_bias_case(const int32_t *counts, int64_t E, int64_t out)
{
    char what[200];
    int32_t *offsets = offsets_of(counts, E);
    const int64_t rows = offsets[E];
    const size_t ny = (size_t)(rows * out);
    int32_t *d_off = dev_upload(offsets, (size_t)(E + 1) * 4);
    float **bias = xmalloc((size_t)E * sizeof(float *)), **d_bias = xmalloc((size_t)E * sizeof(float *));
    for (int64_t e = 0; e < E; e++) {
        bias[e] = counts[e] > 0 ? rand_f32((size_t)out, 0.0f, 1.0f) : NULL;
        d_bias[e] = bias[e] ? dev_upload(bias[e], (size_t)out * 4) : NULL;
    }

    snprintf(what, sizeof what, "grouped_bias_forward %lld experts, %lld rows, out %lld",
             (long long)E, (long long)rows, (long long)out);
    float *y0 = rand_f32(ny, 0.0f, 1.0f), *y_ref = dup_f(y0, ny);
    CPU_OP(grouped_bias_forward, y_ref, NULL, (const float *const *)bias, offsets, E, rows, out);
    float *d_y = dev_upload(y0, ny * 4);
    void *d_yc = dev_nan_bytes(ny * 2);
    GPU_OP(grouped_bias_forward, d_y, d_yc, (const float *const *)d_bias, d_off, E, rows, out);
    float *y = get_f(d_y, ny);
    check_same_bits(y, y_ref, ny, what);
    check_rounded(d_yc, y, ny, what);
    cudaFree(d_y);
    d_y = dev_upload(y0, ny * 4);
    GPU_OP(grouped_bias_forward, d_y, NULL, (const float *const *)d_bias, d_off, E, rows, out);
    float *y2 = get_f(d_y, ny);
    check_same_bits(y2, y_ref, ny, what);

    snprintf(what, sizeof what, "grouped_bias_backward %lld experts, %lld rows, out %lld",
             (long long)E, (long long)rows, (long long)out);
    cin dy = cin_rand(ny, 0.0f, 1.0f);
    float **db0 = xmalloc((size_t)E * sizeof(float *)), **db_ref = xmalloc((size_t)E * sizeof(float *));
    float **d_db = xmalloc((size_t)E * sizeof(float *));
    int empty_seen = 0;
    for (int64_t e = 0; e < E; e++) {
        db0[e] = rand_f32((size_t)out, 0.0f, 1.0f);
        db_ref[e] = dup_f(db0[e], (size_t)out);
        if (counts[e] > 0)
            d_db[e] = dev_upload(db0[e], (size_t)out * 4);
        else /* alternately NULL and a poisoned buffer */
            d_db[e] = (empty_seen++ % 2) ? NULL : dev_nan_bytes((size_t)out * 4);
    }
    CPU_OP(grouped_bias_backward, dy.f, offsets, E, rows, out, db_ref);
    GPU_OP(grouped_bias_backward, dy.d, d_off, E, rows, out, d_db);
    for (int64_t e = 0; e < E; e++) {
        if (!d_db[e])
            continue;
        float *got = get_f(d_db[e], (size_t)out);
        if (counts[e] == 0)
            for (int64_t c = 0; c < out; c++)
                ck_assert_msg(isnan(got[c]), "%s: expert %lld has no rows but its dbias[%lld] "
                              "was written", what, (long long)e, (long long)c);
        else
            check_same_bits(got, db_ref[e], (size_t)out, what);
        free(got);
        cudaFree(d_db[e]);
    }

    cudaFree(d_off), cudaFree(d_y), cudaFree(d_yc);
    cin_free(&dy);
    for (int64_t e = 0; e < E; e++) {
        free(bias[e]), free(db0[e]), free(db_ref[e]);
        if (d_bias[e])
            cudaFree(d_bias[e]);
    }
    free(bias), free(d_bias), free(db0), free(db_ref), free(d_db);
    free(offsets), free(y0), free(y_ref), free(y), free(y2);
}

START_TEST(grouped_bias_bit_identical)
{
    /* empty first, middle and last experts; rows on and across 64 */
    const int32_t counts[] = {0, 37, 64, 0, 1, 130, 65, 3, 0};
    grouped_bias_case(counts, 9, 40);
    grouped_bias_case(counts, 9, 29);
    grouped_bias_case(counts, 9, 1); /* gpt-oss's bias-dot: one column */
    int32_t many[32];
    uint64_t lcg = 3535 + g_seed++;
    for (int e = 0; e < 32; e++)
        many[e] = draw(&lcg, 10) < 3 ? 0 : (int32_t)draw(&lcg, 300);
    many[31] = 9;
    grouped_bias_case(many, 32, 2880 / 32);
}
END_TEST

/* ---- the forward chain on the device ---------------------------------------- */

START_TEST(forward_chain_matches_cpu)
{
    const int64_t rows = 300, E = 32, k = 4, hidden = 64, inter = 48;
    const size_t n = (size_t)(rows * k);
    float *logits = route_logits(rows, E);
    logits[2 * E + 5] = 0.0123f; /* no NaN row here (and off the logits' ladder: no near tie) */
    cin x = cin_rand((size_t)(rows * hidden), 0.0f, 1.0f);
    cin *W = xmalloc((size_t)E * sizeof(cin));
    const void **Wd = xmalloc((size_t)E * sizeof(void *)), **Wf = xmalloc((size_t)E * sizeof(void *));
    for (int64_t e = 0; e < E; e++) {
        W[e] = cin_rand((size_t)(hidden * inter), 0.0f, 0.1f); /* [inter, hidden] */
        Wd[e] = W[e].d, Wf[e] = W[e].f;
    }
    float *res = rand_f32((size_t)(rows * inter), 0.0f, 1.0f);

    /* CPU chain */
    float *probs = host_nan((size_t)(rows * E)), *w = host_nan(n);
    int32_t *ex = xmalloc(n * 4), *off = xmalloc((size_t)(E + 1) * 4), *order = xmalloc(n * 4),
            *where = xmalloc(n * 4);
    float *xg = host_nan(n * (size_t)hidden), *yg = host_nan(n * (size_t)inter),
          *y_ref = host_nan((size_t)(rows * inter));
    CPU_OP(moe_route, logits, rows, E, k, 1, probs, ex, w);
    CPU_OP(moe_group, ex, rows, k, E, off, order, where);
    CPU_OP(moe_gather, x.f, order, NULL, rows, k, hidden, xg);
    CPU_OP(grouped_linear_forward, xg, Wf, RP_F32, off, E, (int64_t)n, hidden, inter, yg, NULL);
    CPU_OP(moe_combine, yg, w, where, res, rows, k, inter, y_ref);

    /* CUDA chain: nothing comes back to the host until y */
    float *d_logits = dev_upload(logits, (size_t)(rows * E) * 4), *d_res = dev_upload(res,
                                                                  (size_t)(rows * inter) * 4);
    float *d_probs = dev_nan_bytes((size_t)(rows * E) * 4), *d_w = dev_nan_bytes(n * 4);
    int32_t *d_ex = dev_nan_bytes(n * 4), *d_off = dev_nan_bytes((size_t)(E + 1) * 4),
            *d_order = dev_nan_bytes(n * 4), *d_where = dev_nan_bytes(n * 4);
    void *d_xg = dev_nan_bytes(n * (size_t)hidden * 2);
    float *d_yg = dev_nan_bytes(n * (size_t)inter * 4), *d_y = dev_nan_bytes((size_t)(rows * inter) * 4);
    GPU_OP(moe_route, d_logits, rows, E, k, 1, d_probs, d_ex, d_w);
    GPU_OP(moe_group, d_ex, rows, k, E, d_off, d_order, d_where);
    GPU_OP(moe_gather, x.d, d_order, NULL, rows, k, hidden, d_xg);
    GPU_OP(grouped_linear_forward, d_xg, Wd, RP_BF16, d_off, E, (int64_t)n, hidden, inter, d_yg,
           NULL);
    GPU_OP(moe_combine, d_yg, d_w, d_where, d_res, rows, k, inter, d_y);
    float *y = get_f(d_y, (size_t)(rows * inter));
    int32_t *g_off = get_i(d_off, (size_t)(E + 1));
    check_same_ints(g_off, off, (size_t)(E + 1), "forward chain: offsets");
    /* the residual dominates y: compare what the experts added */
    check_increment(y, y_ref, res, (size_t)(rows * inter), GEMM_TOL, "forward chain: y");

    cudaFree(d_logits), cudaFree(d_res), cudaFree(d_probs), cudaFree(d_w), cudaFree(d_ex);
    cudaFree(d_off), cudaFree(d_order), cudaFree(d_where), cudaFree(d_xg), cudaFree(d_yg);
    cudaFree(d_y);
    cin_free(&x);
    for (int64_t e = 0; e < E; e++)
        cin_free(&W[e]);
    free(W), free(Wd), free(Wf), free(logits), free(res), free(probs), free(w), free(ex), free(off);
    free(order), free(where), free(xg), free(yg), free(y_ref), free(y), free(g_off);
}
END_TEST

static Suite *cuda_moe_suite(void)
{
    Suite *s = suite_create("cuda_moe");
    TCase *tc = tcase_create("cuda_vs_cpu");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, route_matches_cpu);
    tcase_add_test(tc, group_matches_cpu);
    tcase_add_test(tc, group_rejects_bad_experts);
    tcase_add_test(tc, stats_bit_identical);
    tcase_add_test(tc, gather_bit_identical);
    tcase_add_test(tc, scatter_add_bit_identical);
    tcase_add_test(tc, combine_bit_identical);
    tcase_add_test(tc, down_backward_bit_identical);
    tcase_add_test(tc, route_backward_bit_identical);
    tcase_add_test(tc, grouped_gemms_match_cpu);
    tcase_add_test(tc, grouped_gemms_refuse);
    tcase_add_test(tc, grouped_bias_bit_identical);
    tcase_add_test(tc, forward_chain_matches_cpu);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    return cuda_test_main(argc, argv, cuda_moe_suite);
}

#else /* no CUDA back end in this build */

static Suite *cuda_moe_suite(void)
{
    return suite_create("cuda_moe");
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return rp_check_main(argc, argv, cuda_moe_suite, "serial");
    return RP_TEST_SKIP;
}

#endif
