/* The LoRA part of a model's config (io/config_lora.h). */
#include "io/config_lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const proj_names[RP_LORA_NPROJ] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "gate"};

const char *rp_lora_proj_name(rp_lora_proj p)
{
    return p >= 0 && p < RP_LORA_NPROJ ? proj_names[p] : "?";
}

int rp_lora_proj_parse(const char *name)
{
    for (int p = 0; p < RP_LORA_NPROJ; p++)
        if (!strcmp(name, proj_names[p]))
            return p;
    return -1;
}

/* gpt-oss's target_parameters, in the order of their bits past the
 * projections' (io/config.h) and of adapter_config.json's list */
static const char *const param_names[3] = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj",
                                           "mlp.router.weight"};
static const rp_lora_proj param_projs[3] = {RP_LORA_GATE_PROJ, RP_LORA_DOWN_PROJ, RP_LORA_ROUTER};

unsigned rp_lora_param_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, param_names[i]))
            return RP_LORA_PARAM_GATE_UP << i;
    return 0;
}

const char *rp_lora_param_name(const rp_model_config *cfg, rp_lora_proj p)
{
    for (int i = 0; cfg->arch == RP_ARCH_GPT_OSS && i < 3; i++)
        if (param_projs[i] == p)
            return param_names[i];
    return NULL;
}

const char *rp_lora_proj_module(rp_lora_proj p)
{
    return p <= RP_LORA_O_PROJ ? "self_attn" : "mlp";
}

double rp_lora_scaling(const rp_lora_config *c)
{
    return c->use_rslora ? c->alpha / sqrt((double)c->rank) : c->alpha / (double)c->rank;
}

unsigned rp_lora_model_targets(const rp_model_config *cfg, unsigned targets)
{
    if (cfg->arch == RP_ARCH_GPT_OSS) {
        if (targets == RP_LORA_ALL_LINEAR) /* PEFT's all-linear: the Linear modules */
            return RP_LORA_ATTENTION_PROJS;
        unsigned t = targets & RP_LORA_GPT_OSS_PROJS;
        for (int i = 0; i < 3; i++)
            if (targets & (RP_LORA_PARAM_GATE_UP << i))
                t |= 1u << param_projs[i];
        return t;
    }
    targets &= RP_LORA_ALL_LINEAR;
    return rp_model_has_moe(cfg) ? targets : targets & ~(1u << RP_LORA_ROUTER);
}

const char *rp_lora_refused_targets(const rp_model_config *cfg, unsigned targets)
{
    if (cfg->arch == RP_ARCH_GPT_OSS && (targets & (RP_LORA_EXPERT_PROJS | (1u << RP_LORA_ROUTER))))
        return "gpt-oss's router (mlp.router, a GptOssTopKRouter) and experts (fused 3-D "
               "parameters) are no Linear modules: PEFT adapts them only as target_parameters "
               "(one adapter over all experts, gate and up sharing lora_A), named "
               "mlp.experts.gate_up_proj, mlp.experts.down_proj and mlp.router.weight (gate_proj, "
               "up_proj, down_proj and gate are Qwen3-MoE's Linear modules)";
    if (cfg->arch != RP_ARCH_GPT_OSS && (targets & RP_LORA_PARAMS))
        return "mlp.experts.gate_up_proj, mlp.experts.down_proj and mlp.router.weight are "
               "gpt-oss's parameters (PEFT's target_parameters); this model's projections are "
               "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj and, in a mixture "
               "of experts, gate";
    return NULL;
}

int rp_lora_per_expert(const rp_model_config *cfg, int block, rp_lora_proj p)
{
    return p >= 0 && p < RP_LORA_NPROJ && ((RP_LORA_EXPERT_PROJS >> p) & 1u) &&
           rp_model_block_is_moe(cfg, block);
}

int64_t rp_lora_copies(const rp_model_config *cfg, int block, rp_lora_proj p)
{
    if (p == RP_LORA_ROUTER)
        return rp_model_block_is_moe(cfg, block) ? 1 : 0;
    return rp_lora_per_expert(cfg, block, p) ? cfg->moe.num_experts : 1;
}

void rp_lora_features(const rp_model_config *cfg, int block, rp_lora_proj p, int64_t *in,
                      int64_t *out)
{
    const int moe = rp_model_block_is_moe(cfg, block);
    int64_t H = cfg->hidden_size, I = moe ? cfg->moe.moe_intermediate_size : cfg->intermediate_size;
    int64_t q = cfg->num_attention_heads * cfg->head_dim;
    int64_t kv = cfg->num_key_value_heads * cfg->head_dim;
    switch (p) {
    case RP_LORA_Q_PROJ: *in = H, *out = q; break;
    case RP_LORA_K_PROJ:
    case RP_LORA_V_PROJ: *in = H, *out = kv; break;
    case RP_LORA_O_PROJ: *in = q, *out = H; break;
    case RP_LORA_GATE_PROJ: /* gpt-oss: gate_up_proj's, [2I] out (gate rows, then up's) */
        *in = H, *out = cfg->arch == RP_ARCH_GPT_OSS && moe ? 2 * I : I;
        break;
    case RP_LORA_UP_PROJ: *in = H, *out = I; break;
    case RP_LORA_DOWN_PROJ: *in = I, *out = H; break;
    case RP_LORA_ROUTER: *in = moe ? H : 0, *out = moe ? cfg->moe.num_experts : 0; break;
    default: *in = *out = 0; break;
    }
}

void rp_lora_tensor_name(const rp_model_config *cfg, int block, int expert, rp_lora_proj p,
                         int b, char *buf, size_t len)
{
    const int oss = cfg->arch == RP_ARCH_GPT_OSS;
    const char *name = oss && p == RP_LORA_GATE_PROJ   ? "gate_up_proj"
                       : oss && p == RP_LORA_ROUTER    ? "router"
                                                       : proj_names[p];
    if (expert >= 0)
        snprintf(buf, len, "base_model.model.model.layers.%d.mlp.experts.%d.%s.lora_%c.weight",
                 block, expert, name, b ? 'B' : 'A');
    else
        snprintf(buf, len, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", block,
                 rp_lora_proj_module(p), name, b ? 'B' : 'A');
}

void rp_lora_fused_name(int block, rp_lora_proj p, unsigned targets, int b, char *buf,
                        size_t len)
{
    const unsigned both = (1u << RP_LORA_GATE_PROJ) | (1u << RP_LORA_DOWN_PROJ);
    const int inner = p == RP_LORA_GATE_PROJ && (targets & both) == both;
    snprintf(buf, len, "base_model.model.model.layers.%d.mlp.experts.%slora_%c.weight", block,
             inner ? "base_layer." : "", b ? 'B' : 'A');
}
