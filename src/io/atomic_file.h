/* Write a file so that readers see either the old content or the complete
 * new content, never a prefix: write to "<path>.tmp-XXXXXX" in the same
 * directory, fsync, rename over path, fsync the directory. Any failure (or
 * an abort) unlinks the temporary file. */
#ifndef RP_IO_ATOMIC_FILE_H
#define RP_IO_ATOMIC_FILE_H

#include <stddef.h>

#include "core/error.h"

typedef struct rp_atomic_file rp_atomic_file;

rp_status rp_atomic_file_open(const char *path, rp_atomic_file **out, rp_error *err);

/* Append n bytes. On failure the temporary file is removed and *af freed. */
rp_status rp_atomic_file_write(rp_atomic_file **af, const void *buf, size_t n, rp_error *err);

/* fsync + rename into place; frees *af and sets it to NULL either way. */
rp_status rp_atomic_file_commit(rp_atomic_file **af, rp_error *err);

/* Remove the temporary file and free *af (no-op on NULL). */
void rp_atomic_file_abort(rp_atomic_file **af);

#endif
