/* Carving a caller's area into the buffers of a layer call (model-internal,
 * shared by block.c and head.c). With base == NULL it only counts, so the
 * size functions and the calls run the same code and cannot disagree. Each
 * buffer starts on a 64-byte boundary and is followed by
 * rp_model_guard_floats untouched floats (listed in `guards` when given). */
#ifndef RP_MODEL_CARVE_H
#define RP_MODEL_CARVE_H

#include "model/layers.h"

typedef struct rp_carver {
    float *base;
    size_t at;   /* floats taken so far */
    int area;    /* for the guard list: 0 saved, 1 scratch */
    rp_model_guards *guards;
} rp_carver;

static inline void *rp_carve_bytes(rp_carver *c, size_t bytes)
{
    void *p = c->base ? (void *)(c->base + c->at) : NULL;
    c->at += (bytes + 63) / 64 * 16;
    if (rp_model_guard_floats) {
        if (c->guards && c->guards->n < RP_MODEL_MAX_GUARDS) {
            c->guards->area[c->guards->n] = c->area;
            c->guards->at[c->guards->n++] = c->at;
        }
        c->at += rp_model_guard_floats;
    }
    return p;
}

static inline float *rp_carve_f32(rp_carver *c, size_t n)
{
    return rp_carve_bytes(c, n * sizeof(float));
}

/* n elements in the table's compute dtype */
static inline void *rp_carve_compute(rp_carver *c, const rp_kernel_ops *ops, size_t n)
{
    return rp_carve_bytes(c, n * rp_kernel_compute_bytes(ops));
}

/* Call op `name` of the kernels k, returning its error (the probe, where a
 * benchmark set one, told of the call first). */
#define RP_OP(name, ...)                                                                 \
    do {                                                                                 \
        rp_status rp_op_status_ = k->ops->name(k->state, __VA_ARGS__, err);              \
        if (k->probe)                                                                    \
            k->probe->after(k->probe->ctx, #name, __FILE__, __LINE__);                   \
        RP_TRY(rp_op_status_);                                                           \
    } while (0)

#endif
