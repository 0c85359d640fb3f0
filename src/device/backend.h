/* The executor device interface: what the engine asks of the device it
 * drives. Memory on the device, copies between host and device (the
 * transfer engine's back end), and the layer math run on device buffers.
 * Every back end implements the same table; the CPU back end (cpu.c) runs
 * the fp32 CPU layer math of src/model on private host memory, so the engine
 * and every part of the pipeline are tested without a GPU. A CUDA back end
 * plugs in here.
 *
 * All pointers passed to the layer calls are device pointers (tokens,
 * targets and masks included). Calls on one device are issued from one
 * thread at a time, except rp_device_copy, which the transfer engine's
 * worker also calls. */
#ifndef RP_DEVICE_BACKEND_H
#define RP_DEVICE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "device/device.h"
#include "io/config.h"

typedef struct rp_device rp_device;

typedef struct rp_device_params {
    rp_device_kind kind; /* CPU or CUDA (AUTO is resolved by the caller) */
    int ordinal;         /* which device of the kind (node-local rank mod count) */
    int threads;         /* host threads the back end may use */
} rp_device_params;

rp_status rp_device_create(const rp_device_params *params, rp_device **out, rp_error *err);
void rp_device_destroy(rp_device **dev);
const char *rp_device_name(const rp_device *dev);

/* Device memory. rp_device_alloc names the bytes asked on failure. */
rp_status rp_device_alloc(rp_device *dev, size_t bytes, void **out, rp_error *err);
void rp_device_free(rp_device *dev, void *p);
rp_status rp_device_memset0(rp_device *dev, void *p, size_t bytes, rp_error *err);

/* Copy bytes between host and device memory in either direction (or within
 * one), complete on return. */
rp_status rp_device_copy(rp_device *dev, void *dst, const void *src, size_t bytes, rp_error *err);

/* Pin host memory (the host store) for fast transfers, once per rank; undo
 * before the memory is unmapped. No-ops where pinning means nothing. */
rp_status rp_device_host_register(rp_device *dev, void *p, size_t bytes, rp_error *err);
void rp_device_host_unregister(rp_device *dev, void *p);

/* ---- layer math (see src/model/layers.h for the semantics) ------------- */
rp_status rp_device_embed_forward(rp_device *dev, const rp_model_config *cfg, const float *W,
                                  const int32_t *tokens, int64_t T, float *out, rp_error *err);
rp_status rp_device_embed_backward(rp_device *dev, const rp_model_config *cfg,
                                   const int32_t *tokens, int64_t T, const float *dout, float *dW,
                                   rp_error *err);
/* Sizes on a back end of `kind` for nseq x seqlen tokens, the same
 * functions its calls carve their buffers with (the planner sizes jobs with
 * them too): the scratch workspace of the block and head calls (one per
 * executor), and the area a block's forward saves for its backward (one per
 * layer awaiting its backward). 0 for a kind this build lacks. */
size_t rp_device_workspace_floats(rp_device_kind kind, const rp_model_config *cfg, int64_t nseq,
                                  int64_t seqlen);
size_t rp_device_saved_floats(rp_device_kind kind, const rp_model_config *cfg, int64_t nseq,
                              int64_t seqlen);
/* y may be NULL: the forward then only fills `saved` for the backward. */
rp_status rp_device_block_forward(rp_device *dev, const rp_model_config *cfg, const float *params,
                                  const float *x, float *y, int64_t nseq, int64_t seqlen,
                                  float *saved, float *ws, rp_error *err);
/* From `saved` of this layer's forward on x (consumed). */
rp_status rp_device_block_backward(rp_device *dev, const rp_model_config *cfg,
                                   const float *params, const float *x, float *saved,
                                   const float *dy, float *dx, float *dparams, int64_t nseq,
                                   int64_t seqlen, float *ws, rp_error *err);
/* *loss_sum is written on the host. */
rp_status rp_device_head_forward_backward(rp_device *dev, const rp_model_config *cfg,
                                          const float *norm_w, const float *lm_w, const float *x,
                                          const int32_t *targets, const uint8_t *mask, int64_t T,
                                          float scale, float *dx, float *dnorm_w, float *dlm_w,
                                          float *ws, double *loss_sum, rp_error *err);

#endif
