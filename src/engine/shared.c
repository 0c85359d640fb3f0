/* What the engine's threads (executor, optimizer, logger) share beyond the
 * event protocol: the first failure and the abort flag, and each rank's
 * share of a layer's optimizer work. */
#include <stdatomic.h>

#include "engine/engine_impl.h"
#include "optim/clip.h"

rp_status rp_engine_fail(rp_engine *e, rp_status s, const rp_error *err)
{
    pthread_mutex_lock(&e->lock);
    if (e->status == RP_OK) {
        e->status = s;
        e->err = *err;
        e->err.code = s;
        if (e->nd.nodes > 1) /* which node, before the rank, job and event */
            rp_error_prefix(&e->err, "node %d", e->nd.node);
    }
    pthread_mutex_unlock(&e->lock);
    int64_t none = 0;
    atomic_compare_exchange_strong(e->abort_flag, &none, (int64_t)e->rank + 1);
    return s;
}

int rp_engine_aborted(const rp_engine *e)
{
    return atomic_load(e->abort_flag) != 0;
}

void rp_engine_share(const rp_engine *e, int l, int r, size_t *b0, size_t *b1, size_t *lo,
                     size_t *hi)
{
    size_t n = e->p->layers[l].numel, block, nblk = rp_clip_blocks(n, &block);
    *b0 = nblk * (size_t)r / (size_t)e->size;
    *b1 = nblk * (size_t)(r + 1) / (size_t)e->size;
    *lo = *b0 * block < n ? *b0 * block : n;
    *hi = *b1 * block < n ? *b1 * block : n;
}

void rp_engine_slice(const rp_engine *e, int l, int r, int node, size_t *b0, size_t *b1,
                     size_t *lo, size_t *hi)
{
    size_t s0, s1, n = e->p->layers[l].numel, block, N = (size_t)e->nd.nodes;
    rp_clip_blocks(n, &block);
    rp_engine_share(e, l, r, &s0, &s1, lo, hi);
    *b0 = s0 + (s1 - s0) * (size_t)node / N;
    *b1 = s0 + (s1 - s0) * (size_t)(node + 1) / N;
    *lo = *b0 * block < n ? *b0 * block : n;
    *hi = *b1 * block < n ? *b1 * block : n;
}
