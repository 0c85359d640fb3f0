/* The CUDA table of kernel ops (src/kernels/ops.h), built on the kernels of
 * this directory and cuBLAS: bf16 compute dtype (GEMM operands and attention
 * inputs), fp32 accumulation, every op queued on one stream in call order.
 * C header; the state is created by the CUDA device back end
 * (src/device/cuda.c), which owns the stream and the cuBLAS handle. */
#ifndef RP_KERNELS_CUDA_OPS_H
#define RP_KERNELS_CUDA_OPS_H

#include "core/error.h"
#include "kernels/ops.h"

extern const rp_kernel_ops rp_kernel_ops_cuda;

/* The table's state for device `ordinal`: ops go to `stream` (a
 * cudaStream_t) and GEMMs to `blas` (a cublasHandle_t bound to that
 * stream); both stay the caller's. Allocates the few words the ops keep
 * (the id check's result, the RoPE table, the losses' pinned host buffer)
 * once, growing them only when a shape grows. */
rp_status rp_cuda_kernels_create(int ordinal, void *stream, void *blas, rp_kernels *out,
                                 rp_error *err);
/* Chooses the table's attention (--attention; kernels/attention_choice.h):
 * opens cuDNN (kernels/cudnn_loader.h) unless `mode` is own, and with
 * cudnn chosen routes attention_forward/backward through cuDNN's fused
 * flash SDPA (kernels/cuda/cudnn_attention.h) for every shape it takes,
 * the own kernel for the rest. Without this call the table runs the own
 * kernel. unproven: the CUDA paths on (core/unproven.h: bit 1u <<
 * rp_unproven): cudnn lets auto take cuDNN; fused-xent lets cross_entropy
 * write the bf16 gradient in its own pass (without it, in place then
 * converted: the same bits); gemm-lt sends linear_forward into an fp32 y through cuBLASLt, the
 * residual and the bias in the GEMM's epilogue (kernels/cuda/gemm_lt.h; its
 * handle and workspace made here, once; a product into y_compute alone
 * stays cuBLAS's bf16-output GEMM, with nothing for an epilogue to add).
 * Calls over document segments take the own kernel unless the
 * cudnn-documents path of unproven is on (then cuDNN's ragged layout where
 * they fit: kernels/attn_documents.h). RP_ERR_UNSUPPORTED when cudnn was asked for
 * and cannot run; RP_ERR_CUDA when cuBLASLt's state cannot be made. */
rp_status rp_cuda_kernels_choose_attention(rp_kernels *k, int mode, unsigned unproven,
                                           rp_error *err);
/* Whether the gemm-lt path (core/unproven.h) set up cuBLASLt for linear_forward. */
int rp_cuda_kernels_gemm_lt_ready(const rp_kernels *k);
/* How many linear_forward calls cuBLASLt has computed (gemm-lt; the
 * others went through cuBLAS), for tests and the run's last log line. */
int64_t rp_cuda_kernels_gemm_lt_products(const rp_kernels *k);
/* The attention calls (forward and backward) over document segments
 * (the cudnn-documents path), for tests and the run's last log line. */
#define RP_DOCUMENTS_REFUSED_MAX 1280
typedef struct rp_cuda_documents_report {
    int64_t calls;             /* over documents, forward and backward */
    int64_t through_cudnn;     /* of them, those cuDNN ran */
    const char *first_refused; /* why cuDNN refused the first it did not run ("" while none;
                                  at most RP_DOCUMENTS_REFUSED_MAX bytes) */
    const char *graph[2];      /* how the forward's and the backward's graphs cuDNN ran
                                  are written (rp_cudnn_attention_documents_graph; NULL
                                  before one) */
} rp_cuda_documents_report;
/* Fills *out; returns whether the path is on with cuDNN chosen. */
int rp_cuda_kernels_documents_calls(const rp_kernels *k, rp_cuda_documents_report *out);
/* The choice's line for the run's log ("attention: ..."). */
const char *rp_cuda_kernels_attention_note(const rp_kernels *k);

/* Waits for the stream and frees the state; out->state becomes NULL. */
void rp_cuda_kernels_destroy(rp_kernels *k);

/* RP_ERR_CUDA naming the device, the step and the runtime's (or cuBLAS's)
 * message; clears a non-sticky error first. */
rp_status rp_cuda_fail(int ordinal, const char *what, int cuda_error, rp_error *err);
rp_status rp_cuda_fail_blas(int ordinal, const char *what, int blas_status, rp_error *err);

/* "" or, for an error a kernel's fault leaves behind (an illegal address,
 * a launch failure, ...: sticky, reported by whichever CUDA call comes
 * next), a sentence for the message saying so and how to find the kernel. */
const char *rp_cuda_error_hint(int cuda_error);

#endif
