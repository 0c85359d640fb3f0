/* Reading safetensors files (https://github.com/huggingface/safetensors):
 * an 8-byte little-endian header length N, N bytes of JSON describing each
 * tensor (dtype, shape, byte range), then the raw little-endian data.
 *
 * The file is mapped read-only; tensor data pointers point into the mapping
 * and stay valid until rp_safetensors_close(). They are not necessarily
 * aligned to the element size (files from other writers may have any header
 * length), so read through memcpy or rp_safetensors_read_f32().
 *
 * Validation happens at open: the header is bounded (100 MiB), must be a JSON
 * object, every tensor needs a known dtype, a shape and data_offsets whose
 * span equals the shape's byte size and lies inside the file, tensors may not
 * overlap and names may not repeat; "__metadata__" must map strings to
 * strings. Dtypes that safetensors defines but roundpipe does not compute
 * with (I64, F64, U8, ...) are accepted at open, since a checkpoint may carry
 * such tensors alongside the weights; asking to read one as fp32 is an
 * RP_ERR_UNSUPPORTED error naming the file, tensor and dtype. */
#ifndef RP_IO_SAFETENSORS_H
#define RP_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

#define RP_SAFETENSORS_MAX_DIMS 8

typedef struct rp_safetensors rp_safetensors;

typedef struct rp_safetensors_tensor {
    const char *name;
    const char *dtype_name; /* safetensors spelling: "F32", "BF16", "I64", ... */
    int dtype_supported;    /* 1 when dtype below is meaningful (F32/BF16/F16) */
    rp_dtype dtype;
    int ndim;
    int64_t shape[RP_SAFETENSORS_MAX_DIMS];
    int64_t numel;
    const void *data; /* into the mapping; may be unaligned */
    size_t nbytes;
} rp_safetensors_tensor;

rp_status rp_safetensors_open(const char *path, rp_safetensors **out, rp_error *err);

/* Parse a safetensors image already in memory (not copied: buf must outlive
 * the handle). name is used in messages. */
rp_status rp_safetensors_open_memory(const void *buf, size_t len, const char *name,
                                     rp_safetensors **out, rp_error *err);

void rp_safetensors_close(rp_safetensors **st);

const char *rp_safetensors_path(const rp_safetensors *st);

/* Tensor names in ascending strcmp order, i in [0, count). */
size_t rp_safetensors_count(const rp_safetensors *st);
const char *rp_safetensors_name(const rp_safetensors *st, size_t i);

int rp_safetensors_has(const rp_safetensors *st, const char *name);

/* Describe tensor name; RP_ERR_MISMATCH naming the file if absent. */
rp_status rp_safetensors_find(const rp_safetensors *st, const char *name,
                              rp_safetensors_tensor *out, rp_error *err);

/* Value of a "__metadata__" key, or NULL. */
const char *rp_safetensors_metadata(const rp_safetensors *st, const char *key);

/* Convert tensor name to fp32 into dst, after checking that its shape is
 * exactly (ndim, shape). Mismatches are RP_ERR_MISMATCH with the file,
 * tensor, and expected vs found shape in the message. */
rp_status rp_safetensors_read_f32(const rp_safetensors *st, const char *name, int ndim,
                                  const int64_t *shape, float *dst, rp_error *err);

/* The same for a tensor already looked up (file names it in messages). */
rp_status rp_safetensors_tensor_to_f32(const rp_safetensors_tensor *t, const char *file, int ndim,
                                       const int64_t *shape, float *dst, rp_error *err);

/* Format a shape as "[2, 3]" into buf (for messages). */
const char *rp_safetensors_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);

#endif
