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

__global__ static void documents_stats_from_lse(const float *lse, float *stats,
                                                const int32_t *first, const int32_t *length,
                                                int64_t n, int64_t nheads, int64_t span)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, h;
    if (i >= n)
        return;
    int64_t t = rp_attn_documents_token(i, first, length, nheads, span, &h);
    stats[i] = t >= 0 ? lse[t * nheads + h] : 0.0f; /* padding: a finite value, never read */
}

__global__ static void documents_lse_from_stats(const float *stats, float *lse,
                                                const int32_t *first, const int32_t *length,
                                                int64_t n, int64_t nheads, int64_t span)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, h;
    if (i >= n)
        return;
    int64_t t = rp_attn_documents_token(i, first, length, nheads, span, &h);
    if (t >= 0) /* every token is one document's row: lse is written whole */
        lse[t * nheads + h] = stats[i];
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

extern "C" int rp_cuda_documents_stats_from_lse(const float *lse, float *stats,
                                                const int32_t *first, const int32_t *length,
                                                int64_t slots, int64_t span, int64_t nheads,
                                                cudaStream_t stream)
{
    int64_t n = slots * nheads * span;
    if (n > 0)
        documents_stats_from_lse<<<blocks_for(n), 256, 0, stream>>>(lse, stats, first, length,
                                                                    n, nheads, span);
    return (int)cudaGetLastError();
}

extern "C" int rp_cuda_documents_lse_from_stats(const float *stats, float *lse,
                                                const int32_t *first, const int32_t *length,
                                                int64_t slots, int64_t span, int64_t nheads,
                                                cudaStream_t stream)
{
    int64_t n = slots * nheads * span;
    if (n > 0)
        documents_lse_from_stats<<<blocks_for(n), 256, 0, stream>>>(stats, lse, first, length,
                                                                    n, nheads, span);
    return (int)cudaGetLastError();
}
