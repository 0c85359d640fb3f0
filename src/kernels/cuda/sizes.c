#include "kernels/cuda/sizes.h"

#include "kernels/cuda/reduce.h"

size_t rp_cuda_attention_backward_scratch_floats(const rp_attn_shape *s)
{
    return (size_t)(s->nseq * s->seqlen * s->nheads); /* delta = rowsum(dout * o) */
}

size_t rp_cuda_colsum_partial_floats(int64_t cols)
{
    return (size_t)RP_CUDA_COLSUM_SLICES * (size_t)(cols > 0 ? cols : 0);
}

size_t rp_cuda_column_sum_scratch_floats(int64_t cols)
{
    return rp_cuda_colsum_partial_floats(cols);
}

size_t rp_cuda_rope_table_floats(int64_t seqlen, int64_t half)
{
    (void)seqlen, (void)half;
    return 0; /* the state keeps the table */
}

int64_t rp_cuda_logits_rows(int64_t vocab, int64_t memory_bytes)
{
    const int64_t v = vocab > 0 ? vocab : 1;
    int64_t rows = RP_CUDA_HEAD_LOGITS / v;
    /* fp32 logits and their bf16 gradient: 6 bytes a logit */
    const int64_t by_memory = memory_bytes > 0 ? memory_bytes / RP_CUDA_HEAD_MEMORY_SHARE / (6 * v)
                                               : 0;
    if (by_memory > rows)
        rows = by_memory;
    if (rows > 64)
        rows = rows / 64 * 64; /* GEMMs want rows */
    return rows < 1 ? 1 : rows;
}

const rp_kernel_ops rp_kernel_ops_cuda_sizes = {RP_CUDA_SIZING_MEMBERS};
