/* Gradient completion, on the optimizer thread of every rank: for its share
 * of a layer, once every pipeline's gradient has landed, the sum in
 * pipeline order (the embedding's in two parts: the dense base with the
 * tied LM head's parts, then each pipeline's rows), the share's block
 * norms for clipping, and, when nothing waits for a global norm, the AdamW
 * update fused in while the block is in cache. optimizer.c runs it, the
 * update gate (update_gate.h) decides when. */
#include <string.h>

#include "engine/engine_impl.h"
#include "engine/optimizer_impl.h"
#include "engine/node_sums.h"
#include "engine/protocol.h"
#include "engine/update_gate.h"
#include "optim/clip.h"

/* The embedding's gradient is summed in two parts. As soon as the tails
 * have landed: the dense base of this rank's share, the pipelines' tied LM
 * head parts in pipeline order, plus +0.0f (so a -0.0 becomes +0.0, as
 * adding the zero rows of a dense embedding gradient would make it), or
 * zero when untied. At the end of the backward: each pipeline's rows, in
 * pipeline order, added onto it. For one pipeline this is e + t with the
 * bits of a dense sum; rows no token touched are ready early. With several
 * nodes each part is a chain (node_sums.h): `from` is the previous node's
 * partial of [lo, hi) (NULL on the first node), and only the last node
 * adds the +0.0f. */
static void sum_embedding_base(rp_engine *e, size_t lo, size_t hi, const float *from)
{
    float *acc = e->p->st[0].grad;
    /* the tied parts hold vocab x hidden floats; the layer's padding past
     * them (rp_layer_desc.numel is rounded up) has no gradient */
    size_t tied_end = e->tied ? (size_t)(e->p->cfg.vocab_size * e->hidden) : 0;
    size_t mid = tied_end < lo ? lo : tied_end < hi ? tied_end : hi;
    float zero = rp_node_last(e) ? 0.0f : -0.0f; /* x + -0.0f is x */
#pragma omp parallel for schedule(static) if (mid - lo > 65536)
    for (size_t k = lo; k < mid; k++) {
        float s = from ? from[k - lo] + rp_engine_tied_grad(e, 0)[k] : rp_engine_tied_grad(e, 0)[k];
        for (int g = 1; g < e->pipelines; g++)
            s += rp_engine_tied_grad(e, g)[k];
        acc[k] = s + zero;
    }
    memset(acc + mid, 0, (hi - mid) * sizeof(float));
}

static void sum_embedding_rows(rp_engine *e, size_t lo, size_t hi)
{
    size_t H = (size_t)e->hidden;
    float *acc = e->p->st[0].grad;
    for (int g = 0; g < e->pipelines; g++) {
        const int32_t *ids = rp_engine_emb_ids(e, g);
        const float *rows = rp_engine_emb_rows(e, g);
        int64_t n = e->emb_n[g];
#pragma omp parallel for schedule(static) if (n * e->hidden > 65536)
        for (int64_t i = 0; i < n; i++) { /* distinct rows: no two threads meet */
            size_t base = (size_t)ids[i] * H;
            size_t a = base > lo ? base : lo, b = base + H < hi ? base + H : hi;
            for (size_t k = a; k < b; k++)
                acc[k] += rows[(size_t)i * H + (k - base)];
        }
    }
}

/* Pipeline 1.. gradients of elements [a, z) of layer l > 0 added onto
 * pipeline 0's (acc), after the previous node's partial sum when `from`
 * (its element lo at from[0]): a left fold in pipeline order. */
static void sum_pipelines(rp_engine *e, int l, size_t a, size_t z, const float *from, size_t lo)
{
    float *acc = e->p->st[l].grad;
    for (size_t k = a; k < z; k++) {
        float s = from ? from[k - lo] + acc[k] : acc[k];
        for (int g = 1; g < e->pipelines; g++)
            s += rp_engine_grad(e, g, l)[k];
        acc[k] = s;
    }
}

/* The embedding's dense base of this rank's share once the tails are in
 * (after layer L-1's gradients): with several nodes a chain of its own,
 * whose final sum goes to node 0 (node_sums.h). */
static rp_status sum_base(rp_engine *e, int64_t t, const char *who, rp_error *err)
{
    uint64_t t1 = e->trace ? rp_trace_now_ns() : 0;
    size_t b0, b1, lo, hi;
    rp_engine_share(e, 0, e->rank, &b0, &b1, &lo, &hi);
    int chain = e->nd.nodes > 1 && e->tied;
    float *from = chain && !rp_node_first(e) ? e->by_node_comm.node_buf : NULL;
    if (from)
        RP_TRY(rp_node_receive_partial(e, 0, RP_NODE_BASE, t, from, lo, hi, who, err));
    const int64_t after = rp_gate_embedding_sum_after(e, t); /* the first write of t's sum */
    if (after >= 0)
        RP_TRY(rp_node_wait_share_version(e, 0, after, who, err));
    sum_embedding_base(e, lo, hi, from);
    if (chain)
        RP_TRY(rp_node_base_pass_on(e, t, e->p->st[0].grad, lo, hi, who, err));
    rp_optimizer_trace(e, "sum head part of layer", 0, t, t1);
    return RP_OK;
}

static rp_status wait_pipelines(rp_engine *e, int l, int64_t t, const char *who, rp_error *err)
{
    for (int g = 0; g < e->pipelines; g++) {
        RP_TRY(rp_proto_wait_grad(e, l, g, t, who, err));
        if (l == 0 && e->tied) /* the tail brought the LM head's part */
            RP_TRY(rp_proto_wait_grad(e, e->num_layers - 1, g, t, who, err));
    }
    return RP_OK;
}

/* AdamW on this node's slice of this rank's share of layer l, block by
 * block (several nodes, no clipping). */
static void update_slice(rp_engine *e, int l, int64_t t)
{
    size_t s0, s1, lo, hi, n = e->p->layers[l].numel, block;
    rp_clip_blocks(n, &block);
    rp_engine_slice(e, l, e->rank, e->nd.node, &s0, &s1, &lo, &hi);
#pragma omp parallel for schedule(dynamic, 1) if (s1 - s0 > 1)
    for (size_t b = s0; b < s1; b++) {
        size_t a = b * block, z = a + block < n ? a + block : n;
        rp_optimizer_update_share(e, l, t, 1.0f, a, z);
    }
}

/* Sum the pipelines' gradients of this rank's share of layer l into the
 * layer's buffer (pipeline 0's) and write the share's block norms; with
 * `fuse` (no clipping, so no global norm to wait for) also run AdamW on it.
 * Block by block: a block is summed, its norm taken and it is updated while
 * it is in cache, so memory sees the gradient once (read and, with several
 * pipelines, written), plus AdamW's own traffic. With several nodes the
 * node communication thread sums (rp_grad_chain_layer): this waits for it
 * and updates this node's slice. */
rp_status rp_grad_sum_share(rp_engine *e, int l, int64_t t, int fuse, const char *who,
                           rp_error *err)
{
    if (e->nd.nodes > 1) {
        RP_TRY(rp_gate_wait_slice_summed(e, l, t, who, err));
        if (!fuse)
            return RP_OK;
        RP_TRY(rp_gate_wait_update(e, l, t, who, err));
        uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
        update_slice(e, l, t);
        rp_optimizer_trace(e, "adamw layer", l, t, t0);
        return RP_OK;
    }
    RP_TRY(wait_pipelines(e, l, t, who, err));
    if (fuse) /* the update changes the layer */
        RP_TRY(rp_gate_wait_update(e, l, t, who, err));
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    size_t b0, b1, lo, hi;
    rp_engine_share(e, l, e->rank, &b0, &b1, &lo, &hi);
    float *acc = e->p->st[l].grad;
    size_t n = e->p->layers[l].numel, block;
    rp_clip_blocks(n, &block);
    double *part = rp_engine_sumsq(e, t, l);
    if (l == 0) {
        sum_embedding_rows(e, lo, hi);
        fuse = 0; /* by rows: update_embedding_* */
    }
    /* elementwise sums, block norms and AdamW: the same bits on any split */
#pragma omp parallel for schedule(dynamic, 1) if (b1 - b0 > 1)
    for (size_t b = b0; b < b1; b++) {
        size_t a = b * block, z = a + block < n ? a + block : n;
        if (l > 0 && e->pipelines > 1)
            sum_pipelines(e, l, a, z, NULL, lo);
        part[b] = rp_clip_block_sumsq(acc, n, b);
        if (fuse)
            rp_optimizer_update_share(e, l, t, 1.0f, a, z);
    }
    if (l == 0 || e->pipelines > 1 || fuse)
        rp_optimizer_trace(e, fuse ? "sum+adamw layer" : "sum layer", l, t, t0);
    rp_proto_publish_summed(e, l, t);
    if (l == e->num_layers - 1)
        RP_TRY(sum_base(e, t, who, err));
    return RP_OK;
}

/* Several nodes, on the node communication thread: this rank's share of
 * layer l through the chain (node_sums.h). The previous node's partial sum
 * (into the embedding's buffer itself, onto its base, or beside), this
 * node's pipelines added in order, then on to the next node; the last node
 * takes the block norms and scatters. The summed event follows once this
 * node's slice and the norms are in (node_sums.c). */
rp_status rp_grad_chain_layer(rp_engine *e, int l, int64_t t, const char *who, rp_error *err)
{
    RP_TRY(rp_node_wait_grads(e, l, t, who, err));
    size_t b0, b1, lo, hi;
    rp_engine_share(e, l, e->rank, &b0, &b1, &lo, &hi);
    float *acc = e->p->st[l].grad, *from = NULL;
    if (l == 0 && rp_node_first(e) && e->tied) /* the base, summed by the last node */
        RP_TRY(rp_node_base_wait(e, t, who, err));
    if (!rp_node_first(e)) { /* the embedding's onto its base in place, others' beside */
        float *into = l == 0 ? acc + lo : e->by_node_comm.node_buf;
        RP_TRY(rp_node_receive_partial(e, l, RP_NODE_PARTIAL, t, into, lo, hi, who, err));
        from = l == 0 ? NULL : into;
    }
    uint64_t t0 = e->trace ? rp_trace_now_ns() : 0;
    size_t n = e->p->layers[l].numel, block;
    rp_clip_blocks(n, &block);
    double *part = rp_engine_sumsq(e, t, l);
    if (l == 0)
        sum_embedding_rows(e, lo, hi);
    if (l > 0 && (e->pipelines > 1 || from))
#pragma omp parallel for schedule(dynamic, 1) if (b1 - b0 > 1)
        for (size_t b = b0; b < b1; b++) {
            size_t a = b * block, z = a + block < n ? a + block : n;
            sum_pipelines(e, l, a, z, from, lo);
        }
    if (rp_node_last(e))
#pragma omp parallel for schedule(dynamic, 1) if (b1 - b0 > 1)
        for (size_t b = b0; b < b1; b++)
            part[b] = rp_clip_block_sumsq(acc, n, b);
    rp_optimizer_trace(e, "sum layer", l, t, t0);
    RP_TRY(rp_node_pass_on(e, l, t, acc, part, who, err));
    if (l == e->num_layers - 1)
        RP_TRY(sum_base(e, t, who, err));
    return RP_OK;
}

