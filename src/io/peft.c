/* LoRA adapters in PEFT's layout (see peft.h). */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file_set.h"
#include "io/json_util.h"
#include "io/name_index.h"
#include "io/peft.h"
#include "io/read_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

/* A visitor's "found it, stop" (not an error: never returned to a caller). */
#define RP_STOP_VISIT ((rp_status)1)

rp_status rp_lora_targets_parse(const char *list, const char *what, unsigned *targets,
                                rp_error *err)
{
    *targets = 0;
    if (!strcmp(list, "all-linear")) {
        *targets = RP_LORA_ALL_LINEAR;
        return RP_OK;
    }
    const char *cur = list;
    for (;;) {
        const char *end = strchr(cur, ',');
        size_t len = end ? (size_t)(end - cur) : strlen(cur);
        char name[48];
        if (len == 0 || len >= sizeof name)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "%s '%s': %s", what, list,
                                len == 0 ? "an empty entry"
                                         : "an entry too long to be a projection");
        memcpy(name, cur, len);
        name[len] = '\0';
        int p = rp_lora_proj_parse(name);
        const unsigned param = rp_lora_param_parse(name);
        if (p < 0 && !param)
            return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: unknown target '%s' (q_proj, k_proj, "
                                "v_proj, o_proj, gate_proj, up_proj, down_proj, gate (a "
                                "mixture of experts' router), gpt-oss's parameters "
                                "mlp.experts.gate_up_proj, mlp.experts.down_proj and "
                                "mlp.router.weight, or all-linear; never the embedding or the "
                                "LM head)", what, name);
        *targets |= p >= 0 ? 1u << p : param;
        if (!end)
            return RP_OK;
        cur = end + 1;
    }
}

/* ---- adapter_config.json ------------------------------------------------ */

typedef struct reader {
    json_object *root;
    const char *path;
} reader;

static json_object *field(const reader *r, const char *key, json_type type, int required,
                          rp_status *s, rp_error *err)
{
    json_object *v = NULL;
    if (*s != RP_OK)
        return NULL;
    if (!json_object_object_get_ex(r->root, key, &v) || json_object_is_type(v, json_type_null)) {
        if (required)
            *s = rp_error_set(err, RP_ERR_FORMAT, "%s: field \"%s\" is missing", r->path, key);
        return NULL;
    }
    int ok = json_object_is_type(v, type) ||
             (type == json_type_double && json_object_is_type(v, json_type_int));
    if (!ok) {
        *s = rp_error_set(err, RP_ERR_FORMAT, "%s: field \"%s\" must be %s, not %s", r->path, key,
                          type == json_type_double ? "a number"
                          : type == json_type_int  ? "an integer"
                          : type == json_type_boolean ? "a boolean"
                          : type == json_type_string  ? "a string"
                                                      : "an array",
                          rp_json_type_name(v));
        return NULL;
    }
    return v;
}

/* Which module paths of target_modules were seen: bit (p, block, expert)
 * of a projection named by path, slot 0 for a block's own projection. */
typedef struct seen_paths {
    uint64_t *bits;
    int64_t blocks, slots; /* slots per block: max(1, num_experts) */
    int any;
} seen_paths;

static void mark(seen_paths *sp, int p, int64_t block, int64_t slot)
{
    size_t i = ((size_t)p * (size_t)sp->blocks + (size_t)block) * (size_t)sp->slots + (size_t)slot;
    sp->bits[i / 64] |= 1ull << (i % 64);
    sp->any = 1;
}

static int marked(const seen_paths *sp, int p, int64_t block, int64_t slot)
{
    size_t i = ((size_t)p * (size_t)sp->blocks + (size_t)block) * (size_t)sp->slots + (size_t)slot;
    return (int)((sp->bits[i / 64] >> (i % 64)) & 1u);
}

/* The expert a module path's tail names ("mlp.experts.<e>.<proj>" after
 * "layers.N."), or -1 when the tail is not that. */
static int64_t expert_of(const char *tail, const char *proj, int64_t experts)
{
    const char *pre = ".mlp.experts.";
    if (strncmp(tail, pre, strlen(pre)) != 0)
        return -1;
    const char *end;
    const long long e = experts > 0 ? rp_name_index(tail + strlen(pre), &end, experts - 1) : -1;
    if (e < 0 || *end != '.' || strcmp(end + 1, proj) != 0)
        return -1;
    return (int64_t)e;
}

/* One entry of target_modules: a projection name, or a module path
 * "[...]layers.N.<self_attn|mlp>.<proj>" or, in a mixture-of-experts
 * block, "[...]layers.N.mlp.experts.E.<proj>" (marked in sp). */
static rp_status add_target(const reader *r, const char *entry, const rp_model_config *cfg,
                            unsigned *targets, seen_paths *sp, rp_error *err)
{
    const int64_t blocks = cfg->num_hidden_layers;
    int p = rp_lora_proj_parse(entry);
    if (p >= 0) {
        *targets |= 1u << p;
        return RP_OK;
    }
    const char *last = strrchr(entry, '.'), *layers = strstr(entry, "layers.");
    p = last ? rp_lora_proj_parse(last + 1) : -1;
    const char *after = NULL;
    const long long block = layers && blocks > 0 ? rp_name_index(layers + 7, &after, blocks - 1) : -1;
    int ok = p >= 0 && block >= 0;
    int64_t slot = 0;
    if (ok) {
        const int64_t copies = rp_lora_copies(cfg, (int)block, (rp_lora_proj)p);
        const char *name = rp_lora_proj_name((rp_lora_proj)p);
        char want[48];
        snprintf(want, sizeof want, ".%s.%s", rp_lora_proj_module((rp_lora_proj)p), name);
        if (rp_lora_per_expert(cfg, (int)block, (rp_lora_proj)p))
            ok = (slot = expert_of(after, name, copies)) >= 0;
        else
            ok = copies == 1 && strcmp(after, want) == 0;
    }
    if (!ok)
        return rp_error_set(err, RP_ERR_FORMAT, "%s: target_modules entry '%s' is not a "
                            "projection roundpipe adapts (q_proj, k_proj, v_proj, o_proj, "
                            "gate_proj, up_proj, down_proj, gate, or model.layers.N.self_attn."
                            "q_proj and the like with N < %lld; in a mixture-of-experts block "
                            "model.layers.N.mlp.gate and model.layers.N.mlp.experts.E.gate_proj "
                            "and the like)", r->path, entry, (long long)blocks);
    *targets |= 1u << p;
    mark(sp, p, block, slot);
    return RP_OK;
}

static rp_status read_targets(const reader *r, json_object *v, const rp_model_config *cfg,
                              unsigned *targets, rp_error *err)
{
    const int64_t blocks = cfg->num_hidden_layers;
    *targets = 0;
    if (json_object_is_type(v, json_type_string)) {
        if (!strcmp(json_object_get_string(v), "all-linear")) {
            *targets = RP_LORA_ALL_LINEAR;
            return RP_OK;
        }
        /* PEFT matches any other string as one regular expression against
         * whole module paths: "q_proj" names no module there */
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: target_modules \"%s\" is a string "
                            "other than \"all-linear\", which PEFT matches as a regular "
                            "expression against whole module paths (model.layers.0.self_attn."
                            "q_proj): not supported; list the projections (\"q_proj\", ...) or "
                            "the modules' paths", r->path, json_object_get_string(v));
    }
    seen_paths sp = {NULL, blocks, 1, 0};
    if (rp_model_has_moe(cfg))
        sp.slots = cfg->moe.num_experts;
    size_t nbits = (size_t)RP_LORA_NPROJ * (size_t)blocks * (size_t)sp.slots;
    sp.bits = calloc(nbits / 64 + 1, sizeof *sp.bits);
    if (!sp.bits)
        return rp_error_set(err, RP_ERR_NOMEM, "%s: target_modules", r->path);
    rp_status s = RP_OK;
    size_t n = json_object_array_length(v);
    for (size_t i = 0; s == RP_OK && i < n; i++) {
        json_object *e = json_object_array_get_idx(v, i);
        if (!json_object_is_type(e, json_type_string))
            s = rp_error_set(err, RP_ERR_FORMAT, "%s: target_modules[%zu] must be a string, not "
                             "%s", r->path, i, rp_json_type_name(e));
        else
            s = add_target(r, json_object_get_string(e), cfg, targets, &sp, err);
    }
    if (s == RP_OK && n == 0)
        s = rp_error_set(err, RP_ERR_FORMAT, "%s: target_modules is empty", r->path);
    /* module paths: roundpipe adapts a projection in every block (and
     * every expert) that has it, or in none */
    for (int p = 0; s == RP_OK && sp.any && p < RP_LORA_NPROJ; p++) {
        int any = 0, all = 1;
        for (int64_t b = 0; b < blocks; b++)
            for (int64_t e = 0; e < rp_lora_copies(cfg, (int)b, (rp_lora_proj)p); e++) {
                int has = marked(&sp, p, b, e);
                any |= has;
                all &= has;
            }
        const int ex = rp_model_has_moe(cfg) && ((RP_LORA_EXPERT_PROJS >> p) & 1u);
        if (any && !all && ((*targets >> p) & 1))
            s = rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: target_modules name %s in some blocks"
                             "%s only: roundpipe adapts a projection in every block%s", r->path,
                             rp_lora_proj_name((rp_lora_proj)p), ex ? " or experts" : "",
                             ex ? " and expert" : "");
    }
    free(sp.bits);
    return s;
}

/* target_parameters: gpt-oss's mlp.experts.gate_up_proj, mlp.experts.
 * down_proj and mlp.router.weight (their bits into *params), in any order:
 * PEFT nests the experts' wrappers in the module's order of its parameters,
 * not the list's, so either order saves the same tensor names
 * (rp_lora_fused_name). */
static rp_status read_parameters(const reader *r, json_object *v, const rp_model_config *cfg,
                                 unsigned *params, rp_error *err)
{
    if (cfg->arch != RP_ARCH_GPT_OSS)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: target_parameters (PEFT's adapters of "
                            "fused expert parameters) are not supported on this model: roundpipe "
                            "keeps one adapter per expert (mlp.experts.E.gate_proj and the "
                            "like); it takes target_parameters on gpt-oss", r->path);
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        json_object *e = json_object_array_get_idx(v, i);
        const unsigned bit = json_object_is_type(e, json_type_string)
                                 ? rp_lora_param_parse(json_object_get_string(e))
                                 : 0;
        if (!bit)
            return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: target_parameters[%zu] %s is not "
                                "one roundpipe adapts on gpt-oss (mlp.experts.gate_up_proj, "
                                "mlp.experts.down_proj, mlp.router.weight)", r->path, i,
                                json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN));
        *params |= bit;
    }
    return RP_OK;
}

/* ---- the fields roundpipe does not read --------------------------------- */

/* What value of a field of adapter_config.json that read_config does not
 * read roundpipe takes: the values under which PEFT computes and trains
 * the adapter as roundpipe does. A value PEFT would apply and roundpipe
 * cannot is refused (issue 30), never ignored. */
typedef enum field_rule {
    ANY_VALUE,     /* read_config's own, metadata, settings of nothing taken */
    NULL_ONLY,     /* null */
    NULL_OR_EMPTY, /* null, {}, [] or "": what PEFT tests as false */
    NULL_OR_FALSE, /* false (or null) */
} field_rule;

typedef struct known_field {
    const char *name;
    field_rule rule;
    const char *does; /* what PEFT does with another value */
} known_field;

static const known_field known_fields[] = {
    /* read_config's own */
    {"peft_type", ANY_VALUE, NULL},
    {"r", ANY_VALUE, NULL},
    {"lora_alpha", ANY_VALUE, NULL},
    {"lora_dropout", ANY_VALUE, NULL},
    {"use_rslora", ANY_VALUE, NULL},
    {"target_modules", ANY_VALUE, NULL},
    {"bias", ANY_VALUE, NULL},
    {"fan_in_fan_out", ANY_VALUE, NULL},
    {"target_parameters", ANY_VALUE, NULL},
    {"init_lora_weights", ANY_VALUE, NULL},
    /* no effect on the adapter of a model's linear projections: metadata,
     * PEFT's run-time settings, Megatron's parallel layers, the settings of
     * initialisations (init_lora_weights says which applies), QALoRA's
     * group (with use_qalora), tying the adapters of tied embeddings and
     * LM head (never adapted) or of modules_to_save, PEFT 0.2's merging at
     * evaluation */
    {"task_type", ANY_VALUE, NULL},
    {"base_model_name_or_path", ANY_VALUE, NULL},
    {"revision", ANY_VALUE, NULL},
    {"inference_mode", ANY_VALUE, NULL},
    {"auto_mapping", ANY_VALUE, NULL},
    {"peft_version", ANY_VALUE, NULL},
    {"runtime_config", ANY_VALUE, NULL},
    {"megatron_config", ANY_VALUE, NULL},
    {"megatron_core", ANY_VALUE, NULL},
    {"loftq_config", ANY_VALUE, NULL},
    {"eva_config", ANY_VALUE, NULL},
    {"corda_config", ANY_VALUE, NULL},
    {"lora_ga_config", ANY_VALUE, NULL},
    {"qalora_group_size", ANY_VALUE, NULL},
    {"ensure_weight_tying", ANY_VALUE, NULL},
    {"merge_weights", ANY_VALUE, NULL},
    /* applied by PEFT, not reproduced by roundpipe */
    {"alpha_pattern", NULL_OR_EMPTY, "gives some modules another lora_alpha"},
    {"rank_pattern", NULL_OR_EMPTY, "gives some modules another r"},
    {"layers_to_transform", NULL_ONLY, "adapts the blocks it names only"},
    {"layers_pattern", NULL_OR_EMPTY, "names the blocks layers_to_transform counts"},
    {"exclude_modules", NULL_OR_EMPTY, "leaves the modules it names without an adapter"},
    {"modules_to_save", NULL_OR_EMPTY, "trains the modules it names in full and saves them "
                                       "with the adapter"},
    {"layer_replication", NULL_OR_EMPTY, "repeats blocks to make a deeper model"},
    {"trainable_token_indices", NULL_ONLY, "trains the embedding rows of these tokens"},
    {"use_dora", NULL_OR_FALSE, "makes it DoRA (a trained magnitude per output)"},
    {"lora_bias", NULL_OR_FALSE, "gives lora_B a bias"},
    {"use_qalora", NULL_OR_FALSE, "makes it QALoRA (GPTQ-quantized layers)"},
    {"alora_invocation_tokens", NULL_ONLY, "makes it an activated LoRA (applied from these "
                                           "tokens on)"},
    {"use_bdlora", NULL_ONLY, "makes it BD-LoRA (block-diagonal A or B)"},
    {"velora_config", NULL_ONLY, "makes it VeLoRA (another backward)"},
    {"monteclora_config", NULL_ONLY, "makes it MonteCLoRA (sampled adapters)"},
    {"arrow_config", NULL_ONLY, "makes it Arrow (adapters routed per token)"},
    {"kasa_config", NULL_ONLY, "makes it KaSA (a trained diagonal, the base truncated)"},
    {"enable_lora", NULL_ONLY, "adapts parts of fused projections (PEFT 0.2)"},
};

static int is_empty(json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_object: return json_object_object_length(v) == 0;
    case json_type_array: return json_object_array_length(v) == 0;
    case json_type_string: return json_object_get_string_len(v) == 0;
    default: return 0;
    }
}

/* Every field of the config that read_config does not read holds a value
 * its rule takes; a field roundpipe does not know (a later PEFT's) only
 * null or false, which switch nothing on. */
static rp_status check_other_fields(const reader *r, rp_error *err)
{
    json_object_object_foreach(r->root, key, v)
    {
        const known_field *k = NULL;
        for (size_t i = 0; !k && i < sizeof known_fields / sizeof known_fields[0]; i++)
            if (!strcmp(key, known_fields[i].name))
                k = &known_fields[i];
        const int null = json_object_is_type(v, json_type_null);
        const int is_false =
            json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v);
        int taken;
        const char *want;
        if (!k)
            taken = null || is_false, want = "null or false";
        else if (k->rule == ANY_VALUE)
            continue;
        else if (k->rule == NULL_ONLY)
            taken = null, want = "null";
        else if (k->rule == NULL_OR_EMPTY)
            taken = null || is_empty(v), want = "null or empty";
        else
            taken = null || is_false, want = "false or null";
        if (taken)
            continue;
        char value[64];
        const char *text = json_object_to_json_string_ext(
            v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        snprintf(value, sizeof value, "%s", text);
        if (strlen(text) >= sizeof value)
            memcpy(value + sizeof value - 4, "...", 4);
        if (!k)
            return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: field \"%s\" is %s: a field "
                                "roundpipe does not know (a later PEFT's?), taken only when %s",
                                r->path, key, value, want);
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: field \"%s\" is %s: PEFT then %s; "
                            "roundpipe does not, and takes only %s here", r->path, key, value,
                            k->does, want);
    }
    return RP_OK;
}

/* init_lora_weights: how PEFT initialises the adapter before it loads
 * adapter_model.safetensors over it. true, false, "gaussian", "eva" and
 * "orthogonal" only set A and B, which the file replaces; PiSSA, OLoRA,
 * CorDA and LoftQ also change the base weights, MiCA trains A only, and
 * LoRA-GA is made for a base it changed. */
static rp_status check_init(const reader *r, rp_error *err)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(r->root, "init_lora_weights", &v) ||
        json_object_is_type(v, json_type_null) || json_object_is_type(v, json_type_boolean))
        return RP_OK;
    if (!json_object_is_type(v, json_type_string))
        return rp_error_set(err, RP_ERR_FORMAT, "%s: field \"init_lora_weights\" must be a "
                            "boolean or a string, not %s", r->path, rp_json_type_name(v));
    const char *init = json_object_get_string(v);
    if (!strcmp(init, "gaussian") || !strcmp(init, "eva") || !strcmp(init, "orthogonal"))
        return RP_OK;
    return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: field \"init_lora_weights\" is \"%s\", "
                        "which roundpipe does not reproduce (with PiSSA, OLoRA, CorDA and LoftQ "
                        "PEFT changes the base weights as it loads the adapter, MiCA trains A "
                        "only); it takes true, false, \"gaussian\", \"eva\" and \"orthogonal\", "
                        "whose initial A and B adapter_model.safetensors replaces", r->path, init);
}

static rp_status read_config(const char *path, const rp_model_config *cfg, rp_lora_config *c,
                              rp_error *err)
{
    char *text = NULL;
    size_t len = 0;
    RP_TRY(rp_read_file(path, (size_t)1 << 20, &text, &len, err));
    reader r = {NULL, path};
    rp_status s = rp_json_parse(text, len, path, &r.root, err);
    free(text);
    RP_TRY(s);
    if (!json_object_is_type(r.root, json_type_object))
        s = rp_error_set(err, RP_ERR_FORMAT, "%s: not a JSON object", path);
    json_object *v = field(&r, "peft_type", json_type_string, 1, &s, err);
    if (v && strcmp(json_object_get_string(v), "LORA") != 0)
        s = rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: peft_type \"%s\": only LORA adapters",
                         path, json_object_get_string(v));
    if (s == RP_OK)
        s = check_other_fields(&r, err);
    if (s == RP_OK)
        s = check_init(&r, err);
    v = field(&r, "r", json_type_int, 1, &s, err);
    if (v) {
        int64_t rank = json_object_get_int64(v);
        if (rank < 1 || rank > 65536)
            s = rp_error_set(err, RP_ERR_FORMAT, "%s: r %lld must be between 1 and 65536", path,
                             (long long)rank);
        c->rank = (int)rank;
    }
    v = field(&r, "lora_alpha", json_type_double, 1, &s, err);
    if (v)
        c->alpha = json_object_get_double(v);
    v = field(&r, "lora_dropout", json_type_double, 0, &s, err);
    c->dropout = v ? json_object_get_double(v) : 0.0;
    if (s == RP_OK && !(c->dropout >= 0 && c->dropout < 1))
        s = rp_error_set(err, RP_ERR_FORMAT, "%s: lora_dropout %g must be in [0, 1)", path,
                         c->dropout);
    v = field(&r, "use_rslora", json_type_boolean, 0, &s, err);
    c->use_rslora = v ? json_object_get_boolean(v) : 0;
    v = field(&r, "bias", json_type_string, 0, &s, err);
    if (v && strcmp(json_object_get_string(v), "none") != 0)
        s = rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: bias \"%s\": only \"none\" (the base's "
                         "biases stay frozen)", path, json_object_get_string(v));
    v = field(&r, "fan_in_fan_out", json_type_boolean, 0, &s, err);
    if (v && json_object_get_boolean(v))
        s = rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: fan_in_fan_out true (Conv1D layouts) is "
                         "not supported", path);
    /* gpt-oss's router and fused experts as PEFT adapts them (io/config.h);
     * on another model, PEFT's adapters of transformers 5's fused experts
     * hold all experts in one tensor, where roundpipe reads one per expert */
    unsigned params = 0;
    v = field(&r, "target_parameters", json_type_array, 0, &s, err);
    if (v && json_object_array_length(v) > 0)
        s = read_parameters(&r, v, cfg, &params, err);
    json_object *t = NULL;
    const int has_modules = json_object_object_get_ex(r.root, "target_modules", &t) &&
                            !json_object_is_type(t, json_type_null);
    if (s == RP_OK && (!has_modules || (json_object_is_type(t, json_type_array) &&
                                        json_object_array_length(t) == 0)) && params)
        t = NULL; /* the parameters alone, as PEFT takes them */
    else if (s == RP_OK && (!has_modules || !(json_object_is_type(t, json_type_array) ||
                                              json_object_is_type(t, json_type_string))))
        s = rp_error_set(err, RP_ERR_FORMAT, "%s: field \"target_modules\" must be a list of "
                         "module names or \"all-linear\"", path);
    if (s == RP_OK && t)
        s = read_targets(&r, t, cfg, &c->targets, err);
    const char *why = t && json_object_is_type(t, json_type_array)
                          ? rp_lora_refused_targets(cfg, c->targets)
                          : NULL; /* all-linear: what the model has */
    if (s == RP_OK && why)
        s = rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: target_modules: %s", path, why);
    c->targets = rp_lora_model_targets(cfg, c->targets | params);
    if (s == RP_OK && c->targets == 0)
        s = rp_error_set(err, RP_ERR_FORMAT, "%s: target_modules names no projection this "
                         "model has", path);
    json_object_put(r.root);
    return s;
}

/* ---- the adapter's tensors ------------------------------------------------ */

typedef rp_status (*tensor_visit)(void *arg, int block, int expert, rp_lora_proj p, int b,
                                  const char *name, const int64_t shape[2], rp_error *err);

/* fn on every tensor of an adapter of c for cfg, in file order: blocks,
 * then projections, then experts (expert -1: a block's own projection;
 * RP_LORA_ALL_EXPERTS: gpt-oss's fused tensor of all experts), then A and
 * B; stops at the first failure. */
static rp_status each_tensor(const rp_model_config *cfg, const rp_lora_config *c, tensor_visit fn,
                             void *arg, rp_error *err)
{
    char name[160];
    for (int64_t blk = 0; blk < cfg->num_hidden_layers; blk++)
        for (int p = 0; p < RP_LORA_NPROJ; p++) {
            const int64_t copies = rp_lora_copies(cfg, (int)blk, (rp_lora_proj)p);
            if (!((c->targets >> p) & 1) || copies == 0)
                continue;
            int64_t in, out;
            rp_lora_features(cfg, (int)blk, (rp_lora_proj)p, &in, &out);
            const int per_expert = rp_lora_per_expert(cfg, (int)blk, (rp_lora_proj)p);
            if (per_expert && cfg->arch == RP_ARCH_GPT_OSS) { /* all experts in one tensor */
                for (int b = 0; b < 2; b++) {
                    int64_t shape[2] = {b ? out : c->rank * copies, b ? c->rank * copies : in};
                    rp_lora_fused_name((int)blk, (rp_lora_proj)p, c->targets, b, name,
                                       sizeof name);
                    RP_TRY(fn(arg, (int)blk, RP_LORA_ALL_EXPERTS, (rp_lora_proj)p, b, name,
                              shape, err));
                }
                continue;
            }
            for (int64_t e = 0; e < copies; e++)
                for (int b = 0; b < 2; b++) {
                    const int expert = per_expert ? (int)e : -1;
                    int64_t shape[2] = {b ? out : c->rank, b ? c->rank : in};
                    rp_lora_tensor_name(cfg, (int)blk, expert, (rp_lora_proj)p, b, name,
                                        sizeof name);
                    RP_TRY(fn(arg, (int)blk, expert, (rp_lora_proj)p, b, name, shape, err));
                }
        }
    return RP_OK;
}

/* ---- adapter_model.safetensors ------------------------------------------ */

typedef struct checking {
    rp_safetensors *st;
    const char *path;
    int rank;
    size_t expected;
} checking;

static rp_status check_one(void *arg, int block, int expert, rp_lora_proj p, int b,
                           const char *name, const int64_t shape[2], rp_error *err)
{
    checking *k = arg;
    char got[64], want[64];
    rp_safetensors_tensor t;
    (void)block, (void)expert, (void)p, (void)b;
    k->expected++;
    if (!rp_safetensors_has(k->st, name))
        return rp_error_set(err, RP_ERR_MISMATCH, "%s: tensor %s is missing (r %d, targets of "
                            "adapter_config.json)", k->path, name, k->rank);
    RP_TRY(rp_safetensors_find(k->st, name, &t, err));
    if (t.ndim != 2 || t.shape[0] != shape[0] || t.shape[1] != shape[1])
        return rp_error_set(err, RP_ERR_MISMATCH, "%s: tensor %s has shape %s; r %d and the "
                            "model want %s", k->path, name,
                            rp_safetensors_shape_str(t.ndim, t.shape, got, sizeof got), k->rank,
                            rp_safetensors_shape_str(2, shape, want, sizeof want));
    if (!t.dtype_supported)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: tensor %s is %s (F32, BF16 or F16 "
                            "expected)", k->path, name, t.dtype_name);
    return RP_OK;
}

/* Whether name is one of the adapter's tensors (a visitor that stops there). */
static rp_status is_named(void *arg, int block, int expert, rp_lora_proj p, int b,
                          const char *name, const int64_t shape[2], rp_error *err)
{
    (void)block, (void)expert, (void)p, (void)b, (void)shape, (void)err;
    return strcmp(arg, name) == 0 ? RP_STOP_VISIT : RP_OK;
}

static rp_status check_tensors(const char *path, const rp_model_config *cfg,
                               const rp_lora_config *c, rp_error *err)
{
    checking k = {NULL, path, c->rank, 0};
    RP_TRY(rp_safetensors_open(path, &k.st, err));
    rp_status s = each_tensor(cfg, c, check_one, &k, err);
    /* nothing else: an adapter of other targets or blocks is not this one
     * (every expected tensor is there: any more is one of those) */
    for (size_t i = 0; s == RP_OK && rp_safetensors_count(k.st) != k.expected &&
                       i < rp_safetensors_count(k.st); i++) {
        const char *n = rp_safetensors_name(k.st, i);
        if (each_tensor(cfg, c, is_named, (void *)n, err) != RP_STOP_VISIT)
            s = rp_error_set(err, RP_ERR_MISMATCH, "%s: tensor %s is not an adapter of this "
                             "model's targeted projections (adapter_config.json)", path, n);
    }
    rp_safetensors_close(&k.st);
    return s;
}

rp_status rp_peft_read(const char *dir, const rp_model_config *cfg, rp_lora_config *out,
                       rp_error *err)
{
    char path[4200];
    memset(out, 0, sizeof *out);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    RP_TRY(read_config(path, cfg, out, err));
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    return check_tensors(path, cfg, out, err);
}

/* ---- writing ------------------------------------------------------------- */

static json_object *adapter_config(const rp_model_config *cfg, const rp_lora_config *c,
                                   const char *base_model)
{
    const unsigned targets = rp_lora_model_targets(cfg, c->targets);
    json_object *o = json_object_new_object(), *t = json_object_new_array();
    if (!o || !t) {
        json_object_put(o);
        json_object_put(t);
        return NULL;
    }
    /* gpt-oss's router and experts as target_parameters, gate_up_proj
     * first as the experts module holds them (either order names the same
     * tensors: rp_lora_fused_name) */
    json_object *params = NULL;
    static const rp_lora_proj param_order[3] = {RP_LORA_GATE_PROJ, RP_LORA_DOWN_PROJ,
                                                RP_LORA_ROUTER};
    for (int i = 0; i < 3; i++) {
        const char *name = rp_lora_param_name(cfg, param_order[i]);
        if (name && ((targets >> param_order[i]) & 1)) {
            if (!params)
                params = json_object_new_array();
            json_object_array_add(params, json_object_new_string(name));
        }
    }
    for (int p = 0; p < RP_LORA_NPROJ; p++)
        if (((targets >> p) & 1) && !rp_lora_param_name(cfg, (rp_lora_proj)p))
            json_object_array_add(t,
                                  json_object_new_string(rp_lora_proj_name((rp_lora_proj)p)));
    json_object_object_add(o, "peft_type", json_object_new_string("LORA"));
    json_object_object_add(o, "task_type", json_object_new_string("CAUSAL_LM"));
    json_object_object_add(o, "r", json_object_new_int(c->rank));
    /* an integral alpha as an integer, as PEFT's configs usually hold it */
    json_object_object_add(o, "lora_alpha",
                           c->alpha == floor(c->alpha) && fabs(c->alpha) < 1e15
                               ? json_object_new_int64((int64_t)c->alpha)
                               : json_object_new_double(c->alpha));
    json_object_object_add(o, "lora_dropout", json_object_new_double(c->dropout));
    /* none but parameters: null, as PEFT's LoraConfig takes them alone */
    const int none = params && json_object_array_length(t) == 0;
    if (none)
        json_object_put(t);
    json_object_object_add(o, "target_modules", none ? NULL : t);
    if (params)
        json_object_object_add(o, "target_parameters", params);
    json_object_object_add(o, "bias", json_object_new_string("none"));
    json_object_object_add(o, "use_rslora", json_object_new_boolean(c->use_rslora));
    json_object_object_add(o, "fan_in_fan_out", json_object_new_boolean(0));
    json_object_object_add(o, "base_model_name_or_path",
                           base_model ? json_object_new_string(base_model) : NULL);
    json_object_object_add(o, "inference_mode", json_object_new_boolean(1));
    return o;
}

/* Row o of gpt-oss's fused lora_B of p ([out, r*E]) is row expert_row(o)
 * of each expert's B_e in roundpipe: gate_up_proj's rows interleave gate
 * (2j) and up (2j + 1), which roundpipe keeps apart (gate's I rows, then
 * up's: model/block.c's expert_adapters). */
static int64_t expert_row(rp_lora_proj p, int64_t o, int64_t out)
{
    return p == RP_LORA_GATE_PROJ ? (o % 2 ? out / 2 + o / 2 : o / 2) : o;
}

/* Between a fused tensor (lora_A [r*E, in] or lora_B [out, r*E], shape)
 * and the E experts' own (A_e [r, in], B_e [out, r]: experts[e]);
 * to_fused 1 gathers into fused, 0 scatters from it. */
static void fused_copy(float *fused, float *const *experts, rp_lora_proj p, int b,
                       const int64_t shape[2], int rank, int64_t E, int to_fused)
{
    for (int64_t e = 0; e < E; e++) {
        float *x = experts[e];
        if (!b) { /* rows e*r .. e*r + r - 1 */
            for (int64_t i = 0; i < rank * shape[1]; i++) {
                float *f = fused + e * rank * shape[1] + i;
                if (to_fused)
                    *f = x[i];
                else
                    x[i] = *f;
            }
            continue;
        }
        for (int64_t o = 0; o < shape[0]; o++)
            for (int k = 0; k < rank; k++) {
                float *f = fused + o * shape[1] + k * E + e;
                float *y = x + expert_row(p, o, shape[0]) * rank + k;
                if (to_fused)
                    *f = *y;
                else
                    *y = *f;
            }
    }
}

typedef struct adding {
    rp_safetensors_writer *w;
    rp_lora_tensor_fn tensor;
    void *arg;
    int rank;
    int64_t experts;
    float **fused; /* the fused tensors made, alive until the file is written */
    int nfused, cap;
} adding;

static rp_status add_one(void *arg, int block, int expert, rp_lora_proj p, int b,
                         const char *name, const int64_t shape[2], rp_error *err)
{
    adding *a = arg;
    if (expert != RP_LORA_ALL_EXPERTS)
        return rp_safetensors_writer_add(a->w, name, RP_F32, RP_F32, 2, shape,
                                         a->tensor(a->arg, block, expert, p, b), err);
    if (a->nfused == a->cap) {
        float **grown = realloc(a->fused, (size_t)(2 * a->cap + 8) * sizeof *grown);
        if (!grown)
            return rp_error_set(err, RP_ERR_NOMEM, "%s: the fused tensors' list", name);
        a->fused = grown;
        a->cap = 2 * a->cap + 8;
    }
    float *f = malloc((size_t)(shape[0] * shape[1]) * sizeof *f);
    float **x = calloc((size_t)a->experts, sizeof *x);
    if (!f || !x) {
        free(f);
        free(x);
        return rp_error_set(err, RP_ERR_NOMEM, "%s: %lld x %lld floats", name,
                            (long long)shape[0], (long long)shape[1]);
    }
    a->fused[a->nfused++] = f;
    for (int64_t e = 0; e < a->experts; e++)
        x[e] = (float *)a->tensor(a->arg, block, (int)e, p, b); /* only read: to_fused */
    fused_copy(f, x, p, b, shape, a->rank, a->experts, 1);
    free(x);
    return rp_safetensors_writer_add(a->w, name, RP_F32, RP_F32, 2, shape, f, err);
}

rp_status rp_peft_write(const char *dir, const rp_model_config *cfg, const rp_lora_config *c,
                        const char *base_model, rp_lora_tensor_fn tensor, void *arg,
                        rp_error *err)
{
    rp_file_set *fs = NULL;
    RP_TRY(rp_file_set_begin(dir, &fs, err));
    rp_safetensors_writer *w = NULL;
    json_object *conf = adapter_config(cfg, c, base_model);
    rp_status s = conf ? rp_safetensors_writer_create(&w, err)
                       : rp_error_set(err, RP_ERR_NOMEM, "%s: adapter_config.json", dir);
    adding add = {w, tensor, arg, c->rank, cfg->moe.num_experts, NULL, 0, 0};
    if (s == RP_OK)
        s = each_tensor(cfg, c, add_one, &add, err);
    rp_atomic_file **af = NULL;
    char path[4200];
    if (s == RP_OK) {
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
        s = rp_file_set_add(fs, "adapter_model.safetensors", &af, err);
    }
    if (s == RP_OK)
        s = rp_safetensors_writer_write_to(w, af, path, err);
    if (s == RP_OK)
        s = rp_file_set_add(fs, "adapter_config.json", &af, err);
    if (s == RP_OK) {
        const char *text = json_object_to_json_string_ext(
            conf, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                      JSON_C_TO_STRING_NOSLASHESCAPE);
        s = rp_atomic_file_write(af, text, strlen(text), err);
        if (s == RP_OK)
            s = rp_atomic_file_write(af, "\n", 1, err);
    }
    json_object_put(conf);
    rp_safetensors_writer_destroy(&w);
    for (int i = 0; i < add.nfused; i++)
        free(add.fused[i]);
    free(add.fused);
    if (s == RP_OK)
        return rp_file_set_commit(&fs, err);
    rp_file_set_abort(&fs);
    return s;
}

/* ---- loading the tensors ---------------------------------------------------- */

typedef struct loading {
    rp_safetensors *st;
    const char *path;
    rp_lora_dst_fn dst;
    void *arg;
    int rank;
    int64_t experts;
} loading;

static rp_status load_one(void *arg, int block, int expert, rp_lora_proj p, int b,
                          const char *name, const int64_t shape[2], rp_error *err)
{
    loading *l = arg;
    if (expert != RP_LORA_ALL_EXPERTS)
        return rp_safetensors_read_f32(l->st, name, 2, shape, l->dst(l->arg, block, expert, p, b),
                                       err);
    float *f = malloc((size_t)(shape[0] * shape[1]) * sizeof *f);
    float **x = calloc((size_t)l->experts, sizeof *x);
    rp_status s = f && x ? rp_safetensors_read_f32(l->st, name, 2, shape, f, err)
                         : rp_error_set(err, RP_ERR_NOMEM, "%s: tensor %s", l->path, name);
    if (s == RP_OK) {
        for (int64_t e = 0; e < l->experts; e++)
            x[e] = l->dst(l->arg, block, (int)e, p, b);
        fused_copy(f, x, p, b, shape, l->rank, l->experts, 0);
    }
    free(f);
    free(x);
    return s;
}

rp_status rp_peft_load(const char *dir, const rp_model_config *cfg, const rp_lora_config *c,
                       rp_lora_dst_fn dst, void *arg, rp_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    loading l = {NULL, path, dst, arg, c->rank, cfg->moe.num_experts};
    RP_TRY(rp_safetensors_open(path, &l.st, err));
    rp_status s = each_tensor(cfg, c, load_one, &l, err);
    rp_safetensors_close(&l.st);
    return s;
}
