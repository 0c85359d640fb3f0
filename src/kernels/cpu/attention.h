/* Causal grouped-query attention on CPU, flash-attention style: keys are
 * visited in blocks with an online softmax. Beyond its inputs and outputs
 * the forward keeps O(block) floats per task on the stack and the backward
 * RP_ATTN_MAX_BLOCK (a run of keys' probabilities, exponentiated together),
 * so no seq x seq score matrix ever exists. The forward saves only
 * the output and the per-row log-sum-exp; the backward recomputes scores.
 *
 * Layouts (row-major, tokens of nseq sequences of seqlen back to back):
 *   q, o, dq, do : [nseq*seqlen, nheads*head_dim]
 *   k, v, dk, dv : [nseq*seqlen, nkv*head_dim]
 *   lse          : [nseq*seqlen, nheads]
 * Query head h reads kv head h / (nheads/nkv). Query t of a sequence sees
 * keys 0..t of the same sequence (with segments, of its segment; with a
 * window W, only the last W of them). Scores are scale * q.k; a head's sink
 * logit joins each row's softmax denominator as is.
 *
 * Determinism: forward tasks are (sequence, head, query block) and write
 * disjoint rows; backward tasks are (sequence, kv head), each owning dk/dv of
 * its kv head and dq of the query heads that read it, and summing in a fixed
 * (head, query, key) order. No atomics; results do not depend on the thread
 * count, and the backward does not depend on the block size either. */
#ifndef RP_KERNELS_CPU_ATTENTION_H
#define RP_KERNELS_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attn_shape.h"


/* Largest block the forward uses (larger requests are clamped): its
 * per-row state lives on the stack, 3 * RP_ATTN_MAX_BLOCK floats. */
#define RP_ATTN_MAX_BLOCK 256

/* o and lse from q, k, v. No scratch: the rows of o accumulate. */
void rp_attn_forward(const rp_attn_shape *s, const float *q, const float *k, const float *v,
                     float *o, float *lse);

/* dq, dk, dv (overwritten) from the forward's inputs, o, lse and do. With
 * sinks the formulas do not change (lse holds the sink's share). */
void rp_attn_backward(const rp_attn_shape *s, const float *q, const float *k, const float *v,
                      const float *o, const float *lse, const float *dout, float *dq, float *dk,
                      float *dv);

/* The sinks' gradient: dsinks[h] += -sum over rows t, in order, of
 * exp(sinks[h] - lse[t, h]) * (dout[t, h] . o[t, h]) (the sink's
 * probability times minus D_t; the sum in double, added once in fp32).
 * One task per head: the same bits for any thread count. */
void rp_attn_sink_backward(const rp_attn_shape *s, const float *o, const float *lse,
                           const float *dout, float *dsinks);

#endif
