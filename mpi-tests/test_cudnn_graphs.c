/* Proves on the CPU, with a recording stand-in for cuDNN's backend API (no
 * GPU, no libcudnn: the entry points are this file's, handed over as an
 * opened library), how kernels/cuda/cudnn_attention.c builds its plans:
 * - a documents graph (cudnn-documents, kernels/attn_documents.h) is
 *   written in each of the module's ways in turn until "cuDNN" offers an
 *   engine for one: here the stand-in offers one only for the way the test
 *   names, and the plan is that way's (rp_cudnn_attention_documents_graph),
 *   after exactly the graphs before it were tried, in the order of the
 *   library's version (the forward's two, the backward's six;
 *   cudnn-frontend's way for that version first), all in one layout, then
 *   all again in each of the others (from cuDNN 9.6: packed statistics
 *   with int64 offsets, packed with int32, padded with int64, padded with
 *   int32; on 9.5 padded first; before 9.5 int32 offsets first);
 * - what each way writes: the padding mask's two comparisons per mask in
 *   boolean or int32, once in the forward and once or twice in the
 *   backward, the backward's causal mask before or after the statistics;
 *   the ragged offsets on every tensor the call binds (Q, K^T, V, O; dO,
 *   dQ, dK, dV, V^T), all of the layout's type, on the statistics (and
 *   the backward's Delta) where it packs them by token, with their strides,
 *   and on none of a dense graph's;
 * - where cuDNN's heuristics mode A offer no engine for a graph, its
 *   fallback heuristics are asked, then each of its engines by global
 *   index: a plan from either says so in the way's name, and one from an
 *   engine is that engine's;
 * - a refusal of every way says the first's reason (with what the engines
 *   asked one by one answered: how many refused with each status, and
 *   cuDNN's words for the first that got past the graph's pattern) and
 *   names the others; a plan of heuristics mode A that asks more workspace
 *   than the run reserves ends the search at the first way (no other way
 *   of writing changes what its engines ask), one of an engine asked by
 *   index does not;
 * - a dense graph is built once, in one way, and a built plan is cached (a
 *   second query builds nothing).
 * What a real cuDNN offers for these graphs is the GPU window's
 * (test_cuda_cudnn_attention, bench/gpu/run.sh). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rp_check.h"

#if defined(RP_HAVE_CUDA) && defined(RP_HAVE_CUDNN)
#include <stdbool.h>

#include <cudnn_graph.h>

#include "kernels/attn_shape.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cudnn_loader.h"

/* ---- the stand-in: descriptors that record their attributes ------------ */

#define MAX_ATTRS 32

typedef struct attr {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t count;
    void *value; /* a copy, for the types read back below; else NULL */
} attr;

typedef struct desc {
    cudnnBackendDescriptorType_t type;
    int nattrs;
    attr attrs[MAX_ATTRS];
} desc;

/* what the stand-in offers: an engine for a documents graph (through
 * heuristics mode A where offer_from is 0, its fallback heuristics where
 * 1, or only engine TAKING_ENGINE of its STANDIN_ENGINES asked by index
 * where 2; the other engines refuse every graph) only when its
 * padding comparisons are in int32 (want_int32 1) or boolean (0), its
 * backward masks padding `want_masks` times (0: any), in the backward its
 * causal mask comes after the statistics are subtracted (want_after 1) or
 * before (0; -1: either), its ragged offsets are of type want_offsets
 * (0: either) and its statistics packed by token (want_stats 1) or
 * padded (2; 0: either); want_int32 -1: none at all */
static int want_int32, want_masks, want_after, want_offsets, want_stats, offer_from;
static int64_t workspace_asked; /* what each plan asks */
#define STANDIN_ENGINES 5
#define TAKING_ENGINE 3
/* whether the stand-in library has cudnnGetLastErrorString; what it says;
 * the engine of the last plan finalized (-1: a configuration heuristics
 * offered) */
static int lacks_last_error;
static char last_words[128];
static int64_t last_plan_engine;
/* what it saw: graphs queried, and of the last one its comparisons, its
 * causal mask's place, its ragged tensors and their offsets' type (-1:
 * types differ), and its tensors of a value per row (Stats, Delta) packed
 * by token (ragged, strides [h*s, 1, h, 1]) or padded ([h*s, s, 1, 1]) */
static int graphs, documents_graphs, last_int32, last_bool, last_after, ragged_bound,
    ragged_missing, last_offsets, rows_packed, rows_padded;

static size_t element_bytes(cudnnBackendAttributeType_t type)
{
    switch (type) {
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
    case CUDNN_TYPE_HANDLE:
        return sizeof(void *);
    case CUDNN_TYPE_INT64:
        return sizeof(int64_t);
    case CUDNN_TYPE_DATA_TYPE:
    case CUDNN_TYPE_POINTWISE_MODE:
        return sizeof(int);
    case CUDNN_TYPE_HEUR_MODE:
        return sizeof(cudnnBackendHeurMode_t);
    default:
        return 0;
    }
}

static cudnnStatus_t mock_create_descriptor(cudnnBackendDescriptorType_t type,
                                            cudnnBackendDescriptor_t *out)
{
    desc *d = calloc(1, sizeof *d);
    if (!d)
        return CUDNN_STATUS_ALLOC_FAILED;
    d->type = type;
    *out = (cudnnBackendDescriptor_t)d;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t mock_destroy_descriptor(cudnnBackendDescriptor_t x)
{
    desc *d = (desc *)x;
    for (int i = 0; d && i < d->nattrs; i++)
        free(d->attrs[i].value);
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t mock_set_attribute(cudnnBackendDescriptor_t x,
                                        cudnnBackendAttributeName_t name,
                                        cudnnBackendAttributeType_t type, int64_t count,
                                        const void *value)
{
    desc *d = (desc *)x;
    if (d->nattrs == MAX_ATTRS)
        return CUDNN_STATUS_BAD_PARAM;
    attr *a = &d->attrs[d->nattrs++];
    a->name = name;
    a->type = type;
    a->count = count;
    const size_t bytes = element_bytes(type) * (size_t)count;
    a->value = bytes ? malloc(bytes) : NULL;
    if (a->value)
        memcpy(a->value, value, bytes);
    return CUDNN_STATUS_SUCCESS;
}

static const attr *find(const desc *d, cudnnBackendAttributeName_t name)
{
    for (int i = d->nattrs - 1; i >= 0; i--)
        if (d->attrs[i].name == name)
            return &d->attrs[i];
    return NULL;
}

static const desc *find_desc(const desc *d, cudnnBackendAttributeName_t name)
{
    const attr *a = find(d, name);
    return a && a->value ? *(desc *const *)a->value : NULL;
}

static int find_int(const desc *d, cudnnBackendAttributeName_t name, int absent)
{
    const attr *a = find(d, name);
    return a && a->value ? *(const int *)a->value : absent;
}

/* The uids the module binds q-, k- and o-shaped tensors to (its enum):
 * Q, K^T, V, O, dO, dQ, dK, dV, V^T */
static int bound_to_a_token_row(int64_t uid)
{
    return (uid >= 1 && uid <= 4) || (uid >= 6 && uid <= 9) || uid == 11;
}

/* notes a ragged tensor's offsets' type: last_offsets stays the type all
 * of the graph's have, or -1 */
static int offsets_noted;
static void note_offsets(int type)
{
    last_offsets = offsets_noted++ == 0 || last_offsets == type ? type : -1;
}

/* The uids of the tensors of a value per row of the scores: Stats, Delta */
static int a_value_per_row(int64_t uid) { return uid == 5 || uid == 12; }

/* Reads a graph: its padding comparisons (CMP_LT nodes, by output type)
 * and whether each tensor it binds to a token row carries ragged offsets;
 * returns whether an engine of the stand-in takes it (1) or none (0). */
static int64_t offered(const desc *graph)
{
    const attr *ops = graph ? find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS) : NULL;
    ck_assert_ptr_nonnull(ops);
    graphs++;
    last_int32 = last_bool = last_after = ragged_bound = ragged_missing = last_offsets = 0;
    rows_packed = rows_padded = offsets_noted = 0;
    const desc *seen[256];
    int nseen = 0;
    int64_t subtracted = -1; /* the node subtracting the statistics, by the graph's order */
    for (int64_t i = 0; i < ops->count; i++) {
        const desc *op = ((desc *const *)ops->value)[i];
        for (int j = 0; j < op->nattrs; j++) { /* the tensors each node reads or writes */
            const attr *at = &op->attrs[j];
            const desc *t = at->type == CUDNN_TYPE_BACKEND_DESCRIPTOR && at->count == 1
                                ? *(desc *const *)at->value
                                : NULL;
            if (!t || t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR)
                continue;
            int known = 0;
            for (int k = 0; k < nseen; k++)
                known |= seen[k] == t;
            if (known || nseen == 256)
                continue;
            seen[nseen++] = t;
            const attr *uid = find(t, CUDNN_ATTR_TENSOR_UNIQUE_ID);
            const desc *offsets = find_desc(t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC);
            if (uid && a_value_per_row(*(const int64_t *)uid->value)) {
                const attr *st = find(t, CUDNN_ATTR_TENSOR_STRIDES);
                const int64_t *x = st->value;
                /* [b, h, s, 1]: packed [h*s, 1, h, 1], padded [h*s, s, 1, 1] */
                const int packed = x[1] == 1 && x[2] > 1 && x[3] == 1 && x[0] % x[2] == 0;
                const int padded = x[1] > 1 && x[2] == 1 && x[3] == 1 && x[0] % x[1] == 0;
                ck_assert_msg(packed != padded && (offsets != NULL) == packed,
                              "Stats or Delta: strides %lld %lld %lld %lld, %s ragged offsets",
                              (long long)x[0], (long long)x[1], (long long)x[2],
                              (long long)x[3], offsets ? "with" : "without");
                rows_packed += packed;
                rows_padded += padded;
                if (offsets)
                    note_offsets(find_int(offsets, CUDNN_ATTR_TENSOR_DATA_TYPE, -1));
                continue;
            }
            if (!uid || !bound_to_a_token_row(*(const int64_t *)uid->value))
                continue;
            if (!offsets) {
                ragged_missing++;
                continue;
            }
            ragged_bound++;
            note_offsets(find_int(offsets, CUDNN_ATTR_TENSOR_DATA_TYPE, -1));
        }
        if (op->type != CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)
            continue;
        const desc *pw = find_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
        const int mode = find_int(pw, CUDNN_ATTR_POINTWISE_MODE, -1);
        const desc *b = find_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
        const attr *b_uid = b ? find(b, CUDNN_ATTR_TENSOR_UNIQUE_ID) : NULL;
        if (mode == CUDNN_POINTWISE_SUB && b_uid && *(const int64_t *)b_uid->value == 5)
            subtracted = i; /* scores less Stats (uid 5) */
        if (mode == CUDNN_POINTWISE_CMP_GE) /* the causal mask's comparison */
            last_after = subtracted >= 0;
        if (mode != CUDNN_POINTWISE_CMP_LT)
            continue;
        const desc *y = find_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
        const int type = find_int(y, CUDNN_ATTR_TENSOR_DATA_TYPE, -1);
        last_int32 += type == CUDNN_DATA_INT32;
        last_bool += type == CUDNN_DATA_BOOLEAN;
    }
    const int compares = last_int32 + last_bool;
    if (compares == 0) /* a dense graph: always offered */
        return 1;
    documents_graphs++;
    if (want_int32 < 0 || (want_int32 ? last_bool : last_int32) > 0)
        return 0;
    if (subtracted >= 0 && want_after >= 0 && last_after != want_after)
        return 0;
    if (want_offsets && last_offsets != want_offsets)
        return 0;
    if (want_stats && (want_stats == 1 ? rows_padded : rows_packed) > 0)
        return 0;
    return want_masks == 0 || compares == 2 * want_masks ? 1 : 0;
}

static cudnnStatus_t mock_get_attribute(cudnnBackendDescriptor_t const x,
                                        cudnnBackendAttributeName_t name,
                                        cudnnBackendAttributeType_t type, int64_t requested,
                                        int64_t *count, void *value)
{
    (void)type;
    const desc *d = (const desc *)x;
    switch (name) {
    case CUDNN_ATTR_ENGINEHEUR_RESULTS: { /* asked for the count (0), then the configurations */
        const int saved[2] = {graphs, documents_graphs};
        const int mode = find_int(d, CUDNN_ATTR_ENGINEHEUR_MODE, -1);
        ck_assert_msg(mode == CUDNN_HEUR_MODE_A || mode == CUDNN_HEUR_MODE_FALLBACK,
                      "heuristics mode %d", mode);
        const desc *graph = find_desc(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
        int64_t n = offered(graph);
        /* a documents graph's engine comes from the heuristics offer_from
         * names (a dense one's from mode A) */
        if (documents_graphs > saved[1])
            n = offer_from == (mode == CUDNN_HEUR_MODE_A ? 0 : 1) ? n : 0;
        else if (mode != CUDNN_HEUR_MODE_A)
            n = 0;
        if (requested > 0 || mode != CUDNN_HEUR_MODE_A) /* the same graph again: counted once */
            graphs = saved[0], documents_graphs = saved[1];
        *count = requested > 0 && requested < n ? requested : n;
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT:
        *count = 1;
        *(int64_t *)value = STANDIN_ENGINES;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE:
        *count = 0; /* deterministic */
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
        *count = 1;
        *(int64_t *)value = workspace_asked;
        return CUDNN_STATUS_SUCCESS;
    default:
        if (count)
            *count = requested;
        return CUDNN_STATUS_SUCCESS;
    }
}

static int64_t int64_of(const desc *d, cudnnBackendAttributeName_t name)
{
    const attr *a = d ? find(d, name) : NULL;
    return a && a->value ? *(const int64_t *)a->value : -1;
}

/* An engine asked by index takes the graph where it is TAKING_ENGINE,
 * offer_from is 2 and the graph is one the stand-in takes; the others
 * refuse, engines 0-2 as not of their pattern, 3 and 4 for its shape,
 * each with its words. A plan notes its configuration's engine. */
static cudnnStatus_t mock_finalize(cudnnBackendDescriptor_t x)
{
    const desc *d = (const desc *)x;
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
        const desc *cfg = find_desc(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
        const desc *engine = cfg ? find_desc(cfg, CUDNN_ATTR_ENGINECFG_ENGINE) : NULL;
        last_plan_engine = int64_of(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
        return CUDNN_STATUS_SUCCESS;
    const int64_t index = int64_of(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
    ck_assert_msg(index >= 0 && index < STANDIN_ENGINES, "engine %lld", (long long)index);
    const int saved[2] = {graphs, documents_graphs};
    const int64_t takes = offered(find_desc(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH));
    graphs = saved[0], documents_graphs = saved[1];
    if (offer_from == 2 && index == TAKING_ENGINE && takes)
        return CUDNN_STATUS_SUCCESS;
    snprintf(last_words, sizeof last_words, "stand-in engine %lld:\n%s", (long long)index,
             index < 3 ? "not its pattern" : "ragged offsets of this shape");
    return index < 3 ? CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN : CUDNN_STATUS_NOT_SUPPORTED_SHAPE;
}

static void mock_last_error_string(char *message, size_t max_size)
{
    snprintf(message, max_size, "%s", last_words);
    last_words[0] = '\0';
}

static cudnnStatus_t mock_handle_create(cudnnHandle_t *h)
{
    static int handle;
    *h = (cudnnHandle_t)&handle;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t mock_handle_destroy(cudnnHandle_t h)
{
    (void)h;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t mock_set_stream(cudnnHandle_t h, cudaStream_t s)
{
    (void)h, (void)s;
    return CUDNN_STATUS_SUCCESS;
}

static const char *mock_error_string(cudnnStatus_t s)
{
    return s == CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN ? "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN"
           : s == CUDNN_STATUS_NOT_SUPPORTED_SHAPE       ? "CUDNN_STATUS_NOT_SUPPORTED_SHAPE"
                                                          : "MOCK_STATUS";
}

static size_t mock_version(void) { return 91400; }

/* ---- the module over it ------------------------------------------------ */

/* the module over the stand-in, as cuDNN `version` (its ways' order) */
static rp_cudnn_attention *open_module_as(size_t version)
{
    static rp_cudnn_library lib;
    memset(&lib, 0, sizeof lib);
    lib.symbols[RP_CUDNN_GET_VERSION] = (void *)mock_version;
    lib.symbols[RP_CUDNN_GET_ERROR_STRING] = (void *)mock_error_string;
    lib.symbols[RP_CUDNN_CREATE] = (void *)mock_handle_create;
    lib.symbols[RP_CUDNN_DESTROY] = (void *)mock_handle_destroy;
    lib.symbols[RP_CUDNN_SET_STREAM] = (void *)mock_set_stream;
    lib.symbols[RP_CUDNN_BACKEND_CREATE_DESCRIPTOR] = (void *)mock_create_descriptor;
    lib.symbols[RP_CUDNN_BACKEND_DESTROY_DESCRIPTOR] = (void *)mock_destroy_descriptor;
    lib.symbols[RP_CUDNN_BACKEND_SET_ATTRIBUTE] = (void *)mock_set_attribute;
    lib.symbols[RP_CUDNN_BACKEND_GET_ATTRIBUTE] = (void *)mock_get_attribute;
    lib.symbols[RP_CUDNN_BACKEND_FINALIZE] = (void *)mock_finalize;
    lib.symbols[RP_CUDNN_GET_LAST_ERROR_STRING] =
        lacks_last_error ? NULL : (void *)mock_last_error_string;
    lib.version = version;
    rp_cudnn_attention *a = NULL;
    char why[1280] = "";
    const size_t gpu = (size_t)80 << 30; /* an 80 GiB GPU's budgets */
    ck_assert_msg(rp_cudnn_attention_create_for(&lib, NULL, gpu, &a, why, sizeof why) == 0, "%s",
                  why);
    graphs = documents_graphs = 0;
    workspace_asked = 4096;
    want_after = -1;
    want_offsets = 0;
    want_stats = 0;
    offer_from = 0;
    last_plan_engine = -2;
    last_words[0] = '\0';
    return a;
}

static rp_cudnn_attention *open_module(void) { return open_module_as(91400); }

/* 4 documents of 40 to 103 tokens in one sequence of 257 (GQA 4/2, head
 * dim 64): 4 entries of 128 */
static int32_t g_seg[257];
static rp_attn_shape documents_shape(void)
{
    const int starts[] = {0, 40, 97, 200};
    for (int t = 0, i = 0; t < 257; t++) {
        while (i < 3 && t >= starts[i + 1])
            i++;
        g_seg[t] = starts[i];
    }
    return (rp_attn_shape){.nseq = 1, .seqlen = 257, .nheads = 4, .nkv = 2, .head_dim = 64,
                           .scale = 0.125f, .seg_start = g_seg, .seg_host = g_seg};
}

static int plan(rp_cudnn_attention *a, const rp_attn_shape *s, int backward, char *why,
                size_t why_len)
{
    int64_t bytes = -1;
    return rp_cudnn_attention_workspace(a, s, backward, &bytes, why, why_len);
}

/* Case i's documents plan in one direction is made, and written as `way`
 * says, after `tried` documents graphs */
static void planned_as(rp_cudnn_attention *a, const rp_attn_shape *s, int backward,
                       const char *way, int tried, size_t i)
{
    char why[1280] = "";
    ck_assert_msg(plan(a, s, backward, why, sizeof why) == 0, "case %zu: %s", i, why);
    const char *got = rp_cudnn_attention_documents_graph(a, backward);
    ck_assert_msg(got && strcmp(got, way) == 0, "case %zu: written with '%s'", i,
                  got ? got : "(none)");
    ck_assert_int_eq(documents_graphs, tried);
}

/* Each way in turn: the plan is the first the stand-in takes, after the
 * ways before it in the order of the library's version (cudnn-frontend's
 * way first: from cuDNN 9.10 boolean comparisons, the backward's padding
 * mask once and its causal mask after the statistics; before, the
 * forward's comparisons in int32 and the backward's padding mask twice),
 * every way in the first layout of that version, then every way again in
 * each of the others (from 9.6 packed statistics with int64 offsets,
 * packed with int32, padded with int64, padded with int32; on 9.5 padded
 * first; before 9.5 int32 offsets first) */
START_TEST(documents_plan_is_the_first_way_cudnn_takes)
{
    enum { I32 = CUDNN_DATA_INT32, I64 = CUDNN_DATA_INT64, PACKED = 1, PADDED = 2 };
    static const struct {
        size_t version;
        int backward, int32, masks, after, offsets, stats, tried;
        const char *way;
    } cases[] = {
#define AFTER ", causal mask after the statistics"
#define P64 ", int64 ragged offsets, packed statistics"
#define P32 ", int32 ragged offsets, packed statistics"
#define D64 ", int64 ragged offsets, padded statistics"
#define D32 ", int32 ragged offsets, padded statistics"
        {91400, 0, 0, 0, -1, 0, 0, 1, "boolean compares" P64},
        {91400, 0, 1, 0, -1, 0, 0, 2, "int32 compares" P64},
        {91400, 1, 0, 1, 1, 0, 0, 1, "boolean compares, padding mask once" AFTER P64},
        {91400, 1, 0, 1, 0, 0, 0, 2, "boolean compares, padding mask once" P64},
        {91400, 1, 0, 2, 0, 0, 0, 3, "boolean compares, padding mask twice" P64},
        {91400, 1, 1, 1, 1, 0, 0, 4, "int32 compares, padding mask once" AFTER P64},
        {91400, 1, 1, 1, 0, 0, 0, 5, "int32 compares, padding mask once" P64},
        {91400, 1, 1, 2, 0, 0, 0, 6, "int32 compares, padding mask twice" P64},
        {91400, 0, 1, 0, -1, I32, 0, 4, "int32 compares" P32},
        {91400, 1, 0, 1, 1, I32, 0, 7, "boolean compares, padding mask once" AFTER P32},
        {91400, 1, 1, 2, 0, I32, 0, 12, "int32 compares, padding mask twice" P32},
        {91400, 0, 0, 0, -1, 0, PADDED, 5, "boolean compares" D64},
        {91400, 1, 1, 2, 0, I32, PADDED, 24, "int32 compares, padding mask twice" D32},
        {90500, 0, 1, 0, -1, 0, 0, 1, "int32 compares" D64},
        {90500, 0, 0, 0, -1, 0, 0, 2, "boolean compares" D64},
        {90500, 1, 0, 2, 0, 0, 0, 1, "boolean compares, padding mask twice" D64},
        {90500, 1, 0, 1, 0, 0, 0, 2, "boolean compares, padding mask once" D64},
        {90500, 1, 0, 1, 1, 0, 0, 3, "boolean compares, padding mask once" AFTER D64},
        {90500, 1, 1, 2, 0, 0, 0, 4, "int32 compares, padding mask twice" D64},
        {90500, 1, 0, 2, 0, 0, PACKED, 13, "boolean compares, padding mask twice" P64},
        {90400, 0, 1, 0, -1, 0, 0, 1, "int32 compares" D32},
        {90400, 1, 1, 2, 0, 0, 0, 4, "int32 compares, padding mask twice" D32},
        {90400, 1, 0, 2, 0, I64, 0, 7, "boolean compares, padding mask twice" D64},
#undef D32
#undef D64
#undef P32
#undef P64
#undef AFTER
    };
    const rp_attn_shape s = documents_shape();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rp_cudnn_attention *a = open_module_as(cases[i].version);
        want_int32 = cases[i].int32;
        want_masks = cases[i].masks;
        want_after = cases[i].after;
        want_offsets = cases[i].offsets;
        want_stats = cases[i].stats;
        ck_assert_msg(rp_cudnn_attention_documents_graph(a, cases[i].backward) == NULL,
                      "no documents plan yet");
        planned_as(a, &s, cases[i].backward, cases[i].way, cases[i].tried, i);
        ck_assert_int_eq(last_plan_engine, -1); /* a configuration of mode A */
        /* the graph taken: its comparisons' type, two per mask, and where
         * its causal mask is */
        const int masks = cases[i].backward ? cases[i].masks : 1;
        ck_assert_int_eq(cases[i].int32 ? last_int32 : last_bool, 2 * masks);
        ck_assert_int_eq(cases[i].int32 ? last_bool : last_int32, 0);
        ck_assert_int_eq(last_after, cases[i].after > 0);
        /* every tensor the call binds is ragged: Q, K^T, V, O; the
         * backward's Q, K^T, V^T, O, dO, dQ, dK, dV; all with offsets of
         * the type the way names, the statistics' too where they are
         * packed (Stats; the backward's Delta with them) */
        ck_assert_int_eq(ragged_missing, 0);
        ck_assert_int_eq(ragged_bound, cases[i].backward ? 8 : 4);
        ck_assert_int_eq(last_offsets, (strstr(cases[i].way, "int64 ragged") ? I64 : I32));
        const int packed = strstr(cases[i].way, "packed statistics") != NULL;
        ck_assert_int_eq((packed ? rows_packed : rows_padded), (cases[i].backward ? 2 : 1));
        ck_assert_int_eq((packed ? rows_padded : rows_packed), 0);
        /* cached: a second query builds nothing */
        planned_as(a, &s, cases[i].backward, cases[i].way, cases[i].tried, i);
        rp_cudnn_attention_destroy(&a);
    }
}
END_TEST

START_TEST(refusal_names_every_way_tried)
{
    const rp_attn_shape s = documents_shape();
    rp_cudnn_attention *a = open_module();
    want_int32 = -1; /* no engine for any documents graph */
    char why[1280] = "";
    ck_assert_int_eq(plan(a, &s, 1, why, sizeof why), RP_CUDNN_REFUSED);
    ck_assert_int_eq(documents_graphs, 24);
    const char *want = "cuDNN offers no engine for this graph: 0 configurations, 0 "
                       "non-deterministic (cuDNN's note), 0 not finalized; of its 5 engines, "
                       "asked one by one, 3 refuse it with "
                       "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, 2 with "
                       "CUDNN_STATUS_NOT_SUPPORTED_SHAPE; engine 3 says \"stand-in engine 3: "
                       "ragged offsets of this shape\" (written with boolean "
                       "compares, padding mask once, causal mask after the statistics, int64 "
                       "ragged offsets, packed statistics; refused too with boolean compares, "
                       "padding mask once / boolean compares, padding mask twice / int32 "
                       "compares, padding mask once, causal mask after the statistics / int32 "
                       "compares, padding mask once / int32 compares, padding mask twice; the "
                       "same ways again with int32 ragged offsets, packed statistics; with int64 "
                       "ragged offsets, padded statistics; with int32 ragged offsets, padded "
                       "statistics)";
    ck_assert_str_eq(why, want);
    ck_assert_msg(rp_cudnn_attention_documents_graph(a, 1) == NULL, "no documents plan");
    /* remembered: asked again, nothing is built */
    ck_assert_int_eq(plan(a, &s, 1, why, sizeof why), RP_CUDNN_REFUSED);
    ck_assert_int_eq(documents_graphs, 24);
    ck_assert_str_eq(why, want);
    /* the forward tries its two ways, in each layout */
    ck_assert_int_eq(plan(a, &s, 0, why, sizeof why), RP_CUDNN_REFUSED);
    ck_assert_int_eq(documents_graphs, 32);
    ck_assert_msg(strstr(why, "(written with boolean compares, int64 ragged offsets, packed "
                              "statistics; refused too with int32 compares; the same ways again "
                              "with int32 ragged offsets, packed statistics; with int64 ragged "
                              "offsets, padded statistics; with int32 ragged offsets, padded "
                              "statistics)") != NULL,
                  "%s", why);
    rp_cudnn_attention_destroy(&a);
}
END_TEST

START_TEST(too_big_a_workspace_ends_the_search)
{
    const rp_attn_shape s = documents_shape();
    rp_cudnn_attention *a = open_module();
    want_int32 = 0;
    want_masks = 0;
    workspace_asked = (int64_t)1 << 40;
    char why[1280] = "";
    ck_assert_int_eq(plan(a, &s, 1, why, sizeof why), RP_CUDNN_REFUSED);
    ck_assert_int_eq(documents_graphs, 1);
    ck_assert_msg(strstr(why, "workspace, more than the") != NULL &&
                      strstr(why, "(written with boolean compares, padding mask once, causal "
                                  "mask after the statistics, int64 ragged offsets, packed "
                                  "statistics)") != NULL,
                  "%s", why);
    rp_cudnn_attention_destroy(&a);
    /* a plan too big found in the second pass (the first offered none):
     * the search ends there too, and the message says how far it went */
    a = open_module();
    want_offsets = CUDNN_DATA_INT32;
    workspace_asked = (int64_t)1 << 40;
    ck_assert_int_eq(plan(a, &s, 1, why, sizeof why), RP_CUDNN_REFUSED);
    ck_assert_int_eq(documents_graphs, 7);
    ck_assert_msg(strstr(why, "cuDNN offers no engine for this graph") == why &&
                      strstr(why, "int32 compares, padding mask twice; the first 1 of them again "
                                  "with int32 ragged offsets, packed statistics)") != NULL,
                  "%s", why);
    rp_cudnn_attention_destroy(&a);
    /* a plan too big from an engine no heuristics offered (a generic one,
     * perhaps) does not end the search: every way is tried */
    a = open_module();
    offer_from = 2;
    workspace_asked = (int64_t)1 << 40;
    ck_assert_int_eq(plan(a, &s, 1, why, sizeof why), RP_CUDNN_REFUSED);
    ck_assert_int_eq(documents_graphs, 24);
    ck_assert_msg(strstr(why, "workspace, more than the") == why + strlen("cuDNN's plan needs a "
                                                                          "1048576.0 MiB ") &&
                      strstr(why, "; the same ways again with int32 ragged offsets, packed "
                                  "statistics; with int64 ragged offsets, padded statistics; "
                                  "with int32 ragged offsets, padded statistics)") != NULL,
                  "%s", why);
    rp_cudnn_attention_destroy(&a);
}
END_TEST

/* Where heuristics mode A offer nothing, the fallback heuristics' plan,
 * else an engine's asked by index: the way's name says which, the plan
 * is that engine's, and the search order is the same */
START_TEST(fallback_heuristics_then_engines_by_index)
{
    const rp_attn_shape s = documents_shape();
    static const struct {
        int from, offsets, backward, tried;
        int64_t engine;
        const char *way;
    } cases[] = {
#define W ", int64 ragged offsets, packed statistics"
        {1, 0, 1, 1, -1, "boolean compares, padding mask once, causal mask after the statistics" W
                         ", cuDNN's fallback heuristics"},
        {1, 0, 0, 1, -1, "boolean compares" W ", cuDNN's fallback heuristics"},
        {2, 0, 1, 1, 3, "boolean compares, padding mask once, causal mask after the statistics" W
                        ", engine 3, which no heuristics offered"},
        {2, 0, 0, 1, 3, "boolean compares" W ", engine 3, which no heuristics offered"},
        {2, CUDNN_DATA_INT32, 1, 7, 3, "boolean compares, padding mask once, causal mask after "
                                       "the statistics, int32 ragged offsets, packed statistics, "
                                       "engine 3, which no heuristics offered"},
#undef W
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rp_cudnn_attention *a = open_module();
        want_int32 = 0;
        want_masks = 0;
        offer_from = cases[i].from;
        want_offsets = cases[i].offsets;
        planned_as(a, &s, cases[i].backward, cases[i].way, cases[i].tried, i);
        ck_assert_int_eq(last_plan_engine, cases[i].engine);
        rp_cudnn_attention_destroy(&a);
    }
    /* a dense graph's plan is still mode A's */
    rp_attn_shape d = s;
    d.seg_start = d.seg_host = NULL;
    rp_cudnn_attention *a = open_module();
    offer_from = 2;
    char why[1280] = "";
    ck_assert_msg(plan(a, &d, 1, why, sizeof why) == 0, "%s", why);
    ck_assert_int_eq(last_plan_engine, -1);
    rp_cudnn_attention_destroy(&a);
}
END_TEST

/* Without cudnnGetLastErrorString (a library that lacks it) the engines'
 * census is said without cuDNN's words */
START_TEST(refusal_without_cudnns_words)
{
    const rp_attn_shape s = documents_shape();
    lacks_last_error = 1;
    rp_cudnn_attention *a = open_module();
    lacks_last_error = 0;
    want_int32 = -1;
    char why[1280] = "";
    ck_assert_int_eq(plan(a, &s, 0, why, sizeof why), RP_CUDNN_REFUSED);
    ck_assert_msg(strstr(why, "0 not finalized; of its 5 engines, asked one by one, 3 refuse it "
                              "with CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, 2 with "
                              "CUDNN_STATUS_NOT_SUPPORTED_SHAPE (written with") != NULL &&
                      strstr(why, "says") == NULL,
                  "%s", why);
    rp_cudnn_attention_destroy(&a);
}
END_TEST

START_TEST(dense_graph_is_built_once_in_one_way)
{
    rp_attn_shape s = documents_shape();
    s.seg_start = s.seg_host = NULL;
    rp_cudnn_attention *a = open_module();
    want_int32 = -1; /* refuses documents graphs: a dense one has no padding mask */
    char why[1280] = "";
    for (int backward = 0; backward < 2; backward++) {
        ck_assert_msg(plan(a, &s, backward, why, sizeof why) == 0, "%s", why);
        ck_assert_int_eq(graphs, backward + 1);
        ck_assert_int_eq(documents_graphs, 0);
        ck_assert_int_eq(last_int32 + last_bool, 0);
        ck_assert_int_eq(ragged_bound, 0);
        ck_assert_int_eq(rows_packed, 0);
        ck_assert_int_eq(rows_padded, backward ? 2 : 1);
        ck_assert_msg(rp_cudnn_attention_documents_graph(a, backward) == NULL,
                      "a dense plan is not a documents plan");
    }
    rp_cudnn_attention_destroy(&a);
}
END_TEST

static Suite *graphs_suite(void)
{
    Suite *s = suite_create("cudnn_graphs");
    TCase *tc = tcase_create("plans");
    tcase_add_test(tc, documents_plan_is_the_first_way_cudnn_takes);
    tcase_add_test(tc, refusal_names_every_way_tried);
    tcase_add_test(tc, too_big_a_workspace_ends_the_search);
    tcase_add_test(tc, fallback_heuristics_then_engines_by_index);
    tcase_add_test(tc, refusal_without_cudnns_words);
    tcase_add_test(tc, dense_graph_is_built_once_in_one_way);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(graphs_suite, "serial")

#else /* built without CUDA or without cuDNN's headers */

static Suite *graphs_suite(void) { return suite_create("cudnn_graphs"); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--rp-test-ranks") == 0)
        return rp_check_main(argc, argv, graphs_suite, "serial");
    printf("SKIP: built without CUDA or without cuDNN's headers\n");
    return RP_TEST_SKIP;
}
#endif
