/* The two layouts of a Qwen3-MoE block's experts in safetensors files.
 * Checkpoints ship one tensor per expert and projection,
 *   <block>.mlp.experts.<e>.{gate_proj,up_proj,down_proj}.weight
 * ([I, H], [I, H], [H, I]); newer transformers fuse them,
 *   <block>.mlp.experts.gate_up_proj  [E, 2I, H]  (expert e's gate rows first, then up)
 *   <block>.mlp.experts.down_proj     [E, H, I].
 * roundpipe names per-expert tensors (model/layout.h); a set of files in
 * the fused layout answers those names with slices of the fused tensors
 * (io/safetensors_set.h), which are contiguous, so nothing is copied. */
#ifndef RP_IO_EXPERT_LAYOUT_H
#define RP_IO_EXPERT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

/* Whether `name` is a per-expert tensor's: then *fused names the fused
 * tensor holding it (written into fused[size]), *expert its expert and
 * *part 0, 1 or 2 for gate_proj, up_proj, down_proj. */
int rp_expert_fused_name(const char *name, char *fused, size_t size, int64_t *expert, int *part);

/* Whether `name` is a fused experts tensor; *per_expert then names expert
 * 0's gate_proj (or down_proj) tensor of the same block. */
int rp_expert_is_fused(const char *name, char *per_expert, size_t size);

/* The per-expert view (expert, part) of fused tensor t found in `file`:
 * a 2-D tensor over the same bytes. A fused tensor that is not 3-D, has
 * fewer experts, or (gate_up_proj) an odd row count is RP_ERR_MISMATCH
 * naming the file and the tensor. */
rp_status rp_expert_slice(const rp_safetensors_tensor *t, const char *file, int64_t expert,
                          int part, rp_safetensors_tensor *out, rp_error *err);

#endif
