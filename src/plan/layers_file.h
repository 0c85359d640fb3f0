/* Layer-times files: a cost model written as text (measured milliseconds per
 * layer per microbatch, bytes per layer). The format is documented in
 * bench/README.md ("Layer-times files"); in short:
 *
 *     # comment
 *     roundpipe-layers 1
 *     name qwen3-1.7b-rtx4090
 *     gpus 8                      (optional defaults for plan/simulate)
 *     microbatches 16
 *     transfer_ms 1.6
 *     tokens_per_microbatch 4096  (optional; 0 = unknown)
 *     layer embed count=1 fwd_ms=0 bwd_ms=0 weight_bytes=622329856 ...
 *     layer block count=28 fwd_ms=7.4 bwd_ms=15.8 ...
 *     layer head fwd_ms=22.1 bwd_ms=43.7 tied_to=0
 *
 * Every error names the file, the line and the field. */
#ifndef RP_PLAN_LAYERS_FILE_H
#define RP_PLAN_LAYERS_FILE_H

#include <stddef.h>

#include "plan/cost.h"

rp_status rp_cost_load(const char *path, rp_cost_model **out, rp_error *err);

/* The same from text in memory; name is used in messages. */
rp_status rp_cost_parse(const char *text, size_t len, const char *name, rp_cost_model **out,
                        rp_error *err);

#endif
