/* Where a layer call finds its weights on the device, and in which dtype:
 * one rule for the executor (a stage of several layers in one buffer,
 * engine/executor_impl.h) and the evaluator (one layer at a time, the
 * embedding kept apart, engine/eval.c). Each describes its buffers with a
 * view; the functions below say where layer l's weights are (with LoRA, its
 * frozen base: copied beside the adapters, read where it lies when the
 * device's memory is the host's, engine_impl.h's base_in_place, or an FP8
 * block's dequantised into the executor's scratch for each use), which
 * dtype the call reads them in, and where the head's final norm and LM
 * matrix are (its own, a tied model's embedding, or the frozen base's). */
#ifndef RP_ENGINE_STAGE_WEIGHTS_H
#define RP_ENGINE_STAGE_WEIGHTS_H

#include <stddef.h>

#include "engine/engine_impl.h"

typedef struct rp_stage_weights {
    int first;                  /* the layer whose offsets are offsets[0], base_offsets[0] */
    const void *buffer;         /* device memory, elements of the compute dtype */
    const size_t *offsets;      /* [l - first]: element offset of layer l's trainable weights
                                   (LoRA: its adapters) in buffer */
    const size_t *base_offsets; /* [l - first]: LoRA with a copied base, element offset of layer
                                   l's frozen base in buffer (NULL otherwise) */
    const void *embedding;      /* not NULL: the embedding's weights lie here rather than in
                                   buffer (the evaluator's kept table; the gathered rows of a
                                   base read in place) */
    const void *tied_matrix;    /* a tied LM head's matrix, full model (NULL: not tied) */
    const void *base_scratch;   /* LoRA on an FP8 base: the block being computed, its base
                                   dequantised there in the compute dtype (rp_stage_base_per_use) */
} rp_stage_weights;

/* The head's weights for its call, and where its gradients go: without
 * LoRA the norm's and an untied LM matrix's element offsets in the head's
 * trainable weights (the gradient buffers have the same offsets, in fp32). */
typedef struct rp_head_weights {
    const void *norm, *lm;
    int trainable;        /* 0 with LoRA: the head is frozen, no gradients */
    int lm_tied;          /* the LM matrix is the tied embedding (its gradient apart) */
    size_t norm_at, lm_at; /* trainable: element offsets in the head layer */
} rp_head_weights;

/* The dtype a call reads layer l's weights in: blocks in the compute dtype
 * (a base read in place reaches them through the LoRA call); the embedding
 * and the head in the frozen base's where it lies, else the compute dtype. */
rp_dtype rp_stage_weights_dtype(const rp_engine *e, int l);

/* LoRA: whether layer l's frozen base lies in the stage buffer (at
 * base_offsets), in the compute dtype: frozen_base.h's
 * rp_frozen_base_copied for this run's executors. */
int rp_stage_base_copied(const rp_engine *e, int l);
/* LoRA: whether block l's frozen base is dequantised for each use into
 * base_scratch (frozen_base.h's rp_frozen_base_per_use: an FP8 base). */
int rp_stage_base_per_use(const rp_engine *e, int l);

/* Layer l's trainable weights (LoRA: its adapters), at element `at`. */
const void *rp_stage_weights_trainable(const rp_engine *e, const rp_stage_weights *w, int l,
                                       size_t at);

/* The weights a layer call reads for layer l: its own, or with LoRA its
 * frozen base (base_scratch for a block dequantised per use; NULL for a
 * block whose base is read in place: the LoRA call carries its tensors). */
const void *rp_stage_weights_layer(const rp_engine *e, const rp_stage_weights *w, int l);

/* The head's (layer `head`) final norm and LM matrix. */
void rp_stage_weights_head(const rp_engine *e, const rp_stage_weights *w, int head,
                           rp_head_weights *out);

#endif
