/* The Linear forward through cuBLASLt (gemm_lt.h). Row-major y = x W^T is
 * column-major y^T = W x^T (gemm.c's rule): cuBLASLt's A is W, read as
 * the column-major [in, out] array with ld = in and transposed; B is x,
 * the column-major [in, rows] array with ld = in; C and D are the
 * column-major [out, rows] arrays with ld = out, so the bias, one value a
 * row of D, is one a column of the row-major y. */
#include "kernels/cuda/gemm_lt.h"

#include "kernels/cuda/cublas_api.h"
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shapes a state remembers: the engine runs a handful per model (each
 * projection at a few row counts); past that the oldest is forgotten and
 * chosen again when it returns, by the same deterministic heuristic. */
#define LT_SHAPES 32
/* The alignment the heuristic is told, at most: 16 bytes (what the tensor
 * cores' loads need), not cudaMalloc's 256. Tensors at 16 or more then get
 * the same algorithm wherever they sit, so where a buffer lands (which may
 * differ with the rank count) never changes the bits. */
#define ALIGN_CAP 16u

typedef struct lt_key {
    int64_t rows, in, out;
    int bias, residual;
    /* the operands' alignments in bytes, at most ALIGN_CAP: the heuristic
     * picks kernels for them (a kernel needing more would refuse to run) */
    uint32_t align_x, align_w, align_c, align_y;
} lt_key;

typedef struct lt_shape {
    lt_key key;
    int used;
    int found; /* 0: cuBLASLt has no algorithm for it */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, cd;
    cublasLtMatmulAlgo_t algo;
} lt_shape;

struct rp_cuda_gemm_lt {
    cublasLtHandle_t handle;
    void *workspace;
    lt_shape shapes[LT_SHAPES];
    int next; /* the entry the next new shape replaces when all are used */
};

static void shape_clear(lt_shape *s)
{
    if (s->desc)
        rp_cublas.lt_desc_destroy(s->desc);
    if (s->a)
        rp_cublas.lt_layout_destroy(s->a);
    if (s->b)
        rp_cublas.lt_layout_destroy(s->b);
    if (s->cd)
        rp_cublas.lt_layout_destroy(s->cd);
    memset(s, 0, sizeof *s);
}

int rp_cuda_gemm_lt_create(rp_cuda_gemm_lt **out, char *why, size_t why_len)
{
    *out = NULL;
    if (rp_cublas_open(why, why_len) != 0) /* its entry points (cublas_api.h) */
        return -1;
    rp_cuda_gemm_lt *lt = calloc(1, sizeof *lt);
    if (!lt) {
        snprintf(why, why_len, "allocating cuBLASLt's state: out of host memory");
        return -1;
    }
    cublasStatus_t b = rp_cublas.lt_create(&lt->handle);
    if (b != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, why_len, "cublasLtCreate: %s", rp_cublas.lt_get_status_string(b));
        free(lt);
        return -1;
    }
    cudaError_t e = cudaMalloc(&lt->workspace, RP_CUDA_GEMM_LT_WORKSPACE_BYTES);
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, why_len, "allocating cuBLASLt's %zu MiB workspace: %s",
                 RP_CUDA_GEMM_LT_WORKSPACE_BYTES >> 20, cudaGetErrorString(e));
        rp_cublas.lt_destroy(lt->handle);
        free(lt);
        return -1;
    }
    *out = lt;
    return 0;
}

void rp_cuda_gemm_lt_destroy(rp_cuda_gemm_lt **lt)
{
    if (!lt || !*lt)
        return;
    for (int i = 0; i < LT_SHAPES; i++)
        shape_clear(&(*lt)->shapes[i]);
    cudaFree((*lt)->workspace);
    rp_cublas.lt_destroy((*lt)->handle);
    free(*lt);
    *lt = NULL;
}

static uint32_t alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uintptr_t low = a & (~a + 1); /* the lowest set bit; 0 for NULL */
    return low == 0 || low > ALIGN_CAP ? ALIGN_CAP : (uint32_t)low;
}

/* The descriptors of a shape and the algorithm the heuristic gives for it.
 * CUBLAS_STATUS_SUCCESS with s->found 0 when there is none. bias: the
 * first call's, set before the heuristic is asked (cublasLt.h: it reads the
 * descriptor's pointers to judge their alignment; a NULL one reads as
 * aligned to anything, where every later bias is only ALIGN_CAP-aligned,
 * which the key's bias flag guarantees); each call sets its own after. */
static cublasStatus_t shape_choose(rp_cuda_gemm_lt *lt, lt_shape *s, const float *bias)
{
    const lt_key *k = &s->key;
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    const cublasLtEpilogue_t epilogue =
        k->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    const cudaDataType_t bias_type = CUDA_R_32F; /* the default would be D's, fp32 too: said */
    const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    const uint64_t workspace = RP_CUDA_GEMM_LT_WORKSPACE_BYTES;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t b = rp_cublas.lt_desc_create(&s->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
#define LT_SET(call)                                                                       \
    do {                                                                                   \
        if (b == CUBLAS_STATUS_SUCCESS)                                                    \
            b = (call);                                                                    \
    } while (0)
    LT_SET(rp_cublas.lt_desc_set_attribute(s->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa,
                                           sizeof transa));
    LT_SET(rp_cublas.lt_desc_set_attribute(s->desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb,
                                           sizeof transb));
    LT_SET(rp_cublas.lt_desc_set_attribute(s->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                           sizeof epilogue));
    if (k->bias) {
        LT_SET(rp_cublas.lt_desc_set_attribute(s->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                               &bias_type, sizeof bias_type));
        LT_SET(rp_cublas.lt_desc_set_attribute(s->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                               sizeof bias));
    }
    LT_SET(
        rp_cublas.lt_layout_create(&s->a, CUDA_R_16BF, (uint64_t)k->in, (uint64_t)k->out, k->in));
    LT_SET(
        rp_cublas.lt_layout_create(&s->b, CUDA_R_16BF, (uint64_t)k->in, (uint64_t)k->rows, k->in));
    LT_SET(rp_cublas.lt_layout_create(&s->cd, CUDA_R_32F, (uint64_t)k->out, (uint64_t)k->rows,
                                      k->out));
    LT_SET(rp_cublas.lt_preference_create(&pref));
    LT_SET(rp_cublas.lt_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace, sizeof workspace));
    LT_SET(rp_cublas.lt_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &reduction, sizeof reduction));
    LT_SET(rp_cublas.lt_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                 &k->align_w, sizeof k->align_w));
    LT_SET(rp_cublas.lt_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                 &k->align_x, sizeof k->align_x));
    LT_SET(rp_cublas.lt_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                 &k->align_c, sizeof k->align_c));
    LT_SET(rp_cublas.lt_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                 &k->align_y, sizeof k->align_y));
#undef LT_SET
    if (b == CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulHeuristicResult_t result;
        int returned = 0;
        memset(&result, 0, sizeof result);
        b = rp_cublas.lt_algo_get_heuristic(lt->handle, s->desc, s->a, s->b, s->cd, s->cd, pref, 1,
                                            &result, &returned);
        /* no algorithm (a result's fields mean something only when its
         * state is a success): remembered as such */
        if (b == CUBLAS_STATUS_NOT_SUPPORTED ||
            (b == CUBLAS_STATUS_SUCCESS &&
             (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS))) {
            b = CUBLAS_STATUS_SUCCESS;
        } else if (b == CUBLAS_STATUS_SUCCESS) {
            /* the preference's mask asks for one sequence of each dot
             * product; the algorithm's own configuration is checked too (a
             * split K would sum in another order, or with atomics) */
            int32_t splits = 1;
            uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
            size_t got = 0;
            if (rp_cublas.lt_algo_config_get_attribute(
                    &result.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits, &got) !=
                    CUBLAS_STATUS_SUCCESS ||
                rp_cublas.lt_algo_config_get_attribute(
                    &result.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme,
                    &got) != CUBLAS_STATUS_SUCCESS)
                splits = 0;
            if (splits == 1 && scheme == CUBLASLT_REDUCTION_SCHEME_NONE) {
                s->algo = result.algo;
                s->found = 1;
            } /* else no algorithm, remembered as such: cuBLAS computes the shape */
        }
    }
    if (pref)
        rp_cublas.lt_preference_destroy(pref);
    return b;
}

/* The entry for key k, chosen now when it is new; NULL and *status set
 * when choosing failed (nothing is remembered then). */
static lt_shape *shape_for(rp_cuda_gemm_lt *lt, const lt_key *k, const float *bias,
                           cublasStatus_t *status)
{
    *status = CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < LT_SHAPES; i++)
        if (lt->shapes[i].used && memcmp(&lt->shapes[i].key, k, sizeof *k) == 0)
            return &lt->shapes[i];
    lt_shape *s = NULL;
    for (int i = 0; i < LT_SHAPES && !s; i++)
        if (!lt->shapes[i].used)
            s = &lt->shapes[i];
    if (!s) {
        s = &lt->shapes[lt->next];
        lt->next = (lt->next + 1) % LT_SHAPES;
    }
    shape_clear(s);
    s->key = *k;
    *status = shape_choose(lt, s, bias);
    if (*status != CUBLAS_STATUS_SUCCESS) {
        shape_clear(s);
        return NULL;
    }
    s->used = 1;
    return s;
}

int rp_cuda_gemm_lt_linear_forward(rp_cuda_gemm_lt *lt, void *stream, const uint16_t *x,
                                   const uint16_t *W, const float *bias, const float *residual,
                                   float *y, int64_t rows, int64_t in, int64_t out, int *taken)
{
    *taken = 0;
    /* the bias epilogue's loads want a 16-byte aligned vector (users of
     * cuBLASLt report misaligned-address faults below that); cudaMalloc'd
     * biases are, a bias that is not is left to cuBLAS and the bias kernel */
    if (bias && alignment(bias) < ALIGN_CAP)
        return CUBLAS_STATUS_SUCCESS;
    lt_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp: no stray padding */
    k.rows = rows, k.in = in, k.out = out;
    k.bias = bias != NULL, k.residual = residual != NULL;
    k.align_x = alignment(x), k.align_w = alignment(W);
    k.align_c = alignment(residual ? (const void *)residual : (const void *)y);
    k.align_y = alignment(y);
    cublasStatus_t b;
    lt_shape *s = shape_for(lt, &k, bias, &b);
    if (!s)
        return (int)b;
    if (!s->found)
        return CUBLAS_STATUS_SUCCESS;
    if (bias) {
        b = rp_cublas.lt_desc_set_attribute(s->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof bias);
        if (b != CUBLAS_STATUS_SUCCESS)
            return (int)b;
    }
    /* without a residual beta is 0 and C is never read: D stands in */
    const float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
    const void *c = residual ? (const void *)residual : (const void *)y;
    b = rp_cublas.lt_matmul(lt->handle, s->desc, &alpha, W, s->a, x, s->b, &beta, c, s->cd, y,
                            s->cd, &s->algo, lt->workspace, RP_CUDA_GEMM_LT_WORKSPACE_BYTES,
                            (cudaStream_t)stream);
    if (b == CUBLAS_STATUS_SUCCESS)
        *taken = 1;
    return (int)b;
}
