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
 * The experts walk the tokens by model/token_tiles.h's rule: the routing
 * (logits, probs, the top k) is formed for all T tokens at once (E and k
 * numbers per token), the rest per tile of tokens: each tile's pairs are
 * grouped by expert on their own (moe_group over the tile's rows), so
 * every grouped GEMM reads one tile (one grouped call per tile), and a
 * chunk of tiles (xg .. m, their gradients, the experts' adapters'
 * buffers) is alive at once. The forward keeps only the routing; the
 * backward recomputes a chunk's xg, g, u and m from h and the routing
 * before going back through the same steps (the gathered input is gathered
 * again rather than kept), and the experts' weight gradients take their
 * tiles in token order, so the bits depend on the tile, never on the chunk.
 * The load-balancing loss enters the backward as a gradient per expert
 * probability (aux_grad), which the engine forms from the statistics every
 * MoE forward writes (moe_stats, over all T tokens).
 *
 * With LoRA (rp_moe_lora) the router and each expert's projections carry
 * adapters (model/lora.h's, scaling s):
 *   logits += s (h Ar^T) Br^T                    before the routing
 *   g += s (xg Ag_e^T) Bg_e^T, u likewise        expert e's rows
 *   yg += s (m Ad_e^T) Bd_e^T                    before the combine
 * each expert's adapter over its rows by the grouped GEMMs (t = x A_e^T
 * with out = r, then ts B_e^T with in = r). The backward mirrors it: for
 * the down projection dyg = w dy, so dBd_e += dyg^T ts and dAd_e += (s dyg
 * Bd_e)^T m, while the unweighted gradient z = dy Wd_e gets s (dy Bd_e) Ad_e
 * (z gives the routing weights' gradient and dm = w z); gate and up add
 * their adapters' input gradients before the scatter to tokens, the
 * router's to dh after the router's own.
 *
 * gpt-oss (transformers' GptOssMLP) differs in four places: the router's
 * logits carry a bias (top k of the biased logits, then a softmax over
 * those k: moe_route with norm_topk, the same numbers); each expert's
 * g, u and yg carry its bias (grouped_bias_forward); m is the clamped
 * SwiGLU (swiglu_clamped_forward with swiglu_limit and swiglu_alpha); and
 * since yg = m Wd_e^T + bd_e, a routing weight's gradient dy . yg gains
 * dy . bd_e beside z . m (a grouped GEMM of dy with each bias as a
 * [1, H] matrix, scattered back to the pairs). The down bias's gradient
 * is the weighted dy summed over the expert's rows; gate's and up's are
 * dg's and du's: all three summed from the compute-dtype gradients the
 * weights' GEMMs read (bf16 on CUDA), as grouped_bias_backward takes them.
 * Its LoRA (PEFT's target_parameters) adapts the router as above and each
 * expert's fused gate_up_proj with one A_e for gate and up: the caller
 * (block.c) hands gate and up two adapters over the same A_e and dA_e. */
#ifndef RP_MODEL_MOE_H
#define RP_MODEL_MOE_H

#include "model/carve.h"
#include "model/lora.h"

/* Experts a block may have: the weights' pointer arrays live on the stack. */
#define RP_MOE_MAX_EXPERTS 512

/* The buffers of one MoE call, carved by rp_moe_carve. Saved for the
 * backward: the routing (probs, experts, weights); scratch: the rest,
 * over all T tokens where it is a number or E per token, else over the
 * chunk's C tokens (rows by pair in tile order; each tile's offsets, order
 * and where count from its own first pair). */
typedef struct rp_moe_bufs {
    float *probs;     /* [T, E] */
    int32_t *experts; /* [T, k] */
    float *weights;   /* [T, k] */
    int64_t tile;     /* tokens of a tile (model/token_tiles.h) */
    int64_t chunk;    /* tokens of a chunk: a whole number of tiles, or T */
    float *logits;    /* [T, E] */
    int32_t *all_offsets, *all_order, *all_where; /* [E + 1], [T*k]: moe_stats' grouping */
    float *dweights;  /* [T*k] */
    float *dlogits;   /* [T, E] */
    void *dlogits_c;  /* [T, E] compute (fp32 tables: dlogits itself) */
    int32_t *offsets; /* [tiles of a chunk][E + 1] */
    int32_t *order;   /* [C*k] */
    int32_t *where;   /* [C*k] */
    void *xg;         /* [C*k, H] compute: the gathered input, then dy gathered */
    float *yg;        /* [C*k, H] fp32: the experts' outputs, then their input gradient */
    float *g, *u;     /* [C*k, I] fp32 */
    void *m;          /* [C*k, I] compute dtype */
    float *z;         /* [C*k, I] fp32: dy Wd, then dm in place */
    void *dg, *du;    /* [C*k, I] compute (fp32 tables: g and u themselves) */
    float *bias_dot;  /* gpt-oss: [C*k] each pair's dy . its expert's down bias */
    /* LoRA on the experts: each adapted projection's ts [C*k, r] (compute
     * dtype; NULL: not adapted) and the scratch of one tile's rows: t
     * [tile*k, r] fp32, u [tile*k, max(H, I)] fp32, dt [tile*k, r] compute */
    void *expert_ts[3];
    float *lora_t, *lora_u;
    void *lora_dt;
    float *partial;   /* the column sums' scratch (the caller's; gpt-oss's router bias) */
} rp_moe_bufs;

/* Carve the buffers of T tokens of block `block` (its experts' adapters)
 * from the saved area `sv` and the scratch `sc` (counting only when their
 * bases are NULL). */
void rp_moe_carve(const rp_kernel_ops *ops, const rp_model_config *cfg, int block, size_t T,
                  rp_carver *sv, rp_carver *sc, rp_moe_bufs *b);

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
    /* gpt-oss (gpt_oss != 0): the router's bias [E] and each expert's
     * biases bias[0..2][e] (gate [I], up [I], down [H]), fp32, their
     * gradients likewise (NULL when frozen), and the clamped SwiGLU */
    int gpt_oss;
    const float *router_bias;
    float *drouter_bias;
    const float *bias[3][RP_MOE_MAX_EXPERTS];
    float *dbias[3][RP_MOE_MAX_EXPERTS];
    /* the down biases again as the GEMMs read them (dtype `dtype`, the
     * same values: a bf16 bias widens exactly), for dy . bd_e: a GEMM
     * reads its weights in a dtype of the table's weight_dtypes only, and
     * the CUDA table's has no fp32 */
    const void *down_bias[RP_MOE_MAX_EXPERTS];
} rp_moe_weights;

/* One projection's adapters, one per expert (compute dtype): A[e] [r, in]
 * and B[e] [out, r], and (backward) dA[e], dB[e] where their gradients
 * accumulate (fp32). */
typedef struct rp_expert_adapters {
    const void *A[RP_MOE_MAX_EXPERTS], *B[RP_MOE_MAX_EXPERTS];
    float *dA[RP_MOE_MAX_EXPERTS], *dB[RP_MOE_MAX_EXPERTS];
    int64_t in, out;
} rp_expert_adapters;

/* A mixture-of-experts block's adapters (NULL members: not adapted): the
 * router's, called as the block's other projections (with the call's
 * dropout keys over nseq sequences of seqlen), and the experts' gate_proj,
 * up_proj and down_proj (experts[0..2]); router_bufs the router's
 * buffers (model/lora.h, of T rows; the experts' are rp_moe_bufs'). */
typedef struct rp_moe_lora {
    const rp_lora_call *call;
    int64_t nseq, seqlen;
    const rp_lora_adapter *router;
    const rp_expert_adapters *experts[3];
    rp_lora_bufs router_bufs;
} rp_moe_lora;

/* y = x2 + moe(h) over T tokens (y fp32, must not alias h or x2). y NULL
 * (a forward run only for its backward) forms the routing only: the
 * backward recomputes the rest. stats (device memory, or NULL) receives moe_stats' [2E].
 * lora: the adapters, or NULL. */
rp_status rp_moe_forward(const rp_kernels *k, const rp_model_config *cfg,
                         const rp_moe_weights *mw, const rp_moe_lora *lora, const void *h,
                         const float *x2, float *y, int64_t T, const rp_moe_bufs *b,
                         float *stats, rp_error *err);

/* dh = dL/dh (fp32 [T, H], overwritten) and the weights' gradients (+=)
 * from dy_c = dL/dy (compute dtype), h and the forward's saved routing;
 * aux_grad (device memory [E], or NULL) is the load-balancing loss's
 * gradient per probability, added to every token's. */
rp_status rp_moe_backward(const rp_kernels *k, const rp_model_config *cfg,
                          const rp_moe_weights *mw, const rp_moe_lora *lora, const void *h,
                          const void *dy_c, const float *aux_grad, float *dh, int64_t T,
                          const rp_moe_bufs *b, rp_error *err);

/* One projection's expert adapters over n grouped rows (offsets as the
 * grouped GEMMs'), model/lora.h's steps with each expert's A and B:
 * forward: y (fp32, n x out) += s (x A_e^T) B_e^T, keeping ts = s (x
 * A_e^T) in b->ts (y NULL: only ts); dt: b->dt = s (dy B_e) from dy
 * (compute dtype, n x out); weights: dB_e += dy^T ts, then dt as above
 * and dA_e += dt^T x; input: dx (fp32, n x in) += dt A_e from b->dt. */
rp_status rp_moe_lora_forward(const rp_kernels *k, const rp_model_config *cfg,
                              const rp_expert_adapters *a, const void *x, const int32_t *offsets,
                              int64_t n, float *y, const rp_lora_bufs *b, rp_error *err);
rp_status rp_moe_lora_dt(const rp_kernels *k, const rp_model_config *cfg,
                         const rp_expert_adapters *a, const void *dy, const int32_t *offsets,
                         int64_t n, const rp_lora_bufs *b, rp_error *err);
rp_status rp_moe_lora_weights(const rp_kernels *k, const rp_model_config *cfg,
                              const rp_expert_adapters *a, const void *x, const void *dy,
                              const int32_t *offsets, int64_t n, const rp_lora_bufs *b,
                              rp_error *err);
rp_status rp_moe_lora_input(const rp_kernels *k, const rp_model_config *cfg,
                            const rp_expert_adapters *a, const int32_t *offsets, int64_t n,
                            float *dx, const rp_lora_bufs *b, rp_error *err);

#endif
