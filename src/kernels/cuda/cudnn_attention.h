/* Causal grouped-query attention through cuDNN 9's fused flash SDPA (the
 * backend graph API, library opened at run time: kernels/cudnn_loader.h).
 * Computes what kernels/cuda/attention.h's bf16 core computes, with the
 * same layouts (rp_attn_shape: q, o [nseq*seqlen, nheads*head_dim]; k, v
 * [nseq*seqlen, nkv*head_dim]; lse [nseq*seqlen, nheads], the natural
 * log-sum-exp of scale*q.k), so the CUDA ops table swaps one for the other
 * without the block knowing.
 *
 * The graphs are the fused flash attention patterns of cuDNN's graph API,
 * built from primitive nodes (they run on cuDNN 9.0 and newer, unlike the
 * single-node SDPA descriptors of 9.13+):
 *   forward   S = Q K^T (fp32), S *= scale, causal mask (generated row and
 *             column indices, row >= column, and with document segments
 *             column >= seg_start[row]; else -FLT_MAX), softmax with
 *             its statistics (max, exp, sum; Stats = max + log(sum), fp32),
 *             O = P V (P in bf16).
 *   backward  Delta = rowsum(dO * O) (fp32, a buffer of its own), P =
 *             exp(scale Q K^T - Stats) under the same mask, dV = P^T dO,
 *             dP = dO V^T, dS = P (dP - Delta) scale, dK = dS^T Q, dQ = dS
 *             K; with GQA, dK and dV summed over the query heads of a group
 *             by reduction nodes. dQ is the matrix product's output itself,
 *             not an fp32 accumulator added to atomically.
 * Stats travel in cuDNN's [nseq, nheads, seqlen] order through a buffer of
 * this module, transposed to and from the contract's lse by small kernels
 * (cudnn_layout.cu); dq, dk, dv come out of cuDNN in bf16 and are widened
 * into the contract's fp32.
 *
 * Determinism: of the engine configurations cuDNN's heuristics (mode A)
 * offer, those whose engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
 * are skipped, for the backward and the forward alike, so every plan gives
 * the same bits for the same inputs run to run; where no deterministic
 * configuration exists the shape is refused (the caller runs the own
 * kernel). cuDNN's deterministic backward is described to keep dP in a
 * workspace of about 2 * nseq * nheads * seqlen^2 bytes: the run reserves
 * that much beside its plan, at most a quarter of the GPU
 * (rp_attention_cudnn_workspace_budget, kernels/attention_choice.h), and a
 * plan whose workspace exceeds the reservation is refused too, so long
 * sequences take the own kernel (O(tokens) memory) instead of running out
 * of memory. Whether the description holds is what the GPU window's
 * bench_attention measures (its workspace lines).
 *
 * Document segments (rp_attn_shape's seg_start) widen the generated mask
 * rather than going through cuDNN's ragged layout: seg_start itself, in the
 * device memory the contract gives it, is a [nseq, 1, seqlen, 1] int32
 * input of the graph, compared (CMP_GE) with the generated column index and
 * joined to the causal compare by LOGICAL_AND, in the forward and the
 * backward alike; nothing is converted or allocated for it. Why not ragged
 * offsets (each document one batch entry, RAGGED_OFFSET tensors on Q, K, V,
 * O and a padding mask from per-document lengths): the plan's batch size
 * would be the number of documents, which only the device's seg_start
 * holds, so every call would need a host read (a stream wait) or a plan per
 * bucket of counts, offsets made by a kernel, and Stats re-laid out from
 * per-document rows to the contract's lse; the mask keeps the packed layout,
 * one plan per shape, and the contract's Stats. Its cost: the whole causal
 * triangle is computed, tiles wholly outside a document included. Nothing
 * in cuDNN's documentation keeps tensor inputs out of the mask: its
 * padding mask compares the generated indices with per-sequence length
 * tensors, the sliding window adds a bound tensor to the column index, and
 * the frontend's score_mod (v1.9) is any chain of pointwise nodes on the
 * scores; the backward already reads a per-row input there (Stats). But no
 * page promises a per-row int32 operand: where no engine takes the graph
 * the shape is refused like any other, and the own kernel runs it (under
 * auto), or the run stops saying so (under --attention cudnn). Segments
 * reach this module only when the run allows documents on CUDA
 * (RP_ALLOW_UNPROVEN_CUDA=documents; kernels/cuda/ops.h).
 *
 * Plans are built once per shape (and direction) and kept in a small cache
 * of this object, keyed also by whether the call has segments (that graph
 * has one input more); a refused shape is remembered with its reason. Buffers
 * (cuDNN's workspace, the stats, Delta, bf16 gradients) grow once when a
 * shape needs more; growing waits for the stream first.
 *
 * Written without a GPU at hand (issue 38): built and loaded here, not yet
 * run; mpi-tests/test_cuda_cudnn_attention.c compares it with the CPU op on
 * the GPU machine. */
#ifndef RP_KERNELS_CUDA_CUDNN_ATTENTION_H
#define RP_KERNELS_CUDA_CUDNN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/attn_shape.h"
#include "kernels/cudnn_loader.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rp_cudnn_attention rp_cudnn_attention;

/* A cuDNN handle on `stream` of the current device, over an opened
 * library (which must outlive the object). 0, or -2 with `why`. */
int rp_cudnn_attention_create(const rp_cudnn_library *lib, cudaStream_t stream,
                              rp_cudnn_attention **out, char *why, size_t why_len);
void rp_cudnn_attention_destroy(rp_cudnn_attention **a);

/* Return values of the two calls: */
#define RP_CUDNN_DONE 0     /* queued on the stream */
#define RP_CUDNN_REFUSED 1  /* cuDNN does not take this shape (why says why); nothing queued */
#define RP_CUDNN_FAILED (-2) /* a cuDNN or CUDA call failed (why) */

/* o (bf16) and lse (fp32) from bf16 q, k, v. */
int rp_cudnn_attention_forward(rp_cudnn_attention *a, const rp_attn_shape *s, const uint16_t *q,
                               const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse,
                               char *why, size_t why_len);

/* dq, dk, dv (fp32, overwritten) from the forward's bf16 q, k, v, o, its
 * lse, and bf16 dout. */
int rp_cudnn_attention_backward(rp_cudnn_attention *a, const rp_attn_shape *s, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v, const uint16_t *o,
                                const float *lse, const uint16_t *dout, float *dq, float *dk,
                                float *dv, char *why, size_t why_len);

/* ---- layout kernels (cudnn_layout.cu) ---------------------------------- */

/* stats [nseq, nheads, seqlen] <-> lse [nseq*seqlen, nheads] */
int rp_cuda_stats_from_lse(const float *lse, float *stats, int64_t nseq, int64_t seqlen,
                           int64_t nheads, cudaStream_t stream);
int rp_cuda_lse_from_stats(const float *stats, float *lse, int64_t nseq, int64_t seqlen,
                           int64_t nheads, cudaStream_t stream);

/* The workspace cuDNN's plan for shape s (the forward, or the backward)
 * asks for, the plan built if it was not: 0 with *bytes; RP_CUDNN_REFUSED
 * with why, and *bytes what the plan asked when it was refused for
 * exceeding the reservation (else 0). For the GPU window's measurement of
 * how cuDNN's workspace grows with seqlen. */
int rp_cudnn_attention_workspace(rp_cudnn_attention *a, const rp_attn_shape *s, int backward,
                                 int64_t *bytes, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
