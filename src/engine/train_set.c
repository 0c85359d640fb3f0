/* The options of `roundpipe train` as one table, a row per option: its name,
 * its field, its default, the values it accepts and its --help text. The
 * command line (its getopt_long array and --help, cli/cmd_train.c), the
 * public API (rp_train_config_set), rp_train_options_default and the range
 * checks of rp_train_options_check all read these rows, so they accept the
 * same names and values and fail with the same messages; `plan` and
 * `simulate` parse the options they share with train by these rows too
 * (cli/plan_opts.c). */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/args.h"
#include "engine/train_options.h"
#include "kernels/attention_choice.h"
#include "plan/deal.h"

/* executors do not compute in fp16; a saved file may hold it */
static rp_status parse_dtype(const char *opt, const char *s, int allow_f16, rp_dtype *out,
                             rp_error *err)
{
    if (strcmp(s, "fp32") == 0 || strcmp(s, "float32") == 0)
        *out = RP_F32;
    else if (strcmp(s, "bf16") == 0 || strcmp(s, "bfloat16") == 0)
        *out = RP_BF16;
    else if (allow_f16 && (strcmp(s, "fp16") == 0 || strcmp(s, "float16") == 0))
        *out = RP_F16;
    else
        return rp_error_set(err, RP_ERR_INVALID_ARG, "%s: '%s' is not one of fp32, bf16%s", opt,
                            s, allow_f16 ? ", fp16" : "");
    return RP_OK;
}

static rp_status parse_compute_dtype(const char *opt, const char *s, void *field, rp_error *err)
{
    return parse_dtype(opt, s, 0, field, err);
}

static rp_status parse_saved_dtype(const char *opt, const char *s, void *field, rp_error *err)
{
    return parse_dtype(opt, s, 1, field, err);
}

static rp_status parse_lr_schedule(const char *opt, const char *s, void *field, rp_error *err)
{
    return rp_lr_kind_parse(s, opt, field, err);
}

static rp_status parse_device(const char *opt, const char *s, void *field, rp_error *err)
{
    return rp_device_kind_parse(s, field, err);
}

static rp_status parse_deal(const char *opt, const char *s, void *field, rp_error *err)
{
    rp_deal_choice d;
    RP_TRY(rp_deal_parse(s, opt, &d, err));
    *(int *)field = (int)d;
    return RP_OK;
}

static const char *const recompute_words[] = {"stage", "layer", "none", "auto", NULL};
static const char *const speculative_words[] = {"auto", "on", "off", NULL};
static const char *const bind_words[] = {"no", "yes", NULL};
static const char *const progress_words[] = {"auto", "line", "none", NULL};
static const char *const weight_buffer_words[] = {"auto", "1", "2", NULL};
static const char *const activation_numa_words[] = {"interleave", "reader", NULL};

/* RP_OPTION_WORD writes an int */
_Static_assert(sizeof(rp_progress_mode) == sizeof(int), "--progress is stored as an int");

#define TEXT(x) #x
#define NUMBER_TEXT(x) TEXT(x)
#define TIMEOUT_MAX_S 31536000        /* a year */
#define CHUNK_MAX_MIB 1048576         /* 1 TiB */
#define MEMORY_LIMIT_MAX_MIB 1073741824 /* 1 PiB */
#define TOKEN_TILE_MAX 16777216         /* 2^24, plan's longest --seq-len */
#define CHUNK_TOKENS_MAX 1099511627776  /* 2^40: its products with widths stay far from overflow */

#define FIELD(f) offsetof(rp_train_options, f)
#define GIVEN(f, bit) .given_offset = FIELD(f), .given_bit = (bit)
#define STRING(n, a, f) n, a, RP_OPTION_STRING, FIELD(f)
#define INT64(n, a, f, l, h) n, a, RP_OPTION_INT64, FIELD(f), .lo = (l), .hi = (h)
#define INT(n, a, f, l, h) n, a, RP_OPTION_INT, FIELD(f), .lo = (l), .hi = (h)
#define DOUBLE(n, a, f) n, a, RP_OPTION_DOUBLE, FIELD(f)
#define WORD(n, a, f, w) n, a, RP_OPTION_WORD, FIELD(f), .words = (w)
#define CUSTOM(n, a, f, p) n, a, RP_OPTION_CUSTOM, FIELD(f), .parse = (p)
#define AT_LEAST(m) .min = (m), .max = INFINITY

/* The rows stay in this order: getopt_long gives an ambiguous abbreviation
 * of equal rows to the first it matches ("--r stage" is --recompute), and
 * --help lists them in it. Append new rows to their section. */
static const rp_option rows[] = {
    {STRING("model", "DIR", model_dir),
     .help = "Hugging Face model directory (config.json + safetensors)"},
    {STRING("init-config", "FILE", init_config),
     .help = "random initialisation from a config.json (uses --seed)"},
    {STRING("data", "FILE.npy", data), .help = "token ids (1-D uint8/uint16/int32/uint32/int64)"},
    {STRING("loss-mask", "FILE.npy", loss_mask),
     .help = "1 = that target position counts (uint8/bool, same length)"},
    {STRING("documents", "FILE.npy", documents),
     .help = "sorted int64 start offsets of documents in --data (first 0):\n"
             "a token attends only to earlier tokens of its document"},
    {STRING("eval-data", "FILE.npy", eval_data),
     .help = "a validation set: eval_loss after the last step (and every\n"
             "--eval-every N steps)"},
    {STRING("eval-mask", "FILE.npy", eval_mask), .help = "as --loss-mask, for --eval-data"},
    {STRING("eval-documents", "FILE.npy", eval_documents),
     .help = "as --documents, for --eval-data"},
    {INT64("eval-every", "N", eval_every, 0, INT64_MAX),
     .help = "evaluate after every N-th step too (default 0: the last only)"},
    {INT64("eval-samples", "K", eval_samples, 0, INT64_MAX),
     .help = "evaluate on the first K samples of --eval-data (default 0: all)"},
    {INT64("seq-len", "S", seq_len, 1, INT32_MAX), .fallback = "1024",
     .range_error = "--seq-len must be >= 1 (got %lld)",
     .help = "tokens per sample (default 1024)"},
    {INT64("batch-size", "B", batch_size, 1, INT32_MAX), .fallback = "8",
     .range_error = "--batch-size must be >= 1 (got %lld)", .help = "samples per step (default 8)"},
    {INT64("microbatches", "M", microbatches, 1, INT32_MAX),
     .help = "microbatches per step, divides B (default B)"},
    {INT64("steps", "N", steps, 0, INT64_MAX), .range_error = "--steps must be >= 0",
     .help = "optimizer steps (default: one pass over the samples)"},
    {DOUBLE("lr", "X", lr), .fallback = "3e-4", AT_LEAST(0),
     .range_error = "--lr must be a finite number >= 0",
     .help = "peak learning rate (default 3e-4)"},
    {DOUBLE("min-lr", "X", min_lr), .help = "final learning rate (default 0)"},
    {INT64("warmup-steps", "W", warmup_steps, 0, INT64_MAX),
     .range_error = "--warmup-steps must be >= 0", .help = "linear warm-up steps (default 0)"},
    {CUSTOM("lr-schedule", "S", schedule, parse_lr_schedule), .fallback = "cosine",
     .help = "constant | cosine | linear (default cosine)"},
    {DOUBLE("weight-decay", "X", weight_decay), .fallback = "0.01", /* torch.optim.AdamW's */
     AT_LEAST(0), .range_error = "--weight-decay must be >= 0",
     .help = "AdamW decoupled decay on >=2-D parameters (default 0.01)"},
    {DOUBLE("beta1", "X", beta1), .fallback = "0.9", .min = 0, .max = 1,
     .bounds = RP_OPTION_MAX_OPEN, .range_error = "--beta1 must be in [0, 1)",
     .help = "AdamW's beta1 (default 0.9)"},
    {DOUBLE("beta2", "X", beta2), .fallback = "0.999", .min = 0, .max = 1,
     .bounds = RP_OPTION_MAX_OPEN, .range_error = "--beta2 must be in [0, 1)",
     .help = "AdamW's beta2 (default 0.999)"},
    {DOUBLE("eps", "X", eps), .fallback = "1e-8", AT_LEAST(0), .bounds = RP_OPTION_MIN_OPEN,
     .range_error = "--eps must be > 0", .help = "AdamW's epsilon (default 1e-8)"},
    {DOUBLE("grad-clip", "C", grad_clip), .fallback = "1.0", AT_LEAST(0),
     .range_error = "--grad-clip must be >= 0 (0 = off)",
     .help = "global L2 norm clipping, 0 = off (default 1.0)"},
    {CUSTOM("dtype", "fp32|bf16", dtype, parse_compute_dtype), .fallback = "fp32",
     GIVEN(dtype_set, 1),
     .help = "executor compute dtype (default: bf16 on CUDA, which\n"
             "computes in bf16 only, fp32 on the CPU)"},
    {CUSTOM("grad-dtype", "fp32|bf16", grad_dtype, parse_compute_dtype), .fallback = "fp32",
     .help = "dtype gradients travel in from the executors (accumulated\n"
             "in fp32 either way; default fp32)"},
    {CUSTOM("activation-dtype", "fp32|bf16", activation_dtype, parse_compute_dtype),
     .fallback = "fp32", GIVEN(activation_dtype_set, 1),
     .help = "dtype of the residual stream between layers: every\n"
             "layer's output is rounded to it, and the host store holds\n"
             "the saved block inputs in it (default: bf16 on CUDA, fp32\n"
             "on the CPU)"},
    {"shuffle", NULL, RP_OPTION_FLAG, FIELD(shuffle),
     .help = "visit each epoch's samples in a random order (seeded by\n"
             "--seed and the epoch; default: the file's order)"},
    {"seed", "N", RP_OPTION_U64, FIELD(seed), .fallback = "1234",
     .help = "initialisation seed (default 1234)"},
    {STRING("log", "FILE", log_path), .help = "JSON Lines metrics, one object per step"},
    {STRING("save", "DIR", save_dir), .help = "write config.json + model.safetensors at the end"},
    {CUSTOM("save-dtype", "fp32|bf16|fp16", save_dtype, parse_saved_dtype),
     GIVEN(save_dtype_set, 1), .help = "dtype of saved weights (default: as loaded)"},
    {CUSTOM("device", "cpu|cuda|auto", device, parse_device), .fallback = "auto",
     .help = "executor device (default auto: CUDA when a GPU is usable)"},
    {INT("threads", "N", threads, 0, 4096), .range_error = "--threads must be >= 0",
     .help = "compute threads per rank (default: the rank's share of cores)"},
    {WORD("progress", "auto|line|none", progress, progress_words), .fallback = "auto",
     .help = "progress display on rank 0 (default auto)"},
    {STRING("plan", "TEXT", plan), .section = "engine:",
     .help = "force a partition: 'fwd=0-3,4-7;bwd=8-9,6-7,3-5,0-2'"},
    {WORD("recompute", "auto|stage|layer|none", recompute, recompute_words), .fallback = "auto",
     .help = "auto (default): keep the activations of as many blocks\n"
             "as memory allows, recompute the rest from checkpoints per\n"
             "backward stage; stage, layer: recompute every block below\n"
             "the tail from a checkpoint per stage or per layer; none:\n"
             "keep every block's (refused when it does not fit)"},
    {WORD("weight-buffers", "auto|1|2", weight_buffers, weight_buffer_words),
     .fallback = "auto",
     .help = "stage weight buffers per executor: 2 uploads the next\n"
             "job's weights while a job runs; 1 holds half the weights'\n"
             "device memory (longer sequences), each upload waiting for\n"
             "the job before it to end; auto (default): 2 unless no plan\n"
             "fits the device memory with them"},
    {WORD("attention", "auto|cudnn|own", attention, rp_attention_mode_words), .fallback = "auto",
     .help = "CUDA executors' attention: cudnn, cuDNN 9's fused flash\n"
             "SDPA (loaded at run time: RP_CUDNN_LIBRARY, else\n"
             "libcudnn.so.9), refused where it cannot run; own, the own\n"
             "flash kernel; auto (default): cudnn where it loads on an\n"
             "sm_80+ GPU (unless RP_DISABLE_CUDA_PATHS names cudnn),\n"
             "else own. Windows, sinks and document segments take the\n"
             "own kernel (segments: unless the cudnn-documents path is\n"
             "on; cudnn with --documents is refused). The choice is\n"
             "logged once"},
    {DOUBLE("timeout", "SECONDS", timeout_s), .fallback = "600", .min = 0, .max = TIMEOUT_MAX_S,
     .bounds = RP_OPTION_MIN_OPEN,
     .range_error = "--timeout must be > 0 and at most " NUMBER_TEXT(TIMEOUT_MAX_S)
                    " seconds (a year)",
     .help = "deadline of every wait between ranks; must exceed one\n"
             "iteration (default 600)"},
    {INT("optimizer-lag", "0|1", optimizer_lag, 0, 1),
     .range_error = "--optimizer-lag must be 0 or 1",
     .help = "1: apply gradients one step late, for comparison (default 0)"},
    {WORD("speculative-update", "auto|on|off", speculative_update, speculative_words),
     .fallback = "auto",
     .help = "with --grad-clip, run each block's AdamW as soon as its\n"
             "gradient is summed, from a backup of its master, m and v\n"
             "(12 bytes a parameter), kept when the global norm does not\n"
             "clip, else restored and redone: the same bits either way.\n"
             "auto (default): on with CUDA executors when the backup fits\n"
             "the host memory limit; on: also CPU executors, refused when\n"
             "it does not fit"},
    /* converted to byte counts (size_t, int64_t): bounded far below overflow */
    {DOUBLE("chunk-mib", "X", chunk_mib), .fallback = "16", .min = 1.0 / 1048576.0,
     .max = CHUNK_MAX_MIB,
     .range_error = "--chunk-mib must be between 1 byte (9.53674316e-07) and "
                    NUMBER_TEXT(CHUNK_MAX_MIB) " (1 TiB)",
     .help = "transfer chunk size (default 16)"},
    {STRING("link-groups", "LIST|none", link_groups),
     .help = "each node rank's PCIe link group, e.g. 0,0,1,1: ranks of a\n"
             "group hold their lower-class transfers while a peer has an\n"
             "urgent one (default: from hwloc on GPUs, none on the CPU)"},
    {STRING("topology", "FILE.xml", topology),
     .help = "the node's PCIe topology from an hwloc XML file (default:\n"
             "this machine's, on GPUs); CPU executors take its GPUs in\n"
             "bus order, so a server's groups and deal can be rehearsed"},
    {CUSTOM("deal", "natural|interleaved|best", deal, parse_deal), .fallback = "best",
     .help = "which node rank runs each executor of the\n"
             "round-robin deal: in rank order, or link group by group\n"
             "in turn (best: interleaved when the planner's\n"
             "simulation finds it over 0.1% faster)"},
    {WORD("activation-numa", "interleave|reader", activation_numa, activation_numa_words),
     .fallback = "interleave",
     .help = "activation buffers interleaved over the NUMA\n"
             "nodes like the rest of the store (default), or each on the\n"
             "node of the GPUs that read it, when they share one"},
    {STRING("trace", "FILE", trace), .help = "Chrome trace JSON of the run (opens in Perfetto)"},
    {DOUBLE("memory-limit-mib", "X", memory_limit_mib), .min = 0, .max = MEMORY_LIMIT_MAX_MIB,
     .range_error = "--memory-limit-mib must be between 0 (no limit) and "
                    NUMBER_TEXT(MEMORY_LIMIT_MAX_MIB) " (1 PiB)",
     .help = "device memory the planner may use (default: on GPUs their\n"
             "free memory less a reserve, 5% + 512 MiB; on the CPU no limit)"},
    {DOUBLE("host-memory-limit-mib", "X", host_memory_limit_mib), .min = 0,
     .max = MEMORY_LIMIT_MAX_MIB,
     .range_error = "--host-memory-limit-mib must be between 0 (MemAvailable) and "
                    NUMBER_TEXT(MEMORY_LIMIT_MAX_MIB) " (1 PiB)",
     .help = "host memory a node's run may use in all: --recompute\n"
             "auto keeps activations of CPU executors within it, none is\n"
             "refused over it (default: MemAvailable when planning)"},
    {WORD("bind", "yes|no", bind, bind_words), .fallback = "yes",
     .help = "pin each rank to its share of the node's cores (default yes)"},
    {INT("pipelines", "P", pipelines, 1, 4096), .fallback = "1",
     .help = "P round-robin pipelines of G/P executors, M/P microbatches\n"
             "each; gradients summed in pipeline order (default 1)"},
    {INT("ranks-per-node", "K", ranks_per_node, 1, 1 << 20),
     .help = "each K consecutive ranks are a node with its own host store;\n"
             "nodes run M/N microbatches each and sum gradients in pipeline\n"
             "order over MPI (default: the ranks that share memory)"},
    {INT64("token-tile", "N", token_tile, 0, TOKEN_TILE_MAX),
     .range_error = "--token-tile must be between 0 (the default) and "
                    NUMBER_TEXT(TOKEN_TILE_MAX) " tokens",
     .help = "tokens per tile of the MLP's GEMMs: each GEMM reads whole\n"
             "tiles and weight gradients add them in token order, so the\n"
             "tile is part of the numerics: it changes the bits of a run\n"
             "whose microbatch is longer (default 0: 1024)"},
    {INT64("mlp-chunk-tokens", "N", mlp_chunk_tokens, 0, CHUNK_TOKENS_MAX),
     .range_error = "--mlp-chunk-tokens must be between 0 (the default) and "
                    NUMBER_TEXT(CHUNK_TOKENS_MAX) " tokens",
     .help = "tokens whose MLP intermediates are alive at once, rounded\n"
             "down to whole tiles (at least one); bounds the executors'\n"
             "scratch and never changes the bits (default 0: the whole\n"
             "microbatch up to 8192 tokens, else tiles of up to 2048)"},
    {STRING("checkpoint-dir", "DIR", checkpoint_dir), .section = "checkpoints:",
     .help = "checkpoints in DIR/step-00000100/ (and one at the end)"},
    {INT64("checkpoint-every", "N", checkpoint_every, 0, INT64_MAX),
     .help = "a checkpoint after every N-th step (default 0: the last only)"},
    {INT64("keep-checkpoints", "K", keep_checkpoints, 0, 1000000), .fallback = "2",
     .help = "keep the newest K complete checkpoints (default 2; 0: all)"},
    {STRING("resume", "PATH|auto", resume),
     .help = "continue from a checkpoint (auto: the newest under\n"
             "--checkpoint-dir, or a fresh start when there is none)"},
    {INT64("lora-rank", "R", lora_rank, 0, 65536),
     .section = "LoRA (frozen base, trainable adapters saved for PEFT):",
     .help = "train LoRA adapters of rank R (default 0: the full model)"},
    {DOUBLE("lora-alpha", "A", lora_alpha), GIVEN(lora_given, RP_LORA_GIVEN_ALPHA),
     .help = "scaling A/R (default R: scaling 1)"},
    {STRING("lora-targets", "LIST", lora_targets), GIVEN(lora_given, RP_LORA_GIVEN_TARGETS),
     .help = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,\n"
             "gate (a mixture of experts' router; its experts' projections\n"
             "are gate_proj.. per expert) or all-linear (default)"},
    {DOUBLE("lora-dropout", "P", lora_dropout), GIVEN(lora_given, RP_LORA_GIVEN_DROPOUT),
     .help = "dropout on the adapters' input, in [0, 1) (default 0; not\n"
             "on a mixture of experts' experts)"},
    {"use-rslora", NULL, RP_OPTION_FLAG, FIELD(use_rslora), GIVEN(lora_given, RP_LORA_GIVEN_RSLORA),
     .help = "scaling A/sqrt(R)"},
    {STRING("lora-init", "DIR", lora_init), GIVEN(lora_given, RP_LORA_GIVEN_INIT),
     .help = "start from a PEFT adapter directory"},
    {STRING("save-merged", "DIR", save_merged), GIVEN(lora_given, RP_LORA_GIVEN_MERGED),
     .help = "also write the merged model (W + scaling B A)"},
    {DOUBLE("router-aux-coef", "X", router_aux_coef), AT_LEAST(0),
     GIVEN(router_aux_coef_set, 1),
     .range_error = "--router-aux-coef must be a finite number >= 0 (got %g)",
     .section = "mixture of experts:",
     .help = "add X times the load-balancing loss, 0: none\n"
             "(default: config.json's, if output_router_logits)"},
};

const rp_option *rp_train_option_rows(size_t *n)
{
    *n = sizeof rows / sizeof rows[0];
    return rows;
}

void rp_train_options_default(rp_train_options *o)
{
    memset(o, 0, sizeof *o);
    rp_error err;
    /* the defaults are the rows' own texts: test_train proves they parse */
    (void)rp_options_default(rows, sizeof rows / sizeof rows[0], o, &err);
    o->progress_interval_s = 5.0; /* no option: seconds between lines off a terminal */
}

rp_status rp_train_options_set(rp_train_options *o, const char *name, const char *value,
                               rp_error *err)
{
    return rp_options_set(rows, sizeof rows / sizeof rows[0], o, name, value, err);
}

rp_status rp_train_options_check_ranges(const rp_train_options *o, rp_error *err)
{
    return rp_options_check(rows, sizeof rows / sizeof rows[0], o, err);
}
