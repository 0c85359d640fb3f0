/* FP8 checkpoints' quantised projections as the files ship them (issue
 * 36; io/config.h rp_fp8_config): `<name>` F8_E4M3 [out, in] beside
 * `<name>_scale_inv` [ceil(out / BR), ceil(in / BC)] in F32, BF16 or F16
 * (for `x.weight`, `x.weight_scale_inv`), read where they lie
 * (core/fp8.h's rp_fp8_matrix). Which tensors are quantised is what the
 * config says (rp_fp8_tensor_converted), and the files must agree
 * (rp_fp8_expect): a tensor in F8_E4M3 is, any other is not. */
#ifndef RP_IO_FP8_H
#define RP_IO_FP8_H

#include <stdint.h>

#include "core/error.h"
#include "core/fp8.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/safetensors_set.h"

#define RP_FP8_SCALE_SUFFIX "_scale_inv"

/* That weight (in wfile) is F8_E4M3 of shape [rows, cols] and scale (in
 * sfile) holds finite F32, BF16 or F16 values in the grid of blocks of
 * fp8's weight_block_size; out then describes the pair. Errors name the
 * file and the tensor: RP_ERR_UNSUPPORTED for another FP8 format or a
 * scale dtype, RP_ERR_MISMATCH for a shape (the scale's with the block
 * size it was checked against), RP_ERR_FORMAT for a scale that is not
 * finite. */
rp_status rp_fp8_check(const rp_safetensors_tensor *weight, const char *wfile,
                       const rp_safetensors_tensor *scale, const char *sfile, int64_t rows,
                       int64_t cols, const rp_fp8_config *fp8, rp_fp8_matrix *out,
                       rp_error *err);

/* How tensor `name` ([rows, cols], or [rows] when cols is 0) ships in set:
 * *quantised 1 (and *out checked by rp_fp8_check) when F8_E4M3, else 0.
 * Errors name the file and the tensor: an FP8 tensor when the model's
 * config (config_file) has no FP8 quantization_config, one without its
 * `<name>_scale_inv`, a one-dimensional one, and a `<name>_scale_inv`
 * beside a tensor that is not FP8. Absent tensors are
 * rp_safetensors_set_find's error. */
rp_status rp_fp8_find(const rp_safetensors_set *set, const char *config_file,
                      const rp_fp8_config *fp8, const char *name, int64_t rows, int64_t cols,
                      int *quantised, rp_fp8_matrix *out, rp_error *err);

/* Whether tensor `name` (model.layers.N.self_attn.q_proj.weight,
 * model.layers.N.mlp.gate_proj.weight, model.layers.N.mlp.experts.E.
 * gate_proj.weight, ...) is a projection cfg's FP8 quantization_config
 * says ships FP8 (io/config.h rp_fp8_converted); 0 for any other tensor
 * (norms, routers, the embedding, lm_head) and without FP8. The one rule
 * the loader checks the files by and the planner counts by. */
int rp_fp8_tensor_converted(const rp_model_config *cfg, const char *name);

/* That tensor `name` of set, when it is a decoder block's projection,
 * ships as cfg's FP8 config says: F8_E4M3 or with a `<name>_scale_inv`
 * when quantised (rp_fp8_find then checks the pair), neither otherwise;
 * else an error (RP_ERR_MISMATCH) naming the file, the tensor and the
 * entry of config_file's modules_to_not_convert that keeps its module
 * unquantised, or that no entry matches it (or that routers never are
 * FP8). Without FP8 (cfg->fp8.on 0) rp_fp8_find refuses FP8 tensors. */
rp_status rp_fp8_expect(const rp_safetensors_set *set, const char *config_file,
                        const rp_model_config *cfg, const char *name, rp_error *err);

#endif
