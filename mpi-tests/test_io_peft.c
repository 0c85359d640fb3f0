/* Proves: PEFT LoRA adapter directories are read as --lora-init will take
 * them (io/peft.h). The three adapters PEFT itself saved for the parity
 * fixtures (mpi-tests/fixtures/golden-lora/*\/lora_init, tools/
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
 * missing r, a dropout outside [0, 1), malformed JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/config.h"
#include "io/peft.h"
#include "rp_check.h"

static void fixture(const char *rel, char *buf, size_t len)
{
    snprintf(buf, len, "%s/mpi-tests/fixtures/%s", rp_test_srcdir(), rel);
}

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
    ck_assert_uint_eq(c.targets, RP_LORA_ALL_LINEAR);
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
    ck_assert_uint_eq(c.targets, RP_LORA_ALL_LINEAR);
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
    rp_lora_tensor_name(1, RP_LORA_V_PROJ, 0, name, sizeof name);
    ck_assert_str_eq(name, "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight");
    rp_lora_tensor_name(0, RP_LORA_DOWN_PROJ, 1, name, sizeof name);
    ck_assert_str_eq(name, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
    rp_model_config cfg = {0};
    cfg.hidden_size = 64;
    cfg.intermediate_size = 96;
    cfg.num_attention_heads = 4;
    cfg.num_key_value_heads = 2;
    cfg.head_dim = 24; /* q width 96 != hidden */
    int64_t want[RP_LORA_NPROJ][2] = {{64, 96}, {64, 48}, {64, 48}, {96, 64},
                                      {64, 96}, {64, 96}, {96, 64}};
    for (int p = 0; p < RP_LORA_NPROJ; p++) {
        int64_t in, out;
        rp_lora_features(&cfg, (rp_lora_proj)p, &in, &out);
        ck_assert_msg(in == want[p][0] && out == want[p][1], "%s: %lld x %lld",
                      rp_lora_proj_name((rp_lora_proj)p), (long long)in, (long long)out);
        ck_assert_int_eq(rp_lora_proj_parse(rp_lora_proj_name((rp_lora_proj)p)), p);
    }
    unsigned t;
    rp_error err;
    ck_assert_int_eq(rp_lora_targets_parse("all-linear", "--lora-targets", &t, &err), RP_OK);
    ck_assert_uint_eq(t, RP_LORA_ALL_LINEAR);
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

static Suite *suite(void)
{
    Suite *s = suite_create("io_peft");
    TCase *t = tcase_create("peft");
    tcase_add_test(t, peft_saved_adapters_read_back);
    tcase_add_test(t, names_shapes_and_targets);
    tcase_add_test(t, bad_adapters_are_named);
    tcase_add_checked_fixture(t, NULL, rp_test_tmpdir_clean);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "serial")
