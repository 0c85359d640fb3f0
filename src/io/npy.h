/* NumPy .npy files holding token ids or loss masks: one-dimensional,
 * C order, little-endian integers (format versions 1.0, 2.0 and 3.0).
 *
 * Accepted dtypes: '|u1', '<u2', '<i4', '<u4', '<i8' for tokens and '|u1',
 * '|b1' for masks. Anything else (big-endian, floats, 2-D, fortran_order True,
 * extra header keys, data shorter or longer than the shape says) is refused
 * with a message naming the file and the offending header field. The data
 * is mapped read-only; elements are read through memcpy (no alignment
 * assumption). */
#ifndef RP_IO_NPY_H
#define RP_IO_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum rp_npy_dtype {
    RP_NPY_U8 = 0, /* '|u1' */
    RP_NPY_BOOL,   /* '|b1' */
    RP_NPY_U16,    /* '<u2' */
    RP_NPY_I32,    /* '<i4' */
    RP_NPY_U32,    /* '<u4' */
    RP_NPY_I64     /* '<i8' */
} rp_npy_dtype;

typedef struct rp_npy rp_npy;

rp_status rp_npy_open(const char *path, rp_npy **out, rp_error *err);

/* Parse an image in memory (not copied: buf must outlive the handle). */
rp_status rp_npy_open_memory(const void *buf, size_t len, const char *name, rp_npy **out,
                             rp_error *err);

void rp_npy_close(rp_npy **np);

const char *rp_npy_path(const rp_npy *np);
int64_t rp_npy_length(const rp_npy *np);
rp_npy_dtype rp_npy_get_dtype(const rp_npy *np);
const char *rp_npy_dtype_descr(rp_npy_dtype t); /* "<i4", "|b1", ... */
size_t rp_npy_dtype_size(rp_npy_dtype t);

/* Element i (0 <= i < length; the caller checks), widened to int64. Values
 * of '<u8' do not exist here, so every element fits. */
int64_t rp_npy_get(const rp_npy *np, int64_t i);

/* Copy elements [first, first + count) into dst. RP_ERR_RANGE if the range
 * leaves the array, or (for _i32) a value does not fit in int32 (message
 * names the index and value). */
rp_status rp_npy_read_i64(const rp_npy *np, int64_t first, int64_t count, int64_t *dst,
                          rp_error *err);
rp_status rp_npy_read_i32(const rp_npy *np, int64_t first, int64_t count, int32_t *dst,
                          rp_error *err);

/* Token ids: integer dtype and every value in [0, vocab_size); otherwise
 * RP_ERR_RANGE naming the file, the first bad index and its value. */
rp_status rp_npy_check_tokens(const rp_npy *np, int64_t vocab_size, rp_error *err);

/* Loss mask for tokens: dtype '|u1' or '|b1', values 0/1, same length as
 * tokens (messages name both files and both lengths). */
rp_status rp_npy_check_mask(const rp_npy *mask, const rp_npy *tokens, rp_error *err);

/* Open mask_path and rp_npy_check_mask() it against tokens. */
rp_status rp_npy_open_mask(const char *mask_path, const rp_npy *tokens, rp_npy **out,
                           rp_error *err);

/* Write a 1-D array as a version 1.0 .npy (temporary file + rename). */
rp_status rp_npy_write(const char *path, rp_npy_dtype dtype, const void *data, int64_t n,
                       rp_error *err);
rp_status rp_npy_write_i32(const char *path, const int32_t *data, int64_t n, rp_error *err);
rp_status rp_npy_write_u16(const char *path, const uint16_t *data, int64_t n, rp_error *err);
rp_status rp_npy_write_u8(const char *path, const uint8_t *data, int64_t n, rp_error *err);

#endif
