/* The shape of an attention call, shared by the kernel ops table and the
 * attention kernels of both back ends. Plain C with no other include, so
 * nvcc-compiled files can use it. */
#ifndef RP_KERNELS_ATTN_SHAPE_H
#define RP_KERNELS_ATTN_SHAPE_H

#include <stdint.h>

/* Shape of causal grouped-query attention over nseq sequences of seqlen
 * tokens: q, o [nseq*seqlen, nheads*head_dim]; k, v [nseq*seqlen,
 * nkv*head_dim]; lse [nseq*seqlen, nheads] (fp32). Query head h reads kv
 * head h / (nheads/nkv); query t of a sequence sees keys 0..t of it, or
 * with segments keys seg_start[t]..t: documents packed into a sequence
 * (seg_start [nseq*seqlen], for each token the index within its sequence
 * of its segment's first token, in the back end's memory; NULL: one
 * segment per sequence; within a sequence seg_start never decreases and
 * seg_start[t] <= t, as rp_dataset_segments makes it: the CUDA kernels
 * search it on that assumption, the CPU kernel does not need it). Work
 * outside the segments is skipped. A
 * sliding window and learned sinks (below) narrow the keys and widen the
 * denominator. */
typedef struct rp_attn_shape {
    int64_t nseq, seqlen, nheads, nkv, head_dim;
    int64_t block; /* keys/queries per block of the CPU kernel; ignored on CUDA */
    float scale;   /* usually 1/sqrt(head_dim) */
    const int32_t *seg_start;
    /* gpt-oss (issue 35); both zero (NULL) in every other model, and then
     * the results are bit for bit those without these fields: */
    int64_t window;      /* W >= 1: query t sees only keys t-W < j <= t (and its
                            segment's); 0: no window */
    const float *sinks;  /* [nheads] fp32 in the back end's memory, or NULL: head h's
                            softmax denominator gains exp(sinks[h]), a logit with no
                            value that is never masked (not scaled by `scale`); lse
                            includes it */
    /* seg_start in host memory as well, or NULL: where the back end's
     * memory is a GPU's, what a call needs of the documents before it is
     * queued (cuDNN's ragged layout: their count and lengths,
     * kernels/attn_documents.h) without reading the device */
    const int32_t *seg_host;
} rp_attn_shape;

#endif
