/* The lock of a checkpoint directory: one run at a time writes and prunes
 * there. Two runs in one directory would remove each other's checkpoints
 * (the pruning of one takes the other's step-N.tmp for a leftover), so the
 * second is refused, naming the first.
 * ROOT/roundpipe.lock is locked with flock(2), which the system releases
 * when the holder exits however it ends (a kill -9 included), and holds the
 * holder's pid and host name, which the refusal quotes. */
#ifndef RP_IO_CHECKPOINT_LOCK_H
#define RP_IO_CHECKPOINT_LOCK_H

#include "core/error.h"

#define RP_CHECKPOINT_LOCK_FILE "roundpipe.lock"

typedef struct rp_checkpoint_lock rp_checkpoint_lock;

/* Create root if missing (not its parents) and lock it: refused, naming the
 * holder, while another process holds it (another open of it in this
 * process too). */
rp_status rp_checkpoint_lock_take(const char *root, rp_checkpoint_lock **out, rp_error *err);

/* Unlock, remove the lock file, and root itself when take created it and
 * it is empty (a run that ended before its first checkpoint leaves
 * nothing). No-op on NULL; sets *lock to NULL. */
void rp_checkpoint_lock_release(rp_checkpoint_lock **lock);

#endif
