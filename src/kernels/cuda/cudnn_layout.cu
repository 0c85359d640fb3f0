/* The statistics' transposes between cuDNN's [nseq, nheads, seqlen] and the
 * attention contract's lse [nseq*seqlen, nheads] (cudnn_attention.h), and
 * between the documents' padded [slots, nheads, span] and lse. One thread
 * per value; a plain copy, so the bits are unchanged. */
#include "kernels/attn_documents.h"
#include "kernels/cuda/cudnn_attention.h"

__global__ static void stats_from_lse(const float *lse, float *stats, int64_t nseq,
                                      int64_t seqlen, int64_t nheads)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* index into stats */
    int64_t n = nseq * nheads * seqlen;
    if (i >= n)
        return;
    int64_t t = i % seqlen, h = i / seqlen % nheads, b = i / (seqlen * nheads);
    stats[i] = lse[(b * seqlen + t) * nheads + h];
}

__global__ static void lse_from_stats(const float *stats, float *lse, int64_t nseq,
                                      int64_t seqlen, int64_t nheads)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* index into lse */
    int64_t n = nseq * nheads * seqlen;
    if (i >= n)
        return;
    int64_t h = i % nheads, row = i / nheads, t = row % seqlen, b = row / seqlen;
    lse[i] = stats[(b * nheads + h) * seqlen + t];
}

/* either way between lse and the documents' padded statistics
 * (padding rows of stats get 0) */
__global__ static void documents_transpose(float *stats, float *lse, const int32_t *first,
                                           const int32_t *length, int64_t n, int64_t nheads,
                                           int64_t span, int to_lse)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, h;
    if (i >= n)
        return;
    int64_t t = rp_attn_documents_token(i, first, length, nheads, span, &h);
    if (to_lse && t >= 0) /* every token is one document's row: lse is written whole */
        lse[t * nheads + h] = stats[i];
    else if (!to_lse)
        stats[i] = t >= 0 ? lse[t * nheads + h] : 0.0f; /* padding: a finite value, never read */
}

static unsigned blocks_for(int64_t n) { return (unsigned)((n + 255) / 256); }

extern "C" int rp_cuda_stats_from_lse(const float *lse, float *stats, int64_t nseq,
                                      int64_t seqlen, int64_t nheads, cudaStream_t stream)
{
    int64_t n = nseq * nheads * seqlen;
    if (n > 0)
        stats_from_lse<<<blocks_for(n), 256, 0, stream>>>(lse, stats, nseq, seqlen, nheads);
    return (int)cudaGetLastError();
}

extern "C" int rp_cuda_lse_from_stats(const float *stats, float *lse, int64_t nseq,
                                      int64_t seqlen, int64_t nheads, cudaStream_t stream)
{
    int64_t n = nseq * nheads * seqlen;
    if (n > 0)
        lse_from_stats<<<blocks_for(n), 256, 0, stream>>>(stats, lse, nseq, seqlen, nheads);
    return (int)cudaGetLastError();
}

static int documents(float *stats, float *lse, const int32_t *first, const int32_t *length,
                     int64_t slots, int64_t span, int64_t nheads, int to_lse, cudaStream_t stream)
{
    int64_t n = slots * nheads * span;
    if (n > 0)
        documents_transpose<<<blocks_for(n), 256, 0, stream>>>(stats, lse, first, length, n,
                                                               nheads, span, to_lse);
    return (int)cudaGetLastError();
}

extern "C" int rp_cuda_documents_stats_from_lse(const float *lse, float *stats,
                                                const int32_t *first, const int32_t *length,
                                                int64_t slots, int64_t span, int64_t nheads,
                                                cudaStream_t stream)
{
    return documents(stats, (float *)lse, first, length, slots, span, nheads, 0, stream);
}

extern "C" int rp_cuda_documents_lse_from_stats(const float *stats, float *lse,
                                                const int32_t *first, const int32_t *length,
                                                int64_t slots, int64_t span, int64_t nheads,
                                                cudaStream_t stream)
{
    return documents((float *)stats, lse, first, length, slots, span, nheads, 1, stream);
}
