/* Proves: PEFT LoRA adapter directories are read as --lora-init will take
 * them (io/peft.h). The three adapters PEFT itself saved for the parity
 * fixtures (mpi-tests/fixtures/golden-lora/<case>/lora_init, tools/
 * make_lora_golden.py) read back with their r, alpha, rslora and targets,
 * whether target_modules holds module paths (PEFT's "all-linear") or
 * names; the tensor names and shapes are those of PEFT's files (A [r, in],
 * B [out, r]) for the qwen3 (GQA) and llama models; target lists parse;
 * scaling is alpha/r or alpha/sqrt(r). Bad adapters fail with a message
 * naming the file and the field or tensor: another peft_type, an unknown
 * target, a projection in some blocks only (also: module paths of fewer
 * blocks than the model has), r that does not match the tensors, a
 * targeted projection without tensors, an untargeted one with tensors, a
 * model whose widths the shapes do not fit, a bias other than "none", a
 * missing r, a dropout outside [0, 1), malformed JSON. Issue 30: a field
 * PEFT would apply and roundpipe does not (alpha_pattern, as the issue
 * found, rank_pattern, layers_to_transform, layers_pattern,
 * exclude_modules, modules_to_save, use_dora, lora_bias, use_qalora,
 * layer_replication, trainable_token_indices, activated LoRA, a variant's
 * config, PEFT 0.2's enable_lora, an init_lora_weights that changes the
 * base or trains A only, fan_in_fan_out true, a field of a later PEFT
 * unless null or false, a target_modules string other than "all-linear",
 * which PEFT matches as a regular expression) refuses the adapter naming
 * the file, the field and its value; their defaults, metadata and the
 * settings of what is off are read. An adapter written
 * by rp_peft_write reads back with the same config and the same tensor
 * bytes under PEFT's names, its adapter_config.json has the fields issue 13
 * names, and a directory that cannot be made is an error.
 * Mixture of experts (issue 15): the adapter PEFT saved for the moe-lora
 * fixture (tools/moe_golden_lora.py: "all-linear" on per-expert Linears,
 * target_modules q_proj ... down_proj and gate) reads back with every
 * target, the router among them, and per-expert names and shapes
 * (mlp.experts.E.gate_proj.lora_A.weight [r, H], mlp.gate.lora_B.weight
 * [E, r]); module paths must name every expert; PEFT's fused-expert
 * adapters (target_parameters) are refused; a dense model never lists or
 * takes the router ("gate" is dropped from its targets, all-linear is its
 * seven projections); written MoE adapters read back the same. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/config.h"
#include "io/peft.h"
#include "io/read_file.h"
#include "io/safetensors.h"
#include "rp_check.h"

static void fixture(const char *rel, char *buf, size_t len)
{
    snprintf(buf, len, "%s/mpi-tests/fixtures/%s", rp_test_srcdir(), rel);
}

/* all-linear on a dense model: every projection but the router */
#define DENSE_ALL (RP_LORA_ALL_LINEAR & ~(1u << RP_LORA_ROUTER))

static rp_model_config model(const char *base)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/mpi-tests/fixtures/golden/%s/model/config.json",
             rp_test_srcdir(), base);
    rp_model_config cfg;
    rp_error err;
    ck_assert_msg(rp_config_load(path, &cfg, &err) == RP_OK, "%s", err.msg);
    return cfg;
}

START_TEST(peft_saved_adapters_read_back)
{
    char dir[1024];
    rp_lora_config c;
    rp_error err;
    rp_model_config q = model("qwen3"), l = model("llama");
    fixture("golden-lora/qwen3-all/lora_init", dir, sizeof dir); /* module paths */
    ck_assert_msg(rp_peft_read(dir, &q, &c, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(c.rank, 4);
    ck_assert(c.alpha == 8.0 && c.dropout == 0.0 && !c.use_rslora);
    ck_assert_uint_eq(c.targets, DENSE_ALL);
    ck_assert(rp_lora_scaling(&c) == 2.0);
    fixture("golden-lora/qwen3-qv-rslora/lora_init", dir, sizeof dir); /* names */
    ck_assert_msg(rp_peft_read(dir, &q, &c, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(c.rank, 2);
    ck_assert(c.alpha == 4.0 && c.use_rslora);
    ck_assert_uint_eq(c.targets, (1u << RP_LORA_Q_PROJ) | (1u << RP_LORA_V_PROJ));
    ck_assert(fabs(rp_lora_scaling(&c) - 4.0 / sqrt(2.0)) < 1e-15);
    fixture("golden-lora/llama-all/lora_init", dir, sizeof dir);
    ck_assert_msg(rp_peft_read(dir, &l, &c, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(c.rank, 4);
    ck_assert_uint_eq(c.targets, DENSE_ALL);
    /* an adapter of another model: other widths, or more blocks than it has */
    fixture("golden-lora/qwen3-all/lora_init", dir, sizeof dir);
    rp_model_config wide = q;
    wide.intermediate_size = q.intermediate_size * 2;
    ck_assert_int_eq(rp_peft_read(dir, &wide, &c, &err), RP_ERR_MISMATCH);
    ck_assert_msg(strstr(err.msg, "adapter_model.safetensors: tensor ") &&
                      strstr(err.msg, "layers.0.mlp.gate_proj.lora_B.weight has shape [96, 4]; r 4 "
                                      "and the model want [192, 4]"), "%s", err.msg);
    rp_model_config deep = q;
    deep.num_hidden_layers = q.num_hidden_layers + 1;
    ck_assert_int_eq(rp_peft_read(dir, &deep, &c, &err), RP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "in some blocks only"), "%s", err.msg);
}
END_TEST

START_TEST(names_shapes_and_targets)
{
    char name[160];
    const rp_model_config plain = {0}; /* not gpt-oss: PEFT's names throughout */
    rp_lora_tensor_name(&plain, 1, -1, RP_LORA_V_PROJ, 0, name, sizeof name);
    ck_assert_str_eq(name, "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight");
    rp_lora_tensor_name(&plain, 0, -1, RP_LORA_DOWN_PROJ, 1, name, sizeof name);
    ck_assert_str_eq(name, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
    rp_lora_tensor_name(&plain, 2, -1, RP_LORA_ROUTER, 0, name, sizeof name);
    ck_assert_str_eq(name, "base_model.model.model.layers.2.mlp.gate.lora_A.weight");
    rp_lora_tensor_name(&plain, 2, 3, RP_LORA_UP_PROJ, 1, name, sizeof name);
    ck_assert_str_eq(name, "base_model.model.model.layers.2.mlp.experts.3.up_proj.lora_B.weight");
    rp_model_config cfg = {0};
    cfg.hidden_size = 64;
    cfg.intermediate_size = 96;
    cfg.num_attention_heads = 4;
    cfg.num_key_value_heads = 2;
    cfg.head_dim = 24; /* q width 96 != hidden */
    cfg.num_hidden_layers = 2;
    /* a dense block has no router: 0 x 0, no adapter */
    int64_t want[RP_LORA_NPROJ][2] = {{64, 96}, {64, 48}, {64, 48}, {96, 64},
                                      {64, 96}, {64, 96}, {96, 64}, {0, 0}};
    for (int p = 0; p < RP_LORA_NPROJ; p++) {
        int64_t in, out;
        rp_lora_features(&cfg, 1, (rp_lora_proj)p, &in, &out);
        ck_assert_msg(in == want[p][0] && out == want[p][1], "%s: %lld x %lld",
                      rp_lora_proj_name((rp_lora_proj)p), (long long)in, (long long)out);
        ck_assert_int_eq(rp_lora_proj_parse(rp_lora_proj_name((rp_lora_proj)p)), p);
        ck_assert_int_eq(rp_lora_copies(&cfg, 1, (rp_lora_proj)p), p == RP_LORA_ROUTER ? 0 : 1);
    }
    ck_assert_str_eq(rp_lora_proj_name(RP_LORA_ROUTER), "gate");
    ck_assert_uint_eq(rp_lora_model_targets(&cfg, RP_LORA_ALL_LINEAR), DENSE_ALL);
    /* a mixture of experts: block 1 routes to 5 experts of width 10 */
    cfg.arch = RP_ARCH_QWEN3_MOE;
    cfg.moe.num_experts = 5;
    cfg.moe.num_experts_per_tok = 2;
    cfg.moe.moe_intermediate_size = 10;
    cfg.moe.decoder_sparse_step = 2;
    int64_t want_moe[RP_LORA_NPROJ][2] = {{64, 96}, {64, 48}, {64, 48}, {96, 64},
                                          {64, 10}, {64, 10}, {10, 64}, {64, 5}};
    for (int p = 0; p < RP_LORA_NPROJ; p++) {
        int64_t in, out;
        rp_lora_features(&cfg, 1, (rp_lora_proj)p, &in, &out);
        ck_assert_msg(in == want_moe[p][0] && out == want_moe[p][1], "%s: %lld x %lld",
                      rp_lora_proj_name((rp_lora_proj)p), (long long)in, (long long)out);
        const int per_expert = (RP_LORA_EXPERT_PROJS >> p) & 1u;
        ck_assert_int_eq(rp_lora_per_expert(&cfg, 1, (rp_lora_proj)p), per_expert);
        ck_assert_int_eq(rp_lora_copies(&cfg, 1, (rp_lora_proj)p), per_expert ? 5 : 1);
        ck_assert_int_eq(rp_lora_per_expert(&cfg, 0, (rp_lora_proj)p), 0); /* block 0 dense */
    }
    ck_assert_uint_eq(rp_lora_model_targets(&cfg, RP_LORA_ALL_LINEAR), RP_LORA_ALL_LINEAR);
    unsigned t;
    rp_error err;
    ck_assert_int_eq(rp_lora_targets_parse("all-linear", "--lora-targets", &t, &err), RP_OK);
    ck_assert_uint_eq(t, RP_LORA_ALL_LINEAR);
    ck_assert_int_eq(rp_lora_targets_parse("gate,q_proj", "--lora-targets", &t, &err), RP_OK);
    ck_assert_uint_eq(t, (1u << RP_LORA_ROUTER) | (1u << RP_LORA_Q_PROJ));
    ck_assert_int_eq(rp_lora_targets_parse("up_proj,q_proj", "--lora-targets", &t, &err), RP_OK);
    ck_assert_uint_eq(t, (1u << RP_LORA_UP_PROJ) | (1u << RP_LORA_Q_PROJ));
    ck_assert_int_eq(rp_lora_targets_parse("q_proj,lm_head", "--lora-targets", &t, &err),
                     RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "--lora-targets: unknown target 'lm_head'"), "%s", err.msg);
    ck_assert_int_eq(rp_lora_targets_parse("q_proj,,v_proj", "--lora-targets", &t, &err),
                     RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "an empty entry"), "%s", err.msg);
}
END_TEST

/* A copy of a fixture adapter in a scratch directory, its config replaced
 * by the JSON text given (NULL: kept). */
static void scratch_adapter(const char *from, const char *config, char *dir, size_t len)
{
    static int n;
    snprintf(dir, len, "%s/peft-%d-%d", rp_test_tmpdir(), (int)getpid(), n++);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    char src[1024], cmd[3000];
    fixture(from, src, sizeof src);
    snprintf(cmd, sizeof cmd, "cp '%s/adapter_config.json' '%s/adapter_model.safetensors' '%s/'",
             src, src, dir);
    ck_assert_int_eq(system(cmd), 0);
    if (config) {
        char path[1200];
        snprintf(path, sizeof path, "%s/adapter_config.json", dir);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(config, f);
        fclose(f);
    }
}

static void refused(const char *from, const char *config, rp_status want, const char *words)
{
    char dir[1024];
    scratch_adapter(from, config, dir, sizeof dir);
    rp_model_config q = model("qwen3");
    rp_lora_config c;
    rp_error err = {0};
    ck_assert_int_eq(rp_peft_read(dir, &q, &c, &err), want);
    ck_assert_msg(strstr(err.msg, words), "want '%s' in: %s", words, err.msg);
}

START_TEST(bad_adapters_are_named)
{
    const char *qv = "golden-lora/qwen3-qv-rslora/lora_init";
    refused(qv, "{\"peft_type\":\"IA3\",\"r\":2,\"lora_alpha\":4,\"target_modules\":[\"q_proj\"]}",
            RP_ERR_UNSUPPORTED, "adapter_config.json: peft_type \"IA3\"");
    refused(qv, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,"
                "\"target_modules\":[\"q_proj\",\"embed_tokens\"]}",
            RP_ERR_FORMAT, "target_modules entry 'embed_tokens'");
    refused(qv, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,"
                "\"target_modules\":[\"model.layers.0.self_attn.q_proj\"]}",
            RP_ERR_UNSUPPORTED, "q_proj in some blocks only");
    /* a block number spelled otherwise names no module PEFT would find */
    refused(qv, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,"
                "\"target_modules\":[\"model.layers.00.self_attn.q_proj\"]}",
            RP_ERR_FORMAT, "target_modules entry 'model.layers.00.self_attn.q_proj'");
    refused(qv, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,"
                "\"target_modules\":[\"model.layers.+0.self_attn.q_proj\"]}",
            RP_ERR_FORMAT, "target_modules entry 'model.layers.+0.self_attn.q_proj'");
    refused(qv, "{\"peft_type\":\"LORA\",\"r\":3,\"lora_alpha\":4,"
                "\"target_modules\":[\"q_proj\",\"v_proj\"]}",
            RP_ERR_MISMATCH, "self_attn.q_proj.lora_A.weight has shape [2, ");
    refused(qv, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,"
                "\"target_modules\":[\"q_proj\",\"v_proj\",\"k_proj\"]}",
            RP_ERR_MISMATCH, "k_proj.lora_A.weight is missing");
    refused(qv, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,\"target_modules\":[\"q_proj\"]}",
            RP_ERR_MISMATCH, "v_proj.lora_A.weight is not an adapter of this model's targeted");
    refused(qv, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,\"bias\":\"all\","
                "\"target_modules\":[\"q_proj\",\"v_proj\"]}",
            RP_ERR_UNSUPPORTED, "bias \"all\"");
    refused(qv, "{\"peft_type\":\"LORA\",\"lora_alpha\":4,\"target_modules\":[\"q_proj\"]}",
            RP_ERR_FORMAT, "adapter_config.json: field \"r\" is missing");
    refused(qv, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,\"lora_dropout\":1.5,"
                "\"target_modules\":[\"q_proj\",\"v_proj\"]}",
            RP_ERR_FORMAT, "lora_dropout 1.5 must be in [0, 1)");
    refused(qv, "[1, 2", RP_ERR_FORMAT, "adapter_config.json");
}
END_TEST

/* The qv-rslora adapter (r 2, alpha 4, rslora, target_modules q_proj and
 * v_proj unless `fields` has its own) with `fields` added to its config:
 * read as it was (want RP_OK), or refused with `words` in the message. */
static void qv_with(const char *fields, rp_status want, const char *words)
{
    char config[2048], dir[1024];
    const char *targets =
        strstr(fields, "\"target_modules\"") ? "" : "\"target_modules\":[\"q_proj\",\"v_proj\"],";
    snprintf(config, sizeof config, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,"
             "\"use_rslora\":true,%s%s}", targets, fields);
    scratch_adapter("golden-lora/qwen3-qv-rslora/lora_init", config, dir, sizeof dir);
    rp_model_config q = model("qwen3");
    rp_lora_config c;
    rp_error err = {0};
    rp_status s = rp_peft_read(dir, &q, &c, &err);
    ck_assert_msg(s == want, "%s: got %d (%s)", fields, (int)s, err.msg);
    if (want == RP_OK)
        ck_assert_msg(c.rank == 2 && c.alpha == 4.0 && c.use_rslora &&
                      c.targets == ((1u << RP_LORA_Q_PROJ) | (1u << RP_LORA_V_PROJ)), "%s",
                      fields);
    else
        ck_assert_msg(strstr(err.msg, "adapter_config.json: ") && strstr(err.msg, words),
                      "%s: want '%s' in: %s", fields, words, err.msg);
}

START_TEST(fields_peft_applies_are_taken_or_refused)
{
    /* issue 30: PEFT gives q_proj scaling 32/sqrt(2) here; roundpipe
     * trained with 4/sqrt(2) and saved without the field */
    qv_with("\"alpha_pattern\":{\"q_proj\":32}", RP_ERR_UNSUPPORTED,
            "field \"alpha_pattern\" is {\"q_proj\":32}: PEFT then gives some modules "
            "another lora_alpha; roundpipe does not, and takes only null or empty here");
    const struct {
        const char *field, *words;
    } refusals[] = {
        {"\"rank_pattern\":{\"v_proj\":4}", "field \"rank_pattern\" is {\"v_proj\":4}"},
        {"\"layers_to_transform\":[0]", "field \"layers_to_transform\" is [0]"},
        {"\"layers_to_transform\":0", "field \"layers_to_transform\" is 0"},
        /* every block, but PEFT's adapters of these blocks only all the same */
        {"\"layers_to_transform\":[0,1]", "field \"layers_to_transform\" is [0,1]"},
        {"\"layers_pattern\":\"layers\"", "field \"layers_pattern\" is \"layers\""},
        {"\"exclude_modules\":[\"k_proj\"]", "field \"exclude_modules\" is [\"k_proj\"]"},
        {"\"exclude_modules\":\".*\\\\.0\\\\..*\"", "field \"exclude_modules\" is"},
        {"\"modules_to_save\":[\"lm_head\"]", "field \"modules_to_save\" is [\"lm_head\"]"},
        {"\"use_dora\":true", "field \"use_dora\" is true: PEFT then makes it DoRA"},
        {"\"lora_bias\":true", "field \"lora_bias\" is true"},
        {"\"use_qalora\":true", "field \"use_qalora\" is true"},
        {"\"layer_replication\":[[0,2],[1,2]]", "field \"layer_replication\" is [[0,2],[1,2]]"},
        {"\"trainable_token_indices\":[0,1]", "field \"trainable_token_indices\" is [0,1]"},
        {"\"trainable_token_indices\":[]", "field \"trainable_token_indices\" is []"},
        {"\"alora_invocation_tokens\":[7,8]", "field \"alora_invocation_tokens\" is [7,8]"},
        /* a variant's config, even empty, turns the variant on */
        {"\"velora_config\":{}", "field \"velora_config\" is {}"},
        {"\"use_bdlora\":{}", "field \"use_bdlora\" is {}"},
        {"\"monteclora_config\":{}", "field \"monteclora_config\" is {}"},
        {"\"arrow_config\":{}", "field \"arrow_config\" is {}"},
        {"\"kasa_config\":{}", "field \"kasa_config\" is {}"},
        {"\"enable_lora\":[true,false,true]", "field \"enable_lora\" is [true,false,true]"},
        /* a field of a later PEFT: only null or false */
        {"\"use_newlora\":true", "field \"use_newlora\" is true: a field roundpipe does not "
                                  "know"},
        {"\"newlora_config\":{}", "field \"newlora_config\" is {}: a field roundpipe"},
        /* initialisations that change the base or how the adapter trains */
        {"\"init_lora_weights\":\"pissa\"", "field \"init_lora_weights\" is \"pissa\""},
        {"\"init_lora_weights\":\"pissa_niter_4\"", "\"init_lora_weights\" is \"pissa_niter_4\""},
        {"\"init_lora_weights\":\"olora\"", "\"init_lora_weights\" is \"olora\""},
        {"\"init_lora_weights\":\"corda\"", "\"init_lora_weights\" is \"corda\""},
        {"\"init_lora_weights\":\"loftq\"", "\"init_lora_weights\" is \"loftq\""},
        {"\"init_lora_weights\":\"mica\"", "\"init_lora_weights\" is \"mica\""},
        {"\"init_lora_weights\":\"lora_ga\"", "\"init_lora_weights\" is \"lora_ga\""},
        {"\"fan_in_fan_out\":true", "fan_in_fan_out true"},
        /* a string is one regular expression over whole module paths in
         * PEFT: "q_proj" matches no module there */
        {"\"target_modules\":\"q_proj\"", "target_modules \"q_proj\" is a string other than "
                                            "\"all-linear\""},
        {"\"target_modules\":\".*\\\\.(q_proj|v_proj)\"", "which PEFT matches as a regular "
                                                             "expression"},
    };
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++)
        qv_with(refusals[i].field, RP_ERR_UNSUPPORTED, refusals[i].words);
    qv_with("\"init_lora_weights\":3", RP_ERR_FORMAT,
            "field \"init_lora_weights\" must be a boolean or a string, not integer");
    /* the values under which PEFT computes what roundpipe computes */
    const char *taken[] = {
        "\"alpha_pattern\":{},\"rank_pattern\":{}", "\"alpha_pattern\":null,\"rank_pattern\":null",
        "\"layers_to_transform\":null,\"layers_pattern\":null", "\"layers_pattern\":[]",
        "\"layers_pattern\":\"\"", "\"exclude_modules\":null", "\"exclude_modules\":[]",
        "\"exclude_modules\":\"\"", "\"modules_to_save\":null", "\"modules_to_save\":[]",
        "\"use_dora\":false,\"lora_bias\":false,\"use_qalora\":false", "\"use_dora\":null",
        "\"layer_replication\":null", "\"layer_replication\":[]",
        "\"trainable_token_indices\":null,\"alora_invocation_tokens\":null",
        "\"use_bdlora\":null,\"velora_config\":null,\"monteclora_config\":null,"
        "\"arrow_config\":null,\"kasa_config\":null,\"enable_lora\":null",
        "\"init_lora_weights\":true", "\"init_lora_weights\":false",
        "\"init_lora_weights\":\"gaussian\"", "\"init_lora_weights\":\"orthogonal\"",
        "\"init_lora_weights\":\"eva\",\"eva_config\":{\"rho\":2.0}",
        "\"init_lora_weights\":null",
        /* metadata and settings of what is off */
        "\"task_type\":\"CAUSAL_LM\",\"peft_version\":\"0.21.2\",\"revision\":null,"
        "\"inference_mode\":false,\"auto_mapping\":{\"base_model_class\":\"Qwen3ForCausalLM\"}",
        "\"megatron_core\":\"megatron.core\",\"megatron_config\":null,\"qalora_group_size\":16,"
        "\"loftq_config\":{},\"corda_config\":null,\"lora_ga_config\":null,"
        "\"ensure_weight_tying\":true,\"merge_weights\":false,"
        "\"runtime_config\":{\"ephemeral_gpu_offload\":false}",
        "\"newlora_config\":null,\"use_newlora\":false",
    };
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++)
        qv_with(taken[i], RP_OK, NULL);
}
END_TEST

/* The tensors of an adapter file, read for rp_peft_write. */
typedef struct held {
    rp_safetensors *st;
    float *data[2][RP_LORA_NPROJ][2];
} held;

static const float *held_tensor(void *arg, int block, int expert, rp_lora_proj p, int b)
{
    ck_assert_int_eq(expert, -1); /* a dense model */
    return ((held *)arg)->data[block][p][b];
}

START_TEST(written_adapters_read_back_the_same)
{
    char src[1024], file[1200], dir[1024], path[1200];
    rp_error err = {0};
    rp_model_config q = model("qwen3");
    ck_assert_int_eq(q.num_hidden_layers, 2);
    fixture("golden-lora/qwen3-qv-rslora/lora_init", src, sizeof src);
    rp_lora_config c, back;
    ck_assert_msg(rp_peft_read(src, &q, &c, &err) == RP_OK, "%s", err.msg);
    held h = {0};
    snprintf(file, sizeof file, "%s/adapter_model.safetensors", src);
    ck_assert_msg(rp_safetensors_open(file, &h.st, &err) == RP_OK, "%s", err.msg);
    for (int blk = 0; blk < 2; blk++)
        for (int p = 0; p < RP_LORA_NPROJ; p++)
            for (int b = 0; b < 2 && ((c.targets >> p) & 1); b++) {
                int64_t in, out;
                rp_lora_features(&q, blk, (rp_lora_proj)p, &in, &out);
                int64_t shape[2] = {b ? out : c.rank, b ? c.rank : in};
                char name[160];
                rp_lora_tensor_name(&q, blk, -1, (rp_lora_proj)p, b, name, sizeof name);
                h.data[blk][p][b] = malloc(sizeof(float) * (size_t)(shape[0] * shape[1]));
                ck_assert_msg(rp_safetensors_read_f32(h.st, name, 2, shape, h.data[blk][p][b],
                                                      &err) == RP_OK, "%s", err.msg);
            }
    snprintf(dir, sizeof dir, "%s/peft-out-%d", rp_test_tmpdir(), (int)getpid());
    ck_assert_msg(rp_peft_write(dir, &q, &c, "some/base", held_tensor, &h, &err) == RP_OK, "%s",
                  err.msg);
    ck_assert_msg(rp_peft_read(dir, &q, &back, &err) == RP_OK, "%s", err.msg);
    ck_assert(back.rank == c.rank && back.alpha == c.alpha && back.dropout == c.dropout &&
              back.use_rslora == c.use_rslora && back.targets == c.targets);
    /* the tensors, bit for bit, under PEFT's names */
    rp_safetensors *st = NULL;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    ck_assert_msg(rp_safetensors_open(path, &st, &err) == RP_OK, "%s", err.msg);
    ck_assert_uint_eq(rp_safetensors_count(st), rp_safetensors_count(h.st));
    for (size_t i = 0; i < rp_safetensors_count(st); i++) {
        rp_safetensors_tensor a, b;
        const char *n = rp_safetensors_name(st, i);
        ck_assert_int_eq(rp_safetensors_find(st, n, &a, &err), RP_OK);
        ck_assert_int_eq(rp_safetensors_find(h.st, n, &b, &err), RP_OK);
        ck_assert_str_eq(a.dtype_name, "F32");
        ck_assert(a.nbytes == b.nbytes && memcmp(a.data, b.data, a.nbytes) == 0);
    }
    rp_safetensors_close(&st);
    /* the config's contract fields */
    char *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    ck_assert_int_eq(rp_read_file(path, 1 << 20, &text, &len, &err), RP_OK);
    size_t k = 0; /* without white space */
    for (size_t i = 0; i < len; i++)
        if (text[i] != ' ' && text[i] != '\n')
            text[k++] = text[i];
    text[k] = '\0';
    const char *fields[] = {"\"peft_type\":\"LORA\"", "\"task_type\":\"CAUSAL_LM\"", "\"r\":2,",
                            "\"lora_alpha\":4,", "\"lora_dropout\":0.0,",
                            "\"target_modules\":[\"q_proj\",\"v_proj\"]", "\"bias\":\"none\"",
                            "\"use_rslora\":true", "\"fan_in_fan_out\":false",
                            "\"base_model_name_or_path\":\"some/base\"", "\"inference_mode\":true"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        ck_assert_msg(strstr(text, fields[i]), "no %s in %s", fields[i], text);
    free(text);
    /* a directory that cannot be made: an error, nothing written */
    snprintf(path, sizeof path, "%s/adapter_config.json/sub", dir);
    ck_assert_int_ne(rp_peft_write(path, &q, &c, NULL, held_tensor, &h, &err), RP_OK);
    for (int blk = 0; blk < 2; blk++)
        for (int p = 0; p < RP_LORA_NPROJ; p++)
            for (int b = 0; b < 2; b++)
                free(h.data[blk][p][b]);
    rp_safetensors_close(&h.st);
}
END_TEST

/* ---- mixture of experts ---------------------------------------------------- */

static rp_model_config moe_model(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/mpi-tests/fixtures/golden-moe/moe-lora/model/config.json",
             rp_test_srcdir());
    rp_model_config cfg;
    rp_error err;
    ck_assert_msg(rp_config_load(path, &cfg, &err) == RP_OK, "%s", err.msg);
    return cfg;
}

/* rp_peft_read of the moe-lora adapter with `config` as its
 * adapter_config.json, for the MoE model (want: its status). */
static void moe_read(const char *config, rp_status want, const char *words)
{
    char dir[1024];
    scratch_adapter("golden-moe/moe-lora/lora_init", config, dir, sizeof dir);
    rp_model_config m = moe_model();
    rp_lora_config c;
    rp_error err = {0};
    ck_assert_msg(rp_peft_read(dir, &m, &c, &err) == want, "%s (want %d for %.300s)", err.msg, (int)want, config);
    if (words)
        ck_assert_msg(strstr(err.msg, words), "want '%s' in: %s", words, err.msg);
    else
        ck_assert_uint_eq(c.targets, RP_LORA_ALL_LINEAR);
}

/* target_modules as every module path of the moe-lora model (blocks 0 and
 * 2 MoE with 4 experts, block 1 dense), but `skip`, plus `extra`. */
static char *moe_paths(const char *skip, const char *extra)
{
    static const char *const attn[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    static const char *const mlp[3] = {"gate_proj", "up_proj", "down_proj"};
    size_t cap = 1 << 16, n = 0;
    char *t = malloc(cap), path[160];
    n += (size_t)snprintf(t + n, cap - n, "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,"
                                          "\"target_modules\":[\"%s\"", extra ? extra : "q_proj");
#define ADD(...)                                                                                 \
    do {                                                                                         \
        snprintf(path, sizeof path, __VA_ARGS__);                                                \
        if (!skip || strcmp(path, skip) != 0)                                                    \
            n += (size_t)snprintf(t + n, cap - n, ",\"%s\"", path);                              \
    } while (0)
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < 4; i++)
            ADD("model.layers.%d.self_attn.%s", b, attn[i]);
        if (b == 1) {
            for (int i = 0; i < 3; i++)
                ADD("model.layers.1.mlp.%s", mlp[i]);
            continue;
        }
        ADD("model.layers.%d.mlp.gate", b);
        for (int e = 0; e < 4; e++)
            for (int i = 0; i < 3; i++)
                ADD("model.layers.%d.mlp.experts.%d.%s", b, e, mlp[i]);
    }
#undef ADD
    snprintf(t + n, cap - n, "]}");
    return t;
}

START_TEST(moe_adapters_are_per_expert)
{
    char dir[1024];
    rp_lora_config c;
    rp_error err = {0};
    rp_model_config m = moe_model();
    ck_assert(rp_model_block_is_moe(&m, 0) && !rp_model_block_is_moe(&m, 1) &&
              rp_model_block_is_moe(&m, 2) && m.moe.num_experts == 4);
    fixture("golden-moe/moe-lora/lora_init", dir, sizeof dir); /* names, "gate" among them */
    ck_assert_msg(rp_peft_read(dir, &m, &c, &err) == RP_OK, "%s", err.msg);
    ck_assert(c.rank == 2 && c.alpha == 4.0 && c.dropout == 0.0 && !c.use_rslora);
    ck_assert_uint_eq(c.targets, RP_LORA_ALL_LINEAR);
    /* module paths: every block and expert, or an error naming the gap */
    char *t = moe_paths(NULL, NULL);
    moe_read(t, RP_OK, NULL);
    free(t);
    t = moe_paths("model.layers.2.mlp.experts.3.down_proj", NULL);
    moe_read(t, RP_ERR_UNSUPPORTED, "down_proj in some blocks or experts only");
    free(t);
    t = moe_paths(NULL, "model.layers.1.mlp.gate"); /* a dense block's router */
    moe_read(t, RP_ERR_FORMAT, "entry 'model.layers.1.mlp.gate' is not a projection");
    free(t);
    t = moe_paths(NULL, "model.layers.0.mlp.experts.4.up_proj"); /* no expert 4 */
    moe_read(t, RP_ERR_FORMAT, "entry 'model.layers.0.mlp.experts.4.up_proj' is not");
    free(t);
    t = moe_paths(NULL, "model.layers.0.mlp.gate_proj"); /* an MoE block's MLP is experts */
    moe_read(t, RP_ERR_FORMAT, "entry 'model.layers.0.mlp.gate_proj' is not");
    free(t);
    /* PEFT's fused-expert adapters */
    moe_read("{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,\"target_modules\":[\"q_proj\"],"
             "\"target_parameters\":[\"gate_up_proj\",\"down_proj\"]}",
             RP_ERR_UNSUPPORTED, "target_parameters");
    /* the router's tensors are required, and only with "gate" */
    moe_read("{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,\"target_modules\":[\"q_proj\","
             "\"k_proj\",\"v_proj\",\"o_proj\",\"gate_proj\",\"up_proj\",\"down_proj\"]}",
             RP_ERR_MISMATCH, "layers.0.mlp.gate.lora_A.weight is not an adapter");
    /* a dense model drops "gate" */
    char qdir[1024];
    scratch_adapter("golden-lora/qwen3-qv-rslora/lora_init",
                    "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,\"use_rslora\":true,"
                    "\"target_modules\":[\"q_proj\",\"v_proj\",\"gate\"]}", qdir, sizeof qdir);
    rp_model_config q = model("qwen3");
    ck_assert_msg(rp_peft_read(qdir, &q, &c, &err) == RP_OK, "%s", err.msg);
    ck_assert_uint_eq(c.targets, (1u << RP_LORA_Q_PROJ) | (1u << RP_LORA_V_PROJ));
}
END_TEST

/* Every tensor of an adapter file, read in fp32 by name (for rp_peft_write). */
typedef struct named_tensors {
    rp_safetensors *st;
    const rp_model_config *cfg;
    int rank;
    float *got[512];
    int n;
} named_tensors;

static const float *named_tensor(void *arg, int block, int expert, rp_lora_proj p, int b)
{
    named_tensors *h = arg;
    char name[160];
    int64_t in, out;
    rp_lora_features(h->cfg, block, p, &in, &out);
    int64_t shape[2] = {b ? out : h->rank, b ? h->rank : in};
    ck_assert_int_eq(expert >= 0, rp_lora_per_expert(h->cfg, block, p));
    rp_lora_tensor_name(h->cfg, block, expert, p, b, name, sizeof name);
    ck_assert_int_lt(h->n, 512);
    float *d = h->got[h->n++] = malloc(sizeof(float) * (size_t)(shape[0] * shape[1]));
    rp_error err;
    ck_assert_msg(rp_safetensors_read_f32(h->st, name, 2, shape, d, &err) == RP_OK, "%s",
                  err.msg);
    return d;
}

START_TEST(written_moe_adapters_read_back_the_same)
{
    char src[1024], file[1200], dir[1024], path[1200];
    rp_error err = {0};
    rp_model_config m = moe_model();
    rp_lora_config c, back;
    fixture("golden-moe/moe-lora/lora_init", src, sizeof src);
    ck_assert_msg(rp_peft_read(src, &m, &c, &err) == RP_OK, "%s", err.msg);
    named_tensors h = {NULL, &m, c.rank, {0}, 0};
    snprintf(file, sizeof file, "%s/adapter_model.safetensors", src);
    ck_assert_msg(rp_safetensors_open(file, &h.st, &err) == RP_OK, "%s", err.msg);
    snprintf(dir, sizeof dir, "%s/peft-moe-%d", rp_test_tmpdir(), (int)getpid());
    ck_assert_msg(rp_peft_write(dir, &m, &c, NULL, named_tensor, &h, &err) == RP_OK, "%s",
                  err.msg);
    ck_assert_int_eq(h.n, (int)rp_safetensors_count(h.st)); /* 2 x (3 x 4 + 2 x 13 ...) */
    ck_assert_msg(rp_peft_read(dir, &m, &back, &err) == RP_OK, "%s", err.msg);
    ck_assert(back.rank == c.rank && back.alpha == c.alpha && back.targets == c.targets);
    rp_safetensors *st = NULL;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    ck_assert_msg(rp_safetensors_open(path, &st, &err) == RP_OK, "%s", err.msg);
    ck_assert_uint_eq(rp_safetensors_count(st), rp_safetensors_count(h.st));
    for (size_t i = 0; i < rp_safetensors_count(st); i++) {
        rp_safetensors_tensor a, b;
        const char *n = rp_safetensors_name(st, i);
        ck_assert_int_eq(rp_safetensors_find(st, n, &a, &err), RP_OK);
        ck_assert_msg(rp_safetensors_find(h.st, n, &b, &err) == RP_OK, "%s", n);
        ck_assert(a.nbytes == b.nbytes && memcmp(a.data, b.data, a.nbytes) == 0);
    }
    rp_safetensors_close(&st);
    char *text = NULL;
    size_t len = 0, k = 0;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    ck_assert_int_eq(rp_read_file(path, 1 << 20, &text, &len, &err), RP_OK);
    for (size_t i = 0; i < len; i++)
        if (text[i] != ' ' && text[i] != '\n')
            text[k++] = text[i];
    text[k] = '\0';
    ck_assert_msg(strstr(text, "\"target_modules\":[\"q_proj\",\"k_proj\",\"v_proj\",\"o_proj\","
                               "\"gate_proj\",\"up_proj\",\"down_proj\",\"gate\"]"), "%s", text);
    free(text);
    for (int i = 0; i < h.n; i++)
        free(h.got[i]);
    rp_safetensors_close(&h.st);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_peft");
    TCase *t = tcase_create("peft");
    tcase_add_test(t, peft_saved_adapters_read_back);
    tcase_add_test(t, names_shapes_and_targets);
    tcase_add_test(t, bad_adapters_are_named);
    tcase_add_test(t, fields_peft_applies_are_taken_or_refused);
    tcase_add_test(t, written_adapters_read_back_the_same);
    tcase_add_test(t, moe_adapters_are_per_expert);
    tcase_add_test(t, written_moe_adapters_read_back_the_same);
    tcase_add_checked_fixture(t, NULL, rp_test_tmpdir_clean);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "serial")
