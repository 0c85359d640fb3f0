/* Proves: the closed-form parameter counts match the published sizes of
 * Llama-3.1-8B (8,030,261,248 parameters) and Qwen3-1.7B (1.41B without
 * embedding); block FLOPs are 2 x GEMM parameters + causal attention per
 * token, (S + 1) / 2 keys a query as the engine visits them, the backward
 * 2 x the GEMMs' and 2.5 x the attention's; the roofline picks compute or weight reading; the paper layer
 * files load with the stated times and layer counts; bad layer-times files
 * give an error naming file, line and field, and nothing is returned; the
 * LoRA closed form (frozen weights up, adapter gradients down, adapter-only
 * updates, no weight-gradient GEMMs of the base) and the paper's LoRA file
 * agree with arithmetic from the shapes; a dense MLP over several chunks
 * costs the gate and up GEMMs (and their adapters, the down adapter's A)
 * its backward makes again. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/cost.h"
#include "plan/layers_file.h"
#include "rp_check.h"

static const rp_model_shape llama8b = {.hidden = 4096, .intermediate = 14336, .heads = 32,
                                       .kv_heads = 8, .head_dim = 128, .vocab = 128256,
                                       .layers = 32, .tied = 0, .attention_bias = 0};
static const rp_model_shape qwen17 = {.hidden = 2048, .intermediate = 6144, .heads = 16,
                                      .kv_heads = 8, .head_dim = 128, .vocab = 151936,
                                      .layers = 28, .tied = 1, .attention_bias = 0};

START_TEST(parameter_counts_match_published_sizes)
{
    int64_t total = 32 * rp_cost_block_params(&llama8b) + rp_cost_embed_params(&llama8b) +
                    rp_cost_head_params(&llama8b);
    /* the Qwen3 per-head q/k norms are counted in every block; Llama has
     * none, so take them out for the published Llama count */
    total -= 32 * 2 * 128;
    ck_assert_int_eq(total, 8030261248LL);
    int64_t q = 28 * rp_cost_block_params(&qwen17) + rp_cost_embed_params(&qwen17) +
                rp_cost_head_params(&qwen17);
    ck_assert_int_eq(q, 1720574976LL); /* tied: the head adds only its norm */
    ck_assert_int_eq(q - rp_cost_embed_params(&qwen17), 1409410048LL);
}
END_TEST

START_TEST(flops_and_roofline)
{
    /* tiny shape: h=8, I=16, 2 heads of 4, 1 kv head */
    rp_model_shape s = {.hidden = 8, .intermediate = 16, .heads = 2, .kv_heads = 1, .head_dim = 4,
                        .vocab = 32, .layers = 3, .tied = 0, .attention_bias = 0};
    /* GEMM params: q 8x8, k/v 8x4 each, o 8x8, MLP 3x8x16 = 64+64+64+384;
     * attention 4 x 8 FLOPs a key, a query of 10 seeing 11 / 2 keys on
     * average (query i sees keys 0..i, as the engine runs it; S / 2 before) */
    double per_tok = 2.0 * 576 + 4.0 * 8 * 11 / 2;
    ck_assert(fabs(rp_cost_block_fwd_flops_per_token(&s, 10) - per_tok) < 1e-9);
    rp_device_spec d = {1e-6 /* 1 MFLOP/s */, 1e-6 /* 1 byte/ms */, 2, 4, 10, 20};
    rp_cost_model *m;
    rp_error err;
    ck_assert_int_eq(rp_cost_from_shape(&s, &d, &m, &err), RP_OK);
    ck_assert_int_eq(m->num_layers, 5);
    ck_assert_int_eq(m->layers[0].kind, RP_LAYER_EMBED);
    ck_assert_int_eq(m->layers[4].kind, RP_LAYER_HEAD);
    /* compute: per_tok * 20 tokens at 1e6 FLOP/s (ms = flops / 1e3);
     * weights: (576 + norms 16 + 8) * 2 bytes at 1 byte/ms = 1200 ms */
    double fwd_ms = per_tok * 20 / 1e3;
    double w_ms = (576 + 2 * 8 + 2 * 4) * 2.0;
    ck_assert(fabs(m->layers[1].fwd_ms - fmax(fwd_ms, w_ms)) < 1e-9);
    ck_assert(fabs(m->layers[1].bwd_ms - fmax(2 * fwd_ms, 2 * w_ms)) < 1e-9);
    ck_assert_int_eq(m->layers[1].weight_bytes, 600 * 2);
    ck_assert_int_eq(m->layers[1].grad_bytes, 600 * 4);
    ck_assert_int_eq(m->layers[1].out_bytes, 20 * 8 * 2);
    ck_assert_int_eq(m->layers[4].tied_to, -1);
    rp_cost_model_destroy(&m);
    ck_assert_ptr_null(m);
    /* a fast device: compute bound */
    d.tflops = 1.0;
    d.mem_gbs = 1e6;
    ck_assert_int_eq(rp_cost_from_shape(&s, &d, &m, &err), RP_OK);
    ck_assert(fabs(m->layers[2].fwd_ms - per_tok * 20 / 1e9) < 1e-15);
    /* backward: two products a GEMM, five attention products where the
     * forward has two (the scores again, dV, dP, dQ, dK) */
    ck_assert(fabs(m->layers[2].bwd_ms - (2 * 1152 + 2.5 * 176) * 20 / 1e9) < 1e-15);
    rp_cost_model_destroy(&m);
    s.heads = 0;
    ck_assert_int_eq(rp_cost_from_shape(&s, &d, &m, &err), RP_ERR_INVALID_ARG);
    ck_assert_ptr_null(m);
}
END_TEST

/* Work items to times: 3e6 FLOPs a token forward, 9e6 with the backward
 * and its recompute, 100 tokens a microbatch at 1e6 FLOP/ms: 300 ms
 * forward and 600 ms backward, plus 1 us each; a measured time replaces
 * its estimate; kinds, parameters and ties carried; bad rates refused. */
START_TEST(work_items_to_times)
{
    rp_layer_work w[3] = {{RP_LAYER_EMBED, 0, 0, 10, -1},
                          {RP_LAYER_BLOCK, 3e6, 9e6, 20, -1},
                          {RP_LAYER_HEAD, 3e6, 9e6, 30, 0}};
    double fwd[3] = {-1, -1, 42.0}, bwd[3] = {-1, 7.0, -1};
    rp_cost_model *m = NULL;
    rp_error err;
    ck_assert_int_eq(rp_cost_from_work(w, 3, 1e6, 100, NULL, NULL, &m, &err), RP_OK);
    ck_assert_double_eq_tol(m->layers[1].fwd_ms, 300.001, 1e-9);
    ck_assert_double_eq_tol(m->layers[1].bwd_ms, 600.001, 1e-9);
    ck_assert_double_eq_tol(m->layers[0].fwd_ms, 0.001, 1e-12);
    ck_assert_int_eq(m->layers[2].kind, RP_LAYER_HEAD);
    ck_assert_int_eq(m->layers[2].tied_to, 0);
    ck_assert_int_eq(m->layers[1].opt_params, 20);
    ck_assert_int_eq(m->layers[1].weight_bytes, 0); /* bytes are the caller's */
    ck_assert_int_eq(m->tokens_per_microbatch, 100);
    rp_cost_model_destroy(&m);
    ck_assert_int_eq(rp_cost_from_work(w, 3, 1e6, 100, fwd, bwd, &m, &err), RP_OK);
    ck_assert_double_eq(m->layers[2].fwd_ms, 42.0);
    ck_assert_double_eq(m->layers[1].bwd_ms, 7.0);
    ck_assert_double_eq_tol(m->layers[1].fwd_ms, 300.001, 1e-9);
    rp_cost_model_destroy(&m);
    ck_assert_int_eq(rp_cost_from_work(w, 3, 0, 100, NULL, NULL, &m, &err), RP_ERR_INVALID_ARG);
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(paper_files_load)
{
    static const struct {
        const char *file;
        int blocks;
        double f, b, hf, hb;
    } paper[] = {
        {"qwen3-1.7b.txt", 28, 7.4, 15.8, 22.1, 43.7},
        {"llama3.1-8b.txt", 32, 18.5, 41.2, 37.2, 74.5},
        {"qwen3-32b.txt", 64, 40.6, 91.2, 54.9, 108.3},
        {"qwen3-235b-a22b-lora.txt", 94, 43.0, 58.4, 42.4, 43.3},
    };
    for (size_t i = 0; i < 4; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/bench/paper/%s", rp_test_srcdir(), paper[i].file);
        rp_cost_model *m;
        rp_error err;
        ck_assert_msg(rp_cost_load(path, &m, &err) == RP_OK, "%s", err.msg);
        ck_assert_int_eq(m->num_layers, paper[i].blocks + 2);
        ck_assert_int_eq(m->default_gpus, 8);
        ck_assert_int_eq(m->default_microbatches, 16);
        ck_assert_int_eq(m->layers[0].kind, RP_LAYER_EMBED);
        for (int l = 1; l <= paper[i].blocks; l++) {
            ck_assert(m->layers[l].kind == RP_LAYER_BLOCK);
            ck_assert(m->layers[l].fwd_ms == paper[i].f && m->layers[l].bwd_ms == paper[i].b);
        }
        const rp_layer_cost *h = &m->layers[paper[i].blocks + 1];
        ck_assert(h->kind == RP_LAYER_HEAD && h->fwd_ms == paper[i].hf && h->bwd_ms == paper[i].hb);
        rp_cost_model_destroy(&m);
    }
}
END_TEST

START_TEST(layer_file_settings_and_defaults)
{
    const char *t = "# c\n\nroundpipe-layers 1   # v1\nname tiny\ngpus 3\nmicrobatches 6\n"
                    "transfer_ms 0.5\ntokens_per_microbatch 128\n"
                    "layer embed fwd_ms=0 bwd_ms=0 weight_bytes=10\n"
                    "layer block count=2 fwd_ms=1.5 bwd_ms=3 wgrad_ms=1 grad_bytes=8 "
                    "opt_params=2 act_bytes=5 out_bytes=6\n"
                    "layer head fwd_ms=2 bwd_ms=4 tied_to=0";
    rp_cost_model *m;
    rp_error err;
    ck_assert_msg(rp_cost_parse(t, strlen(t), "t.txt", &m, &err) == RP_OK, "%s", err.msg);
    ck_assert_str_eq(m->name, "tiny");
    ck_assert_int_eq(m->num_layers, 4);
    ck_assert_int_eq(m->default_gpus, 3);
    ck_assert_int_eq(m->default_microbatches, 6);
    ck_assert(m->default_transfer_ms == 0.5);
    ck_assert_int_eq(m->tokens_per_microbatch, 128);
    ck_assert_int_eq(m->layers[0].weight_bytes, 10);
    ck_assert_int_eq(m->layers[2].act_bytes, 5);
    ck_assert(m->layers[2].wgrad_ms == 1);
    ck_assert_int_eq(m->layers[3].tied_to, 0);
    ck_assert_int_eq(m->layers[1].tied_to, -1);
    ck_assert(rp_cost_bwd_ms(m, 1, 3) == 1.5 + 3 + 1.5 + 3 + 2 + 4);
    rp_cost_model_destroy(&m);
}
END_TEST

START_TEST(bad_layer_files_are_named)
{
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"", "missing header"},
        {"layer block fwd_ms=1 bwd_ms=1\n", "t.txt:1: field 'roundpipe-layers'"},
        {"roundpipe-layers 2\n", "unsupported version '2'"},
        {"roundpipe-layers 1\n", "no layers"},
        {"roundpipe-layers 1\nlayer blok fwd_ms=1 bwd_ms=2\n", "t.txt:2: field 'layer'"},
        {"roundpipe-layers 1\nlayer block bwd_ms=2\n", "t.txt:2: field 'fwd_ms': missing"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1\n", "field 'bwd_ms': missing"},
        {"roundpipe-layers 1\n\nlayer block fwd_ms=-1 bwd_ms=2\n", "t.txt:3: field 'fwd_ms': must not be negative"},
        {"roundpipe-layers 1\nlayer block fwd_ms=nan bwd_ms=2\n", "field 'fwd_ms': not a finite"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1x bwd_ms=2\n", "field 'fwd_ms': not a finite"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1 bwd_ms=2 weight_bytes=1.5\n", "field 'weight_bytes': not an integer"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1 bwd_ms=2 count=0\n", "field 'count': out of range"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1 bwd_ms=2 colour=red\n", "field 'colour': unknown field"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1 bwd_ms=2 wgrad_ms=3\n", "field 'wgrad_ms': 3 exceeds"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1 bwd_ms=2 tied_to=0\n", "field 'tied_to': must name an earlier"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1 bwd_ms=2 noequals\n", "expected key=value"},
        {"roundpipe-layers 1\ngpus 0\nlayer block fwd_ms=1 bwd_ms=2\n", "t.txt:2: field 'gpus': out of range"},
        {"roundpipe-layers 1\ngpus\nlayer block fwd_ms=1 bwd_ms=2\n", "field 'gpus': expected one value"},
        {"roundpipe-layers 1\nspeed 3\nlayer block fwd_ms=1 bwd_ms=2\n", "field 'speed': unknown setting"},
        {"roundpipe-layers 1\nlayer block count=60000 fwd_ms=1 bwd_ms=1\nlayer block count=60000 fwd_ms=1 bwd_ms=1\n", "t.txt:3: field 'count': more than"},
        /* values the planner's sums and products would overflow on (fuzz_readers) */
        {"roundpipe-layers 1\ntokens_per_microbatch 4611686018427387903\nlayer block fwd_ms=1 bwd_ms=2\n", "t.txt:2: field 'tokens_per_microbatch': out of range"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1 bwd_ms=2 act_bytes=2305843009213693951\n", "t.txt:2: field 'act_bytes': out of range"},
        {"roundpipe-layers 1\nlayer block count=5 fwd_ms=1 bwd_ms=2 weight_bytes=1099511627776\n", "t.txt: field 'weight_bytes': the layers' total is above"},
        {"roundpipe-layers 1\nlayer block fwd_ms=1e300 bwd_ms=2\n", "t.txt:2: field 'fwd_ms': above 1e9 ms"},
        {"roundpipe-layers 1\nlayer embed fwd_ms=0 bwd_ms=0\nlayer head fwd_ms=0 bwd_ms=0\n", "t.txt: fields 'fwd_ms' and 'bwd_ms': every layer's are 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rp_cost_model *m = (rp_cost_model *)1;
        rp_error err = {0};
        ck_assert_int_eq(rp_cost_parse(bad[i].text, strlen(bad[i].text), "t.txt", &m, &err),
                         RP_ERR_FORMAT);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(err.msg, bad[i].needle) != NULL, "case %zu: '%s'", i, err.msg);
    }
    /* a NUL byte, a line too long, a missing file */
    rp_cost_model *m;
    rp_error err;
    ck_assert_int_eq(rp_cost_parse("roundpipe-layers 1\n\0", 20, "t.txt", &m, &err), RP_ERR_FORMAT);
    static char longline[6000];
    memset(longline, 'x', sizeof longline - 1);
    ck_assert_int_eq(rp_cost_parse(longline, strlen(longline), "t.txt", &m, &err), RP_ERR_FORMAT);
    ck_assert_msg(strstr(err.msg, "t.txt:1: line longer") != NULL, "%s", err.msg);
    ck_assert_int_eq(rp_cost_load("/nonexistent/layers.txt", &m, &err), RP_ERR_IO);
    ck_assert_msg(strstr(err.msg, "/nonexistent/layers.txt") != NULL, "%s", err.msg);
}
END_TEST

/* LoRA in the closed form, against arithmetic done here from the shape:
 * the tiny shape (h 8, I 16, q 8, kv 4, V 32, S 10, 20 tokens) with rank 2
 * on q_proj and v_proj: adapters 2 (8 + 8) + 2 (8 + 4) = 56 parameters;
 * forward 2 x 576 GEMM + 176 attention (4 x 8 x 11 / 2: 11 / 2 keys a
 * query) + 2 x 56 adapter FLOPs a token; backward 1152 (input gradients of
 * the frozen GEMMs) + 2.5 x 176 (five attention products where the forward
 * has two) + 4 x 56;
 * only the adapters' bytes travel back and are updated; the embedding and
 * the head train nothing and are tied to nothing. */
START_TEST(lora_closed_form)
{
    rp_model_shape s = {.hidden = 8, .intermediate = 16, .heads = 2, .kv_heads = 1, .head_dim = 4,
                        .vocab = 32, .layers = 3, .tied = 1, .attention_bias = 0, .lora_rank = 2,
                        .lora_targets = 1u << 0 | 1u << 2};
    ck_assert_int_eq(rp_cost_adapter_params(&s), 56);
    /* compute bound: 1 MFLOP/s against 1 GB/s */
    rp_device_spec d = {1e-6, 1.0, 2, 4, 10, 20};
    rp_cost_model *m;
    rp_error err;
    ck_assert_msg(rp_cost_from_shape(&s, &d, &m, &err) == RP_OK, "%s", err.msg);
    const double fwd_tok = 1152 + 176 + 112, bwd_tok = 1152 + 440 + 224;
    for (int l = 1; l <= 3; l++) {
        const rp_layer_cost *b = &m->layers[l];
        ck_assert_double_eq_tol(b->fwd_ms, fwd_tok * 20 / 1e3, 1e-9);
        ck_assert_double_eq_tol(b->bwd_ms, bwd_tok * 20 / 1e3, 1e-9);
        ck_assert_double_eq_tol(b->wgrad_ms, 112.0 * 20 / 1e3, 1e-9); /* dA and dB */
        ck_assert_int_eq(b->weight_bytes, (600 + 56) * 2);            /* frozen + adapters */
        ck_assert_int_eq(b->grad_bytes, 56 * 4);
        ck_assert_int_eq(b->opt_params, 56);
        /* the full model's 232 bytes a token, and A x of the 2 targets */
        ck_assert_int_eq(b->act_bytes, (232 + 2 * 2 * 2) * 20);
    }
    const rp_layer_cost *e = &m->layers[0], *h = &m->layers[4];
    ck_assert(e->grad_bytes == 0 && e->opt_params == 0 && e->bwd_ms == 0);
    ck_assert_int_eq(e->weight_bytes, 32 * 8 * 2);
    /* head: logits 2 x 32 x 8 FLOPs a token forward, the input gradient as much */
    ck_assert_double_eq_tol(h->fwd_ms, 2.0 * 32 * 8 * 20 / 1e3, 1e-9);
    ck_assert_double_eq_tol(h->bwd_ms, 2.0 * 32 * 8 * 20 / 1e3, 1e-9);
    ck_assert(h->grad_bytes == 0 && h->opt_params == 0 && h->wgrad_ms == 0);
    ck_assert_int_eq(h->weight_bytes, (8 + 32 * 8) * 2);
    ck_assert_int_eq(h->tied_to, -1);
    rp_cost_model_destroy(&m);
    /* all seven projections: q 2(8+8), k 2(8+4), v 2(8+4), o 2(8+8), gate
     * and up 2(8+16) each, down 2(16+8) */
    s.lora_targets = 0x7f;
    ck_assert_int_eq(rp_cost_adapter_params(&s), 32 + 24 + 24 + 32 + 48 + 48 + 48);
    s.lora_targets = 0;
    ck_assert_int_eq(rp_cost_from_shape(&s, &d, &m, &err), RP_ERR_INVALID_ARG);
    ck_assert_ptr_null(m);
    s.lora_targets = 1u << 7; /* no such projection */
    ck_assert_int_eq(rp_cost_from_shape(&s, &d, &m, &err), RP_ERR_INVALID_ARG);
    s.lora_rank = 0; /* full fine-tuning ignores the targets */
    ck_assert_int_eq(rp_cost_adapter_params(&s), 0);
    ck_assert_int_eq(rp_cost_from_shape(&s, &d, &m, &err), RP_OK);
    ck_assert_int_eq(m->layers[1].opt_params, 600);
    ck_assert_int_eq(m->layers[4].tied_to, 0);
    rp_cost_model_destroy(&m);
}
END_TEST

/* A dense MLP over several chunks (mlp_remade) keeps none of g, u, m and
 * its backward makes them again, against arithmetic from the tiny shape (h
 * 8, I 16, S 10, 20 tokens, 1 MFLOP/s): the gate and up GEMMs, 2 x 2 x 8 x
 * 16 = 512 FLOPs a token more in the backward, none in the forward, no
 * weight gradient; with rank 2 on gate, up and down their adapters' 2 x 2
 * (8 + 16) each and the down adapter's A x, 2 x 2 x 16: 256 more. */
START_TEST(remade_mlp_closed_form)
{
    rp_model_shape s = {8, 16, 2, 1, 4, 32, 3, 0, 0, 0, 0, NULL, 1};
    rp_device_spec d = {1e-6, 1.0, 2, 4, 10, 20};
    rp_cost_model *m;
    rp_error err;
    ck_assert_msg(rp_cost_from_shape(&s, &d, &m, &err) == RP_OK, "%s", err.msg);
    const double ff = 1152 + 176;
    ck_assert_double_eq_tol(m->layers[1].fwd_ms, ff * 20 / 1e3, 1e-9);
    ck_assert_double_eq_tol(m->layers[1].bwd_ms, (2 * 1152 + 2.5 * 176 + 512) * 20 / 1e3, 1e-9);
    ck_assert_double_eq_tol(m->layers[1].wgrad_ms, 1152 * 20 / 1e3, 1e-9);
    rp_cost_model_destroy(&m);
    s.lora_rank = 2;
    s.lora_targets = 0x70; /* gate, up, down: 48 adapter weights each */
    ck_assert_msg(rp_cost_from_shape(&s, &d, &m, &err) == RP_OK, "%s", err.msg);
    const double fa = 2 * 144.0;
    ck_assert_double_eq_tol(m->layers[1].fwd_ms, (ff + fa) * 20 / 1e3, 1e-9);
    ck_assert_double_eq_tol(m->layers[1].bwd_ms,
                            (1152 + 2.5 * 176 + 2 * fa + 512 + 2 * (48 + 48 + 32)) * 20 / 1e3,
                            1e-9);
    ck_assert_double_eq_tol(m->layers[1].wgrad_ms, fa * 20 / 1e3, 1e-9);
    rp_cost_model_destroy(&m);
    s.mlp_remade = 0; /* kept: the backward of lora_closed_form */
    ck_assert_msg(rp_cost_from_shape(&s, &d, &m, &err) == RP_OK, "%s", err.msg);
    ck_assert_double_eq_tol(m->layers[1].bwd_ms, (1152 + 2.5 * 176 + 2 * fa) * 20 / 1e3, 1e-9);
    rp_cost_model_destroy(&m);
}
END_TEST

/* The paper's LoRA timing file states rank 16 on q/k/v/o of Qwen3-235B-A22B
 * (h 4096, 64 heads, 4 kv heads of 128): 16 (4096 + 8192) twice and
 * 16 (4096 + 512) twice = 540672 adapter parameters a block, which its
 * blocks update and whose fp32 gradients they download; its embedding and
 * head train nothing. */
START_TEST(lora_paper_file_agrees)
{
    rp_model_shape s = {.hidden = 4096, .intermediate = 1536, .heads = 64, .kv_heads = 4,
                        .head_dim = 128, .vocab = 151936, .layers = 94, .tied = 0,
                        .attention_bias = 0, .lora_rank = 16, .lora_targets = 0xf};
    ck_assert_int_eq(rp_cost_adapter_params(&s), 2 * 16 * (4096 + 8192) + 2 * 16 * (4096 + 512));
    ck_assert_int_eq(rp_cost_adapter_params(&s), 540672);
    char path[4096];
    snprintf(path, sizeof path, "%s/bench/paper/qwen3-235b-a22b-lora.txt", rp_test_srcdir());
    rp_cost_model *m;
    rp_error err;
    ck_assert_msg(rp_cost_load(path, &m, &err) == RP_OK, "%s", err.msg);
    for (int l = 1; l <= 94; l++) {
        ck_assert_int_eq(m->layers[l].opt_params, 540672);
        ck_assert_int_eq(m->layers[l].grad_bytes, 540672 * 4);
    }
    ck_assert(m->layers[0].opt_params == 0 && m->layers[0].grad_bytes == 0);
    ck_assert(m->layers[95].opt_params == 0 && m->layers[95].grad_bytes == 0);
    rp_cost_model_destroy(&m);
}
END_TEST

static Suite *plan_cost_suite(void)
{
    Suite *s = suite_create("plan_cost");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, parameter_counts_match_published_sizes);
    tcase_add_test(tc, flops_and_roofline);
    tcase_add_test(tc, work_items_to_times);
    tcase_add_test(tc, paper_files_load);
    tcase_add_test(tc, layer_file_settings_and_defaults);
    tcase_add_test(tc, bad_layer_files_are_named);
    tcase_add_test(tc, lora_closed_form);
    tcase_add_test(tc, lora_paper_file_agrees);
    tcase_add_test(tc, remade_mlp_closed_form);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(plan_cost_suite, "serial")
