/* The RoundPipe engine on one node (DESIGN.md sections 3-7): the ranks of a
 * communicator share a host store (weights, master weights, gradients,
 * AdamW state, activation arena, events); every iteration's jobs
 *     F0 .. F(f-1) | T | B1 .. B(b-1)
 * of each of the --pipelines round-robin pipelines are dealt to the
 * executors by plan/schedule.c's rule. Each rank runs its jobs in order and
 * synchronises only through events in the store (protocol.h); an optimizer
 * thread per rank sums and updates its share of every layer as soon as the
 * layer's gradients are complete (and the global norm is known, with
 * clipping), and a layer's version gates the next iteration's forward, so
 * results equal a plain synchronous loop. */
#ifndef RP_ENGINE_PIPELINE_H
#define RP_ENGINE_PIPELINE_H

#include <mpi.h>

#include "core/error.h"
#include "core/log.h"
#include "device/device.h"
#include "engine/train_options.h"
#include "plan/plan.h"

/* Its entry is rp_train_run (trainer.h), defined in pipeline.c. */
#endif
