/* The run description written beside the metrics log: `--log FILE` also
 * writes FILE.run.json (roundpipe-formats(5)), one JSON object with the
 * version, model, data, every training option, the ranks, the executors'
 * device and the plan. */
#ifndef RP_ENGINE_RUN_INFO_H
#define RP_ENGINE_RUN_INFO_H

#include <stddef.h>

#include "core/error.h"
#include "engine/train_options.h"

typedef struct rp_run_info {
    const rp_train_options *o;
    const char *device;      /* the executors' device kind ("cpu", "cuda") */
    int ranks, nodes, threads_per_rank;
    int layers;              /* embedding, blocks, head */
    size_t parameters;
    const char *plan;        /* rp_plan_format text */
    const int *deal;         /* [executors]: the node rank of each round-robin executor
                                (NULL: rank order) */
    int executors;
    double start_time;       /* wall clock, seconds since the Unix epoch */
} rp_run_info;

/* Write `log_path`.run.json (temporary file + rename). */
rp_status rp_run_info_write(const rp_run_info *info, const char *log_path, rp_error *err);

#endif
