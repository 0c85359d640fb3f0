/* gpt-oss's experts in a model directory and in roundpipe (issue 35).
 * transformers holds each block's experts as four fused tensors,
 *   <block>.mlp.experts.gate_up_proj       [E, H, 2I]  applied as x @ W; column
 *                                           2j is gate j, 2j+1 is up j
 *   <block>.mlp.experts.gate_up_proj_bias  [E, 2I]     interleaved likewise
 *   <block>.mlp.experts.down_proj          [E, I, H]   applied as x @ W
 *   <block>.mlp.experts.down_proj_bias     [E, H]
 * (the Hub ships gate_up_proj and down_proj MXFP4-quantised instead, as
 * <proj>_blocks and <proj>_scales: io/mxfp4.h). roundpipe keeps each
 * expert's projections as Linear weights [out, in] with gate and up apart
 * (model/layout.h), under its own names
 *   <block>.mlp.experts.<e>.{gate,up,down}.{weight,bias}
 * which no checkpoint of transformers uses (Qwen3-MoE's per-expert names
 * end in gate_proj/up_proj/down_proj: io/expert_layout.h). A model
 * directory is read and written in transformers' fused layout; these
 * functions map the two. */
#ifndef RP_IO_GPT_OSS_EXPERTS_H
#define RP_IO_GPT_OSS_EXPERTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "io/model_dir.h"
#include "io/safetensors_set.h"

/* Whether `name` is roundpipe's name of a gpt-oss expert tensor: then
 * experts (size bytes) receives "<block>.mlp.experts", and *expert, *part
 * (0 gate, 1 up, 2 down) and *bias (0 weight, 1 bias) say which. */
int rp_gpt_oss_expert_name(const char *name, char *experts, size_t size, int64_t *expert,
                           int *part, int *bias);

/* Fill the n tensors `refs` (all of one block's experts, refs[i].name
 * answering rp_gpt_oss_expert_name with the same `experts`, fp32 in
 * roundpipe's layout) from set's fused tensors, plain or MXFP4
 * (dequantised). Every expert 0..E-1 of the fused tensors must be asked
 * for; missing tensors, both forms or neither, and shapes or dtypes that
 * do not fit name the file and the tensor, before anything is written. */
rp_status rp_gpt_oss_experts_read(const rp_safetensors_set *set, const char *experts,
                                  const struct rp_tensor_ref *refs, int n, rp_error *err);

/* The fused tensors of one block's experts made from roundpipe's (the n
 * refs as above) piece by piece as a file is written, never held whole
 * (gpt-oss-20b's are 3.2 GB a block in fp32, the whole model's experts 76
 * GB): rp_gpt_oss_fused_make gives the four fused tensors' names (kept in
 * fused->names) and shapes, each with its source (io/model_dir.h), data
 * NULL; the sources read the refs' data when the file is written, so the
 * refs' memory must outlive them, and *fused must not move. A ref may
 * itself be a source (data NULL: --save-merged's experts, each made from
 * the frozen base and its adapter as it is read): the fused tensor then
 * asks it for the strips a piece needs (a piece of gate_up_proj is a few
 * columns of every expert row), through a scratch of the block's, so the
 * four tensors of a block are filled one at a time, as a file is written. */
typedef struct rp_gpt_oss_fused_part {
    const struct rp_gpt_oss_fused *block;
    int which; /* 0 gate_up_proj, 1 gate_up_proj_bias, 2 down_proj, 3 down_proj_bias */
} rp_gpt_oss_fused_part;
typedef struct rp_gpt_oss_fused {
    int64_t experts, intermediate, hidden;
    const float **from; /* [6 E]: expert e's part p (0 gate, 1 up, 2 down), weight (bias 0)
                           or bias (1): from[(2 p + bias) E + e] */
    const struct rp_tensor_source **by; /* [6 E] the same slots' sources (data NULL), or NULL
                                           when every ref has data */
    float *scratch; /* the strips of one piece (with `by`) */
    char names[4][600];
    rp_gpt_oss_fused_part parts[4];
    rp_tensor_source sources[4];
} rp_gpt_oss_fused;
rp_status rp_gpt_oss_fused_make(const char *experts, const struct rp_tensor_ref *refs, int n,
                                rp_gpt_oss_fused *fused, struct rp_tensor_ref out[4],
                                rp_error *err);
void rp_gpt_oss_fused_free(rp_gpt_oss_fused *fused); /* its tables; no-op when empty */

#endif
