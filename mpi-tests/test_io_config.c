/* Proves: config.json for llama and qwen3 parses with the transformers
 * defaults for absent fields; RoPE settings are read from both the 4.x
 * layout (rope_theta + rope_scaling) and the 5.x layout (rope_parameters);
 * rp_config_save writes a file that parses back to the same configuration
 * and keeps unknown fields of a template; and each kind of bad config
 * (missing field, wrong JSON type, unknown model_type, unsupported rope
 * type, kv heads not dividing heads, not JSON, empty) is refused with the
 * right status and a message naming the file and the field. qwen3_moe
 * (issue 15): Qwen3MoeConfig's defaults, which blocks are experts
 * (decoder_sparse_step, mlp_only_layers), a save that parses back to the
 * same configuration, and each bad MoE field (k above E or below 1, a
 * block index out of range or not an integer, mlp_only_layers not a list)
 * refused naming the file and the field. gpt_oss (issue 35): the Hub's
 * gpt-oss-20b config.json (mpi-tests/fixtures/gpt-oss) read field by field,
 * GptOssConfig's defaults (kv heads 8, head_dim 64, YaRN, alternating
 * windows, swiglu_alpha 1.702), both names of k, rope_parameters' YaRN,
 * modules_to_not_convert deciding per block whether experts are MXFP4 (as
 * transformers' should_convert_module matches), the bad input
 * (unknown layer_types entries, sliding_window < 1, kv heads not dividing)
 * and the rest refused naming the file and the field; every block a
 * mixture of experts; its config.json written back reads as the same
 * model, without quantization_config. FP8 (issue 36): llama, qwen3 and
 * qwen3_moe read quantization_config fp8 with its block size (any, default
 * [128, 128] as FineGrainedFP8Config), and refuse another quant_method, an
 * fmt other than e4m3, a static activation scheme and a block size that is
 * not two positive integers, naming the file and the key. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/config.h"
#include "io/quant_modules.h"
#include "model/moe.h"
#include <unistd.h>

#include "rp_check.h"

#define BASE "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, " \
             "\"num_attention_heads\": 4, \"vocab_size\": 100"

static rp_status parse(const char *json, rp_model_config *cfg, rp_error *err)
{
    return rp_config_parse(json, strlen(json), "cfg.json", cfg, err);
}

static void expect_bad(const char *json, rp_status code, const char *word)
{
    rp_model_config cfg;
    rp_error err = {0};
    rp_status s = parse(json, &cfg, &err);
    ck_assert_msg(s == code, "status %d, expected %d for %s (%s)", s, code, json, err.msg);
    ck_assert_msg(strstr(err.msg, "cfg.json") && strstr(err.msg, word),
                  "message '%s' lacks 'cfg.json' or '%s'", err.msg, word);
}

START_TEST(llama_defaults)
{
    rp_model_config c;
    rp_error err = {0};
    ck_assert_int_eq(parse("{\"model_type\": \"llama\", " BASE "}", &c, &err), RP_OK);
    ck_assert_int_eq(c.arch, RP_ARCH_LLAMA);
    ck_assert_int_eq(c.hidden_size, 64);
    ck_assert_int_eq(c.num_key_value_heads, 4);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.max_position_embeddings, 2048);
    ck_assert_double_eq(c.rms_norm_eps, 1e-6);
    ck_assert_double_eq(c.rope_theta, 10000.0);
    ck_assert_double_eq(c.initializer_range, 0.02);
    ck_assert_int_eq(c.rope_scaling.type, RP_ROPE_DEFAULT);
    ck_assert_int_eq(c.tie_word_embeddings, 0);
    ck_assert_int_eq(c.attention_bias, 0);
    ck_assert_int_eq(c.torch_dtype, RP_F32);
    /* explicit nulls mean "derive" */
    ck_assert_int_eq(parse("{\"model_type\": \"llama\", " BASE ", \"head_dim\": null, "
                           "\"num_key_value_heads\": null, \"rope_scaling\": null}",
                           &c, &err),
                     RP_OK);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.num_key_value_heads, 4);
}
END_TEST

START_TEST(qwen3_defaults_and_fields)
{
    rp_model_config c;
    rp_error err = {0};
    /* the contract: head_dim defaults to hidden / heads (64 / 4) for qwen3 too,
     * where Qwen3Config would say 128 */
    ck_assert_int_eq(parse("{\"model_type\": \"qwen3\", " BASE "}", &c, &err), RP_OK);
    ck_assert_int_eq(c.arch, RP_ARCH_QWEN3);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.max_position_embeddings, 32768);
    ck_assert_int_eq(parse("{\"model_type\": \"qwen3\", " BASE ", \"head_dim\": 32, "
                           "\"num_key_value_heads\": 2, \"tie_word_embeddings\": true, "
                           "\"attention_bias\": true, \"rms_norm_eps\": 1e-5, "
                           "\"torch_dtype\": \"bfloat16\", \"use_sliding_window\": false, "
                           "\"layer_types\": [\"full_attention\", \"full_attention\"]}",
                           &c, &err),
                     RP_OK);
    ck_assert_int_eq(c.head_dim, 32);
    ck_assert_int_eq(c.num_key_value_heads, 2);
    ck_assert_int_eq(c.tie_word_embeddings, 1);
    ck_assert_int_eq(c.attention_bias, 1);
    ck_assert_double_eq(c.rms_norm_eps, 1e-5);
    ck_assert_int_eq(c.torch_dtype, RP_BF16);
    ck_assert_int_eq(parse("{\"model_type\": \"qwen3\", " BASE ", \"dtype\": \"float16\"}", &c,
                           &err),
                     RP_OK);
    ck_assert_int_eq(c.torch_dtype, RP_F16);
}
END_TEST

static void check_llama3(const rp_model_config *c)
{
    ck_assert_int_eq(c->rope_scaling.type, RP_ROPE_LLAMA3);
    ck_assert_double_eq(c->rope_theta, 500000.0);
    ck_assert_double_eq(c->rope_scaling.factor, 8.0);
    ck_assert_double_eq(c->rope_scaling.low_freq_factor, 1.0);
    ck_assert_double_eq(c->rope_scaling.high_freq_factor, 4.0);
    ck_assert_int_eq(c->rope_scaling.original_max_position_embeddings, 8192);
}

START_TEST(rope_both_layouts)
{
    rp_model_config c;
    rp_error err = {0};
    /* transformers 4.x */
    ck_assert_int_eq(parse("{\"model_type\": \"llama\", " BASE ", \"rope_theta\": 500000.0, "
                           "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                           "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                           "\"original_max_position_embeddings\": 8192}}",
                           &c, &err),
                     RP_OK);
    check_llama3(&c);
    /* older 4.x spelling "type" */
    ck_assert_int_eq(parse("{\"model_type\": \"llama\", " BASE ", \"rope_theta\": 500000, "
                           "\"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8, "
                           "\"low_freq_factor\": 1, \"high_freq_factor\": 4, "
                           "\"original_max_position_embeddings\": 8192}}",
                           &c, &err),
                     RP_OK);
    check_llama3(&c);
    /* transformers 5.x */
    ck_assert_int_eq(parse("{\"model_type\": \"llama\", " BASE ", \"rope_parameters\": "
                           "{\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0,"
                           " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                           "\"original_max_position_embeddings\": 8192}}",
                           &c, &err),
                     RP_OK);
    check_llama3(&c);
    ck_assert_int_eq(parse("{\"model_type\": \"qwen3\", " BASE ", \"rope_parameters\": "
                           "{\"rope_type\": \"default\", \"rope_theta\": 1000000.0}}",
                           &c, &err),
                     RP_OK);
    ck_assert_int_eq(c.rope_scaling.type, RP_ROPE_DEFAULT);
    ck_assert_double_eq(c.rope_theta, 1e6);
}
END_TEST

START_TEST(bad_configs)
{
    expect_bad("", RP_ERR_FORMAT, "empty");
    expect_bad("{\"model_type\": \"llama\", ", RP_ERR_FORMAT, "not valid JSON");
    expect_bad("{\"model_type\": \"llama\"} x", RP_ERR_FORMAT, "not valid JSON");
    expect_bad("[1]", RP_ERR_FORMAT, "expected a JSON object");
    expect_bad("{" BASE "}", RP_ERR_FORMAT, "'model_type'");
    expect_bad("{\"model_type\": \"gpt2\", " BASE "}", RP_ERR_UNSUPPORTED,
               "field 'model_type': unsupported model type 'gpt2'");
    expect_bad("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4}",
               RP_ERR_FORMAT, "missing required field 'vocab_size'");
    expect_bad("{\"model_type\": \"llama\", \"hidden_size\": \"64\", \"intermediate_size\": 128, "
               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}",
               RP_ERR_FORMAT, "field 'hidden_size': expected integer, got string");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"rms_norm_eps\": \"x\"}", RP_ERR_FORMAT,
               "field 'rms_norm_eps': expected number, got string");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"tie_word_embeddings\": 1}", RP_ERR_FORMAT,
               "field 'tie_word_embeddings': expected boolean, got integer");
    expect_bad("{\"model_type\": 3, " BASE "}", RP_ERR_FORMAT,
               "field 'model_type': expected string, got integer");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"num_key_value_heads\": 3}", RP_ERR_RANGE,
               "'num_key_value_heads': 3 does not divide");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"num_hidden_layers\": 0}", RP_ERR_RANGE,
               "'num_hidden_layers'");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"rms_norm_eps\": -1}", RP_ERR_RANGE,
               "'rms_norm_eps'");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"rope_scaling\": {\"rope_type\": "
               "\"yarn\", \"factor\": 4.0}}",
               RP_ERR_UNSUPPORTED, "field 'rope_scaling.rope_type': unsupported rope type 'yarn'");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"rope_parameters\": {\"rope_type\": "
               "\"linear\", \"factor\": 4.0}}",
               RP_ERR_UNSUPPORTED, "'rope_parameters.rope_type'");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"rope_scaling\": {\"rope_type\": "
               "\"llama3\", \"factor\": 8.0}}",
               RP_ERR_FORMAT, "'rope_scaling.low_freq_factor'");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"mlp_bias\": true}", RP_ERR_UNSUPPORTED,
               "'mlp_bias'");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"hidden_act\": \"gelu\"}",
               RP_ERR_UNSUPPORTED, "'hidden_act'");
    expect_bad("{\"model_type\": \"qwen3\", " BASE ", \"use_sliding_window\": true}",
               RP_ERR_UNSUPPORTED, "'use_sliding_window'");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"torch_dtype\": \"int8\"}",
               RP_ERR_UNSUPPORTED, "'torch_dtype'");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"head_dim\": 15}", RP_ERR_RANGE,
               "'head_dim'");
    expect_bad("{\"model_type\": \"llama\", " BASE ", \"vocab_size\": 99999999999}",
               RP_ERR_RANGE, "'vocab_size'");
}
END_TEST

START_TEST(load_names_path)
{
    rp_model_config c;
    rp_error err = {0};
    char p[512];
    snprintf(p, sizeof p, "%s/missing-config.json", rp_test_tmpdir());
    ck_assert_int_eq(rp_config_load(p, &c, &err), RP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, p));
    snprintf(p, sizeof p, "%s/empty-config.json", rp_test_tmpdir());
    FILE *f = fopen(p, "w");
    fclose(f);
    ck_assert_int_eq(rp_config_load(p, &c, &err), RP_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, p));
    ck_assert_ptr_nonnull(strstr(err.msg, "empty"));
}
END_TEST

START_TEST(save_roundtrip)
{
    rp_model_config c, d;
    rp_error err = {0};
    char p[512], t[512];
    ck_assert_int_eq(parse("{\"model_type\": \"llama\", " BASE ", \"num_key_value_heads\": 2, "
                           "\"rope_theta\": 500000.0, \"rms_norm_eps\": 1e-5, "
                           "\"initializer_range\": 0.01, \"tie_word_embeddings\": true, "
                           "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                           "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                           "\"original_max_position_embeddings\": 8192}, "
                           "\"max_position_embeddings\": 131072}",
                           &c, &err),
                     RP_OK);
    snprintf(p, sizeof p, "%s/saved-config.json", rp_test_tmpdir());
    ck_assert_int_eq(rp_config_save(p, &c, RP_BF16, &err), RP_OK);
    ck_assert_int_eq(rp_config_load(p, &d, &err), RP_OK);
    c.torch_dtype = RP_BF16; /* the dtype argument is what gets written */
    ck_assert_mem_eq(&c, &d, sizeof c);

    /* qwen3 from a template: unknown fields survive, ours are overwritten */
    snprintf(t, sizeof t, "%s/template-config.json", rp_test_tmpdir());
    FILE *f = fopen(t, "w");
    fputs("{\"model_type\": \"qwen3\", " BASE ", \"head_dim\": 16, \"eos_token_id\": 7, "
          "\"hidden_size_note\": \"x\"}",
          f);
    fclose(f);
    ck_assert_int_eq(rp_config_load(t, &c, &err), RP_OK);
    c.num_hidden_layers = 3;
    ck_assert_int_eq(rp_config_save_from(p, &c, RP_F32, t, &err), RP_OK);
    ck_assert_int_eq(rp_config_load(p, &d, &err), RP_OK);
    ck_assert_mem_eq(&c, &d, sizeof c);
    char buf[4096] = {0};
    f = fopen(p, "r");
    ck_assert_uint_gt(fread(buf, 1, sizeof buf - 1, f), 0);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "\"eos_token_id\": 7"));
    ck_assert_ptr_nonnull(strstr(buf, "\"Qwen3ForCausalLM\""));
    ck_assert_ptr_nonnull(strstr(buf, "\"rope_theta\": 10000.0"));
}
END_TEST

#define MOE "{\"model_type\": \"qwen3_moe\", " BASE ", \"num_hidden_layers\": 6, "

START_TEST(qwen3_moe_fields)
{
    rp_model_config c, d;
    rp_error err = {0};
    ck_assert_int_eq(parse(MOE "\"num_experts\": 8}", &c, &err), RP_OK);
    ck_assert_int_eq(c.arch, RP_ARCH_QWEN3_MOE);
    ck_assert(rp_model_has_qk_norm(&c));
    ck_assert_int_eq(c.moe.num_experts, 8);
    ck_assert_int_eq(c.moe.num_experts_per_tok, 8); /* Qwen3MoeConfig's defaults */
    ck_assert_int_eq(c.moe.moe_intermediate_size, 768);
    ck_assert_int_eq(c.moe.decoder_sparse_step, 1);
    ck_assert_int_eq(c.moe.norm_topk_prob, 0);
    ck_assert_int_eq(c.moe.output_router_logits, 0);
    ck_assert(fabs(c.moe.router_aux_loss_coef - 0.001) < 1e-15);
    for (int i = 0; i < 6; i++)
        ck_assert(rp_model_block_is_moe(&c, i));
    ck_assert(!rp_model_block_is_moe(&c, 6) && !rp_model_block_is_moe(&c, -1)); /* no block */
    ck_assert_int_eq(parse(MOE "\"num_experts\": 8, \"num_experts_per_tok\": 2, "
                           "\"moe_intermediate_size\": 12, \"decoder_sparse_step\": 2, "
                           "\"mlp_only_layers\": [3], \"norm_topk_prob\": true, "
                           "\"output_router_logits\": true, \"router_aux_loss_coef\": 0.01}",
                           &c, &err),
                     RP_OK);
    const int moe[6] = {0, 1, 0, 0, 0, 1}; /* (i+1) % 2 == 0, but not block 3 */
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(rp_model_block_is_moe(&c, i), moe[i]);
    ck_assert(rp_model_has_moe(&c));
    ck_assert_int_eq(c.intermediate_size, 128);
    char p[512];
    snprintf(p, sizeof p, "%s/moe-config.json", rp_test_tmpdir());
    ck_assert_int_eq(rp_config_save(p, &c, RP_F32, &err), RP_OK);
    ck_assert_int_eq(rp_config_load(p, &d, &err), RP_OK);
    ck_assert_mem_eq(&c, &d, sizeof c);
    /* transformers 5's name of the count */
    ck_assert_int_eq(parse(MOE "\"num_local_experts\": 6, \"num_experts_per_tok\": 2}", &c, &err),
                     RP_OK);
    ck_assert_int_eq(c.moe.num_experts, 6);
    /* no experts: every block dense */
    ck_assert_int_eq(parse(MOE "\"num_experts\": 0}", &c, &err), RP_OK);
    ck_assert(!rp_model_has_moe(&c));

    expect_bad(MOE "\"num_experts\": 4, \"num_experts_per_tok\": 5}", RP_ERR_RANGE,
               "num_experts_per_tok");
    expect_bad(MOE "\"num_experts\": 4, \"num_experts_per_tok\": 0}", RP_ERR_RANGE,
               "num_experts_per_tok");
    expect_bad(MOE "\"mlp_only_layers\": [1, 6]}", RP_ERR_RANGE, "mlp_only_layers");
    expect_bad(MOE "\"mlp_only_layers\": [-1]}", RP_ERR_RANGE, "mlp_only_layers");
    expect_bad(MOE "\"mlp_only_layers\": [\"2\"]}", RP_ERR_FORMAT, "mlp_only_layers");
    expect_bad(MOE "\"mlp_only_layers\": 2}", RP_ERR_FORMAT, "mlp_only_layers");
    expect_bad(MOE "\"decoder_sparse_step\": 0}", RP_ERR_RANGE, "decoder_sparse_step");
    /* more experts than a block takes: refused by the reader, naming the file
     * (an FP8 config's modules were matched expert by expert first: with
     * 2^31 - 1 experts that never ended; fuzz_readers found it) */
    ck_assert_int_eq(RP_CONFIG_MAX_EXPERTS, RP_MOE_MAX_EXPERTS);
    expect_bad(MOE "\"num_experts\": 513, \"num_experts_per_tok\": 2}", RP_ERR_UNSUPPORTED,
               "field 'num_experts': 513 experts, at most 512");
    expect_bad(MOE "\"num_experts\": 2147483647, \"num_experts_per_tok\": 2, "
               "\"quantization_config\": {\"quant_method\": \"fp8\"}}",
               RP_ERR_UNSUPPORTED, "field 'num_experts': 2147483647 experts");
    expect_bad(MOE "\"norm_topk_prob\": 1}", RP_ERR_FORMAT, "norm_topk_prob");
    expect_bad(MOE "\"router_aux_loss_coef\": -1}", RP_ERR_RANGE, "router_aux_loss_coef");
}
END_TEST


/* The Hub's openai/gpt-oss-20b config.json, read as transformers reads it
 * (GptOssConfig.from_pretrained prints the same values). */
START_TEST(gpt_oss_hub_config)
{
    rp_model_config c;
    rp_error err = {0};
    char path[1024];
    snprintf(path, sizeof path, "%s/mpi-tests/fixtures/gpt-oss/gpt-oss-20b-config.json",
             rp_test_srcdir());
    ck_assert_msg(rp_config_load(path, &c, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(c.arch, RP_ARCH_GPT_OSS);
    ck_assert_str_eq(rp_arch_name(c.arch), "gpt_oss");
    ck_assert_int_eq(c.hidden_size, 2880);
    ck_assert_int_eq(c.intermediate_size, 2880);
    ck_assert_int_eq(c.num_hidden_layers, 24);
    ck_assert_int_eq(c.num_attention_heads, 64);
    ck_assert_int_eq(c.num_key_value_heads, 8);
    ck_assert_int_eq(c.head_dim, 64); /* q width 4096 != hidden 2880 */
    ck_assert_int_eq(c.vocab_size, 201088);
    ck_assert_int_eq(c.max_position_embeddings, 131072);
    ck_assert_double_eq(c.rms_norm_eps, 1e-5);
    ck_assert_double_eq(c.rope_theta, 150000.0);
    ck_assert_int_eq(c.attention_bias, 1);
    ck_assert_int_eq(c.tie_word_embeddings, 0);
    ck_assert(!rp_model_has_qk_norm(&c));
    ck_assert(rp_model_has_moe(&c)); /* every block routes to its experts */
    for (int i = 0; i < 24; i++)
        ck_assert(rp_model_block_is_moe(&c, i));
    ck_assert(!rp_model_block_is_moe(&c, 24));
    ck_assert_int_eq(c.moe.num_experts, 32);
    ck_assert_int_eq(c.moe.num_experts_per_tok, 4);
    ck_assert_int_eq(c.moe.moe_intermediate_size, 2880);
    ck_assert_int_eq(c.moe.norm_topk_prob, 1);
    ck_assert_int_eq(c.moe.output_router_logits, 0);
    ck_assert_double_eq(c.moe.router_aux_loss_coef, 0.9);
    ck_assert_double_eq(c.oss.swiglu_limit, 7.0);
    ck_assert_double_eq(c.oss.swiglu_alpha, 1.702);
    ck_assert_int_eq(c.oss.sliding_window, 128);
    for (int i = 0; i < 24; i++)
        ck_assert_int_eq(rp_gpt_oss_block_is_sliding(&c.oss, i), i % 2 == 0);
    ck_assert(!rp_gpt_oss_block_is_sliding(&c.oss, -1));
    const rp_rope_scaling *y = &c.rope_scaling;
    ck_assert_int_eq(y->type, RP_ROPE_YARN);
    ck_assert_double_eq(y->factor, 32.0);
    ck_assert_double_eq(y->beta_fast, 32.0);
    ck_assert_double_eq(y->beta_slow, 1.0);
    ck_assert_int_eq(y->truncate, 0);
    ck_assert_int_eq(y->original_max_position_embeddings, 4096);
    ck_assert_double_eq(y->attention_factor, 0);
    ck_assert_int_eq(c.oss.mxfp4, 1);
    for (int i = 0; i < 24; i++)
        ck_assert(rp_gpt_oss_experts_are_mxfp4(&c.oss, i));
    ck_assert(!rp_gpt_oss_experts_are_mxfp4(&c.oss, 24));
    /* written back, it reads as the same model, unquantised (a save holds
     * the trained weights, never re-quantised) */
    char out[512];
    snprintf(out, sizeof out, "%s/oss-config.json", rp_test_tmpdir());
    ck_assert_int_eq(rp_config_save(out, &c, RP_BF16, &err), RP_OK);
    rp_model_config d;
    ck_assert_msg(rp_config_load(out, &d, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(d.arch, RP_ARCH_GPT_OSS);
    ck_assert_int_eq(d.head_dim, c.head_dim);
    ck_assert_int_eq(d.moe.num_experts, c.moe.num_experts);
    ck_assert_int_eq(d.moe.num_experts_per_tok, c.moe.num_experts_per_tok);
    ck_assert_int_eq(d.moe.moe_intermediate_size, c.moe.moe_intermediate_size);
    ck_assert_double_eq(d.oss.swiglu_limit, c.oss.swiglu_limit);
    ck_assert_double_eq(d.oss.swiglu_alpha, c.oss.swiglu_alpha);
    ck_assert_int_eq(d.oss.sliding_window, c.oss.sliding_window);
    for (int i = 0; i < 24; i++)
        ck_assert_int_eq(rp_gpt_oss_block_is_sliding(&d.oss, i),
                         rp_gpt_oss_block_is_sliding(&c.oss, i));
    ck_assert_int_eq(d.rope_scaling.type, RP_ROPE_YARN);
    ck_assert_double_eq(d.rope_scaling.factor, y->factor);
    ck_assert_int_eq(d.rope_scaling.truncate, y->truncate);
    ck_assert_int_eq(d.rope_scaling.original_max_position_embeddings,
                     y->original_max_position_embeddings);
    ck_assert_int_eq(d.attention_bias, 1);
    ck_assert_int_eq(d.oss.mxfp4, 0);
    ck_assert(!rp_gpt_oss_experts_are_mxfp4(&d.oss, 0));
}
END_TEST

/* 8 heads, so that GptOssConfig's 8 kv heads divide them */
#define OSS "{\"model_type\": \"gpt_oss\", \"hidden_size\": 64, \"intermediate_size\": 128, " \
            "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"vocab_size\": 100, "

START_TEST(gpt_oss_defaults)
{
    rp_model_config c;
    rp_error err = {0};
    /* GptOssConfig's defaults for every absent field */
    ck_assert_msg(parse(OSS "\"initializer_range\": 0.02}", &c, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(c.num_key_value_heads, 8); /* GptOssConfig's, not the heads' */
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert_int_eq(c.max_position_embeddings, 131072);
    ck_assert_double_eq(c.rms_norm_eps, 1e-5);
    ck_assert_double_eq(c.rope_theta, 150000.0);
    ck_assert_int_eq(c.attention_bias, 1);
    ck_assert_int_eq(c.moe.num_experts, 128);
    ck_assert_int_eq(c.moe.num_experts_per_tok, 4);
    ck_assert(fabs(c.moe.router_aux_loss_coef - 0.001) < 1e-15);
    ck_assert_double_eq(c.oss.swiglu_limit, 7.0);
    ck_assert_double_eq(c.oss.swiglu_alpha, 1.702);
    ck_assert_int_eq(c.oss.sliding_window, 128);
    ck_assert(rp_gpt_oss_block_is_sliding(&c.oss, 0) && !rp_gpt_oss_block_is_sliding(&c.oss, 1));
    ck_assert_int_eq(c.rope_scaling.type, RP_ROPE_YARN);
    ck_assert_double_eq(c.rope_scaling.factor, 32.0);
    ck_assert_int_eq(c.rope_scaling.original_max_position_embeddings, 4096);
    ck_assert_int_eq(c.rope_scaling.truncate, 0);
    ck_assert_int_eq(c.oss.mxfp4, 0);
    ck_assert(!rp_gpt_oss_experts_are_mxfp4(&c.oss, 0));
    ck_assert_int_eq(parse("{\"model_type\": \"gpt_oss\", \"hidden_size\": 64, "
                           "\"num_hidden_layers\": 2, \"num_attention_heads\": 16, "
                           "\"vocab_size\": 100, \"num_key_value_heads\": null}",
                           &c, &err),
                     RP_OK);
    ck_assert_int_eq(c.num_key_value_heads, 16); /* null: as many as the heads */
    ck_assert_int_eq(parse(OSS "\"head_dim\": null}", &c, &err), RP_OK);
    ck_assert_int_eq(c.head_dim, 8); /* null: hidden / heads */

    /* every field given; transformers 5's rope_parameters with YaRN's
     * optional keys; the Hub's second name of k; the experts' count under
     * its attribute-map name */
    ck_assert_msg(
        parse(OSS "\"num_key_value_heads\": 2, \"head_dim\": 8, \"num_experts\": 6, "
                  "\"experts_per_token\": 2, \"swiglu_limit\": 3.5, \"swiglu_alpha\": 2.0, "
                  "\"attention_bias\": false, \"sliding_window\": 5, \"layer_types\": "
                  "[\"full_attention\", \"sliding_attention\"], \"rms_norm_eps\": 1e-6, "
                  "\"output_router_logits\": true, \"router_aux_loss_coef\": 0.5, "
                  "\"tie_word_embeddings\": true, \"max_position_embeddings\": 256, "
                  "\"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 1000.0, "
                  "\"factor\": 4.0, \"beta_fast\": 8, \"beta_slow\": 0, \"attention_factor\": "
                  "1.25, \"mscale\": 1.0, \"mscale_all_dim\": 0.5}}",
              &c, &err) == RP_OK,
        "%s", err.msg);
    ck_assert_int_eq(c.head_dim, 8);
    ck_assert_int_eq(c.moe.num_experts, 6);
    ck_assert_int_eq(c.moe.num_experts_per_tok, 2);
    ck_assert_double_eq(c.oss.swiglu_limit, 3.5);
    ck_assert_double_eq(c.oss.swiglu_alpha, 2.0);
    ck_assert_int_eq(c.attention_bias, 0);
    ck_assert_int_eq(c.oss.sliding_window, 5);
    ck_assert(!rp_gpt_oss_block_is_sliding(&c.oss, 0) && rp_gpt_oss_block_is_sliding(&c.oss, 1));
    ck_assert_int_eq(c.moe.output_router_logits, 1);
    ck_assert_double_eq(c.moe.router_aux_loss_coef, 0.5);
    ck_assert_int_eq(c.tie_word_embeddings, 1);
    ck_assert_double_eq(c.rope_theta, 1000.0);
    ck_assert_double_eq(c.rope_scaling.factor, 4.0);
    ck_assert_double_eq(c.rope_scaling.beta_fast, 8.0);
    ck_assert_double_eq(c.rope_scaling.beta_slow, 1.0); /* Python's `or`: 0 means 1 */
    ck_assert_int_eq(c.rope_scaling.truncate, 1);       /* absent: true */
    ck_assert_int_eq(c.rope_scaling.original_max_position_embeddings, 256);
    ck_assert_double_eq(c.rope_scaling.attention_factor, 1.25);
    ck_assert_double_eq(c.rope_scaling.mscale, 1.0);
    ck_assert_double_eq(c.rope_scaling.mscale_all_dim, 0.5);
    /* a top-level original_max_position_embeddings wins (standardize_rope_params) */
    ck_assert_int_eq(parse(OSS "\"original_max_position_embeddings\": 64, \"rope_scaling\": "
                               "{\"type\": \"yarn\", \"factor\": 2, "
                               "\"original_max_position_embeddings\": 32}}",
                           &c, &err),
                     RP_OK);
    ck_assert_int_eq(c.rope_scaling.original_max_position_embeddings, 64);
    /* plain RoPE is allowed */
    ck_assert_int_eq(parse(OSS "\"rope_scaling\": {\"rope_type\": \"default\"}}", &c, &err),
                     RP_OK);
    ck_assert_int_eq(c.rope_scaling.type, RP_ROPE_DEFAULT);
    /* no sliding block: a null window is fine */
    ck_assert_int_eq(parse(OSS "\"layer_types\": [\"full_attention\", \"full_attention\"], "
                               "\"sliding_window\": null}",
                           &c, &err),
                     RP_OK);
}
END_TEST

START_TEST(gpt_oss_quantization)
{
    rp_model_config c;
    rp_error err = {0};
    /* no modules_to_not_convert: every block's experts are quantised */
    ck_assert_int_eq(parse(OSS "\"quantization_config\": {\"quant_method\": \"mxfp4\"}}", &c, &err),
                     RP_OK);
    ck_assert(c.oss.mxfp4 && rp_gpt_oss_experts_are_mxfp4(&c.oss, 0) &&
              rp_gpt_oss_experts_are_mxfp4(&c.oss, 1));
    /* block 1's experts kept in full precision by name; "layers.1" must not
     * match block 11's (a module boundary) */
    ck_assert_int_eq(parse(OSS "\"num_hidden_layers\": 12, \"quantization_config\": "
                               "{\"quant_method\": \"mxfp4\", \"modules_to_not_convert\": "
                               "[\"model.layers.1\", \"lm_head\"]}}",
                           &c, &err),
                     RP_OK);
    for (int i = 0; i < 12; i++)
        ck_assert_int_eq(rp_gpt_oss_experts_are_mxfp4(&c.oss, i), i != 1);
    /* a suffix ("mlp.experts") or a pattern over all blocks */
    ck_assert_int_eq(parse(OSS "\"quantization_config\": {\"quant_method\": \"mxfp4\", "
                               "\"modules_to_not_convert\": [\"mlp.experts\"]}}",
                           &c, &err),
                     RP_OK);
    ck_assert(c.oss.mxfp4 && !rp_gpt_oss_experts_are_mxfp4(&c.oss, 0));
    ck_assert_int_eq(parse(OSS "\"quantization_config\": {\"quant_method\": \"mxfp4\", "
                               "\"modules_to_not_convert\": [\"model.layers.*.mlp\"]}}",
                           &c, &err),
                     RP_OK);
    ck_assert(!rp_gpt_oss_experts_are_mxfp4(&c.oss, 0) && !rp_gpt_oss_experts_are_mxfp4(&c.oss, 1));

    /* the matcher, case by case, as transformers' should_convert_module
     * answers (checked in Python 3.11 with transformers 5.24) */
    const char *hub[] = {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                         "model.embed_tokens", "lm_head"};
    ck_assert_int_eq(rp_quant_module_converted("model.layers.3.mlp.experts", hub, 4), 1);
    ck_assert_int_eq(rp_quant_module_converted("model.layers.3.self_attn", hub, 4), 0);
    ck_assert_int_eq(rp_quant_module_converted("model.layers.3.self_attn.q_proj", hub, 4), 0);
    ck_assert_int_eq(rp_quant_module_converted("model.layers.3.mlp.router", hub, 4), 0);
    ck_assert_int_eq(rp_quant_module_converted("lm_head", hub, 4), 0);
    const char *gate[] = {"mlp.gate"};
    ck_assert_int_eq(rp_quant_module_converted("model.layers.0.mlp.gate_proj", gate, 1), 1);
    ck_assert_int_eq(rp_quant_module_converted("model.layers.0.mlp.gate", gate, 1), 0);
    const char *l1[] = {"layer.1"};
    ck_assert_int_eq(rp_quant_module_converted("layer.11.attn", l1, 1), 1);
    ck_assert_int_eq(rp_quant_module_converted("layer.1.attn", l1, 1), 0);
    const char *star[] = {"layer.*"};
    ck_assert_int_eq(rp_quant_module_converted("layer.11.attn", star, 1), 0);
    const char *dot[] = {"model.layers.1.mlp.experts"}; /* "." matches any character */
    ck_assert_int_eq(rp_quant_module_converted("model_layers_1_mlp_experts", dot, 1), 0);
    ck_assert(!rp_quant_pattern_supported("layers.[0-9]"));
    ck_assert(!rp_quant_pattern_supported("*.experts"));
    ck_assert(rp_quant_pattern_supported("model.layers.*.mlp"));
}
END_TEST

START_TEST(gpt_oss_bad)
{
    /* the bad input */
    expect_bad(OSS "\"layer_types\": [\"sliding_attention\", \"chunked_attention\"]}",
               RP_ERR_UNSUPPORTED, "field 'layer_types': entry 1 is \"chunked_attention\"");
    expect_bad(OSS "\"layer_types\": [\"full_attention\", 3]}", RP_ERR_UNSUPPORTED,
               "field 'layer_types': entry 1 is 3");
    expect_bad(OSS "\"num_local_experts\": 600}", RP_ERR_UNSUPPORTED,
               "field 'num_local_experts': 600 experts, at most 512");
    expect_bad(OSS "\"sliding_window\": 0}", RP_ERR_RANGE, "field 'sliding_window'");
    expect_bad(OSS "\"sliding_window\": -4}", RP_ERR_RANGE, "field 'sliding_window'");
    expect_bad(OSS "\"num_key_value_heads\": 3}", RP_ERR_RANGE,
               "'num_key_value_heads': 3 does not divide");
    /* and the rest */
    expect_bad(OSS "\"sliding_window\": null}", RP_ERR_FORMAT, "field 'sliding_window': null");
    expect_bad(OSS "\"layer_types\": [\"full_attention\"]}", RP_ERR_RANGE,
               "field 'layer_types': 1 entries for num_hidden_layers 2");
    expect_bad(OSS "\"layer_types\": \"full_attention\"}", RP_ERR_FORMAT, "'layer_types'");
    expect_bad(OSS "\"num_local_experts\": 4, \"num_experts_per_tok\": 5}", RP_ERR_RANGE,
               "field 'num_experts_per_tok': 5 exceeds num_local_experts 4");
    expect_bad(OSS "\"num_local_experts\": 4, \"experts_per_token\": 5}", RP_ERR_RANGE,
               "field 'experts_per_token': 5 exceeds");
    expect_bad(OSS "\"num_experts_per_tok\": 2, \"experts_per_token\": 3}", RP_ERR_RANGE,
               "field 'experts_per_token': 3 disagrees with num_experts_per_tok 2");
    expect_bad(OSS "\"num_local_experts\": 0}", RP_ERR_RANGE, "'num_local_experts'");
    expect_bad(OSS "\"swiglu_limit\": 0}", RP_ERR_RANGE, "'swiglu_limit'");
    expect_bad(OSS "\"swiglu_alpha\": \"1.7\"}", RP_ERR_FORMAT, "'swiglu_alpha'");
    expect_bad(OSS "\"router_aux_loss_coef\": -1}", RP_ERR_RANGE, "'router_aux_loss_coef'");
    expect_bad(OSS "\"rope_scaling\": {\"rope_type\": \"yarn\"}}", RP_ERR_FORMAT,
               "missing required field 'rope_scaling.factor'");
    expect_bad(OSS "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                   "\"truncate\": 0}}",
               RP_ERR_FORMAT, "field 'rope_parameters.truncate': expected boolean");
    expect_bad(OSS "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                   "\"beta_fast\": -1}}",
               RP_ERR_RANGE, "'rope_parameters.beta_fast'");
    expect_bad(OSS "\"rope_parameters\": {\"rope_type\": \"longrope\", \"factor\": 4}}",
               RP_ERR_UNSUPPORTED, "unsupported rope type 'longrope'");
    expect_bad(OSS "\"quantization_config\": {\"quant_method\": \"fp8\"}}", RP_ERR_UNSUPPORTED,
               "field 'quantization_config.quant_method': unsupported quantisation 'fp8'");
    expect_bad(OSS "\"quantization_config\": {}}", RP_ERR_FORMAT,
               "'quantization_config.quant_method'");
    expect_bad(OSS "\"quantization_config\": {\"quant_method\": \"mxfp4\", "
                   "\"modules_to_not_convert\": [\"model.layers.[0-9].mlp\"]}}",
               RP_ERR_UNSUPPORTED, "field 'quantization_config.modules_to_not_convert': entry 0");
    expect_bad(OSS "\"quantization_config\": {\"quant_method\": \"mxfp4\", "
                   "\"modules_to_not_convert\": \"lm_head\"}}",
               RP_ERR_FORMAT, "'quantization_config.modules_to_not_convert'");
    expect_bad(OSS "\"quantization_config\": \"mxfp4\"}", RP_ERR_FORMAT, "'quantization_config'");
    /* yarn stays refused where the model has no YaRN */
    expect_bad("{\"model_type\": \"qwen3\", " BASE ", \"rope_scaling\": {\"rope_type\": "
               "\"yarn\", \"factor\": 4.0}}",
               RP_ERR_UNSUPPORTED, "unsupported rope type 'yarn'");
}
END_TEST

START_TEST(fp8_quantization)
{
    rp_model_config c;
    rp_error err = {0};
    ck_assert_int_eq(parse("{\"model_type\": \"qwen3\", " BASE "}", &c, &err), RP_OK);
    ck_assert_int_eq(c.fp8.on, 0);
    ck_assert_msg(parse("{\"model_type\": \"qwen3_moe\", " BASE ", \"num_experts\": 4, "
                        "\"num_experts_per_tok\": 2, \"quantization_config\": {\"quant_method\": "
                        "\"fp8\", \"fmt\": \"e4m3\", \"activation_scheme\": \"dynamic\", "
                        "\"weight_block_size\": [48, 20]}}", &c, &err) == RP_OK, "%s", err.msg);
    ck_assert(c.fp8.on && c.fp8.block_rows == 48 && c.fp8.block_cols == 20);
    ck_assert_int_eq(parse("{\"model_type\": \"llama\", " BASE ", \"quantization_config\": "
                           "{\"quant_method\": \"fp8\"}}", &c, &err), RP_OK);
    ck_assert(c.fp8.on && c.fp8.block_rows == 128 && c.fp8.block_cols == 128);
#define Q8 "{\"model_type\": \"qwen3\", " BASE ", \"quantization_config\": "
    expect_bad(Q8 "{\"quant_method\": \"gptq\"}}", RP_ERR_UNSUPPORTED,
               "field 'quantization_config.quant_method': unsupported quantisation 'gptq' "
               "(qwen3: fp8)");
    expect_bad(Q8 "{\"quant_method\": \"fp8\", \"fmt\": \"e5m2\"}}", RP_ERR_UNSUPPORTED,
               "field 'quantization_config.fmt': unsupported FP8 format 'e5m2'");
    expect_bad(Q8 "{\"quant_method\": \"fp8\", \"activation_scheme\": \"static\"}}",
               RP_ERR_UNSUPPORTED, "field 'quantization_config.activation_scheme'");
    expect_bad(Q8 "{\"quant_method\": \"fp8\", \"weight_block_size\": [128]}}", RP_ERR_FORMAT,
               "field 'quantization_config.weight_block_size': [ 128 ] is not");
    expect_bad(Q8 "{\"quant_method\": \"fp8\", \"weight_block_size\": [0, 128]}}",
               RP_ERR_FORMAT, "field 'quantization_config.weight_block_size'");
    expect_bad(Q8 "{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 1.5]}}",
               RP_ERR_FORMAT, "field 'quantization_config.weight_block_size'");
    expect_bad(Q8 "{\"fmt\": \"e4m3\"}}", RP_ERR_FORMAT, "'quantization_config.quant_method'");
    expect_bad(Q8 "\"fp8\"}", RP_ERR_FORMAT, "'quantization_config'");
#undef Q8
}
END_TEST

/* Bits of rp_fp8_config.converted: projections q, k, v, o, gate, up, down. */
#define FP8_ATTN 0x0fu
#define FP8_MLP 0x70u
#define FP8_UP (1u << RP_LORA_UP_PROJ)

/* modules_to_not_convert of an FP8 config, read as transformers'
 * should_convert_module reads it, per block and projection (issue 36) */
START_TEST(fp8_modules_to_not_convert)
{
    rp_model_config c;
    rp_error err = {0};
#define Q8 "{\"model_type\": \"qwen3\", " BASE ", \"quantization_config\": {\"quant_method\": " \
           "\"fp8\", \"modules_to_not_convert\": "
    /* none: every block projection */
    ck_assert_int_eq(parse(Q8 "null}}", &c, &err), RP_OK);
    ck_assert(c.fp8.any && c.fp8.converted[0] == (FP8_ATTN | FP8_MLP) &&
              c.fp8.converted[1] == (FP8_ATTN | FP8_MLP));
    /* a block's module, a projection's suffix, lm_head (no block's) and a
     * router's name, which keeps no gate_proj */
    ck_assert_msg(parse(Q8 "[\"lm_head\", \"model.layers.1.self_attn\", \"mlp.up_proj\", "
                        "\"model.layers.0.mlp.gate\"]}}", &c, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(c.fp8.converted[0], (FP8_ATTN | FP8_MLP) & ~FP8_UP);
    ck_assert_int_eq(c.fp8.converted[1], FP8_MLP & ~FP8_UP);
    ck_assert(rp_fp8_converted(&c.fp8, 0, RP_LORA_GATE_PROJ) &&
              !rp_fp8_converted(&c.fp8, 1, RP_LORA_Q_PROJ) &&
              !rp_fp8_converted(&c.fp8, 0, RP_LORA_ROUTER) && c.fp8.any);
    /* "model.layers.1" is not "model.layers.11"'s prefix to a boundary, and
     * "x*" runs: every block's attention */
    ck_assert_msg(parse(Q8 "[\"model.layers.*.self_attn\"]}}", &c, &err) == RP_OK, "%s",
                  err.msg);
    ck_assert(c.fp8.converted[0] == FP8_MLP && c.fp8.converted[1] == FP8_MLP);
    /* all of them: an FP8 config that quantises nothing */
    ck_assert_int_eq(parse(Q8 "[\"model.layers\"]}}", &c, &err), RP_OK);
    ck_assert(c.fp8.on && !c.fp8.any && c.fp8.converted[0] == 0 && c.fp8.converted[1] == 0);
    /* a list of hundreds (FP8 releases name every block's norms and router) */
    char big[16384];
    size_t at = (size_t)snprintf(big, sizeof big, Q8 "[");
    for (int i = 0; i < 300; i++)
        at += (size_t)snprintf(big + at, sizeof big - at, "%s\"model.layers.%d.input_layernorm\"",
                               i ? ", " : "", i);
    snprintf(big + at, sizeof big - at, ", \"model.layers.1.mlp.down_proj\"]}}");
    ck_assert_msg(parse(big, &c, &err) == RP_OK, "%s", err.msg);
    ck_assert(c.fp8.converted[0] == (FP8_ATTN | FP8_MLP) &&
              c.fp8.converted[1] == (FP8_ATTN | (FP8_MLP & ~(1u << RP_LORA_DOWN_PROJ))));
    expect_bad(Q8 "[\"model.layers.[0-9].self_attn\"]}}", RP_ERR_UNSUPPORTED,
               "field 'quantization_config.modules_to_not_convert': entry 0 is "
               "\"model.layers.[0-9].self_attn\", not a module name or pattern");
    expect_bad(Q8 "[\"lm_head\", 3]}}", RP_ERR_UNSUPPORTED,
               "field 'quantization_config.modules_to_not_convert': entry 1 is 3");
    expect_bad(Q8 "\"lm_head\"}}", RP_ERR_FORMAT,
               "field 'quantization_config.modules_to_not_convert': expected array of strings");
#undef Q8
    /* a mixture of experts: the experts' projections as the files name
     * them (model.layers.N.mlp.experts.E.gate_proj) or the block's experts
     * as one module; never the router */
#define M8 "{\"model_type\": \"qwen3_moe\", " BASE ", \"num_experts\": 4, " \
           "\"num_experts_per_tok\": 2, \"quantization_config\": {\"quant_method\": \"fp8\", " \
           "\"modules_to_not_convert\": "
    /* (re.match anchors a pattern at the name's start: "experts.*.down_proj"
     * matches no module) */
    ck_assert_msg(parse(M8 "[\"model.layers.0.mlp.experts\", \"model.layers.1.self_attn.k_proj\", "
                        "\"experts.*.down_proj\", \"model.layers.1.mlp.experts.*.down_proj\"]}}",
                        &c, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(c.fp8.converted[0], FP8_ATTN);
    ck_assert_int_eq(c.fp8.converted[1], (FP8_ATTN & ~(1u << RP_LORA_K_PROJ)) |
                                             (FP8_MLP & ~(1u << RP_LORA_DOWN_PROJ)));
    ck_assert_msg(parse(M8 "[\"model.layers.1.mlp.gate\", \"experts\"]}}", &c, &err) == RP_OK,
                  "%s", err.msg);
    ck_assert(c.fp8.converted[0] == FP8_ATTN && c.fp8.converted[1] == FP8_ATTN);
    ck_assert_msg(parse(M8 "[\"model.layers.1.mlp.experts.0\", \"model.layers.1.mlp.experts.1\", "
                        "\"model.layers.1.mlp.experts.2\", \"model.layers.1.mlp.experts.3\"]}}",
                        &c, &err) == RP_OK, "%s", err.msg);
    ck_assert(c.fp8.converted[0] == (FP8_ATTN | FP8_MLP) && c.fp8.converted[1] == FP8_ATTN);
    /* one expert apart from the others: one word per block and projection */
    expect_bad(M8 "[\"model.layers.1.mlp.experts.2.up_proj\"]}}", RP_ERR_UNSUPPORTED,
               "field 'quantization_config.modules_to_not_convert': keeps "
               "model.layers.1.mlp.experts.2.up_proj in full precision but not "
               "model.layers.1.mlp.experts.0.up_proj");
    expect_bad(M8 "[\"model.layers.1.mlp.experts.0\"]}}", RP_ERR_UNSUPPORTED,
               "keeps model.layers.1.mlp.experts.0.gate_proj in full precision but not "
               "model.layers.1.mlp.experts.1.gate_proj");
#undef M8
    /* the experts' patterns are first filtered (rp_quant_pattern_may_match):
     * every pattern that keeps some expert's module passes the filter */
    static const char *const pats[] = {
        "model.layers.1.mlp.experts", "model.layers.1.mlp.experts.", "model.layers.1.mlp.experts.1",
        "model.layers.1.mlp.experts.12", "model.layers.1.mlp.experts.1.gate_proj",
        "model.layers.1.mlp.exp", "model.layers.1", "model.layers.12", "model.layers.1.mlp.gate",
        "gate_proj", "1.gate_proj", "12.gate_proj", "s.12.gate_proj", "experts.3.gate_proj",
        "model.layers.1.mlp.experts.3.gate_pro", "model.layers.1.mlp.experts..", "proj",
        "model.layers...mlp.experts.2", "model.layers.1.mlp.experts.1.gate_proj.x",
        "mlp.experts.1.gate_proj", "model.layers.1.mlp.gate_proj", "lm_head"};
    for (size_t k = 0; k < sizeof pats / sizeof pats[0]; k++) {
        int kept = 0;
        for (int e = 0; e < 130; e++) {
            char n[96];
            snprintf(n, sizeof n, "model.layers.1.mlp.experts.%d.gate_proj", e);
            kept |= !rp_quant_module_converted(n, &pats[k], 1);
        }
        ck_assert_msg(!kept || rp_quant_pattern_may_match(pats[k], "model.layers.1.mlp.experts.",
                                                          ".gate_proj"),
                      "'%s' keeps an expert but was filtered out", pats[k]);
    }
    ck_assert(!rp_quant_pattern_may_match("model.layers.12.input_layernorm",
                                          "model.layers.1.mlp.experts.", ".gate_proj"));
    ck_assert(!rp_quant_pattern_may_match("model.layers.1.mlp.gate", "model.layers.1.mlp.experts.",
                                          ".gate_proj"));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("io_config");
    TCase *tc = tcase_create("all");
    tcase_add_test(tc, llama_defaults);
    tcase_add_test(tc, qwen3_defaults_and_fields);
    tcase_add_test(tc, rope_both_layouts);
    tcase_add_test(tc, bad_configs);
    tcase_add_test(tc, load_names_path);
    tcase_add_test(tc, save_roundtrip);
    tcase_add_test(tc, qwen3_moe_fields);
    tcase_add_test(tc, gpt_oss_hub_config);
    tcase_add_test(tc, gpt_oss_defaults);
    tcase_add_test(tc, gpt_oss_quantization);
    tcase_add_test(tc, gpt_oss_bad);
    tcase_add_test(tc, fp8_quantization);
    tcase_add_test(tc, fp8_modules_to_not_convert);
    tcase_add_checked_fixture(tc, NULL, rp_test_tmpdir_clean);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(suite, "serial")
