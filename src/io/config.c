/* config.json for Llama, Qwen3, Qwen3-MoE and gpt-oss, as transformers 4.x
 * and 5.x write it (and, for gpt-oss, as the Hub ships it).
 *
 * Defaults follow the transformers config classes, per architecture
 * (max_position_embeddings 32768 for Qwen3, 2048 for Llama), except
 * head_dim: roundpipe's contract (issue 2, roundpipe-formats(5)) derives it
 * as hidden_size / heads for both, where Qwen3Config would default to 128.
 * transformers always writes head_dim into the config.json files it saves,
 * so the two agree on every checkpoint it produced. An explicit null
 * head_dim or num_key_value_heads means "derive".
 *
 * RoPE settings come in two layouts: 4.x keeps rope_theta at the top level
 * and scaling in "rope_scaling" ({"rope_type" or "type": ..., ...}); 5.x
 * puts everything in "rope_parameters" (rope_type, rope_theta, ...). When
 * both are present, rope_parameters wins.
 *
 * gpt_oss (issue 35) takes GptOssConfig's defaults, head_dim included
 * (64; null derives it), and its YaRN RoPE when no RoPE object is given. */
#include "io/config.h"

#include <json-c/json.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_util.h"
#include "io/quant_modules.h"
#include "io/read_file.h"

#define MAX_CONFIG_BYTES ((size_t)16 << 20)
/* Sizes are used as int indices and products downstream; keep them in int. */
#define MAX_SIZE INT32_MAX

typedef struct ctx {
    const char *file;
    json_object *root;
    rp_error *err;
} ctx;

static rp_status type_error(ctx *c, const char *field, const char *want, json_object *v)
{
    return rp_error_set(c->err, RP_ERR_FORMAT, "%s: field '%s': expected %s, got %s", c->file,
                        field, want, rp_json_type_name(v));
}

/* Look up key in obj; *present is 0 when absent or null. */
static json_object *get(json_object *obj, const char *key, int *present)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(obj, key, &v) || json_object_is_type(v, json_type_null)) {
        *present = 0;
        return NULL;
    }
    *present = 1;
    return v;
}

/* An integer field in [lo, MAX_SIZE]. label is the name used in messages
 * (may be "rope_scaling.x"). */
static rp_status get_int(ctx *c, json_object *obj, const char *key, const char *label,
                         int required, int64_t dflt, int64_t lo, int64_t *out)
{
    int present;
    json_object *v = get(obj, key, &present);
    if (!present) {
        if (required)
            return rp_error_set(c->err, RP_ERR_FORMAT, "%s: missing required field '%s'", c->file,
                                label);
        *out = dflt;
        return RP_OK;
    }
    if (!json_object_is_type(v, json_type_int))
        return type_error(c, label, "integer", v);
    int64_t x = json_object_get_int64(v);
    /* json-c clamps out-of-range integers to INT64_MIN/MAX */
    if (x < lo || x > MAX_SIZE)
        return rp_error_set(c->err, RP_ERR_RANGE, "%s: field '%s': value %s out of range [%lld, %d]",
                            c->file, label, json_object_to_json_string(v), (long long)lo,
                            MAX_SIZE);
    *out = x;
    return RP_OK;
}

/* A finite number (integer or floating point) > lo (or >= lo if closed). */
static rp_status get_num(ctx *c, json_object *obj, const char *key, const char *label,
                         int required, double dflt, double lo, int closed, double *out)
{
    int present;
    json_object *v = get(obj, key, &present);
    if (!present) {
        if (required)
            return rp_error_set(c->err, RP_ERR_FORMAT, "%s: missing required field '%s'", c->file,
                                label);
        *out = dflt;
        return RP_OK;
    }
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        return type_error(c, label, "number", v);
    double x = json_object_get_double(v);
    if (!isfinite(x) || (closed ? x < lo : x <= lo))
        return rp_error_set(c->err, RP_ERR_RANGE, "%s: field '%s': value %s must be %s %g",
                            c->file, label, json_object_to_json_string(v), closed ? ">=" : ">",
                            lo);
    *out = x;
    return RP_OK;
}

static rp_status get_bool(ctx *c, json_object *obj, const char *key, int dflt, int *out)
{
    int present;
    json_object *v = get(obj, key, &present);
    if (!present) {
        *out = dflt;
        return RP_OK;
    }
    if (!json_object_is_type(v, json_type_boolean))
        return type_error(c, key, "boolean", v);
    *out = json_object_get_boolean(v);
    return RP_OK;
}

/* A string field; *out NULL when absent or null. */
static rp_status get_str(ctx *c, json_object *obj, const char *key, const char *label,
                         const char **out)
{
    int present;
    json_object *v = get(obj, key, &present);
    *out = NULL;
    if (!present)
        return RP_OK;
    if (!json_object_is_type(v, json_type_string))
        return type_error(c, label, "string", v);
    *out = json_object_get_string(v);
    return RP_OK;
}

/* YaRN's settings as transformers reads them (modeling_rope_utils:
 * standardize_rope_params and _compute_yarn_parameters): factor required;
 * original_max_position_embeddings from the top level when given there,
 * else from the object, else max_position_embeddings; beta_fast and
 * beta_slow read with Python's `or` (absent, null or 0 mean 32 and 1);
 * truncate true when absent; attention_factor, mscale and mscale_all_dim
 * optional (0: absent). */
static rp_status parse_yarn(ctx *c, json_object *r, const char *field, rp_model_config *cfg)
{
    char label[96];
    rp_rope_scaling *s = &cfg->rope_scaling;
    snprintf(label, sizeof label, "%s.factor", field);
    RP_TRY(get_num(c, r, "factor", label, 1, 0, 0, 0, &s->factor));
    int present;
    get(c->root, "original_max_position_embeddings", &present);
    if (present) {
        RP_TRY(get_int(c, c->root, "original_max_position_embeddings",
                       "original_max_position_embeddings", 1, 0, 1,
                       &s->original_max_position_embeddings));
    } else {
        snprintf(label, sizeof label, "%s.original_max_position_embeddings", field);
        RP_TRY(get_int(c, r, "original_max_position_embeddings", label, 0,
                       cfg->max_position_embeddings, 1, &s->original_max_position_embeddings));
    }
    snprintf(label, sizeof label, "%s.beta_fast", field);
    RP_TRY(get_num(c, r, "beta_fast", label, 0, 0, 0, 1, &s->beta_fast));
    snprintf(label, sizeof label, "%s.beta_slow", field);
    RP_TRY(get_num(c, r, "beta_slow", label, 0, 0, 0, 1, &s->beta_slow));
    if (s->beta_fast == 0)
        s->beta_fast = 32;
    if (s->beta_slow == 0)
        s->beta_slow = 1;
    snprintf(label, sizeof label, "%s.truncate", field);
    get(r, "truncate", &present);
    s->truncate = 1;
    if (present) {
        json_object *v = get(r, "truncate", &present);
        if (!json_object_is_type(v, json_type_boolean))
            return type_error(c, label, "boolean", v);
        s->truncate = json_object_get_boolean(v);
    }
    snprintf(label, sizeof label, "%s.attention_factor", field);
    RP_TRY(get_num(c, r, "attention_factor", label, 0, 0, 0, 0, &s->attention_factor));
    snprintf(label, sizeof label, "%s.mscale", field);
    RP_TRY(get_num(c, r, "mscale", label, 0, 0, 0, 1, &s->mscale));
    snprintf(label, sizeof label, "%s.mscale_all_dim", field);
    RP_TRY(get_num(c, r, "mscale_all_dim", label, 0, 0, 0, 1, &s->mscale_all_dim));
    return RP_OK;
}

/* rope settings from one object (rope_parameters or rope_scaling). */
static rp_status parse_rope_obj(ctx *c, json_object *r, const char *field, rp_model_config *cfg)
{
    char label[96];
    const char *type = NULL;
    snprintf(label, sizeof label, "%s.rope_type", field);
    RP_TRY(get_str(c, r, "rope_type", label, &type));
    if (!type) {
        snprintf(label, sizeof label, "%s.type", field);
        RP_TRY(get_str(c, r, "type", label, &type));
    }
    if (!type)
        return rp_error_set(c->err, RP_ERR_FORMAT, "%s: field '%s': missing 'rope_type'", c->file,
                            field);
    if (strcmp(type, "default") == 0) {
        cfg->rope_scaling.type = RP_ROPE_DEFAULT;
    } else if (strcmp(type, "llama3") == 0) {
        cfg->rope_scaling.type = RP_ROPE_LLAMA3;
    } else if (strcmp(type, "yarn") == 0 && cfg->arch == RP_ARCH_GPT_OSS) {
        cfg->rope_scaling.type = RP_ROPE_YARN;
    } else {
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field '%s': unsupported rope type '%s' (supported: default, "
                            "llama3; yarn for gpt_oss)",
                            c->file, label, type);
    }
    snprintf(label, sizeof label, "%s.rope_theta", field);
    RP_TRY(get_num(c, r, "rope_theta", label, 0, cfg->rope_theta, 0, 0, &cfg->rope_theta));
    double prf;
    snprintf(label, sizeof label, "%s.partial_rotary_factor", field);
    RP_TRY(get_num(c, r, "partial_rotary_factor", label, 0, 1.0, 0, 0, &prf));
    if (prf != 1.0)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field '%s': partial rotary embeddings are not supported", c->file,
                            label);
    if (cfg->rope_scaling.type == RP_ROPE_YARN)
        return parse_yarn(c, r, field, cfg);
    if (cfg->rope_scaling.type != RP_ROPE_LLAMA3)
        return RP_OK;
    rp_rope_scaling *s = &cfg->rope_scaling;
    snprintf(label, sizeof label, "%s.factor", field);
    RP_TRY(get_num(c, r, "factor", label, 1, 0, 0, 0, &s->factor));
    snprintf(label, sizeof label, "%s.low_freq_factor", field);
    RP_TRY(get_num(c, r, "low_freq_factor", label, 1, 0, 0, 0, &s->low_freq_factor));
    snprintf(label, sizeof label, "%s.high_freq_factor", field);
    RP_TRY(get_num(c, r, "high_freq_factor", label, 1, 0, 0, 0, &s->high_freq_factor));
    snprintf(label, sizeof label, "%s.original_max_position_embeddings", field);
    RP_TRY(get_int(c, r, "original_max_position_embeddings", label, 1, 0, 1,
                   &s->original_max_position_embeddings));
    /* the llama3 ramp divides by (high - low) */
    if (!(s->high_freq_factor > s->low_freq_factor))
        return rp_error_set(c->err, RP_ERR_RANGE,
                            "%s: field '%s.high_freq_factor': %g must exceed low_freq_factor %g",
                            c->file, field, s->high_freq_factor, s->low_freq_factor);
    return RP_OK;
}

static rp_status parse_rope(ctx *c, rp_model_config *cfg)
{
    const int oss = cfg->arch == RP_ARCH_GPT_OSS;
    RP_TRY(get_num(c, c->root, "rope_theta", "rope_theta", 0, oss ? 150000.0 : 10000.0, 0, 0,
                   &cfg->rope_theta));
    cfg->rope_scaling.type = RP_ROPE_DEFAULT;
    static const char *const fields[] = {"rope_parameters", "rope_scaling"};
    for (int i = 0; i < 2; i++) {
        int present;
        json_object *r = get(c->root, fields[i], &present);
        if (!present)
            continue;
        if (!json_object_is_type(r, json_type_object))
            return type_error(c, fields[i], "object", r);
        return parse_rope_obj(c, r, fields[i], cfg);
    }
    if (oss) /* GptOssConfig's default: YaRN for a 4096-token pretraining, 32x longer */
        cfg->rope_scaling = (rp_rope_scaling){.type = RP_ROPE_YARN, .factor = 32.0,
                                              .beta_fast = 32.0, .beta_slow = 1.0,
                                              .truncate = 0,
                                              .original_max_position_embeddings = 4096};
    return RP_OK;
}

static rp_status parse_dtype(ctx *c, rp_model_config *cfg)
{
    /* 5.x writes "dtype", 4.x "torch_dtype" */
    static const char *const keys[] = {"dtype", "torch_dtype"};
    cfg->torch_dtype = RP_F32;
    for (int i = 0; i < 2; i++) {
        const char *d;
        RP_TRY(get_str(c, c->root, keys[i], keys[i], &d));
        if (!d)
            continue;
        if (strcmp(d, "float32") == 0)
            cfg->torch_dtype = RP_F32;
        else if (strcmp(d, "bfloat16") == 0)
            cfg->torch_dtype = RP_BF16;
        else if (strcmp(d, "float16") == 0)
            cfg->torch_dtype = RP_F16;
        else
            return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                                "%s: field '%s': unsupported dtype '%s' (float32, bfloat16, "
                                "float16)",
                                c->file, keys[i], d);
        return RP_OK;
    }
    return RP_OK;
}

/* A count of experts a block takes; refused above it at once, since an FP8
 * config's modules are then matched expert by expert (2^31 of them in each
 * of 4096 blocks would never end). */
static rp_status max_experts(ctx *c, const char *field, int64_t n)
{
    if (n > RP_CONFIG_MAX_EXPERTS)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field '%s': %lld experts, at most %d are supported", c->file,
                            field, (long long)n, RP_CONFIG_MAX_EXPERTS);
    return RP_OK;
}

/* The Qwen3-MoE fields, with Qwen3MoeConfig's defaults. */
static rp_status parse_moe(ctx *c, rp_model_config *cfg)
{
    json_object *r = c->root;
    rp_moe_config *m = &cfg->moe;
    /* transformers 5 saves the count as num_local_experts */
    int present;
    get(r, "num_experts", &present);
    const char *count = present ? "num_experts" : "num_local_experts";
    RP_TRY(get_int(c, r, count, count, 0, 128, 0, &m->num_experts));
    RP_TRY(max_experts(c, count, m->num_experts));
    RP_TRY(get_int(c, r, "num_experts_per_tok", "num_experts_per_tok", 0, 8, 1,
                   &m->num_experts_per_tok));
    if (m->num_experts > 0 && m->num_experts_per_tok > m->num_experts)
        return rp_error_set(c->err, RP_ERR_RANGE,
                            "%s: field 'num_experts_per_tok': %lld exceeds num_experts %lld",
                            c->file, (long long)m->num_experts_per_tok,
                            (long long)m->num_experts);
    RP_TRY(get_int(c, r, "moe_intermediate_size", "moe_intermediate_size", 0, 768, 1,
                   &m->moe_intermediate_size));
    RP_TRY(get_int(c, r, "decoder_sparse_step", "decoder_sparse_step", 0, 1, 1,
                   &m->decoder_sparse_step));
    RP_TRY(get_bool(c, r, "norm_topk_prob", 0, &m->norm_topk_prob));
    RP_TRY(get_bool(c, r, "output_router_logits", 0, &m->output_router_logits));
    RP_TRY(get_num(c, r, "router_aux_loss_coef", "router_aux_loss_coef", 0, 0.001, 0, 1,
                   &m->router_aux_loss_coef));
    if (cfg->num_hidden_layers > RP_MOE_MAX_LAYERS)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'num_hidden_layers': %lld blocks; a qwen3_moe model may "
                            "have at most %d",
                            c->file, (long long)cfg->num_hidden_layers, RP_MOE_MAX_LAYERS);
    json_object *v = get(r, "mlp_only_layers", &present);
    if (!present)
        return RP_OK;
    if (!json_object_is_type(v, json_type_array))
        return type_error(c, "mlp_only_layers", "array of block indices", v);
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        json_object *e = json_object_array_get_idx(v, i);
        if (!json_object_is_type(e, json_type_int))
            return rp_error_set(c->err, RP_ERR_FORMAT,
                                "%s: field 'mlp_only_layers': entry %zu is %s, not a block index",
                                c->file, i, json_object_to_json_string(e));
        int64_t b = json_object_get_int64(e);
        if (b < 0 || b >= cfg->num_hidden_layers)
            return rp_error_set(c->err, RP_ERR_RANGE,
                                "%s: field 'mlp_only_layers': entry %zu is %lld, outside the "
                                "blocks [0, %lld)",
                                c->file, i, (long long)b, (long long)cfg->num_hidden_layers);
        m->mlp_only[b / 64] |= (uint64_t)1 << (b % 64);
    }
    return RP_OK;
}

/* layer_types: one entry per block, "sliding_attention" or
 * "full_attention"; absent or null, GptOssConfig's alternation (even
 * blocks slide). */
static rp_status parse_layer_types(ctx *c, rp_model_config *cfg)
{
    rp_gpt_oss_config *g = &cfg->oss;
    int present;
    json_object *v = get(c->root, "layer_types", &present);
    if (!present) {
        for (int64_t i = 0; i < cfg->num_hidden_layers; i += 2)
            g->sliding[i / 64] |= (uint64_t)1 << (i % 64);
        return RP_OK;
    }
    if (!json_object_is_type(v, json_type_array))
        return type_error(c, "layer_types", "array of strings", v);
    size_t n = json_object_array_length(v);
    if ((int64_t)n != cfg->num_hidden_layers)
        return rp_error_set(c->err, RP_ERR_RANGE,
                            "%s: field 'layer_types': %zu entries for num_hidden_layers %lld",
                            c->file, n, (long long)cfg->num_hidden_layers);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(v, i);
        const char *t = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : "";
        if (strcmp(t, "sliding_attention") == 0)
            g->sliding[i / 64] |= (uint64_t)1 << (i % 64);
        else if (strcmp(t, "full_attention") != 0)
            return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                                "%s: field 'layer_types': entry %zu is %s, not "
                                "\"sliding_attention\" or \"full_attention\"",
                                c->file, i, json_object_to_json_string(e));
    }
    return RP_OK;
}

/* quantization_config and its quant_method (*method NULL: no
 * quantization_config), both checked for their types. */
static rp_status quantization_method(ctx *c, json_object **q, const char **method)
{
    int present;
    *method = NULL;
    *q = get(c->root, "quantization_config", &present);
    if (!present)
        return RP_OK;
    if (!json_object_is_type(*q, json_type_object))
        return type_error(c, "quantization_config", "object", *q);
    RP_TRY(get_str(c, *q, "quant_method", "quantization_config.quant_method", method));
    if (!*method)
        return rp_error_set(c->err, RP_ERR_FORMAT,
                            "%s: missing required field 'quantization_config.quant_method'",
                            c->file);
    return RP_OK;
}

/* quantization_config.modules_to_not_convert (absent or null: none) as
 * its patterns, each one io/quant_modules.h understands (else an error
 * naming the entry): *patterns (the caller frees it) points into q's
 * strings. The MXFP4 and FP8 parsers both read it. */
#define MAX_NOT_CONVERT 65536
static rp_status not_convert_patterns(ctx *c, json_object *q, const char ***patterns, size_t *n)
{
    int present;
    *patterns = NULL;
    *n = 0;
    json_object *m = get(q, "modules_to_not_convert", &present);
    if (!present)
        return RP_OK;
    if (!json_object_is_type(m, json_type_array))
        return type_error(c, "quantization_config.modules_to_not_convert", "array of strings", m);
    const size_t len = json_object_array_length(m);
    if (len > MAX_NOT_CONVERT)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'quantization_config.modules_to_not_convert': %zu "
                            "entries, at most %d are supported",
                            c->file, len, MAX_NOT_CONVERT);
    const char **list = calloc(len ? len : 1, sizeof *list);
    if (!list)
        return rp_error_set(c->err, RP_ERR_NOMEM, "%s: %zu modules_to_not_convert", c->file, len);
    for (size_t i = 0; i < len; i++) {
        json_object *e = json_object_array_get_idx(m, i);
        if (!json_object_is_type(e, json_type_string) ||
            !rp_quant_pattern_supported(json_object_get_string(e))) {
            free(list);
            return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                                "%s: field 'quantization_config.modules_to_not_convert': "
                                "entry %zu is %s, not a module name or pattern of literal "
                                "characters, '.' and '*'",
                                c->file, i, json_object_to_json_string(e));
        }
        list[i] = json_object_get_string(e);
    }
    *patterns = list;
    *n = len;
    return RP_OK;
}

/* quantization_config: only gpt-oss's MXFP4 experts are understood;
 * modules_to_not_convert decides per block whether its experts ship
 * quantised (io/quant_modules.h). */
static rp_status parse_quantization(ctx *c, rp_model_config *cfg)
{
    rp_gpt_oss_config *g = &cfg->oss;
    json_object *q;
    const char *method;
    RP_TRY(quantization_method(c, &q, &method));
    if (!method)
        return RP_OK;
    if (strcmp(method, "mxfp4") != 0)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'quantization_config.quant_method': unsupported "
                            "quantisation '%s' (gpt_oss: mxfp4)",
                            c->file, method);
    g->mxfp4 = 1;
    const char **patterns;
    size_t npatterns;
    RP_TRY(not_convert_patterns(c, q, &patterns, &npatterns));
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%lld.mlp.experts", (long long)i);
        if (rp_quant_module_converted(name, patterns, npatterns))
            g->mxfp4_experts[i / 64] |= (uint64_t)1 << (i % 64);
    }
    free(patterns);
    return RP_OK;
}

/* Which projections of an FP8 checkpoint are quantised (rp_fp8_config's
 * converted): each block's modules as the files name them
 * (model.layers.N.self_attn.q_proj, model.layers.N.mlp.gate_proj or, in a
 * mixture of experts, model.layers.N.mlp.experts.E.gate_proj) matched
 * against the patterns. An expert's projection stays unquantised also when
 * a pattern matches the block's experts as one module
 * (model.layers.N.mlp.experts, the module transformers 5 converts whole).
 * A block's experts must agree per projection: roundpipe keeps one word
 * for them. */
static rp_status fp8_converted(ctx *c, rp_model_config *cfg, const char *const *patterns,
                               size_t npatterns)
{
    rp_fp8_config *f = &cfg->fp8;
    if (cfg->num_hidden_layers > RP_FP8_MAX_BLOCKS)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'num_hidden_layers': %lld blocks; an FP8 model may have "
                            "at most %d",
                            c->file, (long long)cfg->num_hidden_layers, RP_FP8_MAX_BLOCKS);
    static const char *const names[RP_LORA_ROUTER] = {
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "gate_proj", "up_proj", "down_proj"};
    /* the patterns that may match a block's experts' projection (most of
     * an FP8 release's hundreds name other modules): tried on each expert */
    const char **some = calloc(npatterns ? npatterns : 1, sizeof *some);
    if (!some)
        return rp_error_set(c->err, RP_ERR_NOMEM, "%s: %zu modules_to_not_convert", c->file,
                            npatterns);
    rp_status s = RP_OK;
    for (int64_t i = 0; s == RP_OK && i < cfg->num_hidden_layers; i++) {
        const int moe = rp_model_block_is_moe(cfg, i);
        /* head at most "model.layers.<19 digits>.mlp.experts.", tail a
         * projection's name: name and first always hold both */
        char name[160], first[160], head[64], tail[64];
        snprintf(name, sizeof name, "model.layers.%lld.mlp.experts", (long long)i);
        const int experts_whole = moe && rp_quant_module_converted(name, patterns, npatterns);
        for (int p = 0; s == RP_OK && p < RP_LORA_ROUTER; p++) {
            int converted;
            if (p <= RP_LORA_O_PROJ || !moe) {
                snprintf(name, sizeof name, "model.layers.%lld.%s%s", (long long)i,
                         p <= RP_LORA_O_PROJ ? "" : "mlp.", names[p]);
                converted = rp_quant_module_converted(name, patterns, npatterns);
            } else {
                snprintf(head, sizeof head, "model.layers.%lld.mlp.experts.", (long long)i);
                snprintf(tail, sizeof tail, ".%s", names[p]);
                size_t nsome = 0;
                for (size_t k = 0; k < npatterns; k++)
                    if (rp_quant_pattern_may_match(patterns[k], head, tail))
                        some[nsome++] = patterns[k];
                snprintf(first, sizeof first, "%s0%s", head, tail);
                converted = experts_whole && rp_quant_module_converted(first, some, nsome);
                for (int64_t e = 1; experts_whole && e < cfg->moe.num_experts; e++) {
                    snprintf(name, sizeof name, "%s%lld%s", head, (long long)e, tail);
                    if (rp_quant_module_converted(name, some, nsome) != converted) {
                        s = rp_error_set(
                            c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'quantization_config.modules_to_not_convert': keeps "
                            "%s in full precision but not %s; roundpipe takes one word for a "
                            "block's experts per projection",
                            c->file, converted ? name : first, converted ? first : name);
                        break;
                    }
                }
            }
            if (converted)
                f->converted[i] |= (uint8_t)(1u << p);
            f->any |= converted;
        }
    }
    free(some);
    return s;
}

/* quantization_config of llama, qwen3 and qwen3_moe: FP8 (e4m3) weights
 * with one scale per block, as transformers' FineGrainedFP8Config reads
 * it (fmt "e4m3", activation_scheme "dynamic" and weight_block_size
 * [128, 128] when absent). The activation scheme concerns FP8 inference
 * only: a frozen base is dequantised and computed on in the compute
 * dtype, so only the scheme that needs no stored activation scales is
 * taken. */
static rp_status parse_fp8(ctx *c, rp_model_config *cfg)
{
    rp_fp8_config *f = &cfg->fp8;
    json_object *q;
    const char *method, *fmt, *scheme;
    RP_TRY(quantization_method(c, &q, &method));
    if (!method)
        return RP_OK;
    int present;
    if (strcmp(method, "fp8") != 0)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'quantization_config.quant_method': unsupported "
                            "quantisation '%s' (%s: fp8)",
                            c->file, method, rp_arch_name(cfg->arch));
    RP_TRY(get_str(c, q, "fmt", "quantization_config.fmt", &fmt));
    if (fmt && strcmp(fmt, "e4m3") != 0)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'quantization_config.fmt': unsupported FP8 format '%s' "
                            "(only e4m3)",
                            c->file, fmt);
    RP_TRY(get_str(c, q, "activation_scheme", "quantization_config.activation_scheme", &scheme));
    if (scheme && strcmp(scheme, "dynamic") != 0)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'quantization_config.activation_scheme': unsupported "
                            "scheme '%s' (only dynamic)",
                            c->file, scheme);
    f->block_rows = f->block_cols = 128;
    json_object *b = get(q, "weight_block_size", &present);
    if (present) {
        json_object *r = NULL, *k = NULL;
        if (json_object_is_type(b, json_type_array) && json_object_array_length(b) == 2) {
            r = json_object_array_get_idx(b, 0);
            k = json_object_array_get_idx(b, 1);
        }
        if (!r || !k || !json_object_is_type(r, json_type_int) ||
            !json_object_is_type(k, json_type_int) || json_object_get_int64(r) < 1 ||
            json_object_get_int64(k) < 1 || json_object_get_int64(r) > MAX_SIZE ||
            json_object_get_int64(k) > MAX_SIZE)
            return rp_error_set(c->err, RP_ERR_FORMAT,
                                "%s: field 'quantization_config.weight_block_size': %s is not "
                                "[rows, columns] of two positive integers",
                                c->file, json_object_to_json_string(b));
        f->block_rows = json_object_get_int64(r);
        f->block_cols = json_object_get_int64(k);
    }
    f->on = 1;
    const char **patterns;
    size_t npatterns;
    RP_TRY(not_convert_patterns(c, q, &patterns, &npatterns));
    rp_status s = fp8_converted(c, cfg, patterns, npatterns);
    free(patterns);
    return s;
}

/* The gpt_oss fields, with GptOssConfig's defaults (transformers 5). The
 * experts' sizes and the aux loss live in cfg->moe: every block is a
 * mixture of experts. */
static rp_status parse_gpt_oss(ctx *c, rp_model_config *cfg)
{
    json_object *r = c->root;
    rp_moe_config *m = &cfg->moe;
    rp_gpt_oss_config *g = &cfg->oss;
    if (cfg->num_hidden_layers > RP_MOE_MAX_LAYERS)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'num_hidden_layers': %lld blocks; a gpt_oss model may "
                            "have at most %d",
                            c->file, (long long)cfg->num_hidden_layers, RP_MOE_MAX_LAYERS);
    /* GptOssConfig maps num_experts to num_local_experts */
    int present;
    get(r, "num_local_experts", &present);
    const char *count = present ? "num_local_experts" : "num_experts";
    RP_TRY(get_int(c, r, count, count, 0, 128, 1, &m->num_experts));
    RP_TRY(max_experts(c, count, m->num_experts));
    /* the Hub's config.json writes both names; transformers reads
     * num_experts_per_tok, so a file with only the other is read by it */
    int64_t k_tok = 0, k_other = 0;
    RP_TRY(get_int(c, r, "num_experts_per_tok", "num_experts_per_tok", 0, 0, 1, &k_tok));
    RP_TRY(get_int(c, r, "experts_per_token", "experts_per_token", 0, 0, 1, &k_other));
    if (k_tok && k_other && k_tok != k_other)
        return rp_error_set(c->err, RP_ERR_RANGE,
                            "%s: field 'experts_per_token': %lld disagrees with "
                            "num_experts_per_tok %lld",
                            c->file, (long long)k_other, (long long)k_tok);
    m->num_experts_per_tok = k_tok ? k_tok : k_other ? k_other : 4;
    if (m->num_experts_per_tok > m->num_experts)
        return rp_error_set(c->err, RP_ERR_RANGE,
                            "%s: field '%s': %lld exceeds num_local_experts %lld", c->file,
                            k_tok ? "num_experts_per_tok" : "experts_per_token",
                            (long long)m->num_experts_per_tok, (long long)m->num_experts);
    m->moe_intermediate_size = cfg->intermediate_size;
    m->decoder_sparse_step = 1;
    /* a softmax over the k largest logits is the k chosen probabilities of
     * the softmax over all E renormalised: Qwen3-MoE's norm_topk_prob */
    m->norm_topk_prob = 1;
    RP_TRY(get_bool(c, r, "output_router_logits", 0, &m->output_router_logits));
    RP_TRY(get_num(c, r, "router_aux_loss_coef", "router_aux_loss_coef", 0, 0.001, 0, 1,
                   &m->router_aux_loss_coef));
    RP_TRY(get_num(c, r, "swiglu_limit", "swiglu_limit", 0, 7.0, 0, 0, &g->swiglu_limit));
    RP_TRY(get_num(c, r, "swiglu_alpha", "swiglu_alpha", 0, 1.702, 0, 0, &g->swiglu_alpha));
    RP_TRY(parse_layer_types(c, cfg));
    int any_sliding = 0;
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++)
        any_sliding |= rp_gpt_oss_block_is_sliding(g, i);
    /* json-c holds a JSON null as a NULL value of a present key */
    json_object *w = NULL;
    if (json_object_object_get_ex(r, "sliding_window", &w) && w == NULL && any_sliding)
        return rp_error_set(c->err, RP_ERR_FORMAT,
                            "%s: field 'sliding_window': null, but layer_types has "
                            "sliding_attention blocks",
                            c->file);
    RP_TRY(get_int(c, r, "sliding_window", "sliding_window", 0, 128, 1, &g->sliding_window));
    return parse_quantization(c, cfg);
}

const char *rp_arch_name(rp_arch arch)
{
    switch (arch) {
    case RP_ARCH_LLAMA: return "llama";
    case RP_ARCH_QWEN3: return "qwen3";
    case RP_ARCH_QWEN3_MOE: return "qwen3_moe";
    case RP_ARCH_GPT_OSS: return "gpt_oss";
    }
    return "unknown";
}

int rp_model_has_moe(const rp_model_config *cfg)
{
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++)
        if (rp_model_block_is_moe(cfg, i))
            return 1;
    return 0;
}

/* Features transformers implements for these architectures that roundpipe
 * does not: refuse them rather than train a different model. */
static rp_status check_unsupported(ctx *c, const rp_model_config *cfg)
{
    const char *act;
    RP_TRY(get_str(c, c->root, "hidden_act", "hidden_act", &act));
    if (act && strcmp(act, "silu") != 0)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'hidden_act': unsupported activation '%s' (only silu)",
                            c->file, act);
    int flag;
    RP_TRY(get_bool(c, c->root, "mlp_bias", 0, &flag));
    if (flag)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'mlp_bias': MLP biases are not supported", c->file);
    RP_TRY(get_bool(c, c->root, "use_sliding_window", 0, &flag));
    if (flag)
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'use_sliding_window': sliding-window attention is not "
                            "supported",
                            c->file);
    int present;
    json_object *lt = get(c->root, "layer_types", &present);
    if (present && cfg->arch != RP_ARCH_GPT_OSS) {
        if (!json_object_is_type(lt, json_type_array))
            return type_error(c, "layer_types", "array", lt);
        size_t n = json_object_array_length(lt);
        for (size_t i = 0; i < n; i++) {
            json_object *t = json_object_array_get_idx(lt, i);
            if (!json_object_is_type(t, json_type_string) ||
                strcmp(json_object_get_string(t), "full_attention") != 0)
                return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                                    "%s: field 'layer_types': entry %zu is %s, only "
                                    "\"full_attention\" is supported",
                                    c->file, i, json_object_to_json_string(t));
        }
        (void)cfg;
    }
    return RP_OK;
}

static rp_status parse_root(ctx *c, rp_model_config *cfg)
{
    if (!json_object_is_type(c->root, json_type_object))
        return rp_error_set(c->err, RP_ERR_FORMAT, "%s: expected a JSON object, got %s", c->file,
                            rp_json_type_name(c->root));
    const char *mt;
    RP_TRY(get_str(c, c->root, "model_type", "model_type", &mt));
    if (!mt)
        return rp_error_set(c->err, RP_ERR_FORMAT, "%s: missing required field 'model_type'",
                            c->file);
    if (strcmp(mt, "llama") == 0)
        cfg->arch = RP_ARCH_LLAMA;
    else if (strcmp(mt, "qwen3") == 0)
        cfg->arch = RP_ARCH_QWEN3;
    else if (strcmp(mt, "qwen3_moe") == 0)
        cfg->arch = RP_ARCH_QWEN3_MOE;
    else if (strcmp(mt, "gpt_oss") == 0)
        cfg->arch = RP_ARCH_GPT_OSS;
    else
        return rp_error_set(c->err, RP_ERR_UNSUPPORTED,
                            "%s: field 'model_type': unsupported model type '%s' (supported: "
                            "llama, qwen3, qwen3_moe, gpt_oss)",
                            c->file, mt);
    int qwen = cfg->arch != RP_ARCH_LLAMA, moe = cfg->arch == RP_ARCH_QWEN3_MOE;
    int oss = cfg->arch == RP_ARCH_GPT_OSS;
    json_object *r = c->root;
    RP_TRY(get_int(c, r, "hidden_size", "hidden_size", 1, 0, 1, &cfg->hidden_size));
    /* Qwen3MoeConfig defaults the dense blocks' width (often unused) */
    RP_TRY(get_int(c, r, "intermediate_size", "intermediate_size", !moe && !oss,
                   oss ? 2880 : 6144, 1, &cfg->intermediate_size));
    RP_TRY(get_int(c, r, "num_hidden_layers", "num_hidden_layers", 1, 0, 1,
                   &cfg->num_hidden_layers));
    RP_TRY(get_int(c, r, "num_attention_heads", "num_attention_heads", 1, 0, 1,
                   &cfg->num_attention_heads));
    RP_TRY(get_int(c, r, "vocab_size", "vocab_size", 1, 0, 1, &cfg->vocab_size));
    /* GptOssConfig defaults to 8 kv heads; an explicit null means "as many
     * as the query heads" for every architecture */
    int64_t kv_default = cfg->num_attention_heads;
    if (oss && !json_object_object_get_ex(r, "num_key_value_heads", NULL))
        kv_default = 8;
    RP_TRY(get_int(c, r, "num_key_value_heads", "num_key_value_heads", 0, kv_default, 1,
                   &cfg->num_key_value_heads));
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0)
        return rp_error_set(c->err, RP_ERR_RANGE,
                            "%s: field 'num_key_value_heads': %lld does not divide "
                            "num_attention_heads %lld",
                            c->file, (long long)cfg->num_key_value_heads,
                            (long long)cfg->num_attention_heads);
    int present;
    get(r, "head_dim", &present);
    int64_t head_dim_default = cfg->hidden_size / cfg->num_attention_heads;
    if (oss && !json_object_object_get_ex(r, "head_dim", NULL)) {
        head_dim_default = 64; /* GptOssConfig's; q width heads x 64 need not be hidden */
        present = 1;
    }
    if (!present && cfg->hidden_size % cfg->num_attention_heads != 0)
        return rp_error_set(c->err, RP_ERR_RANGE,
                            "%s: field 'hidden_size': %lld is not a multiple of "
                            "num_attention_heads %lld and head_dim is not given",
                            c->file, (long long)cfg->hidden_size,
                            (long long)cfg->num_attention_heads);
    RP_TRY(get_int(c, r, "head_dim", "head_dim", 0, head_dim_default, 1, &cfg->head_dim));
    if (cfg->head_dim % 2 != 0) /* RoPE rotates pairs */
        return rp_error_set(c->err, RP_ERR_RANGE, "%s: field 'head_dim': %lld must be even",
                            c->file, (long long)cfg->head_dim);
    RP_TRY(get_int(c, r, "max_position_embeddings", "max_position_embeddings", 0,
                   oss ? 131072 : qwen ? 32768 : 2048, 1, &cfg->max_position_embeddings));
    RP_TRY(get_num(c, r, "rms_norm_eps", "rms_norm_eps", 0, oss ? 1e-5 : 1e-6, 0, 0,
                   &cfg->rms_norm_eps));
    RP_TRY(get_num(c, r, "initializer_range", "initializer_range", 0, 0.02, 0, 1,
                   &cfg->initializer_range));
    RP_TRY(get_bool(c, r, "tie_word_embeddings", 0, &cfg->tie_word_embeddings));
    RP_TRY(get_bool(c, r, "attention_bias", oss, &cfg->attention_bias));
    RP_TRY(parse_rope(c, cfg));
    RP_TRY(parse_dtype(c, cfg));
    if (moe)
        RP_TRY(parse_moe(c, cfg));
    if (oss)
        RP_TRY(parse_gpt_oss(c, cfg));
    else
        RP_TRY(parse_fp8(c, cfg));
    return check_unsupported(c, cfg);
}

rp_status rp_config_parse(const char *json, size_t len, const char *name, rp_model_config *cfg,
                          rp_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    ctx c = {name, NULL, err};
    RP_TRY(rp_json_parse(json, len, name, &c.root, err));
    rp_status s = parse_root(&c, cfg);
    json_object_put(c.root);
    if (s != RP_OK)
        memset(cfg, 0, sizeof *cfg);
    return s;
}

rp_status rp_config_load(const char *path, rp_model_config *cfg, rp_error *err)
{
    char *text;
    size_t len;
    memset(cfg, 0, sizeof *cfg);
    RP_TRY(rp_read_file(path, MAX_CONFIG_BYTES, &text, &len, err));
    rp_status s = rp_config_parse(text, len, path, cfg, err);
    free(text);
    return s;
}

rp_status rp_config_not_convert_entry(const char *path, const char *name, int *index,
                                      char *pattern, size_t len, rp_error *err)
{
    char *text;
    size_t bytes;
    *index = -1;
    if (len)
        pattern[0] = '\0';
    RP_TRY(rp_read_file(path, MAX_CONFIG_BYTES, &text, &bytes, err));
    ctx c = {path, NULL, err};
    rp_status s = rp_json_parse(text, bytes, path, &c.root, err);
    free(text);
    if (s != RP_OK)
        return s;
    json_object *q;
    const char *method, **patterns = NULL;
    size_t n = 0;
    s = quantization_method(&c, &q, &method);
    if (s == RP_OK && method)
        s = not_convert_patterns(&c, q, &patterns, &n);
    for (size_t i = 0; s == RP_OK && i < n; i++)
        if (!rp_quant_module_converted(name, &patterns[i], 1)) {
            *index = (int)i;
            snprintf(pattern, len, "%s", patterns[i]);
            break;
        }
    free(patterns);
    json_object_put(c.root);
    return s;
}

int rp_config_seq_len_warning(const rp_model_config *cfg, int64_t seq_len, char *buf, size_t len)
{
    if (cfg->max_position_embeddings <= 0 || seq_len <= cfg->max_position_embeddings)
        return 0;
    snprintf(buf, len, "--seq-len %lld is beyond the config's max_position_embeddings %lld: the "
             "model was not trained on positions past %lld (RoPE extrapolates, quality may "
             "suffer); going on", (long long)seq_len, (long long)cfg->max_position_embeddings,
             (long long)cfg->max_position_embeddings);
    return 1;
}
