/* The entry of a training job below the API and the CLI: the ranks agree
 * on the executor device (--device resolved on every rank), then the
 * pipeline engine (pipeline.h) runs the job. */
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
