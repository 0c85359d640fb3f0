/* The documents of an attention call packed by seg_start (rp_attn_shape),
 * laid out as cuDNN's ragged layout takes them: each document one batch
 * entry of a plan, its tokens where they already are (the ragged offsets
 * point into the packed q, k, v, o), its length read by a padding mask.
 * Plain C on the host's copy of seg_start (rp_attn_shape's seg_host), built
 * everywhere, so the table is tested without a GPU
 * (kernels/cuda/cudnn_attention.c runs it).
 *
 * A plan is built per shape, so the document count and the longest
 * document are rounded up (a power of two each) to a few shapes a run
 * meets again; the plan's entries past the documents are empty (length
 * 0). cuDNN's deterministic backward keeps dP in its workspace for every
 * entry over the plan's whole sequence length (padded: 2 bytes a score),
 * and the statistics are padded so too: rp_attn_documents_refusal refuses
 * the calls whose workspace would exceed what a run over documents
 * reserves (rp_attention_cudnn_documents_budget: twice the dense call's),
 * or whose padded rows would exceed RP_ATTN_DOCUMENTS_MAX_PADDING times
 * its tokens (what it reserves for the statistics); the own kernel runs
 * them. So documents of similar lengths, short against the sequence, go
 * to cuDNN; a document near the sequence's length among others does not. */
#ifndef RP_KERNELS_ATTN_DOCUMENTS_H
#define RP_KERNELS_ATTN_DOCUMENTS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attn_shape.h"

/* The least sequence length of a plan (a tile of cuDNN's kernels): so that
 * short documents share a few plans. */
#define RP_ATTN_DOCUMENTS_MIN_SPAN 64
/* The most padded rows (slots * span) a call's documents take, as a
 * multiple of its tokens (nseq * seqlen) */
#define RP_ATTN_DOCUMENTS_MAX_PADDING 8

typedef struct rp_attn_documents {
    int64_t count;   /* documents (segments) over the call's nseq sequences */
    int64_t longest; /* tokens of the longest */
    int64_t slots;   /* the plan's batch: count rounded up to a power of two */
    int64_t span;    /* the plan's sequence length: longest rounded up to a power of
                        two, at least RP_ATTN_DOCUMENTS_MIN_SPAN, at most seqlen */
} rp_attn_documents;

/* The documents of seg_host [nseq*seqlen] (a document starts at each
 * token t of a sequence where seg_host[t] == t, and at each sequence's
 * first token). */
void rp_attn_documents_measure(const int32_t *seg_host, int64_t nseq, int64_t seqlen,
                               rp_attn_documents *d);

/* The table of d's plan: first[b] the index over the call's nseq*seqlen
 * tokens of document b's first token, length[b] its tokens, for b <
 * d->count in order; the empty entries up to d->slots have first =
 * nseq*seqlen and length 0; first[d->slots] = nseq*seqlen. first holds
 * d->slots + 1 entries, length d->slots. */
void rp_attn_documents_table(const int32_t *seg_host, int64_t nseq, int64_t seqlen,
                             const rp_attn_documents *d, int32_t *first, int32_t *length);

/* NULL where cuDNN's ragged layout may run the documents d of call s on a
 * GPU of device_total bytes, else why not (a static string): no
 * documents; the workspace cuDNN is described to want for d->slots
 * sequences of d->span (rp_attention_cudnn_workspace_want) over
 * rp_attention_cudnn_documents_budget of the dense call; padded rows over
 * RP_ATTN_DOCUMENTS_MAX_PADDING times the call's tokens; or offsets beyond
 * int32 (tokens * heads * head_dim). */
const char *rp_attn_documents_refusal(const rp_attn_documents *d, const rp_attn_shape *s,
                                      size_t device_total);

#ifndef RP_HOST_DEVICE
#ifdef __CUDACC__
#define RP_HOST_DEVICE __host__ __device__
#else
#define RP_HOST_DEVICE
#endif
#endif

/* Value i of statistics padded per entry ([slots, nheads, span], cuDNN's
 * layout of a documents plan): its head (*h), and the token of the call
 * whose row it is (first[b] + its row in entry b), or -1 past entry b's
 * length (padding). The documents' transposes of
 * kernels/cuda/cudnn_layout.cu map lse so; under nvcc a device function
 * too. */
static inline RP_HOST_DEVICE int64_t rp_attn_documents_token(int64_t i, const int32_t *first,
                                                             const int32_t *length,
                                                             int64_t nheads, int64_t span,
                                                             int64_t *h)
{
    const int64_t pos = i % span, b = i / (span * nheads);
    *h = i / span % nheads;
    return pos < length[b] ? first[b] + pos : -1;
}

#endif
