/* cuDNN's fused flash SDPA over the backend graph API (cudnn_attention.h).
 * Every cuDNN entry point is called through the pointers the loader
 * resolved: this file includes cuDNN's headers for their types and
 * constants only, and the library is never linked. */
#include "config.h"

#include <float.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <cudnn_graph.h>

#include "kernels/attention_choice.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cudnn_attention.h"

#define CACHE_SLOTS 16
#define WHY_BYTES 512

/* the cuDNN entry points, typed as cudnn_graph.h declares them */
typedef size_t (*get_version_fn)(void);
typedef const char *(*get_error_string_fn)(cudnnStatus_t);
typedef cudnnStatus_t (*create_fn)(cudnnHandle_t *);
typedef cudnnStatus_t (*destroy_fn)(cudnnHandle_t);
typedef cudnnStatus_t (*set_stream_fn)(cudnnHandle_t, cudaStream_t);
typedef cudnnStatus_t (*desc_create_fn)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
typedef cudnnStatus_t (*desc_destroy_fn)(cudnnBackendDescriptor_t);
typedef cudnnStatus_t (*set_attr_fn)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                     cudnnBackendAttributeType_t, int64_t, const void *);
typedef cudnnStatus_t (*get_attr_fn)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                     cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
typedef cudnnStatus_t (*finalize_fn)(cudnnBackendDescriptor_t);
typedef cudnnStatus_t (*execute_fn)(cudnnHandle_t, cudnnBackendDescriptor_t,
                                    cudnnBackendDescriptor_t);

typedef struct plan_slot {
    int used, backward;
    int64_t nseq, seqlen, nheads, nkv, head_dim;
    float scale;
    cudnnBackendDescriptor_t plan; /* NULL when refused */
    /* the graph's descriptors, kept while the plan lives (it was
     * finalized from them) */
    cudnnBackendDescriptor_t *kept;
    int nkept;
    int64_t workspace;
    char refused[WHY_BYTES];
    unsigned long long last_use;
} plan_slot;

struct rp_cudnn_attention {
    get_error_string_fn error_string;
    create_fn create;
    destroy_fn destroy;
    set_stream_fn set_stream;
    desc_create_fn desc_create;
    desc_destroy_fn desc_destroy;
    set_attr_fn set_attr;
    get_attr_fn get_attr;
    finalize_fn finalize;
    execute_fn execute;
    cudnnHandle_t handle;
    cudaStream_t stream;
    size_t version;      /* the library's cudnnGetVersion */
    size_t device_total; /* the GPU's memory: the workspace budget's cap (attention_choice.h) */
    plan_slot slots[CACHE_SLOTS];
    unsigned long long uses;
    /* grown buffers: cuDNN's workspace, and this module's (stats, Delta,
     * bf16 dq/dk/dv) */
    void *workspace;
    size_t workspace_bytes;
    void *buffers;
    size_t buffers_bytes;
};

/* ---- a graph under construction ----------------------------------------- */

#define MAX_DESCS 256 /* the backward: ~40 tensors, ~45 for its nodes, 2 per engine tried */
#define MAX_OPS 40

typedef struct graph {
    rp_cudnn_attention *a;
    cudnnBackendDescriptor_t descs[MAX_DESCS]; /* everything made, destroyed at the end */
    int ndescs;
    cudnnBackendDescriptor_t ops[MAX_OPS];
    int nops;
    int64_t next_virtual_uid;
    cudnnStatus_t status; /* the first failure; later calls do nothing */
    const char *failed_at;
} graph;

static cudnnBackendDescriptor_t make(graph *g, cudnnBackendDescriptorType_t type, const char *what)
{
    cudnnBackendDescriptor_t d = NULL;
    if (g->status != CUDNN_STATUS_SUCCESS)
        return NULL;
    if (g->ndescs == MAX_DESCS) {
        g->status = CUDNN_STATUS_INTERNAL_ERROR;
        g->failed_at = "too many descriptors";
        return NULL;
    }
    cudnnStatus_t st = g->a->desc_create(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        g->status = st;
        g->failed_at = what;
        return NULL;
    }
    g->descs[g->ndescs++] = d;
    return d;
}

static void set(graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void *value,
                const char *what)
{
    if (g->status != CUDNN_STATUS_SUCCESS)
        return;
    cudnnStatus_t st = g->a->set_attr(d, name, type, count, value);
    if (st != CUDNN_STATUS_SUCCESS) {
        g->status = st;
        g->failed_at = what;
    }
}

static void finish(graph *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->status != CUDNN_STATUS_SUCCESS)
        return;
    cudnnStatus_t st = g->a->finalize(d);
    if (st != CUDNN_STATUS_SUCCESS) {
        g->status = st;
        g->failed_at = what;
    }
}

static void graph_free(graph *g)
{
    for (int i = g->ndescs - 1; i >= 0; i--)
        g->a->desc_destroy(g->descs[i]);
    g->ndescs = 0;
}

/* A tensor: uid > 0 for one the variant pack names, 0 for a virtual one
 * (an intermediate the fused kernel keeps to itself). by_value: a scalar
 * passed by host pointer (the scale, the mask's fill). */
static cudnnBackendDescriptor_t tensor(graph *g, int64_t uid, cudnnDataType_t type,
                                       const int64_t dims[4], const int64_t strides[4],
                                       int by_value)
{
    cudnnBackendDescriptor_t t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor");
    bool is_virtual = uid == 0;
    int64_t id = uid ? uid : g->next_virtual_uid++;
    int64_t alignment = 16;
    bool value = by_value != 0;
    set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
    set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
    set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id, "tensor uid");
    set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment,
        "tensor alignment");
    set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
    if (by_value)
        set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &value, "tensor by value");
    finish(g, t, "a tensor");
    return t;
}

static void add_op(graph *g, cudnnBackendDescriptor_t op)
{
    if (g->status != CUDNN_STATUS_SUCCESS)
        return;
    if (g->nops == MAX_OPS) {
        g->status = CUDNN_STATUS_INTERNAL_ERROR;
        g->failed_at = "too many operations";
        return;
    }
    g->ops[g->nops++] = op;
}

/* y = mode(x[, b[, t]]) computed in fp32 (GEN_INDEX: along `axis`) */
static void pointwise(graph *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                      cudnnBackendDescriptor_t y, int64_t axis, cudnnDataType_t precision)
{
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision,
        "pointwise precision");
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
        set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    finish(g, pw, "pointwise");
    cudnnBackendDescriptor_t op =
        make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw,
        "pointwise descriptor");
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
        "pointwise x");
    if (b)
        set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
            "pointwise b");
    if (t)
        set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
            "pointwise t");
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
        "pointwise y");
    finish(g, op, "pointwise operation");
    add_op(g, op);
}

static void reduction(graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t y)
{
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
        "reduction operator");
    set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction type");
    finish(g, r, "reduction");
    cudnnBackendDescriptor_t op =
        make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
        "reduction x");
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
        "reduction y");
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
        "reduction descriptor");
    finish(g, op, "reduction operation");
    add_op(g, op);
}

/* c = a b over the last two dims, batched over the first two (b's head
 * dim may be a divisor of a's: grouped-query attention) */
static void matmul(graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                   cudnnBackendDescriptor_t c)
{
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t m = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    set(g, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul type");
    finish(g, m, "matmul");
    cudnnBackendDescriptor_t op =
        make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m,
        "matmul descriptor");
    finish(g, op, "matmul operation");
    add_op(g, op);
}

/* y: x's values seen through other dims and strides (a transposed view) */
static void reshape(graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t op =
        make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
        "reshape x");
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
        "reshape y");
    if (g->a->version >= 92200) {
        /* a view, as cudnn-frontend sets it from 9.22 on (some of these
         * reshapes change the dtype too); the names are newer than the
         * headers this builds with, so their values (cudnn_graph.h 9.22+):
         * CUDNN_ATTR_OPERATION_RESHAPE_MODE 2202, CUDNN_TYPE_RESHAPE_MODE
         * 31, CUDNN_RESHAPE_VIEW_ONLY 0 */
        const int32_t view_only = 0;
        set(g, op, (cudnnBackendAttributeName_t)2202, (cudnnBackendAttributeType_t)31, 1,
            &view_only, "reshape mode");
    }
    finish(g, op, "reshape operation");
    add_op(g, op);
}

/* ---- the two graphs -------------------------------------------------- */

/* uids of the tensors the variant pack names */
enum {
    UID_Q = 1, UID_KT, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV, UID_SCALE,
    UID_VT, UID_DELTA, UID_ONE, UID_FILL
};

typedef struct dims_set {
    int64_t b, h, hk, s, d;
} dims_set;

#define D4(name, x0, x1, x2, x3) const int64_t name[4] = {x0, x1, x2, x3}

/* the masked, scaled scores scale * Q K^T (fp32, virtual): kept where row
 * >= column (generated indices), else the fill. Every row keeps at least
 * its diagonal, so no row is all fill and Stats keeps the contract's
 * meaning. */
static cudnnBackendDescriptor_t masked_scores(graph *g, const dims_set *z,
                                              cudnnBackendDescriptor_t q,
                                              cudnnBackendDescriptor_t kt,
                                              cudnnBackendDescriptor_t scale,
                                              cudnnBackendDescriptor_t fill,
                                              cudnnBackendDescriptor_t stats_to_subtract)
{
    D4(sd, z->b, z->h, z->s, z->s);
    D4(ss, z->h * z->s * z->s, z->s * z->s, z->s, 1);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, bl = CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t s = tensor(g, 0, f32, sd, ss, 0);
    matmul(g, q, kt, s);
    cudnnBackendDescriptor_t scaled = tensor(g, 0, f32, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, s, scale, NULL, scaled, 0, f32);
    if (stats_to_subtract) { /* the backward: scores less the forward's statistics */
        cudnnBackendDescriptor_t less = tensor(g, 0, f32, sd, ss, 0);
        pointwise(g, CUDNN_POINTWISE_SUB, scaled, stats_to_subtract, NULL, less, 0, f32);
        scaled = less;
    }
    cudnnBackendDescriptor_t row = tensor(g, 0, i32, sd, ss, 0);
    cudnnBackendDescriptor_t col = tensor(g, 0, i32, sd, ss, 0);
    cudnnBackendDescriptor_t keep = tensor(g, 0, bl, sd, ss, 0);
    cudnnBackendDescriptor_t masked = tensor(g, 0, f32, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, scaled, NULL, NULL, row, 2, i32);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, scaled, NULL, NULL, col, 3, i32);
    pointwise(g, CUDNN_POINTWISE_CMP_GE, row, col, NULL, keep, 0, bl);
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, scaled, fill, keep, masked, 0, f32);
    return masked;
}

static void build_forward(graph *g, const dims_set *z)
{
    cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    int64_t b = z->b, h = z->h, hk = z->hk, s = z->s, d = z->d;
    D4(one, 1, 1, 1, 1);
    D4(qd, b, h, s, d);
    D4(qs, s * h * d, d, h * d, 1); /* token-major rows: [token, head, dim] */
    D4(ktd, b, hk, d, s);
    D4(kts, s * hk * d, d, 1, hk * d);
    D4(vd, b, hk, s, d);
    D4(vs, s * hk * d, d, hk * d, 1);
    D4(rd, b, h, s, 1);
    D4(rs, h * s, s, 1, 1);
    D4(sd, b, h, s, s);
    D4(ss, h * s * s, s * s, s, 1);
    cudnnBackendDescriptor_t q = tensor(g, UID_Q, bf, qd, qs, 0);
    cudnnBackendDescriptor_t kt = tensor(g, UID_KT, bf, ktd, kts, 0);
    cudnnBackendDescriptor_t v = tensor(g, UID_V, bf, vd, vs, 0);
    cudnnBackendDescriptor_t o = tensor(g, UID_O, bf, qd, qs, 0);
    cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, f32, rd, rs, 0);
    cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, f32, one, one, 1);
    cudnnBackendDescriptor_t fill = tensor(g, UID_FILL, f32, one, one, 1);
    cudnnBackendDescriptor_t masked = masked_scores(g, z, q, kt, scale, fill, NULL);
    /* softmax with its statistics */
    cudnnBackendDescriptor_t max = tensor(g, 0, f32, rd, rs, 0);
    cudnnBackendDescriptor_t centred = tensor(g, 0, f32, sd, ss, 0);
    cudnnBackendDescriptor_t e = tensor(g, 0, f32, sd, ss, 0);
    cudnnBackendDescriptor_t sum = tensor(g, 0, f32, rd, rs, 0);
    cudnnBackendDescriptor_t logsum = tensor(g, 0, f32, rd, rs, 0);
    cudnnBackendDescriptor_t p = tensor(g, 0, bf, sd, ss, 0);
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, masked, max);
    pointwise(g, CUDNN_POINTWISE_SUB, masked, max, NULL, centred, 0, f32);
    pointwise(g, CUDNN_POINTWISE_EXP, centred, NULL, NULL, e, 0, f32);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    pointwise(g, CUDNN_POINTWISE_LOG, sum, NULL, NULL, logsum, 0, f32);
    pointwise(g, CUDNN_POINTWISE_ADD, max, logsum, NULL, stats, 0, f32);
    pointwise(g, CUDNN_POINTWISE_DIV, e, sum, NULL, p, 0, f32);
    matmul(g, p, v, o);
}

static void build_backward(graph *g, const dims_set *z)
{
    cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    int64_t b = z->b, h = z->h, hk = z->hk, s = z->s, d = z->d;
    int grouped = hk != h;
    D4(one, 1, 1, 1, 1);
    D4(qd, b, h, s, d);
    D4(qs, s * h * d, d, h * d, 1);
    D4(kd, b, hk, s, d);
    D4(ks, s * hk * d, d, hk * d, 1);
    D4(ktd, b, hk, d, s);
    D4(kts, s * hk * d, d, 1, hk * d);
    D4(rd, b, h, s, 1);
    D4(rs, h * s, s, 1, 1);
    D4(sd, b, h, s, s);
    D4(ss, h * s * s, s * s, s, 1);
    D4(sts, h * s * s, s * s, 1, s); /* the transposed view of a score matrix */
    D4(fd, b, h, s, d);              /* a gradient per query head before the group's sum */
    D4(fs, h * s * d, s * d, d, 1);
    cudnnBackendDescriptor_t q = tensor(g, UID_Q, bf, qd, qs, 0);
    cudnnBackendDescriptor_t kt = tensor(g, UID_KT, bf, ktd, kts, 0);
    cudnnBackendDescriptor_t vt = tensor(g, UID_VT, bf, ktd, kts, 0);
    cudnnBackendDescriptor_t o = tensor(g, UID_O, bf, qd, qs, 0);
    cudnnBackendDescriptor_t dout = tensor(g, UID_DO, bf, qd, qs, 0);
    cudnnBackendDescriptor_t stats = tensor(g, UID_STATS, f32, rd, rs, 0);
    cudnnBackendDescriptor_t delta = tensor(g, UID_DELTA, f32, rd, rs, 0);
    cudnnBackendDescriptor_t dq = tensor(g, UID_DQ, bf, qd, qs, 0);
    cudnnBackendDescriptor_t dk = tensor(g, UID_DK, bf, kd, ks, 0);
    cudnnBackendDescriptor_t dv = tensor(g, UID_DV, bf, kd, ks, 0);
    cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, f32, one, one, 1);
    cudnnBackendDescriptor_t unit = tensor(g, UID_ONE, f32, one, one, 1);
    cudnnBackendDescriptor_t fill = tensor(g, UID_FILL, f32, one, one, 1);
    /* Delta = rowsum(dO * O) */
    D4(ps, h * s * d, s * d, h * d, 1);
    cudnnBackendDescriptor_t prod = tensor(g, 0, f32, qd, ps, 0);
    cudnnBackendDescriptor_t rowsum = tensor(g, 0, f32, rd, rs, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, dout, o, NULL, prod, 0, f32);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, prod, rowsum);
    pointwise(g, CUDNN_POINTWISE_MUL, rowsum, unit, NULL, delta, 0, f32);
    /* P = exp(scale Q K^T - Stats), masked */
    cudnnBackendDescriptor_t masked = masked_scores(g, z, q, kt, scale, fill, stats);
    cudnnBackendDescriptor_t p = tensor(g, 0, f32, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_EXP, masked, NULL, NULL, p, 0, f32);
    /* dV = P^T dO (summed over the group) */
    cudnnBackendDescriptor_t pt = tensor(g, 0, bf, sd, sts, 0);
    reshape(g, p, pt);
    if (grouped) { /* per query head in bf16, as cuDNN's own SDPA graphs do */
        cudnnBackendDescriptor_t full = tensor(g, 0, bf, fd, fs, 0);
        matmul(g, pt, dout, full);
        reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, dv);
    } else {
        matmul(g, pt, dout, dv);
    }
    /* dS = P (dO V^T - Delta) scale */
    cudnnBackendDescriptor_t dp = tensor(g, 0, f32, sd, ss, 0);
    cudnnBackendDescriptor_t centred = tensor(g, 0, f32, sd, ss, 0);
    cudnnBackendDescriptor_t dsu = tensor(g, 0, f32, sd, ss, 0);
    cudnnBackendDescriptor_t ds = tensor(g, 0, f32, sd, ss, 0);
    matmul(g, dout, vt, dp);
    pointwise(g, CUDNN_POINTWISE_SUB, dp, delta, NULL, centred, 0, f32);
    pointwise(g, CUDNN_POINTWISE_MUL, centred, p, NULL, dsu, 0, f32);
    pointwise(g, CUDNN_POINTWISE_MUL, dsu, scale, NULL, ds, 0, f32);
    /* dK = dS^T Q (summed over the group) */
    cudnnBackendDescriptor_t dst = tensor(g, 0, bf, sd, sts, 0);
    reshape(g, ds, dst);
    if (grouped) {
        cudnnBackendDescriptor_t full = tensor(g, 0, bf, fd, fs, 0);
        matmul(g, dst, q, full);
        reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, dk);
    } else {
        matmul(g, dst, q, dk);
    }
    /* dQ = dS K, K the reshape of K^T's tensor: one input holds K, as in
     * the SDPA backward graphs cuDNN's frontend builds (a second input on
     * the same memory may not match the fused engine's pattern) */
    cudnnBackendDescriptor_t k = tensor(g, 0, bf, kd, ks, 0);
    reshape(g, kt, k);
    matmul(g, ds, k, dq);
}

/* ---- plans ------------------------------------------------------------- */

static void describe(const rp_cudnn_attention *a, const graph *g, char *why, size_t why_len)
{
    snprintf(why, why_len, "cuDNN: %s: %s", g->failed_at ? g->failed_at : "?",
             a->error_string(g->status));
}

/* Is the engine of `cfg` free of the non-deterministic note? */
static int deterministic(rp_cudnn_attention *a, cudnnBackendDescriptor_t cfg, graph *g)
{
    cudnnBackendDescriptor_t engine = make(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "an engine");
    if (!engine)
        return 0;
    int64_t n = 0;
    if (a->get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                    &engine) != CUDNN_STATUS_SUCCESS)
        return 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    n = 0;
    if (a->get_attr(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                    CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
            return 0;
    return 1;
}

/* Builds the graph of a slot's shape and its first deterministic plan
 * within the workspace cap: 0 (slot->plan set), RP_CUDNN_REFUSED (slot
 * ->refused set). */
static int build_plan(rp_cudnn_attention *a, plan_slot *slot)
{
    graph g = {.a = a, .status = CUDNN_STATUS_SUCCESS, .next_virtual_uid = 1000};
    dims_set z = {slot->nseq, slot->nheads, slot->nkv, slot->seqlen, slot->head_dim,
};
    const rp_attn_shape shape = {.nseq = slot->nseq, .seqlen = slot->seqlen,
                                 .nheads = slot->nheads, .nkv = slot->nkv,
                                 .head_dim = slot->head_dim, .scale = slot->scale};
    const size_t budget = rp_attention_cudnn_workspace_budget(&shape, a->device_total);
    if (slot->backward)
        build_backward(&g, &z);
    else
        build_forward(&g, &z);
    cudnnBackendDescriptor_t og = make(&g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the graph");
    set(&g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g.nops, g.ops,
        "the graph's operations");
    set(&g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &a->handle,
        "the graph's handle");
    finish(&g, og, "the operation graph");
    cudnnBackendDescriptor_t heur = make(&g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(&g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og,
        "heuristics' graph");
    set(&g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics' mode");
    finish(&g, heur, "the heuristics");
    int64_t count = 0;
    if (g.status == CUDNN_STATUS_SUCCESS &&
        a->get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                    NULL) != CUDNN_STATUS_SUCCESS)
        count = 0;
    if (g.status != CUDNN_STATUS_SUCCESS) {
        describe(a, &g, slot->refused, sizeof slot->refused);
        graph_free(&g);
        return RP_CUDNN_REFUSED;
    }
    if (count > 16)
        count = 16;
    cudnnBackendDescriptor_t cfgs[16];
    for (int64_t i = 0; i < count; i++)
        cfgs[i] = make(&g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine config");
    int64_t got = 0;
    if (g.status == CUDNN_STATUS_SUCCESS && count > 0 &&
        a->get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                    &got, cfgs) != CUDNN_STATUS_SUCCESS)
        got = 0;
    /* what refused each configuration, for the message when none is left */
    int64_t nondeterministic = 0, unfinished = 0, too_big = 0, asked = 0;
    cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < got && g.status == CUDNN_STATUS_SUCCESS; i++) {
        if (!deterministic(a, cfgs[i], &g)) {
            nondeterministic++;
            continue;
        }
        cudnnBackendDescriptor_t plan = NULL;
        if (a->desc_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
            break;
        int64_t ws = 0, n = 0;
        cudnnStatus_t st = a->set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                       1, &a->handle);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->finalize(plan);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                             &n, &ws);
        int ok = st == CUDNN_STATUS_SUCCESS;
        if (!ok) {
            unfinished++;
            last = st;
        }
        if (ok && (!asked || ws < asked))
            asked = ws; /* the least a finished plan asked: rp_cudnn_attention_workspace's */
        if (ok && (size_t)ws > budget) {
            too_big++;
            ok = 0;
        }
        if (!ok) {
            a->desc_destroy(plan);
            continue;
        }
        slot->plan = plan;
        slot->workspace = ws;
        break;
    }
    if (!slot->plan) {
        slot->workspace = asked;
        if (too_big && budget == 0)
            snprintf(slot->refused, sizeof slot->refused,
                     "cuDNN's plan needs a %.1f MiB workspace, more than a quarter of the GPU "
                     "(%.1f MiB), so a run reserves none for it at this length (%lld of %lld "
                     "configurations too big)", (double)asked / 1048576.0,
                     (double)rp_attention_cudnn_workspace_cap(a->device_total) / 1048576.0,
                     (long long)too_big,
                     (long long)got);
        else if (too_big)
            snprintf(slot->refused, sizeof slot->refused,
                     "cuDNN's plan needs a %.1f MiB workspace, more than the %.1f MiB the run "
                     "reserves for it (2 bytes a score of a microbatch's heads over lengths "
                     "padded to %d, %zu a row and %.0f MiB, when that is at most a quarter of "
                     "the GPU; %lld "
                     "of %lld configurations too big, %lld non-deterministic, %lld not "
                     "finalized)", (double)asked / 1048576.0, (double)budget / 1048576.0,
                     RP_CUDNN_WORKSPACE_TILE, rp_attention_cudnn_row_bytes(&shape),
                     (double)RP_CUDNN_WORKSPACE_SLACK / 1048576.0, (long long)too_big, (long long)got,
                     (long long)nondeterministic, (long long)unfinished);
        else
            snprintf(slot->refused, sizeof slot->refused,
                     "cuDNN offers no engine for this graph: %lld configurations, %lld "
                     "non-deterministic (cuDNN's note), %lld not finalized%s%s", (long long)got,
                     (long long)nondeterministic, (long long)unfinished,
                     unfinished ? ", the last with " : "",
                     unfinished ? a->error_string(last) : "");
    }
    if (slot->plan) {
        slot->kept = malloc(sizeof *slot->kept * (size_t)g.ndescs);
        if (slot->kept) {
            memcpy(slot->kept, g.descs, sizeof *slot->kept * (size_t)g.ndescs);
            slot->nkept = g.ndescs;
            g.ndescs = 0;
        }
    }
    graph_free(&g);
    return slot->plan ? 0 : RP_CUDNN_REFUSED;
}

static void slot_free(rp_cudnn_attention *a, plan_slot *p)
{
    if (p->plan)
        a->desc_destroy(p->plan);
    for (int i = p->nkept - 1; i >= 0; i--)
        a->desc_destroy(p->kept[i]);
    free(p->kept);
    memset(p, 0, sizeof *p);
}

/* The slot of a shape, its plan built (or refused, ->plan NULL and
 * ->refused saying why) on first use. */
static plan_slot *slot_for(rp_cudnn_attention *a, const rp_attn_shape *s, int backward)
{
    plan_slot *oldest = &a->slots[0];
    a->uses++;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        plan_slot *p = &a->slots[i];
        if (p->used && p->backward == backward &&
            p->nseq == s->nseq && p->seqlen == s->seqlen &&
            p->nheads == s->nheads && p->nkv == s->nkv && p->head_dim == s->head_dim &&
            memcmp(&p->scale, &s->scale, sizeof p->scale) == 0) {
            p->last_use = a->uses;
            return p;
        }
        if (!p->used || (oldest->used && p->last_use < oldest->last_use))
            oldest = p;
    }
    if (oldest->plan) /* queued work may still run the evicted plan */
        cudaStreamSynchronize(a->stream);
    slot_free(a, oldest);
    oldest->used = 1;
    oldest->backward = backward;
    oldest->nseq = s->nseq;
    oldest->seqlen = s->seqlen;
    oldest->nheads = s->nheads;
    oldest->nkv = s->nkv;
    oldest->head_dim = s->head_dim;
    oldest->scale = s->scale;
    oldest->last_use = a->uses;
    build_plan(a, oldest);
    return oldest;
}

/* The slot of a shape when cuDNN takes it; NULL with `why` when refused. */
static plan_slot *plan_for(rp_cudnn_attention *a, const rp_attn_shape *s, int backward,
                           char *why, size_t why_len)
{
    plan_slot *p = slot_for(a, s, backward);
    if (!p->plan)
        snprintf(why, why_len, "%s", p->refused);
    return p->plan ? p : NULL;
}

int rp_cudnn_attention_workspace(rp_cudnn_attention *a, const rp_attn_shape *s, int backward,
                                 int64_t *bytes, char *why, size_t why_len)
{
    plan_slot *p = slot_for(a, s, backward);
    *bytes = p->workspace; /* refused: what its plan asked, 0 where none was made */
    if (p->plan)
        return 0;
    snprintf(why, why_len, "%s", p->refused);
    return RP_CUDNN_REFUSED;
}

/* grows *buf to at least `bytes` (waiting for the stream: queued work may
 * still read the old one) */
static int grow(rp_cudnn_attention *a, void **buf, size_t *have, size_t bytes, char *why,
                size_t why_len)
{
    if (bytes <= *have)
        return 0;
    cudaError_t e = cudaStreamSynchronize(a->stream);
    if (e == cudaSuccess) { /* else the old buffer stays, with its size */
        cudaFree(*buf);
        *buf = NULL;
        *have = 0;
        e = cudaMalloc(buf, bytes);
        if (e != cudaSuccess)
            *buf = NULL;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, why_len, "growing cuDNN attention's buffers to %zu bytes: %s", bytes,
                 cudaGetErrorString(e));
        return RP_CUDNN_FAILED;
    }
    *have = bytes;
    return 0;
}

static int run(rp_cudnn_attention *a, plan_slot *p, int n, const int64_t *uids, void **ptrs,
               char *why, size_t why_len)
{
    if (grow(a, &a->workspace, &a->workspace_bytes, (size_t)p->workspace, why, why_len))
        return RP_CUDNN_FAILED;
    graph g = {.a = a, .status = CUDNN_STATUS_SUCCESS};
    cudnnBackendDescriptor_t pack = make(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    set(&g, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids, "uids");
    set(&g, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs, "pointers");
    set(&g, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &a->workspace,
        "workspace");
    finish(&g, pack, "the variant pack");
    if (g.status == CUDNN_STATUS_SUCCESS) {
        cudnnStatus_t st = a->execute(a->handle, p->plan, pack);
        if (st != CUDNN_STATUS_SUCCESS) {
            g.status = st;
            g.failed_at = "executing the plan";
        }
    }
    int rc = g.status == CUDNN_STATUS_SUCCESS ? 0 : RP_CUDNN_FAILED;
    if (rc)
        describe(a, &g, why, why_len);
    graph_free(&g);
    return rc;
}

static size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

int rp_cudnn_attention_forward(rp_cudnn_attention *a, const rp_attn_shape *s, const uint16_t *q,
                               const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse,
                               char *why, size_t why_len)
{
    plan_slot *p = plan_for(a, s, 0, why, why_len);
    if (!p)
        return RP_CUDNN_REFUSED;
    size_t stats_bytes = round_up((size_t)(s->nseq * s->nheads * s->seqlen) * sizeof(float));
    if (grow(a, &a->buffers, &a->buffers_bytes, stats_bytes, why, why_len))
        return RP_CUDNN_FAILED;
    float *stats = a->buffers;
    float scale = s->scale, fill = -FLT_MAX;
    const int64_t uids[] = {UID_Q, UID_KT, UID_V, UID_O, UID_STATS, UID_SCALE, UID_FILL};
    void *ptrs[] = {(void *)q, (void *)k, (void *)v, o, stats, &scale, &fill};
    int rc = run(a, p, 7, uids, ptrs, why, why_len);
    if (rc)
        return rc;
    int e = rp_cuda_lse_from_stats(stats, lse, s->nseq, s->seqlen, s->nheads, a->stream);
    if (e) {
        snprintf(why, why_len, "the statistics' transpose: %s",
                 cudaGetErrorString((cudaError_t)e));
        return RP_CUDNN_FAILED;
    }
    return RP_CUDNN_DONE;
}

int rp_cudnn_attention_backward(rp_cudnn_attention *a, const rp_attn_shape *s, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                const float *lse, const uint16_t *dout, float *dq, float *dk,
                                float *dv, char *why, size_t why_len)
{
    plan_slot *p = plan_for(a, s, 1, why, why_len);
    if (!p)
        return RP_CUDNN_REFUSED;
    int64_t rows = s->nseq * s->seqlen;
    size_t nq = (size_t)(rows * s->nheads * s->head_dim), nk = (size_t)(rows * s->nkv * s->head_dim);
    size_t stats_bytes = round_up((size_t)(rows * s->nheads) * sizeof(float));
    size_t need = rp_attention_cudnn_buffer_bytes(s); /* the layout below */
    if (grow(a, &a->buffers, &a->buffers_bytes, need, why, why_len))
        return RP_CUDNN_FAILED;
    char *at = a->buffers;
    float *stats = (float *)at;
    float *delta = (float *)(at + stats_bytes);
    uint16_t *dq16 = (uint16_t *)(at + 2 * stats_bytes);
    uint16_t *dk16 = (uint16_t *)(at + 2 * stats_bytes + round_up(nq * 2));
    uint16_t *dv16 = (uint16_t *)(at + 2 * stats_bytes + round_up(nq * 2) + round_up(nk * 2));
    int e = rp_cuda_stats_from_lse(lse, stats, s->nseq, s->seqlen, s->nheads, a->stream);
    if (e) {
        snprintf(why, why_len, "the statistics' transpose: %s",
                 cudaGetErrorString((cudaError_t)e));
        return RP_CUDNN_FAILED;
    }
    float scale = s->scale, unit = 1.0f, fill = -FLT_MAX;
    const int64_t uids[] = {UID_Q, UID_KT, UID_VT, UID_O, UID_DO, UID_STATS, UID_DELTA,
                            UID_DQ, UID_DK, UID_DV, UID_SCALE, UID_ONE, UID_FILL};
    void *ptrs[] = {(void *)q, (void *)k, (void *)v, (void *)o, (void *)dout, stats,
                    delta, dq16, dk16, dv16, &scale, &unit, &fill};
    int rc = run(a, p, 13, uids, ptrs, why, why_len);
    if (rc)
        return rc;
    if ((e = rp_cuda_f32_from_bf16(dq16, dq, (int64_t)nq, a->stream)) ||
        (e = rp_cuda_f32_from_bf16(dk16, dk, (int64_t)nk, a->stream)) ||
        (e = rp_cuda_f32_from_bf16(dv16, dv, (int64_t)nk, a->stream))) {
        snprintf(why, why_len, "widening the gradients: %s", cudaGetErrorString((cudaError_t)e));
        return RP_CUDNN_FAILED;
    }
    return RP_CUDNN_DONE;
}

/* ---- lifetime ---------------------------------------------------------- */

int rp_cudnn_attention_create(const rp_cudnn_library *lib, cudaStream_t stream,
                              rp_cudnn_attention **out, char *why, size_t why_len)
{
    *out = NULL;
    rp_cudnn_attention *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(why, why_len, "allocating cuDNN attention's state");
        return RP_CUDNN_FAILED;
    }
    a->error_string = (get_error_string_fn)lib->symbols[RP_CUDNN_GET_ERROR_STRING];
    a->create = (create_fn)lib->symbols[RP_CUDNN_CREATE];
    a->destroy = (destroy_fn)lib->symbols[RP_CUDNN_DESTROY];
    a->set_stream = (set_stream_fn)lib->symbols[RP_CUDNN_SET_STREAM];
    a->desc_create = (desc_create_fn)lib->symbols[RP_CUDNN_BACKEND_CREATE_DESCRIPTOR];
    a->desc_destroy = (desc_destroy_fn)lib->symbols[RP_CUDNN_BACKEND_DESTROY_DESCRIPTOR];
    a->set_attr = (set_attr_fn)lib->symbols[RP_CUDNN_BACKEND_SET_ATTRIBUTE];
    a->get_attr = (get_attr_fn)lib->symbols[RP_CUDNN_BACKEND_GET_ATTRIBUTE];
    a->finalize = (finalize_fn)lib->symbols[RP_CUDNN_BACKEND_FINALIZE];
    a->execute = (execute_fn)lib->symbols[RP_CUDNN_BACKEND_EXECUTE];
    a->stream = stream;
    a->version = lib->version;
    /* the figure the run's reservation was computed from (the device
     * probe's totalGlobalMem), so the budget here is the one reserved */
    struct cudaDeviceProp prop;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        cudaGetLastError();
        prop.totalGlobalMem = 0;
    }
    a->device_total = prop.totalGlobalMem;
    cudnnStatus_t st = a->create(&a->handle);
    if (st == CUDNN_STATUS_SUCCESS)
        st = a->set_stream(a->handle, stream);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(why, why_len, "cuDNN: creating a handle: %s", a->error_string(st));
        if (a->handle)
            a->destroy(a->handle);
        free(a);
        return RP_CUDNN_FAILED;
    }
    *out = a;
    return 0;
}

void rp_cudnn_attention_destroy(rp_cudnn_attention **ap)
{
    rp_cudnn_attention *a = ap ? *ap : NULL;
    if (!a)
        return;
    cudaStreamSynchronize(a->stream);
    for (int i = 0; i < CACHE_SLOTS; i++)
        slot_free(a, &a->slots[i]);
    cudaFree(a->workspace);
    cudaFree(a->buffers);
    a->destroy(a->handle);
    free(a);
    *ap = NULL;
}
