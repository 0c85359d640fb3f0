/* The CUDA back end of the device interface (backend.h). Device memory is
 * cudaMalloc'ed once per buffer when the engine sizes its executor (it does
 * so once, from the plan, so nothing is allocated in the steady state);
 * copies run on their own stream, complete on return; the layer math runs
 * on one compute stream with cuBLAS bf16 GEMMs (fp32 compute) and the
 * kernels of src/kernels/cuda, and every layer call waits for its stream
 * before returning, so a copy issued afterwards by the transfer engine's
 * thread sees finished results.
 *
 * Numerics: the engine hands fp32 weights and activations; GEMM operands are
 * rounded to bf16 (weights into a bf16 shadow in the workspace at every
 * call, activations by the kernel that produces them), products accumulate
 * in fp32, gradients accumulate in fp32. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "device/cuda_impl.h"
#include "kernels/cuda/embed.h"
#include "kernels/cuda/rope.h"

rp_status rp_cuda_be_enter(cuda_impl *c, rp_error *err)
{
    cudaError_t e = cudaSetDevice(c->ordinal);
    if (e != cudaSuccess)
        return rp_cuda_be_fail(c, "cudaSetDevice", (int)e, err);
    return RP_OK;
}

rp_status rp_cuda_be_fail(const cuda_impl *c, const char *what, int cuda_error, rp_error *err)
{
    cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: %s: %s", c ? c->ordinal : -1, what,
                        cudaGetErrorString((cudaError_t)cuda_error));
}

rp_status rp_cuda_be_fail_blas(const cuda_impl *c, const char *what, int status, rp_error *err)
{
    return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: %s: cuBLAS %s", c ? c->ordinal : -1,
                        what, cublasGetStatusString((cublasStatus_t)status));
}

rp_status rp_cuda_be_sync(cuda_impl *c, const char *what, rp_error *err)
{
    cudaError_t e = cudaStreamSynchronize(c->compute);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e != cudaSuccess)
        return rp_cuda_be_fail(c, what, (int)e, err);
    return RP_OK;
}

rp_status rp_cuda_be_scratch(cuda_impl *c, size_t bytes, void **out, rp_error *err)
{
    if (bytes > c->scratch_bytes) {
        /* the old scratch may still be read by queued work */
        RP_TRY(rp_cuda_be_sync(c, "growing the scratch", err));
        cudaFree(c->scratch);
        c->scratch = NULL;
        c->scratch_bytes = 0;
        cudaError_t e = cudaMalloc(&c->scratch, bytes);
        if (e != cudaSuccess) {
            size_t fr = 0, tot = 0;
            cudaGetLastError();
            cudaMemGetInfo(&fr, &tot);
            return rp_error_set(err, RP_ERR_DEVICE_MEMORY,
                                "cuda device %d: back-end scratch of %zu bytes does not fit "
                                "(%zu bytes free of %zu)",
                                c->ordinal, bytes, fr, tot);
        }
        c->scratch_bytes = bytes;
    }
    *out = c->scratch;
    return RP_OK;
}

rp_status rp_cuda_be_check_ids(cuda_impl *c, const int32_t *ids, const uint8_t *mask, int64_t T,
                               int64_t limit, const char *what, const char *kind, rp_error *err)
{
    if (T <= 0)
        return RP_OK;
    RP_CK(c, rp_cuda_tokens_first_bad(ids, mask, T, limit, c->bad, c->compute), err);
    unsigned long long bad = 0;
    cudaError_t e = cudaMemcpyAsync(&bad, c->bad, sizeof bad, cudaMemcpyDeviceToHost, c->compute);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->compute);
    if (e != cudaSuccess)
        return rp_cuda_be_fail(c, what, (int)e, err);
    if (bad == ~0ULL)
        return RP_OK;
    int32_t v = 0;
    e = cudaMemcpy(&v, ids + bad, sizeof v, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return rp_cuda_be_fail(c, what, (int)e, err);
    return rp_error_set(err, RP_ERR_RANGE,
                        "%s: %s %d at position %llu is outside the vocabulary [0, %lld)", what,
                        kind, (int)v, bad, (long long)limit);
}

rp_status rp_cuda_be_rope(cuda_impl *c, const rp_model_config *cfg, int64_t seqlen,
                          const float **table, rp_error *err)
{
    const int64_t half = cfg->head_dim / 2;
    if (half < 1 || half > RP_CUDA_ROPE_MAX_HALF)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "cuda device %d: head_dim %lld (at most %d)",
                            c->ordinal, (long long)cfg->head_dim, 2 * RP_CUDA_ROPE_MAX_HALF);
    float inv[RP_CUDA_ROPE_MAX_HALF];
    rp_model_rope_inv_freq(cfg, inv);
    if (c->rope && c->rope_seqlen == seqlen && c->rope_half == (int)half &&
        memcmp(inv, c->rope_inv, sizeof(float) * (size_t)half) == 0) {
        *table = c->rope;
        return RP_OK;
    }
    /* a new shape: queued work may still read the old table */
    RP_TRY(rp_cuda_be_sync(c, "replacing the RoPE table", err));
    size_t need = (size_t)(seqlen * 2 * half + half);
    if (need > c->rope_floats) {
        cudaFree(c->rope);
    cudaFreeHost(c->head_losses);
        c->rope = NULL;
        c->rope_floats = 0;
        cudaError_t e = cudaMalloc((void **)&c->rope, need * sizeof(float));
        if (e != cudaSuccess)
            return rp_cuda_be_fail(c, "allocating the RoPE table", (int)e, err);
        c->rope_floats = need;
    }
    float *dinv = c->rope + seqlen * 2 * half;
    cudaError_t e = cudaMemcpy(dinv, inv, sizeof(float) * (size_t)half, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
        return rp_cuda_be_fail(c, "uploading inv_freq", (int)e, err);
    RP_CK(c, rp_cuda_rope_table(c->rope, dinv, seqlen, half, c->compute), err);
    c->rope_seqlen = seqlen;
    c->rope_half = (int)half;
    memcpy(c->rope_inv, inv, sizeof(float) * (size_t)half);
    *table = c->rope;
    return RP_OK;
}

/* ---- lifetime, memory, copies ----------------------------------------- */

static void cuda_destroy(void *impl)
{
    cuda_impl *c = impl;
    if (!c)
        return;
    cudaSetDevice(c->ordinal);
    if (c->compute)
        cudaStreamSynchronize(c->compute);
    if (c->blas)
        cublasDestroy(c->blas);
    cudaFree(c->scratch);
    cudaFree(c->bad);
    cudaFree(c->rope);
    if (c->compute)
        cudaStreamDestroy(c->compute);
    if (c->copy)
        cudaStreamDestroy(c->copy);
    free(c);
}

static rp_status cuda_create(const rp_device_params *params, void **impl, rp_error *err)
{
    *impl = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        cudaGetLastError();
        return rp_error_set(err, RP_ERR_NO_DEVICE, "no CUDA device: %s",
                            e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
    }
    if (params->ordinal < 0 || params->ordinal >= n)
        return rp_error_set(err, RP_ERR_NO_DEVICE,
                            "cuda device %d requested but %d device(s) are visible",
                            params->ordinal, n);
    cuda_impl *c = calloc(1, sizeof *c);
    if (!c)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating the CUDA back end");
    c->ordinal = params->ordinal;
    rp_status s = rp_cuda_be_enter(c, err);
    const char *step = NULL;
    if (s == RP_OK) {
        if ((e = cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking)) != cudaSuccess)
            step = "creating the compute stream";
        else if ((e = cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking)) != cudaSuccess)
            step = "creating the copy stream";
        else if ((e = cudaMalloc((void **)&c->bad, sizeof *c->bad)) != cudaSuccess)
            step = "allocating the token check word";
        if (step)
            s = rp_cuda_be_fail(c, step, (int)e, err);
    }
    if (s == RP_OK) {
        cublasStatus_t b = cublasCreate(&c->blas);
        if (b == CUBLAS_STATUS_SUCCESS)
            b = cublasSetStream(c->blas, c->compute);
        if (b != CUBLAS_STATUS_SUCCESS)
            s = rp_cuda_be_fail_blas(c, "creating the cuBLAS handle", (int)b, err);
    }
    if (s != RP_OK) {
        cuda_destroy(c);
        return s;
    }
    *impl = c;
    return RP_OK;
}

static rp_status cuda_alloc(void *impl, size_t bytes, void **out, rp_error *err)
{
    cuda_impl *c = impl;
    *out = NULL;
    RP_TRY(rp_cuda_be_enter(c, err));
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        *out = NULL;
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return rp_error_set(err, RP_ERR_DEVICE_MEMORY,
                            "cuda device %d: cannot allocate %zu bytes (%zu bytes free of %zu): %s",
                            c->ordinal, bytes, fr, tot, cudaGetErrorString(e));
    }
    return RP_OK;
}

static void cuda_free(void *impl, void *p)
{
    cuda_impl *c = impl;
    cudaSetDevice(c->ordinal);
    /* cudaFree waits for the device; nothing queued may still use p */
    cudaFree(p);
}

static rp_status cuda_memset0(void *impl, void *p, size_t bytes, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(rp_cuda_be_enter(c, err));
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, c->compute);
    if (e != cudaSuccess)
        return rp_cuda_be_fail(c, "cudaMemsetAsync", (int)e, err);
    return rp_cuda_be_sync(c, "memset", err);
}

static rp_status cuda_copy(void *impl, void *dst, const void *src, size_t bytes, rp_error *err)
{
    cuda_impl *c = impl;
    if (bytes == 0 || dst == src)
        return RP_OK;
    RP_TRY(rp_cuda_be_enter(c, err));
    /* cudaMemcpyDefault: the direction follows from the pointers (UVA);
     * pinned host memory (the registered host store) goes by DMA at full
     * speed, pageable memory through the driver's staging buffers */
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->copy);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->copy);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return rp_error_set(err, RP_ERR_CUDA, "cuda device %d: copying %zu bytes %p -> %p: %s",
                            c->ordinal, bytes, src, dst, cudaGetErrorString(e));
    }
    return RP_OK;
}

/* ---- embedding ---------------------------------------------------------- */

static rp_status cuda_host_register(void *impl, void *p, size_t bytes, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(rp_cuda_be_enter(c, err));
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        rp_cuda_be_fail(c, "cudaHostRegister of the host store", (int)e, err);
        return rp_error_prefix(err, "pinning %zu bytes", bytes);
    }
    return RP_OK;
}

static void cuda_host_unregister(void *impl, void *p)
{
    cuda_impl *c = impl;
    cudaSetDevice(c->ordinal);
    cudaHostUnregister(p);
}

static rp_status cuda_embed_forward(void *impl, const rp_model_config *cfg, const float *W,
                                    const int32_t *tokens, int64_t T, float *out, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(rp_cuda_be_enter(c, err));
    RP_TRY(rp_cuda_be_check_ids(c, tokens, NULL, T, cfg->vocab_size, "embedding forward", "token",
                                err));
    RP_CK(c, rp_cuda_embed_forward(W, tokens, T, cfg->hidden_size, out, c->compute), err);
    return rp_cuda_be_sync(c, "embedding forward", err);
}

static rp_status cuda_embed_backward(void *impl, const rp_model_config *cfg, const int32_t *tokens,
                                     int64_t T, const float *dout, float *dW, rp_error *err)
{
    cuda_impl *c = impl;
    RP_TRY(rp_cuda_be_enter(c, err));
    RP_TRY(rp_cuda_be_check_ids(c, tokens, NULL, T, cfg->vocab_size, "embedding backward",
                                "token", err));
    if (T <= 0)
        return RP_OK;
    size_t bytes = 0;
    RP_CK(c, rp_cuda_embed_backward_scratch(T, cfg->vocab_size, &bytes), err);
    void *scratch = NULL;
    RP_TRY(rp_cuda_be_scratch(c, bytes, &scratch, err));
    RP_CK(c,
          rp_cuda_embed_backward(tokens, T, cfg->hidden_size, cfg->vocab_size, dout, dW, scratch,
                                 bytes, c->compute),
          err);
    return rp_cuda_be_sync(c, "embedding backward", err);
}

/* ---- blocks and head ---------------------------------------------------- */

static size_t cuda_workspace_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    size_t b = rp_cuda_be_block_ws_floats(cfg, nseq, seqlen);
    size_t h = rp_cuda_be_head_ws_floats(cfg, nseq * seqlen);
    return b > h ? b : h;
}

static rp_status cuda_block_forward(void *impl, const rp_model_config *cfg, const float *params,
                                    const float *x, float *y, int64_t nseq, int64_t seqlen,
                                    float *saved, float *ws, rp_error *err)
{
    return rp_cuda_be_block_forward(impl, cfg, params, x, y, nseq, seqlen, saved, ws, err);
}

static rp_status cuda_block_backward(void *impl, const rp_model_config *cfg, const float *params,
                                     const float *x, float *saved, const float *dy, float *dx,
                                     float *dparams, int64_t nseq, int64_t seqlen, float *ws,
                                     rp_error *err)
{
    return rp_cuda_be_block_backward(impl, cfg, params, x, saved, dy, dx, dparams, nseq, seqlen,
                                     ws, err);
}

static rp_status cuda_head(void *impl, const rp_model_config *cfg, const float *norm_w,
                           const float *lm_w, const float *x, const int32_t *targets,
                           const uint8_t *mask, int64_t T, float scale, float *dx, float *dnorm_w,
                           float *dlm_w, float *ws, double *loss_sum, rp_error *err)
{
    return rp_cuda_be_head(impl, cfg, norm_w, lm_w, x, targets, mask, T, scale, dx, dnorm_w,
                           dlm_w, ws, loss_sum, err);
}

const rp_device_ops rp_device_ops_cuda = {
    .name = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset0 = cuda_memset0,
    .copy = cuda_copy,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .embed_forward = cuda_embed_forward,
    .embed_backward = cuda_embed_backward,
    .workspace_floats = cuda_workspace_floats,
    .saved_floats = rp_cuda_be_block_saved_floats,
    .block_forward = cuda_block_forward,
    .block_backward = cuda_block_backward,
    .head_forward_backward = cuda_head,
};
