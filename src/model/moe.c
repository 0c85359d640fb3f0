/* The mixture-of-experts MLP (see moe.h), composed over the kernel ops. */
#include "model/moe.h"

#include <string.h>

#include "io/config_lora.h"
#include "model/layout.h"
#include "model/token_tiles.h"

#define OP RP_OP

/* The experts' adapted projections of block `block` (0 gate, 1 up, 2 down):
 * bit i set when projection i carries one adapter per expert. */
static unsigned adapted_experts(const rp_model_config *cfg, int block)
{
    static const rp_lora_proj proj[3] = {RP_LORA_GATE_PROJ, RP_LORA_UP_PROJ, RP_LORA_DOWN_PROJ};
    if (cfg->lora.rank <= 0)
        return 0;
    rp_lora_offsets lo;
    rp_lora_offsets_get(cfg, block, &lo);
    unsigned bits = 0;
    for (int i = 0; i < 3; i++)
        if (lo.a[proj[i]] != SIZE_MAX && rp_lora_per_expert(cfg, block, proj[i]))
            bits |= 1u << i;
    /* gpt-oss's gate_up_proj adapter (gate_proj's) adapts up too */
    if (cfg->arch == RP_ARCH_GPT_OSS && (bits & 1u))
        bits |= 2u;
    return bits;
}

void rp_moe_carve(const rp_kernel_ops *ops, const rp_model_config *cfg, int block, size_t T,
                  rp_carver *sv, rp_carver *sc, rp_moe_bufs *b)
{
    const size_t E = (size_t)cfg->moe.num_experts, K = (size_t)cfg->moe.num_experts_per_tok,
                 H = (size_t)cfg->hidden_size, I = (size_t)cfg->moe.moe_intermediate_size;
    const int one = ops->compute_dtype == RP_F32;
    memset(b, 0, sizeof *b);
    b->tile = rp_token_tile(cfg, (int64_t)T);
    b->chunk = rp_chunk_tokens(cfg, (int64_t)T);
    const size_t C = (size_t)b->chunk, tiles = (C + (size_t)b->tile - 1) / (size_t)b->tile,
                 rows = (size_t)b->tile * K;
    b->probs = rp_carve_f32(sv, T * E);
    b->experts = rp_carve_bytes(sv, T * K * sizeof(int32_t));
    b->weights = rp_carve_f32(sv, T * K);

    b->logits = rp_carve_f32(sc, T * E);
    b->all_offsets = rp_carve_bytes(sc, (E + 1) * sizeof(int32_t));
    b->all_order = rp_carve_bytes(sc, T * K * sizeof(int32_t));
    b->all_where = rp_carve_bytes(sc, T * K * sizeof(int32_t));
    b->dweights = rp_carve_f32(sc, T * K);
    b->dlogits = rp_carve_f32(sc, T * E);
    b->dlogits_c = one ? (void *)b->dlogits : rp_carve_compute(sc, ops, T * E);
    b->offsets = rp_carve_bytes(sc, tiles * (E + 1) * sizeof(int32_t));
    b->order = rp_carve_bytes(sc, C * K * sizeof(int32_t));
    b->where = rp_carve_bytes(sc, C * K * sizeof(int32_t));
    b->xg = rp_carve_compute(sc, ops, C * K * H);
    b->yg = rp_carve_f32(sc, C * K * H);
    b->g = rp_carve_f32(sc, C * K * I);
    b->u = rp_carve_f32(sc, C * K * I);
    b->m = rp_carve_compute(sc, ops, C * K * I);
    b->z = rp_carve_f32(sc, C * K * I);
    b->dg = one ? (void *)b->g : rp_carve_compute(sc, ops, C * K * I);
    b->du = one ? (void *)b->u : rp_carve_compute(sc, ops, C * K * I);
    if (cfg->arch == RP_ARCH_GPT_OSS)
        b->bias_dot = rp_carve_f32(sc, C * K);
    const unsigned adapted = adapted_experts(cfg, block);
    if (adapted) {
        const size_t r = (size_t)cfg->lora.rank;
        for (int i = 0; i < 3; i++)
            if (adapted & (1u << i))
                b->expert_ts[i] = rp_carve_compute(sc, ops, C * K * r);
        b->lora_t = rp_carve_f32(sc, rows * r);
        b->lora_u = rp_carve_f32(sc, rows * (H > I ? H : I));
        b->lora_dt = rp_carve_compute(sc, ops, rows * r);
    }
}

/* One tile of a chunk: its tokens, where its pairs' rows start in the
 * chunk's buffers, and its grouping. */
typedef struct moe_tile {
    int64_t first;  /* its first token in the microbatch */
    int64_t tokens;
    int64_t row;    /* its first pair's row in the chunk's buffers */
    int64_t n;      /* its pairs: tokens * k */
    int32_t *offsets, *order, *where;
} moe_tile;

/* Tile i of the chunk of `count` tokens from token `start`, or 0 past its
 * last. */
static int tile_at(const rp_model_config *cfg, const rp_moe_bufs *b, int64_t start,
                   int64_t count, int64_t i, moe_tile *t)
{
    const int64_t K = cfg->moe.num_experts_per_tok, E = cfg->moe.num_experts;
    const int64_t from = i * b->tile;
    if (from >= count)
        return 0;
    t->first = start + from;
    t->tokens = count - from < b->tile ? count - from : b->tile;
    t->row = from * K;
    t->n = t->tokens * K;
    t->offsets = b->offsets + i * (E + 1);
    t->order = b->order + t->row;
    t->where = b->where + t->row;
    return 1;
}

#define FOR_TILES(t, start, count)                                                               \
    for (int64_t tile_i_ = 0; tile_at(cfg, b, start, count, tile_i_, &(t)); tile_i_++)

/* Row `row` of a matrix of `cols` elements of `size` bytes. */
static void *row_of(const void *p, int64_t row, int64_t cols, size_t size)
{
    return (char *)p + (size_t)(row * cols) * size;
}

/* Expert projection i's (0 gate, 1 up, 2 down) adapters, or NULL. */
static const rp_expert_adapters *experts_of(const rp_moe_lora *lo, int i)
{
    return lo ? lo->experts[i] : NULL;
}

/* Expert projection i's adapter buffers over tile t's rows. */
static rp_lora_bufs tile_bufs(const rp_kernels *k, const rp_model_config *cfg,
                              const rp_moe_bufs *b, int i, const moe_tile *t)
{
    rp_lora_bufs lb = {0};
    lb.ts = b->expert_ts[i] ? row_of(b->expert_ts[i], t->row, cfg->lora.rank,
                                     rp_kernel_compute_bytes(k->ops))
                            : NULL;
    lb.t = b->lora_t;
    lb.u = b->lora_u;
    lb.dt = b->lora_dt;
    return lb;
}

/* The chunk's grouping, gathered input, g, u (with the biases and the
 * adapters of gate and up) and m, for tokens start .. start + count - 1. */
static rp_status experts_in(const rp_kernels *k, const rp_model_config *cfg,
                            const rp_moe_weights *mw, const rp_moe_lora *lo, const void *h,
                            int64_t start, int64_t count, const rp_moe_bufs *b, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, K = cfg->moe.num_experts_per_tok,
                  H = cfg->hidden_size, I = cfg->moe.moe_intermediate_size;
    const size_t cb = rp_kernel_compute_bytes(k->ops);
    const rp_dtype wdt = mw->dtype;
    const rp_expert_adapters *gate = experts_of(lo, 0), *up = experts_of(lo, 1);
    moe_tile t;
    FOR_TILES(t, start, count) {
        void *xg = row_of(b->xg, t.row, H, cb);
        float *g = b->g + t.row * I, *u = b->u + t.row * I;
        OP(moe_group, b->experts + t.first * K, t.tokens, K, E, t.offsets, t.order, t.where);
        OP(moe_gather, row_of(h, t.first, H, cb), t.order, NULL, t.tokens, K, H, xg);
        OP(grouped_linear_forward, xg, mw->gate, wdt, t.offsets, E, t.n, H, I, g, NULL);
        OP(grouped_linear_forward, xg, mw->up, wdt, t.offsets, E, t.n, H, I, u, NULL);
        if (mw->gpt_oss) {
            OP(grouped_bias_forward, g, NULL, mw->bias[0], t.offsets, E, t.n, I);
            OP(grouped_bias_forward, u, NULL, mw->bias[1], t.offsets, E, t.n, I);
        }
        rp_lora_bufs lb;
        if (gate) {
            lb = tile_bufs(k, cfg, b, 0, &t);
            RP_TRY(rp_moe_lora_forward(k, cfg, gate, xg, t.offsets, t.n, g, &lb, err));
        }
        if (up) {
            lb = tile_bufs(k, cfg, b, 1, &t);
            RP_TRY(rp_moe_lora_forward(k, cfg, up, xg, t.offsets, t.n, u, &lb, err));
        }
    }
    if (mw->gpt_oss)
        OP(swiglu_clamped_forward, b->g, b->u, (float)cfg->oss.swiglu_limit,
           (float)cfg->oss.swiglu_alpha, b->m, count * K * I);
    else
        OP(swiglu_forward, b->g, b->u, RP_F32, I, b->m, count * K, I);
    return RP_OK;
}

rp_status rp_moe_forward(const rp_kernels *k, const rp_model_config *cfg,
                         const rp_moe_weights *mw, const rp_moe_lora *lo, const void *h,
                         const float *x2, float *y, int64_t T, const rp_moe_bufs *b,
                         float *stats, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, K = cfg->moe.num_experts_per_tok,
                  H = cfg->hidden_size, I = cfg->moe.moe_intermediate_size;
    const size_t cb = rp_kernel_compute_bytes(k->ops);
    const rp_dtype wdt = mw->dtype;
    OP(linear_forward, h, mw->router, wdt, mw->router_bias, NULL, b->logits, NULL, T, H, E);
    if (lo && lo->router)
        RP_TRY(rp_lora_forward(k, cfg, lo->call, lo->router, h, lo->nseq, lo->seqlen, b->logits,
                               NULL, &lo->router_bufs, err));
    OP(moe_route, b->logits, T, E, K, cfg->moe.norm_topk_prob, b->probs, b->experts, b->weights);
    if (stats) { /* the tokens per expert over the whole microbatch */
        OP(moe_group, b->experts, T, K, E, b->all_offsets, b->all_order, b->all_where);
        OP(moe_stats, b->probs, b->all_offsets, T, E, stats);
    }
    if (!y) /* the backward recomputes the experts from the routing */
        return RP_OK;
    const rp_expert_adapters *down = experts_of(lo, 2);
    for (int64_t start = 0; start < T; start += b->chunk) {
        const int64_t count = T - start < b->chunk ? T - start : b->chunk;
        RP_TRY(experts_in(k, cfg, mw, lo, h, start, count, b, err));
        moe_tile t;
        FOR_TILES(t, start, count) {
            const void *m = row_of(b->m, t.row, I, cb);
            float *yg = b->yg + t.row * H;
            OP(grouped_linear_forward, m, mw->down, wdt, t.offsets, E, t.n, I, H, yg, NULL);
            if (mw->gpt_oss)
                OP(grouped_bias_forward, yg, NULL, mw->bias[2], t.offsets, E, t.n, H);
            if (down) {
                rp_lora_bufs lb = tile_bufs(k, cfg, b, 2, &t);
                RP_TRY(rp_moe_lora_forward(k, cfg, down, m, t.offsets, t.n, yg, &lb, err));
            }
            OP(moe_combine, yg, b->weights + t.first * K, t.where, x2 + t.first * H, t.tokens, K,
               H, y + t.first * H);
        }
    }
    return RP_OK;
}

/* The backward of the down projection over tile t: z = dy Wd (dy gathered
 * unweighted; with an adapter + s (dy Bd) Ad), dWd += (w dy)^T m and the
 * adapter's weights from w dy, then the routing weights' gradient and dm =
 * w z (in place). */
static rp_status down_backward(const rp_kernels *k, const rp_model_config *cfg,
                               const rp_moe_weights *mw, const rp_moe_lora *lo, const void *dy_c,
                               const rp_moe_bufs *b, const moe_tile *t, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, K = cfg->moe.num_experts_per_tok,
                  H = cfg->hidden_size, I = cfg->moe.moe_intermediate_size;
    const size_t cb = rp_kernel_compute_bytes(k->ops);
    const int grads = mw->drouter != NULL;
    const rp_expert_adapters *down = experts_of(lo, 2);
    void *xg = row_of(b->xg, t->row, H, cb);
    const void *m = row_of(b->m, t->row, I, cb);
    float *z = b->z + t->row * I, *dweights = b->dweights + t->first * K;
    const float *weights = b->weights + t->first * K;
    const void *dy = row_of(dy_c, t->first, H, cb);
    rp_lora_bufs lb = tile_bufs(k, cfg, b, 2, t);
    OP(moe_gather, dy, t->order, NULL, t->tokens, K, H, xg);
    OP(grouped_linear_backward_input, xg, mw->down, mw->dtype, t->offsets, E, t->n, I, H, z, NULL,
       0);
    if (down) {
        RP_TRY(rp_moe_lora_dt(k, cfg, down, xg, t->offsets, t->n, &lb, err));
        RP_TRY(rp_moe_lora_input(k, cfg, down, t->offsets, t->n, z, &lb, err));
    }
    /* gpt-oss: each pair's dy . bd_e (bd_e as a [1, H] matrix), while xg
     * holds the unweighted dy */
    float *bias_dot = mw->gpt_oss ? b->bias_dot + t->row : NULL;
    if (mw->gpt_oss)
        OP(grouped_linear_forward, xg, mw->down_bias, mw->dtype, t->offsets, E, t->n, H, 1,
           bias_dot, NULL);
    if (grads || down)
        OP(moe_gather, dy, t->order, weights, t->tokens, K, H, xg);
    if (grads)
        OP(grouped_linear_backward_weight, xg, m, t->offsets, E, t->n, I, H, mw->ddown);
    /* the down bias's gradient: the weighted dy (compute dtype) over the
     * expert's rows */
    if (grads && mw->gpt_oss)
        OP(grouped_bias_backward, xg, t->offsets, E, t->n, H, mw->dbias[2]);
    if (down)
        RP_TRY(rp_moe_lora_weights(k, cfg, down, m, xg, t->offsets, t->n, &lb, err));
    OP(moe_down_backward, z, m, weights, t->order, t->tokens, K, I, z, NULL, dweights);
    if (mw->gpt_oss) /* dweights[p] += bias_dot[where[p]] */
        OP(moe_scatter_add, bias_dot, t->where, t->n, 1, 1, dweights, 1);
    return RP_OK;
}

/* The backward of gate and up over tile t (their input gathered again):
 * their weights' and adapters' gradients and dh's rows of the tile. */
static rp_status gate_up_backward(const rp_kernels *k, const rp_model_config *cfg,
                                  const rp_moe_weights *mw, const rp_moe_lora *lo, const void *h,
                                  float *dh, const rp_moe_bufs *b, const moe_tile *t,
                                  rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, K = cfg->moe.num_experts_per_tok,
                  H = cfg->hidden_size, I = cfg->moe.moe_intermediate_size;
    const size_t cb = rp_kernel_compute_bytes(k->ops);
    const int grads = mw->drouter != NULL;
    const rp_expert_adapters *gate = experts_of(lo, 0), *up = experts_of(lo, 1);
    void *xg = row_of(b->xg, t->row, H, cb);
    /* (dg and du in the compute dtype; on fp32 tables g and u themselves) */
    const void *dg = row_of(b->dg, t->row, I, cb), *du = row_of(b->du, t->row, I, cb);
    float *yg = b->yg + t->row * H;
    if (grads || gate || up)
        OP(moe_gather, row_of(h, t->first, H, cb), t->order, NULL, t->tokens, K, H, xg);
    if (grads) {
        OP(grouped_linear_backward_weight, dg, xg, t->offsets, E, t->n, H, I, mw->dgate);
        OP(grouped_linear_backward_weight, du, xg, t->offsets, E, t->n, H, I, mw->dup);
        if (mw->gpt_oss) {
            OP(grouped_bias_backward, dg, t->offsets, E, t->n, I, mw->dbias[0]);
            OP(grouped_bias_backward, du, t->offsets, E, t->n, I, mw->dbias[1]);
        }
    }
    OP(grouped_linear_backward_input, dg, mw->gate, mw->dtype, t->offsets, E, t->n, H, I, yg,
       NULL, 0);
    OP(grouped_linear_backward_input, du, mw->up, mw->dtype, t->offsets, E, t->n, H, I, yg, NULL,
       1);
    /* the adapters: weights, then the input gradient from the dt they left */
    rp_lora_bufs lb;
    if (gate) {
        lb = tile_bufs(k, cfg, b, 0, t);
        RP_TRY(rp_moe_lora_weights(k, cfg, gate, xg, dg, t->offsets, t->n, &lb, err));
        RP_TRY(rp_moe_lora_input(k, cfg, gate, t->offsets, t->n, yg, &lb, err));
    }
    if (up) {
        lb = tile_bufs(k, cfg, b, 1, t);
        RP_TRY(rp_moe_lora_weights(k, cfg, up, xg, du, t->offsets, t->n, &lb, err));
        RP_TRY(rp_moe_lora_input(k, cfg, up, t->offsets, t->n, yg, &lb, err));
    }
    OP(moe_scatter_add, yg, t->where, t->tokens, K, H, dh + t->first * H, 0);
    return RP_OK;
}

rp_status rp_moe_backward(const rp_kernels *k, const rp_model_config *cfg,
                          const rp_moe_weights *mw, const rp_moe_lora *lo, const void *h,
                          const void *dy_c, const float *aux_grad, float *dh, int64_t T,
                          const rp_moe_bufs *b, rp_error *err)
{
    const int64_t E = cfg->moe.num_experts, K = cfg->moe.num_experts_per_tok,
                  H = cfg->hidden_size, I = cfg->moe.moe_intermediate_size;
    const size_t cb = rp_kernel_compute_bytes(k->ops);
    const rp_dtype wdt = mw->dtype;
    const int grads = mw->drouter != NULL;
    const rp_expert_adapters *down = experts_of(lo, 2);
    for (int64_t start = 0; start < T; start += b->chunk) {
        const int64_t count = T - start < b->chunk ? T - start : b->chunk;
        /* the chunk's forward again, from h and the routing (the down
         * adapter's ts without its output) */
        RP_TRY(experts_in(k, cfg, mw, lo, h, start, count, b, err));
        moe_tile t;
        if (down)
            FOR_TILES(t, start, count) {
                rp_lora_bufs lb = tile_bufs(k, cfg, b, 2, &t);
                RP_TRY(rp_moe_lora_forward(k, cfg, down, row_of(b->m, t.row, I, cb), t.offsets,
                                           t.n, NULL, &lb, err));
            }
        FOR_TILES(t, start, count)
            RP_TRY(down_backward(k, cfg, mw, lo, dy_c, b, &t, err));
        /* SwiGLU over the chunk, then gate and up */
        if (mw->gpt_oss)
            OP(swiglu_clamped_backward, b->g, b->u, (float)cfg->oss.swiglu_limit,
               (float)cfg->oss.swiglu_alpha, b->z, b->dg, b->du, count * K * I);
        else
            OP(swiglu_backward, b->g, b->u, RP_F32, I, b->z, RP_F32, b->dg, b->du, count * K,
               I);
        FOR_TILES(t, start, count)
            RP_TRY(gate_up_backward(k, cfg, mw, lo, h, dh, b, &t, err));
    }
    /* the router: dlogits from the weights' gradient and the auxiliary loss */
    OP(moe_route_backward, b->probs, b->experts, b->dweights, aux_grad, T, E, K,
       cfg->moe.norm_topk_prob, b->dlogits, b->dlogits == b->dlogits_c ? NULL : b->dlogits_c);
    if (grads)
        OP(linear_backward_weight, b->dlogits_c, h, mw->drouter, T, H, E);
    if (grads && mw->drouter_bias)
        OP(column_sum_accumulate, b->dlogits, T, E, mw->drouter_bias, b->partial);
    OP(linear_backward_input, b->dlogits_c, mw->router, wdt, dh, NULL, T, H, E, 1);
    if (lo && lo->router) {
        RP_TRY(rp_lora_backward_weights(k, cfg, lo->call, lo->router, h, b->dlogits_c, lo->nseq,
                                        lo->seqlen, &lo->router_bufs, err));
        RP_TRY(rp_lora_backward_input(k, cfg, lo->call, lo->router, lo->nseq, lo->seqlen, dh,
                                      &lo->router_bufs, err));
    }
    return RP_OK;
}
