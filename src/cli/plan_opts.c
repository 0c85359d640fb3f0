/* Shared option parsing for `roundpipe plan` and `roundpipe simulate`. */
#include "cli/plan_opts.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/args.h"
#include "device/device.h"
#include "engine/memory_model.h"
#include "io/config.h"
#include "io/peft.h"
#include "plan/layers_file.h"
#include "plan/partition.h"
#include "plan/schedule.h"
#include "store/topology.h"

enum {
    O_LAYERS = 256, O_INIT_CONFIG, O_MODEL, O_GPUS, O_MB, O_SEQ, O_BATCH, O_TFLOPS, O_DEVGBS,
    O_DTYPE, O_GRAD_DTYPE, O_MEM, O_WS, O_BW, O_XFER, O_OPTGBS, O_LAG, O_CLIP, O_DEFER, O_SPREAD, O_WIDTH,
    O_PLAN, O_ITERS, O_HOSTGBS, O_SPARSE, O_ROWS, O_DEVICE, O_TOPOLOGY, O_DEAL, O_DOCUMENTS,
    O_NODES, O_NETGBS, O_LORA_RANK, O_LORA_TARGETS, O_LORA_DROPOUT,
    O_JSON, O_HELP, O_PIPELINES, O_RECOMPUTE, O_DEVMEM
};

static const struct option opts[] = {
    {"layers", required_argument, 0, O_LAYERS},
    {"init-config", required_argument, 0, O_INIT_CONFIG},
    {"model", required_argument, 0, O_MODEL},
    {"gpus", required_argument, 0, O_GPUS},
    {"microbatches", required_argument, 0, O_MB},
    {"seq-len", required_argument, 0, O_SEQ},
    {"batch-size", required_argument, 0, O_BATCH},
    {"tflops", required_argument, 0, O_TFLOPS},
    {"device-gbs", required_argument, 0, O_DEVGBS},
    {"dtype", required_argument, 0, O_DTYPE},
    {"grad-dtype", required_argument, 0, O_GRAD_DTYPE},
    {"memory-limit-mib", required_argument, 0, O_MEM},
    {"workspace-mib", required_argument, 0, O_WS},
    {"bandwidth-gbs", required_argument, 0, O_BW},
    {"transfer-ms", required_argument, 0, O_XFER},
    {"optimizer-gbs", required_argument, 0, O_OPTGBS},
    {"optimizer-lag", required_argument, 0, O_LAG},
    {"grad-clip", required_argument, 0, O_CLIP},
    {"defer-wgrad", required_argument, 0, O_DEFER},
    {"optimizer-spread", required_argument, 0, O_SPREAD},
    {"width", required_argument, 0, O_WIDTH},
    {"plan", required_argument, 0, O_PLAN},
    {"iterations", required_argument, 0, O_ITERS},
    {"host-gbs", required_argument, 0, O_HOSTGBS},
    {"sparse-embedding", required_argument, 0, O_SPARSE},
    {"embed-rows-frac", required_argument, 0, O_ROWS},
    {"device", required_argument, 0, O_DEVICE},
    {"topology", required_argument, 0, O_TOPOLOGY},
    {"deal", required_argument, 0, O_DEAL},
    {"documents", required_argument, 0, O_DOCUMENTS},
    {"nodes", required_argument, 0, O_NODES},
    {"network-gbs", required_argument, 0, O_NETGBS},
    {"lora-rank", required_argument, 0, O_LORA_RANK},
    {"lora-targets", required_argument, 0, O_LORA_TARGETS},
    {"lora-dropout", required_argument, 0, O_LORA_DROPOUT},
    {"json", no_argument, 0, O_JSON},
    {"help", no_argument, 0, O_HELP},
    /* in the enum's order: the option's name is opts[c - O_LAYERS] */
    {"pipelines", required_argument, 0, O_PIPELINES},
    {"recompute", required_argument, 0, O_RECOMPUTE},
    {"device-memory-mib", required_argument, 0, O_DEVMEM},
    {0, 0, 0, 0},
};

const char rp_plan_cli_options_usage[] =
    "  --layers FILE          layer-times file (format: bench/README.md)\n"
    "  --init-config FILE     a config.json; times from FLOPs (--tflops, --device-gbs),\n"
    "                         device memory as `roundpipe train`'s executors allocate it\n"
    "  --model DIR            a model directory (its config.json)\n"
    "  --gpus G               executors (default: the file's, else 1)\n"
    "  --microbatches M       per iteration (default: the file's, else 1)\n"
    "  --seq-len S            tokens per sample (default 1024)\n"
    "  --batch-size B         samples per iteration (default M)\n"
    "  --tflops X             achieved TFLOP/s per device for a config (default 100)\n"
    "  --device-gbs X         device memory GB/s for a config (default 1000)\n"
    "  --grad-dtype fp32|bf16 dtype gradients travel in, as train's (default fp32)\n"
    "  --dtype bf16|fp32      compute dtype for a config (default: as train, bf16 on\n"
    "                         GPUs, fp32 on the CPU)\n"
    "  --device cpu|cuda|auto executors whose memory a config's model counts (default\n"
    "                         auto: CUDA when a GPU is usable here, as train does)\n"
    "  --memory-limit-mib N   device memory an executor may use (default: a GPU's\n"
    "                         memory less the reserve, when known; else no limit)\n"
    "  --device-memory-mib N  each GPU's memory, for CUDA executors: the planner keeps\n"
    "                         to N less the reserve train keeps (5% + 512 MiB) and the\n"
    "                         verdict says whether the plan fits (default: the free\n"
    "                         memory of this machine's GPU, when CUDA is used here)\n"
    "  --workspace-mib N      workspace counted in it (default: a config's executors',\n"
    "                         else 256)\n"
    "  --bandwidth-gbs X      host<->device GB/s per GPU, each direction (default 25)\n"
    "  --transfer-ms X        latency of an activation hand-over between executors\n"
    "                         (default: the file's, else 0)\n"
    "  --optimizer-gbs X      memory GB/s of one rank's CPU optimizer (default 10)\n"
    "  --optimizer-lag 0|1    0: exact (default); 1: one step stale\n"
    "  --grad-clip C          C > 0: global-norm clipping (updates wait for all gradients)\n"
    "  --defer-wgrad 0|1      weight-gradient work after the input gradient is sent (default 1)\n"
    "  --optimizer-spread 0|1 split each layer's update over all ranks (default 1, as the\n"
    "                         engine does; 0: on the rank that produced the gradient)\n"
    "  --pipelines P          P pipelines of G/P executors, as train's --pipelines\n"
    "                         (default: the planner chooses)\n"
    "  --width W              pipeline width, executors per pipeline (--pipelines G/W)\n"
    "  --recompute stage|layer  as train's: layer saves every layer's input (host memory)\n"
    "  --plan STRING          force a plan: fwd=0-3,4-7;bwd=8-9,4-7,0-3[;width=W]\n"
    "  --iterations N         simulated iterations (default 12; second half measured)\n"
    "  --host-gbs X           host memory GB/s shared by all ranks, a bound on the\n"
    "                         traffic of an iteration (default 0: not modelled)\n"
    "  --sparse-embedding 0|1 1 (default, as the engine does): the embedding moves by\n"
    "                         rows (upload of the rows a batch reads, download of their\n"
    "                         gradient), a tied head's gradient is summed on landing, and\n"
    "                         the rows the next forward reads are updated first;\n"
    "                         0: a dense embedding\n"
    "  --embed-rows-frac X    0 < X <= 1: share of the vocabulary an iteration reads,\n"
    "                         for --sparse-embedding 1 (default: min(1, tokens per\n"
    "                         iteration / vocabulary rows), every token distinct)\n"
    "  --topology FILE.xml    the GPUs' PCIe topology (hwloc XML, as lstopo writes it):\n"
    "                         GPUs behind one switch share its uplink; --gpus defaults to\n"
    "                         its GPU count and --bandwidth-gbs is each GPU's own link\n"
    "                         (a group's shared link scaled by hwloc's speeds)\n"
    "  --nodes N              N nodes of G GPUs, data parallel as train runs them: M is the\n"
    "                         step's microbatch count, each node runs M/N (N must divide\n"
    "                         M); plans are one node's (default 1)\n"
    "  --network-gbs X        each node's network link, gigaBITS/s per direction\n"
    "                         (default 100: 12.5 GB/s)\n"
    "  --deal natural|interleaved|best  which GPU each executor of the round-robin\n"
    "                         deal drives: in bus order, or group by group in turn so\n"
    "                         consecutive jobs land on different switches; best (the\n"
    "                         default) plans both and keeps interleaved only when\n"
    "                         it is over 0.1% faster\n"
    "  --documents FILE.npy   a config's executors hold the segment starts train's\n"
    "                         --documents adds (the file itself is not read)\n"
    "  --lora-rank R          a config's model trained as train --lora-rank R: LoRA\n"
    "                         adapters of rank R, the rest frozen (default 0: full\n"
    "                         fine-tuning)\n"
    "  --lora-targets LIST    the adapted projections, as train's (default all-linear)\n"
    "  --lora-dropout P       as train's (the executors' dropout buffers)\n"
    "  --json                 print JSON instead of a table\n";

/* A config's cost model: times from its FLOPs on the given device rates,
 * device memory as the executors of `device` allocate it (the workspace
 * into *workspace). */
static rp_status load_config(const char *path, int64_t S, int64_t tok_mb, double tflops,
                             double devgbs, int cb, rp_dtype grad_dtype, int documents,
                             rp_device_kind device, const rp_lora_config *lora,
                             rp_cost_model **out,
                             int64_t *workspace, rp_model_config *cfg_out, rp_error *err)
{
    rp_model_config cfg;
    RP_TRY(rp_config_load(path, &cfg, err));
    cfg.lora = *lora;
    cfg.lora.targets = rp_lora_model_targets(&cfg, lora->targets); /* no router when dense */
    /* the closed form knows the seven projections of a dense block */
    const unsigned shape_targets = cfg.lora.targets & ~(1u << RP_LORA_ROUTER);
    if (lora->rank > 0 && !shape_targets)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: --lora-targets: %s", path,
                            cfg.lora.targets ? "the router (gate) alone is not modelled by the "
                                               "closed-form cost; name a projection too"
                                             : "the model has none of these (gate, the "
                                               "router, is a mixture of experts')");
    *cfg_out = cfg;
    rp_model_shape sh = {cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
                         cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size,
                         cfg.num_hidden_layers, cfg.tie_word_embeddings, cfg.attention_bias,
                         lora->rank, shape_targets};
    rp_device_spec d = {tflops, devgbs, cb, 4, S, tok_mb};
    rp_status st = rp_cost_from_shape(&sh, &d, out, err);
    if (st == RP_OK)
        st = rp_memory_model_fill(&cfg, device, cb == 2 ? RP_BF16 : RP_F32, grad_dtype, documents,
                                   tok_mb / S, S, *out,
                                   workspace, err);
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

rp_status rp_plan_cli_parse(int argc, char **argv, rp_plan_cli *o, rp_error *err)
{
    memset(o, 0, sizeof *o);
    rp_machine_defaults(&o->mc);
    o->mc.defer_wgrad = 1;
    const char *layers = NULL, *config = NULL, *plan = NULL;
    char *config_buf = NULL;
    int64_t G = 0, M = 0, S = 1024, B = 0, mem = 0, ws = 256, lag = 0, defer = 1, spread = 1;
    int64_t width = 0, iters = 12, cb = 2;
    double tflops = 100, devgbs = 1000, bw = 25, xfer = -1, optgbs = 10, clip = 0, hostgbs = 0;
    double rows = 0, netgbs = RP_SIM_DEFAULT_NETWORK_GBS;
    int64_t sparse = 1, nodes = 1, pipelines = 0, devmem = 0;
    int have_seq = 0, have_batch = 0, have_ws = 0, have_dtype = 0;
    rp_dtype grad_dtype = RP_F32;
    rp_device_kind device = RP_DEVICE_AUTO;
    int64_t config_ws = 0;
    const char *topology = NULL;
    int documents = 0;
    int64_t lora_rank = 0;
    double lora_dropout = 0;
    const char *lora_targets = NULL;
    int lora_given = 0; /* a --lora-* option other than --lora-rank */
    o->deal = RP_DEAL_BEST;
    optind = 0;
    opterr = 0;
    rp_status st = RP_OK;
    for (;;) {
        int idx = 0, c = getopt_long(argc, argv, ":h", opts, &idx);
        if (c == -1)
            break;
        const char *name = c >= O_LAYERS && c <= O_DEVMEM ? opts[c - O_LAYERS].name : "";
        char optname[48];
        snprintf(optname, sizeof optname, "--%s", name);
        switch (c) {
        case O_LAYERS: layers = optarg; break;
        case O_INIT_CONFIG: config = optarg; break;
        case O_MODEL:
            free(config_buf);
            config_buf = malloc(strlen(optarg) + 16);
            if (!config_buf) {
                st = rp_error_set(err, RP_ERR_NOMEM, "out of memory");
                break;
            }
            sprintf(config_buf, "%s/config.json", optarg);
            config = config_buf;
            o->model_dir = optarg;
            break;
        case O_GPUS: st = rp_arg_int(optname, optarg, 1, RP_SIM_MAX_GPUS, &G, err); break;
        case O_MB: st = rp_arg_int(optname, optarg, 1, 1 << 20, &M, err); break;
        case O_SEQ: st = rp_arg_int(optname, optarg, 1, 1 << 24, &S, err); have_seq = 1; break;
        case O_BATCH:
            st = rp_arg_int(optname, optarg, 1, 1 << 24, &B, err);
            have_batch = 1;
            break;
        case O_TFLOPS: st = rp_arg_double(optname, optarg, &tflops, err); break;
        case O_DEVGBS: st = rp_arg_double(optname, optarg, &devgbs, err); break;
        case O_DTYPE:
            have_dtype = 1;
            if (!strcmp(optarg, "bf16"))
                cb = 2;
            else if (!strcmp(optarg, "fp32"))
                cb = 4;
            else
                st = rp_error_set(err, RP_ERR_INVALID_ARG, "--dtype: '%s' is not bf16 or fp32",
                                  optarg);
            break;
        case O_GRAD_DTYPE:
            if (!strcmp(optarg, "bf16"))
                grad_dtype = RP_BF16;
            else if (!strcmp(optarg, "fp32"))
                grad_dtype = RP_F32;
            else
                st = rp_error_set(err, RP_ERR_INVALID_ARG,
                                  "--grad-dtype: '%s' is not one of fp32, bf16", optarg);
            break;
        case O_MEM: st = rp_arg_int(optname, optarg, 0, (int64_t)1 << 30, &mem, err); break;
        case O_WS:
            st = rp_arg_int(optname, optarg, 0, (int64_t)1 << 30, &ws, err);
            have_ws = 1;
            break;
        case O_DEVICE:
            st = rp_device_kind_parse(optarg, &device, err);
            if (st != RP_OK)
                st = rp_error_prefix(err, "--device: ");
            break;
        case O_BW: st = rp_arg_double(optname, optarg, &bw, err); break;
        case O_XFER: st = rp_arg_double(optname, optarg, &xfer, err); break;
        case O_OPTGBS: st = rp_arg_double(optname, optarg, &optgbs, err); break;
        case O_LAG: st = rp_arg_int(optname, optarg, 0, 1, &lag, err); break;
        case O_CLIP: st = rp_arg_double(optname, optarg, &clip, err); break;
        case O_DEFER: st = rp_arg_int(optname, optarg, 0, 1, &defer, err); break;
        case O_SPREAD: st = rp_arg_int(optname, optarg, 0, 1, &spread, err); break;
        case O_WIDTH: st = rp_arg_int(optname, optarg, 1, RP_SIM_MAX_GPUS, &width, err); break;
        case O_PIPELINES:
            st = rp_arg_int(optname, optarg, 1, RP_SIM_MAX_GPUS, &pipelines, err);
            break;
        case O_RECOMPUTE:
            if (strcmp(optarg, "stage") == 0 || strcmp(optarg, "layer") == 0)
                o->recompute_layer = optarg[0] == 'l';
            else
                st = rp_error_set(err, RP_ERR_INVALID_ARG,
                                  "--recompute: '%s' is not one of stage, layer", optarg);
            break;
        case O_DEVMEM: st = rp_arg_int(optname, optarg, 1, (int64_t)1 << 30, &devmem, err); break;
        case O_PLAN: plan = optarg; break;
        case O_ITERS: st = rp_arg_int(optname, optarg, 4, 10000, &iters, err); break;
        case O_HOSTGBS: st = rp_arg_double(optname, optarg, &hostgbs, err); break;
        case O_SPARSE: st = rp_arg_int(optname, optarg, 0, 1, &sparse, err); break;
        case O_ROWS:
            st = rp_arg_double(optname, optarg, &rows, err);
            if (st == RP_OK && !(rows > 0 && rows <= 1))
                st = rp_error_set(err, RP_ERR_INVALID_ARG, "--embed-rows-frac: %s is not in (0, 1]",
                                  optarg);
            break;
        case O_TOPOLOGY: topology = optarg; break;
        case O_DOCUMENTS: documents = 1; break;
        case O_DEAL: st = rp_deal_parse(optarg, "--deal", &o->deal, err); break;
        case O_NODES: st = rp_arg_int(optname, optarg, 1, RP_SIM_MAX_NODES, &nodes, err); break;
        case O_NETGBS: st = rp_arg_double(optname, optarg, &netgbs, err); break;
        case O_LORA_RANK: st = rp_arg_int(optname, optarg, 0, 65536, &lora_rank, err); break;
        case O_LORA_TARGETS: lora_targets = optarg; lora_given = 1; break;
        case O_LORA_DROPOUT:
            st = rp_arg_double(optname, optarg, &lora_dropout, err);
            lora_given = 1;
            break;
        case O_JSON: o->json = 1; break;
        case O_HELP: case 'h': o->help = 1; break;
        case ':':
            st = rp_error_set(err, RP_ERR_INVALID_ARG, "%s needs a value", argv[optind - 1]);
            break;
        default:
            st = rp_arg_unknown_option(argv[optind - 1], opts, err);
        }
        if (st != RP_OK)
            break;
    }
    if (st == RP_OK && optind < argc)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "unexpected argument '%s'", argv[optind]);
    if (st != RP_OK || o->help) {
        free(config_buf);
        return st;
    }
    /* positive rates; a zero bandwidth would make every transfer take forever */
    if (!(tflops > 0) || !(devgbs > 0) || !(bw > 0) || !(optgbs > 0) || !(netgbs > 0))
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--tflops, --device-gbs, --bandwidth-gbs, "
                          "--optimizer-gbs and --network-gbs must be > 0");
    else if (xfer < 0 && xfer != -1)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--transfer-ms must be >= 0");
    else if (hostgbs < 0)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--host-gbs must be >= 0");
    else if (clip < 0)
        st = rp_error_set(err, RP_ERR_INVALID_ARG, "--grad-clip must be >= 0");
    else if (rows > 0 && !sparse)
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          "--embed-rows-frac applies only with --sparse-embedding 1");
    else if (!!layers + !!config != 1)
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          "give exactly one of --layers, --init-config or --model");
    if (st == RP_OK)
        st = lora_options(lora_rank, lora_targets, lora_dropout, lora_given, layers != NULL,
                          &o->lora, err);
    if (st == RP_OK && layers) {
        st = rp_cost_load(layers, &o->model, err);
    } else if (st == RP_OK) {
        int64_t m = M ? M : 1, b = have_batch ? B : m;
        if (b % m)
            st = rp_error_set(err, RP_ERR_INVALID_ARG,
                              "--batch-size %lld is not divisible by --microbatches %lld",
                              (long long)b, (long long)m);
        else if (device == RP_DEVICE_AUTO) { /* what `roundpipe train` would use here */
            o->device_chosen = 1;
            rp_device_info info;
            device = rp_device_probe(RP_DEVICE_AUTO, &info, NULL) == RP_OK ? info.kind
                                                                             : RP_DEVICE_CPU;
        }
        if (!have_dtype) /* as train: bf16 on GPUs, fp32 on the CPU */
            cb = device == RP_DEVICE_CUDA ? 2 : 4;
        if (st == RP_OK)
            st = load_config(config, S, S * b / m, tflops, devgbs, (int)cb, grad_dtype, documents,
                             device, &o->lora,
                             &o->model,
                             &config_ws, &o->cfg, err);
        o->have_config = st == RP_OK;
        o->device = device;
        o->dtype = cb == 2 ? RP_BF16 : RP_F32;
        if (st == RP_OK)
            o->model->tokens_per_microbatch = S * b / m;
    }
    free(config_buf);
    if (st == RP_OK && topology)
        st = use_topology(o, topology, (int)G, bw, err);
    if (st != RP_OK) {
        rp_cost_model_destroy(&o->model);
        return st;
    }
    rp_machine *mc = &o->mc;
    mc->gpus = (int)(G ? G : o->topology_gpus ? o->topology_gpus
                           : o->model->default_gpus ? o->model->default_gpus : 1);
    mc->microbatches = (int)(M ? M : o->model->default_microbatches ? o->model->default_microbatches : 1);
    mc->link_gbs = bw;
    mc->transfer_ms = xfer >= 0 ? xfer : o->model->default_transfer_ms;
    mc->opt_gbs = optgbs;
    mc->optimizer_lag = (int)lag;
    mc->clip = clip > 0;
    mc->defer_wgrad = (int)defer;
    mc->opt_spread = (int)spread;
    mc->iterations = (int)iters;
    mc->host_gbs = hostgbs;
    mc->sparse_embed = (int)sparse;
    mc->embed_rows_frac = rows;
    o->seq_len = S;
    /* the verdict's GPU: --device-memory-mib, else this machine's GPU when a
     * config's executors are CUDA's here; the planner keeps to it less the
     * reserve train keeps, unless --memory-limit-mib says otherwise */
    o->memory_limit_given = mem << 20;
    if (devmem) {
        o->device_memory = devmem << 20;
        o->device_memory_from = "--device-memory-mib";
    } else if (o->have_config && o->device == RP_DEVICE_CUDA) {
        rp_device_info info;
        if (rp_device_probe(RP_DEVICE_CUDA, &info, NULL) == RP_OK && info.free_bytes > 0) {
            o->device_memory = (int64_t)info.free_bytes;
            o->device_memory_from = "free on this machine's GPU 0";
        }
    }
    if (st == RP_OK && devmem && o->have_config && o->device != RP_DEVICE_CUDA)
        st = rp_error_set(err, RP_ERR_INVALID_ARG,
                          "--device-memory-mib is a GPU's memory, but the plan is for %s "
                          "executors (--device cuda plans for GPUs)",
                          rp_device_kind_name(o->device));
    mc->memory_limit = mem ? mem << 20
                     : o->device_memory > 0
                         ? o->device_memory - rp_device_cuda_reserve_bytes(o->device_memory)
                         : 0;
    if (mc->memory_limit < 0)
        mc->memory_limit = 1; /* nothing fits: the planner says which layer */
    /* a config's workspace is the executors'; --workspace-mib overrides */
    mc->workspace_bytes = config && !have_ws ? config_ws : ws << 20;
    if (layers && have_seq && have_batch)
        o->model->tokens_per_microbatch = S * B / mc->microbatches;
    mc->tokens_per_iteration = o->model->tokens_per_microbatch * mc->microbatches;
    o->width = (int)width;
    if (st == RP_OK && pipelines) { /* train's --pipelines P: pipelines of G/P executors */
        if (mc->gpus % pipelines)
            st = rp_error_set(err, RP_ERR_INVALID_ARG,
                              "--pipelines %lld does not divide the %d executors (each pipeline "
                              "has G/P of them)", (long long)pipelines, mc->gpus);
        else if (width && width != mc->gpus / pipelines)
            st = rp_error_set(err, RP_ERR_INVALID_ARG,
                              "--pipelines %lld (width %lld) contradicts --width %lld",
                              (long long)pipelines, (long long)(mc->gpus / pipelines),
                              (long long)width);
        else
            o->width = width = mc->gpus / pipelines;
    }
    if (plan) {
        o->forced = malloc(sizeof *o->forced);
        if (!o->forced)
            st = rp_error_set(err, RP_ERR_NOMEM, "out of memory");
        else
            st = rp_plan_parse(plan, o->model->num_layers, o->forced, err);
        if (st == RP_OK && width && o->forced->width && o->forced->width != width)
            st = rp_error_set(err, RP_ERR_INVALID_ARG, "--width %lld contradicts the plan's width=%d",
                              (long long)width, o->forced->width);
        if (st == RP_OK && !o->forced->width)
            o->forced->width = width ? (int)width : mc->gpus;
    }
    /* several nodes: the all-gather moves compute copies, 4 bytes a
     * parameter for a config in fp32, else 2 */
    mc->nodes = (int)nodes;
    mc->network_gbs = netgbs;
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
    free(o->forced);
    o->forced = NULL;
}

rp_status rp_plan_cli_plan(const rp_plan_cli *o, rp_machine *mc, rp_plan *out, rp_sim_result *res,
                           rp_error *err)
{
    return rp_plan_dealt(o->model, mc, o->width, o->forced, o->deal, out, res, err);
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
