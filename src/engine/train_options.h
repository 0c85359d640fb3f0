/* Options of a training run (the `roundpipe train` contract, see
 * man/roundpipe.1). Strings are borrowed, not owned. Each option is a row of
 * one table (engine/train_set.c): its name, field, default, accepted values,
 * range check and --help text. */
#ifndef RP_ENGINE_TRAIN_OPTIONS_H
#define RP_ENGINE_TRAIN_OPTIONS_H

#include <stdint.h>

#include "core/args.h"
#include "core/dtype.h"
#include "core/error.h"
#include "device/device.h"
#include "optim/lr.h"
#include "roundpipe.h"

typedef enum rp_progress_mode {
    RP_PROGRESS_AUTO = 0, /* live line on a terminal, periodic lines otherwise */
    RP_PROGRESS_LINE = 1, /* periodic lines */
    RP_PROGRESS_NONE = 2
} rp_progress_mode;

/* --recompute: which activations a backward stage recomputes (DESIGN 4).
 * The words' order is the values' (train_set.c). */
typedef enum rp_recompute_mode {
    RP_RECOMPUTE_STAGE = 0, /* from the checkpoint of each backward stage */
    RP_RECOMPUTE_LAYER = 1, /* every layer's input saved, one layer recomputed at a time */
    RP_RECOMPUTE_NONE = 2,  /* every block below the tail keeps its activations */
    RP_RECOMPUTE_AUTO = 3   /* keep as many as the memory allows, recompute the rest */
} rp_recompute_mode;

static inline const char *rp_recompute_name(int mode)
{
    return mode == RP_RECOMPUTE_LAYER ? "layer"
           : mode == RP_RECOMPUTE_NONE ? "none"
           : mode == RP_RECOMPUTE_AUTO ? "auto"
                                       : "stage";
}

/* --speculative-update: AdamW on a block's share as soon as its gradient is
 * summed, before the global norm is known, kept when clipping does not clip
 * (update_gate.h, engine/speculative.c). The words' order is the values'
 * (train_set.c). */
typedef enum rp_speculative_mode {
    RP_SPECULATIVE_AUTO = 0, /* on with CUDA executors when clipping and the backup fits */
    RP_SPECULATIVE_ON = 1,   /* on wherever clipping is exact; refused when it does not fit */
    RP_SPECULATIVE_OFF = 2
} rp_speculative_mode;

typedef struct rp_train_options {
    const char *model_dir;   /* --model */
    const char *init_config; /* --init-config */
    const char *data;        /* --data */
    const char *loss_mask;   /* --loss-mask */
    const char *documents;   /* --documents */
    const char *eval_data;   /* --eval-data (NULL: no evaluation) */
    const char *eval_mask;   /* --eval-mask */
    const char *eval_documents; /* --eval-documents */
    int64_t eval_every;      /* --eval-every (0: after the last step only) */
    int64_t eval_samples;    /* --eval-samples (0: all) */
    const char *log_path;    /* --log */
    const char *save_dir;    /* --save */
    int64_t seq_len;         /* --seq-len */
    int64_t batch_size;      /* --batch-size */
    int64_t microbatches;    /* --microbatches (0: = batch size) */
    int64_t steps;           /* --steps (0: one pass over the samples) */
    double lr, min_lr;
    int64_t warmup_steps;
    rp_lr_kind schedule;
    double weight_decay, beta1, beta2, eps;
    double grad_clip;        /* 0 = off */
    rp_dtype dtype;          /* executor compute dtype (resolved by rp_train_run) */
    unsigned dtype_set;      /* --dtype given; else bf16 on CUDA, fp32 on the CPU */
    unsigned save_dtype_set; /* --save-dtype given; else as loaded */
    rp_dtype grad_dtype;     /* --grad-dtype: gradients travel device -> host in it (fp32) */
    rp_dtype activation_dtype; /* --activation-dtype: every layer's output is rounded to it and
                                  the host store holds the block boundaries in it (resolved by
                                  rp_train_run) */
    unsigned activation_dtype_set; /* given; else bf16 on CUDA, fp32 on the CPU */
    int shuffle;             /* --shuffle: each epoch in its own random order */
    rp_dtype save_dtype;
    uint64_t seed;
    rp_device_kind device;   /* --device (default auto) */
    int threads;             /* per rank; 0 = cores of the node / ranks of the node */
    rp_progress_mode progress;
    double progress_interval_s; /* seconds between lines when not on a terminal */
    /* engine (pipeline) options */
    const char *plan;        /* --plan: forced partition (rp_plan_parse syntax), NULL = planner */
    int recompute;           /* --recompute: rp_recompute_mode */
    int weight_buffers;      /* --weight-buffers auto | 1 | 2 (0, 1, 2): stage weight buffers
                                per executor; auto: 2 unless no plan fits with them */
    int attention;           /* --attention: rp_attention_mode (kernels/attention_choice.h),
                                0 = auto */
    double host_memory_limit_mib; /* --host-memory-limit-mib: what --recompute auto keeps
                                activations within on CPU executors (0: MemAvailable) */
    double timeout_s;        /* --timeout: deadline of every wait */
    int optimizer_lag;       /* --optimizer-lag 0 | 1 */
    int speculative_update;  /* --speculative-update: rp_speculative_mode */
    double chunk_mib;        /* --chunk-mib: transfer chunk size */
    const char *link_groups; /* --link-groups: each node rank's PCIe link group ("0,0,1,1"),
                                "none"; NULL: from the topology on GPUs, none on the CPU */
    const char *topology;    /* --topology FILE.xml: the node's PCIe topology (NULL: this
                                machine's on GPUs) */
    int deal;                /* --deal: rp_deal_choice (plan/deal.h), 0 = best */
    int activation_numa;     /* --activation-numa interleave (0, default) | reader (1):
                                engine/arena_numa.c */
    const char *trace;       /* --trace FILE (Chrome trace JSON) */
    double memory_limit_mib; /* --memory-limit-mib: device memory the planner may use, 0 = none */
    int bind;                /* --bind yes (1, default) | no: pin each rank to its cores */
    int pipelines;           /* --pipelines P: independent round-robin pipelines over the
                                executors, each with M/P microbatches (default 1) */
    int ranks_per_node;      /* --ranks-per-node K: each K consecutive ranks are a node with
                                its own host store (0, the default: the ranks that share
                                memory) */
    int nodes;               /* resolved by rp_train_run: the node count (0 before) */
    int64_t token_tile;       /* --token-tile N: tokens per tile of the MLP's GEMMs (0: the
                                 default; model/token_tiles.h) */
    int64_t mlp_chunk_tokens; /* --mlp-chunk-tokens N: the MLP's tokens alive at once,
                                 whole tiles (0: the default) */
    /* checkpoints (engine/checkpoint_write.c, checkpoint_resume.c, io/checkpoint.h) */
    const char *checkpoint_dir; /* --checkpoint-dir DIR: DIR/step-00000100/ */
    int64_t checkpoint_every;   /* --checkpoint-every N: after every N-th step (0: only the last) */
    int64_t keep_checkpoints;   /* --keep-checkpoints K: the newest K complete ones (default 2) */
    const char *resume;         /* --resume PATH|auto */
    /* LoRA (issue 13): rank 0 is full fine-tuning */
    int64_t lora_rank;          /* --lora-rank R */
    double lora_alpha;          /* --lora-alpha A (default R) */
    const char *lora_targets;   /* --lora-targets LIST (default all-linear) */
    double lora_dropout;        /* --lora-dropout P */
    int use_rslora;             /* --use-rslora */
    const char *lora_init;      /* --lora-init DIR: a PEFT adapter to start from */
    const char *save_merged;    /* --save-merged DIR: W + scaling B A in the base's dtype */
    unsigned lora_given;        /* which of them were given (RP_LORA_GIVEN_*) */
    /* mixture of experts (issue 15) */
    double router_aux_coef;     /* --router-aux-coef X: the load-balancing loss's coefficient
                                   (0 and not given: config.json's router_aux_loss_coef when
                                   its output_router_logits is true, else no such loss) */
    unsigned router_aux_coef_set; /* --router-aux-coef given: X replaces config.json's rule,
                                     0 turning the loss off */
    rp_step_callback on_step; /* the C API's per-step callback (rank 0), NULL = none */
    void *on_step_arg;
} rp_train_options;

#define RP_LORA_GIVEN_ALPHA 1u
#define RP_LORA_GIVEN_TARGETS 2u
#define RP_LORA_GIVEN_DROPOUT 4u
#define RP_LORA_GIVEN_RSLORA 8u
#define RP_LORA_GIVEN_INIT 16u
#define RP_LORA_GIVEN_MERGED 32u

/* The table of `roundpipe train`'s options, *n rows (engine/train_set.c). */
const rp_option *rp_train_option_rows(size_t *n);

/* Fill with the documented defaults (the rows'). */
void rp_train_options_default(rp_train_options *o);

/* Set the option `name` (a `roundpipe train` option without its "--") from
 * its text value, checked strictly by its row; an unknown name is refused
 * with the nearest row's name. Strings are borrowed. */
rp_status rp_train_options_set(rp_train_options *o, const char *name, const char *value,
                               rp_error *err);

/* Check ranges (the rows') and combinations that do not need any file (B % M,
 * lr >= 0, exactly one of --model/--init-config, ...). Messages name the
 * option. */
rp_status rp_train_options_check(const rp_train_options *o, rp_error *err);

/* `status` with the one message refusing an explicit --dtype other than
 * bf16 on CUDA executors (which compute in bf16 only), for --device cuda
 * (at option check) and for --device auto once it chose CUDA. */
rp_status rp_train_options_refuse_dtype(const rp_train_options *o, rp_status status,
                                        rp_error *err);

/* RP_ERR_UNSUPPORTED where a run on CUDA executors cannot take its
 * --documents or --eval-documents (RP_DOCUMENTS_NOT_ON_CUDA,
 * RP_DOCUMENTS_NOT_ON_CUDNN below), else RP_OK: at option check for
 * --device cuda, and once --device auto chose CUDA. */
rp_status rp_train_options_documents_on_cuda(const rp_train_options *o, rp_error *err);

/* --documents on CUDA runs the segmented attention and RoPE the GPU
 * window proved (core/unproven.h); RP_DISABLE_CUDA_PATHS=documents turns
 * them off, and --documents is then refused on CUDA. */
#define RP_DOCUMENTS_NOT_ON_CUDA                                                                  \
    "--documents and --eval-documents: attention over document segments on CUDA is turned off "  \
    "(RP_DISABLE_CUDA_PATHS names documents; --device cpu has it)"

/* cuDNN takes document segments only through its ragged layout, and only
 * the calls whose padded layout fits what a run reserves
 * (kernels/attn_documents.h; the cudnn-documents path, core/unproven.h,
 * not yet run on a GPU): --attention cudnn, which never replaces cuDNN by
 * the own kernel, cannot hold every call of a run over documents, so it is
 * refused up front; auto runs the rest on the own kernel. */
#define RP_DOCUMENTS_NOT_ON_CUDNN                                                                 \
    "--attention cudnn with --documents or --eval-documents: cuDNN takes document segments "     \
    "only where their padded layout fits (one entry per document, cudnn-documents), so not "     \
    "every call of a run; --attention auto runs the rest on the own kernel"

#endif
