/* The statistics' transposes between cuDNN's [nseq, nheads, seqlen] and the
 * attention contract's lse [nseq*seqlen, nheads] (cudnn_attention.h). One
 * thread per value; a plain copy, so the bits are unchanged. */
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
