/* What the CUDA back end allocates, without CUDA: the sizing members of its
 * kernel ops table, plain C and built in every configuration, so that
 * `roundpipe plan --device cuda` on a machine without the CUDA Toolkit sizes
 * an executor as the CUDA back end will (DESIGN 8: a plan that fits in the
 * planner fits on the device). kernels/cuda/ops.c's table takes its sizing
 * members from here; rp_kernel_ops_cuda_sizes has them alone (its compute
 * members are NULL) and stands for the CUDA back end in builds without it. */
#ifndef RP_KERNELS_CUDA_SIZES_H
#define RP_KERNELS_CUDA_SIZES_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"

/* fp32 logits per chunk of the head at least (512 MiB) */
#define RP_CUDA_HEAD_LOGITS ((int64_t)1 << 27)
/* Given a device memory figure, the head's chunk may hold its fp32 logits
 * and their bf16 gradient in up to this fraction of it (1/16: 5 GiB of an
 * 80 GiB GPU, 4096-token microbatches of a 151936 vocabulary in one chunk),
 * so that the fp32 gradient of the LM head, read and written once per
 * chunk, is read and written fewer times per microbatch. */
#define RP_CUDA_HEAD_MEMORY_SHARE 16

size_t rp_cuda_attention_backward_scratch_floats(const rp_attn_shape *s);
size_t rp_cuda_column_sum_scratch_floats(int64_t cols);
size_t rp_cuda_rope_table_floats(int64_t seqlen, int64_t half);
int64_t rp_cuda_logits_rows(int64_t vocab, int64_t memory_bytes);

/* The members of a table that say what the CUDA back end computes in and
 * how much it allocates: one list for both tables. */
#define RP_CUDA_SIZING_MEMBERS                                                  \
    .name = "cuda", .compute_dtype = RP_BF16, .host_addressable = 0,            \
    .head_dim_step = 8, .head_dim_max = 128, /* kernels/cuda/attention.h */     \
    .weight_dtypes = 1u << RP_BF16,                                             \
    .attention_backward_scratch_floats = rp_cuda_attention_backward_scratch_floats, \
    .column_sum_scratch_floats = rp_cuda_column_sum_scratch_floats,             \
    .rope_table_floats = rp_cuda_rope_table_floats, .logits_rows = rp_cuda_logits_rows

extern const rp_kernel_ops rp_kernel_ops_cuda_sizes;

#endif
