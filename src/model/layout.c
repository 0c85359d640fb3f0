#include "model/layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "io/config_lora.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/token_tiles.h"

static size_t align_up(size_t n) { return (n + RP_PARAM_ALIGN - 1) / RP_PARAM_ALIGN * RP_PARAM_ALIGN; }

/* The mixture of experts' sizes (io/config.c read them; a configuration
 * built in code is checked here). */
static rp_status moe_check(const rp_model_config *cfg, rp_error *err)
{
    const rp_moe_config *m = &cfg->moe;
    if (!rp_model_has_moe(cfg))
        return RP_OK;
    if (m->num_experts_per_tok < 1 || m->num_experts_per_tok > m->num_experts)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'num_experts_per_tok' (%lld) must be in [1, "
                            "num_experts = %lld]",
                            (long long)m->num_experts_per_tok, (long long)m->num_experts);
    if (m->moe_intermediate_size < 1 || m->moe_intermediate_size > INT32_MAX)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'moe_intermediate_size' (%lld) must be in [1, "
                            "2^31-1]", (long long)m->moe_intermediate_size);
    /* the block calls hold a pointer per expert on the stack (model/moe.h) */
    if (m->num_experts > RP_MOE_MAX_EXPERTS)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'num_experts' is %lld, at most %d are "
                            "supported", (long long)m->num_experts, RP_MOE_MAX_EXPERTS);
    return RP_OK;
}

/* gpt-oss's own fields (io/config.c read them; a configuration built in
 * code is checked here). */
static rp_status gpt_oss_check(const rp_model_config *cfg, rp_error *err)
{
    const rp_gpt_oss_config *g = &cfg->oss;
    if (cfg->arch != RP_ARCH_GPT_OSS)
        return RP_OK;
    if (cfg->moe.num_experts < 1)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'num_local_experts' must be positive");
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++)
        if (rp_gpt_oss_block_is_sliding(g, i) && g->sliding_window < 1)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "model config: field 'sliding_window' (%lld) must be at least "
                                "1 for the sliding layers", (long long)g->sliding_window);
    if (!(g->swiglu_limit > 0) || !isfinite(g->swiglu_limit) || !isfinite(g->swiglu_alpha))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: fields 'swiglu_limit' (%g) and 'swiglu_alpha' (%g) "
                            "must be finite and the limit positive", g->swiglu_limit,
                            g->swiglu_alpha);
    if (!cfg->attention_bias)
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "model config: field 'attention_bias': gpt-oss's projections carry "
                            "biases (false is not supported)");
    return RP_OK;
}

rp_status rp_model_config_check(const rp_model_config *cfg, rp_error *err)
{
    if (!cfg)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "model config: NULL");
#define POSITIVE(f)                                                                              \
    if (cfg->f <= 0)                                                                             \
        return rp_error_set(err, RP_ERR_INVALID_ARG, "model config: field '" #f                  \
                            "' must be positive, got %lld", (long long)cfg->f);
    POSITIVE(hidden_size)
    POSITIVE(intermediate_size)
    POSITIVE(num_attention_heads)
    POSITIVE(num_key_value_heads)
    POSITIVE(head_dim)
    POSITIVE(vocab_size)
#undef POSITIVE
    if (cfg->num_hidden_layers < 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'num_hidden_layers' is negative (%lld)",
                            (long long)cfg->num_hidden_layers);
    if (cfg->num_hidden_layers > 100000)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'num_hidden_layers' too large (%lld)",
                            (long long)cfg->num_hidden_layers);
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'num_key_value_heads' (%lld) does not divide "
                            "'num_attention_heads' (%lld)",
                            (long long)cfg->num_key_value_heads,
                            (long long)cfg->num_attention_heads);
    if (cfg->head_dim % 2 != 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'head_dim' must be even for RoPE, got %lld",
                            (long long)cfg->head_dim);
    /* BLAS takes int dimensions */
    const int64_t lim = INT32_MAX;
    const char *big = cfg->hidden_size > lim ? "hidden_size"
                      : cfg->intermediate_size > lim ? "intermediate_size"
                      : cfg->vocab_size > lim ? "vocab_size"
                      : cfg->num_attention_heads * cfg->head_dim > lim
                          ? "num_attention_heads' x 'head_dim"
                          : NULL;
    if (big)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field '%s' exceeds 2^31-1 (BLAS takes int dimensions)",
                            big);
    if (cfg->head_dim > RP_MODEL_MAX_HEAD_DIM)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'head_dim' is %lld, at most %d is supported",
                            (long long)cfg->head_dim, RP_MODEL_MAX_HEAD_DIM);
    if (!(cfg->rms_norm_eps > 0))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'rms_norm_eps' must be positive");
    if (!(cfg->rope_theta > 0))
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "model config: field 'rope_theta' must be positive");
    if (cfg->rope_scaling.type == RP_ROPE_LLAMA3) {
        const rp_rope_scaling *r = &cfg->rope_scaling;
        if (!(r->factor > 0) || !(r->low_freq_factor > 0) || !(r->high_freq_factor > 0) ||
            r->original_max_position_embeddings <= 0)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "model config: field 'rope_scaling': llama3 needs positive "
                                "factor, low_freq_factor, high_freq_factor and "
                                "original_max_position_embeddings");
        if (!(r->high_freq_factor > r->low_freq_factor))
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "model config: field 'rope_scaling': high_freq_factor must "
                                "exceed low_freq_factor");
    } else if (cfg->rope_scaling.type == RP_ROPE_YARN && cfg->arch == RP_ARCH_GPT_OSS) {
        const rp_rope_scaling *r = &cfg->rope_scaling;
        if (!(r->factor > 0) || r->original_max_position_embeddings <= 0)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "model config: field 'rope_scaling': yarn needs a positive "
                                "factor and original_max_position_embeddings");
    } else if (cfg->rope_scaling.type != RP_ROPE_DEFAULT) {
        return rp_error_set(err, RP_ERR_UNSUPPORTED,
                            "model config: field 'rope_scaling': unsupported rope type %d",
                            (int)cfg->rope_scaling.type);
    }
    if (cfg->arch != RP_ARCH_LLAMA && cfg->arch != RP_ARCH_QWEN3 &&
        cfg->arch != RP_ARCH_QWEN3_MOE && cfg->arch != RP_ARCH_GPT_OSS)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "model config: unsupported architecture %d",
                            (int)cfg->arch);
    RP_TRY(gpt_oss_check(cfg, err));
    return moe_check(cfg, err);
}

/* Appends a tensor to a layer descriptor and returns its offset. A
 * descriptor without parameter slots (params NULL) only counts them and
 * places them: that gives the offsets without storing names. */
static size_t add_param(rp_layer_desc *L, const char *name, int ndim, int64_t d0, int64_t d1)
{
    const size_t numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1), at = L->numel;
    if (L->params) {
        rp_param_desc *p = &L->params[L->nparams];
        snprintf(p->name, sizeof p->name, "%s", name);
        p->ndim = ndim;
        p->shape[0] = d0;
        p->shape[1] = ndim == 2 ? d1 : 1;
        p->numel = numel;
        p->decay = ndim >= 2;
        p->offset = at;
    }
    L->nparams++;
    L->numel = align_up(at + numel);
    return at;
}

/* A descriptor that is filled from scratch into `slots` (NULL: count only). */
static void layer_begin(rp_layer_desc *L, rp_layer_kind kind, int block, rp_param_desc *slots)
{
    memset(L, 0, sizeof *L);
    L->kind = kind;
    L->block = block;
    L->params = slots;
}

/* A mixture of experts' tensors of one kind ("weight": [out, in] each;
 * "bias": [out]) for every expert e, in the order e, then gate, up, down
 * (named model.layers.{block}.mlp.experts.{e}.{proj[p]}.{kind}); the offset
 * of expert 0's gate. */
static size_t add_experts(rp_layer_desc *L, int block, int64_t E, int64_t IE, int64_t H,
                          const char *const proj[3], const char *kind)
{
    size_t first = SIZE_MAX;
    const int matrix = strcmp(kind, "weight") == 0;
    for (int64_t e = 0; e < E; e++)
        for (int p = 0; p < 3; p++) {
            char t[96] = "";
            if (L->params)
                snprintf(t, sizeof t, "model.layers.%d.mlp.experts.%lld.%s.%s", block, (long long)e,
                         proj[p], kind);
            const int64_t out = p == 2 ? H : IE, in = p == 2 ? IE : H;
            size_t at = matrix ? add_param(L, L->params ? t : NULL, 2, out, in)
                               : add_param(L, L->params ? t : NULL, 1, out, 1);
            if (first == SIZE_MAX)
                first = at;
        }
    return first;
}

/* The block layout in one place; off may be NULL. */
static void block_layout(const rp_model_config *cfg, int i, rp_layer_desc *L, rp_block_offsets *off)
{
    const int64_t H = cfg->hidden_size, I = cfg->intermediate_size;
    const int64_t QD = cfg->num_attention_heads * cfg->head_dim;
    const int64_t KD = cfg->num_key_value_heads * cfg->head_dim;
    const int bias = cfg->attention_bias != 0, qk = rp_model_has_qk_norm(cfg);
    rp_block_offsets o;
    char n[96];
    /* names only for a descriptor that keeps them (offsets alone: every
     * block call asks for them) */
#define NAME(s) (L->params ? (snprintf(n, sizeof n, "model.layers.%d.%s", i, s), n) : NULL)
    o.in_norm = add_param(L, NAME("input_layernorm.weight"), 1, H, 1);
    o.wq = add_param(L, NAME("self_attn.q_proj.weight"), 2, QD, H);
    o.bq = bias ? add_param(L, NAME("self_attn.q_proj.bias"), 1, QD, 1) : SIZE_MAX;
    o.wk = add_param(L, NAME("self_attn.k_proj.weight"), 2, KD, H);
    o.bk = bias ? add_param(L, NAME("self_attn.k_proj.bias"), 1, KD, 1) : SIZE_MAX;
    o.wv = add_param(L, NAME("self_attn.v_proj.weight"), 2, KD, H);
    o.bv = bias ? add_param(L, NAME("self_attn.v_proj.bias"), 1, KD, 1) : SIZE_MAX;
    o.wo = add_param(L, NAME("self_attn.o_proj.weight"), 2, H, QD);
    o.bo = bias ? add_param(L, NAME("self_attn.o_proj.bias"), 1, H, 1) : SIZE_MAX;
    o.q_norm = qk ? add_param(L, NAME("self_attn.q_norm.weight"), 1, cfg->head_dim, 1) : SIZE_MAX;
    o.k_norm = qk ? add_param(L, NAME("self_attn.k_norm.weight"), 1, cfg->head_dim, 1) : SIZE_MAX;
    const int oss = cfg->arch == RP_ARCH_GPT_OSS;
    o.sinks = oss ? add_param(L, NAME("self_attn.sinks"), 1, cfg->num_attention_heads, 1)
                  : SIZE_MAX;
    o.post_norm = add_param(L, NAME("post_attention_layernorm.weight"), 1, H, 1);
    o.router = o.router_bias = o.experts = o.expert_stride = SIZE_MAX;
    o.expert_bias = o.expert_bias_stride = SIZE_MAX;
    if (oss) {
        /* gpt-oss: its router has a bias and each expert's projections
         * too; the experts are kept one Linear [out, in] per projection
         * (gate and up apart), which io/gpt_oss_experts.h maps to and
         * from the fused, interleaved tensors transformers saves */
        const int64_t E = cfg->moe.num_experts, IE = cfg->moe.moe_intermediate_size;
        static const char *const proj[3] = {"gate", "up", "down"};
        o.w_gate = o.w_up = o.w_down = SIZE_MAX;
        o.router = add_param(L, NAME("mlp.router.weight"), 2, E, H);
        o.router_bias = add_param(L, NAME("mlp.router.bias"), 1, E, 1);
        o.expert_stride = align_up((size_t)(IE * H));
        o.experts = add_experts(L, i, E, IE, H, proj, "weight");
        o.expert_bias_stride = 2 * align_up((size_t)IE) + align_up((size_t)H);
        o.expert_bias = add_experts(L, i, E, IE, H, proj, "bias");
    } else if (rp_model_block_is_moe(cfg, i)) {
        const int64_t E = cfg->moe.num_experts, IE = cfg->moe.moe_intermediate_size;
        static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
        o.w_gate = o.w_up = o.w_down = SIZE_MAX;
        o.router = add_param(L, NAME("mlp.gate.weight"), 2, E, H);
        o.expert_stride = align_up((size_t)(IE * H));
        o.experts = add_experts(L, i, E, IE, H, proj, "weight");
    } else {
        o.w_gate = add_param(L, NAME("mlp.gate_proj.weight"), 2, I, H);
        o.w_up = add_param(L, NAME("mlp.up_proj.weight"), 2, I, H);
        o.w_down = add_param(L, NAME("mlp.down_proj.weight"), 2, H, I);
    }
#undef NAME
    o.numel = L->numel;
    if (off)
        *off = o;
}

void rp_block_offsets_get(const rp_model_config *cfg, int block, rp_block_offsets *off)
{
    rp_layer_desc tmp;
    layer_begin(&tmp, RP_LAYER_BLOCK, block, NULL);
    block_layout(cfg, block, &tmp, off);
}

/* A LoRA block: the A [r, in] and B [out, r] of each targeted projection
 * the block has, in projection order, expert after expert for a mixture
 * of experts' expert projections; off (may be NULL) receives their
 * offsets. */
static void lora_block_layout(const rp_model_config *cfg, int i, rp_layer_desc *L,
                              rp_lora_offsets *off)
{
    const rp_lora_config *c = &cfg->lora;
    rp_lora_offsets o;
    char n[128] = "";
    for (int p = 0; p < RP_LORA_NPROJ; p++) {
        o.a[p] = o.b[p] = SIZE_MAX;
        o.expert_stride[p] = 0;
        const int64_t copies = rp_lora_copies(cfg, i, (rp_lora_proj)p);
        if (!(c->targets & (1u << p)) || copies == 0)
            continue;
        int64_t in, out;
        rp_lora_features(cfg, i, (rp_lora_proj)p, &in, &out);
        const int per_expert = rp_lora_per_expert(cfg, i, (rp_lora_proj)p);
        for (int64_t e = 0; e < copies; e++) {
            /* names only when stored: every block call lays the adapters
             * out again for their offsets */
            const int expert = per_expert ? (int)e : -1;
            if (L->params)
                rp_lora_tensor_name(cfg, i, expert, (rp_lora_proj)p, 0, n, sizeof n);
            size_t a = add_param(L, n, 2, c->rank, in);
            if (L->params)
                rp_lora_tensor_name(cfg, i, expert, (rp_lora_proj)p, 1, n, sizeof n);
            size_t b = add_param(L, n, 2, out, c->rank);
            if (e == 0) {
                o.a[p] = a;
                o.b[p] = b;
            } else if (e == 1) {
                o.expert_stride[p] = a - o.a[p];
            }
        }
    }
    o.numel = L->numel;
    if (off)
        *off = o;
}

void rp_lora_offsets_get(const rp_model_config *cfg, int block, rp_lora_offsets *off)
{
    rp_layer_desc tmp;
    layer_begin(&tmp, RP_LAYER_BLOCK, block, NULL);
    lora_block_layout(cfg, block, &tmp, off);
}

static rp_status lora_check(const rp_model_config *cfg, rp_error *err)
{
    const rp_lora_config *c = &cfg->lora;
    if (c->rank < 1)
        return RP_OK;
    /* the projections, as rp_lora_model_targets gives them: gpt-oss's
     * target_parameters are projections here */
    const int oss = cfg->arch == RP_ARCH_GPT_OSS;
    const char *why = oss ? NULL : rp_lora_refused_targets(cfg, c->targets);
    if (oss && (c->targets & ~RP_LORA_GPT_OSS_PROJS))
        why = rp_lora_refused_targets(cfg, c->targets & ~RP_LORA_GPT_OSS_PROJS);
    if (why)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "LoRA: %s", why);
    if (c->targets == 0 || (c->targets & ~RP_LORA_ALL_LINEAR))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "LoRA: no projection to adapt (targets)");
    if (rp_lora_model_targets(cfg, c->targets) == 0)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "LoRA: no projection to adapt (targets: "
                            "gate, the router, is a mixture-of-experts block's only)");
    if (!(c->dropout >= 0 && c->dropout < 1))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "LoRA: dropout %g is outside [0, 1)",
                            c->dropout);
    /* the dropout masks are keyed by (sample, row, ...) and an expert's
     * rows are grouped by expert, out of the samples' order */
    /* gpt-oss's router and experts: PEFT's ParamWrapper refuses dropout,
     * since lora_B(lora_A(dropout(x))) cannot be factored out of the
     * merged weight it applies */
    if (c->dropout > 0 && oss && (c->targets & ~RP_LORA_ATTENTION_PROJS))
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "LoRA: dropout %g on gpt-oss's "
                            "target_parameters (mlp.experts.gate_up_proj, mlp.experts.down_proj, "
                            "mlp.router.weight) is not supported, as PEFT's ParamWrapper refuses "
                            "it (dropout(x) cannot be factored out of the merged weight W + s B A "
                            "it applies): use --lora-dropout 0, or adapt q_proj, k_proj, v_proj "
                            "and o_proj only", c->dropout);
    if (c->dropout > 0 && rp_model_has_moe(cfg) && (c->targets & RP_LORA_EXPERT_PROJS))
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "LoRA: dropout %g on a mixture of experts' "
                            "experts is not supported: use --lora-dropout 0, or leave "
                            "gate_proj, up_proj and down_proj out of --lora-targets",
                            c->dropout);
    if (!isfinite(c->alpha))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "LoRA: alpha is not finite");
    return RP_OK;
}

rp_status rp_model_base_layout(const rp_model_config *cfg, rp_layer_desc **layers, int *nlayers,
                               rp_error *err)
{
    rp_model_config full = *cfg;
    full.lora.rank = 0;
    return rp_model_layout(&full, layers, nlayers, err);
}

/* Layer l's parameters, into L (begun with its slots, or NULL to count). */
static void layer_layout(const rp_model_config *cfg, int l, rp_layer_desc *L)
{
    const int lora = cfg->lora.rank > 0, nblocks = (int)cfg->num_hidden_layers;
    if (l == 0) {
        if (!lora)
            add_param(L, "model.embed_tokens.weight", 2, cfg->vocab_size, cfg->hidden_size);
    } else if (l <= nblocks) {
        if (lora)
            lora_block_layout(cfg, l - 1, L, NULL);
        else
            block_layout(cfg, l - 1, L, NULL);
    } else {
        if (!lora)
            add_param(L, "model.norm.weight", 1, cfg->hidden_size, 1);
        if (!lora && !cfg->tie_word_embeddings)
            add_param(L, "lm_head.weight", 2, cfg->vocab_size, cfg->hidden_size);
    }
}

static rp_layer_kind layer_kind(const rp_model_config *cfg, int l)
{
    return l == 0 ? RP_LAYER_EMBED : l <= cfg->num_hidden_layers ? RP_LAYER_BLOCK : RP_LAYER_HEAD;
}

rp_status rp_model_layout(const rp_model_config *cfg, rp_layer_desc **layers, int *nlayers,
                          rp_error *err)
{
    RP_TRY(rp_model_config_check(cfg, err));
    RP_TRY(lora_check(cfg, err));
    const int L = (int)cfg->num_hidden_layers, n = L + 2;
    /* count the parameters, then lay out descriptors and slots together */
    size_t nparams = 0;
    for (int l = 0; l < n; l++) {
        rp_layer_desc tmp;
        layer_begin(&tmp, layer_kind(cfg, l), l >= 1 && l <= L ? l - 1 : -1, NULL);
        layer_layout(cfg, l, &tmp);
        nparams += (size_t)tmp.nparams;
    }
    rp_layer_desc *d = calloc(1, (size_t)n * sizeof *d + nparams * sizeof(rp_param_desc));
    if (!d)
        return rp_error_set(err, RP_ERR_NOMEM, "model layout: cannot allocate %d layers of %zu "
                            "tensors", n, nparams);
    rp_param_desc *slots = (rp_param_desc *)(d + n);
    for (int l = 0; l < n; l++) {
        layer_begin(&d[l], layer_kind(cfg, l), l >= 1 && l <= L ? l - 1 : -1, slots);
        layer_layout(cfg, l, &d[l]);
        slots += d[l].nparams;
    }
    *layers = d;
    *nlayers = n;
    return RP_OK;
}

const rp_param_desc *rp_layer_find_param(const rp_layer_desc *layer, const char *name)
{
    for (int i = 0; i < layer->nparams; i++)
        if (strcmp(layer->params[i].name, name) == 0)
            return &layer->params[i];
    return NULL;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

void rp_layer_init_range(const rp_model_config *cfg, const rp_layer_desc *layer, uint64_t seed,
                         float *params, size_t lo, size_t hi)
{
    if (hi > layer->numel)
        hi = layer->numel;
    if (lo >= hi)
        return;
    memset(params + lo, 0, sizeof(float) * (hi - lo));
    for (int i = 0; i < layer->nparams; i++) {
        const rp_param_desc *p = &layer->params[i];
        /* the parameter's elements [a, b) that fall in [lo, hi) */
        const size_t a = lo > p->offset ? lo - p->offset : 0;
        const size_t b = hi - p->offset < p->numel ? hi - p->offset : p->numel;
        if (hi <= p->offset || a >= b)
            continue;
        float *w = params + p->offset;
        if (ends_with(p->name, ".lora_A.weight")) {
            /* PEFT's kaiming_uniform(a = sqrt(5)) on [r, in]: bound 1/sqrt(in) */
            const double bound = 1.0 / sqrt((double)p->shape[1]);
            const uint64_t stream = rp_rng_stream_id(p->name);
            for (size_t j = a; j < b; j++)
                w[j] = (float)((2.0 * rp_rng_uniform(seed, stream, j) - 1.0) * bound);
        } else if (ends_with(p->name, ".lora_B.weight")) {
            /* already zero: a fresh adapter starts as the identity */
        } else if (p->ndim == 2 || ends_with(p->name, ".sinks")) {
            /* gpt-oss's sinks are drawn like its matrices (transformers'
             * _init_weights) */
            rp_rng_fill_normal(w + a, b - a, seed, rp_rng_stream_id(p->name), a, 0.0f,
                               (float)cfg->initializer_range);
        } else if (ends_with(p->name, ".bias")) {
            /* already zero */
        } else {
            for (size_t j = a; j < b; j++)
                w[j] = 1.0f; /* RMSNorm weights */
        }
    }
}

void rp_layer_init(const rp_model_config *cfg, const rp_layer_desc *layer, uint64_t seed,
                   float *params)
{
    rp_layer_init_range(cfg, layer, seed, params, 0, layer->numel);
}

void rp_block_work_get(const rp_model_config *cfg, int block, int64_t nseq, int64_t seqlen,
                       rp_block_work *w)
{
    const double H = (double)cfg->hidden_size, I = (double)cfg->intermediate_size;
    const double QD = (double)(cfg->num_attention_heads * cfg->head_dim);
    const double KD = (double)(cfg->num_key_value_heads * cfg->head_dim);
    const int moe = rp_model_block_is_moe(cfg, block);
    const int64_t T = nseq * seqlen;
    const double E = (double)cfg->moe.num_experts, k = (double)cfg->moe.num_experts_per_tok,
                 IE = (double)cfg->moe.moe_intermediate_size;
    memset(w, 0, sizeof *w);
    w->gemm = H * (QD + 2 * KD) + QD * H + 3 * H * I;
    /* the router, and k of the experts per token (every expert's weights
     * are uploaded: the layout counts them all) */
    if (moe)
        w->gemm = H * (QD + 2 * KD) + QD * H + H * E + k * 3 * H * IE;
    /* the MLP's forward the backward makes again, the gate and up GEMMs
     * once more: a mixture of experts' always (it keeps only its routing;
     * model/moe.c's rp_moe_backward makes each chunk's expert rows again,
     * k a token), a dense MLP's when it walks several chunks
     * (model/token_tiles.h: it keeps none of g, u, m and model/block.c's
     * mlp_backward makes each chunk's again from h2) */
    const int remade = moe || (T > 0 && rp_chunk_tokens(cfg, T) < T);
    if (remade)
        w->remade = moe ? k * 2 * H * IE : 2 * H * I;
    /* causal: on average (S+1)/2 keys per query; gpt-oss's sliding blocks
     * see at most W of them */
    w->keys = (double)(seqlen + 1) / 2;
    const int64_t W = cfg->oss.sliding_window;
    if (cfg->arch == RP_ARCH_GPT_OSS && rp_gpt_oss_block_is_sliding(&cfg->oss, block) && W >= 1 &&
        W < seqlen)
        w->keys = ((double)W * (double)(W + 1) / 2 + (double)(seqlen - W) * (double)W) /
                  (double)seqlen;
    for (int p = 0; cfg->lora.rank > 0 && p < RP_LORA_NPROJ; p++) {
        const int64_t copies = rp_lora_copies(cfg, block, (rp_lora_proj)p);
        if (!(cfg->lora.targets & (1u << p)) || copies == 0)
            continue;
        int64_t in, out; /* gpt-oss's gate_up adapter: 2I outputs */
        rp_lora_features(cfg, block, (rp_lora_proj)p, &in, &out);
        /* an expert's adapter runs on the tokens routed to it: k per token */
        const double runs = rp_lora_per_expert(cfg, block, (rp_lora_proj)p)
                                ? (double)cfg->moe.num_experts_per_tok
                                : 1.0;
        const double r = (double)cfg->lora.rank;
        /* gpt-oss's gate_up adapter is gate's and up's, which share A but
         * each form x A on their own (model/block.c's expert_adapters):
         * A's in x r twice, its gradient's products twice */
        const int shared_a = cfg->arch == RP_ARCH_GPT_OSS && rp_model_block_is_moe(cfg, block) &&
                             p == RP_LORA_GATE_PROJ;
        const double weights = runs * r * (double)((shared_a ? 2 * in : in) + out);
        w->adapter += weights;
        /* made again with g and u: the gate's and the up projection's
         * adapters whole, the down projection's A x (its ts) */
        if (remade && (p == RP_LORA_GATE_PROJ || p == RP_LORA_UP_PROJ))
            w->remade_adapter += weights;
        else if (remade && p == RP_LORA_DOWN_PROJ)
            w->remade_adapter += runs * r * (double)in;
    }
}

void rp_layer_flops_get(const rp_model_config *cfg, const rp_layer_desc *layer, int64_t nseq,
                        int64_t seqlen, rp_layer_flops *c)
{
    const double H = (double)cfg->hidden_size, V = (double)cfg->vocab_size;
    const double QD = (double)(cfg->num_attention_heads * cfg->head_dim);
    memset(c, 0, sizeof *c);
    c->param_numel = layer->numel;
    c->act_floats_per_token = (size_t)cfg->hidden_size;
    switch (layer->kind) {
    case RP_LAYER_EMBED:
        c->act_floats_per_token = 1; /* the token id */
        break;
    case RP_LAYER_BLOCK: {
        rp_block_work w;
        rp_block_work_get(cfg, layer->block, nseq, seqlen, &w);
        const double gemm = 2 * w.gemm, adapter = 2 * w.adapter, attn = 4 * QD * w.keys;
        const double remade = 2 * (w.remade + w.remade_adapter);
        c->fwd_flops_per_token = gemm + adapter + attn;
        c->bwd_flops_per_token =
            (cfg->lora.rank > 0 ? c->fwd_flops_per_token + gemm + 2 * adapter + 2.5 * attn
                                : c->fwd_flops_per_token + 2 * gemm + 2.5 * attn) +
            remade;
        break;
    }
    case RP_LAYER_HEAD:
        c->fwd_flops_per_token = 2 * H * V;
        /* logits + dW + dx, one pass (LoRA: no dW) */
        c->bwd_flops_per_token = (cfg->lora.rank > 0 ? 2 : 3) * (2 * H * V);
        break;
    }
}

/* The first layer whose elements start at or after k / parts of the whole
 * (nlayers when none does). */
static int part_start(const rp_layer_desc *layers, int nlayers, double total, int k, int parts)
{
    double before = 0;
    for (int l = 0; l < nlayers; l++) {
        if ((int)(before * parts / total) >= k)
            return l;
        before += (double)layers[l].numel;
    }
    return nlayers;
}

void rp_layer_part(const rp_layer_desc *layers, int nlayers, int part, int parts, int *first,
                   int *end)
{
    double total = 0;
    for (int l = 0; l < nlayers; l++)
        total += (double)layers[l].numel;
    *first = part_start(layers, nlayers, total, part, parts);
    *end = part_start(layers, nlayers, total, part + 1, parts);
}
