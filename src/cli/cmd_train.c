/* `roundpipe train`: parse the options, run the trainer on MPI_COMM_WORLD. */
#include "cli/commands.h"

#include <getopt.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/report.h"
#include "core/args.h"
#include "core/log.h"
#include "engine/trainer.h"
#include "io/checkpoint.h"

/* Every option but --shuffle and --use-rslora takes a value; rp_train_options_set interprets
 * them. */
static const struct option train_options[] = {
    {"model", required_argument, 0, 0}, {"init-config", required_argument, 0, 0},
    {"data", required_argument, 0, 0}, {"loss-mask", required_argument, 0, 0},
    {"documents", required_argument, 0, 0},
    {"eval-data", required_argument, 0, 0}, {"eval-mask", required_argument, 0, 0},
    {"eval-documents", required_argument, 0, 0}, {"eval-every", required_argument, 0, 0},
    {"eval-samples", required_argument, 0, 0},
    {"seq-len", required_argument, 0, 0}, {"batch-size", required_argument, 0, 0},
    {"microbatches", required_argument, 0, 0}, {"steps", required_argument, 0, 0},
    {"lr", required_argument, 0, 0}, {"min-lr", required_argument, 0, 0},
    {"warmup-steps", required_argument, 0, 0}, {"lr-schedule", required_argument, 0, 0},
    {"weight-decay", required_argument, 0, 0}, {"beta1", required_argument, 0, 0},
    {"beta2", required_argument, 0, 0}, {"eps", required_argument, 0, 0},
    {"grad-clip", required_argument, 0, 0}, {"dtype", required_argument, 0, 0},
    {"grad-dtype", required_argument, 0, 0}, {"shuffle", no_argument, 0, 0},
    {"seed", required_argument, 0, 0}, {"log", required_argument, 0, 0},
    {"save", required_argument, 0, 0}, {"save-dtype", required_argument, 0, 0},
    {"device", required_argument, 0, 0}, {"threads", required_argument, 0, 0},
    {"progress", required_argument, 0, 0}, {"plan", required_argument, 0, 0},
    {"recompute", required_argument, 0, 0}, {"timeout", required_argument, 0, 0},
    {"optimizer-lag", required_argument, 0, 0}, {"chunk-mib", required_argument, 0, 0},
    {"link-groups", required_argument, 0, 0}, {"topology", required_argument, 0, 0},
    {"deal", required_argument, 0, 0}, {"activation-numa", required_argument, 0, 0},
    {"trace", required_argument, 0, 0}, {"memory-limit-mib", required_argument, 0, 0},
    {"bind", required_argument, 0, 0}, {"pipelines", required_argument, 0, 0},
    {"ranks-per-node", required_argument, 0, 0},
    {"checkpoint-dir", required_argument, 0, 0}, {"checkpoint-every", required_argument, 0, 0},
    {"keep-checkpoints", required_argument, 0, 0}, {"resume", required_argument, 0, 0},
    {"lora-rank", required_argument, 0, 0}, {"lora-alpha", required_argument, 0, 0},
    {"lora-targets", required_argument, 0, 0}, {"lora-dropout", required_argument, 0, 0},
    {"use-rslora", no_argument, 0, 0}, {"lora-init", required_argument, 0, 0},
    {"save-merged", required_argument, 0, 0}, {"router-aux-coef", required_argument, 0, 0},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

static const char train_usage[] =
    "usage: mpirun -np G roundpipe train (--model DIR | --init-config FILE) --data FILE.npy [options]\n"
    "  --model DIR            Hugging Face model directory (config.json + safetensors)\n"
    "  --init-config FILE     random initialisation from a config.json (uses --seed)\n"
    "  --data FILE.npy        token ids (1-D uint8/uint16/int32/uint32/int64)\n"
    "  --loss-mask FILE.npy   1 = that target position counts (uint8/bool, same length)\n"
    "  --documents FILE.npy   sorted int64 start offsets of documents in --data (first 0):\n"
    "                         a token attends only to earlier tokens of its document\n"
    "  --eval-data FILE.npy   a validation set: eval_loss after the last step (and every\n"
    "                         --eval-every N steps), with --eval-mask and --eval-documents\n"
    "                         as --loss-mask and --documents; --eval-samples K: its first K\n"
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
    "  --dtype fp32|bf16      executor compute dtype (default: bf16 on CUDA, which\n"
    "                         computes in bf16 only, fp32 on the CPU)\n"
    "  --shuffle              visit each epoch's samples in a random order (seeded by\n"
    "                         --seed and the epoch; default: the file's order)\n"
    "  --grad-dtype fp32|bf16 dtype gradients travel in from the executors (accumulated\n"
    "                         in fp32 either way; default fp32)\n"
    "  --seed N               initialisation seed (default 1234)\n"
    "  --log FILE             JSON Lines metrics, one object per step\n"
    "  --save DIR             write config.json + model.safetensors at the end\n"
    "  --save-dtype fp32|bf16|fp16  dtype of saved weights (default: as loaded)\n"
    "  --checkpoint-dir DIR   checkpoints in DIR/step-00000100/ (and one at the end)\n"
    "  --checkpoint-every N   a checkpoint after every N-th step (default 0: the last only)\n"
    "  --keep-checkpoints K   keep the newest K complete checkpoints (default 2; 0: all)\n"
    "  --resume PATH|auto     continue from a checkpoint (auto: the newest under\n"
    "                         --checkpoint-dir, or a fresh start when there is none)\n"
    "LoRA (frozen base, trainable adapters saved for PEFT):\n"
    "  --lora-rank R          train LoRA adapters of rank R (default 0: the full model)\n"
    "  --lora-alpha A         scaling A/R (default R: scaling 1)\n"
    "  --lora-targets LIST    q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,\n"
    "                         gate (a mixture of experts' router; its experts' projections\n"
    "                         are gate_proj.. per expert) or all-linear (default)\n"
    "  --lora-dropout P       dropout on the adapters' input, in [0, 1) (default 0; not\n"
    "                         on a mixture of experts' experts)\n"
    "  --use-rslora           scaling A/sqrt(R)\n"
    "  --lora-init DIR        start from a PEFT adapter directory\n"
    "  --save-merged DIR      also write the merged model (W + scaling B A)\n"
    "  --router-aux-coef X    mixture of experts: add X times the load-balancing loss\n"
    "                         (default: config.json's, if output_router_logits)\n"
    "  --device cpu|cuda|auto executor device (default auto: CUDA when a GPU is usable)\n"
    "  --threads N            compute threads per rank (default: the rank's share of cores)\n"
    "  --progress auto|line|none   progress display on rank 0 (default auto)\n"
    "engine:\n"
    "  --recompute stage|layer     activation checkpoints per backward stage or per layer\n"
    "  --timeout SECONDS      deadline of every wait between ranks; must exceed one\n"
    "                         iteration (default 600)\n"
    "  --optimizer-lag 0|1    1: apply gradients one step late, for comparison (default 0)\n"
    "  --chunk-mib X          transfer chunk size (default 16)\n"
    "  --link-groups LIST|none  each node rank's PCIe link group, e.g. 0,0,1,1: ranks of a\n"
    "                         group hold their lower-class transfers while a peer has an\n"
    "                         urgent one (default: from hwloc on GPUs, none on the CPU)\n"
    "  --topology FILE.xml    the node's PCIe topology from an hwloc XML file (default:\n"
    "                         this machine's, on GPUs); CPU executors take its GPUs in\n"
    "                         bus order, so a server's groups and deal can be rehearsed\n"
    "  --deal natural|interleaved|best  which node rank runs each executor of the\n"
    "                         round-robin deal: in rank order, or link group by group\n"
    "                         in turn (best: interleaved when the planner's\n"
    "                         simulation finds it over 0.1% faster)\n"
    "  --activation-numa interleave|reader  activation buffers interleaved over the NUMA\n"
    "                         nodes like the rest of the store (default), or each on the\n"
    "                         node of the GPUs that read it, when they share one\n"
    "  --memory-limit-mib X   device memory the planner may use (default: no limit)\n"
    "  --pipelines P          P round-robin pipelines of G/P executors, M/P microbatches\n"
    "                         each; gradients summed in pipeline order (default 1)\n"
    "  --ranks-per-node K     each K consecutive ranks are a node with its own host store;\n"
    "                         nodes run M/N microbatches each and sum gradients in pipeline\n"
    "                         order over MPI (default: the ranks that share memory)\n"
    "  --plan TEXT            force a partition: 'fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2'\n"
    "  --trace FILE           Chrome trace JSON of the run (opens in Perfetto)\n"
    "  --bind yes|no          pin each rank to its share of the node's cores (default yes)\n"
    "See roundpipe(1).\n";

static rp_status parse_train(int argc, char **argv, rp_train_options *o, int *help, rp_error *err)
{
    optind = 1;
    opterr = 0;
    for (;;) {
        int idx = -1, c = getopt_long(argc, argv, ":h", train_options, &idx);
        if (c == -1)
            break;
        if (c == 0)
            RP_TRY(rp_train_options_set(o, train_options[idx].name, optarg, err));
        else if (c == 'h') {
            *help = 1;
            return RP_OK;
        } else if (c == ':')
            return rp_error_set(err, RP_ERR_INVALID_ARG, "%s needs a value", argv[optind - 1]);
        else
            return rp_arg_unknown_option(argv[optind - 1], train_options, err);
    }
    if (optind < argc)
        return rp_error_set(err, RP_ERR_INVALID_ARG, "unexpected argument '%s'", argv[optind]);
    return rp_train_options_check(o, err);
}

static volatile sig_atomic_t g_checkpoints; /* the run has --checkpoint-dir */

static void on_signal(int sig)
{
    /* SIGUSR1 and SIGTERM with checkpoints: the step in progress ends and a
     * checkpoint is written, once; any other signal, or a second one, stops
     * at once */
    if (g_checkpoints && (sig == SIGUSR1 || sig == SIGTERM) && !rp_checkpoint_requested())
        rp_request_checkpoint(sig);
    else
        rp_interrupt(sig);
}

/* SIGINT, SIGTERM and SIGUSR1 ask the run to stop: at once, removing its
 * temporary files and shared memory, saying where it stopped and exiting
 * 128 + the signal; or, with --checkpoint-dir, SIGUSR1 and SIGTERM after
 * the step in progress, with a checkpoint, exiting 0. */
static void catch_interrupts(int checkpoints)
{
    g_checkpoints = checkpoints;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

/* What a run stopped at once keeps, for the line that says so: the newest
 * complete checkpoint. */
static void kept(const rp_train_options *o, char *out, size_t cap)
{
    char newest[4096] = "";
    rp_error err = {0};
    if (!o->checkpoint_dir)
        snprintf(out, cap, "no checkpoint (no --checkpoint-dir)");
    else if (rp_checkpoint_latest(o->checkpoint_dir, newest, sizeof newest, &err) == RP_OK &&
             newest[0])
        snprintf(out, cap, "%s (continue with the same command and --resume auto)", newest);
    else
        snprintf(out, cap, "no checkpoint (none was written yet)");
}

/* How long a failed rank waits for the others to compare errors (report.h):
 * after a failure they agree within a step's time, and a job that ends must
 * not sit for the run's --timeout; a rank a signal stopped has less, as
 * mpirun kills its ranks about a second after it forwards SIGTERM. */
#define REPORT_WAIT_S 10.0
#define REPORT_WAIT_SIGNALLED_S 0.5

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
    rp_logger lg = {.stream = stderr, .level = RP_LOG_INFO, .rank = rank};
    catch_interrupts(o.checkpoint_dir != NULL);
    rp_status s = rp_train_run(&o, MPI_COMM_WORLD, &lg, &err);
    if (s == RP_OK)
        return 0;
    if (s == RP_ERR_PEER_LOST) {
        /* the communicator is unusable: no collective can end the job */
        fprintf(stderr, "[roundpipe %d] error: %s (%s)\n", rank, err.msg, rp_status_string(s));
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* one line per failure (report.h); the ranks a signal stopped say so
     * in one line, the lowest's, with what the run keeps */
    int sig = rp_interrupted();
    char line[RP_ERROR_MSG_MAX + 4400];
    if (sig) {
        char what[4200];
        kept(&o, what, sizeof what);
        snprintf(line, sizeof line, "%s (%s); kept: %s",
                 s == RP_ERR_INTERRUPTED ? err.msg : "interrupted",
                 sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM"
                                          : sig == SIGUSR1 ? "SIGUSR1" : "signal", what);
        rp_cli_report(MPI_COMM_WORLD, 0, "interrupted", line, REPORT_WAIT_SIGNALLED_S);
        return 128 + sig; /* as a shell reports a process its signal ended */
    }
    snprintf(line, sizeof line, "error: %s (%s)", err.msg, rp_status_string(s));
    rp_cli_report(MPI_COMM_WORLD, err.echo, line, line, REPORT_WAIT_S);
    return 1;
}
