/* Checkpoints of a training run (io/checkpoint.h has the directory format):
 * what the trainer state holds, how a checkpoint is written while training
 * goes on, and resuming: the checkpoint found, checked against the run's
 * options, and read back into the store, so that the run continues at step
 * k+1 with the same bits as one that never stopped, on any number of ranks
 * and with any plan.
 *
 * Written while training goes on: the checkpoint of step c must be a
 * consistent snapshot without a copy of the state. A writer thread on rank 0
 * (the node leader) writes each layer's state as soon as it is final for c
 * and signals it (event `written`); the update that would change the layer
 * next waits for that signal on every rank (the update gate,
 * update_gate.h). So each
 * layer has about one iteration to reach the file before training waits.
 * - Exact optimizer: the layer's master, m and v at version c; the update
 *   of step c+1 is held.
 * - Lagged optimizer (--optimizer-lag 1): step c+1 computes with the
 *   weights of step c-1, and the update of step c comes after that step
 *   read them. The checkpoint holds the state before the update of step c
 *   (master, m, v at version c-1) and c's summed gradient
 *   (pending_gradient.safetensors; trainer_state.json: "pending_update" with
 *   the step and its clipping coefficient); the update of step c is held.
 *   A resumed run applies that update first, after its step c+1's jobs read
 *   the weights, exactly as the uninterrupted run did. Its model.safetensors
 *   is thus the model of step c-1; the checkpoint after the last step has no
 *   pending update.
 * The segment's last step's checkpoint is written after the segment (the
 * end of the run, a stop by signal, a re-plan).
 * Test hook: RP_FAULT_CHECKPOINT_LAYER_MS=N makes the writer take N ms more
 * per layer (a slow disk), so the held updates show. */
#ifndef RP_ENGINE_CHECKPOINTS_H
#define RP_ENGINE_CHECKPOINTS_H

#include <mpi.h>

#include "core/log.h"
#include "engine/engine_impl.h"
#include "engine/train_options.h"
#include "io/checkpoint_lock.h"

/* What a resumed run starts from. */
typedef struct rp_resume {
    int64_t step;      /* the checkpoint's step (0: a fresh start) */
    int64_t adam_step; /* AdamW's update count then */
    int pending;       /* a lagged optimizer's update of `step` is still to be applied */
    float coef;        /* with that step's clipping coefficient */
    rp_dtype model_dtype; /* a full model's: the dtype the run's --model stored its weights
                             in, what --save writes without --save-dtype (F32 when the
                             checkpoint does not say) */
    char dir[4096];    /* the checkpoint directory */
    char base[4096];   /* LoRA: the recorded base a resume without --model or
                          --init-config takes (lora_checkpoint.h) */
} rp_resume;

/* The summed gradient of a pending update, in a checkpoint directory. */
#define RP_PENDING_FILE "pending_gradient.safetensors"

/* --checkpoint-dir: can be written (rp_output_dir_check), is created and
 * locked by rank 0 for the run (io/checkpoint_lock.h: a second run on it is
 * refused naming the first), before --resume reads it. Collective; *lock
 * is NULL without --checkpoint-dir and on other ranks; release it with
 * rp_checkpoint_lock_release when the run ends. */
rp_status rp_checkpoint_dir_lock(const rp_train_options *o, MPI_Comm comm,
                                 rp_checkpoint_lock **lock, rp_error *err);

/* --resume: find the checkpoint (auto: the newest under --checkpoint-dir,
 * or none, which is said), check it (complete, checksums, the options that
 * change the results, the model config against --model/--init-config if
 * given) and make it the run's model: *resolved gets model_dir = the
 * checkpoint. A LoRA checkpoint holds the adapters only: its LoRA settings
 * and base are checked too (lora_checkpoint.h), and the run's model stays
 * the base (the recorded one without --model and --init-config); the
 * adapters and their AdamW state are read from the checkpoint.
 * Collective; without --resume, *out is a fresh start. */
rp_status rp_checkpoint_resolve(rp_train_options *resolved, MPI_Comm comm, const rp_logger *lg,
                                rp_resume *out, rp_error *err);

/* Read the checkpoint's AdamW state of layers [first, end) into p's m and
 * v, and with `pending` the pending update's gradient into p's gradients
 * (after the weights; the node's ranks each a part, rp_params_layer_part). */
rp_status rp_checkpoint_load_optimizer(rp_params *p, const char *dir, int pending, int first,
                                       int end, rp_error *err);

/* At the start of a run (rank 0, with --checkpoint-dir): the temporary
 * directories of checkpoints that a killed run was writing are removed and
 * named, as host stores left in /dev/shm are. */
void rp_checkpoint_remove_killed_writes(const rp_train_options *o, const rp_logger *lg);

/* Write the checkpoint of step e->it_last after its segment ended, unless
 * the writer thread wrote it (a stop right after a checkpoint step). The
 * leader writes, every rank agrees. A checkpoint that cannot be written
 * (the disk, the directory, an update that is not finite) is not the run's
 * failure: it is said at once and remembered, the older ones are kept, and
 * training and the other outputs go on; the writer thread's the same. */
rp_status rp_checkpoint_save(rp_engine *e, MPI_Comm comm, rp_error *err);

/* Rank 0: the first checkpoint not written, as the run's error (naming the
 * step and why), or RP_OK; other ranks: RP_OK. */
rp_status rp_checkpoint_failures(const rp_engine *e, rp_error *err);

/* Does the running segment have checkpoints to write while it runs? Then
 * rank 0 runs rp_checkpoint_writer_main (arg: the engine) beside its other
 * threads; a failure is the run's (rp_engine_fail). */
int rp_checkpoint_writer_needed(const rp_engine *e);
void *rp_checkpoint_writer_main(void *arg);

#endif
