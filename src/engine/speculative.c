/* The speculative update (--speculative-update): with clipping, the
 * optimizer runs AdamW on its share of a block (every layer but the
 * embedding) as soon as the block's gradient is summed, with coefficient
 * 1.0f, before the global norm is known, and publishes nothing; the update
 * gate (update_gate.h) says when. Clipping's coefficient is exactly 1.0f
 * whenever the norm is within --grad-clip (optim/clip.c), so when it is
 * (a hit) the update already made is the one the norm asks for, bit for
 * bit, and is published as is; when the norm clips (a miss), master, m and
 * v are restored from the backup taken just before and the update is
 * redone with the real coefficient (optimizer.c). The backup is written by
 * the speculative AdamW itself, in the same pass over master, m and v
 * (rp_adamw_step_backup: 12 bytes a parameter written, nothing more read),
 * and a redo reads its old state from there (rp_adamw_step_from_backup: no
 * restore first). This file holds the choice (auto, on, off, under the
 * same host-memory rule as --recompute auto), the backup's size and
 * layout, and the restore of a step that ends before its norm.
 *
 * Not the embedding: its gradient is summed last (nothing would overlap)
 * and it is the largest layer (its backup the largest). The backup is one
 * buffer per rank, private memory, allocated once: 12 bytes (fp32 master,
 * m, v) per parameter of the rank's slices of layers 1.. . */
#include <stdlib.h>
#include <string.h>

#include "engine/run_impl.h"
#include "engine/speculative.h"
#include "engine/update_gate.h"

/* Floats of rank r's backup on node `node` before layer `upto`'s part:
 * master, m and v of its slice of every layer from 1, in layer order
 * (upto = num_layers: the whole backup). */
static size_t backup_floats(const rp_engine *e, int r, int node, int upto)
{
    size_t floats = 0, b0, b1, lo, hi;
    for (int l = 1; l < upto && l < e->num_layers; l++) {
        rp_engine_slice(e, l, r, node, &b0, &b1, &lo, &hi);
        floats += 3 * (hi - lo);
    }
    return floats;
}

/* Why the run does not speculate, or NULL when it may. */
static const char *not_applicable(const rp_engine *e)
{
    if (e->o->speculative_update == RP_SPECULATIVE_OFF)
        return "--speculative-update off";
    if (e->o->grad_clip <= 0)
        return "no --grad-clip: every block's update is fused into its gradient's sum already";
    if (e->o->optimizer_lag)
        return "--optimizer-lag 1: the updates overlap the next step already";
    if (e->o->speculative_update == RP_SPECULATIVE_AUTO && e->device != RP_DEVICE_CUDA)
        return "auto: CPU executors, whose optimizer keeps to one thread beside the compute; "
               "--speculative-update on speculates there too";
    return NULL;
}

/* The leader's choice (world rank 0): 1 on, 0 off, or an error for `on`
 * when the backup does not fit. */
static rp_status choose(const rp_engine *e, int *on, rp_error *err)
{
    char size[64];
    double mib = (double)e->spec_backup_node_bytes / 1048576.0;
    snprintf(size, sizeof size, "%.1f MiB per node", mib);
    const char *why = not_applicable(e);
    *on = 0;
    if (why) {
        if ((e->o->grad_clip > 0 && !e->o->optimizer_lag) ||
            e->o->speculative_update == RP_SPECULATIVE_ON)
            rp_log(e->lg, RP_LOG_INFO, "speculative update: off (%s)", why);
        return RP_OK;
    }
    const char *from;
    int64_t limit = rp_host_memory_limit(e->o->host_memory_limit_mib, &from), state = 0;
    RP_TRY(rp_run_host_model_state(e, &state, err));
    int64_t need = state + (int64_t)e->spec_backup_node_bytes;
    int on_given = e->o->speculative_update == RP_SPECULATIVE_ON;
    if (limit > 0 && need > limit) {
        if (on_given)
            return rp_error_set(err, RP_ERR_INVALID_ARG,
                                "--speculative-update on: the backup of master, m and v of the "
                                "blocks (%.1f MiB per node) and the model state (%.1f MiB) "
                                "need %.1f MiB of host memory per node, more than the %.1f MiB "
                                "of %s; use --speculative-update off or auto",
                                mib, state / 1048576.0, need / 1048576.0, limit / 1048576.0,
                                from);
        rp_log(e->lg, RP_LOG_INFO, "speculative update: off (auto: its backup, %s, and the "
               "model state need %.1f MiB, more than the %.1f MiB of %s)", size,
               need / 1048576.0, limit / 1048576.0, from);
        return RP_OK;
    }
    if (limit <= 0 && !on_given) {
        rp_log(e->lg, RP_LOG_INFO, "speculative update: off (auto: the host's available memory "
               "is not known)");
        return RP_OK;
    }
    *on = 1;
    rp_log(e->lg, RP_LOG_INFO, "speculative update: on (backup of the blocks' master, m and v: "
           "%s, %.1f MiB on rank 0)", size, 4.0 * (double)e->spec_backup_floats / 1048576.0);
    return RP_OK;
}

rp_status rp_speculative_choose(rp_engine *e, MPI_Comm comm, rp_error *err)
{
    e->spec_backup_floats = backup_floats(e, e->rank, e->nd.node, e->num_layers);
    size_t node = 0;
    for (int r = 0; r < e->size; r++)
        node += backup_floats(e, r, e->nd.node, e->num_layers);
    e->spec_backup_node_bytes = 4 * node;
    int on = 0;
    rp_status s = e->nd.world_rank == 0 ? choose(e, &on, err) : RP_OK;
    RP_TRY(rp_run_agree(e, s, comm, err));
    MPI_Bcast(&on, 1, MPI_INT, 0, comm);
    e->speculative = on;
    if (!on)
        return RP_OK;
    e->by_optimizer.spec_backup = malloc((e->spec_backup_floats ? e->spec_backup_floats : 1) *
                                         sizeof(float));
    s = e->by_optimizer.spec_backup
            ? RP_OK
            : rp_error_set(err, RP_ERR_NOMEM, "--speculative-update: the backup of master, m "
                           "and v (%zu MiB on this rank)",
                           e->spec_backup_floats * sizeof(float) >> 20);
    return rp_run_agree(e, s, comm, err);
}

void rp_speculative_free(rp_engine *e)
{
    free(e->by_optimizer.spec_backup);
    e->by_optimizer.spec_backup = NULL;
}

/* A copy of n floats, split over the optimizer's threads in pieces (memory
 * bandwidth, like AdamW's). */
static void copy_floats(float *to, const float *from, size_t n)
{
    enum { PIECE = 1 << 16 };
    size_t pieces = (n + PIECE - 1) / PIECE;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (size_t i = 0; i < pieces; i++) {
        size_t a = i * PIECE, z = a + PIECE < n ? a + PIECE : n;
        memcpy(to + a, from + a, (z - a) * sizeof(float));
    }
}

float *rp_speculative_part(rp_engine *e, int l)
{
    return e->by_optimizer.spec_backup + backup_floats(e, e->rank, e->nd.node, l);
}

void rp_speculative_restore(rp_engine *e, int l, size_t lo, size_t hi)
{
    rp_layer_state *ls = &e->p->st[l];
    const float *at = rp_speculative_part(e, l);
    size_t n = hi - lo;
    copy_floats(ls->master + lo, at, n);
    copy_floats(ls->m + lo, at + n, n);
    copy_floats(ls->v + lo, at + 2 * n, n);
}
