/* Proves: the device probe answers cleanly everywhere: the CPU is always
 * found; CUDA is either usable (and then a kernel launched through the
 * libtool-built .cu object computes the right saxpy, on a GPU of sm_80 or
 * newer, also right after a probe that failed: no error is left behind for
 * its launch) or reported as RP_ERR_NO_DEVICE / RP_ERR_UNSUPPORTED with a
 * message (an older GPU by name and compute capability), never a crash. */
#include "config.h"

#include <string.h>

#include "device/backend.h"
#include "device/device.h"
#include "kernels/cuda/sizes.h"
#include "model/layers.h"
#include "rp_check.h"
#ifdef RP_HAVE_CUDA
#include "kernels/cuda/cuda_probe.h"
#endif

START_TEST(cpu_always_present)
{
    rp_device_info info;
    rp_error err = {0};
    ck_assert_int_eq(rp_device_probe(RP_DEVICE_CPU, &info, &err), RP_OK);
    ck_assert_int_eq(info.kind, RP_DEVICE_CPU);
    ck_assert_uint_gt(info.memory_bytes, 0);
    ck_assert_msg(info.name[0] != '\0', "the CPU has no name");
}
END_TEST

START_TEST(cuda_present_or_clean_error)
{
    rp_device_info info;
    rp_error err = {0};
    rp_status s = rp_device_probe(RP_DEVICE_CUDA, &info, &err);
#ifdef RP_HAVE_CUDA
    if (s == RP_OK) {
        ck_assert_int_gt(info.count, 0);
        ck_assert_int_ge(info.sm, RP_CUDA_MIN_SM);
        float x[1000], y[1000];
        for (int i = 0; i < 1000; i++) {
            x[i] = (float)i;
            y[i] = 1.0f;
        }
        const char *why = "";
        /* a probe that fails (as run.c and link_groups.c allow the bus id
         * to) leaves no error behind for the next launch to report */
        char busid[32];
        ck_assert_int_ne(rp_cuda_device_busid(info.count + 1000, busid, sizeof busid, &why), 0);
        ck_assert_msg(why[0] != '\0', "a failed probe with no reason");
        ck_assert_msg(rp_cuda_saxpy_smoke(0, 1000, 2.0f, x, y, &why) == 0, "%s", why);
        for (int i = 0; i < 1000; i++)
            ck_assert_float_eq(y[i], 2.0f * (float)i + 1.0f);
    } else if (s == RP_ERR_UNSUPPORTED) {
        ck_assert_msg(strstr(err.msg, "has compute capability") && strstr(err.msg, "needs 8.0"),
                      "message: %s", err.msg);
    } else {
        ck_assert_int_eq(s, RP_ERR_NO_DEVICE);
        ck_assert_msg(strstr(err.msg, "no CUDA device") != NULL, "message: %s", err.msg);
    }
#else
    ck_assert_int_eq(s, RP_ERR_UNSUPPORTED);
    ck_assert(strstr(err.msg, "without CUDA") != NULL);
#endif
}
END_TEST

START_TEST(auto_falls_back_and_bad_names_rejected)
{
    rp_device_info info;
    rp_error err = {0};
    ck_assert_int_eq(rp_device_probe(RP_DEVICE_AUTO, &info, &err), RP_OK);
    ck_assert(info.kind == RP_DEVICE_CPU || info.kind == RP_DEVICE_CUDA);
    rp_device_kind k;
    ck_assert_int_eq(rp_device_kind_parse("gpu", &k, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "'gpu'") != NULL);
    ck_assert_int_eq(rp_device_kind_parse("cuda", &k, &err), RP_OK);
    ck_assert_int_eq(k, RP_DEVICE_CUDA);
}
END_TEST

/* A CUDA executor is sized alike from any build: without the CUDA back end
 * the sizing table stands for it (a plan made on a laptop fits the GPU); with
 * it, the sizing table gives the executor's own figures (no drift): Qwen3-1.7B
 * shapes, the head's chunk of 832 rows without a memory figure (2^27 logits /
 * 151936, in 64s) or with a small one, 5888 with an 80 GiB one (its 1/16 in
 * fp32 logits and their bf16 gradient, 6 bytes each, in 64s); the CPU's 64
 * whatever the figure. */
START_TEST(cuda_executor_sized_alike_in_every_build)
{
    const rp_kernel_ops *k = rp_device_kernel_ops(RP_DEVICE_CUDA), *z = &rp_kernel_ops_cuda_sizes;
    ck_assert_ptr_nonnull(k);
    ck_assert_int_eq(k->compute_dtype, RP_BF16);
    ck_assert_int_eq(k->host_addressable, 0);
    ck_assert_uint_eq(k->weight_dtypes, z->weight_dtypes);
    ck_assert_int_eq(z->logits_rows(151936, 0), 832);
    ck_assert_int_eq(k->logits_rows(151936, 0), z->logits_rows(151936, 0));
    ck_assert_int_eq(k->logits_rows(151936, (int64_t)80 << 30), 5888);
    ck_assert_int_eq(z->logits_rows(151936, (int64_t)80 << 30), 5888);
    ck_assert_int_eq(k->logits_rows(151936, (int64_t)8 << 30), 832);
    ck_assert_int_eq(rp_device_kernel_ops(RP_DEVICE_CPU)->logits_rows(151936, (int64_t)80 << 30), 64);
    ck_assert_uint_eq(k->column_sum_scratch_floats(2048), z->column_sum_scratch_floats(2048));
    ck_assert_uint_eq(k->rope_table_floats(4096, 64), z->rope_table_floats(4096, 64));
    rp_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.hidden_size = 2048, cfg.intermediate_size = 6144, cfg.num_hidden_layers = 28;
    cfg.num_attention_heads = 16, cfg.num_key_value_heads = 8, cfg.head_dim = 128;
    cfg.vocab_size = 151936, cfg.rms_norm_eps = 1e-6, cfg.rope_theta = 1e6;
    cfg.arch = RP_ARCH_QWEN3, cfg.tie_word_embeddings = 1, cfg.max_position_embeddings = 40960;
    size_t wk = rp_model_workspace_floats(k, RP_BF16, &cfg, 1, 4096);
    ck_assert_uint_gt(wk, 0);
    ck_assert_uint_eq(wk, rp_model_workspace_floats(z, RP_BF16, &cfg, 1, 4096));
    ck_assert_uint_eq(rp_block_saved_floats(k, RP_BF16, &cfg, 1, 4096),
                      rp_block_saved_floats(z, RP_BF16, &cfg, 1, 4096));
}
END_TEST

static Suite *device_suite(void)
{
    Suite *s = suite_create("device_probe");
    TCase *tc = tcase_create("probe");
    tcase_add_test(tc, cpu_always_present);
    tcase_add_test(tc, cuda_present_or_clean_error);
    tcase_add_test(tc, auto_falls_back_and_bad_names_rejected);
    tcase_add_test(tc, cuda_executor_sized_alike_in_every_build);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(device_suite, "serial")
