/* Shared by the optimizer thread's files: grad_completion.c (sums a layer's
 * gradients and takes its block norms), optimizer.c (runs the AdamW updates
 * when the update gate lets them) and adamw_share.c (AdamW on a range).
 * Internal to the engine. */
#ifndef RP_ENGINE_OPTIMIZER_IMPL_H
#define RP_ENGINE_OPTIMIZER_IMPL_H

#include "engine/engine_impl.h"
#include "optim/adamw.h"

/* Sum the pipelines' gradients of this rank's share of layer l (waiting
 * for them) into the layer's buffer, write the share's block norms and
 * publish it summed; with `fuse`, also run AdamW on it (no clipping, so no
 * global norm to wait for). After the head (the last layer), the
 * embedding's dense base. */
/* Several nodes, on the node communication thread: this rank's share of
 * layer l of iteration t through the chain (node_sums.h). grad_completion.c */
rp_status rp_grad_chain_layer(rp_engine *e, int l, int64_t t, const char *who, rp_error *err);
rp_status rp_grad_sum_share(rp_engine *e, int l, int64_t t, int fuse, const char *who,
                            rp_error *err);

/* AdamW with coefficient coef on elements [lo, hi) of layer l, writing its
 * compute copy (adamw_share.c). */
void rp_optimizer_update_share(rp_engine *e, int l, int64_t t, float coef, size_t lo,
                               size_t hi);
/* The speculative update's (speculative.c, optimizer.c): the same, with
 * the backup of [lo, hi) at `backup` (master, m, v of its hi - lo elements
 * one after another). from = 0: the update also writes the old master, m
 * and v there in the same pass (the padding between tensors too: an image
 * of the range); from = 1: it reads them from there instead of from the
 * layer's state (a redo when clipping clips; the same bits as restoring
 * the backup first). */
void rp_optimizer_update_share_backup(rp_engine *e, int l, int64_t t, float coef, size_t lo,
                                      size_t hi, float *backup, int from);
/* The same on the elements of `count` ranges of layer l, split over the
 * optimizer's threads together (rp_adamw_ranges_split), however short each
 * range is. */
void rp_optimizer_update_ranges(rp_engine *e, int l, int64_t t, float coef,
                                const rp_adamw_range *ranges, size_t count);

/* An optimizer span "WHAT L (it T)" from t0 to now, with --trace
 * (adamw_share.c). */
void rp_optimizer_trace(rp_engine *e, const char *what, int l, int64_t t, uint64_t t0);

#endif
