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
 *             column indices, row >= column; else -FLT_MAX), softmax with
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
 * Engines: a graph's plan is made from the engine configurations cuDNN's
 * heuristics mode A offer; where none of them gives one (and none asked
 * too much workspace), from those its fallback heuristics offer; where
 * neither offers any, from its engines asked one by one by global index
 * (an engine that takes the graph finalizes; cudnn-frontend's plan from
 * an engine id). Those refusals are counted by status and, where the
 * library has cudnnGetLastErrorString, cuDNN's words for one of them (the
 * first past the graph's pattern) end the refusal's message.
 *
 * Determinism: of the engine configurations tried, those whose engine
 * carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC are skipped, for the backward and the forward alike, so every plan gives
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
 * Document segments (rp_attn_shape's seg_start, with its host copy
 * seg_host) go through cuDNN's ragged layout (kernels/attn_documents.h):
 * each document one batch entry, RAGGED_OFFSET tensors on Q, K, V, O, dO,
 * dQ, dK and dV pointing at its rows in the packed tensors, the matmuls
 * sized by per-entry lengths (GEMM M/N/K overrides) and the padding mask
 * of cudnn-frontend's padded graphs (row < length and column < length)
 * before the causal mask; the statistics and Delta either packed by
 * token ([tokens, nheads], ragged too: lse's layout, copied) or padded
 * per entry ([slots, nheads, span], transposed to and from lse by
 * cudnn_layout.cu's documents kernels), as the layout says (below). The
 * entry count and length are rounded up so that a
 * run meets a few plans, and a call whose padding exceeds the dense
 * call's is refused (the own kernel runs it): what the run reserved for
 * the dense shape covers the rest. Which node patterns cuDNN's fused
 * engines match is not documented node by node, so a documents graph is
 * written in a few ways (its padding mask's comparisons in boolean or in
 * int32; in the backward, that mask once or again after the statistics are
 * subtracted, the causal mask before or after them), tried in turn,
 * cudnn-frontend's way for the library's version first (from 9.10: boolean,
 * the backward's padding mask once and its causal mask after the
 * statistics), all in one layout, then all again in each of the others
 * (the ragged offsets in int64 or int32; the statistics and Delta packed
 * by token, lse's own layout, or padded per entry; from 9.6 packed with
 * int64 offsets first, as NVIDIA's Transformer Engine runs it on sm_90),
 * until cuDNN offers a deterministic engine for one: the plan cached is
 * that one's, and rp_cudnn_attention_documents_graph says which. (The
 * causal mask widened by seg_start, read as a [nseq, 1, seqlen, 1] input,
 * got no engine from cuDNN 9.14.0 on the H200, bench/README 2026-11-30.)
 * Written without a GPU at hand:
 * the cudnn-documents path of core/unproven.h, off until a GPU window
 * proves it.
 *
 * Plans are built once per shape (and direction) and kept in a small cache
 * of this object; a refused shape is remembered with its reason. Buffers
 * (cuDNN's workspace, the stats, Delta, bf16 gradients) grow once when a
 * shape needs more; growing waits for the stream first.
 *
 * Written without a GPU at hand (issue 38); first run on the H200 of
 * 2026-11-30, where mpi-tests/test_cuda_cudnn_attention.c held it to the
 * CPU op and the GPU window's parity trained with it (bench/README). */
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
/* The same for a GPU of device_total bytes (what the budgets of
 * kernels/attention_choice.h are computed from; the call above takes the
 * current device's). */
int rp_cudnn_attention_create_for(const rp_cudnn_library *lib, cudaStream_t stream,
                                  size_t device_total, rp_cudnn_attention **out, char *why,
                                  size_t why_len);
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

/* The same between lse and the padded statistics of documents laid out as
 * cuDNN's ragged batch entries ([slots, nheads, span]; document b's rows
 * are tokens first[b] .. first[b] + length[b] - 1 of lse, kernels/
 * attn_documents.h; first and length in device memory). Padding rows of
 * stats get 0. */
int rp_cuda_documents_stats_from_lse(const float *lse, float *stats, const int32_t *first,
                                     const int32_t *length, int64_t slots, int64_t span,
                                     int64_t nheads, cudaStream_t stream);
int rp_cuda_documents_lse_from_stats(const float *stats, float *lse, const int32_t *first,
                                     const int32_t *length, int64_t slots, int64_t span,
                                     int64_t nheads, cudaStream_t stream);

/* The workspace cuDNN's plan for shape s (the forward, or the backward)
 * asks for, the plan built if it was not, as a call of that shape builds it
 * (with document segments, the documents' plan): 0 with *bytes;
 * RP_CUDNN_REFUSED with why, and *bytes what the plan asked when it was
 * refused for exceeding the reservation (else 0). For the GPU window's
 * measurement of how cuDNN's workspace grows with seqlen, and for tests of
 * the plans' building. */
int rp_cudnn_attention_workspace(rp_cudnn_attention *a, const rp_attn_shape *s, int backward,
                                 int64_t *bytes, char *why, size_t why_len);

/* How the documents graph of the last documents call cuDNN took in that
 * direction (backward 0: the forward) is written: the first of the
 * module's ways that cuDNN offered an engine for, its padding mask's nodes
 * and its layout ("boolean compares, int64 ragged offsets, packed
 * statistics", ...), then how the engine was found where not by
 * heuristics mode A (", cuDNN's fallback heuristics", ", engine N, which
 * no heuristics offered"); NULL before such a call. For the run's last line and the GPU
 * window's tests. */
const char *rp_cudnn_attention_documents_graph(const rp_cudnn_attention *a, int backward);

#ifdef __cplusplus
}
#endif
#endif
