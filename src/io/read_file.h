/* Read a small file (JSON configs, indexes) whole into memory. */
#ifndef RP_IO_READ_FILE_H
#define RP_IO_READ_FILE_H

#include <stddef.h>

#include "core/error.h"

/* *buf receives a malloc'd copy with a NUL appended (not counted in *len).
 * Files larger than max_bytes are refused rather than read. */
rp_status rp_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, rp_error *err);

#endif
