/* A Hugging Face model directory: config.json and the weights as
 * model.safetensors or shards with model.safetensors.index.json. The
 * caller names the tensors and gives fp32 memory for each, so this reads
 * and writes any list of named tensors (the model's weights, a
 * checkpoint's optimizer state) without knowing the model. */
#ifndef RP_IO_MODEL_DIR_H
#define RP_IO_MODEL_DIR_H

#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "io/companions.h"
#include "io/config.h"
#include "io/file_set.h"
#include "io/safetensors_writer.h"

/* A tensor that is written but never held whole (gpt-oss's fused experts,
 * io/gpt_oss_experts.h): fill puts its elements [first, first + count),
 * fp32 in row-major order, into dst, as the file is written. */
typedef struct rp_tensor_source {
    rp_safetensors_fill fill;
    const void *ctx;
} rp_tensor_source;

/* A named tensor in memory, fp32, row-major; or, to be written, made by
 * its source (data NULL). */
typedef struct rp_tensor_ref {
    const char *name;
    int ndim;         /* 1 or 2 (3: gpt-oss's fused experts, io/gpt_oss_experts.h) */
    int64_t shape[3]; /* shape[1] = 1 when ndim == 1 */
    float *data;
    const rp_tensor_source *source; /* when data is NULL */
} rp_tensor_ref;

/* Read each of the n tensors from dir's safetensors files into its data,
 * converted to fp32. Missing tensors, shape mismatches and unsupported
 * dtypes name the file and the tensor; so does a NaN or infinity (it would
 * only surface later as a diverged step, without a name). *file_dtype
 * (may be NULL) receives the dtype the first tensor is stored in (F32 when
 * none could be told). Tensors in the files but not in the list are
 * ignored. */
rp_status rp_model_dir_load(const char *dir, const rp_tensor_ref *tensors, int n,
                            rp_dtype *file_dtype, rp_error *err);

/* Read each of the n tensors from the one safetensors file at path
 * (converted to fp32; missing tensors and shape mismatches name the file
 * and the tensor, as does a value that is not finite). */
rp_status rp_model_dir_load_file(const char *path, const rp_tensor_ref *tensors, int n,
                                 rp_error *err);

/* Write dir/model.safetensors (the n tensors, stored as dtype) and
 * dir/config.json (cfg; with a template, the text of the config.json the
 * model came from, the fields roundpipe does not model are kept), creating dir, as
 * one set: all files or none (io/file_set.h); the shards and index of an
 * older sharded save in dir go with it. The tokenizer and generation
 * files of the model the weights came from (companions, read when the run
 * started; NULL: none) go into the same set. progress (NULL: none) is
 * told after each tensor of model.safetensors. */
rp_status rp_model_dir_save(const char *dir, const rp_tensor_ref *tensors, int n, rp_dtype dtype,
                            const rp_model_config *cfg, const char *template_config,
                            const rp_companions *companions, const rp_progress_hook *progress,
                            rp_error *err);

/* The members of a save, for a caller with a file set of its own (a
 * checkpoint): config.json as rp_model_dir_save writes it, and a
 * safetensors file of any list of tensors written in stages: begin adds
 * the member `name` and writes its header (every tensor's place fixed);
 * put writes tensors [first, first + count) of the list, in any order,
 * when their data is ready (the data is read then); end checks that every
 * tensor was written and frees the handle (the set commits the file).
 * After a failure the set must be aborted. */
rp_status rp_model_dir_add_config(rp_file_set *fs, const rp_model_config *cfg, rp_dtype dtype,
                                  const char *template_config, rp_error *err);
typedef struct rp_tensor_file rp_tensor_file;
rp_status rp_tensor_file_begin(rp_file_set *fs, const char *name, const rp_tensor_ref *tensors,
                               int n, rp_dtype dtype, rp_tensor_file **out, rp_error *err);
rp_status rp_tensor_file_put(rp_tensor_file *f, int first, int count, rp_error *err);
rp_status rp_tensor_file_end(rp_tensor_file **f, rp_error *err);
void rp_tensor_file_destroy(rp_tensor_file **f); /* no-op on NULL */

#endif
