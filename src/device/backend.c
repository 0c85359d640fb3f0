/* Dispatch of the device interface to the back end chosen at creation. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "device/backend_impl.h"

struct rp_device {
    const rp_device_ops *ops;
    void *impl;
    char name[64];
};

static const rp_device_ops *ops_of(rp_device_kind kind)
{
    if (kind == RP_DEVICE_CPU)
        return &rp_device_ops_cpu;
#ifdef RP_HAVE_CUDA_EXECUTOR /* defined once src/device/cuda.c is built */
    if (kind == RP_DEVICE_CUDA)
        return &rp_device_ops_cuda;
#endif
    return NULL;
}

rp_status rp_device_create(const rp_device_params *params, rp_device **out, rp_error *err)
{
    *out = NULL;
    const rp_device_ops *ops = ops_of(params->kind);
    if (!ops)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "no %s back end in this build",
                            rp_device_kind_name(params->kind));
    rp_device *d = calloc(1, sizeof *d);
    if (!d)
        return rp_error_set(err, RP_ERR_NOMEM, "allocating the device");
    d->ops = ops;
    rp_status s = ops->create(params, &d->impl, err);
    if (s != RP_OK) {
        free(d);
        return s;
    }
    snprintf(d->name, sizeof d->name, "%s %d", ops->name, params->ordinal);
    *out = d;
    return RP_OK;
}

void rp_device_destroy(rp_device **dev)
{
    if (!dev || !*dev)
        return;
    (*dev)->ops->destroy((*dev)->impl);
    free(*dev);
    *dev = NULL;
}

const char *rp_device_name(const rp_device *dev)
{
    return dev->name;
}

rp_status rp_device_alloc(rp_device *dev, size_t bytes, void **out, rp_error *err)
{
    return dev->ops->alloc(dev->impl, bytes, out, err);
}

void rp_device_free(rp_device *dev, void *p)
{
    if (p)
        dev->ops->free(dev->impl, p);
}

rp_status rp_device_memset0(rp_device *dev, void *p, size_t bytes, rp_error *err)
{
    return dev->ops->memset0(dev->impl, p, bytes, err);
}

rp_status rp_device_copy(rp_device *dev, void *dst, const void *src, size_t bytes, rp_error *err)
{
    return dev->ops->copy(dev->impl, dst, src, bytes, err);
}

rp_status rp_device_host_register(rp_device *dev, void *p, size_t bytes, rp_error *err)
{
    return dev->ops->host_register ? dev->ops->host_register(dev->impl, p, bytes, err) : RP_OK;
}

void rp_device_host_unregister(rp_device *dev, void *p)
{
    if (dev->ops->host_unregister)
        dev->ops->host_unregister(dev->impl, p);
}

rp_status rp_device_embed_forward(rp_device *dev, const rp_model_config *cfg, const float *W,
                                  const int32_t *tokens, int64_t T, float *out, rp_error *err)
{
    return dev->ops->embed_forward(dev->impl, cfg, W, tokens, T, out, err);
}

rp_status rp_device_embed_backward(rp_device *dev, const rp_model_config *cfg,
                                   const int32_t *tokens, int64_t T, const float *dout, float *dW,
                                   rp_error *err)
{
    return dev->ops->embed_backward(dev->impl, cfg, tokens, T, dout, dW, err);
}

size_t rp_device_workspace_floats(rp_device_kind kind, const rp_model_config *cfg, int64_t nseq,
                                  int64_t seqlen)
{
    const rp_device_ops *ops = ops_of(kind);
    return ops ? ops->workspace_floats(cfg, nseq, seqlen) : 0;
}

size_t rp_device_saved_floats(rp_device_kind kind, const rp_model_config *cfg, int64_t nseq,
                              int64_t seqlen)
{
    const rp_device_ops *ops = ops_of(kind);
    return ops ? ops->saved_floats(cfg, nseq, seqlen) : 0;
}

rp_status rp_device_block_forward(rp_device *dev, const rp_model_config *cfg, const float *params,
                                  const float *x, float *y, int64_t nseq, int64_t seqlen,
                                  float *saved, float *ws, rp_error *err)
{
    return dev->ops->block_forward(dev->impl, cfg, params, x, y, nseq, seqlen, saved, ws, err);
}

rp_status rp_device_block_backward(rp_device *dev, const rp_model_config *cfg,
                                   const float *params, const float *x, float *saved,
                                   const float *dy, float *dx, float *dparams, int64_t nseq,
                                   int64_t seqlen, float *ws, rp_error *err)
{
    return dev->ops->block_backward(dev->impl, cfg, params, x, saved, dy, dx, dparams, nseq,
                                    seqlen, ws, err);
}

rp_status rp_device_head_forward_backward(rp_device *dev, const rp_model_config *cfg,
                                          const float *norm_w, const float *lm_w, const float *x,
                                          const int32_t *targets, const uint8_t *mask, int64_t T,
                                          float scale, float *dx, float *dnorm_w, float *dlm_w,
                                          float *ws, double *loss_sum, rp_error *err)
{
    return dev->ops->head_forward_backward(dev->impl, cfg, norm_w, lm_w, x, targets, mask, T,
                                           scale, dx, dnorm_w, dlm_w, ws, loss_sum, err);
}
