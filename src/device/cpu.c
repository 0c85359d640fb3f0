/* The CPU back end of the device interface: device memory is private host
 * memory, copies are memcpy, and the layers are the fp32 CPU layer math. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "model/layers.h"

struct rp_device {
    rp_device_params params;
    char name[32];
};

rp_status rp_device_create(const rp_device_params *params, rp_device **out, rp_error *err)
{
    *out = NULL;
    if (params->kind != RP_DEVICE_CPU)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "the %s executor is not in this build "
                            "(use --device cpu)", rp_device_kind_name(params->kind));
    rp_device *d = calloc(1, sizeof *d);
    if (!d)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating the device");
    d->params = *params;
    snprintf(d->name, sizeof d->name, "cpu (%d thread%s)", params->threads,
             params->threads == 1 ? "" : "s");
    *out = d;
    return RP_OK;
}

void rp_device_destroy(rp_device **dev)
{
    if (dev && *dev) {
        free(*dev);
        *dev = NULL;
    }
}

const char *rp_device_name(const rp_device *dev)
{
    return dev->name;
}

rp_status rp_device_alloc(rp_device *dev, size_t bytes, void **out, rp_error *err)
{
    (void)dev;
    *out = NULL;
    if (posix_memalign(out, 64, bytes ? bytes : 64) != 0) {
        *out = NULL;
        return rp_error_set(err, RP_ERR_DEVICE_MEMORY, "cpu device: cannot allocate %zu bytes",
                            bytes);
    }
    return RP_OK;
}

void rp_device_free(rp_device *dev, void *p)
{
    (void)dev;
    free(p);
}

rp_status rp_device_memset0(rp_device *dev, void *p, size_t bytes, rp_error *err)
{
    (void)dev, (void)err;
    memset(p, 0, bytes);
    return RP_OK;
}

rp_status rp_device_copy(rp_device *dev, void *dst, const void *src, size_t bytes, rp_error *err)
{
    (void)dev, (void)err;
    if (dst != src)
        memcpy(dst, src, bytes);
    return RP_OK;
}

rp_status rp_device_embed_forward(rp_device *dev, const rp_model_config *cfg, const float *W,
                                  const int32_t *tokens, int64_t T, float *out, rp_error *err)
{
    (void)dev;
    return rp_embed_forward(cfg, W, tokens, T, out, err);
}

rp_status rp_device_embed_backward(rp_device *dev, const rp_model_config *cfg,
                                   const int32_t *tokens, int64_t T, const float *dout, float *dW,
                                   rp_error *err)
{
    (void)dev;
    return rp_embed_backward(cfg, tokens, T, dout, dW, err);
}

size_t rp_device_workspace_floats(const rp_device *dev, const rp_model_config *cfg, int64_t nseq,
                                  int64_t seqlen)
{
    (void)dev;
    size_t b = rp_block_workspace_floats(cfg, nseq, seqlen);
    size_t h = rp_head_workspace_floats(cfg, nseq * seqlen, RP_HEAD_CHUNK);
    return b > h ? b : h;
}

rp_status rp_device_block_forward(rp_device *dev, const rp_model_config *cfg, const float *params,
                                  const float *x, float *y, int64_t nseq, int64_t seqlen,
                                  float *ws, rp_error *err)
{
    (void)dev, (void)err;
    rp_block_forward(cfg, params, x, y, nseq, seqlen, ws);
    return RP_OK;
}

rp_status rp_device_block_backward(rp_device *dev, const rp_model_config *cfg,
                                   const float *params, const float *x, const float *dy, float *dx,
                                   float *dparams, int64_t nseq, int64_t seqlen, float *ws,
                                   rp_error *err)
{
    (void)dev, (void)err;
    rp_block_backward(cfg, params, x, dy, dx, dparams, nseq, seqlen, ws);
    return RP_OK;
}

rp_status rp_device_head_forward_backward(rp_device *dev, const rp_model_config *cfg,
                                          const float *norm_w, const float *lm_w, const float *x,
                                          const int32_t *targets, const uint8_t *mask, int64_t T,
                                          float scale, float *dx, float *dnorm_w, float *dlm_w,
                                          float *ws, double *loss_sum, rp_error *err)
{
    (void)dev;
    return rp_head_forward_backward(cfg, norm_w, lm_w, x, targets, mask, T, scale, dx, dnorm_w,
                                    dlm_w, RP_HEAD_CHUNK, ws, loss_sum, NULL, err);
}
