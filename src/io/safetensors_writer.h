/* Writing safetensors files that the safetensors library and transformers
 * load: tensors laid out back to back (4-byte dtypes first so every tensor
 * stays aligned to its element size), header padded with spaces so the data
 * starts at a multiple of 8, "__metadata__" {"format": "pt"} unless the
 * caller sets its own. The file appears atomically (temporary name, fsync,
 * rename); on any failure nothing is left behind. */
#ifndef RP_IO_SAFETENSORS_WRITER_H
#define RP_IO_SAFETENSORS_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/slow_work.h"
#include "io/atomic_file.h"

typedef struct rp_safetensors_writer rp_safetensors_writer;

rp_status rp_safetensors_writer_create(rp_safetensors_writer **out, rp_error *err);
void rp_safetensors_writer_destroy(rp_safetensors_writer **w);

/* Add a tensor stored as file_dtype (F32, BF16 or F16) from data of
 * src_dtype (F32; or the file dtype; or BF16 for F32). F32 -> BF16 and
 * F32 -> F16 round to nearest even (a finite value beyond the F16 range fails
 * the write, naming the tensor); BF16 -> F32 is exact. data is borrowed until the tensor is written. Names
 * must be unique and non-empty; "__metadata__" is reserved. */
rp_status rp_safetensors_writer_add(rp_safetensors_writer *w, const char *name,
                                    rp_dtype file_dtype, rp_dtype src_dtype, int ndim,
                                    const int64_t *shape, const void *data, rp_error *err);

/* A tensor whose fp32 data is made piece by piece as it is written, in
 * row-major order (one the caller never holds whole): fill puts elements
 * [first, first + count) into dst; the writer asks for pieces of a bounded
 * size, so the file's bytes are those of the whole tensor added with
 * rp_safetensors_writer_add. */
typedef void (*rp_safetensors_fill)(const void *ctx, int64_t first, size_t count, float *dst);
rp_status rp_safetensors_writer_add_filled(rp_safetensors_writer *w, const char *name,
                                           rp_dtype file_dtype, int ndim, const int64_t *shape,
                                           rp_safetensors_fill fill, const void *ctx,
                                           rp_error *err);

/* The most elements a fill is asked for at once. */
#define RP_SAFETENSORS_FILL_CHUNK ((size_t)1 << 16)

/* Set a "__metadata__" string entry (replaces {"format": "pt"} for "format"). */
rp_status rp_safetensors_writer_set_metadata(rp_safetensors_writer *w, const char *key,
                                             const char *value, rp_error *err);

rp_status rp_safetensors_writer_write(rp_safetensors_writer *w, const char *path, rp_error *err);

/* Write the file's bytes into *af, opened by the caller (a member of a
 * file set, io/file_set.h); path names it in messages. On failure *af has
 * been aborted (NULL) unless the failure came before the first write. */
rp_status rp_safetensors_writer_write_to(rp_safetensors_writer *w, rp_atomic_file **af,
                                         const char *path, rp_error *err);

/* The same in stages, for a file whose tensors become ready one by one (a
 * checkpoint written while training goes on): the header, which fixes every
 * tensor's place (no adds after it); then each tensor, by its index in the
 * order of the adds, at its place, in any order, when its data is ready;
 * then check_complete, before the file is committed. */
rp_status rp_safetensors_writer_write_header(rp_safetensors_writer *w, rp_atomic_file **af,
                                             const char *path, rp_error *err);
rp_status rp_safetensors_writer_write_tensor(rp_safetensors_writer *w, size_t index,
                                             rp_atomic_file **af, const char *path,
                                             rp_error *err);
rp_status rp_safetensors_writer_check_complete(const rp_safetensors_writer *w, const char *path,
                                               rp_error *err);
/* Every tensor after the header, in file order (sequential writes);
 * progress (NULL: none) is told after each tensor, in bytes of tensor data. */
rp_status rp_safetensors_writer_write_all(rp_safetensors_writer *w, rp_atomic_file **af,
                                          const char *path, const rp_progress_hook *progress,
                                          rp_error *err);

#endif
