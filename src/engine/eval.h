/* The validation loss (--eval-data): after the steps rp_eval_due names,
 * the model of that step (every update applied: the model --save would
 * write then) runs forward only over the first --eval-samples samples of
 * the evaluation set (all by default), in microbatches of the training's
 * samples per microbatch, dealt round-robin to the executors (microbatch j
 * to rank j mod ranks). Each rank streams the layers through its device
 * as the training does, a group of its microbatches at a time; the loss
 * sums (double, token order within a microbatch) are added in microbatch
 * order, so eval_loss (the mean cross-entropy over the counted targets,
 * the training loss's definition, with the evaluation set's mask and
 * documents) has the same bits on any number of ranks. Rank 0 writes
 * {"step":K,"eval_loss":X,"eval_tokens":N,"eval_samples":K} to the
 * metrics log, a line to the log and the value to the progress display.
 * Each evaluation allocates device buffers of its own, sized by the memory
 * model (memory_model.h's rp_memory_model_eval), whose count the run holds
 * against the device memory limit before its first step (run_impl.h's
 * rp_run_eval_memory); rank 0 logs what the first one allocated. */
#ifndef RP_ENGINE_EVAL_H
#define RP_ENGINE_EVAL_H

#include <mpi.h>

#include "engine/engine_impl.h"

/* Is there an evaluation after step `step`? (--eval-every N: every N-th
 * step; always after the last.) */
int rp_eval_due(const rp_engine *e, int64_t step);

/* Evaluate after step `step`, between segments (collective). */
rp_status rp_eval_run(rp_engine *e, MPI_Comm comm, int64_t step, rp_error *err);

#endif
