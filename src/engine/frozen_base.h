/* LoRA's frozen base (issue 13, DESIGN 5): every weight of the model but
 * the adapters, never updated. When the checkpoint's tensors are all in a
 * dtype the executors' GEMMs read (the compute dtype; on CPU executors bf16
 * under fp32 too, kernels/ops.h weight_dtypes) they are read in place from the
 * memory-mapped safetensors files (one copy per node, in the page cache;
 * nothing in the host store), in that dtype; otherwise (another dtype, or
 * random initialisation) they are converted once into the compute dtype in
 * a region of the host store that the node leader fills.
 *
 * The base is described with the layout of the full model
 * (rp_model_base_layout), untied: a tied model's head holds lm_head.weight,
 * read from the embedding's tensor, so the engine treats the head as a layer
 * of its own whose weights happen to be the embedding's bytes. Each layer
 * is a list of pieces, one per tensor: where the tensor sits in the layer's
 * block on the device (the block layout the model's calls read) and where
 * its bytes are on the host. */
#ifndef RP_ENGINE_FROZEN_BASE_H
#define RP_ENGINE_FROZEN_BASE_H

#include <stddef.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"
#include "io/config.h"
#include "model/layers.h"
#include "model/layout.h"

typedef struct rp_frozen_base rp_frozen_base;

/* Open the base of cfg (LoRA): lay it out and, with model_dir, find and
 * check every tensor there (missing ones and wrong shapes name the file and
 * the tensor). When all of them are in one dtype the executors read in
 * place (`dtype`, the compute dtype, or a narrower one of the `reads` mask,
 * bit 1u << dtype: the kernel table's weight_dtypes) and aligned, the base
 * is mapped, in that dtype, and ready; otherwise (or without model_dir: random
 * initialisation) it is converted into `dtype` and needs
 * rp_frozen_base_store_bytes of the host store, given by
 * rp_frozen_base_attach. */
rp_status rp_frozen_base_open(const rp_model_config *cfg, const char *model_dir, rp_dtype dtype,
                              unsigned reads, rp_frozen_base **out, rp_error *err);
/* A bit of `reads`: the executors dequantise an FP8 base per layer
 * (rp_frozen_base_materialise), so its FP8 tensors are mapped too, as
 * F8_E4M3 with their scales (issue 36); without it they are dequantised
 * into the store. */
#define RP_FROZEN_BASE_READS_FP8 (1u << 31)

/* The base's layout: the full model's (rp_model_base_layout), untied (the
 * caller frees *layers). Opened bases have it (rp_frozen_base_layer); the
 * planner sizes stages with it before any base exists. */
rp_status rp_frozen_base_layout(const rp_model_config *cfg, rp_layer_desc **layers, int *n,
                                rp_error *err);

/* Whether executors driving a table of `ops` read the base where it lies
 * (their memory is the host's: CPU) rather than uploading it with their
 * stages. The one rule the engine and the planner both use. */
static inline int rp_frozen_base_in_place(const rp_kernel_ops *ops)
{
    return ops && ops->host_addressable;
}

/* Whether executors take block l's base (of a model of n layers) into
 * their stage buffers, in the compute dtype: always when they do not read
 * it in place (`in_place`: rp_frozen_base_in_place; uploaded with the
 * stage), and in place an FP8 model's blocks (dequantised there once per
 * job, rp_frozen_base_materialise). From the configuration alone, so the
 * planner sizes stage buffers as the executors fill them. */
static inline int rp_frozen_base_copied(const rp_model_config *cfg, int in_place, int l, int n)
{
    return !in_place || (cfg->fp8.on && l > 0 && l < n - 1);
}

/* The `reads` of rp_frozen_base_open for executors of `ops`: the dtypes
 * their GEMMs read, and RP_FROZEN_BASE_READS_FP8 where they take an FP8
 * base as it lies: CPU executors (dequantised per job in place), and GPU
 * executors (uploaded as FP8 and dequantised on the device, a path not yet
 * run on a GPU: only with RP_ALLOW_UNPROVEN_CUDA=1, else the base is
 * dequantised into the store and uploaded in the compute dtype). */
unsigned rp_frozen_base_reads(const rp_kernel_ops *ops);

/* Host store bytes the base needs (0 when mapped). */
size_t rp_frozen_base_store_bytes(const rp_frozen_base *base);

/* A base that is not mapped: its tensors live in `store`; with fill (the
 * node leader) they are converted there from the model directory, or
 * initialised randomly with seed (rp_layer_init) without one. */
rp_status rp_frozen_base_attach(rp_frozen_base *base, void *store, int fill, uint64_t seed,
                                rp_error *err);
void rp_frozen_base_close(rp_frozen_base **base);

/* Layer l's block: its elements (padding included) and its pieces. */
size_t rp_frozen_base_numel(const rp_frozen_base *base, int l);
int rp_frozen_base_pieces(const rp_frozen_base *base, int l, const rp_weight_piece **pieces);
/* The base's layout (rp_model_base_layout, untied) and whether it is mapped. */
const rp_layer_desc *rp_frozen_base_layer(const rp_frozen_base *base, int l);
int rp_frozen_base_mapped(const rp_frozen_base *base);
/* The dtype of every tensor of the base (where it lies). */
rp_dtype rp_frozen_base_dtype(const rp_frozen_base *base);
/* The dtype of the model directory's tensors (the first one's; F32 for a
 * random base): what --save-merged writes by default. */
rp_dtype rp_frozen_base_file_dtype(const rp_frozen_base *base);
/* Bytes of the base's tensors (a tied matrix once), mapped or stored. */
size_t rp_frozen_base_bytes(const rp_frozen_base *base);
/* Host bytes of tensor `name` of layer l (NULL when absent); an FP8
 * tensor's are its e4m3 bytes (rp_frozen_base_tensor_f32 reads it). */
const void *rp_frozen_base_tensor(const rp_frozen_base *base, int l, const char *name);
/* The base's tensors in bf16 (a tied matrix once): what an FP8 base's
 * bytes compare with. */
size_t rp_frozen_base_bf16_bytes(const rp_frozen_base *base);
/* *fp8: the bytes an FP8 checkpoint of cfg maps (no files at hand: the
 * planner's figure): every decoder block matrix but the routers in e4m3
 * with F32 scales in cfg's blocks (BF16 ones take less), every other
 * tensor in bf16; *bf16: the same tensors all in bf16. */
rp_status rp_frozen_base_fp8_checkpoint_bytes(const rp_model_config *cfg, size_t *fp8,
                                              size_t *bf16, rp_error *err);
/* Whether the base is mapped with FP8 tensors among its pieces (issue 36). */
int rp_frozen_base_fp8(const rp_frozen_base *base);
/* Tensor `name` of layer l as fp32 into dst: an FP8 one dequantised
 * (core/fp8.h), a bf16 one widened. */
rp_status rp_frozen_base_tensor_f32(const rp_frozen_base *base, int l, const char *name,
                                    float *dst, rp_error *err);
/* FP8 bases on executors that upload them (issue 36): each FP8 piece of a
 * layer travels as its e4m3 bytes and its scales into a staging area of
 * the stage buffer, laid out piece by piece (weights, then scales, each
 * padded to 16 bytes), and is dequantised there into the layer's block
 * (rp_frozen_base_dequantise_staged); the other pieces travel as they lie.
 * rp_frozen_base_fp8_bytes: the staging bytes of layer l (0 without FP8
 * pieces). rp_frozen_base_piece_fp8: piece i's FP8 matrix (NULL when it is
 * not one), *weight_at and *scale_at its byte offsets in the staging area. */
size_t rp_frozen_base_fp8_bytes(const rp_frozen_base *base, int l);
const rp_fp8_matrix *rp_frozen_base_piece_fp8(const rp_frozen_base *base, int l, int i,
                                              size_t *weight_at, size_t *scale_at);
rp_status rp_frozen_base_dequantise_staged(const rp_frozen_base *base, int l,
                                           const rp_kernels *k, const void *staging, void *dst,
                                           rp_dtype dtype, rp_error *err);
/* The most staging bytes block `layer` of an FP8 model can need (every
 * matrix FP8, F32 scales in cfg's blocks): what the planner sizes by. */
size_t rp_frozen_base_fp8_bytes_bound(const rp_model_config *cfg, const rp_layer_desc *layer);

/* Layer l's base laid out as its block (rp_weight_piece.at) at dst, in
 * dtype (the run's compute dtype: its stage buffers', which a CPU table
 * may hold in bf16 while computing in fp32), with k's ops on host memory
 * the table reads: FP8 tensors dequantised (fp8_dequantise), the others
 * converted. */
rp_status rp_frozen_base_materialise(const rp_frozen_base *base, int l, const rp_kernels *k,
                                     void *dst, rp_dtype dtype, rp_error *err);

#endif
