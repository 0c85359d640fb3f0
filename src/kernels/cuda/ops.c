/* The CUDA table of kernel ops (kernels/ops.h): each entry queues the
 * kernels of this directory, or a cuBLAS bf16 GEMM with fp32 accumulation
 * (linear_forward into an fp32 y through cuBLASLt, where the gemm-lt path
 * is on),
 * or (attention, where rp_cuda_kernels_choose_attention chose it) cuDNN's
 * fused flash SDPA, on the state's stream. Compute-dtype tensors are bf16. Nothing waits for
 * the stream except the ops that return host values (sum_to_host, and
 * check_ids, which must know before any write whether an id is bad),
 * moe_group (which must return RP_ERR_RANGE for an expert out of range:
 * one wait per call, after its kernels are queued) and the growth of a
 * cached buffer, which happens once per shape. */
#include "config.h"

#include "kernels/cuda/cublas_api.h"
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/unproven.h"
#include "kernels/attention_choice.h"
#include "kernels/cudnn_loader.h"
#include "kernels/cuda/attention.h"
#ifdef RP_HAVE_CUDNN
#include "kernels/cuda/cudnn_attention.h"
#endif
#include "kernels/cuda/convert.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embed.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_lt.h"
#include "kernels/cuda/grouped_bias.h"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/lora.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/sizes.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/cuda/xent.h"

#define ROPE_MAX_HALF 1024                    /* head_dim up to 2048 */

typedef struct cuda_state {
    int ordinal;
    cudaStream_t stream;
    cublasHandle_t blas;
    /* scratch of the embedding's sort, grown on first use */
    void *scratch;
    size_t scratch_bytes;
    unsigned long long *bad; /* device word of rp_cuda_tokens_first_bad */
    /* the RoPE table [seqlen, head_dim] (then inv_freq) of the last shape */
    float *rope;
    size_t rope_floats;
    int64_t rope_seqlen;
    int64_t rope_half;
    float rope_inv[ROPE_MAX_HALF];
    /* sum_to_host's pinned host buffer, grown on first use */
    double *host_values;
    size_t host_values_n;
    /* scratch of moe_group's sort (sorted keys, CUB's space), grown on
     * first use and when the pairs grow */
    void *moe_scratch;
    size_t moe_scratch_bytes;
    /* the attention choice (rp_cuda_kernels_choose_attention) */
    int attention_mode;
    /* the cudnn-documents path: document segments to cuDNN's ragged layout
     * where it takes them (kernels/attn_documents.h), else the own kernel;
     * the attention calls over documents, those cuDNN ran, and why it
     * refused the first it did not ("" while none) */
    int cudnn_documents;
    int64_t documents_calls, documents_cudnn_calls;
    char documents_refused[RP_DOCUMENTS_REFUSED_MAX];
    /* the fused-xent path, given there too: cross_entropy writes the bf16
     * gradient in its own pass */
    int fused_xent;
    /* the xent-fp32 path: its row sums in float (xent.h) */
    int xent_fp32;
    /* the gemm-lt path: linear_forward through cuBLASLt; NULL, the copy,
     * cuBLAS and the bias kernel */
    rp_cuda_gemm_lt *gemm_lt;
    int64_t gemm_lt_products; /* the calls it computed */
    char attention_note[768];
    rp_cudnn_library cudnn_library;
#ifdef RP_HAVE_CUDNN
    rp_cudnn_attention *cudnn; /* NULL: the own kernel for every call */
#endif
} cuda_state;

const char *rp_cuda_error_hint(int cuda_error)
{
    switch ((cudaError_t)cuda_error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
        return " (a fault of a kernel queued before this call, which only reported it: the "
               "GPU context is lost; compute-sanitizer, or CUDA_LAUNCH_BLOCKING=1, names the "
               "kernel)";
    default:
        return "";
    }
}

rp_status rp_cuda_fail(int ordinal, const char *what, int cuda_error, rp_error *err)
{
    cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: %s: %s%s", ordinal, what,
                        cudaGetErrorString((cudaError_t)cuda_error),
                        rp_cuda_error_hint(cuda_error));
}

rp_status rp_cuda_fail_blas(int ordinal, const char *what, int blas_status, rp_error *err)
{
    return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: %s: cuBLAS %s", ordinal, what,
                        rp_cublas.get_status_string((cublasStatus_t)blas_status));
}

/* a kernel entry point (returns a cudaError_t) or a cuBLAS call, failing
 * with its name */
#define CK(call)                                                                           \
    do {                                                                                   \
        int ck_e_ = (call);                                                                \
        if (ck_e_ != 0)                                                                    \
            return rp_cuda_fail(c->ordinal, #call, ck_e_, err);                            \
    } while (0)
#define CKB(call)                                                                          \
    do {                                                                                   \
        int ck_e_ = (call);                                                                \
        if (ck_e_ != 0)                                                                    \
            return rp_cuda_fail_blas(c->ordinal, #call, ck_e_, err);                       \
    } while (0)

/* the attention and cross-entropy kernels' convention: -1 bad argument,
 * -2 CUDA failure, with a static message */
static rp_status failed(const cuda_state *c, const char *what, int rc, const char *why,
                        rp_error *err)
{
    cudaGetLastError();
    return rp_error_set(err, rc == -1 ? RP_ERR_INVALID_ARG : RP_ERR_CUDA, "cuda device %d: %s: %s",
                        c->ordinal, what, why ? why : "failed");
}

static rp_status sync(cuda_state *c, const char *what, rp_error *err)
{
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e == cudaSuccess ? RP_OK : rp_cuda_fail(c->ordinal, what, (int)e, err);
}

/* ---- GEMMs ------------------------------------------------------------ */

/* cuBLAS reads bf16 weights only (the compute dtype: weight_dtypes). */
static rp_status weights_bf16(const cuda_state *c, const char *op, rp_dtype W_dtype,
                              rp_error *err)
{
    if (W_dtype == RP_BF16)
        return RP_OK;
    return rp_error_set(err, RP_ERR_UNSUPPORTED, "cuda device %d: %s reads BF16 weights, not %s",
                        c->ordinal, op, rp_dtype_name(W_dtype));
}

static rp_status linear_forward(void *state, const void *x, const void *W, rp_dtype W_dtype,
                                const float *bias, const float *residual, float *y,
                                void *y_compute, int64_t rows, int64_t in, int64_t out,
                                rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(weights_bf16(c, "linear_forward", W_dtype, err));
    if (!rp_linear_outputs_valid(y, y_compute, bias, residual))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: linear_forward without y "
                            "writes y_compute alone, with neither a bias nor a residual",
                            c->ordinal);
    if (!y) { /* y = x W^T straight into bf16: nothing to add, so no fp32 pass (nor cuBLASLt,
                 whose epilogues are what it would bring) */
        CKB(rp_cuda_gemm(c->blas, 0, 1, rows, out, in, 1.0f, x, in, W, in, 0.0f, y_compute, 1,
                         out));
        return RP_OK;
    }
    if (c->gemm_lt && rows > 0 && in > 0 && out > 0) {
        int taken = 0;
        CKB(rp_cuda_gemm_lt_linear_forward(c->gemm_lt, c->stream, x, W, bias, residual, y, rows,
                                           in, out, &taken));
        if (taken) { /* residual and bias added: y_compute is y rounded */
            c->gemm_lt_products++;
            if (y_compute)
                CK(rp_cuda_bf16_from_f32(y, y_compute, rows * out, c->stream));
            return RP_OK;
        }
    }
    if (residual) {
        cudaError_t e = cudaMemcpyAsync(y, residual, sizeof(float) * (size_t)(rows * out),
                                        cudaMemcpyDeviceToDevice, c->stream);
        if (e != cudaSuccess)
            return rp_cuda_fail(c->ordinal, "copying the residual", (int)e, err);
    }
    CKB(rp_cuda_linear_forward(c->blas, x, W, y, rows, in, out, residual != NULL));
    if (bias)
        CK(rp_cuda_bias_add(y, y_compute, bias, rows, out, c->stream));
    else if (y_compute)
        CK(rp_cuda_bf16_from_f32(y, y_compute, rows * out, c->stream));
    return RP_OK;
}

static rp_status linear_backward_input(void *state, const void *dy, const void *W,
                                       rp_dtype W_dtype, float *dx, void *dx_compute,
                                       int64_t rows, int64_t in, int64_t out, int accumulate,
                                       rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(weights_bf16(c, "linear_backward_input", W_dtype, err));
    if (dx)
        CKB(rp_cuda_linear_backward_input(c->blas, dy, W, dx, rows, in, out, accumulate));
    else /* dx = dy W straight into bf16 */
        CKB(rp_cuda_gemm(c->blas, 0, 0, rows, in, out, 1.0f, dy, out, W, in, 0.0f, dx_compute, 1,
                         in));
    return RP_OK;
}

static rp_status linear_backward_weight(void *state, const void *dy, const void *x, float *dW,
                                        int64_t rows, int64_t in, int64_t out, rp_error *err)
{
    cuda_state *c = state;
    CKB(rp_cuda_linear_backward_weight(c->blas, dy, x, dW, rows, in, out));
    return RP_OK;
}

static rp_status column_sum_accumulate(void *state, const float *src, int64_t rows, int64_t cols,
                                       float *dst, float *scratch, rp_error *err)
{
    cuda_state *c = state;
    CK(rp_cuda_colsum_accumulate(src, rows, cols, dst, scratch, c->stream));
    return RP_OK;
}

/* ---- norms ------------------------------------------------------------ */

static rp_status rmsnorm_forward(void *state, const float *x, const float *w, float *y,
                                 void *y_compute, float *rstd, int64_t rows, int64_t dim,
                                 float eps, rp_error *err)
{
    cuda_state *c = state;
    CK(rp_cuda_rmsnorm_forward(x, w, y, y_compute, rstd, rows, dim, eps, c->stream));
    return RP_OK;
}

static rp_status rmsnorm_backward(void *state, const float *x, const float *w, const float *rstd,
                                  const float *dy, float *dx, void *dx_compute, float *dw,
                                  int64_t rows, int64_t dim, int accumulate, float *scratch,
                                  rp_error *err)
{
    cuda_state *c = state;
    if (dw) /* first: dx may overwrite dy */
        CK(rp_cuda_rmsnorm_dw(x, rstd, dy, rows, dim, dw, scratch, c->stream));
    CK(rp_cuda_rmsnorm_backward(x, w, rstd, dy, dx, dx_compute, rows, dim, accumulate,
                                c->stream));
    return RP_OK;
}

/* ---- RoPE ------------------------------------------------------------- */

static rp_status rope_table(void *state, const float *inv_freq, int64_t seqlen, int64_t half,
                            float *space, const float **table, rp_error *err)
{
    cuda_state *c = state;
    (void)space;
    if (half < 1 || half > ROPE_MAX_HALF)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "cuda device %d: head_dim %lld (at most %d)",
                            c->ordinal, (long long)(2 * half), 2 * ROPE_MAX_HALF);
    if (c->rope && c->rope_seqlen == seqlen && c->rope_half == half &&
        memcmp(inv_freq, c->rope_inv, sizeof(float) * (size_t)half) == 0) {
        *table = c->rope;
        return RP_OK;
    }
    /* a new shape: queued work may still read the old table */
    RP_TRY(sync(c, "replacing the RoPE table", err));
    size_t need = (size_t)(seqlen * 2 * half + half);
    if (need > c->rope_floats) {
        cudaFree(c->rope);
        c->rope = NULL;
        c->rope_floats = 0;
        cudaError_t e = cudaMalloc((void **)&c->rope, need * sizeof(float));
        if (e != cudaSuccess)
            return rp_cuda_fail(c->ordinal, "allocating the RoPE table", (int)e, err);
        c->rope_floats = need;
    }
    float *dinv = c->rope + seqlen * 2 * half;
    /* on the ops' stream, which the table kernel reads it on: a plain
     * cudaMemcpy from pageable memory may return before its DMA lands,
     * and the legacy stream it is ordered on does not order the
     * non-blocking c->stream; the async form stages inv_freq (the
     * caller's stack) before it returns */
    cudaError_t e = cudaMemcpyAsync(dinv, inv_freq, sizeof(float) * (size_t)half,
                                    cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess)
        return rp_cuda_fail(c->ordinal, "uploading inv_freq", (int)e, err);
    CK(rp_cuda_rope_table(c->rope, dinv, seqlen, half, c->stream));
    c->rope_seqlen = seqlen;
    c->rope_half = half;
    memcpy(c->rope_inv, inv_freq, sizeof(float) * (size_t)half);
    *table = c->rope;
    return RP_OK;
}

static rp_status rope_apply(void *state, float *x, void *x_compute, const float *table,
                            int64_t nseq, int64_t seqlen, const int32_t *seg_start,
                            int64_t nheads, int64_t head_dim, int inverse, rp_error *err)
{
    cuda_state *c = state;
    CK(rp_cuda_rope_apply(x, x_compute, table, nseq, seqlen, seg_start, nheads, head_dim,
                          inverse, c->stream));
    return RP_OK;
}

/* ---- attention -------------------------------------------------------- */

/* gpt-oss's windows and sinks (issue 35) are the kernels' own
 * (kernels/cuda/attention.h). */
#ifdef RP_HAVE_CUDNN
/* cuDNN's answer for a call: RP_OK and *done when it ran it; RP_OK and not
 * *done when the own kernel is to run it (a shape cuDNN does not take,
 * under auto, or a kind of shape no mode sends to cuDNN); an error when
 * --attention cudnn meets a shape it sent to cuDNN that cuDNN refuses (its
 * plan's workspace), or cuDNN fails. */
static rp_status cudnn_answer(const cuda_state *c, const rp_attn_shape *s, const char *what,
                              int rc, const char *why, int *done, rp_error *err)
{
    *done = rc == RP_CUDNN_DONE;
    if (rc == RP_CUDNN_REFUSED && c->attention_mode == RP_ATTENTION_CUDNN)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "cuda device %d: --attention cudnn: %s of %lld x %lld tokens, "
                            "%lld/%lld heads of %lld: %s", c->ordinal, what,
                            (long long)s->nseq, (long long)s->seqlen, (long long)s->nheads,
                            (long long)s->nkv, (long long)s->head_dim, why);
    if (rc == RP_CUDNN_FAILED) {
        cudaGetLastError();
        return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: %s through cuDNN: %s", c->ordinal,
                            what, why);
    }
    return RP_OK;
}

/* Whether this call goes to cuDNN: chosen, and a shape it takes; document
 * segments only with the cudnn-documents path (a run refuses --attention
 * cudnn with --documents up front, engine/train_options.h, so a documents
 * call cuDNN refuses, rp_attn_documents_refusal or its plan's workspace,
 * takes the own kernel under auto). */
static int to_cudnn(const cuda_state *c, const rp_attn_shape *s)
{
    return c->cudnn && !rp_attention_cudnn_refusal(s) && (!s->seg_start || c->cudnn_documents);
}

/* counts a documents call cuDNN ran, or keeps why it refused the first */
static void count_documents(cuda_state *c, const rp_attn_shape *s, int done, const char *why)
{
    if (!s->seg_start)
        return;
    c->documents_cudnn_calls += done;
    if (!done && !c->documents_refused[0])
        snprintf(c->documents_refused, sizeof c->documents_refused, "%s", why);
}
#endif

static rp_status attention_forward(void *state, const rp_attn_shape *s, const void *q,
                                   const void *k, const void *v, void *o, float *lse,
                                   rp_error *err)
{
    cuda_state *c = state;
    c->documents_calls += s->seg_start != NULL;
#ifdef RP_HAVE_CUDNN
    if (to_cudnn(c, s)) {
        char dwhy[RP_DOCUMENTS_REFUSED_MAX] = "";
        int done = 0;
        int rc = rp_cudnn_attention_forward(c->cudnn, s, q, k, v, o, lse, dwhy, sizeof dwhy);
        RP_TRY(cudnn_answer(c, s, "attention forward", rc, dwhy, &done, err));
        count_documents(c, s, done, dwhy);
        if (done)
            return RP_OK;
    }
#endif
    const char *why = NULL;
    int rc = rp_cuda_attn_forward_bf16(s, q, k, v, NULL, o, lse, c->stream, &why);
    return rc ? failed(c, "attention forward", rc, why, err) : RP_OK;
}

static rp_status attention_backward(void *state, const rp_attn_shape *s, const void *q,
                                    const void *k, const void *v, const void *o, const float *lse,
                                    const void *dout, float *dq, float *dk, float *dv,
                                    float *scratch, rp_error *err)
{
    cuda_state *c = state;
    c->documents_calls += s->seg_start != NULL;
#ifdef RP_HAVE_CUDNN
    if (to_cudnn(c, s)) {
        char dwhy[RP_DOCUMENTS_REFUSED_MAX] = "";
        int done = 0;
        int rc = rp_cudnn_attention_backward(c->cudnn, s, q, k, v, o, lse, dout, dq, dk, dv, dwhy,
                                             sizeof dwhy);
        RP_TRY(cudnn_answer(c, s, "attention backward", rc, dwhy, &done, err));
        count_documents(c, s, done, dwhy);
        if (done)
            return RP_OK;
    }
#endif
    const char *why = NULL;
    int rc = rp_cuda_attn_delta_bf16(s, o, dout, scratch, c->stream, &why);
    if (rc)
        return failed(c, "attention backward (delta)", rc, why, err);
    rc = rp_cuda_attn_backward_bf16(s, q, k, v, dout, lse, scratch, dq, dk, dv, c->stream, &why);
    return rc ? failed(c, "attention backward", rc, why, err) : RP_OK;
}

static rp_status attention_sink_backward(void *state, const rp_attn_shape *s, const void *o,
                                         const float *lse, const void *dout, float *dsinks,
                                         rp_error *err)
{
    cuda_state *c = state;
    const char *why = NULL;
    int rc = rp_cuda_attn_sink_backward_bf16(s, o, lse, dout, dsinks, c->stream, &why);
    return rc ? failed(c, "attention sink backward", rc, why, err) : RP_OK;
}

/* ---- SwiGLU ----------------------------------------------------------- */

static rp_status swiglu_clamped_forward(void *state, const float *g, const float *u, float limit,
                                        float alpha, void *m, int64_t n, rp_error *err)
{
    cuda_state *c = state;
    CK(rp_cuda_swiglu_clamped_forward(g, u, limit, alpha, NULL, m, n, c->stream));
    return RP_OK;
}

static rp_status swiglu_clamped_backward(void *state, const float *g, const float *u,
                                         float limit, float alpha, const float *dm, void *dg,
                                         void *du, int64_t n, rp_error *err)
{
    cuda_state *c = state;
    CK(rp_cuda_swiglu_clamped_backward(g, u, limit, alpha, dm, NULL, dg, NULL, du, n,
                                       c->stream));
    return RP_OK;
}

/* The SwiGLU reads fp32 or bf16 (the compute dtype) inputs: *bf16 says
 * which dtype is; another is RP_ERR_UNSUPPORTED. */
static rp_status swiglu_input(const cuda_state *c, const char *op, const char *what,
                              rp_dtype dtype, int *bf16, rp_error *err)
{
    *bf16 = dtype == RP_BF16;
    if (dtype == RP_BF16 || dtype == RP_F32)
        return RP_OK;
    return rp_error_set(err, RP_ERR_UNSUPPORTED, "cuda device %d: %s reads %s in F32 or BF16, "
                        "not %s", c->ordinal, op, what, rp_dtype_name(dtype));
}

/* g and u's row stride: at least a row (kernels/ops.h). */
static rp_status swiglu_stride(const cuda_state *c, const char *op, int64_t ld, int64_t rows,
                               int64_t cols, rp_error *err)
{
    if (rp_swiglu_shape_valid(ld, rows, cols))
        return RP_OK;
    return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: %s: row stride %lld for %lld "
                        "rows of %lld", c->ordinal, op, (long long)ld, (long long)rows,
                        (long long)cols);
}

static rp_status swiglu_forward(void *state, const void *g, const void *u, rp_dtype gu_dtype,
                                int64_t ld, void *m, int64_t rows, int64_t cols, rp_error *err)
{
    cuda_state *c = state;
    int gu_bf16;
    RP_TRY(swiglu_input(c, "swiglu_forward", "g and u", gu_dtype, &gu_bf16, err));
    RP_TRY(swiglu_stride(c, "swiglu_forward", ld, rows, cols, err));
    CK(rp_cuda_swiglu_forward(g, u, gu_bf16, ld, NULL, m, rows, cols, c->stream));
    return RP_OK;
}

static rp_status swiglu_backward(void *state, const void *g, const void *u, rp_dtype gu_dtype,
                                 int64_t ld, const void *dm, rp_dtype dm_dtype, void *dg, void *du,
                                 int64_t rows, int64_t cols, rp_error *err)
{
    cuda_state *c = state;
    int gu_bf16, dm_bf16;
    RP_TRY(swiglu_input(c, "swiglu_backward", "g and u", gu_dtype, &gu_bf16, err));
    RP_TRY(swiglu_input(c, "swiglu_backward", "dm", dm_dtype, &dm_bf16, err));
    RP_TRY(swiglu_stride(c, "swiglu_backward", ld, rows, cols, err));
    CK(rp_cuda_swiglu_backward(g, u, gu_bf16, ld, dm, dm_bf16, NULL, dg, NULL, du, rows, cols,
                               c->stream));
    return RP_OK;
}

/* ---- LoRA ------------------------------------------------------------- */

static rp_status scaled_add(void *state, const float *x, float alpha, float *y, void *y_compute,
                            int64_t n, int accumulate, rp_error *err)
{
    cuda_state *c = state;
    if (n == 0)
        return RP_OK;
    const char *why = rp_scaled_add_refusal(n, y, y_compute, accumulate);
    if (why)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: scaled_add: %s",
                            c->ordinal, why);
    CK(rp_cuda_scaled_add(x, alpha, y, y_compute, n, accumulate, c->stream));
    return RP_OK;
}

static rp_status dropout(void *state, const rp_dropout_site *site, const void *x, void *y,
                         rp_dtype dtype, int64_t rows, int64_t cols, int accumulate,
                         rp_error *err)
{
    cuda_state *c = state;
    if (dtype != RP_F32 && dtype != RP_BF16)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "cuda device %d: dropout: dtype %s (fp32 or bf16)", c->ordinal,
                            rp_dtype_name(dtype));
    if (dtype == RP_BF16 && accumulate)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "cuda device %d: dropout: accumulate into bf16 (fp32 only)",
                            c->ordinal);
    const char *why = rp_dropout_refusal(site, rows, cols);
    if (why)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: dropout: %s (p %g, rows "
                            "%lld, cols %lld, rows_per_sample %lld, first_row %lld)",
                            c->ordinal, why, (double)site->p, (long long)rows, (long long)cols,
                            (long long)site->rows_per_sample, (long long)site->first_row);
    const int64_t n = rows * cols;
    if (n == 0)
        return RP_OK;
    if (site->p == 0.0f) { /* everything kept at scale 1: a copy or a sum, no mask */
        if (accumulate)
            CK(rp_cuda_scaled_add(x, 1.0f, y, NULL, n, 1, c->stream));
        else if (x != y)
            CK(cudaMemcpyAsync(y, x, (size_t)n * rp_dtype_size(dtype), cudaMemcpyDeviceToDevice,
                               c->stream));
        return RP_OK;
    }
    const float scale = 1.0f / (1.0f - site->p); /* on the host, as the CPU table */
    if (dtype == RP_F32)
        CK(rp_cuda_dropout_f32(site, scale, x, y, rows, cols, accumulate, c->stream));
    else
        CK(rp_cuda_dropout_bf16(site, scale, x, y, rows, cols, c->stream));
    return RP_OK;
}

/* ---- mixture of experts ------------------------------------------------ */

/* rows tokens of top-k pairs whose count fits int32 (the index type of
 * order, where and offsets), or an error naming the op */
static rp_status pairs_usable(const cuda_state *c, const char *op, int64_t rows, int64_t topk,
                              rp_error *err)
{
    if (topk >= 1 && rows >= 0 && rows <= INT32_MAX / topk)
        return RP_OK;
    return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: %s: %lld rows of top-%lld "
                        "(pairs must fit int32)", c->ordinal, op, (long long)rows,
                        (long long)topk);
}

static rp_status topk_usable(const cuda_state *c, const char *op, int64_t rows, int64_t topk,
                             int64_t nexperts, rp_error *err)
{
    if (topk < 1 || topk > nexperts || nexperts > INT32_MAX || rows < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: %s: top-%lld of %lld "
                            "experts over %lld rows", c->ordinal, op, (long long)topk,
                            (long long)nexperts, (long long)rows);
    return RP_OK;
}

static rp_status moe_route(void *state, const float *logits, int64_t rows, int64_t nexperts,
                           int64_t topk, int norm_topk, float *probs, int32_t *experts,
                           float *weights, rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(topk_usable(c, "moe_route", rows, topk, nexperts, err));
    CK(rp_cuda_moe_route(logits, rows, nexperts, topk, norm_topk, probs, experts, weights,
                         c->stream));
    return RP_OK;
}

/* The range check waits for the stream once per call (its word comes back
 * after the grouping is queued, so the wait covers the check and the sort
 * together); a bad expert makes a wrong grouping, never an access outside
 * the buffers, and the op then returns RP_ERR_RANGE. The sort's scratch
 * grows (with a wait) only when the pairs outgrow it. */
static rp_status moe_group(void *state, const int32_t *experts, int64_t rows, int64_t topk,
                           int64_t nexperts, int32_t *offsets, int32_t *order, int32_t *where,
                           rp_error *err)
{
    cuda_state *c = state;
    if (topk < 1 || nexperts < 1 || nexperts > INT32_MAX || rows < 0 || rows > INT32_MAX / topk)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: moe_group: %lld rows of "
                            "top-%lld over %lld experts (pairs must fit int32)", c->ordinal,
                            (long long)rows, (long long)topk, (long long)nexperts);
    const int64_t n = rows * topk;
    if (n == 0) {
        CK(rp_cuda_moe_group(experts, 0, nexperts, offsets, order, where, NULL, 0, c->stream));
        return RP_OK;
    }
    CK(rp_cuda_tokens_first_bad(experts, NULL, n, nexperts, c->bad, c->stream));
    size_t bytes = 0;
    CK(rp_cuda_moe_group_scratch(n, nexperts, &bytes));
    if (bytes > c->moe_scratch_bytes) {
        RP_TRY(sync(c, "growing moe_group's scratch", err)); /* queued work may read the old */
        cudaFree(c->moe_scratch);
        c->moe_scratch = NULL;
        c->moe_scratch_bytes = 0;
        cudaError_t e = cudaMalloc(&c->moe_scratch, bytes);
        if (e != cudaSuccess) {
            size_t fr = 0, tot = 0;
            cudaGetLastError();
            cudaMemGetInfo(&fr, &tot);
            return rp_error_set(err, RP_ERR_DEVICE_MEMORY,
                                "cuda device %d: moe_group's scratch of %zu bytes does not fit "
                                "(%zu bytes free of %zu)", c->ordinal, bytes, fr, tot);
        }
        c->moe_scratch_bytes = bytes;
    }
    CK(rp_cuda_moe_group(experts, n, nexperts, offsets, order, where, c->moe_scratch,
                         c->moe_scratch_bytes, c->stream));
    unsigned long long bad = 0;
    cudaError_t e = cudaMemcpyAsync(&bad, c->bad, sizeof bad, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return rp_cuda_fail(c->ordinal, "moe_group: the experts' range check", (int)e, err);
    if (bad == ~0ULL)
        return RP_OK;
    int32_t v = 0;
    e = cudaMemcpy(&v, experts + bad, sizeof v, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return rp_cuda_fail(c->ordinal, "moe_group: reading the bad expert", (int)e, err);
    return rp_error_set(err, RP_ERR_RANGE, "cuda device %d: moe_group: expert %d at position %llu "
                        "(token %lld, slot %lld) is outside [0, %lld)", c->ordinal, (int)v, bad,
                        (long long)(bad / (unsigned long long)topk),
                        (long long)(bad % (unsigned long long)topk), (long long)nexperts);
}

static rp_status moe_stats(void *state, const float *probs, const int32_t *offsets,
                           int64_t rows, int64_t nexperts, float *stats, rp_error *err)
{
    cuda_state *c = state;
    if (nexperts < 1 || nexperts > INT32_MAX || rows < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: moe_stats: %lld rows over "
                            "%lld experts", c->ordinal, (long long)rows, (long long)nexperts);
    CK(rp_cuda_moe_stats(probs, offsets, rows, nexperts, stats, c->stream));
    return RP_OK;
}

static rp_status moe_gather(void *state, const void *x, const int32_t *order,
                            const float *weights, int64_t rows, int64_t topk, int64_t cols,
                            void *xg, rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(pairs_usable(c, "moe_gather", rows, topk, err));
    CK(rp_cuda_moe_gather(x, order, weights, rows, topk, cols, xg, c->stream));
    return RP_OK;
}

static rp_status moe_scatter_add(void *state, const float *dxg, const int32_t *where,
                                 int64_t rows, int64_t topk, int64_t cols, float *dx,
                                 int accumulate, rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(pairs_usable(c, "moe_scatter_add", rows, topk, err));
    CK(rp_cuda_moe_scatter_add(dxg, where, rows, topk, cols, dx, accumulate, c->stream));
    return RP_OK;
}

static rp_status moe_combine(void *state, const float *yg, const float *weights,
                             const int32_t *where, const float *residual, int64_t rows,
                             int64_t topk, int64_t cols, float *y, rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(pairs_usable(c, "moe_combine", rows, topk, err));
    CK(rp_cuda_moe_combine(yg, weights, where, residual, rows, topk, cols, y, c->stream));
    return RP_OK;
}

static rp_status moe_down_backward(void *state, const float *z, const void *m,
                                   const float *weights, const int32_t *order, int64_t rows,
                                   int64_t topk, int64_t cols, float *dm, void *dm_compute,
                                   float *dweights, rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(pairs_usable(c, "moe_down_backward", rows, topk, err));
    CK(rp_cuda_moe_down_backward(z, m, weights, order, rows, topk, cols, dm, dm_compute, dweights,
                                 c->stream));
    return RP_OK;
}

static rp_status moe_route_backward(void *state, const float *probs, const int32_t *experts,
                                    const float *dweights, const float *aux_grad, int64_t rows,
                                    int64_t nexperts, int64_t topk, int norm_topk,
                                    float *dlogits, void *dlogits_compute, rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(topk_usable(c, "moe_route_backward", rows, topk, nexperts, err));
    CK(rp_cuda_moe_route_backward(probs, experts, dweights, aux_grad, rows, nexperts, topk,
                                  norm_topk, dlogits, dlogits_compute, c->stream));
    return RP_OK;
}

/* The grouped GEMMs take the experts' pointers by value in one kernel
 * parameter (grouped_gemm.h), RP_CUDA_MOE_MAX_EXPERTS of them at most. The
 * offsets stay on the device and are not checked here (that would cost a
 * wait); the kernels clamp them to [0, rows]. */
static rp_status experts_usable(const cuda_state *c, const char *op, int64_t nexperts,
                                int64_t rows, int64_t in, int64_t out, rp_error *err)
{
    if (nexperts > RP_CUDA_MOE_MAX_EXPERTS)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "cuda device %d: %s: %lld experts (the "
                            "CUDA grouped GEMMs take at most %d)", c->ordinal, op,
                            (long long)nexperts, RP_CUDA_MOE_MAX_EXPERTS);
    if (nexperts < 1 || rows < 0 || rows > INT32_MAX || in < 0 || out < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: %s: %lld experts, %lld "
                            "rows, in %lld, out %lld", c->ordinal, op, (long long)nexperts,
                            (long long)rows, (long long)in, (long long)out);
    return RP_OK;
}

static rp_status grouped_linear_forward(void *state, const void *x, const void *const *W,
                                        rp_dtype W_dtype, const int32_t *offsets,
                                        int64_t nexperts, int64_t rows, int64_t in,
                                        int64_t out, float *y, void *y_compute, rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(weights_bf16(c, "grouped_linear_forward", W_dtype, err));
    RP_TRY(experts_usable(c, "grouped_linear_forward", nexperts, rows, in, out, err));
    if (!y && !y_compute)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: grouped_linear_forward: "
                            "neither y nor y_compute", c->ordinal);
    CK(rp_cuda_grouped_forward(x, W, offsets, nexperts, rows, in, out, y, y_compute, c->stream));
    return RP_OK;
}

static rp_status grouped_linear_backward_input(void *state, const void *dy,
                                               const void *const *W, rp_dtype W_dtype,
                                               const int32_t *offsets, int64_t nexperts,
                                               int64_t rows, int64_t in, int64_t out,
                                               float *dx, void *dx_compute, int accumulate,
                                               rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(weights_bf16(c, "grouped_linear_backward_input", W_dtype, err));
    RP_TRY(experts_usable(c, "grouped_linear_backward_input", nexperts, rows, in, out, err));
    if (!dx && (!dx_compute || accumulate))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: "
                            "grouped_linear_backward_input: %s", c->ordinal,
                            dx_compute ? "accumulate needs dx" : "neither dx nor dx_compute");
    /* dx when given, else dx_compute (as linear_backward_input) */
    CK(rp_cuda_grouped_backward_input(dy, W, offsets, nexperts, rows, in, out, dx,
                                      dx ? NULL : dx_compute, accumulate, c->stream));
    return RP_OK;
}

static rp_status grouped_linear_backward_weight(void *state, const void *dy, const void *x,
                                                const int32_t *offsets, int64_t nexperts,
                                                int64_t rows, int64_t in, int64_t out,
                                                float *const *dW, rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(experts_usable(c, "grouped_linear_backward_weight", nexperts, rows, in, out, err));
    CK(rp_cuda_grouped_backward_weight(dy, x, offsets, nexperts, rows, in, out, dW, c->stream));
    return RP_OK;
}

static rp_status grouped_bias_forward(void *state, float *y, void *y_compute,
                                      const float *const *bias, const int32_t *offsets,
                                      int64_t nexperts, int64_t rows, int64_t out,
                                      rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(experts_usable(c, "grouped_bias_forward", nexperts, rows, out, out, err));
    if (!y)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: grouped_bias_forward: no "
                            "y (the fp32 result the bias adds to)", c->ordinal);
    CK(rp_cuda_grouped_bias_forward(y, y_compute, bias, offsets, nexperts, rows, out,
                                    c->stream));
    return RP_OK;
}

static rp_status grouped_bias_backward(void *state, const void *dy, const int32_t *offsets,
                                       int64_t nexperts, int64_t rows, int64_t out,
                                       float *const *dbias, rp_error *err)
{
    cuda_state *c = state;
    RP_TRY(experts_usable(c, "grouped_bias_backward", nexperts, rows, out, out, err));
    CK(rp_cuda_grouped_bias_backward(dy, offsets, nexperts, rows, out, dbias, c->stream));
    return RP_OK;
}

/* ---- cross-entropy ---------------------------------------------------- */

static rp_status cross_entropy(void *state, float *logits, int64_t rows, int64_t vocab,
                               const int32_t *targets, const uint8_t *counted, float scale,
                               double *loss, int grad, void *dlogits_compute, rp_error *err)
{
    cuda_state *c = state;
    const char *why = NULL;
    /* With the fused-xent path off, the gradient is formed in place in
     * fp32 and rounded by the convert kernel, the same bits (xent.h) */
    const int fused = grad && dlogits_compute && (void *)logits != dlogits_compute &&
                      c->fused_xent;
    int rc = rp_cuda_xent_chunk(logits, rows, vocab, targets, counted, scale, grad,
                                fused ? dlogits_compute : NULL, c->xent_fp32, loss, NULL,
                                c->stream, &why);
    if (rc)
        return failed(c, "cross-entropy", rc, why, err);
    if (grad && dlogits_compute && !fused && (void *)logits != dlogits_compute)
        CK(rp_cuda_bf16_from_f32(logits, dlogits_compute, rows * vocab, c->stream));
    return RP_OK;
}

static rp_status sum_to_host(void *state, const double *values, int64_t n, double *sum,
                             rp_error *err)
{
    cuda_state *c = state;
    *sum = 0.0;
    if (n <= 0)
        return RP_OK;
    if ((size_t)n > c->host_values_n) { /* first use, or a longer microbatch */
        RP_TRY(sync(c, "growing the host buffer", err)); /* the old one may be in a copy */
        cudaFreeHost(c->host_values);
        c->host_values = NULL;
        c->host_values_n = 0;
        cudaError_t e = cudaMallocHost((void **)&c->host_values, sizeof(double) * (size_t)n);
        if (e != cudaSuccess)
            return rp_cuda_fail(c->ordinal, "the losses' host buffer", (int)e, err);
        c->host_values_n = (size_t)n;
    }
    cudaError_t e = cudaMemcpyAsync(c->host_values, values, sizeof(double) * (size_t)n,
                                    cudaMemcpyDeviceToHost, c->stream);
    if (e != cudaSuccess)
        return rp_cuda_fail(c->ordinal, "downloading the losses", (int)e, err);
    RP_TRY(sync(c, "downloading the losses", err));
    double total = 0.0;
    for (int64_t t = 0; t < n; t++)
        total += c->host_values[t]; /* index order, as the CPU */
    *sum = total;
    return RP_OK;
}

/* ---- ids and the embedding -------------------------------------------- */

static rp_status check_ids(void *state, const int32_t *ids, const uint8_t *mask, int64_t n,
                           int64_t limit, const char *what, const char *kind, rp_error *err)
{
    cuda_state *c = state;
    if (n <= 0)
        return RP_OK;
    CK(rp_cuda_tokens_first_bad(ids, mask, n, limit, c->bad, c->stream));
    unsigned long long bad = 0;
    cudaError_t e = cudaMemcpyAsync(&bad, c->bad, sizeof bad, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return rp_cuda_fail(c->ordinal, what, (int)e, err);
    if (bad == ~0ULL)
        return RP_OK;
    int32_t v = 0;
    e = cudaMemcpy(&v, ids + bad, sizeof v, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return rp_cuda_fail(c->ordinal, what, (int)e, err);
    return rp_error_set(err, RP_ERR_RANGE,
                        "%s: %s %d at position %llu is outside the vocabulary [0, %lld)", what,
                        kind, (int)v, bad, (long long)limit);
}

static rp_status embed_forward(void *state, const void *W, rp_dtype W_dtype,
                               const int32_t *tokens, int64_t n, int64_t hidden, float *out,
                               rp_error *err)
{
    cuda_state *c = state;
    if (W_dtype == RP_BF16)
        CK(rp_cuda_embed_forward_bf16(W, tokens, n, hidden, out, c->stream));
    else
        CK(rp_cuda_embed_forward(W, tokens, n, hidden, out, c->stream));
    return RP_OK;
}

static rp_status embed_backward(void *state, const int32_t *tokens, int64_t n, int64_t hidden,
                                int64_t vocab, const float *dout, float *dW, rp_error *err)
{
    cuda_state *c = state;
    size_t bytes = 0;
    CK(rp_cuda_embed_backward_scratch(n, vocab, &bytes));
    if (bytes > c->scratch_bytes) {
        RP_TRY(sync(c, "growing the scratch", err)); /* queued work may read the old one */
        cudaFree(c->scratch);
        c->scratch = NULL;
        c->scratch_bytes = 0;
        cudaError_t e = cudaMalloc(&c->scratch, bytes);
        if (e != cudaSuccess) {
            size_t fr = 0, tot = 0;
            cudaGetLastError();
            cudaMemGetInfo(&fr, &tot);
            return rp_error_set(err, RP_ERR_DEVICE_MEMORY,
                                "cuda device %d: the embedding's scratch of %zu bytes does not "
                                "fit (%zu bytes free of %zu)",
                                c->ordinal, bytes, fr, tot);
        }
        c->scratch_bytes = bytes;
    }
    CK(rp_cuda_embed_backward(tokens, n, hidden, vocab, dout, dW, c->scratch, bytes, c->stream));
    return RP_OK;
}

/* ---- copies ----------------------------------------------------------- */

static rp_status convert(void *state, const void *src, rp_dtype from, void *dst, rp_dtype to,
                         int64_t n, rp_error *err)
{
    cuda_state *c = state;
    if (n <= 0 || src == dst)
        return RP_OK;
    if (from == to && (to == RP_F32 || to == RP_BF16))
        CK(cudaMemcpyAsync(dst, src, (size_t)n * (to == RP_F32 ? 4 : 2), cudaMemcpyDeviceToDevice,
                           c->stream));
    else if (from == RP_F32 && to == RP_BF16)
        CK(rp_cuda_bf16_from_f32(src, dst, n, c->stream));
    else if (from == RP_BF16 && to == RP_F32)
        CK(rp_cuda_f32_from_bf16(src, dst, n, c->stream));
    else
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "cuda device %d: no conversion %d -> %d",
                            c->ordinal, (int)from, (int)to);
    return RP_OK;
}

static rp_status copy(void *state, void *dst, const void *src, size_t bytes, rp_error *err)
{
    cuda_state *c = state;
    if (bytes == 0 || dst == src)
        return RP_OK;
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return RP_OK;
}

static rp_status fp8_dequantise(void *state, const void *weight, const void *scale,
                                rp_dtype scale_dtype, int64_t rows, int64_t cols,
                                int64_t block_rows, int64_t block_cols, void *dst,
                                rp_dtype dst_dtype, rp_error *err)
{
    cuda_state *c = state;
    if (rows < 1 || cols < 1 || block_rows < 1 || block_cols < 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "cuda device %d: fp8_dequantise of [%lld, "
                            "%lld] in blocks of [%lld, %lld]", c->ordinal, (long long)rows,
                            (long long)cols, (long long)block_rows, (long long)block_cols);
    if ((dst_dtype != RP_F32 && dst_dtype != RP_BF16) || scale_dtype < RP_F32 ||
        scale_dtype > RP_F16)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "cuda device %d: fp8_dequantise with %s "
                            "scales into %s", c->ordinal, rp_dtype_name(scale_dtype),
                            rp_dtype_name(dst_dtype));
    CK(rp_cuda_fp8_dequantise(weight, scale, (int)scale_dtype, rows, cols, block_rows, block_cols,
                              dst, dst_dtype == RP_BF16, c->stream));
    return RP_OK;
}

const rp_kernel_ops rp_kernel_ops_cuda = {
    RP_CUDA_SIZING_MEMBERS,
    .linear_forward = linear_forward,
    .linear_backward_input = linear_backward_input,
    .linear_backward_weight = linear_backward_weight,
    .column_sum_accumulate = column_sum_accumulate,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .rope_table = rope_table,
    .rope_apply = rope_apply,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attention_sink_backward = attention_sink_backward,
    .swiglu_clamped_forward = swiglu_clamped_forward,
    .swiglu_clamped_backward = swiglu_clamped_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .scaled_add = scaled_add,
    .dropout = dropout,
    .moe_route = moe_route,
    .moe_group = moe_group,
    .moe_stats = moe_stats,
    .moe_gather = moe_gather,
    .moe_scatter_add = moe_scatter_add,
    .moe_combine = moe_combine,
    .moe_down_backward = moe_down_backward,
    .moe_route_backward = moe_route_backward,
    .grouped_linear_forward = grouped_linear_forward,
    .grouped_linear_backward_input = grouped_linear_backward_input,
    .grouped_linear_backward_weight = grouped_linear_backward_weight,
    .grouped_bias_forward = grouped_bias_forward,
    .grouped_bias_backward = grouped_bias_backward,
    .cross_entropy = cross_entropy,
    .sum_to_host = sum_to_host,
    .check_ids = check_ids,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .convert = convert,
    .copy = copy,
    .fp8_dequantise = fp8_dequantise,
};

/* ---- lifetime ---------------------------------------------------------- */

rp_status rp_cuda_kernels_create(int ordinal, void *stream, void *blas, rp_kernels *out,
                                 rp_error *err)
{
    out->ops = &rp_kernel_ops_cuda;
    out->state = NULL;
    out->probe = NULL;
    char why[1024];
    if (rp_cublas_open(why, sizeof why) != 0) /* the GEMMs' entry points */
        return rp_error_set(err, RP_ERR_NO_DEVICE, "GPU %d: %s", ordinal, why);
    cuda_state *c = calloc(1, sizeof *c);
    if (!c)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating the CUDA kernels' state");
    c->ordinal = ordinal;
    c->stream = stream;
    c->blas = blas;
    cudaError_t e = cudaMalloc((void **)&c->bad, sizeof *c->bad);
    if (e != cudaSuccess) {
        free(c);
        return rp_cuda_fail(ordinal, "allocating the id check's word", (int)e, err);
    }
    out->state = c;
    return RP_OK;
}

rp_status rp_cuda_kernels_choose_attention(rp_kernels *k, int mode, unsigned unproven,
                                           rp_error *err)
{
    cuda_state *c = k->state;
    int major = 0, minor = 0;
    cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c->ordinal);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, c->ordinal);
    if (e != cudaSuccess)
        return rp_cuda_fail(c->ordinal, "reading the compute capability", (int)e, err);
    char problem[640];
    const char *why = NULL;
#ifdef RP_HAVE_CUDNN
    if (mode != RP_ATTENTION_OWN && !c->cudnn_library.handle &&
        rp_cudnn_library_open(&c->cudnn_library, problem, sizeof problem) != 0)
        why = problem;
#else
    snprintf(problem, sizeof problem, "this build has no cuDNN (configure found no cudnn_graph.h)");
    why = problem;
#endif
    int use = 0;
    rp_status s = rp_attention_choose(mode, why, c->cudnn_library.version, major, minor,
                                      rp_unproven_in(unproven, RP_UNPROVEN_CUDNN), &use,
                                      c->attention_note,
                                      sizeof c->attention_note, err);
    if (s != RP_OK) { /* the attention object of an earlier choice calls into the library */
#ifdef RP_HAVE_CUDNN
        rp_cudnn_attention_destroy(&c->cudnn);
#endif
        rp_cudnn_library_close(&c->cudnn_library);
        return rp_error_prefix(err, "cuda device %d", c->ordinal);
    }
    c->attention_mode = mode;
    c->cudnn_documents = rp_unproven_in(unproven, RP_UNPROVEN_CUDNN_DOCUMENTS);
    c->fused_xent = rp_unproven_in(unproven, RP_UNPROVEN_FUSED_XENT);
    c->xent_fp32 = rp_unproven_in(unproven, RP_UNPROVEN_XENT_FP32);
    if (!rp_unproven_in(unproven, RP_UNPROVEN_GEMM_LT)) {
        if (c->gemm_lt) /* a second choice may take it back */
            cudaStreamSynchronize(c->stream);
        rp_cuda_gemm_lt_destroy(&c->gemm_lt);
    } else if (!c->gemm_lt) {
        char lwhy[256] = "";
        if (rp_cuda_gemm_lt_create(&c->gemm_lt, lwhy, sizeof lwhy) != 0)
            return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: the gemm-lt path: "
                                "%s", c->ordinal, lwhy);
    }
#ifdef RP_HAVE_CUDNN
    if (use && !c->cudnn) {
        char cwhy[256] = "";
        if (rp_cudnn_attention_create(&c->cudnn_library, c->stream, &c->cudnn, cwhy,
                                      sizeof cwhy) != 0) {
            if (mode == RP_ATTENTION_CUDNN)
                return rp_error_set(err, RP_ERR_UNSUPPORTED, "cuda device %d: --attention "
                                    "cudnn: %s", c->ordinal, cwhy);
            snprintf(c->attention_note, sizeof c->attention_note, "attention: own kernel (%s)",
                     cwhy);
        }
    }
#endif
#ifdef RP_HAVE_CUDNN
    if (c->cudnn && c->cudnn_documents) {
        size_t at = strlen(c->attention_note);
        snprintf(c->attention_note + at, sizeof c->attention_note - at,
                 "; document segments through its ragged layout where their padding fits "
                 "(cudnn-documents), else the own kernel");
    }
#endif
    if (!use) { /* a second choice may take back a first one */
#ifdef RP_HAVE_CUDNN
        rp_cudnn_attention_destroy(&c->cudnn);
#endif
        rp_cudnn_library_close(&c->cudnn_library);
    }
    return RP_OK;
}

int rp_cuda_kernels_gemm_lt_ready(const rp_kernels *k)
{
    const cuda_state *c = k ? k->state : NULL;
    return c && c->gemm_lt != NULL;
}

int rp_cuda_kernels_documents_calls(const rp_kernels *k, rp_cuda_documents_report *out)
{
    const cuda_state *c = k ? k->state : NULL;
    *out = (rp_cuda_documents_report){.first_refused = ""};
    if (!c)
        return 0;
    out->calls = c->documents_calls;
    out->through_cudnn = c->documents_cudnn_calls;
    out->first_refused = c->documents_refused;
#ifdef RP_HAVE_CUDNN
    out->graph[0] = rp_cudnn_attention_documents_graph(c->cudnn, 0);
    out->graph[1] = rp_cudnn_attention_documents_graph(c->cudnn, 1);
    return c->cudnn && c->cudnn_documents;
#else
    return 0;
#endif
}

int64_t rp_cuda_kernels_gemm_lt_products(const rp_kernels *k)
{
    const cuda_state *c = k ? k->state : NULL;
    return c ? c->gemm_lt_products : 0;
}

const char *rp_cuda_kernels_attention_note(const rp_kernels *k)
{
    const cuda_state *c = k ? k->state : NULL;
    return c && c->attention_note[0] ? c->attention_note : NULL;
}

void rp_cuda_kernels_destroy(rp_kernels *k)
{
    cuda_state *c = k ? k->state : NULL;
    if (!c)
        return;
    cudaSetDevice(c->ordinal);
    cudaStreamSynchronize(c->stream);
#ifdef RP_HAVE_CUDNN
    rp_cudnn_attention_destroy(&c->cudnn);
#endif
    rp_cudnn_library_close(&c->cudnn_library);
    rp_cuda_gemm_lt_destroy(&c->gemm_lt);
    cudaFree(c->scratch);
    cudaFree(c->bad);
    cudaFree(c->rope);
    cudaFreeHost(c->host_values);
    cudaFree(c->moe_scratch);
    free(c);
    k->state = NULL;
}
