/* Which steps have a checkpoint, and which of them the writer thread writes
 * while the segment runs (the others after it): read by the checkpoint
 * writer (checkpoint_write.c), the update gate (its hold, update_gate.c) and the
 * step loop (step_loop.c). */
#ifndef RP_ENGINE_CHECKPOINT_STEPS_H
#define RP_ENGINE_CHECKPOINT_STEPS_H

#include "engine/engine_impl.h"

/* Is there a checkpoint after step t? */
static inline int rp_checkpoint_due(const rp_engine *e, int64_t t)
{
    const rp_train_options *o = e->o;
    if (!o->checkpoint_dir)
        return 0;
    return t == e->steps || (o->checkpoint_every > 0 && t % o->checkpoint_every == 0);
}

/* Is a checkpoint due after a step of the running segment other than its
 * last (one that is written while the segment runs)? The same answer on
 * every rank: node 0 writes it. */
static inline int rp_checkpoint_due_in_segment(const rp_engine *e)
{
    for (int64_t c = e->it_first; c < e->it_last; c++)
        if (rp_checkpoint_due(e, c))
            return 1;
    return 0;
}

/* Is step c's checkpoint written by the writer thread while the segment
 * runs (rather than after it, as the segment's last step's is)? */
static inline int rp_checkpoint_in_segment(const rp_engine *e, int64_t c)
{
    return e->nd.node == 0 && c >= e->it_first && c < e->it_last && rp_checkpoint_due(e, c);
}

#endif
