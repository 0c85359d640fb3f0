/* Proves: chaining the layers the way the trainer does (embedding forward,
 * blocks forward, head forward+backward, blocks backward, embedding
 * backward) reproduces Hugging Face transformers run in float64 on the same
 * weights: the first block's output, the summed next-token cross-entropy
 * with masked targets, and the gradient of every parameter tensor. Two
 * models: Llama with attention biases, llama3 RoPE scaling and an untied LM
 * head; Qwen3 with q/k norms, grouped kv heads, heads*head_dim != hidden and
 * tied embeddings. Both again with documents packed into the sequences
 * (seg_start: segments [0,3), [3,4), [4,7) and [0,5), [5,7)), against
 * transformers running each document as a sequence of its own and summing:
 * packed equals separate, for the loss and every gradient. Fixture:
 * mpi-tests/gen_model_hf_fixture.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"
#include "model/layers.h"
#include "model/layout.h"
#include "rp_check.h"

#include "model_hf_fixture.h"

/* the CPU kernel ops table the layers run on here */
static const rp_kernels cpu_k = {.ops = &rp_kernel_ops_cpu};

enum { NSEQ = 2, S = 7, T = NSEQ * S };

/* Same numbers as hash_uniform() in the generator. */
static float hash_uniform(uint64_t seed, uint64_t k, uint64_t i)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + k * 0xBF58476D1CE4E5B9ull + i * 0x94D049BB133111EBull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(((double)(z >> 40) / (double)(1 << 24)) * 2.0 - 1.0);
}

static rp_model_config base_cfg(void)
{
    rp_model_config c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_hidden_layers = 2;
    c.head_dim = 8;
    c.vocab_size = 37;
    c.max_position_embeddings = 128;
    c.initializer_range = 0.02;
    return c;
}

typedef struct variant {
    rp_model_config cfg;
    uint64_t seed;
    const fixture_tensor *tensors;
    int ntensors;
    const int32_t *tokens, *targets;
    const uint8_t *mask;
    const float *y0;
    double loss_sum;
    const int32_t *seg; /* document segments (NULL: one per sequence) */
} variant;

/* The segments of the packed variants, as the generator's SEGMENTS. */
static const int32_t packed_seg[T] = {0, 0, 0, 3, 4, 4, 4, 0, 0, 0, 0, 0, 5, 5};

/* Locate a tensor by name in the layout: layer index and descriptor. */
static const rp_param_desc *find(const rp_layer_desc *L, int n, const char *name, int *layer)
{
    for (int l = 0; l < n; l++) {
        const rp_param_desc *p = rp_layer_find_param(&L[l], name);
        if (p) {
            *layer = l;
            return p;
        }
    }
    return NULL;
}

static void run_variant(const variant *v)
{
    const rp_model_config *cfg = &v->cfg;
    const int64_t H = cfg->hidden_size;
    rp_layer_desc *L;
    int n;
    ck_assert_int_eq(rp_model_layout(cfg, &L, &n, NULL), RP_OK);
    float **P = calloc((size_t)n, sizeof *P), **G = calloc((size_t)n, sizeof *G);
    int total = 0;
    for (int l = 0; l < n; l++) {
        P[l] = calloc(L[l].numel, sizeof(float));
        G[l] = calloc(L[l].numel, sizeof(float));
        total += L[l].nparams;
    }
    /* every HF parameter is in the layout and vice versa */
    ck_assert_int_eq(total, v->ntensors);
    for (int k = 0; k < v->ntensors; k++) {
        int l;
        const rp_param_desc *p = find(L, n, v->tensors[k].name, &l);
        ck_assert_msg(p != NULL, "%s missing from the layout", v->tensors[k].name);
        ck_assert_int_eq((long)p->numel, v->tensors[k].numel);
        for (size_t i = 0; i < p->numel; i++) {
            float u = hash_uniform(v->seed, (uint64_t)v->tensors[k].index, i);
            float val = p->ndim == 2 ? 0.5f * u
                        : strstr(p->name, ".bias") ? 0.3f * u
                                                   : 1.0f + 0.3f * u;
            P[l][p->offset + i] = (float)(double)val;
        }
    }

    /* forward */
    float **X = calloc((size_t)n, sizeof *X); /* X[l] = input of layer l, l >= 1 */
    for (int l = 1; l < n; l++)
        X[l] = malloc(sizeof(float) * (size_t)(T * H));
    ck_assert_int_eq(rp_embed_forward(&cpu_k, cfg, P[0], RP_F32, v->tokens, T, X[1], NULL), RP_OK);
    float *ws = malloc(sizeof(float) * rp_block_workspace_floats(&rp_kernel_ops_cpu, RP_F32, cfg, NSEQ, S));
    float **saved = calloc((size_t)n, sizeof *saved); /* saved[l]: layer l's forward */
    for (int l = 1; l < n - 1; l++) {
        saved[l] = malloc(sizeof(float) * rp_block_saved_floats(&rp_kernel_ops_cpu, RP_F32, cfg, NSEQ, S));
        ck_assert_int_eq(rp_block_forward(&cpu_k, cfg, P[l], RP_F32, X[l], X[l + 1], NSEQ, S, v->seg, saved[l], ws, NULL, NULL), RP_OK);
    }
    /* block 0 output: fp32 against float64, values O(1-10) */
    for (int64_t i = 0; i < T * H; i++)
        ck_assert_msg(fabsf(X[2][i] - v->y0[i]) <= 1e-4f * (1 + fabsf(v->y0[i])),
                      "layer 0 output [%lld]: %.7g vs transformers %.7g", (long long)i, X[2][i],
                      v->y0[i]);

    /* head + backward */
    const int h = n - 1;
    const float *lm_w = cfg->tie_word_embeddings ? P[0]
                                                 : P[h] + rp_layer_find_param(&L[h], "lm_head.weight")->offset;
    float *dlm = cfg->tie_word_embeddings ? G[0]
                                          : G[h] + rp_layer_find_param(&L[h], "lm_head.weight")->offset;
    float *hws = malloc(sizeof(float) * rp_head_workspace_floats(&rp_kernel_ops_cpu, RP_F32, cfg, T, 4));
    float *dx = malloc(sizeof(float) * (size_t)(T * H));
    double loss;
    ck_assert_int_eq(rp_head_forward_backward(&cpu_k, cfg, P[h], lm_w, RP_F32, X[h], v->targets, v->mask, T, 1.0f,
                                              dx, G[h], dlm, 4, hws, &loss, NULL),
                     RP_OK);
    ck_assert_msg(fabs(loss - v->loss_sum) <= 1e-5 * v->loss_sum, "loss %.9g vs transformers %.9g",
                  loss, v->loss_sum);
    for (int l = n - 2; l >= 1; l--)
        ck_assert_int_eq(rp_block_backward(&cpu_k, cfg, P[l], RP_F32, X[l], saved[l], dx, dx, G[l], NSEQ, S, v->seg, ws, NULL, NULL), RP_OK);
    ck_assert_int_eq(rp_embed_backward(&cpu_k, cfg, v->tokens, T, dx, G[0], NULL), RP_OK);

    /* gradients: fp32 chain against float64; 1e-4 of the tensor's largest
     * entry is ~1000 fp32 ulps, far below any semantic difference (which
     * changes gradients at the percent level) */
    for (int k = 0; k < v->ntensors; k++) {
        int l;
        const rp_param_desc *p = find(L, n, v->tensors[k].name, &l);
        const float *ref = v->tensors[k].g;
        float mx = 0;
        for (size_t i = 0; i < p->numel; i++)
            mx = fmaxf(mx, fabsf(ref[i]));
        ck_assert(mx > 0);
        for (size_t i = 0; i < p->numel; i++)
            ck_assert_msg(fabsf(G[l][p->offset + i] - ref[i]) <= 1e-4f * mx,
                          "%s[%zu]: %.7g vs transformers %.7g", p->name, i, G[l][p->offset + i],
                          ref[i]);
    }
    for (int l = 0; l < n; l++) {
        free(P[l]);
        free(G[l]);
        free(X[l]);
    }
    free(P);
    free(G);
    free(X);
    free(L);
    free(ws);
    free(hws);
    free(dx);
}

#define FIXTURE(v, prefix, s)                                                                   \
    ((v).seed = (s), (v).tensors = prefix##_tensors,                                           \
     (v).ntensors = (int)(sizeof prefix##_tensors / sizeof prefix##_tensors[0]),               \
     (v).tokens = prefix##_tokens, (v).targets = prefix##_targets, (v).mask = prefix##_mask,   \
     (v).y0 = prefix##_y0, (v).loss_sum = prefix##_loss_sum)

static variant llama_variant(void)
{
    variant v = {.cfg = base_cfg()};
    v.cfg.arch = RP_ARCH_LLAMA;
    v.cfg.num_attention_heads = 2;
    v.cfg.num_key_value_heads = 1;
    v.cfg.rms_norm_eps = 1e-5;
    v.cfg.rope_theta = 10000.0;
    v.cfg.rope_scaling = (rp_rope_scaling){.type = RP_ROPE_LLAMA3, .factor = 8.0,
                                           .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                                           .original_max_position_embeddings = 64};
    v.cfg.attention_bias = 1;
    v.cfg.tie_word_embeddings = 0;
    return v;
}

static variant qwen3_variant(void)
{
    variant v = {.cfg = base_cfg()};
    v.cfg.arch = RP_ARCH_QWEN3;
    v.cfg.num_attention_heads = 4;
    v.cfg.num_key_value_heads = 2;
    v.cfg.rms_norm_eps = 1e-6;
    v.cfg.rope_theta = 1000000.0;
    v.cfg.tie_word_embeddings = 1;
    return v;
}

START_TEST(llama_matches_transformers)
{
    variant v = llama_variant();
    FIXTURE(v, llama, 1);
    run_variant(&v);
}
END_TEST

START_TEST(qwen3_matches_transformers)
{
    variant v = qwen3_variant();
    FIXTURE(v, qwen, 2);
    run_variant(&v);
}
END_TEST

START_TEST(llama_packed_equals_separate)
{
    variant v = llama_variant();
    FIXTURE(v, llama_packed, 3);
    v.seg = packed_seg;
    run_variant(&v);
}
END_TEST

START_TEST(qwen3_packed_equals_separate)
{
    variant v = qwen3_variant();
    FIXTURE(v, qwen_packed, 4);
    v.seg = packed_seg;
    run_variant(&v);
}
END_TEST

Suite *hf_suite(void)
{
    Suite *s = suite_create("model_hf");
    TCase *tc = tcase_create("hf");
    tcase_add_test(tc, llama_matches_transformers);
    tcase_add_test(tc, qwen3_matches_transformers);
    tcase_add_test(tc, llama_packed_equals_separate);
    tcase_add_test(tc, qwen3_packed_equals_separate);
    suite_add_tcase(s, tc);
    return s;
}

RP_TEST_MAIN(hf_suite, "serial")
