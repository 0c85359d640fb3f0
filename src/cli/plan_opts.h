/* Options shared by `roundpipe plan` and `roundpipe simulate`: where the
 * layer costs come from and the machine they run on. */
#ifndef RP_CLI_PLAN_OPTS_H
#define RP_CLI_PLAN_OPTS_H

#include <stdio.h>

#include "core/error.h"
#include "device/device.h"
#include "engine/train_options.h"
#include "io/config.h"
#include "plan/cost.h"
#include "plan/deal.h"
#include "plan/plan.h"
#include "plan/simulate.h"


typedef struct rp_plan_cli {
    rp_cost_model *model; /* owned */
    /* a config's model: the executors the plan is for (as train would
     * choose here, or --device), their compute dtype, and the config */
    int have_config;
    rp_model_config cfg;  /* with cfg.lora: --lora-rank, --lora-targets, --lora-dropout */
    rp_lora_config lora;
    const char *model_dir; /* --model DIR (argv's), NULL otherwise */
    rp_device_kind device;
    int device_chosen;    /* 1: --device auto resolved here, as train would */
    rp_dtype dtype;
    rp_dtype activation_dtype; /* --activation-dtype, else as train: bf16 on CUDA,
                                  fp32 on the CPU */
    rp_machine mc;
    int width;            /* 0: the planner searches the widths (--pipelines P as
                             train's: W = G/P; or its alias --width W) */
    int weight_buffers;   /* --weight-buffers: 0 auto (2 unless no plan fits, then 1), 1, 2 */
    int recompute;        /* --recompute (rp_recompute_mode): host memory as train's arena,
                             and which blocks keep their activations (plan/keep.h) */
    size_t *kept_floats;  /* a config's: each layer's saved area when kept (owned) */
    int64_t host_limit;   /* --host-memory-limit-mib, else MemAvailable (bytes; 0 unknown) */
    const char *host_limit_from;
    int64_t seq_len;      /* --seq-len (default 1024) */
    /* a GPU's memory for the verdict: --device-memory-mib, else the free
     * memory of this machine's GPU when a config's executors are CUDA's
     * here; 0 unknown. memory_limit_given: --memory-limit-mib (bytes). */
    int64_t device_memory;
    const char *device_memory_from;
    int64_t memory_limit_given;
    /* a config's CUDA executors: what each keeps beside the plan for
     * cuDNN's attention (--attention; kernels/attention_choice.h's rule, as
     * train), 0 when the run cannot take cuDNN or no GPU size is known */
    int64_t cudnn_reserve;
    /* a config's: the head's chunk in tokens (engine/memory_model.h's
     * rp_memory_head_rows) from head_memory, train's figure for it
     * (--memory-limit-mib, else the GPU's whole memory; 0 none) */
    int64_t head_rows;
    int64_t head_memory;
    /* --eval-data: the device bytes each of train's evaluations allocates
     * (engine/memory_model.h's rp_memory_model_eval), 0 without */
    int64_t eval_bytes;
    rp_plan *forced;      /* --plan, owned, NULL when not given */
    int json;
    int help;
    int topology_gpus;       /* --topology: its GPU count (0: none given) */
    char topology_warnings[1024];
    rp_deal_choice deal;
    rp_progress_mode progress; /* --progress: the search's reports (cli/plan_progress.h) */
} rp_plan_cli;

/* Parse argv (argv[0] is the subcommand name). On RP_OK with o->help set,
 * the caller prints its usage. */
rp_status rp_plan_cli_parse(int argc, char **argv, rp_plan_cli *o, rp_error *err);
void rp_plan_cli_free(rp_plan_cli *o);

/* The --help lines of the shared options (their table's). */
void rp_plan_cli_usage(FILE *out);

/* The plan to use for this machine: the forced one, or the partitioner's,
 * with the deal --deal chose written into *mc (plan/deal.h). */
rp_status rp_plan_cli_plan(const rp_plan_cli *o, rp_machine *mc, rp_plan *out, rp_sim_result *res,
                           rp_error *err);

/* "4 link group(s), interleaved deal: executor -> GPU 0 2 4 6 1 3 5 7" */
void rp_plan_cli_deal_text(const rp_machine *mc, char *buf, size_t len);
/* The same as JSON members ("link_groups": 4, "deal": [0, 2, ...], ) on
 * standard output; nothing without link groups. */
void rp_plan_cli_deal_json(const rp_machine *mc);

#endif
