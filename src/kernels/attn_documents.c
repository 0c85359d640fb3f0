/* The documents of an attention call as cuDNN's ragged layout takes them
 * (attn_documents.h). */
#include "config.h"

#include <limits.h>
#include <stddef.h>

#include "kernels/attn_documents.h"
#include "kernels/attention_choice.h"

static int64_t power_of_two_at_least(int64_t n)
{
    int64_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* Whether token t of a sequence (its seg_start row) starts a document. */
static int starts(const int32_t *row, int64_t t) { return t == 0 || row[t] == t; }

/* Walks the documents of seg_host in order: their count and the longest's
 * tokens, and (first and length not NULL) each one's first token over the
 * call's tokens and its length, for the first `room` of them. */
static void walk(const int32_t *seg_host, int64_t nseq, int64_t seqlen, int64_t room,
                 int32_t *first, int32_t *length, int64_t *count, int64_t *longest)
{
    *count = *longest = 0;
    for (int64_t j = 0; j < nseq; j++) {
        const int32_t *row = seg_host + j * seqlen;
        int64_t begin = 0;
        for (int64_t t = 1; t <= seqlen; t++) {
            if (t < seqlen && !starts(row, t))
                continue;
            if (first && *count < room) {
                first[*count] = (int32_t)(j * seqlen + begin);
                length[*count] = (int32_t)(t - begin);
            }
            ++*count;
            *longest = t - begin > *longest ? t - begin : *longest;
            begin = t;
        }
    }
}

void rp_attn_documents_measure(const int32_t *seg_host, int64_t nseq, int64_t seqlen,
                               rp_attn_documents *d)
{
    walk(seg_host, nseq, seqlen, 0, NULL, NULL, &d->count, &d->longest);
    d->slots = power_of_two_at_least(d->count);
    int64_t span = power_of_two_at_least(d->longest > RP_ATTN_DOCUMENTS_MIN_SPAN
                                             ? d->longest
                                             : RP_ATTN_DOCUMENTS_MIN_SPAN);
    d->span = span < seqlen ? span : seqlen;
}

void rp_attn_documents_table(const int32_t *seg_host, int64_t nseq, int64_t seqlen,
                             const rp_attn_documents *d, int32_t *first, int32_t *length)
{
    int64_t count, longest;
    walk(seg_host, nseq, seqlen, d->slots, first, length, &count, &longest);
    for (int64_t b = count < d->slots ? count : d->slots; b < d->slots; b++) {
        first[b] = (int32_t)(nseq * seqlen);
        length[b] = 0;
    }
    first[d->slots] = (int32_t)(nseq * seqlen);
}

const char *rp_attn_documents_refusal(const rp_attn_documents *d, const rp_attn_shape *s,
                                      size_t device_total)
{
    if (d->count < 1)
        return "no documents";
    const int64_t heads = s->nheads > s->nkv ? s->nheads : s->nkv;
    if (s->nseq * s->seqlen > INT32_MAX / (heads * s->head_dim))
        return "more elements than cuDNN's 32-bit ragged offsets address";
    if (d->slots * d->span > RP_ATTN_DOCUMENTS_MAX_PADDING * s->nseq * s->seqlen)
        return "documents too many for cuDNN's padded statistics (an entry per document over "
               "the longest one's length: more rows than the run reserves for)";
    rp_attn_shape dense = *s, padded = *s;
    dense.seg_start = dense.seg_host = padded.seg_start = padded.seg_host = NULL;
    padded.nseq = d->slots;
    padded.seqlen = d->span;
    if (rp_attention_cudnn_workspace_want(&padded) >
        rp_attention_cudnn_documents_budget(&dense, device_total))
        return "documents too many or too uneven for cuDNN's padded layout (an entry per "
               "document over the longest one's length: more workspace than the run reserves)";
    return NULL;
}
