/* The speculative update (--speculative-update, speculative.c): the choice,
 * and the backup of master, m and v that a miss restores. The update gate
 * (rp_gate_speculates) says which updates speculate; optimizer.c runs
 * them, writing the backup in AdamW's own pass. Internal to the engine. */
#ifndef RP_ENGINE_SPECULATIVE_H
#define RP_ENGINE_SPECULATIVE_H

#include <mpi.h>

#include "engine/engine_impl.h"

/* Resolve --speculative-update (the leader decides: auto is on with CUDA
 * executors when clipping is exact and the backup fits the host memory
 * limit; on is refused when it does not fit), log the choice with the
 * backup's size, and allocate this rank's backup when on (collective).
 * Sets e->speculative, e->spec_backup_floats, e->spec_backup_node_bytes. */
rp_status rp_speculative_choose(rp_engine *e, MPI_Comm comm, rp_error *err);
void rp_speculative_free(rp_engine *e);

/* The backup of this rank's slice [lo, hi) of layer l: master, m and v of
 * its hi - lo elements one after another, as
 * rp_optimizer_update_share_backup writes and reads it. */
float *rp_speculative_part(rp_engine *e, int l);
/* Copy master, m and v of elements [lo, hi) of layer l (this rank's slice)
 * back from the backup (a step that ends before its norm). */
void rp_speculative_restore(rp_engine *e, int l, size_t lo, size_t hi);

#endif
