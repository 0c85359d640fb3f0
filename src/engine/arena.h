/* Activation arena of the host store: where activations travel between
 * stages. For microbatch m (of M) of A elements each (A = tokens of a
 * microbatch x hidden), fwd_out and ckpt in the activation dtype (fp32, or
 * bf16 with --activation-dtype bf16: half the bytes; every layer's output is
 * rounded to it, so the bf16 copy loses nothing), bwd_out in fp32:
 *   fwd_out[s][m]  output of forward stage s (input of stage s+1 or the tail)
 *   ckpt[l][m]     saved input of layer l (the activation checkpoint): for
 *                  stage-grain recompute the first layer of every backward
 *                  stage below the tail, for layer-grain every layer below it,
 *                  and every layer the plan keeps (plan.h's kept), but for
 *                  executors that keep those in their own pool
 *                  (kept_on_executor: never a kept layer); when l is
 *                  the first layer of forward stage s+1 this is fwd_out[s][m]
 *                  itself (the same bytes, held once: ckpt_of_fwd_out[l] = s),
 *                  which its forward job then need not write and whose next
 *                  writer waits for the checkpoint's reader too
 *   kept[l][m]     a kept layer's `saved` area: what its backward needs, as
 *                  its forward job wrote it (kept_floats[l] floats; none where
 *                  the executors keep it)
 *   bwd_out[i][m]  gradient of the input of backward stage i (i = 0 is the
 *                  tail), for stages that do not start at layer 0; stage i+1
 *                  reads it before it writes its own, so the stages of one
 *                  parity take turns in one buffer of M (bwd_out_last[i]:
 *                  the last of them, whose reader the next iteration's
 *                  writer of i waits for)
 * plus, per iteration slot r (ring of RP_ARENA_RING iterations):
 *   loss[r][m]     sum of the token cross-entropies of microbatch m
 *   sumsq[r][l][b] squared L2 norm of block b of layer l's gradient (the
 *                  blocks of rp_clip_blocks; summed in order they give the
 *                  layer's, whichever ranks computed them)
 *   router[r][m]   a mixture-of-experts model's router statistics of
 *                  microbatch m (router_floats: engine/router_aux.h)
 *   aux[r][m]      its load-balancing loss (a double). */
#ifndef RP_ENGINE_ARENA_H
#define RP_ENGINE_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "optim/clip.h"
#include "plan/plan.h"

#define RP_ARENA_RING 4
#define RP_ARENA_SUMSQ_BLOCKS RP_CLIP_MAX_BLOCKS

typedef struct rp_arena_spec {
    int nlayers;     /* layers of the model, embedding and head included */
    int microbatches;
    size_t act_floats; /* A */
    int layer_grain;   /* 1: checkpoint every layer below the tail */
    size_t router_floats; /* router statistics of one microbatch (0: none) */
    const size_t *kept_floats; /* [nlayers] the saved area of each layer the plan keeps
                                  (rp_block_saved_floats_of); read by rp_arena_init only,
                                  NULL when the plan keeps none */
    rp_dtype act_dtype;        /* fwd_out's and ckpt's elements: RP_F32 or RP_BF16 */
    int kept_on_executor;      /* the executors keep the kept layers' inputs and saved
                                  areas in their own pool (host_memory.h's
                                  rp_kept_on_executor): no ckpt or kept slot for them here */
} rp_arena_spec;

typedef struct rp_arena {
    rp_arena_spec spec;
    int nfwd, nbwd;
    size_t *fwd_out;   /* [nfwd * M] float offsets, SIZE_MAX when absent */
    size_t *ckpt;      /* [nlayers * M] */
    size_t *bwd_out;   /* [nbwd * M] */
    size_t *kept;      /* [nlayers * M] float offsets, SIZE_MAX where the plan keeps none */
    size_t loss;       /* float offset of double loss[RING][M] (8-byte aligned) */
    size_t sumsq;      /* float offset of double sumsq[RING][nlayers] */
    size_t router;     /* float offset of float router[RING][M][router_floats] */
    size_t aux;        /* float offset of double aux[RING][M] */
    size_t floats;     /* total size in floats */
    size_t buffer_floats; /* fwd_out's and ckpt's stride: A elements of act_dtype, rounded
                             up to 16 floats */
    size_t grad_floats;   /* bwd_out's stride: A floats rounded up to 16 */
    char *is_ckpt;     /* [nlayers] */
    int *ckpt_of_fwd_out; /* [nlayers] s when ckpt[l] is fwd_out[s]'s buffer, else -1 */
    int *bwd_out_last;    /* [nbwd] the last stage j >= i of i's parity with a bwd_out, or -1 */
} rp_arena;

/* An activation buffer of the arena and the job (plan/schedule.h's index j)
 * that reads it back to a device: fwd_out[s][m] by job s + 1 (the next
 * forward stage, or the tail), ckpt[l][m] by the backward job of the stage
 * holding l, bwd_out[i][m] by backward stage i + 1 (-1: read by several, the
 * stages that take turns in it). A checkpoint held by a forward output is
 * listed as that output; bwd_out's two buffers once each. */
typedef struct rp_arena_buffer {
    size_t offset;  /* floats, as the index arrays */
    size_t floats;  /* its size: buffer_floats, or grad_floats for bwd_out's */
    int reader_job;
    int microbatch;
} rp_arena_buffer;

/* The arena's activation buffers in layout order (offsets ascending) into
 * out (NULL: only counted); returns their count. */
int rp_arena_buffers(const rp_arena *a, const rp_plan *plan, rp_arena_buffer *out);

/* Compute the offsets for a plan (allocates the index arrays). */
int rp_arena_init(rp_arena *a, const rp_plan *plan, const rp_arena_spec *spec);
void rp_arena_free(rp_arena *a);

#endif
