/* The CPU back end of the device interface: device memory is private host
 * memory, copies are memcpy, and the layers are the fp32 CPU layer math. */
#include <stdlib.h>
#include <string.h>

#include "device/backend_impl.h"
#include "model/layers.h"

static rp_status cpu_create(const rp_device_params *params, void **impl, rp_error *err)
{
    (void)params, (void)err;
    *impl = NULL; /* no state: the layer math uses the OpenMP threads of the caller */
    return RP_OK;
}

static void cpu_destroy(void *impl)
{
    (void)impl;
}

static rp_status cpu_alloc(void *impl, size_t bytes, void **out, rp_error *err)
{
    (void)impl;
    *out = NULL;
    if (posix_memalign(out, 64, bytes ? bytes : 64) != 0) {
        *out = NULL;
        return rp_error_set(err, RP_ERR_DEVICE_MEMORY, "cpu device: cannot allocate %zu bytes",
                            bytes);
    }
    return RP_OK;
}

static void cpu_free(void *impl, void *p)
{
    (void)impl;
    free(p);
}

static rp_status cpu_memset0(void *impl, void *p, size_t bytes, rp_error *err)
{
    (void)impl, (void)err;
    memset(p, 0, bytes);
    return RP_OK;
}

static rp_status cpu_copy(void *impl, void *dst, const void *src, size_t bytes, rp_error *err)
{
    (void)impl, (void)err;
    if (dst != src)
        memcpy(dst, src, bytes);
    return RP_OK;
}

static rp_status cpu_embed_forward(void *impl, const rp_model_config *cfg, const float *W,
                                   const int32_t *tokens, int64_t T, float *out, rp_error *err)
{
    (void)impl;
    return rp_embed_forward(cfg, W, tokens, T, out, err);
}

static rp_status cpu_embed_backward(void *impl, const rp_model_config *cfg, const int32_t *tokens,
                                    int64_t T, const float *dout, float *dW, rp_error *err)
{
    (void)impl;
    return rp_embed_backward(cfg, tokens, T, dout, dW, err);
}

static size_t cpu_workspace_floats(const rp_model_config *cfg, int64_t nseq, int64_t seqlen)
{
    size_t b = rp_block_workspace_floats(cfg, nseq, seqlen);
    size_t h = rp_head_workspace_floats(cfg, nseq * seqlen, RP_HEAD_CHUNK);
    return b > h ? b : h;
}

static rp_status cpu_block_forward(void *impl, const rp_model_config *cfg, const float *params,
                                   const float *x, float *y, int64_t nseq, int64_t seqlen,
                                   float *saved, float *ws, rp_error *err)
{
    (void)impl, (void)err;
    rp_block_forward(cfg, params, x, y, nseq, seqlen, saved, ws);
    return RP_OK;
}

static rp_status cpu_block_backward(void *impl, const rp_model_config *cfg, const float *params,
                                    const float *x, float *saved, const float *dy, float *dx,
                                    float *dparams, int64_t nseq, int64_t seqlen, float *ws,
                                    rp_error *err)
{
    (void)impl, (void)err;
    rp_block_backward(cfg, params, x, saved, dy, dx, dparams, nseq, seqlen, ws);
    return RP_OK;
}

static rp_status cpu_head(void *impl, const rp_model_config *cfg, const float *norm_w,
                          const float *lm_w, const float *x, const int32_t *targets,
                          const uint8_t *mask, int64_t T, float scale, float *dx, float *dnorm_w,
                          float *dlm_w, float *ws, double *loss_sum, rp_error *err)
{
    (void)impl;
    return rp_head_forward_backward(cfg, norm_w, lm_w, x, targets, mask, T, scale, dx, dnorm_w,
                                    dlm_w, RP_HEAD_CHUNK, ws, loss_sum, NULL, err);
}

const rp_device_ops rp_device_ops_cpu = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .copy = cpu_copy,
    .embed_forward = cpu_embed_forward,
    .embed_backward = cpu_embed_backward,
    .workspace_floats = cpu_workspace_floats,
    .saved_floats = rp_block_saved_floats,
    .block_forward = cpu_block_forward,
    .block_backward = cpu_block_backward,
    .head_forward_backward = cpu_head,
};
