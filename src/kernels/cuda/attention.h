/* Causal grouped-query flash attention on NVIDIA GPUs (compiled by nvcc;
 * C entry points). Computes what src/kernels/cpu/attention.h computes, with
 * the same shapes and layouts (rp_attn_shape; `block` is ignored, the tiles
 * are fixed):
 *   q, o, dq, do : [nseq*seqlen, nheads*head_dim]
 *   k, v, dk, dv : [nseq*seqlen, nkv*head_dim]
 *   lse          : [nseq*seqlen, nheads]   (natural log-sum-exp of scale*q.k)
 * Query head h reads kv head h / (nheads/nkv); query t of a sequence sees
 * keys 0..t of the same sequence, or with document segments (rp_attn_shape's
 * seg_start, device memory) keys seg_start[t]..t: key tiles before a query
 * tile's earliest visible key are skipped, the query tiles of a key tile
 * end at the last row whose segment starts at or before it, and scores
 * outside a row's segment are masked. (Written without a GPU at hand:
 * test_kernel_ops.c compares it with the CPU op; until that has run on a
 * GPU, `roundpipe train` refuses --documents on CUDA.)
 * gpt-oss (issue 35; rp_attn_shape's window and sinks): with a window W
 * query t sees keys t-W < j <= t as well, a row's earliest key the later of
 * its segment's start and t-W+1 (so key tiles before a tile's earliest are
 * skipped, and a key tile's query tiles end W-1 rows past it); a sink adds
 * exp(sinks[h]) to the forward's denominator after the online softmax (lse
 * includes it, so the backward's P needs nothing more; the sink's own
 * gradient is rp_cuda_attn_sink_backward_bf16). Written without a GPU too:
 * not run, and `roundpipe train` refuses gpt-oss on CUDA until it has.
 *
 * Numerics: q, k, v and do enter the tensor cores as bf16 (mma.sync
 * m16n8k16), products and softmax accumulate in fp32; P and dS are rounded to
 * bf16 before their second matrix product (as in FlashAttention-2). Outputs
 * are fp32.
 *
 * Algorithms (FlashAttention-2 style, no seq x seq buffer anywhere; extra
 * device memory is O(tokens)):
 *   forward   one thread block per (query tile of 64 rows, head, sequence);
 *             keys in tiles of 64, double-buffered in shared memory with
 *             cp.async; online softmax in registers; saves o and lse.
 *   backward  delta = rowsum(do * o) first (fp32, from the fp32 o and do);
 *             then two kernels that recompute P tile by tile:
 *             dk/dv: one block per (key tile of 64, kv head, sequence),
 *               looping over the query heads of the group and the query tiles
 *               at or after the diagonal in a fixed order; dk, dv stay in
 *               registers, so the GQA sum needs no atomics;
 *             dq: one block per (query tile of 64, head, sequence), looping
 *               over the key tiles up to the diagonal.
 *             No atomics at all: every output element is summed by one
 *             thread in a fixed order, so results are bit-reproducible run to
 *             run. The price is recomputing q.k and do.v in the dq kernel
 *             (7 matrix products instead of FlashAttention-2's 5).
 *
 * head_dim: any multiple of 8 in [8, 128]. Kernels are instantiated for 64
 * and 128; other head dims run the next larger one with zero-padded columns
 * in shared memory (correct, with the padding's wasted work).
 *
 * Every entry point returns 0 on success, -1 for a bad argument (nothing is
 * launched or written) or -2 when a CUDA call fails; *why then holds a static
 * message. All pointers are device pointers unless said otherwise; device
 * buffers must be 16-byte aligned (cudaMalloc gives 256). Work is queued on
 * `stream` (0: the legacy default stream) and is not waited for. */
#ifndef RP_KERNELS_CUDA_ATTENTION_H
#define RP_KERNELS_CUDA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/attn_shape.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- fp32 entry points (the engine's buffers) -------------------------- */

/* Bytes of device workspace the fp32 entry points need (bf16 copies of the
 * inputs; backward also do and delta). Grows linearly with the tokens. */
size_t rp_cuda_attn_workspace_bytes(const rp_attn_shape *s, int backward);

/* o and lse from fp32 q, k, v: converts them to bf16 in ws, then runs
 * rp_cuda_attn_forward_bf16. */
int rp_cuda_attn_forward(const rp_attn_shape *s, const float *q, const float *k, const float *v,
                         float *o, float *lse, void *ws, size_t ws_bytes, cudaStream_t stream,
                         const char **why);

/* dq, dk, dv (overwritten) from the forward's inputs, its o and lse, and
 * dout: converts q, k, v, dout to bf16 in ws, computes delta, runs the bf16
 * backward. */
int rp_cuda_attn_backward(const rp_attn_shape *s, const float *q, const float *k, const float *v,
                          const float *o, const float *lse, const float *dout, float *dq,
                          float *dk, float *dv, void *ws, size_t ws_bytes, cudaStream_t stream,
                          const char **why);

/* ---- bf16 core (uint16_t holds raw bf16 bits, as in core/dtype.h) ------- */

/* o and lse from bf16 q, k, v: o (fp32) and o16 (o rounded to bf16, for
 * a following bf16 GEMM) are each written when not NULL; one must be set. */
int rp_cuda_attn_forward_bf16(const rp_attn_shape *s, const uint16_t *q, const uint16_t *k,
                              const uint16_t *v, float *o, uint16_t *o16, float *lse,
                              cudaStream_t stream, const char **why);

/* delta[t, h] = sum_d dout[t, h, d] * o[t, h, d] in fp32 ([nseq*seqlen,
 * nheads]); dout16, when not NULL, receives dout rounded to bf16. */
int rp_cuda_attn_delta(const rp_attn_shape *s, const float *o, const float *dout, float *delta,
                       uint16_t *dout16, cudaStream_t stream, const char **why);

/* The same delta from bf16 o and dout (a back end that keeps them in bf16;
 * the products accumulate in fp32). */
int rp_cuda_attn_delta_bf16(const rp_attn_shape *s, const uint16_t *o, const uint16_t *dout,
                            float *delta, cudaStream_t stream, const char **why);

/* dq, dk, dv (fp32, overwritten) from bf16 q, k, v, dout, and the fp32 lse
 * of the forward and delta ([nseq*seqlen, nheads] floats) of
 * rp_cuda_attn_delta or rp_cuda_attn_delta_bf16. No other scratch. */
int rp_cuda_attn_backward_bf16(const rp_attn_shape *s, const uint16_t *q, const uint16_t *k,
                               const uint16_t *v, const uint16_t *dout, const float *lse,
                               const float *delta, float *dq, float *dk, float *dv,
                               cudaStream_t stream, const char **why);

/* gpt-oss's sinks (s->sinks, device memory; nothing without them):
 * dsinks[h] += -sum over rows t of exp(sinks[h] - lse[t, h]) * (dout[t, h] .
 * o[t, h]) from the forward's bf16 o and lse, each term in double, summed
 * in a fixed tree (the same bits every run). */
int rp_cuda_attn_sink_backward_bf16(const rp_attn_shape *s, const uint16_t *o, const float *lse,
                                    const uint16_t *dout, float *dsinks, cudaStream_t stream,
                                    const char **why);

/* fp32 -> bf16 (round to nearest even), n elements. */
int rp_cuda_f32_to_bf16(const float *src, uint16_t *dst, size_t n, cudaStream_t stream,
                        const char **why);

/* ---- measurement -------------------------------------------------------- */

/* Nominal FLOPs of one causal attention call: forward
 * 2 * 2 * (seqlen^2 / 2) * head_dim * nheads per sequence (q.k and p.v over
 * the lower triangle), backward 2.5 times that (FlashAttention's
 * convention; the dq kernel's recomputation is not counted). */
double rp_cuda_attn_flops(const rp_attn_shape *s, int backward);

/* Times the bf16 core on device `dev` (allocates its own buffers, random
 * inputs): *fwd_tflops and *bwd_tflops receive achieved TFLOP/s over `iters`
 * calls after one warm-up (backward = delta + dk/dv + dq kernels; the fp32
 * conversions are not timed). Synchronous; frees what it allocates. */
int rp_cuda_attn_bench(int dev, const rp_attn_shape *s, int iters, double *fwd_tflops,
                       double *bwd_tflops, const char **why);

#ifdef __cplusplus
}
#endif
#endif
