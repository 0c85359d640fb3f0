/* The training loop. In this release every rank holds a full replica of
 * the training state and the microbatches of a step are shared out
 * round-robin over the ranks (rank r runs microbatches m with m % G == r);
 * gradients and loss sums are summed across ranks before the update. The
 * pipeline engine replaces this loop without changing its options. */
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

#endif
