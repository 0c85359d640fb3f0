/* Writing config.json for transformers (see rp_config_save_from in config.h). */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"
#include "io/config.h"
#include "io/json_util.h"
#include "io/read_file.h"

/* Shortest decimal text that reads back as exactly x, always with a '.' or
 * an exponent so Python parses it as a float (rope_theta 10000 -> 10000.0). */
static json_object *new_double(double x)
{
    char buf[40];
    if (x == floor(x) && fabs(x) < 1e15) {
        snprintf(buf, sizeof buf, "%.1f", x);
        return json_object_new_double_s(x, buf);
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    if (!strpbrk(buf, ".eEn")) /* 'n': inf/nan cannot occur (validated), kept safe */
        strcat(buf, ".0");
    return json_object_new_double_s(x, buf);
}

static const char *torch_dtype_name(rp_dtype d)
{
    switch (d) {
    case RP_BF16: return "bfloat16";
    case RP_F16: return "float16";
    case RP_F32: break;
    }
    return "float32";
}

static int set(json_object *o, const char *k, json_object *v)
{
    return v ? json_object_object_add(o, k, v) : -1;
}

static json_object *rope_object(const rp_model_config *cfg, int with_theta)
{
    json_object *r = json_object_new_object();
    if (!r)
        return NULL;
    int bad = 0;
    int llama3 = cfg->rope_scaling.type == RP_ROPE_LLAMA3,
        yarn = cfg->rope_scaling.type == RP_ROPE_YARN;
    bad |= set(r, "rope_type",
               json_object_new_string(llama3 ? "llama3" : yarn ? "yarn" : "default"));
    if (with_theta)
        bad |= set(r, "rope_theta", new_double(cfg->rope_theta));
    if (llama3) {
        const rp_rope_scaling *s = &cfg->rope_scaling;
        bad |= set(r, "factor", new_double(s->factor));
        bad |= set(r, "low_freq_factor", new_double(s->low_freq_factor));
        bad |= set(r, "high_freq_factor", new_double(s->high_freq_factor));
        bad |= set(r, "original_max_position_embeddings",
                   json_object_new_int64(s->original_max_position_embeddings));
    }
    if (yarn) { /* what io/config.c reads back; absent optional fields stay absent */
        const rp_rope_scaling *s = &cfg->rope_scaling;
        bad |= set(r, "factor", new_double(s->factor));
        bad |= set(r, "beta_fast", new_double(s->beta_fast));
        bad |= set(r, "beta_slow", new_double(s->beta_slow));
        bad |= set(r, "truncate", json_object_new_boolean(s->truncate));
        bad |= set(r, "original_max_position_embeddings",
                   json_object_new_int64(s->original_max_position_embeddings));
        if (s->attention_factor > 0)
            bad |= set(r, "attention_factor", new_double(s->attention_factor));
        if (s->mscale > 0)
            bad |= set(r, "mscale", new_double(s->mscale));
        if (s->mscale_all_dim > 0)
            bad |= set(r, "mscale_all_dim", new_double(s->mscale_all_dim));
    }
    if (bad) {
        json_object_put(r);
        return NULL;
    }
    return r;
}

/* The Qwen3-MoE fields (mlp_only_layers as a sorted list). */
static int fill_moe(json_object *o, const rp_model_config *cfg)
{
    const rp_moe_config *m = &cfg->moe;
    int bad = 0;
    bad |= set(o, "num_experts", json_object_new_int64(m->num_experts));
    bad |= set(o, "num_experts_per_tok", json_object_new_int64(m->num_experts_per_tok));
    bad |= set(o, "moe_intermediate_size", json_object_new_int64(m->moe_intermediate_size));
    bad |= set(o, "decoder_sparse_step", json_object_new_int64(m->decoder_sparse_step));
    bad |= set(o, "norm_topk_prob", json_object_new_boolean(m->norm_topk_prob));
    bad |= set(o, "output_router_logits", json_object_new_boolean(m->output_router_logits));
    bad |= set(o, "router_aux_loss_coef", new_double(m->router_aux_loss_coef));
    json_object *only = json_object_new_array();
    for (int64_t i = 0; only && i < cfg->num_hidden_layers && i < RP_MOE_MAX_LAYERS; i++)
        if ((m->mlp_only[i / 64] >> (i % 64)) & 1u)
            bad |= json_object_array_add(only, json_object_new_int64(i)) != 0;
    bad |= set(o, "mlp_only_layers", only);
    return bad;
}

/* gpt-oss's fields (GptOssConfig's names). The weights saved are
 * unquantised (io/gpt_oss_experts.h), so a template's
 * quantization_config goes. */
static int fill_gpt_oss(json_object *o, const rp_model_config *cfg)
{
    const rp_moe_config *m = &cfg->moe;
    const rp_gpt_oss_config *g = &cfg->oss;
    int bad = 0;
    bad |= set(o, "num_local_experts", json_object_new_int64(m->num_experts));
    bad |= set(o, "num_experts_per_tok", json_object_new_int64(m->num_experts_per_tok));
    json_object_object_del(o, "experts_per_token"); /* the Hub's other name of k */
    bad |= set(o, "output_router_logits", json_object_new_boolean(m->output_router_logits));
    bad |= set(o, "router_aux_loss_coef", new_double(m->router_aux_loss_coef));
    bad |= set(o, "swiglu_limit", new_double(g->swiglu_limit));
    bad |= set(o, "swiglu_alpha", new_double(g->swiglu_alpha));
    bad |= set(o, "sliding_window", json_object_new_int64(g->sliding_window));
    json_object *types = json_object_new_array();
    for (int64_t i = 0; types && i < cfg->num_hidden_layers; i++)
        bad |= json_object_array_add(
                   types, json_object_new_string(rp_gpt_oss_block_is_sliding(g, i)
                                                     ? "sliding_attention"
                                                     : "full_attention")) != 0;
    bad |= set(o, "layer_types", types);
    json_object_object_del(o, "quantization_config");
    return bad;
}

static int fill(json_object *o, const rp_model_config *cfg, rp_dtype dtype)
{
    int qwen = cfg->arch == RP_ARCH_QWEN3 || cfg->arch == RP_ARCH_QWEN3_MOE;
    static const char *const classes[] = {"LlamaForCausalLM", "Qwen3ForCausalLM",
                                          "Qwen3MoeForCausalLM", "GptOssForCausalLM"};
    int bad = 0;
    json_object *arch = json_object_new_array();
    if (!arch || json_object_array_add(arch, json_object_new_string(classes[cfg->arch])))
        bad = 1;
    bad |= set(o, "architectures", arch);
    bad |= set(o, "model_type", json_object_new_string(rp_arch_name(cfg->arch)));
    if (cfg->arch == RP_ARCH_QWEN3_MOE)
        bad |= fill_moe(o, cfg);
    if (cfg->arch == RP_ARCH_GPT_OSS)
        bad |= fill_gpt_oss(o, cfg);
    /* an FP8 base's merge is saved unquantised (issue 36): a template's
     * quantization_config would make transformers read it as FP8 */
    if (cfg->fp8.on)
        json_object_object_del(o, "quantization_config");
    bad |= set(o, "hidden_size", json_object_new_int64(cfg->hidden_size));
    bad |= set(o, "intermediate_size", json_object_new_int64(cfg->intermediate_size));
    bad |= set(o, "num_hidden_layers", json_object_new_int64(cfg->num_hidden_layers));
    bad |= set(o, "num_attention_heads", json_object_new_int64(cfg->num_attention_heads));
    bad |= set(o, "num_key_value_heads", json_object_new_int64(cfg->num_key_value_heads));
    bad |= set(o, "head_dim", json_object_new_int64(cfg->head_dim));
    bad |= set(o, "vocab_size", json_object_new_int64(cfg->vocab_size));
    bad |= set(o, "max_position_embeddings", json_object_new_int64(cfg->max_position_embeddings));
    bad |= set(o, "rms_norm_eps", new_double(cfg->rms_norm_eps));
    bad |= set(o, "initializer_range", new_double(cfg->initializer_range));
    bad |= set(o, "tie_word_embeddings", json_object_new_boolean(cfg->tie_word_embeddings));
    bad |= set(o, "attention_bias", json_object_new_boolean(cfg->attention_bias));
    if (cfg->arch != RP_ARCH_GPT_OSS) /* its experts' activation is fixed (swiglu_limit) */
        bad |= set(o, "hidden_act", json_object_new_string("silu"));
    bad |= set(o, "rope_theta", new_double(cfg->rope_theta));
    if (cfg->rope_scaling.type == RP_ROPE_DEFAULT)
        bad |= json_object_object_add(o, "rope_scaling", NULL); /* JSON null */
    else
        bad |= set(o, "rope_scaling", rope_object(cfg, 0));
    bad |= set(o, "rope_parameters", rope_object(cfg, 1));
    bad |= set(o, "torch_dtype", json_object_new_string(torch_dtype_name(dtype)));
    bad |= set(o, "dtype", json_object_new_string(torch_dtype_name(dtype)));
    if (qwen) {
        bad |= set(o, "use_sliding_window", json_object_new_boolean(0));
        bad |= json_object_object_add(o, "sliding_window", NULL);
        json_object_object_del(o, "layer_types"); /* transformers rebuilds it from the layer count */
    } else if (cfg->arch == RP_ARCH_LLAMA) {
        bad |= set(o, "mlp_bias", json_object_new_boolean(0));
    }
    return bad;
}

rp_status rp_config_write_to(rp_atomic_file **af, const char *path, const rp_model_config *cfg,
                             rp_dtype dtype, const char *template_path, rp_error *err)
{
    if (!template_path)
        return rp_config_write_text(af, path, cfg, dtype, NULL, NULL, err);
    char *text;
    size_t len;
    RP_TRY(rp_read_file(template_path, (size_t)16 << 20, &text, &len, err));
    rp_status s = rp_config_write_text(af, path, cfg, dtype, text, template_path, err);
    free(text);
    return s;
}

rp_status rp_config_write_text(rp_atomic_file **af, const char *path, const rp_model_config *cfg,
                               rp_dtype dtype, const char *template_text,
                               const char *template_name, rp_error *err)
{
    json_object *o = NULL;
    if (template_text) {
        const char *name = template_name ? template_name : "the template config.json";
        RP_TRY(rp_json_parse(template_text, strlen(template_text), name, &o, err));
        if (!json_object_is_type(o, json_type_object)) {
            json_object_put(o);
            return rp_error_set(err, RP_ERR_FORMAT, "%s: expected a JSON object", name);
        }
    } else {
        o = json_object_new_object();
    }
    if (!o || fill(o, cfg, dtype)) {
        json_object_put(o);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory building config", path);
    }
    const char *text = json_object_to_json_string_ext(
        o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    rp_status s = text ? RP_OK : rp_error_set(err, RP_ERR_NOMEM, "%s: out of memory", path);
    if (s == RP_OK)
        s = rp_atomic_file_write(af, text, strlen(text), err);
    if (s == RP_OK)
        s = rp_atomic_file_write(af, "\n", 1, err);
    json_object_put(o);
    return s;
}

rp_status rp_config_save_from(const char *path, const rp_model_config *cfg, rp_dtype dtype,
                              const char *template_path, rp_error *err)
{
    rp_atomic_file *af = NULL;
    rp_status s = rp_atomic_file_open(path, &af, err);
    if (s == RP_OK)
        s = rp_config_write_to(&af, path, cfg, dtype, template_path, err);
    if (s == RP_OK)
        s = rp_atomic_file_commit(&af, err);
    rp_atomic_file_abort(&af);
    return s;
}

rp_status rp_config_save(const char *path, const rp_model_config *cfg, rp_dtype dtype,
                         rp_error *err)
{
    return rp_config_save_from(path, cfg, dtype, NULL, err);
}
