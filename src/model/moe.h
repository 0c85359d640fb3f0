/* The mixture-of-experts MLP of a Qwen3-MoE block (transformers'
 * Qwen3MoeSparseMoeBlock; model-internal, used by block.c), over the kernel
 * ops' MoE entries (kernels/ops.h). For T tokens h [T, H] (the normed
 * residual, compute dtype), E experts of width I, k of them per token:
 *   logits = h Wr^T                              [T, E]    fp32
 *   probs = softmax(logits); experts, weights    [T, k]    top k (moe_route)
 *   grouped by expert (moe_group): position j holds pair order[j]
 *   xg = h[token of j]                           [T*k, H]
 *   g, u = xg Wg_e^T, xg Wu_e^T (expert e's rows) [T*k, I]
 *   m = silu(g) * u
 *   yg = m Wd_e^T                                [T*k, H]  fp32
 *   y = x2 + sum over slots s of weights[t, s] yg[where[t*k + s]]
 * The backward goes back through the same steps from what the forward kept
 * (probs, the routing, the grouping, g, u and m); the gathered input is
 * gathered again rather than kept. The load-balancing loss enters the
 * backward as a gradient per expert probability (aux_grad), which the
 * engine forms from the statistics every MoE forward writes (moe_stats). */
#ifndef RP_MODEL_MOE_H
#define RP_MODEL_MOE_H

#include "model/carve.h"

/* Experts a block may have: the weights' pointer arrays live on the stack. */
#define RP_MOE_MAX_EXPERTS 512

/* The buffers of one MoE call, carved by rp_moe_carve. Saved for the
 * backward: probs .. m; scratch: the rest. */
typedef struct rp_moe_bufs {
    float *probs;     /* [T, E] */
    int32_t *experts; /* [T, k] */
    float *weights;   /* [T, k] */
    int32_t *offsets; /* [E + 1] */
    int32_t *order;   /* [T*k] */
    int32_t *where;   /* [T*k] */
    float *g, *u;     /* [T*k, I] fp32 */
    void *m;          /* [T*k, I] compute dtype */
    float *logits;    /* [T, E] */
    void *xg;         /* [T*k, H] compute: the gathered input, then dy gathered */
    float *yg;        /* [T*k, H] fp32: the experts' outputs, then their input gradient */
    float *z;         /* [T*k, I] fp32: dy Wd, then dm in place */
    void *dg, *du;    /* [T*k, I] compute (fp32 tables: g and u themselves) */
    float *dweights;  /* [T*k] */
    float *dlogits;   /* [T, E] */
    void *dlogits_c;  /* [T, E] compute (fp32 tables: dlogits itself) */
} rp_moe_bufs;

/* Carve the buffers of T tokens from the saved area `sv` and the scratch
 * `sc` (counting only when their bases are NULL). */
void rp_moe_carve(const rp_kernel_ops *ops, const rp_model_config *cfg, size_t T, rp_carver *sv,
                  rp_carver *sc, rp_moe_bufs *b);

/* A block's router and experts as the GEMMs read them (dtype `dtype`):
 * gate[e], up[e], down[e] expert e's matrices. With gradients (backward),
 * dgate[e] .. ddown[e] and drouter are where they accumulate (fp32), or
 * all NULL for frozen weights. */
typedef struct rp_moe_weights {
    rp_dtype dtype;
    const void *router;
    const void *gate[RP_MOE_MAX_EXPERTS], *up[RP_MOE_MAX_EXPERTS], *down[RP_MOE_MAX_EXPERTS];
    float *drouter;
    float *dgate[RP_MOE_MAX_EXPERTS], *dup[RP_MOE_MAX_EXPERTS], *ddown[RP_MOE_MAX_EXPERTS];
} rp_moe_weights;

/* y = x2 + moe(h) over T tokens (y fp32, must not alias h or x2). y NULL
 * skips the down projection and the combine (a forward run only for its
 * backward). stats (device memory, or NULL) receives moe_stats' [2E]. */
rp_status rp_moe_forward(const rp_kernels *k, const rp_model_config *cfg,
                         const rp_moe_weights *mw, const void *h, const float *x2, float *y,
                         int64_t T, const rp_moe_bufs *b, float *stats, rp_error *err);

/* dh = dL/dh (fp32 [T, H], overwritten) and the weights' gradients (+=)
 * from dy_c = dL/dy (compute dtype) and the forward's saved buffers;
 * aux_grad (device memory [E], or NULL) is the load-balancing loss's
 * gradient per probability, added to every token's. */
rp_status rp_moe_backward(const rp_kernels *k, const rp_model_config *cfg,
                          const rp_moe_weights *mw, const void *h, const void *dy_c,
                          const float *aux_grad, float *dh, int64_t T, const rp_moe_bufs *b,
                          rp_error *err);

#endif
