/* Proves: the layer layout names every tensor as transformers does, with
 * HF shapes, aligned non-overlapping offsets and weight decay exactly on
 * matrices; tied embeddings drop lm_head from the head; rp_block_offsets
 * agrees with the descriptors; initialisation is normal(0, range) from the
 * counter RNG keyed by the full name (so independent of who computes it),
 * ones for norms, zeros for biases and padding, and any split of a layer
 * into ranges (a node's ranks each drawing one) writes the same bits; bad configurations are
 * errors naming the field; the planner's cost closed forms, with LoRA too,
 * a dense MLP over several chunks costing its backward's remade gate and
 * up GEMMs (and adapters) from the chunk rule's threshold on.
 * Mixture of experts (qwen3_moe): an expert block holds the router and
 * E x 3 per-expert tensors under transformers' names and shapes, in
 * order, at the offsets rp_block_offsets gives (expert e's gate, up, down
 * at experts + (3e + 0, 1, 2) x expert_stride), a dense block of the same
 * model its MLP; its cost counts k experts' FLOPs and every expert's
 * weights. LoRA on it (issue 15): an expert block's adapters are q/k/v/o's,
 * the router's (mlp.gate, [r, H] and [E, r]) and one per expert and
 * projection under PEFT's per-expert names, at the offsets and expert
 * stride rp_lora_offsets gives, without overlap; a dense block of the same
 * model has its seven; the cost counts the router's adapter and k
 * experts', and the experts' rows (gate, up, their adapters, the down
 * adapters' A) the backward always makes again; dropout is refused on the experts only; a dense model never
 * gets a router adapter (all-linear is its seven projections, the router
 * alone is no target). gpt-oss (issue 35): every block holds q/k/v/o with
 * biases, its sinks (1-D, no decay, drawn like the matrices), the router's
 * weight and bias and each expert's gate/up/down weights and biases under
 * roundpipe's own names at the offsets rp_block_offsets gives; a sliding
 * block's attention costs W keys a query at most; LoRA and a kernel table
 * not computing in fp32 in host memory (CUDA's) are refused naming why; a
 * sliding block with sliding_window 0 is refused naming the field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "io/config_lora.h"
#include "kernels/cpu/ops.h"
#include "model/layers.h"
#include "model/layout.h"
#include "model/token_tiles.h"
#include "rp_check.h"

static rp_model_config cfg_qwen(void)
{
    rp_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = RP_ARCH_QWEN3;
    c.hidden_size = 24;
    c.intermediate_size = 40;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.vocab_size = 37;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1e6;
    c.initializer_range = 0.05;
    c.attention_bias = 1;
    c.tie_word_embeddings = 0;
    return c;
}

START_TEST(names_shapes_offsets)
{
    rp_model_config c = cfg_qwen();
    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(&c, &L, &n, NULL), RP_OK);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(L[0].kind, RP_LAYER_EMBED);
    ck_assert_str_eq(L[0].params[0].name, "model.embed_tokens.weight");
    ck_assert_int_eq(L[0].params[0].shape[0], 37);
    ck_assert_int_eq(L[0].params[0].shape[1], 24);
    /* transformers' names for Qwen3 with attention_bias (o_proj has one) */
    static const struct { const char *suffix; int64_t d0, d1; int ndim; } want[] = {
        {"input_layernorm.weight", 24, 1, 1},      {"self_attn.q_proj.weight", 32, 24, 2},
        {"self_attn.q_proj.bias", 32, 1, 1},       {"self_attn.k_proj.weight", 8, 24, 2},
        {"self_attn.k_proj.bias", 8, 1, 1},        {"self_attn.v_proj.weight", 8, 24, 2},
        {"self_attn.v_proj.bias", 8, 1, 1},        {"self_attn.o_proj.weight", 24, 32, 2},
        {"self_attn.o_proj.bias", 24, 1, 1},       {"self_attn.q_norm.weight", 8, 1, 1},
        {"self_attn.k_norm.weight", 8, 1, 1},      {"post_attention_layernorm.weight", 24, 1, 1},
        {"mlp.gate_proj.weight", 40, 24, 2},       {"mlp.up_proj.weight", 40, 24, 2},
        {"mlp.down_proj.weight", 24, 40, 2}};
    for (int b = 0; b < 3; b++) {
        const rp_layer_desc *d = &L[1 + b];
        ck_assert_int_eq(d->kind, RP_LAYER_BLOCK);
        ck_assert_int_eq(d->block, b);
        ck_assert_int_eq(d->nparams, 15);
        size_t end = 0;
        for (int i = 0; i < 15; i++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s", b, want[i].suffix);
            const rp_param_desc *p = &d->params[i];
            ck_assert_str_eq(p->name, name);
            ck_assert_int_eq(p->ndim, want[i].ndim);
            ck_assert_int_eq(p->shape[0], want[i].d0);
            ck_assert_int_eq(p->shape[1], want[i].d1);
            ck_assert_uint_eq(p->numel, (size_t)(want[i].d0 * want[i].d1));
            ck_assert_int_eq(p->decay, want[i].ndim == 2);
            ck_assert_uint_eq(p->offset % RP_PARAM_ALIGN, 0);
            ck_assert_uint_ge(p->offset, end); /* in order, no overlap */
            end = p->offset + p->numel;
            ck_assert_ptr_eq(rp_layer_find_param(d, name), p);
        }
        ck_assert_uint_ge(d->numel, end);
        ck_assert_uint_lt(d->numel, end + RP_PARAM_ALIGN);
    }
    rp_block_offsets off;
    rp_block_offsets_get(&c, 0, &off);
    ck_assert_uint_eq(off.wo, rp_layer_find_param(&L[2], "model.layers.1.self_attn.o_proj.weight")->offset);
    ck_assert_uint_eq(off.bo, rp_layer_find_param(&L[2], "model.layers.1.self_attn.o_proj.bias")->offset);
    ck_assert_uint_eq(off.k_norm, rp_layer_find_param(&L[2], "model.layers.1.self_attn.k_norm.weight")->offset);
    ck_assert_uint_eq(off.numel, L[2].numel);
    ck_assert_int_eq(L[4].kind, RP_LAYER_HEAD);
    ck_assert_int_eq(L[4].nparams, 2);
    ck_assert_str_eq(L[4].params[0].name, "model.norm.weight");
    ck_assert_str_eq(L[4].params[1].name, "lm_head.weight");
    ck_assert_int_eq(L[4].params[1].decay, 1);
    free(L);

    /* Llama without bias: no biases, no q/k norms; tied: no lm_head */
    c.arch = RP_ARCH_LLAMA;
    c.attention_bias = 0;
    c.tie_word_embeddings = 1;
    ck_assert_int_eq(rp_model_layout(&c, &L, &n, NULL), RP_OK);
    ck_assert_int_eq(L[1].nparams, 9);
    ck_assert_ptr_null(rp_layer_find_param(&L[1], "model.layers.0.self_attn.q_norm.weight"));
    ck_assert_ptr_null(rp_layer_find_param(&L[1], "model.layers.0.self_attn.o_proj.bias"));
    ck_assert_int_eq(L[n - 1].nparams, 1);
    rp_block_offsets_get(&c, 0, &off);
    ck_assert(off.bq == SIZE_MAX && off.bo == SIZE_MAX && off.q_norm == SIZE_MAX);
    free(L);
}
END_TEST

START_TEST(init_values)
{
    rp_model_config c = cfg_qwen();
    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(&c, &L, &n, NULL), RP_OK);
    for (int l = 0; l < n; l++) {
        float *p = malloc(L[l].numel * sizeof(float));
        for (size_t i = 0; i < L[l].numel; i++)
            p[i] = 123.0f; /* padding must come out zero */
        rp_layer_init(&c, &L[l], 99, p);
        size_t covered = 0;
        for (int k = 0; k < L[l].nparams; k++) {
            const rp_param_desc *d = &L[l].params[k];
            uint64_t stream = rp_rng_stream_id(d->name);
            covered += d->numel;
            double s2 = 0;
            for (size_t i = 0; i < d->numel; i++) {
                float v = p[d->offset + i];
                if (d->ndim == 2) {
                    ck_assert_float_eq(v, 0.05f * rp_rng_normal(99, stream, i));
                    s2 += (double)v * v;
                } else if (strstr(d->name, ".bias")) {
                    ck_assert_float_eq(v, 0.0f);
                } else {
                    ck_assert_float_eq(v, 1.0f);
                }
            }
            if (d->ndim == 2 && d->numel >= 256) {
                double sd = sqrt(s2 / (double)d->numel);
                ck_assert_msg(fabs(sd - 0.05) < 0.01, "%s: std %g", d->name, sd);
            }
        }
        size_t zeros = 0;
        for (size_t i = 0; i < L[l].numel; i++)
            zeros += p[i] == 0.0f;
        ck_assert_uint_ge(zeros, L[l].numel - covered); /* padding cleared */
        for (size_t i = 0; i < L[l].numel; i++)
            ck_assert(p[i] != 123.0f);
        free(p);
    }
    free(L);
}
END_TEST

/* Every element of layer L written by ranges [b[i], b[i + 1]) in the
 * order given equals rp_layer_init's, to the bit (garbage before). */
static void ranges_equal_whole(const rp_model_config *c, const rp_layer_desc *L,
                               const size_t *b, int nb, int reverse)
{
    float *whole = malloc(L->numel * sizeof(float)), *parts = malloc(L->numel * sizeof(float));
    for (size_t i = 0; i < L->numel; i++)
        parts[i] = 123.0f;
    rp_layer_init(c, L, 7, whole);
    for (int k = 0; k + 1 < nb; k++) {
        const int i = reverse ? nb - 2 - k : k;
        rp_layer_init_range(c, L, 7, parts, b[i], b[i + 1]);
    }
    ck_assert_msg(!memcmp(whole, parts, L->numel * sizeof(float)), "%s...: %d ranges differ",
                  L->nparams ? L->params[0].name : "?", nb - 1);
    free(whole);
    free(parts);
}

/* Any split of a layer into ranges (as the ranks of a node split a random
 * start) writes rp_layer_init's bits: matrices, norms, biases, gpt-oss's
 * sinks, LoRA's A and B and padding, ranges that cut tensors anywhere, in
 * either order; hi beyond the layer is clipped, lo >= hi writes nothing. */
START_TEST(init_in_any_ranges)
{
    rp_model_config cs[3] = {cfg_qwen(), cfg_qwen(), cfg_qwen()};
    cs[1].lora.rank = 2;
    cs[1].lora.alpha = 4;
    cs[1].lora.targets = RP_LORA_ATTENTION_PROJS | 1u << RP_LORA_DOWN_PROJ;
    cs[2].arch = RP_ARCH_GPT_OSS;
    cs[2].moe.num_experts = 3;
    cs[2].moe.num_experts_per_tok = 2;
    cs[2].moe.moe_intermediate_size = 10;
    cs[2].moe.decoder_sparse_step = 1;
    cs[2].moe.norm_topk_prob = 1;
    cs[2].oss.swiglu_limit = 7.0;
    cs[2].oss.swiglu_alpha = 1.702;
    cs[2].oss.sliding_window = 4;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int ci = 0; ci < 3; ci++) {
        rp_layer_desc *L;
        int n;
        rp_error err = {0};
        ck_assert_msg(rp_model_layout(&cs[ci], &L, &n, &err) == RP_OK, "%s", err.msg);
        for (int l = 0; l < n; l++) {
            const size_t N = L[l].numel;
            for (int parts = 1; parts <= 5; parts++) { /* as init_random_part splits */
                size_t b[6];
                for (int k = 0; k <= parts; k++)
                    b[k] = N * (size_t)k / (size_t)parts;
                ranges_equal_whole(&cs[ci], &L[l], b, parts + 1, parts % 2);
            }
            size_t b[9] = {0}; /* random cuts, one range past the end */
            for (int k = 1; k < 8; k++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                b[k] = b[k - 1] + (k == 7 ? N + 5 : x % (N / 4 + 1));
            }
            for (int k = 1; k < 8; k++)
                if (b[k] > N + 5)
                    b[k] = N + 5;
            ranges_equal_whole(&cs[ci], &L[l], b, 8, 0);
            float *w = malloc(N * sizeof(float));
            for (size_t i = 0; i < N; i++)
                w[i] = 123.0f;
            rp_layer_init_range(&cs[ci], &L[l], 7, w, N / 2, N / 2);
            rp_layer_init_range(&cs[ci], &L[l], 7, w, N, N + 9);
            for (size_t i = 0; i < N; i++)
                ck_assert(w[i] == 123.0f);
            free(w);
        }
        free(L);
    }
}
END_TEST

START_TEST(bad_configs_name_the_field)
{
    rp_model_config c;
    rp_error err;
    rp_layer_desc *L = NULL;
    int n = 0;
#define EXPECT(stmt, field)                                                               \
    do {                                                                                  \
        c = cfg_qwen();                                                                   \
        stmt;                                                                             \
        memset(&err, 0, sizeof err);                                                      \
        ck_assert_int_ne(rp_model_layout(&c, &L, &n, &err), RP_OK);                       \
        ck_assert_msg(strstr(err.msg, field) != NULL, "message '%s' lacks '%s'", err.msg, \
                      field);                                                             \
    } while (0)
    EXPECT(c.num_key_value_heads = 3, "num_key_value_heads");
    EXPECT(c.head_dim = 7, "head_dim");
    EXPECT(c.head_dim = 4096, "at most 2048"); /* the RoPE frequencies live on the stack */
    EXPECT(c.hidden_size = 0, "hidden_size");
    EXPECT(c.vocab_size = -5, "vocab_size");
    EXPECT(c.rms_norm_eps = 0, "rms_norm_eps");
    EXPECT(c.rope_theta = -1, "rope_theta");
    EXPECT(c.num_hidden_layers = -1, "num_hidden_layers");
    EXPECT((c.rope_scaling.type = RP_ROPE_LLAMA3, c.rope_scaling.factor = 8,
            c.rope_scaling.low_freq_factor = 4, c.rope_scaling.high_freq_factor = 1,
            c.rope_scaling.original_max_position_embeddings = 8192),
           "rope_scaling");
#undef EXPECT
}
END_TEST

START_TEST(cost_closed_forms)
{
    rp_model_config c = cfg_qwen();
    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(&c, &L, &n, NULL), RP_OK);
    rp_layer_flops k;
    const int64_t S = 512;
    rp_layer_flops_get(&c, &L[1], 1, S, &k);
    /* H 24, QD 32, KD 8, I 40 */
    double gemm = 2.0 * 24 * (32 + 16) + 2.0 * 32 * 24 + 6.0 * 24 * 40;
    double attn = 2.0 * 32 * (S + 1);
    ck_assert_double_eq(k.fwd_flops_per_token, gemm + attn);
    ck_assert_double_eq(k.bwd_flops_per_token, gemm + attn + 2 * gemm + 2.5 * attn);
    ck_assert_uint_eq(k.param_numel, L[1].numel);
    ck_assert_uint_eq(k.act_floats_per_token, 24);
    /* an MLP over several chunks keeps none of g, u, m: the backward makes
     * them again, the gate and up GEMMs (2 x 2 x 24 x 40 a token) once
     * more; by default a microbatch of up to 8192 tokens is one chunk */
    const double remade = 4.0 * 24 * 40;
    rp_layer_flops_get(&c, &L[1], 16, S, &k);
    ck_assert_double_eq(k.bwd_flops_per_token, gemm + attn + 2 * gemm + 2.5 * attn);
    rp_layer_flops_get(&c, &L[1], 17, S, &k);
    ck_assert_double_eq(k.bwd_flops_per_token, gemm + attn + 2 * gemm + 2.5 * attn + remade);
    ck_assert_double_eq(k.fwd_flops_per_token, gemm + attn);
    rp_token_tiles_set(&c, 16, 256); /* chunks of 256 tokens */
    rp_layer_flops_get(&c, &L[1], 1, S, &k);
    ck_assert_double_eq(k.bwd_flops_per_token, gemm + attn + 2 * gemm + 2.5 * attn + remade);
    rp_layer_flops_get(&c, &L[1], 1, 256, &k);
    ck_assert_double_eq(k.bwd_flops_per_token,
                        3 * gemm + 3.5 * 2.0 * 32 * 257); /* one chunk: kept */
    rp_layer_flops_get(&c, &L[n - 1], 1, S, &k);
    ck_assert_double_eq(k.fwd_flops_per_token, 2.0 * 24 * 37);
    rp_layer_flops_get(&c, &L[0], 1, S, &k);
    ck_assert_double_eq(k.fwd_flops_per_token, 0);
    ck_assert_uint_eq(k.param_numel, 37 * 24 + (16 - (37 * 24) % 16) % 16);
    free(L);
}
END_TEST

/* LoRA's planner costs (what `roundpipe train` plans a LoRA run with):
 * rank 2 on q_proj, o_proj and down_proj of the H 24, QD 32, I 40 block:
 * adapters 2 (24 + 32) + 2 (32 + 24) + 2 (40 + 24) = 352 parameters (the
 * trainable layer, each A and B a multiple of 16 here), forward FLOPs
 * the base's + 2 x 352, backward the recompute + the frozen GEMMs' input
 * gradients only + 4 x 352 + 2.5 attention; the head without its weight
 * gradient; the embedding frozen, nothing to update. */
START_TEST(lora_cost_closed_forms)
{
    rp_model_config c = cfg_qwen();
    c.lora.rank = 2;
    c.lora.alpha = 2;
    c.lora.targets = 1u << RP_LORA_Q_PROJ | 1u << RP_LORA_O_PROJ | 1u << RP_LORA_DOWN_PROJ;
    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(&c, &L, &n, NULL), RP_OK);
    rp_layer_flops k;
    const int64_t S = 512;
    rp_layer_flops_get(&c, &L[1], 1, S, &k);
    double gemm = 2.0 * 24 * (32 + 16) + 2.0 * 32 * 24 + 6.0 * 24 * 40;
    double attn = 2.0 * 32 * (S + 1), adapter = 2.0 * 352;
    ck_assert_double_eq(k.fwd_flops_per_token, gemm + adapter + attn);
    ck_assert_double_eq(k.bwd_flops_per_token,
                        (gemm + adapter + attn) + gemm + 2 * adapter + 2.5 * attn);
    ck_assert_uint_eq(k.param_numel, 352);
    /* over chunks the backward makes g and u again (the gate and up GEMMs)
     * and the down adapter's A x (2 x 40 weights) */
    rp_token_tiles_set(&c, 16, 256);
    rp_layer_flops_get(&c, &L[1], 1, S, &k);
    ck_assert_double_eq(k.bwd_flops_per_token, (gemm + adapter + attn) + gemm + 2 * adapter +
                                                   2.5 * attn + 4.0 * 24 * 40 + 2.0 * 2 * 40);
    /* with gate and up adapted, their adapters whole: 2 x 2 (24 + 40) more */
    c.lora.targets |= 1u << RP_LORA_GATE_PROJ | 1u << RP_LORA_UP_PROJ;
    free(L);
    ck_assert_int_eq(rp_model_layout(&c, &L, &n, NULL), RP_OK);
    const double adapter7 = adapter + 2.0 * 2 * 2 * (24 + 40);
    rp_layer_flops_get(&c, &L[1], 1, S, &k);
    ck_assert_double_eq(k.fwd_flops_per_token, gemm + adapter7 + attn);
    ck_assert_double_eq(k.bwd_flops_per_token,
                        (gemm + adapter7 + attn) + gemm + 2 * adapter7 + 2.5 * attn +
                            4.0 * 24 * 40 + 2.0 * (2 * 40 + 2 * 2 * (24 + 40)));
    rp_token_tiles_set(&c, 0, 0);
    rp_layer_flops_get(&c, &L[1], 1, S, &k);
    ck_assert_double_eq(k.bwd_flops_per_token,
                        (gemm + adapter7 + attn) + gemm + 2 * adapter7 + 2.5 * attn);
    rp_layer_flops_get(&c, &L[n - 1], 1, S, &k);
    ck_assert_double_eq(k.fwd_flops_per_token, 2.0 * 24 * 37);
    ck_assert_double_eq(k.bwd_flops_per_token, 2 * (2.0 * 24 * 37));
    ck_assert_uint_eq(k.param_numel, 0);
    rp_layer_flops_get(&c, &L[0], 1, S, &k);
    ck_assert(k.fwd_flops_per_token == 0 && k.bwd_flops_per_token == 0 && k.param_numel == 0);
    free(L);
}
END_TEST

START_TEST(gpt_oss_layout_and_checks)
{
    rp_model_config c = cfg_qwen();
    c.arch = RP_ARCH_GPT_OSS;
    c.moe.num_experts = 3;
    c.moe.num_experts_per_tok = 2;
    c.moe.moe_intermediate_size = 10; /* padded to 16 */
    c.moe.decoder_sparse_step = 1;
    c.moe.norm_topk_prob = 1;
    c.oss.swiglu_limit = 7.0;
    c.oss.swiglu_alpha = 1.702;
    c.oss.sliding_window = 4;
    c.oss.sliding[0] = 1u << 0; /* block 0 slides, 1 and 2 attend in full */
    rp_layer_desc *L;
    int n;
    rp_error err = {0};
    ck_assert_msg(rp_model_layout(&c, &L, &n, &err) == RP_OK, "%s", err.msg);
    rp_block_offsets o;
    rp_block_offsets_get(&c, 0, &o);
    ck_assert_uint_eq(o.numel, L[1].numel);
    ck_assert(o.w_gate == SIZE_MAX && o.q_norm == SIZE_MAX && o.bo != SIZE_MAX);
    const rp_param_desc *d = rp_layer_find_param(&L[1], "model.layers.0.self_attn.sinks");
    ck_assert_ptr_nonnull(d);
    ck_assert(d->offset == o.sinks && d->ndim == 1 && d->shape[0] == 4 && !d->decay);
    d = rp_layer_find_param(&L[1], "model.layers.0.mlp.router.bias");
    ck_assert(d && d->offset == o.router_bias && d->shape[0] == 3 && !d->decay);
    d = rp_layer_find_param(&L[1], "model.layers.0.mlp.router.weight");
    ck_assert(d && d->offset == o.router && d->shape[0] == 3 && d->shape[1] == 24 && d->decay);
    static const char *const part[3] = {"gate", "up", "down"};
    for (int e = 0; e < 3; e++)
        for (int p = 0; p < 3; p++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.%s.weight", e, part[p]);
            d = rp_layer_find_param(&L[1], name);
            ck_assert_msg(d != NULL, "%s missing", name);
            ck_assert_uint_eq(d->offset, o.experts + (size_t)(3 * e + p) * o.expert_stride);
            ck_assert_int_eq(d->shape[0], p == 2 ? 24 : 10);
            snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.%s.bias", e, part[p]);
            d = rp_layer_find_param(&L[1], name);
            ck_assert_msg(d != NULL, "%s missing", name);
            ck_assert_uint_eq(d->offset, o.expert_bias + (size_t)e * o.expert_bias_stride +
                                             (size_t)p * 16);
            ck_assert(d->ndim == 1 && d->shape[0] == (p == 2 ? 24 : 10) && !d->decay);
        }
    /* the sinks are drawn, not ones */
    float *w = calloc(L[1].numel, sizeof *w);
    rp_layer_init(&c, &L[1], 5, w);
    ck_assert(w[o.sinks] != w[o.sinks + 1] && w[o.sinks] != 1.0f && w[o.router_bias] == 0.0f);
    free(w);
    /* a window of 4 over 16 tokens: (4*5/2 + 12*4) / 16 keys a query, not 17/2 */
    rp_layer_flops slide, full;
    rp_layer_flops_get(&c, &L[1], 1, 16, &slide);
    rp_layer_flops_get(&c, &L[2], 1, 16, &full);
    const double QD = 32;
    ck_assert_double_eq_tol(full.fwd_flops_per_token - slide.fwd_flops_per_token,
                            4 * QD * (17.0 / 2 - (10.0 + 48.0) / 16), 1e-9);
    free(L);
    /* the CPU table runs it; a bf16 device table does not when the run
     * turns the gpt-oss path off (RP_DISABLE_CUDA_PATHS) */
    ck_assert_int_eq(rp_model_ops_check(&c, &rp_kernel_ops_cpu, 0, &err), RP_OK);
    rp_kernel_ops dev = rp_kernel_ops_cpu;
    dev.name = "cuda";
    dev.compute_dtype = RP_BF16;
    dev.host_addressable = 0;
    ck_assert_int_eq(rp_model_ops_check(&c, &dev, 0, &err), RP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "gpt-oss on cuda executors") && strstr(err.msg, "--device cpu") &&
                  strstr(err.msg, "RP_DISABLE_CUDA_PATHS names gpt-oss"), "%s", err.msg);
    ck_assert_int_eq(rp_model_ops_check(&c, &dev, 1, &err), RP_OK);
    rp_model_config q = cfg_qwen();
    ck_assert_int_eq(rp_model_ops_check(&q, &dev, 0, &err), RP_OK);
    /* LoRA: all-linear is the attention's four projections (PEFT's
     * all-linear: the Linear modules); the router and the experts are
     * PEFT's target_parameters, which map to gate_proj's (gate_up_proj:
     * per expert A [r, H], B [2I, r]), down_proj's and the router's
     * adapters; up_proj (gate_up_proj's) and the Linear names of the router
     * and experts are refused naming why */
    rp_model_config l = c;
    l.lora.rank = 2;
    l.lora.alpha = 4;
    ck_assert_uint_eq(rp_lora_model_targets(&l, RP_LORA_ALL_LINEAR), RP_LORA_ATTENTION_PROJS);
    ck_assert_uint_eq(rp_lora_model_targets(&l, RP_LORA_ATTENTION_PROJS | RP_LORA_PARAMS),
                      RP_LORA_GPT_OSS_PROJS);
    ck_assert_uint_eq(rp_lora_model_targets(&l, RP_LORA_GPT_OSS_PROJS), RP_LORA_GPT_OSS_PROJS);
    ck_assert_ptr_nonnull(rp_lora_refused_targets(&l, 1u << RP_LORA_GATE_PROJ));
    ck_assert_ptr_null(rp_lora_refused_targets(&l, RP_LORA_PARAMS));
    const int64_t E = c.moe.num_experts, I = c.moe.moe_intermediate_size, H = c.hidden_size;
    for (int p = 0; p < RP_LORA_NPROJ; p++) {
        l.lora.targets = 1u << p;
        const int taken = (RP_LORA_GPT_OSS_PROJS >> p) & 1u;
        ck_assert_int_eq(rp_model_layout(&l, &L, &n, &err), taken ? RP_OK : RP_ERR_UNSUPPORTED);
        if (!taken) {
            ck_assert_msg(strstr(err.msg, "target_parameters") &&
                              strstr(err.msg, "mlp.experts.gate_up_proj"), "%s", err.msg);
            continue;
        }
        const int per_expert = p == RP_LORA_GATE_PROJ || p == RP_LORA_DOWN_PROJ;
        for (int b = 1; b <= 3; b++) /* A and B of the projection (each expert's) per block */
            ck_assert_int_eq(L[b].nparams, per_expert ? 2 * (int)E : 2);
        if (p == RP_LORA_GATE_PROJ) {
            ck_assert_str_eq(L[1].params[1].name, "base_model.model.model.layers.0.mlp.experts.0."
                                                  "gate_up_proj.lora_B.weight");
            ck_assert_int_eq(L[1].params[0].shape[1], H);
            ck_assert_int_eq(L[1].params[1].shape[0], 2 * I);
        }
        if (p == RP_LORA_ROUTER)
            ck_assert_str_eq(L[1].params[0].name,
                             "base_model.model.model.layers.0.mlp.router.lora_A.weight");
        free(L);
    }
    /* PEFT's ParamWrapper takes no dropout: refused on those, not on q/k/v/o */
    l.lora.dropout = 0.1;
    l.lora.targets = RP_LORA_ATTENTION_PROJS | (1u << RP_LORA_ROUTER);
    ck_assert_int_eq(rp_model_layout(&l, &L, &n, &err), RP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "dropout 0.1 on gpt-oss's target_parameters") &&
                  strstr(err.msg, "ParamWrapper"), "%s", err.msg);
    l.lora.targets = RP_LORA_ATTENTION_PROJS;
    ck_assert_int_eq(rp_model_layout(&l, &L, &n, &err), RP_OK);
    free(L);
    l.lora.dropout = 0;
    l.lora.targets = RP_LORA_ATTENTION_PROJS;
    ck_assert_int_eq(rp_model_layout(&l, &L, &n, &err), RP_OK);
    ck_assert_str_eq(L[1].params[0].name,
                     "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    ck_assert_int_eq(L[1].nparams, 8);
    free(L);
    rp_model_config z = c;
    z.oss.sliding_window = 0;
    ck_assert_int_eq(rp_model_layout(&z, &L, &n, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "'sliding_window'"), "%s", err.msg);
}
END_TEST

START_TEST(moe_layout_and_cost)
{
    rp_model_config c = cfg_qwen();
    c.arch = RP_ARCH_QWEN3_MOE;
    c.moe.num_experts = 5;
    c.moe.num_experts_per_tok = 2;
    c.moe.moe_intermediate_size = 6; /* 6 x 24 = 144: a multiple of 16 */
    c.moe.decoder_sparse_step = 1;
    c.moe.mlp_only[0] = 1u << 1; /* block 1 dense */
    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(&c, &L, &n, NULL), RP_OK);
    /* attention and norms, then the router and 5 x 3 experts, or the dense MLP */
    ck_assert_int_eq(L[1].nparams, L[2].nparams - 3 + 1 + 15);
    ck_assert_ptr_nonnull(rp_layer_find_param(&L[1], "model.layers.0.self_attn.k_norm.weight"));
    ck_assert_ptr_nonnull(rp_layer_find_param(&L[2], "model.layers.1.mlp.down_proj.weight"));
    rp_block_offsets moe, dense;
    rp_block_offsets_get(&c, 0, &moe);
    rp_block_offsets_get(&c, 1, &dense);
    ck_assert(moe.w_gate == SIZE_MAX && dense.router == SIZE_MAX && dense.experts == SIZE_MAX);
    ck_assert_uint_eq(moe.numel, L[1].numel);
    ck_assert_uint_eq(dense.numel, L[2].numel);
    const rp_param_desc *r = rp_layer_find_param(&L[1], "model.layers.0.mlp.gate.weight");
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->offset, moe.router);
    ck_assert(r->shape[0] == 5 && r->shape[1] == 24 && r->decay);
    static const char *const part[3] = {"gate_proj", "up_proj", "down_proj"};
    size_t end = r->offset + r->numel;
    for (int e = 0; e < 5; e++)
        for (int p = 0; p < 3; p++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.%s.weight", e, part[p]);
            const rp_param_desc *d = rp_layer_find_param(&L[1], name);
            ck_assert_msg(d != NULL, "%s missing", name);
            ck_assert_uint_eq(d->offset, moe.experts + (size_t)(3 * e + p) * moe.expert_stride);
            ck_assert_int_eq(d->shape[0], p == 2 ? 24 : 6);
            ck_assert_int_eq(d->shape[1], p == 2 ? 6 : 24);
            ck_assert_uint_ge(d->offset, end);
            end = d->offset + d->numel;
        }
    /* cost: attention projections, the router and k = 2 experts per token;
     * the backward makes the experts' rows again from the routing (their
     * gate and up GEMMs, 2 x k x 2 x H x I) at any length */
    rp_layer_flops f;
    rp_layer_flops_get(&c, &L[1], 1, 10, &f);
    const double H = 24, QD = 32, KD = 8, E = 5, k = 2, I = 6;
    const double gemm = 2 * H * (QD + 2 * KD) + 2 * QD * H + 2 * H * E + k * 6 * H * I;
    const double remade = 2 * k * 2 * H * I;
    ck_assert(fabs(f.fwd_flops_per_token - (gemm + 2 * QD * 11)) < 1e-9);
    ck_assert(fabs(f.bwd_flops_per_token -
                   (f.fwd_flops_per_token + 2 * gemm + 2.5 * 2 * QD * 11 + remade)) < 1e-9);
    ck_assert_uint_eq(f.param_numel, L[1].numel); /* every expert's weights travel */
    free(L);
    /* LoRA on experts: q, k, v, o, the router and 5 x 3 experts' A and B */
    c.lora.rank = 4;
    c.lora.alpha = 8;
    c.lora.targets = RP_LORA_ALL_LINEAR;
    rp_error err = {0};
    ck_assert_msg(rp_model_layout(&c, &L, &n, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(L[1].nparams, 2 * (4 + 1 + 15));
    ck_assert_int_eq(L[2].nparams, 2 * 7);
    rp_lora_offsets lo, ld;
    rp_lora_offsets_get(&c, 0, &lo);
    rp_lora_offsets_get(&c, 1, &ld);
    ck_assert_uint_eq(lo.numel, L[1].numel);
    ck_assert_uint_eq(ld.numel, L[2].numel);
    ck_assert(ld.a[RP_LORA_ROUTER] == SIZE_MAX && ld.b[RP_LORA_ROUTER] == SIZE_MAX);
    for (int p = 0; p < RP_LORA_NPROJ; p++)
        ck_assert_uint_eq(ld.expert_stride[p], 0);
    static const char *const pn[RP_LORA_NPROJ] = {"self_attn.q_proj", "self_attn.k_proj",
                                                  "self_attn.v_proj", "self_attn.o_proj",
                                                  "gate_proj", "up_proj", "down_proj",
                                                  "mlp.gate"};
    const int64_t feat[RP_LORA_NPROJ][2] = {{24, 32}, {24, 8}, {24, 8}, {32, 24},
                                            {24, 6},  {24, 6}, {6, 24}, {24, 5}};
    for (int p = 0; p < RP_LORA_NPROJ; p++) {
        const int per = (RP_LORA_EXPERT_PROJS >> p) & 1u;
        ck_assert_uint_eq(lo.expert_stride[p] != 0, per);
        for (int e = 0; e < (per ? 5 : 1); e++)
            for (int b = 0; b < 2; b++) {
                char name[128];
                if (per)
                    snprintf(name, sizeof name, "base_model.model.model.layers.0.mlp.experts.%d."
                             "%s.lora_%c.weight", e, pn[p], b ? 'B' : 'A');
                else
                    snprintf(name, sizeof name, "base_model.model.model.layers.0.%s.lora_%c."
                             "weight", pn[p], b ? 'B' : 'A');
                const rp_param_desc *d = rp_layer_find_param(&L[1], name);
                ck_assert_msg(d != NULL, "%s missing", name);
                ck_assert_uint_eq(d->offset, (b ? lo.b[p] : lo.a[p]) +
                                                 (size_t)e * lo.expert_stride[p]);
                ck_assert_int_eq(d->shape[0], b ? feat[p][1] : 4);
                ck_assert_int_eq(d->shape[1], b ? 4 : feat[p][0]);
            }
    }
    for (int i = 1; i < L[1].nparams; i++) /* in order, without overlap */
        ck_assert_uint_ge(L[1].params[i].offset,
                          L[1].params[i - 1].offset + L[1].params[i - 1].numel);
    ck_assert_ptr_nonnull(rp_layer_find_param(
        &L[2], "base_model.model.model.layers.1.mlp.gate_proj.lora_B.weight"));
    /* cost: the router's adapter and k = 2 experts' per token; the
     * backward makes the experts' gate and up adapters again and the down
     * adapters' A x (not the router's: the routing is kept) */
    const double rk = 4;
    const double adapter_moe = 2 * rk * ((H + QD) + 2 * (H + KD) + (QD + H) + (H + E) +
                                        k * (2 * (H + I) + (I + H)));
    const double remade_adapter = 2 * rk * k * (2 * (H + I) + I);
    const double attn = 2 * QD * 11;
    rp_layer_flops_get(&c, &L[1], 1, 10, &f);
    ck_assert(fabs(f.fwd_flops_per_token - (gemm + adapter_moe + attn)) < 1e-9);
    ck_assert(fabs(f.bwd_flops_per_token - (f.fwd_flops_per_token + gemm + 2 * adapter_moe +
                                            2.5 * attn + remade + remade_adapter)) < 1e-9);
    ck_assert_uint_eq(f.param_numel, L[1].numel);
    /* the dense block of the same model keeps its MLP at 10 tokens */
    const double Id = 40, gemm_dense = 2 * H * (QD + 2 * KD) + 2 * QD * H + 6 * H * Id;
    const double adapter_dense =
        2 * rk * ((H + QD) + 2 * (H + KD) + (QD + H) + 2 * (H + Id) + (Id + H));
    rp_layer_flops_get(&c, &L[2], 1, 10, &f);
    ck_assert(fabs(f.fwd_flops_per_token - (gemm_dense + adapter_dense + attn)) < 1e-9);
    ck_assert(fabs(f.bwd_flops_per_token -
                   (f.fwd_flops_per_token + gemm_dense + 2 * adapter_dense + 2.5 * attn)) < 1e-9);
    free(L);
    /* dropout: refused on the experts, taken on the router and attention */
    c.lora.dropout = 0.1;
    ck_assert_int_eq(rp_model_layout(&c, &L, &n, &err), RP_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "dropout 0.1 on a mixture of experts' experts"), "%s",
                  err.msg);
    c.lora.targets = 1u << RP_LORA_Q_PROJ | 1u << RP_LORA_ROUTER;
    ck_assert_msg(rp_model_layout(&c, &L, &n, &err) == RP_OK, "%s", err.msg);
    ck_assert_int_eq(L[1].nparams, 4);
    ck_assert_int_eq(L[2].nparams, 2); /* the dense block: q_proj's */
    free(L);
    /* a dense model: no router adapter, and the router alone adapts nothing */
    rp_model_config d = cfg_qwen();
    d.lora = c.lora;
    d.lora.dropout = 0;
    d.lora.targets = RP_LORA_ALL_LINEAR;
    ck_assert_int_eq(rp_model_layout(&d, &L, &n, NULL), RP_OK);
    ck_assert_int_eq(L[1].nparams, 14);
    rp_lora_offsets_get(&d, 0, &ld);
    ck_assert_uint_eq(ld.numel, L[1].numel);
    free(L);
    d.lora.targets = 1u << RP_LORA_ROUTER;
    ck_assert_int_eq(rp_model_layout(&d, &L, &n, &err), RP_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err.msg, "no projection to adapt"), "%s", err.msg);
}
END_TEST

Suite *layout_suite(void)
{
    Suite *s = suite_create("model_layout");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, names_shapes_offsets);
    tcase_add_test(tc, init_values);
    tcase_add_test(tc, init_in_any_ranges);
    tcase_add_test(tc, bad_configs_name_the_field);
    tcase_add_test(tc, cost_closed_forms);
    tcase_add_test(tc, lora_cost_closed_forms);
    tcase_add_test(tc, moe_layout_and_cost);
    tcase_add_test(tc, gpt_oss_layout_and_checks);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(layout_suite, "serial")
