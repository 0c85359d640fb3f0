/* Read a small file (JSON configs, indexes) whole into memory. */
#ifndef RP_IO_READ_FILE_H
#define RP_IO_READ_FILE_H

#include <stddef.h>
#include <sys/stat.h>

#include "core/error.h"

/* Open an input file for reading, refusing what is not a regular file (a
 * directory, a device, a FIFO) with "PATH: not a regular file" and without
 * waiting on it: the open does not block (a FIFO with no writer would wait
 * forever, deaf to SIGTERM), and the descriptor reads as usual after it.
 * *fd and *st (its fstat) on success. */
rp_status rp_open_regular(const char *path, int *fd, struct stat *st, rp_error *err);

/* *buf receives a malloc'd copy with a NUL appended (not counted in *len).
 * Files larger than max_bytes are refused rather than read. */
rp_status rp_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, rp_error *err);

#endif
