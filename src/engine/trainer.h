/* The one entry of a training job below the API and the CLI: rp_train_run
 * resolves the options (the ranks agree on the executor device and its
 * compute dtype), then sets the run up (run.c), runs its steps
 * (step_loop.c), writes its outputs (outputs.c) and tears it down. */
#ifndef RP_ENGINE_TRAINER_H
#define RP_ENGINE_TRAINER_H

#include <mpi.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/train_options.h"

/* Run a whole training job on the ranks of comm (collective). Failures are
 * collective too: every rank returns the same non-OK status; the rank where
 * it arose has the detail in err, the others say which rank failed. */
rp_status rp_train_run(const rp_train_options *o, MPI_Comm comm, const rp_logger *lg,
                       rp_error *err);

/* The options checked and --device and --dtype resolved, the same on every
 * rank: *resolved is o with device CPU or CUDA and the dtype that follows
 * it (collective; a failure on one rank is every rank's). */
rp_status rp_train_resolve(const rp_train_options *o, MPI_Comm comm, const rp_logger *lg,
                           rp_train_options *resolved, rp_error *err);

#endif
