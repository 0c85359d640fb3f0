/* Shared option parsing for `roundpipe plan` and `roundpipe simulate`. */
#include "cli/plan_opts.h"

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/args.h"
#include "core/unproven.h"
#include "device/backend.h"
#include "device/device.h"
#include "engine/host_memory.h"
#include "engine/memory_model.h"
#include "engine/train_options.h"
#include "io/config.h"
#include "io/peft.h"
#include "kernels/attention_choice.h"
#include "model/layers.h"
#include "model/layout.h"
#include "model/token_tiles.h"
#include "plan/keep.h"
#include "plan/layers_file.h"
#include "plan/partition.h"
#include "plan/schedule.h"
#include "store/topology.h"

/* The options as given. The rows shared with train write into `train` at
 * train's offsets, so it comes first. */
typedef struct plan_config_source {
    const char *init_config; /* --init-config FILE */
    const char *model_dir;   /* --model DIR */
    int from_model;          /* the later of the two was --model */
} plan_config_source;

typedef struct plan_args {
    rp_train_options train; /* --optimizer-lag, --grad-clip, --recompute, --deal, --plan,
                               --topology, --documents, --eval-data, --eval-documents,
                               --lora-rank, --lora-targets,
                               --lora-dropout */
    plan_config_source source;
    const char *layers;
    int64_t gpus, microbatches, seq_len, batch_size, memory_limit_mib, workspace_mib;
    int64_t defer_wgrad, optimizer_spread, width, pipelines, iterations, sparse_embedding, nodes;
    int64_t device_memory_mib;
    double tflops, device_gbs, bandwidth_gbs, transfer_ms, optimizer_gbs, host_gbs;
    double embed_rows_frac, network_gbs;
    int compute_bytes; /* --dtype: 2 (bf16) or 4 (fp32) */
    int grad_dtype;    /* rp_dtype */
    rp_device_kind device;
    int json;
    unsigned given;    /* GIVEN_* */
} plan_args;

#define GIVEN_SEQ_LEN 1u
#define GIVEN_BATCH_SIZE 2u
#define GIVEN_WORKSPACE 4u
#define GIVEN_DTYPE 8u

static rp_status parse_init_config(const char *opt, const char *s, void *field, rp_error *err)
{
    plan_config_source *c = field;
    c->init_config = s;
    c->from_model = 0;
    return RP_OK;
}

static rp_status parse_model(const char *opt, const char *s, void *field, rp_error *err)
{
    plan_config_source *c = field;
    c->model_dir = s;
    c->from_model = 1;
    return RP_OK;
}

static rp_status parse_dtype_bytes(const char *opt, const char *s, void *field, rp_error *err)
{
    if (!strcmp(s, "bf16"))
        *(int *)field = 2;
    else if (!strcmp(s, "fp32"))
        *(int *)field = 4;
    else
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--dtype: '%s' is not bf16 or fp32", s);
    return RP_OK;
}

static rp_status parse_device(const char *opt, const char *s, void *field, rp_error *err)
{
    (void)opt; /* rp_device_kind_parse's message names --device */
    return rp_device_kind_parse(s, field, err);
}

static rp_status parse_rows_fraction(const char *opt, const char *s, void *field, rp_error *err)
{
    RP_TRY(rp_arg_double(opt, s, field, err));
    double x = *(double *)field;
    if (!(x > 0 && x <= 1))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--embed-rows-frac: %s is not in (0, 1]", s);
    return RP_OK;
}

static const char *const grad_dtype_words[] = {"fp32", "bf16", NULL}; /* as rp_dtype */

#define TEXT(x) #x
#define NUMBER_TEXT(x) TEXT(x)
#define FIELD(f) offsetof(plan_args, f)
#define GIVEN(bit) .given_offset = FIELD(given), .given_bit = (bit)
#define INT64(n, a, f, l, h) n, a, RP_OPTION_INT64, FIELD(f), .lo = (l), .hi = (h)
#define DOUBLE(n, a, f) n, a, RP_OPTION_DOUBLE, FIELD(f)
#define CUSTOM(n, a, f, p) n, a, RP_OPTION_CUSTOM, FIELD(f), .parse = (p)
#define TRAIN(n, a) n, a, RP_OPTION_SHARED /* train's row, with plan's own help */

/* `plan` and `simulate`'s options, in --help's order. An option train has
 * too reads by train's row where it accepts the same values with the same
 * messages (TRAIN); the others differ from train's in range or values
 * (--seq-len, --batch-size and --microbatches up to 2^24, 2^24 and 2^20;
 * --dtype and --grad-dtype without float32/bfloat16; --memory-limit-mib an
 * integer; --pipelines up to RP_SIM_MAX_GPUS; --device's message) or in
 * what they do (--model, --init-config: the config they name). */
static const rp_option plan_rows[] = {
    {"layers", "FILE", RP_OPTION_STRING, FIELD(layers),
     .help = "layer-times file (format: bench/README.md)"},
    {CUSTOM("init-config", "FILE", source, parse_init_config),
     .help = "a config.json; times from FLOPs (--tflops, --device-gbs),\n"
             "device memory as `roundpipe train`'s executors allocate it"},
    {CUSTOM("model", "DIR", source, parse_model), .help = "a model directory (its config.json)"},
    {INT64("gpus", "G", gpus, 1, RP_SIM_MAX_GPUS),
     .help = "executors (default: the file's, else 1)"},
    {INT64("microbatches", "M", microbatches, 1, 1 << 20),
     .help = "per iteration (default: the file's, else 1)"},
    {INT64("seq-len", "S", seq_len, 1, 1 << 24), .fallback = "1024", GIVEN(GIVEN_SEQ_LEN),
     .help = "tokens per sample (default 1024); plan's --seq-len max:\n"
             "the longest that fits, in steps of 1024, and what bounds it"},
    {INT64("batch-size", "B", batch_size, 1, 1 << 24), GIVEN(GIVEN_BATCH_SIZE),
     .help = "samples per iteration (default M)"},
    {DOUBLE("tflops", "X", tflops), .fallback = "100",
     .help = "achieved TFLOP/s per device for a config (default 100)"},
    {DOUBLE("device-gbs", "X", device_gbs), .fallback = "1000",
     .help = "device memory GB/s for a config (default 1000)"},
    {"grad-dtype", "fp32|bf16", RP_OPTION_WORD, FIELD(grad_dtype), .words = grad_dtype_words,
     .help = "dtype gradients travel in, as train's (default fp32)"},
    {TRAIN("activation-dtype", "fp32|bf16"),
     .help = "as train's: the residual stream between layers, and the\n"
             "host store's saved block inputs, in it (default: bf16 on\n"
             "CUDA, fp32 on the CPU)"},
    {CUSTOM("dtype", "bf16|fp32", compute_bytes, parse_dtype_bytes), .fallback = "bf16",
     GIVEN(GIVEN_DTYPE), /* not given: as the device computes */
     .help = "compute dtype for a config (default: as train, bf16 on\n"
             "GPUs, fp32 on the CPU)"},
    {CUSTOM("device", "cpu|cuda|auto", device, parse_device), .fallback = "auto",
     .help = "executors whose memory a config's model counts (default\n"
             "auto: CUDA when a GPU is usable here, as train does)"},
    {INT64("memory-limit-mib", "N", memory_limit_mib, 0, (int64_t)1 << 30),
     .help = "device memory an executor may use (default: a GPU's\n"
             "memory less the reserve, when known; else no limit)"},
    {INT64("device-memory-mib", "N", device_memory_mib, 1, (int64_t)1 << 30),
     .help = "each GPU's memory, for CUDA executors: the planner keeps\n"
             "to N less the reserve train keeps (5% + 512 MiB) and the\n"
             "verdict says whether the plan fits (default: the free\n"
             "memory of this machine's GPU, when CUDA is used here)"},
    {INT64("workspace-mib", "N", workspace_mib, 0, (int64_t)1 << 30), .fallback = "256",
     GIVEN(GIVEN_WORKSPACE),
     .help = "workspace counted in it (default: a config's executors',\n"
             "else 256)"},
    {DOUBLE("bandwidth-gbs", "X", bandwidth_gbs), .fallback = "25",
     .help = "host<->device GB/s per GPU, each direction (default 25)"},
    {DOUBLE("transfer-ms", "X", transfer_ms), .fallback = "-1", /* -1: the file's */
     .help = "latency of an activation hand-over between executors\n"
             "(default: the file's, else 0)"},
    {DOUBLE("optimizer-gbs", "X", optimizer_gbs), .fallback = "10",
     .help = "memory GB/s of one rank's CPU optimizer (default 10)"},
    {TRAIN("optimizer-lag", "0|1"), .help = "0: exact (default); 1: one step stale"},
    {TRAIN("grad-clip", "C"),
     .help = "C > 0: global-norm clipping (updates wait for all gradients)"},
    {TRAIN("speculative-update", "auto|on|off"),
     .help = "as train's: with --grad-clip, each layer's AdamW but the\n"
             "embedding's as its gradient lands (a step whose norm does\n"
             "not clip), plus its backup's 12 bytes a parameter; auto\n"
             "(default): on, as train on GPUs, but for CPU executors"},
    {INT64("defer-wgrad", "0|1", defer_wgrad, 0, 1), .fallback = "1",
     .help = "weight-gradient work after the input gradient is sent (default 1)"},
    {INT64("optimizer-spread", "0|1", optimizer_spread, 0, 1), .fallback = "1",
     .help = "split each layer's update over all ranks (default 1, as the\n"
             "engine does; 0: on the rank that produced the gradient)"},
    {INT64("pipelines", "P", pipelines, 1, RP_SIM_MAX_GPUS),
     .help = "P pipelines of G/P executors, as train's --pipelines\n"
             "(default: the planner chooses)"},
    {INT64("width", "W", width, 1, RP_SIM_MAX_GPUS),
     .help = "accepted alias of --pipelines G/W: the pipeline width,\n"
             "executors per pipeline"},
    {TRAIN("recompute", "auto|stage|layer|none"),
     .help = "as train's: auto keeps the activations of as many blocks\n"
             "as host memory allows (GPUs: in their own memory, as much\n"
             "as it allows), none keeps all, layer saves every\n"
             "layer's input (host memory)"},
    {TRAIN("attention", "auto|cudnn|own"),
     .help = "as train's: cudnn and auto (unless RP_DISABLE_CUDA_PATHS\n"
             "names cudnn) keep device memory for cuDNN's attention\n"
             "beside the plan, but over --documents"},
    {TRAIN("weight-buffers", "auto|1|2"),
     .help = "as train's: 1 holds one stage's weights per executor\n"
             "(half their device memory; no upload overlaps a job);\n"
             "auto (default): 2 unless no plan fits with them"},
    {TRAIN("host-memory-limit-mib", "X"),
     .help = "the host memory --recompute auto keeps activations within\n"
             "(default: this machine's MemAvailable)"},
    {TRAIN("plan", "STRING"), .help = "force a plan: fwd=0-3,4-7;bwd=8-9,4-7,0-3[;width=W]"},
    {INT64("iterations", "N", iterations, 4, 10000), .fallback = "12",
     .help = "simulated iterations (default 12; second half measured)"},
    {DOUBLE("host-gbs", "X", host_gbs),
     .help = "host memory GB/s shared by all ranks, a bound on the\n"
             "traffic of an iteration (default 0: not modelled)"},
    {INT64("sparse-embedding", "0|1", sparse_embedding, 0, 1), .fallback = "1",
     .help = "1 (default, as the engine does): the embedding moves by\n"
             "rows (upload of the rows a batch reads, download of their\n"
             "gradient), a tied head's gradient is summed on landing, and\n"
             "the rows the next forward reads are updated first;\n"
             "0: a dense embedding"},
    {CUSTOM("embed-rows-frac", "X", embed_rows_frac, parse_rows_fraction),
     .help = "0 < X <= 1: share of the vocabulary an iteration reads,\n"
             "for --sparse-embedding 1 (default: min(1, tokens per\n"
             "iteration / vocabulary rows), every token distinct)"},
    {TRAIN("topology", "FILE.xml"),
     .help = "the GPUs' PCIe topology (hwloc XML, as lstopo writes it):\n"
             "GPUs behind one switch share its uplink; --gpus defaults to\n"
             "its GPU count and --bandwidth-gbs is each GPU's own link\n"
             "(a group's shared link scaled by hwloc's speeds)"},
    {INT64("nodes", "N", nodes, 1, RP_SIM_MAX_NODES), .fallback = "1",
     .help = "N nodes of G GPUs, data parallel as train runs them: M is the\n"
             "step's microbatch count, each node runs M/N (N must divide\n"
             "M); plans are one node's (default 1)"},
    {DOUBLE("network-gbs", "X", network_gbs), .fallback = NUMBER_TEXT(RP_SIM_DEFAULT_NETWORK_GBS),
     .help = "each node's network link, gigaBITS/s per direction\n"
             "(default 100: 12.5 GB/s)"},
    {TRAIN("progress", "auto|line|none"),
     .help = "reports of a long plan search on standard error: auto\n"
             "(default) redraws a line on a terminal, else prints a\n"
             "line every 15 s; line prints lines; none is silent"},
    {TRAIN("deal", "natural|interleaved|best"),
     .help = "which GPU each executor of the round-robin\n"
             "deal drives: in bus order, or group by group in turn so\n"
             "consecutive jobs land on different switches; best (the\n"
             "default) plans both and keeps interleaved only when\n"
             "it is over 0.1% faster"},
    {TRAIN("documents", "FILE.npy"),
     .help = "a config's executors hold the segment starts train's\n"
             "--documents adds (the file itself is not read)"},
    {TRAIN("eval-data", "FILE.npy"),
     .help = "a config's executors also evaluate, as train --eval-data\n"
             "does: between segments, in place of the plan's buffers;\n"
             "the verdict counts the larger (the file itself is not read)"},
    {TRAIN("eval-documents", "FILE.npy"),
     .help = "with --eval-data: the evaluation holds the segment starts\n"
             "too (the file itself is not read)"},
    {TRAIN("lora-rank", "R"),
     .help = "a config's model trained as train --lora-rank R: LoRA\n"
             "adapters of rank R, the rest frozen (default 0: full\n"
             "fine-tuning)"},
    {TRAIN("lora-targets", "LIST"),
     .help = "the adapted projections, as train's (default all-linear)"},
    {TRAIN("lora-dropout", "P"), .help = "as train's (the executors' dropout buffers)"},
    {TRAIN("token-tile", "N"),
     .help = "a config's MLP GEMMs over tiles of N tokens, as train's\n"
             "(default 0: 1024)"},
    {TRAIN("mlp-chunk-tokens", "N"),
     .help = "the MLP tokens alive at once in a config's executors, as\n"
             "train's: whole tiles (default 0: the whole microbatch up to\n"
             "8192 tokens, else tiles of up to 2048)"},
    {"json", NULL, RP_OPTION_FLAG, FIELD(json), .help = "print JSON instead of a table"},
};

#define PLAN_ROWS (sizeof plan_rows / sizeof plan_rows[0])
#define FIRST_VALUE 256 /* getopt_long's value of the first row: distinct values refuse an
                           ambiguous abbreviation */

/* plan_rows with each TRAIN row replaced by train's (its field in
 * plan_args.train, its values and messages), keeping plan's help. */
static rp_status resolve_rows(rp_option *out, rp_error *err)
{
    size_t ntrain;
    const rp_option *train = rp_train_option_rows(&ntrain);
    for (size_t i = 0; i < PLAN_ROWS; i++) {
        out[i] = plan_rows[i];
        if (plan_rows[i].type != RP_OPTION_SHARED)
            continue;
        const rp_option *t = rp_options_find(train, ntrain, plan_rows[i].name);
        if (!t)
            return rp_error_set(err, RP_ERR_INTERNAL, "--%s: no such train option",
                                plan_rows[i].name);
        out[i] = *t;
        out[i].fallback = NULL; /* plan's defaults are its own (plan_args zeroed) */
        out[i].range_error = NULL;
        out[i].section = NULL;
        out[i].arg = plan_rows[i].arg;
        out[i].help = plan_rows[i].help;
    }
    return RP_OK;
}

void rp_plan_cli_usage(FILE *out)
{
    rp_option rows[PLAN_ROWS];
    rp_error err;
    if (resolve_rows(rows, &err) == RP_OK)
        rp_options_usage(out, rows, PLAN_ROWS);
}

/* The closed form's figures of a mixture of experts' blocks (the others
 * left 0: the dense block of the shape's fields), from the layout, as the
 * engine counts them (model/layout.h rp_block_work_get) for microbatches
 * of nseq sequences of S tokens: every expert's weights held, the router
 * and k experts run a token, gpt-oss's gate_up adapter with 2I outputs and
 * A run twice (gate's and up's), an expert's adapter on its k tokens, what
 * the backward makes again. *out
 * NULL for a model without experts. */
static rp_status moe_blocks(const rp_model_config *cfg, int64_t nseq, int64_t S,
                            rp_block_shape **out, rp_error *err)
{
    *out = NULL;
    if (!rp_model_has_moe(cfg))
        return RP_OK;
    rp_layer_desc *base = NULL, *adapters = NULL;
    int nbase = 0, nadapters = 0;
    const int64_t nblocks = cfg->num_hidden_layers;
    rp_status st = rp_model_base_layout(cfg, &base, &nbase, err);
    if (st == RP_OK && cfg->lora.rank > 0)
        st = rp_model_layout(cfg, &adapters, &nadapters, err);
    rp_block_shape *b = st == RP_OK ? calloc((size_t)nblocks, sizeof *b) : NULL;
    if (st == RP_OK && !b)
        st = rp_error_set(err, RP_ERR_NOMEM, "the cost of %lld blocks", (long long)nblocks);
    for (int64_t i = 0; st == RP_OK && i < nblocks; i++) {
        if (!rp_model_block_is_moe(cfg, (int)i))
            continue;
        rp_block_work w;
        rp_block_work_get(cfg, (int)i, nseq, S, &w);
        b[i] = (rp_block_shape){(int64_t)base[i + 1].numel, w.gemm, w.keys,
                                adapters ? (int64_t)adapters[i + 1].numel : 0, w.adapter,
                                w.remade, w.remade_adapter};
    }
    free(base);
    free(adapters);
    if (st != RP_OK) {
        free(b);
        return st;
    }
    *out = b;
    return RP_OK;
}

/* Whether cfg's dense blocks make their MLP's g, u and m again in the
 * backward for microbatches of nseq sequences of S tokens (several chunks:
 * model/layout.h's rp_block_work). */
static int dense_mlp_remade(const rp_model_config *cfg, int64_t nseq, int64_t S)
{
    for (int i = 0; i < cfg->num_hidden_layers; i++)
        if (!rp_model_block_is_moe(cfg, i)) {
            rp_block_work w;
            rp_block_work_get(cfg, i, nseq, S, &w);
            return w.remade > 0;
        }
    return 0;
}

/* A config's cost model: times from its FLOPs on the given device rates,
 * device memory as the executors of `device` allocate it (the workspace
 * into *workspace). */
static rp_status load_config(const char *path, int64_t S, int64_t tok_mb, int64_t microbatches,
                             double tflops,
                             double devgbs, int cb, rp_dtype grad_dtype, rp_dtype act_dtype,
                             int documents,
                             rp_device_kind device, const rp_lora_config *lora,
                             int64_t token_tile, int64_t mlp_chunk_tokens,
                             int64_t head_memory, int64_t *head_rows, rp_cost_model **out,
                             int64_t *workspace, rp_model_config *cfg_out, rp_error *err)
{
    rp_model_config cfg;
    RP_TRY(rp_config_load(path, &cfg, err));
    *head_rows = rp_memory_head_rows(rp_device_kernel_ops(device), &cfg, head_memory);
    rp_token_tiles_set(&cfg, token_tile, mlp_chunk_tokens);
    /* a model the executors cannot build is refused before it is costed */
    if (rp_model_config_check(&cfg, err) != RP_OK)
        return rp_error_prefix(err, "%s", path);
    cfg.lora = *lora;
    const char *refused = lora->rank > 0 && lora->targets != RP_LORA_ALL_LINEAR
                              ? rp_lora_refused_targets(&cfg, lora->targets)
                              : NULL;
    if (refused)
        return rp_error_set(err, RP_ERR_UNSUPPORTED, "%s: --lora-targets: %s", path, refused);
    cfg.lora.targets = rp_lora_model_targets(&cfg, lora->targets); /* no router when dense */
    if (lora->rank > 0 && !cfg.lora.targets)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: --lora-targets: the model has none "
                            "of these (gate, the router, is a mixture of experts')", path);
    *cfg_out = cfg;
    /* the closed form knows the seven projections of a dense block; a
     * mixture of experts' blocks are costed from the layout and the work
     * the block does (the router's and the experts' adapters among it) */
    rp_block_shape *blocks = NULL;
    RP_TRY(moe_blocks(&cfg, tok_mb / S, S, &blocks, err));
    rp_model_shape sh = {cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
                         cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size,
                         cfg.num_hidden_layers, cfg.tie_word_embeddings, cfg.attention_bias,
                         lora->rank, cfg.lora.targets & ~(1u << RP_LORA_ROUTER), blocks,
                         dense_mlp_remade(&cfg, tok_mb / S, S)};
    rp_device_spec d = {tflops, devgbs, cb, 4, S, tok_mb};
    rp_status st = rp_cost_from_shape(&sh, &d, out, err);
    free(blocks);
    if (st == RP_OK)
        st = rp_memory_model_fill(&cfg, device, cb == 2 ? RP_BF16 : RP_F32, grad_dtype, act_dtype,
                                   documents,
                                   microbatches, tok_mb / S, S, *head_rows, *out,
                                   workspace, err);
    if (st == RP_OK) /* an FP8 base's dequantisations, at the device's GB/s */
        rp_cost_price_dequant(*out, devgbs);
    if (st != RP_OK) {
        rp_cost_model_destroy(out);
        return rp_error_prefix(err, "%s: ", path);
    }
    const char *base = strrchr(path, '/');
    snprintf((*out)->name, sizeof (*out)->name, "%s", base ? base + 1 : path);
    return RP_OK;
}

/* --topology: the machine's link groups from an hwloc XML file. Each
 * group's shared link is --bandwidth-gbs scaled by hwloc's ratio of the
 * group's uplink to its GPUs' own links (1 when either is unknown). */
static rp_status use_topology(rp_plan_cli *o, const char *path, int G, double bw, rp_error *err)
{
    rp_topology *t = malloc(sizeof *t);
    if (!t)
        return rp_error_set(err, RP_ERR_NOMEM, "--topology: out of memory");
    rp_status st = rp_topology_read(path, t, err);
    if (st == RP_OK && t->ngpus == 0)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--topology %s: no GPU in it", path);
    if (st == RP_OK && t->ngpus > RP_SIM_MAX_GPUS)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--topology %s: %d GPUs (at most %d)", path,
                          t->ngpus, RP_SIM_MAX_GPUS);
    if (st == RP_OK && G && G != t->ngpus)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--gpus %d, but --topology %s has %d GPUs",
                          G, path, t->ngpus);
    if (st == RP_OK) {
        rp_machine *mc = &o->mc;
        o->topology_gpus = t->ngpus;
        mc->link_groups = t->ngroups;
        for (int k = 0; k < t->ngroups; k++)
            mc->uplink_gbs[k] = bw * rp_topology_uplink_ratio(t, k);
        for (int g = 0; g < t->ngpus; g++)
            mc->link_group[g] = t->gpu[g].group;
        snprintf(o->topology_warnings, sizeof o->topology_warnings, "%s", t->warnings);
    }
    free(t);
    return st;
}

/* The LoRA settings as train takes them (lora_run.c): --lora-rank R >= 1
 * with targets all-linear unless --lora-targets names them; other --lora-*
 * options need it; for a config only (a layer-times file has its bytes). */
static rp_status lora_options(int64_t rank, const char *targets, double dropout, int given,
                              int layers_file, rp_lora_config *c, rp_error *err)
{
    memset(c, 0, sizeof *c);
    if (rank < 1 && given)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--lora-targets and --lora-dropout need --lora-rank R >= 1");
    if (rank < 1)
        return RP_OK;
    if (layers_file)
        return rp_error_set(err, RP_ERR_INVALID_ARG,
                            "--lora-rank applies to a config (--init-config, --model); a "
                            "layer-times file carries its own bytes");
    if (!(dropout >= 0 && dropout < 1))
        return rp_error_set(err, RP_ERR_INVALID_ARG, "--lora-dropout: %g is outside [0, 1)",
                            dropout);
    c->rank = (int)rank;
    c->alpha = (double)rank;
    c->dropout = dropout;
    c->targets = RP_LORA_ALL_LINEAR;
    return targets ? rp_lora_targets_parse(targets, "--lora-targets", &c->targets, err) : RP_OK;
}

/* This machine's GPU 0, probed once for the head's chunk and the verdict:
 * NULL when there is none. */
typedef struct gpu_probe {
    int state; /* 0: not probed yet, 1: found, -1: none */
    rp_device_info info;
} gpu_probe;

static const rp_device_info *gpu_here(gpu_probe *g)
{
    if (g->state == 0)
        g->state = rp_device_probe(RP_DEVICE_CUDA, &g->info, NULL) == RP_OK ? 1 : -1;
    return g->state > 0 ? &g->info : NULL;
}

rp_status rp_plan_cli_parse(int argc, char **argv, rp_plan_cli *o, rp_error *err)
{
    gpu_probe gpu = {0};
    memset(o, 0, sizeof *o);
    rp_machine_defaults(&o->mc);
    o->mc.defer_wgrad = 1;
    rp_option rows[PLAN_ROWS];
    struct option opts[PLAN_ROWS + 2];
    plan_args a;
    memset(&a, 0, sizeof a);
    a.train.recompute = RP_RECOMPUTE_AUTO; /* train's default (shared rows take none here) */
    rp_status st = resolve_rows(rows, err);
    if (st == RP_OK)
        st = rp_options_default(rows, PLAN_ROWS, &a, err);
    if (st != RP_OK)
        return st;
    rp_options_getopt(rows, PLAN_ROWS, FIRST_VALUE, opts);
    optind = 0;
    opterr = 0;
    for (;;) {
        int idx = 0, c = getopt_long(argc, argv, ":h", opts, &idx);
        if (c == -1)
            break;
        if (c >= FIRST_VALUE && c < FIRST_VALUE + (int)PLAN_ROWS)
            st = rp_option_set(&rows[c - FIRST_VALUE], &a, optarg, err);
        else if (c == 'h')
            o->help = 1;
        else if (c == ':')
            st = rp_error_set(err, RP_ERR_INVALID_ARG, "%s needs a value", argv[optind - 1]);
        else
            st = rp_arg_unknown_option(argv[optind - 1], rows, PLAN_ROWS, err);
        if (st != RP_OK)
            break;
    }
    /* the options as the rest reads them */
    const char *config = a.source.init_config;
    char *config_buf = NULL;
    if (st == RP_OK && a.source.model_dir) {
        config_buf = malloc(strlen(a.source.model_dir) + 16);
        if (!config_buf)
            st = rp_error_set(err, RP_ERR_NOMEM, "out of memory");
        else
            sprintf(config_buf, "%s/config.json", a.source.model_dir);
        if (a.source.from_model || !config)
            config = config_buf;
        o->model_dir = a.source.model_dir;
    }
    int have_seq = !!(a.given & GIVEN_SEQ_LEN), have_batch = !!(a.given & GIVEN_BATCH_SIZE);
    int have_ws = !!(a.given & GIVEN_WORKSPACE), have_dtype = !!(a.given & GIVEN_DTYPE);
    int64_t config_ws = 0;
    int documents = a.train.documents != NULL;
    /* a --lora-* option other than --lora-rank */
    int lora_given = !!(a.train.lora_given & (RP_LORA_GIVEN_TARGETS | RP_LORA_GIVEN_DROPOUT));
    o->recompute = a.train.recompute;
    o->weight_buffers = a.train.weight_buffers;
    o->deal = (rp_deal_choice)a.train.deal;
    o->progress = a.train.progress;
    o->json = a.json;
    if (st == RP_OK && optind < argc)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "unexpected argument '%s'", argv[optind]);
    if (st != RP_OK || o->help) {
        free(config_buf);
        return st;
    }
    /* positive rates; a zero bandwidth would make every transfer take forever */
    if (!(a.tflops > 0) || !(a.device_gbs > 0) || !(a.bandwidth_gbs > 0) ||
        !(a.optimizer_gbs > 0) || !(a.network_gbs > 0))
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--tflops, --device-gbs, --bandwidth-gbs, "
                          "--optimizer-gbs and --network-gbs must be > 0");
    else if (a.transfer_ms < 0 && a.transfer_ms != -1)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--transfer-ms must be >= 0");
    else if (a.host_gbs < 0)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--host-gbs must be >= 0");
    else if (a.train.grad_clip < 0)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--grad-clip must be >= 0");
    else if (a.embed_rows_frac > 0 && !a.sparse_embedding)
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          "--embed-rows-frac applies only with --sparse-embedding 1");
    else if (!!a.layers + !!config != 1)
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          "give exactly one of --layers, --init-config or --model");
    if (st == RP_OK)
        st = lora_options(a.train.lora_rank, a.train.lora_targets, a.train.lora_dropout,
                          lora_given, a.layers != NULL,
                          &o->lora, err);
    if (st == RP_OK && a.layers && (a.train.token_tile || a.train.mlp_chunk_tokens))
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          "--%s applies to a config (--init-config, --model); a layer-times "
                          "file carries its own bytes",
                          a.train.token_tile ? "token-tile" : "mlp-chunk-tokens");
    if (st == RP_OK && a.train.eval_documents && !a.train.eval_data)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--eval-documents needs --eval-data");
    if (st == RP_OK && a.layers && a.train.eval_data)
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          "--eval-data applies to a config (--init-config, --model): the "
                          "evaluation's buffers are counted from the model");
    if (st == RP_OK && a.layers) {
        st = rp_cost_load(a.layers, &o->model, err);
    } else if (st == RP_OK) {
        int64_t m = a.microbatches ? a.microbatches : 1, b = have_batch ? a.batch_size : m;
        if (b % m)
            st = rp_error_set(err, RP_ERR_INVALID_ARG,
                              "--batch-size %lld is not divisible by --microbatches %lld",
                              (long long)b, (long long)m);
        else if (a.device == RP_DEVICE_AUTO) { /* what `roundpipe train` would use here */
            o->device_chosen = 1;
            rp_device_info info;
            a.device = rp_device_probe(RP_DEVICE_AUTO, &info, NULL) == RP_OK ? info.kind
                                                                             : RP_DEVICE_CPU;
        }
        if (!have_dtype) /* as train: bf16 on GPUs, fp32 on the CPU */
            a.compute_bytes = a.device == RP_DEVICE_CUDA ? 2 : 4;
        o->activation_dtype = a.train.activation_dtype_set ? a.train.activation_dtype
                              : a.device == RP_DEVICE_CUDA ? RP_BF16 : RP_F32;
        /* the head's chunk from train's figure (engine/run_plan.c):
         * --memory-limit-mib, else the GPU's whole memory (here
         * --device-memory-mib, else this machine's GPU 0) */
        o->head_memory = a.memory_limit_mib << 20;
        if (!o->head_memory && a.device == RP_DEVICE_CUDA)
            o->head_memory = a.device_memory_mib << 20;
        if (!o->head_memory && a.device == RP_DEVICE_CUDA && gpu_here(&gpu))
            o->head_memory = (int64_t)gpu.info.memory_bytes;
        if (st == RP_OK)
            st = load_config(config, a.seq_len, a.seq_len * b / m, m, a.tflops, a.device_gbs,
                             a.compute_bytes, (rp_dtype)a.grad_dtype, o->activation_dtype,
                             documents, a.device,
                             &o->lora, a.train.token_tile, a.train.mlp_chunk_tokens,
                             o->head_memory, &o->head_rows, &o->model,
                             &config_ws, &o->cfg, err);
        rp_eval_memory em; /* train --eval-data's evaluation, on these executors */
        if (st == RP_OK && a.train.eval_data)
            st = rp_memory_model_eval(&o->cfg, a.device, a.compute_bytes == 2 ? RP_BF16 : RP_F32,
                                      a.train.eval_documents != NULL, b / m, a.seq_len, &em, err);
        if (st == RP_OK && a.train.eval_data)
            o->eval_bytes = (int64_t)em.total;
        o->have_config = st == RP_OK;
        o->device = a.device;
        o->dtype = a.compute_bytes == 2 ? RP_BF16 : RP_F32;
        if (st == RP_OK)
            o->model->tokens_per_microbatch = a.seq_len * b / m;
    }
    free(config_buf);
    if (st == RP_OK && a.train.topology)
        st = use_topology(o, a.train.topology, (int)a.gpus, a.bandwidth_gbs, err);
    if (st != RP_OK) {
        rp_cost_model_destroy(&o->model);
        return st;
    }
    rp_machine *mc = &o->mc;
    mc->gpus = (int)(a.gpus ? a.gpus : o->topology_gpus ? o->topology_gpus
                           : o->model->default_gpus ? o->model->default_gpus : 1);
    mc->microbatches = (int)(a.microbatches ? a.microbatches
                             : o->model->default_microbatches ? o->model->default_microbatches : 1);
    mc->link_gbs = a.bandwidth_gbs;
    mc->transfer_ms = a.transfer_ms >= 0 ? a.transfer_ms : o->model->default_transfer_ms;
    mc->opt_gbs = a.optimizer_gbs;
    mc->optimizer_lag = (int)a.train.optimizer_lag;
    mc->clip = a.train.grad_clip > 0;
    /* auto: what train's auto does on GPUs (a layer-times file's or a
     * config's CUDA executors), off for a config's CPU executors */
    mc->speculative = a.train.speculative_update == RP_SPECULATIVE_ON ||
                      (a.train.speculative_update == RP_SPECULATIVE_AUTO &&
                       !(o->have_config && o->device == RP_DEVICE_CPU));
    mc->defer_wgrad = (int)a.defer_wgrad;
    mc->opt_spread = (int)a.optimizer_spread;
    mc->iterations = (int)a.iterations;
    mc->host_gbs = a.host_gbs;
    mc->sparse_embed = (int)a.sparse_embedding;
    mc->embed_rows_frac = a.embed_rows_frac;
    o->seq_len = a.seq_len;
    /* the verdict's GPU: --device-memory-mib, else this machine's GPU when a
     * config's executors are CUDA's here; the planner keeps to it less the
     * reserve train keeps, unless --memory-limit-mib says otherwise */
    o->memory_limit_given = a.memory_limit_mib << 20;
    int64_t device_total = 0; /* the GPU's whole memory, for cuDNN's reservation */
    int device_sm = 0;        /* 0: not probed, taken as able to run cuDNN */
    if (a.device_memory_mib) {
        o->device_memory = device_total = a.device_memory_mib << 20;
        o->device_memory_from = "--device-memory-mib";
    } else if (o->have_config && o->device == RP_DEVICE_CUDA && gpu_here(&gpu) &&
               gpu.info.free_bytes > 0) {
        o->device_memory = (int64_t)gpu.info.free_bytes;
        o->device_memory_from = "free on this machine's GPU 0";
        device_total = (int64_t)gpu.info.memory_bytes;
        device_sm = gpu.info.sm;
    }
    if (o->have_config && o->device == RP_DEVICE_CUDA && device_total > 0) {
        const int64_t nseq = a.seq_len > 0 && mc->microbatches > 0
                                 ? o->model->tokens_per_microbatch / a.seq_len
                                 : 1;
        rp_attn_shape sh = rp_block_attn_shape(&o->cfg, 0, nseq, a.seq_len);
        o->cudnn_reserve = (int64_t)rp_attention_run_reserve_bytes(
            a.train.attention, rp_unproven_allowed(RP_UNPROVEN_CUDNN), device_sm,
            rp_attention_run_documents(a.train.documents != NULL,
                                       a.train.eval_documents != NULL,
                                       rp_unproven_allowed(RP_UNPROVEN_CUDNN_DOCUMENTS)),
            o->cfg.arch == RP_ARCH_GPT_OSS, &sh,
            (size_t)device_total);
    }
    if (st == RP_OK && a.device_memory_mib && o->have_config && o->device != RP_DEVICE_CUDA)
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          "--device-memory-mib is a GPU's memory, but the plan is for %s "
                          "executors (--device cuda plans for GPUs)",
                          rp_device_kind_name(o->device));
    mc->memory_limit = a.memory_limit_mib ? a.memory_limit_mib << 20
                     : o->device_memory > 0
                         ? o->device_memory - rp_device_cuda_reserve_bytes(o->device_memory) -
                               o->cudnn_reserve
                         : 0;
    if (mc->memory_limit < 0)
        mc->memory_limit = 1; /* nothing fits: the planner says which layer */
    /* a config's workspace is the executors' (shared, and each layer's
     * own); --workspace-mib overrides both: the whole workspace of a job */
    mc->workspace_bytes = config && !have_ws ? config_ws : a.workspace_mib << 20;
    for (int l = 0; st == RP_OK && config && have_ws && l < o->model->num_layers; l++)
        o->model->layers[l].workspace_bytes = 0;
    if (a.layers && have_seq && have_batch)
        o->model->tokens_per_microbatch = a.seq_len * a.batch_size / mc->microbatches;
    mc->tokens_per_iteration = o->model->tokens_per_microbatch * mc->microbatches;
    o->width = (int)a.width;
    if (st == RP_OK && a.pipelines) { /* train's --pipelines P: pipelines of G/P executors */
        if (mc->gpus % a.pipelines)
            st = rp_error_set(err, RP_ERR_INVALID_ARG,
                              "--pipelines %lld does not divide the %d executors (each pipeline "
                              "has G/P of them)", (long long)a.pipelines, mc->gpus);
        else if (a.width && a.width != mc->gpus / a.pipelines)
            st = rp_error_set(err, RP_ERR_INVALID_ARG,
                              "--pipelines %lld (width %lld) contradicts --width %lld",
                              (long long)a.pipelines, (long long)(mc->gpus / a.pipelines),
                              (long long)a.width);
        else
            o->width = a.width = mc->gpus / a.pipelines;
    }
    /* which blocks may keep their activations (plan/keep.h): CPU executors
     * read them where the host store holds them, GPUs keep them in their
     * own memory; auto within the host limit, which rp_plan_cli_choose
     * then holds exactly */
    o->host_limit = rp_host_memory_limit(a.train.host_memory_limit_mib, &o->host_limit_from);
    if (st == RP_OK) {
        o->model->saved_by_layer = o->recompute == RP_RECOMPUTE_LAYER;
        o->model->single_weight_buffer = a.train.weight_buffers == 1;
    }
    if (st == RP_OK && o->have_config) {
        mc->keep_budget = o->recompute == RP_RECOMPUTE_NONE ? -1
                          : o->recompute == RP_RECOMPUTE_AUTO ? o->host_limit
                                                              : 0;
        st = rp_host_kept_floats(o->device, o->dtype, &o->cfg,
                                 o->model->tokens_per_microbatch / a.seq_len, a.seq_len,
                                 &o->kept_floats, err);
    } else if (st == RP_OK && o->model->keep_on_executor) {
        /* a layer-times file of GPUs that keep them in their own memory
         * (keep_device_bytes): that memory bounds them, not the host's */
        mc->keep_budget = o->recompute == RP_RECOMPUTE_NONE   ? -1
                          : o->recompute == RP_RECOMPUTE_AUTO ? INT64_MAX
                                                              : 0;
    }
    /* GPUs keep them in their own memory: of a size not known (no
     * --memory-limit-mib, --device-memory-mib or GPU here), auto keeps none
     * (the fastest plan would keep every block, whatever memory it takes) */
    if (st == RP_OK && o->model->keep_on_executor && (!o->have_config || o->device != RP_DEVICE_CPU) &&
        mc->memory_limit <= 0 && mc->keep_budget > 0)
        mc->keep_budget = 0;
    if (a.train.plan) {
        o->forced = malloc(sizeof *o->forced);
        if (!o->forced)
            st = rp_error_set(err, RP_ERR_NOMEM, "out of memory");
        else
            st = rp_plan_parse(a.train.plan, o->model->num_layers, o->forced, err);
        if (st == RP_OK && a.width && o->forced->width && o->forced->width != a.width)
            st = rp_error_set(err, RP_ERR_INVALID_ARG, "--width %lld contradicts the plan's width=%d",
                              (long long)a.width, o->forced->width);
        if (st == RP_OK && !o->forced->width)
            o->forced->width = a.width ? (int)a.width : mc->gpus;
    }
    /* several nodes: the all-gather moves compute copies, 4 bytes a
     * parameter for a config in fp32, else 2 */
    mc->nodes = (int)a.nodes;
    mc->network_gbs = a.network_gbs;
    mc->compute_bytes_per_param = o->have_config && o->dtype == RP_F32 ? 4.0 : 2.0;
    if (st == RP_OK && mc->microbatches % mc->nodes)
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          "--nodes %d does not divide --microbatches %d: M is the step's "
                          "microbatch count over all nodes and each node runs M/N of them, "
                          "as in roundpipe train", mc->nodes, mc->microbatches);
    if (st == RP_OK)
        st = rp_machine_check(mc, err);
    if (st != RP_OK)
        rp_plan_cli_free(o);
    return st;
}

void rp_plan_cli_free(rp_plan_cli *o)
{
    rp_cost_model_destroy(&o->model);
    free(o->kept_floats);
    o->kept_floats = NULL;
    free(o->forced);
    o->forced = NULL;
}

/* --weight-buffers auto (plan/deal.h): one buffer where no plan fits with
 * two, which the later plans of this model keep. */
rp_status rp_plan_cli_plan(const rp_plan_cli *o, rp_machine *mc, rp_plan *out, rp_sim_result *res,
                           rp_error *err)
{
    return rp_plan_dealt_buffers(o->model, mc, o->width, o->forced, o->deal,
                                 o->weight_buffers == 0, out, res, err);
}

void rp_plan_cli_deal_text(const rp_machine *mc, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "%d link group(s), %s deal: executor -> GPU",
                                 mc->link_groups, rp_deal_name(mc));
    for (int e = 0; e < mc->gpus && at < len; e++)
        at += (size_t)snprintf(buf + at, len - at, " %d", rp_machine_gpu_of(mc, e));
}

void rp_plan_cli_deal_json(const rp_machine *mc)
{
    if (!mc->link_groups)
        return;
    printf("\"link_groups\": %d, \"deal\": [", mc->link_groups);
    for (int e = 0; e < mc->gpus; e++)
        printf("%s%d", e ? ", " : "", rp_machine_gpu_of(mc, e));
    printf("], ");
}
