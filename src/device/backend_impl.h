/* The table a device back end fills (see backend.h for the semantics of
 * each entry; `impl` is the back end's own state). backend.c dispatches the
 * rp_device_* calls through it. */
#ifndef RP_DEVICE_BACKEND_IMPL_H
#define RP_DEVICE_BACKEND_IMPL_H

#include "device/backend.h"

typedef struct rp_device_ops {
    const char *name;
    rp_status (*create)(const rp_device_params *params, void **impl, rp_error *err);
    void (*destroy)(void *impl);
    rp_status (*alloc)(void *impl, size_t bytes, void **out, rp_error *err);
    void (*free)(void *impl, void *p);
    rp_status (*memset0)(void *impl, void *p, size_t bytes, rp_error *err);
    rp_status (*copy)(void *impl, void *dst, const void *src, size_t bytes, rp_error *err);
    /* may be NULL (nothing to do, as on the CPU) */
    rp_status (*host_register)(void *impl, void *p, size_t bytes, rp_error *err);
    void (*host_unregister)(void *impl, void *p);
    rp_status (*embed_forward)(void *impl, const rp_model_config *cfg, const float *W,
                               const int32_t *tokens, int64_t T, float *out, rp_error *err);
    rp_status (*embed_backward)(void *impl, const rp_model_config *cfg, const int32_t *tokens,
                                int64_t T, const float *dout, float *dW, rp_error *err);
    /* sizes depend on the shapes only, not on a device instance */
    size_t (*workspace_floats)(const rp_model_config *cfg, int64_t nseq, int64_t seqlen);
    size_t (*saved_floats)(const rp_model_config *cfg, int64_t nseq, int64_t seqlen);
    rp_status (*block_forward)(void *impl, const rp_model_config *cfg, const float *params,
                               const float *x, float *y, int64_t nseq, int64_t seqlen,
                               float *saved, float *ws, rp_error *err);
    rp_status (*block_backward)(void *impl, const rp_model_config *cfg, const float *params,
                                const float *x, float *saved, const float *dy, float *dx,
                                float *dparams, int64_t nseq, int64_t seqlen, float *ws,
                                rp_error *err);
    rp_status (*head_forward_backward)(void *impl, const rp_model_config *cfg,
                                       const float *norm_w, const float *lm_w, const float *x,
                                       const int32_t *targets, const uint8_t *mask, int64_t T,
                                       float scale, float *dx, float *dnorm_w, float *dlm_w,
                                       float *ws, double *loss_sum, rp_error *err);
} rp_device_ops;

extern const rp_device_ops rp_device_ops_cpu;
#ifdef RP_HAVE_CUDA_EXECUTOR /* defined once src/device/cuda.c is built */
extern const rp_device_ops rp_device_ops_cuda; /* src/device/cuda.c */
#endif

#endif
