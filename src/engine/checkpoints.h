/* Checkpoints of a training run (io/checkpoint.h has the directory format):
 * what the trainer state holds, the write after a segment that ends on a
 * checkpoint step, and resuming: the checkpoint found, checked against the
 * run's options, and read back into the store, so that the run continues
 * at step k+1 with the same bits as one that never stopped, on any number
 * of ranks and with any plan. */
#ifndef RP_ENGINE_CHECKPOINTS_H
#define RP_ENGINE_CHECKPOINTS_H

#include <mpi.h>

#include "core/log.h"
#include "engine/engine_impl.h"
#include "engine/train_options.h"

/* What a resumed run starts from. */
typedef struct rp_resume {
    int64_t step;      /* the checkpoint's step (0: a fresh start) */
    int64_t adam_step; /* AdamW's update count then */
    char dir[4096];    /* the checkpoint directory */
} rp_resume;

/* --resume: find the checkpoint (auto: the newest under --checkpoint-dir,
 * or none, which is said), check it (complete, checksums, the options that
 * change the results, the model config against --model/--init-config if
 * given) and make it the run's model: *resolved gets model_dir = the
 * checkpoint. Collective; without --resume, *out is a fresh start. */
rp_status rp_checkpoint_resolve(rp_train_options *resolved, MPI_Comm comm, const rp_logger *lg,
                                rp_resume *out, rp_error *err);

/* Read the checkpoint's AdamW state into p's m and v (the leader, after the
 * weights). */
rp_status rp_checkpoint_load_optimizer(rp_params *p, const char *dir, rp_error *err);

/* Is there a checkpoint after step t? */
int rp_checkpoint_due(const rp_engine *e, int64_t t);

/* Write the checkpoint of step e->it_last (all its updates applied: a
 * segment has ended). The leader writes, every rank agrees. */
rp_status rp_checkpoint_save(rp_engine *e, const char *template_config, MPI_Comm comm,
                             rp_error *err);

#endif
