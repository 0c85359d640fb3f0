/* `roundpipe train`: parse the options, run the trainer on MPI_COMM_WORLD. */
#include "cli/commands.h"

#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "core/log.h"
#include "engine/trainer.h"

enum {
    OPT_MODEL = 256, OPT_INIT_CONFIG, OPT_DATA, OPT_LOSS_MASK, OPT_SEQ_LEN, OPT_BATCH_SIZE,
    OPT_MICROBATCHES, OPT_STEPS, OPT_LR, OPT_MIN_LR, OPT_WARMUP, OPT_SCHEDULE, OPT_WD,
    OPT_BETA1, OPT_BETA2, OPT_EPS, OPT_CLIP, OPT_DTYPE, OPT_SEED, OPT_LOG, OPT_SAVE,
    OPT_SAVE_DTYPE, OPT_DEVICE, OPT_THREADS, OPT_PROGRESS, OPT_PLAN, OPT_RECOMPUTE, OPT_TIMEOUT,
    OPT_LAG, OPT_CHUNK, OPT_TRACE, OPT_MEMLIMIT, OPT_BIND, OPT_HELP
};

static const struct option train_options[] = {
    {"model", required_argument, 0, OPT_MODEL},
    {"init-config", required_argument, 0, OPT_INIT_CONFIG},
    {"data", required_argument, 0, OPT_DATA},
    {"loss-mask", required_argument, 0, OPT_LOSS_MASK},
    {"seq-len", required_argument, 0, OPT_SEQ_LEN},
    {"batch-size", required_argument, 0, OPT_BATCH_SIZE},
    {"microbatches", required_argument, 0, OPT_MICROBATCHES},
    {"steps", required_argument, 0, OPT_STEPS},
    {"lr", required_argument, 0, OPT_LR},
    {"min-lr", required_argument, 0, OPT_MIN_LR},
    {"warmup-steps", required_argument, 0, OPT_WARMUP},
    {"lr-schedule", required_argument, 0, OPT_SCHEDULE},
    {"weight-decay", required_argument, 0, OPT_WD},
    {"beta1", required_argument, 0, OPT_BETA1},
    {"beta2", required_argument, 0, OPT_BETA2},
    {"eps", required_argument, 0, OPT_EPS},
    {"grad-clip", required_argument, 0, OPT_CLIP},
    {"dtype", required_argument, 0, OPT_DTYPE},
    {"seed", required_argument, 0, OPT_SEED},
    {"log", required_argument, 0, OPT_LOG},
    {"save", required_argument, 0, OPT_SAVE},
    {"save-dtype", required_argument, 0, OPT_SAVE_DTYPE},
    {"device", required_argument, 0, OPT_DEVICE},
    {"threads", required_argument, 0, OPT_THREADS},
    {"progress", required_argument, 0, OPT_PROGRESS},
    {"plan", required_argument, 0, OPT_PLAN},
    {"recompute", required_argument, 0, OPT_RECOMPUTE},
    {"timeout", required_argument, 0, OPT_TIMEOUT},
    {"optimizer-lag", required_argument, 0, OPT_LAG},
    {"chunk-mib", required_argument, 0, OPT_CHUNK},
    {"trace", required_argument, 0, OPT_TRACE},
    {"memory-limit-mib", required_argument, 0, OPT_MEMLIMIT},
    {"bind", required_argument, 0, OPT_BIND},
    {"help", no_argument, 0, OPT_HELP},
    {0, 0, 0, 0},
};

static const char train_usage[] =
    "usage: mpirun -np G roundpipe train (--model DIR | --init-config FILE) --data FILE.npy [options]\n"
    "  --model DIR            Hugging Face model directory (config.json + safetensors)\n"
    "  --init-config FILE     random initialisation from a config.json (uses --seed)\n"
    "  --data FILE.npy        token ids (1-D uint16/int32/uint32/int64)\n"
    "  --loss-mask FILE.npy   1 = that target position counts (uint8/bool, same length)\n"
    "  --seq-len S            tokens per sample (default 1024)\n"
    "  --batch-size B         samples per step (default 8)\n"
    "  --microbatches M       microbatches per step, divides B (default B)\n"
    "  --steps N              optimizer steps (default: one pass over the samples)\n"
    "  --lr X --min-lr X      peak and final learning rate (default 3e-4, 0)\n"
    "  --warmup-steps W       linear warm-up steps (default 0)\n"
    "  --lr-schedule S        constant | cosine | linear (default cosine)\n"
    "  --weight-decay X       AdamW decoupled decay on >=2-D parameters (default 0.01)\n"
    "  --beta1 X --beta2 X --eps X   AdamW (default 0.9, 0.999, 1e-8)\n"
    "  --grad-clip C          global L2 norm clipping, 0 = off (default 1.0)\n"
    "  --dtype fp32|bf16      executor compute dtype (default fp32)\n"
    "  --seed N               initialisation seed (default 1234)\n"
    "  --log FILE             JSON Lines metrics, one object per step\n"
    "  --save DIR             write config.json + model.safetensors at the end\n"
    "  --save-dtype fp32|bf16 dtype of saved weights (default: as loaded)\n"
    "  --device cpu|cuda|auto executor device (default cpu)\n"
    "  --threads N            compute threads per rank (default: the rank's share of cores)\n"
    "  --progress auto|line|none   progress display on rank 0 (default auto)\n"
    "engine:\n"
    "  --recompute stage|layer     activation checkpoints per backward stage or per layer\n"
    "  --timeout SECONDS      deadline of every wait between ranks (default 600)\n"
    "  --optimizer-lag 0|1    1: apply gradients one step late, for comparison (default 0)\n"
    "  --chunk-mib X          transfer chunk size (default 16)\n"
    "  --memory-limit-mib X   device memory the planner may use (default: no limit)\n"
    "  --plan TEXT            force a partition: 'fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2'\n"
    "  --trace FILE           Chrome trace JSON of the run (opens in Perfetto)\n"
    "  --bind yes|no          pin each rank to its share of the node's cores (default yes)\n"
    "See roundpipe(1).\n";

static rp_status parse_dtype(const char *opt, const char *s, rp_dtype *out, rp_error *err)
{
    if (strcmp(s, "fp32") == 0 || strcmp(s, "float32") == 0)
        *out = RP_F32;
    else if (strcmp(s, "bf16") == 0 || strcmp(s, "bfloat16") == 0)
        *out = RP_BF16;
    else
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not one of fp32, bf16", opt, s);
    return RP_OK;
}

static rp_status parse_train(int argc, char **argv, rp_train_options *o, int *help, rp_error *err)
{
    int64_t v;
    optind = 1;
    opterr = 0;
    for (;;) {
        int idx = 0, c = getopt_long(argc, argv, "h", train_options, &idx);
        if (c == -1)
            break;
        const char *a = optarg;
        switch (c) {
        case OPT_MODEL: o->model_dir = a; break;
        case OPT_INIT_CONFIG: o->init_config = a; break;
        case OPT_DATA: o->data = a; break;
        case OPT_LOSS_MASK: o->loss_mask = a; break;
        case OPT_SEQ_LEN: RP_TRY(rp_arg_int("--seq-len", a, 1, INT32_MAX, &o->seq_len, err)); break;
        case OPT_BATCH_SIZE: RP_TRY(rp_arg_int("--batch-size", a, 1, INT32_MAX, &o->batch_size, err)); break;
        case OPT_MICROBATCHES: RP_TRY(rp_arg_int("--microbatches", a, 1, INT32_MAX, &o->microbatches, err)); break;
        case OPT_STEPS: RP_TRY(rp_arg_int("--steps", a, 0, INT64_MAX, &o->steps, err)); break;
        case OPT_LR: RP_TRY(rp_arg_double("--lr", a, &o->lr, err)); break;
        case OPT_MIN_LR: RP_TRY(rp_arg_double("--min-lr", a, &o->min_lr, err)); break;
        case OPT_WARMUP: RP_TRY(rp_arg_int("--warmup-steps", a, 0, INT64_MAX, &o->warmup_steps, err)); break;
        case OPT_SCHEDULE: RP_TRY(rp_lr_kind_parse(a, "--lr-schedule", &o->schedule, err)); break;
        case OPT_WD: RP_TRY(rp_arg_double("--weight-decay", a, &o->weight_decay, err)); break;
        case OPT_BETA1: RP_TRY(rp_arg_double("--beta1", a, &o->beta1, err)); break;
        case OPT_BETA2: RP_TRY(rp_arg_double("--beta2", a, &o->beta2, err)); break;
        case OPT_EPS: RP_TRY(rp_arg_double("--eps", a, &o->eps, err)); break;
        case OPT_CLIP: RP_TRY(rp_arg_double("--grad-clip", a, &o->grad_clip, err)); break;
        case OPT_DTYPE: RP_TRY(parse_dtype("--dtype", a, &o->dtype, err)); break;
        case OPT_SEED: RP_TRY(rp_arg_u64("--seed", a, &o->seed, err)); break;
        case OPT_LOG: o->log_path = a; break;
        case OPT_SAVE: o->save_dir = a; break;
        case OPT_SAVE_DTYPE:
            RP_TRY(parse_dtype("--save-dtype", a, &o->save_dtype, err));
            o->save_dtype_set = 1;
            break;
        case OPT_DEVICE: RP_TRY(rp_device_kind_parse(a, &o->device, err)); break;
        case OPT_THREADS: RP_TRY(rp_arg_int("--threads", a, 0, 4096, &v, err)); o->threads = (int)v; break;
        case OPT_PROGRESS:
            if (strcmp(a, "auto") == 0) o->progress = RP_PROGRESS_AUTO;
            else if (strcmp(a, "line") == 0) o->progress = RP_PROGRESS_LINE;
            else if (strcmp(a, "none") == 0) o->progress = RP_PROGRESS_NONE;
            else return rp_error_set(err, RP_ERR_INVALID_ARG,
                                     "--progress: '%s' is not one of auto, line, none", a);
            break;
        case OPT_PLAN: o->plan = a; break;
        case OPT_RECOMPUTE:
            if (strcmp(a, "stage") == 0) o->recompute_layer = 0;
            else if (strcmp(a, "layer") == 0) o->recompute_layer = 1;
            else return rp_error_set(err, RP_ERR_INVALID_ARG,
                                     "--recompute: '%s' is not one of stage, layer", a);
            break;
        case OPT_TIMEOUT: RP_TRY(rp_arg_double("--timeout", a, &o->timeout_s, err)); break;
        case OPT_LAG: RP_TRY(rp_arg_int("--optimizer-lag", a, 0, 1, &v, err)); o->optimizer_lag = (int)v; break;
        case OPT_CHUNK: RP_TRY(rp_arg_double("--chunk-mib", a, &o->chunk_mib, err)); break;
        case OPT_TRACE: o->trace = a; break;
        case OPT_MEMLIMIT: RP_TRY(rp_arg_double("--memory-limit-mib", a, &o->memory_limit_mib, err)); break;
        case OPT_BIND:
            if (strcmp(a, "yes") == 0) o->bind = 1;
            else if (strcmp(a, "no") == 0) o->bind = 0;
            else return rp_error_set(err, RP_ERR_INVALID_ARG, "--bind: '%s' is not one of yes, no", a);
            break;
        case 'h':
        case OPT_HELP: *help = 1; return RP_OK;
        case ':':
            return rp_error_set(err, RP_ERR_INVALID_ARG, "%s needs a value", argv[optind - 1]);
        default:
            return rp_error_set(err, RP_ERR_INVALID_ARG, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "unexpected argument '%s'", argv[optind]);
    return rp_train_options_check(o, err);
}

int rp_cli_train(int argc, char **argv)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    rp_train_options o;
    rp_train_options_default(&o);
    rp_error err = {0};
    int help = 0;
    if (parse_train(argc, argv, &o, &help, &err) != RP_OK) {
        if (rank == 0)
            fprintf(stderr, "roundpipe train: %s\n(try 'roundpipe train --help')\n", err.msg);
        return 2;
    }
    if (help) {
        if (rank == 0)
            fputs(train_usage, stdout);
        return 0;
    }
    rp_logger lg = {stderr, RP_LOG_INFO, rank};
    rp_status s = rp_train_run(&o, MPI_COMM_WORLD, &lg, &err);
    if (s != RP_OK) {
        fprintf(stderr, "[roundpipe %d] error: %s (%s)\n", rank, err.msg, rp_status_string(s));
        return 1;
    }
    return 0;
}
