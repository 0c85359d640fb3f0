/* gpt-oss's MXFP4 experts as the Hub ships them (issue 35; OCP Microscaling
 * FP4): for a projection of E experts from `in` to `out` features,
 *   <experts>.<proj>_blocks  U8 [E, out, in/32, 16]  two E2M1 values a byte
 *   <experts>.<proj>_scales  U8 [E, out, in/32]      one E8M0 scale per 32 values
 * where <proj> is gate_up_proj (out = 2I, in = hidden) or down_proj (out =
 * hidden, in = I). Value k of row (e, o) is element k % 32 of group k / 32:
 * element 2j is the low nibble of the group's byte j, element 2j+1 its
 * high nibble; a nibble's bit 3 is the sign and its bits 0-2 index
 * {0, 0.5, 1, 1.5, 2, 3, 4, 6}; the value is that times 2^(scale - 127).
 * Every such value is exact in fp32 and bf16 (6 x 2^127 overflows to
 * infinity, as in transformers); scale 255 is E8M0's NaN and refused.
 *
 * Decoding is what transformers' convert_moe_packed_tensors does, into
 * either layout below; the checkpoint stays quantised on disk and nothing
 * is ever re-quantised. */
#ifndef RP_IO_MXFP4_H
#define RP_IO_MXFP4_H

#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_set.h"

#define RP_MXFP4_GROUP 32 /* values per scale */

typedef enum rp_mxfp4_layout {
    /* [E, in, out]: transformers' fused parameter (gate_up_proj [E, H, 2I],
     * applied as x @ W; down_proj [E, I, H]) */
    RP_MXFP4_FUSED = 0,
    /* [E, out, in]: each expert's Linear weight [out, in], as the blocks
     * lay the rows out (what a grouped GEMM reads as W[e]) */
    RP_MXFP4_LINEAR = 1
} rp_mxfp4_layout;

/* That blocks and scales are U8 of the shapes above for (experts, out,
 * in), in a multiple of 32. Errors name the file, the tensor, and the
 * expected and found dtype or shape (RP_ERR_MISMATCH; RP_ERR_INVALID_ARG
 * for sizes that are not positive or an `in` not a multiple of 32). */
rp_status rp_mxfp4_check(const rp_safetensors_tensor *blocks, const rp_safetensors_tensor *scales,
                         const char *file, int64_t experts, int64_t out, int64_t in,
                         rp_error *err);

/* Decode into dst, experts * out * in values of dtype RP_F32 or RP_BF16
 * in `layout`, after rp_mxfp4_check. A scale of 255 is RP_ERR_FORMAT
 * naming the file, the tensor and the position, and dst is then not
 * written at all. */
rp_status rp_mxfp4_decode(const rp_safetensors_tensor *blocks,
                          const rp_safetensors_tensor *scales, const char *file, int64_t experts,
                          int64_t out, int64_t in, rp_mxfp4_layout layout, void *dst,
                          rp_dtype dtype, rp_error *err);

/* How `<experts>.<proj>` ships in set (experts e.g.
 * "model.layers.3.mlp.experts", proj "gate_up_proj"): *quantised 1 when as
 * <proj>_blocks and <proj>_scales, 0 when as the plain tensor <proj>.
 * Both forms, one of blocks and scales without the other, or neither are
 * errors naming the file(s) and the tensors. */
rp_status rp_mxfp4_find(const rp_safetensors_set *set, const char *experts, const char *proj,
                        int *quantised, rp_error *err);

#endif
