/* State and helpers shared by the files of the CUDA back end (cuda.c,
 * cuda_block.c, cuda_head.c, cuda_glue.c). Only built with CUDA. */
#ifndef RP_DEVICE_CUDA_IMPL_H
#define RP_DEVICE_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "device/backend_impl.h"
#include "model/layers.h"

#define RP_CUDA_ROPE_MAX_HALF 1024 /* head_dim up to 2048 */

typedef struct cuda_impl {
    int ordinal;
    cudaStream_t compute; /* every layer call, in call order */
    cudaStream_t copy;    /* rp_device_copy (the transfer engine's thread) */
    cublasHandle_t blas;  /* bound to `compute` */
    /* back-end scratch (token checks, the embedding sort): grown on first
     * use, so the steady state allocates nothing */
    void *scratch;
    size_t scratch_bytes;
    unsigned long long *bad; /* device word of rp_cuda_tokens_first_bad */
    /* RoPE: the cos/sin table [seqlen, head_dim] (then inv_freq) of the last
     * shape asked for, made once and kept (rp_cuda_be_rope) */
    float *rope;
    size_t rope_floats;
    int64_t rope_seqlen;
    int rope_half;
    float rope_inv[RP_CUDA_ROPE_MAX_HALF];
    /* the head's per-token losses on the host (pinned), grown on first use */
    double *head_losses;
    size_t head_losses_n;
} cuda_impl;

/* The RoPE table of cfg (llama3 scaling included: inv_freq from the host
 * code the CPU layers use) for sequences of seqlen tokens, on the device:
 * built on the first call for a shape and kept, so the steady state makes
 * and uploads nothing. */
rp_status rp_cuda_be_rope(cuda_impl *c, const rp_model_config *cfg, int64_t seqlen,
                          const float **table, rp_error *err);

/* Make `impl`'s device current for this thread (the engine may call from
 * more than one thread). */
rp_status rp_cuda_be_enter(cuda_impl *c, rp_error *err);

/* RP_ERR_CUDA naming the device, the step and the runtime's message. */
rp_status rp_cuda_be_fail(const cuda_impl *c, const char *what, int cuda_error, rp_error *err);
rp_status rp_cuda_be_fail_blas(const cuda_impl *c, const char *what, int status, rp_error *err);

/* Wait for the compute stream, then report any asynchronous error. */
rp_status rp_cuda_be_sync(cuda_impl *c, const char *what, rp_error *err);

/* scratch of at least `bytes` (contents not kept when it grows). */
rp_status rp_cuda_be_scratch(cuda_impl *c, size_t bytes, void **out, rp_error *err);

/* RP_ERR_RANGE naming the first position (counted by mask when non-NULL)
 * whose id is outside [0, limit); `what` names the layer and `kind` the
 * ids ("token", "target"), as the CPU layer messages do. */
rp_status rp_cuda_be_check_ids(cuda_impl *c, const int32_t *ids, const uint8_t *mask, int64_t T,
                               int64_t limit, const char *what, const char *kind, rp_error *err);

/* Floats of a bf16 array of n elements rounded up to the workspace
 * granule (16 floats = 64 bytes), and of an fp32 array. */
static inline size_t rp_cuda_be_bf16_floats(size_t n)
{
    return ((n + 1) / 2 + 15) / 16 * 16;
}
static inline size_t rp_cuda_be_f32_floats(size_t n)
{
    return (n + 15) / 16 * 16;
}

/* Guard bands, for tests: with rp_cuda_be_guard_floats > 0 (set before
 * sizing and never changed while buffers of that size exist), every slice
 * of a block's saved area and scratch is followed by that many floats no
 * kernel may write; rp_cuda_be_block_guards lists where they are (area 0:
 * saved, 1: scratch; offsets in floats), so a test that poisoned both
 * areas can check that nothing ran past its slice. */
#define RP_CUDA_MAX_GUARDS 64
typedef struct rp_cuda_guards {
    int n;
    int area[RP_CUDA_MAX_GUARDS];
    size_t at[RP_CUDA_MAX_GUARDS];
} rp_cuda_guards;
extern size_t rp_cuda_be_guard_floats;
void rp_cuda_be_block_guards(const rp_model_config *cfg, int64_t nseq, int64_t seqlen,
                             rp_cuda_guards *out);

/* Layer math (cuda_block.c, cuda_head.c); a block's forward keeps what
 * its backward needs in `saved`, as the CPU block does (model/layers.h). */
size_t rp_cuda_be_block_ws_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen);
size_t rp_cuda_be_block_saved_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen);
rp_status rp_cuda_be_block_forward(cuda_impl *c, const rp_model_config *cfg, const float *params,
                                   const float *x, float *y, int64_t nseq, int64_t seqlen,
                                   float *saved, float *ws, rp_error *err);
rp_status rp_cuda_be_block_backward(cuda_impl *c, const rp_model_config *cfg,
                                    const float *params, const float *x, float *saved,
                                    const float *dy, float *dx, float *dparams, int64_t nseq,
                                    int64_t seqlen, float *ws, rp_error *err);
size_t rp_cuda_be_head_ws_floats(const rp_model_config *cfg, int64_t T);
int64_t rp_cuda_be_head_chunk(const rp_model_config *cfg, int64_t T);
rp_status rp_cuda_be_head(cuda_impl *c, const rp_model_config *cfg, const float *norm_w,
                          const float *lm_w, const float *x, const int32_t *targets,
                          const uint8_t *mask, int64_t T, float scale, float *dx, float *dnorm_w,
                          float *dlm_w, float *ws, double *loss_sum, rp_error *err);

/* Attention and cross-entropy of src/kernels/cuda/{attention,xent}.h
 * (cuda_glue.c); the attention scratch holds delta = rowsum(dout * o). */
size_t rp_cuda_be_attn_scratch_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen);
rp_status rp_cuda_be_attn_forward(cuda_impl *c, const rp_model_config *cfg, int64_t nseq,
                                  int64_t seqlen, const uint16_t *q, const uint16_t *k,
                                  const uint16_t *v, uint16_t *o, float *lse, rp_error *err);
rp_status rp_cuda_be_attn_backward(cuda_impl *c, const rp_model_config *cfg, int64_t nseq,
                                   int64_t seqlen, const uint16_t *q, const uint16_t *k,
                                   const uint16_t *v, const uint16_t *o, const float *lse,
                                   const uint16_t *dout, float *dq, float *dk, float *dv,
                                   float *scratch, rp_error *err);
rp_status rp_cuda_be_xent(cuda_impl *c, float *logits, int64_t rows, int64_t vocab,
                          const int32_t *targets, const uint8_t *counted, float scale,
                          double *loss, int grad, rp_error *err);

/* Evaluate a kernel entry point (returns a cudaError_t) and fail with its
 * name. */
#define RP_CK(c, call, err)                                                    \
    do {                                                                       \
        int rp_ck_e_ = (call);                                                 \
        if (rp_ck_e_ != 0)                                                     \
            return rp_cuda_be_fail((c), #call, rp_ck_e_, (err));               \
    } while (0)
#define RP_CKB(c, call, err)                                                   \
    do {                                                                       \
        int rp_ck_e_ = (call);                                                 \
        if (rp_ck_e_ != 0)                                                     \
            return rp_cuda_be_fail_blas((c), #call, rp_ck_e_, (err));          \
    } while (0)

#endif
