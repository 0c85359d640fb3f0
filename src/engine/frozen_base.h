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
 * rp_frozen_base_attach. A base taken as FP8 (rp_frozen_base_takes_fp8)
 * is mapped whatever its unquantised tensors are: those not in the base's
 * dtype (or unaligned) alone are converted into the store, in that dtype
 * (the compute dtype where they are not all in one dtype, so that none is
 * rounded that it holds exactly), and need rp_frozen_base_attach too. */
rp_status rp_frozen_base_open(const rp_model_config *cfg, const char *model_dir, rp_dtype dtype,
                              unsigned reads, rp_frozen_base **out, rp_error *err);
/* A bit of `reads`: the executors dequantise an FP8 base per layer
 * (rp_frozen_base_per_use), so its FP8 tensors are mapped too, as
 * F8_E4M3 with their scales (issue 36); without it they are dequantised
 * into the store. */
#define RP_FROZEN_BASE_READS_FP8 (1u << 31)

/* Whether executors reading `reads` (rp_frozen_base_reads) take cfg's LoRA
 * base as FP8: mapped with its e4m3 tensors and scales, each block
 * dequantised per use (rp_frozen_base_per_use). From the config alone (its
 * quantization_config quantises some projection), so that the planner
 * (engine/memory_model.c, `roundpipe plan`) and the executors
 * (rp_frozen_base_open, with the model's files, which must ship what the
 * config says: io/fp8.h's rp_fp8_expect) decide it alike, whatever dtype
 * the files hold the other tensors in (rp_frozen_base_open converts odd
 * ones into the store). The one rule: train without model files
 * (--init-config: a random base in the store, nothing FP8) clears
 * cfg->fp8.any before anything is planned. */
static inline int rp_frozen_base_takes_fp8(const rp_model_config *cfg, unsigned reads)
{
    return cfg->lora.rank > 0 && cfg->fp8.any && (reads & RP_FROZEN_BASE_READS_FP8) != 0;
}

/* The base's layout: the full model's (rp_model_base_layout), untied (the
 * caller frees *layers). Opened bases have it (rp_frozen_base_layer); the
 * planner sizes stages with it before any base exists. */
rp_status rp_frozen_base_layout(const rp_model_config *cfg, rp_layer_desc **layers, int *n,
                                rp_error *err);

/* Whether executors driving a table of `ops` read the base where it lies
 * (their memory is the host's: CPU) rather than uploading it with their
 * stages. The one rule the engine and the planner both use; the test mode
 * RP_TEST_UPLOAD_BASE=1 makes CPU executors upload it as GPU ones do, so
 * that path runs without a GPU (and `plan` counts it so). */
int rp_frozen_base_in_place(const rp_kernel_ops *ops);

/* Whether executors dequantise block l's base (of a model of n layers)
 * each time they compute it, into one scratch of theirs that holds one
 * layer's base in the compute dtype (issue 36): with `fp8`, a base they
 * take as FP8 (rp_frozen_base_takes_fp8). Its stage buffer keeps the
 * block as FP8 and scales (uploaded: rp_frozen_base_staged_bytes) or
 * nothing (in place: dequantised from where it lies). */
static inline int rp_frozen_base_per_use(int fp8, int l, int n)
{
    return fp8 && l > 0 && l < n - 1;
}

/* Whether executors take layer l's base into their stage buffers, in the
 * compute dtype: when they do not read it in place (`in_place`:
 * rp_frozen_base_in_place; uploaded with the stage), but for a block
 * dequantised per use. From the configuration alone, so the planner sizes
 * stage buffers as the executors fill them. */
static inline int rp_frozen_base_copied(int in_place, int fp8, int l, int n)
{
    return !in_place && !rp_frozen_base_per_use(fp8, l, n);
}

/* The `reads` of rp_frozen_base_open for executors of `ops`: the dtypes
 * their GEMMs read, and RP_FROZEN_BASE_READS_FP8 where they take an FP8
 * base as it lies: CPU executors (dequantised per use in place), and GPU
 * executors (uploaded as FP8 and dequantised on the device, where the
 * fp8-upload path of core/unproven.h is on; with it off the base is
 * dequantised into the store and uploaded in the compute dtype). */
unsigned rp_frozen_base_reads(const rp_kernel_ops *ops);

/* Host store bytes the base needs (0 when mapped, but for an FP8 base's
 * odd tensors). */
size_t rp_frozen_base_store_bytes(const rp_frozen_base *base);

/* A base that is not mapped: its tensors live in `store`, and this
 * process fills those of part `part` of `parts` of the layers
 * (rp_layer_part; parts 0: none), converted from the model directory, or
 * initialised randomly with seed (rp_layer_init) without one: the ranks
 * of a node sharing the store each fill their part, in any order. A
 * mapped FP8 base's odd tensors alone live there (the others where they
 * lie). */
rp_status rp_frozen_base_attach(rp_frozen_base *base, void *store, int part, int parts,
                                uint64_t seed, rp_error *err);
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
/* Bytes of the base's tensors (a tied matrix once): those mapped (a mapped
 * FP8 base's odd tensors are rp_frozen_base_store_bytes), or all stored. */
size_t rp_frozen_base_bytes(const rp_frozen_base *base);
/* Host bytes of tensor `name` of layer l (NULL when absent); an FP8
 * tensor's are its e4m3 bytes (rp_frozen_base_tensor_f32 reads it). */
const void *rp_frozen_base_tensor(const rp_frozen_base *base, int l, const char *name);
/* The base's tensors in bf16 (a tied matrix once): what an FP8 base's
 * bytes compare with. */
size_t rp_frozen_base_bf16_bytes(const rp_frozen_base *base);
/* *fp8: the bytes an FP8 checkpoint of cfg maps (no files at hand: the
 * planner's figure): the block projections its config quantises
 * (io/fp8.h rp_fp8_tensor_converted: modules_to_not_convert) in e4m3 with
 * F32 scales in cfg's blocks (BF16 ones take less), every other tensor in
 * bf16; *bf16: the same tensors all in bf16. */
rp_status rp_frozen_base_fp8_checkpoint_bytes(const rp_model_config *cfg, size_t *fp8,
                                              size_t *bf16, rp_error *err);
/* Whether the base is taken as FP8 (rp_frozen_base_takes_fp8 with the
 * model's files; then mapped, with FP8 tensors among its pieces). */
int rp_frozen_base_fp8(const rp_frozen_base *base);
/* Tensor `name` of layer l as fp32 into dst: an FP8 one dequantised
 * (core/fp8.h), a bf16 one widened. */
rp_status rp_frozen_base_tensor_f32(const rp_frozen_base *base, int l, const char *name,
                                    float *dst, rp_error *err);
/* The same a piece at a time, for a reader that never holds a tensor
 * whole (--save-merged, engine/lora_merged.c): rp_frozen_base_piece_of,
 * the index among layer l's pieces of tensor `name` (-1: none); then
 * rp_frozen_base_piece_f32 puts elements [first, first + count) of that
 * piece, row-major, into dst as fp32, each with the bits
 * rp_frozen_base_tensor_f32 gives it (an FP8 one dequantised by the
 * product rp_fp8_dequantise_rows takes). */
int rp_frozen_base_piece_of(const rp_frozen_base *base, int l, const char *name);
void rp_frozen_base_piece_f32(const rp_frozen_base *base, int l, int piece, int64_t first,
                              size_t count, float *dst);
/* FP8 bases on executors that upload them (issue 36): a block's base
 * (rp_frozen_base_per_use) travels piece by piece into a staging area of
 * the stage buffer, where it stays as it lies: an FP8 piece as its e4m3
 * bytes then its scales, another in the base's dtype (the compute dtype),
 * each padded to 16 bytes, in the layer's order. Before each use the
 * executor dequantises the area into its scratch, laid out as the block
 * (rp_frozen_base_dequantise_staged: the bits of rp_frozen_base_materialise).
 * rp_frozen_base_staged_bytes: the area's bytes for block l (0 for a
 * layer that is not dequantised per use). rp_frozen_base_piece_staged:
 * piece i's byte offset in it (*at; an FP8 piece's scales at *scale_at),
 * and its FP8 matrix (NULL when it travels as it lies). */
size_t rp_frozen_base_staged_bytes(const rp_frozen_base *base, int l);
const rp_fp8_matrix *rp_frozen_base_piece_staged(const rp_frozen_base *base, int l, int i,
                                                 size_t *at, size_t *scale_at);
rp_status rp_frozen_base_dequantise_staged(const rp_frozen_base *base, int l,
                                           const rp_kernels *k, const void *staging, void *dst,
                                           rp_dtype dtype, rp_error *err);
/* The staging bytes of block `layer` of an FP8 checkpoint of cfg by the
 * rule of rp_frozen_base_fp8_checkpoint_bytes (the projections its config
 * quantises in e4m3 with F32 scales in cfg's blocks, the other tensors in
 * `dtype`), laid out as above: what the planner sizes a stage buffer by,
 * and what the executors reserve (their files' own area is never larger:
 * the files ship what the config says, rp_frozen_base_open checks it, and
 * their scales and other tensors are no wider than F32 and `dtype`). */
size_t rp_frozen_base_staged_bound(const rp_model_config *cfg, const rp_layer_desc *layer,
                                   rp_dtype dtype);

/* Layer l's base laid out as its block (rp_weight_piece.at) at dst, in
 * dtype (the run's compute dtype: its stage buffers', which a CPU table
 * may hold in bf16 while computing in fp32), with k's ops on host memory
 * the table reads: FP8 tensors dequantised (fp8_dequantise), the others
 * converted. */
rp_status rp_frozen_base_materialise(const rp_frozen_base *base, int l, const rp_kernels *k,
                                     void *dst, rp_dtype dtype, rp_error *err);

#endif
