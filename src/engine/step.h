/* One microbatch through the whole model on the calling rank: embedding,
 * blocks (saving each block's input), head forward+backward, blocks
 * backward, embedding backward. Gradients accumulate into the params. */
#ifndef RP_ENGINE_STEP_H
#define RP_ENGINE_STEP_H

#include <stdint.h>

#include "core/error.h"
#include "engine/params.h"

typedef struct rp_step_buffers rp_step_buffers;

/* Buffers for microbatches of nseq sequences of seqlen tokens. */
rp_status rp_step_buffers_create(const rp_params *p, int64_t nseq, int64_t seqlen,
                                 rp_step_buffers **out, rp_error *err);
void rp_step_buffers_destroy(rp_step_buffers **b);

/* Forward and backward of one microbatch. scale multiplies the loss whose
 * gradient is taken (1 / counted targets of the whole step). *loss_sum is the
 * microbatch's sum of token cross-entropies over counted targets. */
rp_status rp_step_microbatch(rp_params *p, rp_step_buffers *b, const int32_t *inputs,
                             const int32_t *targets, const uint8_t *mask, float scale,
                             double *loss_sum, rp_error *err);

#endif
