/* Write a file so that readers see either the old content or the complete
 * new content, never a prefix: write to "<path>.tmp-XXXXXX" in the same
 * directory, fsync, rename over path, fsync the directory. Any failure (or
 * an abort) unlinks the temporary file. A write fails with
 * RP_ERR_INTERRUPTED once rp_interrupt() was called (SIGINT, SIGTERM), so an
 * interrupted save removes its temporary file and ends promptly. */
#ifndef RP_IO_ATOMIC_FILE_H
#define RP_IO_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct rp_atomic_file rp_atomic_file;

rp_status rp_atomic_file_open(const char *path, rp_atomic_file **out, rp_error *err);

/* For a path the user named as an output (--trace): a regular file or a new
 * path is written as above; anything else that exists there (a device, a
 * FIFO, a symbolic link) is opened and written through, never replaced. */
rp_status rp_atomic_file_open_output(const char *path, rp_atomic_file **out, rp_error *err);

/* Append n bytes. On failure the temporary file is removed and *af freed. */
rp_status rp_atomic_file_write(rp_atomic_file **af, const void *buf, size_t n, rp_error *err);

/* Write n bytes at the given offset of the file (pwrite; the file grows to
 * fit), for a file whose parts are written out of order (a checkpoint's
 * layers as they become ready). Fails and aborts as rp_atomic_file_write. */
rp_status rp_atomic_file_write_at(rp_atomic_file **af, const void *buf, size_t n,
                                  uint64_t offset, rp_error *err);

/* fsync + rename into place; frees *af and sets it to NULL either way. */
rp_status rp_atomic_file_commit(rp_atomic_file **af, rp_error *err);

/* The two halves of commit, for a set of files moved into place together
 * (io/file_set.h): sync fsyncs and closes the temporary file (on failure it
 * is removed and *af freed); publish renames it over the path and frees *af
 * either way, without syncing the directory. */
rp_status rp_atomic_file_sync(rp_atomic_file **af, rp_error *err);
rp_status rp_atomic_file_publish(rp_atomic_file **af, rp_error *err);

/* Remove the temporary file and free *af (no-op on NULL). */
void rp_atomic_file_abort(rp_atomic_file **af);

/* Test hook: the next write fails as if the disk were full. */
void rp_atomic_file_fail_next_write(rp_atomic_file *af, const char *why);

#endif
