/* The speculative update (--speculative-update, speculative.c): the choice,
 * and the backup of master, m and v that a miss restores. The update gate
 * (rp_gate_speculates) says which updates speculate; optimizer.c runs
 * them. Internal to the engine. */
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

/* Copy master, m and v of elements [lo, hi) of layer l (this rank's slice)
 * into the backup, or back from it. */
void rp_speculative_save(rp_engine *e, int l, size_t lo, size_t hi);
void rp_speculative_restore(rp_engine *e, int l, size_t lo, size_t hi);

#endif
