/* cuDNN's fused flash SDPA over the backend graph API (cudnn_attention.h).
 * Every cuDNN entry point is called through the pointers the loader
 * resolved: this file includes cuDNN's headers for their types and
 * constants only, and the library is never linked. */
#include "config.h"

#include <float.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <cudnn_graph.h>

#include "kernels/attention_choice.h"
#include "kernels/attn_documents.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cudnn_attention.h"

#define CACHE_SLOTS 24
#define TABLE_SLOTS 4 /* documents' tables on the device (a few microbatches') */
#define WHY_BYTES 1280
/* a documents graph's way, said (graph_variant's name, layout, and how
 * cuDNN found its engine where not by heuristics mode A) */
#define WAY_BYTES 224
#define FOUND_BY_BYTES 64
/* cuDNN's engines tried by global index for a graph no heuristics offer
 * an engine for (engines_by_index), and of them at most this many kept as
 * configurations */
#define ENGINES_MAX 64
#define ENGINES_TAKEN_MAX 8
#define SAID_BYTES 240 /* cuDNN's words for an engine's refusal, quoted */

/* The layout of a documents graph's tensors (the second axis of the ways
 * a documents graph is written in, graph_variant below): its ragged
 * offsets in int64 or int32, and its statistics (and the backward's Delta)
 * padded per entry ([slots, nheads, span]) or packed by token ([tokens,
 * nheads], ragged like Q: the attention contract's lse layout). */
typedef struct documents_layout {
    const char *name;
    int int64_offsets;
    int packed_stats;
} documents_layout;

/* the cuDNN entry points, typed as cudnn_graph.h declares them */
typedef size_t (*get_version_fn)(void);
typedef const char *(*get_error_string_fn)(cudnnStatus_t);
typedef void (*get_last_error_string_fn)(char *, size_t);
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

/* What a plan is built for: a direction, a dense call (b sequences of s
 * tokens) or documents (b ragged entries of at most s tokens,
 * kernels/attn_documents.h), the heads, and the workspace it may ask. */
typedef struct plan_key {
    int backward, documents;
    int64_t b, s, h, hk, d;
    float scale;
    size_t budget;
} plan_key;

typedef struct plan_slot {
    int used;
    plan_key key;
    cudnnBackendDescriptor_t plan; /* NULL when refused */
    /* the graph's descriptors, kept while the plan lives (it was
     * finalized from them) */
    cudnnBackendDescriptor_t *kept;
    int nkept;
    int64_t workspace;
    char refused[WHY_BYTES];
    /* how a documents graph cuDNN took is written: its mask's way (a
     * graph_variant's name) and its layout; and how its engine was found
     * ("" by heuristics mode A, else engines_by_index's or the fallback
     * heuristics' words) */
    const char *variant;
    const documents_layout *layout;
    char found_by[FOUND_BY_BYTES];
    unsigned long long last_use;
} plan_slot;

/* A documents' table on the device (kernels/attn_documents.h): the ragged
 * offsets of q-shaped and of k-shaped tensors' entries (slots + 1 each, in
 * elements) in int32, the entries' lengths (slots) and their first tokens
 * (slots + 1) in int32, the packed statistics' offsets (slots + 1) in
 * int32, then the three offsets again in int64 (a plan binds those of its
 * layout's type), each part 16-byte aligned. Kept for the calls of the
 * same documents (every layer's forward and backward of a microbatch), its
 * host copy the key; copied from pinned memory on the stream, so a later
 * copy into it follows the calls queued before. */
typedef struct doc_table {
    int used;
    unsigned long long last_use;
    int64_t slots, q_row, kv_row; /* q_row, kv_row: elements a token of q, of k */
    int32_t *first, *length;      /* the host table (malloc), the key */
    int32_t *pinned, *device;     /* the device layout, staged and copied */
    size_t capacity;              /* 4-byte words of each of pinned and device */
    cudaEvent_t copied;           /* after the last copy from pinned */
} doc_table;

struct rp_cudnn_attention {
    get_error_string_fn error_string;
    get_last_error_string_fn last_error_string; /* NULL where the library lacks it */
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
    doc_table tables[TABLE_SLOTS];
    /* how the last documents plan of each direction (forward, backward)
     * cuDNN ran is written (a graph_variant's name and its layout's; empty
     * before one) */
    char documents_graph[2][WAY_BYTES];
    unsigned long long uses;
    /* grown buffers: cuDNN's workspace, and this module's (stats, Delta,
     * bf16 dq/dk/dv) */
    void *workspace;
    size_t workspace_bytes;
    void *buffers;
    size_t buffers_bytes;
};

/* ---- a graph under construction ----------------------------------------- */

/* the backward: ~60 tensors, ~70 for its nodes, 2 per configuration
 * offered (16 by each heuristics mode) and ENGINES_TAKEN_MAX engines */
#define MAX_DESCS 384
#define MAX_OPS 48

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

static cudnnBackendDescriptor_t tensor_ragged(graph *g, int64_t uid, cudnnDataType_t type,
                                              const int64_t dims[4], const int64_t strides[4],
                                              int by_value, cudnnBackendDescriptor_t offsets);

/* A tensor: uid > 0 for one the variant pack names, 0 for a virtual one
 * (an intermediate the fused kernel keeps to itself). by_value: a scalar
 * passed by host pointer (the scale, the mask's fill). */
static cudnnBackendDescriptor_t tensor(graph *g, int64_t uid, cudnnDataType_t type,
                                       const int64_t dims[4], const int64_t strides[4],
                                       int by_value)
{
    return tensor_ragged(g, uid, type, dims, strides, by_value, NULL);
}

/* The same, its entries (the first dim) where offsets [dims[0] + 1] (a
 * tensor of int32 element offsets) puts them when not NULL: cuDNN's
 * ragged layout */
static cudnnBackendDescriptor_t tensor_ragged(graph *g, int64_t uid, cudnnDataType_t type,
                                              const int64_t dims[4], const int64_t strides[4],
                                              int by_value, cudnnBackendDescriptor_t offsets)
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
    if (offsets)
        set(g, t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &offsets, "tensor ragged offsets");
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
 * dim may be a divisor of a's: grouped-query attention); m, n, k (or NULL)
 * int32 [entries, 1, 1, 1] tensors of each entry's rows, columns and inner
 * dim where they are less than the dims' (documents' lengths) */
static void matmul_sized(graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                         cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t m_len,
                         cudnnBackendDescriptor_t n_len, cudnnBackendDescriptor_t k_len)
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
    if (m_len)
        set(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m_len, "matmul m override");
    if (n_len)
        set(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n_len, "matmul n override");
    if (k_len)
        set(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k_len, "matmul k override");
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
    UID_VT, UID_DELTA, UID_ONE, UID_FILL, UID_Q_OFFSETS, UID_KV_OFFSETS, UID_LENGTHS_Q,
    UID_LENGTHS_KV, UID_STATS_OFFSETS
};

/* The ways a documents graph is written, tried in turn until cuDNN offers
 * a deterministic engine for one: which node patterns cuDNN's fused
 * engines match is not documented node by node, and cudnn-frontend has
 * lowered its padding mask differently over cuDNN's versions (read in its
 * SDPA nodes). For cuDNN 9.10 and newer it writes the comparisons in
 * boolean, and the backward masks padding once, before the statistics are
 * subtracted, and the causal mask after them; before 9.10 its forward
 * compared in int32, and its backward applied the padding mask again after
 * the statistics (a workaround of a cuDNN 9.0 bug), the causal mask before
 * them. Each direction tries the frontend's way for the library's version
 * first, then the others.
 *
 * Each way is written in each of four layouts in turn (documents_layout):
 * NVIDIA's Transformer Engine, which runs cuDNN's ragged SDPA in
 * production, binds int64 offsets wherever the runtime is 9.5 or newer
 * (int32 only for offsets it is handed as such, in the forward), and from
 * 9.6 on sm_90 packs the statistics by token with their own ragged offsets
 * (its "TH1" Stats; cudnn-frontend then packs the backward's softmax sum,
 * our Delta, the same way); cudnn-frontend's samples bind int32 offsets
 * and padded statistics. So the packed statistics come first from 9.6,
 * int64 offsets first from 9.5; the lengths stay int32 (both do so). */
typedef struct graph_variant {
    const char *name;
    int int32_compares; /* the padding mask's comparisons computed and written in int32 */
    int padding_once;   /* the backward's padding mask before the statistics only */
    int causal_after;   /* the backward's causal mask after the statistics are subtracted */
} graph_variant;

/* the forward's graph has one padding mask and no statistics to subtract */
static const graph_variant forward_variants[] = {
    {"boolean compares", 0, 0, 0},
    {"int32 compares", 1, 0, 0},
};
static const graph_variant backward_variants[] = {
    {"boolean compares, padding mask twice", 0, 0, 0},
    {"int32 compares, padding mask twice", 1, 0, 0},
    {"boolean compares, padding mask once", 0, 1, 0},
    {"int32 compares, padding mask once", 1, 1, 0},
    {"boolean compares, padding mask once, causal mask after the statistics", 0, 1, 1},
    {"int32 compares, padding mask once, causal mask after the statistics", 1, 1, 1},
};
/* the order each direction tries them in, by cuDNN's version (indices
 * into the tables above) */
#define FRONTEND_SINGLE_PADDING 91000 /* the version from which the frontend masks padding once */
static const int forward_ways_new[] = {0, 1}, forward_ways_old[] = {1, 0};
static const int backward_ways_new[] = {4, 2, 0, 5, 3, 1}, backward_ways_old[] = {0, 2, 4, 1, 3, 5};
#define FORWARD_WAYS ((int)(sizeof forward_ways_new / sizeof forward_ways_new[0]))
#define BACKWARD_WAYS ((int)(sizeof backward_ways_new / sizeof backward_ways_new[0]))
#define RAGGED_INT64_FROM 90500 /* the version from which int64 offsets are tried first */
#define PACKED_STATS_FROM 90600 /* the version from which packed statistics are tried first */
/* the layouts, by statistics then offsets: packed int64, packed int32,
 * padded int64, padded int32 */
static const documents_layout layouts[] = {
    {"int64 ragged offsets, packed statistics", 1, 1},
    {"int32 ragged offsets, packed statistics", 0, 1},
    {"int64 ragged offsets, padded statistics", 1, 0},
    {"int32 ragged offsets, padded statistics", 0, 0},
};
#define LAYOUTS ((int)(sizeof layouts / sizeof layouts[0]))
/* the order each version tries them in (indices into layouts[]): from
 * PACKED_STATS_FROM packed first, from RAGGED_INT64_FROM int64 first */
static const int layouts_packed_wide[LAYOUTS] = {0, 1, 2, 3};
static const int layouts_padded_wide[LAYOUTS] = {2, 3, 0, 1};
static const int layouts_padded_narrow[LAYOUTS] = {3, 2, 1, 0};

typedef struct dims_set {
    int64_t b, h, hk, s, d;
    /* a documents graph's way (b ragged entries, one per document, of at
     * most s tokens) and its layout; both NULL in a dense one */
    const graph_variant *variant;
    const documents_layout *layout;
} dims_set;

/* The ragged layout of a documents graph (every member NULL in a dense
 * one): the element offsets of the entries of q-shaped and of k-shaped
 * tensors and, where the statistics are packed, of theirs (int32 or int64,
 * as the layout says), and the entries' lengths, the matmuls' sizes and the
 * padding mask's bounds (one int32 tensor each for the queries' and the
 * keys' sides, bound to the same memory: self-attention). */
typedef struct ragged {
    cudnnBackendDescriptor_t q_offsets, kv_offsets, stats_offsets, lengths_q, lengths_kv;
} ragged;

#define D4(name, x0, x1, x2, x3) const int64_t name[4] = {x0, x1, x2, x3}

static ragged ragged_of(graph *g, const dims_set *z)
{
    ragged r = {0};
    if (!z->variant)
        return r;
    D4(od, z->b + 1, 1, 1, 1);
    D4(ld, z->b, 1, 1, 1);
    D4(unit, 1, 1, 1, 1);
    const cudnnDataType_t type = z->layout->int64_offsets ? CUDNN_DATA_INT64 : CUDNN_DATA_INT32;
    r.q_offsets = tensor(g, UID_Q_OFFSETS, type, od, unit, 0);
    r.kv_offsets = tensor(g, UID_KV_OFFSETS, type, od, unit, 0);
    if (z->layout->packed_stats)
        r.stats_offsets = tensor(g, UID_STATS_OFFSETS, type, od, unit, 0);
    r.lengths_q = tensor(g, UID_LENGTHS_Q, CUDNN_DATA_INT32, ld, unit, 0);
    r.lengths_kv = tensor(g, UID_LENGTHS_KV, CUDNN_DATA_INT32, ld, unit, 0);
    return r;
}

/* A tensor of one value per row of the scores, [b, h, s, 1] (the
 * statistics, the backward's Delta): padded per entry, or, where the
 * layout packs the statistics, by token ([tokens, h], ragged by the
 * statistics' offsets) */
static cudnnBackendDescriptor_t row_values(graph *g, const dims_set *z, const ragged *r,
                                           int64_t uid)
{
    D4(rd, z->b, z->h, z->s, 1);
    D4(padded, z->h * z->s, z->s, 1, 1);
    D4(packed, z->h * z->s, 1, z->h, 1);
    if (r->stats_offsets)
        return tensor_ragged(g, uid, CUDNN_DATA_FLOAT, rd, packed, 0, r->stats_offsets);
    return tensor(g, uid, CUDNN_DATA_FLOAT, rd, padded, 0);
}

/* The row and column indices (int32, virtual) of the score matrix x */
static void indices(graph *g, const dims_set *z, cudnnBackendDescriptor_t x,
                    cudnnBackendDescriptor_t *row, cudnnBackendDescriptor_t *col)
{
    D4(sd, z->b, z->h, z->s, z->s);
    D4(ss, z->h * z->s * z->s, z->s * z->s, z->s, 1);
    *row = tensor(g, 0, CUDNN_DATA_INT32, sd, ss, 0);
    *col = tensor(g, 0, CUDNN_DATA_INT32, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, x, NULL, NULL, *row, 2, CUDNN_DATA_INT32);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, x, NULL, NULL, *col, 3, CUDNN_DATA_INT32);
}

/* y = mode(x, b[, t]) of the score matrix's shape, in type (virtual) */
static cudnnBackendDescriptor_t score_node(graph *g, const dims_set *z, cudnnDataType_t type,
                                           cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                           cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t)
{
    D4(sd, z->b, z->h, z->s, z->s);
    D4(ss, z->h * z->s * z->s, z->s * z->s, z->s, 1);
    cudnnBackendDescriptor_t y = tensor(g, 0, type, sd, ss, 0);
    pointwise(g, mode, x, b, t, y, 0, type);
    return y;
}

static cudnnBackendDescriptor_t compare(graph *g, const dims_set *z, cudnnPointwiseMode_t mode,
                                        cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b)
{
    return score_node(g, z, CUDNN_DATA_BOOLEAN, mode, a, b, NULL);
}

/* x where keep, else the fill */
static cudnnBackendDescriptor_t kept(graph *g, const dims_set *z, cudnnBackendDescriptor_t x,
                                     cudnnBackendDescriptor_t fill, cudnnBackendDescriptor_t keep)
{
    return score_node(g, z, CUDNN_DATA_FLOAT, CUDNN_POINTWISE_BINARY_SELECT, x, fill, keep);
}

/* x where row < the entry's query length and column < its key length,
 * else the fill: a documents graph's padding mask (the nodes cudnn-frontend
 * lowers its padding mask to) */
static cudnnBackendDescriptor_t padding_masked(graph *g, const dims_set *z, const ragged *r,
                                               cudnnBackendDescriptor_t x,
                                               cudnnBackendDescriptor_t fill)
{
    cudnnBackendDescriptor_t row, col;
    indices(g, z, x, &row, &col);
    const cudnnDataType_t type = z->variant->int32_compares ? CUDNN_DATA_INT32
                                                            : CUDNN_DATA_BOOLEAN;
    cudnnBackendDescriptor_t row_in =
        score_node(g, z, type, CUDNN_POINTWISE_CMP_LT, row, r->lengths_q, NULL);
    cudnnBackendDescriptor_t col_in =
        score_node(g, z, type, CUDNN_POINTWISE_CMP_LT, col, r->lengths_kv, NULL);
    return kept(g, z, x, fill, compare(g, z, CUDNN_POINTWISE_LOGICAL_AND, row_in, col_in));
}

/* x where row >= column, else the fill: the causal mask */
static cudnnBackendDescriptor_t causal_masked(graph *g, const dims_set *z,
                                              cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t fill)
{
    cudnnBackendDescriptor_t row, col;
    indices(g, z, x, &row, &col);
    return kept(g, z, x, fill, compare(g, z, CUDNN_POINTWISE_CMP_GE, row, col));
}

/* The masked, scaled scores scale * Q K^T (fp32, virtual), less the
 * forward's statistics in the backward (stats_to_subtract). Every row
 * keeps at least its diagonal, so no row is all fill and Stats keeps the
 * contract's meaning. A dense graph: scale, (less the statistics), causal
 * mask. A documents graph, in the order cudnn-frontend builds its padded
 * graphs: the matmul sized by the entries' lengths, scale, padding mask,
 * causal mask, (less the statistics, the padding mask again), or in the
 * backward as its way says (graph_variant: the padding mask once; the
 * causal mask after the statistics). */
static cudnnBackendDescriptor_t masked_scores(graph *g, const dims_set *z, const ragged *r,
                                              cudnnBackendDescriptor_t q,
                                              cudnnBackendDescriptor_t kt,
                                              cudnnBackendDescriptor_t scale,
                                              cudnnBackendDescriptor_t fill,
                                              cudnnBackendDescriptor_t stats_to_subtract)
{
    D4(sd, z->b, z->h, z->s, z->s);
    D4(ss, z->h * z->s * z->s, z->s * z->s, z->s, 1);
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t s = tensor(g, 0, f32, sd, ss, 0);
    matmul_sized(g, q, kt, s, r->lengths_q, r->lengths_kv, NULL);
    cudnnBackendDescriptor_t scaled = tensor(g, 0, f32, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_MUL, s, scale, NULL, scaled, 0, f32);
    /* in a documents graph, the causal mask after the statistics only where
     * the way says so (a dense graph's always comes last) */
    const int causal_last = !z->variant || (stats_to_subtract && z->variant->causal_after);
    if (z->variant)
        scaled = padding_masked(g, z, r, scaled, fill);
    if (!causal_last)
        scaled = causal_masked(g, z, scaled, fill);
    if (stats_to_subtract) { /* the backward: scores less the forward's statistics */
        cudnnBackendDescriptor_t less = tensor(g, 0, f32, sd, ss, 0);
        pointwise(g, CUDNN_POINTWISE_SUB, scaled, stats_to_subtract, NULL, less, 0, f32);
        scaled = less;
    }
    if (causal_last)
        return causal_masked(g, z, scaled, fill);
    return stats_to_subtract && !z->variant->padding_once ? padding_masked(g, z, r, scaled, fill)
                                                          : scaled;
}

static void build_forward(graph *g, const dims_set *z)
{
    cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    int64_t b = z->b, h = z->h, hk = z->hk, s = z->s, d = z->d;
    const ragged r = ragged_of(g, z);
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
    cudnnBackendDescriptor_t q = tensor_ragged(g, UID_Q, bf, qd, qs, 0, r.q_offsets);
    cudnnBackendDescriptor_t kt = tensor_ragged(g, UID_KT, bf, ktd, kts, 0, r.kv_offsets);
    cudnnBackendDescriptor_t v = tensor_ragged(g, UID_V, bf, vd, vs, 0, r.kv_offsets);
    cudnnBackendDescriptor_t o = tensor_ragged(g, UID_O, bf, qd, qs, 0, r.q_offsets);
    cudnnBackendDescriptor_t stats = row_values(g, z, &r, UID_STATS);
    cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, f32, one, one, 1);
    cudnnBackendDescriptor_t fill = tensor(g, UID_FILL, f32, one, one, 1);
    cudnnBackendDescriptor_t masked = masked_scores(g, z, &r, q, kt, scale, fill, NULL);
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
    matmul_sized(g, p, v, o, r.lengths_q, NULL, r.lengths_kv);
}

static void build_backward(graph *g, const dims_set *z)
{
    cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    int64_t b = z->b, h = z->h, hk = z->hk, s = z->s, d = z->d;
    int grouped = hk != h;
    const ragged r = ragged_of(g, z);
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
    cudnnBackendDescriptor_t q = tensor_ragged(g, UID_Q, bf, qd, qs, 0, r.q_offsets);
    cudnnBackendDescriptor_t kt = tensor_ragged(g, UID_KT, bf, ktd, kts, 0, r.kv_offsets);
    cudnnBackendDescriptor_t vt = tensor_ragged(g, UID_VT, bf, ktd, kts, 0, r.kv_offsets);
    cudnnBackendDescriptor_t o = tensor_ragged(g, UID_O, bf, qd, qs, 0, r.q_offsets);
    cudnnBackendDescriptor_t dout = tensor_ragged(g, UID_DO, bf, qd, qs, 0, r.q_offsets);
    cudnnBackendDescriptor_t stats = row_values(g, z, &r, UID_STATS);
    cudnnBackendDescriptor_t delta = row_values(g, z, &r, UID_DELTA);
    cudnnBackendDescriptor_t dq = tensor_ragged(g, UID_DQ, bf, qd, qs, 0, r.q_offsets);
    cudnnBackendDescriptor_t dk = tensor_ragged(g, UID_DK, bf, kd, ks, 0, r.kv_offsets);
    cudnnBackendDescriptor_t dv = tensor_ragged(g, UID_DV, bf, kd, ks, 0, r.kv_offsets);
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
    cudnnBackendDescriptor_t masked = masked_scores(g, z, &r, q, kt, scale, fill, stats);
    cudnnBackendDescriptor_t p = tensor(g, 0, f32, sd, ss, 0);
    pointwise(g, CUDNN_POINTWISE_EXP, masked, NULL, NULL, p, 0, f32);
    /* dV = P^T dO (summed over the group) */
    cudnnBackendDescriptor_t pt = tensor(g, 0, bf, sd, sts, 0);
    reshape(g, p, pt);
    if (grouped) { /* per query head in bf16, as cuDNN's own SDPA graphs do */
        cudnnBackendDescriptor_t full = tensor(g, 0, bf, fd, fs, 0);
        matmul_sized(g, pt, dout, full, r.lengths_kv, NULL, r.lengths_q);
        reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, dv);
    } else {
        matmul_sized(g, pt, dout, dv, r.lengths_kv, NULL, r.lengths_q);
    }
    /* dS = P (dO V^T - Delta) scale */
    cudnnBackendDescriptor_t dp = tensor(g, 0, f32, sd, ss, 0);
    cudnnBackendDescriptor_t centred = tensor(g, 0, f32, sd, ss, 0);
    cudnnBackendDescriptor_t dsu = tensor(g, 0, f32, sd, ss, 0);
    cudnnBackendDescriptor_t ds = tensor(g, 0, f32, sd, ss, 0);
    matmul_sized(g, dout, vt, dp, r.lengths_q, r.lengths_kv, NULL);
    pointwise(g, CUDNN_POINTWISE_SUB, dp, delta, NULL, centred, 0, f32);
    pointwise(g, CUDNN_POINTWISE_MUL, centred, p, NULL, dsu, 0, f32);
    pointwise(g, CUDNN_POINTWISE_MUL, dsu, scale, NULL, ds, 0, f32);
    /* dK = dS^T Q (summed over the group) */
    cudnnBackendDescriptor_t dst = tensor(g, 0, bf, sd, sts, 0);
    reshape(g, ds, dst);
    if (grouped) {
        cudnnBackendDescriptor_t full = tensor(g, 0, bf, fd, fs, 0);
        matmul_sized(g, dst, q, full, r.lengths_kv, NULL, r.lengths_q);
        reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, dk);
    } else {
        matmul_sized(g, dst, q, dk, r.lengths_kv, NULL, r.lengths_q);
    }
    /* dQ = dS K, K the reshape of K^T's tensor (with its ragged offsets):
     * one input holds K, as in the SDPA backward graphs cuDNN's frontend
     * builds (a second input on the same memory may not match the fused
     * engine's pattern) */
    cudnnBackendDescriptor_t k = tensor_ragged(g, 0, bf, kd, ks, 0, r.kv_offsets);
    reshape(g, kt, k);
    matmul_sized(g, ds, k, dq, r.lengths_q, NULL, r.lengths_kv);
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

/* build_plan_as's answer where the only plans cuDNN's heuristics mode A
 * offered asked more workspace than the budget: no other way of writing
 * the graph helps */
#define PLAN_TOO_BIG 2

/* d, made by cuDNN, destroyed with g (or kept with its plan): 0, or -1
 * with d destroyed where g holds no more */
static int track(graph *g, cudnnBackendDescriptor_t d)
{
    if (g->ndescs == MAX_DESCS) {
        g->a->desc_destroy(d);
        return -1;
    }
    g->descs[g->ndescs++] = d;
    return 0;
}

/* The engine configurations cuDNN's heuristics in `mode` offer for the
 * graph og, at most 16, into cfgs: how many. A failure is g's (its status
 * and step). */
static int64_t heuristics(graph *g, cudnnBackendDescriptor_t og, cudnnBackendHeurMode_t mode,
                          cudnnBackendDescriptor_t cfgs[16])
{
    rp_cudnn_attention *a = g->a;
    cudnnBackendDescriptor_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og,
        "heuristics' graph");
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics' mode");
    finish(g, heur, "the heuristics");
    int64_t count = 0, got = 0;
    if (g->status == CUDNN_STATUS_SUCCESS &&
        a->get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                    NULL) != CUDNN_STATUS_SUCCESS)
        count = 0;
    if (count > 16)
        count = 16;
    for (int64_t i = 0; i < count; i++)
        cfgs[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine config");
    if (g->status == CUDNN_STATUS_SUCCESS && count > 0 &&
        a->get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                    &got, cfgs) != CUDNN_STATUS_SUCCESS)
        got = 0;
    return g->status == CUDNN_STATUS_SUCCESS ? got : 0;
}

/* What cuDNN's engines said of a graph no heuristics offered one for: how
 * many it has, and of those tried and refused, how many with each status
 * (the first four statuses met; the rest as others), and cuDNN's words for
 * one refusal: the first engine's that refused with anything but the graph's
 * pattern (an engine that recognised the pattern and then refused
 * something in it), else the first's. */
typedef struct engine_census {
    int64_t engines, refused, others;
    cudnnStatus_t status[4];
    int64_t times[4];
    int nstatus;
    int64_t said_by; /* the engine whose words `said` holds; -1: none */
    cudnnStatus_t said_status;
    char said[SAID_BYTES];
} engine_census;

static void census_note(const rp_cudnn_attention *a, engine_census *c, int64_t engine,
                        cudnnStatus_t st)
{
    c->refused++;
    int k = 0;
    while (k < c->nstatus && c->status[k] != st)
        k++;
    if (k == c->nstatus && k < 4)
        c->status[c->nstatus++] = st;
    if (k < 4)
        c->times[k]++;
    else
        c->others++;
    /* keep the words of the first refusal, until one past the pattern */
    const cudnnStatus_t pattern = CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
    const int better = c->said_by < 0 || (c->said_status == pattern && st != pattern);
    char words[SAID_BYTES] = "";
    if (a->last_error_string)
        a->last_error_string(words, sizeof words);
    words[sizeof words - 1] = '\0';
    if (!better || !words[0])
        return;
    for (char *p = words; *p; p++) /* one line */
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    snprintf(c->said, sizeof c->said, "%s", words);
    c->said_by = engine;
    c->said_status = st;
}

/* Every engine cuDNN has for the graph og, by global index (at most
 * ENGINES_MAX): those that take it (their finalisation succeeds) become
 * configurations in cfgs (at most ENGINES_TAKEN_MAX, tracked in g, their
 * indices in index); the others are counted in *c. How many took it. */
static int64_t engines_by_index(graph *g, cudnnBackendDescriptor_t og,
                                cudnnBackendDescriptor_t cfgs[ENGINES_TAKEN_MAX],
                                int64_t index[ENGINES_TAKEN_MAX], engine_census *c)
{
    rp_cudnn_attention *a = g->a;
    int64_t count = 0, n = 0, took = 0;
    if (a->get_attr(og, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n,
                    &count) != CUDNN_STATUS_SUCCESS)
        count = 0;
    c->engines = count;
    for (int64_t i = 0; i < count && i < ENGINES_MAX && took < ENGINES_TAKEN_MAX; i++) {
        cudnnBackendDescriptor_t engine = NULL, cfg = NULL;
        if (a->desc_create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS)
            break;
        cudnnStatus_t st = a->set_attr(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->set_attr(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->finalize(engine);
        if (st != CUDNN_STATUS_SUCCESS) {
            census_note(a, c, i, st);
            a->desc_destroy(engine);
            continue;
        }
        if (track(g, engine) != 0 ||
            a->desc_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg) != CUDNN_STATUS_SUCCESS ||
            track(g, cfg) != 0)
            break;
        st = a->set_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                         &engine);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->finalize(cfg);
        if (st != CUDNN_STATUS_SUCCESS) {
            census_note(a, c, i, st);
            continue;
        }
        index[took] = i;
        cfgs[took++] = cfg;
    }
    return took;
}

/* What refused each configuration tried, for the message when none is
 * left: how many were offered, non-deterministic, not finalized (the last
 * status), too big; the least workspace a finished plan asked */
typedef struct config_tally {
    int64_t offered, nondeterministic, unfinished, too_big, asked;
    cudnnStatus_t last;
} config_tally;

/* The first of n configurations that is deterministic and whose plan
 * finalizes within the slot's workspace budget: slot->plan and
 * slot->workspace set, 0; else -1, the reasons counted in *t. */
static int plan_from(rp_cudnn_attention *a, plan_slot *slot, graph *g,
                     const cudnnBackendDescriptor_t *cfgs, int64_t n, config_tally *t)
{
    t->offered += n;
    for (int64_t i = 0; i < n && g->status == CUDNN_STATUS_SUCCESS; i++) {
        if (!deterministic(a, cfgs[i], g)) {
            t->nondeterministic++;
            continue;
        }
        cudnnBackendDescriptor_t plan = NULL;
        if (a->desc_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
            return -1;
        int64_t ws = 0, got = 0;
        cudnnStatus_t st = a->set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                       1, &a->handle);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->finalize(plan);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                             &got, &ws);
        int ok = st == CUDNN_STATUS_SUCCESS;
        if (!ok) {
            t->unfinished++;
            t->last = st;
        }
        if (ok && (!t->asked || ws < t->asked))
            t->asked = ws; /* the least a finished plan asked: rp_cudnn_attention_workspace's */
        if (ok && (size_t)ws > slot->key.budget) {
            t->too_big++;
            ok = 0;
        }
        if (!ok) {
            a->desc_destroy(plan);
            continue;
        }
        slot->plan = plan;
        slot->workspace = ws;
        return 0;
    }
    return -1;
}

/* appends to why (WHY_BYTES) at *at, as far as it has room */
static void append(char *why, size_t *at, const char *fmt, ...)
{
    if (*at >= WHY_BYTES)
        return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(why + *at, WHY_BYTES - *at, fmt, ap);
    va_end(ap);
    *at += n > 0 ? (size_t)n : 0;
}

/* slot->refused where no configuration gave a plan: the workspace, or
 * what cuDNN offered and what refused it (with the engines' census where
 * they were asked one by one) */
static void say_refused(const rp_cudnn_attention *a, plan_slot *slot, const config_tally *t,
                        const engine_census *c)
{
    const plan_key *key = &slot->key;
    const rp_attn_shape shape = {.nseq = key->b, .seqlen = key->s, .nheads = key->h,
                                 .nkv = key->hk, .head_dim = key->d, .scale = key->scale};
    char *why = slot->refused;
    const size_t len = sizeof slot->refused;
    if (t->too_big && key->budget == 0) {
        snprintf(why, len,
                 "cuDNN's plan needs a %.1f MiB workspace, more than a quarter of the GPU "
                 "(%.1f MiB), so a run reserves none for it at this length (%lld of %lld "
                 "configurations too big)", (double)t->asked / 1048576.0,
                 (double)rp_attention_cudnn_workspace_cap(a->device_total) / 1048576.0,
                 (long long)t->too_big, (long long)t->offered);
        return;
    }
    if (t->too_big) {
        snprintf(why, len,
                 "cuDNN's plan needs a %.1f MiB workspace, more than the %.1f MiB the run "
                 "reserves for it (2 bytes a score of a microbatch's heads over lengths "
                 "padded to %d, %zu a row and %.0f MiB, when that is at most a quarter of "
                 "the GPU; %lld "
                 "of %lld configurations too big, %lld non-deterministic, %lld not "
                 "finalized)", (double)t->asked / 1048576.0, (double)key->budget / 1048576.0,
                 RP_CUDNN_WORKSPACE_TILE, rp_attention_cudnn_row_bytes(&shape),
                 (double)RP_CUDNN_WORKSPACE_SLACK / 1048576.0, (long long)t->too_big,
                 (long long)t->offered, (long long)t->nondeterministic,
                 (long long)t->unfinished);
        return;
    }
    size_t at = 0;
    append(why, &at,
           "cuDNN offers no engine for this graph: %lld configurations, %lld "
           "non-deterministic (cuDNN's note), %lld not finalized%s%s",
           (long long)t->offered, (long long)t->nondeterministic, (long long)t->unfinished,
           t->unfinished ? ", the last with " : "",
           t->unfinished ? a->error_string(t->last) : "");
    if (!c)
        return;
    if (c->engines == 0) {
        append(why, &at, "; cuDNN counts no engine for its operations");
        return;
    }
    const char *none = c->nstatus ? "" : "none refuses it";
    if (c->engines > ENGINES_MAX)
        append(why, &at, "; of its %lld engines, the first %d asked one by one, %s",
               (long long)c->engines, ENGINES_MAX, none);
    else
        append(why, &at, "; of its %lld engines, asked one by one, %s", (long long)c->engines,
               none);
    for (int k = 0; k < c->nstatus; k++)
        append(why, &at, k ? ", %lld with %s" : "%lld refuse it with %s", (long long)c->times[k],
               a->error_string(c->status[k]));
    if (c->others)
        append(why, &at, ", %lld with other statuses", (long long)c->others);
    if (c->said_by >= 0)
        append(why, &at, "; engine %lld says \"%s\"", (long long)c->said_by, c->said);
}

/* Builds the graph of a slot's shape (written as `variant` says in
 * `layout`, both NULL for a dense one) and its first deterministic plan
 * within the workspace cap: from the configurations cuDNN's heuristics
 * mode A offer; where none gives one (and none was too big), from its
 * fallback heuristics'; where those offer none either, from its engines
 * asked one by one by global index (cudnn-frontend's plan from an engine
 * id), which also says why each refuses the graph. 0 (slot->plan set,
 * slot->found_by saying how where not by mode A), RP_CUDNN_REFUSED or
 * PLAN_TOO_BIG (slot->refused set). */
static int build_plan_as(rp_cudnn_attention *a, plan_slot *slot, const graph_variant *variant,
                         const documents_layout *layout)
{
    graph g = {.a = a, .status = CUDNN_STATUS_SUCCESS, .next_virtual_uid = 1000};
    const plan_key *key = &slot->key;
    dims_set z = {key->b, key->h, key->hk, key->s, key->d, variant, layout};
    if (key->backward)
        build_backward(&g, &z);
    else
        build_forward(&g, &z);
    cudnnBackendDescriptor_t og = make(&g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the graph");
    set(&g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g.nops, g.ops,
        "the graph's operations");
    set(&g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &a->handle,
        "the graph's handle");
    finish(&g, og, "the operation graph");
    cudnnBackendDescriptor_t cfgs[16];
    int64_t got = heuristics(&g, og, CUDNN_HEUR_MODE_A, cfgs);
    if (g.status != CUDNN_STATUS_SUCCESS) {
        describe(a, &g, slot->refused, sizeof slot->refused);
        graph_free(&g);
        return RP_CUDNN_REFUSED;
    }
    config_tally t = {0};
    engine_census c = {.said_by = -1};
    int asked_engines = 0;
    slot->found_by[0] = '\0';
    plan_from(a, slot, &g, cfgs, got, &t);
    /* mode A's plans too big: no other way of writing the graph changes
     * what its engines ask (the fallback's and the others', generic ones
     * perhaps, might ask more for one way than the fused ones for another) */
    const int too_big_a = !slot->plan && t.too_big > 0;
    if (!slot->plan && !too_big_a) {
        /* no fallback heuristics for the graph is no refusal of it */
        got = heuristics(&g, og, CUDNN_HEUR_MODE_FALLBACK, cfgs);
        g.status = CUDNN_STATUS_SUCCESS;
        g.failed_at = NULL;
        if (plan_from(a, slot, &g, cfgs, got, &t) == 0)
            snprintf(slot->found_by, sizeof slot->found_by, "cuDNN's fallback heuristics");
    }
    if (!slot->plan && t.offered == 0) {
        cudnnBackendDescriptor_t taken[ENGINES_TAKEN_MAX];
        int64_t index[ENGINES_TAKEN_MAX];
        const int64_t n = engines_by_index(&g, og, taken, index, &c);
        asked_engines = 1;
        for (int64_t i = 0; i < n && !slot->plan; i++)
            if (plan_from(a, slot, &g, &taken[i], 1, &t) == 0)
                snprintf(slot->found_by, sizeof slot->found_by,
                         "engine %lld, which no heuristics offered", (long long)index[i]);
    }
    if (!slot->plan) {
        slot->workspace = t.asked;
        say_refused(a, slot, &t, asked_engines ? &c : NULL);
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
    return slot->plan ? 0 : too_big_a ? PLAN_TOO_BIG : RP_CUDNN_REFUSED;
}


/* Builds a slot's plan: a dense graph as it is written; a documents graph
 * in each of its direction's ways in turn, in the first layout for the
 * library's version, then in the others, until cuDNN takes one
 * (slot->variant and slot->layout name it). 0, or RP_CUDNN_REFUSED with
 * slot->refused saying why the first was refused and naming the others
 * tried. */
static int build_plan(rp_cudnn_attention *a, plan_slot *slot)
{
    if (!slot->key.documents)
        return build_plan_as(a, slot, NULL, NULL) == 0 ? 0 : RP_CUDNN_REFUSED;
    const int newer = a->version >= FRONTEND_SINGLE_PADDING;
    const graph_variant *table = slot->key.backward ? backward_variants : forward_variants;
    const int *ways = slot->key.backward ? (newer ? backward_ways_new : backward_ways_old)
                                         : (newer ? forward_ways_new : forward_ways_old);
    const int nways = slot->key.backward ? BACKWARD_WAYS : FORWARD_WAYS;
    const int *order = a->version >= PACKED_STATS_FROM   ? layouts_packed_wide
                       : a->version >= RAGGED_INT64_FROM ? layouts_padded_wide
                                                         : layouts_padded_narrow;
    char why[WHY_BYTES] = "";
    size_t at = 0;
    int tried = 0, too_big = 0;
    for (int pass = 0; pass < LAYOUTS && !too_big; pass++) {
        const documents_layout *layout = &layouts[order[pass]];
        for (int v = 0; v < nways && !too_big; v++, tried++) {
            const graph_variant *variant = &table[ways[v]];
            const int rc = build_plan_as(a, slot, variant, layout);
            if (rc == 0) {
                slot->variant = variant->name;
                slot->layout = layout;
                return 0;
            }
            /* the first way's reason, the others' names, then the layouts */
            if (tried == 0)
                append(why, &at, "%s (written with %s, %s", slot->refused, variant->name,
                       layout->name);
            else if (pass == 0)
                append(why, &at, "%s%s", v == 1 ? "; refused too with " : " / ", variant->name);
            /* no other way of writing changes the workspace it asks */
            too_big = rc == PLAN_TOO_BIG;
        }
        if (pass > 0 && tried == (pass + 1) * nways)
            append(why, &at, "%s%s", pass == 1 ? "; the same ways again with " : "; with ",
                   layout->name);
        else if (pass > 0)
            append(why, &at, "; the first %d of them again with %s", tried - pass * nways,
                   layout->name);
    }
    append(why, &at, ")");
    snprintf(slot->refused, sizeof slot->refused, "%s", why);
    return RP_CUDNN_REFUSED;
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

static int same_key(const plan_key *x, const plan_key *y)
{
    return x->backward == y->backward && x->documents == y->documents && x->b == y->b &&
           x->s == y->s && x->h == y->h && x->hk == y->hk && x->d == y->d &&
           memcmp(&x->scale, &y->scale, sizeof x->scale) == 0 && x->budget == y->budget;
}

/* s without its segments: the dense call the budgets are computed for */
static rp_attn_shape without_segments(const rp_attn_shape *s)
{
    rp_attn_shape dense = *s;
    dense.seg_start = dense.seg_host = NULL;
    return dense;
}

/* The key of a dense call of shape s: its workspace budget the one a run
 * reserves for it (kernels/attention_choice.h). */
static plan_key dense_key(const rp_cudnn_attention *a, const rp_attn_shape *s, int backward)
{
    const rp_attn_shape dense = without_segments(s);
    return (plan_key){.backward = backward, .b = s->nseq, .s = s->seqlen, .h = s->nheads,
                      .hk = s->nkv, .d = s->head_dim, .scale = s->scale,
                      .budget = rp_attention_cudnn_workspace_budget(&dense, a->device_total)};
}

/* The slot of a key, its plan built (or refused, ->plan NULL and ->refused
 * saying why) on first use. */
static plan_slot *slot_for(rp_cudnn_attention *a, const plan_key *key)
{
    plan_slot *oldest = &a->slots[0];
    a->uses++;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        plan_slot *p = &a->slots[i];
        if (p->used && same_key(&p->key, key)) {
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
    oldest->key = *key;
    oldest->last_use = a->uses;
    build_plan(a, oldest);
    return oldest;
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

/* ---- documents' tables ------------------------------------------------- */

/* 4-byte words of a part of n int32, 16-byte aligned */
static size_t part(int64_t n) { return (size_t)(n + 3) / 4 * 4; }

static void table_free(doc_table *t)
{
    if (t->copied)
        cudaEventSynchronize(t->copied), cudaEventDestroy(t->copied);
    cudaFreeHost(t->pinned);
    cudaFree(t->device);
    free(t->first);
    free(t->length);
    memset(t, 0, sizeof *t);
}

/* Where the table's parts start in t->device (attn_documents.h's first and
 * length, and the ragged offsets of q, of k and of packed statistics, in
 * int32 and in int64) */
typedef struct table_parts {
    int32_t *q_offsets, *kv_offsets, *length, *first, *stats_offsets;
    int64_t *q_offsets64, *kv_offsets64, *stats_offsets64;
} table_parts;

/* 4-byte words of a table of `slots` entries: 4 parts of slots + 1 int32,
 * one of slots int32, 3 of slots + 1 int64 */
static size_t table_words(int64_t slots) { return 10 * part(slots + 1) + part(slots); }

static table_parts parts_of(int32_t *base, int64_t slots)
{
    const size_t row = part(slots + 1); /* a part of slots + 1 int32 */
    table_parts p;
    p.q_offsets = base;
    p.kv_offsets = p.q_offsets + row;
    p.length = p.kv_offsets + row;
    p.first = p.length + part(slots);
    p.stats_offsets = p.first + row;
    p.q_offsets64 = (int64_t *)(p.stats_offsets + row);
    p.kv_offsets64 = (int64_t *)(p.stats_offsets + 3 * row);
    p.stats_offsets64 = (int64_t *)(p.stats_offsets + 5 * row);
    return p;
}

/* The device table of the documents d of call s: one kept from an earlier
 * call of the same documents, or the least recently used one refilled. 0,
 * or RP_CUDNN_FAILED with why. */
static int table_for(rp_cudnn_attention *a, const rp_attn_shape *s, const rp_attn_documents *d,
                     doc_table **out, char *why, size_t why_len)
{
    const int64_t n = d->slots, q_row = s->nheads * s->head_dim, kv_row = s->nkv * s->head_dim;
    const int64_t heads = s->nheads; /* a token's packed statistics */
    int32_t *first = malloc(sizeof *first * (size_t)(n + 1));
    int32_t *length = malloc(sizeof *length * (size_t)n);
    if (!first || !length) {
        free(first), free(length);
        snprintf(why, why_len, "out of host memory for the documents' table");
        return RP_CUDNN_FAILED;
    }
    rp_attn_documents_table(s->seg_host, s->nseq, s->seqlen, d, first, length);
    doc_table *oldest = &a->tables[0];
    for (int i = 0; i < TABLE_SLOTS; i++) {
        doc_table *t = &a->tables[i];
        if (t->used && t->slots == n && t->q_row == q_row && t->kv_row == kv_row &&
            memcmp(t->first, first, sizeof *first * (size_t)(n + 1)) == 0 &&
            memcmp(t->length, length, sizeof *length * (size_t)n) == 0) {
            free(first), free(length);
            t->last_use = ++a->uses;
            *out = t;
            return 0;
        }
        if (!t->used || (oldest->used && t->last_use < oldest->last_use))
            oldest = t;
    }
    doc_table *t = oldest;
    const size_t need = table_words(n);
    cudaError_t e = cudaSuccess;
    if (t->capacity < need) { /* queued calls may read the old one */
        e = cudaStreamSynchronize(a->stream);
        cudaFreeHost(t->pinned), cudaFree(t->device);
        t->pinned = NULL, t->device = NULL, t->capacity = 0;
        if (e == cudaSuccess)
            e = cudaMallocHost((void **)&t->pinned, need * sizeof(int32_t));
        if (e == cudaSuccess)
            e = cudaMalloc((void **)&t->device, need * sizeof(int32_t));
        if (e == cudaSuccess)
            t->capacity = need;
    }
    if (e == cudaSuccess && !t->copied)
        e = cudaEventCreateWithFlags(&t->copied, cudaEventDisableTiming);
    else if (e == cudaSuccess) /* its last copy has read the staging */
        e = cudaEventSynchronize(t->copied);
    if (e != cudaSuccess) {
        cudaGetLastError();
        free(first), free(length);
        t->used = 0;
        snprintf(why, why_len, "the documents' table on the device: %s", cudaGetErrorString(e));
        return RP_CUDNN_FAILED;
    }
    free(t->first), free(t->length);
    t->first = first, t->length = length;
    t->slots = n, t->q_row = q_row, t->kv_row = kv_row;
    table_parts p = parts_of(t->pinned, n);
    for (int64_t b = 0; b <= n; b++) {
        p.q_offsets64[b] = (int64_t)first[b] * q_row;
        p.kv_offsets64[b] = (int64_t)first[b] * kv_row;
        p.stats_offsets64[b] = (int64_t)first[b] * heads;
        p.q_offsets[b] = (int32_t)p.q_offsets64[b]; /* in range: rp_attn_documents_refusal */
        p.kv_offsets[b] = (int32_t)p.kv_offsets64[b];
        p.stats_offsets[b] = (int32_t)p.stats_offsets64[b];
        p.first[b] = first[b];
        if (b < n)
            p.length[b] = length[b];
    }
    e = cudaMemcpyAsync(t->device, t->pinned, need * sizeof(int32_t), cudaMemcpyHostToDevice,
                        a->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(t->copied, a->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        t->used = 0;
        snprintf(why, why_len, "copying the documents' table: %s", cudaGetErrorString(e));
        return RP_CUDNN_FAILED;
    }
    t->used = 1;
    t->last_use = ++a->uses;
    *out = t;
    return 0;
}

/* ---- calls ------------------------------------------------------------- */

/* What a call runs: its plan, and for documents their table. RP_CUDNN_DONE
 * (0), RP_CUDNN_REFUSED or RP_CUDNN_FAILED with why. */
typedef struct call_plan {
    plan_slot *plan;
    rp_attn_documents docs; /* count 0: a dense call */
    doc_table *table;
    int64_t stats_rows;     /* rows of the statistics per head: b * s of the plan */
} call_plan;

/* The key of a call of shape s: a dense call's (dense_key), or with
 * document segments the documents' (their padded entries, *docs), or
 * RP_CUDNN_REFUSED with why where their padding does not fit
 * (rp_attn_documents_refusal). */
static int call_key(const rp_cudnn_attention *a, const rp_attn_shape *s, int backward,
                    plan_key *key, rp_attn_documents *docs, char *why, size_t why_len)
{
    memset(docs, 0, sizeof *docs);
    *key = dense_key(a, s, backward);
    if (!s->seg_start)
        return 0;
    rp_attn_documents_measure(s->seg_host, s->nseq, s->seqlen, docs);
    const char *no = rp_attn_documents_refusal(docs, s, a->device_total);
    if (no) {
        snprintf(why, why_len, "%s", no);
        return RP_CUDNN_REFUSED;
    }
    const rp_attn_shape dense = without_segments(s);
    key->documents = 1;
    key->b = docs->slots;
    key->s = docs->span;
    key->budget = rp_attention_cudnn_documents_budget(&dense, a->device_total);
    return 0;
}

/* The slot of a call's key, its plan built on first use; a documents
 * plan's way of writing its graph noted (rp_cudnn_attention_documents_graph) */
static plan_slot *slot_of_call(rp_cudnn_attention *a, const plan_key *key)
{
    plan_slot *p = slot_for(a, key);
    if (p->plan && key->documents)
        snprintf(a->documents_graph[key->backward != 0], WAY_BYTES, "%s, %s%s%s", p->variant,
                 p->layout->name, p->found_by[0] ? ", " : "", p->found_by);
    return p;
}

static int plan_call(rp_cudnn_attention *a, const rp_attn_shape *s, int backward, call_plan *c,
                     char *why, size_t why_len)
{
    memset(c, 0, sizeof *c);
    plan_key key;
    if (call_key(a, s, backward, &key, &c->docs, why, why_len))
        return RP_CUDNN_REFUSED;
    plan_slot *p = slot_of_call(a, &key);
    if (!p->plan) {
        snprintf(why, why_len, "%s", p->refused);
        return RP_CUDNN_REFUSED;
    }
    c->plan = p;
    c->stats_rows = key.b * key.s;
    return s->seg_start ? table_for(a, s, &c->docs, &c->table, why, why_len) : 0;
}

int rp_cudnn_attention_workspace(rp_cudnn_attention *a, const rp_attn_shape *s, int backward,
                                 int64_t *bytes, char *why, size_t why_len)
{
    plan_key key;
    rp_attn_documents docs;
    *bytes = 0;
    if (call_key(a, s, backward, &key, &docs, why, why_len))
        return RP_CUDNN_REFUSED;
    plan_slot *p = slot_of_call(a, &key);
    *bytes = p->workspace; /* refused: what its plan asked, 0 where none was made */
    if (p->plan)
        return 0;
    snprintf(why, why_len, "%s", p->refused);
    return RP_CUDNN_REFUSED;
}

/* lse from the plan's statistics, or the statistics from lse (a copy
 * where the plan packs them by token, else a transpose) */
static int convert_stats(rp_cudnn_attention *a, const rp_attn_shape *s, const call_plan *c,
                         float *stats, float *lse, int to_lse, char *why, size_t why_len)
{
    int e;
    if (c->table && c->plan->layout->packed_stats) { /* lse's own layout, [tokens, heads] */
        const size_t bytes = (size_t)(s->nseq * s->seqlen * s->nheads) * sizeof(float);
        e = (int)cudaMemcpyAsync(to_lse ? lse : stats, to_lse ? stats : lse, bytes,
                                 cudaMemcpyDeviceToDevice, a->stream);
    } else if (c->table) {
        table_parts p = parts_of(c->table->device, c->docs.slots);
        e = to_lse ? rp_cuda_documents_lse_from_stats(stats, lse, p.first, p.length,
                                                      c->docs.slots, c->docs.span, s->nheads,
                                                      a->stream)
                   : rp_cuda_documents_stats_from_lse(lse, stats, p.first, p.length,
                                                      c->docs.slots, c->docs.span, s->nheads,
                                                      a->stream);
    } else {
        e = to_lse ? rp_cuda_lse_from_stats(stats, lse, s->nseq, s->seqlen, s->nheads, a->stream)
                   : rp_cuda_stats_from_lse(lse, stats, s->nseq, s->seqlen, s->nheads, a->stream);
    }
    if (e)
        snprintf(why, why_len, "moving the statistics between lse and cuDNN's layout: %s",
                 cudaGetErrorString((cudaError_t)e));
    return e ? RP_CUDNN_FAILED : 0;
}

/* The variant pack's entries of a documents call's table (none for a
 * dense one): appended to uids and ptrs at n, the new count returned. */
static int table_entries(const call_plan *c, int n, int64_t *uids, void **ptrs)
{
    if (!c->table)
        return n;
    table_parts p = parts_of(c->table->device, c->docs.slots);
    const documents_layout *layout = c->plan->layout; /* the offsets of its type */
    const int wide = layout->int64_offsets;
    uids[n] = UID_Q_OFFSETS, ptrs[n++] = wide ? (void *)p.q_offsets64 : (void *)p.q_offsets;
    uids[n] = UID_KV_OFFSETS, ptrs[n++] = wide ? (void *)p.kv_offsets64 : (void *)p.kv_offsets;
    if (layout->packed_stats) {
        uids[n] = UID_STATS_OFFSETS;
        ptrs[n++] = wide ? (void *)p.stats_offsets64 : (void *)p.stats_offsets;
    }
    uids[n] = UID_LENGTHS_Q, ptrs[n++] = p.length;
    uids[n] = UID_LENGTHS_KV, ptrs[n++] = p.length;
    return n;
}

int rp_cudnn_attention_forward(rp_cudnn_attention *a, const rp_attn_shape *s, const uint16_t *q,
                               const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse,
                               char *why, size_t why_len)
{
    call_plan c;
    int rc = plan_call(a, s, 0, &c, why, why_len);
    if (rc)
        return rc;
    size_t stats_bytes = round_up((size_t)(c.stats_rows * s->nheads) * sizeof(float));
    if (grow(a, &a->buffers, &a->buffers_bytes, stats_bytes, why, why_len))
        return RP_CUDNN_FAILED;
    float *stats = a->buffers;
    float scale = s->scale, fill = -FLT_MAX;
    int64_t uids[12] = {UID_Q, UID_KT, UID_V, UID_O, UID_STATS, UID_SCALE, UID_FILL};
    void *ptrs[12] = {(void *)q, (void *)k, (void *)v, o, stats, &scale, &fill};
    int n = table_entries(&c, 7, uids, ptrs);
    rc = run(a, c.plan, n, uids, ptrs, why, why_len);
    if (rc)
        return rc;
    return convert_stats(a, s, &c, stats, lse, 1, why, why_len);
}

int rp_cudnn_attention_backward(rp_cudnn_attention *a, const rp_attn_shape *s, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                const float *lse, const uint16_t *dout, float *dq, float *dk,
                                float *dv, char *why, size_t why_len)
{
    call_plan c;
    int rc = plan_call(a, s, 1, &c, why, why_len);
    if (rc)
        return rc;
    int64_t rows = s->nseq * s->seqlen;
    size_t nq = (size_t)(rows * s->nheads * s->head_dim), nk = (size_t)(rows * s->nkv * s->head_dim);
    size_t stats_bytes = round_up((size_t)(c.stats_rows * s->nheads) * sizeof(float));
    /* the layout below (what a run reserved: rp_attention_cudnn_buffer_bytes
     * for a dense call, rp_attention_cudnn_documents_buffer_bytes's bound
     * for documents) */
    size_t need = rp_attention_cudnn_call_buffer_bytes(s, (size_t)c.stats_rows);
    if (grow(a, &a->buffers, &a->buffers_bytes, need, why, why_len))
        return RP_CUDNN_FAILED;
    char *at = a->buffers;
    float *stats = (float *)at;
    float *delta = (float *)(at + stats_bytes);
    uint16_t *dq16 = (uint16_t *)(at + 2 * stats_bytes);
    uint16_t *dk16 = (uint16_t *)(at + 2 * stats_bytes + round_up(nq * 2));
    uint16_t *dv16 = (uint16_t *)(at + 2 * stats_bytes + round_up(nq * 2) + round_up(nk * 2));
    if ((rc = convert_stats(a, s, &c, stats, (float *)lse, 0, why, why_len)))
        return rc;
    float scale = s->scale, unit = 1.0f, fill = -FLT_MAX;
    int64_t uids[18] = {UID_Q, UID_KT, UID_VT, UID_O, UID_DO, UID_STATS, UID_DELTA,
                        UID_DQ, UID_DK, UID_DV, UID_SCALE, UID_ONE, UID_FILL};
    void *ptrs[18] = {(void *)q, (void *)k, (void *)v, (void *)o, (void *)dout, stats,
                      delta, dq16, dk16, dv16, &scale, &unit, &fill};
    int n = table_entries(&c, 13, uids, ptrs);
    rc = run(a, c.plan, n, uids, ptrs, why, why_len);
    if (rc)
        return rc;
    int e;
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
    /* the figure the run's reservation was computed from (the device
     * probe's totalGlobalMem), so the budget here is the one reserved */
    struct cudaDeviceProp prop;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        cudaGetLastError();
        prop.totalGlobalMem = 0;
    }
    return rp_cudnn_attention_create_for(lib, stream, prop.totalGlobalMem, out, why, why_len);
}

int rp_cudnn_attention_create_for(const rp_cudnn_library *lib, cudaStream_t stream,
                                  size_t device_total, rp_cudnn_attention **out, char *why,
                                  size_t why_len)
{
    *out = NULL;
    rp_cudnn_attention *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(why, why_len, "allocating cuDNN attention's state");
        return RP_CUDNN_FAILED;
    }
    a->error_string = (get_error_string_fn)lib->symbols[RP_CUDNN_GET_ERROR_STRING];
    a->last_error_string =
        (get_last_error_string_fn)lib->symbols[RP_CUDNN_GET_LAST_ERROR_STRING];
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
    a->device_total = device_total;
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
    for (int i = 0; i < TABLE_SLOTS; i++)
        table_free(&a->tables[i]);
    cudaFree(a->workspace);
    cudaFree(a->buffers);
    a->destroy(a->handle);
    free(a);
    *ap = NULL;
}

const char *rp_cudnn_attention_documents_graph(const rp_cudnn_attention *a, int backward)
{
    return a && a->documents_graph[backward != 0][0] ? a->documents_graph[backward != 0] : NULL;
}
